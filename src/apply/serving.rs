//! The executor's phases for serving plans: ports free and the rendezvous reachable before
//! anything starts, the model staged on every node, Ray's membership, and readiness (the head's
//! log followed for progress, `/health` and `/v1/models` polled, every container watched).
//!
//! What to check comes from the plan (and the pure `workload` code that judges answers); this
//! only runs scripts on nodes, reads logs and reports. Each node is reached through its shell
//! ([`shell_for`]): this machine directly, a remote node over its SSH connection.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::future::BoxFuture;

use super::executor::ApplyContext;
use super::fanout::{NodeFailures, for_each_node};
use super::phase::{Phase, PhaseError};
use super::shell::{LocalShell, NodeShell, ShellError, ShellOutput};
use super::stage::{self, HeadAccess, StageNode, StageOptions, StageSpec};
use crate::model::hub::HubError;
use crate::model::{CONTAINER_HF_HOME, ModelSource, script::quote};
use crate::node::NodeName;
use crate::plan::{Launch, NodePorts, RayMember, Step};
use crate::runtime::{NodeRuntime, Reach, RuntimeError};
use crate::workload::readiness::{Observation, Readiness, Verdict, first_error};
use crate::workload::vllm::{RAY_QUERY_PY, RayState, ray_state};

/// A node's shell from its runtime handle.
pub fn shell_for(handle: &NodeRuntime) -> Result<Arc<dyn NodeShell>, PhaseError> {
    let node = handle.name().clone();
    match &handle.target.reach {
        Reach::Local => Ok(Arc::new(LocalShell::new(node))),
        Reach::Remote(remote) => Ok(Arc::new(RemoteShell {
            node,
            remote: remote.clone(),
        })),
        Reach::EngineOnly(ep) => Err(PhaseError::Other(format!(
            "{node} is reached only through the Docker socket {ep}; serving needs a shell on every node (this machine, or SSH)"
        ))),
    }
}

/// A remote node's shell through the runtime's `RemoteNode` (bash run by its `sh`).
struct RemoteShell {
    node: NodeName,
    remote: Arc<dyn crate::runtime::RemoteNode>,
}

impl NodeShell for RemoteShell {
    fn node(&self) -> &NodeName {
        &self.node
    }

    fn via(&self) -> String {
        self.remote.describe()
    }

    fn run<'a>(
        &'a self,
        script: &'a str,
        stdin: Vec<u8>,
        lines: Option<tokio::sync::mpsc::UnboundedSender<String>>,
    ) -> BoxFuture<'a, Result<ShellOutput, ShellError>> {
        Box::pin(async move {
            let wrapped = format!("exec bash -c {}", quote(script));
            let out = match lines {
                Some(tx) => self.remote.run_lines(&wrapped, stdin, tx).await,
                None => self.remote.run(&wrapped, stdin).await,
            }
            .map_err(|cause| ShellError {
                node: self.node.clone(),
                via: self.via(),
                cause,
            })?;
            Ok(ShellOutput {
                status: out.code.unwrap_or(-1),
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                stderr_tail: super::shell::tail_lines(&String::from_utf8_lossy(&out.stderr), 20),
            })
        })
    }
}

fn shell_error(e: ShellError) -> RuntimeError {
    RuntimeError::Other(e.to_string())
}

/// The ports that listen on this node (IPv4 and IPv6), from `/proc/net/tcp*`.
const LISTENING_SH: &str = r#"for f in /proc/net/tcp /proc/net/tcp6; do
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

/// `CheckPorts`: nothing listens yet on the ports the job will open.
pub struct CheckPorts {
    pub ports: Vec<NodePorts>,
}

