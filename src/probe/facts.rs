//! What probe saw on one node, as plain serialisable data (`NodeFacts`).
//!
//! These types are the contract between the probe (which reads a snapshot) and everything that
//! decides (derive, workloads, doctor). They hold observations only, never decisions and never
//! live connections, so a `NodeFacts` can be saved, diffed and attached to a bug report.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

use ipnet::{Ipv4Net, Ipv6Net};
use serde::{Deserialize, Serialize};

macro_rules! name_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            pub fn new(name: impl Into<String>) -> Self {
                $name(name.into())
            }
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

name_type!(
    /// A network interface name exactly as the kernel shows it on one node (`enp1s0f1np1`).
    /// Names differ between nodes; never copy one node's names to another.
    NetIf
);
name_type!(
    /// An RDMA device name exactly as `/sys/class/infiniband` shows it (`rocep1s0f1`, `mlx5_0`).
    IbDevice
);

/// An IPv4 subnet (network address and prefix), e.g. `192.168.177.0/24`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Subnet(Ipv4Net);

impl Subnet {
    /// The subnet an interface address belongs to (`192.168.177.11/24` → `192.168.177.0/24`).
    pub fn of(addr: &Ipv4Iface) -> Self {
        Subnet(addr.net().trunc())
    }

    pub fn net(&self) -> Ipv4Net {
        self.0
    }

    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        self.0.contains(&ip)
    }

    /// True when the two subnets share at least one address.
    pub fn overlaps(&self, other: &Subnet) -> bool {
        self.0.contains(&other.0.network()) || other.0.contains(&self.0.network())
    }

    /// `169.254.0.0/16` and anything inside it.
    pub fn is_link_local(&self) -> bool {
        self.0.network().is_link_local()
    }
}

impl fmt::Display for Subnet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// One IPv4 address on an interface, with its prefix length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Ipv4Iface {
    pub addr: Ipv4Addr,
    pub prefix: u8,
}

impl Ipv4Iface {
    pub fn net(&self) -> Ipv4Net {
        // The prefix was validated when the address was read, so this cannot fail; fall back
        // to a host route rather than panic if a caller built an invalid one by hand.
        Ipv4Net::new(self.addr, self.prefix.min(32)).unwrap_or_else(|_| Ipv4Net::from(self.addr))
    }

    pub fn subnet(&self) -> Subnet {
        Subnet::of(self)
    }
}

impl fmt::Display for Ipv4Iface {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// One IPv6 address on an interface, with its prefix length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Ipv6Iface {
    pub addr: Ipv6Addr,
    pub prefix: u8,
}

impl Ipv6Iface {
    pub fn net(&self) -> Option<Ipv6Net> {
        Ipv6Net::new(self.addr, self.prefix).ok()
    }
}

/// `operstate` of a network interface (RFC 2863 names as the kernel prints them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OperState {
    Up,
    Down,
    Dormant,
    LowerLayerDown,
    NotPresent,
    Testing,
    Unknown,
}

impl OperState {
    pub fn parse(s: &str) -> OperState {
        match s.trim() {
            "up" => OperState::Up,
            "down" => OperState::Down,
            "dormant" => OperState::Dormant,
            "lowerlayerdown" => OperState::LowerLayerDown,
            "notpresent" => OperState::NotPresent,
            "testing" => OperState::Testing,
            _ => OperState::Unknown,
        }
    }
}

/// A network interface as probe saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InterfaceFacts {
    pub name: NetIf,
    pub operstate: OperState,
    /// `None` when `mtu` could not be read.
    pub mtu: Option<u32>,
    /// Link speed in Mb/s as `/sys/class/net/<if>/speed` reports it; `None` when unknown
    /// (the kernel prints -1 or refuses the read while the link is down).
    pub speed_mbps: Option<u32>,
    /// `None` when the kernel refused the read (it does while the interface is down).
    pub carrier: Option<bool>,
    pub mac: Option<String>,
    pub ipv4: Vec<Ipv4Iface>,
    pub ipv6: Vec<Ipv6Iface>,
}

impl InterfaceFacts {
    /// Operationally up with carrier (or carrier unknown but operstate up).
    pub fn is_up(&self) -> bool {
        self.operstate == OperState::Up && self.carrier != Some(false)
    }
}

/// The logical state of an RDMA port (`ports/<p>/state`, e.g. `4: ACTIVE`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortState {
    pub code: u32,
    pub name: String,
}

impl PortState {
    pub const ACTIVE: u32 = 4;

