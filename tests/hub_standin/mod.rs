//! A stand-in for the small part of the Hugging Face Hub that spark-launch uses, on a local
//! port (there is no internet here, and tests must not depend on it):
//!
//! - `GET /api/models/{repo}/revision/{rev}?blobs=true`: `sha`, `gated`, `siblings` with
//!   `size`, `blobId` and `lfs.sha256` (the shape huggingface.co answers with);
//!   `RevisionNotFound`/`RepoNotFound` in `X-Error-Code` as the Hub does.
//! - `GET|HEAD /{repo}/resolve/{commit}/{path}`: small files answered directly, LFS files with
//!   a 302 to `/cdn/<sha256>` as the Hub redirects to its CDN; gated repos answer 401 without
//!   a token and 403 with a token that has no access (`X-Error-Code: GatedRepo`).
//! - `Range: bytes=a-b` → 206 with `Content-Range`.
//!
//! It can be told to fail every range request after N successful ones (the download is cut
//! mid-way) and counts the requests it served.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// One file of a fake repo.
#[derive(Clone)]
pub struct FakeFile {
    pub path: String,
    pub content: Vec<u8>,
    pub lfs: bool,
}

/// A fake repo at one commit.
#[derive(Clone)]
pub struct FakeRepo {
    pub id: String,
    pub commit: String,
    pub gated: bool,
    /// The token that has access (for gated repos).
    pub token: Option<String>,
    pub files: Vec<FakeFile>,
}

