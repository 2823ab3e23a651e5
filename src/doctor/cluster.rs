//! Cluster consistency: the same image (by content digest, never by local ID) and a matching
//! architecture on every node, the NCCL its containers load (one release everywhere, 2.30.7 or
//! later on a switchless ring; judged by `libnccl::check`, as launch plans are), and the same
//! model weights everywhere; and whether that model fits the nodes' memory (its weights split
//! over every node, the KV cache of one sequence of its whole context, the reserve, within
//! each node's cap: `workload::memory`).
//!
//! Pure, on live observations. Images are compared by `RepoDigests` when the image has one;
//! an image that was never pushed to a registry has none, and then its ID (the digest of its
//! config) is what identifies the content — said so in the note.

use std::collections::BTreeMap;

use super::check::*;
use super::live::{ImageInfo, ImageState, ModelFile};
use super::{Check, Inputs, ModelRef};
use crate::node::NodeName;
use crate::workload::memory::{self, EngineFraction, EngineMemory, Fits, FractionOf, HOST_FLOOR};

const fn info(id: &'static str, title: &'static str) -> CheckInfo {
    CheckInfo {
        id,
        category: Category::Cluster,
        needs: CheckNeeds::Live,
        title,
    }
}

pub const CHECKS: &[Check] = &[
    Check {
        info: info("cluster.image-digest", "same image digest everywhere"),
        run: image_digest,
    },
    Check {
        info: info("cluster.image-arch", "image matches each node's arch"),
        run: image_arch,
    },
    Check {
        info: info(
            "cluster.image-nccl",
            "one NCCL everywhere, ≥ 2.30.7 on a ring",
        ),
        run: image_nccl,
    },
    Check {
        info: info("cluster.model", "same model weights everywhere"),
        run: model,
    },
    Check {
        info: CheckInfo {
            id: "cluster.model-fit",
            category: Category::Cluster,
            needs: CheckNeeds::Facts,
            title: "the model fits the nodes' memory",
        },
        run: model_fit,
    },
];

/// The image on every node that has it, skipping (with the reason) those that cannot tell.
fn images<'a>(
    inputs: &'a Inputs,
    e: &mut Evaluation,
) -> Vec<(&'a NodeName, Option<&'a ImageInfo>)> {
    let mut out = Vec::new();
    for (n, obs) in inputs.observed_nodes(e) {
        match &obs.image {
            Some(ImageState::Present(i)) => out.push((&n.name, Some(i))),
            Some(ImageState::Absent) => out.push((&n.name, None)),
            Some(ImageState::Error { error }) => {
                e.skip(&n.name, format!("docker image inspect failed: {error}"))
            }
            None => e.skip(&n.name, "Docker is not usable here (see host.docker)"),
        }
    }
    out
}

fn no_image(inputs: &Inputs) -> Option<Evaluation> {
    if inputs.options.image.is_some() {
        return None;
    }
    let mut e = Evaluation::default();
    for n in inputs.nodes {
        e.skip(&n.name, "pass --image IMAGE to compare it across nodes");
    }
    Some(e)
}

/// What identifies the image's content: its registry digest (`sha256:...` of the manifest),
/// else its ID.
fn content_id(i: &ImageInfo) -> (String, &'static str) {
    match i.repo_digests.first() {
        Some(d) => (
            d.rsplit_once('@').map(|(_, h)| h).unwrap_or(d).to_string(),
            "digest",
        ),
        None => (i.id.clone(), "ID (no registry digest)"),
    }
}

fn short(h: &str) -> &str {
    let h = h.strip_prefix("sha256:").unwrap_or(h);
    &h[..h.len().min(12)]
}

