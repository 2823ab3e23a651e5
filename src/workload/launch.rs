//! Every launching command as data: a [`LaunchRequest`] (what the user asked for: `run`,
//! `nccl-test`, `nccl-build`, a serving engine, or a profile mapped to one of them), what the
//! pre-plan step looked up on live nodes ([`Lookups`]: each node's `$HOME`, the Hub's answer for
//! the model), and the one function that turns them and the nodes' facts into the one
//! [`LaunchPlan`] that `--dry-run` prints and the executor runs.
//!
//! Pure: no network, no Docker, no files. The effects (resolving nodes, the lookups, running
//! the plan) are `launch`'s.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::derive::{self, NodeInput};
use crate::model::hub::Resolved;
use crate::model::shape::ShapeLookup;
use crate::node::{NodeName, Role};

use super::engines::{EngineKind, EngineOptions, HubFiles};
use super::job_ssh::JobSshKeys;
use super::nccl_build::{self, BuildOptions, BuildPlan, BuildPlanError};
use super::nccl_lib::{self, NcclFrom, NcclReads};
use super::nccl_test::{self, NcclTestError, NcclTestOptions, NcclTestPlan};
use super::run::{self, ContainerOverrides, RunRefusal, RunRequest};
use super::serve::{NodePaths, ServeOptions, ServePlan, ServeRefusal};
use super::skeleton::{self, LaunchPart, ServeInput};

/// `nccl-test` as asked.
#[derive(Clone, Debug, PartialEq)]
pub struct NcclTestRequest {
    pub options: NcclTestOptions,
    /// One rank per GPU: this many per node instead of what the probe found.
    pub gpus_per_node: Option<u32>,
    pub overrides: ContainerOverrides,
    /// `--allow-old-nccl`: start a ring on an NCCL older than 2.30.7 anyway.
    pub allow_old_nccl: bool,
}

/// A serving engine (or a serving profile) as asked.
#[derive(Clone, Debug, PartialEq)]
pub struct ServeRequest {
    pub engine: EngineKind,
    /// What every engine takes (defaults filled in: `ServeOptions::new`).
    pub serve: ServeOptions,
    /// What this engine takes beyond them (`--ray`, `--ssh-port`, the LLM-API options...).
    pub tuning: EngineOptions,
    /// `--gpus-per-node` was given (else the drivers' count is used when every node agrees).
    pub gpus_per_node_given: bool,
    /// `--hf-home`: the cache on every node instead of `~/.cache/huggingface`.
    pub hf_home: Option<String>,
    /// `--nccl-from IMAGE|PATH`: this NCCL first on every container's loader path.
    pub nccl_from: Option<NcclFrom>,
    /// `--allow-old-nccl`: start a ring on an NCCL older than 2.30.7 anyway.
    pub allow_old_nccl: bool,
    /// `--api-key` (or a profile's `api_key`), resolved into [`Lookups::api_key`] before
    /// planning.
    pub api_key: Option<super::endpoint::ApiKeyAsk>,
    /// A community recipe's part (`up RECIPE`): its per-node environment, mods, served name.
    pub recipe: Option<Box<super::recipe_part::RecipePart>>,
    /// What laying the sources over each other had to say (a flag replacing a file's value).
    pub warnings: Vec<String>,
}

/// One launching command, as asked.
#[derive(Clone, Debug, PartialEq)]
pub enum LaunchRequest {
    Run(RunRequest),
    NcclTest(NcclTestRequest),
    NcclBuild(BuildOptions),
    Serve(Box<ServeRequest>),
}

impl LaunchRequest {
    /// What the engine refuses in the request as asked, checked before any node is resolved,
    /// anything is looked up or a key file is written.
    pub fn refuse_before_nodes(&self) -> Result<(), LaunchRefusal> {
        if let LaunchRequest::Serve(r) = self {
            skeleton::refusals_as_asked(r.engine, &r.serve, &r.tuning, r.api_key.is_some())?;
        }
        Ok(())
    }