pub fn sha256_hex(data: &[u8]) -> String {
    let d = Sha256::digest(data);
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// The git blob sha1 of `data`, computed by `git hash-object`'s definition with `sha1sum`.
pub fn git_sha1_hex(data: &[u8]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("blob");
    let mut content = format!("blob {}\0", data.len()).into_bytes();
    content.extend_from_slice(data);
    std::fs::write(&f, content).unwrap();
    let out = Command::new("sha1sum").arg(&f).output().expect("sha1sum");
    String::from_utf8(out.stdout).unwrap()[..40].to_string()
}

/// Deterministic pseudo-random bytes.
pub fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

impl FakeFile {
    pub fn blob(&self) -> String {
        if self.lfs {
            sha256_hex(&self.content)
        } else {
            git_sha1_hex(&self.content)
        }
    }
}

/// A small model: two small files (one nested) and one LFS weight file.
pub fn tiny_repo(id: &str, weights: usize) -> FakeRepo {
    FakeRepo {
        id: id.to_string(),
        commit: "3a5c0ffee0ddba11c0ffee0ddba11c0ffee0dd00".to_string(),
        gated: false,
        token: None,
        files: vec![
            FakeFile {
                path: "config.json".into(),
                content: br#"{"architectures":["TinyForCausalLM"],"hidden_size":64}"#.to_vec(),
                lfs: false,
            },
            FakeFile {
                path: "tokenizer/tokenizer.json".into(),
                content: bytes(2, 3000),
                lfs: false,
            },
            FakeFile {
                path: "model.safetensors".into(),
                content: bytes(1, weights),
                lfs: true,
            },
        ],
    }
}

/// A GGUF repository in the layout llama.cpp's `-hf` picks from (its own resolution test
/// models the same: quants at the root, a large one split in a folder named after it, a
/// projector at the root): `QUANT` files, a README, nothing else.
pub fn gguf_repo(id: &str) -> FakeRepo {
    let lfs = |path: &str, seed: u64, len: usize| FakeFile {
        path: path.into(),
        content: bytes(seed, len),
        lfs: true,
    };
    FakeRepo {
        id: id.to_string(),
        commit: "9e1f0ca7c0ffee0ddba11c0ffee0ddba11c0ffee".to_string(),
        gated: false,
        token: None,
        files: vec![
            FakeFile {
                path: "README.md".into(),
                content: b"# m-GGUF\n".to_vec(),
                lfs: false,
            },
            lfs("Q3_K_M/m-Q3_K_M-00001-of-00002.gguf", 11, 150_000),
            lfs("Q3_K_M/m-Q3_K_M-00002-of-00002.gguf", 12, 90_000),
            lfs("m-Q4_K_M.gguf", 13, 200_000),
            lfs("m-Q8_0.gguf", 14, 300_000),
            lfs("mmproj-F16.gguf", 15, 40_000),
        ],
    }
}

#[derive(Default)]
struct State {
    repos: Vec<FakeRepo>,
    fail_ranges_after: Option<usize>,
}

/// The running stand-in.
pub struct HubStandin {
    pub url: String,
    state: Arc<Mutex<State>>,
    pub range_requests: Arc<AtomicUsize>,
    pub api_requests: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for HubStandin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl HubStandin {
    pub async fn start(repos: Vec<FakeRepo>) -> HubStandin {
        Self::serve(repos, TcpListener::bind("127.0.0.1:0").await.unwrap())
    }

    /// The same, listening on 127.0.0.1 inside the network namespace `netns` (a path under
    /// `/var/run/netns`): a simulated node reaches it as its own loopback service.
    pub async fn start_in_netns(repos: Vec<FakeRepo>, netns: &std::path::Path) -> HubStandin {
        let netns = netns.to_path_buf();
        let std_listener = std::thread::spawn(move || {
            use std::os::fd::AsRawFd;
            let f = std::fs::File::open(&netns)
                .unwrap_or_else(|e| panic!("open {}: {e}", netns.display()));
            // Only this short-lived thread enters the namespace; the socket stays in it.
            let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(
                rc,
                0,
                "setns {}: {}",
                netns.display(),
                std::io::Error::last_os_error()
            );
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.set_nonblocking(true).unwrap();
            l
        })
        .join()
        .unwrap();
        Self::serve(repos, TcpListener::from_std(std_listener).unwrap())
    }

    fn serve(repos: Vec<FakeRepo>, listener: TcpListener) -> HubStandin {
        let url = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::new(Mutex::new(State {
            repos,
            fail_ranges_after: None,
        }));
        let range_requests = Arc::new(AtomicUsize::new(0));
        let api_requests = Arc::new(AtomicUsize::new(0));
        let (s, r, a) = (state.clone(), range_requests.clone(), api_requests.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut sock, _)) = listener.accept().await else {
                    return;
                };
                let (s, r, a) = (s.clone(), r.clone(), a.clone());
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        match sock.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let req = String::from_utf8_lossy(&buf).to_string();
                    let reply = answer(&req, &s, &r, &a);
                    let _ = sock.write_all(&reply).await;
                    let _ = sock.shutdown().await;
                });
            }
        });
        HubStandin {
            url,
            state,
            range_requests,
            api_requests,
            task,
        }
    }

    /// Every range request after the next `n` answers 500 (a download cut mid-way).
    pub fn fail_ranges_after(&self, n: Option<usize>) {
        let served = self.range_requests.load(Ordering::SeqCst);
        self.state.lock().unwrap().fail_ranges_after = n.map(|n| served + n);
    }
}

fn response(status: &str, headers: &[(&str, String)], body: &[u8], head: bool) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {status}\r\nConnection: close\r\n");
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    let mut out = out.into_bytes();
    if !head {
        out.extend_from_slice(body);
    }
    out
}

