//! What a simulated cluster is, decided before anything is made (kind's habit: every name
//! and address first, then the effects): from the request (`--nodes`, `--name`) and what was
//! seen on this machine ([`MachineFacts`]: root or not, which programs are installed, the sims
//! already up, the networks it already routes, the limits its containers may have), either the
//! whole [`SimPlan`] — namespaces, node names and addresses, the management network and this
//! machine's port on it, the stand-in Hub, the image names the stand-in engine goes by, the
//! folders, the cluster file and what to run next — or every reason it cannot be made, each
//! with its fix. `sim down` is planned from the record `sim up` kept, or from the name alone.
//!
//! Pure: facts in, a plan or refusals out.

use std::fmt;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use ipnet::Ipv4Net;
use serde::{Deserialize, Serialize};

use crate::inventory::{Inventory, NodeConfig, SshSettings};
use crate::node::NodeName;
use crate::problem::Problem;
use crate::workload::engines::EngineKind;

/// Where every simulated cluster keeps its files (one folder per cluster, and `nodes/` for
/// the nodes' own folders: their homes, keys, logs and Docker data).
pub const SIM_ROOT: &str = "/var/tmp/spark-launch-sim";

/// The user every simulated node has (uid 4242), the one spark-launch logs in as.
pub const NODE_USER: &str = "sparkuser";
/// Its uid and gid on every node.
pub const NODE_UID: u32 = 4242;

/// The most nodes one simulated cluster has (each runs an sshd and a dockerd).
pub const MAX_NODES: usize = 16;

/// The model the stand-in Hub serves: the one the bundled `smoke-test` profile runs.
pub const SERVED_MODEL: &str = "Qwen/Qwen2.5-0.5B-Instruct";

/// The port of the stand-in Hub.
pub const HUB_PORT: u16 = 8080;

/// The tag the stand-in engine image is built under, before it is tagged with the names
/// the launches look for.
pub const STANDIN_TAG: &str = "spark-launch-sim/standin:1";

/// The management networks a sim may take, `10.231.K.0/24`, the first free one.
const MGMT_BASE: [u8; 2] = [10, 231];

/// A simulated cluster's name: a letter, then up to seven letters or digits (it prefixes the
/// nodes' names, `NAME-n1`, and every namespace and interface made for them).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SimName(String);

