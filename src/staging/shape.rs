//! What a model is, read where its files are: its shape (for the tp/pp check) and footprint
//! (for the memory plan) from its `config.json` and the size of its weights — on the head
//! (a local folder there, or the Hub asked from the head with [`super::hub_curl`]), or on this
//! machine (a local folder, the Hugging Face cache, else the Hub) for a dry run on snapshots,
//! `doctor` and `profiles`. Read-only: nothing is downloaded but two small files.

use std::sync::Arc;

use crate::model::ModelSource;
use crate::model::footprint::{Footprint, INDEX, Known, KvLayout, WeightsSize};
use crate::model::hub::HubTransport;
use crate::model::script::quote;
use crate::model::shape::{ModelShape, ShapeLookup};
use crate::runtime::shell::NodeShell;

/// The most of a `config.json` read: real ones are a few KB.
const CONFIG_MAX: u64 = 4 << 20;
/// The most of a safetensors index read on a node: its `metadata.total_size` comes first.
const INDEX_HEAD: u64 = 64 << 10;
/// The most of a safetensors index read whole (here, or from the Hub): DeepSeek-V3's is 9 MB.
const INDEX_MAX: u64 = 64 << 20;
/// [`CONFIG_MAX`] as a limit of the one file reader.
const CONFIG_LIMIT: crate::input::InputLimit = crate::input::InputLimit {
    max: CONFIG_MAX,
    hint: "a model's config.json is a few KiB",
};
/// [`INDEX_MAX`] as a limit of the one file reader.
const INDEX_LIMIT: crate::input::InputLimit = crate::input::InputLimit {
    max: INDEX_MAX,
    hint: "a safetensors index is a few MiB",
};

/// The shape (for the tp/pp check) and the footprint (for the memory plan) from the text of
/// `config.json`, or why it could not be read; the weights as found.
pub fn understood(
    config: Result<String, String>,
    weights: Known<WeightsSize>,
) -> (ShapeLookup, Footprint) {
    match config {
        Ok(text) => (
            shape_of(&text),
            Footprint {
                kv: KvLayout::parse(&text).into(),
                weights,
            },
        ),
        Err(why) => (
            ShapeLookup::Unreadable(why.clone()),
            Footprint {
                kv: Known::NotKnown(why),
                weights,
            },
        ),
    }
}

/// `config.json` of a Hub model at `rev` (a commit, or a revision's URL segment), or `file`
/// at the same place, fetched with curl through `shell`: one small request.
async fn from_hub(
    shell: Arc<dyn NodeShell>,
    repo: &crate::model::RepoId,
    rev: &str,
    file: &str,
) -> Result<String, String> {
    let token = super::hf_token();
    let auth = token.is_some();
    let url = crate::model::hub::resolve_url(&super::hf_endpoint(), repo, rev, file);
    let transport = super::hub_curl::CurlHub::new(shell, token);
    match transport.get(&url, auth).await {
        Ok(a) if a.status == 200 => Ok(a.body),
        Ok(a) => Err(format!("{url} answered HTTP {}", a.status)),
        Err(e) => Err(format!("cannot fetch {url}: {e}")),
    }
}

pub async fn config_from_hub(
    shell: Arc<dyn NodeShell>,
    repo: &crate::model::RepoId,
    rev: &str,
) -> Result<String, String> {
    from_hub(shell, repo, rev, "config.json").await
}

/// A local model folder on the head: its `config.json`, and its weights (the index's
/// `total_size`, else the sizes of its `*.safetensors`), read through `shell`.
pub async fn model_on_head(shell: &dyn NodeShell, path: &str) -> (ShapeLookup, Footprint) {
    let dir = path.trim_end_matches('/');
    let file = format!("{dir}/config.json");
    let script = format!("head -c {CONFIG_MAX} -- {}", quote(&file));
    let config = match shell.run(&script, Vec::new(), None).await {
        Ok(out) if out.success() => Ok(out.stdout),
        Ok(out) => Err(format!(
            "cannot read {file} on {}: {}",
            shell.node(),
            out.stderr_tail().trim()
        )),
        Err(e) => Err(format!("cannot read {file}: {e}")),
    };
    let index = format!("{dir}/{INDEX}");
    let script = format!(
        "if [ -f {i} ]; then echo index; head -c {INDEX_HEAD} -- {i}; else echo files; for f in {d}/*.safetensors; do [ -f \"$f\" ] && stat -L -c '%s %n' -- \"$f\"; done; fi; true",
        i = quote(&index),
        d = quote(dir)
    );
    let weights = match shell.run(&script, Vec::new(), None).await {
        Ok(out) if out.success() => weights_listed(&out.stdout, &format!("{dir} on the head")),
        Ok(out) => Known::NotKnown(format!(
            "cannot list {dir} on {}: {}",
            shell.node(),
            out.stderr_tail().trim()
        )),
        Err(e) => Known::NotKnown(format!("cannot list {dir}: {e}")),
    };
    understood(config, weights)
}

