//! How `discover`'s result reads: one row per node found, and, when no other node answered,
//! what was browsed and what usually causes it. Pure.

use std::time::Duration;

use comfy_table::{Table, presets::UTF8_BORDERS_ONLY};

use super::DiscoveredNode;
use crate::probe::facts::{NetIf, NodeFacts};

/// The message for "no peer answered": what was browsed, and what usually causes it.
pub fn nothing_found(interfaces: &[NetIf], local: &NodeFacts, took: Duration) -> String {
    let browsed: Vec<String> = interfaces
        .iter()
        .map(|i| {
            let addrs: Vec<String> = local
                .interface(i)
                .map(|f| f.ipv4.iter().map(|a| a.to_string()).collect())
                .unwrap_or_default();
            if addrs.is_empty() {
                i.to_string()
            } else {
                format!("{i} ({})", addrs.join(", "))
            }
        })
        .collect();
    format!(
        "no other node answered mDNS (_ssh._tcp) on {} within {:.1}s\nlikely causes:\n  - the QSFP cable is unplugged or the link is down: check `ip -br link` on both nodes\n  - avahi-daemon is not running on the other nodes: `sudo systemctl enable --now avahi-daemon`\n  - a firewall drops mDNS (UDP port 5353) on the fabric interfaces\n  - the peers are on another interface: try --all-interfaces, or --interface IF\nwithout mDNS, name the nodes yourself: `spark-launch nodes add HOST` or `--hosts a,b`",
        browsed.join(", "),
        took.as_secs_f64()
    )
}

/// One row per node found: its addresses and the interfaces they were heard on.
pub fn table(nodes: &[DiscoveredNode]) -> String {
    let mut t = Table::new();
    t.load_style(UTF8_BORDERS_ONLY);
    t.set_header(vec!["node", "address", "seen on", ""]);
    for n in nodes {
        let ips: Vec<String> = n.addresses.iter().map(|a| a.ip.to_string()).collect();
        let ifs: Vec<String> = n
            .addresses
            .iter()
            .map(|a| a.interface.to_string())
            .collect();
        t.add_row(vec![
            n.name.clone(),
            ips.join("\n"),
            ifs.join("\n"),
            if n.local {
                "this machine".to_string()
            } else {
                String::new()
            },
        ]);
    }
    t.to_string()
}
