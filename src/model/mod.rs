//! Model weights as data: which model the user asked for (a Hugging Face repo id with a
//! revision, or a folder on the head), where it lives in the Hugging Face cache layout, and
//! where a container sees it.
//!
//! Pure: parsing, naming and paths. Talking to the Hub happens behind [`hub::Hub`]; scanning
//! and copying files on nodes happens in `staging`, which runs the scripts of
//! [`script`] and feeds their output to [`manifest`].
//!
//! The cache layout kept on every node is the one `huggingface_hub` writes, so that vLLM,
//! TensorRT-LLM and the user's own tools find the same files:
//!
//! ```text
//! $HF_HOME/hub/models--ORG--NAME/
//!   blobs/<etag>                     file contents, named by their sha256 (LFS) or git sha1
//!   snapshots/<commit>/<path>        relative symlinks into ../../blobs/<etag>
//!   refs/<revision>                  the commit a branch or tag pointed to
//! ```

pub mod footprint;
pub mod gguf;
pub mod hub;
pub mod manifest;
pub mod pull;
pub mod route;
pub mod script;
pub mod shape;

use std::fmt;

use serde::{Deserialize, Serialize};

pub use gguf::Gguf;

/// Where the Hugging Face cache is mounted inside every container (`HF_HOME` there;
/// `plan::spec::ContainerSpec::mount_hf_cache` mounts it).
pub const CONTAINER_HF_HOME: &str = "/root/.cache/huggingface";
/// Where a local (non-Hub) model folder is mounted inside every container.
pub const CONTAINER_MODELS: &str = "/models";
/// The Hub, unless `HF_ENDPOINT` says otherwise (as `huggingface_hub` reads it).
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// A Hugging Face repository id: `org/name` (or a bare `name` for old top-level repos).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RepoId(String);

impl RepoId {
    /// Letters, digits, `.`, `_` and `-` in one or two `/`-separated parts, each starting with
    /// a letter or digit, at most 96 characters each; no `--` or `..` (they would make cache
    /// folder names ambiguous or escape them).
    pub fn new(id: impl Into<String>) -> Result<Self, ModelError> {
        let id = id.into();
        let parts: Vec<&str> = id.split('/').collect();
        let part_ok = |p: &str| {
            !p.is_empty()
                && p.len() <= 96
                && p.starts_with(|c: char| c.is_ascii_alphanumeric())
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
                && !p.contains("--")
                && !p.contains("..")
        };
        if (1..=2).contains(&parts.len()) && parts.iter().all(|p| part_ok(p)) {
            Ok(RepoId(id))
        } else {
            Err(ModelError::BadRepoId(id))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `models--ORG--NAME`: the repo's folder under `$HF_HOME/hub`.
    pub fn cache_folder(&self) -> String {
        format!("models--{}", self.0.replace('/', "--"))
    }
}

impl TryFrom<String> for RepoId {
    type Error = ModelError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        RepoId::new(s)
    }
}

impl From<RepoId> for String {
    fn from(r: RepoId) -> String {
        r.0
    }
}

impl fmt::Display for RepoId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A branch, tag or commit of a repository (`main`, `v1.0`, `refs/pr/3`, a 40-hex sha).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Revision(String);

impl Revision {
    pub fn new(rev: impl Into<String>) -> Result<Self, ModelError> {
        let rev = rev.into();
        let ok = !rev.is_empty()
            && rev.len() <= 200
            && !rev.starts_with('/')
            && !rev.ends_with('/')
            && !rev.contains("..")
            && !rev.contains("//")
            && rev
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/'));
        if ok {
            Ok(Revision(rev))
        } else {
            Err(ModelError::BadRevision(rev))
        }
    }

