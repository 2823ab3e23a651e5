//! The small part of the Hugging Face Hub API that staging uses, behind a transport trait.
//!
//! - `GET {endpoint}/api/models/{repo}/revision/{rev}?blobs=true`: the commit a revision
//!   points to, whether the repo is gated, and every file with its size and blob id (the LFS
//!   sha256 for large files, the git blob sha1 for the others). Those ids are the file names
//!   under `blobs/` in the cache, so the whole download is planned before a byte moves.
//! - `HEAD {endpoint}/{repo}/resolve/{commit}/{file}`: proves that the token can read a gated
//!   repo (the API answers a gated repo's metadata to anyone; only downloads are refused).
//! - `GET {endpoint}/{repo}/resolve/{commit}/{file}` with `Range`: the download itself, done
//!   on the head by the fetch script (see [`super::script`]).
//!
//! Pure: [`resolve`] drives a [`HubTransport`] and interprets its answers; the transport that
//! really talks HTTP (curl on the head, so the download happens where the weights belong) lives
//! in `apply`. Tests use a stand-in HTTP server.

use std::collections::BTreeSet;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

use super::gguf::{self, Gguf, GgufError};
use super::{ModelSource, RepoId, Revision, is_commit};

/// An HTTP answer, reduced to what the interpretation needs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HubResponse {
    pub status: u16,
    /// `X-Error-Code` (`GatedRepo`, `RepoNotFound`, `RevisionNotFound`, ...).
    pub error_code: Option<String>,
    /// `X-Error-Message`.
    pub error_message: Option<String>,
    pub body: String,
}

/// Sends requests to the Hub. `auth` asks for the `Authorization: Bearer $HF_TOKEN` header;
/// the implementation never puts the token on a command line.
pub trait HubTransport: Send + Sync {
    fn get(&self, url: &str, auth: bool) -> BoxFuture<'_, Result<HubResponse, TransportError>>;
    fn head(&self, url: &str, auth: bool) -> BoxFuture<'_, Result<HubResponse, TransportError>>;
}

/// The request could not be made at all (no network, curl missing, ...).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TransportError(pub String);

/// How a blob is named and checked.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "algo", content = "hex", rename_all = "kebab-case")]
pub enum BlobId {
    /// LFS files: the sha256 of the content.
    Sha256(String),
    /// Other files: the git blob sha1 (`sha1("blob <size>\0" + content)`).
    GitSha1(String),
}

impl BlobId {
    /// The file name under `blobs/`.
    pub fn name(&self) -> &str {
        match self {
            BlobId::Sha256(h) | BlobId::GitSha1(h) => h,
        }
    }
}

/// One file of a repository at a commit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HubFile {
    /// Path inside the repo (`model-00001-of-00002.safetensors`, `tokenizer/vocab.json`).
    pub path: String,
    pub size: u64,
    pub blob: BlobId,
}

/// Whether downloads need a token with granted access.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Gated {
    No,
    Auto,
    Manual,
}

/// A revision resolved to a commit and its files (of a GGUF spec, only the files it picked).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resolved {
    pub repo: RepoId,
    pub revision: Revision,
    pub commit: String,
    pub gated: Gated,
    pub files: Vec<HubFile>,
    /// The GGUF spec and what it picked (`files` are then those files only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gguf: Option<Gguf>,
}

impl Resolved {
    /// Keeps only the GGUF file(s) `spec` picks from the listing (llama.cpp's `-hf` rules,
    /// `model::gguf`), and records what it picked.
    pub fn picking(mut self, spec: &Gguf) -> Result<Resolved, HubError> {
        let listing: Vec<&str> = self.files.iter().map(|f| f.path.as_str()).collect();
        let picked =
            gguf::pick(spec.quant.as_deref(), &listing).map_err(|problem| HubError::Gguf {
                repo: self.repo.clone(),
                revision: self.revision.clone(),
                problem,
            })?;
        self.files
            .retain(|f| picked.files().any(|p| p == f.path.as_str()));
        self.gguf = Some(Gguf {
            quant: spec.quant.clone(),
            picked: Some(picked),
        });
        Ok(self)
    }

    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }

    pub fn source(&self) -> ModelSource {
        ModelSource::Hub {
            repo: self.repo.clone(),
            revision: self.revision.clone(),
            commit: Some(self.commit.clone()),
            gguf: self.gguf.clone(),
        }
    }
}

