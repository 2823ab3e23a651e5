//! The snapshot reader: turns a snapshot tree (folder or emitter stream) into `NodeFacts`.
//!
//! Pure: it only calls the `Tree` it is given. Sysfs values are taken as the kernel prints them;
//! addresses come from `ip-addr.json`, routes from `ip-route.json`. A value that is missing or
//! unreadable becomes `None` (an unreadable GID slot is an empty slot), never an error; only a
//! snapshot without a hostname or with unparsable JSON is refused, naming the file.
//!
//! Facts whose absence means something (`/dev/infiniband`, the NVIDIA driver, `/etc/nccl.conf`)
//! are tri-state ([`Observed`]): absent only when the snapshot says it looked, through its
//! `recorded` list (what `probe --capture` looked at) or, for `dev/infiniband`, the folder
//! itself (an empty folder: looked, nothing there); otherwise not recorded.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, Ipv6Addr};

use serde_json::Value;

use super::facts::*;
use super::tree::{Read, Tree};

/// A snapshot that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(
        "the snapshot has no `hostname` file: it is not a snapshot (capture one with `spark-launch probe --capture DIR`)"
    )]
    NoHostname,
    #[error("`{file}` is not valid `ip -j` output: {source}")]
    BadJson {
        file: &'static str,
        #[source]
        source: serde_json::Error,
    },
}

/// Reads one node's facts from a snapshot.
pub fn read_facts(tree: &dyn Tree) -> Result<NodeFacts, ReadError> {
    let hostname = tree.read("hostname").line().ok_or(ReadError::NoHostname)?;
    let arch = tree.read("arch").line();
    let mut unparsed = Vec::new();
    let links = parse_ip_addr(tree, &mut unparsed)?;
    let routes = parse_ip_route(tree, &mut unparsed)?;
    let ip_recorded = IpRecorded {
        addresses: links.is_some(),
        routes: routes.is_some(),
    };
    let links = links.unwrap_or_default();
    let routes = routes.unwrap_or_default();

    // Linear in the number of interfaces: one map from name to `ip` entry, one sorted set of
    // names (sysfs folders and `ip` entries), never a search per interface.
    let mut by_name: BTreeMap<&str, &IpLink> = BTreeMap::new();
    for l in &links {
        by_name.entry(l.ifname.as_str()).or_insert(l);
    }
    let mut names: BTreeSet<String> = tree.list("sys/class/net").into_iter().collect();
    names.extend(by_name.keys().map(|n| n.to_string()));

    let interfaces = names
        .iter()
        .map(|name| {
            read_interface(
                tree,
                name,
                by_name.get(name.as_str()).copied(),
                &mut unparsed,
            )
        })
        .collect();
    let rdma_devices = tree
        .list("sys/class/infiniband")
        .iter()
        .map(|dev| read_rdma_device(tree, dev, &mut unparsed))
        .collect();

    let mut host = read_host(tree);
    host.nccl = read_host_nccl(tree, &mut unparsed);
    Ok(NodeFacts {
        hostname,
        arch,
        interfaces,
        rdma_devices,
        routes,
        host,
        links: super::links::read_link_probe(tree),
        netplan: read_netplan(tree),
        unparsed,
        ip_recorded,
    })
}

/// `etc/netplan/*.yaml`: `None` when the folder was not recorded.
fn read_netplan(tree: &dyn Tree) -> Option<Vec<NetplanFile>> {
    if !tree.exists("etc/netplan") {
        return None;
    }
    Some(
        tree.list("etc/netplan")
            .into_iter()
            .filter(|n| n.ends_with(".yaml"))
            .map(|n| NetplanFile {
                path: format!("/etc/netplan/{n}"),
                // Without its final newline, as the emitter's stream carries it.
                content: match tree.read(&format!("etc/netplan/{n}")) {
                    Read::Value(v) => Some(v.trim_end_matches('\n').to_string()),
                    _ => None,
                },
            })
            .collect(),
    )
}

