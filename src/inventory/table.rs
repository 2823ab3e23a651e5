//! The cluster file's nodes as the table `spark-launch nodes` prints: name, role, addresses,
//! user, port and the cached fabric interfaces. Pure.

use comfy_table::{Table, presets::UTF8_BORDERS_ONLY};

use super::Inventory;
use crate::node::Role;

impl Inventory {
    /// The listing `spark-launch nodes` prints: one row per node, head first.
    pub fn table(&self) -> String {
        let inv = self;
        let mut t = Table::new();
        t.load_style(UTF8_BORDERS_ONLY);
        t.set_header(vec![
            "node",
            "role",
            "addresses",
            "user",
            "port",
            "fabric (cached)",
        ]);
        let head = inv.head().map(|h| h.name.clone());
        for n in inv.ordered() {
            let role = if Some(&n.name) == head.as_ref() {
                Role::Head
            } else {
                Role::Worker
            };
            let fabric = n
                .fabric
                .as_ref()
                .map(|f| {
                    f.interfaces
                        .iter()
                        .filter(|i| i.active)
                        .map(|i| format!("{} ({})", i.name, i.rdma_device))
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_else(|| "-".into());
            t.add_row(vec![
                n.name.to_string(),
                role.to_string(),
                n.addresses.join(", "),
                n.user.clone().unwrap_or_else(|| "(yours)".into()),
                n.port.to_string(),
                fabric,
            ]);
        }
        t.to_string()
    }
}