impl<'a> Phase<ApplyContext<'a>> for CheckPorts {
    fn title(&self) -> String {
        Step::CheckPorts {
            ports: self.ports.clone(),
        }
        .title()
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
            let results = for_each_node(nodes, ctx.options.concurrency, |node| async move {
                let handle = ctx.cluster.node(&node)?;
                let shell = shell_for(handle).map_err(|e| RuntimeError::Other(e.to_string()))?;
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
                Ok::<_, RuntimeError>(busy_ports(&wanted, &out.stdout))
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

/// A short-lived listener on `addr:port`: accepts `want` connections or gives up after
/// `secs`. Prints `accepted N`. Exit 2 when it cannot listen, 127 without python3.
fn listener_script(addr: &str, port: u16, want: usize, secs: u64) -> String {
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

fn connect_script(addr: &str, port: u16, tries: u32) -> String {
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

/// `CheckReachable`: every `from` node opens a TCP connection to `addr:port` on `to`, where a
/// short-lived listener stands in for the service.
pub struct CheckReachable {
    pub to: NodeName,
    pub addr: std::net::Ipv4Addr,
    pub port: u16,
    pub from: Vec<NodeName>,
}

impl<'a> Phase<ApplyContext<'a>> for CheckReachable {
    fn title(&self) -> String {
        Step::CheckReachable {
            to: self.to.clone(),
            addr: self.addr,
            port: self.port,
            from: self.from.clone(),
        }
        .title()
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
                for_each_node(self.from.clone(), ctx.options.concurrency, |node| {
                    let script = connect_script.clone();
                    let addr = addr.clone();
                    async move {
                        let shell = shell_for(ctx.cluster.node(&node)?)
                            .map_err(|e| RuntimeError::Other(e.to_string()))?;
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
                    listened.stderr_tail.trim()
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

/// `StageModel`: the weights on every node (see `apply::stage`); with `copy` false, only the
/// check that they are there.
pub struct StageModel {
    pub model: ModelSource,
    pub nodes: Vec<NodeName>,
    pub copy: bool,
}

/// The node's Hugging Face cache: the source of the mount the plan puts at `HF_HOME`.
fn hf_home_of(ctx: &ApplyContext<'_>, node: &NodeName) -> Option<String> {
    let part = ctx.plan.node(node)?;
    match &part.launch {
        Launch::Container(c) => c
            .mounts
            .iter()
            .find(|m| m.target == CONTAINER_HF_HOME)
            .map(|m| m.source.clone()),
        Launch::Process(p) => p.env.get("HF_HOME").cloned(),
    }
}

/// The head's control-plane address, as derive chose it (in every serving container's env).
fn control_addr(ctx: &ApplyContext<'_>, node: &NodeName) -> Option<String> {
    let part = ctx.plan.node(node)?;
    let env = match &part.launch {
        Launch::Container(c) => &c.env,
        Launch::Process(p) => &p.env,
    };
    env.get("VLLM_HOST_IP").cloned()
}

/// How a worker reaches the head for copies: `ssh HEAD-NAME` (the `Host` block `spark-launch
/// trust` wrote: user, port, key) at the head's fabric address, the host key pinned under the
/// head's name in trust's known-hosts file (or the user's).
pub fn head_hop(head: &NodeName, fabric_addr: &str) -> HeadAccess {
    HeadAccess::Ssh(vec![
        "-o".into(),
        "BatchMode=yes".into(),
        "-o".into(),
        "StrictHostKeyChecking=yes".into(),
        "-o".into(),
        format!("HostKeyAlias={head}"),
        "-o".into(),
        "UserKnownHostsFile=~/.ssh/spark-launch_known_hosts ~/.ssh/known_hosts".into(),
        "-o".into(),
        "CheckHostIP=no".into(),
        "-o".into(),
        format!("HostName={fabric_addr}"),
        "-o".into(),
        format!("Ciphers={}", crate::ssh::CIPHERS),
        "-o".into(),
        "Compression=no".into(),
        "-o".into(),
        "ConnectTimeout=10".into(),
        head.to_string(),
    ])
}

impl<'a> Phase<ApplyContext<'a>> for StageModel {
    fn title(&self) -> String {
        Step::StageModel {
            model: self.model.clone(),
            nodes: self.nodes.clone(),
            copy: self.copy,
        }
        .title()
    }
    fn run<'b>(
        &'b self,
        ctx: &'b ApplyContext<'a>,
    ) -> BoxFuture<'b, Result<Option<String>, PhaseError>> {
        Box::pin(async move {
            let Some(head) = self.nodes.first() else {
                return Ok(None);
            };
            let mut nodes = Vec::new();
            for n in &self.nodes {
                let shell = shell_for(ctx.node(n)?)?;
                let mut hf_home = hf_home_of(ctx, n).ok_or_else(|| {
                    PhaseError::Other(format!("{n}: the plan mounts no Hugging Face cache"))
                })?;
                if let Some(rest) = hf_home.strip_prefix("~/") {
                    let out = shell
                        .run("printf '%s' \"$HOME\"", Vec::new(), None)
                        .await
                        .map_err(|e| PhaseError::node(n, shell_error(e)))?;
                    hf_home = format!("{}/{rest}", out.stdout.trim());
                }
                nodes.push(StageNode { shell, hf_home });
            }
            let token = stage::hf_token();
            let endpoint = stage::hf_endpoint();
            let resolved = match stage::resolve_on_head(
                nodes[0].shell.clone(),
                &endpoint,
                &self.model,
                token.clone(),
            )
            .await
            {
                Ok(r) => r,
                Err(
                    e @ (HubError::GatedNoToken { .. }
                    | HubError::NoAccess { .. }
                    | HubError::NotFound { .. }
                    | HubError::NoRevision { .. }),
                ) => return Err(PhaseError::Refused(e.to_string())),
                Err(e) => return Err(PhaseError::Other(e.to_string())),
            };
            let addr = control_addr(ctx, head).unwrap_or_else(|| head.to_string());
            let head_node = nodes.remove(0);
            let spec = StageSpec {
                model: resolved
                    .as_ref()
                    .map(|r| r.source())
                    .unwrap_or_else(|| self.model.clone()),
                resolved,
                endpoint,
                token,
                head: head_node,
                workers: nodes
                    .into_iter()
                    .map(|n| (n, head_hop(head, &addr)))
                    .collect(),
                options: StageOptions::default(),
            };
            if !self.copy {
                let lacks = tokio::select! {
                    r = stage::verify(&spec) => r.map_err(|e| PhaseError::Other(e.to_string()))?,
                    _ = ctx.cancel.cancelled() => return Err(PhaseError::Cancelled),
                };
                let short: Vec<String> = lacks
                    .iter()
                    .filter(|l| !l.missing.is_empty())
                    .map(|l| {
                        format!(
                            "{}: {} missing or different in {} (e.g. {})",
                            l.node,
                            l.missing.len(),
                            l.dir,
                            l.missing[0]
                        )
                    })
                    .collect();
                if short.is_empty() {
                    return Ok(Some("on every node".to_string()));
                }
                return Err(PhaseError::Refused(format!(
                    "--no-stage, but the model is not complete on every node:\n  {}\nfix: `spark-launch model pull {}`, or run without --no-stage",
                    short.join("\n  "),
                    self.model
                )));
            }
            let run = stage::stage(&spec, ctx.reporter.clone());
            let reports = tokio::select! {
                r = run => r.map_err(|e| PhaseError::Other(e.to_string()))?,
                _ = ctx.cancel.cancelled() => return Err(PhaseError::Cancelled),
            };
            let moved: u64 = reports.iter().map(|r| r.fetched_bytes).sum();
            Ok(Some(if moved == 0 {
                "already on every node".to_string()
            } else {
                format!("{} moved", stage::human_bytes(moved))
            }))
        })
    }
}

/// Containers of the job that are not running any more: `(node, state, exit code)`.
async fn stopped(ctx: &ApplyContext<'_>) -> Vec<(NodeName, String, i64)> {
    let mut out = Vec::new();
    for node in ctx.plan.node_names() {
        let Ok(handle) = ctx.cluster.node(&node) else {
            continue;
        };
        let name = ctx.plan.job.container_name(&node);
        let entries = handle
            .jobs(Some(&ctx.plan.job), Some(ctx.plan.runtime))
            .await
            .unwrap_or_default();
        match entries.iter().find(|e| e.name == name) {
            Some(e) if e.state != "running" => {
                out.push((node, e.state.clone(), e.exit_code.unwrap_or(-1)))
            }
            Some(_) => {}
            None => out.push((node, "gone".to_string(), -1)),
        }
    }
    out
}

/// The first error line of every node's log, for a failure report.
async fn first_errors(ctx: &ApplyContext<'_>) -> Vec<String> {
    let mut out = Vec::new();
    for node in ctx.plan.node_names() {
        let Ok(handle) = ctx.cluster.node(&node) else {
            continue;
        };
        let name = ctx.plan.job.container_name(&node);
        let mut text = Vec::new();
        if let Ok(mut s) = handle.logs(ctx.plan.runtime, &name, false, false).await {
            while let Some(Ok(chunk)) = s.next().await {
                text.extend_from_slice(&chunk);
            }
        }
        let log = String::from_utf8_lossy(&text);
        out.push(match first_error(&log) {
            Some(line) => format!("{node}: {line}"),
            None => format!("{node}: (no error line in its log)"),
        });
    }
    out
}

/// `WaitRay`: Ray's node table, seen from the head's container, lists every intended member.
pub struct WaitRay {
    pub node: NodeName,
    pub expect: Vec<RayMember>,
    pub timeout: Duration,
}

impl<'a> Phase<ApplyContext<'a>> for WaitRay {
    fn title(&self) -> String {
        Step::WaitRay {
            node: self.node.clone(),
            expect: self.expect.clone(),
            timeout_s: self.timeout.as_secs(),
        }
        .title()
    }
    fn run<'b>(
        &'b self,
        ctx: &'b ApplyContext<'a>,
    ) -> BoxFuture<'b, Result<Option<String>, PhaseError>> {
        Box::pin(async move {
            let handle = ctx.node(&self.node)?;
            let name = ctx.plan.job.container_name(&self.node);
            let started = Instant::now();
            let mut last = String::new();
            let query = vec![
                "python3".to_string(),
                "-c".to_string(),
                RAY_QUERY_PY.to_string(),
            ];
            loop {
                if ctx.cancel.is_cancelled() {
                    return Err(PhaseError::Cancelled);
                }
                let gone = stopped(ctx).await;
                if !gone.is_empty() {
                    let errors = first_errors(ctx).await;
                    return Err(PhaseError::Other(format!(
                        "{} before Ray had every node:\n  {}",
                        gone.iter()
                            .map(|(n, s, c)| format!("the container on {n} is {s} (exit code {c})"))
                            .collect::<Vec<_>>()
                            .join(", "),
                        errors.join("\n  ")
                    )));
                }
                let seen = handle
                    .exec(
                        ctx.plan.runtime,
                        &name,
                        &query,
                        &Default::default(),
                        Duration::from_secs(60),
                        &ctx.cancel,
                    )
                    .await;
                let state = match &seen {
                    Ok(out) if out.exit_code == 0 => ray_state(&self.expect, &out.stdout).ok(),
                    _ => None,
                };
                let text = match &state {
                    Some(RayState::Complete) => {
                        return Ok(Some(format!(
                            "{} nodes, each with its GPU at its address",
                            self.expect.len()
                        )));
                    }
                    Some(s) => s.describe(),
                    None => "Ray is not answering yet".to_string(),
                };
                if text != last {
                    ctx.reporter.node_line(&self.node, &format!("ray: {text}"));
                    last = text.clone();
                }
                if started.elapsed() >= self.timeout {
                    return Err(PhaseError::Other(format!(
                        "Ray did not list every node within {}s: {text}",
                        self.timeout.as_secs()
                    )));
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(3)) => {}
                    _ = ctx.cancel.cancelled() => return Err(PhaseError::Cancelled),
                }
            }
        })
    }
}

/// `curl` of `/health` and `/v1/models` on the node: prints `health CODE`, then `models CODE`
/// and the body.
fn poll_script(url: &str) -> String {
    let u = quote(url.trim_end_matches('/'));
    format!(
        r#"command -v curl >/dev/null || {{ echo "curl is not installed on this node" >&2; exit 127; }}
printf 'health %s\n' "$(curl -s -o /dev/null -w '%{{http_code}}' --max-time 5 {u}/health)"
b=$(curl -s --max-time 5 -w '\n%{{http_code}}' {u}/v1/models)
printf 'models %s\n' "${{b##*$'\n'}}"
printf '%s\n' "${{b%$'\n'*}}"
"#
    )
}

/// Parses [`poll_script`]'s output into observations.
pub fn poll_observations(out: &str) -> Vec<Observation> {
    let mut lines = out.lines();
    let mut obs = Vec::new();
    let code = |s: Option<&str>, prefix: &str| -> Option<u16> {
        s?.strip_prefix(prefix)?.trim().parse().ok()
    };
    match code(lines.next(), "health ") {
        Some(0) | None => obs.push(Observation::Health(Err(
            "no answer (connection refused)".into()
        ))),
        Some(c) => obs.push(Observation::Health(Ok(c))),
    }
    match code(lines.next(), "models ") {
        Some(0) | None => obs.push(Observation::Models(Err("no answer".into()))),
        Some(c) => {
            let body: Vec<&str> = lines.collect();
            obs.push(Observation::Models(Ok((c, body.join("\n")))));
        }
    }
    obs
}

/// `WaitServing`: readiness, with the head's log followed for progress.
pub struct WaitServing {
    pub node: NodeName,
    pub url: String,
    pub model: String,
    pub timeout: Duration,
}

impl<'a> Phase<ApplyContext<'a>> for WaitServing {
    fn title(&self) -> String {
        format!("Wait until {} serves {}", self.url, self.model)
    }
    fn run<'b>(
        &'b self,
        ctx: &'b ApplyContext<'a>,
    ) -> BoxFuture<'b, Result<Option<String>, PhaseError>> {
        Box::pin(async move {
            let handle = ctx.node(&self.node)?;
            let shell = shell_for(handle)?;
            let name = ctx.plan.job.container_name(&self.node);
            // The head's log, line by line, from a task (the stream is 'static).
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
            let mut logs = handle
                .logs(ctx.plan.runtime, &name, true, false)
                .await
                .map_err(|e| PhaseError::node(&self.node, e))?;
            let follower = tokio::spawn(async move {
                let mut pending = Vec::new();
                while let Some(Ok(chunk)) = logs.next().await {
                    pending.extend_from_slice(&chunk);
                    while let Some(i) = pending.iter().position(|b| *b == b'\n' || *b == b'\r') {
                        let line: Vec<u8> = pending.drain(..=i).collect();
                        let text = String::from_utf8_lossy(&line).trim().to_string();
                        if !text.is_empty() && tx.send(text).is_err() {
                            return;
                        }
                    }
                }
            });
            let started = Instant::now();
            let now = || started.elapsed().as_millis() as u64;
            let mut r = Readiness::new(&self.model, 0, self.timeout.as_secs());
            let mut shown = String::new();
            let mut shown_at = 0u64;
            let mut next_poll = 0u64;
            let result = loop {
                let wait = Duration::from_millis(next_poll.saturating_sub(now()).max(10));
                tokio::select! {
                    _ = ctx.cancel.cancelled() => break Err(PhaseError::Cancelled),
                    line = rx.recv() => {
                        if let Some(line) = line {
                            r.observe(Observation::Log { node: self.node.clone(), line });
                        }
                    }
                    _ = tokio::time::sleep(wait) => {
                        for (node, state, code) in stopped(ctx).await {
                            let _ = state;
                            r.observe(Observation::Exited { node, code });
                        }
                        match shell.run(&poll_script(&self.url), Vec::new(), None).await {
                            Ok(out) if out.success() => {
                                for o in poll_observations(&out.stdout) {
                                    r.observe(o);
                                }
                            }
                            Ok(out) => r.observe(Observation::Health(Err(out.stderr_tail.trim().to_string()))),
                            Err(e) => r.observe(Observation::Health(Err(e.to_string()))),
                        }
                        next_poll = now() + r.poll_interval_ms(now());
                    }
                }
                match r.verdict(now()) {
                    Verdict::Waiting(line) => {
                        // A line when the phase changes, and every half minute.
                        if r.phase() != shown || now() >= shown_at + 30_000 {
                            ctx.reporter.node_line(&self.node, &line);
                            shown = r.phase().to_string();
                            shown_at = now();
                        }
                    }
                    Verdict::Ready { models } => {
                        break Ok(Some(format!(
                            "serving {} after {}",
                            models.join(", "),
                            crate::workload::readiness::duration(now())
                        )));
                    }
                    Verdict::Failed(why) => {
                        let errors = first_errors(ctx).await;
                        break Err(PhaseError::Other(format!(
                            "{why}\nfirst error line of each node's log:\n  {}\nmore: spark-launch logs {}",
                            errors.join("\n  "),
                            ctx.plan.job
                        )));
                    }
                }
            };
            follower.abort();
            result
        })
    }
}

/// The phase for one of the serving steps (`None` for the other steps).
pub fn phase_for<'a>(step: &Step) -> Option<Box<dyn Phase<ApplyContext<'a>> + 'a>> {
    Some(match step.clone() {
        Step::CheckPorts { ports } => Box::new(CheckPorts { ports }),
        Step::CheckReachable {
            to,
            addr,
            port,
            from,
        } => Box::new(CheckReachable {
            to,
            addr,
            port,
            from,
        }),
        Step::StageModel { model, nodes, copy } => Box::new(StageModel { model, nodes, copy }),
        Step::WaitRay {
            node,
            expect,
            timeout_s,
        } => Box::new(WaitRay {
            node,
            expect,
            timeout: Duration::from_secs(timeout_s),
        }),
        Step::WaitServing {
            node,
            url,
            model,
            timeout_s,
            ..
        } => Box::new(WaitServing {
            node,
            url,
            model,
            timeout: Duration::from_secs(timeout_s),
        }),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_already_listening_are_found_among_those_wanted() {
        assert_eq!(busy_ports(&[8000, 29501], "22\n8000\n631\n"), vec![8000]);
        assert!(busy_ports(&[8000], "").is_empty());
    }

    #[test]
    fn a_poll_answer_becomes_health_and_models_observations() {
        let obs = poll_observations("health 200\nmodels 200\n{\"data\":[{\"id\":\"m\"}]}\n");
        assert_eq!(obs[0], Observation::Health(Ok(200)));
        assert_eq!(
            obs[1],
            Observation::Models(Ok((200, "{\"data\":[{\"id\":\"m\"}]}".into())))
        );
        let obs = poll_observations("health 000\nmodels 000\n\n");
        assert!(matches!(obs[0], Observation::Health(Err(_))));
        assert!(matches!(obs[1], Observation::Models(Err(_))));
    }

    #[tokio::test]
    async fn the_poll_script_reads_a_real_http_answer() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = l.accept().await else {
                    return;
                };
                let mut buf = [0u8; 1024];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let req = String::from_utf8_lossy(&buf[..n]).to_string();
                let body = if req.starts_with("GET /v1/models") {
                    "{\"data\":[{\"id\":\"org/m\"}]}"
                } else {
                    ""
                };
                let _ = s
                    .write_all(
                        format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        )
                        .as_bytes(),
                    )
                    .await;
            }
        });
        let shell = LocalShell::new(NodeName::new("local").unwrap());
        let out = shell
            .run(
                &poll_script(&format!("http://127.0.0.1:{port}")),
                Vec::new(),
                None,
            )
            .await
            .unwrap();
        let obs = poll_observations(&out.stdout);
        assert_eq!(obs[0], Observation::Health(Ok(200)));
        assert_eq!(
            obs[1],
            Observation::Models(Ok((200, "{\"data\":[{\"id\":\"org/m\"}]}".into())))
        );
    }
}
