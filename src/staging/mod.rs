//! Model staging: make every node hold the model's files before anything starts.
//!
//! The head downloads once (HTTP ranges from the Hub, in parallel streams, resumable); then
//! every other node copies from the head over the fast link, all nodes at once. A copy is a few
//! long-lived streams per node pair (whole files spread over them by bytes): one SSH
//! connection and one sender on the head per stream, the file's bytes hashed on the worker as
//! they arrive (one read, no second pass), every range journaled so a killed copy resumes
//! losing at most the range in flight per file. The SSH cipher is chosen per pair
//! (`ssh::bulk_ciphers`), and a worker that is not the head's neighbour (a ring) reaches it
//! through the node between them (`model::route`, carried in [`HeadAccess`]). Each node
//! keeps the Hugging Face cache layout (blobs, snapshot symlinks, refs). Files already
//! present with the same size and hash are skipped. [`hub_curl`]: the Hub asked with curl on
//! the head (the head is the node that downloads).
//!
//! Effects only: what to fetch comes from `model::manifest::diff`, how from the scripts of
//! `model::script`. Progress: one byte-counted transfer per node through the `Reporter`.

pub mod hub_curl;
pub mod shape;

use std::sync::Arc;
use std::time::Instant;

use futures::stream::{self, StreamExt};
use serde::Serialize;

use crate::model::hub::{Resolved, escape_path, resolve_base};
use crate::model::manifest::{
    DEFAULT_RANGE, Scan, StagePlan, Wanted, assign, assign_files, diff, parse_scan,
};
use crate::model::route::CopyRoute;
use crate::model::script::{
    self, FinalLine, Source, StreamLine, copy_input, finalize_input, parse_final_line,
    parse_stream_line, stream_input,
};
use crate::model::{ModelSource, hub};
use crate::node::NodeName;
use crate::node::fanout::{NodeFailures, all_ok, for_each_node};
use crate::progress::{Reporter, Transfer, human_bytes};
use crate::runtime::shell::{NodeShell, ShellError};
use crate::ssh::bulk_ciphers;

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
            streams: 4,
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

