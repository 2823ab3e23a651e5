//! `JobPlan`: what a launching command will do, on which node, in which order. Plain data:
//! `--dry-run --json` prints it, the executor (`apply`) runs exactly it. Its steps are
//! `plan::step`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::spec::{ContainerSpec, JobName, LABEL_JOB, LABEL_NODE, LABEL_ROLE};
use super::step::Step;
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

    /// Every problem that makes this plan impossible to run, all at once (one run shows every problem, not the first): steps
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
            for node in step.payload().nodes() {
                known(node, &mut out, &title);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::step::{EnsureImage, Exec, Start};

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
                Step::EnsureImage(EnsureImage {
                    image: "i".into(),
                    nodes: vec![n("a"), n("b")],
                }),
                Step::Start(Start {
                    nodes: vec![n("a"), n("b")],
                }),
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
        p.steps.push(Step::Exec(Exec {
            node: n("ghost"),
            command: vec!["true".into()],
            env: BTreeMap::new(),
            capture: None,
            timeout_s: 1,
        }));
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
        let exec = Step::Exec(Exec {
            node: n("a"),
            command: vec!["sh".into(), "-c".into(), "x".repeat(80)],
            env: BTreeMap::new(),
            capture: None,
            timeout_s: 1,
        });
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
