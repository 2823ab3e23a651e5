//! What a node has of a model and what it still needs: the scan of a model folder (parsed from
//! the scan script's output), the wanted content (from the Hub's file list or from the head's
//! scan), and the difference between them as byte ranges spread over parallel streams.
//!
//! Pure. The rules:
//! - A file is present when its size and hash match (sha256; for small non-LFS Hub files the
//!   git blob sha1 the Hub names them by). Present files are skipped.
//! - A file being fetched is written in place as `<path>.sl-partial`; every finished range is
//!   appended to `<path>.sl-ranges`. A later run fetches only the ranges not listed there
//!   (resume after interruption), then checks the whole file before renaming it into place.
//! - Symlinks are recreated exactly (relative targets that stay inside the model folder).
//! - Nothing a node has beyond what is wanted is ever deleted.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::hub::{BlobId, HubFile, safe_repo_path};

/// Suffix of a file being fetched.
pub const PARTIAL: &str = ".sl-partial";
/// Suffix of the journal of finished ranges of a file being fetched.
pub const JOURNAL: &str = ".sl-ranges";
/// Default range size: small enough for fine progress and cheap retries, large enough that
/// per-range process start-up is noise.
pub const DEFAULT_RANGE: u64 = 64 * 1024 * 1024;

/// A regular file as scanned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScannedFile {
    pub size: u64,
    pub sha256: Option<String>,
    /// Only computed for blobs named by a git sha1 (small non-LFS Hub files).
    pub git_sha1: Option<String>,
}

/// A file being fetched: its partial size and the ranges its journal lists as done.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partial {
    pub size: u64,
    pub done: Vec<Range>,
}

/// Everything found under a model folder (paths relative to it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scan {
    pub files: BTreeMap<String, ScannedFile>,
    pub links: BTreeMap<String, String>,
    pub partial: BTreeMap<String, Partial>,
}

/// A byte range `[offset, offset + len)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Range {
    pub offset: u64,
    pub len: u64,
}

impl Range {
    pub fn end(&self) -> u64 {
        self.offset + self.len
    }
}

/// How a fetched file is checked before it is renamed into place.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "algo", content = "hex", rename_all = "kebab-case")]
pub enum ContentHash {
    Sha256(String),
    GitSha1(String),
}

impl From<&BlobId> for ContentHash {
    fn from(b: &BlobId) -> Self {
        match b {
            BlobId::Sha256(h) => ContentHash::Sha256(h.clone()),
            BlobId::GitSha1(h) => ContentHash::GitSha1(h.clone()),
        }
    }
}

/// One file a node must have.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WantFile {
    /// Relative to the model folder (`blobs/<etag>` in the Hub layout).
    pub path: String,
    pub size: u64,
    pub check: ContentHash,
    /// Where the bytes come from, relative to the source (the Hub path, or the same path on
    /// the head).
    pub source: String,
}

/// Everything a node must have under the model folder.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Wanted {
    pub files: Vec<WantFile>,
    /// Symlink path → target, both relative.
    pub links: BTreeMap<String, String>,
    /// Small text files written directly (`refs/main` → the commit).
    pub texts: BTreeMap<String, String>,
}

