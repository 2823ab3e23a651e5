//! Fabric checks: RDMA devices, twins, subnets, MTU, link speed, GIDs — the ways NCCL silently
//! ends up on TCP or at half speed.
//!
//! Pure. The refusals (twins on one subnet, no ACTIVE device, no reachable address) are
//! `derive`'s own violations, wrapped; the other checks build on `derive`'s topology
//! (`fabric_addrs`, `SubnetMap`) and twin helpers so that doctor and `env` read the fabric the
//! same way. `fabric.mtu-path` judges the don't-fragment pings gathered live.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use super::check::*;
use super::reach::{Tried, blamed};
use super::{Check, Inputs};
use crate::derive::topology::{FabricAddr, SubnetMap, Topology, fabric_addrs};
use crate::derive::{NodeInput, ViolationKind, twins};
use crate::node::NodeName;
use crate::probe::facts::{IbDevice, IpRecorded, LinkLayer, NetIf, NodeFacts, RouteFacts, Subnet};
use crate::text::shell_word as sh;

const fn info(id: &'static str, needs: CheckNeeds, title: &'static str) -> CheckInfo {
    CheckInfo {
        id,
        category: Category::Fabric,
        needs,
        title,
    }
}

pub const CHECKS: &[Check] = &[
    Check {
        info: info(
            "fabric.rdma-active",
            CheckNeeds::Facts,
            "an ACTIVE RDMA device",
        ),
        run: rdma_active,
    },
    Check {
        info: info(
            "fabric.twins-active",
            CheckNeeds::Facts,
            "both twins of each cabled port ACTIVE",
        ),
        run: twins_active,
    },
    Check {
        info: info(
            "fabric.twins-used",
            CheckNeeds::Facts,
            "every ACTIVE device in NCCL_IB_HCA",
        ),
        run: twins_used,
    },
    Check {
        info: info(
            "fabric.twins-same-subnet",
            CheckNeeds::Facts,
            "twins on distinct subnets",
        ),
        run: twins_same_subnet,
    },
    Check {
        info: info(
            "fabric.duplicate-address",
            CheckNeeds::Facts,
            "every fabric address unique",
        ),
        run: duplicate_address,
    },
    Check {
        info: info(
            "fabric.subnet-overlap",
            CheckNeeds::Facts,
            "fabric subnets clear of other networks",
        ),
        run: subnet_overlap,
    },
    Check {
        info: info(
            "fabric.control-plane",
            CheckNeeds::Facts,
            "an address every node can reach",
        ),
        run: control_plane,
    },
    Check {
        info: info(
            "fabric.mtu-mismatch",
            CheckNeeds::Facts,
            "same MTU on both ends of each link",
        ),
        run: mtu_mismatch,
    },
    Check {
        info: info(
            "fabric.mtu-path",
            CheckNeeds::Live,
            "jumbo frames really pass (ping -M do)",
        ),
        run: mtu_path,
    },
    Check {
        info: info(
            "fabric.link-speed",
            CheckNeeds::Facts,
            "link speed as expected",
        ),
        run: link_speed,
    },
    Check {
        info: info(
            "fabric.roce-gid",
            CheckNeeds::Facts,
            "a RoCE v2 IPv4 GID per address",
        ),
        run: roce_gid,
    },
    Check {
        info: info(
            "fabric.interfaces",
            CheckNeeds::Facts,
            "interface names per node",
        ),
        run: interfaces,
    },
];

/// The checks that judge IPv4 addresses or routes: on a node whose addresses were not recorded
/// (probed without `ip`) they have nothing to judge, and skip it saying so.
pub const READS_ADDRESSES: &[&str] = &[
    "fabric.twins-used",
    "fabric.twins-same-subnet",
    "fabric.duplicate-address",
    "fabric.subnet-overlap",
    "fabric.control-plane",
    "fabric.mtu-mismatch",
    "fabric.roce-gid",
    "fabric.cabling-ports",
    "fabric.ring-wiring",
    "fabric.ring-direction",
];

/// Replaces whatever `e` says about a node whose addresses were not recorded by a skip naming
/// why (unknown is never judged as "none").
pub fn skip_unrecorded_addresses(inputs: &Inputs, e: &mut Evaluation) {
    for n in inputs.nodes {
        let Some(why) = n
            .facts
            .ip_recorded
            .missing()
            .filter(|_| !n.facts.ip_recorded.addresses)
        else {
            continue;
        };
        e.findings.retain(|f| f.node != n.name);
        e.notes.retain(|x| x.node != n.name);
        e.skipped.retain(|(x, _)| x != &n.name);
        e.skip(&n.name, format!("{why}; fix: {}", IpRecorded::FIX));
    }
}

/// Wraps derive's violations of one kind as FAIL findings.
fn violations(inputs: &Inputs, kind: ViolationKind, why: &str) -> Evaluation {
    let mut e = Evaluation::default();
    if let Err(refusal) = inputs.derived {
        for v in refusal.violations.iter().filter(|v| v.kind == kind) {
            // Derive's texts follow the node name ("spark-2 has no ..."); say whose it is.
            let what = &v.problem.what;
            let problem = if what.starts_with("has ") || what.starts_with("is ") {
                format!("this node {what}")
            } else {
                what.clone()
            };
            e.push(Finding::fail(
                &v.node,
                problem,
                why,
                Fix::from_prose(&v.problem.fix),
            ));
        }
    }
    e
}

fn rdma_active(inputs: &Inputs) -> Evaluation {
    violations(
        inputs,
        ViolationKind::NoActiveRdma,
        "without an ACTIVE RDMA device NCCL cannot use RoCE and falls back to TCP sockets, about a tenth of the bandwidth, without an error",
    )
}

fn twins_same_subnet(inputs: &Inputs) -> Evaluation {
    violations(
        inputs,
        ViolationKind::TwinsSameSubnet,
        "two interfaces on one subnet make the kernel answer from either one; NCCL's bootstrap and RoCE connections then time out or pick the wrong device",
    )
}

fn duplicate_address(inputs: &Inputs) -> Evaluation {
    violations(
        inputs,
        ViolationKind::DuplicateAddress,
        "two nodes answering for one address split every connection between them at random: bootstrap, Ray and RoCE all break",
    )
}

fn netdev_of(facts: &NodeFacts, dev: &IbDevice) -> String {
    facts
        .rdma_device(dev)
        .and_then(|d| d.netdevs.first())
        .map(|n| n.to_string())
        .unwrap_or_else(|| "?".into())
}