    pub fn main() -> Self {
        Revision("main".to_string())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A full commit sha: the revision names exactly one snapshot.
    pub fn is_commit(&self) -> bool {
        is_commit(&self.0)
    }

    /// The revision as one URL path segment (`refs/pr/3` → `refs%2Fpr%2F3`).
    pub fn url_segment(&self) -> String {
        self.0.replace('/', "%2F")
    }
}

impl TryFrom<String> for Revision {
    type Error = ModelError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Revision::new(s)
    }
}

impl From<Revision> for String {
    fn from(r: Revision) -> String {
        r.0
    }
}

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// True for a 40-character lowercase hex string (a git commit sha).
pub fn is_commit(s: &str) -> bool {
    s.len() == 40 && s.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f'))
}

/// What the user named: a Hub repository at a revision (or GGUF file(s) of one), or a folder
/// on the head.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum ModelSource {
    Hub {
        repo: RepoId,
        revision: Revision,
        /// The commit the revision resolved to; `None` until resolved (dry runs).
        commit: Option<String>,
        /// Only GGUF file(s) of the repository, as llama.cpp's `-hf REPO[:QUANT]` picks them
        /// (`gguf`); `None`: the whole repository.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        gguf: Option<Gguf>,
    },
    Local {
        /// An absolute folder on the head; copied to the same path on every other node.
        path: String,
    },
}

impl ModelSource {
    /// Parses `ORG/NAME`, `ORG/NAME@REVISION`, a GGUF spec `ORG/NAME:QUANT` (as llama.cpp's
    /// `-hf` takes it; `ORG/NAME@REVISION:QUANT` or `ORG/NAME:QUANT@REVISION` with a
    /// revision) or an absolute path. A `revision` given apart (`--revision`) wins over one
    /// after `@`.
    pub fn parse(model: &str, revision: Option<&str>) -> Result<Self, ModelError> {
        let model = model.trim();
        if model.starts_with('/') {
            if revision.is_some() {
                return Err(ModelError::RevisionOnPath(model.to_string()));
            }
            return local_path(model);
        }
        if model.starts_with('.') || model.starts_with('~') {
            return Err(ModelError::RelativePath(model.to_string()));
        }
        let (rest, quant) = match model.split_once(':') {
            Some((rest, q)) => {
                // The quant may come before the revision (`:Q4_K_M@v1`): the `@` part goes
                // back to the repo.
                let (q, rev) = match q.split_once('@') {
                    Some((q, rev)) => (q, Some(rev)),
                    None => (q, None),
                };
                if !gguf::valid_quant(q) {
                    return Err(ModelError::BadQuant(model.to_string()));
                }
                let rest = match rev {
                    Some(rev) if !rest.contains('@') => format!("{rest}@{rev}"),
                    Some(_) => return Err(ModelError::BadQuant(model.to_string())),
                    None => rest.to_string(),
                };
                (rest, Some(q.to_string()))
            }
            None => (model.to_string(), None),
        };
        let (id, at_rev) = match rest.split_once('@') {
            Some((id, rev)) => (id, Some(rev)),
            None => (rest.as_str(), None),
        };
        let repo = RepoId::new(id)?;
        let revision = match revision.or(at_rev) {
            Some(r) => Revision::new(r)?,
            None => Revision::main(),
        };
        let commit = revision.is_commit().then(|| revision.as_str().to_string());
        Ok(ModelSource::Hub {
            repo,
            revision,
            commit,
            gguf: quant.map(|q| Gguf {
                quant: Some(q),
                picked: None,
            }),
        })
    }

    /// The name the API serves the model under: the repo id (with its `:QUANT`), or the
    /// folder's name.
    pub fn served_name(&self) -> String {
        match self {
            ModelSource::Hub {
                repo,
                gguf: Some(Gguf { quant: Some(q), .. }),
                ..
            } => format!("{repo}:{q}"),
            ModelSource::Hub { repo, .. } => repo.to_string(),
            ModelSource::Local { path } => basename(path).to_string(),
        }
    }

