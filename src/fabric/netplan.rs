//! The one netplan file spark-launch owns on each node (`/etc/netplan/40-spark-launch.yaml`),
//! rendered as text, and the other netplan files that already configure the same interfaces.
//!
//! The file: netplan version 2, no `renderer` (the system's stays), per cabled fabric netdev
//! `dhcp4: false`, `dhcp6: false`, its address (or `link-local: [ ipv4 ]`) and its MTU. IPv6
//! link-local addressing is left on (netplan's default), which is what the link probe listens
//! on. Every file rendered here is validated by the real `netplan generate` in the tests.
//!
//! Pure: text in, text out.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::node::NodeName;
use crate::probe::facts::{Ipv4Iface, NetIf, NodeFacts};

/// Where spark-launch's netplan file lives on every node.
pub const FILE: &str = "/etc/netplan/40-spark-launch.yaml";

/// How one netdev is configured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IfaceConfig {
    pub iface: NetIf,
    pub address: Option<Ipv4Iface>,
    /// `link-local: [ ipv4 ]` (NVIDIA's first playbook) instead of a static address.
    pub link_local_ipv4: bool,
    pub mtu: u32,
    /// Its MAC, when recorded: how a name networkd would unquote (`'cx5'`) is matched.
    pub mac: Option<String>,
}

impl IfaceConfig {
    /// True when the name holds a character networkd reads as quoting or escaping in `Name=`
    /// (`'`, `"`, `\`): such an interface is matched by its MAC, never by name.
    pub fn needs_mac(&self) -> bool {
        self.iface.as_str().contains(['\'', '"', '\\'])
    }
}

/// The whole file for one node. Every interface name goes through the YAML serializer, so a
/// kernel-legal name YAML would read otherwise (`&cx5`, `'cx5'`, `true`) stays that name; a name
/// with glob characters (`*cx5`, `[cx5]`), which netplan refuses as an id, gets an id of its own
/// and `match: name:` with each glob character bracketed (`[*]cx5`), so it matches that one
/// interface and no other; a name with a quote or backslash, which networkd would unquote, is
/// matched by its MAC ([`IfaceConfig::needs_mac`]; the plan refuses one without a MAC).
pub fn render(node: &NodeName, ifaces: &[IfaceConfig]) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "# Written by `spark-launch fabric apply` for {node}: its fabric interfaces.\n"
    ));
    out.push_str("# spark-launch owns this file; `spark-launch fabric rollback` removes it.\n");
    out.push_str("network:\n  version: 2\n  ethernets:\n");
    let mut ids = 0;
    let mut next_id = || loop {
        let id = format!("spark-launch-{ids}");
        ids += 1;
        if !ifaces.iter().any(|i| i.iface.as_str() == id) {
            break id;
        }
    };
    for c in ifaces {
        let name = c.iface.as_str();
        if let (true, Some(mac)) = (c.needs_mac(), &c.mac) {
            out.push_str(&format!("    {}:\n", yaml_scalar(&next_id())));
            out.push_str(&format!(
                "      match:\n        macaddress: {}\n",
                yaml_scalar(mac)
            ));
        } else if name.contains(GLOB_CHARS) {
            out.push_str(&format!("    {}:\n", yaml_scalar(&next_id())));
            out.push_str(&format!(
                "      match:\n        name: {}\n",
                yaml_scalar(&glob_literal(name))
            ));
        } else {
            out.push_str(&format!("    {}:\n", yaml_scalar(name)));
        }
        out.push_str("      dhcp4: false\n      dhcp6: false\n");
        if c.link_local_ipv4 {
            out.push_str("      link-local: [ ipv4 ]\n");
        }
        if let Some(a) = &c.address {
            out.push_str(&format!("      addresses:\n        - {a}\n"));
        }
        out.push_str(&format!("      mtu: {}\n", c.mtu));
    }
    out
}

/// What a netplan id may not hold ("must not use globbing") and a `match: name:` reads as a
/// glob.
const GLOB_CHARS: [char; 3] = ['*', '?', '['];

/// `s` as one YAML scalar, written by the serializer: plain where YAML reads it back as this
/// string, quoted otherwise.
fn yaml_scalar(s: &str) -> String {
    match yaml_serde::to_string(s) {
        Ok(t) => t.trim_end_matches('\n').to_string(),
        // Serializing a string does not fail; single quotes are always valid YAML.
        Err(_) => format!("'{}'", s.replace('\'', "''")),
    }
}

