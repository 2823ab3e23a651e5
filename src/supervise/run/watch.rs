//! What the supervisor looks at, each time the machine asks for a look: every node's memory
//! (`MemAvailable`), every rank's container
//! (running or not, its exit code, an OOM kill, the first error line of its log), then one
//! tiny real generation on the head (`workload::token_probe`, over the head's shell, the API
//! key on stdin) and, when no token came, whether `/health` still answers. Also each rank's
//! log, followed from the moment the supervisor starts watching, for error lines.
//!
//! Effects only: what was seen is handed to `machine` as [`Seen`] values; nothing is decided
//! here. Only containers carrying the job's label are looked at.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

use super::reach::{Unanswered, asked};
use crate::model::script::quote;
use crate::node::{NodeName, for_each_node};
use crate::plan::secret::Secret;
use crate::plan::spec::LABEL_JOB;
use crate::plan::{JobName, RuntimeKind};
use crate::runtime::Cluster;
use crate::runtime::shell::NodeShell;
use crate::supervise::machine::{HostMemory, Probed, Seen};
use crate::workload::engines::ReadySignals;
use crate::workload::readiness::first_error;
use crate::workload::serve::ServePlan;
use crate::workload::token_probe::{self, TokenProbe};

/// What the supervisor needs to look at a job: its nodes, the head's shell, the API.
pub struct Watched<'a> {
    pub cluster: &'a Cluster,
    pub job: JobName,
    /// The ranks, head first.
    pub nodes: Vec<NodeName>,
    /// The API on the head as the head reaches it (`http://127.0.0.1:8000`).
    pub url: String,
    pub model: String,
    pub health_path: &'static str,
    pub key: Option<Secret>,
    /// Containers, or host processes.
    pub runtime: RuntimeKind,
}