    /// Parses `"4: ACTIVE"`; anything unparsable becomes code 0 with the raw text kept.
    pub fn parse(s: &str) -> PortState {
        parse_coded(s)
            .map(|(code, name)| PortState { code, name })
            .unwrap_or_else(|| PortState {
                code: 0,
                name: s.trim().to_string(),
            })
    }

    pub fn is_active(&self) -> bool {
        self.code == Self::ACTIVE
    }
}

impl fmt::Display for PortState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.name)
    }
}

/// The physical state of an RDMA port (`ports/<p>/phys_state`, e.g. `5: LinkUp`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhysState {
    pub code: u32,
    pub name: String,
}

impl PhysState {
    pub const LINK_UP: u32 = 5;

    pub fn parse(s: &str) -> PhysState {
        parse_coded(s)
            .map(|(code, name)| PhysState { code, name })
            .unwrap_or_else(|| PhysState {
                code: 0,
                name: s.trim().to_string(),
            })
    }

    pub fn is_link_up(&self) -> bool {
        self.code == Self::LINK_UP
    }
}

impl fmt::Display for PhysState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.name)
    }
}

fn parse_coded(s: &str) -> Option<(u32, String)> {
    let (code, name) = s.trim().split_once(':')?;
    Some((code.trim().parse().ok()?, name.trim().to_string()))
}

/// `ports/<p>/link_layer`: `Ethernet` means RoCE, `InfiniBand` means native IB.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LinkLayer {
    Ethernet,
    InfiniBand,
    Other(String),
}

impl LinkLayer {
    pub fn parse(s: &str) -> LinkLayer {
        match s.trim() {
            "Ethernet" => LinkLayer::Ethernet,
            "InfiniBand" => LinkLayer::InfiniBand,
            other => LinkLayer::Other(other.to_string()),
        }
    }
}

/// `ports/<p>/rate`, e.g. `200 Gb/sec (4X HDR)`: the number and the text as printed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rate {
    pub gbps: Option<f64>,
    pub text: String,
}

impl Rate {
    pub fn parse(s: &str) -> Rate {
        let text = s.trim().to_string();
        let gbps = text
            .split_whitespace()
            .next()
            .and_then(|n| n.parse::<f64>().ok());
        Rate { gbps, text }
    }
}

/// The type of a GID table entry (`gid_attrs/types/<i>`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum GidType {
    /// `RoCE v2`: routable, what NCCL should use on RoCE fabrics.
    #[serde(rename = "RoCE v2")]
    RoceV2,
    /// `IB/RoCE v1`.
    #[serde(rename = "IB/RoCE v1")]
    IbRoceV1,
    #[serde(untagged)]
    Other(String),
}

impl GidType {
    pub fn parse(s: &str) -> GidType {
        match s.trim() {
            "RoCE v2" => GidType::RoceV2,
            "IB/RoCE v1" => GidType::IbRoceV1,
            other => GidType::Other(other.to_string()),
        }
    }
}

/// One populated slot of a port's GID table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GidEntry {
    pub index: u32,
    pub gid: Ipv6Addr,
    /// `None` when the type could not be read.
    pub gid_type: Option<GidType>,
    /// The netdev this GID belongs to (`gid_attrs/ndevs/<i>`).
    pub ndev: Option<NetIf>,
}

impl GidEntry {
    /// The IPv4 address of an IPv4-mapped GID (`::ffff:192.168.177.11`).
    pub fn ipv4(&self) -> Option<Ipv4Addr> {
        self.gid.to_ipv4_mapped()
    }

    pub fn is_roce_v2_ipv4(&self) -> bool {
        self.gid_type == Some(GidType::RoceV2) && self.ipv4().is_some()
    }
}

/// One port of an RDMA device.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PortFacts {
    pub port: u32,
    pub state: PortState,
    pub phys_state: Option<PhysState>,
    pub link_layer: LinkLayer,
    pub rate: Option<Rate>,
    pub gids: Vec<GidEntry>,
}

impl PortFacts {
    pub fn is_active(&self) -> bool {
        self.state.is_active()
    }
}

/// An RDMA device (`/sys/class/infiniband/<dev>`) with its netdevs and ports.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RdmaDeviceFacts {
    pub name: IbDevice,
    /// The netdevs of this device (`device/net/<if>`), usually one.
    pub netdevs: Vec<NetIf>,
    pub ports: Vec<PortFacts>,
    pub hca_type: Option<String>,
    pub fw_ver: Option<String>,
    pub board_id: Option<String>,
}

impl RdmaDeviceFacts {
    /// The first ACTIVE port, if any.
    pub fn active_port(&self) -> Option<&PortFacts> {
        self.ports.iter().find(|p| p.is_active())
    }

    pub fn is_active(&self) -> bool {
        self.active_port().is_some()
    }

