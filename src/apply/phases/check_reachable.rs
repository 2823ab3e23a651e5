//! CheckReachable: every `from` node opens a TCP connection to the address and port the service
//! will listen on, where a short-lived listener stands in for it.

use std::time::Duration;

use futures::future::BoxFuture;

use crate::apply::context::{ApplyContext, shell_error, shell_for};
use crate::apply::phase::{Phase, PhaseError};
use crate::node::fanout::NodeFailures;
use crate::plan::{CheckReachable, StepPayload};
use crate::runtime::RuntimeError;

/// A short-lived listener on `addr:port`: accepts `want` connections or gives up after
/// `secs`. Prints `accepted N`. Exit 2 when it cannot listen, 127 without python3.
pub fn listener_script(addr: &str, port: u16, want: usize, secs: u64) -> String {
    format!(
        r#"command -v python3 >/dev/null || exit 127
exec python3 - <<'PY'
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("{addr}", {port}))
except OSError as e:
    print("cannot listen on {addr}:{port}: %s" % e, file=sys.stderr)
    sys.exit(2)
s.listen(64)
s.settimeout(0.5)
deadline = time.time() + {secs}
n = 0
while n < {want} and time.time() < deadline:
    try:
        c, _ = s.accept()
        c.close()
        n += 1
    except socket.timeout:
        pass
print("accepted %d" % n)
PY
"#
    )
}

pub fn connect_script(addr: &str, port: u16, tries: u32) -> String {
    format!(
        r#"for i in $(seq 1 {tries}); do
  if timeout 2 bash -c 'exec 3<>/dev/tcp/{addr}/{port}' 2>/dev/null; then echo ok; exit 0; fi
  sleep 0.5
done
echo "no TCP connection to {addr}:{port}"
exit 1
"#
    )
}

impl<'a> Phase<ApplyContext<'a>> for CheckReachable {
    fn title(&self) -> String {
        StepPayload::title(self)
    }
    fn run<'b>(
        &'b self,
        ctx: &'b ApplyContext<'a>,
    ) -> BoxFuture<'b, Result<Option<String>, PhaseError>> {
        Box::pin(async move {
            let to = ctx.node(&self.to)?;
            let listener_shell = shell_for(to)?;
            let addr = self.addr.to_string();
            let listen_script = listener_script(&addr, self.port, self.from.len(), 25);
            let listen = listener_shell.run(&listen_script, Vec::new(), None);
            let connect_script = connect_script(&addr, self.port, 40);
            let connects = async {
                // Give the listener a moment; the connectors retry for 20 s anyway.
                tokio::time::sleep(Duration::from_millis(300)).await;
                ctx.each_node(self.from.clone(), |node, handle| {
                    let script = connect_script.clone();
                    let addr = addr.clone();
                    async move {
                        let shell =
                            shell_for(handle).map_err(|e| RuntimeError::Other(e.to_string()))?;
                        let out = shell.run(&script, Vec::new(), None).await.map_err(shell_error)?;
                        if out.success() {
                            Ok(())
                        } else {
                            Err(RuntimeError::Other(format!(
                                "{} (check the cable, the address and any firewall between {node} and {}; `ping {addr}` from {node})",
                                out.stdout.trim(),
                                self.to
                            )))
                        }
                    }
                })
                .await
            };
            let (listened, connected) = tokio::join!(listen, connects);
            let listened = listened.map_err(|e| PhaseError::node(&self.to, shell_error(e)))?;
            if listened.status == 127 {
                ctx.reporter.warn(&format!(
                    "{}: no python3 to stand in for the service on port {}; reachability not checked",
                    self.to, self.port
                ));
                return Ok(Some("not checked (no python3)".into()));
            }
            if listened.status == 2 {
                return Err(PhaseError::Refused(format!(
                    "{}: {}",
                    self.to,
                    listened.stderr_tail().trim()
                )));
            }
            let total = connected.len();
            let failed: Vec<_> = connected
                .into_iter()
                .filter_map(|(n, r)| r.err().map(|e| (n, e)))
                .collect();
            if failed.is_empty() {
                Ok(None)
            } else {
                Err(PhaseError::Nodes(NodeFailures { total, failed }))
            }
        })
    }
}