    /// The same source with its commit set (after the Hub resolved the revision).
    pub fn with_commit(&self, sha: &str) -> Self {
        match self {
            ModelSource::Hub {
                repo,
                revision,
                gguf,
                ..
            } => ModelSource::Hub {
                repo: repo.clone(),
                revision: revision.clone(),
                commit: Some(sha.to_string()),
                gguf: gguf.clone(),
            },
            other => other.clone(),
        }
    }

    /// The GGUF selection of a Hub model (`None`: the whole repository, or a folder).
    pub fn gguf(&self) -> Option<&Gguf> {
        match self {
            ModelSource::Hub { gguf, .. } => gguf.as_ref(),
            ModelSource::Local { .. } => None,
        }
    }

    /// The same source as GGUF file(s) of its repository: a Hub model without a `:QUANT`
    /// gets llama.cpp's default quant; a folder, or a model already a GGUF spec, is as it was.
    pub fn as_gguf(&self) -> Self {
        match self {
            ModelSource::Hub {
                repo,
                revision,
                commit,
                gguf: None,
            } => ModelSource::Hub {
                repo: repo.clone(),
                revision: revision.clone(),
                commit: commit.clone(),
                gguf: Some(Gguf::default()),
            },
            other => other.clone(),
        }
    }

    /// Where the model's files are on a node whose Hugging Face cache is `hf_home`.
    pub fn node_dir(&self, hf_home: &str) -> String {
        match self {
            ModelSource::Hub { repo, .. } => {
                format!(
                    "{}/hub/{}",
                    hf_home.trim_end_matches('/'),
                    repo.cache_folder()
                )
            }
            ModelSource::Local { path } => path.clone(),
        }
    }

    /// What a serving engine is pointed at inside the container: the snapshot folder of the
    /// resolved commit (or of the revision's name while unresolved), the picked GGUF file in
    /// it (the first part of a split model), or the mounted folder.
    pub fn container_path(&self) -> String {
        match self {
            ModelSource::Hub {
                repo,
                revision,
                commit,
                gguf,
            } => {
                let snapshot = format!(
                    "{CONTAINER_HF_HOME}/hub/{}/snapshots/{}",
                    repo.cache_folder(),
                    commit.as_deref().unwrap_or(revision.as_str())
                );
                match gguf.as_ref().and_then(|g| g.picked.as_ref()) {
                    Some(p) => format!("{snapshot}/{}", p.model),
                    None => snapshot,
                }
            }
            ModelSource::Local { path } => format!("{CONTAINER_MODELS}/{}", basename(path)),
        }
    }

    /// The picked GGUF projector's path inside the container (`None`: no projector, not
    /// picked yet, or not a GGUF spec).
    pub fn container_mmproj(&self) -> Option<String> {
        let ModelSource::Hub {
            repo,
            revision,
            commit,
            gguf,
        } = self
        else {
            return None;
        };
        let mmproj = gguf.as_ref()?.picked.as_ref()?.mmproj.as_ref()?;
        Some(format!(
            "{CONTAINER_HF_HOME}/hub/{}/snapshots/{}/{mmproj}",
            repo.cache_folder(),
            commit.as_deref().unwrap_or(revision.as_str())
        ))
    }
}

impl fmt::Display for ModelSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelSource::Hub {
                repo,
                revision,
                commit,
                gguf,
            } => {
                let quant = match gguf {
                    Some(Gguf { quant: Some(q), .. }) => format!(":{q}"),
                    _ => String::new(),
                };
                match commit {
                    Some(c) if c != revision.as_str() => {
                        write!(f, "{repo}@{revision}{quant} ({c})")
                    }
                    _ => write!(f, "{repo}@{revision}{quant}"),
                }
            }
            ModelSource::Local { path } => f.write_str(path),
        }
    }
}

fn local_path(path: &str) -> Result<ModelSource, ModelError> {
    let trimmed = path.trim_end_matches('/');
    let bad = trimmed.is_empty()
        || trimmed.split('/').any(|p| p == "..")
        || trimmed.chars().any(|c| c.is_control());
    if bad {
        return Err(ModelError::BadPath(path.to_string()));
    }
    Ok(ModelSource::Local {
        path: trimmed.to_string(),
    })
}