fn read_interface(
    tree: &dyn Tree,
    name: &str,
    link: Option<&IpLink>,
    unparsed: &mut Vec<Unparsed>,
) -> InterfaceFacts {
    let base = format!("sys/class/net/{name}");
    let sys = |attr: &str| tree.read(&format!("{base}/{attr}")).line();
    let operstate = sys("operstate")
        .map(|s| OperState::parse(&s))
        .or_else(|| {
            link.and_then(|l| l.operstate.as_deref())
                .map(|s| OperState::parse(&s.to_lowercase()))
        })
        .unwrap_or(OperState::Unknown);
    // sysfs is the truth, `ip -j` the fallback when sysfs lacks the file; garbage in sysfs
    // leaves the MTU unknown (and recorded as garbage), never quietly replaced.
    let mtu = match sys("mtu") {
        Some(raw) => match raw.parse() {
            Ok(m) => Some(m),
            Err(_) => {
                unparsed.push(Unparsed {
                    path: format!("{base}/mtu"),
                    value: raw,
                });
                None
            }
        },
        None => link.and_then(|l| l.mtu),
    };
    // The kernel prints -1 (or refuses the read) when the speed is unknown.
    let speed_mbps = sys("speed")
        .and_then(|s| s.parse::<i64>().ok())
        .and_then(|v| u32::try_from(v).ok());
    let carrier = sys("carrier").and_then(|s| match s.as_str() {
        "1" => Some(true),
        "0" => Some(false),
        _ => None,
    });
    let mac = sys("address").or_else(|| link.and_then(|l| l.address.as_deref().map(printable)));
    let (ipv4, ipv6) = link
        .map(|l| (l.ipv4.clone(), l.ipv6.clone()))
        .unwrap_or_default();
    InterfaceFacts {
        name: NetIf::new(printable(name)),
        operstate,
        mtu,
        speed_mbps,
        carrier,
        mac,
        ipv4,
        ipv6,
    }
}

fn read_rdma_device(tree: &dyn Tree, dev: &str, unparsed: &mut Vec<Unparsed>) -> RdmaDeviceFacts {
    let base = format!("sys/class/infiniband/{dev}");
    let attr = |a: &str| tree.read(&format!("{base}/{a}")).line();
    let netdevs = tree
        .list(&format!("{base}/device/net"))
        .iter()
        .map(|n| NetIf::new(printable(n)))
        .collect();
    let mut ports: Vec<PortFacts> = tree
        .list(&format!("{base}/ports"))
        .iter()
        .filter_map(|p| {
            let num: u32 = p.parse().ok()?;
            Some(read_port(tree, &format!("{base}/ports/{p}"), num, unparsed))
        })
        .collect();
    ports.sort_by_key(|p| p.port);
    RdmaDeviceFacts {
        name: IbDevice::new(printable(dev)),
        netdevs,
        ports,
        hca_type: attr("hca_type"),
        fw_ver: attr("fw_ver"),
        board_id: attr("board_id"),
    }
}

fn read_port(tree: &dyn Tree, base: &str, port: u32, unparsed: &mut Vec<Unparsed>) -> PortFacts {
    let attr = |a: &str| tree.read(&format!("{base}/{a}")).line();
    let mut gids: Vec<GidEntry> = tree
        .list(&format!("{base}/gids"))
        .iter()
        .filter_map(|i| {
            let index: u32 = i.parse().ok()?;
            // A missing or unreadable slot, or an all-zero GID, is an empty slot; a slot that
            // holds something else than an address is garbage, and said so.
            let raw = attr(&format!("gids/{i}"))?;
            let Ok(gid) = raw.parse::<Ipv6Addr>() else {
                unparsed.push(Unparsed {
                    path: format!("{base}/gids/{i}"),
                    value: raw,
                });
                return None;
            };
            if gid.is_unspecified() {
                return None;
            }
            Some(GidEntry {
                index,
                gid,
                gid_type: attr(&format!("gid_attrs/types/{i}")).map(|t| GidType::parse(&t)),
                ndev: attr(&format!("gid_attrs/ndevs/{i}")).map(NetIf::new),
            })
        })
        .collect();
    gids.sort_by_key(|g| g.index);
    PortFacts {
        port,
        state: attr("state")
            .map(|s| PortState::parse(&s))
            .unwrap_or_else(|| PortState::parse("0: UNKNOWN")),
        phys_state: attr("phys_state").map(|s| PhysState::parse(&s)),
        link_layer: attr("link_layer")
            .map(|s| LinkLayer::parse(&s))
            .unwrap_or(LinkLayer::Other(String::new())),
        rate: attr("rate").map(|s| Rate::parse(&s)),
        gids,
    }
}