    /// Whether a live run looks things up on the nodes before planning (`$HOME`, the Hub).
    pub fn needs_lookups(&self) -> bool {
        matches!(self, LaunchRequest::Serve(_))
    }

    /// The images whose NCCL a live run reads before planning, by node (with the loader
    /// variables the job sets), and `--nccl-from`. Empty for jobs without containers and for
    /// engines that load no NCCL.
    pub fn nccl_asks(
        &self,
        nodes: &[NodeInput],
    ) -> (BTreeMap<NodeName, nccl_lib::ImageAsk>, Option<&NcclFrom>) {
        let ask = |image: String, env: &BTreeMap<String, String>| nccl_lib::ImageAsk {
            image,
            ld_library_path: env.get("LD_LIBRARY_PATH").cloned(),
            ld_preload: env.get("LD_PRELOAD").cloned(),
        };
        match self {
            // Host processes load no image, and an engine without NCCL has none to read.
            LaunchRequest::Serve(s)
                if s.serve.runtime == crate::plan::RuntimeKind::Host
                    || !s.engine.engine().uses_nccl() =>
            {
                (BTreeMap::new(), None)
            }
            LaunchRequest::Serve(s) => {
                // A recipe's loader variables reach the containers too (under `--env`).
                let mut env: BTreeMap<String, String> = s
                    .recipe
                    .as_ref()
                    .map(|r| {
                        r.env
                            .0
                            .iter()
                            .map(|(k, v)| (k.clone(), v.template()))
                            .collect()
                    })
                    .unwrap_or_default();
                env.extend(s.serve.env.clone());
                (
                    nodes
                        .iter()
                        .map(|n| (n.name.clone(), ask(s.serve.image.clone(), &env)))
                        .collect(),
                    s.nccl_from.as_ref(),
                )
            }
            LaunchRequest::NcclTest(t) if t.options.runtime == crate::plan::RuntimeKind::Docker => {
                (
                    nodes
                        .iter()
                        .filter_map(|n| {
                            let image = match &t.options.image {
                                Some(i) => i.clone(),
                                None => {
                                    let arch = n.facts.arch.as_deref()?;
                                    nccl_build::default_image(nccl_build::CpuArch::from_uname(
                                        arch,
                                    )?)
                                }
                            };
                            Some((n.name.clone(), ask(image, &BTreeMap::new())))
                        })
                        .collect(),
                    None,
                )
            }
            _ => (BTreeMap::new(), None),
        }
    }

    /// The job's name when it runs MPI between containers over SSH (`trtllm`, `nccl-test` in
    /// containers): the pre-plan step then makes the job's own SSH identity.
    pub fn mpi_in_containers(&self) -> Option<&crate::plan::JobName> {
        match self {
            LaunchRequest::Serve(s) if s.engine.engine().job_ssh() => Some(&s.serve.job),
            LaunchRequest::NcclTest(t) if t.options.runtime == crate::plan::RuntimeKind::Docker => {
                Some(&t.options.job)
            }
            _ => None,
        }
    }

    /// The model a serving request resolves on the Hub before planning.
    pub fn model(&self) -> Option<&crate::model::ModelSource> {
        match self {
            LaunchRequest::Serve(s) => Some(&s.serve.model),
            _ => None,
        }
    }
}

/// What the pre-plan step looked up on live nodes. Empty for a dry run on snapshots: the plan
/// then keeps `~/…` paths and an unresolved revision, and says so in its notes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Lookups {
    /// `$HOME` of the SSH user on each node.
    pub homes: BTreeMap<NodeName, String>,
    /// The Hub's answer for a Hub model: its commit and files.
    pub model: Option<Resolved>,
    /// The NCCL each node's image loads, and `--nccl-from`'s library; `None` when nothing was
    /// read (a dry run on snapshots).
    pub nccl: Option<NcclReads>,
    /// The model's `config.json`, for the tp/pp check (heads, KV heads, layers).
    pub shape: ShapeLookup,
    /// What the model's `config.json` and weights say about its memory (KV cache per token,
    /// the weights' bytes), for the memory plan.
    pub footprint: crate::model::footprint::Footprint,
    /// The API key `--api-key` asked for, resolved (`auto` read from or written to its file).
    pub api_key: Option<super::endpoint::ApiKey>,
    /// The job's own SSH identity for MPI between containers, generated for this launch
    /// (`None`: a plan made without the pre-plan step uses [`JobSshKeys::placeholder`]).
    pub job_ssh: Option<JobSshKeys>,
}