impl SimName {
    pub fn new(name: impl Into<String>) -> Result<SimName, String> {
        let name = name.into();
        let ok = (1..=8).contains(&name.len())
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        if ok {
            Ok(SimName(name))
        } else {
            Err(format!(
                "{name:?} is not a sim name: a lowercase letter, then up to seven lowercase letters or digits (e.g. sim, demo2)"
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The prefix of every namespace and node name (`sim-`).
    pub fn prefix(&self) -> String {
        format!("{}-", self.0)
    }

    /// This sim's folder.
    pub fn folder(&self) -> PathBuf {
        Path::new(SIM_ROOT).join(&self.0)
    }

    /// The folder of its nodes (the harness's state: homes, keys, logs, Docker data).
    pub fn nodes_folder(&self) -> PathBuf {
        nodes_root().join(self.prefix())
    }

    /// This machine's end of the link to the management network.
    pub fn host_interface(&self) -> String {
        format!("{}h", self.prefix())
    }
}

impl Default for SimName {
    fn default() -> Self {
        SimName("sim".to_string())
    }
}

impl TryFrom<String> for SimName {
    type Error = String;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        SimName::new(s)
    }
}

impl From<SimName> for String {
    fn from(n: SimName) -> String {
        n.0
    }
}

impl fmt::Display for SimName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for SimName {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SimName::new(s)
    }
}

/// The harness's root (`SIMNET_ROOT`): every sim's nodes folder is under it.
pub fn nodes_root() -> PathBuf {
    Path::new(SIM_ROOT).join("nodes")
}

/// A program a simulated cluster needs, and the Debian/Ubuntu package that has it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Prerequisite {
    /// A name looked up on `PATH`, or an absolute path.
    pub program: &'static str,
    pub package: &'static str,
    pub needed_for: &'static str,
}

/// Every program `sim up` uses, on this machine or inside the nodes (which run this machine's
/// programs).
pub const PREREQUISITES: &[Prerequisite] = &[
    Prerequisite {
        program: "dockerd",
        package: "docker.io",
        needed_for: "the Docker Engine each node runs",
    },
    Prerequisite {
        program: "containerd",
        package: "containerd",
        needed_for: "the Docker Engine each node runs",
    },
    Prerequisite {
        program: "docker",
        package: "docker.io",
        needed_for: "building the stand-in engine image",
    },
    Prerequisite {
        program: "ip",
        package: "iproute2",
        needed_for: "the nodes' network namespaces",
    },
    Prerequisite {
        program: "nsenter",
        package: "util-linux",
        needed_for: "entering the nodes",
    },
    Prerequisite {
        program: "unshare",
        package: "util-linux",
        needed_for: "the nodes' own mounts and host names",
    },
    Prerequisite {
        program: "setpriv",
        package: "util-linux",
        needed_for: "running as the nodes' user",
    },
    Prerequisite {
        program: "setsid",
        package: "util-linux",
        needed_for: "the nodes' daemons",
    },
    Prerequisite {
        program: "perl",
        package: "perl-base",
        needed_for: "the nodes' user accounts",
    },
    Prerequisite {
        program: "/usr/sbin/sshd",
        package: "openssh-server",
        needed_for: "the SSH server each node runs",
    },
    Prerequisite {
        program: "ssh",
        package: "openssh-client",
        needed_for: "reaching the nodes",
    },
    Prerequisite {
        program: "ssh-keygen",
        package: "openssh-client",
        needed_for: "host and user keys",
    },
    Prerequisite {
        program: "curl",
        package: "curl",
        needed_for: "the nodes' requests to the Hub and the API",
    },
    Prerequisite {
        program: "base64",
        package: "coreutils",
        needed_for: "reading the nodes' SSH files",
    },
    Prerequisite {
        program: "/bin/busybox",
        package: "busybox-static",
        needed_for: "the stand-in engine image",
    },
    Prerequisite {
        program: "/usr/bin/python3",
        package: "python3",
        needed_for: "the stand-in engine and Hub",
    },
];

/// The container limits this machine lets a Docker Engine it starts give (a root without
/// `CAP_SYS_RESOURCE` cannot raise a hard limit, so neither can the nodes' engines).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostLimits {
    /// Whether this process may raise hard limits (`CAP_SYS_RESOURCE`).
    pub sys_resource: bool,
    /// The hard `RLIMIT_MEMLOCK` in bytes (`None`: unlimited).
    pub memlock_hard: Option<u64>,
    /// The hard `RLIMIT_NOFILE` (`None`: unlimited).
    pub nofile_hard: Option<u64>,
}

/// What `sim up` and `sim down` saw on this machine.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MachineFacts {
    /// Running as root (uid 0).
    pub root: bool,
    /// The prerequisites not found.
    pub missing: Vec<Prerequisite>,
    /// The sims recorded on this machine.
    pub sims: Vec<SimRecord>,
    /// Network namespaces that exist.
    pub namespaces: Vec<String>,
    /// Names of this machine's network interfaces.
    pub interfaces: Vec<String>,
    /// The networks this machine routes (the default route left out).
    pub routes: Vec<Ipv4Net>,
    /// Folders of sims that exist under [`SIM_ROOT`] (with or without a record).
    pub folders: Vec<String>,
    pub limits: HostLimits,
}

/// `sim up`, as the CLI parsed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpRequest {
    pub name: SimName,
    pub nodes: usize,
}

/// One simulated node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimNode {
    pub name: NodeName,
    /// Its network namespace (also its host name).
    pub namespace: String,
    /// Its address on the management network (what the cluster file names, and SSH uses).
    pub mgmt: Ipv4Addr,
    /// Its address on the fabric (`enp1s0f1np1`).
    pub fabric: Ipv4Addr,
    /// Its Docker Engine's socket, as this machine reaches it.
    pub docker_socket: PathBuf,
}

/// This machine's port on the management network.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostLink {
    pub interface: String,
    pub address: Ipv4Addr,
}

/// The stand-in Hub.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HubPlan {
    /// `http://ADDRESS:PORT`: what `HF_ENDPOINT` is set to.
    pub url: String,
    pub address: Ipv4Addr,
    pub port: u16,
    /// The models it serves.
    pub models: Vec<String>,
    /// The folder of their files.
    pub folder: PathBuf,
    /// Its log.
    pub log: PathBuf,
}

