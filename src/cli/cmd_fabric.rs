//! `spark-launch fabric plan|apply|rollback|test`: from a plugged cable to a verified RoCE
//! fabric. Flags and glue: parse into `fabric::PlanOptions`, reach the nodes (SSH as every
//! command does; a node's password is asked once, as `trust` asks, and serves its first SSH
//! contact and its sudo), call the library (`fabric::plan`, `apply::fabric`,
//! `apply::perftest`, `report::perftest`) and render what it returns.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Read};

use clap::Subcommand;
use comfy_table::{Table, presets::UTF8_BORDERS_ONLY};

use super::args::NodeFlags;
use super::{CmdError, CmdResult, Context, Invalid, Outcome, print_json, print_out};
use crate::apply::fabric::{self as effects, ApplyReport, FabricApplyOptions, Privileges};
use crate::derive::NodeInput;
use crate::fabric::{self, AddressPool, FabricPlan, PlanOptions, diff, render};
use crate::node::NodeName;
use crate::probe::links::LinkArg;
use crate::report::perftest as perf;
use crate::resolve::{self, Needs, Purpose};
use crate::ssh::{Password, Pool, SshOptions, SshTarget};

#[derive(Debug, clap::Args)]
pub struct FabricArgs {
    #[command(subcommand)]
    pub command: Sub,
}

#[derive(Debug, Subcommand)]
pub enum Sub {
    /// Addresses and MTU for every cabled ConnectX port, as one netplan file per node
    /// (changes nothing; live nodes are probed as root, each password asked once).
    Plan(PlanArgs),
    /// Write the plan's file on every node, apply it with a self-rollback safety net, verify.
    Apply(ApplyArgs),
    /// Undo `fabric apply`: the backups back, spark-launch's file gone, the interfaces as
    /// they were.
    Rollback(RollbackArgs),
    /// RDMA bandwidth of every twin pair with perftest's ib_write_bw, both twins of a cable at
    /// once, with a verdict per twin pair.
    Test(FabricTestArgs),
}

/// What the plan is made of besides the nodes.
#[derive(Debug, Clone, clap::Args)]
pub struct PlanFlags {
    /// One cable, NODE:IF=NODE:IF (repeat, one per cable): instead of what the link probe
    /// hears. Naming one twin pairs the other twins of the two ports too.
    #[arg(long = "link", value_name = "NODE:IF=NODE:IF")]
    pub links: Vec<LinkArg>,

    /// Where fabric subnets come from (one /24 per twin pair) [default: 192.168.0.0/16,
    /// from 192.168.100.0/24 on].
    #[arg(long, value_name = "CIDR")]
    pub pool: Option<AddressPool>,

    /// The MTU of every cabled fabric interface.
    #[arg(long, default_value_t = fabric::DEFAULT_MTU, value_parser = clap::value_parser!(u32).range(1280..=9216))]
    pub mtu: u32,

    /// `link-local: [ ipv4 ]` on one twin of the one cable (NVIDIA's first playbook) instead
    /// of a subnet per twin.
    #[arg(long)]
    pub link_local: bool,
}

impl PlanFlags {
    fn options(&self) -> PlanOptions {
        PlanOptions {
            pool: self.pool.unwrap_or_default(),
            mtu: self.mtu,
            link_local: self.link_local,
        }
    }
}

/// How a node's password is given (first SSH contact and sudo).
#[derive(Debug, Clone, clap::Args)]
pub struct AuthFlags {
    /// Read the password from stdin (one line), for every node that asks (SSH or sudo).
    #[arg(long)]
    pub password_stdin: bool,

    /// Ask for the password once on the terminal and use it for every node that asks.
    #[arg(long, conflicts_with = "password_stdin")]
    pub same_password: bool,
}

#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub target: NodeFlags,
    #[command(flatten)]
    pub plan: PlanFlags,
    #[command(flatten)]
    pub auth: AuthFlags,
}

#[derive(Debug, clap::Args)]
pub struct ApplyArgs {
    #[command(flatten)]
    pub target: NodeFlags,
    #[command(flatten)]
    pub plan: PlanFlags,
    #[command(flatten)]
    pub auth: AuthFlags,

    /// Move other netplan files that configure the same interfaces into a backup folder
    /// (`fabric rollback` restores them) instead of refusing.
    #[arg(long)]
    pub replace: bool,

    /// Print each node's file diff (and what --replace would move); change nothing.
    #[arg(long)]
    pub dry_run: bool,

