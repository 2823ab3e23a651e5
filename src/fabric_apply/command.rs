//! `spark-launch fabric plan|apply|rollback|test`, each one call: [`run`] reaches the nodes
//! (live: SSH with root, each password asked at most once; `--snapshot` folders: only to
//! plan), probes them, plans (`fabric::plan`, `fabric::perftest::plan`), then hands the plan
//! back or carries it out with this module's effects, and returns what happened as a
//! [`FabricReport`] (shown by `render`). Every connection closes on every exit path: the work
//! runs inside [`RootPool::scope`] or `ResolvedCluster::scope`.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{
    ApplyReport, FabricApplyOptions, RootPool, RootPoolError, apply, connect_as_root, probe_fabric,
    rollback,
};
use crate::derive::NodeInput;
use crate::fabric::perftest::{TestPlan, TestPlanError};
use crate::fabric::script::RollbackReport;
use crate::fabric::{self, FabricPlan, FabricRefusal, PlanError, PlanOptions};
use crate::node::{NodeFailures, NodeName, all_ok};
use crate::probe::links::LinkArg;
use crate::progress::Reporter;
use crate::report::perftest::{self as perf, TestReport};
use crate::resolve::{self, Needs, Purpose, ResolveError, Selection};
use crate::ssh::prompt::{self, PasswordInput, PromptError};
use crate::ssh::{Password, SshOptions, SshTarget};

/// One `fabric` command, as the CLI parsed it.
#[derive(Clone, Debug)]
pub struct FabricRequest {
    /// Which nodes: live (`--hosts`, the cluster file, `--nodes`) or `--snapshot` folders.
    pub selection: Selection,
    /// How a node's password is given (first SSH contact and sudo).
    pub passwords: PasswordInput,
    pub action: FabricAction,
}

/// What a fabric plan is made of besides the nodes.
#[derive(Clone, Debug)]
pub struct FabricPlanInput {
    /// `--link`: the cables as the user names them, instead of what the link probe hears.
    pub links: Vec<LinkArg>,
    pub options: PlanOptions,
}

/// Which `fabric` command.
#[derive(Clone, Debug)]
pub enum FabricAction {
    /// The plan; changes nothing.
    Plan(FabricPlanInput),
    /// Write, apply with the self-rollback safety net, verify; with `dry_run`, the diffs.
    Apply {
        plan: FabricPlanInput,
        /// Move other netplan files that configure the same interfaces aside.
        replace: bool,
        dry_run: bool,
        /// Seconds a node waits for confirmation before undoing the change by itself.
        rollback_after: u32,
    },
    /// Undo `fabric apply`.
    Rollback,
    /// `ib_write_bw` over every twin pair; with `dry_run`, the runs only.
    Test {
        links: Vec<LinkArg>,
        duration_s: u32,
        dry_run: bool,
    },
}

/// What a `fabric` command did.
#[derive(Debug)]
pub enum FabricReport {
    /// `fabric plan`.
    Planned(FabricPlan),
    /// `fabric apply --dry-run`.
    DryRun(FabricDryRun),
    /// `fabric apply`: what every node did, and the links verified.
    Applied {
        plan: FabricPlan,
        report: ApplyReport,
    },
    /// `fabric rollback`, per node.
    RolledBack(Vec<(NodeName, Result<RollbackReport, String>)>),
    /// `fabric test --dry-run`: the runs, cable by cable.
    TestPlanned(TestPlan),
    /// `fabric test`: every twin pair measured and judged.
    Tested(TestReport),
}

/// `fabric apply --dry-run`: the plan, what `--replace` would move, and the conflict a real
/// apply would refuse (the diffs are shown either way).
#[derive(Debug)]
pub struct FabricDryRun {
    pub plan: FabricPlan,
    pub moves: BTreeMap<NodeName, Vec<String>>,
    pub refused: Option<FabricRefusal>,
}