impl Wanted {
    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }

    /// The Hub layout for one commit: `blobs/<etag>` for every file, `snapshots/<commit>/<path>`
    /// symlinks into them and `refs/<revision>` naming the commit (unless the revision is the
    /// commit itself).
    pub fn hub_layout(commit: &str, revision: &str, files: &[HubFile]) -> Wanted {
        let mut w = Wanted::default();
        let mut blobs = BTreeMap::new();
        for f in files {
            let blob = format!("blobs/{}", f.blob.name());
            blobs.entry(blob.clone()).or_insert(WantFile {
                path: blob.clone(),
                size: f.size,
                check: ContentHash::from(&f.blob),
                source: f.path.clone(),
            });
            let depth = f.path.matches('/').count() + 2;
            let target = format!("{}{blob}", "../".repeat(depth));
            w.links
                .insert(format!("snapshots/{commit}/{}", f.path), target);
        }
        w.files = blobs.into_values().collect();
        if revision != commit {
            w.texts
                .insert(format!("refs/{revision}"), commit.to_string());
        }
        w
    }

    /// What a worker must have to match the head: the wanted files with the hashes the head
    /// computed, the same links and texts. Files the head lacks are left out (the head is
    /// staged first, so this only happens if it failed, and then nothing is copied).
    pub fn from_head(wanted: &Wanted, head: &Scan) -> Result<Wanted, Vec<String>> {
        let mut out = Wanted {
            links: wanted.links.clone(),
            texts: wanted.texts.clone(),
            files: Vec::new(),
        };
        let mut missing = Vec::new();
        for f in &wanted.files {
            match head.files.get(&f.path) {
                Some(s) if s.size == f.size => {
                    let check = match (&f.check, &s.sha256) {
                        (ContentHash::Sha256(h), _) => ContentHash::Sha256(h.clone()),
                        (ContentHash::GitSha1(_), Some(sha)) => ContentHash::Sha256(sha.clone()),
                        (ContentHash::GitSha1(h), None) => ContentHash::GitSha1(h.clone()),
                    };
                    out.files.push(WantFile {
                        path: f.path.clone(),
                        size: f.size,
                        check,
                        source: f.path.clone(),
                    });
                }
                _ => missing.push(f.path.clone()),
            }
        }
        if missing.is_empty() {
            Ok(out)
        } else {
            Err(missing)
        }
    }

    /// A plain folder (a local model): every file with its sha256 and every safe symlink.
    pub fn folder(scan: &Scan) -> Result<Wanted, String> {
        let mut w = Wanted::default();
        for (path, f) in &scan.files {
            let sha = f
                .sha256
                .clone()
                .ok_or_else(|| format!("{path} was not hashed"))?;
            w.files.push(WantFile {
                path: path.clone(),
                size: f.size,
                check: ContentHash::Sha256(sha),
                source: path.clone(),
            });
        }
        for (path, target) in &scan.links {
            if !link_stays_inside(path, target) {
                return Err(format!(
                    "{path} is a symlink to {target}, outside the model folder: copy the file itself into the folder"
                ));
            }
            w.links.insert(path.clone(), target.clone());
        }
        Ok(w)
    }
}

/// True when a relative symlink at `path` pointing to `target` resolves inside the folder.
pub fn link_stays_inside(path: &str, target: &str) -> bool {
    if target.is_empty() || target.starts_with('/') {
        return false;
    }
    let mut depth: i64 = path.matches('/').count() as i64;
    for part in target.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                depth -= 1;
                if depth < 0 {
                    return false;
                }
            }
            _ => depth += 1,
        }
    }
    true
}

/// One file to fetch, with the ranges still missing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FetchFile {
    pub path: String,
    pub source: String,
    pub size: u64,
    pub check: ContentHash,
    pub ranges: Vec<Range>,
    /// Bytes already fetched by an earlier, interrupted run.
    pub resumed: u64,
}

impl FetchFile {
    pub fn missing_bytes(&self) -> u64 {
        self.ranges.iter().map(|r| r.len).sum()
    }
}

/// What one node must do to have a model.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StagePlan {
    pub fetch: Vec<FetchFile>,
    /// Symlinks to create or correct.
    pub links: BTreeMap<String, String>,
    pub texts: BTreeMap<String, String>,
    pub present_files: usize,
    pub present_bytes: u64,
}

impl StagePlan {
    /// Nothing to fetch, link or write.
    pub fn is_noop(&self) -> bool {
        self.fetch.is_empty() && self.links.is_empty() && self.texts.is_empty()
    }

    pub fn missing_bytes(&self) -> u64 {
        self.fetch.iter().map(|f| f.missing_bytes()).sum()
    }

    pub fn resumed_bytes(&self) -> u64 {
        self.fetch.iter().map(|f| f.resumed).sum()
    }
}

/// Compares what a node has with what it must have.
pub fn diff(wanted: &Wanted, have: &Scan, range_size: u64) -> StagePlan {
    let range_size = range_size.max(1);
    let mut plan = StagePlan::default();
    for f in &wanted.files {
        if let Some(s) = have.files.get(&f.path)
            && s.size == f.size
            && matches(&f.check, s)
        {
            plan.present_files += 1;
            plan.present_bytes += f.size;
            continue;
        }
        let done: &[Range] = have
            .partial
            .get(&f.path)
            .map(|p| p.done.as_slice())
            .unwrap_or(&[]);
        let ranges = missing_ranges(f.size, range_size, done);
        let missing: u64 = ranges.iter().map(|r| r.len).sum();
        plan.fetch.push(FetchFile {
            path: f.path.clone(),
            source: f.source.clone(),
            size: f.size,
            check: f.check.clone(),
            ranges,
            resumed: f.size - missing,
        });
    }
    for (path, target) in &wanted.links {
        if have.links.get(path) != Some(target) {
            plan.links.insert(path.clone(), target.clone());
        }
    }
    plan.texts = wanted.texts.clone();
    plan
}

