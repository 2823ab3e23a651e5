//! Model staging: make every node hold the model's files before anything starts.
//!
//! The head downloads once (HTTP ranges from the Hub, in parallel streams, resumable); then
//! every other node copies from the head over the fast link (each node pulls in parallel
//! streams over SSH on the head's fabric address), all nodes at once. Each node keeps the
//! Hugging Face cache layout (blobs, snapshot symlinks, refs). Files already present with the
//! same size and hash are skipped; an interrupted run resumes where its journal says.
//!
//! Effects only: what to fetch comes from `model::manifest::diff`, how from the scripts of
//! `model::script`. Progress: one byte-counted transfer per node through the `Reporter`.

use std::sync::Arc;
use std::time::Instant;

use futures::stream::{self, StreamExt};
use serde::Serialize;

use super::fanout::{NodeFailures, all_ok, for_each_node};
use super::shell::{NodeShell, ShellError};
use crate::model::hub::{Resolved, escape_path, resolve_base};
use crate::model::manifest::{DEFAULT_RANGE, Scan, StagePlan, Wanted, assign, diff, parse_scan};
use crate::model::script::{
    self, FinalLine, Source, StreamLine, finalize_input, parse_final_line, parse_stream_line,
    stream_input,
};
use crate::model::{ModelSource, hub};
use crate::node::NodeName;
use crate::progress::{Reporter, Transfer};

/// How hard to push.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StageOptions {
    /// Parallel streams per node.
    pub streams: usize,
    /// Bytes per range (the unit of progress, retry and resume).
    pub range_size: u64,
    /// Parallel hash jobs when scanning.
    pub hash_jobs: usize,
}

impl Default for StageOptions {
    fn default() -> Self {
        StageOptions {
            streams: 8,
            range_size: DEFAULT_RANGE,
            hash_jobs: 8,
        }
    }
}

/// One node to stage on: its shell and where its Hugging Face cache is.
#[derive(Clone)]
pub struct StageNode {
    pub shell: Arc<dyn NodeShell>,
    pub hf_home: String,
}

impl StageNode {
    pub fn name(&self) -> &NodeName {
        self.shell.node()
    }
}

/// How a worker reads the head's files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeadAccess {
    /// `ssh ARGS...` from the worker reaches the head (the last argument is the destination;
    /// options choose the fabric address, the pinned host key and fast ciphers).
    Ssh(Vec<String>),
    /// The worker sees the head's files on its own filesystem (one machine, tests).
    Local,
}

/// What to stage and where.
pub struct StageSpec {
    pub model: ModelSource,
    /// The Hub's answer for a Hub model (resolve first with `model::hub::resolve`).
    pub resolved: Option<Resolved>,
    pub endpoint: String,
    pub token: Option<String>,
    pub head: StageNode,
    pub workers: Vec<(StageNode, HeadAccess)>,
    pub options: StageOptions,
}

/// What staging did on one node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NodeStaged {
    pub node: NodeName,
    pub fetched_files: usize,
    pub fetched_bytes: u64,
    /// Bytes an earlier interrupted run had already fetched.
    pub resumed_bytes: u64,
    pub present_files: usize,
    pub present_bytes: u64,
    pub links: usize,
    pub millis: u64,
}

/// Why staging failed. Every variant names the node.
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    #[error(transparent)]
    Shell(#[from] ShellError),
    #[error("{node}: scanning {dir} failed: {cause}")]
    Scan {
        node: NodeName,
        dir: String,
        cause: String,
    },
    #[error("{node}: fetching {path} failed: {message}{fix}")]
    Fetch {
        node: NodeName,
        path: String,
        message: String,
        fix: String,
    },
    #[error(
        "{node}: {} file(s) did not match their hash after the download and were discarded ({}); run again to fetch them anew",
        bad.len(),
        bad.join(", ")
    )]
    Verify { node: NodeName, bad: Vec<String> },
    #[error("{node}: writing links and refs under {dir} failed: {cause}")]
    Finalize {
        node: NodeName,
        dir: String,
        cause: String,
    },
    #[error("{node}: {problem}")]
    Source { node: NodeName, problem: String },
    #[error("{0}")]
    Workers(NodeFailures<StageError>),
}