/// How a worker reaches the head along `route` (`model::route`): the head's fabric address
/// when they are neighbours, through the node between them in a ring (`ProxyCommand ssh -W`:
/// the bytes pass that node's sshd, nothing is written there), else `control_addr`.
pub fn head_access(head: &NodeName, route: &CopyRoute, control_addr: &str) -> HeadAccess {
    match route {
        CopyRoute::Direct { head_addr } => head_hop(head, &head_addr.to_string()),
        CopyRoute::Control => head_hop(head, control_addr),
        CopyRoute::Relay {
            via,
            via_addr,
            head_addr,
        } => {
            let HeadAccess::Ssh(hop) = head_hop(via, &via_addr.to_string()) else {
                return HeadAccess::Local;
            };
            let mut proxy = vec!["ssh".to_string()];
            // The hop's own options, quoted for the shell ssh runs ProxyCommand with; its
            // destination is `-W`'s: the head's address as the relay sees it.
            proxy.extend(hop[..hop.len() - 1].iter().map(|a| script::quote(a)));
            proxy.push("-W".into());
            proxy.push("%h:%p".into());
            proxy.push(script::quote(via.as_str()));
            let HeadAccess::Ssh(mut args) = head_hop(head, &head_addr.to_string()) else {
                return HeadAccess::Local;
            };
            args.splice(
                0..0,
                [
                    "-o".to_string(),
                    format!("ProxyCommand={}", proxy.join(" ")),
                ],
            );
            HeadAccess::Ssh(args)
        }
    }
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

impl NodeStaged {
    /// What a worker's staging did, from its plan (what was missing, resumed and present) and
    /// when it started.
    fn of_plan(node: NodeName, plan: &StagePlan, started: Instant) -> NodeStaged {
        NodeStaged {
            node,
            fetched_files: plan.fetch.len(),
            fetched_bytes: plan.missing_bytes(),
            resumed_bytes: plan.resumed_bytes(),
            present_files: plan.present_files,
            present_bytes: plan.present_bytes,
            links: plan.links.len(),
            millis: started.elapsed().as_millis() as u64,
        }
    }
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
        // A single file (a GGUF model) read by the head alone: it must be there, nothing
        // moves.
        (ModelSource::Local { path }, _) if spec.workers.is_empty() => {
            let started = Instant::now();
            match file_size(head.shell.as_ref(), path).await? {
                Some(size) => {
                    return Ok(vec![NodeStaged {
                        node: head.name().clone(),
                        fetched_files: 0,
                        fetched_bytes: 0,
                        resumed_bytes: 0,
                        present_files: 1,
                        present_bytes: size,
                        links: 0,
                        millis: started.elapsed().as_millis() as u64,
                    }]);
                }
                None => local_head(head, &head_dir, path, opts).await?,
            }
        }
        (ModelSource::Local { path }, _) => local_head(head, &head_dir, path, opts).await?,
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
    let head_aes = cpu_has_aes(head.shell.as_ref()).await;
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
                HeadAccess::Ssh(args) => {
                    // The bulk cipher for this pair goes first: ssh takes the first value.
                    let worker_aes = cpu_has_aes(node.shell.as_ref()).await;
                    let mut all = vec![
                        "-o".to_string(),
                        format!("Ciphers={}", bulk_ciphers(head_aes, worker_aes)),
                    ];
                    all.extend(args);
                    Source::Ssh {
                        args: all,
                        root: head_dir,
                    }
                }
                HeadAccess::Local => Source::Local { root: head_dir },
            };
            copy_node(&node, &dir, worker_wanted, &source, &label, opts, reporter).await
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

/// The head's own model folder: scanned, it must hold files; what the workers must match.
async fn local_head(
    head: &StageNode,
    head_dir: &str,
    path: &str,
    opts: StageOptions,
) -> Result<(NodeStaged, Wanted), StageError> {
    let started = Instant::now();
    let scan = scan_node(head.shell.as_ref(), head_dir, opts.hash_jobs).await?;
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
    Ok((report, wanted))
}

/// The size of `path` on the node when it is a regular file (links followed); `None` when it
/// is not one (a folder, or missing).
async fn file_size(shell: &dyn NodeShell, path: &str) -> Result<Option<u64>, StageError> {
    let q = script::quote(path);
    let out = shell
        .run(
            &format!("if [ -f {q} ]; then stat -L -c %s -- {q}; fi"),
            Vec::new(),
            None,
        )
        .await?;
    Ok(out.stdout.trim().parse().ok())
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
        // A single file read by the head alone: there or not.
        (ModelSource::Local { path }, _)
            if spec.workers.is_empty()
                && file_size(spec.head.shell.as_ref(), path).await?.is_some() =>
        {
            return Ok(vec![NodeLacks {
                node: spec.head.name().clone(),
                dir: path.clone(),
                missing: Vec::new(),
            }]);
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
            cause: format!("exit {}: {}", out.status, out.stderr_tail().trim()),
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
    Ok(NodeStaged::of_plan(name, &plan, started))
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
                        message: format!("exit {}: {}", out.status, out.stderr_tail().trim()),
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

/// Whether a node's CPU has AES instructions (`aes` in `/proc/cpuinfo`'s flags or features);
/// `None` when it could not be read.
async fn cpu_has_aes(shell: &dyn NodeShell) -> Option<bool> {
    let out = shell.run(script::CPU_AES, Vec::new(), None).await.ok()?;
    match out.stdout.trim() {
        "aes" => Some(true),
        "none" => Some(false),
        _ => None,
    }
}

/// A worker's copy from the head: scan, then whole files through a few long-lived streams,
/// each hashed as it arrives and renamed into place by the stream itself; then links and refs.
async fn copy_node(
    node: &StageNode,
    dir: &str,
    wanted: &Wanted,
    source: &Source,
    label: &str,
    opts: StageOptions,
    reporter: Arc<dyn Reporter>,
) -> Result<NodeStaged, StageError> {
    let started = Instant::now();
    let shell = node.shell.as_ref();
    let name = node.name().clone();
    let scan = scan_node(shell, dir, opts.hash_jobs).await?;
    let plan = diff(wanted, &scan, opts.range_size);
    let missing = plan.missing_bytes();
    if !plan.fetch.is_empty() {
        let transfer: Arc<dyn Transfer> = Arc::from(reporter.transfer(&name, label, Some(missing)));
        let copied = run_copy_streams(shell, dir, source, &plan, opts, transfer.clone()).await;
        match &copied {
            Ok(()) => transfer.finish(&format!("{} copied", human_bytes(missing))),
            Err(_) => transfer.finish("failed"),
        }
        copied?;
    }
    if !plan.links.is_empty() || !plan.texts.is_empty() {
        let rest = StagePlan {
            links: plan.links.clone(),
            texts: plan.texts.clone(),
            ..StagePlan::default()
        };
        finalize(shell, dir, &rest, 1).await?;
    }
    Ok(NodeStaged::of_plan(name, &plan, started))
}

async fn run_copy_streams(
    shell: &dyn NodeShell,
    dir: &str,
    source: &Source,
    plan: &StagePlan,
    opts: StageOptions,
    transfer: Arc<dyn Transfer>,
) -> Result<(), StageError> {
    let streams = assign_files(plan, opts.streams);
    let script = script::copy_stream(dir, source);
    let n = streams.len();
    let results: Vec<Result<Vec<String>, StageError>> = stream::iter(streams)
        .map(|files| {
            let script = &script;
            let transfer = transfer.clone();
            async move {
                let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
                let input = copy_input(&files).into_bytes();
                let run = shell.run(script, input, Some(tx));
                let follow = async {
                    let mut first_err = None;
                    let mut done = 0usize;
                    let mut bad = Vec::new();
                    while let Some(line) = rx.recv().await {
                        match parse_stream_line(&line) {
                            StreamLine::Ok { bytes, .. } => transfer.advance(bytes),
                            StreamLine::Err {
                                path,
                                offset,
                                message,
                            } => {
                                first_err.get_or_insert((path, offset, message));
                            }
                            StreamLine::Other(l) => match parse_final_line(&l) {
                                FinalLine::Done(_) => done += 1,
                                FinalLine::Bad { path, got } => {
                                    bad.push(format!("{path}: got {got}"))
                                }
                                FinalLine::Other(l) => tracing::debug!("{}: {l}", shell.node()),
                            },
                        }
                    }
                    (first_err, done, bad)
                };
                let (out, (first_err, done, bad)) = tokio::join!(run, follow);
                let out = out?;
                if let Some((path, offset, message)) = first_err {
                    return Err(fetch_error(shell.node(), source, &path, offset, &message));
                }
                if !bad.is_empty() {
                    return Ok(bad);
                }
                if !out.success() || done != files.len() {
                    return Err(StageError::Fetch {
                        node: shell.node().clone(),
                        path: "(stream)".into(),
                        message: format!(
                            "the stream ended after {done} of its {} files (exit {}): {}",
                            files.len(),
                            out.status,
                            out.stderr_tail().trim()
                        ),
                        fix: "; run again to resume (finished ranges are kept)".into(),
                    });
                }
                Ok(Vec::new())
            }
        })
        .buffer_unordered(n.max(1))
        .collect()
        .await;
    let mut bad = Vec::new();
    for r in results {
        bad.extend(r?);
    }
    if !bad.is_empty() {
        bad.sort();
        return Err(StageError::Verify {
            node: shell.node().clone(),
            bad,
        });
    }
    Ok(())
}

fn fetch_error(
    node: &NodeName,
    source: &Source,
    path: &str,
    offset: u64,
    message: &str,
) -> StageError {
    let fix = match source {
        // A link or a foreign file in the model folder, left untouched: the message says what
        // to remove, and running again alone would not help.
        _ if message.starts_with("refused ") => String::new(),
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
    let outs: Vec<Result<crate::runtime::shell::ShellOutput, ShellError>> = stream::iter(parts)
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
            failed = Some(format!("exit {}: {}", out.status, out.stderr_tail().trim()));
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
/// repo is gated and no token can read it; of a GGUF spec, only the file(s) it picks are kept
/// (so only they are staged), or it fails naming the repository's GGUF files.
pub async fn resolve_on_head(
    head: Arc<dyn NodeShell>,
    endpoint: &str,
    model: &ModelSource,
    token: Option<String>,
) -> Result<Option<Resolved>, hub::HubError> {
    match model {
        ModelSource::Hub {
            repo,
            revision,
            gguf,
            ..
        } => {
            let have_token = token.is_some();
            let transport = hub_curl::CurlHub::new(head, token);
            let resolved = hub::resolve(&transport, endpoint, repo, revision, have_token).await?;
            match gguf {
                Some(spec) => resolved.picking(spec).map(Some),
                None => Ok(Some(resolved)),
            }
        }
        ModelSource::Local { .. } => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relayed_copy_reaches_the_head_through_the_node_between_them() {
        let head = NodeName::new("n1").unwrap();
        let route = CopyRoute::Relay {
            via: NodeName::new("n2").unwrap(),
            via_addr: "169.254.12.1".parse().unwrap(),
            head_addr: "169.254.11.1".parse().unwrap(),
        };
        let HeadAccess::Ssh(args) = head_access(&head, &route, "10.0.0.1") else {
            panic!("not ssh")
        };
        assert_eq!(args[0], "-o");
        let proxy = &args[1];
        assert!(proxy.starts_with("ProxyCommand=ssh "), "{proxy}");
        assert!(proxy.contains("'HostName=169.254.12.1'"), "{proxy}");
        assert!(proxy.contains("'HostKeyAlias=n2'"), "{proxy}");
        assert!(proxy.ends_with(" -W %h:%p 'n2'"), "{proxy}");
        assert!(args.contains(&"HostName=169.254.11.1".to_string()));
        assert!(args.contains(&"HostKeyAlias=n1".to_string()));
        assert_eq!(args.last().map(String::as_str), Some("n1"));
    }
}
