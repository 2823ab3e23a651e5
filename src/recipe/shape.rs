//! The job's shape from a recipe: tensor and pipeline parallel sizes as the engine line says
//! them (else `defaults.tensor_parallel`/`pipeline_parallel`, else 1), for an engine whose
//! expert groups add ranks its expert-parallel size too (the line's, else the key its flag
//! table gives it), and the nodes they fill: the GPUs the engine says one replica spans
//! (tp × pp for most) ÷ GPUs per node, which must come out whole and agree with the recipe's
//! `min_nodes`/`max_nodes`. For an engine whose recipes the runner sizes by their parallel size
//! alone (sparkrun's llama.cpp: `RecipeSpelling::sized_by_parallel`), a given size that fills
//! fewer nodes than `min_nodes` is planned on those and said, and the engine refuses the pairs
//! of sizes it cannot write (`ServingEngine::recipe_parallel`). Data parallelism is not
//! planned; a size above 1 is warned about. Pure.

use std::collections::BTreeMap;

use yaml_serde::Value;

use super::engine_line::LineFacts;
use super::error::{RecipeError, RecipeWarning};
use super::launch::NodeBounds;
use super::pyvalue::python_str;
use crate::workload::engines::{EngineKind, EngineOptions, spelling};
use crate::workload::limits;

/// tp, pp and the nodes they fill.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JobShape {
    pub tp: u32,
    pub pp: u32,
    pub nodes: u32,
}

/// The `defaults` keys [`shape`] reads for what the engine line does not say.
pub fn keys_read(facts: &LineFacts) -> Vec<String> {
    [
        (&facts.tp, "tensor_parallel"),
        (&facts.pp, "pipeline_parallel"),
        (&facts.dp, "data_parallel"),
    ]
    .into_iter()
    .filter(|(said, _)| said.is_none())
    .map(|(_, key)| key.to_string())
    .collect()
}

/// Reads the shape as tp × pp; errors name the field they come from.
pub fn shape(
    file: &str,
    facts: &LineFacts,
    config: &BTreeMap<String, Value>,
    gpus_per_node: u32,
    bounds: NodeBounds,
) -> Result<(JobShape, Vec<RecipeWarning>), Vec<RecipeError>> {
    shape_for(None, file, facts, config, gpus_per_node, bounds)
}