fn twins_active(inputs: &Inputs) -> Evaluation {
    let mut e = Evaluation::default();
    for node in inputs.nodes {
        let f = &node.facts;
        let mut seen = BTreeSet::new();
        for dev in f.rdma_devices.iter().filter(|d| d.is_active()) {
            for twin in twins::twins_of(f, &dev.name) {
                let Some(t) = f.rdma_device(twin) else {
                    continue;
                };
                if t.is_active() || !seen.insert(twin.clone()) {
                    continue;
                }
                let netdev = netdev_of(f, twin);
                let state = t
                    .ports
                    .first()
                    .map(|p| p.state.to_string())
                    .unwrap_or_else(|| "no ports".into());
                let mtu = dev
                    .netdevs
                    .first()
                    .and_then(|n| f.interface(n))
                    .and_then(|i| i.mtu)
                    .unwrap_or(9000);
                e.push(Finding::fail(
                    &node.name,
                    format!(
                        "{} ({}) is ACTIVE but its twin {twin} ({netdev}) is {state}",
                        dev.name,
                        netdev_of(f, &dev.name)
                    ),
                    "each QSFP port of a DGX Spark is two PCIe x4 functions of ~100 Gb/s; with one twin down NCCL gets half the port (about 12 GB/s instead of 22)",
                    Fix::run(
                        format!(
                            "bring the twin up with the same MTU as its sibling, and in /etc/netplan give {netdev} `mtu: {mtu}` (no address needed) so it stays up after a reboot; remove anything that disables it at boot"
                        ),
                        [
                            format!("sudo ip link set dev {} mtu {mtu}", sh(netdev.as_str())),
                            format!("sudo ip link set dev {} up", sh(netdev.as_str())),
                        ],
                    ),
                ));
            }
        }
    }
    e
}

fn twins_used(inputs: &Inputs) -> Evaluation {
    let mut e = Evaluation::default();
    let cluster = match inputs.derived {
        Ok(c) => c,
        Err(_) => {
            for n in inputs.nodes {
                e.skip(
                    &n.name,
                    "derive refused this layout, so there is no NCCL_IB_HCA to check (see the FAIL rows above)",
                );
            }
            return e;
        }
    };
    for node in inputs.nodes {
        let Some(env) = cluster.node(&node.name) else {
            continue;
        };
        let chosen: BTreeSet<&IbDevice> = env.hcas.iter().map(|h| &h.device).collect();
        for dev in node.facts.rdma_devices.iter().filter(|d| d.is_active()) {
            if chosen.contains(&dev.name) {
                continue;
            }
            let netdev = netdev_of(&node.facts, &dev.name);
            let addr = dev
                .netdevs
                .iter()
                .filter_map(|n| node.facts.interface(n))
                .flat_map(|i| i.ipv4.iter())
                .next();
            let problem = match addr {
                Some(a) => format!(
                    "{} ({netdev}, {a}) is ACTIVE but not in NCCL_IB_HCA: its subnet {} is shared with no other node",
                    dev.name,
                    a.subnet()
                ),
                None => format!(
                    "{} ({netdev}) is ACTIVE but not in NCCL_IB_HCA: it has no address and is not the twin of an interface that has one on a cluster subnet",
                    dev.name
                ),
            };
            e.push(Finding::warn(
                &node.name,
                problem,
                "a cabled port NCCL does not use is bandwidth left on the table (or a cable plugged into the wrong port)",
                Fix::text(format!(
                    "if {netdev} is cabled to this cluster, give it (or its twin) an address on the peer's fabric subnet in /etc/netplan and `sudo netplan apply`; otherwise unplug it or leave it down"
                )),
            ));
        }
        let list: Vec<&str> = env.hcas.iter().map(|h| h.device.as_str()).collect();
        if !list.is_empty() {
            e.note(&node.name, format!("NCCL_IB_HCA={}", list.join(",")));
        }
    }
    e
}

/// What a non-fabric route's device is (`is_mgmt`: it holds the default route).
fn route_kind_of(dev: &NetIf, is_mgmt: bool) -> &'static str {
    let name = dev.as_str();
    if is_mgmt {
        "the management network"
    } else if name == "docker0" || name.starts_with("br-") {
        "the Docker bridge"
    } else if [
        "tun",
        "tap",
        "wg",
        "tailscale",
        "zt",
        "ppp",
        "ipsec",
        "vti",
        "nebula",
    ]
    .iter()
    .any(|p| name.starts_with(p))
    {
        "a VPN route"
    } else {
        "another network"
    }
}

fn subnet_overlap(inputs: &Inputs) -> Evaluation {
    subnet_overlap_counted(inputs, &mut 0)
}

/// The subnet as (network, prefix length), the key of the indexes below.
fn net_key(s: &Subnet) -> (u32, u8) {
    (u32::from(s.net().network()), s.net().prefix_len())
}

/// `addr` cut to its first `prefix` bits.
fn masked(addr: u32, prefix: u8) -> u32 {
    match prefix {
        0 => 0,
        p => addr & (u32::MAX << (32 - u32::from(p.min(32)))),
    }
}

/// [`subnet_overlap`], counting in `steps` the index lookups and the candidates it visits.
/// Linear in routes and addresses (times the 33 prefix lengths, never times each other): every
/// containment and overlap question is a lookup in an index keyed by (network, prefix), so
/// 100,000 interfaces are as many lookups, not 10^10 comparisons (39.8 s before).
fn subnet_overlap_counted(inputs: &Inputs, steps: &mut u64) -> Evaluation {
    let mut e = Evaluation::default();
    for (i, node) in inputs.nodes.iter().enumerate() {
        let f = &node.facts;
        let fabric_ifs: HashSet<NetIf> = f
            .rdma_devices
            .iter()
            .flat_map(|d| d.all_netdevs())
            .collect();
        let mgmt: HashSet<&NetIf> = f
            .routes
            .iter()
            .filter(|r| r.is_default())
            .filter_map(|r| r.dev.as_ref())
            .collect();
        let fabric: BTreeSet<(Subnet, NetIf)> = fabric_addrs(i, f)
            .into_iter()
            .map(|a| (a.subnet(), a.iface))
            .collect();
        let others = other_networks(f, &fabric_ifs, steps);
        // Where each other network is: by (network, prefix), its entries in order.
        let mut index: BTreeMap<(u32, u8), Vec<usize>> = BTreeMap::new();
        for (k, (s, _, _)) in others.iter().enumerate() {
            index.entry(net_key(s)).or_default().push(k);
        }
        let mut done: HashSet<Subnet> = HashSet::new();
        for (fs, fif) in &fabric {
            // A second fabric netdev on one subnet finds the same networks: said once.
            if !done.insert(*fs) {
                continue;
            }
            let (net, prefix) = net_key(fs);
            // Networks that hold this subnet (one lookup per shorter prefix), then those
            // inside it (a range of the index).
            let mut hits: Vec<usize> = Vec::new();
            for p in 0..=prefix {
                *steps += 1;
                if let Some(ks) = index.get(&(masked(net, p), p)) {
                    hits.extend(ks);
                }
            }
            let last = net | !masked(u32::MAX, prefix);
            for ((_, p), ks) in index.range((net, 0)..=(last, 32)) {
                *steps += 1;
                if *p > prefix {
                    hits.extend(ks);
                }
            }
            hits.sort_unstable();
            let mut said: HashSet<&NetIf> = HashSet::new();
            for k in hits {
                *steps += 1;
                let (os, odev, dst) = &others[k];
                if !said.insert(odev) {
                    continue;
                }
                let what = route_kind_of(odev, mgmt.contains(odev));
                e.push(overlap_finding(&node.name, fs, fif, os, odev, dst, what));
            }
        }
    }
    e
}

