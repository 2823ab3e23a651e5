//! The runtime cache: a folder on every serving node where the engine and the libraries it
//! loads keep what they compile at start (vLLM's and TorchInductor's compiled graphs,
//! Triton's kernels, FlashInfer's and SGLang's JIT builds). Their defaults are under the
//! container's home or `/tmp`, which go with the container; this folder is the node's,
//! mounted read-write at one path in every rank ([`CONTAINER_DIR`]), so that a supervised
//! restart, or the next launch of the same model by the same engine and image, finds what the
//! first start compiled instead of compiling it again. Host processes (`--runtime host`) are
//! pointed at the node's folder itself.
//!
//! Where: `ROOT/ENGINE/MODEL/IMAGE` on each node ([`folder`]), ROOT being
//! `~/.cache/spark-launch/runtime` of the user spark-launch connects as (a live launch
//! resolves `~` on each node before planning). Each engine names its variables
//! (`ServingEngine::cache_vars`); each is set in every rank to its folder under the cache,
//! unless the user (`--env`) or the recipe sets it. A recipe's `{launch.runtime_cache_dir}` is
//! the folder as the rank sees it ([`RuntimeCache::seen_on`]). The plan creates the folder
//! before its start, as the user spark-launch connects as; nothing removes it (`stop` leaves
//! it), and `status` shows its size per node, found through the containers' label
//! (`plan::spec::LABEL_RUNTIME_CACHE`).
//!
//! Pure: the options in, the plan's part out.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::ModelSource;
use crate::node::NodeName;
use crate::plan::ContainerSpec;
use crate::plan::spec::{LABEL_RUNTIME_CACHE, Mount, MountKind};
use crate::plan::{RuntimeKind, Step};
use crate::workload::engines::ServingEngine;
use crate::workload::serve::ServeOptions;

/// Where every rank's container sees the runtime cache: a cache of the system's, as the
/// filesystem layout puts application caches, outside any home (a container's user and home
/// differ between images).
pub const CONTAINER_DIR: &str = "/var/cache/spark-launch";

/// Where each node keeps its runtime caches, under the home of the user spark-launch connects
/// as there.
const UNDER_HOME: &str = ".cache/spark-launch/runtime";

/// The folder under which a node whose home is `home` keeps its runtime caches (`~`: the home
/// as the node resolves it).
pub fn root_under(home: &str) -> String {
    format!("{}/{UNDER_HOME}", home.trim_end_matches('/'))
}

/// The most characters of a model's or image's name kept readable in a folder name; a hash of
/// the whole name follows, so that two names never share a folder.
const READABLE: usize = 48;

/// One serving job's runtime cache.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimeCache {
    /// Where every rank's container mounts it; absent for host processes, which use their
    /// node's folder itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mount: Option<String>,
    /// The folder on each serving node (created before the start when missing; kept).
    pub folders: BTreeMap<NodeName, String>,
    /// The engine's cache variables, each with the folder under the cache it names (empty:
    /// the cache itself); set in every rank unless the user or the recipe sets it.
    pub variables: BTreeMap<String, String>,
}

impl RuntimeCache {
    /// The runtime cache of `engine` serving `opts.model` from `opts.image` on `nodes`.
    pub fn plan(engine: &dyn ServingEngine, opts: &ServeOptions, nodes: &[NodeName]) -> Self {
        let folders = nodes
            .iter()
            .map(|n| {
                let root = opts.paths_of(n).runtime_cache;
                (
                    n.clone(),
                    folder(&root, engine.name(), &opts.model, &opts.image),
                )
            })
            .collect();
        RuntimeCache {
            mount: (opts.runtime == RuntimeKind::Docker).then(|| CONTAINER_DIR.to_string()),
            folders,
            variables: engine
                .cache_vars()
                .iter()
                .map(|c| (c.var.to_string(), c.sub.to_string()))
                .collect(),
        }
    }

    /// The folder as `node`'s rank sees it: the mount point in its container, or the node's
    /// folder itself for a host process.
    pub fn seen_on(&self, node: &NodeName) -> Option<String> {
        self.mount
            .clone()
            .or_else(|| self.folders.get(node).cloned())
    }

    /// Puts the cache into `node`'s container: the mount, each variable the environment does
    /// not set already (the user's `--env` and the recipe's come first), and the label.
    pub fn apply(&self, node: &NodeName, spec: &mut ContainerSpec) {
        let (Some(folder), Some(seen)) = (self.folders.get(node), self.seen_on(node)) else {
            return;
        };
        if let Some(target) = &self.mount {
            spec.mounts.retain(|m| m.target != *target);
            spec.mounts.push(Mount {
                source: folder.clone(),
                target: target.clone(),
                read_only: false,
                kind: MountKind::Bind,
            });
        }
        for (var, sub) in &self.variables {
            spec.env
                .entry(var.clone())
                .or_insert_with(|| under(&seen, sub));
        }
        spec.labels
            .insert(LABEL_RUNTIME_CACHE.to_string(), folder.clone());
    }

