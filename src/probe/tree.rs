//! A snapshot as a file tree that the reader walks: either a folder on disk (`--root DIR`,
//! `--snapshot NAME=DIR`) or the text stream that the emitter script prints on a live node
//! (locally or over SSH). Both give the reader the same view, so one reader serves all.
//!
//! A folder is foreign input and is read defensively: regular files only (a FIFO, a device
//! such as `/dev/zero` or a socket is refused, never opened for reading), at most
//! [`MAX_FILE_BYTES`] per file, and nothing outside the snapshot's root: a symlink that
//! resolves out of it (`etc/nccl.conf -> /etc/shadow`) is refused, not followed. Each refusal
//! is recorded ([`DirTree::refusals`]) so the caller can refuse the snapshot naming the file.
//!
//! The stream format is line-based and safe for any file content:
//!
//! ```text
//! #spark-launch-snapshot 1
//! @sys/class/net/enp1s0f1np1/mtu      a file follows; each content line starts with '|'
//! |9000
//! !sys/class/net/enp1s0f0np0/carrier  the file exists but could not be read
//! +sys/class/infiniband/rocep1s0f1/device/net/enp1s0f1np1   a folder (may be empty)
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};

/// The first line of every snapshot stream.
pub const STREAM_HEADER: &str = "#spark-launch-snapshot 1";

/// What reading one path of a snapshot gave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Read {
    /// The file's content, exactly as stored (trailing newline included if there was one).
    Value(String),
    /// The file exists but could not be read (sysfs refuses some reads, e.g. empty GID slots).
    Unreadable,
    /// No such file.
    Missing,
}

impl Read {
    /// The content without surrounding whitespace, or `None` when missing, unreadable or empty.
    pub fn value(self) -> Option<String> {
        match self {
            Read::Value(v) => {
                let t = v.trim();
                (!t.is_empty()).then(|| t.to_string())
            }
            _ => None,
        }
    }

    /// [`Read::value`] as one printable line: foreign bytes with their control characters (line
    /// breaks included) escaped, see `text`. What the fact reader keeps of single-line files.
    pub fn line(self) -> Option<String> {
        self.value()
            .map(|v| crate::text::printable(&v).into_owned())
    }
}

/// A read-only view of a snapshot.
pub trait Tree {
    /// Reads one file, by its path relative to the snapshot root (`sys/class/net/eth0/mtu`).
    fn read(&self, path: &str) -> Read;
    /// The names inside a folder, sorted; empty when the folder does not exist.
    fn list(&self, dir: &str) -> Vec<String>;
    /// True when `path` exists as a file or folder.
    fn exists(&self, path: &str) -> bool;
}

/// The largest file a snapshot folder may hold (an `ip -j addr` of 200,000 interfaces is
/// about 60 MiB).
pub const MAX_FILE_BYTES: u64 = 128 << 20;

/// A snapshot folder on disk.
#[derive(Debug)]
pub struct DirTree {
    root: PathBuf,
    /// The root with every symlink resolved, once (`None` when it cannot be resolved).
    real_root: Option<PathBuf>,
    refused: std::sync::Mutex<Vec<String>>,
}

/// Where a snapshot path leads.
enum Resolved {
    Missing,
    /// Inside the root, symlinks resolved.
    Inside(PathBuf),
}

impl DirTree {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        let real_root = std::fs::canonicalize(&root).ok();
        DirTree {
            root,
            real_root,
            refused: std::sync::Mutex::new(Vec::new()),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Every path the tree refused to read, with why (empty for a clean snapshot).
    pub fn refusals(&self) -> Vec<String> {
        self.refused.lock().map(|r| r.clone()).unwrap_or_default()
    }

    fn refuse(&self, path: &str, why: &str) {
        if let Ok(mut r) = self.refused.lock() {
            let line = format!("{}: {why}", crate::text::printable(path));
            if !r.contains(&line) {
                r.push(line);
            }
        }
    }

    /// `path` resolved inside the root; a path leading out of it is refused.
    fn resolve(&self, path: &str) -> Resolved {
        let joined = self.root.join(path);
        // A missing path costs one lstat, not a resolution of every component.
        if std::fs::symlink_metadata(&joined).is_err() {
            return Resolved::Missing;
        }
        let (Some(root), Ok(real)) = (&self.real_root, std::fs::canonicalize(&joined)) else {
            return Resolved::Missing;
        };
        if real.starts_with(root) {
            Resolved::Inside(real)
        } else {
            self.refuse(
                path,
                &format!(
                    "a symlink to {} outside the snapshot (not followed)",
                    crate::text::printable(&real.display().to_string())
                ),
            );
            Resolved::Missing
        }
    }
}

impl Clone for DirTree {
    fn clone(&self) -> Self {
        DirTree::new(self.root.clone())
    }
}

impl Tree for DirTree {
    fn read(&self, path: &str) -> Read {
        use std::io::Read as _;
        use std::os::unix::fs::OpenOptionsExt;
        let Resolved::Inside(real) = self.resolve(path) else {
            return Read::Missing;
        };
        let meta = match std::fs::metadata(&real) {
            Ok(m) => m,
            Err(_) => return Read::Unreadable,
        };
        if meta.is_dir() {
            return Read::Missing;
        }
        if !meta.is_file() {
            self.refuse(
                path,
                "not a regular file (a FIFO, device or socket is never read)",
            );
            return Read::Unreadable;
        }
        if meta.len() > MAX_FILE_BYTES {
            self.refuse(
                path,
                &format!(
                    "{} bytes, more than the {MAX_FILE_BYTES} a snapshot file may hold",
                    meta.len()
                ),
            );
            return Read::Unreadable;
        }
        // Non-blocking: should the file be swapped for a FIFO after the check, opening it
        // still returns at once.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&real);
        let mut file = match file {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Read::Missing,
            Err(_) => return Read::Unreadable,
        };
        if !file.metadata().is_ok_and(|m| m.is_file()) {
            self.refuse(
                path,
                "not a regular file (a FIFO, device or socket is never read)",
            );
            return Read::Unreadable;
        }
        let mut bytes = Vec::new();
        match (&mut file).take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes) {
            Ok(n) if n as u64 > MAX_FILE_BYTES => {
                self.refuse(
                    path,
                    &format!("more than the {MAX_FILE_BYTES} bytes a snapshot file may hold"),
                );
                Read::Unreadable
            }
            Ok(_) => Read::Value(String::from_utf8_lossy(&bytes).into_owned()),
            Err(_) => Read::Unreadable,
        }
    }