    /// The device's netdevs plus any other netdev its GIDs belong to (RoCE over a VLAN puts
    /// the address on `enp1s0f1np1.100`, which only the GID table ties to the device).
    pub fn all_netdevs(&self) -> Vec<NetIf> {
        let mut out = self.netdevs.clone();
        for g in self.ports.iter().flat_map(|p| &p.gids) {
            if let Some(n) = &g.ndev
                && !out.contains(n)
            {
                out.push(n.clone());
            }
        }
        out
    }
}

/// One route from `ip -j route show`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteFacts {
    /// `default` or a CIDR as `ip` prints it.
    pub dst: String,
    pub dev: Option<NetIf>,
    pub gateway: Option<Ipv4Addr>,
    pub prefsrc: Option<Ipv4Addr>,
    /// Route metric (lower wins among routes to the same destination).
    #[serde(default)]
    pub metric: Option<u32>,
}

impl RouteFacts {
    pub fn is_default(&self) -> bool {
        self.dst == "default" || self.dst == "0.0.0.0/0"
    }

    /// The destination as a subnet, when it is one (not `default`).
    pub fn subnet(&self) -> Option<Subnet> {
        let dst = self.dst.trim();
        let net: Ipv4Net = if dst.contains('/') {
            dst.parse().ok()?
        } else {
            Ipv4Net::from(dst.parse::<Ipv4Addr>().ok()?)
        };
        Some(Subnet(net.trunc()))
    }
}

/// Everything probe saw on one node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeFacts {
    pub hostname: String,
    /// `uname -m` (`aarch64`, `x86_64`), when known.
    pub arch: Option<String>,
    /// Every network interface, sorted by name.
    pub interfaces: Vec<InterfaceFacts>,
    /// Every RDMA device, sorted by name.
    pub rdma_devices: Vec<RdmaDeviceFacts>,
    pub routes: Vec<RouteFacts>,
    /// Host facts that checks need (kernel, memory, driver); all optional.
    #[serde(default)]
    pub host: HostFacts,
    /// What the link-layer probe heard on each fabric netdev (`links/`); `None`: not recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub links: Option<super::links::LinkProbe>,
    /// `/etc/netplan/*.yaml` as recorded (`etc/netplan/`); `None`: not recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netplan: Option<Vec<NetplanFile>>,
    /// Values the snapshot holds that are not what the kernel prints there (an MTU that is not
    /// a number, a GID that is not an address): observed, but garbage. Checks that would read
    /// them say so instead of passing or blaming something else.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unparsed: Vec<Unparsed>,
    /// Whether the snapshot holds what `ip` printed; absent from JSON when it holds both.
    #[serde(default, skip_serializing_if = "IpRecorded::both")]
    pub ip_recorded: IpRecorded,
}

/// Whether `ip -j addr show` (`addresses`) and `ip -j route show` (`routes`) were recorded. A
/// node probed without `ip` on its `PATH` (a minimal VM image) has neither: its addresses and
/// routes are then unknown (not recorded), never "none", and every check on them is skipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpRecorded {
    pub addresses: bool,
    pub routes: bool,
}

impl Default for IpRecorded {
    fn default() -> Self {
        IpRecorded {
            addresses: true,
            routes: true,
        }
    }
}

impl IpRecorded {
    pub fn both(&self) -> bool {
        self.addresses && self.routes
    }

    /// How to record them.
    pub const FIX: &'static str = "install iproute2 on the node (it provides `ip`) and probe again (`spark-launch probe --capture DIR` there for a snapshot)";

    /// What was not recorded, for probe, env and doctor; `None` when both were.
    pub fn missing(&self) -> Option<String> {
        let (what, cmd) = match (self.addresses, self.routes) {
            (true, true) => return None,
            (false, false) => (
                "addresses and routes were",
                "`ip -j addr` and `ip -j route`",
            ),
            (false, true) => ("addresses were", "`ip -j addr`"),
            (true, false) => ("routes were", "`ip -j route`"),
        };
        Some(format!(
            "its IPv4 {what} not recorded ({cmd} did not run when it was probed: no `ip` on its PATH), so they are unknown, not absent"
        ))
    }
}

/// One netplan file of the node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetplanFile {
    /// Its path on the node (`/etc/netplan/40-cx7.yaml`).
    pub path: String,
    /// Its text; `None` when it exists but could not be read (netplan files are root's, 0600).
    pub content: Option<String>,
}

/// One value the reader could not make sense of: where it is, and what it says (printable).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unparsed {
    /// The snapshot path (`sys/class/net/enp1s0f1np1/mtu`), or, in `ip`'s JSON, the file, the
    /// entry and the field (`ip-addr.json: entry 3 (enp1s0f1np1), mtu`).
    pub path: String,
    pub value: String,
}