/// Why a model could not be resolved. Every message says what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HubError {
    #[error(
        "{repo} is gated on Hugging Face and no HF_TOKEN is set: accept its terms at {endpoint}/{repo}, then export HF_TOKEN=<a read token of that account> (nothing was started)"
    )]
    GatedNoToken { repo: RepoId, endpoint: String },
    #[error(
        "HF_TOKEN has no access to the gated repo {repo} (HTTP {status}{detail}): request access at {endpoint}/{repo} with the account of this token, or use another token (nothing was started)"
    )]
    NoAccess {
        repo: RepoId,
        endpoint: String,
        status: u16,
        detail: String,
    },
    #[error(
        "{repo} was not found on {endpoint} (HTTP {status}){hint}: check the spelling, or set HF_TOKEN if the repo is private"
    )]
    NotFound {
        repo: RepoId,
        endpoint: String,
        status: u16,
        hint: String,
    },
    #[error(
        "{repo} has no revision {revision:?} on {endpoint}: use a branch, tag or commit that exists"
    )]
    NoRevision {
        repo: RepoId,
        revision: Revision,
        endpoint: String,
    },
    #[error("the Hub answered HTTP {status} for {url}{detail}")]
    Http {
        url: String,
        status: u16,
        detail: String,
    },
    #[error("unexpected answer from {url}: {problem}")]
    Malformed { url: String, problem: String },
    #[error("cannot reach the Hub at {endpoint}: {cause} (set HF_ENDPOINT for a mirror)")]
    Unreachable { endpoint: String, cause: String },
    /// A GGUF spec that picks nothing from the repository's listing.
    #[error("{repo}@{revision} {problem}")]
    Gguf {
        repo: RepoId,
        revision: Revision,
        problem: GgufError,
    },
}

impl HubError {
    /// The user's to fix (a gated or missing model, a revision that does not exist, a GGUF
    /// spec that picks nothing): a refusal, exit 2.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            HubError::GatedNoToken { .. }
                | HubError::NoAccess { .. }
                | HubError::NotFound { .. }
                | HubError::NoRevision { .. }
                | HubError::Gguf { .. }
        )
    }
}

#[derive(Deserialize)]
struct InfoJson {
    sha: Option<String>,
    #[serde(default)]
    gated: GatedJson,
    #[serde(default)]
    siblings: Vec<SiblingJson>,
}

#[derive(Deserialize, Default)]
#[serde(untagged)]
enum GatedJson {
    #[default]
    Missing,
    Bool(bool),
    Text(String),
}

#[derive(Deserialize)]
struct SiblingJson {
    rfilename: String,
    size: Option<u64>,
    #[serde(rename = "blobId")]
    blob_id: Option<String>,
    lfs: Option<LfsJson>,
}

#[derive(Deserialize)]
struct LfsJson {
    sha256: String,
    size: u64,
}

/// The model-info URL of a revision.
pub fn info_url(endpoint: &str, repo: &RepoId, revision: &Revision) -> String {
    format!(
        "{}/api/models/{repo}/revision/{}?blobs=true",
        endpoint.trim_end_matches('/'),
        revision.url_segment()
    )
}

/// The download URL of one file at a commit.
pub fn resolve_url(endpoint: &str, repo: &RepoId, commit: &str, path: &str) -> String {
    format!(
        "{}/{}",
        resolve_base(endpoint, repo, commit),
        escape_path(path)
    )
}

/// The URL every file of a commit is downloaded under: `{endpoint}/{repo}/resolve/{commit}`.
pub fn resolve_base(endpoint: &str, repo: &RepoId, commit: &str) -> String {
    format!("{}/{repo}/resolve/{commit}", endpoint.trim_end_matches('/'))
}

/// A repo path with each segment URL-escaped.
pub fn escape_path(path: &str) -> String {
    path.split('/')
        .map(url_escape)
        .collect::<Vec<_>>()
        .join("/")
}

