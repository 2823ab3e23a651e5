//! The serving plan in one pass. Every engine's job has the same skeleton, built here once:
//!
//! ```text
//! [memory plan: refused here when it does not fit; every container capped]
//! CheckPorts ─► CheckReachable* ─► EnsureImage ─► [NCCL: EnsureImage StageNccl] CheckNccl
//!   ─► StageModel ─► [StageModel of each draft and recipe model] ─► Start ─► the engine's waits
//!   (WaitRay) ─► WaitServing
//! ```
//!
//! The engine decides two things of the skeleton's shape: whether there is an NCCL part at
//! all (the NCCL steps, the plan's NCCL section with its verdict: only for an engine whose
//! ranks use NCCL), and the order of the start ([`StartOrder`]: every node at once, or the
//! workers' servers first, each waited for on its port, then the head).
//!
//! The input is complete before the first step is written ([`ServeInput`]: the resolved
//! options, the nodes' facts, the job's SSH keys and what the launch looked up); the nodes are
//! selected and derived once (the topology comes with that derive), and the engine
//! ([`ServingEngine`]) supplies only what differs: its ports, its refusals, each rank's
//! command, its own waits and its mode.
//!
//! Pure: the input in, the plan (or every reason to refuse it) out.

use std::collections::BTreeMap;

use super::endpoint::bind_addr;
use super::engines::{
    ApiKeySupport, EngineKind, EngineOptions, EnginePort, HubFiles, ModelOn, PortOn, PortReach,
    RankInput, ServingEngine, StartOrder,
};
use super::job_ssh::JobSshKeys;
use super::launch::LaunchRefusal;
use super::memory;
use super::nccl_lib::{self, NcclFrom, NcclPlan, NcclReads};
use super::recipe_part::{self, RecipePart};
use super::runtime_cache::RuntimeCache;
use super::serve::{
    self, Problem, Selected, ServeOptions, ServePlan, ServeRefusal, container, distinct_ports,
    endpoint, path_notes, select,
};
use super::steps;
use crate::derive::{NodeEnv, NodeInput, topology::Topology};
use crate::model::ModelSource;
use crate::model::footprint::Footprint;
use crate::model::hub::Resolved;
use crate::model::route::{CopyRoute, copy_routes};
use crate::node::{NodeName, Role};
use crate::plan::{ContainerSpec, JobPlan, Launch, NodePlan, NodePorts, RuntimeKind, Step};
use crate::workload::recipe_env::RecipeNode;

/// Everything one serving plan is made from.
pub struct ServeInput<'a> {
    pub engine: EngineKind,
    /// Resolved: the paths, the model's commit, the API key and the GPUs per node are known.
    pub opts: &'a ServeOptions,
    pub tuning: &'a EngineOptions,
    /// Every node of the cluster, head first (the first that fit `tp × pp` serve).
    pub nodes: &'a [NodeInput],
    /// The job's own SSH identity (MPI between containers).
    pub keys: &'a JobSshKeys,
    /// What the launch adds; `None`: the engine's plan alone (no copy routes, no NCCL).
    pub launch: Option<LaunchPart<'a>>,
    /// A community recipe's environment, mods and served name (`None`: no recipe).
    pub recipe: Option<&'a RecipePart>,
}

/// What a launch adds to the engine's plan: the Hub's listing for the staging (with the copy
/// routes over the fabric), and the NCCL every container will load.
#[derive(Clone, Copy, Default)]
pub struct LaunchPart<'a> {
    /// The Hub's answer for a Hub model (`None`: a folder, or a dry run on snapshots).
    pub listing: Option<&'a Resolved>,
    pub nccl_from: Option<&'a NcclFrom>,
    pub allow_old_nccl: bool,
    /// What the pre-plan lookup read (`None`: a dry run on snapshots).
    pub reads: Option<&'a NcclReads>,
    /// What the model's files say about its memory (`None`: not read).
    pub footprint: Option<&'a Footprint>,
}

/// A serving plan and what the user should read before it runs.
pub struct Served {
    pub plan: ServePlan,
    /// Derive's warnings (by node), the ring's cabling, the NCCL's.
    pub warnings: Vec<String>,
}

/// Plans the serving job of `input` (see the module docs).
pub fn plan(input: &ServeInput<'_>) -> Result<Served, LaunchRefusal> {
    plan_with(input.engine.engine(), input)
}