fn image_digest(inputs: &Inputs) -> Evaluation {
    if let Some(e) = no_image(inputs) {
        return e;
    }
    let image = inputs.options.image.clone().unwrap_or_default();
    let mut e = Evaluation::default();
    let seen = images(inputs, &mut e);
    // The reference: the head's copy, else the first node that has one.
    let reference = seen.iter().find_map(|(n, i)| i.map(|i| (*n, i)));
    for (node, img) in &seen {
        match img {
            None => e.push(Finding::fail(
                node,
                format!("{image} is not on this node"),
                "a job starts on every node at once; a node without the image pulls it from a registry it may not reach, or fails",
                Fix::run(
                    "copy it from the head over the fast link",
                    [format!("spark-launch image push {image} --to {node}")],
                ),
            )),
            Some(i) => {
                let (mine, kind) = content_id(i);
                e.note(node, format!("{kind} {}", short(&mine)));
                let Some((ref_node, r)) = reference else { continue };
                let (theirs, _) = content_id(r);
                // Different tags of one multi-arch image have different per-arch IDs but the
                // same manifest-list digest; only compare digests with digests.
                let comparable = i.repo_digests.is_empty() == r.repo_digests.is_empty();
                if comparable && mine != theirs && i.architecture == r.architecture {
                    e.push(Finding::fail(
                        node,
                        format!(
                            "{image} here is {} but on {ref_node} it is {}",
                            short(&mine),
                            short(&theirs)
                        ),
                        "the same tag with different content means different code on different ranks: mismatched NCCL or vLLM versions hang or crash mid-run",
                        Fix::run(
                            format!("push {ref_node}'s copy to this node"),
                            [format!("spark-launch image push {image} --to {node}")],
                        ),
                    ));
                }
            }
        }
    }
    e
}

/// `cluster.image-nccl`: what a container of `--image` loads for `libnccl.so.2` on every node
/// (its loader's order: preload, the RPATH of torch's `libtorch_cuda.so` when the image's
/// Python has PyTorch's wheels, `LD_LIBRARY_PATH`, `ld.so.cache`, system folders; the version
/// string inside the library), judged as a launch judges it. A node where it could not be read
/// yet (the image is not there) gets a note, never a failure.
fn image_nccl(inputs: &Inputs) -> Evaluation {
    use crate::libnccl::{ImageRead, LibraryOrigin, Loads, NodeNccl, Rule, judge};
    if let Some(e) = no_image(inputs) {
        return e;
    }
    let image = inputs.options.image.clone().unwrap_or_default();
    let mut e = Evaluation::default();
    let mut nodes = Vec::new();
    for (n, obs) in inputs.observed_nodes(&mut e) {
        let loads = match &obs.nccl {
            None => {
                e.skip(
                    &n.name,
                    "not read: Docker is not usable here (see host.docker)",
                );
                continue;
            }
            Some(ImageRead::NotOnNode) => Loads::NotYetKnown {
                why: format!("{image} is not on this node (see cluster.image-digest)"),
            },
            Some(ImageRead::Failed { error }) => Loads::NotYetKnown {
                why: format!("reading it failed: {error}"),
            },
            Some(ImageRead::Read { resolution, .. }) => {
                Loads::from_resolution(resolution.clone(), LibraryOrigin::Image)
            }
        };
        e.note(&n.name, loads.to_string());
        nodes.push(NodeNccl {
            node: n.name.clone(),
            image: image.clone(),
            loads,
        });
    }
    let ring = matches!(
        inputs.derived,
        Ok(c) if c.topology == crate::derive::topology::Topology::Ring
    );
    let rule = Rule {
        ring,
        serving: true,
        build_image: inputs
            .head()
            .and_then(|h| h.facts.arch.as_deref())
            .and_then(crate::workload::nccl_build::CpuArch::from_uname)
            .map(crate::workload::nccl_build::default_image),
        ..Rule::default()
    };
    let verdict = judge(&nodes, &rule);
    for p in &verdict.problems {
        for node in &p.nodes {
            e.push(Finding::fail(
                node,
                p.problem.what.clone(),
                "ranks must load one NCCL release, and a switchless ring (one subnet per cable) needs NCCL_IB_SUBNET_AWARE_ROUTING: without it the job hangs at its first collective",
                Fix::text(p.problem.fix.clone()),
            ));
        }
    }
    // A node's own notes (torch loads a copy the loader's own search would not name; no
    // libnccl.so.2 at all, and what was looked at).
    for text in &verdict.notes {
        if let Some(x) = nodes
            .iter()
            .find(|x| text.starts_with(&format!("{}: ", x.node)))
        {
            let own = text.trim_start_matches(&format!("{}: ", x.node));
            e.note(&x.node, own.to_string());
        }
    }
    for w in &verdict.warnings {
        let node = nodes
            .iter()
            .find(|x| w.starts_with(&format!("{}: ", x.node)))
            .map(|x| &x.node);
        if let Some(node) = node {
            e.push(Finding::warn(
                node,
                w.clone(),
                "spark-launch cannot tell which NCCL this is",
                Fix::text(
                    "check the image's NCCL by hand (`NCCL_DEBUG=INFO` prints `NCCL version` at init), or bring a known one with --nccl-from",
                ),
            ));
        }
    }
    e
}

