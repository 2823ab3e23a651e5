//! How a fabric plan reads: a table of twin pairs and, per node, its file (text), and the JSON
//! of `fabric plan --json`:
//!
//! ```text
//! {"topology": "direct|switch|ring",
//!  "links": [{"a": "NODE:IF", "b": "NODE:IF", "subnet": "CIDR"}],
//!  "nodes": {"NAME": {"file": PATH|null, "netplan": TEXT|null, "addresses": {"IF": "A.B.C.D/P"},
//!                     "mtu": {"IF": 9000}, "conflicts": ["PATH configures IF"]}},
//!  "warnings": ["..."]}
//! ```
//!
//! `file` and `netplan` are `null` for a node with nothing to do. Pure.

use comfy_table::{Table, presets::UTF8_BORDERS_ONLY};
use serde::ser::{SerializeMap, SerializeStruct};
use serde::{Serialize, Serializer};

use super::{FabricPlan, NodeFabricPlan, PlannedLink};

impl Serialize for PlannedLink {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("PlannedLink", 3)?;
        st.serialize_field("a", &self.a)?;
        st.serialize_field("b", &self.b)?;
        st.serialize_field("subnet", &self.subnet.to_string())?;
        st.end()
    }
}

struct Addresses<'a>(&'a NodeFabricPlan);

impl Serialize for Addresses<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.addresses.len()))?;
        for (i, a) in &self.0.addresses {
            m.serialize_entry(i.as_str(), &a.to_string())?;
        }
        m.end()
    }
}

impl Serialize for NodeFabricPlan {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("NodeFabricPlan", 5)?;
        st.serialize_field("file", &self.file)?;
        st.serialize_field("netplan", &self.netplan)?;
        st.serialize_field("addresses", &Addresses(self))?;
        st.serialize_field("mtu", &self.mtu)?;
        let conflicts: Vec<String> = self.conflicts.iter().map(|c| c.describe()).collect();
        st.serialize_field("conflicts", &conflicts)?;
        st.end()
    }
}

struct Nodes<'a>(&'a [NodeFabricPlan]);

impl Serialize for Nodes<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for n in self.0 {
            m.serialize_entry(n.name.as_str(), n)?;
        }
        m.end()
    }
}

impl Serialize for FabricPlan {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("FabricPlan", 4)?;
        st.serialize_field("topology", &self.topology)?;
        st.serialize_field("links", &self.links)?;
        st.serialize_field("nodes", &Nodes(&self.nodes))?;
        st.serialize_field("warnings", &self.warnings)?;
        st.end()
    }
}

/// The plan for people: topology, a table of twin pairs, each node's file, the warnings.
pub fn text(plan: &FabricPlan) -> String {
    let mut out = String::new();
    let cabled: usize = plan.nodes.len();
    out.push_str(&format!(
        "topology: {} ({} nodes, {} twin pair{}, MTU {})\n",
        plan.topology,
        cabled,
        plan.links.len(),
        if plan.links.len() == 1 { "" } else { "s" },
        plan.mtu
    ));
    let mut t = Table::new();
    t.load_style(UTF8_BORDERS_ONLY);
    t.set_header(vec!["a", "b", "subnet", "addresses", "cabling"]);
    for l in &plan.links {
        let addr = |a: &Option<crate::probe::facts::Ipv4Iface>| {
            a.map(|x| x.addr.to_string())
                .unwrap_or_else(|| "link-local".into())
        };
        t.add_row(vec![
            l.a.to_string(),
            l.b.to_string(),
            l.subnet.to_string(),
            format!(
                "{} ↔ {}{}",
                addr(&l.a_addr),
                addr(&l.b_addr),
                if l.kept { " (kept)" } else { "" }
            ),
            l.source.to_string(),
        ]);
    }
    out.push_str(&t.to_string());
    out.push('\n');
    for n in &plan.nodes {
        out.push('\n');
        match (&n.file, &n.netplan) {
            (Some(file), Some(text)) => {
                out.push_str(&format!("{}: writes {file}\n", n.name));
                for line in text.lines() {
                    out.push_str(&format!("  │ {line}\n"));
                }
                for c in &n.conflicts {
                    out.push_str(&format!(
                        "  conflict: {}{}\n",
                        c.describe(),
                        if c.replaceable() {
                            " (apply refuses; --replace moves it into a backup that `fabric rollback` restores)"
                        } else {
                            ""
                        }
                    ));
                }
            }
            _ => {
                let addrs: Vec<String> = n
                    .addresses
                    .iter()
                    .map(|(i, a)| format!("{i} {a}"))
                    .collect();
                out.push_str(&format!(
                    "{}: nothing to do ({}{}MTU {} already)\n",
                    n.name,
                    addrs.join(", "),
                    if addrs.is_empty() { "" } else { ", " },
                    plan.mtu
                ));
            }
        }
    }
    if plan.nothing_to_do() {
        out.push_str("\nnothing to do: the fabric is already addressed as planned\n");
    }
    if !plan.warnings.is_empty() {
        out.push_str("\nwarnings:\n");
        for w in &plan.warnings {
            out.push_str(&format!("  - {w}\n"));
        }
    }
    out
}
