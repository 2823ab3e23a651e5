//! The steps of a job, each written once: a [`Step`] is one of the payload structs below, plain
//! data that `--dry-run` prints and the executor runs (each payload is its own phase, in
//! `apply::phases`). What a step says about itself — its status-line title, its `--dry-run`
//! line, the nodes it names — is said here, once, by [`StepPayload`]. Pure: no effects.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

use super::job::shell_words;
use crate::model::ModelSource;
use crate::node::NodeName;

/// What every step's payload says about itself.
pub trait StepPayload {
    /// The one-line title the executor shows for this step (and plan problems name it by).
    fn title(&self) -> String;
    /// The step as `--dry-run` lists it: its title with what it checks or waits for.
    fn describe(&self) -> String {
        self.title()
    }
    /// The nodes the step names; each must have a part in the plan.
    fn nodes(&self) -> Vec<&NodeName>;
}

/// One step of a job, in order. Steps that name nodes run on those nodes in parallel.
///
/// Internally tagged (`{"step": "start", "nodes": [...]}`): each variant's payload fields sit
/// beside the tag, as they did when the variants carried the fields themselves.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "kebab-case")]
pub enum Step {
    EnsureImage(EnsureImage),
    EnsureFolders(EnsureFolders),
    Start(Start),
    WriteFile(WriteFile),
    Exec(Exec),
    WaitHttp(WaitHttp),
    WaitExit(WaitExit),
    CheckPorts(CheckPorts),
    CheckReachable(CheckReachable),
    /// Boxed: the largest step by far (its model, listing and routes).
    StageModel(Box<StageModel>),
    WaitRay(WaitRay),
    WaitServing(WaitServing),
    StageNccl(StageNccl),
    CheckNccl(CheckNccl),
    Stop(Stop),
}

impl Step {
    /// The payload, as what it says about itself.
    pub fn payload(&self) -> &dyn StepPayload {
        match self {
            Step::EnsureImage(s) => s,
            Step::EnsureFolders(s) => s,
            Step::Start(s) => s,
            Step::WriteFile(s) => s,
            Step::Exec(s) => s,
            Step::WaitHttp(s) => s,
            Step::WaitExit(s) => s,
            Step::CheckPorts(s) => s,
            Step::CheckReachable(s) => s,
            Step::StageModel(s) => s.as_ref(),
            Step::WaitRay(s) => s,
            Step::WaitServing(s) => s,
            Step::StageNccl(s) => s,
            Step::CheckNccl(s) => s,
            Step::Stop(s) => s,
        }
    }

    /// The one-line title the executor shows for this step.
    pub fn title(&self) -> String {
        self.payload().title()
    }

    /// The step as `--dry-run` lists it.
    pub fn describe(&self) -> String {
        self.payload().describe()
    }
}

/// `≤ 3m` in `--dry-run` lines.
fn within(s: u64) -> String {
    crate::progress::human_duration(std::time::Duration::from_secs(s))
}

fn names(nodes: &[NodeName]) -> String {
    crate::node::join(nodes)
}

/// Every listed node has the image with the same content; missing ones get it pushed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnsureImage {
    pub image: String,
    pub nodes: Vec<NodeName>,
}

impl StepPayload for EnsureImage {
    fn title(&self) -> String {
        format!("Ensure image {} on {}", self.image, names(&self.nodes))
    }
    fn describe(&self) -> String {
        format!(
            "Ensure image {} on {} (the same content on every node; pushed where missing)",
            self.image,
            names(&self.nodes)
        )
    }
    fn nodes(&self) -> Vec<&NodeName> {
        self.nodes.iter().collect()
    }
}

/// A folder on each listed node, created with its parents when missing, as the user
/// spark-launch connects as (so it is theirs, not the root-owned folder Docker would make for a
/// missing mount source); never emptied or removed. `~/` is the home on the node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnsureFolders {
    /// What the folders are for (`runtime cache`), as the status line says it.
    pub what: String,
    pub folders: BTreeMap<NodeName, String>,
}

impl StepPayload for EnsureFolders {
    fn title(&self) -> String {
        let nodes: Vec<NodeName> = self.folders.keys().cloned().collect();
        format!("Ensure the {} folder on {}", self.what, names(&nodes))
    }
    fn describe(&self) -> String {
        format!(
            "{} (created when missing, kept across restarts and stops)",
            self.title()
        )
    }
    fn nodes(&self) -> Vec<&NodeName> {
        self.folders.keys().collect()
    }
}