/// A foreign value as one printable line (`text::printable`).
fn printable(s: &str) -> String {
    crate::text::printable(s).into_owned()
}

/// The file in which a capture lists what it looked at, one snapshot path per line.
pub const RECORDED: &str = "recorded";

/// The paths the snapshot's `recorded` list names.
fn recorded(tree: &dyn Tree) -> BTreeSet<String> {
    match tree.read(RECORDED) {
        Read::Value(v) => v
            .lines()
            .map(|l| l.trim().trim_end_matches('/').to_string())
            .filter(|l| !l.is_empty())
            .collect(),
        _ => BTreeSet::new(),
    }
}

fn read_host(tree: &dyn Tree) -> HostFacts {
    let meminfo = match tree.read("proc/meminfo") {
        Read::Value(v) => parse_meminfo(&v),
        _ => BTreeMap::new(),
    };
    let looked = recorded(tree);
    let observed = |value: Option<String>, path: &str| match value {
        Some(v) => Observed::Present(v),
        None if looked.contains(path) => Observed::Absent,
        None => Observed::NotRecorded,
    };
    let nccl_conf = observed(
        match tree.read("etc/nccl.conf") {
            Read::Value(v) => Some(crate::text::printable_lines(&v).into_owned()),
            _ => None,
        },
        "etc/nccl.conf",
    );
    let nvidia_driver = observed(
        tree.read("sys/module/nvidia/version").line(),
        "sys/module/nvidia",
    );
    let infiniband_dev_nodes = if tree.exists("dev/infiniband") || looked.contains("dev/infiniband")
    {
        let nodes: Vec<String> = tree
            .list("dev/infiniband")
            .iter()
            .map(|n| printable(n))
            .collect();
        Observed::seen((!nodes.is_empty()).then_some(nodes))
    } else {
        Observed::NotRecorded
    };
    HostFacts {
        kernel: tree.read("proc/sys/kernel/osrelease").line(),
        mem_total_kib: meminfo.get("MemTotal").copied(),
        mem_available_kib: meminfo.get("MemAvailable").copied(),
        cma_total_kib: meminfo.get("CmaTotal").copied(),
        cma_free_kib: meminfo.get("CmaFree").copied(),
        nvidia_driver,
        infiniband_dev_nodes,
        gpus: read_gpus(tree),
        nccl_conf,
        memlock: tree
            .read("ulimit-l")
            .line()
            .and_then(|s| MemlockLimit::parse(&s)),
        nccl: None,
    }
}

/// `host-nccl.json`, what the probe read of the node's own NCCL: `None` when the snapshot
/// does not hold it (not recorded); a file that is not what the probe writes is garbage, said
/// so, and read as not recorded.
fn read_host_nccl(
    tree: &dyn Tree,
    unparsed: &mut Vec<Unparsed>,
) -> Option<crate::libnccl::host::HostNccl> {
    use crate::libnccl::host::SNAPSHOT_FILE;
    let text = match tree.read(SNAPSHOT_FILE) {
        Read::Value(v) => v,
        _ => return None,
    };
    match serde_json::from_str(&text) {
        Ok(h) => Some(h),
        Err(e) => {
            unparsed.push(Unparsed {
                path: SNAPSHOT_FILE.to_string(),
                value: printable(&format!("not what the probe writes there ({e})")),
            });
            None
        }
    }
}

/// `proc/driver/nvidia/gpus/<bus>/information`: one GPU per folder, its `Model:` line.
fn read_gpus(tree: &dyn Tree) -> Vec<GpuFacts> {
    tree.list("proc/driver/nvidia/gpus")
        .into_iter()
        .map(|bus| {
            let model = match tree.read(&format!("proc/driver/nvidia/gpus/{bus}/information")) {
                Read::Value(text) => text.lines().find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    (k.trim() == "Model").then(|| printable(v.trim()))
                }),
                _ => None,
            };
            GpuFacts {
                bus: printable(&bus),
                model,
            }
        })
        .collect()
}

/// `MemTotal:  131072000 kB` lines → name → KiB.
fn parse_meminfo(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            let n = v.split_whitespace().next()?.parse().ok()?;
            Some((k.trim().to_string(), n))
        })
        .collect()
}