fn matches(check: &ContentHash, s: &ScannedFile) -> bool {
    match check {
        ContentHash::Sha256(h) => s.sha256.as_deref() == Some(h.as_str()),
        ContentHash::GitSha1(h) => s.git_sha1.as_deref() == Some(h.as_str()),
    }
}

/// The fixed-size ranges of a file of `size` bytes not fully covered by `done`.
pub fn missing_ranges(size: u64, range_size: u64, done: &[Range]) -> Vec<Range> {
    let mut covered: Vec<Range> = done
        .iter()
        .copied()
        .filter(|r| r.len > 0 && r.end() <= size)
        .collect();
    covered.sort();
    let is_covered = |r: &Range| {
        let mut at = r.offset;
        for c in &covered {
            if c.offset > at {
                break;
            }
            at = at.max(c.end());
            if at >= r.end() {
                return true;
            }
        }
        at >= r.end()
    };
    let mut out = Vec::new();
    let mut offset = 0;
    while offset < size {
        let r = Range {
            offset,
            len: range_size.min(size - offset),
        };
        if !is_covered(&r) {
            out.push(r);
        }
        offset += range_size;
    }
    out
}

/// One range of one file, as a stream processes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Task {
    pub path: String,
    pub source: String,
    pub range: Range,
}

/// Spreads every missing range over at most `streams` streams, balancing bytes (largest
/// first, onto the least loaded stream); each stream keeps file order for locality.
pub fn assign(plan: &StagePlan, streams: usize) -> Vec<Vec<Task>> {
    let streams = streams.max(1);
    let mut tasks: Vec<Task> = plan
        .fetch
        .iter()
        .flat_map(|f| {
            f.ranges.iter().map(|r| Task {
                path: f.path.clone(),
                source: f.source.clone(),
                range: *r,
            })
        })
        .collect();
    let n = streams.min(tasks.len().max(1));
    tasks.sort_by(|a, b| {
        b.range
            .len
            .cmp(&a.range.len)
            .then(a.path.cmp(&b.path))
            .then(a.range.offset.cmp(&b.range.offset))
    });
    let mut out: Vec<(u64, Vec<Task>)> = vec![(0, Vec::new()); n];
    for t in tasks {
        if let Some((load, list)) = out.iter_mut().min_by_key(|(load, _)| *load) {
            *load += t.range.len;
            list.push(t);
        }
    }
    out.into_iter()
        .map(|(_, mut list)| {
            list.sort_by(|a, b| {
                a.path
                    .cmp(&b.path)
                    .then(a.range.offset.cmp(&b.range.offset))
            });
            list
        })
        .filter(|l| !l.is_empty())
        .collect()
}

/// Spreads whole files over at most `streams` long-lived copy streams, balancing the bytes
/// still missing (largest first, onto the least loaded stream); each stream keeps path order.
/// A file stays in one stream so that its bytes arrive in order and are hashed as they arrive.
pub fn assign_files(plan: &StagePlan, streams: usize) -> Vec<Vec<FetchFile>> {
    let mut files = plan.fetch.clone();
    let n = streams.max(1).min(files.len().max(1));
    files.sort_by(|a, b| {
        b.missing_bytes()
            .cmp(&a.missing_bytes())
            .then(a.path.cmp(&b.path))
    });
    let mut out: Vec<(u64, Vec<FetchFile>)> = vec![(0, Vec::new()); n];
    for f in files {
        if let Some((load, list)) = out.iter_mut().min_by_key(|(load, _)| *load) {
            // Even a file with nothing left to send costs a pass over its bytes.
            *load += f.missing_bytes().max(1);
            list.push(f);
        }
    }
    out.into_iter()
        .map(|(_, mut list)| {
            list.sort_by(|a, b| a.path.cmp(&b.path));
            list
        })
        .filter(|l| !l.is_empty())
        .collect()
}