    fn list(&self, dir: &str) -> Vec<String> {
        let Resolved::Inside(real) = self.resolve(dir) else {
            return Vec::new();
        };
        let Ok(entries) = std::fs::read_dir(real) else {
            return Vec::new();
        };
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    fn exists(&self, path: &str) -> bool {
        matches!(self.resolve(path), Resolved::Inside(_))
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Entry {
    File(String),
    Unreadable,
    Dir,
}

/// A snapshot held in memory, parsed from the emitter's stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemTree {
    entries: BTreeMap<String, Entry>,
}

/// The stream was not a snapshot.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StreamError {
    #[error(
        "not a spark-launch snapshot stream: the first line is {0:?}, expected {STREAM_HEADER:?}"
    )]
    BadHeader(String),
    #[error("snapshot stream line {line}: {message}")]
    BadLine { line: usize, message: String },
}

impl MemTree {
    /// Parses the emitter's output.
    pub fn parse(stream: &str) -> Result<MemTree, StreamError> {
        let mut lines = stream.lines().enumerate();
        match lines.next() {
            Some((_, h)) if h.trim_end() == STREAM_HEADER => {}
            Some((_, h)) => {
                return Err(StreamError::BadHeader(
                    crate::text::printable(h).into_owned(),
                ));
            }
            None => return Err(StreamError::BadHeader(String::new())),
        }
        let mut tree = MemTree::default();
        let mut current: Option<(String, Vec<String>)> = None;
        let mut current_bytes: u64 = 0;
        for (i, line) in lines {
            let (tag, rest) = match line.chars().next() {
                Some(c) => (c, &line[c.len_utf8()..]),
                None => continue,
            };
            if tag == '|' {
                match current.as_mut() {
                    Some((path, content)) => {
                        current_bytes += rest.len() as u64 + 1;
                        if current_bytes > MAX_FILE_BYTES {
                            return Err(StreamError::BadLine {
                                line: i + 1,
                                message: format!(
                                    "{} holds more than the {MAX_FILE_BYTES} bytes a snapshot file may hold",
                                    crate::text::printable(path)
                                ),
                            });
                        }
                        content.push(rest.to_string())
                    }
                    None => {
                        return Err(StreamError::BadLine {
                            line: i + 1,
                            message: "content line before any '@' file line".into(),
                        });
                    }
                }
                continue;
            }
            if let Some((path, content)) = current.take() {
                tree.insert_file(&path, content.join("\n"));
            }
            current_bytes = 0;
            let path = clean_path(rest).ok_or_else(|| StreamError::BadLine {
                line: i + 1,
                message: format!("unsafe or empty path {:?}", crate::text::printable(rest)),
            })?;
            match tag {
                '@' => current = Some((path, Vec::new())),
                '!' => {
                    tree.entries.insert(path, Entry::Unreadable);
                }
                '+' => {
                    tree.entries.insert(path, Entry::Dir);
                }
                '#' => {}
                other => {
                    return Err(StreamError::BadLine {
                        line: i + 1,
                        message: format!("unknown tag {other:?}"),
                    });
                }
            }
        }
        if let Some((path, content)) = current.take() {
            tree.insert_file(&path, content.join("\n"));
        }
        Ok(tree)
    }

    /// Adds a file (used by tests and by [`MemTree::parse`]).
    pub fn insert_file(&mut self, path: &str, content: String) {
        self.entries.insert(path.to_string(), Entry::File(content));
    }