/// One entry of `ip -j addr`, as far as it parsed.
#[derive(Debug, Default)]
struct IpLink {
    ifname: String,
    mtu: Option<u32>,
    operstate: Option<String>,
    address: Option<String>,
    ipv4: Vec<Ipv4Iface>,
    ipv6: Vec<Ipv6Iface>,
}

/// `ip-addr.json` or `ip-route.json` as a list of entries: `None` when the snapshot does not
/// hold it (not recorded); JSON that is not a list is refused, naming the file.
fn ip_json(tree: &dyn Tree, file: &'static str) -> Result<Option<Vec<Value>>, ReadError> {
    match tree.read(file) {
        Read::Value(v) if v.trim().is_empty() => Ok(Some(Vec::new())),
        Read::Value(v) => serde_json::from_str(&v)
            .map(Some)
            .map_err(|source| ReadError::BadJson { file, source }),
        _ => Ok(None),
    }
}

/// Reads the fields of one `ip -j` entry one by one, so a field that does not parse (an MTU of
/// 2^32) is named (file, entry, field, as `jq '.[3].mtu' FILE` finds it) and left unknown, and
/// the rest of the entry is kept.
struct Fields<'a> {
    file: &'static str,
    index: usize,
    entry: &'a Value,
    /// The entry's interface (or route destination), to name it.
    label: String,
    unparsed: &'a mut Vec<Unparsed>,
}

impl Fields<'_> {
    fn bad(&mut self, field: &str, v: &Value) {
        self.unparsed.push(Unparsed {
            path: format!("{}: .[{}].{field} ({})", self.file, self.index, self.label),
            value: printable(&v.to_string()),
        });
    }

    fn get(&self, field: &str) -> Option<&Value> {
        self.entry.get(field).filter(|v| !v.is_null())
    }

    fn string(&mut self, field: &str) -> Option<String> {
        let v = self.get(field)?;
        match v.as_str() {
            Some(s) => Some(s.to_string()),
            None => {
                let v = v.clone();
                self.bad(field, &v);
                None
            }
        }
    }

    fn u32(&mut self, field: &str) -> Option<u32> {
        let v = self.get(field)?;
        match v.as_u64().and_then(|n| u32::try_from(n).ok()) {
            Some(n) => Some(n),
            None => {
                let v = v.clone();
                self.bad(field, &v);
                None
            }
        }
    }
}

fn parse_ip_addr(
    tree: &dyn Tree,
    unparsed: &mut Vec<Unparsed>,
) -> Result<Option<Vec<IpLink>>, ReadError> {
    let Some(entries) = ip_json(tree, "ip-addr.json")? else {
        return Ok(None);
    };
    let mut out = Vec::with_capacity(entries.len());
    for (index, entry) in entries.iter().enumerate() {
        // `ip -j addr` prints entries without `ifname` for some link types; skip those.
        let Some(ifname) = entry.get("ifname").and_then(Value::as_str) else {
            continue;
        };
        let mut f = Fields {
            file: "ip-addr.json",
            index,
            entry,
            label: printable(ifname),
            unparsed,
        };
        let mut link = IpLink {
            ifname: ifname.to_string(),
            mtu: f.u32("mtu"),
            operstate: f.string("operstate"),
            address: f.string("address"),
            ..IpLink::default()
        };
        let infos = match entry.get("addr_info").filter(|v| !v.is_null()) {
            Some(Value::Array(a)) => a.as_slice(),
            Some(v) => {
                f.bad("addr_info", v);
                &[]
            }
            None => &[],
        };
        for (k, a) in infos.iter().enumerate() {
            let family = a.get("family").and_then(Value::as_str).unwrap_or("");
            let (max, name) = match family {
                "inet" => (32, "inet"),
                "inet6" => (128, "inet6"),
                _ => continue,
            };
            let local = a.get("local").and_then(Value::as_str);
            let prefix = a
                .get("prefixlen")
                .and_then(Value::as_u64)
                .filter(|p| *p <= max);
            let parsed = match (name, local, prefix) {
                ("inet", Some(l), Some(p)) => l.parse::<Ipv4Addr>().ok().map(|addr| {
                    link.ipv4.push(Ipv4Iface {
                        addr,
                        prefix: p as u8,
                    })
                }),
                (_, Some(l), Some(p)) => l.parse::<Ipv6Addr>().ok().map(|addr| {
                    link.ipv6.push(Ipv6Iface {
                        addr,
                        prefix: p as u8,
                    })
                }),
                _ => None,
            };
            if parsed.is_none() {
                f.bad(&format!("addr_info[{k}]"), a);
            }
        }
        out.push(link);
    }
    Ok(Some(out))
}