fn url_escape(segment: &str) -> String {
    let mut out = String::new();
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Parses the model-info JSON into files and a commit. Refuses file names that could escape
/// the snapshot folder and blob ids that are not hashes.
pub fn parse_info(
    url: &str,
    repo: &RepoId,
    revision: &Revision,
    body: &str,
) -> Result<Resolved, HubError> {
    let malformed = |problem: String| HubError::Malformed {
        url: url.to_string(),
        problem,
    };
    let info: InfoJson =
        serde_json::from_str(body).map_err(|e| malformed(format!("not model info JSON: {e}")))?;
    let commit = info
        .sha
        .filter(|s| is_commit(s))
        .ok_or_else(|| malformed("no commit sha in the answer".into()))?;
    let gated = match info.gated {
        GatedJson::Missing | GatedJson::Bool(false) => Gated::No,
        GatedJson::Text(t) if t == "manual" => Gated::Manual,
        GatedJson::Bool(true) | GatedJson::Text(_) => Gated::Auto,
    };
    let mut files = Vec::new();
    let mut seen = BTreeSet::new();
    for s in info.siblings {
        if !safe_repo_path(&s.rfilename) {
            return Err(malformed(format!("unsafe file name {:?}", s.rfilename)));
        }
        if !seen.insert(s.rfilename.clone()) {
            continue;
        }
        let (size, blob) = match (s.lfs, s.blob_id, s.size) {
            (Some(lfs), _, _) => {
                let hex = lfs.sha256.to_ascii_lowercase();
                if hex.len() != 64 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
                    return Err(malformed(format!(
                        "{}: LFS sha256 {:?} is not a sha256",
                        s.rfilename, lfs.sha256
                    )));
                }
                (lfs.size, BlobId::Sha256(hex))
            }
            (None, Some(id), Some(size)) if is_commit(&id.to_ascii_lowercase()) => {
                (size, BlobId::GitSha1(id.to_ascii_lowercase()))
            }
            _ => {
                return Err(malformed(format!(
                    "{}: no size or blob id (the info request must ask for ?blobs=true)",
                    s.rfilename
                )));
            }
        };
        files.push(HubFile {
            path: s.rfilename,
            size,
            blob,
        });
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(Resolved {
        repo: repo.clone(),
        revision: revision.clone(),
        commit,
        gated,
        files,
        gguf: None,
    })
}

/// A relative path with no empty, `.` or `..` parts and no control characters.
pub fn safe_repo_path(path: &str) -> bool {
    !path.is_empty()
        && !path.starts_with('/')
        && path
            .split('/')
            .all(|p| !p.is_empty() && p != "." && p != "..")
        && !path.chars().any(|c| c.is_control())
}

/// Resolves a Hub model: its commit, its files, and (for a gated repo) proof that the token
/// can download. Everything that would make the serve fail for lack of access fails here,
/// before any container starts.
pub async fn resolve(
    hub: &dyn HubTransport,
    endpoint: &str,
    repo: &RepoId,
    revision: &Revision,
    have_token: bool,
) -> Result<Resolved, HubError> {
    let endpoint = endpoint.trim_end_matches('/').to_string();
    let url = info_url(&endpoint, repo, revision);
    let answer = hub
        .get(&url, have_token)
        .await
        .map_err(|e| HubError::Unreachable {
            endpoint: endpoint.clone(),
            cause: e.0,
        })?;
    if answer.status != 200 {
        return Err(info_error(
            &endpoint, &url, repo, revision, have_token, &answer,
        ));
    }
    let resolved = parse_info(&url, repo, revision, &answer.body)?;
    if resolved.gated == Gated::No {
        return Ok(resolved);
    }
    if !have_token {
        return Err(HubError::GatedNoToken {
            repo: repo.clone(),
            endpoint,
        });
    }
    // Prove access with the smallest file (config.json when there is one).
    let Some(probe) = resolved
        .files
        .iter()
        .find(|f| f.path == "config.json")
        .or_else(|| resolved.files.iter().min_by_key(|f| f.size))
    else {
        return Ok(resolved);
    };
    let url = resolve_url(&endpoint, repo, &resolved.commit, &probe.path);
    let answer = hub
        .head(&url, true)
        .await
        .map_err(|e| HubError::Unreachable {
            endpoint: endpoint.clone(),
            cause: e.0,
        })?;
    match answer.status {
        200..=399 => Ok(resolved),
        401 | 403 => Err(HubError::NoAccess {
            repo: repo.clone(),
            endpoint,
            status: answer.status,
            detail: detail(&answer),
        }),
        status => Err(HubError::Http {
            url,
            status,
            detail: detail(&answer),
        }),
    }
}

fn detail(a: &HubResponse) -> String {
    match (&a.error_code, &a.error_message) {
        (Some(c), Some(m)) => format!(": {c}: {m}"),
        (Some(c), None) => format!(": {c}"),
        (None, Some(m)) => format!(": {m}"),
        (None, None) => String::new(),
    }
}

fn info_error(
    endpoint: &str,
    url: &str,
    repo: &RepoId,
    revision: &Revision,
    have_token: bool,
    a: &HubResponse,
) -> HubError {
    let code = a.error_code.as_deref().unwrap_or("");
    match (a.status, code) {
        (_, "RevisionNotFound") => HubError::NoRevision {
            repo: repo.clone(),
            revision: revision.clone(),
            endpoint: endpoint.to_string(),
        },
        (_, "GatedRepo") if !have_token => HubError::GatedNoToken {
            repo: repo.clone(),
            endpoint: endpoint.to_string(),
        },
        (401 | 403, "GatedRepo") => HubError::NoAccess {
            repo: repo.clone(),
            endpoint: endpoint.to_string(),
            status: a.status,
            detail: detail(a),
        },
        (401 | 404, _) => HubError::NotFound {
            repo: repo.clone(),
            endpoint: endpoint.to_string(),
            status: a.status,
            hint: if have_token {
                " with this HF_TOKEN".to_string()
            } else {
                String::new()
            },
        },
        (status, _) => HubError::Http {
            url: url.to_string(),
            status,
            detail: detail(a),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    const SHA: &str = "7ae557604adf67be50417f59c2c2f167def9a775";
    const LFS: &str = "fdf756fa7fcbe7404d5c60e26bff1a0c8b8aa1f72ced49e7dd0210fe288fb7fe";

    fn info(gated: &str) -> String {
        format!(
            r#"{{"id":"org/m","sha":"{SHA}","gated":{gated},"siblings":[
              {{"rfilename":"config.json","blobId":"a6344aac8c09253b3b630fb776ae94478aa0275b","size":659}},
              {{"rfilename":"model.safetensors","blobId":"b1","size":135,
                "lfs":{{"sha256":"{LFS}","size":988097824,"pointerSize":135}}}}]}}"#
        )
    }

    /// Answers from a table; records what was asked and whether auth was sent.
    struct Table {
        answers: BTreeMap<String, HubResponse>,
        asked: Mutex<Vec<String>>,
    }

    impl Table {
        fn new(pairs: Vec<(&str, HubResponse)>) -> Self {
            Table {
                answers: pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
                asked: Mutex::new(vec![]),
            }
        }
        fn answer(&self, method: &str, url: &str, auth: bool) -> HubResponse {
            self.asked
                .lock()
                .unwrap()
                .push(format!("{method} {url} auth={auth}"));
            let key = format!("{method} {url}");
            self.answers.get(&key).cloned().unwrap_or(HubResponse {
                status: 404,
                ..Default::default()
            })
        }
    }

    impl HubTransport for Table {
        fn get(&self, url: &str, auth: bool) -> BoxFuture<'_, Result<HubResponse, TransportError>> {
            let a = self.answer("GET", url, auth);
            Box::pin(async move { Ok(a) })
        }
        fn head(
            &self,
            url: &str,
            auth: bool,
        ) -> BoxFuture<'_, Result<HubResponse, TransportError>> {
            let a = self.answer("HEAD", url, auth);
            Box::pin(async move { Ok(a) })
        }
    }

    fn ok(body: String) -> HubResponse {
        HubResponse {
            status: 200,
            body,
            ..Default::default()
        }
    }

    fn repo() -> RepoId {
        RepoId::new("org/m").unwrap()
    }

    const INFO: &str = "GET http://hub/api/models/org/m/revision/main?blobs=true";

    fn run(t: &Table, token: bool) -> Result<Resolved, HubError> {
        futures::executor::block_on(resolve(t, "http://hub/", &repo(), &Revision::main(), token))
    }

    #[test]
    fn an_open_repo_resolves_to_its_commit_and_blob_named_files() {
        let t = Table::new(vec![(INFO, ok(info("false")))]);
        let r = run(&t, false).unwrap();
        assert_eq!(r.commit, SHA);
        assert_eq!(r.gated, Gated::No);
        assert_eq!(r.files.len(), 2);
        assert_eq!(
            r.files[0].blob,
            BlobId::GitSha1("a6344aac8c09253b3b630fb776ae94478aa0275b".into())
        );
        assert_eq!(r.files[1].blob, BlobId::Sha256(LFS.into()));
        assert_eq!(
            r.files[1].size, 988097824,
            "the LFS size, not the pointer's"
        );
    }

    #[test]
    fn a_gated_repo_without_a_token_is_refused_before_any_download() {
        let t = Table::new(vec![(INFO, ok(info("\"manual\"")))]);
        let e = run(&t, false).unwrap_err();
        assert!(matches!(e, HubError::GatedNoToken { .. }));
        let text = e.to_string();
        assert!(text.contains("HF_TOKEN"), "{text}");
        assert!(text.contains("nothing was started"), "{text}");
        assert_eq!(t.asked.lock().unwrap().len(), 1, "no file was requested");
    }

    #[test]
    fn a_gated_repo_with_a_token_is_proven_readable_with_a_head_request() {
        let head = format!("HEAD http://hub/org/m/resolve/{SHA}/config.json");
        let t = Table::new(vec![
            (INFO, ok(info("\"auto\""))),
            (
                &head,
                HubResponse {
                    status: 302,
                    ..Default::default()
                },
            ),
        ]);
        assert!(run(&t, true).is_ok());
        assert!(
            t.asked
                .lock()
                .unwrap()
                .iter()
                .all(|a| a.ends_with("auth=true"))
        );

        let t = Table::new(vec![
            (INFO, ok(info("\"manual\""))),
            (
                &head,
                HubResponse {
                    status: 403,
                    error_code: Some("GatedRepo".into()),
                    error_message: Some("Access to model org/m is restricted".into()),
                    body: String::new(),
                },
            ),
        ]);
        let e = run(&t, true).unwrap_err();
        assert!(matches!(e, HubError::NoAccess { status: 403, .. }), "{e}");
        assert!(e.to_string().contains("request access"), "{e}");
    }

    #[test]
    fn a_missing_repo_or_revision_says_which() {
        let t = Table::new(vec![(
            INFO,
            HubResponse {
                status: 404,
                error_code: Some("RevisionNotFound".into()),
                ..Default::default()
            },
        )]);
        assert!(matches!(run(&t, false), Err(HubError::NoRevision { .. })));
        let t = Table::new(vec![(
            INFO,
            HubResponse {
                status: 401,
                error_code: Some("RepoNotFound".into()),
                ..Default::default()
            },
        )]);
        let e = run(&t, false).unwrap_err();
        assert!(
            e.to_string()
                .contains("set HF_TOKEN if the repo is private"),
            "{e}"
        );
    }

    #[test]
    fn file_names_that_escape_the_snapshot_are_refused() {
        let body = format!(
            r#"{{"sha":"{SHA}","siblings":[{{"rfilename":"../../etc/x","blobId":"{SHA}","size":1}}]}}"#
        );
        let e = parse_info("u", &repo(), &Revision::main(), &body).unwrap_err();
        assert!(e.to_string().contains("unsafe file name"), "{e}");
    }

    #[test]
    fn download_urls_escape_each_path_segment() {
        assert_eq!(
            resolve_url("http://hub/", &repo(), SHA, "sub dir/a+b.json"),
            format!("http://hub/org/m/resolve/{SHA}/sub%20dir/a%2Bb.json")
        );
    }
}
