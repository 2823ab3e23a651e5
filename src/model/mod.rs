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
pub mod hub;
pub mod manifest;
pub mod pull;
pub mod route;
pub mod script;
pub mod shape;

use std::fmt;

use serde::{Deserialize, Serialize};

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

/// What the user named: a Hub repository at a revision, or a folder on the head.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum ModelSource {
    Hub {
        repo: RepoId,
        revision: Revision,
        /// The commit the revision resolved to; `None` until resolved (dry runs).
        commit: Option<String>,
    },
    Local {
        /// An absolute folder on the head; copied to the same path on every other node.
        path: String,
    },
}

impl ModelSource {
    /// Parses `ORG/NAME`, `ORG/NAME@REVISION` or an absolute path. A `revision` given apart
    /// (`--revision`) wins over one after `@`.
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
        let (id, at_rev) = match model.split_once('@') {
            Some((id, rev)) => (id, Some(rev)),
            None => (model, None),
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
        })
    }

    /// The name the API serves the model under: the repo id, or the folder's name.
    pub fn served_name(&self) -> String {
        match self {
            ModelSource::Hub { repo, .. } => repo.to_string(),
            ModelSource::Local { path } => basename(path).to_string(),
        }
    }

    /// The same source with its commit set (after the Hub resolved the revision).
    pub fn with_commit(&self, sha: &str) -> Self {
        match self {
            ModelSource::Hub { repo, revision, .. } => ModelSource::Hub {
                repo: repo.clone(),
                revision: revision.clone(),
                commit: Some(sha.to_string()),
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

    /// The folder a serving engine is pointed at inside the container: the snapshot of the
    /// resolved commit (or of the revision's name while unresolved), or the mounted folder.
    pub fn container_path(&self) -> String {
        match self {
            ModelSource::Hub {
                repo,
                revision,
                commit,
            } => format!(
                "{CONTAINER_HF_HOME}/hub/{}/snapshots/{}",
                repo.cache_folder(),
                commit.as_deref().unwrap_or(revision.as_str())
            ),
            ModelSource::Local { path } => format!("{CONTAINER_MODELS}/{}", basename(path)),
        }
    }
}

impl fmt::Display for ModelSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelSource::Hub {
                repo,
                revision,
                commit,
            } => match commit {
                Some(c) if c != revision.as_str() => write!(f, "{repo}@{revision} ({c})"),
                _ => write!(f, "{repo}@{revision}"),
            },
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