/// Stages the model on the head, then on every worker in parallel. Returns one report per
/// node, head first.
pub async fn stage(
    spec: &StageSpec,
    reporter: Arc<dyn Reporter>,
) -> Result<Vec<NodeStaged>, StageError> {
    let opts = spec.options;
    let head = &spec.head;
    let head_dir = spec.model.node_dir(&head.hf_home);
    let label = format!("model {}", spec.model.served_name());

    // 1. The head: from the Hub, or the folder it already has.
    let (head_report, head_wanted) = match (&spec.model, &spec.resolved) {
        (ModelSource::Hub { .. }, Some(r)) => {
            let wanted = Wanted::hub_layout(&r.commit, r.revision.as_str(), &r.files);
            let source = Source::Http {
                base: resolve_base(&spec.endpoint, &r.repo, &r.commit),
            };
            let header = spec
                .token
                .as_ref()
                .map(|t| format!("Authorization: Bearer {t}"));
            let report = stage_node(
                head,
                &head_dir,
                &wanted,
                &source,
                header.as_deref(),
                true,
                &label,
                opts,
                reporter.clone(),
            )
            .await?;
            (report, wanted)
        }
        (ModelSource::Hub { repo, .. }, None) => {
            return Err(StageError::Source {
                node: head.name().clone(),
                problem: format!("{repo} was not resolved on the Hub before staging"),
            });
        }
        (ModelSource::Local { path }, _) => {
            let started = Instant::now();
            let scan = scan_node(head.shell.as_ref(), &head_dir, opts.hash_jobs).await?;
            if scan.files.is_empty() {
                return Err(StageError::Source {
                    node: head.name().clone(),
                    problem: format!(
                        "the model folder {path} is missing or empty on the head; put the model there first"
                    ),
                });
            }
            let wanted = Wanted::folder(&scan).map_err(|problem| StageError::Source {
                node: head.name().clone(),
                problem,
            })?;
            let report = NodeStaged {
                node: head.name().clone(),
                fetched_files: 0,
                fetched_bytes: 0,
                resumed_bytes: 0,
                present_files: wanted.files.len(),
                present_bytes: wanted.total_bytes(),
                links: 0,
                millis: started.elapsed().as_millis() as u64,
            };
            (report, wanted)
        }
    };
    if spec.workers.is_empty() {
        return Ok(vec![head_report]);
    }

    // 2. What the workers must match: the head's files with the head's hashes.
    let worker_wanted = match &spec.model {
        ModelSource::Hub { .. } => {
            let scan = scan_node(head.shell.as_ref(), &head_dir, opts.hash_jobs).await?;
            Wanted::from_head(&head_wanted, &scan).map_err(|missing| StageError::Source {
                node: head.name().clone(),
                problem: format!(
                    "the head lacks {} after its download: {}",
                    missing.len(),
                    missing.join(", ")
                ),
            })?
        }
        ModelSource::Local { .. } => head_wanted,
    };

    // 3. Every worker at once, each pulling from the head.
    let by_name: Vec<(NodeName, (StageNode, HeadAccess))> = spec
        .workers
        .iter()
        .map(|(n, a)| (n.name().clone(), (n.clone(), a.clone())))
        .collect();
    let results = for_each_node(by_name.iter().map(|(n, _)| n.clone()), 0, |name| {
        let entry = by_name
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, e)| e.clone());
        let worker_wanted = &worker_wanted;
        let head_dir = head_dir.clone();
        let label = label.clone();
        let reporter = reporter.clone();
        let model = &spec.model;
        async move {
            let Some((node, access)) = entry else {
                return Err(StageError::Source {
                    node: name,
                    problem: "not a worker of this staging".into(),
                });
            };
            let dir = model.node_dir(&node.hf_home);
            let source = match access {
                HeadAccess::Ssh(args) => Source::Ssh {
                    args,
                    root: head_dir,
                },
                HeadAccess::Local => Source::Local { root: head_dir },
            };
            stage_node(
                &node,
                &dir,
                worker_wanted,
                &source,
                None,
                false,
                &label,
                opts,
                reporter,
            )
            .await
        }
    })
    .await;
    let mut reports = vec![head_report];
    match all_ok(results) {
        Ok(ok) => reports.extend(ok.into_iter().map(|(_, r)| r)),
        Err(failures) => return Err(StageError::Workers(failures)),
    }
    Ok(reports)
}

