//! Test builders for doctor: Spark-like and workstation-like node facts built in code, and a
//! harness that runs one check on them. Facts follow the seeds: a DGX Spark shows four CX-7
//! functions (two twins per QSFP port, seed 001), a management NIC `enP7s7` with the default
//! route (seed 004), driver 580.95.05 and kernel 6.14.0-1013-nvidia (field reports of
//! 2025-11), no CMA reserved (CmaTotal and CmaFree 0, as on current arm64 NVIDIA kernels).
//! Test-only; builds data, touches nothing.

use std::collections::BTreeMap;

use super::*;
use crate::derive::derive;
use crate::probe::facts::*;
use crate::probe::testkit;
pub use crate::probe::testkit::{SPARK_FUNCS, iface, v4};

pub fn name(s: &str) -> NodeName {
    NodeName::new(s).unwrap()
}

/// A node under construction.
#[derive(Clone)]
pub struct Node {
    pub facts: NodeFacts,
}

impl Node {
    /// A DGX Spark with nothing cabled: four CX-7 functions DOWN, management on `enP7s7`.
    pub fn spark(host: &str) -> Node {
        let mut interfaces: Vec<InterfaceFacts> =
            SPARK_FUNCS.iter().map(|(_, n)| iface(n)).collect();
        let mut mgmt = iface("enP7s7");
        mgmt.operstate = OperState::Up;
        mgmt.carrier = Some(true);
        mgmt.speed_mbps = Some(10_000);
        mgmt.ipv4.push(v4("10.0.0.11/24"));
        interfaces.push(mgmt);
        interfaces.sort_by(|a, b| a.name.cmp(&b.name));
        let routes = vec![
            RouteFacts {
                dst: "default".into(),
                dev: Some(NetIf::new("enP7s7")),
                gateway: Some("10.0.0.1".parse().unwrap()),
                prefsrc: None,
                metric: Some(100),
            },
            RouteFacts {
                dst: "10.0.0.0/24".into(),
                dev: Some(NetIf::new("enP7s7")),
                gateway: None,
                prefsrc: Some("10.0.0.11".parse().unwrap()),
                metric: Some(100),
            },
        ];
        let rdma_devices = testkit::spark_devices()
            .into_iter()
            .map(|mut d| {
                d.ports[0].rate = Some(Rate::parse("200 Gb/sec (4X HDR)"));
                d.hca_type = Some("MT4129".into());
                d.fw_ver = Some("28.45.1020".into());
                d.board_id = Some("NVD0000000087".into());
                d
            })
            .collect();
        Node {
            facts: NodeFacts {
                hostname: host.into(),
                arch: Some("aarch64".into()),
                interfaces,
                rdma_devices,
                routes,
                host: HostFacts {
                    kernel: Some("6.14.0-1013-nvidia".into()),
                    mem_total_kib: Some(128_000_000),
                    mem_available_kib: Some(120_000_000),
                    cma_total_kib: Some(65_536),
                    cma_free_kib: Some(63_488),
                    nvidia_driver: Observed::Present("580.95.05".into()),
                    infiniband_dev_nodes: Observed::Present(vec![
                        "rdma_cm".into(),
                        "uverbs0".into(),
                        "uverbs1".into(),
                        "uverbs2".into(),
                        "uverbs3".into(),
                    ]),
                    gpus: vec![],
                    nccl_conf: Observed::Absent,
                    memlock: Some(MemlockLimit::Unlimited),
                    // Read, and no libnccl.so.2 on the node itself: containers bring theirs.
                    nccl: Some(Default::default()),
                },
                links: None,
                netplan: None,
                unparsed: Vec::new(),
                ip_recorded: Default::default(),
            },
        }
    }

    /// A Spark with the outer port cabled, both twins ACTIVE at MTU 9000, the IP on one twin
    /// (seed 001's netplan).
    pub fn cabled_spark(host: &str, fabric_addr: &str) -> Node {
        Node::spark(host)
            .up("enp1s0f1np1")
            .up("enP2p1s0f1np1")
            .mtu("enp1s0f1np1", 9000)
            .mtu("enP2p1s0f1np1", 9000)
            .addr("enp1s0f1np1", fabric_addr)
    }

    pub fn dev_of(&mut self, netdev: &str) -> &mut RdmaDeviceFacts {
        testkit::dev_of(&mut self.facts, netdev)
    }

    pub fn if_mut(&mut self, netdev: &str) -> &mut InterfaceFacts {
        testkit::if_mut(&mut self.facts, netdev)
    }

    /// Cable plugged: netdev up at 200 Gb/s, device ACTIVE with its link-local GIDs (0: v1,
    /// 1: v2).
    pub fn up(mut self, netdev: &str) -> Self {
        testkit::plug(&mut self.facts, netdev);
        self.if_mut(netdev).speed_mbps = Some(200_000);
        self
    }

    /// An IPv4 address on the netdev, with the GIDs the kernel adds for it (v1, then v2).
    pub fn addr(mut self, netdev: &str, cidr: &str) -> Self {
        testkit::add_ipv4(&mut self.facts, netdev, cidr);
        self
    }

    pub fn mtu(mut self, netdev: &str, mtu: u32) -> Self {
        self.if_mut(netdev).mtu = Some(mtu);
        self
    }

    pub fn rate(mut self, netdev: &str, rate: &str) -> Self {
        self.dev_of(netdev).ports[0].rate = Some(Rate::parse(rate));
        self
    }