/// `uname -m` names versus Docker's architecture names.
fn docker_arch(uname: &str) -> &str {
    match uname {
        "aarch64" | "arm64" => "arm64",
        "x86_64" | "amd64" => "amd64",
        other => other,
    }
}

fn image_arch(inputs: &Inputs) -> Evaluation {
    if let Some(e) = no_image(inputs) {
        return e;
    }
    let image = inputs.options.image.clone().unwrap_or_default();
    let mut e = Evaluation::default();
    let arches: std::collections::BTreeSet<&str> = inputs
        .nodes
        .iter()
        .filter_map(|n| n.facts.arch.as_deref())
        .map(docker_arch)
        .collect();
    for (node, img) in images(inputs, &mut e) {
        let Some(img) = img else {
            e.skip(
                node,
                format!("{image} is not on this node (see cluster.image-digest)"),
            );
            continue;
        };
        let facts = inputs
            .nodes
            .iter()
            .find(|n| &n.name == node)
            .map(|n| &n.facts);
        let Some(want) = facts.and_then(|f| f.arch.as_deref()).map(docker_arch) else {
            e.skip(node, "the node's architecture is unknown");
            continue;
        };
        let have = img.architecture.as_deref().unwrap_or("?");
        if have == want {
            e.note(node, want.to_string());
            continue;
        }
        e.push(Finding::fail(
            node,
            format!("{image} here is built for {have}, but this node is {want}"),
            "the container exits at once with `exec format error` (or runs under emulation, far too slow for inference)",
            Fix::text(if arches.len() > 1 {
                format!(
                    "this cluster mixes {}: use a multi-arch image (NGC images are) and pull or push the {want} variant here",
                    arches.iter().copied().collect::<Vec<_>>().join(" and ")
                )
            } else {
                format!("build or pull the {want} variant of {image} on this node")
            }),
        ));
    }
    e
}

fn model(inputs: &Inputs) -> Evaluation {
    let mut e = Evaluation::default();
    let Some(model) = &inputs.options.model else {
        for n in inputs.nodes {
            e.skip(
                &n.name,
                "pass --model MODEL to compare its weights across nodes",
            );
        }
        return e;
    };
    let pull = match model {
        ModelRef::Hf { .. } => format!("spark-launch model pull {model}"),
        ModelRef::Path(p) => format!("copy {p} from the head (rsync -a)"),
    };
    let mut seen: Vec<(&NodeName, BTreeMap<&str, &ModelFile>)> = Vec::new();
    for (n, obs) in inputs.observed_nodes(&mut e) {
        let Some(m) = &obs.model else {
            e.skip(&n.name, "the model was not looked for");
            continue;
        };
        let Some(files) = &m.files else {
            e.push(Finding::fail(
                &n.name,
                if m.dir.is_empty() {
                    format!("{model} is not in this node's Hugging Face cache")
                } else {
                    format!("{model} is missing here ({} does not exist)", m.dir)
                },
                "a worker without the weights fails at load time (for a gated model, with an authorisation error that hides the real cause)",
                Fix::run("download it once and copy it to every node over the fast link", [pull.clone()]),
            ));
            continue;
        };
        if !m.incomplete.is_empty() {
            e.push(Finding::fail(
                &n.name,
                format!(
                    "{model} is still downloading here ({} incomplete blob{})",
                    m.incomplete.len(),
                    if m.incomplete.len() == 1 { "" } else { "s" }
                ),
                "a partial download loads garbage or fails at load time",
                Fix::run("finish the download", [pull.clone()]),
            ));
        }
        let total: u64 = files.iter().filter_map(|f| f.size).sum();
        e.note(
            &n.name,
            format!(
                "{} files, {:.1} GiB{}",
                files.len(),
                total as f64 / (1u64 << 30) as f64,
                m.commit
                    .as_deref()
                    .map(|c| format!(", revision {}", &c[..c.len().min(12)]))
                    .unwrap_or_default()
            ),
        );
        seen.push((
            &n.name,
            files.iter().map(|f| (f.path.as_str(), f)).collect(),
        ));
    }
    let Some((ref_node, reference)) = seen.first().map(|(n, f)| (*n, f.clone())) else {
        return e;
    };
    for (node, files) in seen.iter().skip(1) {
        let missing: Vec<&str> = reference
            .keys()
            .filter(|p| !files.contains_key(*p))
            .copied()
            .collect();
        let differ: Vec<&str> = reference
            .iter()
            .filter_map(|(p, r)| {
                let f = files.get(p)?;
                let same_blob = match (&r.blob, &f.blob) {
                    (Some(a), Some(b)) => a == b,
                    _ => true,
                };
                (!same_blob || r.size != f.size).then_some(*p)
            })
            .collect();
        let extra = files.keys().filter(|p| !reference.contains_key(*p)).count();
        if missing.is_empty() && differ.is_empty() {
            continue;
        }
        let mut parts = Vec::new();
        if !missing.is_empty() {
            parts.push(format!("missing {}", sample(&missing)));
        }
        if !differ.is_empty() {
            parts.push(format!("different content in {}", sample(&differ)));
        }
        if extra > 0 {
            parts.push(format!("{extra} files {ref_node} lacks"));
        }
        e.push(Finding::fail(
            node,
            format!("{model} differs from {ref_node}'s copy: {}", parts.join("; ")),
            "ranks that load different weights produce garbage or fail with shape errors deep inside the engine",
            Fix::run(format!("copy {ref_node}'s weights to this node"), [pull.clone()]),
        ));
    }
    e
}

