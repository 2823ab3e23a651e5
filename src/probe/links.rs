//! Cabling facts: what the link-layer probe heard on each fabric netdev of one node, and the
//! link map that joins nodes' netdevs ("`spark:enp1s0f1np1` is cabled to `spark2:enp1s0f1np1`").
//!
//! The probe (`link_emit::SCRIPT`) pings the all-nodes IPv6 group (`ff02::1`) on every fabric
//! netdev with carrier and keeps what the tools printed: `links/<if>/ping` (which link-local
//! addresses answered) and `links/<if>/neigh` (`ip -6 neigh show dev <if>`: the MAC behind each
//! answer). No IPv4 address is needed, so cables are found on fresh machines. A snapshot holds
//! the same files, so a capture records the link map its node could see; a cluster's map is
//! then made by matching each answer's MAC (or address) to another node's interface
//! (`fabric::cabling`). `--link NODE:IF=NODE:IF` ([`LinkArg`]) states a cable by hand.
//!
//! Pure: reads a snapshot tree and parses text; the script that produces it runs elsewhere.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::net::Ipv6Addr;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::facts::NetIf;
use super::tree::{Read, Tree};
use crate::node::NodeName;

/// The folder of a snapshot that holds the link probe's output.
pub const LINKS_DIR: &str = "links";
/// The file that marks that the link probe ran (its content is the probe's format version).
pub const LINKS_MARKER: &str = "links/probe";

/// One answer to the `ff02::1` ping on one netdev.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct LinkAnswer {
    /// The link-local address that answered.
    pub addr: Ipv6Addr,
    /// Its MAC, from the neighbour table (`None`: no entry, e.g. the node's own address).
    pub mac: Option<String>,
}

/// What the link probe saw on one fabric netdev.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkProbeIface {
    pub iface: NetIf,
    /// `carrier` when the probe looked (`None`: unreadable, the link is administratively down).
    pub carrier: Option<bool>,
    /// The probe brought the netdev up to look (and down again afterwards).
    pub raised: bool,
    /// The probe pinged on it (it had carrier).
    pub pinged: bool,
    /// Who answered, other than this netdev itself.
    pub answers: Vec<LinkAnswer>,
    /// The ping's complaint when nothing answered and the ping itself failed (IPv6 disabled on
    /// the netdev: "Cannot assign requested address").
    pub problem: Option<String>,
}

/// What the link probe saw on one node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkProbe {
    pub ifaces: Vec<LinkProbeIface>,
}

impl LinkProbe {
    pub fn iface(&self, name: &NetIf) -> Option<&LinkProbeIface> {
        self.ifaces.iter().find(|i| &i.iface == name)
    }
}

/// Reads `links/` from a snapshot: `None` when the probe did not run there (not recorded).
pub fn read_link_probe(tree: &dyn Tree) -> Option<LinkProbe> {
    if matches!(tree.read(LINKS_MARKER), Read::Missing) {
        return None;
    }
    let mut ifaces = Vec::new();
    for name in tree.list(LINKS_DIR) {
        let base = format!("{LINKS_DIR}/{name}");
        if !tree.exists(&format!("{base}/carrier")) && !tree.exists(&format!("{base}/ping")) {
            continue;
        }
        let carrier = match tree.read(&format!("{base}/carrier")).value().as_deref() {
            Some("1") => Some(true),
            Some("0") => Some(false),
            _ => None,
        };
        let raised = tree.read(&format!("{base}/raised")).value().as_deref() == Some("1");
        let ping = match tree.read(&format!("{base}/ping")) {
            Read::Value(v) => Some(v),
            _ => None,
        };
        let neigh = tree
            .read(&format!("{base}/neigh"))
            .value()
            .unwrap_or_default();
        let iface = NetIf::new(name.clone());
        let (answers, problem) = match &ping {
            Some(text) => {
                // One map from address to MAC (the first entry of each), never a search per
                // answer: linear in the lines of both files.
                let mut macs: HashMap<Ipv6Addr, String> = HashMap::new();
                for (a, m) in parse_neigh(&neigh) {
                    macs.entry(a).or_insert(m);
                }
                let answers: Vec<LinkAnswer> = parse_ping_answers(text)
                    .into_iter()
                    .map(|addr| LinkAnswer {
                        addr,
                        mac: macs.get(&addr).cloned(),
                    })
                    .collect();
                let problem = if answers.is_empty() {
                    ping_problem(text)
                } else {
                    None
                };
                (answers, problem)
            }
            None => (Vec::new(), None),
        };
        ifaces.push(LinkProbeIface {
            iface,
            carrier,
            raised,
            pinged: ping.is_some(),
            answers,
            problem,
        });
    }
    Some(LinkProbe { ifaces })
}