/// Reads the shape as `engine` spans it (`None`: tp × pp).
pub fn shape_for(
    engine: Option<EngineKind>,
    file: &str,
    facts: &LineFacts,
    config: &BTreeMap<String, Value>,
    gpus_per_node: u32,
    bounds: NodeBounds,
) -> Result<(JobShape, Vec<RecipeWarning>), Vec<RecipeError>> {
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    // Each size with the field it was read from (`None`: not given, so 1).
    let mut size = |from_line: &Option<String>, key: &str, what: &str, max: u32| {
        let (text, field) = match from_line {
            Some(t) => (t.clone(), "command".to_string()),
            None => match config.get(key).filter(|v| !v.is_null()) {
                Some(v) => (python_str(v), format!("defaults.{key}")),
                None => return (1, None),
            },
        };
        match text
            .trim()
            .parse::<u64>()
            .map_err(|_| format!("{what} {text:?} is not a whole number"))
            .and_then(|n| limits::count(what, n, u64::from(max)))
        {
            Ok(n) => (n, Some(field)),
            Err(e) => {
                errors.push(RecipeError::new(file, field, e));
                (1, None)
            }
        }
    };
    let (tp, tp_field) = size(
        &facts.tp,
        "tensor_parallel",
        "tensor parallel",
        limits::MAX_TP,
    );
    let (pp, pp_field) = size(
        &facts.pp,
        "pipeline_parallel",
        "pipeline parallel",
        limits::MAX_PP,
    );
    let (dp, _) = size(
        &facts.dp,
        "data_parallel",
        "data parallel",
        limits::MAX_NODES,
    );
    let ep_key = engine.and_then(spelling::expert_parallel_key);
    let ep = match ep_key {
        Some(key) => size(&facts.ep, key, "expert parallel", limits::MAX_TP).0,
        None => 1,
    };
    if dp > 1 {
        warnings.push(RecipeWarning::new(
            "data_parallel",
            format!(
                "{dp} replicas are not planned: spark-launch sizes the job as tp × pp = {} GPUs",
                u64::from(tp) * u64::from(pp)
            ),
        ));
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    // An engine that writes the two sizes into its line takes only the pairs it can say.
    if let Some(kind) = engine
        && let Err(p) = kind.engine().recipe_parallel(tp, pp, 1, &[])
    {
        let field = pp_field.clone().or(tp_field.clone()).unwrap_or_default();
        return Err(vec![RecipeError::new(file, field, p.what).fix(p.fix)]);
    }
    let world = match engine {
        Some(kind) => {
            let tuning = EngineOptions {
                expert_parallel: Some(ep),
                ..EngineOptions::default()
            };
            kind.engine()
                .world(tp, pp, gpus_per_node.max(1), &tuning)
                .map_err(|p| vec![RecipeError::new(file, "", p.what).fix(p.fix)])?
        }
        None => limits::world(tp, pp).map_err(|e| vec![RecipeError::new(file, "", e)])?,
    };
    let per_node = u64::from(gpus_per_node.max(1));
    if world > per_node && world % per_node != 0 {
        return Err(vec![
            RecipeError::new(
                file,
                "",
                format!(
                    "{} = {world} GPUs does not fill whole nodes of {per_node} GPUs",
                    said(tp, pp, ep)
                ),
            )
            .fix("set tensor_parallel so that tp × pp is a multiple of the GPUs per node"),
        ]);
    }
    let nodes = u32::try_from(world.div_ceil(per_node)).unwrap_or(u32::MAX);
    let too_few = nodes < bounds.min;
    let too_many = bounds.max.is_some_and(|m| nodes > m);
    // sparkrun sizes such an engine's job by the size the recipe gives and uses that many of
    // the hosts, whatever `min_nodes` says; with neither size given it takes every host, which
    // spark-launch does not guess, so the bounds hold there.
    let by_parallel = engine.is_some_and(|k| k.engine().recipe().sized_by_parallel)
        && (tp_field.is_some() || pp_field.is_some());
    if too_few && by_parallel && !too_many {
        warnings.push(too_few_nodes(tp, pp, nodes, bounds.min, per_node));
    } else if too_few || too_many {
        let range = match bounds.max {
            Some(m) if m == bounds.min => format!("exactly {m}"),
            Some(m) => format!("{} to {m}", bounds.min),
            None => format!("at least {}", bounds.min),
        };
        return Err(vec![
            RecipeError::new(
                file,
                if too_few { "min_nodes" } else { "max_nodes" },
                format!(
                    "{} fills {nodes} node{} but the recipe runs on {range} node{}",
                    said(tp, pp, ep),
                    if nodes == 1 { "" } else { "s" },
                    if bounds.max == Some(1) { "" } else { "s" }
                ),
            )
            .fix("set tensor_parallel to match (--set tensor_parallel=N)"),
        ]);
    }
    Ok((JobShape { tp, pp, nodes }, warnings))
}

/// The warning for a recipe whose size fills fewer nodes than its `min_nodes`, planned on
/// those as sparkrun plans it: the size that decided, and the `--set` that spreads it.
fn too_few_nodes(tp: u32, pp: u32, nodes: u32, min: u32, per_node: u64) -> RecipeWarning {
    let (key, size) = if pp > 1 {
        ("pipeline_parallel", pp)
    } else {
        ("tensor_parallel", tp)
    };
    let on = if nodes == 1 {
        "one node".to_string()
    } else {
        format!("{nodes} nodes")
    };
    let spread = u64::from(min) * per_node;
    RecipeWarning::new(
        "min_nodes",
        format!(
            "the recipe asks for at least {min} nodes, but {key} {size} sizes it to {on}, as sparkrun sizes it (it uses as many hosts as {key} says): --set {key}={spread} spreads it over {min} nodes with RPC"
        ),
    )
}

/// The shape as messages say it: `tp × pp = 2 × 1`, with the expert-parallel size where it
/// is above 1.
fn said(tp: u32, pp: u32, ep: u32) -> String {
    if ep > 1 {
        format!("tp × pp = {tp} × {pp} with expert parallel {ep}")
    } else {
        format!("tp × pp = {tp} × {pp}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> BTreeMap<String, Value> {
        yaml_serde::from_str(text).unwrap()
    }

    const ANY: NodeBounds = NodeBounds { min: 1, max: None };

    #[test]
    fn the_engine_line_wins_over_defaults() {
        let facts = LineFacts {
            tp: Some("2".into()),
            ..LineFacts::default()
        };
        let (s, _) = shape(
            "r",
            &facts,
            &config("{tensor_parallel: 4, pipeline_parallel: 2}"),
            1,
            ANY,
        )
        .unwrap();
        assert_eq!(
            s,
            JobShape {
                tp: 2,
                pp: 2,
                nodes: 4
            }
        );
    }

    #[test]
    fn nodes_are_tp_times_pp_over_gpus_per_node() {
        let facts = LineFacts::default();
        let (s, _) = shape("r", &facts, &config("{tensor_parallel: 8}"), 4, ANY).unwrap();
        assert_eq!(s.nodes, 2);
        let e = shape("r", &facts, &config("{tensor_parallel: 6}"), 4, ANY).unwrap_err();
        assert!(
            e[0].problem
                .what
                .contains("does not fill whole nodes of 4 GPUs"),
            "{}",
            e[0]
        );
    }

    #[test]
    fn a_shape_outside_min_and_max_nodes_is_refused() {
        let facts = LineFacts::default();
        let e = shape(
            "r",
            &facts,
            &config("{tensor_parallel: 1}"),
            1,
            NodeBounds { min: 2, max: None },
        )
        .unwrap_err();
        assert_eq!(
            e[0].to_string(),
            "r: min_nodes: tp × pp = 1 × 1 fills 1 node but the recipe runs on at least 2 nodes; set tensor_parallel to match (--set tensor_parallel=N)"
        );
        let e = shape(
            "r",
            &facts,
            &config("{tensor_parallel: 2}"),
            1,
            NodeBounds {
                min: 1,
                max: Some(1),
            },
        )
        .unwrap_err();
        assert_eq!(e[0].field, "max_nodes");
    }

    #[test]
    fn a_llama_cpp_recipe_is_sized_by_its_parallel_size_alone_and_says_so() {
        // The shape of dbotwinick's transitional qwen3.5-397b-gguf-q3km recipe: min_nodes 2,
        // tensor_parallel 1 (tests/fixtures/recipes/public).
        let facts = LineFacts::default();
        let two = NodeBounds { min: 2, max: None };
        let llama = Some(EngineKind::Llamacpp);
        let (s, w) =
            shape_for(llama, "r", &facts, &config("{tensor_parallel: 1}"), 1, two).unwrap();
        assert_eq!(s.nodes, 1);
        assert_eq!(
            w[0].to_string(),
            "min_nodes: the recipe asks for at least 2 nodes, but tensor_parallel 1 sizes it to one node, as sparkrun sizes it (it uses as many hosts as tensor_parallel says): --set tensor_parallel=2 spreads it over 2 nodes with RPC"
        );
        let (s, w) = shape_for(
            llama,
            "r",
            &facts,
            &config("{pipeline_parallel: 2}"),
            1,
            NodeBounds { min: 4, max: None },
        )
        .unwrap();
        assert_eq!(s.nodes, 2);
        assert!(
            w[0].message
                .contains("pipeline_parallel 2 sizes it to 2 nodes")
                && w[0].message.contains("--set pipeline_parallel=4"),
            "{}",
            w[0]
        );
        // Neither size given: sparkrun would take every host, which is not guessed here.
        let e = shape_for(llama, "r", &facts, &config("{}"), 1, two).unwrap_err();
        assert_eq!(e[0].field, "min_nodes");
        // max_nodes holds, as sparkrun holds it.
        let e = shape_for(
            llama,
            "r",
            &facts,
            &config("{tensor_parallel: 2}"),
            1,
            NodeBounds {
                min: 1,
                max: Some(1),
            },
        )
        .unwrap_err();
        assert_eq!(e[0].field, "max_nodes");
        // Other engines keep refusing the shape below min_nodes.
        let e = shape_for(
            Some(EngineKind::Vllm),
            "r",
            &facts,
            &config("{tensor_parallel: 1}"),
            1,
            two,
        )
        .unwrap_err();
        assert_eq!(e[0].field, "min_nodes");
    }

    #[test]
    fn a_llama_cpp_recipe_with_both_sizes_above_one_is_refused_where_pipeline_parallel_is_given() {
        let e = shape_for(
            Some(EngineKind::Llamacpp),
            "r",
            &LineFacts::default(),
            &config("{tensor_parallel: 2, pipeline_parallel: 2}"),
            1,
            ANY,
        )
        .unwrap_err();
        assert_eq!(e[0].field, "defaults.pipeline_parallel");
        assert!(
            e[0].problem
                .what
                .contains("tensor_parallel 2 and pipeline_parallel 2"),
            "{}",
            e[0]
        );
    }

    #[test]
    fn a_size_that_is_not_a_number_names_where_it_came_from() {
        let facts = LineFacts {
            tp: Some("{tp}".into()),
            ..LineFacts::default()
        };
        let e = shape("r", &facts, &config("{pipeline_parallel: zero}"), 1, ANY).unwrap_err();
        let fields: Vec<_> = e.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["command", "defaults.pipeline_parallel"]);
    }

    #[test]
    fn data_parallel_above_one_is_warned_about() {
        let facts = LineFacts {
            dp: Some("2".into()),
            ..LineFacts::default()
        };
        let (_, w) = shape("r", &facts, &config("{}"), 1, ANY).unwrap();
        assert_eq!(w[0].field, "data_parallel");
    }
}