/// Start the job's container or process on these nodes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Start {
    pub nodes: Vec<NodeName>,
}

impl StepPayload for Start {
    fn title(&self) -> String {
        format!("Start on {}", names(&self.nodes))
    }
    fn nodes(&self) -> Vec<&NodeName> {
        self.nodes.iter().collect()
    }
}

/// Write a file inside the node's container (or on the node for the host runtime).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteFile {
    pub node: NodeName,
    pub path: String,
    pub content: String,
    pub mode: u32,
}

impl StepPayload for WriteFile {
    fn title(&self) -> String {
        format!("Write {} on {}", self.path, self.node)
    }
    fn nodes(&self) -> Vec<&NodeName> {
        vec![&self.node]
    }
}

/// Run a command inside the node's container (or on the node); keep its output under
/// `capture` for the report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exec {
    pub node: NodeName,
    pub command: Vec<String>,
    #[serde(default, serialize_with = "super::secret::serialize_env")]
    pub env: BTreeMap<String, String>,
    pub capture: Option<String>,
    pub timeout_s: u64,
}

impl StepPayload for Exec {
    fn title(&self) -> String {
        let line = shell_words(&self.command);
        let short: String = line.chars().take(60).collect();
        let dots = if line.chars().count() > 60 { "…" } else { "" };
        format!("Run `{short}{dots}` on {}", self.node)
    }
    fn describe(&self) -> String {
        format!(
            "Run `{}` on {} (≤ {})",
            shell_words(&self.command),
            self.node,
            within(self.timeout_s)
        )
    }
    fn nodes(&self) -> Vec<&NodeName> {
        vec![&self.node]
    }
}

/// Wait until an HTTP endpoint on the node answers with success.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitHttp {
    pub node: NodeName,
    pub url: String,
    pub timeout_s: u64,
}

impl StepPayload for WaitHttp {
    fn title(&self) -> String {
        format!("Wait for {} on {}", self.url, self.node)
    }
    fn describe(&self) -> String {
        format!(
            "Wait (≤ {}) until {} answers on {}",
            within(self.timeout_s),
            self.url,
            self.node
        )
    }
    fn nodes(&self) -> Vec<&NodeName> {
        vec![&self.node]
    }
}

/// Wait until the node's main process (container or host process) exits; its output and
/// exit code are kept under `capture`. A non-zero exit fails the step unless `allow_failure`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitExit {
    pub node: NodeName,
    pub capture: Option<String>,
    pub timeout_s: u64,
    #[serde(default)]
    pub allow_failure: bool,
}

impl StepPayload for WaitExit {
    fn title(&self) -> String {
        format!("Wait for the job to finish on {}", self.node)
    }
    fn describe(&self) -> String {
        format!(
            "Wait (≤ {}) for the job to finish on {}",
            within(self.timeout_s),
            self.node
        )
    }
    fn nodes(&self) -> Vec<&NodeName> {
        vec![&self.node]
    }
}

/// Nothing listens yet on these ports of these nodes (checked before anything starts).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckPorts {
    pub ports: Vec<NodePorts>,
}

impl StepPayload for CheckPorts {
    fn title(&self) -> String {
        format!(
            "Check ports are free on {}",
            self.ports
                .iter()
                .map(|p| format!("{} ({})", p.node, p.list()))
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
    fn describe(&self) -> String {
        format!(
            "Check that nothing listens yet on {}",
            self.ports
                .iter()
                .map(|p| format!("{} port {}", p.node, p.list()))
                .collect::<Vec<_>>()
                .join("; ")
        )
    }
    fn nodes(&self) -> Vec<&NodeName> {
        self.ports.iter().map(|p| &p.node).collect()
    }
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
        crate::node::join(&self.ports)
    }
}

/// Every `from` node can open a TCP connection to `addr:port` on `to` (a short-lived
/// listener stands in for the service that will listen there).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckReachable {
    pub to: NodeName,
    pub addr: Ipv4Addr,
    pub port: u16,
    pub from: Vec<NodeName>,
}