/// The addresses that answered an iputils `ping` of `ff02::1%IF`, in order, each once:
/// `64 bytes from fe80::24aa:d5ff:fe33:b00c%enp1s0f1np1: icmp_seq=1 ttl=64 time=0.102 ms`.
pub fn parse_ping_answers(text: &str) -> Vec<Ipv6Addr> {
    ping_answers(text, &mut 0)
}

/// [`parse_ping_answers`], counting its work in `steps`: one per line, one per address looked
/// up in the set of those already seen. Linear: at most twice the number of lines.
fn ping_answers(text: &str, steps: &mut u64) -> Vec<Ipv6Addr> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    for line in text.lines() {
        *steps += 1;
        let Some((_, rest)) = line.split_once(" bytes from ") else {
            continue;
        };
        let Some(end) = rest.find(": icmp_seq") else {
            continue;
        };
        let who = &rest[..end];
        let who = who.split('%').next().unwrap_or(who);
        if let Ok(addr) = who.parse::<Ipv6Addr>() {
            *steps += 1;
            if seen.insert(addr) {
                out.push(addr);
            }
        }
    }
    out
}

/// `ip -6 neigh show dev IF` lines (`fe80::1 lladdr 26:aa:d5:33:b0:0c REACHABLE`) as
/// (address, MAC); entries without a MAC (FAILED, INCOMPLETE) are left out.
pub fn parse_neigh(text: &str) -> Vec<(Ipv6Addr, String)> {
    text.lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let addr: Ipv6Addr = words.next()?.parse().ok()?;
            let mut words = words.skip_while(|w| *w != "lladdr");
            words.next()?;
            let mac = words.next()?.to_ascii_lowercase();
            Some((addr, mac))
        })
        .collect()
}

fn ping_problem(text: &str) -> Option<String> {
    text.lines()
        .map(str::trim)
        .find(|l| l.starts_with("ping:") || l.contains("Cannot assign") || l.contains("unknown"))
        .map(str::to_string)
}

/// One end of a cable: a netdev of a node, written `NODE:IF`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct End {
    pub node: NodeName,
    pub iface: NetIf,
}

impl End {
    pub fn new(node: NodeName, iface: NetIf) -> End {
        End { node, iface }
    }
}

impl fmt::Display for End {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.node, self.iface)
    }
}

impl Serialize for End {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl FromStr for End {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (node, iface) = s
            .split_once(':')
            .ok_or_else(|| format!("{s:?} is not NODE:IF (e.g. spark-a:enp1s0f1np1)"))?;
        let node = NodeName::new(node).map_err(|e| e.to_string())?;
        let iface = iface.trim();
        if iface.is_empty() || iface.contains(['/', ' ', '=']) || iface.len() > 15 {
            return Err(format!(
                "{iface:?} in {s:?} is not an interface name (at most 15 characters, no '/', '=' or spaces)"
            ));
        }
        Ok(End {
            node,
            iface: NetIf::new(iface),
        })
    }
}

/// `--link NODE:IF=NODE:IF`: one cable, stated by hand (for snapshots, or where the probe
/// cannot hear). Naming one twin pairs the other twins of the two ports too.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkArg {
    pub a: End,
    pub b: End,
}

impl FromStr for LinkArg {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (a, b) = s.split_once('=').ok_or_else(|| {
            format!(
                "expected NODE:IF=NODE:IF (e.g. spark-a:enp1s0f1np1=spark-b:enp1s0f1np1), got {s:?}"
            )
        })?;
        let a: End = a.parse()?;
        let b: End = b.parse()?;
        if a.node == b.node {
            return Err(format!(
                "{s:?} joins {} to itself: a cable joins two nodes",
                a.node
            ));
        }
        Ok(LinkArg { a, b })
    }
}

/// Where a link of the map comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LinkSource {
    /// The link-layer probe heard the other end.
    Observed,
    /// `--link` said so.
    Given,
    /// Both ends hold an address on one subnet (no probe recorded).
    Inferred,
}

impl fmt::Display for LinkSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LinkSource::Observed => "observed",
            LinkSource::Given => "given",
            LinkSource::Inferred => "inferred",
        })
    }
}

/// Two netdevs that hear each other: one twin pair of a cable (or two ports of one switch).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Link {
    pub a: End,
    pub b: End,
    pub source: LinkSource,
}