fn parse_ip_route(
    tree: &dyn Tree,
    unparsed: &mut Vec<Unparsed>,
) -> Result<Option<Vec<RouteFacts>>, ReadError> {
    let Some(entries) = ip_json(tree, "ip-route.json")? else {
        return Ok(None);
    };
    let mut out = Vec::with_capacity(entries.len());
    for (index, entry) in entries.iter().enumerate() {
        let dst = entry.get("dst").and_then(Value::as_str);
        let mut f = Fields {
            file: "ip-route.json",
            index,
            entry,
            label: printable(dst.unwrap_or("?")),
            unparsed,
        };
        let Some(dst) = dst else {
            if let Some(v) = entry.get("dst") {
                let v = v.clone();
                f.bad("dst", &v);
            }
            continue;
        };
        out.push(RouteFacts {
            dst: printable(dst),
            dev: f.string("dev").map(|d| NetIf::new(printable(&d))),
            gateway: f.string("gateway").and_then(|g| g.parse().ok()),
            prefsrc: f.string("prefsrc").and_then(|g| g.parse().ok()),
            metric: f.u32("metric"),
        });
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::tree::MemTree;

    fn tree(files: &[(&str, &str)]) -> MemTree {
        let mut t = MemTree::default();
        for (p, c) in files {
            t.insert_file(p, c.to_string());
        }
        t
    }

    const IP_ADDR: &str = r#"[{"ifindex":3,"ifname":"enp1s0f1np1","mtu":9000,"operstate":"UP","address":"aa:bb:cc:00:00:01","addr_info":[{"family":"inet","local":"192.168.177.11","prefixlen":24},{"family":"inet6","local":"fe80::1","prefixlen":64}]},{"ifindex":4,"ifname":"enP2p1s0f1np1","mtu":9000,"operstate":"UP","addr_info":[]}]"#;

    #[test]
    fn a_twin_without_an_address_is_still_read_with_its_device_and_gids() {
        let t = tree(&[
            ("hostname", "spark\n"),
            ("ip-addr.json", IP_ADDR),
            ("sys/class/net/enP2p1s0f1np1/operstate", "up\n"),
            ("sys/class/net/enP2p1s0f1np1/carrier", "1\n"),
            (
                "sys/class/infiniband/roceP2p1s0f1/ports/1/state",
                "4: ACTIVE\n",
            ),
            (
                "sys/class/infiniband/roceP2p1s0f1/ports/1/link_layer",
                "Ethernet\n",
            ),
            (
                "sys/class/infiniband/roceP2p1s0f1/ports/1/gids/1",
                "fe80:0000:0000:0000:0000:00ff:fe00:0002\n",
            ),
            (
                "sys/class/infiniband/roceP2p1s0f1/ports/1/gid_attrs/types/1",
                "RoCE v2\n",
            ),
            (
                "sys/class/infiniband/roceP2p1s0f1/ports/1/gids/2",
                "0000:0000:0000:0000:0000:0000:0000:0000\n",
            ),
            (
                "sys/class/infiniband/roceP2p1s0f1/device/net/enP2p1s0f1np1/ifindex",
                "4\n",
            ),
        ]);
        let f = read_facts(&t).unwrap();
        assert_eq!(f.interfaces.len(), 2);
        let twin = f.interface(&NetIf::new("enP2p1s0f1np1")).unwrap();
        assert!(twin.ipv4.is_empty());
        assert!(twin.is_up());
        let dev = &f.rdma_devices[0];
        assert_eq!(dev.netdevs, vec![NetIf::new("enP2p1s0f1np1")]);
        assert!(dev.is_active());
        assert_eq!(dev.ports[0].gids.len(), 1, "the all-zero slot is empty");
        assert_eq!(dev.ports[0].gids[0].gid_type, Some(GidType::RoceV2));
        let ip = f.interface(&NetIf::new("enp1s0f1np1")).unwrap();
        assert_eq!(ip.ipv4[0].to_string(), "192.168.177.11/24");
        assert_eq!(
            ip.mtu,
            Some(9000),
            "mtu falls back to ip -j when sysfs lacks it"
        );
    }

    #[test]
    fn a_snapshot_without_hostname_is_refused_with_the_fix() {
        let err = read_facts(&tree(&[("ip-addr.json", "[]")])).unwrap_err();
        assert!(err.to_string().contains("spark-launch probe --capture"));
    }

    #[test]
    fn broken_ip_json_names_the_file() {
        let err = read_facts(&tree(&[("hostname", "x"), ("ip-addr.json", "[{")])).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("`ip-addr.json` is not valid `ip -j` output")
        );
    }

    #[test]
    fn the_default_route_names_the_management_interface() {
        let f = read_facts(&tree(&[
            ("hostname", "x"),
            (
                "ip-addr.json",
                r#"[{"ifname":"enP7s7","addr_info":[{"family":"inet","local":"10.0.0.170","prefixlen":24}]}]"#,
            ),
            (
                "ip-route.json",
                r#"[{"dst":"default","gateway":"10.0.0.1","dev":"enP7s7"},{"dst":"10.0.0.0/24","dev":"enP7s7","prefsrc":"10.0.0.170"}]"#,
            ),
        ]))
        .unwrap();
        assert_eq!(f.management_interface().unwrap().name.as_str(), "enP7s7");
        assert_eq!(f.routes[1].subnet().unwrap().to_string(), "10.0.0.0/24");
    }

    #[test]
    fn host_facts_come_from_proc_sys_and_dev() {
        let f = read_facts(&tree(&[
            ("hostname", "x"),
            (
                "proc/meminfo",
                "MemTotal:       131072000 kB\nCmaTotal:              0 kB\n",
            ),
            ("sys/module/nvidia/version", "580.95.05\n"),
            ("dev/infiniband/uverbs0", ""),
            ("ulimit-l", "unlimited\n"),
            (
                "proc/driver/nvidia/gpus/000f:01:00.0/information",
                "Model: \t\t NVIDIA GB10\nIRQ:   \t\t 182\nBus Location: \t 000f:01:00.0\n",
            ),
        ]))
        .unwrap();
        assert_eq!(f.host.gpus.len(), 1);
        assert_eq!(f.host.gpus[0].bus, "000f:01:00.0");
        assert_eq!(f.host.gpus[0].model.as_deref(), Some("NVIDIA GB10"));
        assert_eq!(f.host.mem_total_kib, Some(131_072_000));
        assert_eq!(f.host.cma_total_kib, Some(0));
        assert_eq!(
            f.host.nvidia_driver,
            Observed::Present("580.95.05".to_string())
        );
        assert_eq!(
            f.host.infiniband_dev_nodes,
            Observed::Present(vec!["uverbs0".to_string()])
        );
        assert_eq!(f.host.memlock, Some(MemlockLimit::Unlimited));
    }

    #[test]
    fn a_fact_is_absent_only_when_the_snapshot_says_it_looked() {
        // Nothing recorded: unknown, not absent.
        let f = read_facts(&tree(&[("hostname", "x")])).unwrap();
        assert_eq!(f.host.nvidia_driver, Observed::NotRecorded);
        assert_eq!(f.host.infiniband_dev_nodes, Observed::NotRecorded);
        assert_eq!(f.host.nccl_conf, Observed::NotRecorded);
        assert_eq!(f.host.has_uverbs(), None);
        // The capture's list of what it looked at makes a missing file an observed absence.
        let f = read_facts(&tree(&[
            ("hostname", "x"),
            (
                RECORDED,
                "sys/module/nvidia\ndev/infiniband\netc/nccl.conf\n",
            ),
        ]))
        .unwrap();
        assert_eq!(f.host.nvidia_driver, Observed::Absent);
        assert_eq!(f.host.infiniband_dev_nodes, Observed::Absent);
        assert_eq!(f.host.nccl_conf, Observed::Absent);
        assert_eq!(f.host.has_uverbs(), Some(false));
        // An empty dev/infiniband folder is an observed absence on its own.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("hostname"), "x\n").unwrap();
        std::fs::create_dir_all(dir.path().join("dev/infiniband")).unwrap();
        let f = read_facts(&crate::probe::DirTree::new(dir.path())).unwrap();
        assert_eq!(f.host.infiniband_dev_nodes, Observed::Absent);
        assert_eq!(f.host.nvidia_driver, Observed::NotRecorded);
    }
}