fn basename(path: &str) -> &str {
    path.rsplit('/').find(|p| !p.is_empty()).unwrap_or(path)
}

/// What is wrong with a model name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    #[error(
        "invalid model id {0:?}: expected ORG/NAME as on huggingface.co (letters, digits, '.', '_', '-'), optionally @REVISION, or an absolute folder path"
    )]
    BadRepoId(String),
    #[error(
        "invalid revision {0:?}: expected a branch, tag or commit (letters, digits, '.', '_', '-', '/')"
    )]
    BadRevision(String),
    #[error("invalid model folder {0:?}: give an absolute path without '..'")]
    BadPath(String),
    #[error(
        "model folder {0:?} is relative: give an absolute path (it is copied to the same path on every node)"
    )]
    RelativePath(String),
    #[error("--revision applies to Hub models, not to the folder {0:?}")]
    RevisionOnPath(String),
    #[error(
        "invalid GGUF spec {0:?}: expected ORG/NAME:QUANT as llama.cpp's -hf takes it (the quant in letters, digits, '_', '-', '.': Q4_K_M, UD-Q4_K_XL), optionally with @REVISION"
    )]
    BadQuant(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repo_id_with_a_revision_after_an_at_sign_is_a_hub_model() {
        let m = ModelSource::parse("Qwen/Qwen2.5-0.5B-Instruct@v1.0", None).unwrap();
        assert_eq!(
            m,
            ModelSource::Hub {
                repo: RepoId::new("Qwen/Qwen2.5-0.5B-Instruct").unwrap(),
                revision: Revision::new("v1.0").unwrap(),
                commit: None,
                gguf: None,
            }
        );
        assert_eq!(m.served_name(), "Qwen/Qwen2.5-0.5B-Instruct");
    }

    #[test]
    fn the_revision_flag_wins_over_the_at_sign_and_a_commit_is_already_resolved() {
        let sha = "a".repeat(40);
        let m = ModelSource::parse("org/m@main", Some(&sha)).unwrap();
        match m {
            ModelSource::Hub {
                revision, commit, ..
            } => {
                assert!(revision.is_commit());
                assert_eq!(commit.as_deref(), Some(sha.as_str()));
            }
            _ => panic!("not a hub model"),
        }
    }

    #[test]
    fn a_hub_model_lives_in_the_hf_cache_layout_on_nodes_and_in_containers() {
        let m = ModelSource::parse("meta-llama/Llama-3.1-8B", None).unwrap();
        assert_eq!(
            m.node_dir("/home/u/.cache/huggingface/"),
            "/home/u/.cache/huggingface/hub/models--meta-llama--Llama-3.1-8B"
        );
        assert_eq!(
            m.container_path(),
            "/root/.cache/huggingface/hub/models--meta-llama--Llama-3.1-8B/snapshots/main"
        );
        let m = m.with_commit("0123456789abcdef0123456789abcdef01234567");
        assert!(
            m.container_path()
                .ends_with("/snapshots/0123456789abcdef0123456789abcdef01234567")
        );
    }

    #[test]
    fn a_local_model_must_be_an_absolute_path_and_is_mounted_under_models() {
        let m = ModelSource::parse("/data/models/my-llm/", None).unwrap();
        assert_eq!(
            m,
            ModelSource::Local {
                path: "/data/models/my-llm".into()
            }
        );
        assert_eq!(m.container_path(), "/models/my-llm");
        assert_eq!(m.served_name(), "my-llm");
        assert!(matches!(
            ModelSource::parse("./my-llm", None),
            Err(ModelError::RelativePath(_))
        ));
        assert!(matches!(
            ModelSource::parse("/data/../etc", None),
            Err(ModelError::BadPath(_))
        ));
        assert!(matches!(
            ModelSource::parse("/data/x", Some("main")),
            Err(ModelError::RevisionOnPath(_))
        ));
    }

    #[test]
    fn a_gguf_spec_names_a_quant_of_a_repository_as_llama_cpp_s_hf_does() {
        let m = ModelSource::parse("unsloth/Qwen3-30B-A3B-GGUF:Q4_K_M", None).unwrap();
        let ModelSource::Hub {
            repo,
            revision,
            gguf,
            ..
        } = &m
        else {
            panic!("not a hub model")
        };
        assert_eq!(repo.as_str(), "unsloth/Qwen3-30B-A3B-GGUF");
        assert_eq!(revision.as_str(), "main");
        assert_eq!(gguf.as_ref().unwrap().quant.as_deref(), Some("Q4_K_M"));
        assert_eq!(m.served_name(), "unsloth/Qwen3-30B-A3B-GGUF:Q4_K_M");
        assert_eq!(m.to_string(), "unsloth/Qwen3-30B-A3B-GGUF@main:Q4_K_M");
        // The revision before or after the quant; the written form parses back.
        for spec in ["org/m-GGUF@v2:UD-Q4_K_XL", "org/m-GGUF:UD-Q4_K_XL@v2"] {
            let m = ModelSource::parse(spec, None).unwrap();
            assert_eq!(m.to_string(), "org/m-GGUF@v2:UD-Q4_K_XL");
            assert_eq!(ModelSource::parse(&m.to_string(), None).unwrap(), m);
        }
        for bad in ["org/m:", "org/m:Q4 K", "org/m@v1:Q4@v2", "org/m:a:b"] {
            assert!(
                matches!(ModelSource::parse(bad, None), Err(ModelError::BadQuant(_))),
                "{bad:?} accepted"
            );
        }
    }

    #[test]
    fn a_picked_gguf_file_is_what_the_engine_is_pointed_at() {
        let sha = "0123456789abcdef0123456789abcdef01234567";
        let m = ModelSource::parse("org/m-GGUF:Q3_K_M", None).unwrap();
        assert!(m.container_path().ends_with("/snapshots/main"));
        assert_eq!(m.container_mmproj(), None);
        let ModelSource::Hub {
            repo,
            revision,
            gguf: Some(g),
            ..
        } = m
        else {
            panic!("not a gguf spec")
        };
        let picked = ModelSource::Hub {
            repo,
            revision,
            commit: Some(sha.into()),
            gguf: Some(Gguf {
                picked: Some(gguf::GgufPick {
                    model: "Q3_K_M/m-Q3_K_M-00001-of-00002.gguf".into(),
                    parts: vec![],
                    mmproj: Some("mmproj-F16.gguf".into()),
                }),
                ..g
            }),
        };
        assert_eq!(
            picked.container_path(),
            format!(
                "/root/.cache/huggingface/hub/models--org--m-GGUF/snapshots/{sha}/Q3_K_M/m-Q3_K_M-00001-of-00002.gguf"
            )
        );
        assert!(
            picked
                .container_mmproj()
                .unwrap()
                .ends_with(&format!("{sha}/mmproj-F16.gguf"))
        );
        // Any Hub model can be read as GGUF file(s): llama.cpp's default quant.
        let plain = ModelSource::parse("org/m-GGUF", None).unwrap();
        assert_eq!(plain.gguf(), None);
        assert_eq!(plain.as_gguf().gguf(), Some(&Gguf::default()));
    }

    #[test]
    fn repo_ids_that_could_escape_or_confuse_the_cache_are_refused() {
        for bad in [
            "", "a/b/c", "org/../x", "org/a--b", "-org/x", "org/x y", "org/",
        ] {
            assert!(RepoId::new(bad).is_err(), "{bad:?} accepted");
        }
        assert!(RepoId::new("gpt2").is_ok());
        assert!(Revision::new("refs/pr/3").is_ok());
        assert_eq!(
            Revision::new("refs/pr/3").unwrap().url_segment(),
            "refs%2Fpr%2F3"
        );
        assert!(Revision::new("../x").is_err());
    }
}
