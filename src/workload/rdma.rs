//! Whether a job's containers reach RDMA, decided once for every launching workload: which
//! nodes get `/dev/infiniband`, and whether NCCL will run on TCP sockets. Never silently: a
//! multi-node job on a node with ACTIVE RDMA devices but no usable `/dev/infiniband` (missing,
//! or without `uverbs*`: `ib_uverbs` not loaded) is refused with the `modprobe` fix, unless the
//! user allowed TCP (`--allow-tcp`); then every node runs NCCL on sockets (`NCCL_IB_DISABLE=1`,
//! since one rank without RDMA breaks the others' connections) and the plan says so. A snapshot
//! that does not record `/dev/infiniband` is taken as having it, and the plan says that too.
//!
//! Pure: facts and the user's choice in, an [`RdmaAccess`] or the refusals out.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::derive::NodeInput;
use crate::node::NodeName;
use crate::problem::Problem;

/// The variable that turns NCCL's RDMA transport off.
pub const IB_DISABLE: &str = "NCCL_IB_DISABLE";

/// How the job's containers reach RDMA.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RdmaAccess {
    /// Nodes whose containers get `/dev/infiniband`.
    pub devices: BTreeSet<NodeName>,
    /// Why NCCL will use TCP sockets on every node (`--allow-tcp`); `None`: RDMA.
    pub sockets: Option<String>,
    /// What the plan assumed, for its notes.
    pub notes: Vec<String>,
}

impl RdmaAccess {
    /// True when `node`'s container gets `/dev/infiniband`.
    pub fn passes_devices(&self, node: &NodeName) -> bool {
        self.devices.contains(node)
    }

    /// Sets `NCCL_IB_DISABLE=1` when NCCL runs on sockets (over the derived `0`).
    pub fn apply_env(&self, env: &mut std::collections::BTreeMap<String, String>) {
        if self.sockets.is_some() {
            env.insert(IB_DISABLE.to_string(), "1".to_string());
        }
    }
}

/// A node whose ACTIVE RDMA devices a container could not use.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NoVerbs {
    pub node: NodeName,
    /// The ACTIVE RDMA devices.
    pub devices: Vec<String>,
    /// What `/dev/infiniband` showed (`missing`, or its entries).
    pub seen: String,
}

impl NoVerbs {
    /// What is wrong on the node, and the modules to load (or `--allow-tcp`).
    pub fn problem(&self) -> Problem {
        Problem::new(
            format!(
                "{}: RDMA device{} {} {} ACTIVE but /dev/infiniband {}: containers would get no RDMA and NCCL would silently run on TCP sockets",
                self.node,
                if self.devices.len() == 1 { "" } else { "s" },
                self.devices.join(", "),
                if self.devices.len() == 1 { "is" } else { "are" },
                self.seen
            ),
            format!(
                "load the verbs modules on {} (`sudo modprobe ib_uverbs mlx5_ib rdma_ucm`, then `ls /dev/infiniband` shows uverbs*), or pass --allow-tcp to run on TCP sockets knowingly",
                self.node
            ),
        )
    }
}