/// The one plan of a launching command: what `--dry-run` prints (as before, per workload) and
/// what the executor runs.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum LaunchPlan {
    Run(crate::plan::JobPlan),
    NcclTest(Box<NcclTestPlan>),
    NcclBuild(BuildPlan),
    Serve(Box<ServePlan>),
}

impl LaunchPlan {
    /// The job the executor runs (`None` for image builds).
    pub fn job(&self) -> Option<&crate::plan::JobPlan> {
        match self {
            LaunchPlan::Run(p) => Some(p),
            LaunchPlan::NcclTest(p) => Some(&p.plan),
            LaunchPlan::Serve(p) => Some(&p.job),
            LaunchPlan::NcclBuild(_) => None,
        }
    }
}

/// A plan and what the user should read before it runs (derive's warnings, by node).
#[derive(Clone, Debug, PartialEq)]
pub struct Planned {
    pub plan: LaunchPlan,
    pub warnings: Vec<String>,
}

impl Planned {
    /// `--secret-env NAME`: marks those variables secret in every env of the job
    /// (`plan::secret::mark`), so the printed plan and the executed one agree.
    pub fn mark_secrets(&mut self, names: &[String]) {
        let job = match &mut self.plan {
            LaunchPlan::Run(p) => p,
            LaunchPlan::NcclTest(p) => &mut p.plan,
            LaunchPlan::Serve(p) => &mut p.job,
            LaunchPlan::NcclBuild(_) => return,
        };
        crate::plan::secret::mark(job, names);
    }
}