/// [`plan`] with the engine's implementation given (the registered one, or a test's).
fn plan_with(engine: &dyn ServingEngine, input: &ServeInput<'_>) -> Result<Served, LaunchRefusal> {
    let o = input.opts;
    let world = engine.world(o.tp, o.pp, o.gpus_per_node, input.tuning);
    let sel = select(
        input.nodes,
        o,
        world.clone(),
        refusals(engine, input),
        engine.uses_nccl(),
    )?;
    // The GPUs one replica spans (select refused the shape when the engine did).
    let world = world.unwrap_or_else(|_| o.world());
    let memory = memory_plan(engine, input, &sel, world);
    if !memory.problems.is_empty() {
        return Err(ServeRefusal {
            problems: memory.problems,
        }
        .into());
    }
    let head_env = &sel.env.nodes[0];
    let bound = bind_addr(o.bind, &sel.inputs[0], head_env)
        .map_err(|p| ServeRefusal { problems: vec![p] })?;
    let (host, local_url) = serve::listen(bound, o.port);
    let served = input
        .recipe
        .and_then(|r| r.served_name.clone())
        .unwrap_or_else(|| o.model.served_name());
    let used: Vec<NodeName> = sel.inputs.iter().map(|i| i.name.clone()).collect();
    let mut notes = unused_note(world, &sel, input.nodes.len());
    let mut recipe_warnings = Vec::new();
    let cache = RuntimeCache::plan(engine, o, &used);
    let (mut nodes, waits) = ranks(
        engine,
        input,
        &sel,
        (bound, &host),
        &served,
        &cache,
        &mut notes,
        &mut recipe_warnings,
    )?;
    cap(&mut nodes, &memory.plan);
    let launch = launched(input.launch.as_ref(), engine, &sel, &mut nodes)?;
    let ports = engine.ports(input.tuning, o.port, used.len());
    let mut steps = port_steps(&ports, &sel.env.nodes);
    if o.runtime == RuntimeKind::Docker {
        steps.push(steps::ensure_image(o.image.clone(), used.clone()));
    }
    steps.extend(launch.nccl_steps);
    // A speculative draft that is a repo of its own is staged like the model (the Hub is asked
    // for its files when the step runs).
    let draft = input.tuning.speculative.as_ref().and_then(|s| s.draft());
    let mut extra: Vec<(ModelSource, Vec<NodeName>)> = Vec::new();
    extra.extend(draft.map(|d| (d, used.clone())));
    // So are the models a recipe's engine loads besides its model (its draft, its
    // distribution_config entries), each once.
    for m in input
        .recipe
        .map(|r| r.models.as_slice())
        .unwrap_or_default()
    {
        let holders = m.holders(&used);
        if m.source != o.model && !holders.is_empty() && !extra.iter().any(|(s, _)| *s == m.source)
        {
            extra.push((m.source.clone(), holders));
        }
    }
    let extra_steps: Vec<Step> = extra
        .into_iter()
        .map(|(m, on)| steps::stage_model(m, on, o.stage_model, None, launch.routes.clone()))
        .collect();
    // The nodes that read the model's files: every one, or the head alone when the others
    // get their tensors from it over the network.
    let holders = match engine.model_on() {
        ModelOn::Every => used.clone(),
        ModelOn::Head => used[..1].to_vec(),
    };
    steps.push(steps::stage_model(
        o.model.clone(),
        holders,
        o.stage_model,
        launch.listing,
        launch.routes,
    ));
    steps.extend(extra_steps);
    steps.push(cache.step());
    steps.extend(start_steps(
        engine.start_order(input.tuning),
        &sel.env.nodes,
        o.ready_timeout_s,
    ));
    steps.extend(waits);
    steps.push(steps::wait_serving(
        used[0].clone(),
        local_url,
        served.clone(),
        engine.name().to_string(),
        o.ready_timeout_s,
        o.api_key.as_ref().map(|k| k.key.clone()),
        !o.check_answers,
    ));
    path_notes(o, &used, &sel.assumed, &mut notes);
    let mut warnings = node_warnings(&sel);
    if let Some(r) = input.recipe {
        warnings.extend(r.warnings.iter().cloned());
    }
    warnings.extend(recipe_warnings);
    warnings.extend(launch.warnings);
    warnings.extend(memory.warnings);
    if let Some(n) = &launch.nccl {
        notes.extend(n.notes.iter().cloned());
    }
    let plan = ServePlan {
        engine: input.engine,
        mode: engine
            .multi_node(input.tuning, used.len())
            .as_str()
            .to_string(),
        model: o.model.clone(),
        served_name: served,
        tp: o.tp,
        pp: o.pp,
        // Said where the expert groups widened the group beyond tp × pp.
        expert_parallel: input.tuning.expert_parallel.filter(|_| world != o.world()),
        endpoint: endpoint(&sel.inputs[0], head_env, o.port, bound),
        nodes: used,
        unused: sel.unused.clone(),
        notes,
        warnings: serve::warnings(&sel.env),
        runtime_cache: Some(cache),
        memory: memory.plan,
        sockets: sel.rdma.sockets.clone(),
        job: JobPlan {
            job: o.job.clone(),
            workload: engine.name().to_string(),
            runtime: o.runtime,
            nodes,
            steps,
        },
        api_key: o.api_key.clone(),
        nccl: launch.nccl,
        recipe: input.recipe.map(RecipePart::summary),
    };
    Ok(Served { plan, warnings })
}

/// The memory plan of the serving nodes: the model's footprint (when the launch read it), the
/// engine's fraction and the context its arguments give, each node's memory and cap.
fn memory_plan(
    engine: &dyn ServingEngine,
    input: &ServeInput<'_>,
    sel: &Selected,
    world: u64,
) -> memory::MemoryOutcome {
    let o = input.opts;
    let unread = Footprint::default();
    let footprint = input
        .launch
        .as_ref()
        .and_then(|l| l.footprint)
        .unwrap_or(&unread);
    memory::plan(&memory::MemoryInput {
        model: &o.model.served_name(),
        footprint,
        engine: &engine.memory(o, input.tuning),
        engine_title: engine.title(),
        // The weights are split over every rank of a stage: the tensor groups, and the expert
        // groups of an engine where they add ranks.
        tp: u32::try_from(world / u64::from(o.pp.max(1))).unwrap_or(o.tp),
        pp: o.pp,
        gpus_per_node: o.gpus_per_node,
        nodes: &sel.inputs,
        ask: &o.memory,
    })
}

