//! `spark-launch doctor` as one call ([`run`]): the logs of a last run read and analysed, the
//! nodes resolved (a node that cannot be reached is a finding, not an error), the live
//! observations gathered, and the judgement (`doctor::run`) returned as a `doctor::Report`.
//! With only `--log`, no machine is touched.
//!
//! The live side is [`gather`]: doctor's script (planned and parsed by the pure
//! `doctor::live`) run on every reachable node at once through the node's shell. A node whose
//! script cannot run is a result for that node, never a failure of the whole check.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::derive::derive;
use crate::doctor::live::{self, GatherPlan, Observations, PeerLogin};
use crate::doctor::{self, CheckSelection, Inputs, Options, Report};
use crate::input::InputError;
use crate::node::{NodeName, for_each_node};
use crate::progress::Reporter;
use crate::resolve::{self, Fallback, Needs, Purpose, ResolveError, ResolvedCluster, Selection};
use crate::runtime::shell::run_within;

/// `doctor`, as the CLI parsed it.
#[derive(Clone, Debug)]
pub struct DoctorRequest {
    pub selection: Selection,
    /// What the checks look for (image, model, ports).
    pub options: Options,
    /// `--check` / `--skip`.
    pub checks: CheckSelection,
    /// Logs of a last run to analyse; alone (no `--snapshot`), no machine is touched.
    pub logs: Vec<PathBuf>,
}