/// The node's networks that are not the fabric, in order: its routes on other interfaces
/// (default routes aside), then each address of another interface that no network listed for
/// that interface already holds (a set of (interface, network) answers that, one lookup per
/// prefix length).
fn other_networks(
    f: &NodeFacts,
    fabric_ifs: &HashSet<NetIf>,
    steps: &mut u64,
) -> Vec<(Subnet, NetIf, String)> {
    let mut others: Vec<(Subnet, NetIf, String)> = f
        .routes
        .iter()
        .filter(|r| !r.is_default())
        .filter_map(|r: &RouteFacts| {
            let dev = r.dev.clone()?;
            (!fabric_ifs.contains(&dev)).then(|| (r.subnet(), dev, r.dst.clone()))
        })
        .filter_map(|(s, d, dst)| Some((s?, d, dst)))
        .collect();
    let mut held: HashSet<(&NetIf, (u32, u8))> = HashSet::new();
    for (s, d, _) in &others {
        held.insert((d, net_key(s)));
    }
    let mut more = Vec::new();
    for iface in f
        .interfaces
        .iter()
        .filter(|i| !fabric_ifs.contains(&i.name))
    {
        for a in &iface.ipv4 {
            let addr = u32::from(a.addr);
            let covered = (0..=32u8).any(|p| {
                *steps += 1;
                held.contains(&(&iface.name, (masked(addr, p), p)))
            });
            if !covered {
                held.insert((&iface.name, net_key(&a.subnet())));
                more.push((a.subnet(), iface.name.clone(), a.to_string()));
            }
        }
    }
    others.extend(more);
    others
}

fn overlap_finding(
    node: &NodeName,
    fs: &Subnet,
    fif: &NetIf,
    os: &Subnet,
    odev: &NetIf,
    dst: &str,
    what: &str,
) -> Finding {
    let problem = format!("fabric subnet {fs} ({fif}) overlaps {what}: {dst} on {odev}");
    if fs.is_link_local() && os.is_link_local() {
        return Finding::warn(
            node,
            problem,
            "with 169.254/16 on both, the kernel may send fabric traffic (NCCL bootstrap, Ray, MPI) out of the wrong interface; it works only while the fabric route wins",
            Fix::text(format!(
                "give the fabric a dedicated subnet (e.g. 192.168.177.0/24 in /etc/netplan for {fif}), or drop the link-local route on {odev} (`ipv4.link-local disabled` in NetworkManager, `link-local: []` in netplan)"
            )),
        );
    }
    Finding::fail(
        node,
        problem,
        "two routes to one subnet: replies to fabric peers may leave by the other interface, so connections hang or run over the slow network",
        Fix::text(format!(
            "move the fabric to a subnet nothing else uses: change {fif}'s address in /etc/netplan and `sudo netplan apply`{}",
            if what == "the Docker bridge" {
                ", or move Docker's bridge (`\"bip\"` or `\"default-address-pools\"` in /etc/docker/daemon.json, then `sudo systemctl restart docker`)"
            } else {
                ""
            }
        )),
    )
}

fn control_plane(inputs: &Inputs) -> Evaluation {
    let mut e = violations(
        inputs,
        ViolationKind::Unreachable,
        "NCCL's bootstrap, torch.distributed, MPI and Ray all connect to the head's address; a node that cannot reach it never joins",
    );
    if let Ok(c) = inputs.derived {
        for n in &c.nodes {
            let where_ = match &n.control.fabric_subnet {
                Some(s) => format!("fabric subnet {s}"),
                None => "the management network".to_string(),
            };
            e.note(
                &n.name,
                format!(
                    "control plane on {} {} ({where_}, topology {})",
                    n.control.iface, n.control.addr, c.topology
                ),
            );
            if n.control.fabric_subnet.is_none()
                && c.topology != Topology::Ring
                && c.nodes.len() > 1
            {
                e.push(Finding::warn(
                    &n.name,
                    format!(
                        "no fabric subnet joins every node, so the control plane uses the management interface {} ({})",
                        n.control.iface, n.control.addr
                    ),
                    "bootstrap and Ray traffic then crosses the slow network, and a node whose fabric is cabled to the wrong peer goes unnoticed",
                    Fix::text(
                        "put every node's cabled interface on one fabric subnet (one subnet per cable or switch), in /etc/netplan",
                    ),
                ));
            }
        }
    }
    e
}

/// The MTU of `iface` on `node`, if known.
fn mtu(node: &NodeInput, iface: &NetIf) -> Option<u32> {
    node.facts.interface(iface).and_then(|i| i.mtu)
}

fn all_addrs(inputs: &Inputs) -> Vec<Vec<FabricAddr>> {
    inputs
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| fabric_addrs(i, &n.facts))
        .collect()
}