    /// Each node undoes the change by itself unless spark-launch confirms it within this many
    /// seconds after `netplan apply`.
    #[arg(long, value_name = "SECS", default_value_t = 60, value_parser = clap::value_parser!(u32).range(5..=3600))]
    pub rollback_after: u32,
}

#[derive(Debug, clap::Args)]
pub struct RollbackArgs {
    #[command(flatten)]
    pub target: NodeFlags,
    #[command(flatten)]
    pub auth: AuthFlags,
}

#[derive(Debug, clap::Args)]
pub struct FabricTestArgs {
    #[command(flatten)]
    pub target: NodeFlags,

    /// One cable, NODE:IF=NODE:IF (repeat), as for `fabric plan`.
    #[arg(long = "link", value_name = "NODE:IF=NODE:IF")]
    pub links: Vec<LinkArg>,

    /// Seconds each ib_write_bw measures.
    #[arg(long, value_name = "SECS", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=600))]
    pub duration: u32,

    /// Print the runs (which commands on which node, cable by cable); run nothing.
    #[arg(long)]
    pub dry_run: bool,
}

pub async fn run(args: FabricArgs, ctx: &Context) -> CmdResult {
    match args.command {
        Sub::Plan(a) => plan(a, ctx).await,
        Sub::Apply(a) => apply(a, ctx).await,
        Sub::Rollback(a) => rollback(a, ctx).await,
        Sub::Test(a) => test(a, ctx).await,
    }
}

fn make_plan(
    nodes: &[NodeInput],
    flags: &PlanFlags,
    ctx: &Context,
) -> Result<FabricPlan, CmdError> {
    match fabric::plan(nodes, &flags.links, &flags.options()) {
        Ok(p) => Ok(p),
        Err(e) => {
            if ctx.json
                && let fabric::PlanError::Refused(r) = &e
            {
                print_json(&serde_json::json!({ "refused": r.problems }))?;
            }
            Err(e).invalid()
        }
    }
}

async fn plan(args: PlanArgs, ctx: &Context) -> CmdResult {
    let (nodes, live) = if args.target.uses_snapshots() {
        (snapshots(&args.target, ctx).await?, None)
    } else {
        let live = Live::open(&args.target, &args.auth, ctx).await?;
        let nodes = live.probe(ctx).await?;
        (nodes, Some(live))
    };
    let plan = make_plan(&nodes, &args.plan, ctx);
    if let Some(l) = live {
        l.pool.close().await;
    }
    let plan = plan?;
    if ctx.json {
        print_json(&plan)?;
    } else {
        print_out(&render::text(&plan));
    }
    Ok(Outcome::Success)
}

async fn apply(args: ApplyArgs, ctx: &Context) -> CmdResult {
    if args.target.uses_snapshots() && !args.dry_run {
        return Err(anyhow::anyhow!(
            "fabric apply changes live nodes: with --snapshot, use --dry-run (or `fabric plan`)"
        ))
        .invalid();
    }
    let live = if args.target.uses_snapshots() {
        None
    } else {
        Some(Live::open(&args.target, &args.auth, ctx).await?)
    };
    let nodes = match &live {
        Some(l) => match l.probe(ctx).await {
            Ok(n) => n,
            Err(e) => {
                l.pool.close().await;
                return Err(e);
            }
        },
        None => snapshots(&args.target, ctx).await?,
    };
    let plan = match make_plan(&nodes, &args.plan, ctx) {
        Ok(p) => p,
        Err(e) => {
            if let Some(l) = &live {
                l.pool.close().await;
            }
            return Err(e);
        }
    };
    let preflight = fabric::preflight(&plan, args.replace);
    if args.dry_run {
        if let Some(l) = &live {
            l.pool.close().await;
        }
        let moves = preflight.clone().unwrap_or_default();
        print_dry_run(&plan, &moves, ctx)?;
        // The diffs are shown either way; a conflict the apply would refuse is exit 2.
        return preflight.map(|_| Outcome::Success).invalid();
    }
    let moves = match preflight {
        Ok(m) => m,
        Err(r) => {
            if let Some(l) = &live {
                l.pool.close().await;
            }
            return Err(r).invalid();
        }
    };
    let Some(live) = live else {
        return Ok(Outcome::Success);
    };
    for h in live.pool.handles() {
        if let Some(addr) = h.dest().and_then(|d| d.host.parse().ok())
            && let Some(w) = fabric::cuts_connection(&plan, &nodes, h.name(), addr)
        {
            ctx.reporter.warn(&w);
        }
    }
    if plan.nothing_to_do() {
        ctx.reporter
            .info("nothing to do: the fabric is already addressed as planned; verifying");
    }
    let report = effects::apply(
        &plan,
        &live.pool,
        &live.privileges,
        &live.targets,
        &SshOptions::default(),
        &live.passwords,
        &FabricApplyOptions {
            moves,
            delay_s: 2,
            deadline_s: args.rollback_after,
        },
        &ctx.reporter,
    )
    .await;
    live.pool.close().await;
    if ctx.json {
        print_json(&serde_json::json!({
            "plan": plan,
            "nothing_to_do": plan.nothing_to_do(),
            "nodes": report.nodes,
            "kept": report.kept,
            "links": report.links,
            "ok": report.ok(),
        }))?;
    } else {
        print_out(&apply_text(&plan, &report));
    }
    if report.ok() {
        Ok(Outcome::Success)
    } else {
        let failing: Vec<String> = report
            .links
            .iter()
            .filter(|l| !l.ok())
            .map(|l| l.link.clone())
            .collect();
        if report.kept && !failing.is_empty() {
            Err(anyhow::anyhow!(
                "the fabric is applied but {} link(s) failed verification:\n  {}",
                failing.len(),
                failing.join("\n  ")
            )
            .into())
        } else {
            Err(anyhow::anyhow!(
                "the new fabric configuration was not kept: every node is back as it was (see the table above)"
            )
            .into())
        }
    }
}

