//! Jobs found by their labels on the nodes (no local state: the nodes are the truth): what runs where
//! (`status`), their logs (`logs`, merged by time or followed), and stopping them (`stop`),
//! on every node at once, never touching what spark-launch did not label. Every node's
//! failure is kept beside the others' results.
//!
//! `command`: the commands as one call each ([`status`], [`logs`], [`stop`]: request in,
//! report out); `render`: how their reports are shown; `watch`: `status --watch`'s live view;
//! `process_nccl`: the NCCL running host processes have mapped, for `status`; [`links`]: what
//! a job's engine says in its logs about how its nodes talk (llama.cpp's RPC transport), for
//! `status` and the launch's summary; `cache_size`: the size of each runtime cache the work
//! names, for `status`.

mod cache_size;
mod command;
mod process_nccl;
mod render;
mod watch;

pub use cache_size::{CacheSeen, CacheSize};
pub use command::{
    JobsError, LogSink, LogsReport, LogsRequest, StatusReport, StatusRequest, StatusRow,
    StopReport, StopRequest, WouldStop, logs, status, stop,
};
pub use watch::{WatchShow, watch};

use std::time::Duration;

use futures::stream::{BoxStream, StreamExt};
use serde::Serialize;

use crate::node::{NodeName, all_ok, for_each_node};
use crate::plan::{JobName, RuntimeKind};
use crate::runtime::{Cluster, JobEntry, RuntimeError};
use crate::workload::engines::{EngineKind, EngineOptions, LinkVerdict};

/// Every labelled container and process found (of one job, or all), and the nodes that could
/// not be asked.
#[derive(Debug, Default)]
pub struct FoundJobs {
    pub entries: Vec<JobEntry>,
    pub failed: Vec<(NodeName, RuntimeError)>,
}

/// Looks on every node of `cluster` for the work of `job` (every job when `None`), sorted by
/// job, then the cluster's node order, then name.
pub async fn find(cluster: &Cluster, job: Option<&JobName>) -> FoundJobs {
    let results = for_each_node(cluster.names(), 0, |node| async move {
        cluster.node(&node)?.jobs(job, None).await
    })
    .await;
    let mut found = FoundJobs::default();
    for (node, r) in results {
        match r {
            Ok(mut e) => found.entries.append(&mut e),
            Err(e) => found.failed.push((node, e)),
        }
    }
    let order = cluster.names();
    found.entries.sort_by_key(|e| {
        (
            e.job.clone(),
            order.iter().position(|n| *n == e.node),
            e.name.clone(),
        )
    });
    found
}

/// What `stop` removed on one node.
#[derive(Debug, Serialize)]
pub struct Stopped {
    pub node: NodeName,
    pub removed: Vec<String>,
}

/// Stops and removes `job` (every labelled job when `None`) on every node: SIGTERM, then
/// SIGKILL after `grace`. Returns what was removed per node and the nodes that failed.
pub async fn stop_jobs(
    cluster: &Cluster,
    job: Option<&JobName>,
    grace: Duration,
) -> (Vec<Stopped>, Vec<(NodeName, RuntimeError)>) {
    let results = for_each_node(cluster.names(), 0, |node| async move {
        let handle = cluster.node(&node)?;
        match job {
            Some(j) => handle.stop_job(j, None, grace).await,
            None => {
                let mut removed = Vec::new();
                let mut jobs: Vec<String> = handle
                    .jobs(None, None)
                    .await?
                    .into_iter()
                    .map(|e| e.job)
                    .collect();
                jobs.sort();
                jobs.dedup();
                for j in jobs {
                    // Labels we wrote are valid job names; anything else is not ours.
                    let Ok(j) = JobName::new(j) else { continue };
                    removed.extend(handle.stop_job(&j, None, grace).await?);
                }
                Ok(removed)
            }
        }
    })
    .await;
    let mut stopped = Vec::new();
    let mut failed = Vec::new();
    for (node, r) in results {
        match r {
            Ok(removed) => stopped.push(Stopped { node, removed }),
            Err(e) => failed.push((node, e)),
        }
    }
    (stopped, failed)
}

/// How many lines of each log are read for what an engine says about its links: their start,
/// where llama.cpp's RPC connections are made (a long-running server's log grows with every
/// request).
const LINK_LINES: usize = 20_000;