impl Unparsed {
    /// True for a field of `ip-addr.json` or `ip-route.json` (the rest of its entry was kept).
    pub fn in_ip_json(&self) -> bool {
        self.path.starts_with("ip-addr.json:") || self.path.starts_with("ip-route.json:")
    }
}

impl fmt::Display for Unparsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path == crate::libnccl::host::SNAPSHOT_FILE {
            return write!(
                f,
                "{}: {}; the node's own NCCL is left not recorded",
                self.path, self.value
            );
        }
        if self.in_ip_json() {
            write!(
                f,
                "{}: `{}` is not a value `ip` prints there; that field is left unknown and the rest of the entry was kept",
                self.path, self.value
            )
        } else {
            write!(
                f,
                "{}: `{}` is not a value the kernel prints there; left unknown",
                self.path, self.value
            )
        }
    }
}

/// The locked-memory limit (`ulimit -l`) of the user that ran the probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemlockLimit {
    Unlimited,
    /// In KiB, as `ulimit -l` prints it.
    Kib(u64),
}

impl MemlockLimit {
    pub fn parse(s: &str) -> Option<MemlockLimit> {
        match s.trim() {
            "unlimited" => Some(MemlockLimit::Unlimited),
            n => n.parse().ok().map(MemlockLimit::Kib),
        }
    }
}

/// One NVIDIA GPU as the kernel driver lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuFacts {
    /// PCI bus location (`0000:01:00.0`).
    pub bus: String,
    /// `Model:` line (`NVIDIA GB10`), when readable.
    pub model: Option<String>,
}

/// A fact as the probe recorded it: seen with a value, looked for and not there, or never
/// looked at. A snapshot from an older capture, or one made by hand, may not record a fact at
/// all; that is "not recorded", never "absent" (`probe --capture` writes `recorded`, the list
/// of what it looked at, and an empty `dev/infiniband/` folder when the machine has none).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Observed<T> {
    /// Seen, with its value.
    Present(T),
    /// Looked for, and not there.
    Absent,
    /// Never looked at: unknown.
    #[default]
    NotRecorded,
}

impl<T> Observed<T> {
    /// The value when it was seen.
    pub fn present(&self) -> Option<&T> {
        match self {
            Observed::Present(v) => Some(v),
            _ => None,
        }
    }

    pub fn is_present(&self) -> bool {
        matches!(self, Observed::Present(_))
    }

    /// False only when the snapshot never looked at it.
    pub fn is_recorded(&self) -> bool {
        !matches!(self, Observed::NotRecorded)
    }

    /// `Present` for `Some`, `Absent` for `None` (a value that was looked for).
    pub fn seen(value: Option<T>) -> Self {
        match value {
            Some(v) => Observed::Present(v),
            None => Observed::Absent,
        }
    }
}

/// Host facts beyond the network: what the doctor's host checks read. Every field may be
/// unknown because snapshots written by hand or by older versions may lack them; the ones whose
/// absence means something (no driver, no `/dev/infiniband`, no `/etc/nccl.conf`) are
/// [`Observed`], so "not there" and "not looked at" stay apart.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostFacts {
    /// `/proc/sys/kernel/osrelease`.
    pub kernel: Option<String>,
    /// `/proc/meminfo` fields in KiB.
    pub mem_total_kib: Option<u64>,
    pub mem_available_kib: Option<u64>,
    pub cma_total_kib: Option<u64>,
    pub cma_free_kib: Option<u64>,
    /// `/sys/module/nvidia/version`: the loaded NVIDIA kernel driver.
    #[serde(default)]
    pub nvidia_driver: Observed<String>,
    /// Entries of `/dev/infiniband` (`uverbs0`, `rdma_cm`, ...); `Absent` when the folder is
    /// empty or missing on the node.
    #[serde(default)]
    pub infiniband_dev_nodes: Observed<Vec<String>>,
    /// The NVIDIA GPUs the driver sees (`/proc/driver/nvidia/gpus/<bus>/information`).
    #[serde(default)]
    pub gpus: Vec<GpuFacts>,
    /// `/etc/nccl.conf`: NCCL applies every variable in it that the environment does not set,
    /// silently, on top of what spark-launch derives.
    #[serde(default)]
    pub nccl_conf: Observed<String>,
    pub memlock: Option<MemlockLimit>,
    /// The NCCL the node's own processes load (`--runtime host`), as the probe read it
    /// (`host-nccl.json`); `None`: not recorded (a snapshot of an older capture).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl: Option<crate::libnccl::host::HostNccl>,
}