    /// The step that creates every node's folder when missing, before the start.
    pub fn step(&self) -> Step {
        crate::workload::steps::ensure_folders("runtime cache", self.folders.clone())
    }
}

/// `dir/sub`, or `dir` for an empty `sub`.
fn under(dir: &str, sub: &str) -> String {
    let dir = dir.trim_end_matches('/');
    if sub.is_empty() {
        dir.to_string()
    } else {
        format!("{dir}/{sub}")
    }
}

/// The runtime cache of `engine` serving `model` from `image`, under `root`:
/// `ROOT/ENGINE/MODEL/IMAGE`.
///
/// Keyed by the image, not only by the engine: a cache written by one version of an engine
/// may not fit another, and not every library checks (FlashInfer keeps its JIT builds in a
/// folder named by the GPU architecture alone). A supervised restart runs the same image, so
/// this costs it nothing; a new image starts cold, in a folder of its own, and the old one's
/// can be removed whole. Keyed by the model's repository, not its commit: what is compiled
/// follows the model's architecture and configuration, which the engines hash into their own
/// keys, and a new commit of the same model should find it.
pub fn folder(root: &str, engine: &str, model: &ModelSource, image: &str) -> String {
    format!(
        "{}/{engine}/{}/{}",
        root.trim_end_matches('/'),
        model_key(model),
        image_key(image)
    )
}

/// A Hub model's folder name: its repository as the Hugging Face cache names it (`ORG--NAME`,
/// every character of a repository id is safe in a path); a folder model's: its last name
/// and a hash of its path.
fn model_key(model: &ModelSource) -> String {
    match model {
        ModelSource::Hub { repo, .. } => repo.to_string().replace('/', "--"),
        ModelSource::Local { path } => {
            let last = path.trim_end_matches('/').rsplit('/').next().unwrap_or("");
            format!("local-{}", hashed(last, path))
        }
    }
}

/// An image's folder name: its reference made safe for a path (without a pinned digest, which
/// only the hash needs to tell apart), and a hash of the whole reference.
fn image_key(image: &str) -> String {
    let name = image.split_once('@').map_or(image, |(name, _)| name);
    hashed(name, image)
}

