//! A machine's facts (`spark-launch probe`) as a person reads them: its RDMA devices and
//! ports with their RoCE v2 GIDs, its interfaces with their role (management, fabric), and
//! what the link probe heard on each fabric port. Pure: text from `NodeFacts`.

use comfy_table::{Table, presets::UTF8_BORDERS_ONLY};

use crate::fabric::cabling::{port_key, twin_side};
use crate::probe::NodeFacts;

/// The human view: RDMA devices, then interfaces, then the link probe per fabric port.
pub fn text(f: &NodeFacts) -> String {
    let mut out = format!(
        "{} ({})\n",
        f.hostname,
        f.arch.as_deref().unwrap_or("arch unknown")
    );
    let mut t = Table::new();
    t.load_style(UTF8_BORDERS_ONLY);
    t.set_header(vec![
        "RDMA device",
        "port",
        "state",
        "link",
        "rate",
        "netdev",
        "RoCE v2 IPv4 GID",
    ]);
    for d in &f.rdma_devices {
        for p in &d.ports {
            let gids: Vec<String> = p
                .gids
                .iter()
                .filter(|g| g.is_roce_v2_ipv4())
                .map(|g| {
                    format!(
                        "{} ({})",
                        g.index,
                        g.ipv4().map(|a| a.to_string()).unwrap_or_default()
                    )
                })
                .collect();
            t.add_row(vec![
                d.name.to_string(),
                p.port.to_string(),
                p.state.to_string(),
                match &p.link_layer {
                    crate::probe::facts::LinkLayer::Ethernet => "Ethernet (RoCE)".to_string(),
                    crate::probe::facts::LinkLayer::InfiniBand => "InfiniBand".to_string(),
                    crate::probe::facts::LinkLayer::Other(s) => s.clone(),
                },
                p.rate.as_ref().map(|r| r.text.clone()).unwrap_or_default(),
                d.netdevs
                    .iter()
                    .map(|n| n.to_string())
                    .collect::<Vec<_>>()
                    .join(","),
                if gids.is_empty() {
                    "-".into()
                } else {
                    gids.join(", ")
                },
            ]);
        }
    }
    if f.rdma_devices.is_empty() {
        out.push_str("no RDMA devices (/sys/class/infiniband is empty)\n");
    } else {
        out.push_str(&t.to_string());
        out.push('\n');
    }
    let mut t = Table::new();
    t.load_style(UTF8_BORDERS_ONLY);
    t.set_header(vec!["interface", "state", "mtu", "speed", "IPv4", "role"]);
    let mgmt = f.management_interface().map(|i| i.name.clone());
    for i in &f.interfaces {
        let role = if Some(&i.name) == mgmt.as_ref() {
            "management (default route)".to_string()
        } else if let Some(d) = f.rdma_device_of(&i.name) {
            format!("fabric ({})", d.name)
        } else {
            String::new()
        };
        t.add_row(vec![
            i.name.to_string(),
            format!("{:?}", i.operstate).to_lowercase(),
            i.mtu.map(|m| m.to_string()).unwrap_or_default(),
            i.speed_mbps
                .map(|s| format!("{} Gb/s", s / 1000))
                .unwrap_or_default(),
            i.ipv4
                .iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .join(" "),
            role,
        ]);
    }
    out.push_str(&t.to_string());
    for w in f.read_warnings() {
        out.push_str(&format!("\nwarning: {w}"));
    }
    if let Some(links) = &f.links {
        out.push_str("\n\n");
        let mut t = Table::new();
        t.load_style(UTF8_BORDERS_ONLY);
        t.set_header(vec![
            "fabric netdev",
            "port (twin)",
            "carrier",
            "answers on ff02::1 (link probe)",
        ]);
        let mut ifaces: Vec<_> = links.ifaces.iter().collect();
        ifaces.sort_by_key(|i| (port_key(&i.iface), twin_side(&i.iface)));
        for i in ifaces {
            let answers: Vec<String> = i
                .answers
                .iter()
                .filter(|a| {
                    a.mac.is_some()
                        || !f
                            .interfaces
                            .iter()
                            .any(|x| x.ipv6.iter().any(|v| v.addr == a.addr))
                })
                .map(|a| match &a.mac {
                    Some(m) => format!("{} ({m})", a.addr),
                    None => a.addr.to_string(),
                })
                .collect();
            let side = twin_side(&i.iface);
            t.add_row(vec![
                i.iface.to_string(),
                format!(
                    "{} ({})",
                    port_key(&i.iface),
                    if side.is_empty() { "first" } else { "second" }
                ),
                match i.carrier {
                    Some(true) => "yes".to_string(),
                    Some(false) => "no".to_string(),
                    None => "-".to_string(),
                },
                if answers.is_empty() {
                    i.problem.clone().unwrap_or_else(|| "-".into())
                } else {
                    answers.join("\n")
                },
            ]);
        }
        out.push_str(&t.to_string());
    }
    out
}
