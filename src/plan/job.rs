//! `JobPlan`: what a launching command will do, on which node, in which order. Plain data:
//! `--dry-run --json` prints it, the executor (`apply`) runs exactly it.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

use super::spec::{ContainerSpec, JobName, LABEL_JOB, LABEL_NODE, LABEL_ROLE};
use crate::model::ModelSource;
use crate::node::{NodeName, Role};

/// How a job's work runs on each node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeKind {
    /// Containers through the node's Docker Engine.
    #[default]
    Docker,
    /// Plain processes (bare-metal installs, GPU machines without Docker).
    Host,
}

impl std::fmt::Display for RuntimeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RuntimeKind::Docker => "docker",
            RuntimeKind::Host => "host",
        })
    }
}

/// A plain process on a node, for the host runtime.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessSpec {
    /// `sl-<job>-<node>`, as for containers.
    pub name: String,
    pub command: Vec<String>,
    /// Printed with secrets' values as `<set>` (`secret`); the runtime gets the values.
    #[serde(serialize_with = "super::secret::serialize_env")]
    pub env: BTreeMap<String, String>,
    pub workdir: Option<String>,
    /// Same labels as containers (job, node, role), kept next to the process's pid file.
    pub labels: BTreeMap<String, String>,
}

impl ProcessSpec {
    /// A process for `job` on `node`: name `sl-<job>-<node>` and the three labels set.
    pub fn new(job: &JobName, node: &NodeName, role: Role, command: Vec<String>) -> Self {
        let mut labels = BTreeMap::new();
        labels.insert(LABEL_JOB.to_string(), job.to_string());
        labels.insert(LABEL_NODE.to_string(), node.to_string());
        labels.insert(LABEL_ROLE.to_string(), role.to_string());
        ProcessSpec {
            name: job.container_name(node),
            command,
            env: BTreeMap::new(),
            workdir: None,
            labels,
        }
    }
}

/// What runs on one node.
// One per node of a plan, made once: the size of a container spec costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Launch {
    Container(ContainerSpec),
    Process(ProcessSpec),
}

/// One node's part of a job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodePlan {
    pub node: NodeName,
    pub role: Role,
    pub launch: Launch,
}

/// One step of a job, in order. Steps that name nodes run on those nodes in parallel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "kebab-case")]
pub enum Step {
    /// Every listed node has the image with the same content; missing ones get it pushed.
    EnsureImage { image: String, nodes: Vec<NodeName> },
    /// Start the job's container or process on these nodes.
    Start { nodes: Vec<NodeName> },
    /// Write a file inside the node's container (or on the node for the host runtime).
    WriteFile {
        node: NodeName,
        path: String,
        content: String,
        mode: u32,
    },
    /// Run a command inside the node's container (or on the node); keep its output under
    /// `capture` for the report.
    Exec {
        node: NodeName,
        command: Vec<String>,
        #[serde(default, serialize_with = "super::secret::serialize_env")]
        env: BTreeMap<String, String>,
        capture: Option<String>,
        timeout_s: u64,
    },
    /// Wait until an HTTP endpoint on the node answers with success.
    WaitHttp {
        node: NodeName,
        url: String,
        timeout_s: u64,
    },
    /// Wait until the node's main process (container or host process) exits; its output and
    /// exit code are kept under `capture`. A non-zero exit fails the step unless `allow_failure`.
    WaitExit {
        node: NodeName,
        capture: Option<String>,
        timeout_s: u64,
        #[serde(default)]
        allow_failure: bool,
    },
    /// Nothing listens yet on these ports of these nodes (checked before anything starts).
    CheckPorts { ports: Vec<NodePorts> },
    /// Every `from` node can open a TCP connection to `addr:port` on `to` (a short-lived
    /// listener stands in for the service that will listen there).
    CheckReachable {
        to: NodeName,
        addr: Ipv4Addr,
        port: u16,
        from: Vec<NodeName>,
    },
    /// The model's files are on every listed node, in the Hugging Face cache layout: the
    /// first node downloads, the others copy from it over the fast link. With `copy` false
    /// (`--no-stage`), only check that they are there, and refuse to start if not.
    StageModel {
        model: ModelSource,
        nodes: Vec<NodeName>,
        #[serde(default = "yes")]
        copy: bool,
        /// The Hub's answer (commit and files), looked up once before planning; the staging
        /// asks the Hub for nothing more than the files' bytes. `None` for a local folder, and
        /// in a dry run on snapshots.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        listing: Option<crate::model::hub::Resolved>,
        /// How each worker reaches the first node over the fabric (directly, or relayed
        /// through a node between them in a ring); a worker not listed uses the control plane.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        routes: BTreeMap<NodeName, crate::model::route::CopyRoute>,
    },
    /// The Ray cluster seen from `node` lists every expected member, alive, with its GPUs, at
    /// the address intended for it.
    WaitRay {
        node: NodeName,
        expect: Vec<RayMember>,
        timeout_s: u64,
    },
    /// The serving API on `node` answers `url/health` and lists `model` at `url/v1/models`;
    /// meanwhile the node's log is followed for progress and errors.
    WaitServing {
        node: NodeName,
        url: String,
        model: String,
        engine: String,
        timeout_s: u64,
        /// The API key `/v1/models` is asked with (printed as `<set>`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        api_key: Option<super::secret::Secret>,
    },
    /// `--nccl-from IMAGE`: the node's named volume `volume` holds the `libnccl.so.2` that
    /// `image`'s own loader resolves (copied by a short container of `image`; kept for the
    /// next job, refilled when the image's content changes).
    StageNccl {
        image: String,
        volume: String,
        nodes: Vec<NodeName>,
    },
    /// The NCCL each node's container will load (read without starting it: the image, the
    /// job's loader variables and NCCL mounts) passes `rule`; else nothing starts.
    CheckNccl {
        nodes: Vec<NodeName>,
        rule: crate::libnccl::Rule,
    },
    /// Stop and remove the job's containers or processes on every node.
    Stop,
}

