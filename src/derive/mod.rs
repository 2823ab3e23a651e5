//! Derive: the NCCL/UCX/OMPI/Gloo/Ray variables for every node, from the facts of all nodes.
//!
//! Pure: facts in, environment out. The rules (each proven by a test in this module or in
//! `tests/env_snapshots.rs`):
//!
//! - `NCCL_IB_HCA`: every ACTIVE RDMA device of that node whose link leads to the cluster (its
//!   netdev holds an address in a subnet another node shares, or it is the ACTIVE twin of one
//!   that does), named exactly as on that node. DOWN devices never.
//! - Control plane (`NCCL_SOCKET_IFNAME`, `GLOO_SOCKET_IFNAME`, `TP_SOCKET_IFNAME`,
//!   `UCX_NET_DEVICES`, `OMPI_MCA_{btl,oob}_tcp_if_include`, `VLLM_HOST_IP`, `RAY_*`,
//!   `MASTER_ADDR`): the node's fabric interface on the subnet every node shares, or, when no
//!   subnet spans every node (rings), the management interface (default route), with a warning.
//! - `NCCL_IB_GID_INDEX` only when every chosen HCA has its RoCE v2 IPv4 GID at one index.
//! - Rings: `NCCL_IB_SUBNET_AWARE_ROUTING=1`, `NCCL_NET_PLUGIN=none`, `NCCL_IB_MERGE_NICS=0`,
//!   and `NCCL_ALGO=Ring` from four nodes.
//! - Refused (exit 2): twins on one subnet, no ACTIVE RDMA device, no address the head can
//!   reach, addresses not recorded (probed without `ip`), a chosen device or interface whose name
//!   no variable can carry (NCCL's list syntax, not UTF-8). Warned: MTU differing across a link,
//!   a twin that is down, unused ACTIVE devices, routes not recorded, fields of `ip`'s JSON that
//!   did not parse.

pub mod refusal;
pub mod render;
pub mod topology;
pub mod twins;

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use serde::ser::{SerializeMap, SerializeStruct};
use serde::{Serialize, Serializer};

use crate::node::{NodeName, Role};
use crate::probe::facts::{IbDevice, IpRecorded, LinkLayer, NetIf, NodeFacts, Subnet};
use crate::problem::Problem;

pub use refusal::{Refusal, Violation, ViolationKind};
pub use topology::Topology;
use topology::{FabricAddr, Shape, SubnetMap, classify, fabric_addrs, topology_of};

/// One node given to [`derive`]: its name in the cluster and what probe saw there.
#[derive(Clone, Debug)]
pub struct NodeInput {
    pub name: NodeName,
    pub facts: NodeFacts,
}

/// An RDMA device and port chosen for NCCL on one node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Hca {
    pub device: IbDevice,
    pub port: u32,
    pub netdev: Option<NetIf>,
}

/// Where a node's control plane (bootstrap, Gloo, MPI, Ray) listens.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ControlPlane {
    pub iface: NetIf,
    pub addr: Ipv4Addr,
    /// The fabric subnet it is on, or `None` for the management network.
    pub fabric_subnet: Option<Subnet>,
}

/// What derive decided for one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeEnv {
    pub name: NodeName,
    pub role: Role,
    pub env: BTreeMap<String, String>,
    pub warnings: Vec<String>,
    pub hcas: Vec<Hca>,
    pub control: ControlPlane,
}

/// The derived environment of a whole cluster, head first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterEnv {
    pub topology: Topology,
    pub head: NodeName,
    pub nodes: Vec<NodeEnv>,
}

impl ClusterEnv {
    pub fn node(&self, name: &NodeName) -> Option<&NodeEnv> {
        self.nodes.iter().find(|n| &n.name == name)
    }
}