/// Every serving container's cap, as the memory plan says.
fn cap(nodes: &mut [NodePlan], plan: &memory::MemoryPlan) {
    for n in nodes {
        if let Launch::Container(spec) = &mut n.launch {
            spec.memory_limit = plan.limit_bytes(&n.node);
        }
    }
}

/// Every node's container (the derived environment, the Hugging Face cache, the devices, the
/// labels; the head's bind label and API key; a recipe's variables; then the runtime cache,
/// whose variables give way to the user's and the recipe's), then each rank's command and the
/// engine's own waits, then, before each command, the commands a recipe's command runs before
/// its engine (the head's, one node only), before those its mods and before those its
/// `pre_exec` commands.
#[allow(clippy::too_many_arguments)]
fn ranks(
    engine: &dyn ServingEngine,
    input: &ServeInput<'_>,
    sel: &Selected,
    (bound, host): (Option<std::net::Ipv4Addr>, &str),
    served: &str,
    cache: &RuntimeCache,
    notes: &mut Vec<String>,
    warnings: &mut Vec<String>,
) -> Result<(Vec<NodePlan>, Vec<Step>), ServeRefusal> {
    let o = input.opts;
    let mut base = Vec::new();
    for (rank, env) in sel.env.nodes.iter().enumerate() {
        let mut spec = container(o, input.engine, env, &sel.rdma, notes);
        if rank == 0 {
            serve::label_bind(&mut spec, bound);
            api_key_env(engine, o, &mut spec);
        }
        base.push(spec);
    }
    if let Some(r) = input.recipe {
        if r.before_engine.is_some() && sel.env.nodes.len() > 1 {
            return Err(ServeRefusal {
                problems: vec![Problem::new(
                    format!(
                        "{}: the recipe's command runs commands before the server (a script), which runs on one node only, and the job fills {} nodes (across nodes sparkrun builds the head's line from the recipe's defaults and never runs its command)",
                        r.file,
                        sel.env.nodes.len()
                    ),
                    "run it on one node (leave --tp out), or move the commands into pre_exec, which runs on every node",
                )],
            });
        }
        recipe_env(r, o, sel, cache, &mut base, warnings)?;
        for spec in &mut base {
            spec.labels
                .insert(serve::LABEL_MODEL.to_string(), served.to_string());
        }
    }
    for (env, spec) in sel.env.nodes.iter().zip(&mut base) {
        cache.apply(&env.name, spec);
    }
    let ranks = engine.ranks(
        &RankInput {
            opts: o,
            tuning: input.tuning,
            nodes: &sel.inputs,
            env: &sel.env,
            host,
            served,
            model_path: &model_path(o, &sel.env.nodes[0].name),
            mmproj_path: o
                .model
                .container_mmproj()
                .map(|inside| node_path(o, &sel.env.nodes[0].name, inside))
                .as_deref(),
            keys: input.keys,
        },
        base,
    );
    let nodes = sel
        .env
        .nodes
        .iter()
        .zip(ranks.containers)
        .enumerate()
        .map(|(rank, (env, mut spec))| {
            if let Some(r) = input.recipe {
                if let (Some(before), Role::Head) = (&r.before_engine, env.role) {
                    recipe_part::add_before_engine(before, &mut spec);
                }
                // The recipe's entrypoint over the engine's (Atlas clears the image's), as
                // sparkrun lets a recipe's executor_config override its runtime's default. A
                // host process has no image whose entrypoint it could change.
                match (o.runtime, r.entrypoint.as_deref()) {
                    (RuntimeKind::Docker, e) => recipe_part::set_entrypoint(e, &mut spec),
                    (RuntimeKind::Host, Some(p)) if !p.is_empty() && rank == 0 => {
                        warnings.push(format!(
                            "{}: executor_config.entrypoint {p:?} is not used: --runtime host runs the engine as a process, with no image",
                            r.file
                        ))
                    }
                    (RuntimeKind::Host, _) => {}
                }
                recipe_part::add_mods(&r.mods, &mut spec);
                recipe_part::add_pre_exec(&r.pre_exec, &mut spec);
            }
            let launch = match o.runtime {
                RuntimeKind::Docker => Launch::Container(spec),
                RuntimeKind::Host => Launch::Process(process(spec, &o.paths_of(&env.name).hf_home)),
            };
            NodePlan {
                node: env.name.clone(),
                role: env.role,
                launch,
            }
        })
        .collect();
    Ok((nodes, ranks.waits))
}

/// Where the engine finds the model: inside the containers, or on the node itself for host
/// processes (the head's Hugging Face cache, or the folder or file given).
fn model_path(o: &ServeOptions, head: &NodeName) -> String {
    match (o.runtime, &o.model) {
        (RuntimeKind::Host, ModelSource::Local { path }) => path.clone(),
        (_, m) => node_path(o, head, m.container_path()),
    }
}

/// A path in the containers' Hugging Face cache (`inside`) as the engine sees it: as it is in
/// a container, or under the head's own cache for host processes.
fn node_path(o: &ServeOptions, head: &NodeName, inside: String) -> String {
    match o.runtime {
        RuntimeKind::Docker => inside,
        RuntimeKind::Host => {
            let rest = inside
                .strip_prefix(crate::model::CONTAINER_HF_HOME)
                .unwrap_or(&inside);
            format!("{}{rest}", o.paths_of(head).hf_home.trim_end_matches('/'))
        }
    }
}