/// What one node lacks of the model (empty: it has everything).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NodeLacks {
    pub node: NodeName,
    pub dir: String,
    /// Files missing or not matching their hash, and snapshot links missing.
    pub missing: Vec<String>,
}

/// Checks, without copying anything, that every node of `spec` has the model. Returns what
/// each node lacks.
pub async fn verify(spec: &StageSpec) -> Result<Vec<NodeLacks>, StageError> {
    let opts = spec.options;
    let head_dir = spec.model.node_dir(&spec.head.hf_home);
    let wanted = match (&spec.model, &spec.resolved) {
        (ModelSource::Hub { .. }, Some(r)) => {
            Wanted::hub_layout(&r.commit, r.revision.as_str(), &r.files)
        }
        (ModelSource::Hub { repo, .. }, None) => {
            return Err(StageError::Source {
                node: spec.head.name().clone(),
                problem: format!("{repo} was not resolved on the Hub before the check"),
            });
        }
        (ModelSource::Local { path }, _) => {
            let scan = scan_node(spec.head.shell.as_ref(), &head_dir, opts.hash_jobs).await?;
            if scan.files.is_empty() {
                return Ok(vec![NodeLacks {
                    node: spec.head.name().clone(),
                    dir: path.clone(),
                    missing: vec!["the whole folder".to_string()],
                }]);
            }
            Wanted::folder(&scan).map_err(|problem| StageError::Source {
                node: spec.head.name().clone(),
                problem,
            })?
        }
    };
    let mut nodes = vec![spec.head.clone()];
    nodes.extend(spec.workers.iter().map(|(n, _)| n.clone()));
    let results = for_each_node(nodes.iter().map(|n| n.name().clone()), 0, |name| {
        let node = nodes.iter().find(|n| *n.name() == name).cloned();
        let wanted = &wanted;
        let model = &spec.model;
        async move {
            let Some(node) = node else {
                return Err(StageError::Source {
                    node: name,
                    problem: "not a node of this check".into(),
                });
            };
            let dir = model.node_dir(&node.hf_home);
            let scan = scan_node(node.shell.as_ref(), &dir, opts.hash_jobs).await?;
            let plan = diff(wanted, &scan, opts.range_size);
            let mut missing: Vec<String> = plan.fetch.iter().map(|f| f.path.clone()).collect();
            missing.extend(plan.links.keys().cloned());
            Ok(NodeLacks {
                node: name,
                dir,
                missing,
            })
        }
    })
    .await;
    all_ok(results)
        .map(|ok| ok.into_iter().map(|(_, l)| l).collect())
        .map_err(StageError::Workers)
}

async fn scan_node(shell: &dyn NodeShell, dir: &str, jobs: usize) -> Result<Scan, StageError> {
    let out = shell
        .run(&script::scan(dir, jobs), Vec::new(), None)
        .await?;
    if !out.success() {
        return Err(StageError::Scan {
            node: shell.node().clone(),
            dir: dir.to_string(),
            cause: format!("exit {}: {}", out.status, out.stderr_tail.trim()),
        });
    }
    parse_scan(&out.stdout).map_err(|cause| StageError::Scan {
        node: shell.node().clone(),
        dir: dir.to_string(),
        cause,
    })
}