fn yes() -> bool {
    true
}

/// Ports that must be free on one node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodePorts {
    pub node: NodeName,
    pub ports: Vec<u16>,
}

impl NodePorts {
    /// `8000, 6379`.
    fn list(&self) -> String {
        self.ports
            .iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// One node as it must appear in the Ray cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RayMember {
    pub node: NodeName,
    pub ip: Ipv4Addr,
    pub gpus: u32,
}

impl Step {
    /// The one-line title the executor shows for this step (and `--dry-run` prints).
    pub fn title(&self) -> String {
        use crate::node::join as list;
        match self {
            Step::EnsureImage { image, nodes } => {
                format!("Ensure image {image} on {}", list(nodes))
            }
            Step::Start { nodes } => format!("Start on {}", list(nodes)),
            Step::WriteFile { node, path, .. } => format!("Write {path} on {node}"),
            Step::Exec { node, command, .. } => {
                let line = shell_words(command);
                let short: String = line.chars().take(60).collect();
                let dots = if line.chars().count() > 60 { "…" } else { "" };
                format!("Run `{short}{dots}` on {node}")
            }
            Step::WaitHttp { node, url, .. } => format!("Wait for {url} on {node}"),
            Step::WaitExit { node, .. } => format!("Wait for the job to finish on {node}"),
            Step::CheckPorts { ports } => format!(
                "Check ports are free on {}",
                ports
                    .iter()
                    .map(|p| format!("{} ({})", p.node, p.list()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Step::CheckReachable {
                to,
                addr,
                port,
                from,
            } => format!("Check {} reach {to} at {addr}:{port}", list(from)),
            Step::StageModel {
                model,
                nodes,
                copy: true,
                ..
            } => format!("Stage {model} on {}", list(nodes)),
            Step::StageModel { model, nodes, .. } => {
                format!("Check that {model} is on {}", list(nodes))
            }
            Step::WaitRay { node, expect, .. } => {
                format!("Wait for {} Ray nodes on {node}", expect.len())
            }
            Step::WaitServing { node, url, .. } => {
                format!("Wait until {url} serves on {node}")
            }
            Step::StageNccl { image, nodes, .. } => {
                format!("Stage the NCCL of {image} on {}", list(nodes))
            }
            Step::CheckNccl { nodes, .. } => {
                format!("Check the NCCL each container loads on {}", list(nodes))
            }
            Step::Stop => "Stop the job".to_string(),
        }
    }
}

impl Step {
    /// The step as `--dry-run` lists it: its title with what it checks or waits for.
    pub fn describe(&self) -> String {
        use crate::node::join as names;
        let within = |s: u64| crate::progress::human_duration(std::time::Duration::from_secs(s));
        match self {
            Step::EnsureImage { image, nodes } => format!(
                "Ensure image {image} on {} (the same content on every node; pushed where missing)",
                names(nodes)
            ),
            Step::Start { .. } | Step::WriteFile { .. } | Step::Stop => self.title(),
            Step::StageNccl {
                image,
                volume,
                nodes,
            } => format!(
                "Copy the libnccl.so.2 of {image} into the volume {volume} on {} (mounted read-only at {}, first on LD_LIBRARY_PATH)",
                names(nodes),
                crate::libnccl::MOUNT_DIR
            ),
            Step::CheckNccl { nodes, rule } => {
                let mut refuse = vec!["they differ".to_string()];
                if rule.ring && !rule.allow_old {
                    refuse.push(format!(
                        "one is older than {} (a ring)",
                        crate::libnccl::RING_MIN
                    ));
                }
                if rule.nccl_from.is_some() {
                    refuse.push("--nccl-from's library does not come first".to_string());
                }
                format!(
                    "Read the NCCL the containers on {} will load; refuse to start if {}",
                    names(nodes),
                    refuse.join(", or if ")
                )
            }
            Step::Exec {
                node,
                command,
                timeout_s,
                ..
            } => format!(
                "Run `{}` on {node} (≤ {})",
                shell_words(command),
                within(*timeout_s)
            ),
            Step::WaitHttp {
                node,
                url,
                timeout_s,
            } => format!(
                "Wait (≤ {}) until {url} answers on {node}",
                within(*timeout_s)
            ),
            Step::WaitExit {
                node, timeout_s, ..
            } => format!(
                "Wait (≤ {}) for the job to finish on {node}",
                within(*timeout_s)
            ),
            Step::CheckPorts { ports } => format!(
                "Check that nothing listens yet on {}",
                ports
                    .iter()
                    .map(|p| format!("{} port {}", p.node, p.list()))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
            Step::CheckReachable {
                to,
                addr,
                port,
                from,
            } => format!(
                "Check that {} reach{} {to} at {addr}:{port}",
                names(from),
                if from.len() == 1 { "es" } else { "" }
            ),
            Step::StageModel {
                model,
                nodes,
                copy: true,
                ..
            } => format!(
                "Stage {model} on {} (the first downloads, the others copy from it over the fast link)",
                names(nodes)
            ),
            Step::StageModel { model, nodes, .. } => format!(
                "Check that {model} is already on {} (--no-stage), and refuse to start if not",
                names(nodes)
            ),
            Step::WaitRay {
                node,
                expect,
                timeout_s,
            } => format!(
                "Wait (≤ {}) until Ray on {node} lists {}",
                within(*timeout_s),
                expect
                    .iter()
                    .map(|m| format!("{} at {} with {} GPU", m.node, m.ip, m.gpus))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Step::WaitServing {
                node,
                url,
                model,
                timeout_s,
                ..
            } => format!(
                "Poll the API and wait (≤ {}) until {url}/health answers on {node} and /v1/models lists {model}",
                within(*timeout_s)
            ),
        }
    }
}

/// A command as one shell-quoted line (for titles, `--dry-run` and error messages).
pub fn shell_words(argv: &[String]) -> String {
    crate::quote::display(argv)
}

/// A whole job: who runs what, and the steps.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobPlan {
    pub job: JobName,
    /// `nccl-test`, `vllm`, ...
    pub workload: String,
    pub runtime: RuntimeKind,
    pub nodes: Vec<NodePlan>,
    pub steps: Vec<Step>,
}

impl JobPlan {
    /// Nothing to run (`--dry-run` says "nothing to do").
    pub fn is_noop(&self) -> bool {
        self.nodes.is_empty() && self.steps.is_empty()
    }

    pub fn node(&self, name: &NodeName) -> Option<&NodePlan> {
        self.nodes.iter().find(|n| &n.node == name)
    }

    /// The nodes of the job, head first, as the plan lists them.
    pub fn node_names(&self) -> Vec<NodeName> {
        self.nodes.iter().map(|n| n.node.clone()).collect()
    }

    /// Every problem that makes this plan impossible to run, all at once (STYLE rule 5): steps
    /// naming nodes the plan has no part for, launches of the wrong kind for the runtime, a
    /// container or process name that is not `sl-<job>-<node>`, nodes given twice.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for n in &self.nodes {
            if !seen.insert(n.node.clone()) {
                out.push(format!("node {} has two parts in the plan", n.node));
            }
            let (kind_ok, name, labels) = match (&n.launch, self.runtime) {
                (Launch::Container(c), RuntimeKind::Docker) => (true, &c.name, &c.labels),
                (Launch::Process(p), RuntimeKind::Host) => (true, &p.name, &p.labels),
                (Launch::Container(c), RuntimeKind::Host) => (false, &c.name, &c.labels),
                (Launch::Process(p), RuntimeKind::Docker) => (false, &p.name, &p.labels),
            };
            if !kind_ok {
                out.push(format!(
                    "node {}: a {} launch in a {:?} job",
                    n.node,
                    match n.launch {
                        Launch::Container(_) => "container",
                        Launch::Process(_) => "process",
                    },
                    self.runtime
                ));
            }
            if let Launch::Container(c) = &n.launch
                && let Err(e) = super::spec::check_image(&c.image)
            {
                out.push(format!("node {}: {e}", n.node));
            }
            let want = self.job.container_name(&n.node);
            if *name != want {
                out.push(format!("node {}: name {name:?} should be {want:?}", n.node));
            }
            if labels.get(super::spec::LABEL_JOB).map(|s| s.as_str()) != Some(self.job.as_str()) {
                out.push(format!("node {}: missing the job label", n.node));
            }
        }
        let known = |node: &NodeName, out: &mut Vec<String>, what: &str| {
            if !seen.contains(node) {
                out.push(format!(
                    "step `{what}` names node {node}, which has no part in the plan"
                ));
            }
        };
        for step in &self.steps {
            let title = step.title();
            match step {
                Step::EnsureImage { nodes, .. } | Step::Start { nodes } => {
                    for n in nodes {
                        known(n, &mut out, &title);
                    }
                }
                Step::StageModel { nodes, .. }
                | Step::StageNccl { nodes, .. }
                | Step::CheckNccl { nodes, .. } => {
                    for n in nodes {
                        known(n, &mut out, &title);
                    }
                }
                Step::CheckPorts { ports } => {
                    for p in ports {
                        known(&p.node, &mut out, &title);
                    }
                }
                Step::CheckReachable { to, from, .. } => {
                    known(to, &mut out, &title);
                    for n in from {
                        known(n, &mut out, &title);
                    }
                }
                Step::WriteFile { node, .. }
                | Step::Exec { node, .. }
                | Step::WaitHttp { node, .. }
                | Step::WaitExit { node, .. }
                | Step::WaitRay { node, .. }
                | Step::WaitServing { node, .. } => known(node, &mut out, &title),
                Step::Stop => {}
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> NodeName {
        NodeName::new(s).unwrap()
    }

    fn plan() -> JobPlan {
        let job = JobName::new("demo").unwrap();
        JobPlan {
            job: job.clone(),
            workload: "run".into(),
            runtime: RuntimeKind::Docker,
            nodes: vec![
                NodePlan {
                    node: n("a"),
                    role: Role::Head,
                    launch: Launch::Container(ContainerSpec::new(&job, &n("a"), Role::Head, "i")),
                },
                NodePlan {
                    node: n("b"),
                    role: Role::Worker,
                    launch: Launch::Container(ContainerSpec::new(&job, &n("b"), Role::Worker, "i")),
                },
            ],
            steps: vec![
                Step::EnsureImage {
                    image: "i".into(),
                    nodes: vec![n("a"), n("b")],
                },
                Step::Start {
                    nodes: vec![n("a"), n("b")],
                },
            ],
        }
    }

    #[test]
    fn a_well_formed_plan_has_no_problems() {
        assert!(plan().problems().is_empty());
    }

    #[test]
    fn a_plan_reports_every_problem_at_once() {
        let mut p = plan();
        p.steps.push(Step::Exec {
            node: n("ghost"),
            command: vec!["true".into()],
            env: BTreeMap::new(),
            capture: None,
            timeout_s: 1,
        });
        if let Launch::Container(c) = &mut p.nodes[1].launch {
            c.name = "random".into();
        }
        p.runtime = RuntimeKind::Host;
        let problems = p.problems();
        assert_eq!(problems.len(), 4, "{problems:#?}");
        assert!(problems.iter().any(|x| x.contains("ghost")));
        assert!(problems.iter().any(|x| x.contains("\"random\"")));
    }

    #[test]
    fn step_titles_name_the_nodes_and_shorten_long_commands() {
        let p = plan();
        assert_eq!(p.steps[1].title(), "Start on a, b");
        let exec = Step::Exec {
            node: n("a"),
            command: vec!["sh".into(), "-c".into(), "x".repeat(80)],
            env: BTreeMap::new(),
            capture: None,
            timeout_s: 1,
        };
        assert!(exec.title().ends_with("…` on a"), "{}", exec.title());
    }

    #[test]
    fn a_plan_survives_a_json_round_trip() {
        let p = plan();
        let back: JobPlan = serde_json::from_str(&serde_json::to_string(&p).unwrap()).unwrap();
        assert_eq!(p, back);
    }

    #[test]
    fn a_process_spec_carries_the_labels_and_the_deterministic_name() {
        let job = JobName::new("nccl").unwrap();
        let p = ProcessSpec::new(&job, &n("a"), Role::Head, vec!["sleep".into()]);
        assert_eq!(p.name, "sl-nccl-a");
        assert_eq!(p.labels[LABEL_ROLE], "head");
    }
}