/// Why a `fabric` command could not do its job. [`FabricError::exit_code`] maps it.
#[derive(Debug, thiserror::Error)]
pub enum FabricError {
    /// A command that changes or measures live nodes was given snapshots.
    #[error("{0}")]
    LiveOnly(&'static str),
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    #[error(transparent)]
    Password(#[from] PromptError),
    #[error(transparent)]
    Root(#[from] RootPoolError),
    #[error("cannot probe: {0}")]
    Probe(NodeFailures<String>),
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// Another netplan file configures the same interfaces (and no `--replace`).
    #[error(transparent)]
    Preflight(FabricRefusal),
    #[error(transparent)]
    TestPlan(#[from] TestPlanError),
}

impl FabricError {
    /// 2 for the user's input or a refused plan, 1 for nodes that failed.
    pub fn exit_code(&self) -> u8 {
        match self {
            FabricError::LiveOnly(_)
            | FabricError::Plan(_)
            | FabricError::Preflight(_)
            | FabricError::TestPlan(_) => 2,
            FabricError::Resolve(e) if e.is_invalid_input() => 2,
            FabricError::Password(e) => e.exit_code(),
            _ => 1,
        }
    }
}

/// Runs one `fabric` command (see the module docs).
pub async fn run(
    req: &FabricRequest,
    reporter: &Arc<dyn Reporter>,
) -> Result<FabricReport, FabricError> {
    let snapshots = !req.selection.snapshots.is_empty();
    match &req.action {
        FabricAction::Plan(input) => {
            let plan = if snapshots {
                make_plan(&snapshot_facts(req, reporter).await?, input)?
            } else {
                open(req, reporter)
                    .await?
                    .scope(async |root| make_plan(&probe(root, reporter).await?, input))
                    .await?
            };
            Ok(FabricReport::Planned(plan))
        }
        FabricAction::Apply {
            plan: input,
            replace,
            dry_run,
            rollback_after,
        } => {
            if snapshots && !dry_run {
                return Err(FabricError::LiveOnly(
                    "fabric apply changes live nodes: with --snapshot, use --dry-run (or `fabric plan`)",
                ));
            }
            if snapshots {
                let plan = make_plan(&snapshot_facts(req, reporter).await?, input)?;
                return Ok(dry_run_of(plan, *replace));
            }
            let root = open(req, reporter).await?;
            root.scope(async |root| {
                let nodes = probe(root, reporter).await?;
                let plan = make_plan(&nodes, input)?;
                if *dry_run {
                    return Ok(dry_run_of(plan, *replace));
                }
                let moves = fabric::preflight(&plan, *replace).map_err(FabricError::Preflight)?;
                warn_before_apply(&plan, &nodes, root, reporter);
                let opts = FabricApplyOptions {
                    moves,
                    delay_s: 2,
                    deadline_s: *rollback_after,
                };
                let report = apply(&plan, root, &opts, reporter).await;
                Ok(FabricReport::Applied { plan, report })
            })
            .await
        }
        FabricAction::Rollback => {
            if snapshots {
                return Err(FabricError::LiveOnly(
                    "fabric rollback changes live nodes: use the cluster file, --nodes or --hosts",
                ));
            }
            let root = open(req, reporter).await?;
            let results = root
                .scope(async |root| rollback(&root.pool, &root.privileges, reporter).await)
                .await;
            Ok(FabricReport::RolledBack(results))
        }
        FabricAction::Test {
            links,
            duration_s,
            dry_run,
        } => test(req, links, *duration_s, *dry_run, reporter).await,
    }
}

/// `fabric test`: plan the runs from the nodes' facts, then run them cable by cable.
async fn test(
    req: &FabricRequest,
    links: &[LinkArg],
    duration_s: u32,
    dry_run: bool,
    reporter: &Arc<dyn Reporter>,
) -> Result<FabricReport, FabricError> {
    if !req.selection.snapshots.is_empty() && !dry_run {
        return Err(FabricError::LiveOnly(
            "fabric test measures live nodes: with --snapshot, use --dry-run to see the runs",
        ));
    }
    let purpose = if dry_run { Purpose::Plan } else { Purpose::Act };
    let cluster = resolve::resolve(&req.selection, Needs::facts(purpose), reporter).await?;
    cluster
        .scope(async |cluster| {
            let plan = fabric::perftest::plan(&cluster.inputs(), links, duration_s)?;
            if dry_run {
                return Ok(FabricReport::TestPlanned(plan));
            }
            let pool = cluster
                .pool()
                .ok_or(ResolveError::NeedsSsh("fabric test"))?;
            let outputs = super::perftest::run(&plan, pool, reporter).await;
            Ok(FabricReport::Tested(perf::report(&plan, &outputs)))
        })
        .await
}

fn make_plan(nodes: &[NodeInput], input: &FabricPlanInput) -> Result<FabricPlan, FabricError> {
    Ok(fabric::plan(nodes, &input.links, &input.options)?)
}

/// The dry run of an apply: the diffs are shown even when the apply would be refused.
fn dry_run_of(plan: FabricPlan, replace: bool) -> FabricReport {
    let (moves, refused) = match fabric::preflight(&plan, replace) {
        Ok(moves) => (moves, None),
        Err(r) => (BTreeMap::new(), Some(r)),
    };
    FabricReport::DryRun(FabricDryRun {
        plan,
        moves,
        refused,
    })
}

/// Warns when the new addresses would cut this machine's own connection to a node.
fn warn_before_apply(
    plan: &FabricPlan,
    nodes: &[NodeInput],
    root: &RootPool,
    reporter: &Arc<dyn Reporter>,
) {
    for h in root.pool.handles() {
        if let Some(addr) = h.dest().and_then(|d| d.host.parse().ok())
            && let Some(w) = fabric::cuts_connection(plan, nodes, h.name(), addr)
        {
            reporter.warn(&w);
        }
    }
    if plan.nothing_to_do() {
        reporter.info("nothing to do: the fabric is already addressed as planned; verifying");
    }
}

/// The facts of snapshot nodes, through the resolve stage.
async fn snapshot_facts(
    req: &FabricRequest,
    reporter: &Arc<dyn Reporter>,
) -> Result<Vec<NodeInput>, FabricError> {
    Ok(resolve::inputs(&req.selection, Needs::facts(Purpose::Plan), reporter).await?)
}

/// The live nodes (`--hosts`, the cluster file), connected and with root, each password
/// asked at most once.
async fn open(req: &FabricRequest, reporter: &Arc<dyn Reporter>) -> Result<RootPool, FabricError> {
    let targets = resolve::ssh_targets(&req.selection, "fabric").await?;
    let mut asker = Asker::new(req.passwords)?;
    let mut ask = |t: &SshTarget| asker.ask(t);
    Ok(connect_as_root(&targets, SshOptions::default(), &mut ask, reporter).await?)
}

/// The fabric facts of every node (the link probe runs everywhere at once), head first.
async fn probe(
    root: &RootPool,
    reporter: &Arc<dyn Reporter>,
) -> Result<Vec<NodeInput>, FabricError> {
    let step = reporter.step(&format!(
        "probe {} node(s): facts, cabling (ff02::1 on every fabric port), netplan files",
        root.targets.len()
    ));
    match all_ok(probe_fabric(&root.pool, &root.privileges).await) {
        Ok(nodes) => {
            step.ok();
            Ok(nodes.into_iter().map(|(_, n)| n).collect())
        }
        Err(failures) => {
            step.fail("");
            Err(FabricError::Probe(failures))
        }
    }
}

/// Asks each node's password at most once (`--same-password`: once for all; stdin: one line
/// for all), never echoing it and never putting it on a command line.
struct Asker {
    stdin: Option<Password>,
    same: bool,
    shared: Option<Password>,
    tty: bool,
}

impl Asker {
    fn new(input: PasswordInput) -> Result<Asker, PromptError> {
        Ok(Asker {
            stdin: input.read_stdin()?,
            same: input.same_for_all,
            shared: None,
            tty: prompt::terminal(),
        })
    }

    fn ask(&mut self, t: &SshTarget) -> Result<Password, String> {
        if let Some(p) = &self.stdin {
            return Ok(p.clone());
        }
        if let Some(p) = &self.shared {
            return Ok(p.clone());
        }
        if !self.tty {
            return Err(
                "needs a password (SSH first contact or sudo): run on a terminal, or pass --password-stdin".into(),
            );
        }
        let text = if self.same {
            "password for every node that asks (SSH and sudo): ".to_string()
        } else {
            let host = t.addresses.first().map(String::as_str).unwrap_or("?");
            match &t.user {
                Some(u) => format!("{} ({u}@{host}) password: ", t.name),
                None => format!("{} ({host}) password: ", t.name),
            }
        };
        let pw = prompt::ask(&text).map_err(|e| format!("could not read the password: {e}"))?;
        if self.same {
            self.shared = Some(pw.clone());
        }
        Ok(pw)
    }
}