/// Parses the scan script's output (see `script::scan`). Lines:
/// `f<TAB>size<TAB>sha256|-<TAB>gitsha1|-<TAB>path`, `l<TAB>target<TAB>path`,
/// `p<TAB>size<TAB>path` (a partial file), `j<TAB>offset<TAB>len<TAB>path` (a journal entry).
pub fn parse_scan(output: &str) -> Result<Scan, String> {
    let mut scan = Scan::default();
    for (i, line) in output.lines().enumerate() {
        if line.is_empty() {
            continue;
        }
        let bad = || format!("scan output line {}: unexpected {line:?}", i + 1);
        let parts: Vec<&str> = line.split('\t').collect();
        let hash = |s: &str| (s != "-" && !s.is_empty()).then(|| s.to_ascii_lowercase());
        match parts.as_slice() {
            ["f", size, sha, git, path] => {
                let size = size.parse().map_err(|_| bad())?;
                check_path(path).map_err(|_| bad())?;
                scan.files.insert(
                    path.to_string(),
                    ScannedFile {
                        size,
                        sha256: hash(sha),
                        git_sha1: hash(git),
                    },
                );
            }
            ["l", target, path] => {
                check_path(path).map_err(|_| bad())?;
                scan.links.insert(path.to_string(), target.to_string());
            }
            ["p", size, path] => {
                check_path(path).map_err(|_| bad())?;
                scan.partial.entry(path.to_string()).or_default().size =
                    size.parse().map_err(|_| bad())?;
            }
            ["j", offset, len, path] => {
                check_path(path).map_err(|_| bad())?;
                let r = Range {
                    offset: offset.parse().map_err(|_| bad())?,
                    len: len.parse().map_err(|_| bad())?,
                };
                scan.partial
                    .entry(path.to_string())
                    .or_default()
                    .done
                    .push(r);
            }
            _ => return Err(bad()),
        }
    }
    Ok(scan)
}