/// A serving container as a plain process on its node (`--runtime host`): its command (after
/// its entrypoint), environment, folder and labels; the cache is the node's own (`HF_HOME`),
/// and what only a container has (image, mounts, devices, limits) is left out.
fn process(spec: ContainerSpec, hf_home: &str) -> crate::plan::ProcessSpec {
    let mut command = spec.entrypoint.unwrap_or_default();
    command.extend(spec.command);
    let mut env = spec.env;
    if env.contains_key("HF_HOME") {
        env.insert("HF_HOME".into(), hf_home.to_string());
    }
    crate::plan::ProcessSpec {
        name: spec.name,
        command,
        env,
        workdir: spec.workdir,
        labels: spec.labels,
    }
}

/// A recipe's variables on every node: its templates rendered with the node's rank and
/// address, merged under the user's `--env` and what spark-launch sets itself.
fn recipe_env(
    r: &RecipePart,
    o: &ServeOptions,
    sel: &Selected,
    cache: &RuntimeCache,
    containers: &mut [ContainerSpec],
    warnings: &mut Vec<String>,
) -> Result<(), ServeRefusal> {
    let model_revision = match &o.model {
        ModelSource::Hub {
            revision, commit, ..
        } => Some(
            commit
                .clone()
                .unwrap_or_else(|| revision.as_str().to_string()),
        ),
        ModelSource::Local { .. } => None,
    };
    let path = o.model.container_path();
    let mut problems = Vec::new();
    for (rank, (env, spec)) in sel.env.nodes.iter().zip(containers).enumerate() {
        let node = RecipeNode {
            num_nodes: sel.env.nodes.len() as u32,
            node_rank: rank as u32,
            node_host: env.control.addr.to_string(),
            model_path: Some(path.clone()),
            model_revision: model_revision.clone(),
            runtime_cache_dir: cache.seen_on(&env.name),
            cluster_id: Some(o.job.to_string()),
        };
        match r.render_env(&node) {
            Ok(values) => {
                recipe_part::merge_env(spec, &env.name, values, &o.env, r.keep_env, warnings)
            }
            Err(p) if !problems.contains(&p) => problems.push(p),
            Err(_) => {}
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ServeRefusal { problems })
    }
}

/// Every reason the engine gives not to start, before any node is looked at: two roles on one
/// port (checked for the multi-node layout whatever the node count: a port given twice is a
/// mistake either way), its own options, flags it sets itself, an API key it cannot enforce.
fn refusals(engine: &dyn ServingEngine, input: &ServeInput<'_>) -> Vec<Problem> {
    option_refusals(
        engine,
        input.opts,
        input.tuning,
        input.opts.api_key.is_some(),
    )
}

/// The refusals of [`refusals`] for a request as asked (`key_asked`: an API key was asked for,
/// resolved or not): what a launch checks before it resolves a node, looks anything up or
/// writes a key file, so a launch the engine refuses anyway touches nothing.
pub fn refusals_as_asked(
    engine: EngineKind,
    o: &ServeOptions,
    tuning: &EngineOptions,
    key_asked: bool,
) -> Result<(), ServeRefusal> {
    let problems = option_refusals(engine.engine(), o, tuning, key_asked);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ServeRefusal { problems })
    }
}

fn option_refusals(
    engine: &dyn ServingEngine,
    o: &ServeOptions,
    tuning: &EngineOptions,
    key_asked: bool,
) -> Vec<Problem> {
    let named: Vec<(&str, u16)> = engine
        .ports(tuning, o.port, 2)
        .iter()
        .filter_map(|p| p.single().map(|port| (p.name, port)))
        .collect();
    let mut out = distinct_ports(&named);
    out.extend(engine.problems(tuning));
    out.extend(engine.reserved_args(&o.engine_args));
    // A `:QUANT` names GGUF file(s), which only an engine loading GGUF files can serve.
    if let (Some(g), HubFiles::Repository) = (o.model.gguf(), engine.hub_files()) {
        out.push(Problem::new(
            format!(
                "{}: a GGUF spec (`:{}`) names GGUF file(s), which {} does not load",
                o.model,
                g.quant.as_deref().unwrap_or_default(),
                engine.title()
            ),
            "serve it with `spark-launch llamacpp`, or name the repository without `:QUANT`"
                .to_string(),
        ));
    }
    if let Some(s) = &tuning.speculative {
        out.extend(s.problems().into_iter().map(|(field, message)| {
            Problem::new(
                format!("speculative.{field}: {message}"),
                "correct the speculative block (method, draft_model, tokens)".to_string(),
            )
        }));
        out.extend(engine.speculative_problems(s, &o.engine_args));
    }
    // The engine's key variable is owned like --api-key: set any other way it would be a key
    // the plan neither shows nor checks for.
    if let ApiKeySupport::Env(var) = engine.api_key()
        && o.env.contains_key(var)
    {
        out.push(Problem::new(format!(
                "--env {var}: {var} is where spark-launch gives {} its API key",
                engine.title()
            ), "give the key with --api-key KEY|auto|@FILE (enforced, checked for readiness, <set> in plans)".to_string()));
    }
    if let (true, ApiKeySupport::Refused { problem, fix }) = (key_asked, engine.api_key()) {
        out.push(Problem::new(problem.to_string(), fix.to_string()));
    }
    out
}