/// A glob that matches exactly `name`: each glob character in brackets (`*cx5` → `[*]cx5`).
fn glob_literal(name: &str) -> String {
    name.chars()
        .map(|c| {
            if GLOB_CHARS.contains(&c) {
                format!("[{c}]")
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// Another netplan file that configures interfaces this plan configures.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Conflict {
    pub path: String,
    /// The planned interfaces it configures.
    pub ifaces: Vec<NetIf>,
    /// Other fabric netdevs it configures (an uncabled ConnectX port): their settings go into
    /// the backup with the file.
    pub also_fabric: Vec<String>,
    /// Non-fabric interfaces it configures too (the management network, Wi-Fi...): such a file
    /// cannot be moved aside, it has to be edited by hand.
    pub others: Vec<String>,
}

impl Conflict {
    /// True when `--replace` may move the file aside (it configures nothing else).
    pub fn replaceable(&self) -> bool {
        self.others.is_empty()
    }

    /// `/etc/netplan/40-cx7.yaml configures enp1s0f1np1, enP2p1s0f1np1`.
    pub fn describe(&self) -> String {
        let ifaces = self
            .ifaces
            .iter()
            .map(|i| i.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        if self.others.is_empty() && self.also_fabric.is_empty() {
            format!("{} configures {ifaces}", self.path)
        } else if self.others.is_empty() {
            format!(
                "{} configures {ifaces} (and the uncabled {}, whose settings would go into the backup with it)",
                self.path,
                self.also_fabric.join(", ")
            )
        } else {
            format!(
                "{} configures {ifaces} and also {} (edit it by hand: remove the sections of {ifaces})",
                self.path,
                self.others.join(", ")
            )
        }
    }
}

/// What the node's netplan files say about the planned interfaces.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Conflicts {
    pub files: Vec<Conflict>,
    /// Files that could not be read or parsed, and why; `None` inside means "not recorded".
    pub unknown: Vec<String>,
}

/// The files on `facts` (other than spark-launch's own) that configure any of `planned`.
pub fn conflicts(node: &NodeName, facts: &NodeFacts, planned: &[NetIf]) -> Conflicts {
    let mut out = Conflicts::default();
    let Some(files) = &facts.netplan else {
        out.unknown.push(format!(
            "{node}: its /etc/netplan was not recorded (a snapshot without etc/netplan/, or a probe without root), so files that already configure these interfaces are unknown"
        ));
        return out;
    };
    for f in files.iter().filter(|f| f.path != FILE) {
        let Some(text) = &f.content else {
            out.unknown.push(format!(
                "{node}: {} could not be read (netplan files are root's): whether it configures these interfaces is unknown",
                f.path
            ));
            continue;
        };
        let configured = match configured_interfaces(text, facts) {
            Ok(c) => c,
            Err(e) => {
                out.unknown.push(format!(
                    "{node}: {} is not valid YAML ({e}): netplan will refuse it too",
                    f.path
                ));
                continue;
            }
        };
        let ifaces: Vec<NetIf> = planned
            .iter()
            .filter(|p| configured.contains_key(p.as_str()))
            .cloned()
            .collect();
        if ifaces.is_empty() {
            continue;
        }
        let (also_fabric, others): (Vec<String>, Vec<String>) = configured
            .keys()
            .filter(|k| !planned.iter().any(|p| p.as_str() == k.as_str()))
            .cloned()
            .partition(|k| facts.is_fabric_interface(&NetIf::new(k.clone())));
        out.files.push(Conflict {
            path: f.path.clone(),
            ifaces,
            also_fabric,
            others,
        });
    }
    out
}

/// The interfaces a netplan file configures (by name, by `match`, or as members of a bond or
/// bridge), mapped to how.
pub fn configured_interfaces(
    text: &str,
    facts: &NodeFacts,
) -> Result<BTreeMap<String, String>, String> {
    let doc: yaml_serde::Value = yaml_serde::from_str(text).map_err(|e| e.to_string())?;
    let mut out = BTreeMap::new();
    let Some(network) = doc.get("network") else {
        return Ok(out);
    };
    let mut ids: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for kind in ["ethernets", "wifis", "modems"] {
        let Some(devs) = network.get(kind).and_then(|v| v.as_mapping()) else {
            continue;
        };
        for (id, conf) in devs {
            let Some(id) = id.as_str() else { continue };
            let names = match conf.get("match") {
                Some(m) => matching(m, facts),
                None => vec![id.to_string()],
            };
            for n in &names {
                out.insert(n.clone(), format!("{kind}.{id}"));
            }
            ids.insert(id.to_string(), names);
        }
    }
    for kind in ["bonds", "bridges"] {
        let Some(devs) = network.get(kind).and_then(|v| v.as_mapping()) else {
            continue;
        };
        for (id, conf) in devs {
            let Some(id) = id.as_str() else { continue };
            let members = conf
                .get("interfaces")
                .and_then(|v| v.as_sequence())
                .map(|s| s.iter().filter_map(|m| m.as_str()).collect::<Vec<_>>())
                .unwrap_or_default();
            for m in members {
                let names = ids.get(m).cloned().unwrap_or_else(|| vec![m.to_string()]);
                for n in names {
                    out.insert(n, format!("{kind}.{id}"));
                }
            }
        }
    }
    Ok(out)
}

/// The node's interfaces a `match:` block selects (`name` glob, `macaddress`).
fn matching(m: &yaml_serde::Value, facts: &NodeFacts) -> Vec<String> {
    let name = m.get("name").and_then(|v| v.as_str());
    let mac = m.get("macaddress").and_then(|v| v.as_str());
    if name.is_none() && mac.is_none() {
        // `match: {driver: ...}` and the like: it may select any interface.
        return facts
            .interfaces
            .iter()
            .map(|i| i.name.to_string())
            .collect();
    }
    facts
        .interfaces
        .iter()
        .filter(|i| name.is_none_or(|g| glob(g, i.name.as_str())))
        .filter(|i| {
            mac.is_none_or(|want| {
                i.mac
                    .as_deref()
                    .is_some_and(|have| have.eq_ignore_ascii_case(want))
            })
        })
        .map(|i| i.name.to_string())
        .collect()
}

/// Shell-style glob with `*`, `?` and `[...]` sets, as netplan's `match: name:` uses.
pub fn glob(pattern: &str, text: &str) -> bool {
    glob_counted(pattern, text, &mut 0)
}

/// One part of a glob; each but `Star` matches exactly one character.
#[derive(Debug, PartialEq)]
enum Glob {
    Char(char),
    Any,
    Star,
    /// `[...]`: ranges (`a-z`) and single characters (`c` as `c-c`); `!` or `^` negates.
    Set {
        negate: bool,
        items: Vec<(char, char)>,
    },
}

impl Glob {
    fn matches(&self, c: char) -> bool {
        match self {
            Glob::Char(x) => *x == c,
            Glob::Any => true,
            Glob::Star => false,
            Glob::Set { negate, items } => {
                items.iter().any(|(lo, hi)| *lo <= c && c <= *hi) != *negate
            }
        }
    }
}

/// The pattern as parts: `[` without a closing `]` is itself; a set ends at the first `]`.
fn glob_parts(pattern: &str) -> Vec<Glob> {
    let p: Vec<char> = pattern.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < p.len() {
        match p[i] {
            '*' => out.push(Glob::Star),
            '?' => out.push(Glob::Any),
            '[' => {
                if let Some(len) = p[i + 1..].iter().position(|c| *c == ']') {
                    let mut set = &p[i + 1..i + 1 + len];
                    let negate = matches!(set.first(), Some('!') | Some('^'));
                    if negate {
                        set = &set[1..];
                    }
                    let mut items = Vec::new();
                    let mut k = 0;
                    while k < set.len() {
                        if k + 2 < set.len() && set[k + 1] == '-' {
                            items.push((set[k], set[k + 2]));
                            k += 3;
                        } else {
                            items.push((set[k], set[k]));
                            k += 1;
                        }
                    }
                    out.push(Glob::Set { negate, items });
                    i += len + 2;
                    continue;
                }
                out.push(Glob::Char('['));
            }
            c => out.push(Glob::Char(c)),
        }
        i += 1;
    }
    out
}

/// [`glob`], counting in `steps` the characters of `text` compared. One pass with one resume
/// point (the last `*`): when a later part fails, the last `*` takes one character more and
/// matching goes on from there, never trying every split of the name among the stars. At most
/// (name length + 1) × (parts + 1) steps, whatever the stars (the recursive matcher before it
/// tried them all: 14 stars on a 40-character name never ended).
fn glob_counted(pattern: &str, text: &str, steps: &mut u64) -> bool {
    let parts = glob_parts(pattern);
    let t: Vec<char> = text.chars().collect();
    let (mut p, mut i) = (0, 0);
    let mut resume: Option<(usize, usize)> = None;
    while i < t.len() {
        *steps += 1;
        match parts.get(p) {
            Some(Glob::Star) => {
                resume = Some((p, i));
                p += 1;
            }
            Some(g) if g.matches(t[i]) => {
                p += 1;
                i += 1;
            }
            _ => match resume {
                Some((star, from)) => {
                    resume = Some((star, from + 1));
                    p = star + 1;
                    i = from + 1;
                }
                None => return false,
            },
        }
    }
    parts[p..].iter().all(|g| *g == Glob::Star)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::facts::NetplanFile;
    use crate::probe::testkit::iface;

    fn facts(files: &[(&str, Option<&str>)]) -> NodeFacts {
        let mut ifs: Vec<_> = ["enp1s0f1np1", "enP2p1s0f1np1", "enP7s7", "wlP9s9"]
            .iter()
            .map(|n| iface(n))
            .collect();
        ifs[0].mac = Some("94:6d:ae:01:01:11".into());
        NodeFacts {
            hostname: "spark".into(),
            arch: None,
            interfaces: ifs,
            rdma_devices: vec![],
            routes: vec![],
            host: Default::default(),
            links: None,
            netplan: Some(
                files
                    .iter()
                    .map(|(p, c)| NetplanFile {
                        path: p.to_string(),
                        content: c.map(str::to_string),
                    })
                    .collect(),
            ),
            unparsed: Vec::new(),
            ip_recorded: Default::default(),
        }
    }

    fn name() -> NodeName {
        NodeName::new("spark").unwrap()
    }

    fn planned() -> Vec<NetIf> {
        vec![NetIf::new("enP2p1s0f1np1"), NetIf::new("enp1s0f1np1")]
    }

    #[test]
    fn the_file_is_version_2_without_renderer_with_dhcp_off_address_and_mtu() {
        let text = render(
            &name(),
            &[
                IfaceConfig {
                    iface: NetIf::new("enp1s0f1np1"),
                    address: Some(Ipv4Iface {
                        addr: "192.168.100.1".parse().unwrap(),
                        prefix: 24,
                    }),
                    link_local_ipv4: false,
                    mtu: 9000,
                    mac: None,
                },
                IfaceConfig {
                    iface: NetIf::new("enP2p1s0f1np1"),
                    address: None,
                    link_local_ipv4: true,
                    mtu: 9000,
                    mac: None,
                },
            ],
        );
        assert!(text.contains("  version: 2\n"));
        assert!(!text.contains("renderer"));
        assert!(text.contains(
            "    enp1s0f1np1:\n      dhcp4: false\n      dhcp6: false\n      addresses:\n        - 192.168.100.1/24\n      mtu: 9000\n"
        ));
        assert!(text.contains("link-local: [ ipv4 ]"));
    }

    #[test]
    fn a_file_naming_a_planned_interface_conflicts_and_one_naming_others_does_not() {
        let cx7 = "network:\n  version: 2\n  ethernets:\n    enp1s0f1np1:\n      addresses: [192.168.177.11/24]\n      mtu: 9000\n    enP2p1s0f1np1:\n      mtu: 9000\n";
        let nm = "network:\n  version: 2\n  renderer: NetworkManager\n";
        let f = facts(&[
            ("/etc/netplan/40-cx7.yaml", Some(cx7)),
            ("/etc/netplan/01-network-manager-all.yaml", Some(nm)),
            (FILE, Some(cx7)),
        ]);
        let c = conflicts(&name(), &f, &planned());
        assert_eq!(c.files.len(), 1, "our own file is not a conflict");
        assert_eq!(
            c.files[0].describe(),
            "/etc/netplan/40-cx7.yaml configures enP2p1s0f1np1, enp1s0f1np1"
        );
        assert!(c.files[0].replaceable());
        assert!(c.unknown.is_empty());
    }

    #[test]
    fn a_file_that_also_configures_the_management_interface_must_be_edited_by_hand() {
        let cloud = "network:\n  version: 2\n  ethernets:\n    enP7s7:\n      dhcp4: true\n    all-en:\n      match:\n        name: \"enp1*\"\n      dhcp4: true\n";
        let f = facts(&[("/etc/netplan/50-cloud-init.yaml", Some(cloud))]);
        let c = conflicts(&name(), &f, &planned());
        assert_eq!(c.files[0].ifaces, vec![NetIf::new("enp1s0f1np1")]);
        assert_eq!(c.files[0].others, vec!["enP7s7".to_string()]);
        assert!(!c.files[0].replaceable());
        assert!(c.files[0].describe().contains("edit it by hand"));
    }

    #[test]
    fn matches_by_mac_and_bond_members_conflict_too() {
        let bymac = "network:\n  ethernets:\n    cx:\n      match:\n        macaddress: 94:6D:AE:01:01:11\n";
        let bond = "network:\n  ethernets:\n    p2: {}\n  bonds:\n    bond0:\n      interfaces: [enP2p1s0f1np1]\n";
        let f = facts(&[
            ("/etc/netplan/a.yaml", Some(bymac)),
            ("/etc/netplan/b.yaml", Some(bond)),
        ]);
        let c = conflicts(&name(), &f, &planned());
        assert_eq!(c.files.len(), 2);
        assert_eq!(c.files[0].ifaces, vec![NetIf::new("enp1s0f1np1")]);
        assert_eq!(c.files[1].ifaces, vec![NetIf::new("enP2p1s0f1np1")]);
    }

    #[test]
    fn unreadable_or_unrecorded_files_are_said_to_be_unknown_never_clean() {
        let f = facts(&[("/etc/netplan/40-cx7.yaml", None)]);
        let c = conflicts(&name(), &f, &planned());
        assert!(c.files.is_empty());
        assert!(c.unknown[0].contains("could not be read"));
        let mut f = facts(&[]);
        f.netplan = None;
        assert!(conflicts(&name(), &f, &planned()).unknown[0].contains("was not recorded"));
    }

    #[test]
    fn interface_names_yaml_would_misread_are_quoted_by_the_serializer() {
        let names = [
            "enp1s0f1np1",
            "&cx5",
            "'cx5'",
            "true",
            "#cx5",
            "*cx5",
            "[cx5]",
            "cx?5",
        ];
        let mac = |k: usize| format!("02:00:00:00:00:{k:02x}");
        let ifaces: Vec<IfaceConfig> = names
            .iter()
            .enumerate()
            .map(|(k, n)| IfaceConfig {
                iface: NetIf::new(*n),
                address: None,
                link_local_ipv4: false,
                mtu: 9000,
                mac: Some(mac(k)),
            })
            .collect();
        let text = render(&NodeName::new("spark").unwrap(), &ifaces);
        assert!(
            text.contains("\n    enp1s0f1np1:\n"),
            "plain names stay plain:\n{text}"
        );
        let doc: yaml_serde::Value = yaml_serde::from_str(&text).unwrap();
        let eth = doc["network"]["ethernets"].as_mapping().unwrap();
        for (k, n) in names.into_iter().enumerate() {
            let found = eth.iter().any(|(id, conf)| match conf.get("match") {
                Some(m) if m.get("macaddress").is_some() => {
                    ifaces[k].needs_mac() && m["macaddress"].as_str() == Some(mac(k).as_str())
                }
                Some(m) => {
                    let g = m["name"].as_str().unwrap_or_default();
                    glob(g, n) && names.iter().all(|o| o == &n || !glob(g, o))
                }
                None => id.as_str() == Some(n),
            });
            assert!(found, "{n} is configured, and only it:\n{text}");
        }
    }

    #[test]
    fn globs_follow_the_shell() {
        assert!(glob("en*", "enp1s0f1np1"));
        assert!(glob("enp1s0f?np?", "enp1s0f1np1"));
        assert!(glob("en[pP]*", "enP2p1s0f1np1"));
        assert!(!glob("eth*", "enp1s0f1np1"));
        assert!(glob("[!w]*", "enp1"));
        assert!(glob("*", "") && glob("**", "x") && !glob("?", ""));
        assert!(glob("*np1", "enp1s0f1np1") && !glob("*np0", "enp1s0f1np1"));
        assert!(glob("e*1*1", "enp1s0f1np1") && !glob("e*1*2", "enp1s0f1np1"));
        assert!(glob("[a-z]*[0-9]", "enp1") && !glob("[^e]*", "enp1"));
        assert!(
            glob("[x", "[x") && !glob("[x", "x"),
            "an unclosed [ is itself"
        );
    }

    #[test]
    fn a_glob_of_many_stars_takes_steps_bounded_by_name_times_pattern() {
        // The hostile `match: name:`: 14 stars on a 40-character name, which the
        // recursive matcher never finished, and a 4,096-character one.
        let name = "a".repeat(40);
        let pattern = format!("{}b", "a*".repeat(14));
        for (pattern, name) in [
            (pattern, name),
            (format!("{}b", "*a".repeat(2048)), "a".repeat(4096)),
        ] {
            let mut steps = 0;
            assert!(!glob_counted(&pattern, &name, &mut steps));
            let bound = (name.len() as u64 + 1) * (glob_parts(&pattern).len() as u64 + 1);
            assert!(steps <= bound, "{steps} steps > {bound}");
            let mut steps = 0;
            assert!(glob_counted(
                &pattern[..pattern.len() - 1],
                &name,
                &mut steps
            ));
            assert!(steps <= bound, "{steps} steps > {bound}");
        }
    }
}