impl Link {
    /// `a` and `b` in a stable order (by node position, then interface), so one link seen from
    /// both ends is one link.
    pub fn new(a: End, b: End, source: LinkSource, order: &[NodeName]) -> Link {
        let key = |e: &End| (order.iter().position(|n| n == &e.node), e.iface.clone());
        if key(&a) <= key(&b) {
            Link { a, b, source }
        } else {
            Link { a: b, b: a, source }
        }
    }

    pub fn ends(&self) -> [&End; 2] {
        [&self.a, &self.b]
    }

    pub fn touches(&self, end: &End) -> bool {
        &self.a == end || &self.b == end
    }
}

/// Which netdev of which node hears which: the cluster's cabling.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LinkMap {
    pub links: Vec<Link>,
    /// What could not be placed: unknown neighbours, nodes without a probe record, pings that
    /// failed. Each names the node and interface.
    pub notes: Vec<String>,
}

impl LinkMap {
    pub fn is_empty(&self) -> bool {
        self.links.is_empty()
    }

    /// Adds a link unless one between the same two ends is there already.
    pub fn add(&mut self, link: Link) {
        if !self
            .links
            .iter()
            .any(|l| l.touches(&link.a) && l.touches(&link.b))
        {
            self.links.push(link);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::tree::MemTree;

    const PING: &str = "PING ff02::1%enp1s0f1np1(ff02::1%enp1s0f1np1) 56 data bytes
64 bytes from fe80::24aa:d5ff:fe33:b00c%enp1s0f1np1: icmp_seq=1 ttl=64 time=0.102 ms
64 bytes from fe80::a82b:cff:fe55:2247%enp1s0f1np1: icmp_seq=1 ttl=64 time=0.011 ms (DUP!)
64 bytes from fe80::24aa:d5ff:fe33:b00c%enp1s0f1np1: icmp_seq=2 ttl=64 time=0.072 ms

--- ff02::1%enp1s0f1np1 ping statistics ---
2 packets transmitted, 2 received, +1 duplicates, 0% packet loss, time 1028ms
";

    /// The bundled capture `tests/fixtures/fresh-two-sparks/spark-8c04/links/enp1s0f1np1/`
    /// (ping and neighbour table) with its first answer repeated from `n` distinct addresses,
    /// each also in the neighbour table: a hostile capture as large as a file may be.
    fn hostile_capture(n: usize) -> (String, String) {
        let dir = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/fresh-two-sparks/spark-8c04/links/enp1s0f1np1"
        );
        let ping = std::fs::read_to_string(format!("{dir}/ping")).unwrap();
        let neigh = std::fs::read_to_string(format!("{dir}/neigh")).unwrap();
        let line = ping.lines().find(|l| l.contains(" bytes from ")).unwrap();
        let (head, tail) = line.split_once("fe80::").unwrap();
        let tail = &tail[tail.find('%').unwrap()..];
        let entry = neigh.lines().next().unwrap();
        let rest = &entry[entry.find(' ').unwrap()..];
        let mut p = String::new();
        let mut m = String::new();
        for i in 0..n {
            let addr = format!("fe80::{:x}:{:x}", i >> 16, i & 0xffff);
            p.push_str(&format!("{head}{addr}{tail}\n"));
            m.push_str(&format!("{addr}{rest}\n"));
        }
        (p, m)
    }

    #[test]
    fn a_ping_file_of_distinct_answers_is_read_in_steps_linear_in_its_lines() {
        // Before, each answer was searched for among those already kept: 200,000 lines took
        // 60.8 s (n²/2 comparisons). Now one set lookup per answer (bench/linear_parsers.sh
        // times 10k, 100k and 200k lines).
        for n in [1_000, 50_000] {
            let (ping, _) = hostile_capture(n);
            let mut steps = 0;
            let answers = ping_answers(&ping, &mut steps);
            assert_eq!(answers.len(), n);
            assert!(steps <= 2 * n as u64, "{n} lines took {steps} steps");
        }
    }

    #[test]
    fn a_huge_capture_pairs_every_answer_with_its_mac_through_one_map() {
        let (ping, neigh) = hostile_capture(50_000);
        let mut t = MemTree::default();
        t.insert_file("hostname", "x".into());
        t.insert_file(LINKS_MARKER, "1".into());
        t.insert_file("links/enp1s0f1np1/ping", ping);
        t.insert_file("links/enp1s0f1np1/neigh", neigh);
        let p = read_link_probe(&t).unwrap();
        let answers = &p.ifaces[0].answers;
        assert_eq!(answers.len(), 50_000);
        assert!(
            answers
                .iter()
                .all(|a| a.mac.as_deref() == Some("94:6d:ae:01:01:11"))
        );
    }

    #[test]
    fn ping_answers_are_read_once_each_without_the_interface_suffix() {
        let a = parse_ping_answers(PING);
        assert_eq!(
            a,
            vec![
                "fe80::24aa:d5ff:fe33:b00c".parse::<Ipv6Addr>().unwrap(),
                "fe80::a82b:cff:fe55:2247".parse().unwrap()
            ]
        );
        // Older iputils print the address without `%IF`.
        assert_eq!(
            parse_ping_answers("64 bytes from fe80::1: icmp_seq=1 ttl=64 time=0.1 ms").len(),
            1
        );
    }

    #[test]
    fn neighbour_lines_give_the_mac_behind_each_address_and_skip_failed_entries() {
        let n = parse_neigh(
            "fe80::24aa:d5ff:fe33:b00c lladdr 26:AA:d5:33:b0:0c DELAY\nfe80::9 FAILED\nfe80::7 lladdr 02:00:00:00:00:07 router STALE\n",
        );
        assert_eq!(n.len(), 2);
        assert_eq!(n[0].1, "26:aa:d5:33:b0:0c");
        assert_eq!(n[1].1, "02:00:00:00:00:07");
    }

    #[test]
    fn a_snapshot_without_links_has_no_record_and_one_with_them_reads_every_netdev() {
        let mut t = MemTree::default();
        t.insert_file("hostname", "x".into());
        assert_eq!(read_link_probe(&t), None, "not recorded");
        t.insert_file(LINKS_MARKER, "1".into());
        t.insert_file("links/enp1s0f1np1/carrier", "1".into());
        t.insert_file("links/enp1s0f1np1/ping", PING.into());
        t.insert_file(
            "links/enp1s0f1np1/neigh",
            "fe80::24aa:d5ff:fe33:b00c lladdr 26:aa:d5:33:b0:0c DELAY".into(),
        );
        t.insert_file("links/enp1s0f0np0/carrier", "0".into());
        t.insert_file("links/enp1s0f0np0/raised", "1".into());
        let p = read_link_probe(&t).unwrap();
        assert_eq!(p.ifaces.len(), 2);
        let down = p.iface(&NetIf::new("enp1s0f0np0")).unwrap();
        assert_eq!(down.carrier, Some(false));
        assert!(down.raised && !down.pinged);
        let up = p.iface(&NetIf::new("enp1s0f1np1")).unwrap();
        assert!(up.pinged);
        assert_eq!(up.answers.len(), 2);
        assert_eq!(up.answers[0].mac.as_deref(), Some("26:aa:d5:33:b0:0c"));
        assert_eq!(up.answers[1].mac, None);
    }

    #[test]
    fn a_ping_that_could_not_run_is_kept_as_the_problem() {
        let mut t = MemTree::default();
        t.insert_file(LINKS_MARKER, "1".into());
        t.insert_file("links/eth1/carrier", "1".into());
        t.insert_file(
            "links/eth1/ping",
            "ping: connect: Cannot assign requested address".into(),
        );
        let p = read_link_probe(&t).unwrap();
        assert_eq!(
            p.ifaces[0].problem.as_deref(),
            Some("ping: connect: Cannot assign requested address")
        );
    }

    #[test]
    fn a_link_argument_is_two_node_interface_ends() {
        let l: LinkArg = "spark-a:enp1s0f1np1=spark-b:enP2p1s0f1np1".parse().unwrap();
        assert_eq!(l.a.to_string(), "spark-a:enp1s0f1np1");
        assert_eq!(l.b.iface.as_str(), "enP2p1s0f1np1");
        assert!(
            "spark-a:enp1s0f1np1"
                .parse::<LinkArg>()
                .unwrap_err()
                .contains("NODE:IF=NODE:IF")
        );
        assert!(
            "a:x=a:y"
                .parse::<LinkArg>()
                .unwrap_err()
                .contains("to itself")
        );
        assert!("a=b:y".parse::<LinkArg>().unwrap_err().contains("NODE:IF"));
    }

    #[test]
    fn one_link_seen_from_both_ends_is_one_link() {
        let order = vec![NodeName::new("a").unwrap(), NodeName::new("b").unwrap()];
        let e = |s: &str| s.parse::<End>().unwrap();
        let mut m = LinkMap::default();
        m.add(Link::new(e("b:x"), e("a:y"), LinkSource::Observed, &order));
        m.add(Link::new(e("a:y"), e("b:x"), LinkSource::Observed, &order));
        assert_eq!(m.links.len(), 1);
        assert_eq!(m.links[0].a.to_string(), "a:y", "head's end first");
    }
}
