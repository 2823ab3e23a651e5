//! The live side of a set of nodes (live handles, never serialised): for each node its
//! target and, once asked for, its connected engine. And the job operations that work the same
//! for both runtimes — start a node's part, find a job's work by its labels, stop it, run a
//! command, write a file, wait for the end, read the log — dispatched to the Docker engine or the
//! host runtime. Per node only: fanning out is `node::for_each_node`'s job.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use serde::Serialize;
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

use super::engine::{Engine, ExecOutput};
use super::error::RuntimeError;
use super::host;
use super::target::{DEFAULT_DOCKER_SOCKET, EngineEndpoint, NodeTarget, Reach};
use crate::node::NodeName;
use crate::plan::spec::{
    LABEL_BIND, LABEL_JOB, LABEL_NODE, LABEL_PORTS, LABEL_ROLE, LABEL_RUNTIME_CACHE, LABEL_WORKLOAD,
};
use crate::plan::{JobName, Launch, NodePlan, RuntimeKind};

/// One node: where it is, and its engine once connected.
#[derive(Debug)]
pub struct NodeRuntime {
    pub target: NodeTarget,
    engine: OnceCell<Engine>,
}

impl NodeRuntime {
    pub fn new(target: NodeTarget) -> Self {
        NodeRuntime {
            target,
            engine: OnceCell::new(),
        }
    }

    pub fn name(&self) -> &NodeName {
        &self.target.name
    }

    /// The node's engine, connected on first use (for a remote node, through its Docker
    /// socket forwarded over SSH).
    pub async fn engine(&self) -> Result<&Engine, RuntimeError> {
        self.engine
            .get_or_try_init(|| async {
                let endpoint = self.endpoint().await?;
                match Engine::connect(&self.target.name, endpoint).await {
                    Ok(e) => Ok(e),
                    // Through a forward, a missing engine or a refused permission on the node
                    // only shows as a dropped connection: look at the socket there to say which.
                    Err(e) => match &self.target.reach {
                        Reach::Remote(remote) => {
                            Err(self.diagnose(remote.as_ref()).await.unwrap_or(e))
                        }
                        _ => Err(e),
                    },
                }
            })
            .await
    }

    /// After the node's SSH connection dropped: connects again, with the Docker socket
    /// forwarded at the same local path (so the engine client goes on as it was). `Ok(false)`
    /// when the connection still stood, or the node is not reached over SSH.
    pub async fn reconnect(&self) -> Result<bool, RuntimeError> {
        match &self.target.reach {
            Reach::Remote(remote) => remote.reconnect().await.map_err(|e| {
                RuntimeError::Other(format!("connect again over {}: {e}", remote.via()))
            }),
            _ => Ok(false),
        }
    }

    /// Why the Docker socket on a remote node cannot be used, when the node can tell.
    async fn diagnose(&self, remote: &dyn super::target::RemoteNode) -> Option<RuntimeError> {
        let socket = self
            .target
            .docker_socket
            .as_deref()
            .unwrap_or(DEFAULT_DOCKER_SOCKET);
        let check = format!(
            "s={}; if [ ! -S \"$s\" ]; then echo missing; elif [ ! -r \"$s\" ] || [ ! -w \"$s\" ]; then echo denied; else echo ok; fi",
            crate::quote::quote(socket, crate::quote::Style::Minimal).ok()?
        );
        let out = remote.run(&check, Vec::new(), None).await.ok()?;
        let on_node = format!("{socket} on the node");
        match out.stdout.trim() {
            "missing" => Some(RuntimeError::DockerMissing { socket: on_node }),
            "denied" => Some(RuntimeError::SocketPermission { socket: on_node }),
            _ => None,
        }
    }

    async fn endpoint(&self) -> Result<EngineEndpoint, RuntimeError> {
        match &self.target.reach {
            Reach::Local => Ok(match &self.target.docker_socket {
                Some(s) => EngineEndpoint::unix(s),
                None => EngineEndpoint::local_default(),
            }),
            Reach::EngineOnly(ep) => Ok(ep.clone()),
            Reach::Remote(remote) => {
                let socket = self
                    .target
                    .docker_socket
                    .as_deref()
                    .unwrap_or(DEFAULT_DOCKER_SOCKET);
                remote
                    .forward_socket(socket)
                    .await
                    .map(EngineEndpoint::unix)
                    .map_err(|e| {
                        RuntimeError::Other(format!(
                            "forward {socket} from {} over SSH: {e}",
                            remote.via()
                        ))
                    })
            }
        }
    }
}

