//! `profiles`: every launch profile (bundled and the user's) as a row with whether a cluster
//! can run it (its node count, and its memory plan where its model's files were read), and
//! those rows as the table the command prints. Pure.

use std::path::Path;

use comfy_table::{Table, presets::UTF8_BORDERS_ONLY};
use serde::Serialize;

use std::collections::BTreeMap;

use super::fit::{Fit, fit};
use super::{Loaded, ProfileKind, ProfileOrigin};
use crate::derive::NodeInput;
use crate::model::ModelSource;
use crate::model::footprint::Footprint;

/// One profile as `profiles` lists it (`--json` prints these).
#[derive(Serialize)]
pub struct ProfileRow<'a> {
    pub name: &'a str,
    pub engine: ProfileKind,
    pub model: Option<ModelSource>,
    pub tp: u32,
    pub pp: u32,
    pub nodes: u32,
    pub memory_gib: Option<f64>,
    pub description: &'a str,
    pub origin: &'a ProfileOrigin,
    pub file: &'a str,
    /// Whether the cluster fits it; `None` when no nodes were given to check.
    pub fit: Option<Fit>,
}

/// The rows of `all`, each checked against `cluster` when its nodes are known, with the
/// footprints of the models that could be read here (by the model as it prints).
pub fn rows<'a>(
    all: &'a [Loaded],
    cluster: Option<&[NodeInput]>,
    footprints: &BTreeMap<String, Footprint>,
) -> Vec<ProfileRow<'a>> {
    all.iter()
        .map(|l| ProfileRow {
            name: &l.profile.name,
            engine: l.profile.engine,
            model: l.profile.model_source(),
            tp: l.profile.tp,
            pp: l.profile.pp,
            nodes: l.profile.nodes,
            memory_gib: l.profile.memory_gib,
            description: &l.profile.description,
            origin: &l.origin,
            file: &l.file,
            fit: cluster.map(|c| {
                let model = l.profile.model_source().map(|m| m.to_string());
                fit(
                    &l.profile,
                    c,
                    model.as_ref().and_then(|m| footprints.get(m)),
                )
            }),
        })
        .collect()
}

/// The table, with a line on how to check fit when nothing was checked and where the user's
/// own profiles live (`dir`).
pub fn table(rows: &[ProfileRow<'_>], checked: bool, dir: &Path) -> String {
    let mut t = Table::new();
    t.load_style(UTF8_BORDERS_ONLY);
    t.set_header(vec![
        "profile",
        "engine",
        "model",
        "tp×pp",
        "nodes",
        "memory/node",
        "fits",
        "description",
    ]);
    for r in rows {
        let yours = if *r.origin == ProfileOrigin::User {
            " (yours)"
        } else {
            ""
        };
        let shape = if r.engine.serving().is_none() {
            "-".into()
        } else {
            format!("{}×{}", r.tp, r.pp)
        };
        t.add_row(vec![
            format!("{}{yours}", r.name),
            r.engine.to_string(),
            r.model
                .as_ref()
                .map_or_else(|| "-".into(), |m| m.to_string()),
            shape,
            r.nodes.to_string(),
            r.memory_gib
                .map_or_else(|| "-".into(), |m| format!("{m:.0} GiB")),
            r.fit.as_ref().map_or_else(|| "?".into(), Fit::label),
            r.description.to_string(),
        ]);
    }
    let mut out = t.to_string();
    if !checked {
        out.push_str(
            "\n(fits: ? — give --snapshot NAME=DIR per node, or a cluster file, to check node count and memory)",
        );
    }
    out.push_str(&format!(
        "\nyour profiles: {} (run one: spark-launch up NAME)",
        dir.display()
    ));
    out
}