impl<'a> Watched<'a> {
    /// The target of a serving plan on `cluster`; `key` is the API key the plan's engine
    /// enforces (its plan shows only `<set>`).
    pub fn of(cluster: &'a Cluster, plan: &ServePlan, key: Option<Secret>) -> Watched<'a> {
        let (url, model) = super::restart::api_of(plan);
        Watched {
            cluster,
            job: plan.job.job.clone(),
            nodes: plan.nodes.clone(),
            url,
            model,
            health_path: ReadySignals::of_workload(plan.engine.engine().name()).health_path,
            key,
            runtime: plan.job.runtime,
        }
    }
}

/// Every rank's container that is not running, as [`Seen::RankStopped`] (or
/// [`Seen::RankGone`] when it was removed), and for every node whether it answered
/// ([`Seen::Reachable`], or [`Seen::Unreachable`] when its SSH connection dropped and could
/// not be opened again: `reach::asked` connects again first). A node that answered with an
/// error is a hiccup (logged, looked at again next time), never taken for a stopped rank; a
/// paused container counts as running (a frozen rank is for the probe to find).
pub async fn ranks(t: &Watched<'_>) -> Vec<Seen> {
    let results = for_each_node(t.nodes.clone(), 0, |node| async move {
        let name = t.job.container_name(&node);
        let runtime = t.cluster.node(&node)?;
        if t.runtime == RuntimeKind::Host {
            return process_state(runtime, &t.job, &name).await;
        }
        let name = name.as_str();
        let found = asked(runtime, || async move {
            runtime.engine().await?.inspect(name).await
        })
        .await?;
        let Some(c) = found else {
            return Ok::<_, Unanswered>(Some(None));
        };
        let ours = c
            .config
            .as_ref()
            .and_then(|c| c.labels.as_ref())
            .and_then(|l| l.get(LABEL_JOB))
            .is_some_and(|j| j == t.job.as_str());
        if !ours {
            return Ok(Some(Some(format!(
                "{name} is not a container of job {} (no spark-launch label): left alone",
                t.job
            ))));
        }
        let st = c.state.unwrap_or_default();
        if st.running == Some(true) {
            return Ok(None);
        }
        let mut detail = format!(
            "{name} is {} (exit code {})",
            st.status
                .map(|s| s.to_string())
                .unwrap_or_else(|| "stopped".into()),
            st.exit_code
                .map(|c| c.to_string())
                .unwrap_or_else(|| "?".into())
        );
        if st.oom_killed == Some(true) {
            detail.push_str(", killed for lack of memory (OOM)");
        }
        if let Ok(engine) = runtime.engine().await
            && let Some(line) = log_error(engine, name, st.started_at.as_deref()).await
        {
            detail.push_str(&format!("; first error line: {line}"));
        }
        Ok(Some(Some(detail)))
    })
    .await;
    let mut seen = Vec::new();
    for (node, r) in results {
        match r {
            Ok(found) => {
                seen.push(Seen::Reachable { node: node.clone() });
                match found {
                    Some(Some(detail)) => seen.push(Seen::RankStopped { node, detail }),
                    Some(None) => seen.push(Seen::RankGone { node }),
                    None => {}
                }
            }
            Err(Unanswered::Lost { via, cause }) => seen.push(Seen::Unreachable {
                node,
                detail: Unanswered::Lost { via, cause }.to_string(),
            }),
            Err(Unanswered::Runtime(e)) => {
                tracing::warn!("{node}: cannot look at the job's container ({e}); trying again")
            }
        }
    }
    seen
}

/// A rank that runs as a host process, as [`ranks`] reads a container: `None` while it runs,
/// `Some(None)` when its folder is gone, `Some(Some(why))` once it ended (with its exit code).
async fn process_state(
    runtime: &crate::runtime::cluster::NodeRuntime,
    job: &JobName,
    name: &str,
) -> Result<Option<Option<String>>, Unanswered> {
    let entries = asked(runtime, || async move {
        runtime.jobs(Some(job), Some(RuntimeKind::Host)).await
    })
    .await?;
    let Some(e) = entries.into_iter().find(|e| e.name == name) else {
        return Ok(Some(None));
    };
    if e.state == "running" {
        return Ok(None);
    }
    Ok(Some(Some(format!(
        "{name} is {} (exit code {})",
        e.state,
        e.exit_code
            .map(|c| c.to_string())
            .unwrap_or_else(|| "?".into())
    ))))
}

/// `MemTotal` and `MemAvailable` of every node in `nodes` that answers (through its shell); a
/// node that cannot be read is a hiccup (logged), never taken for one without memory.
pub async fn memory(cluster: &Cluster, nodes: &[NodeName]) -> Vec<HostMemory> {
    let results = for_each_node(nodes.to_vec(), 0, |node| async move {
        let shell = cluster
            .node(&node)
            .map_err(|e| e.to_string())?
            .target
            .shell()
            .map_err(|e| e.to_string())?;
        let script = "grep -E '^(MemTotal|MemAvailable):' /proc/meminfo";
        let ran =
            tokio::time::timeout(Duration::from_secs(15), shell.run(script, Vec::new(), None))
                .await
                .map_err(|_| "no answer within 15 s".to_string())?
                .map_err(|e| e.to_string())?;
        crate::report::live::meminfo(&ran.stdout)
            .ok_or_else(|| format!("no MemTotal/MemAvailable in {:?}", ran.stdout.trim()))
    })
    .await;
    let mut out = Vec::new();
    for (node, r) in results {
        match r {
            Ok(m) => out.push(HostMemory {
                node,
                total: m.total_bytes,
                available: m.available_bytes,
            }),
            Err(e) => tracing::warn!("{node}: cannot read its memory ({e}); trying again"),
        }
    }
    out
}

/// The first error line of a container's last run: its log since its last start
/// (`State.StartedAt`), never a line an earlier run wrote; none when the start is not known.
async fn log_error(
    engine: &crate::runtime::engine::Engine,
    name: &str,
    started_at: Option<&str>,
) -> Option<String> {
    let started = started_at.and_then(stamp_ns)?;
    // Docker cuts at whole seconds; the lines of the same second before the start are cut
    // here, by their stamps.
    let second = i32::try_from(started.div_euclid(1_000_000_000)).ok()?;
    let mut stream = engine.logs_since(name, second);
    let mut text = Vec::new();
    while let Some(Ok(chunk)) = stream.next().await {
        text.extend_from_slice(&chunk.bytes);
    }
    first_error(&since_start(&String::from_utf8_lossy(&text), started))
}

/// A Docker timestamp (`2026-11-26T18:00:00.123456789Z`, UTC, up to nine decimals) in
/// nanoseconds since the epoch.
fn stamp_ns(stamp: &str) -> Option<i128> {
    let secs = crate::runtime::cluster::parse_rfc3339_seconds(stamp)?;
    let rest = stamp.trim().get(19..)?;
    let digits: String = rest
        .strip_prefix('.')
        .unwrap_or("")
        .chars()
        .take_while(char::is_ascii_digit)
        .take(9)
        .collect();
    let nanos: i128 = format!("{digits:0<9}").parse().ok()?;
    Some(i128::from(secs) * 1_000_000_000 + nanos)
}

/// The lines of a timestamped log (`STAMP TEXT` each) written at or after `started`
/// (nanoseconds), without their stamps; a line without a stamp that can be read is left out.
fn since_start(log: &str, started: i128) -> String {
    log.lines()
        .filter_map(|l| {
            let (stamp, text) = l.split_once(' ').unwrap_or((l, ""));
            (stamp_ns(stamp)? >= started).then_some(text)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// One token probe on the head, then `/health` when no token came.
pub async fn probe(t: &Watched<'_>, bound: Duration) -> Probed {
    let bound_s = bound.as_secs().max(1);
    let Some(shell) = head_shell(t) else {
        return Probed::NoToken {
            health: false,
            why: "no shell on the head".into(),
        };
    };
    let stdin = token_probe::header_stdin(t.key.as_ref().map(|k| k.expose()));
    let script = token_probe::script(&t.url, &t.model, bound_s);
    // The shell's own round trip gets a little time beyond curl's bound.
    let ran = tokio::time::timeout(
        bound + Duration::from_secs(10),
        shell.run(&script, stdin, None),
    )
    .await;
    let found = match ran {
        Ok(Ok(out)) => token_probe::parse(&out.stdout, bound_s),
        Ok(Err(e)) => TokenProbe::Failed(e.to_string()),
        Err(_) => TokenProbe::NoAnswer { waited_s: bound_s },
    };
    if let TokenProbe::Token { after_ms } = found {
        return Probed::Token {
            after_ms: after_ms.unwrap_or(0),
        };
    }
    Probed::NoToken {
        health: health(shell.as_ref(), t).await,
        why: found.to_string(),
    }
}

fn head_shell(t: &Watched<'_>) -> Option<Arc<dyn NodeShell>> {
    let head = t.nodes.first()?;
    t.cluster.node(head).ok()?.target.shell().ok()
}

/// Whether the head's `/health` answers 200 within 5 s.
async fn health(shell: &dyn NodeShell, t: &Watched<'_>) -> bool {
    let url = quote(&format!("{}{}", t.url.trim_end_matches('/'), t.health_path));
    let script = format!("curl -s -o /dev/null -w '%{{http_code}}' --max-time 5 {url}");
    let ran = tokio::time::timeout(
        Duration::from_secs(15),
        shell.run(&script, Vec::new(), None),
    );
    matches!(ran.await, Ok(Ok(out)) if out.stdout.trim() == "200")
}

/// Error lines from every rank's log, written since [`follow_errors`] was called.
pub struct ErrorLines {
    rx: UnboundedReceiver<(NodeName, String)>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl ErrorLines {
    /// The new error lines, at most one per node (with how many more came).
    pub fn drain(&mut self) -> Vec<Seen> {
        let mut by_node: Vec<(NodeName, String, usize)> = Vec::new();
        while let Ok((node, line)) = self.rx.try_recv() {
            match by_node.iter_mut().find(|(n, _, _)| *n == node) {
                Some((_, _, more)) => *more += 1,
                None => by_node.push((node, line, 0)),
            }
        }
        by_node
            .into_iter()
            .map(|(node, line, more)| Seen::EngineError {
                node,
                line: if more > 0 {
                    format!("{line} (and {more} more error lines)")
                } else {
                    line
                },
            })
            .collect()
    }
}

impl Drop for ErrorLines {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Follows every rank's log (lines stamped by Docker from now on) for error lines.
pub async fn follow_errors(t: &Watched<'_>) -> ErrorLines {
    let (tx, rx) = unbounded_channel();
    let since = crate::records::now_ms() / 1000;
    let mut tasks = Vec::new();
    for node in &t.nodes {
        let name = t.job.container_name(node);
        let Ok(runtime) = t.cluster.node(node) else {
            continue;
        };
        let Ok(engine) = runtime.engine().await else {
            continue;
        };
        let mut stream = engine.logs(&name, true, true);
        let tx = tx.clone();
        let node = node.clone();
        tasks.push(tokio::spawn(async move {
            let mut pending: Vec<u8> = Vec::new();
            while let Some(Ok(chunk)) = stream.next().await {
                pending.extend_from_slice(&chunk.bytes);
                while let Some(i) = pending.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = pending.drain(..=i).collect();
                    let line = String::from_utf8_lossy(&line).trim().to_string();
                    let (stamp, text) = line.split_once(' ').unwrap_or(("", line.as_str()));
                    let new = crate::runtime::cluster::parse_rfc3339_seconds(stamp)
                        .is_some_and(|s| s >= since);
                    if new
                        && let Some(e) = first_error(text)
                        && tx.send((node.clone(), e)).is_err()
                    {
                        return;
                    }
                }
            }
        }));
    }
    ErrorLines { rx, tasks }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stopped_ranks_error_line_is_read_from_its_last_run_only() {
        // A container that failed once (the CUDA error), was started again at 18:02:03.5,
        // and stopped again with another error; Docker's stamps as `docker logs -t` prints
        // them (nanoseconds, trailing zeros dropped).
        let log = "\
2026-11-26T18:00:00.1Z INFO starting
2026-11-26T18:02:03.25Z RuntimeError: CUDA error: an illegal memory access was encountered
2026-11-26T18:02:03.5Z INFO starting
2026-11-26T18:02:09.123456789Z ValueError: the model's max seq len is larger than the KV cache
";
        let started = stamp_ns("2026-11-26T18:02:03.5Z").unwrap();
        let last = since_start(log, started);
        assert!(!last.contains("CUDA"), "{last}");
        let line = first_error(&last).unwrap();
        assert!(
            line.contains("ValueError: the model's max seq len"),
            "{line}"
        );
        // Docker's StartedAt has all nine decimals, its log stamps drop trailing zeros.
        assert_eq!(
            stamp_ns("2026-11-26T18:02:03.500000000Z"),
            stamp_ns("2026-11-26T18:02:03.5Z")
        );
        assert!(stamp_ns("2026-11-26T18:02:03.25Z") < stamp_ns("2026-11-26T18:02:03.5Z"));
        assert_eq!(stamp_ns("not a stamp"), None);
    }
}