impl HostFacts {
    /// True when `/dev/infiniband` was seen with a `uverbs*` device (what a container needs for
    /// RDMA); `None` when the snapshot does not record it.
    pub fn has_uverbs(&self) -> Option<bool> {
        match &self.infiniband_dev_nodes {
            Observed::Present(nodes) => Some(nodes.iter().any(|d| d.starts_with("uverbs"))),
            Observed::Absent => Some(false),
            Observed::NotRecorded => None,
        }
    }
}

impl NodeFacts {
    /// What the snapshot does not say as it should, one line each (for `probe`): `ip`'s output
    /// not recorded, and every value that did not parse.
    pub fn read_warnings(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .ip_recorded
            .missing()
            .map(|m| format!("{m}; fix: {}", IpRecorded::FIX))
            .into_iter()
            .collect();
        out.extend(self.unparsed.iter().map(|u| u.to_string()));
        out
    }

    /// The garbage value at `path`, if the snapshot held one there.
    pub fn unparsed_at(&self, path: &str) -> Option<&str> {
        self.unparsed
            .iter()
            .find(|u| u.path == path)
            .map(|u| u.value.as_str())
    }

    pub fn interface(&self, name: &NetIf) -> Option<&InterfaceFacts> {
        self.interfaces.iter().find(|i| &i.name == name)
    }

    pub fn rdma_device(&self, name: &IbDevice) -> Option<&RdmaDeviceFacts> {
        self.rdma_devices.iter().find(|d| &d.name == name)
    }

    /// The default route with the lowest metric.
    pub fn default_route(&self) -> Option<&RouteFacts> {
        self.routes
            .iter()
            .filter(|r| r.is_default() && r.dev.is_some())
            .min_by_key(|r| r.metric.unwrap_or(0))
    }

    /// The interface that holds the default route: the management network.
    pub fn management_interface(&self) -> Option<&InterfaceFacts> {
        self.interface(self.default_route()?.dev.as_ref()?)
    }

    /// The RDMA device whose netdev (or one of whose GIDs' netdevs, e.g. a VLAN) is `netdev`.
    pub fn rdma_device_of(&self, netdev: &NetIf) -> Option<&RdmaDeviceFacts> {
        self.rdma_devices
            .iter()
            .find(|d| d.netdevs.iter().any(|n| n == netdev))
            .or_else(|| {
                self.rdma_devices
                    .iter()
                    .find(|d| d.all_netdevs().iter().any(|n| n == netdev))
            })
    }

    /// True when `netdev` belongs to an RDMA device (a fabric interface).
    pub fn is_fabric_interface(&self, netdev: &NetIf) -> bool {
        self.rdma_device_of(netdev).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_states_parse_as_the_kernel_prints_them() {
        assert!(PortState::parse("4: ACTIVE\n").is_active());
        assert!(!PortState::parse("1: DOWN").is_active());
        assert_eq!(PortState::parse("garbage").code, 0);
        assert!(PhysState::parse("5: LinkUp").is_link_up());
        assert!(!PhysState::parse("3: Disabled").is_link_up());
    }

    #[test]
    fn rates_keep_the_number_and_the_text() {
        let r = Rate::parse("200 Gb/sec (4X HDR)\n");
        assert_eq!(r.gbps, Some(200.0));
        assert_eq!(r.text, "200 Gb/sec (4X HDR)");
        assert_eq!(Rate::parse("unknown").gbps, None);
    }

    #[test]
    fn an_ipv4_mapped_roce_v2_gid_yields_its_address() {
        let g = GidEntry {
            index: 3,
            gid: "::ffff:192.168.177.11".parse().unwrap(),
            gid_type: Some(GidType::parse("RoCE v2")),
            ndev: None,
        };
        assert!(g.is_roce_v2_ipv4());
        assert_eq!(g.ipv4(), Some(Ipv4Addr::new(192, 168, 177, 11)));
    }

    #[test]
    fn subnets_detect_overlap_across_prefix_lengths() {
        let a = Ipv4Iface {
            addr: Ipv4Addr::new(192, 168, 177, 11),
            prefix: 24,
        }
        .subnet();
        let b = Ipv4Iface {
            addr: Ipv4Addr::new(192, 168, 177, 200),
            prefix: 25,
        }
        .subnet();
        let c = Ipv4Iface {
            addr: Ipv4Addr::new(192, 168, 178, 1),
            prefix: 24,
        }
        .subnet();
        assert_eq!(a.to_string(), "192.168.177.0/24");
        assert!(a.overlaps(&b));
        assert!(!a.overlaps(&c));
    }
}