/// `{"topology": ..., "head": ..., "nodes": {"NAME": {"env": {...}, "warnings": [...]}}}`,
/// nodes in cluster order.
impl Serialize for ClusterEnv {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        struct Nodes<'a>(&'a [NodeEnv]);
        struct One<'a>(&'a NodeEnv);
        impl Serialize for One<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut st = s.serialize_struct("NodeEnv", 2)?;
                st.serialize_field("env", &self.0.env)?;
                st.serialize_field("warnings", &self.0.warnings)?;
                st.end()
            }
        }
        impl Serialize for Nodes<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut m = s.serialize_map(Some(self.0.len()))?;
                for n in self.0 {
                    m.serialize_entry(n.name.as_str(), &One(n))?;
                }
                m.end()
            }
        }
        let mut st = s.serialize_struct("ClusterEnv", 3)?;
        st.serialize_field("topology", &self.topology)?;
        st.serialize_field("head", &self.head)?;
        st.serialize_field("nodes", &Nodes(&self.nodes))?;
        st.end()
    }
}

/// Derives every node's environment. The first node is the head.
pub fn derive(nodes: &[NodeInput]) -> Result<ClusterEnv, Refusal> {
    let Some(head) = nodes.first() else {
        return Err(Refusal {
            violations: Vec::new(),
        });
    };
    let n = nodes.len();
    let mut violations = Vec::new();
    let mut warnings: Vec<Vec<String>> = vec![Vec::new(); n];

    let addrs: Vec<Vec<FabricAddr>> = nodes
        .iter()
        .enumerate()
        .map(|(i, node)| fabric_addrs(i, &node.facts))
        .collect();

    for (i, node) in nodes.iter().enumerate() {
        violations.extend(twins_on_one_subnet(&node.name, &addrs[i]));
        if !node.facts.rdma_devices.iter().any(|d| d.is_active()) {
            violations.push(no_active_rdma(node));
        }
        let ip = node.facts.ip_recorded;
        if let (false, Some(problem)) = (ip.addresses, ip.missing()) {
            violations.push(Violation {
                node: node.name.clone(),
                kind: ViolationKind::AddressesNotRecorded,
                problem: Problem::new(problem, IpRecorded::FIX.to_string()),
            });
        } else if let Some(problem) = ip.missing() {
            warnings[i].push(format!(
                "{problem}: the management interface (default route) is unknown"
            ));
        }
        // Fields of `ip`'s JSON that did not parse: the rest of their entry is used.
        warnings[i].extend(
            node.facts
                .unparsed
                .iter()
                .filter(|u| u.in_ip_json())
                .map(|u| format!("snapshot: {u}")),
        );
    }

    violations.extend(duplicate_addresses(nodes, &addrs));

    let all: Vec<FabricAddr> = addrs.iter().flatten().cloned().collect();
    let map = SubnetMap::build(&all);
    let shape = classify(n, &map);
    let topology = topology_of(n, &shape);

    let hcas: Vec<Vec<Hca>> = nodes
        .iter()
        .enumerate()
        .map(|(i, node)| choose_hcas(i, node, &addrs[i], &map, n, &mut warnings[i]))
        .collect();

    let controls = control_planes(nodes, &addrs, &shape, &map, &mut warnings, &mut violations);
    // Addresses not recorded on a node make every reachability verdict unknown: that refusal
    // says why, and none is made up.
    if nodes.iter().any(|n| !n.facts.ip_recorded.addresses) {
        violations.retain(|v| v.kind != ViolationKind::Unreachable);
    }

    for (i, node) in nodes.iter().enumerate() {
        let control = controls.as_ref().and_then(|c| c.get(i));
        violations.extend(unusable_names(node, &hcas[i], control));
    }

    if !violations.is_empty() {
        return Err(Refusal { violations });
    }
    let Some(controls) = controls else {
        return Err(Refusal { violations });
    };

    mtu_warnings(nodes, &addrs, &map, &mut warnings);

    let head_addr = controls[0].addr;
    let mut out = Vec::with_capacity(n);
    for (i, node) in nodes.iter().enumerate() {
        let control = controls[i].clone();
        let mut env = BTreeMap::new();
        let mut w = std::mem::take(&mut warnings[i]);

        env.insert("NCCL_IB_HCA".into(), ib_hca_value(&node.facts, &hcas[i]));
        env.insert("NCCL_IB_DISABLE".into(), "0".into());
        if let Some(index) = gid_index(&node.facts, &hcas[i], &control, &mut w) {
            env.insert("NCCL_IB_GID_INDEX".into(), index.to_string());
        }
        let ifname = control.iface.as_str().to_string();
        env.insert(
            "NCCL_SOCKET_IFNAME".into(),
            socket_ifname_value(&node.facts, &control.iface),
        );
        for var in [
            "GLOO_SOCKET_IFNAME",
            "TP_SOCKET_IFNAME",
            "UCX_NET_DEVICES",
            "OMPI_MCA_btl_tcp_if_include",
            "OMPI_MCA_oob_tcp_if_include",
        ] {
            env.insert(var.into(), ifname.clone());
        }
        env.insert("MASTER_ADDR".into(), head_addr.to_string());
        for var in [
            "VLLM_HOST_IP",
            "RAY_NODE_IP_ADDRESS",
            "RAY_OVERRIDE_NODE_IP_ADDRESS",
        ] {
            env.insert(var.into(), control.addr.to_string());
        }
        env.insert("RAY_memory_monitor_refresh_ms".into(), "0".into());
        if topology == Topology::Ring {
            env.insert("NCCL_IB_SUBNET_AWARE_ROUTING".into(), "1".into());
            env.insert("NCCL_NET_PLUGIN".into(), "none".into());
            env.insert("NCCL_IB_MERGE_NICS".into(), "0".into());
            if n >= 4 {
                env.insert("NCCL_ALGO".into(), "Ring".into());
            }
        }
        out.push(NodeEnv {
            name: node.name.clone(),
            role: if i == 0 { Role::Head } else { Role::Worker },
            env,
            warnings: w,
            hcas: hcas[i].clone(),
            control,
        });
    }
    Ok(ClusterEnv {
        topology,
        head: head.name.clone(),
        nodes: out,
    })
}