impl StepPayload for CheckReachable {
    fn title(&self) -> String {
        format!(
            "Check {} reach {} at {}:{}",
            names(&self.from),
            self.to,
            self.addr,
            self.port
        )
    }
    fn describe(&self) -> String {
        format!(
            "Check that {} reach{} {} at {}:{}",
            names(&self.from),
            if self.from.len() == 1 { "es" } else { "" },
            self.to,
            self.addr,
            self.port
        )
    }
    fn nodes(&self) -> Vec<&NodeName> {
        std::iter::once(&self.to).chain(&self.from).collect()
    }
}

/// The model's files are on every listed node, in the Hugging Face cache layout: the
/// first node downloads, the others copy from it over the fast link. With `copy` false
/// (`--no-stage`), only check that they are there, and refuse to start if not. Either way each
/// node's Hugging Face cache folder (the containers mount it at `HF_HOME`) is created when it is
/// missing: Docker refuses to bind-mount a folder that does not exist (a local model folder
/// never fills the cache).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageModel {
    pub model: ModelSource,
    pub nodes: Vec<NodeName>,
    #[serde(default = "yes")]
    pub copy: bool,
    /// The Hub's answer (commit and files), looked up once before planning; the staging
    /// asks the Hub for nothing more than the files' bytes. `None` for a local folder, and
    /// in a dry run on snapshots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listing: Option<crate::model::hub::Resolved>,
    /// How each worker reaches the first node over the fabric (directly, or relayed
    /// through a node between them in a ring); a worker not listed uses the control plane.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub routes: BTreeMap<NodeName, crate::model::route::CopyRoute>,
}

fn yes() -> bool {
    true
}

impl StepPayload for StageModel {
    fn title(&self) -> String {
        if self.copy {
            format!("Stage {} on {}", self.model, names(&self.nodes))
        } else {
            format!("Check that {} is on {}", self.model, names(&self.nodes))
        }
    }
    fn describe(&self) -> String {
        let what = if self.copy {
            format!(
                "Stage {} on {} (the first downloads, the others copy from it over the fast link)",
                self.model,
                names(&self.nodes)
            )
        } else {
            format!(
                "Check that {} is already on {} (--no-stage), and refuse to start if not",
                self.model,
                names(&self.nodes)
            )
        };
        format!("{what}; each node's Hugging Face cache folder is created when missing")
    }
    fn nodes(&self) -> Vec<&NodeName> {
        self.nodes.iter().collect()
    }
}

/// The Ray cluster seen from `node` lists every expected member, alive, with its GPUs, at
/// the address intended for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitRay {
    pub node: NodeName,
    pub expect: Vec<RayMember>,
    pub timeout_s: u64,
}

/// One node as it must appear in the Ray cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RayMember {
    pub node: NodeName,
    pub ip: Ipv4Addr,
    pub gpus: u32,
}

impl StepPayload for WaitRay {
    fn title(&self) -> String {
        format!("Wait for {} Ray nodes on {}", self.expect.len(), self.node)
    }
    fn describe(&self) -> String {
        format!(
            "Wait (≤ {}) until Ray on {} lists {}",
            within(self.timeout_s),
            self.node,
            self.expect
                .iter()
                .map(|m| format!("{} at {} with {} GPU", m.node, m.ip, m.gpus))
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
    fn nodes(&self) -> Vec<&NodeName> {
        vec![&self.node]
    }
}

/// The serving API on `node` answers `url/health` and lists `model` at `url/v1/models`;
/// meanwhile the node's log is followed for progress and errors.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitServing {
    pub node: NodeName,
    pub url: String,
    pub model: String,
    pub engine: String,
    pub timeout_s: u64,
    /// The API key `/v1/models` is asked with (printed as `<set>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<super::secret::Secret>,
    /// `--no-check`: ready at the first token; the questions of `spark-launch check` are not
    /// asked (shown only when set).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_check: bool,
}

impl StepPayload for WaitServing {
    fn title(&self) -> String {
        format!("Wait until {} serves {}", self.url, self.model)
    }
    fn describe(&self) -> String {
        format!(
            "Poll the API and wait (≤ {}) until {}/health answers on {}, /v1/models lists {} and a streamed completion brings a token back{}",
            within(self.timeout_s),
            self.url,
            self.node,
            self.model,
            if self.no_check {
                "; its answers are not checked (--no-check)"
            } else {
                "; then ask it questions it must answer right (spark-launch check's arithmetic, termination and soup)"
            }
        )
    }
    fn nodes(&self) -> Vec<&NodeName> {
        vec![&self.node]
    }
}

/// `--nccl-from IMAGE`: the node's named volume `volume` holds the `libnccl.so.2` that
/// `image`'s own loader resolves (copied by a short container of `image`; kept for the
/// next job, refilled when the image's content changes).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageNccl {
    pub image: String,
    pub volume: String,
    pub nodes: Vec<NodeName>,
}