/// The key the engine enforces, where it reads it: never on a command line, `<set>` in every
/// printout of the plan.
fn api_key_env(engine: &dyn ServingEngine, o: &ServeOptions, head: &mut ContainerSpec) {
    if let (Some(k), ApiKeySupport::Env(var)) = (&o.api_key, engine.api_key()) {
        head.env.insert(var.to_string(), k.key.expose().to_string());
    }
}

/// The note naming the nodes a smaller job leaves idle.
fn unused_note(world: u64, sel: &Selected, cluster: usize) -> Vec<String> {
    if sel.unused.is_empty() {
        return Vec::new();
    }
    let used: Vec<NodeName> = sel.inputs.iter().map(|i| i.name.clone()).collect();
    vec![format!(
        "tp × pp = {} GPUs use {} of the cluster's {} nodes ({}); {} stay{} idle",
        world,
        used.len(),
        cluster,
        crate::node::join(&used),
        crate::node::join(&sel.unused),
        if sel.unused.len() == 1 { "s" } else { "" }
    )]
}

/// CheckPorts for every single port the engine binds, where it binds it, then a
/// CheckReachable for each connection the group needs between nodes.
fn port_steps(ports: &[EnginePort], env: &[NodeEnv]) -> Vec<Step> {
    let Some(head) = env.first() else {
        return Vec::new();
    };
    let workers: Vec<NodeName> = env[1..].iter().map(|e| e.name.clone()).collect();
    let free: Vec<NodePorts> = env
        .iter()
        .enumerate()
        .map(|(i, e)| NodePorts {
            node: e.name.clone(),
            ports: ports
                .iter()
                .filter(|p| i == 0 || p.on == PortOn::Every)
                .filter_map(EnginePort::single)
                .collect(),
        })
        .filter(|p| !p.ports.is_empty())
        .collect();
    let mut out = vec![steps::check_ports(free)];
    for p in ports {
        let Some(port) = p.single() else { continue };
        match p.reach {
            PortReach::WorkersToHead if !workers.is_empty() => out.push(steps::check_reachable(
                head.name.clone(),
                head.control.addr,
                port,
                workers.clone(),
            )),
            PortReach::HeadToWorkers => {
                for w in &env[1..] {
                    out.push(steps::check_reachable(
                        w.name.clone(),
                        w.control.addr,
                        port,
                        vec![head.name.clone()],
                    ));
                }
            }
            PortReach::WorkersToHead | PortReach::Clients => {}
        }
    }
    out
}

/// The start of the serving nodes (`env`, head first), in the engine's order: every node at
/// once; or the workers first, a wait (within `timeout_s`) for each worker's server to answer
/// on its port at its control-plane address, then the head.
fn start_steps(order: StartOrder, env: &[NodeEnv], timeout_s: u64) -> Vec<Step> {
    let nodes: Vec<NodeName> = env.iter().map(|e| e.name.clone()).collect();
    match order {
        StartOrder::Together => vec![steps::start(nodes)],
        StartOrder::HeadFirst { port } => {
            let Some((head, workers)) = env.split_first() else {
                return Vec::new();
            };
            if workers.is_empty() {
                return vec![steps::start(nodes)];
            }
            vec![
                steps::start(vec![head.name.clone()]),
                steps::wait_port(head.name.clone(), head.control.addr, port, timeout_s),
                steps::start(nodes[1..].to_vec()),
            ]
        }
        StartOrder::ServersFirst { port } => {
            let Some((head, workers)) = env.split_first() else {
                return Vec::new();
            };
            if workers.is_empty() {
                return vec![steps::start(nodes)];
            }
            let mut out = vec![steps::start(nodes[1..].to_vec())];
            out.extend(
                workers
                    .iter()
                    .map(|w| steps::wait_port(w.name.clone(), w.control.addr, port, timeout_s)),
            );
            out.push(steps::start(vec![head.name.clone()]));
            out
        }
    }
}

/// Derive's warnings as lines, by node.
fn node_warnings(sel: &Selected) -> Vec<String> {
    serve::warnings(&sel.env)
        .iter()
        .flat_map(|(node, ws)| ws.iter().map(move |w| format!("{node}: {w}")))
        .collect()
}

/// The launch's part of the plan, decided: the NCCL steps and section, the staging's listing
/// and routes, the warnings they bring.
#[derive(Default)]
struct FromLaunch {
    nccl_steps: Vec<Step>,
    nccl: Option<NcclPlan>,
    listing: Option<Resolved>,
    routes: BTreeMap<NodeName, CopyRoute>,
    warnings: Vec<String>,
}