/// Scans, fetches what is missing in parallel streams, verifies, links.
#[allow(clippy::too_many_arguments)]
async fn stage_node(
    node: &StageNode,
    dir: &str,
    wanted: &Wanted,
    source: &Source,
    header: Option<&str>,
    http: bool,
    label: &str,
    opts: StageOptions,
    reporter: Arc<dyn Reporter>,
) -> Result<NodeStaged, StageError> {
    let started = Instant::now();
    let shell = node.shell.as_ref();
    let name = node.name().clone();
    let scan = scan_node(shell, dir, opts.hash_jobs).await?;
    let mut plan = diff(wanted, &scan, opts.range_size);
    if http {
        for f in &mut plan.fetch {
            f.source = escape_path(&f.source);
        }
    }
    let missing = plan.missing_bytes();
    if !plan.fetch.is_empty() {
        let transfer: Arc<dyn Transfer> = Arc::from(reporter.transfer(&name, label, Some(missing)));
        let fetched = run_streams(shell, dir, source, header, &plan, opts, transfer.clone()).await;
        match &fetched {
            Ok(()) => transfer.finish(&format!("{} fetched", human_bytes(missing))),
            Err(_) => transfer.finish("failed"),
        }
        fetched?;
    }
    if !plan.is_noop() {
        finalize(shell, dir, &plan, opts.hash_jobs).await?;
    }
    Ok(NodeStaged {
        node: name,
        fetched_files: plan.fetch.len(),
        fetched_bytes: missing,
        resumed_bytes: plan.resumed_bytes(),
        present_files: plan.present_files,
        present_bytes: plan.present_bytes,
        links: plan.links.len(),
        millis: started.elapsed().as_millis() as u64,
    })
}

async fn run_streams(
    shell: &dyn NodeShell,
    dir: &str,
    source: &Source,
    header: Option<&str>,
    plan: &StagePlan,
    opts: StageOptions,
    transfer: Arc<dyn Transfer>,
) -> Result<(), StageError> {
    let streams = assign(plan, opts.streams);
    let script = script::fetch_stream(dir, source);
    let n = streams.len();
    let results: Vec<Result<(), StageError>> = stream::iter(streams)
        .map(|tasks| {
            let script = &script;
            let transfer = transfer.clone();
            async move {
                let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
                let input = stream_input(header, &tasks).into_bytes();
                let run = shell.run(script, input, Some(tx));
                let follow = async {
                    let mut first_err = None;
                    let mut done = 0usize;
                    while let Some(line) = rx.recv().await {
                        match parse_stream_line(&line) {
                            StreamLine::Ok { bytes, .. } => {
                                done += 1;
                                transfer.advance(bytes)
                            }
                            StreamLine::Err {
                                path,
                                offset,
                                message,
                            } => {
                                first_err.get_or_insert((path, offset, message));
                            }
                            StreamLine::Other(l) => tracing::debug!("{}: {l}", shell.node()),
                        }
                    }
                    (first_err, done)
                };
                let (out, (first_err, done)) = tokio::join!(run, follow);
                let out = out?;
                if let Some((path, offset, message)) = first_err {
                    return Err(fetch_error(shell.node(), source, &path, offset, &message));
                }
                if out.success() && done != tasks.len() {
                    return Err(StageError::Fetch {
                        node: shell.node().clone(),
                        path: "(stream)".into(),
                        message: format!(
                            "the stream ended after {done} of its {} ranges without an error",
                            tasks.len()
                        ),
                        fix: "; run again to resume (finished ranges are kept)".into(),
                    });
                }
                if !out.success() {
                    return Err(StageError::Fetch {
                        node: shell.node().clone(),
                        path: "(stream)".into(),
                        message: format!("exit {}: {}", out.status, out.stderr_tail.trim()),
                        fix: String::new(),
                    });
                }
                Ok(())
            }
        })
        .buffer_unordered(n.max(1))
        .collect()
        .await;
    results.into_iter().collect()
}

fn fetch_error(
    node: &NodeName,
    source: &Source,
    path: &str,
    offset: u64,
    message: &str,
) -> StageError {
    let fix = match source {
        Source::Http { .. } if message.contains("401") || message.contains("403") => {
            "; fix: check HF_TOKEN and that its account was granted access".to_string()
        }
        Source::Http { .. } => "; run again to resume (finished ranges are kept)".to_string(),
        Source::Ssh { args, .. }
            if message.contains("Permission denied") || message.contains("Host key") =>
        {
            format!(
                "; fix: run `spark-launch trust` so every node can reach the head with `ssh {}`",
                args.last().map(|s| s.as_str()).unwrap_or("<head>")
            )
        }
        Source::Ssh { .. } | Source::Local { .. } => {
            "; run again to resume (finished ranges are kept)".to_string()
        }
    };
    StageError::Fetch {
        node: node.clone(),
        path: if offset > 0 {
            format!("{path} at byte {offset}")
        } else {
            path.to_string()
        },
        message: message.to_string(),
        fix,
    }
}