/// What a job's engine said about how its nodes talk (`ServingEngine::link_reader`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct JobLink {
    pub job: String,
    #[serde(flatten)]
    pub link: LinkVerdict,
}

/// What the engine of each job of `entries` says about how its nodes talk (llama.cpp: the
/// transport of its RPC connections), read from the start of every one of the job's logs
/// together, the group's mode as the engine forms it on the nodes found. Jobs whose engine
/// reads nothing there, or whose logs say nothing it reports on, are left out; a job whose logs
/// could not be read is returned beside, with why.
pub async fn links(
    cluster: &Cluster,
    entries: &[JobEntry],
) -> (Vec<JobLink>, Vec<(String, RuntimeError)>) {
    let mut jobs: Vec<&str> = entries.iter().map(|e| e.job.as_str()).collect();
    jobs.sort();
    jobs.dedup();
    let mut found = Vec::new();
    let mut failed = Vec::new();
    for job in jobs {
        let of_job: Vec<JobEntry> = entries.iter().filter(|e| e.job == job).cloned().collect();
        let Some(engine) = of_job
            .iter()
            .find_map(|e| e.workload.as_deref()?.parse::<EngineKind>().ok())
        else {
            continue;
        };
        let Some(read) = engine.engine().link_reader() else {
            continue;
        };
        let mut nodes: Vec<&NodeName> = of_job.iter().map(|e| &e.node).collect();
        nodes.dedup();
        let multi = engine
            .engine()
            .multi_node(&EngineOptions::default(), nodes.len());
        match log_starts(cluster, &of_job, LINK_LINES).await {
            Ok(text) => found.extend(read(multi, &text).map(|link| JobLink {
                job: job.to_string(),
                link,
            })),
            Err(e) => failed.push((job.to_string(), e)),
        }
    }
    (found, failed)
}

/// One entry's log, opened as lines.
type EntryLog = (JobEntry, BoxStream<'static, Result<String, RuntimeError>>);

/// The nodes of `entries`, each once, in their order, with each node's own entries: a node
/// running two of a job's entries has both logs read.
fn by_node(entries: &[JobEntry]) -> Vec<(NodeName, Vec<JobEntry>)> {
    let mut out: Vec<(NodeName, Vec<JobEntry>)> = Vec::new();
    for e in entries {
        match out.iter_mut().find(|(n, _)| *n == e.node) {
            Some((_, mine)) => mine.push(e.clone()),
            None => out.push((e.node.clone(), vec![e.clone()])),
        }
    }
    out
}

/// Opens one entry's log as lines; Docker's carry their timestamps when `timestamps` is set
/// (host processes' logs have none). `follow` keeps it open for what is written next.
async fn open_log(
    cluster: &Cluster,
    entry: &JobEntry,
    follow: bool,
    timestamps: bool,
) -> Result<BoxStream<'static, Result<String, RuntimeError>>, RuntimeError> {
    let stamped = timestamps && entry.runtime == RuntimeKind::Docker;
    let stream = cluster
        .node(&entry.node)?
        .logs(entry.runtime, &entry.name, follow, stamped)
        .await?;
    Ok(lines(stream).boxed())
}

/// `f` on every one of `entries`, on every node at once (a node's own entries one after the
/// other), the results in the entries' order; every node's failure is kept.
async fn each_entry<T, F, Fut>(entries: &[JobEntry], f: F) -> Result<Vec<T>, RuntimeError>
where
    F: Fn(JobEntry) -> Fut,
    Fut: std::future::Future<Output = Result<T, RuntimeError>>,
{
    let groups = by_node(entries);
    let done = for_each_node(groups.iter().map(|(n, _)| n.clone()), 0, |node| {
        let mine = groups
            .iter()
            .find(|(n, _)| *n == node)
            .map(|(_, m)| m.clone())
            .unwrap_or_default();
        let f = &f;
        async move {
            let mut out = Vec::new();
            for entry in mine {
                out.push(f(entry).await?);
            }
            Ok::<_, RuntimeError>(out)
        }
    })
    .await;
    let done = all_ok(done).map_err(|f| RuntimeError::Other(f.to_string()))?;
    Ok(done.into_iter().flat_map(|(_, v)| v).collect())
}