fn answer(req: &str, state: &Mutex<State>, ranges: &AtomicUsize, api: &AtomicUsize) -> Vec<u8> {
    let mut lines = req.split("\r\n");
    let first = lines.next().unwrap_or("");
    let mut parts = first.split(' ');
    let method = parts.next().unwrap_or("");
    let target = parts.next().unwrap_or("");
    let headers: BTreeMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let head = method == "HEAD";
    let st = state.lock().unwrap();
    let not_found = |code: &str| {
        response(
            "404 Not Found",
            &[("X-Error-Code", code.to_string())],
            b"{\"error\":\"not found\"}",
            head,
        )
    };

    if let Some(rest) = target.strip_prefix("/api/models/") {
        api.fetch_add(1, Ordering::SeqCst);
        let rest = rest.split('?').next().unwrap_or("");
        let Some((id, rev)) = rest.split_once("/revision/") else {
            return not_found("RepoNotFound");
        };
        let Some(repo) = st.repos.iter().find(|r| r.id == id) else {
            return response(
                "401 Unauthorized",
                &[("X-Error-Code", "RepoNotFound".into())],
                b"{}",
                head,
            );
        };
        if rev != "main" && rev != repo.commit {
            return not_found("RevisionNotFound");
        }
        let siblings: Vec<String> = repo
            .files
            .iter()
            .map(|f| {
                if f.lfs {
                    format!(
                        r#"{{"rfilename":"{}","blobId":"{}","size":130,"lfs":{{"sha256":"{}","size":{},"pointerSize":130}}}}"#,
                        f.path,
                        git_sha1_hex(b"pointer"),
                        f.blob(),
                        f.content.len()
                    )
                } else {
                    format!(
                        r#"{{"rfilename":"{}","blobId":"{}","size":{}}}"#,
                        f.path,
                        f.blob(),
                        f.content.len()
                    )
                }
            })
            .collect();
        let body = format!(
            r#"{{"id":"{}","sha":"{}","gated":{},"private":false,"siblings":[{}]}}"#,
            repo.id,
            repo.commit,
            if repo.gated { "\"manual\"" } else { "false" },
            siblings.join(",")
        );
        return response("200 OK", &[], body.as_bytes(), head);
    }

    let serve = |content: &[u8]| -> Vec<u8> {
        if let Some(range) = headers.get("range") {
            let n = ranges.fetch_add(1, Ordering::SeqCst);
            if st.fail_ranges_after.is_some_and(|limit| n >= limit) {
                return response("500 Internal Server Error", &[], b"cut", head);
            }
            let spec = range.trim_start_matches("bytes=");
            let (a, b) = spec.split_once('-').unwrap_or(("0", ""));
            let a: usize = a.parse().unwrap_or(0);
            let b: usize = b.parse().unwrap_or(content.len().saturating_sub(1));
            let b = b.min(content.len().saturating_sub(1));
            return response(
                "206 Partial Content",
                &[("Content-Range", format!("bytes {a}-{b}/{}", content.len()))],
                &content[a..=b],
                head,
            );
        }
        response(
            "200 OK",
            &[("ETag", format!("\"{}\"", sha256_hex(content)))],
            content,
            head,
        )
    };

    if let Some(sha) = target.strip_prefix("/cdn/") {
        for repo in &st.repos {
            if let Some(f) = repo.files.iter().find(|f| f.lfs && f.blob() == sha) {
                return serve(&f.content);
            }
        }
        return not_found("EntryNotFound");
    }

    // /{org}/{name}/resolve/{commit}/{path}
    let Some((id, rest)) = target.trim_start_matches('/').split_once("/resolve/") else {
        return not_found("EntryNotFound");
    };
    let Some(repo) = st.repos.iter().find(|r| r.id == id) else {
        return not_found("RepoNotFound");
    };
    let Some((commit, path)) = rest.split_once('/') else {
        return not_found("EntryNotFound");
    };
    if commit != repo.commit && commit != "main" {
        return not_found("RevisionNotFound");
    }
    if repo.gated {
        let auth = headers.get("authorization").cloned();
        let ok = match (&auth, &repo.token) {
            (Some(a), Some(t)) => a == &format!("Bearer {t}"),
            _ => false,
        };
        if !ok {
            let status = if auth.is_some() {
                "403 Forbidden"
            } else {
                "401 Unauthorized"
            };
            return response(
                status,
                &[
                    ("X-Error-Code", "GatedRepo".into()),
                    (
                        "X-Error-Message",
                        format!("Access to model {} is restricted.", repo.id),
                    ),
                ],
                b"",
                head,
            );
        }
    }
    let path = path.replace("%20", " ").replace("%2B", "+");
    let Some(f) = repo.files.iter().find(|f| f.path == path) else {
        return not_found("EntryNotFound");
    };
    if f.lfs {
        return response(
            "302 Found",
            &[
                ("Location", format!("/cdn/{}", f.blob())),
                ("X-Linked-Size", f.content.len().to_string()),
                ("X-Repo-Commit", repo.commit.clone()),
            ],
            b"",
            head,
        );
    }
    serve(&f.content)
}