impl StepPayload for StageNccl {
    fn title(&self) -> String {
        format!("Stage the NCCL of {} on {}", self.image, names(&self.nodes))
    }
    fn describe(&self) -> String {
        format!(
            "Copy the libnccl.so.2 of {} into the volume {} on {} (mounted read-only at {}, first on LD_LIBRARY_PATH)",
            self.image,
            self.volume,
            names(&self.nodes),
            crate::libnccl::MOUNT_DIR
        )
    }
    fn nodes(&self) -> Vec<&NodeName> {
        self.nodes.iter().collect()
    }
}

/// The NCCL each node's container will load (read without starting it: the image, the
/// job's loader variables and NCCL mounts) passes `rule`; else nothing starts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckNccl {
    pub nodes: Vec<NodeName>,
    pub rule: crate::libnccl::Rule,
}

impl StepPayload for CheckNccl {
    fn title(&self) -> String {
        format!(
            "Check the NCCL each container loads on {}",
            names(&self.nodes)
        )
    }
    fn describe(&self) -> String {
        let mut refuse = vec!["they differ".to_string()];
        if self.rule.ring && !self.rule.allow_old {
            refuse.push(format!(
                "one is older than {} (a ring)",
                crate::libnccl::RING_MIN
            ));
        }
        if self.rule.nccl_from.is_some() {
            refuse.push("--nccl-from's library does not come first".to_string());
        }
        format!(
            "Read the NCCL the containers on {} will load; refuse to start if {}",
            names(&self.nodes),
            refuse.join(", or if ")
        )
    }
    fn nodes(&self) -> Vec<&NodeName> {
        self.nodes.iter().collect()
    }
}

/// Stop and remove the job's containers or processes on every node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stop;

impl StepPayload for Stop {
    fn title(&self) -> String {
        "Stop the job".to_string()
    }
    fn nodes(&self) -> Vec<&NodeName> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> NodeName {
        NodeName::new(s).unwrap()
    }

    #[test]
    fn a_step_serializes_its_payload_beside_the_tag() {
        let step = Step::Start(Start {
            nodes: vec![n("a"), n("b")],
        });
        assert_eq!(
            serde_json::to_string(&step).unwrap(),
            r#"{"step":"start","nodes":["a","b"]}"#
        );
        assert_eq!(
            serde_json::to_string(&Step::Stop(Stop)).unwrap(),
            r#"{"step":"stop"}"#
        );
    }

    #[test]
    fn every_kind_of_step_reads_back_what_it_wrote() {
        let steps = vec![
            Step::Stop(Stop),
            Step::WaitExit(WaitExit {
                node: n("a"),
                capture: Some("out".into()),
                timeout_s: 5,
                allow_failure: true,
            }),
            Step::CheckReachable(CheckReachable {
                to: n("a"),
                addr: Ipv4Addr::new(10, 0, 0, 1),
                port: 29501,
                from: vec![n("b")],
            }),
        ];
        let text = serde_json::to_string(&steps).unwrap();
        let back: Vec<Step> = serde_json::from_str(&text).unwrap();
        assert_eq!(back, steps);
    }

    #[test]
    fn fields_left_out_of_a_written_plan_take_their_defaults() {
        let step: Step = serde_json::from_str(
            r#"{"step":"stage-model","model":{"kind":"local","path":"/m"},"nodes":["a"]}"#,
        )
        .unwrap();
        let Step::StageModel(s) = step else {
            panic!("{step:?}")
        };
        assert!(s.copy, "staging copies unless the plan says otherwise");
        assert!(s.listing.is_none() && s.routes.is_empty());
    }

    #[test]
    fn a_step_names_every_node_it_runs_on() {
        let step = Step::CheckReachable(CheckReachable {
            to: n("a"),
            addr: Ipv4Addr::new(10, 0, 0, 1),
            port: 22,
            from: vec![n("b"), n("c")],
        });
        let named: Vec<&str> = step.payload().nodes().iter().map(|x| x.as_str()).collect();
        assert_eq!(named, vec!["a", "b", "c"]);
        assert!(Step::Stop(Stop).payload().nodes().is_empty());
    }
}