/// Decides RDMA access for the nodes of one job (head first). `allow_tcp`: proceed on sockets
/// instead of refusing.
pub fn rdma_access(nodes: &[NodeInput], allow_tcp: bool) -> Result<RdmaAccess, Vec<NoVerbs>> {
    let multi = nodes.len() > 1;
    let mut access = RdmaAccess::default();
    let mut missing = Vec::new();
    let mut unrecorded = Vec::new();
    for n in nodes {
        let active: Vec<String> = n
            .facts
            .rdma_devices
            .iter()
            .filter(|d| d.is_active())
            .map(|d| d.name.to_string())
            .collect();
        match n.facts.host.has_uverbs() {
            Some(true) => {
                access.devices.insert(n.name.clone());
            }
            None => {
                access.devices.insert(n.name.clone());
                unrecorded.push(n.name.as_str());
            }
            Some(false) if multi && !active.is_empty() => missing.push(NoVerbs {
                node: n.name.clone(),
                devices: active,
                seen: match n.facts.host.infiniband_dev_nodes.present() {
                    Some(entries) => format!("has no uverbs device ({})", entries.join(" ")),
                    None => "is missing".to_string(),
                },
            }),
            Some(false) => {}
        }
    }
    if !unrecorded.is_empty() {
        access.notes.push(format!(
            "the snapshot{} of {} do{} not record /dev/infiniband: the plan passes it as if present (a live run sees whether it is); capture with `spark-launch probe --capture DIR` to know",
            if unrecorded.len() == 1 { "" } else { "s" },
            unrecorded.join(", "),
            if unrecorded.len() == 1 { "es" } else { "" }
        ));
    }
    if missing.is_empty() {
        return Ok(access);
    }
    if !allow_tcp {
        return Err(missing);
    }
    let why = format!(
        "--allow-tcp: {} {} no usable /dev/infiniband",
        missing
            .iter()
            .map(|m| m.node.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        if missing.len() == 1 { "has" } else { "have" }
    );
    access.notes.push(format!(
        "NCCL will use TCP sockets on every node, not RDMA ({why}); expect a fraction of the fabric's bandwidth. NCCL_IB_DISABLE=1 is set on every node"
    ));
    access.sockets = Some(why);
    Ok(access)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::facts::Observed;

    fn node(name: &str, dev: Observed<Vec<String>>, active: bool) -> NodeInput {
        let mut facts: crate::probe::NodeFacts = serde_json::from_value(serde_json::json!({
            "hostname": name, "arch": null, "interfaces": [], "routes": [],
            "rdma_devices": [{"name": "rocep1s0f1", "netdevs": ["enp1s0f1np1"], "hca_type": null,
                "fw_ver": null, "board_id": null,
                "ports": [{"port": 1, "state": {"code": if active { 4 } else { 1 }, "name": "x"},
                    "phys_state": null, "link_layer": "ethernet", "rate": null, "gids": []}]}]
        }))
        .unwrap();
        facts.host.infiniband_dev_nodes = dev;
        NodeInput {
            name: NodeName::new(name).unwrap(),
            facts,
        }
    }

    fn uverbs() -> Observed<Vec<String>> {
        Observed::Present(vec!["rdma_cm".into(), "uverbs0".into()])
    }

    #[test]
    fn nodes_with_uverbs_get_the_devices_and_rdma() {
        let a = rdma_access(
            &[node("a", uverbs(), true), node("b", uverbs(), true)],
            false,
        )
        .unwrap();
        assert_eq!(a.devices.len(), 2);
        assert_eq!(a.sockets, None);
        assert!(a.notes.is_empty());
    }

    #[test]
    fn an_active_node_without_infiniband_devices_refuses_a_multi_node_job_with_the_modprobe_fix() {
        let nodes = [node("a", uverbs(), true), node("b", Observed::Absent, true)];
        let refused = rdma_access(&nodes, false).unwrap_err();
        assert_eq!(refused.len(), 1);
        assert!(
            refused[0]
                .problem()
                .what
                .contains("b: RDMA device rocep1s0f1 is ACTIVE but /dev/infiniband is missing")
        );
        assert!(refused[0].problem().fix.contains("sudo modprobe ib_uverbs"));
        assert!(refused[0].problem().fix.contains("--allow-tcp"));
        // /dev/infiniband without uverbs (ib_uverbs not loaded) is the same refusal.
        let nodes = [
            node("a", uverbs(), true),
            node("b", Observed::Present(vec!["rdma_cm".into()]), true),
        ];
        let refused = rdma_access(&nodes, false).unwrap_err();
        assert!(
            refused[0]
                .problem()
                .what
                .contains("has no uverbs device (rdma_cm)")
        );
    }

    #[test]
    fn allow_tcp_proceeds_on_sockets_everywhere_and_says_so() {
        let nodes = [node("a", uverbs(), true), node("b", Observed::Absent, true)];
        let a = rdma_access(&nodes, true).unwrap();
        assert!(a.passes_devices(&nodes[0].name));
        assert!(!a.passes_devices(&nodes[1].name));
        assert!(
            a.sockets
                .as_deref()
                .unwrap()
                .contains("b has no usable /dev/infiniband")
        );
        assert!(a.notes[0].contains("NCCL will use TCP sockets on every node"));
        let mut env = std::collections::BTreeMap::new();
        env.insert(IB_DISABLE.to_string(), "0".to_string());
        a.apply_env(&mut env);
        assert_eq!(env[IB_DISABLE], "1");
    }

    #[test]
    fn not_recorded_passes_the_devices_and_says_it_assumed_them() {
        let nodes = [
            node("a", Observed::NotRecorded, true),
            node("b", Observed::NotRecorded, true),
        ];
        let a = rdma_access(&nodes, false).unwrap();
        assert_eq!(a.devices.len(), 2);
        assert_eq!(a.sockets, None);
        assert!(a.notes[0].contains("snapshots of a, b do not record /dev/infiniband"));
    }

    #[test]
    fn a_single_node_or_a_node_without_active_devices_is_never_refused() {
        assert!(rdma_access(&[node("a", Observed::Absent, true)], false).is_ok());
        let nodes = [
            node("a", uverbs(), true),
            node("b", Observed::Absent, false),
        ];
        let a = rdma_access(&nodes, false).unwrap();
        assert!(!a.passes_devices(&nodes[1].name));
    }
}