fn print_dry_run(
    plan: &FabricPlan,
    moves: &BTreeMap<NodeName, Vec<String>>,
    ctx: &Context,
) -> Result<(), CmdError> {
    let diffs: BTreeMap<String, Option<String>> = plan
        .nodes
        .iter()
        .map(|n| {
            (
                n.name.to_string(),
                n.netplan
                    .as_deref()
                    .map(|new| diff::unified(fabric::FILE, n.current.as_deref(), new)),
            )
        })
        .collect();
    if ctx.json {
        return print_json(&serde_json::json!({
            "dry_run": true,
            "plan": plan,
            "diff": diffs,
            "moves": moves,
            "nothing_to_do": plan.nothing_to_do(),
        }));
    }
    let mut out = String::from("dry run: nothing is changed\n");
    for n in &plan.nodes {
        out.push('\n');
        match diffs.get(n.name.as_str()).cloned().flatten() {
            Some(d) => {
                out.push_str(&format!("{}:\n", n.name));
                for m in moves.get(&n.name).into_iter().flatten() {
                    out.push_str(&format!(
                        "  would move {m} into {}/backup/\n",
                        fabric::script::STATE_DIR
                    ));
                }
                for line in d.lines() {
                    out.push_str(&format!("  {line}\n"));
                }
            }
            None => out.push_str(&format!("{}: nothing to do\n", n.name)),
        }
    }
    if !plan.warnings.is_empty() {
        out.push_str("\nwarnings:\n");
        for w in &plan.warnings {
            out.push_str(&format!("  - {w}\n"));
        }
    }
    print_out(&out);
    Ok(())
}

fn yes_no(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "ok",
        Some(false) => "FAIL",
        None => "-",
    }
}

fn apply_text(plan: &FabricPlan, report: &ApplyReport) -> String {
    let mut out = String::new();
    let mut t = Table::new();
    t.load_style(UTF8_BORDERS_ONLY);
    t.set_header(vec!["node", "result", "detail"]);
    for n in &report.nodes {
        t.add_row(vec![
            n.node.to_string(),
            n.state.to_string(),
            n.detail.join("; "),
        ]);
    }
    out.push_str(&t.to_string());
    out.push('\n');
    if !report.links.is_empty() {
        let mut t = Table::new();
        t.load_style(UTF8_BORDERS_ONLY);
        t.set_header(vec![
            "link",
            "subnet",
            "address a/b",
            "route a→b / b→a",
            &format!("ping -M do {} a→b / b→a", plan.mtu),
            "verdict",
        ]);
        for l in &report.links {
            t.add_row(vec![
                l.link.clone(),
                l.subnet.clone(),
                format!("{} / {}", yes_no(l.a.addr), yes_no(l.b.addr)),
                format!(
                    "{} / {}",
                    route_text(&l.a.route, l.a.route_ok),
                    route_text(&l.b.route, l.b.route_ok)
                ),
                format!("{} / {}", yes_no(l.a.ping), yes_no(l.b.ping)),
                match &l.skipped {
                    Some(why) => format!("skip: {why}"),
                    None if l.ok() => "ok".into(),
                    None => "FAIL".into(),
                },
            ]);
        }
        out.push('\n');
        out.push_str(&t.to_string());
        out.push('\n');
    }
    out
}