/// Why a launch is refused before anything starts (exit 2). Every variant names the fix.
#[derive(Debug, thiserror::Error)]
pub enum LaunchRefusal {
    #[error(transparent)]
    Run(#[from] RunRefusal),
    #[error(transparent)]
    NcclTest(#[from] NcclTestError),
    #[error(transparent)]
    Build(#[from] BuildPlanError),
    #[error(transparent)]
    Serve(#[from] ServeRefusal),
    #[error(transparent)]
    Derive(#[from] derive::Refusal),
    #[error("{}", nccl_text(.0))]
    Nccl(Vec<crate::libnccl::check::NcclProblem>),
    #[error("{0}")]
    Input(String),
}

fn nccl_text(problems: &[crate::libnccl::check::NcclProblem]) -> String {
    let n = problems.len();
    let mut out = format!(
        "refusing to start: {n} problem{} with the NCCL the containers would load",
        if n == 1 { "" } else { "s" }
    );
    for p in problems {
        out.push_str(&format!(
            "\n  {}\n    fix: {}",
            p.problem.what, p.problem.fix
        ));
    }
    out
}

/// Plans `request` on the resolved nodes `names` (head first) with what probe saw on them
/// (`facts`, head first; empty for a request that needs none: `run`) and what the pre-plan
/// step looked up.
pub fn plan(
    request: &LaunchRequest,
    names: &[NodeName],
    facts: &[NodeInput],
    lookups: &Lookups,
) -> Result<Planned, LaunchRefusal> {
    match request {
        LaunchRequest::Run(r) => {
            let names: Vec<(NodeName, Role)> = names
                .iter()
                .enumerate()
                .map(|(i, n)| (n.clone(), if i == 0 { Role::Head } else { Role::Worker }))
                .collect();
            Ok(Planned {
                plan: LaunchPlan::Run(run::plan(r, &names)?),
                warnings: Vec::new(),
            })
        }
        LaunchRequest::NcclBuild(opts) => {
            let archs: Vec<(NodeName, Option<String>)> = facts
                .iter()
                .map(|n| (n.name.clone(), n.facts.arch.clone()))
                .collect();
            // The one derive of this request: only the ring matters here.
            let ring = facts.len() >= 3
                && derive::derive(facts)
                    .map(|c| c.topology == derive::topology::Topology::Ring)
                    .unwrap_or(false);
            let notes = nccl_build::ring_check(opts, ring)?;
            let mut build = nccl_build::build_plan(&archs, opts)?;
            build.notes = notes;
            Ok(Planned {
                plan: LaunchPlan::NcclBuild(build),
                warnings: Vec::new(),
            })
        }
        LaunchRequest::NcclTest(r) => plan_nccl_test(r, facts, lookups),
        LaunchRequest::Serve(r) => plan_serve(r, facts, lookups),
    }
}

/// The job's SSH identity the pre-plan step generated, or the dry run's placeholder.
fn job_keys(lookups: &Lookups) -> JobSshKeys {
    lookups
        .job_ssh
        .clone()
        .unwrap_or_else(JobSshKeys::placeholder)
}

fn plan_nccl_test(
    r: &NcclTestRequest,
    inputs: &[NodeInput],
    lookups: &Lookups,
) -> Result<Planned, LaunchRefusal> {
    let mut warnings = Vec::new();
    let cluster = match derive::derive(inputs) {
        Ok(c) => Some(c),
        // One node needs no fabric: its ranks talk over NVLink/PCIe/shared memory.
        Err(refusal) if inputs.len() == 1 => {
            warnings.push(format!(
                "{}: no fabric environment derived ({}); a single node needs none",
                inputs[0].name,
                refusal
                    .violations
                    .first()
                    .map(|v| v.problem.what.clone())
                    .unwrap_or_default()
            ));
            None
        }
        Err(refusal) => return Err(refusal.into()),
    };
    if let Some(c) = &cluster {
        for n in &c.nodes {
            for w in &n.warnings {
                warnings.push(format!("{}: {w}", n.name));
            }
        }
    }
    let nodes = nccl_test::test_nodes(inputs, cluster.as_ref(), r.gpus_per_node);
    let keys = job_keys(lookups);
    let topology = cluster.as_ref().map(|c| c.topology);
    let ring = topology == Some(derive::topology::Topology::Ring);
    let rule = nccl_lib::rule(ring, r.allow_old_nccl, None, false, inputs.first());
    let in_containers: Vec<NodeName> = if r.options.runtime == crate::plan::RuntimeKind::Docker {
        nodes.iter().map(|n| n.name.clone()).collect()
    } else {
        Vec::new()
    };
    let nccl_steps = nccl_lib::steps(&in_containers, None, &rule);
    let mut plan = nccl_test::plan(&nodes, topology, &r.options, &keys, nccl_steps)?;
    r.overrides.apply(&mut plan.plan);
    if ring {
        warnings.extend(nccl_lib::direction_warnings(inputs));
    }
    let nccl = nccl_lib::section(
        &mut plan.plan.nodes,
        plan.plan.runtime,
        None,
        rule,
        lookups.nccl.as_ref(),
        inputs,
    )
    .map_err(LaunchRefusal::Nccl)?;
    warnings.extend(nccl.warnings.iter().cloned());
    plan.nccl = Some(nccl);
    Ok(Planned {
        plan: LaunchPlan::NcclTest(Box::new(plan)),
        warnings,
    })
}

/// The request's options with the GPUs per node the drivers list (unless given).
fn resolved_options(r: &ServeRequest, inputs: &[NodeInput]) -> Result<ServeOptions, LaunchRefusal> {
    let mut o = r.serve.clone();
    if !r.gpus_per_node_given {
        match super::serve::gpus_from_facts(inputs) {
            Ok(Some(n)) => o.gpus_per_node = n,
            Ok(None) => {}
            Err(p) => return Err(ServeRefusal { problems: vec![p] }.into()),
        }
    }
    Ok(o)
}

/// The rest of the input, after the shape was checked: the API key, the paths, the commit.
fn looked_up_options(
    r: &ServeRequest,
    mut o: ServeOptions,
    inputs: &[NodeInput],
    lookups: &Lookups,
) -> Result<ServeOptions, LaunchRefusal> {
    if r.api_key.is_some() {
        let key = lookups.api_key.clone().ok_or_else(|| {
            LaunchRefusal::Input("--api-key was not resolved before planning".into())
        })?;
        o.api_key = Some(key);
    }
    for n in inputs {
        let mut p = NodePaths::default();
        if let Some(home) = lookups.homes.get(&n.name) {
            p.hf_home = format!("{home}/.cache/huggingface");
            p.runtime_cache = super::runtime_cache::root_under(home);
        }
        if let Some(h) = &r.hf_home {
            p.hf_home = h.clone();
        }
        o.paths.insert(n.name.clone(), p);
    }
    if let Some(resolved) = &lookups.model {
        o.model = resolved.source();
    }
    Ok(o)
}

fn plan_serve(
    r: &ServeRequest,
    inputs: &[NodeInput],
    lookups: &Lookups,
) -> Result<Planned, LaunchRefusal> {
    let o = resolved_options(r, inputs)?;
    let shape_warning = check_shape(r.engine, &o, &lookups.shape)?;
    let o = looked_up_options(r, o, inputs, lookups)?;
    let keys = job_keys(lookups);
    let skeleton::Served { plan, mut warnings } = skeleton::plan(&ServeInput {
        engine: r.engine,
        opts: &o,
        tuning: &r.tuning,
        nodes: inputs,
        keys: &keys,
        launch: Some(LaunchPart {
            listing: lookups.model.as_ref(),
            nccl_from: r.nccl_from.as_ref(),
            allow_old_nccl: r.allow_old_nccl,
            reads: lookups.nccl.as_ref(),
            footprint: Some(&lookups.footprint),
        }),
        recipe: r.recipe.as_deref(),
    })?;
    // What laying the request's sources together said comes first.
    warnings.splice(0..0, r.warnings.iter().cloned());
    warnings.extend(shape_warning);
    if let Some(head) = plan.nodes.first() {
        warnings.extend(super::endpoint::open_warning(
            o.bind,
            o.api_key.is_some(),
            head.as_str(),
            o.port,
        ));
    }
    Ok(Planned {
        plan: LaunchPlan::Serve(Box::new(plan)),
        warnings,
    })
}

/// tp and pp against the model's heads, KV heads and layers: a refusal naming the numbers
/// when they do not fit, a warning when `config.json` could not be read (the engine then finds
/// out itself), nothing when they fit.
fn check_shape(
    engine: EngineKind,
    o: &ServeOptions,
    shape: &ShapeLookup,
) -> Result<Option<String>, ServeRefusal> {
    // GGUF file(s) are split over the nodes by layers in proportion to their memory: no tp or
    // pp to check.
    if engine.engine().hub_files() == HubFiles::Gguf {
        return Ok(None);
    }
    let model = o.model.served_name();
    match shape {
        ShapeLookup::Read(s) => {
            let misfits = s.misfits(&model, u64::from(o.tp), u64::from(o.pp));
            if misfits.is_empty() {
                Ok(None)
            } else {
                Err(ServeRefusal { problems: misfits })
            }
        }
        ShapeLookup::Unreadable(why) => Ok(Some(format!(
            "tp {} and pp {} were not checked against {model}'s heads and layers: {why}",
            o.tp, o.pp
        ))),
        ShapeLookup::NotLooked => Ok(Some(format!(
            "tp {} and pp {} were not checked against {model}'s heads and layers: its config.json was not read",
            o.tp, o.pp
        ))),
    }
}