fn twins_on_one_subnet(node: &NodeName, addrs: &[FabricAddr]) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    for (i, a) in addrs.iter().enumerate() {
        for b in &addrs[i + 1..] {
            if a.iface == b.iface || !a.subnet().overlaps(&b.subnet()) {
                continue;
            }
            if !seen.insert((a.iface.clone(), b.iface.clone())) {
                continue;
            }
            // Suggest removing the address from the secondary function (the name with a PCI
            // domain, `enP2p...`), keeping the one on the primary.
            let (a, b) = if twins::twin_key(&a.iface).as_deref() == Some(a.iface.as_str()) {
                (a, b)
            } else {
                (b, a)
            };
            let link_local = a.subnet().is_link_local() && b.subnet().is_link_local();
            let problem = format!(
                "{} ({}) and {} ({}) are fabric interfaces on one subnet ({}): replies leave by the wrong interface and NCCL's interface discovery gets confused{}",
                a.iface,
                a.addr,
                b.iface,
                b.addr,
                a.subnet(),
                if link_local {
                    " (two cabled interfaces with 169.254/16 link-local addresses are the same mistake)"
                } else {
                    ""
                }
            );
            let fix = if link_local {
                format!(
                    "give only one of them a link-local address: in /etc/netplan set `link-local: []` for {}, then `sudo netplan apply` (NCCL still uses its RDMA device through NCCL_IB_HCA)",
                    b.iface
                )
            } else {
                format!(
                    "keep one address per port: `sudo ip addr del {} dev {}` and remove it from /etc/netplan (the twin needs no IP; NCCL uses it through NCCL_IB_HCA), or move it to a different subnet",
                    b.addr,
                    crate::text::shell_word(b.iface.as_str())
                )
            };
            out.push(Violation {
                node: node.clone(),
                kind: ViolationKind::TwinsSameSubnet,
                problem: Problem::new(problem, fix),
            });
        }
    }
    out
}

