//! `spark-launch up` and `profiles`: launch profiles — bundled in the binary, or YAML files in
//! the user's folder — run with one command, or listed with whether this cluster can run them.
//! Flags and rendering: profiles are found by `profile::files`, mapped to a launch request by
//! `Profile::request`, launched by `cli::launch::run`.

use std::path::PathBuf;

use comfy_table::{Table, presets::UTF8_BORDERS_ONLY};

use super::args::NodeFlags;
use super::cmd_serve::ServeFlags;
use super::{CmdError, CmdResult, Context, Invalid, Outcome, print_json, print_out};
use crate::model::ModelSource;
use crate::profile::files::{FindError, find, user_profiles};
use crate::profile::fit::{Fit, capacity, fit};
use crate::profile::{self, Loaded, ProfileKind, ProfileOrigin, SetArg};
use crate::resolve::{self, Needs, Purpose};

#[derive(Debug, clap::Args)]
pub struct UpArgs {
    /// A profile name (`spark-launch profiles` lists them) or a path to a profile file.
    pub profile: String,

    /// Change a field before validation (repeat): tp=4, model.revision=v2, env.NCCL_DEBUG=INFO.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<SetArg>,

    /// Your profiles folder [default: $XDG_CONFIG_HOME/spark-launch/profiles].
    #[arg(long, value_name = "DIR", env = "SPARK_LAUNCH_PROFILES")]
    pub profiles_dir: Option<PathBuf>,

    #[command(flatten)]
    pub serve: ServeFlags,
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Your profiles folder [default: $XDG_CONFIG_HOME/spark-launch/profiles].
    #[arg(long, value_name = "DIR", env = "SPARK_LAUNCH_PROFILES")]
    pub profiles_dir: Option<PathBuf>,

    /// Check fit against these nodes; without any, against the cluster file when it exists.
    #[command(flatten)]
    pub target: NodeFlags,
}

/// `$XDG_CONFIG_HOME/spark-launch/profiles`.
pub fn default_profiles_dir() -> PathBuf {
    super::default_cluster_file()
        .parent()
        .map(|p| p.join("profiles"))
        .unwrap_or_else(|| PathBuf::from("profiles"))
}

/// Finds a profile; a missing or invalid one is the user's to fix (exit 2).
pub fn load(name: &str, dir: Option<&PathBuf>, sets: &[SetArg]) -> Result<Loaded, CmdError> {
    let dir = dir.cloned().unwrap_or_else(default_profiles_dir);
    match find(name, &dir, sets) {
        Ok(l) => Ok(l),
        Err(e @ FindError::Read { .. }) | Err(e @ FindError::Unknown { .. }) => Err(e).invalid(),
        Err(FindError::Invalid(e)) => Err(e).invalid(),
    }
}

pub async fn up(args: UpArgs, ctx: &Context) -> CmdResult {
    let loaded = load(&args.profile, args.profiles_dir.as_ref(), &args.sets)?;
    tracing::info!("profile {} from {}", loaded.profile.name, loaded.file);
    let request = loaded.profile.request(&args.serve.overrides()).invalid()?;
    super::launch::run(args.serve.launch(request, ctx), Default::default(), ctx).await
}

#[derive(serde::Serialize)]
struct Row<'a> {
    name: &'a str,
    engine: ProfileKind,
    model: Option<ModelSource>,
    tp: u32,
    pp: u32,
    nodes: u32,
    memory_gib: Option<f64>,
    description: &'a str,
    origin: &'a ProfileOrigin,
    file: &'a str,
    fit: Option<Fit>,
}

pub async fn list(args: ListArgs, ctx: &Context) -> CmdResult {
    let dir = args
        .profiles_dir
        .clone()
        .unwrap_or_else(default_profiles_dir);
    let (user, errors) = user_profiles(&dir);
    for e in &errors {
        ctx.reporter.warn(&e.to_string());
    }
    let all = profile::catalogue(user);
    // Fit: against the nodes given, or the cluster file when there is one.
    let check = args.target.uses_snapshots()
        || !args.target.hosts.is_empty()
        || !args.target.nodes.is_empty()
        || ctx.cluster_file.is_file();
    let caps = if check {
        let selection = args.target.selection(ctx);
        match resolve::inputs(&selection, Needs::facts(Purpose::Plan), &ctx.reporter).await {
            Ok(nodes) => Some(nodes.iter().map(capacity).collect::<Vec<_>>()),
            Err(e) => {
                ctx.reporter.warn(&format!(
                    "cannot check which profiles fit this cluster: {e}"
                ));
                None
            }
        }
    } else {
        None
    };
    let rows: Vec<Row> = all
        .iter()
        .map(|l| Row {
            name: &l.profile.name,
            engine: l.profile.engine,
            model: l.profile.model_source(),
            tp: l.profile.tp,
            pp: l.profile.pp,
            nodes: l.profile.nodes,
            memory_gib: l.profile.memory_gib,
            description: &l.profile.description,
            origin: &l.origin,
            file: &l.file,
            fit: caps.as_ref().map(|c| fit(&l.profile, c)),
        })
        .collect();
    let outcome = if errors.is_empty() {
        Outcome::Success
    } else {
        Outcome::Failed
    };
    if ctx.json {
        print_json(&rows)?;
        return Ok(outcome);
    }
    let mut t = Table::new();
    t.load_style(UTF8_BORDERS_ONLY);
    t.set_header(vec![
        "profile",
        "engine",
        "model",
        "tp×pp",
        "nodes",
        "memory/node",
        "fits",
        "description",
    ]);
    for r in &rows {
        t.add_row(vec![
            format!(
                "{}{}",
                r.name,
                if *r.origin == ProfileOrigin::User {
                    " (yours)"
                } else {
                    ""
                }
            ),
            r.engine.to_string(),
            r.model
                .as_ref()
                .map(|m| m.to_string())
                .unwrap_or_else(|| "-".into()),
            if r.engine.serving().is_none() {
                "-".into()
            } else {
                format!("{}×{}", r.tp, r.pp)
            },
            r.nodes.to_string(),
            r.memory_gib
                .map(|m| format!("{m:.0} GiB"))
                .unwrap_or_else(|| "-".into()),
            r.fit
                .as_ref()
                .map(|f| f.label())
                .unwrap_or_else(|| "?".into()),
            r.description.to_string(),
        ]);
    }
    let mut out = t.to_string();
    if caps.is_none() {
        out.push_str(
            "\n(fits: ? — give --snapshot NAME=DIR per node, or a cluster file, to check node count and memory)",
        );
    }
    out.push_str(&format!(
        "\nyour profiles: {} (run one: spark-launch up NAME)",
        dir.display()
    ));
    print_out(&out);
    Ok(outcome)
}