    /// Writes the snapshot as a folder (`probe --capture DIR`). Unreadable files are left out:
    /// a missing file reads back as "no value", which is what an unreadable one means.
    pub fn write_to(&self, dir: &Path) -> io::Result<usize> {
        let mut written = 0;
        std::fs::create_dir_all(dir)?;
        for (path, entry) in &self.entries {
            let target = dir.join(path);
            match entry {
                Entry::Dir => std::fs::create_dir_all(&target)?,
                Entry::File(content) => {
                    if let Some(parent) = target.parent() {
                        std::fs::create_dir_all(parent)?;
                    }
                    let mut text = content.clone();
                    if !text.ends_with('\n') {
                        text.push('\n');
                    }
                    std::fs::write(&target, text)?;
                    written += 1;
                }
                Entry::Unreadable => {}
            }
        }
        Ok(written)
    }

    /// Paths of every file (for tests and diagnostics).
    pub fn files(&self) -> impl Iterator<Item = &str> {
        self.entries
            .iter()
            .filter(|(_, e)| matches!(e, Entry::File(_)))
            .map(|(p, _)| p.as_str())
    }
}

/// Rejects absolute paths and `..` so a stream can never write outside the capture folder.
fn clean_path(p: &str) -> Option<String> {
    let p = p.trim_end_matches('/');
    if p.is_empty() || p.starts_with('/') {
        return None;
    }
    if p.split('/').any(|c| c.is_empty() || c == "." || c == "..") {
        return None;
    }
    Some(p.to_string())
}

impl Tree for MemTree {
    fn read(&self, path: &str) -> Read {
        match self.entries.get(path) {
            Some(Entry::File(c)) => Read::Value(c.clone()),
            Some(Entry::Unreadable) => Read::Unreadable,
            Some(Entry::Dir) | None => Read::Missing,
        }
    }

    fn list(&self, dir: &str) -> Vec<String> {
        let prefix = format!("{}/", dir.trim_end_matches('/'));
        let mut names = BTreeSet::new();
        for path in self.entries.range(prefix.clone()..) {
            let Some(rest) = path.0.strip_prefix(&prefix) else {
                break;
            };
            if let Some(first) = rest.split('/').next() {
                names.insert(first.to_string());
            }
        }
        names.into_iter().collect()
    }

    fn exists(&self, path: &str) -> bool {
        self.entries.contains_key(path) || !self.list(path).is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STREAM: &str = "#spark-launch-snapshot 1\n@hostname\n|spark\n@etc/nccl.conf\n|NCCL_DEBUG=WARN\n|\n|NCCL_IB_HCA=mlx5\n!sys/class/net/eth0/carrier\n+sys/class/infiniband/mlx5_0/device/net/eth0\n@sys/class/net/eth0/mtu\n|1500\n";

    #[test]
    fn a_stream_reads_back_files_multiline_content_unreadable_slots_and_empty_folders() {
        let t = MemTree::parse(STREAM).unwrap();
        assert_eq!(t.read("hostname").value().as_deref(), Some("spark"));
        assert_eq!(
            t.read("etc/nccl.conf"),
            Read::Value("NCCL_DEBUG=WARN\n\nNCCL_IB_HCA=mlx5".into())
        );
        assert_eq!(t.read("sys/class/net/eth0/carrier"), Read::Unreadable);
        assert_eq!(t.read("sys/class/net/eth1/mtu"), Read::Missing);
        assert_eq!(t.list("sys/class/net"), vec!["eth0"]);
        assert_eq!(
            t.list("sys/class/infiniband/mlx5_0/device/net"),
            vec!["eth0"]
        );
        assert_eq!(t.list("sys/class/infiniband"), vec!["mlx5_0"]);
    }

    #[test]
    fn a_stream_with_a_path_escaping_the_root_is_rejected() {
        let err = MemTree::parse("#spark-launch-snapshot 1\n@../etc/passwd\n|x\n").unwrap_err();
        assert!(matches!(err, StreamError::BadLine { line: 2, .. }));
        assert!(MemTree::parse("#spark-launch-snapshot 1\n@/etc/passwd\n").is_err());
    }

    #[test]
    fn output_that_is_not_a_snapshot_names_what_it_got() {
        let err = MemTree::parse("bash: sh: command not found\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "not a spark-launch snapshot stream: the first line is \"bash: sh: command not found\", expected \"#spark-launch-snapshot 1\""
        );
    }

    #[test]
    fn a_written_snapshot_reads_back_the_same_through_a_dir_tree() {
        let t = MemTree::parse(STREAM).unwrap();
        let dir = tempfile::tempdir().unwrap();
        t.write_to(dir.path()).unwrap();
        let d = DirTree::new(dir.path());
        assert_eq!(d.read("hostname").value().as_deref(), Some("spark"));
        assert_eq!(
            d.read("sys/class/net/eth0/mtu").value().as_deref(),
            Some("1500")
        );
        assert_eq!(d.read("sys/class/net/eth0/carrier"), Read::Missing);
        assert_eq!(
            d.list("sys/class/infiniband/mlx5_0/device/net"),
            vec!["eth0"]
        );
    }
}