/// The nodes of one command, head first.
#[derive(Debug)]
pub struct Cluster {
    nodes: Vec<NodeRuntime>,
}

impl Cluster {
    pub fn new(targets: Vec<NodeTarget>) -> Self {
        Cluster {
            nodes: targets.into_iter().map(NodeRuntime::new).collect(),
        }
    }

    pub fn names(&self) -> Vec<NodeName> {
        self.nodes.iter().map(|n| n.target.name.clone()).collect()
    }

    pub fn nodes(&self) -> &[NodeRuntime] {
        &self.nodes
    }

    pub fn head(&self) -> Option<&NodeRuntime> {
        self.nodes.first()
    }

    pub fn node(&self, name: &NodeName) -> Result<&NodeRuntime, RuntimeError> {
        self.nodes
            .iter()
            .find(|n| &n.target.name == name)
            .ok_or_else(|| {
                RuntimeError::Other(format!(
                    "no node named {name} (nodes: {})",
                    self.names()
                        .iter()
                        .map(|n| n.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })
    }
}

/// One piece of a job found on a node: a container or a host process.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct JobEntry {
    pub job: String,
    /// The node it was found on.
    pub node: NodeName,
    pub role: Option<String>,
    /// `sl-<job>-<node>`.
    pub name: String,
    pub runtime: RuntimeKind,
    /// `running`, `exited`, `created`, ...
    pub state: String,
    pub exit_code: Option<i64>,
    /// The image (containers) or the command (host processes).
    pub image: String,
    /// When it started, in seconds since the epoch.
    pub started_at: Option<i64>,
    pub ports: Vec<u16>,
    /// The one address a serving head listens on (`--bind`), when not every interface.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bind: Option<std::net::Ipv4Addr>,
    /// The container's memory limit in bytes (its cap), when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_limit: Option<u64>,
    /// The kernel killed it for memory (at its cap, or the host's OOM killer).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub oom_killed: bool,
    /// What a serving job runs (its engine's name), from its label.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workload: Option<String>,
    /// The folder on the node where its engine keeps what it compiles at start, as its plan
    /// named it (`workload::runtime_cache`); absent for work started without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime_cache: Option<String>,
}

fn ports_of(labels: Option<&String>) -> Vec<u16> {
    labels
        .map(|p| p.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_default()
}

/// The default time a job's work gets between SIGTERM and SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(10);

impl NodeRuntime {
    /// Starts this node's part of a job. For containers: create, then start, removing the
    /// container again if the start fails. `cancel` is looked at between the two, never in the
    /// middle of an engine call, so an interrupted start leaves nothing unknown behind.
    pub async fn start(
        &self,
        part: &NodePlan,
        cancel: &CancellationToken,
    ) -> Result<(), RuntimeError> {
        let name = match &part.launch {
            Launch::Container(c) => &c.name,
            Launch::Process(p) => &p.name,
        };
        if cancel.is_cancelled() {
            return Err(RuntimeError::Cancelled {
                what: format!("start {name}"),
            });
        }
        match &part.launch {
            Launch::Container(spec) => {
                let engine = self.engine().await?;
                engine.create(spec).await?;
                if cancel.is_cancelled() {
                    let _ = engine.remove(&spec.name, Duration::ZERO).await;
                    return Err(RuntimeError::Cancelled {
                        what: format!("start {name}"),
                    });
                }
                if let Err(e) = engine.start(spec).await {
                    if let Err(rm) = engine.remove(&spec.name, Duration::ZERO).await {
                        tracing::warn!(
                            "{}: remove {} after a failed start: {rm}",
                            self.name(),
                            spec.name
                        );
                    }
                    return Err(e);
                }
                Ok(())
            }
            Launch::Process(spec) => host::start(self.target.shell()?.as_ref(), spec)
                .await
                .map(|_| ()),
        }
    }

    /// Everything of `job` (or of every job) on this node, in `runtime` (or both).
    pub async fn jobs(
        &self,
        job: Option<&JobName>,
        runtime: Option<RuntimeKind>,
    ) -> Result<Vec<JobEntry>, RuntimeError> {
        let mut out = Vec::new();
        // Asked for both runtimes: a node without Docker (a host-runtime machine) simply has
        // no containers, and a node reached only by its engine socket has no processes.
        let engine = match runtime {
            Some(RuntimeKind::Host) => None,
            Some(RuntimeKind::Docker) => Some(self.engine().await?),
            None => match self.engine().await {
                Ok(e) => Some(e),
                Err(RuntimeError::DockerMissing { .. }) => None,
                Err(e) => return Err(e),
            },
        };
        let with_host = match runtime {
            Some(RuntimeKind::Host) => true,
            Some(RuntimeKind::Docker) => false,
            None => !matches!(self.target.reach, Reach::EngineOnly(_)),
        };
        if let Some(engine) = engine {
            for c in engine.labelled(job.map(|j| j.as_str())).await? {
                let labels = c.labels.clone().unwrap_or_default();
                let name = c
                    .names
                    .as_ref()
                    .and_then(|n| n.first())
                    .map(|n| n.trim_start_matches('/').to_string())
                    .unwrap_or_else(|| c.id.clone().unwrap_or_default());
                let state = c
                    .state
                    .as_ref()
                    .map(|s| s.to_string())
                    .unwrap_or_else(|| "unknown".to_string());
                // Start time, exit code, the cap and an OOM kill are only in the full inspect.
                let (started_at, exit_code, memory_limit, oom_killed) =
                    match engine.inspect(&name).await? {
                        Some(i) => {
                            let limit = i
                                .host_config
                                .as_ref()
                                .and_then(|h| h.memory)
                                .and_then(|m| u64::try_from(m).ok())
                                .filter(|m| *m > 0);
                            let st = i.state.unwrap_or_default();
                            let oom = st.oom_killed == Some(true);
                            let started = st
                                .started_at
                                .as_deref()
                                .and_then(parse_rfc3339_seconds)
                                .filter(|s| *s > 0);
                            let exit = if st.running == Some(true) {
                                None
                            } else {
                                st.exit_code
                            };
                            (started, exit, limit, oom)
                        }
                        None => continue,
                    };
                out.push(JobEntry {
                    job: labels.get(LABEL_JOB).cloned().unwrap_or_default(),
                    node: self.name().clone(),
                    role: labels.get(LABEL_ROLE).cloned(),
                    name,
                    runtime: RuntimeKind::Docker,
                    state,
                    exit_code,
                    image: c.image.clone().unwrap_or_default(),
                    started_at,
                    ports: ports_of(labels.get(LABEL_PORTS)),
                    bind: labels.get(LABEL_BIND).and_then(|a| a.parse().ok()),
                    memory_limit,
                    oom_killed,
                    workload: labels.get(LABEL_WORKLOAD).cloned(),
                    runtime_cache: labels.get(LABEL_RUNTIME_CACHE).cloned(),
                });
            }
        }
        if with_host {
            for p in host::list(self.target.shell()?.as_ref()).await? {
                let Some(j) = p.labels.get(LABEL_JOB) else {
                    continue;
                };
                if job.is_some_and(|want| want.as_str() != j) {
                    continue;
                }
                let _ = p.labels.get(LABEL_NODE);
                out.push(JobEntry {
                    job: j.clone(),
                    node: self.name().clone(),
                    role: p.labels.get(LABEL_ROLE).cloned(),
                    name: p.name.clone(),
                    runtime: RuntimeKind::Host,
                    state: if p.alive {
                        "running".to_string()
                    } else {
                        "exited".to_string()
                    },
                    exit_code: if p.alive {
                        None
                    } else {
                        p.exit_code.or(Some(-1))
                    },
                    image: crate::plan::secret::mask_assignments(&p.command),
                    started_at: p.started,
                    ports: ports_of(p.labels.get(LABEL_PORTS)),
                    bind: p.labels.get(LABEL_BIND).and_then(|a| a.parse().ok()),
                    memory_limit: None,
                    oom_killed: false,
                    workload: p.labels.get(LABEL_WORKLOAD).cloned(),
                    runtime_cache: p.labels.get(LABEL_RUNTIME_CACHE).cloned(),
                });
            }
        }
        Ok(out)
    }

    /// Stops and removes everything of `job` on this node (containers and host processes
    /// carrying its label, plus anything holding its deterministic name if it carries our job
    /// label). Returns the names removed. Never touches unlabelled containers.
    pub async fn stop_job(
        &self,
        job: &JobName,
        runtime: Option<RuntimeKind>,
        grace: Duration,
    ) -> Result<Vec<String>, RuntimeError> {
        let mut removed = Vec::new();
        for entry in self.jobs(Some(job), runtime).await? {
            let gone = match entry.runtime {
                RuntimeKind::Docker => self.engine().await?.remove(&entry.name, grace).await?,
                RuntimeKind::Host => {
                    host::stop(self.target.shell()?.as_ref(), &entry.name, grace).await?
                }
            };
            if gone {
                removed.push(entry.name);
            }
        }
        Ok(removed)
    }

    /// Runs a command in this node's part of the job (inside its container; on the node
    /// itself for the host runtime).
    pub async fn exec(
        &self,
        runtime: RuntimeKind,
        name: &str,
        command: &[String],
        env: &BTreeMap<String, String>,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> Result<ExecOutput, RuntimeError> {
        match runtime {
            RuntimeKind::Docker => {
                let env: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
                self.engine()
                    .await?
                    .exec(name, command, &env, timeout, cancel)
                    .await
            }
            RuntimeKind::Host => {
                let sh = self.target.shell()?;
                let run = host::exec(sh.as_ref(), command, env, None, timeout);
                tokio::select! {
                    r = run => r,
                    _ = cancel.cancelled() => Err(RuntimeError::Cancelled {
                        what: format!("run `{}`", crate::plan::job::shell_words(command)),
                    }),
                }
            }
        }
    }

    /// Writes a file into this node's container, or onto the node for the host runtime.
    pub async fn write_file(
        &self,
        runtime: RuntimeKind,
        name: &str,
        path: &str,
        content: &[u8],
        mode: u32,
    ) -> Result<(), RuntimeError> {
        match runtime {
            RuntimeKind::Docker => {
                self.engine()
                    .await?
                    .write_file(name, path, content, mode)
                    .await
            }
            RuntimeKind::Host => {
                host::write_file(self.target.shell()?.as_ref(), path, content, mode).await
            }
        }
    }

    /// Waits for this node's part of the job to end; its exit code.
    pub async fn wait_exit(
        &self,
        runtime: RuntimeKind,
        name: &str,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> Result<i64, RuntimeError> {
        match runtime {
            RuntimeKind::Docker => self.engine().await?.wait_exit(name, timeout, cancel).await,
            RuntimeKind::Host => {
                host::wait_exit(self.target.shell()?.as_ref(), name, timeout, cancel).await
            }
        }
    }

    /// The log of this node's part of the job (stdout and stderr together).
    pub async fn logs(
        &self,
        runtime: RuntimeKind,
        name: &str,
        follow: bool,
        timestamps: bool,
    ) -> Result<BoxStream<'static, Result<Bytes, RuntimeError>>, RuntimeError> {
        match runtime {
            RuntimeKind::Docker => Ok(self
                .engine()
                .await?
                .logs(name, follow, timestamps)
                .map(|r| r.map(|c| c.bytes))
                .boxed()),
            RuntimeKind::Host => Ok(host::logs(self.target.shell()?.as_ref(), name, follow)),
        }
    }
}

/// `2024-05-01T12:00:00.123456789Z` → seconds since the epoch (UTC only, as dockerd writes).
pub fn parse_rfc3339_seconds(s: &str) -> Option<i64> {
    let s = s.trim();
    let (date, rest) = s.split_once('T')?;
    let mut d = date.split('-');
    let y: i64 = d.next()?.parse().ok()?;
    let m: i64 = d.next()?.parse().ok()?;
    let day: i64 = d.next()?.parse().ok()?;
    let time = rest.get(..8)?;
    let mut t = time.split(':');
    let hh: i64 = t.next()?.parse().ok()?;
    let mm: i64 = t.next()?.parse().ok()?;
    let ss: i64 = t.next()?.parse().ok()?;
    if y < 1970 {
        return Some(0);
    }
    // Days from civil (Howard Hinnant's algorithm).
    let y2 = if m <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hh * 3600 + mm * 60 + ss)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_timestamps_become_epoch_seconds() {
        assert_eq!(parse_rfc3339_seconds("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339_seconds("2024-05-01T12:00:00.123456789Z"),
            Some(1_714_564_800)
        );
        assert_eq!(parse_rfc3339_seconds("0001-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_rfc3339_seconds("garbage"), None);
    }
}