fn mtu_mismatch(inputs: &Inputs) -> Evaluation {
    let mut e = Evaluation::default();
    let addrs = all_addrs(inputs);
    let all: Vec<FabricAddr> = addrs.iter().flatten().cloned().collect();
    let map = SubnetMap::build(&all);
    for (subnet, members) in &map.members {
        let ends: Vec<(usize, &FabricAddr, Option<u32>)> = members
            .iter()
            .filter_map(|&i| {
                let a = addrs[i]
                    .iter()
                    .find(|a| a.active && a.subnet() == *subnet)?;
                Some((i, a, mtu(&inputs.nodes[i], &a.iface)))
            })
            .collect();
        // An end whose MTU file holds garbage cannot be compared: say so, never pass it.
        for (i, a, m) in &ends {
            let node = &inputs.nodes[*i];
            let path = format!("sys/class/net/{}/mtu", a.iface);
            if let (None, Some(raw)) = (m, node.facts.unparsed_at(&path)) {
                e.push(Finding::fail(
                    &node.name,
                    format!(
                        "the MTU of {} reads `{raw}`, not a number: the ends of the link on {subnet} cannot be compared",
                        a.iface
                    ),
                    "a link whose ends disagree on MTU drops large frames without an error; this one cannot be checked",
                    Fix::run(
                        "read the MTU on the node (and capture the snapshot again); set it to match the other end",
                        [format!("cat /sys/class/net/{}/mtu", sh(a.iface.as_str()))],
                    ),
                ));
            }
        }
        let Some(max) = ends.iter().filter_map(|(_, _, m)| *m).max() else {
            continue;
        };
        let Some((hi, hi_addr, _)) = ends.iter().find(|(_, _, m)| *m == Some(max)) else {
            continue;
        };
        for (i, a, m) in &ends {
            let Some(m) = m else { continue };
            if *m == max {
                continue;
            }
            let node = &inputs.nodes[*i];
            e.push(Finding::fail(
                &node.name,
                format!(
                    "{} has MTU {m} but the other end of the link on {subnet} ({} {}) has {max}",
                    a.iface, inputs.nodes[*hi].name, hi_addr.iface
                ),
                "frames larger than the smaller MTU are dropped without an error: RoCE falls back to the smaller path MTU at best, and TCP transfers (bootstrap, Gloo, image copies) stall",
                Fix::run(
                    format!(
                        "set the same MTU on both ends; make it permanent with `mtu: {max}` for {} in /etc/netplan",
                        a.iface
                    ),
                    [format!("sudo ip link set dev {} mtu {max}", sh(a.iface.as_str()))],
                ),
            ));
        }
    }
    // The twin of an addressed fabric interface carries RoCE traffic too: same MTU.
    for (i, node) in inputs.nodes.iter().enumerate() {
        let f = &node.facts;
        let mut seen = BTreeSet::new();
        for a in addrs[i].iter().filter(|a| a.active) {
            let Some(m) = mtu(node, &a.iface) else {
                continue;
            };
            for twin in twins::twins_of(f, &a.device) {
                let Some(t) = f.rdma_device(twin).filter(|t| t.is_active()) else {
                    continue;
                };
                for nd in &t.netdevs {
                    let Some(tm) = mtu(node, nd) else { continue };
                    if tm == m || !seen.insert(nd.clone()) {
                        continue;
                    }
                    let want = tm.max(m);
                    let low = if tm < m { nd } else { &a.iface };
                    e.push(Finding::warn(
                        &node.name,
                        format!(
                            "twins disagree on MTU: {} has {m}, its twin {nd} has {tm}",
                            a.iface
                        ),
                        "NCCL drives both twins; the one with the smaller MTU sends smaller RoCE frames and the pair runs unevenly",
                        Fix::run(
                            format!("set `mtu: {want}` for both twins in /etc/netplan"),
                            [format!("sudo ip link set dev {} mtu {want}", sh(low.as_str()))],
                        ),
                    ));
                }
            }
        }
    }
    e
}

/// One failed don't-fragment ping.
struct DfFailure<'a> {
    from: &'a NodeName,
    to: &'a NodeName,
    payload: u32,
    iface: &'a NetIf,
    source: std::net::Ipv4Addr,
    addr: std::net::Ipv4Addr,
    reason: String,
}

fn mtu_path(inputs: &Inputs) -> Evaluation {
    let mut e = Evaluation::default();
    let mut failures: Vec<DfFailure> = Vec::new();
    let mut tried = Tried::new();
    for (node, obs) in inputs.observed_nodes(&mut e) {
        let mut any = false;
        for p in &obs.pings {
            let Some(payload) = p.ping.df_payload else {
                continue;
            };
            any = true;
            let Some(r) = &p.result else {
                e.skip(&node.name, "the ping did not run");
                continue;
            };
            // A peer that does not answer at all is reach.fabric's finding, not this one.
            let plain_ok = obs.pings.iter().any(|q| {
                q.ping.df_payload.is_none()
                    && q.ping.to == p.ping.to
                    && q.ping.iface == p.ping.iface
                    && q.result.as_ref().is_some_and(|r| r.ok())
            });
            if !plain_ok {
                continue;
            }
            tried.entry(&p.ping.peer).or_default().insert(&node.name);
            if !r.ok() {
                failures.push(DfFailure {
                    from: &node.name,
                    to: &p.ping.peer,
                    payload,
                    iface: &p.ping.iface,
                    source: p.ping.from,
                    addr: p.ping.to,
                    reason: r.reason(),
                });
            }
        }
        if !any {
            e.note(
                &node.name,
                "no link with the same MTU above 1500 on both ends: nothing to test",
            );
        }
    }
    let pairs: Vec<(&NodeName, &NodeName)> = failures.iter().map(|f| (f.from, f.to)).collect();
    let blamed = blamed(&pairs, &tried);
    let why = "something on the path (a switch or bridge port, a bond, a VLAN, the far end's NIC) has a smaller MTU; large RoCE and TCP frames vanish and transfers hang";
    for to in &blamed {
        let mine: Vec<&DfFailure> = failures.iter().filter(|f| f.to == *to).collect();
        let Some(first) = mine.first() else { continue };
        let mtu = first.payload + 28;
        let from: Vec<&str> = mine.iter().map(|f| f.from.as_str()).collect();
        e.push(Finding::fail(
            to,
            format!(
                "{mtu}-byte don't-fragment pings to this node's {} fail from every node ({}), though small pings pass and both ends are set to MTU {mtu}",
                first.addr,
                from.join(", ")
            ),
            why,
            Fix::run(
                format!(
                    "find the hop with the smaller MTU next to this node (its switch port, bridge or bond) and raise it to {mtu}; check from a peer with the command below"
                ),
                [format!(
                    "ping -M do -s {} -c 3 -I {} {}",
                    first.payload, first.source, first.addr
                )],
            ),
        ));
    }
    // A blamed node's own pings out cross the same hop: already said.
    for f in failures
        .iter()
        .filter(|f| !blamed.contains(&f.to) && !blamed.contains(&f.from))
    {
        let mtu = f.payload + 28;
        e.push(Finding::fail(
            f.from,
            format!(
                "a {mtu}-byte don't-fragment ping from {} to {} ({}) fails, though both ends are set to MTU {mtu} and small pings pass ({})",
                f.iface, f.addr, f.to, f.reason
            ),
            why,
            Fix::run(
                format!(
                    "raise the MTU of every hop (switch ports included) to {mtu}, or lower both ends to the largest size that passes; check with the command below"
                ),
                [format!(
                    "ping -M do -s {} -c 3 -I {} {}",
                    f.payload, f.source, f.addr
                )],
            ),
        ));
    }
    e
}