/// Every entry's log read to its end (its first `max` lines when given), in the entries' order.
async fn read_all(
    cluster: &Cluster,
    entries: &[JobEntry],
    max: Option<usize>,
    timestamps: bool,
) -> Result<Vec<(JobEntry, Vec<String>)>, RuntimeError> {
    each_entry(entries, |entry| async move {
        let log = open_log(cluster, &entry, false, timestamps).await?;
        let log = match max {
            Some(max) => log.take(max).boxed(),
            None => log,
        };
        let all: Vec<String> = log
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<Result<_, _>>()?;
        Ok((entry, all))
    })
    .await
}

/// The first `max` lines of every entry's log, one after the other.
async fn log_starts(
    cluster: &Cluster,
    entries: &[JobEntry],
    max: usize,
) -> Result<String, RuntimeError> {
    let read = read_all(cluster, entries, Some(max), false).await?;
    Ok(read
        .into_iter()
        .flat_map(|(_, lines)| lines)
        .collect::<Vec<_>>()
        .join("\n"))
}

/// One line of a job's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    pub node: NodeName,
    pub text: String,
}

/// The whole log of every entry, merged in time order (container lines carry Docker's
/// timestamps; an entry's own order is kept for equal or missing ones).
pub async fn read_logs(
    cluster: &Cluster,
    entries: &[JobEntry],
) -> Result<Vec<LogLine>, RuntimeError> {
    let read = read_all(cluster, entries, None, true).await?;
    let mut out: Vec<(String, usize, LogLine)> = Vec::new();
    for (i, (entry, all)) in read.into_iter().enumerate() {
        for line in all {
            let (key, text) = if entry.runtime == RuntimeKind::Docker {
                match line.split_once(' ') {
                    Some((ts, rest)) => (ts.to_string(), rest.to_string()),
                    None => (String::new(), line),
                }
            } else {
                (String::new(), line)
            };
            out.push((
                key,
                i,
                LogLine {
                    node: entry.node.clone(),
                    text,
                },
            ));
        }
    }
    // A stable sort keeps each entry's own order for equal (or missing) timestamps.
    out.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
    Ok(out.into_iter().map(|(_, _, l)| l).collect())
}

/// Every entry's log from the start and then as it is written, merged as lines arrive.
pub async fn follow(
    cluster: &Cluster,
    entries: &[JobEntry],
) -> Result<BoxStream<'static, Result<LogLine, RuntimeError>>, RuntimeError> {
    let opened: Vec<EntryLog> = each_entry(entries, |entry| async move {
        let log = open_log(cluster, &entry, true, false).await?;
        Ok((entry, log))
    })
    .await?;
    let streams = opened.into_iter().map(|(entry, log)| {
        let node = entry.node;
        log.map(move |l| {
            l.map(|text| LogLine {
                node: node.clone(),
                text,
            })
        })
        .boxed()
    });
    Ok(futures::stream::select_all(streams).boxed())
}

/// Splits a byte stream into lines (without their newline); a last partial line is kept.
fn lines(
    stream: BoxStream<'static, Result<bytes::Bytes, RuntimeError>>,
) -> impl futures::Stream<Item = Result<String, RuntimeError>> + Send + 'static {
    futures::stream::unfold(
        (stream, Vec::<u8>::new(), false),
        |(mut stream, mut buf, mut done)| async move {
            loop {
                if let Some(pos) = buf.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buf.drain(..=pos).collect();
                    let text = String::from_utf8_lossy(&line[..line.len() - 1])
                        .trim_end_matches('\r')
                        .to_string();
                    return Some((Ok(text), (stream, buf, done)));
                }
                if done {
                    if buf.is_empty() {
                        return None;
                    }
                    let text = String::from_utf8_lossy(&buf).to_string();
                    buf.clear();
                    return Some((Ok(text), (stream, buf, done)));
                }
                match stream.next().await {
                    Some(Ok(b)) => buf.extend_from_slice(&b),
                    Some(Err(e)) => return Some((Err(e), (stream, buf, true))),
                    None => done = true,
                }
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn log_lines_are_split_across_chunks_and_keep_a_last_partial_line() {
        let chunks: Vec<Result<bytes::Bytes, RuntimeError>> =
            vec![Ok("a\nb".into()), Ok("c\n".into()), Ok("tail".into())];
        let got: Vec<String> = lines(futures::stream::iter(chunks).boxed())
            .map(|r| r.unwrap())
            .collect()
            .await;
        assert_eq!(got, vec!["a", "bc", "tail"]);
    }
}