/// Why doctor could not check. [`DoctorError::exit_code`] maps it.
#[derive(Debug, thiserror::Error)]
pub enum DoctorError {
    #[error("no check matches {unknown}; checks are: {known}")]
    UnknownChecks { unknown: String, known: String },
    #[error("cannot read the log: {0}")]
    Log(InputError),
    #[error(transparent)]
    Resolve(#[from] ResolveError),
}

impl DoctorError {
    /// 2 for the user's input, 1 for nodes that could not be resolved.
    pub fn exit_code(&self) -> u8 {
        match self {
            DoctorError::Resolve(e) if !e.is_invalid_input() => 1,
            _ => 2,
        }
    }
}

/// Runs doctor (see the module docs).
pub async fn run(req: &DoctorRequest, reporter: &Arc<dyn Reporter>) -> Result<Report, DoctorError> {
    let unknown = req.checks.unknown();
    if !unknown.is_empty() {
        let ids: Vec<&str> = doctor::checks().iter().map(|c| c.info.id).collect();
        return Err(DoctorError::UnknownChecks {
            unknown: unknown.join(", "),
            known: ids.join(", "),
        });
    }
    let mut logs = Vec::new();
    for p in &req.logs {
        let text = crate::input::read_text(p, crate::input::LOG).map_err(DoctorError::Log)?;
        logs.push(doctor::logs::analyse(&p.display().to_string(), &text));
    }
    let logs_only = !req.logs.is_empty() && req.selection.snapshots.is_empty();
    let mut report = if logs_only {
        Report {
            nodes: Vec::new(),
            summary: Default::default(),
            checks: Vec::new(),
            logs: Vec::new(),
        }
    } else {
        let needs = Needs::facts(Purpose::Plan)
            .with_fallback(Fallback::ThisMachineWarn)
            .with_unreachable(resolve::Unreachable::Report);
        let cluster = resolve::resolve(&req.selection, needs, reporter).await?;
        for w in &cluster.warnings {
            reporter.warn(w);
        }
        let options = with_footprint(&req.options).await;
        cluster
            .scope(async |cluster| {
                let live = if cluster.snapshots {
                    None
                } else {
                    Some(gather(cluster, &options, reporter).await)
                };
                let nodes = cluster.inputs();
                let derived = derive(&nodes);
                doctor::run(
                    &Inputs {
                        nodes: &nodes,
                        derived: &derived,
                        options: &options,
                        live: live.as_ref(),
                        unreachable: &cluster.unreachable,
                    },
                    &req.checks,
                )
            })
            .await
    };
    report.logs = logs;
    Ok(report)
}

/// The options with `--model`'s footprint (its `config.json` and weights' size), read from
/// this machine: the folder, this machine's Hugging Face cache, else the Hub (unless
/// `HF_HUB_OFFLINE=1`). What cannot be read is said by the fit check.
async fn with_footprint(options: &doctor::Options) -> doctor::Options {
    let mut o = options.clone();
    let source = match &o.model {
        Some(doctor::ModelRef::Path(p)) => {
            Some(crate::model::ModelSource::Local { path: p.clone() })
        }
        Some(doctor::ModelRef::Hf { repo, revision }) => {
            crate::model::ModelSource::parse(repo, revision.as_deref()).ok()
        }
        None => None,
    };
    if let Some(s) = source {
        o.footprint = Some(crate::staging::shape::model_from_here(&s).await.1);
    }
    o
}

/// How long one node's gather script may run (pings and SSH attempts have their own short
/// timeouts; this only stops a hung node from hanging doctor).
const GATHER_TIMEOUT: Duration = Duration::from_secs(180);

/// What each reachable node observed, or why it could not be checked.
pub async fn gather(
    cluster: &ResolvedCluster,
    options: &Options,
    reporter: &Arc<dyn Reporter>,
) -> BTreeMap<NodeName, Result<Observations, String>> {
    // How each node reaches the others: the first address the cluster knows for it.
    let peers: BTreeMap<NodeName, PeerLogin> = cluster
        .configured
        .iter()
        .filter_map(|c| {
            let host = c.addresses.first()?;
            Some((
                c.name.clone(),
                PeerLogin {
                    peer: c.name.clone(),
                    destination: match &c.user {
                        Some(u) => format!("{u}@{host}"),
                        None => host.clone(),
                    },
                    port: Some(c.port),
                },
            ))
        })
        .collect();
    let inputs = cluster.inputs();
    let plans: BTreeMap<NodeName, GatherPlan> = live::plan(
        &inputs,
        &peers,
        options.image.as_deref(),
        options.model.as_ref(),
    )
    .into_iter()
    .zip(&inputs)
    .map(|(p, n)| (n.name.clone(), p))
    .collect();
    let step = reporter.step("run the live checks on every node");
    let plans = &plans;
    let results = for_each_node(
        inputs.iter().map(|n| n.name.clone()),
        0,
        |node| async move {
            let plan = plans.get(&node).cloned().unwrap_or_default();
            let shell = cluster
                .node(&node)
                .and_then(|n| n.target.as_ref())
                .ok_or_else(|| "no live link".to_string())?
                .shell()
                .map_err(|e| e.to_string())?;
            let script = live::script(&plan).map_err(|e| e.to_string())?;
            let out = run_within(shell.as_ref(), &script, Vec::new(), GATHER_TIMEOUT)
                .await
                .map_err(|e| e.to_string())?;
            if !out.success() {
                return Err(format!(
                    "the doctor script failed (exit {}): {}",
                    out.status,
                    crate::runtime::shell::tail_lines(&out.stderr, 3)
                ));
            }
            live::parse(&plan, &out.stdout).map_err(|e| e.to_string())
        },
    )
    .await;
    let failed = results.iter().filter(|(_, r)| r.is_err()).count();
    if failed == 0 {
        step.ok();
    } else {
        step.fail(&format!(
            "{failed} of {} nodes could not be checked",
            results.len()
        ));
    }
    let mut results: BTreeMap<NodeName, Result<Observations, String>> =
        results.into_iter().collect();
    if let Some(image) = &options.image {
        read_nccl(cluster, image, &mut results, reporter).await;
    }
    results
}

/// `cluster.image-nccl`'s observation: the NCCL a container of `image` loads on every node
/// that was observed (through its Docker Engine; once per image digest, cached).
async fn read_nccl(
    cluster: &ResolvedCluster,
    image: &str,
    results: &mut BTreeMap<NodeName, Result<Observations, String>>,
    reporter: &Arc<dyn Reporter>,
) {
    let Ok(runtime) = cluster.runtime() else {
        return;
    };
    let probes: BTreeMap<NodeName, crate::runtime::libnccl::LoaderProbe> = results
        .iter()
        .filter(|(_, r)| r.is_ok())
        .map(|(n, _)| {
            (
                n.clone(),
                crate::runtime::libnccl::LoaderProbe {
                    image: image.to_string(),
                    ..Default::default()
                },
            )
        })
        .collect();
    if probes.is_empty() {
        return;
    }
    let step = reporter.step(&format!("read the NCCL of {image} on every node"));
    let reads = crate::apply::nccl::read_images(&runtime, &probes, 0).await;
    step.ok();
    for (node, read) in reads {
        if let Some(Ok(o)) = results.get_mut(&node) {
            o.nccl = Some(read);
        }
    }
}