/// The stand-in engine image on every node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImagePlan {
    /// The tag it is built under.
    pub build: String,
    /// The names launches look for, each tagged on every node.
    pub tags: Vec<String>,
    /// The engines it stands in for.
    pub stands_in_for: Vec<String>,
}

/// Everything `sim up` makes, and what `sim down` removes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimPlan {
    pub name: SimName,
    /// The prefix of every namespace, interface and node name.
    pub prefix: String,
    /// The sim's own folder: cluster file, key, known hosts, the Hub's files, the record.
    pub folder: PathBuf,
    /// The nodes' folder (homes, keys, logs, Docker data).
    pub nodes_folder: PathBuf,
    pub cluster_file: PathBuf,
    /// The key spark-launch logs in to the nodes with.
    pub identity: PathBuf,
    /// The nodes' host keys, by name.
    pub known_hosts: PathBuf,
    /// The user on every node.
    pub user: String,
    pub nodes: Vec<SimNode>,
    /// How the nodes' fabric ports are cabled: `direct` (two nodes, one cable) or `bridge`
    /// (a switch).
    pub cabling: String,
    pub mgmt_net: Ipv4Net,
    pub host_link: HostLink,
    pub hub: HubPlan,
    pub image: ImagePlan,
    /// Every network namespace made (the nodes' and the bridges').
    pub namespaces: Vec<String>,
    /// The flags a launch on these nodes needs on this machine (`--gpus none`: the nodes have
    /// no GPUs; a `--ulimit` where this machine cannot give containers more).
    pub launch_flags: Vec<String>,
    /// The steps, in order.
    pub steps: Vec<String>,
}

/// What `sim up` keeps in the sim's folder (`sim.json`), for `sim status` and `sim down`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimRecord {
    pub plan: SimPlan,
    /// When it was made, seconds since the Unix epoch.
    pub created_at: u64,
}

/// The record's file name in the sim's folder.
pub const RECORD: &str = "sim.json";

/// The image names the stand-in engine goes by, and the engines it stands in for: every
/// engine's default image and every bundled profile's, for the engines whose ranks run no
/// MPI between containers (the stand-in image has no sshd or MPI; those engines' images are
/// left out, so a launch of one says the image is missing instead of failing inside).
pub fn standin_images() -> ImagePlan {
    let standin = |e: EngineKind| !e.engine().job_ssh();
    let mut tags: Vec<String> = EngineKind::ALL
        .iter()
        .filter(|e| standin(**e))
        .map(|e| e.engine().default_image().to_string())
        .collect();
    for loaded in crate::profile::bundled() {
        let p = &loaded.profile;
        if let Some(e) = p.engine.serving().filter(|e| standin(*e)) {
            tags.push(
                p.image
                    .clone()
                    .unwrap_or_else(|| e.engine().default_image().to_string()),
            );
        }
    }
    tags.sort();
    tags.dedup();
    ImagePlan {
        build: STANDIN_TAG.to_string(),
        tags,
        stands_in_for: EngineKind::ALL
            .iter()
            .filter(|e| standin(**e))
            .map(|e| e.engine().title().to_string())
            .collect(),
    }
}

