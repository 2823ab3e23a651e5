//! The steps the launch planners write (serving's skeleton, an engine's own waits, the NCCL
//! steps), each made by one small constructor here, so that what a `plan::Step` looks like is
//! written in one place.
//!
//! Pure: values in, steps out.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use crate::libnccl::Rule;
use crate::model::ModelSource;
use crate::model::hub::Resolved;
use crate::model::route::CopyRoute;
use crate::node::NodeName;
use crate::plan::secret::Secret;
use crate::plan::{
    CheckNccl, CheckPorts, CheckReachable, EnsureFolders, EnsureImage, Exec, NodePorts, RayMember,
    StageModel, StageNccl, Start, Step, WaitRay, WaitServing,
};

/// Nothing listens yet on these ports of these nodes.
pub fn check_ports(ports: Vec<NodePorts>) -> Step {
    Step::CheckPorts(CheckPorts { ports })
}

/// Every `from` node reaches `addr:port` on `to`.
pub fn check_reachable(to: NodeName, addr: Ipv4Addr, port: u16, from: Vec<NodeName>) -> Step {
    Step::CheckReachable(CheckReachable {
        to,
        addr,
        port,
        from,
    })
}

/// The image, with the same content, on every listed node.
pub fn ensure_image(image: String, nodes: Vec<NodeName>) -> Step {
    Step::EnsureImage(EnsureImage { image, nodes })
}

/// Each node's folder for `what`, created when missing.
pub fn ensure_folders(what: &str, folders: BTreeMap<NodeName, String>) -> Step {
    Step::EnsureFolders(EnsureFolders {
        what: what.to_string(),
        folders,
    })
}

/// The model's files on every listed node (`copy` false: only checked).
pub fn stage_model(
    model: ModelSource,
    nodes: Vec<NodeName>,
    copy: bool,
    listing: Option<Resolved>,
    routes: BTreeMap<NodeName, CopyRoute>,
) -> Step {
    Step::StageModel(Box::new(StageModel {
        model,
        nodes,
        copy,
        listing,
        routes,
    }))
}

/// `node`'s server answers on `port` at `addr` (its own address), within `timeout_s`: a TCP
/// connection tried every second from inside the node's container, which has just started.
pub fn wait_port(node: NodeName, addr: Ipv4Addr, port: u16, timeout_s: u64) -> Step {
    let script = format!(
        "for i in $(seq 1 {timeout_s}); do (exec 3<>/dev/tcp/{addr}/{port}) 2>/dev/null && exit 0; sleep 1; done; \
echo \"nothing answers on {addr}:{port} after {timeout_s}s\" >&2; exit 1"
    );
    Step::Exec(Exec {
        node,
        command: vec!["bash".into(), "-c".into(), script],
        env: BTreeMap::new(),
        capture: None,
        timeout_s: timeout_s.saturating_add(10),
    })
}

/// Start the job's containers on these nodes.
pub fn start(nodes: Vec<NodeName>) -> Step {
    Step::Start(Start { nodes })
}

/// Ray, seen from `node`, lists every member.
pub fn wait_ray(node: NodeName, expect: Vec<RayMember>, timeout_s: u64) -> Step {
    Step::WaitRay(WaitRay {
        node,
        expect,
        timeout_s,
    })
}

/// The API on `node` answers and lists `model`.
pub fn wait_serving(
    node: NodeName,
    url: String,
    model: String,
    engine: String,
    timeout_s: u64,
    api_key: Option<Secret>,
    no_check: bool,
) -> Step {
    Step::WaitServing(WaitServing {
        node,
        url,
        model,
        engine,
        timeout_s,
        api_key,
        no_check,
    })
}

/// `--nccl-from IMAGE`'s library copied into the volume on these nodes.
pub fn stage_nccl(image: String, volume: String, nodes: Vec<NodeName>) -> Step {
    Step::StageNccl(StageNccl {
        image,
        volume,
        nodes,
    })
}

/// The NCCL each container will load passes `rule`.
pub fn check_nccl(nodes: Vec<NodeName>, rule: Rule) -> Step {
    Step::CheckNccl(CheckNccl { nodes, rule })
}