/// With a launch: the copy routes over the fabric; for an engine whose ranks use NCCL, the
/// ring's cabling warnings, the NCCL mounts in `nodes`' containers, its steps and section (or
/// its refusal).
fn launched(
    launch: Option<&LaunchPart<'_>>,
    engine: &dyn ServingEngine,
    sel: &Selected,
    nodes: &mut [NodePlan],
) -> Result<FromLaunch, LaunchRefusal> {
    let Some(l) = launch else {
        return Ok(FromLaunch::default());
    };
    let routes: BTreeMap<NodeName, CopyRoute> = copy_routes(&sel.inputs)
        .into_iter()
        .filter(|(_, r)| *r != CopyRoute::Control)
        .collect();
    if !engine.uses_nccl() {
        return Ok(FromLaunch {
            listing: l.listing.cloned(),
            routes,
            warnings: l
                .nccl_from
                .map(|f| {
                    format!(
                        "--nccl-from {f} is not used: {} loads no NCCL",
                        engine.title()
                    )
                })
                .into_iter()
                .collect(),
            ..FromLaunch::default()
        });
    }
    let mut warnings = Vec::new();
    let ring = sel.env.topology == Topology::Ring;
    if ring {
        warnings.extend(nccl_lib::direction_warnings(&sel.inputs));
    }
    let rule = nccl_lib::rule(
        ring,
        l.allow_old_nccl,
        l.nccl_from,
        true,
        sel.inputs.first(),
    );
    let names: Vec<NodeName> = nodes.iter().map(|n| n.node.clone()).collect();
    let nccl_steps = nccl_lib::steps(&names, l.nccl_from, &rule);
    let nccl = nccl_lib::section(
        nodes,
        RuntimeKind::Docker,
        l.nccl_from,
        rule,
        l.reads,
        &sel.inputs,
    )
    .map_err(LaunchRefusal::Nccl)?;
    warnings.extend(nccl.warnings.iter().cloned());
    Ok(FromLaunch {
        nccl_steps,
        nccl: Some(nccl),
        listing: l.listing.cloned(),
        routes,
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::derive::NodeInput;
    use crate::node::Role;
    use crate::plan::JobName;
    use crate::workload::engines::speculative::Speculative;
    use crate::workload::engines::{
        ApiKeySupport, EngineRanks, GroupLine, GroupRefs, MultiNode, ReadySignals, vllm::Vllm,
    };
    use crate::workload::memory::EngineMemory;

    /// vLLM's ranks with the two hooks of a server-first engine without NCCL (llama.cpp's RPC
    /// servers and `llama-server --rpc` have this shape): what the skeleton does with them.
    struct ServersFirstNoNccl;

    const RPC_PORT: u16 = 50052;

    impl ServingEngine for ServersFirstNoNccl {
        fn name(&self) -> &'static str {
            Vllm.name()
        }
        fn title(&self) -> &'static str {
            "a test engine"
        }
        fn default_image(&self) -> &'static str {
            Vllm.default_image()
        }
        fn default_port(&self) -> u16 {
            Vllm.default_port()
        }
        fn api_key(&self) -> ApiKeySupport {
            Vllm.api_key()
        }
        fn ready(&self) -> &'static ReadySignals {
            Vllm.ready()
        }
        fn uses_nccl(&self) -> bool {
            false
        }
        fn start_order(&self, _tuning: &EngineOptions) -> StartOrder {
            StartOrder::ServersFirst { port: RPC_PORT }
        }
        fn multi_node(&self, tuning: &EngineOptions, nodes: usize) -> MultiNode {
            Vllm.multi_node(tuning, nodes)
        }
        fn ports(&self, tuning: &EngineOptions, api: u16, nodes: usize) -> Vec<EnginePort> {
            Vllm.ports(tuning, api, nodes)
        }
        fn reserved_args(&self, args: &[String]) -> Vec<Problem> {
            Vllm.reserved_args(args)
        }
        fn memory(&self, opts: &ServeOptions, tuning: &EngineOptions) -> EngineMemory {
            Vllm.memory(opts, tuning)
        }
        fn speculative_problems(&self, spec: &Speculative, args: &[String]) -> Vec<Problem> {
            Vllm.speculative_problems(spec, args)
        }
        fn ranks(&self, input: &RankInput<'_>, containers: Vec<ContainerSpec>) -> EngineRanks {
            Vllm.ranks(input, containers)
        }
        fn group_line(
            &self,
            mode: MultiNode,
            role: Role,
            spec: &ContainerSpec,
            refs: &GroupRefs,
        ) -> GroupLine {
            Vllm.group_line(mode, role, spec, refs)
        }
    }

    fn fixture(name: &str) -> Vec<NodeInput> {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name);
        std::fs::read_to_string(root.join("nodes"))
            .unwrap()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|n| NodeInput {
                name: NodeName::new(n.trim()).unwrap(),
                facts: crate::probe::read_snapshot_dir(&root.join(n.trim())).unwrap(),
            })
            .collect()
    }

    /// A launch's plan of `tp` ranks (one per node) on `fixture`, by `engine`.
    fn launch_plan(engine: &dyn ServingEngine, fixture_name: &str, tp: u32) -> ServePlan {
        let model = ModelSource::parse(
            "Qwen/Qwen2.5-0.5B-Instruct",
            Some("7ae557604adf67be50417f59c2c2f167def9a775"),
        )
        .unwrap();
        let mut opts = ServeOptions::new(EngineKind::Vllm, JobName::new("j").unwrap(), model);
        opts.tp = tp;
        let nodes = fixture(fixture_name);
        let input = ServeInput {
            engine: EngineKind::Vllm,
            opts: &opts,
            tuning: &EngineOptions::default(),
            nodes: &nodes,
            keys: &JobSshKeys::placeholder(),
            launch: Some(LaunchPart::default()),
            recipe: None,
        };
        match plan_with(engine, &input) {
            Ok(s) => s.plan,
            Err(e) => panic!("{e}"),
        }
    }

    /// The steps' kinds and nodes: `Start a,b`, `Exec b`, `CheckNccl`.
    fn shape(plan: &ServePlan) -> Vec<String> {
        plan.job
            .steps
            .iter()
            .map(|s| match s {
                Step::Start(s) => format!("Start {}", crate::node::join(&s.nodes)),
                Step::Exec(e) => format!("Exec {}", e.node),
                other => other.title().split(' ').next().unwrap_or("").to_string(),
            })
            .collect()
    }

    #[test]
    fn an_engine_without_nccl_gets_no_nccl_steps_and_no_nccl_section() {
        let with = launch_plan(&Vllm, "seed-001-two-sparks-both-twins", 2);
        assert!(with.nccl.is_some());
        assert!(
            with.job
                .steps
                .iter()
                .any(|s| matches!(s, Step::CheckNccl(_)))
        );
        let without = launch_plan(&ServersFirstNoNccl, "seed-001-two-sparks-both-twins", 2);
        assert!(without.nccl.is_none());
        assert!(
            !without
                .job
                .steps
                .iter()
                .any(|s| matches!(s, Step::CheckNccl(_) | Step::StageNccl(_)))
        );
    }

    #[test]
    fn servers_first_starts_the_workers_waits_for_each_port_then_starts_the_head() {
        let plan = launch_plan(&ServersFirstNoNccl, "switch-3-sparks", 3);
        let steps = shape(&plan);
        let start = steps.iter().position(|s| s.starts_with("Start")).unwrap();
        assert_eq!(
            steps[start..start + 4],
            [
                "Start spark-b, spark-c",
                "Exec spark-b",
                "Exec spark-c",
                "Start spark-a"
            ]
        );
        let Step::Exec(wait) = &plan.job.steps[start + 1] else {
            panic!("not a wait")
        };
        let script = wait.command.join(" ");
        assert!(script.contains(&format!("/{RPC_PORT})")), "{script}");
        let together = shape(&launch_plan(&Vllm, "switch-3-sparks", 3));
        assert!(together.contains(&"Start spark-a, spark-b, spark-c".to_string()));
    }

    /// A v2 recipe's variables: the runtime cache with a folder of its own below it (as
    /// spark-arena's DeepSeek V4.1 Flash SGLang recipe keeps its packed files), and a cache
    /// variable the engine sets too, written by the recipe.
    fn cache_recipe() -> RecipePart {
        use crate::workload::recipe_env::{EnvPiece, LaunchField, RecipeEnv, RecipeEnvValue};
        let mut env = RecipeEnv::default();
        env.0.insert(
            "B12X_COMPILE_CACHE_DIR".into(),
            RecipeEnvValue {
                pieces: vec![
                    EnvPiece::Launch(LaunchField::RuntimeCacheDir),
                    EnvPiece::Text("/b12x-compile".into()),
                ],
                secret: false,
            },
        );
        env.0.insert(
            "TRITON_CACHE_DIR".into(),
            RecipeEnvValue::text("/scratch/triton", false),
        );
        RecipePart {
            name: "cache-demo".into(),
            file: "cache-demo.yaml".into(),
            format: crate::workload::recipe_part::RecipeFormat::V2,
            program: vec!["vllm".into(), "serve".into()],
            served_name: None,
            env,
            keep_env: false,
            pre_exec: Vec::new(),
            before_engine: None,
            mods: Vec::new(),
            models: Vec::new(),
            entrypoint: None,
            solo: false,
            warnings: Vec::new(),
        }
    }

    /// `cache_recipe` planned with vLLM on two Sparks, in `runtime`.
    fn recipe_plan(runtime: RuntimeKind) -> ServePlan {
        recipe_served(runtime, cache_recipe()).plan
    }

    /// `recipe` planned with vLLM on two Sparks, in `runtime`.
    fn recipe_served(runtime: RuntimeKind, recipe: RecipePart) -> Served {
        let model = ModelSource::parse("Qwen/Qwen2.5-0.5B-Instruct", None).unwrap();
        let mut opts = ServeOptions::new(EngineKind::Vllm, JobName::new("j").unwrap(), model);
        opts.tp = 2;
        opts.runtime = runtime;
        let nodes = fixture("seed-001-two-sparks-both-twins");
        let input = ServeInput {
            engine: EngineKind::Vllm,
            opts: &opts,
            tuning: &EngineOptions::default(),
            nodes: &nodes,
            keys: &JobSshKeys::placeholder(),
            launch: Some(LaunchPart::default()),
            recipe: Some(&recipe),
        };
        match plan(&input) {
            Ok(s) => s,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn a_recipes_other_models_are_staged_once_each_on_the_nodes_it_names() {
        use crate::workload::recipe_part::RecipeModel;
        let hub = |id: &str| ModelSource::parse(id, None).unwrap();
        let mut recipe = cache_recipe();
        recipe.models = vec![
            RecipeModel {
                source: hub("z-lab/Draft"),
                ranks: None,
            },
            RecipeModel {
                source: hub("org/head-only"),
                ranks: Some(vec![0]),
            },
            // The served model itself, and a second mention of the draft: staged once.
            RecipeModel {
                source: hub("Qwen/Qwen2.5-0.5B-Instruct"),
                ranks: None,
            },
            RecipeModel {
                source: hub("z-lab/Draft"),
                ranks: Some(vec![1]),
            },
        ];
        let plan = recipe_served(RuntimeKind::Docker, recipe).plan;
        let staged: Vec<(String, Vec<String>)> = plan
            .job
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::StageModel(m) => Some((
                    m.model.to_string(),
                    m.nodes.iter().map(|n| n.to_string()).collect(),
                )),
                _ => None,
            })
            .collect();
        let both = vec!["spark".to_string(), "spark2".to_string()];
        assert_eq!(
            staged,
            vec![
                ("Qwen/Qwen2.5-0.5B-Instruct@main".to_string(), both.clone()),
                ("z-lab/Draft@main".to_string(), both),
                ("org/head-only@main".to_string(), vec!["spark".to_string()]),
            ]
        );
        let start = plan
            .job
            .steps
            .iter()
            .position(|s| matches!(s, Step::Start(_)))
            .unwrap();
        let last_stage = plan
            .job
            .steps
            .iter()
            .rposition(|s| matches!(s, Step::StageModel(_)))
            .unwrap();
        assert!(last_stage < start, "every model is staged before the start");
    }

    #[test]
    fn a_recipe_s_entrypoint_program_runs_in_every_container_and_not_on_a_host() {
        let recipe = RecipePart {
            entrypoint: Some("/opt/nvidia/nvidia_entrypoint.sh".into()),
            ..cache_recipe()
        };
        let docker = recipe_served(RuntimeKind::Docker, recipe.clone());
        for n in &docker.plan.job.nodes {
            let Launch::Container(c) = &n.launch else {
                panic!("not a container")
            };
            assert_eq!(
                c.entrypoint,
                Some(vec!["/opt/nvidia/nvidia_entrypoint.sh".to_string()])
            );
        }
        let host = recipe_served(RuntimeKind::Host, recipe);
        for n in &host.plan.job.nodes {
            let Launch::Process(p) = &n.launch else {
                panic!("not a process")
            };
            assert_eq!(p.command[0], "vllm", "{:?}", p.command);
        }
        let said: Vec<&String> = host
            .warnings
            .iter()
            .filter(|w| w.contains("executor_config.entrypoint"))
            .collect();
        assert_eq!(said.len(), 1, "once, not per node: {:?}", host.warnings);
    }

    fn env_of(node: &NodePlan) -> &BTreeMap<String, String> {
        match &node.launch {
            Launch::Container(c) => &c.env,
            Launch::Process(p) => &p.env,
        }
    }

    #[test]
    fn a_recipes_runtime_cache_dir_is_the_folder_every_rank_sees_and_its_own_cache_variable_wins() {
        let plan = recipe_plan(RuntimeKind::Docker);
        let cache = plan.runtime_cache.clone().unwrap();
        assert_eq!(cache.mount.as_deref(), Some("/var/cache/spark-launch"));
        for n in &plan.job.nodes {
            let env = env_of(n);
            assert_eq!(
                env["B12X_COMPILE_CACHE_DIR"],
                "/var/cache/spark-launch/b12x-compile"
            );
            assert_eq!(env["TRITON_CACHE_DIR"], "/scratch/triton");
            assert_eq!(env["VLLM_CACHE_ROOT"], "/var/cache/spark-launch/vllm");
            let Launch::Container(c) = &n.launch else {
                panic!("not a container")
            };
            let m = c
                .mounts
                .iter()
                .find(|m| m.target == "/var/cache/spark-launch")
                .unwrap();
            assert_eq!(m.source, cache.folders[&n.node]);
            assert!(
                m.source
                    .starts_with("~/.cache/spark-launch/runtime/vllm/Qwen--Qwen2.5-0.5B-Instruct/"),
                "{}",
                m.source
            );
        }
    }

    #[test]
    fn a_host_process_is_given_its_nodes_folder_where_a_container_sees_the_mount() {
        let plan = recipe_plan(RuntimeKind::Host);
        let cache = plan.runtime_cache.clone().unwrap();
        assert_eq!(cache.mount, None);
        for n in &plan.job.nodes {
            let folder = &cache.folders[&n.node];
            let env = env_of(n);
            assert_eq!(
                env["B12X_COMPILE_CACHE_DIR"],
                format!("{folder}/b12x-compile")
            );
            assert_eq!(env["VLLM_CACHE_ROOT"], format!("{folder}/vllm"));
        }
    }

    #[test]
    fn the_runtime_cache_folder_is_made_after_the_staging_and_before_the_first_start() {
        let plan = launch_plan(&Vllm, "seed-001-two-sparks-both-twins", 2);
        let steps = &plan.job.steps;
        let at = |f: fn(&Step) -> bool| steps.iter().position(f).unwrap();
        let made = at(|s| matches!(s, Step::EnsureFolders(_)));
        let staged = at(|s| matches!(s, Step::StageModel(_)));
        let start = at(|s| matches!(s, Step::Start(_)));
        assert!(staged < made && made + 1 == start, "{:?}", shape(&plan));
        let Step::EnsureFolders(f) = &plan.job.steps[made] else {
            panic!("not the folders")
        };
        assert_eq!(f.folders, plan.runtime_cache.unwrap().folders);
    }

    #[test]
    fn servers_first_on_one_node_starts_the_head_alone() {
        let env = |name: &str| NodeName::new(name).unwrap();
        let nodes = fixture("switch-3-sparks");
        let derived = crate::derive::derive(&nodes[..1]).unwrap();
        let steps = start_steps(StartOrder::ServersFirst { port: 1 }, &derived.nodes, 5);
        assert_eq!(steps, vec![steps::start(vec![env("spark-a")])]);
    }
}