/// Two nodes with the same fabric address: traffic for one reaches the other. (Also what
/// passing one snapshot twice under two names looks like.)
fn duplicate_addresses(nodes: &[NodeInput], addrs: &[Vec<FabricAddr>]) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut seen: BTreeMap<Ipv4Addr, (usize, NetIf)> = BTreeMap::new();
    for a in addrs.iter().flatten() {
        match seen.get(&a.addr.addr) {
            Some((other, other_if)) if *other != a.node => out.push(Violation { node: nodes[a.node].name.clone(), kind: ViolationKind::DuplicateAddress, problem: Problem::new(format!(
                    "{} on {} is also the address of {} on {} (hostnames {} and {}): traffic for one node reaches the other",
                    a.addr.addr,
                    a.iface,
                    nodes[*other].name,
                    other_if,
                    nodes[a.node].facts.hostname,
                    nodes[*other].facts.hostname
                ), format!(
                    "give each node its own address (e.g. `sudo ip addr replace <new>/{} dev {}` and in /etc/netplan); if both snapshots are of one machine, pass it once",
                    a.addr.prefix,
                    crate::text::shell_word(a.iface.as_str())
                )) }),
            Some(_) => {}
            None => {
                seen.insert(a.addr.addr, (a.node, a.iface.clone()));
            }
        }
    }
    out
}

/// Why `name` cannot be written into a variable that names devices, if it cannot: NCCL reads
/// `NCCL_IB_HCA` and `NCCL_SOCKET_IFNAME` as lists (`^` excludes, `=` matches exactly, `,`
/// separates, `:` gives a port; UCX, Open MPI and Gloo split on `,` too), and a name that was
/// not UTF-8 (read as U+FFFD) or held control characters (read escaped, `\u{1b}`) names no
/// device at all.
fn name_problem(name: &str) -> Option<String> {
    if name.contains('\u{fffd}') {
        return Some(
            "is not valid UTF-8 (its bytes are shown as U+FFFD), so no variable can name it".into(),
        );
    }
    if name.contains("\\u{") {
        return Some("holds control characters (shown escaped), so no variable can name it".into());
    }
    let bad: Vec<String> = name
        .chars()
        .filter(|c| matches!(c, '^' | ',' | '=' | ':') || c.is_whitespace())
        .map(|c| format!("`{}`", c.escape_default()))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    (!bad.is_empty()).then(|| {
        format!(
            "holds {}, which NCCL reads as list syntax (`^` excludes, `=` matches exactly, `,` separates, `:` gives a port), so the variable would select other devices or none",
            bad.join(", ")
        )
    })
}

/// The chosen HCAs and control interface of `node` whose names no variable can carry.
fn unusable_names(
    node: &NodeInput,
    hcas: &[Hca],
    control: Option<&ControlPlane>,
) -> Vec<Violation> {
    let mut out = Vec::new();
    for h in hcas {
        if let Some(why) = name_problem(h.device.as_str()) {
            out.push(Violation { node: node.name.clone(), kind: ViolationKind::UnusableName, problem: Problem::new(format!("RDMA device {} (NCCL_IB_HCA) {why}", h.device), format!(
                    "rename the device to letters, digits, `_`, `-` and `.` (`sudo rdma dev set {} name NEW`, or a udev rule), then probe again",
                    crate::text::shell_word(h.device.as_str())
                )) });
        }
    }
    let ifaces = hcas
        .iter()
        .filter_map(|h| h.netdev.as_ref())
        .chain(control.map(|c| &c.iface));
    let mut seen = BTreeSet::new();
    for i in ifaces.filter(|i| seen.insert(*i)) {
        if let Some(why) = name_problem(i.as_str()) {
            out.push(Violation { node: node.name.clone(), kind: ViolationKind::UnusableName, problem: Problem::new(format!(
                    "interface {} (NCCL_SOCKET_IFNAME, UCX_NET_DEVICES, ...) {why}",
                    crate::text::shell_word(i.as_str())
                ), "rename the interface to letters, digits, `_`, `-` and `.` (netplan `set-name` with `match: macaddress:`, or a udev rule), then probe again") });
        }
    }
    out
}