/// `text` reduced to letters, digits, `.`, `_` and `-` (any other run one `-`), at most
/// [`READABLE`] characters, then `-` and the first 8 hex digits of `whole`'s SHA-256.
fn hashed(text: &str, whole: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let readable: String = out
        .trim_matches(|c| c == '-' || c == '.')
        .chars()
        .take(READABLE)
        .collect();
    let digest = crate::digest::sha256_hex(whole);
    let short = &digest[..8];
    match readable.trim_end_matches(['-', '.']) {
        "" => short.to_string(),
        r => format!("{r}-{short}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::JobName;
    use crate::workload::engines::EngineKind;

    fn node(n: &str) -> NodeName {
        NodeName::new(n).unwrap()
    }

    fn opts(engine: EngineKind, model: &str) -> ServeOptions {
        ServeOptions::new(
            engine,
            JobName::new("j").unwrap(),
            ModelSource::parse(model, None).unwrap(),
        )
    }

    #[test]
    fn the_folder_is_per_engine_model_and_image_under_the_nodes_root() {
        let model = ModelSource::parse("Qwen/Qwen2.5-0.5B-Instruct", None).unwrap();
        let f = folder(
            "/home/u/.cache/spark-launch/runtime/",
            "vllm",
            &model,
            "nvcr.io/nvidia/vllm:26.04-py3",
        );
        assert!(
            f.starts_with(
                "/home/u/.cache/spark-launch/runtime/vllm/Qwen--Qwen2.5-0.5B-Instruct/nvcr.io-nvidia-vllm-26.04-py3-"
            ),
            "{f}"
        );
        assert_eq!(f.rsplit('-').next().map(str::len), Some(8), "{f}");
    }

    #[test]
    fn another_image_engine_or_model_gets_another_folder_a_new_commit_the_same() {
        let m = |s: &str| ModelSource::parse(s, None).unwrap();
        let base = folder("/r", "vllm", &m("a/b"), "img:1");
        assert_ne!(base, folder("/r", "vllm", &m("a/b"), "img:2"));
        assert_ne!(base, folder("/r", "sglang", &m("a/b"), "img:1"));
        assert_ne!(base, folder("/r", "vllm", &m("a/c"), "img:1"));
        assert_eq!(base, folder("/r", "vllm", &m("a/b@0123abc"), "img:1"));
    }

    #[test]
    fn names_that_read_alike_never_share_a_folder() {
        assert_ne!(image_key("a/b:c"), image_key("a-b-c"));
        let m = |p: &str| ModelSource::Local { path: p.into() };
        assert_ne!(model_key(&m("/x/model")), model_key(&m("/y/model")));
        assert!(model_key(&m("/data/my model/")).starts_with("local-my-model-"));
    }

    #[test]
    fn a_long_or_odd_image_reference_is_cut_and_kept_safe_for_a_path() {
        let long = format!(
            "{}@sha256:{}",
            "registry.example/team/".repeat(4),
            "a".repeat(64)
        );
        let key = image_key(&long);
        assert!(key.len() <= READABLE + 9, "{key}");
        assert!(
            key.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')),
            "{key}"
        );
        assert_eq!(image_key("///").len(), 8);
        let pinned = format!("org/img:tag@sha256:{}", "b".repeat(64));
        assert!(
            image_key(&pinned).starts_with("org-img-tag-"),
            "{}",
            image_key(&pinned)
        );
        assert_ne!(image_key(&pinned), image_key("org/img:tag"));
    }

    #[test]
    fn every_rank_mounts_its_nodes_folder_at_one_path_with_the_engines_variables() {
        let mut o = opts(EngineKind::Vllm, "Qwen/Qwen2.5-0.5B-Instruct");
        o.paths.insert(
            node("spark-b"),
            crate::workload::serve::NodePaths {
                runtime_cache: "/home/b/.cache/spark-launch/runtime".into(),
                ..Default::default()
            },
        );
        let nodes = [node("spark-a"), node("spark-b")];
        let cache = RuntimeCache::plan(EngineKind::Vllm.engine(), &o, &nodes);
        assert!(cache.folders[&nodes[0]].starts_with("~/.cache/spark-launch/runtime/vllm/"));
        assert!(cache.folders[&nodes[1]].starts_with("/home/b/.cache/spark-launch/runtime/vllm/"));
        for n in &nodes {
            let mut spec = ContainerSpec::new(&o.job, n, crate::node::Role::Worker, &o.image);
            cache.apply(n, &mut spec);
            let m = spec
                .mounts
                .iter()
                .find(|m| m.target == CONTAINER_DIR)
                .unwrap();
            assert_eq!(m.source, cache.folders[n]);
            assert!(!m.read_only);
            assert_eq!(spec.env["VLLM_CACHE_ROOT"], "/var/cache/spark-launch/vllm");
            assert_eq!(
                spec.env["TRITON_CACHE_DIR"],
                "/var/cache/spark-launch/triton"
            );
            assert_eq!(spec.labels[LABEL_RUNTIME_CACHE], cache.folders[n]);
        }
    }

    #[test]
    fn a_variable_the_user_or_the_recipe_set_stays_theirs() {
        let o = opts(EngineKind::Sglang, "a/b");
        let n = node("spark-a");
        let cache = RuntimeCache::plan(EngineKind::Sglang.engine(), &o, std::slice::from_ref(&n));
        let mut spec = ContainerSpec::new(&o.job, &n, crate::node::Role::Head, &o.image);
        spec.env
            .insert("TRITON_CACHE_DIR".into(), "/scratch/triton".into());
        cache.apply(&n, &mut spec);
        assert_eq!(spec.env["TRITON_CACHE_DIR"], "/scratch/triton");
        assert_eq!(
            spec.env["SGLANG_JIT_CACHE_DIR"],
            "/var/cache/spark-launch/sglang/jit"
        );
    }

    #[test]
    fn a_host_process_is_pointed_at_its_nodes_folder_itself() {
        let mut o = opts(EngineKind::Vllm, "a/b");
        o.runtime = RuntimeKind::Host;
        let n = node("spark-a");
        let cache = RuntimeCache::plan(EngineKind::Vllm.engine(), &o, std::slice::from_ref(&n));
        assert_eq!(cache.mount, None);
        assert_eq!(cache.seen_on(&n).as_ref(), cache.folders.get(&n));
        let mut spec = ContainerSpec::new(&o.job, &n, crate::node::Role::Head, &o.image);
        cache.apply(&n, &mut spec);
        assert!(spec.mounts.iter().all(|m| m.target != CONTAINER_DIR));
        assert_eq!(
            spec.env["TRITON_CACHE_DIR"],
            format!("{}/triton", cache.folders[&n])
        );
    }

    #[test]
    fn an_engine_that_compiles_nothing_gets_the_folder_and_no_variables() {
        let o = opts(EngineKind::Llamacpp, "a/b");
        let n = node("spark-a");
        let cache = RuntimeCache::plan(EngineKind::Llamacpp.engine(), &o, std::slice::from_ref(&n));
        assert!(cache.variables.is_empty());
        assert_eq!(cache.seen_on(&n).as_deref(), Some(CONTAINER_DIR));
    }
}