fn route_text(route: &Option<String>, ok: Option<bool>) -> String {
    match (ok, route) {
        (Some(true), _) => "ok".into(),
        (Some(false), Some(r)) => format!("via {r}"),
        _ => "-".into(),
    }
}

async fn rollback(args: RollbackArgs, ctx: &Context) -> CmdResult {
    if args.target.uses_snapshots() {
        return Err(anyhow::anyhow!(
            "fabric rollback changes live nodes: use the cluster file, --nodes or --hosts"
        ))
        .invalid();
    }
    let live = Live::open(&args.target, &args.auth, ctx).await?;
    let results = effects::rollback(&live.pool, &live.privileges, &ctx.reporter).await;
    live.pool.close().await;
    let ok = results
        .iter()
        .all(|(_, r)| r.as_ref().is_ok_and(|x| x.left.is_empty() && !x.busy));
    if ctx.json {
        let nodes: serde_json::Map<String, serde_json::Value> = results
            .iter()
            .map(|(n, r)| {
                (
                    n.to_string(),
                    match r {
                        Ok(x) => serde_json::json!(x),
                        Err(e) => serde_json::json!({ "error": e }),
                    },
                )
            })
            .collect();
        print_json(&serde_json::json!({ "nodes": nodes, "ok": ok }))?;
    } else {
        let mut t = Table::new();
        t.load_style(UTF8_BORDERS_ONLY);
        t.set_header(vec!["node", "restored", "removed", "interfaces", "result"]);
        for (n, r) in &results {
            match r {
                Ok(x) if x.nothing => t.add_row(vec![
                    n.to_string(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "nothing to roll back".into(),
                ]),
                Ok(x) => t.add_row(vec![
                    n.to_string(),
                    x.restored.join("\n"),
                    x.removed.join("\n"),
                    x.interfaces.join(", "),
                    if x.busy {
                        "busy: a fabric apply runs there".into()
                    } else if x.left.is_empty() {
                        let mut s = "ok: the planned addresses are gone".to_string();
                        for k in x.kept.iter().chain(&x.warnings) {
                            s.push_str(&format!("\n{k}"));
                        }
                        s
                    } else {
                        format!("FAIL: still up: {}", x.left.join(", "))
                    },
                ]),
                Err(e) => t.add_row(vec![
                    n.to_string(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    format!("FAIL: {e}"),
                ]),
            };
        }
        print_out(&t.to_string());
    }
    if ok {
        Ok(Outcome::Success)
    } else {
        Ok(Outcome::Failed)
    }
}

async fn test(args: FabricTestArgs, ctx: &Context) -> CmdResult {
    if args.target.uses_snapshots() && !args.dry_run {
        return Err(anyhow::anyhow!(
            "fabric test measures live nodes: with --snapshot, use --dry-run to see the runs"
        ))
        .invalid();
    }
    let purpose = if args.dry_run {
        Purpose::Plan
    } else {
        Purpose::Act
    };
    let cluster = resolve::resolve(
        &args.target.selection(ctx),
        Needs::facts(purpose),
        &ctx.reporter,
    )
    .await
    .map_err(super::resolve_error)?;
    let plan = match fabric::perftest::plan(&cluster.inputs(), &args.links, args.duration) {
        Ok(p) => p,
        Err(e) => {
            cluster.close().await;
            return Err(e).invalid();
        }
    };
    if args.dry_run {
        cluster.close().await;
        if ctx.json {
            print_json(&plan)?;
        } else {
            let mut out = String::from("dry run: these runs, one cable after another\n");
            for r in &plan.rounds {
                out.push_str(&format!("\n{}:\n", r.cable));
                out.push_str(&format!(
                    "  on {}:\n{}",
                    r.server_node,
                    indent(&fabric::perftest::server_script(r, plan.duration_s))
                ));
                out.push_str(&format!(
                    "  on {}:\n{}",
                    r.client_node,
                    indent(&fabric::perftest::client_script(r, plan.duration_s))
                ));
            }
            print_out(&out);
        }
        return Ok(Outcome::Success);
    }
    let Some(pool) = cluster.pool() else {
        cluster.close().await;
        return Ok(Outcome::Success);
    };
    let outputs = crate::apply::perftest::run(&plan, pool, &ctx.reporter).await;
    cluster.close().await;
    let report = perf::report(&plan, &outputs);
    if ctx.json {
        print_json(&report)?;
    } else {
        print_out(&test_text(&report));
    }
    Ok(if report.verdict == perf::PerfVerdict::Fail {
        Outcome::Failed
    } else {
        Outcome::Success
    })
}

fn indent(s: &str) -> String {
    s.lines().map(|l| format!("    {l}\n")).collect()
}

fn test_text(r: &perf::TestReport) -> String {
    let mut t = Table::new();
    t.load_style(UTF8_BORDERS_ONLY);
    t.set_header(vec!["twin pair", "Gb/s", "rate allows", "verdict", "notes"]);
    for p in &r.pairs {
        t.add_row(vec![
            p.link.clone(),
            p.gbps
                .map(|g| format!("{g:.1}"))
                .unwrap_or_else(|| "-".into()),
            p.allowed_gbps
                .map(|g| format!("{g:.0}"))
                .unwrap_or_else(|| "unknown".into()),
            p.verdict.label().to_string(),
            p.notes.join("\n"),
        ]);
    }
    let mut out = t.to_string();
    out.push('\n');
    for c in &r.cables {
        out.push_str(&format!(
            "cable {}: {:.1} Gb/s over {} twin pair(s)\n",
            c.cable, c.gbps, c.twin_pairs
        ));
    }
    for s in &r.skipped {
        out.push_str(&format!("not measured: {s}\n"));
    }
    out.push_str(&format!("verdict: {}\n", r.verdict.label()));
    out
}

/// The facts of snapshot nodes, through the resolve stage.
async fn snapshots(target: &NodeFlags, ctx: &Context) -> Result<Vec<NodeInput>, CmdError> {
    let cluster = resolve::resolve(
        &target.selection(ctx),
        Needs::facts(Purpose::Plan),
        &ctx.reporter,
    )
    .await
    .map_err(super::resolve_error)?;
    Ok(cluster.inputs())
}

/// Live nodes for the fabric commands: connected, and each with a way to get root.
struct Live {
    pool: Pool,
    privileges: Privileges,
    targets: Vec<SshTarget>,
    passwords: BTreeMap<NodeName, Password>,
}

impl Live {
    /// The nodes (`--hosts`, the cluster file), connected and with root, each password asked
    /// at most once.
    async fn open(target: &NodeFlags, auth: &AuthFlags, ctx: &Context) -> Result<Live, CmdError> {
        let targets = resolve::ssh_targets(&target.selection(ctx), "fabric")
            .await
            .map_err(super::resolve_error)?;
        let mut asker = Asker::new(auth)?;
        let mut ask = |t: &SshTarget| asker.ask(t);
        let root =
            effects::connect_as_root(&targets, SshOptions::default(), &mut ask, &ctx.reporter)
                .await?;
        Ok(Live {
            pool: root.pool,
            privileges: root.privileges,
            targets,
            passwords: root.passwords,
        })
    }

    /// The fabric facts of every node (the link probe runs everywhere at once), head first.
    async fn probe(&self, ctx: &Context) -> Result<Vec<NodeInput>, CmdError> {
        let step = ctx.reporter.step(&format!(
            "probe {} node(s): facts, cabling (ff02::1 on every fabric port), netplan files",
            self.targets.len()
        ));
        let results = effects::probe_fabric(&self.pool, &self.privileges).await;
        match crate::node::all_ok(results) {
            Ok(nodes) => {
                step.ok();
                Ok(nodes.into_iter().map(|(_, n)| n).collect())
            }
            Err(failures) => {
                step.fail("");
                Err(anyhow::anyhow!("cannot probe: {failures}").into())
            }
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
    fn new(auth: &AuthFlags) -> Result<Asker, CmdError> {
        let stdin = if auth.password_stdin {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|e| anyhow::anyhow!("--password-stdin: cannot read stdin: {e}"))?;
            let line = text.lines().next().unwrap_or("").trim_end_matches('\r');
            if line.is_empty() {
                return Err(anyhow::anyhow!("--password-stdin: stdin is empty")).invalid();
            }
            Some(Password::new(line))
        } else {
            None
        };
        Ok(Asker {
            stdin,
            same: auth.same_password,
            shared: None,
            tty: std::io::stderr().is_terminal() && std::fs::File::open("/dev/tty").is_ok(),
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
        let prompt = if self.same {
            "password for every node that asks (SSH and sudo): ".to_string()
        } else {
            let host = t.addresses.first().map(String::as_str).unwrap_or("?");
            match &t.user {
                Some(u) => format!("{} ({u}@{host}) password: ", t.name),
                None => format!("{} ({host}) password: ", t.name),
            }
        };
        let pw = rpassword::prompt_password(prompt)
            .map(Password::new)
            .map_err(|e| format!("could not read the password: {e}"))?;
        if self.same {
            self.shared = Some(pw.clone());
        }
        Ok(pw)
    }
}