/// Every reason this machine cannot run a sim at all (not root, programs missing), each with
/// its fix: what `sim up` refuses with before anything else.
pub fn host_refusals(facts: &MachineFacts) -> Vec<Problem> {
    let mut out = Vec::new();
    if !facts.root {
        out.push(Problem::new("a simulated cluster needs root: it makes network namespaces and runs an sshd and a Docker Engine per node", "run it in a root shell: sudo spark-launch sim up"));
    }
    let docker: Vec<&Prerequisite> = facts
        .missing
        .iter()
        .filter(|p| matches!(p.package, "docker.io" | "containerd"))
        .collect();
    if !docker.is_empty() {
        out.push(Problem::new(format!(
                "no Docker Engine on this machine ({} not found): every simulated node runs its own",
                docker
                    .iter()
                    .map(|p| p.program)
                    .collect::<Vec<_>>()
                    .join(", ")
            ), "install it: sudo apt-get install docker.io (Docker's own docker-ce packages do as well)"));
    }
    let others: Vec<&Prerequisite> = facts
        .missing
        .iter()
        .filter(|p| !matches!(p.package, "docker.io" | "containerd"))
        .collect();
    if !others.is_empty() {
        let mut packages: Vec<&str> = others.iter().map(|p| p.package).collect();
        packages.dedup();
        out.push(Problem::new(
            format!(
                "missing on this machine: {}",
                others
                    .iter()
                    .map(|p| format!("{} ({})", p.program, p.needed_for))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            format!("sudo apt-get install {}", packages.join(" ")),
        ));
    }
    out
}

/// The first management network no sim uses and this machine does not route.
fn free_mgmt_net(facts: &MachineFacts) -> Option<Ipv4Net> {
    (0..=255u8).find_map(|k| {
        let net = Ipv4Net::new(Ipv4Addr::new(MGMT_BASE[0], MGMT_BASE[1], k, 0), 24).ok()?;
        let taken = facts.sims.iter().any(|s| s.plan.mgmt_net == net)
            || facts
                .routes
                .iter()
                .any(|r| r.contains(&net.network()) || net.contains(&r.network()));
        (!taken).then_some(net)
    })
}

/// The address `host` (1–254) of a /24.
fn at(net: &Ipv4Net, host: u8) -> Ipv4Addr {
    let [a, b, c, _] = net.network().octets();
    Ipv4Addr::new(a, b, c, host)
}

/// The flags a launch on the sim needs on this machine.
pub fn launch_flags(limits: &HostLimits) -> Vec<String> {
    let mut flags = vec!["--gpus".to_string(), "none".to_string()];
    if limits.sys_resource {
        return flags;
    }
    if let Some(memlock) = limits.memlock_hard {
        flags.extend(["--ulimit".to_string(), format!("memlock={memlock}")]);
    }
    let nofile = u64::try_from(crate::plan::spec::ULIMIT_NOFILE).unwrap_or(65_536);
    if let Some(hard) = limits.nofile_hard.filter(|h| *h < nofile) {
        flags.extend(["--ulimit".to_string(), format!("nofile={hard}")]);
    }
    flags
}

/// Plans `sim up`: the whole sim, or every reason it cannot be made.
pub fn plan_up(req: &UpRequest, facts: &MachineFacts) -> Result<SimPlan, Vec<Problem>> {
    let mut refusals = host_refusals(facts);
    let name = &req.name;
    let prefix = name.prefix();
    if req.nodes == 0 || req.nodes > MAX_NODES {
        refusals.push(Problem::new(
            format!(
                "--nodes {}: a simulated cluster has 1 to {MAX_NODES} nodes",
                req.nodes
            ),
            "give --nodes 2 (the bundled profiles need two)",
        ));
    }
    if facts.sims.iter().any(|s| &s.plan.name == name)
        || facts.folders.iter().any(|f| f == name.as_str())
    {
        refusals.push(Problem::new(format!("a simulated cluster named {name} is already up (or left over)"), format!(
                "use it (`spark-launch sim status`), remove it first (`spark-launch sim down --name {name}`), or give another --name"
            )));
    } else if let Some(ns) = facts
        .namespaces
        .iter()
        .find(|n| n.starts_with(&prefix))
        .or_else(|| {
            facts
                .interfaces
                .iter()
                .find(|i| **i == name.host_interface())
        })
    {
        refusals.push(Problem::new(
            format!("{ns} already exists on this machine, and {name}'s names start with {prefix}"),
            "give another --name",
        ));
    }
    let mgmt_net = free_mgmt_net(facts);
    if mgmt_net.is_none() {
        refusals.push(Problem::new(
            format!(
                "every network {}.{}.0.0/16 is routed here or used by another sim",
                MGMT_BASE[0], MGMT_BASE[1]
            ),
            "remove a sim (`spark-launch sim down --name NAME`)",
        ));
    }
    let Some(mgmt_net) = mgmt_net.filter(|_| refusals.is_empty()) else {
        return Err(refusals);
    };
    let folder = name.folder();
    let nodes_folder = name.nodes_folder();
    let nodes: Vec<SimNode> = (1..=req.nodes)
        .filter_map(|i| {
            let namespace = format!("{prefix}n{i}");
            Some(SimNode {
                name: NodeName::new(namespace.clone()).ok()?,
                mgmt: at(&mgmt_net, i as u8),
                fabric: Ipv4Addr::new(169, 254, 100, i as u8),
                docker_socket: nodes_folder.join(format!("n{i}")).join("docker.sock"),
                namespace,
            })
        })
        .collect();
    let mut namespaces: Vec<String> = nodes.iter().map(|n| n.namespace.clone()).collect();
    namespaces.push(format!("{prefix}br"));
    let hub_address = at(&mgmt_net, 251);
    let hub = HubPlan {
        url: format!("http://{hub_address}:{HUB_PORT}"),
        address: hub_address,
        port: HUB_PORT,
        models: vec![SERVED_MODEL.to_string()],
        folder: folder.join("hub"),
        log: folder.join("hub.log"),
    };
    let image = standin_images();
    let host_link = HostLink {
        interface: name.host_interface(),
        address: at(&mgmt_net, 250),
    };
    let cabling = if req.nodes == 2 { "direct" } else { "bridge" };
    let head = nodes
        .first()
        .map(|n| n.name.to_string())
        .unwrap_or_default();
    let steps = vec![
        format!(
            "Start {} simulated node{} ({}: sshd and a Docker Engine each) on {mgmt_net}",
            nodes.len(),
            if nodes.len() == 1 { "" } else { "s" },
            nodes
                .iter()
                .map(|n| n.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        "Give spark-launch a key the nodes accept, and their host keys".to_string(),
        format!(
            "Write the cluster file {}",
            folder.join("cluster.yaml").display()
        ),
        "Trust between the nodes (spark-launch trust)".to_string(),
        format!("Build the stand-in engine image on {head}"),
        format!("Tag it {} on every node", image.tags.join(", ")),
        format!(
            "Start the stand-in Hub at {} serving {SERVED_MODEL}",
            hub.url
        ),
    ];
    Ok(SimPlan {
        name: name.clone(),
        prefix,
        cluster_file: folder.join("cluster.yaml"),
        identity: folder.join("id_ed25519"),
        known_hosts: folder.join("known_hosts"),
        folder,
        nodes_folder,
        user: NODE_USER.to_string(),
        nodes,
        cabling: cabling.to_string(),
        mgmt_net,
        host_link,
        hub,
        image,
        namespaces,
        launch_flags: launch_flags(&facts.limits),
        steps,
    })
}

impl SimPlan {
    /// The cluster file: every node by its management address, the sim's user, key and
    /// known-hosts file.
    pub fn inventory(&self) -> Inventory {
        Inventory {
            ssh: SshSettings {
                identity: Some(self.identity.clone()),
                known_hosts: Some(self.known_hosts.clone()),
            },
            nodes: self
                .nodes
                .iter()
                .map(|n| NodeConfig {
                    user: Some(self.user.clone()),
                    ..NodeConfig::new(n.name.clone(), n.mgmt.to_string())
                })
                .collect(),
        }
    }

    /// The cluster file's text.
    pub fn cluster_text(&self) -> Result<String, String> {
        let body = yaml_serde::to_string(&self.inventory()).map_err(|e| e.to_string())?;
        Ok(format!(
            "# The simulated cluster {name}, written by `spark-launch sim up`; `spark-launch sim down --name {name}`\n# removes it (and this file). Use it with `spark-launch --cluster {file} COMMAND`.\n{body}",
            name = self.name,
            file = self.cluster_file.display()
        ))
    }

    /// The `--name` argument of the follow-up commands (none for the default name).
    fn name_arg(&self) -> String {
        if self.name == SimName::default() {
            String::new()
        } else {
            format!(" --name {}", self.name)
        }
    }

    /// What to run next, one command a line: the cluster file and the stand-in Hub for every
    /// command of this shell (`--cluster FILE` on each command does the same as the first),
    /// then the walk-through with this machine's launch flags.
    pub fn next_steps(&self) -> Vec<String> {
        let flags = self.launch_flags.join(" ");
        vec![
            format!(
                "export SPARK_LAUNCH_CLUSTER={} HF_ENDPOINT={}",
                self.cluster_file.display(),
                self.hub.url
            ),
            format!("spark-launch up smoke-test -d {flags}"),
            "spark-launch bench smoke-test".to_string(),
            "spark-launch status --watch smoke-test".to_string(),
            "spark-launch supervise smoke-test".to_string(),
            "spark-launch export systemd smoke-test -o -".to_string(),
            format!("spark-launch sim down{}", self.name_arg()),
        ]
    }
}

/// What `sim down` removes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DownPlan {
    pub name: SimName,
    pub prefix: String,
    /// The namespaces of this sim that exist now.
    pub namespaces: Vec<String>,
    /// This machine's end of the link, when it exists.
    pub host_link: Option<String>,
    /// The sim's folder (cluster file, key, known hosts, the Hub's files, the record).
    pub folder: Option<PathBuf>,
    /// The nodes' folder (their Docker data, with every image loaded there).
    pub nodes_folder: Option<PathBuf>,
    /// Whether anything of it exists.
    pub found: bool,
}

impl DownPlan {
    /// Everything `plan` makes, for removing a sim that failed half-way.
    pub fn of(plan: &SimPlan) -> DownPlan {
        DownPlan {
            name: plan.name.clone(),
            prefix: plan.prefix.clone(),
            namespaces: plan.namespaces.clone(),
            host_link: Some(plan.host_link.interface.clone()),
            folder: Some(plan.folder.clone()),
            nodes_folder: Some(plan.nodes_folder.clone()),
            found: true,
        }
    }
}

/// Plans `sim down NAME`: whatever of the sim exists now, found by its names.
pub fn plan_down(name: &SimName, facts: &MachineFacts) -> DownPlan {
    let prefix = name.prefix();
    let namespaces: Vec<String> = facts
        .namespaces
        .iter()
        .filter(|n| is_ours(n, &prefix))
        .cloned()
        .collect();
    let host_link = facts
        .interfaces
        .iter()
        .find(|i| **i == name.host_interface())
        .cloned();
    let folder = facts
        .folders
        .iter()
        .any(|f| f == name.as_str())
        .then(|| name.folder());
    let nodes_folder = facts
        .folders
        .iter()
        .any(|f| *f == format!("nodes/{prefix}"))
        .then(|| name.nodes_folder());
    let found =
        !namespaces.is_empty() || host_link.is_some() || folder.is_some() || nodes_folder.is_some();
    DownPlan {
        name: name.clone(),
        prefix,
        namespaces,
        host_link,
        folder,
        nodes_folder,
        found,
    }
}

/// Whether a namespace is one the harness made for `prefix`: `PREFIXbr` or `PREFIXnI`.
pub fn is_ours(namespace: &str, prefix: &str) -> bool {
    namespace.strip_prefix(prefix).is_some_and(|rest| {
        rest == "br"
            || rest
                .strip_prefix('n')
                .is_some_and(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root_with_everything() -> MachineFacts {
        MachineFacts {
            root: true,
            limits: HostLimits {
                sys_resource: true,
                ..HostLimits::default()
            },
            ..MachineFacts::default()
        }
    }

    fn req(nodes: usize) -> UpRequest {
        UpRequest {
            name: SimName::default(),
            nodes,
        }
    }

    #[test]
    fn two_nodes_get_names_addresses_a_cable_and_the_first_free_network() {
        let mut facts = root_with_everything();
        // This machine routes the first network already (an office LAN of that name).
        facts.routes = vec!["10.231.0.0/24".parse().unwrap()];
        let plan = plan_up(&req(2), &facts).unwrap();
        assert_eq!(plan.mgmt_net, "10.231.1.0/24".parse::<Ipv4Net>().unwrap());
        let names: Vec<&str> = plan.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["sim-n1", "sim-n2"]);
        assert_eq!(plan.nodes[1].mgmt, Ipv4Addr::new(10, 231, 1, 2));
        assert_eq!(plan.nodes[1].fabric, Ipv4Addr::new(169, 254, 100, 2));
        assert_eq!(plan.cabling, "direct");
        assert_eq!(plan.host_link.address, Ipv4Addr::new(10, 231, 1, 250));
        assert_eq!(plan.hub.url, "http://10.231.1.251:8080");
        assert_eq!(plan.namespaces, ["sim-n1", "sim-n2", "sim-br"]);
        assert_eq!(plan.launch_flags, ["--gpus", "none"]);
        let text = plan.cluster_text().unwrap();
        let inv = crate::inventory::file::parse(&text).unwrap();
        assert_eq!(inv, plan.inventory());
        assert_eq!(inv.nodes[0].addresses, ["10.231.1.1"]);
        assert_eq!(inv.nodes[0].user.as_deref(), Some(NODE_USER));
    }

    #[test]
    fn without_root_or_a_docker_engine_every_reason_is_given_with_its_fix() {
        let facts = MachineFacts {
            root: false,
            missing: PREREQUISITES
                .iter()
                .filter(|p| p.program == "dockerd" || p.program == "/bin/busybox")
                .copied()
                .collect(),
            ..MachineFacts::default()
        };
        let refusals = plan_up(&req(2), &facts).unwrap_err();
        let text: Vec<String> = refusals.iter().map(|r| r.to_string()).collect();
        assert_eq!(refusals.len(), 3, "{text:#?}");
        assert!(text[0].contains("sudo spark-launch sim up"), "{}", text[0]);
        assert!(text[1].contains("dockerd not found"), "{}", text[1]);
        assert!(text[1].contains("apt-get install docker.io"), "{}", text[1]);
        assert!(
            text[2].contains("apt-get install busybox-static"),
            "{}",
            text[2]
        );
    }

    #[test]
    fn a_name_in_use_is_refused_and_a_second_sim_takes_the_next_network() {
        let facts = root_with_everything();
        let first = plan_up(&req(2), &facts).unwrap();
        let mut facts = facts;
        facts.sims.push(SimRecord {
            plan: first,
            created_at: 0,
        });
        facts.folders.push("sim".into());
        let refused = plan_up(&req(2), &facts).unwrap_err();
        assert!(
            refused[0].fix.contains("sim down --name sim"),
            "{refused:?}"
        );
        let other = plan_up(
            &UpRequest {
                name: SimName::new("demo").unwrap(),
                nodes: 3,
            },
            &facts,
        )
        .unwrap();
        assert_eq!(other.mgmt_net, "10.231.1.0/24".parse::<Ipv4Net>().unwrap());
        assert_eq!(other.cabling, "bridge");
        assert!(
            other
                .next_steps()
                .last()
                .unwrap()
                .ends_with("sim down --name demo")
        );
    }

    #[test]
    fn a_machine_that_cannot_raise_limits_gets_the_ulimits_its_engines_can_give() {
        let flags = launch_flags(&HostLimits {
            sys_resource: false,
            memlock_hard: Some(8_388_608),
            nofile_hard: Some(20_000),
        });
        assert_eq!(
            flags,
            [
                "--gpus",
                "none",
                "--ulimit",
                "memlock=8388608",
                "--ulimit",
                "nofile=20000"
            ]
        );
    }

    #[test]
    fn the_stand_in_goes_by_every_image_name_a_launch_of_its_engines_looks_for() {
        let images = standin_images();
        for loaded in crate::profile::bundled() {
            let p = &loaded.profile;
            let Some(e) = p.engine.serving() else {
                continue;
            };
            let image = p
                .image
                .clone()
                .unwrap_or_else(|| e.engine().default_image().to_string());
            assert_eq!(
                images.tags.contains(&image),
                !e.engine().job_ssh(),
                "{} ({image})",
                p.name
            );
        }
    }

    #[test]
    fn the_hub_serves_the_model_of_the_smoke_test() {
        let smoke = crate::profile::bundled()
            .into_iter()
            .find(|l| l.profile.name == "smoke-test")
            .unwrap();
        assert_eq!(
            smoke.profile.model.unwrap().id.as_deref(),
            Some(SERVED_MODEL)
        );
    }

    #[test]
    fn only_the_harness_names_of_a_prefix_are_its_own() {
        assert!(is_ours("sim-n1", "sim-"));
        assert!(is_ours("sim-br", "sim-"));
        assert!(!is_ours("sim-n1x", "sim-"));
        assert!(!is_ours("simx-n1", "sim-"));
        assert!(!is_ours("sim-", "sim-"));
    }

    #[test]
    fn a_sim_name_is_short_lowercase_and_starts_with_a_letter() {
        assert!(SimName::new("sim").is_ok());
        assert!(SimName::new("demo2").is_ok());
        for bad in ["", "Sim", "2sim", "sim-1", "toolongname", "a/b"] {
            assert!(SimName::new(bad).is_err(), "{bad}");
        }
    }
}
