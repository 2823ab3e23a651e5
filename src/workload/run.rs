//! `spark-launch run` as a plan: the same container (or, with the host runtime, process) on
//! every node as one job, then the image check and the start. Pure.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::node::{NodeName, Role};
use crate::plan::spec::{Device, LABEL_PORTS, Mount};
use crate::plan::{
    ContainerSpec, EnsureImage, Gpus, JobName, JobPlan, Launch, NodePlan, ProcessSpec, RuntimeKind,
    Start, Step, Ulimit,
};

/// `--gpus` and `--ulimit` of the launching commands, applied to every container of a plan.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerOverrides {
    pub gpus: Option<Gpus>,
    pub ulimits: Vec<Ulimit>,
}

impl ContainerOverrides {
    /// Applies the overrides to every container of `plan`.
    pub fn apply(&self, plan: &mut JobPlan) {
        for part in &mut plan.nodes {
            if let Launch::Container(spec) = &mut part.launch {
                if let Some(g) = self.gpus {
                    spec.gpus = g;
                }
                spec.override_ulimits(&self.ulimits);
            }
        }
    }
}

/// What `spark-launch run` was asked to start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunRequest {
    pub job: JobName,
    pub runtime: RuntimeKind,
    /// Needed with the docker runtime.
    pub image: Option<String>,
    pub env: BTreeMap<String, String>,
    pub mounts: Vec<Mount>,
    /// Device nodes passed into the container, e.g. `/dev/infiniband`.
    pub devices: Vec<String>,
    /// Ports the job serves on each node, shown by `status`.
    pub ports: Vec<u16>,
    pub command: Vec<String>,
    pub overrides: ContainerOverrides,
}

/// Why `run` cannot be planned.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RunRefusal {
    #[error("give the command to run after `--`")]
    NoCommand,
    #[error("--image is needed with the docker runtime")]
    NoImage,
    #[error("no nodes to run on")]
    NoNodes,
    #[error("--image: {0}")]
    BadImage(String),
}

/// Plans `run` on `nodes` (head first).
pub fn plan(req: &RunRequest, nodes: &[(NodeName, Role)]) -> Result<JobPlan, RunRefusal> {
    if req.command.is_empty() && req.runtime == RuntimeKind::Host {
        return Err(RunRefusal::NoCommand);
    }
    if nodes.is_empty() {
        return Err(RunRefusal::NoNodes);
    }
    let mut parts = Vec::new();
    for (node, role) in nodes {
        let launch = match req.runtime {
            RuntimeKind::Docker => {
                let image = req.image.as_deref().ok_or(RunRefusal::NoImage)?;
                crate::plan::spec::check_image(image).map_err(RunRefusal::BadImage)?;
                let mut spec = ContainerSpec::gpu(&req.job, node, *role, image, false);
                spec.gpus = Gpus::All;
                spec.command = req.command.clone();
                spec.env = req.env.clone();
                spec.mounts = req.mounts.clone();
                spec.ports = req.ports.clone();
                for d in &req.devices {
                    spec.devices.push(Device {
                        host: d.clone(),
                        container: d.clone(),
                        permissions: "rwm".to_string(),
                    });
                }
                Launch::Container(spec)
            }
            RuntimeKind::Host => {
                let mut p = ProcessSpec::new(&req.job, node, *role, req.command.clone());
                p.env = req.env.clone();
                if !req.ports.is_empty() {
                    let ports: Vec<String> = req.ports.iter().map(|p| p.to_string()).collect();
                    p.labels.insert(LABEL_PORTS.to_string(), ports.join(","));
                }
                Launch::Process(p)
            }
        };
        parts.push(NodePlan {
            node: node.clone(),
            role: *role,
            launch,
        });
    }
    let mut plan = JobPlan {
        job: req.job.clone(),
        workload: "run".to_string(),
        runtime: req.runtime,
        nodes: parts,
        steps: Vec::new(),
    };
    req.overrides.apply(&mut plan);
    plan.steps = start_steps(&plan);
    Ok(plan)
}

/// The image checks (one `EnsureImage` per image, on the nodes that run it) and the `Start`
/// of a plan whose parts are set.
pub fn start_steps(plan: &JobPlan) -> Vec<Step> {
    let nodes = plan.node_names();
    let mut steps = Vec::new();
    if plan.runtime == RuntimeKind::Docker {
        let mut images: Vec<String> = Vec::new();
        for part in &plan.nodes {
            if let Launch::Container(c) = &part.launch
                && !images.contains(&c.image)
            {
                images.push(c.image.clone());
            }
        }
        for image in images {
            let on: Vec<NodeName> = plan
                .nodes
                .iter()
                .filter(|p| matches!(&p.launch, Launch::Container(c) if c.image == image))
                .map(|p| p.node.clone())
                .collect();
            steps.push(Step::EnsureImage(EnsureImage { image, nodes: on }));
        }
    }
    steps.push(Step::Start(Start { nodes }));
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes() -> Vec<(NodeName, Role)> {
        vec![
            (NodeName::new("a").unwrap(), Role::Head),
            (NodeName::new("b").unwrap(), Role::Worker),
        ]
    }

    fn request() -> RunRequest {
        RunRequest {
            job: JobName::new("demo").unwrap(),
            runtime: RuntimeKind::Docker,
            image: Some("img:1".into()),
            env: BTreeMap::from([("A".to_string(), "1".to_string())]),
            mounts: vec![Mount {
                source: "/data".into(),
                target: "/data".into(),
                read_only: true,
                kind: crate::plan::spec::MountKind::Bind,
            }],
            devices: vec!["/dev/infiniband".into()],
            ports: vec![8000],
            command: vec!["sleep".into(), "60".into()],
            overrides: ContainerOverrides {
                gpus: Some(Gpus::None),
                ulimits: vec!["memlock=8388608".parse().unwrap()],
            },
        }
    }

    #[test]
    fn run_plans_the_same_gpu_container_on_every_node_with_the_overrides() {
        insta::assert_json_snapshot!(plan(&request(), &nodes()).unwrap());
    }

    #[test]
    fn run_with_the_host_runtime_plans_processes_and_no_image_step() {
        let mut req = request();
        req.runtime = RuntimeKind::Host;
        req.image = None;
        let p = plan(&req, &nodes()).unwrap();
        assert!(matches!(p.nodes[1].launch, Launch::Process(_)));
        assert_eq!(p.steps.len(), 1);
        assert!(p.problems().is_empty());
    }

    #[test]
    fn a_host_job_needs_a_command_and_a_docker_job_an_image() {
        let mut req = request();
        req.runtime = RuntimeKind::Host;
        req.command.clear();
        assert_eq!(plan(&req, &nodes()), Err(RunRefusal::NoCommand));
        let mut req = request();
        req.image = None;
        assert_eq!(plan(&req, &nodes()), Err(RunRefusal::NoImage));
    }
}
