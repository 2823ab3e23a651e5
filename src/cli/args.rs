//! The flag groups many commands share, and how each becomes a library type: which nodes
//! (`--snapshot`, `--hosts`, `--nodes`, `--engine`, `--local` → `resolve::Selection`), how to
//! launch (`--dry-run`, `--keep`, `--no-push`, `--concurrency` → `apply::ApplyOptions`), and what
//! every container gets (`--gpus`, `--ulimit` → `workload::run::ContainerOverrides`). Parsing
//! only: no I/O here.

use clap::{Args, ValueEnum};

use super::Context;
use crate::apply::ApplyOptions;
use crate::images::PushPolicy;
use crate::inventory::HostSpec;
use crate::node::NodeName;
use crate::plan::secret::secret_env_name;
use crate::plan::{Gpus, RuntimeKind, Ulimit};
use crate::resolve::{EngineRef, Selection, SnapshotRef};
use crate::workload::run::ContainerOverrides;

/// Which nodes a cluster command works on. Without any of these: the cluster file.
#[derive(Clone, Debug, Default, Args)]
pub struct NodeFlags {
    /// Use a probe snapshot instead of a live node (repeat; the first is the head).
    #[arg(long = "snapshot", value_name = "NAME=DIR")]
    pub snapshots: Vec<SnapshotRef>,

    /// Nodes by address instead of the cluster file, comma-separated, the first is the head:
    /// [NAME=][user@]host[:port] (e.g. 169.254.3.7,spark-b=nvidia@169.254.3.8).
    #[arg(
        long,
        value_name = "HOSTS",
        value_delimiter = ',',
        conflicts_with = "snapshots"
    )]
    pub hosts: Vec<HostSpec>,

    /// Only these nodes of the cluster file (comma-separated names).
    #[arg(
        long = "nodes",
        value_name = "NAMES",
        value_delimiter = ',',
        conflicts_with_all = ["snapshots", "hosts"]
    )]
    pub nodes: Vec<NodeName>,
}

impl NodeFlags {
    /// The selection these flags make, with the cluster file of the run.
    pub fn selection(&self, ctx: &Context) -> Selection {
        Selection {
            snapshots: self.snapshots.clone(),
            hosts: self.hosts.clone(),
            nodes: self.nodes.clone(),
            engines: Vec::new(),
            local: false,
            root: None,
            cluster_file: ctx.cluster_file.clone(),
        }
    }

    pub fn uses_snapshots(&self) -> bool {
        !self.snapshots.is_empty()
    }
}

/// Nodes reached through a Docker socket on this machine (job commands).
#[derive(Clone, Debug, Default, Args)]
pub struct EngineFlags {
    /// Reach a node through a Docker socket on this machine (repeat; the first is the head):
    /// NAME=unix:///path/docker.sock, or NAME=local for this machine. Default: this machine.
    #[arg(long = "engine", value_name = "NAME=SOCKET")]
    pub engines: Vec<EngineRef>,
}

/// How the job runs on each node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum RuntimeFlag {
    /// Containers through the node's Docker Engine.
    #[default]
    Docker,
    /// Plain processes (bare-metal installs, GPU machines without Docker).
    Host,
}

impl From<RuntimeFlag> for RuntimeKind {
    fn from(r: RuntimeFlag) -> Self {
        match r {
            RuntimeFlag::Docker => RuntimeKind::Docker,
            RuntimeFlag::Host => RuntimeKind::Host,
        }
    }
}

/// The flags of every launching command (`run`, `nccl-test`, `nccl-build`, each serving
/// engine's command, `up`).
#[derive(Clone, Debug, Default, Args)]
pub struct LaunchFlags {
    /// Print the plan (per node: container spec or process, and the steps) and touch nothing.
    #[arg(long)]
    pub dry_run: bool,

    /// After a failure or Ctrl-C, leave what started in place (for a look; stop it with
    /// `spark-launch stop JOB`).
    #[arg(long, visible_alias = "keep-on-failure")]
    pub keep: bool,

    /// Refuse to start when a node lacks the image, instead of pushing it there.
    #[arg(long)]
    pub no_push: bool,

    /// Nodes worked on at once (0 = all).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub concurrency: usize,

    /// Treat this variable as a secret (repeat): `<set>` in every printed plan, its value only
    /// in the container's create request or the host process's 0600 env file. Names with
    /// TOKEN, KEY, SECRET, PASS, AUTH, BEARER, CRED, PRIVATE, COOKIE or SESSION already are.
    #[arg(long = "secret-env", value_name = "NAME", value_parser = secret_env_name)]
    pub secret_env: Vec<String>,
}

impl LaunchFlags {
    pub fn apply_options(&self) -> ApplyOptions {
        ApplyOptions {
            keep: self.keep,
            concurrency: self.concurrency,
            push: if self.no_push {
                PushPolicy::Refuse
            } else {
                PushPolicy::Push
            },
            secret_env: self.secret_env.clone(),
            ..ApplyOptions::default()
        }
    }
}

/// What every container of a launch gets beyond the plan's defaults.
#[derive(Clone, Debug, Default, Args)]
pub struct ContainerFlags {
    /// GPUs per container: none, all, or a count.
    #[arg(long, value_name = "none|all|N")]
    pub gpus: Option<Gpus>,

    /// Replace a container limit by name (repeat): memlock=-1, nofile=65536:65536.
    #[arg(long = "ulimit", value_name = "NAME=SOFT[:HARD]")]
    pub ulimits: Vec<Ulimit>,
}

impl ContainerFlags {
    pub fn overrides(&self) -> ContainerOverrides {
        ContainerOverrides {
            gpus: self.gpus,
            ulimits: self.ulimits.clone(),
        }
    }
}