fn no_active_rdma(node: &NodeInput) -> Violation {
    let devices: Vec<String> = node
        .facts
        .rdma_devices
        .iter()
        .map(|d| {
            let state = d
                .ports
                .first()
                .map(|p| p.state.to_string())
                .unwrap_or_else(|| "no ports".into());
            let netdev = d
                .netdevs
                .first()
                .map(|n| format!(" ({n})"))
                .unwrap_or_default();
            format!("{}{netdev}: {state}", d.name)
        })
        .collect();
    if devices.is_empty() {
        Violation {
            node: node.name.clone(),
            kind: ViolationKind::NoActiveRdma,
            problem: Problem::new(
                "has no RDMA device (/sys/class/infiniband is empty): NCCL would silently run on TCP",
                "load the RDMA drivers (`sudo modprobe mlx5_core mlx5_ib`) and check `ls /sys/class/infiniband`",
            ),
        }
    } else {
        Violation {
            node: node.name.clone(),
            kind: ViolationKind::NoActiveRdma,
            problem: Problem::new(
                format!(
                    "has no ACTIVE RDMA device on the fabric ({}): NCCL would silently run on TCP",
                    devices.join(", ")
                ),
                "check the QSFP cable and bring the port up (`sudo ip link set <netdev> up`); `cat /sys/class/infiniband/*/ports/1/state` must show `4: ACTIVE`",
            ),
        }
    }
}

/// The HCAs of node `i`: ACTIVE devices whose link leads to the cluster.
fn choose_hcas(
    i: usize,
    node: &NodeInput,
    addrs: &[FabricAddr],
    map: &SubnetMap,
    n: usize,
    warnings: &mut Vec<String>,
) -> Vec<Hca> {
    let facts = &node.facts;
    // Devices whose address is on a subnet shared with another node (for a single node: any
    // address on an ACTIVE device).
    let linked: BTreeSet<IbDevice> = addrs
        .iter()
        .filter(|a| a.active && (n == 1 || map.is_shared_by(&a.subnet(), i)))
        .map(|a| a.device.clone())
        .collect();
    let mut chosen: BTreeSet<IbDevice> = linked.clone();
    for dev in &linked {
        for twin in twins::twins_of(facts, dev) {
            match facts.rdma_device(twin) {
                Some(t) if t.is_active() => {
                    chosen.insert(twin.clone());
                }
                Some(t) => {
                    let netdev = t.netdevs.first().map(|x| x.as_str()).unwrap_or("?");
                    let state = t
                        .ports
                        .first()
                        .map(|p| p.state.to_string())
                        .unwrap_or_default();
                    warnings.push(format!(
                        "{dev}'s twin {twin} ({netdev}) is not ACTIVE ({state}): NCCL gets only half of the port's bandwidth (about 12 GB/s instead of 22 on a DGX Spark); fix: `sudo ip link set {} up` with the same MTU as its twin, and remove anything that disables it at boot",
                        crate::text::shell_word(netdev)
                    ));
                }
                None => {}
            }
        }
    }
    if linked.is_empty() {
        // No address shows where any device leads: use every ACTIVE device and say so.
        let active: Vec<&IbDevice> = facts
            .rdma_devices
            .iter()
            .filter(|d| d.is_active())
            .map(|d| &d.name)
            .collect();
        if !active.is_empty() && n > 1 {
            warnings.push(format!(
                "no fabric address of this node is on a subnet another node shares, so where its RDMA devices lead cannot be confirmed; using every ACTIVE one ({}); fix: give the cabled interface an address on the head's fabric subnet",
                active.iter().map(|d| d.as_str()).collect::<Vec<_>>().join(", ")
            ));
        }
        chosen.extend(active.into_iter().cloned());
    } else {
        for dev in facts.rdma_devices.iter().filter(|d| d.is_active()) {
            if chosen.contains(&dev.name) {
                continue;
            }
            let why = match addrs.iter().find(|a| a.device == dev.name) {
                Some(a) => format!(
                    "its subnet {} is not shared with any other node of this cluster",
                    a.subnet()
                ),
                None => "it carries no address and is not the twin of a fabric interface that does"
                    .to_string(),
            };
            warnings.push(format!(
                "{} is ACTIVE but left out of NCCL_IB_HCA: {why}; if it is cabled to this cluster, give it an address on a cluster subnet",
                dev.name
            ));
        }
    }
    let mut hcas: Vec<Hca> = facts
        .rdma_devices
        .iter()
        .filter(|d| chosen.contains(&d.name))
        .filter_map(|d| {
            let port = d.active_port()?;
            Some(Hca {
                device: d.name.clone(),
                port: port.port,
                netdev: d.netdevs.first().cloned(),
            })
        })
        .collect();
    // Twins side by side, the one carrying an address first, then by name.
    let has_addr = |h: &Hca| addrs.iter().any(|a| a.device == h.device);
    hcas.sort_by(|a, b| {
        twins::group_key(facts, &a.device)
            .cmp(&twins::group_key(facts, &b.device))
            .then(has_addr(b).cmp(&has_addr(a)))
            .then(a.device.cmp(&b.device))
    });
    hcas
}