fn link_speed(inputs: &Inputs) -> Evaluation {
    let mut e = Evaluation::default();
    // The best rate seen for each kind of adapter across the cluster.
    let mut best: BTreeMap<String, f64> = BTreeMap::new();
    for n in inputs.nodes {
        for d in &n.facts.rdma_devices {
            let Some(kind) = &d.hca_type else { continue };
            for p in d.ports.iter().filter(|p| p.is_active()) {
                if let Some(g) = p.rate.as_ref().and_then(|r| r.gbps) {
                    let b = best.entry(kind.clone()).or_insert(g);
                    *b = b.max(g);
                }
            }
        }
    }
    for node in inputs.nodes {
        let f = &node.facts;
        let mut rates = Vec::new();
        for d in &f.rdma_devices {
            for p in d.ports.iter().filter(|p| p.is_active()) {
                let Some(rate) = &p.rate else { continue };
                let netdev = netdev_of(f, &d.name);
                let speed = d
                    .netdevs
                    .first()
                    .and_then(|n| f.interface(n))
                    .and_then(|i| i.speed_mbps);
                rates.push(format!(
                    "{} {}{}",
                    d.name,
                    rate.text,
                    speed
                        .map(|s| format!(", {netdev} {} Gb/s", s / 1000))
                        .unwrap_or_default()
                ));
                let (Some(g), Some(kind)) = (rate.gbps, &d.hca_type) else {
                    continue;
                };
                let top = best.get(kind).copied().unwrap_or(g);
                if g < top {
                    e.push(Finding::warn(
                        &node.name,
                        format!(
                            "{} ({netdev}) links at {} while the same adapter ({kind}) elsewhere in the cluster links at {top} Gb/s",
                            d.name, rate.text
                        ),
                        "a link that negotiated a lower speed (cable, transceiver, forced speed) caps NCCL's bandwidth for the whole job",
                        Fix::run(
                            "reseat or replace the cable; check that nothing forces the speed (`ethtool` shows the advertised modes)",
                            [format!("ethtool {netdev}")],
                        ),
                    ));
                }
            }
        }
        if !rates.is_empty() {
            e.note(&node.name, rates.join("; "));
        }
    }
    e
}

fn roce_gid(inputs: &Inputs) -> Evaluation {
    let mut e = Evaluation::default();
    for node in inputs.nodes {
        let f = &node.facts;
        if let Ok(c) = inputs.derived
            && let Some(env) = c.node(&node.name)
        {
            match env.env.get("NCCL_IB_GID_INDEX") {
                Some(i) => e.note(&node.name, format!("NCCL_IB_GID_INDEX={i}")),
                None => {
                    if let Some(w) = env
                        .warnings
                        .iter()
                        .find(|w| w.starts_with("NCCL_IB_GID_INDEX"))
                    {
                        e.note(&node.name, w.clone());
                    }
                }
            }
        }
        for d in f.rdma_devices.iter().filter(|d| d.is_active()) {
            let Some(port) = d.active_port() else {
                continue;
            };
            if port.link_layer != LinkLayer::Ethernet {
                continue; // InfiniBand: addressed by LID
            }
            let netdev = netdev_of(f, &d.name);
            if !port
                .gids
                .iter()
                .any(|g| g.gid_type == Some(crate::probe::facts::GidType::RoceV2))
            {
                e.push(Finding::fail(
                    &node.name,
                    format!("{} ({netdev}) has no RoCE v2 GID at all", d.name),
                    "NCCL needs a routable RoCE v2 GID; with only RoCE v1 (or none) connections fail with `ibv_modify_qp ... 110` timeouts or NCCL falls back to TCP",
                    Fix::run(
                        "check that the RoCE v2 mode is enabled for the port (`cma_roce_mode`) and the rdma-core / mlx5_ib modules are current",
                        [format!(
                            "cat /sys/class/infiniband/{}/ports/{}/gid_attrs/types/*",
                            sh(d.name.as_str()),
                            port.port
                        )],
                    ),
                ));
                continue;
            }
            // Slots of this port's GID table that hold garbage: a missing GID may be one of
            // them, so the address is not to blame.
            let slots = format!("sys/class/infiniband/{}/ports/{}/gids/", d.name, port.port);
            let garbage: Vec<String> = f
                .unparsed
                .iter()
                .filter_map(|u| {
                    let index = u.path.strip_prefix(&slots)?;
                    Some(format!("index {index}: `{}`", u.value))
                })
                .collect();
            for nd in &d.netdevs {
                let Some(i) = f.interface(nd) else { continue };
                for a in &i.ipv4 {
                    let found = port
                        .gids
                        .iter()
                        .any(|g| g.is_roce_v2_ipv4() && g.ipv4() == Some(a.addr));
                    if !found && !garbage.is_empty() {
                        e.push(Finding::fail(
                            &node.name,
                            format!(
                                "{}'s GID table holds entries that are not GIDs ({}): the RoCE v2 GID for {nd}'s address {a} cannot be read",
                                d.name,
                                garbage.join(", ")
                            ),
                            "NCCL addresses this port through its RoCE v2 GID; a table the kernel (or the snapshot) shows as garbage cannot be trusted, whatever the address",
                            Fix::run(
                                "read the GID table on the node; if it shows garbage there too, reload the RDMA driver (or capture the snapshot again if only the capture is damaged)",
                                [format!(
                                    "grep . /sys/class/infiniband/{}/ports/{}/gids/*",
                                    sh(d.name.as_str()),
                                    port.port
                                )],
                            ),
                        ));
                        continue;
                    }
                    if !found {
                        e.push(Finding::fail(
                            &node.name,
                            format!(
                                "{} has no RoCE v2 GID for {nd}'s address {a}",
                                d.name
                            ),
                            "without an IPv4 RoCE v2 GID NCCL cannot address this port by its IP: connections to peers time out (`ibv_modify_qp failed with 110`)",
                            Fix::run(
                                "the kernel adds the GID when the address is configured on an up interface; re-apply the address",
                                [
                                    format!("sudo ip addr del {a} dev {}", sh(nd.as_str())),
                                    format!("sudo ip addr add {a} dev {}", sh(nd.as_str())),
                                ],
                            ),
                        ));
                    }
                }
            }
        }
    }
    e
}

