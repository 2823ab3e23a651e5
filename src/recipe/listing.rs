//! `profiles --registry DIR`: every recipe of a registry clone as a row with what it runs and
//! whether this cluster (and this version) can run it, and those rows as a table. Pure.

use comfy_table::{Table, presets::UTF8_BORDERS_ONLY};
use serde::Serialize;

use super::loader::RegistryEntry;
use crate::profile::fit::Fit;

/// One recipe as the listing shows it (`--json` prints these).
#[derive(Serialize)]
pub struct RecipeRow<'a> {
    pub name: String,
    #[serde(flatten)]
    pub entry: &'a RegistryEntry,
    /// `None` when the node count is not known.
    pub fit: Option<Fit>,
}

/// The rows of `entries`, checked against a cluster of `nodes` nodes when known.
pub fn rows(entries: &[RegistryEntry], nodes: Option<usize>) -> Vec<RecipeRow<'_>> {
    entries
        .iter()
        .map(|e| RecipeRow {
            name: e.label(),
            entry: e,
            fit: e.fit(nodes),
        })
        .collect()
}

/// The table, with how to check the node count when it was not, and how to run one (`how`:
/// `--registry DIR` when registries were given, else nothing: the kept ones are read).
pub fn table(rows: &[RecipeRow<'_>], checked: bool, how: &str) -> String {
    let mut t = Table::new();
    t.load_style(UTF8_BORDERS_ONLY);
    t.set_header(vec!["recipe", "runtime", "model", "tp×pp", "nodes", "fits"]);
    for r in rows {
        let (engine, model, shape, nodes) = match &r.entry.launch {
            Some(l) => (
                l.engine.to_string(),
                l.model.clone(),
                format!("{}×{}", l.tp, l.pp),
                l.nodes.to_string(),
            ),
            None => ("-".into(), "-".into(), "-".into(), "-".into()),
        };
        let hidden = if r.entry.hidden { " (hidden)" } else { "" };
        t.add_row(vec![
            format!("{}{hidden}", r.name),
            engine,
            model,
            shape,
            nodes,
            r.fit.as_ref().map_or_else(|| "?".into(), Fit::label),
        ]);
    }
    let mut out = t.to_string();
    if !checked {
        out.push_str("\n(fits: ? — give --snapshot NAME=DIR per node, or a cluster file, to check the node count)");
    }
    out.push_str(&format!("\nrun one: spark-launch up @REGISTRY/NAME{how}"));
    out
}