/// Checks every fetched file's hash (in `jobs` parallel groups balanced by bytes: verifying a
/// 140 GB model one file after the other would take minutes), renames it into place, writes
/// links and texts.
async fn finalize(
    shell: &dyn NodeShell,
    dir: &str,
    plan: &StagePlan,
    jobs: usize,
) -> Result<(), StageError> {
    let n = jobs.max(1).min(plan.fetch.len().max(1));
    let mut parts: Vec<(u64, StagePlan)> = vec![(0, StagePlan::default()); n];
    let mut files = plan.fetch.clone();
    files.sort_by_key(|f| std::cmp::Reverse(f.size));
    for f in files {
        if let Some((load, part)) = parts.iter_mut().min_by_key(|(load, _)| *load) {
            *load += f.size;
            part.fetch.push(f);
        }
    }
    parts[0].1.links = plan.links.clone();
    parts[0].1.texts = plan.texts.clone();
    let script = script::finalize(dir);
    let outs: Vec<Result<super::shell::ShellOutput, ShellError>> = stream::iter(parts)
        .map(|(_, part)| {
            let script = &script;
            async move {
                shell
                    .run(script, finalize_input(&part).into_bytes(), None)
                    .await
            }
        })
        .buffer_unordered(n)
        .collect()
        .await;
    let mut bad = Vec::new();
    let mut failed = None;
    for out in outs {
        let out = out?;
        for line in out.stdout.lines() {
            if let FinalLine::Bad { path, got } = parse_final_line(line) {
                bad.push(format!("{path}: got {got}"));
            }
        }
        if !out.success() && failed.is_none() {
            failed = Some(format!("exit {}: {}", out.status, out.stderr_tail.trim()));
        }
    }
    if !bad.is_empty() {
        bad.sort();
        return Err(StageError::Verify {
            node: shell.node().clone(),
            bad,
        });
    }
    if let Some(cause) = failed {
        return Err(StageError::Finalize {
            node: shell.node().clone(),
            dir: dir.to_string(),
            cause,
        });
    }
    Ok(())
}

/// `1.5 GiB`, `320 MiB`, `12 KiB`, `7 B`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else if v < 10.0 {
        format!("{v:.1} {}", UNITS[u])
    } else {
        format!("{v:.0} {}", UNITS[u])
    }
}

/// `HF_TOKEN` (or the older `HUGGING_FACE_HUB_TOKEN`), else the token `hf auth login` saved.
pub fn hf_token() -> Option<String> {
    for var in ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"] {
        if let Ok(t) = std::env::var(var)
            && !t.trim().is_empty()
        {
            return Some(t.trim().to_string());
        }
    }
    let home = std::env::var_os("HF_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".cache/huggingface"))
        })?;
    std::fs::read_to_string(home.join("token"))
        .ok()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
}

/// `HF_ENDPOINT`, else huggingface.co.
pub fn hf_endpoint() -> String {
    std::env::var("HF_ENDPOINT")
        .ok()
        .filter(|e| !e.trim().is_empty())
        .unwrap_or_else(|| crate::model::DEFAULT_ENDPOINT.to_string())
}

/// Resolves a Hub model from the head (curl there), failing before anything starts when the
/// repo is gated and no token can read it.
pub async fn resolve_on_head(
    head: Arc<dyn NodeShell>,
    endpoint: &str,
    model: &ModelSource,
    token: Option<String>,
) -> Result<Option<Resolved>, hub::HubError> {
    match model {
        ModelSource::Hub { repo, revision, .. } => {
            let have_token = token.is_some();
            let transport = super::hub_curl::CurlHub::new(head, token);
            hub::resolve(&transport, endpoint, repo, revision, have_token)
                .await
                .map(Some)
        }
        ModelSource::Local { .. } => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_read_as_humans_write_them() {
        assert_eq!(human_bytes(7), "7 B");
        assert_eq!(human_bytes(12 * 1024), "12 KiB");
        assert_eq!(human_bytes(1536 * 1024 * 1024), "1.5 GiB");
    }
}