fn interfaces(inputs: &Inputs) -> Evaluation {
    let mut e = Evaluation::default();
    let mut layouts = BTreeSet::new();
    for node in inputs.nodes {
        let f = &node.facts;
        let parts: Vec<String> = f
            .rdma_devices
            .iter()
            .map(|d| {
                let state = if d.is_active() { "ACTIVE" } else { "down" };
                let netdevs: Vec<String> = d
                    .netdevs
                    .iter()
                    .map(|n| {
                        let addrs: Vec<String> = f
                            .interface(n)
                            .map(|i| i.ipv4.iter().map(|a| a.to_string()).collect())
                            .unwrap_or_default();
                        if addrs.is_empty() {
                            n.to_string()
                        } else {
                            format!("{n} {}", addrs.join(" "))
                        }
                    })
                    .collect();
                format!("{}={} ({state})", d.name, netdevs.join(","))
            })
            .collect();
        layouts.insert(
            f.rdma_devices
                .iter()
                .map(|d| d.name.to_string())
                .collect::<Vec<_>>(),
        );
        if parts.is_empty() {
            e.note(&node.name, "no RDMA devices");
        } else {
            e.note(&node.name, parts.join("; "));
        }
        if let Some(why) = f.ip_recorded.missing() {
            e.note(&node.name, format!("{why}; fix: {}", IpRecorded::FIX));
        }
        let named = violations(
            inputs,
            ViolationKind::UnusableName,
            "a device named in NCCL_IB_HCA or NCCL_SOCKET_IFNAME that NCCL reads as list syntax, or that no text can name, selects other devices or none",
        );
        e.findings
            .extend(named.findings.into_iter().filter(|x| x.node == node.name));
        for u in f.unparsed.iter().filter(|u| u.in_ip_json()) {
            e.push(Finding::warn(
                &node.name,
                u.to_string(),
                "what an unreadable field said (an address, a route) is unknown to every check and to the derived environment",
                Fix::text(
                    "capture the node again (`spark-launch probe --capture DIR`); if `ip -j addr` / `ip -j route` print this on the node itself, report it with the capture",
                ),
            ));
        }
    }
    if layouts.len() > 1
        && let Some(head) = inputs.head()
    {
        e.note(
            &head.name,
            "interface names differ between nodes: spark-launch derives every node's names from its own probe (never the head's)",
        );
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::testkit::*;

    /// The bundled capture of seed 001's `spark` (tests/fixtures, read as `probe --root` reads
    /// it) and its peer, with `n` more interfaces on the head: `veth{i}` with one address each
    /// and, every other one, its route; some inside the fabric's 192.168.177.0/24, some holding
    /// it, some link-local, some twice on one interface. A hostile capture of many interfaces.
    fn crowded(n: usize) -> Vec<NodeInput> {
        let dir = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/seed-001-two-sparks-both-twins"
        );
        let read = |n: &str| {
            crate::probe::read_snapshot_dir(std::path::Path::new(&format!("{dir}/{n}"))).unwrap()
        };
        let mut head = read("spark");
        for i in 0..n {
            let veth = NetIf::new(format!("veth{i}"));
            let cidr = match i % 7 {
                0 => format!("192.168.177.{}/30", (i / 7) % 64 * 4),
                1 => format!("192.168.{}.1/16", i % 3),
                2 => format!("169.254.{}.{}/16", (i >> 8) & 255, i & 255),
                3 => "192.168.0.0/17".to_string(),
                _ => format!("10.{}.{}.{}/24", (i >> 16) & 255, (i >> 8) & 255, i & 255),
            };
            let mut iface = crate::probe::testkit::iface(veth.as_str());
            let a = crate::probe::testkit::v4(&cidr);
            iface.ipv4.push(a);
            if i % 5 == 0 {
                iface.ipv4.push(crate::probe::testkit::v4(&format!(
                    "10.255.{}.1/8",
                    i & 255
                )));
            }
            head.interfaces.push(iface);
            if i % 2 == 0 {
                head.routes.push(RouteFacts {
                    dst: a.subnet().to_string(),
                    dev: Some(veth),
                    gateway: None,
                    prefsrc: Some(a.addr),
                    metric: None,
                });
            }
        }
        head.interfaces.sort_by(|a, b| a.name.cmp(&b.name));
        vec![
            NodeInput {
                name: name("spark"),
                facts: head,
            },
            NodeInput {
                name: name("spark2"),
                facts: read("spark2"),
            },
        ]
    }

    /// Runs `f` on the inputs doctor makes of `nodes` (facts only; the check reads no
    /// derived environment, so none is made).
    fn with_inputs<T>(nodes: &[NodeInput], f: impl FnOnce(&Inputs) -> T) -> T {
        let derived = Err(crate::derive::Refusal {
            violations: Vec::new(),
        });
        let options = super::super::Options::default();
        f(&Inputs {
            nodes,
            derived: &derived,
            options: &options,
            live: None,
            unreachable: &[],
        })
    }

    #[test]
    fn subnet_overlap_finds_what_the_quadratic_check_found_on_a_crowded_capture() {
        let nodes = crowded(3_000);
        let (now, before) = with_inputs(&nodes, |i| (subnet_overlap(i), subnet_overlap_before(i)));
        assert!(now.findings.len() > 5, "{:#?}", now.findings);
        assert_eq!(now, before);
    }

    #[test]
    fn subnet_overlap_is_linear_in_interfaces_and_routes() {
        // 100,000 interfaces took 39.8 s before (each address compared with every network
        // listed before it); now a bounded number of lookups per address and per route.
        for n in [1_000, 50_000] {
            let nodes = crowded(n);
            let items: usize = nodes
                .iter()
                .map(|x| {
                    x.facts.routes.len()
                        + x.facts
                            .interfaces
                            .iter()
                            .map(|i| i.ipv4.len())
                            .sum::<usize>()
                })
                .sum();
            let mut steps = 0;
            let e = with_inputs(&nodes, |i| subnet_overlap_counted(i, &mut steps));
            assert!(!e.findings.is_empty());
            assert!(
                steps <= 40 * items as u64,
                "{n} interfaces ({items} addresses and routes): {steps} steps"
            );
        }
    }

    /// The check as it was before it was made linear (n² in routes and addresses): the
    /// reference the indexed one must agree with, finding for finding.
    fn subnet_overlap_before(inputs: &Inputs) -> Evaluation {
        let mut e = Evaluation::default();
        for (i, node) in inputs.nodes.iter().enumerate() {
            let f = &node.facts;
            let fabric: BTreeSet<(Subnet, NetIf)> = fabric_addrs(i, f)
                .into_iter()
                .map(|a| (a.subnet(), a.iface))
                .collect();
            // Other networks: routes (and addresses) on interfaces that are not fabric interfaces.
            let mut others: Vec<(Subnet, NetIf, String)> = f
                .routes
                .iter()
                .filter(|r| !r.is_default())
                .filter_map(|r: &RouteFacts| {
                    let dev = r.dev.clone()?;
                    (!f.is_fabric_interface(&dev)).then(|| (r.subnet(), dev, r.dst.clone()))
                })
                .filter_map(|(s, d, dst)| Some((s?, d, dst)))
                .collect();
            for iface in f
                .interfaces
                .iter()
                .filter(|i| !f.is_fabric_interface(&i.name))
            {
                for a in &iface.ipv4 {
                    if !others
                        .iter()
                        .any(|(s, d, _)| d == &iface.name && s.contains(a.addr))
                    {
                        others.push((a.subnet(), iface.name.clone(), a.to_string()));
                    }
                }
            }
            let mut seen = BTreeSet::new();
            for (fs, fif) in &fabric {
                for (os, odev, dst) in &others {
                    if !fs.overlaps(os) {
                        continue;
                    }
                    if !seen.insert((*fs, odev.clone())) {
                        continue;
                    }
                    let what = route_kind_of(
                        odev,
                        f.routes
                            .iter()
                            .any(|r| r.is_default() && r.dev.as_ref() == Some(odev)),
                    );
                    let link_local = fs.is_link_local() && os.is_link_local();
                    let problem =
                        format!("fabric subnet {fs} ({fif}) overlaps {what}: {dst} on {odev}");
                    if link_local {
                        e.push(Finding::warn(
                            &node.name,
                            problem,
                            "with 169.254/16 on both, the kernel may send fabric traffic (NCCL bootstrap, Ray, MPI) out of the wrong interface; it works only while the fabric route wins",
                            Fix::text(format!(
                                "give the fabric a dedicated subnet (e.g. 192.168.177.0/24 in /etc/netplan for {fif}), or drop the link-local route on {odev} (`ipv4.link-local disabled` in NetworkManager, `link-local: []` in netplan)"
                            )),
                        ));
                    } else {
                        e.push(Finding::fail(
                            &node.name,
                            problem,
                            "two routes to one subnet: replies to fabric peers may leave by the other interface, so connections hang or run over the slow network",
                            Fix::text(format!(
                                "move the fabric to a subnet nothing else uses: change {fif}'s address in /etc/netplan and `sudo netplan apply`{}",
                                if what == "the Docker bridge" {
                                    ", or move Docker's bridge (`\"bip\"` or `\"default-address-pools\"` in /etc/docker/daemon.json, then `sudo systemctl restart docker`)"
                                } else {
                                    ""
                                }
                            )),
                        ));
                    }
                }
            }
        }
        e
    }

    #[test]
    fn rdma_active_passes_on_a_cabled_pair_and_fails_the_node_whose_devices_are_all_down() {
        assert!(
            facts_eval("fabric.rdma-active", &pair())
                .findings
                .is_empty()
        );
        let mut nodes = pair();
        nodes[1] = Node::spark("spark-b").named("spark-b");
        let e = facts_eval("fabric.rdma-active", &nodes);
        assert_eq!(verdicts(&e), vec![("spark-b".into(), Severity::Fail)]);
        assert!(e.findings[0].problem.what.contains("no ACTIVE RDMA device"));
        assert!(e.findings[0].problem.fix.text.contains("QSFP"));
    }

    #[test]
    fn twins_active_fails_when_one_twin_of_a_cabled_port_is_down() {
        assert!(
            facts_eval("fabric.twins-active", &pair())
                .findings
                .is_empty()
        );
        let mut nodes = pair();
        nodes[0] = Node::spark("spark-a")
            .up("enp1s0f1np1")
            .mtu("enp1s0f1np1", 9000)
            .addr("enp1s0f1np1", "192.168.177.11/24")
            .named("spark-a");
        let e = facts_eval("fabric.twins-active", &nodes);
        assert_eq!(verdicts(&e), vec![("spark-a".into(), Severity::Fail)]);
        let f = &e.findings[0];
        assert_eq!(
            f.problem.what,
            "rocep1s0f1 (enp1s0f1np1) is ACTIVE but its twin roceP2p1s0f1 (enP2p1s0f1np1) is 1: DOWN"
        );
        assert_eq!(
            f.problem.fix.commands,
            vec![
                "sudo ip link set dev enP2p1s0f1np1 mtu 9000",
                "sudo ip link set dev enP2p1s0f1np1 up"
            ]
        );
    }

    #[test]
    fn twins_used_passes_when_both_twins_are_in_nccl_ib_hca_and_warns_on_an_unused_active_port() {
        let e = facts_eval("fabric.twins-used", &pair());
        assert!(e.findings.is_empty());
        assert_eq!(e.notes[0].text, "NCCL_IB_HCA=rocep1s0f1,roceP2p1s0f1");
        let mut nodes = pair();
        nodes[1] = Node::cabled_spark("spark-b", "192.168.177.12/24")
            .up("enp1s0f0np0")
            .addr("enp1s0f0np0", "192.168.50.2/24")
            .named("spark-b");
        let e = facts_eval("fabric.twins-used", &nodes);
        assert_eq!(verdicts(&e), vec![("spark-b".into(), Severity::Warn)]);
        assert!(e.findings[0].problem.what.starts_with(
            "rocep1s0f0 (enp1s0f0np0, 192.168.50.2/24) is ACTIVE but not in NCCL_IB_HCA"
        ));
    }

    #[test]
    fn twins_on_one_subnet_fail_with_derives_text_and_the_del_command() {
        assert!(
            facts_eval("fabric.twins-same-subnet", &pair())
                .findings
                .is_empty()
        );
        let mut nodes = pair();
        nodes[1] = Node::cabled_spark("spark-b", "192.168.177.12/24")
            .addr("enP2p1s0f1np1", "192.168.177.13/24")
            .named("spark-b");
        let e = facts_eval("fabric.twins-same-subnet", &nodes);
        assert_eq!(verdicts(&e), vec![("spark-b".into(), Severity::Fail)]);
        assert_eq!(
            e.findings[0].problem.fix.commands,
            vec!["sudo ip addr del 192.168.177.13/24 dev enP2p1s0f1np1"]
        );
        // The other checks that need derive's environment say why they cannot answer.
        let used = facts_eval("fabric.twins-used", &nodes);
        assert_eq!(used.status_of(&name("spark-a")), CheckStatus::Skipped);
    }

    #[test]
    fn a_fabric_address_used_by_two_nodes_fails_on_the_second() {
        assert!(
            facts_eval("fabric.duplicate-address", &pair())
                .findings
                .is_empty()
        );
        let nodes = vec![
            pair().remove(0),
            Node::cabled_spark("spark-b", "192.168.177.11/24").named("spark-b"),
        ];
        let e = facts_eval("fabric.duplicate-address", &nodes);
        assert_eq!(verdicts(&e), vec![("spark-b".into(), Severity::Fail)]);
    }

    #[test]
    fn subnet_overlap_fails_on_the_docker_bridge_and_a_vpn_and_passes_on_distinct_subnets() {
        assert!(
            facts_eval("fabric.subnet-overlap", &pair())
                .findings
                .is_empty()
        );
        let nodes = vec![
            Node::cabled_spark("spark-a", "172.17.5.1/24")
                .other_iface("docker0", "172.17.0.1/16")
                .named("spark-a"),
            Node::cabled_spark("spark-b", "172.17.5.2/24")
                .other_iface("tailscale0", "100.64.0.5/32")
                .other_iface("wg0", "172.17.0.0/20")
                .named("spark-b"),
        ];
        let e = facts_eval("fabric.subnet-overlap", &nodes);
        assert_eq!(
            verdicts(&e),
            vec![
                ("spark-a".into(), Severity::Fail),
                ("spark-b".into(), Severity::Fail)
            ]
        );
        assert_eq!(
            e.findings[0].problem.what,
            "fabric subnet 172.17.5.0/24 (enp1s0f1np1) overlaps the Docker bridge: 172.17.0.0/16 on docker0"
        );
        assert!(e.findings[0].problem.fix.text.contains("daemon.json"));
        assert!(e.findings[1].problem.what.contains("a VPN route"));
    }

    #[test]
    fn a_link_local_fabric_next_to_a_link_local_management_route_is_a_warning() {
        let nodes = vec![
            Node::cabled_spark("spark-a", "169.254.10.1/16")
                .other_iface("enP7s7x", "169.254.200.1/16")
                .named("spark-a"),
            Node::cabled_spark("spark-b", "169.254.10.2/16").named("spark-b"),
        ];
        let e = facts_eval("fabric.subnet-overlap", &nodes);
        assert_eq!(verdicts(&e), vec![("spark-a".into(), Severity::Warn)]);
    }

    #[test]
    fn control_plane_notes_the_fabric_address_and_fails_a_node_nobody_can_reach() {
        let e = facts_eval("fabric.control-plane", &pair());
        assert!(e.findings.is_empty());
        assert_eq!(
            e.notes[0].text,
            "control plane on enp1s0f1np1 192.168.177.11 (fabric subnet 192.168.177.0/24, topology direct)"
        );
        let mut b = Node::cabled_spark("spark-b", "192.168.99.12/24");
        b.facts.routes.clear();
        let nodes = vec![pair().remove(0), b.named("spark-b")];
        let e = facts_eval("fabric.control-plane", &nodes);
        assert_eq!(verdicts(&e), vec![("spark-b".into(), Severity::Fail)]);
    }

    #[test]
    fn mtu_mismatch_fails_only_the_end_with_the_smaller_mtu() {
        assert!(
            facts_eval("fabric.mtu-mismatch", &pair())
                .findings
                .is_empty()
        );
        let mut nodes = pair();
        nodes[1] = Node::cabled_spark("spark-b", "192.168.177.12/24")
            .mtu("enp1s0f1np1", 1500)
            .mtu("enP2p1s0f1np1", 1500)
            .named("spark-b");
        let e = facts_eval("fabric.mtu-mismatch", &nodes);
        assert_eq!(verdicts(&e), vec![("spark-b".into(), Severity::Fail)]);
        assert_eq!(
            e.findings[0].problem.what,
            "enp1s0f1np1 has MTU 1500 but the other end of the link on 192.168.177.0/24 (spark-a enp1s0f1np1) has 9000"
        );
        assert_eq!(
            e.findings[0].problem.fix.commands,
            vec!["sudo ip link set dev enp1s0f1np1 mtu 9000"]
        );
    }

    #[test]
    fn twins_with_different_mtus_are_a_warning() {
        let mut nodes = pair();
        nodes[0] = Node::cabled_spark("spark-a", "192.168.177.11/24")
            .mtu("enP2p1s0f1np1", 1500)
            .named("spark-a");
        let e = facts_eval("fabric.mtu-mismatch", &nodes);
        assert_eq!(verdicts(&e), vec![("spark-a".into(), Severity::Warn)]);
        assert_eq!(
            e.findings[0].problem.fix.commands,
            vec!["sudo ip link set dev enP2p1s0f1np1 mtu 9000"]
        );
    }

    #[test]
    fn mtu_path_passes_when_jumbo_pings_pass_and_blames_the_node_every_peer_fails() {
        let (nodes, live) = three(|_, _| {});
        let e = live_eval(
            "fabric.mtu-path",
            &nodes,
            &crate::doctor::Options::default(),
            &live,
        );
        assert!(e.findings.is_empty());
        // c's switch port is at 1500: every jumbo ping to or from c fails, small ones pass.
        let (nodes, live) = three(|n, o| {
            for p in &mut o.pings {
                let to_c = p.ping.to.to_string() == "10.9.0.3";
                if p.ping.df_payload.is_some() && (to_c || n.as_str() == "c") {
                    p.result = out(1, "ping: local error: message too long, mtu=1500");
                }
            }
        });
        let e = live_eval(
            "fabric.mtu-path",
            &nodes,
            &crate::doctor::Options::default(),
            &live,
        );
        assert_eq!(verdicts(&e), vec![("c".into(), Severity::Fail)]);
        assert_eq!(
            e.findings[0].problem.what,
            "9000-byte don't-fragment pings to this node's 10.9.0.3 fail from every node (a, b), though small pings pass and both ends are set to MTU 9000"
        );
        assert_eq!(
            e.findings[0].problem.fix.commands,
            vec!["ping -M do -s 8972 -c 3 -I 10.9.0.1 10.9.0.3"]
        );
    }

    #[test]
    fn mtu_path_leaves_a_silent_peer_to_reach_fabric() {
        let (nodes, live) = three(|_, o| {
            for p in &mut o.pings {
                if p.ping.to.to_string() == "10.9.0.2" {
                    p.result = out(1, "");
                }
            }
        });
        let e = live_eval(
            "fabric.mtu-path",
            &nodes,
            &crate::doctor::Options::default(),
            &live,
        );
        assert!(e.findings.is_empty());
    }

    #[test]
    fn link_speed_warns_on_the_port_that_negotiated_less_than_its_peers() {
        let e = facts_eval("fabric.link-speed", &pair());
        assert!(e.findings.is_empty());
        assert!(e.notes[0].text.contains("200 Gb/sec"));
        let mut nodes = pair();
        nodes[1] = Node::cabled_spark("spark-b", "192.168.177.12/24")
            .rate("enP2p1s0f1np1", "100 Gb/sec (2X HDR)")
            .named("spark-b");
        let e = facts_eval("fabric.link-speed", &nodes);
        assert_eq!(verdicts(&e), vec![("spark-b".into(), Severity::Warn)]);
        assert!(
            e.findings[0]
                .problem
                .what
                .starts_with("roceP2p1s0f1 (enP2p1s0f1np1) links at 100 Gb/sec")
        );
    }

    #[test]
    fn roce_gid_fails_an_address_without_its_ipv4_roce_v2_gid() {
        assert!(facts_eval("fabric.roce-gid", &pair()).findings.is_empty());
        let mut a = Node::cabled_spark("spark-a", "192.168.177.11/24");
        a.dev_of("enp1s0f1np1").ports[0]
            .gids
            .retain(|g| g.ipv4().is_none());
        let nodes = vec![a.named("spark-a"), pair().remove(1)];
        let e = facts_eval("fabric.roce-gid", &nodes);
        assert_eq!(verdicts(&e), vec![("spark-a".into(), Severity::Fail)]);
        assert_eq!(
            e.findings[0].problem.what,
            "rocep1s0f1 has no RoCE v2 GID for enp1s0f1np1's address 192.168.177.11/24"
        );
    }

    #[test]
    fn interfaces_are_reported_per_node_and_differing_names_are_noted() {
        let e = facts_eval("fabric.interfaces", &pair());
        assert!(e.findings.is_empty());
        assert!(
            e.notes[0]
                .text
                .contains("rocep1s0f1=enp1s0f1np1 192.168.177.11/24 (ACTIVE)")
        );
        assert_eq!(e.notes.len(), 2);
    }
}
