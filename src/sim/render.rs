//! How `sim up`, `sim down` and `sim status` show their results: text for a person (the
//! nodes, the cluster file, what stands in for what, what to run next), JSON with `--json`.
//! Pure.

use super::plan::{DownPlan, SERVED_MODEL};
use super::{SimDown, SimList, SimUp};
use crate::report::shown::Shown;

impl Shown for SimUp {
    fn text(&self) -> String {
        let p = &self.plan;
        let mut s = String::new();
        if self.dry_run {
            s.push_str(&format!(
                "would make the simulated cluster {} (--dry-run: nothing was made):\n",
                p.name
            ));
            for (i, step) in p.steps.iter().enumerate() {
                s.push_str(&format!("  {}. {step}\n", i + 1));
            }
        } else {
            s.push_str(&format!("simulated cluster {} is up\n", p.name));
        }
        let fabric = if p.cabling == "direct" {
            "one QSFP cable between them"
        } else {
            "a switch"
        };
        s.push_str(&format!(
            "\nnodes (user {}; management network {}, where this machine is {} on {}; fabric: {fabric})\n",
            p.user, p.mgmt_net, p.host_link.address, p.host_link.interface
        ));
        for n in &p.nodes {
            s.push_str(&format!(
                "  {:<10} {:<15} fabric {}\n",
                n.name.as_str(),
                n.mgmt.to_string(),
                n.fabric
            ));
        }
        s.push_str(&format!("cluster file: {}\n", p.cluster_file.display()));
        s.push_str(&format!(
            "stand-in engine: answers as {} (no GPUs, no Ray), named {}\n",
            p.image.stands_in_for.join(" and "),
            p.image.tags.join(", ")
        ));
        s.push_str(&format!(
            "stand-in Hub: {} serving {} (config.json, no weights)\n",
            p.hub.url,
            p.hub.models.join(", ")
        ));
        s.push_str(&format!(
            "\nnext (or give --cluster {} to each command):\n",
            p.cluster_file.display()
        ));
        for line in &self.next {
            s.push_str(&format!("  {line}\n"));
        }
        s
    }

    fn json(&self) -> serde_json::Result<String> {
        serde_json::to_string_pretty(self)
    }
}

/// What of a sim still exists, in a few words.
pub fn leftovers(d: &DownPlan) -> String {
    let mut parts: Vec<String> = d
        .namespaces
        .iter()
        .map(|n| format!("namespace {n}"))
        .collect();
    parts.extend(d.host_link.iter().map(|i| format!("interface {i}")));
    parts.extend(d.folder.iter().map(|f| f.display().to_string()));
    parts.extend(d.nodes_folder.iter().map(|f| f.display().to_string()));
    parts.join(", ")
}

impl Shown for SimDown {
    fn text(&self) -> String {
        let d = &self.plan;
        if !d.found {
            return format!(
                "no simulated cluster named {} on this machine: nothing to remove",
                d.name
            );
        }
        let what = leftovers(d);
        if self.dry_run {
            format!(
                "would remove the simulated cluster {} (--dry-run: nothing was removed): {what}",
                d.name
            )
        } else {
            format!("removed the simulated cluster {}: {what}", d.name)
        }
    }

    fn json(&self) -> serde_json::Result<String> {
        serde_json::to_string_pretty(self)
    }
}

impl Shown for SimList {
    fn text(&self) -> String {
        if self.sims.is_empty() {
            return "no simulated cluster on this machine (make one: sudo spark-launch sim up)"
                .to_string();
        }
        let mut table = comfy_table::Table::new();
        table.load_style(comfy_table::presets::UTF8_BORDERS_ONLY);
        table.set_header(["NAME", "STATE", "NODES", "NETWORK", "HUB", "CLUSTER FILE"]);
        for s in &self.sims {
            let (nodes, net, hub, file) = match &s.record {
                Some(r) => (
                    r.plan
                        .nodes
                        .iter()
                        .map(|n| n.name.to_string())
                        .collect::<Vec<_>>()
                        .join(","),
                    r.plan.mgmt_net.to_string(),
                    r.plan.hub.url.clone(),
                    r.plan.cluster_file.display().to_string(),
                ),
                None => ("?".into(), "?".into(), "?".into(), "-".into()),
            };
            let state = if s.state == "up" {
                s.state.clone()
            } else {
                format!("{} (spark-launch sim down --name {})", s.state, s.name)
            };
            table.add_row([s.name.to_string(), state, nodes, net, hub, file]);
        }
        format!("{table}\nthe stand-in Hub serves {SERVED_MODEL}")
    }

    fn json(&self) -> serde_json::Result<String> {
        serde_json::to_string_pretty(self)
    }
}
