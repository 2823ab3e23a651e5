//! CheckPorts: nothing listens yet on the ports the job will open (read from `/proc/net/tcp*` on
//! each node), checked before anything starts.

use std::collections::BTreeSet;

use futures::future::BoxFuture;

use crate::apply::context::{ApplyContext, shell_error, shell_for};
use crate::apply::phase::{Phase, PhaseError};
use crate::node::NodeName;
use crate::node::fanout::NodeFailures;
use crate::plan::{CheckPorts, StepPayload};
use crate::runtime::RuntimeError;

/// The ports that listen on this node (IPv4 and IPv6), from `/proc/net/tcp*`.
pub const LISTENING_SH: &str = r#"for f in /proc/net/tcp /proc/net/tcp6; do
  [ -r "$f" ] && awk 'NR > 1 && $4 == "0A" { n = split($2, a, ":"); print a[n] }' "$f"
done | sort -u | while read -r h; do printf '%d\n' "0x$h"; done
"#;

/// The ports of `wanted` found in `listening` (one port per line).
pub fn busy_ports(wanted: &[u16], listening: &str) -> Vec<u16> {
    let open: BTreeSet<u16> = listening
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    wanted
        .iter()
        .copied()
        .filter(|p| open.contains(p))
        .collect()
}

impl<'a> Phase<ApplyContext<'a>> for CheckPorts {
    fn title(&self) -> String {
        StepPayload::title(self)
    }
    fn should_run(&self, _ctx: &ApplyContext<'a>) -> bool {
        !self.ports.is_empty()
    }
    fn run<'b>(
        &'b self,
        ctx: &'b ApplyContext<'a>,
    ) -> BoxFuture<'b, Result<Option<String>, PhaseError>> {
        Box::pin(async move {
            let nodes: Vec<NodeName> = self.ports.iter().map(|p| p.node.clone()).collect();
            let results = ctx
                .each_node(nodes, |node, handle| async move {
                    let shell =
                        shell_for(handle).map_err(|e| RuntimeError::Other(e.to_string()))?;
                    let out = shell
                        .run(LISTENING_SH, Vec::new(), None)
                        .await
                        .map_err(shell_error)?;
                    let wanted = self
                        .ports
                        .iter()
                        .find(|p| p.node == node)
                        .map(|p| p.ports.clone())
                        .unwrap_or_default();
                    Ok(busy_ports(&wanted, &out.stdout))
                })
                .await;
            let mut busy = Vec::new();
            let mut failed = Vec::new();
            let total = results.len();
            for (node, r) in results {
                match r {
                    Ok(ports) => {
                        for p in ports {
                            busy.push(format!(
                                "{node}: port {p} is already in use; find who holds it with `sudo ss -ltnp 'sport = :{p}'` on {node}, stop it, or choose another port"
                            ));
                        }
                    }
                    Err(e) => failed.push((node, e)),
                }
            }
            if !failed.is_empty() {
                return Err(PhaseError::Nodes(NodeFailures { total, failed }));
            }
            if busy.is_empty() {
                Ok(None)
            } else {
                Err(PhaseError::Refused(format!(
                    "ports the job needs are taken:\n  {}",
                    busy.join("\n  ")
                )))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_already_listening_are_found_among_those_wanted() {
        assert_eq!(busy_ports(&[8000, 29501], "22\n8000\n631\n"), vec![8000]);
        assert!(busy_ports(&[8000], "").is_empty());
    }
}