fn sample(paths: &[&str]) -> String {
    let shown: Vec<&str> = paths.iter().take(3).copied().collect();
    let more = paths.len().saturating_sub(shown.len());
    if more > 0 {
        format!("{} and {more} more", shown.join(", "))
    } else {
        shown.join(", ")
    }
}

/// `cluster.model-fit`: the memory plan of `--model` split over every node given (tensor
/// parallel over all of them), for one sequence of its whole context, with whatever engine
/// takes everything under the cap.
fn model_fit(inputs: &Inputs) -> Evaluation {
    let mut e = Evaluation::default();
    let (Some(model), Some(footprint)) = (&inputs.options.model, &inputs.options.footprint) else {
        for n in inputs.nodes {
            e.skip(
                &n.name,
                "pass --model MODEL to check whether it fits these nodes' memory",
            );
        }
        return e;
    };
    let gpus = inputs
        .nodes
        .first()
        .map(|n| n.facts.host.gpus.len().max(1) as u32)
        .unwrap_or(1);
    let tp = (inputs.nodes.len() as u32).saturating_mul(gpus).max(1);
    let engine = EngineMemory {
        fraction: EngineFraction::LeavesReserve(HOST_FLOOR),
        fraction_of: FractionOf::Total,
        fraction_flag: "the engine's memory fraction",
        context: None,
        context_flag: "the engine's context-length flag",
        sequences: None,
        sequences_flag: "the engine's sequences at once",
        kv_dtype: None,
    };
    let planned = memory::plan(&memory::MemoryInput {
        model: &model.to_string(),
        footprint,
        engine: &engine,
        engine_title: "an engine",
        tp,
        pp: 1,
        gpus_per_node: gpus,
        nodes: inputs.nodes,
        ask: &memory::MemoryAsk::default(),
    });
    let g = |v: Option<f64>| v.map_or_else(|| "?".to_string(), |v| format!("{v:.1}"));
    for n in inputs.nodes {
        let Some(m) = planned.plan.nodes.get(&n.name) else {
            continue;
        };
        let figures = format!(
            "{model} with tp {tp}: {} GiB per node (weights {} + KV cache {} for {} tokens + reserve {:.1}) of {} GiB, cap {} GiB",
            g(m.need_gib),
            g(m.weights_gib),
            g(m.kv_cache_gib),
            planned
                .plan
                .context
                .map_or_else(|| "?".into(), |c| c.to_string()),
            m.reserve_gib,
            g(m.have_gib),
            g(m.limit_gib)
        );
        match m.fits {
            Fits::Yes => e.note(&n.name, format!("fits: {figures}")),
            Fits::No => e.push(Finding::fail(
                &n.name,
                format!("does not fit: {figures}"),
                "on unified memory an engine that takes more than the node has hangs the whole host instead of failing with out-of-memory; spark-launch refuses such a launch",
                Fix::text(
                    planned
                        .problems
                        .first()
                        .map(|p| p.fix.clone())
                        .unwrap_or_else(|| "use more nodes or a quantized variant".into()),
                ),
            )),
            Fits::NotKnown => e.skip(
                &n.name,
                format!(
                    "not known: {}",
                    if planned.plan.not_known.is_empty() {
                        "the node's memory".to_string()
                    } else {
                        planned.plan.not_known.join("; ")
                    }
                ),
            ),
        }
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::Options;
    use crate::doctor::live::{ModelState, Observations};
    use crate::doctor::testkit::*;

    #[test]
    fn model_fit_says_whether_the_model_fits_every_node_with_its_whole_context() {
        use crate::model::footprint::{Footprint, Known, KvLayout, WeightsSize};
        let kv = KvLayout::parse(include_str!(
            "../../tests/fixtures/models/openai--gpt-oss-120b/config.json"
        ))
        .unwrap();
        let opts = |weights: Known<WeightsSize>| Options {
            model: Some("openai/gpt-oss-120b".parse().unwrap()),
            footprint: Some(Footprint {
                kv: Known::Known(kv.clone()),
                weights,
            }),
            ..Options::default()
        };
        let size = |bytes| {
            Known::Known(WeightsSize {
                bytes,
                from: "test".into(),
            })
        };
        let check = crate::doctor::checks()
            .into_iter()
            .find(|c| c.info.id == "cluster.model-fit")
            .unwrap();
        let e = eval(&check, &pair(), &opts(size(65_248_815_744)), None);
        assert!(e.findings.is_empty(), "{:?}", e.findings);
        assert!(
            e.notes[0]
                .text
                .starts_with("fits: openai/gpt-oss-120b with tp 2: 36.6 GiB per node"),
            "{}",
            e.notes[0].text
        );
        let e = eval(&check, &pair(), &opts(size(600_000_000_000)), None);
        assert_eq!(
            verdicts(&e),
            vec![
                ("spark-a".into(), Severity::Fail),
                ("spark-b".into(), Severity::Fail)
            ]
        );
        assert!(
            e.findings[0].problem.what.starts_with("does not fit"),
            "{:?}",
            e.findings[0]
        );
        let e = eval(
            &check,
            &pair(),
            &opts(Known::NotKnown("offline".into())),
            None,
        );
        assert!(e.findings.is_empty());
        assert!(e.skipped[0].1.contains("offline"), "{:?}", e.skipped);
        let e = eval(&check, &pair(), &Options::default(), None);
        assert!(e.skipped[0].1.contains("pass --model"), "{:?}", e.skipped);
    }

    fn opts() -> Options {
        Options {
            image: Some("nvcr.io/nvidia/vllm:25.11-py3".into()),
            model: Some("Qwen/Qwen3-8B".parse().unwrap()),
            ..Options::default()
        }
    }

    fn img(digest: &str, arch: &str) -> Option<ImageState> {
        Some(ImageState::Present(ImageInfo {
            id: format!("sha256:id{digest}"),
            repo_digests: vec![format!("nvcr.io/nvidia/vllm@sha256:{digest}")],
            architecture: Some(arch.into()),
            ..Default::default()
        }))
    }

    #[test]
    fn image_digest_passes_when_equal_and_fails_a_different_or_missing_copy() {
        let ok = live_pair(|_| Observations {
            image: img("aaaa", "arm64"),
            ..Default::default()
        });
        assert!(
            live_eval("cluster.image-digest", &pair(), &opts(), &ok)
                .findings
                .is_empty()
        );
        let bad = live_pair(|n| Observations {
            image: if n == "spark-a" {
                img("aaaa", "arm64")
            } else {
                img("bbbb", "arm64")
            },
            ..Default::default()
        });
        let e = live_eval("cluster.image-digest", &pair(), &opts(), &bad);
        assert_eq!(verdicts(&e), vec![("spark-b".into(), Severity::Fail)]);
        assert_eq!(
            e.findings[0].problem.what,
            "nvcr.io/nvidia/vllm:25.11-py3 here is bbbb but on spark-a it is aaaa"
        );
        let absent = live_pair(|n| Observations {
            image: if n == "spark-a" {
                img("aaaa", "arm64")
            } else {
                Some(ImageState::Absent)
            },
            ..Default::default()
        });
        let e = live_eval("cluster.image-digest", &pair(), &opts(), &absent);
        assert_eq!(
            e.findings[0].problem.fix.commands,
            vec!["spark-launch image push nvcr.io/nvidia/vllm:25.11-py3 --to spark-b"]
        );
    }

    fn nccl(v: &str) -> Option<crate::libnccl::ImageRead> {
        use crate::libnccl::loader::{Found, Machine, Resolution, Via};
        Some(crate::libnccl::ImageRead::Read {
            id: "sha256:id".into(),
            machine: Some(Machine::Arm64),
            ld_library_path: None,
            resolution: Resolution {
                loads: Some(Found {
                    path: "/usr/lib/aarch64-linux-gnu/libnccl.so.2".into(),
                    file: None,
                    via: Via::LdSoCache,
                    by: None,
                    machine: Machine::Arm64,
                    version: crate::libnccl::version::parse_build_string(v),
                }),
                ..Resolution::default()
            },
            ld_preload: None,
        })
    }

    #[test]
    fn image_nccl_fails_a_node_with_another_release_and_notes_one_not_read_yet() {
        let same = live_pair(|_| Observations {
            nccl: nccl("2.28.9+cuda12.9"),
            ..Default::default()
        });
        let e = live_eval("cluster.image-nccl", &pair(), &opts(), &same);
        assert!(e.findings.is_empty(), "{e:?}");
        assert_eq!(
            e.notes[0].text,
            "NCCL 2.28.9+cuda12.9 from /usr/lib/aarch64-linux-gnu/libnccl.so.2 (ld.so.cache)"
        );
        let mixed = live_pair(|n| Observations {
            nccl: if n == "spark-a" {
                nccl("2.30.7+cuda13.3")
            } else {
                nccl("2.28.9+cuda12.9")
            },
            ..Default::default()
        });
        let e = live_eval("cluster.image-nccl", &pair(), &opts(), &mixed);
        assert_eq!(verdicts(&e), vec![("spark-b".into(), Severity::Fail)]);
        assert!(
            e.findings[0]
                .problem
                .what
                .contains("different NCCL releases")
        );
        let missing = live_pair(|n| Observations {
            nccl: if n == "spark-a" {
                nccl("2.30.7+cuda13.3")
            } else {
                Some(crate::libnccl::ImageRead::NotOnNode)
            },
            ..Default::default()
        });
        let e = live_eval("cluster.image-nccl", &pair(), &opts(), &missing);
        assert!(e.findings.is_empty(), "{e:?}");
        assert!(
            e.notes[1].text.starts_with("not yet known"),
            "{:?}",
            e.notes
        );
    }

    #[test]
    fn image_nccl_names_torchs_own_copy_and_what_the_loaders_search_alone_finds() {
        use crate::libnccl::loader::{Found, Machine, Resolution, Via};
        let sp = "/usr/local/lib/python3.12/dist-packages";
        let torch = || {
            Some(crate::libnccl::ImageRead::Read {
                id: "sha256:id".into(),
                machine: Some(Machine::Arm64),
                ld_library_path: None,
                resolution: Resolution {
                    loads: Some(Found {
                        path: format!("{sp}/nvidia/nccl/lib/libnccl.so.2"),
                        file: None,
                        via: Via::Rpath,
                        by: Some(format!("{sp}/torch/lib/libtorch_cuda.so")),
                        machine: Machine::Arm64,
                        version: crate::libnccl::version::parse_build_string("2.28.9+cuda13.0"),
                    }),
                    otherwise: Some(Box::new(Found {
                        path: "/lib/aarch64-linux-gnu/libnccl.so.2".into(),
                        file: None,
                        via: Via::LdSoCache,
                        by: None,
                        machine: Machine::Arm64,
                        version: crate::libnccl::version::parse_build_string("2.28.3+cuda13.0"),
                    })),
                    ..Resolution::default()
                },
                ld_preload: None,
            })
        };
        let obs = live_pair(|_| Observations {
            nccl: torch(),
            ..Default::default()
        });
        let e = live_eval("cluster.image-nccl", &pair(), &opts(), &obs);
        assert!(e.findings.is_empty(), "{e:?}");
        let a: Vec<&str> = e
            .notes
            .iter()
            .filter(|n| n.node.as_str() == "spark-a")
            .map(|n| n.text.as_str())
            .collect();
        assert_eq!(
            a,
            vec![
                format!(
                    "NCCL 2.28.9+cuda13.0 from {sp}/nvidia/nccl/lib/libnccl.so.2 (RPATH of {sp}/torch/lib/libtorch_cuda.so)"
                ),
                format!(
                    "the loader's own search finds /lib/aarch64-linux-gnu/libnccl.so.2 (NCCL 2.28.3+cuda13.0, ld.so.cache), but {sp}/torch/lib/libtorch_cuda.so loads its own through its RPATH: that is the NCCL the engine runs"
                ),
            ]
        );
    }

    #[test]
    fn image_arch_fails_an_amd64_image_on_a_spark() {
        let ok = live_pair(|_| Observations {
            image: img("aaaa", "arm64"),
            ..Default::default()
        });
        assert!(
            live_eval("cluster.image-arch", &pair(), &opts(), &ok)
                .findings
                .is_empty()
        );
        let bad = live_pair(|n| Observations {
            image: img("aaaa", if n == "spark-a" { "arm64" } else { "amd64" }),
            ..Default::default()
        });
        let e = live_eval("cluster.image-arch", &pair(), &opts(), &bad);
        assert_eq!(verdicts(&e), vec![("spark-b".into(), Severity::Fail)]);
        assert_eq!(
            e.findings[0].problem.what,
            "nvcr.io/nvidia/vllm:25.11-py3 here is built for amd64, but this node is arm64"
        );
    }

    fn files(list: &[(&str, &str, u64)]) -> Option<Vec<ModelFile>> {
        Some(
            list.iter()
                .map(|(p, b, s)| ModelFile {
                    path: p.to_string(),
                    blob: Some(b.to_string()),
                    size: Some(*s),
                })
                .collect(),
        )
    }

    #[test]
    fn model_passes_identical_copies_and_fails_a_missing_file_or_blob() {
        let full = [
            ("config.json", "c1", 700),
            ("model.safetensors", "w1", 16_000_000_000),
        ];
        let ok = live_pair(|_| Observations {
            model: Some(ModelState {
                dir: "/h/snapshots/abc".into(),
                commit: Some("abc".into()),
                files: files(&full),
                incomplete: vec![],
                free_kib: None,
            }),
            ..Default::default()
        });
        assert!(
            live_eval("cluster.model", &pair(), &opts(), &ok)
                .findings
                .is_empty()
        );
        let bad = live_pair(|n| Observations {
            model: Some(ModelState {
                dir: "/h/snapshots/abc".into(),
                commit: Some("abc".into()),
                files: if n == "spark-a" {
                    files(&full)
                } else {
                    files(&[("model.safetensors", "w2", 16_000_000_000)])
                },
                incomplete: vec![],
                free_kib: None,
            }),
            ..Default::default()
        });
        let e = live_eval("cluster.model", &pair(), &opts(), &bad);
        assert_eq!(verdicts(&e), vec![("spark-b".into(), Severity::Fail)]);
        assert_eq!(
            e.findings[0].problem.what,
            "Qwen/Qwen3-8B differs from spark-a's copy: missing config.json; different content in model.safetensors"
        );
        let missing = live_pair(|n| Observations {
            model: Some(ModelState {
                dir: String::new(),
                commit: None,
                files: if n == "spark-a" { files(&full) } else { None },
                incomplete: vec![],
                free_kib: None,
            }),
            ..Default::default()
        });
        let e = live_eval("cluster.model", &pair(), &opts(), &missing);
        assert_eq!(
            e.findings[0].problem.what,
            "Qwen/Qwen3-8B is not in this node's Hugging Face cache"
        );
        assert_eq!(
            e.findings[0].problem.fix.commands,
            vec!["spark-launch model pull Qwen/Qwen3-8B"]
        );
    }
}