    /// A non-fabric interface with an address and its connected route.
    pub fn other_iface(mut self, name: &str, cidr: &str) -> Self {
        let mut i = iface(name);
        i.operstate = OperState::Up;
        let a = v4(cidr);
        i.ipv4.push(a);
        self.facts.interfaces.push(i);
        self.facts.interfaces.sort_by(|a, b| a.name.cmp(&b.name));
        self.facts.routes.push(RouteFacts {
            dst: a.subnet().to_string(),
            dev: Some(NetIf::new(name)),
            gateway: None,
            prefsrc: Some(a.addr),
            metric: None,
        });
        self
    }

    /// Moves the management address (and its connected route).
    pub fn mgmt(mut self, cidr: &str) -> Self {
        let a = v4(cidr);
        self.if_mut("enP7s7").ipv4 = vec![a];
        for r in &mut self.facts.routes {
            if !r.is_default() && r.dev.as_ref().is_some_and(|d| d.as_str() == "enP7s7") {
                r.dst = a.subnet().to_string();
                r.prefsrc = Some(a.addr);
            }
        }
        self
    }

    pub fn host(mut self, f: impl FnOnce(&mut HostFacts)) -> Self {
        f(&mut self.facts.host);
        self
    }

    pub fn named(self, n: &str) -> NodeInput {
        NodeInput {
            name: name(n),
            facts: self.facts,
        }
    }
}

/// Two Sparks on one cable, IP on one twin, MTU 9000 (seed 001).
pub fn pair() -> Vec<NodeInput> {
    vec![
        Node::cabled_spark("spark-a", "192.168.177.11/24").named("spark-a"),
        Node::cabled_spark("spark-b", "192.168.177.12/24")
            .mgmt("10.0.0.12/24")
            .named("spark-b"),
    ]
}

/// Runs one check on `nodes` (facts only, or with live observations).
pub fn eval(
    check: &Check,
    nodes: &[NodeInput],
    options: &Options,
    live: Option<&BTreeMap<NodeName, Result<Observations, String>>>,
) -> Evaluation {
    let derived = derive(nodes);
    let inputs = Inputs {
        nodes,
        derived: &derived,
        options,
        live,
        unreachable: &[],
    };
    (check.run)(&inputs)
}

/// Runs the check with id `id` on facts alone.
pub fn facts_eval(id: &str, nodes: &[NodeInput]) -> Evaluation {
    let check = checks()
        .into_iter()
        .find(|c| c.info.id == id)
        .unwrap_or_else(|| panic!("no check {id}"));
    eval(&check, nodes, &Options::default(), None)
}

/// Runs the check with id `id` with live observations and options.
pub fn live_eval(
    id: &str,
    nodes: &[NodeInput],
    options: &Options,
    live: &BTreeMap<NodeName, Result<Observations, String>>,
) -> Evaluation {
    let check = checks()
        .into_iter()
        .find(|c| c.info.id == id)
        .unwrap_or_else(|| panic!("no check {id}"));
    eval(&check, nodes, options, Some(live))
}

/// `(node, severity)` of every finding, for compact assertions.
pub fn verdicts(e: &Evaluation) -> Vec<(String, Severity)> {
    e.findings
        .iter()
        .map(|f| (f.node.to_string(), f.severity))
        .collect()
}

/// Live observations by node.
pub type Live = BTreeMap<NodeName, Result<Observations, String>>;

/// Observations for [`pair`]'s two nodes, made by `f` from the node's name.
pub fn live_pair(f: impl Fn(&str) -> Observations) -> Live {
    ["spark-a", "spark-b"]
        .iter()
        .map(|n| (name(n), Ok(f(n))))
        .collect()
}

/// The output of a command that exited with `rc` and printed `err`.
pub fn out(rc: i32, err: &str) -> Option<live::CmdOut> {
    Some(live::CmdOut {
        rc,
        out: String::new(),
        err: err.into(),
    })
}

/// Three Sparks on one switch subnet at MTU 9000, each observation as the gather plan would
/// have it with every attempt succeeding; `tweak` breaks what a test needs broken.
pub fn three(tweak: impl Fn(&NodeName, &mut Observations)) -> (Vec<NodeInput>, Live) {
    let nodes = vec![
        Node::cabled_spark("a", "10.9.0.1/24").named("a"),
        Node::cabled_spark("b", "10.9.0.2/24")
            .mgmt("10.0.0.12/24")
            .named("b"),
        Node::cabled_spark("c", "10.9.0.3/24")
            .mgmt("10.0.0.13/24")
            .named("c"),
    ];
    let targets: BTreeMap<NodeName, live::PeerLogin> = nodes
        .iter()
        .map(|n| {
            (
                n.name.clone(),
                live::PeerLogin {
                    peer: n.name.clone(),
                    destination: n.name.to_string(),
                    port: None,
                },
            )
        })
        .collect();
    let plans = live::plan(&nodes, &targets, None, None);
    let mut map = Live::new();
    for (n, p) in nodes.iter().zip(plans) {
        let mut o = Observations {
            pings: p
                .pings
                .iter()
                .map(|ping| live::PingResult {
                    ping: ping.clone(),
                    result: out(0, ""),
                })
                .collect(),
            ssh: p
                .ssh
                .iter()
                .map(|t| live::SshResult {
                    target: t.clone(),
                    result: out(0, ""),
                })
                .collect(),
            listening: Some([22].into_iter().collect()),
            ..Default::default()
        };
        tweak(&n.name, &mut o);
        map.insert(n.name.clone(), Ok(o));
    }
    (nodes, map)
}