/// The control plane of every node, or `None` when some node has none (violations added).
fn control_planes(
    nodes: &[NodeInput],
    addrs: &[Vec<FabricAddr>],
    shape: &Shape,
    map: &SubnetMap,
    warnings: &mut [Vec<String>],
    violations: &mut Vec<Violation>,
) -> Option<Vec<ControlPlane>> {
    match shape {
        Shape::Single => {
            let fabric = addrs[0].iter().find(|a| a.active).map(|a| ControlPlane {
                iface: a.iface.clone(),
                addr: a.addr.addr,
                fabric_subnet: Some(a.subnet()),
            });
            match fabric.or_else(|| management(&nodes[0].facts)) {
                Some(c) => Some(vec![c]),
                None => {
                    violations.push(unreachable(
                        &nodes[0],
                        "has no IPv4 address on a fabric interface and no management interface",
                    ));
                    None
                }
            }
        }
        Shape::Shared(common) => {
            // The shared subnet whose head interface sorts first.
            let subnet = common
                .iter()
                .min_by_key(|s| {
                    addrs[0]
                        .iter()
                        .find(|a| a.active && &a.subnet() == *s)
                        .map(|a| a.iface.clone())
                })
                .copied()?;
            let mut out = Vec::new();
            for (i, node) in nodes.iter().enumerate() {
                let a = addrs[i].iter().find(|a| a.active && a.subnet() == subnet)?;
                let _ = node;
                out.push(ControlPlane {
                    iface: a.iface.clone(),
                    addr: a.addr.addr,
                    fabric_subnet: Some(subnet),
                });
            }
            Some(out)
        }
        Shape::Ring | Shape::Partitioned => {
            let mut out = Vec::new();
            let mut ok = true;
            for (i, node) in nodes.iter().enumerate() {
                match management(&node.facts) {
                    Some(c) => {
                        let why = if *shape == Shape::Ring {
                            "ring topology: no fabric subnet spans every node".to_string()
                        } else {
                            let lonely: Vec<&str> = (1..nodes.len())
                                .filter(|&j| {
                                    !map.members
                                        .values()
                                        .any(|m| m.contains(&0) && m.contains(&j))
                                })
                                .map(|j| nodes[j].name.as_str())
                                .collect();
                            if lonely.is_empty() {
                                "no fabric subnet spans every node".to_string()
                            } else {
                                format!(
                                    "no fabric subnet spans every node ({} share{} no fabric subnet with the head {}; fix: put every node's cabled interface on one subnet per cable or switch)",
                                    lonely.join(", "),
                                    if lonely.len() == 1 { "s" } else { "" },
                                    nodes[0].name
                                )
                            }
                        };
                        warnings[i].push(format!(
                            "{why}, so the control plane (NCCL bootstrap, Gloo, MPI, Ray) uses the management interface {} ({}); RDMA data still flows over the fabric HCAs",
                            c.iface, c.addr
                        ));
                        out.push(c);
                    }
                    None => {
                        ok = false;
                        let problem = if i == 0 {
                            "is the head, shares no fabric subnet with every node and has no management interface (no default route with an IPv4 address)".to_string()
                        } else {
                            format!(
                                "has no address the head can reach: it shares no fabric subnet with every node (head {}) and has no management interface (no default route with an IPv4 address)",
                                nodes[0].name
                            )
                        };
                        violations.push(unreachable(node, &problem));
                    }
                }
            }
            ok.then_some(out)
        }
    }
}