fn check_path(path: &str) -> Result<(), ()> {
    if safe_repo_path(path) {
        Ok(())
    } else {
        Err(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA_A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const GIT_B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
    const COMMIT: &str = "cccccccccccccccccccccccccccccccccccccccc";

    fn hub_files() -> Vec<HubFile> {
        vec![
            HubFile {
                path: "model.safetensors".into(),
                size: 1000,
                blob: BlobId::Sha256(SHA_A.into()),
            },
            HubFile {
                path: "tokenizer/vocab.json".into(),
                size: 10,
                blob: BlobId::GitSha1(GIT_B.into()),
            },
        ]
    }

    #[test]
    fn the_hub_layout_links_snapshots_to_blobs_with_relative_targets() {
        let w = Wanted::hub_layout(COMMIT, "main", &hub_files());
        assert_eq!(
            w.links[&format!("snapshots/{COMMIT}/model.safetensors")],
            format!("../../blobs/{SHA_A}")
        );
        assert_eq!(
            w.links[&format!("snapshots/{COMMIT}/tokenizer/vocab.json")],
            format!("../../../blobs/{GIT_B}")
        );
        for (path, target) in &w.links {
            assert!(link_stays_inside(path, target), "{path} -> {target}");
        }
        assert_eq!(w.texts["refs/main"], COMMIT);
        assert_eq!(w.files[0].source, "model.safetensors");
        assert!(
            Wanted::hub_layout(COMMIT, COMMIT, &hub_files())
                .texts
                .is_empty()
        );
    }

    #[test]
    fn files_with_the_same_size_and_hash_are_skipped_and_others_fetched_whole() {
        let w = Wanted::hub_layout(COMMIT, "main", &hub_files());
        let mut have = Scan::default();
        have.files.insert(
            format!("blobs/{SHA_A}"),
            ScannedFile {
                size: 1000,
                sha256: Some(SHA_A.into()),
                git_sha1: None,
            },
        );
        have.files.insert(
            format!("blobs/{GIT_B}"),
            ScannedFile {
                size: 10,
                sha256: Some("x".into()),
                git_sha1: Some("0".repeat(40)),
            },
        );
        let p = diff(&w, &have, 400);
        assert_eq!(p.present_files, 1);
        assert_eq!(
            p.fetch.len(),
            1,
            "the corrupted small file is fetched again"
        );
        assert_eq!(p.fetch[0].path, format!("blobs/{GIT_B}"));
        assert_eq!(p.links.len(), 2);
    }

    #[test]
    fn a_second_run_on_a_complete_node_has_nothing_to_do() {
        let w = Wanted::hub_layout(COMMIT, COMMIT, &hub_files()[..1]);
        let mut have = Scan::default();
        have.files.insert(
            format!("blobs/{SHA_A}"),
            ScannedFile {
                size: 1000,
                sha256: Some(SHA_A.into()),
                git_sha1: None,
            },
        );
        have.links = w.links.clone();
        assert!(diff(&w, &have, 100).is_noop());
    }

    #[test]
    fn an_interrupted_fetch_resumes_with_only_the_ranges_its_journal_lacks() {
        let w = Wanted::hub_layout(COMMIT, "main", &hub_files()[..1]);
        let mut have = Scan::default();
        have.partial.insert(
            format!("blobs/{SHA_A}"),
            Partial {
                size: 1000,
                done: vec![
                    Range {
                        offset: 0,
                        len: 400,
                    },
                    Range {
                        offset: 800,
                        len: 200,
                    },
                ],
            },
        );
        let p = diff(&w, &have, 400);
        assert_eq!(
            p.fetch[0].ranges,
            vec![Range {
                offset: 400,
                len: 400
            }]
        );
        assert_eq!(p.fetch[0].resumed, 600);
        assert_eq!(p.missing_bytes(), 400);
    }

    #[test]
    fn a_journal_written_with_another_range_size_still_counts_where_it_covers() {
        let done = [
            Range {
                offset: 0,
                len: 100,
            },
            Range {
                offset: 100,
                len: 100,
            },
            Range {
                offset: 250,
                len: 50,
            },
        ];
        assert_eq!(
            missing_ranges(400, 200, &done),
            vec![Range {
                offset: 200,
                len: 200
            }]
        );
        assert_eq!(missing_ranges(0, 200, &[]), vec![]);
    }

    #[test]
    fn ranges_are_balanced_over_streams_by_bytes() {
        let plan = StagePlan {
            fetch: vec![
                FetchFile {
                    path: "a".into(),
                    source: "a".into(),
                    size: 900,
                    check: ContentHash::Sha256(SHA_A.into()),
                    ranges: missing_ranges(900, 300, &[]),
                    resumed: 0,
                },
                FetchFile {
                    path: "b".into(),
                    source: "b".into(),
                    size: 300,
                    check: ContentHash::Sha256(SHA_A.into()),
                    ranges: missing_ranges(300, 300, &[]),
                    resumed: 0,
                },
            ],
            ..Default::default()
        };
        let streams = assign(&plan, 4);
        assert_eq!(streams.len(), 4);
        assert!(streams.iter().all(|s| s.len() == 1));
        let streams = assign(&plan, 2);
        let loads: Vec<u64> = streams
            .iter()
            .map(|s| s.iter().map(|t| t.range.len).sum())
            .collect();
        assert_eq!(loads, vec![600, 600]);
        assert!(assign(&StagePlan::default(), 8).is_empty());
    }

    #[test]
    fn whole_files_are_spread_over_few_streams_by_the_bytes_they_still_need() {
        let file = |path: &str, size: u64| FetchFile {
            path: path.into(),
            source: path.into(),
            size,
            check: ContentHash::Sha256(SHA_A.into()),
            ranges: missing_ranges(size, 100, &[]),
            resumed: 0,
        };
        let plan = StagePlan {
            fetch: vec![
                file("a", 900),
                file("b", 500),
                file("c", 400),
                file("d", 50),
            ],
            ..Default::default()
        };
        let streams = assign_files(&plan, 2);
        let names: Vec<Vec<&str>> = streams
            .iter()
            .map(|s| s.iter().map(|f| f.path.as_str()).collect())
            .collect();
        assert_eq!(names, vec![vec!["a", "d"], vec!["b", "c"]]);
        assert_eq!(assign_files(&plan, 8).len(), 4);
        assert!(assign_files(&StagePlan::default(), 4).is_empty());
    }

    #[test]
    fn the_scan_output_parses_files_links_partials_and_journals() {
        let out = format!(
            "f\t1000\t{SHA_A}\t-\tblobs/{SHA_A}\nl\t../../blobs/{SHA_A}\tsnapshots/{COMMIT}/model.safetensors\np\t1000\tblobs/{GIT_B}\nj\t0\t5\tblobs/{GIT_B}\n"
        );
        let s = parse_scan(&out).unwrap();
        assert_eq!(s.files[&format!("blobs/{SHA_A}")].size, 1000);
        assert_eq!(s.links.len(), 1);
        assert_eq!(
            s.partial[&format!("blobs/{GIT_B}")],
            Partial {
                size: 1000,
                done: vec![Range { offset: 0, len: 5 }]
            }
        );
        assert!(parse_scan("f\t1\t-\t-\t../x\n").is_err());
        assert!(parse_scan("garbage\n").is_err());
    }

    #[test]
    fn a_folder_with_a_symlink_outside_itself_is_refused() {
        let mut s = Scan::default();
        s.links.insert("a/b".into(), "../../etc/passwd".into());
        assert!(
            Wanted::folder(&s)
                .unwrap_err()
                .contains("outside the model folder")
        );
        s.links.clear();
        s.links.insert("a/b".into(), "../c".into());
        assert!(Wanted::folder(&s).is_ok());
    }
}