/// The weights from the head's answer: `index` and the index's first bytes, or `files` and
/// `SIZE PATH` lines.
fn weights_listed(out: &str, whence: &str) -> Known<WeightsSize> {
    match out.split_once('\n') {
        Some(("index", text)) => WeightsSize::from_index(text).into(),
        Some(("files", lines)) => {
            let files: Vec<(String, u64)> = lines
                .lines()
                .filter_map(|l| {
                    let (size, path) = l.split_once(' ')?;
                    let name = path.rsplit('/').next()?.to_string();
                    Some((name, size.parse().ok()?))
                })
                .collect();
            WeightsSize::from_files(files.iter().map(|(p, s)| (p.as_str(), *s)), whence).into()
        }
        _ => Known::NotKnown(format!("{whence}: no index and no weights listed")),
    }
}

fn shape_of(text: &str) -> ShapeLookup {
    match ModelShape::parse(text) {
        Ok(s) => ShapeLookup::Read(s),
        Err(e) => ShapeLookup::Unreadable(e.to_string()),
    }
}

/// A model folder on this machine: its `config.json` and weights (`whence` for messages).
fn model_in_folder(dir: &std::path::Path) -> (Result<String, String>, Known<WeightsSize>) {
    let file = dir.join("config.json");
    let config = crate::input::read_text(&file, CONFIG_LIMIT).map_err(|e| e.to_string());
    let index = dir.join(INDEX);
    let weights = if index.is_file() {
        match crate::input::read_text(&index, INDEX_LIMIT) {
            Ok(text) => WeightsSize::from_index(&text).into(),
            Err(e) => Known::NotKnown(e.to_string()),
        }
    } else {
        let files: Vec<(String, u64)> = std::fs::read_dir(dir)
            .map(|rd| {
                rd.filter_map(Result::ok)
                    .filter_map(|e| {
                        let size = std::fs::metadata(e.path()).ok()?.len();
                        Some((e.file_name().to_string_lossy().into_owned(), size))
                    })
                    .collect()
            })
            .unwrap_or_default();
        WeightsSize::from_files(
            files.iter().map(|(p, s)| (p.as_str(), *s)),
            &dir.display().to_string(),
        )
        .into()
    };
    (config, weights)
}

/// A Hub model in the Hugging Face cache of this machine (`$HF_HOME`, else
/// `~/.cache/huggingface`), at the commit its revision names there; `None` when not cached.
fn model_in_cache(
    repo: &crate::model::RepoId,
    revision: &crate::model::Revision,
) -> Option<std::path::PathBuf> {
    let home = std::env::var_os("HF_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".cache/huggingface"))
        })?;
    let base = home.join("hub").join(repo.cache_folder());
    let commit = if revision.is_commit() {
        revision.as_str().to_string()
    } else {
        std::fs::read_to_string(base.join("refs").join(revision.as_str()))
            .ok()?
            .trim()
            .to_string()
    };
    if !crate::model::is_commit(&commit) {
        return None;
    }
    let dir = base.join("snapshots").join(commit);
    dir.join("config.json").is_file().then_some(dir)
}

/// The footprints of `models` as far as this machine holds their files (a local folder, the
/// Hugging Face cache), keyed by the model as it prints; nothing is fetched.
pub fn footprints_here(
    models: impl IntoIterator<Item = ModelSource>,
) -> std::collections::BTreeMap<String, Footprint> {
    let mut out = std::collections::BTreeMap::new();
    for m in models {
        let dir = match &m {
            ModelSource::Local { path } => Some(std::path::PathBuf::from(path)),
            ModelSource::Hub { repo, revision, .. } => model_in_cache(repo, revision),
        };
        if let Some(dir) = dir.filter(|d| d.join("config.json").is_file()) {
            let (config, weights) = model_in_folder(&dir);
            out.insert(m.to_string(), understood(config, weights).1);
        }
    }
    out
}