fn unreachable(node: &NodeInput, problem: &str) -> Violation {
    Violation {
        node: node.name.clone(),
        kind: ViolationKind::Unreachable,
        problem: Problem::new(
            problem.to_string(),
            "put its cabled fabric interface on the head's fabric subnet (`sudo ip addr add <addr>/<prefix> dev <netdev>` and in /etc/netplan), or connect a management network with a default route",
        ),
    }
}

/// The management interface (default route) and its first IPv4 address.
fn management(facts: &NodeFacts) -> Option<ControlPlane> {
    let route = facts.default_route()?;
    let iface = facts.interface(route.dev.as_ref()?)?;
    let addr = route
        .prefsrc
        .filter(|p| iface.ipv4.iter().any(|a| a.addr == *p))
        .or_else(|| iface.ipv4.first().map(|a| a.addr))?;
    Some(ControlPlane {
        iface: iface.name.clone(),
        addr,
        fabric_subnet: None,
    })
}

/// `NCCL_IB_HCA` is matched by prefix: `mlx5_1` also selects `mlx5_10`. When another device
/// of the node starts with a chosen name, the list gets NCCL's `=` (exact match) prefix.
fn ib_hca_value(facts: &NodeFacts, hcas: &[Hca]) -> String {
    let names: Vec<String> = hcas
        .iter()
        .map(|h| {
            if h.port == 1 {
                h.device.to_string()
            } else {
                format!("{}:{}", h.device, h.port)
            }
        })
        .collect();
    let collides = hcas.iter().any(|h| {
        facts.rdma_devices.iter().any(|d| {
            d.name != h.device
                && !hcas.iter().any(|c| c.device == d.name)
                && d.name.as_str().starts_with(h.device.as_str())
        })
    });
    let list = names.join(",");
    if collides { format!("={list}") } else { list }
}

/// `NCCL_SOCKET_IFNAME` is matched by prefix too (`enp1s0f1np1` also selects a VLAN
/// `enp1s0f1np1.100`); use `=` when another interface starts with the chosen name.
fn socket_ifname_value(facts: &NodeFacts, iface: &NetIf) -> String {
    let collides = facts
        .interfaces
        .iter()
        .any(|i| &i.name != iface && i.name.as_str().starts_with(iface.as_str()));
    if collides {
        format!("={iface}")
    } else {
        iface.to_string()
    }
}