/// The shape and footprint for a dry run on snapshots, from this machine: a local model's
/// folder when it is here too; a Hub model from this machine's Hugging Face cache, else from
/// the Hub unless `HF_HUB_OFFLINE=1` (two small requests at the revision asked: `config.json`
/// and the safetensors index; nothing else is resolved). A failure is a warning.
pub async fn model_from_here(model: &ModelSource) -> (ShapeLookup, Footprint) {
    match model {
        ModelSource::Local { path } => {
            let dir = std::path::Path::new(path);
            let (config, weights) = model_in_folder(dir);
            let config =
                config.map_err(|e| format!("{e} on this machine; a live run reads it on the head"));
            understood(config, weights)
        }
        // Which file a GGUF spec picks is known only from the Hub's listing, asked on a live
        // run; its shape is in its header.
        ModelSource::Hub { gguf: Some(_), .. } => (
            ShapeLookup::NotLooked,
            Footprint {
                kv: Known::NotKnown(crate::model::footprint::GGUF_LAYOUT.to_string()),
                weights: Known::NotKnown(
                    "a GGUF spec's file is picked from the Hub's listing on a live run".into(),
                ),
            },
        ),
        ModelSource::Hub { repo, revision, .. } => {
            if let Some(dir) = model_in_cache(repo, revision) {
                let (config, weights) = model_in_folder(&dir);
                return understood(config, weights);
            }
            if std::env::var("HF_HUB_OFFLINE").is_ok_and(|v| v.trim() == "1") {
                let why = "HF_HUB_OFFLINE=1 and not in this machine's Hugging Face cache: the Hub was not asked for its config.json";
                return (
                    ShapeLookup::Unreadable(why.into()),
                    Footprint::not_read(why),
                );
            }
            let here = match crate::node::NodeName::new("localhost") {
                Ok(n) => n,
                Err(e) => {
                    return (
                        ShapeLookup::Unreadable(e.to_string()),
                        Footprint::not_read(&e.to_string()),
                    );
                }
            };
            let shell: Arc<dyn NodeShell> = Arc::new(crate::runtime::shell::LocalShell::new(here));
            let rev = revision.url_segment();
            let config = config_from_hub(shell.clone(), repo, &rev).await;
            let weights = match from_hub(shell, repo, &rev, INDEX).await {
                Ok(text) => WeightsSize::from_index(&text).into(),
                Err(why) => Known::NotKnown(format!(
                    "{why} (a dry run on snapshots asks the Hub for no file listing; a single-file model's size is known on a live run)"
                )),
            };
            understood(config, weights)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_head_s_answer_gives_the_index_s_total_or_the_shards_sizes() {
        let w = weights_listed(
            "index\n{\"metadata\": {\"total_size\": 65248815744}, \"weight_map\": {\"a\": \"b",
            "x",
        );
        assert_eq!(w.known().map(|w| w.bytes), Some(65_248_815_744));
        let w = weights_listed(
            "files\n4 /m/model-00001-of-00002.safetensors\n7 /m/model-00002-of-00002.safetensors\n",
            "/m on the head",
        );
        assert_eq!(w.known().map(|w| w.bytes), Some(11));
        // A folder without weights: not known, and why.
        let w = weights_listed("files\n", "/m on the head");
        assert!(
            w.why_not().is_some_and(|w| w.contains("no *.safetensors")),
            "{w:?}"
        );
    }

    #[test]
    fn a_folder_here_is_read_for_its_config_and_its_weights() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("config.json"),
            r#"{"num_hidden_layers": 2, "num_attention_heads": 4, "head_dim": 8, "torch_dtype": "bfloat16"}"#,
        )
        .unwrap();
        std::fs::write(dir.path().join("model.safetensors"), [0u8; 10]).unwrap();
        let (config, weights) = model_in_folder(dir.path());
        let (shape, footprint) = understood(config, weights);
        assert!(matches!(shape, ShapeLookup::Read(_)), "{shape:?}");
        assert!(footprint.kv.known().is_some());
        assert_eq!(footprint.weights.known().map(|w| w.bytes), Some(10));
        let (_, footprint) = understood(Err("offline".into()), Known::NotKnown("offline".into()));
        assert_eq!(footprint.kv.why_not(), Some("offline"));
    }
}