/// The RoCE v2 IPv4 GID index shared by every chosen HCA, or `None` with a warning.
fn gid_index(
    facts: &NodeFacts,
    hcas: &[Hca],
    control: &ControlPlane,
    warnings: &mut Vec<String>,
) -> Option<u32> {
    let mut found: Vec<(IbDevice, Option<u32>)> = Vec::new();
    for h in hcas {
        let dev = facts.rdma_device(&h.device)?;
        let port = dev.ports.iter().find(|p| p.port == h.port)?;
        if port.link_layer != LinkLayer::Ethernet {
            continue; // InfiniBand: addressed by LID, no GID index to choose
        }
        let candidates: Vec<_> = port.gids.iter().filter(|g| g.is_roce_v2_ipv4()).collect();
        // Prefer the GID of the control-plane address, then any IPv4 RoCE v2 GID.
        let pick = candidates
            .iter()
            .find(|g| g.ipv4() == Some(control.addr))
            .or_else(|| candidates.first())
            .map(|g| g.index);
        found.push((h.device.clone(), pick));
    }
    if found.is_empty() {
        return None;
    }
    let indexes: BTreeSet<Option<u32>> = found.iter().map(|(_, i)| *i).collect();
    if indexes.len() == 1
        && let Some(Some(index)) = indexes.into_iter().next()
    {
        return Some(index);
    }
    let missing: Vec<String> = found
        .iter()
        .filter(|(_, i)| i.is_none())
        .map(|(d, _)| {
            let netdev = facts
                .rdma_device(d)
                .and_then(|x| x.netdevs.first())
                .map(|n| n.to_string())
                .unwrap_or_else(|| "?".into());
            format!("{d} (its netdev {netdev} has no IPv4 address)")
        })
        .collect();
    let why = if !missing.is_empty() {
        format!(
            "{} {} no RoCE v2 IPv4 GID; NCCL picks a GID per device (expected for a twin without an IP address)",
            missing.join(", "),
            if missing.len() == 1 { "has" } else { "have" }
        )
    } else {
        let list: Vec<String> = found
            .iter()
            .filter_map(|(d, i)| i.map(|i| format!("{d}: {i}")))
            .collect();
        format!(
            "the RoCE v2 IPv4 GIDs sit at different indexes ({}); NCCL picks a GID per device",
            list.join(", ")
        )
    };
    warnings.push(format!("NCCL_IB_GID_INDEX left unset: {why}"));
    None
}

/// Warns on both ends of every link whose interfaces disagree on MTU.
fn mtu_warnings(
    nodes: &[NodeInput],
    addrs: &[Vec<FabricAddr>],
    map: &SubnetMap,
    warnings: &mut [Vec<String>],
) {
    for (subnet, members) in &map.members {
        if members.len() < 2 {
            continue;
        }
        let ends: Vec<(usize, &NetIf, Option<u32>)> = members
            .iter()
            .filter_map(|&i| {
                let a = addrs[i]
                    .iter()
                    .find(|a| a.active && a.subnet() == *subnet)?;
                let mtu = nodes[i].facts.interface(&a.iface).and_then(|f| f.mtu);
                Some((i, &a.iface, mtu))
            })
            .collect();
        let mtus: BTreeSet<u32> = ends.iter().filter_map(|(_, _, m)| *m).collect();
        if mtus.len() < 2 {
            continue;
        }
        let max = mtus.iter().max().copied().unwrap_or(9000);
        let listing: Vec<String> = ends
            .iter()
            .map(|(i, iface, m)| {
                format!(
                    "{} {iface}={}",
                    nodes[*i].name,
                    m.map(|m| m.to_string()).unwrap_or_else(|| "?".into())
                )
            })
            .collect();
        let fixes: Vec<String> = ends
            .iter()
            .filter(|(_, _, m)| *m != Some(max))
            .map(|(i, iface, _)| {
                format!(
                    "on {}: `sudo ip link set dev {} mtu {max}`",
                    nodes[*i].name,
                    crate::text::shell_word(iface.as_str())
                )
            })
            .collect();
        let text = format!(
            "MTU differs across the link on {subnet} ({}): large frames are dropped and RoCE falls back to the smaller MTU; fix: {} (and set `mtu: {max}` in /etc/netplan)",
            listing.join(", "),
            fixes.join("; ")
        );
        for (i, _, _) in &ends {
            warnings[*i].push(text.clone());
        }
    }
}

#[cfg(test)]
mod tests;
