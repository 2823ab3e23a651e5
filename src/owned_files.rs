//! A folder of files that spark-launch writes (`compose --out DIR`), and only those: a file
//! already in the folder is replaced only when spark-launch wrote it there and nobody changed
//! it since. What it wrote is recorded beside the files, in [`MANIFEST`] (each file's name and
//! the SHA-256 of the text written), so a second run replaces its own files and refuses,
//! naming each one, a file it did not write (the `README.md` of a checkout's own folder) or
//! one edited since; `--force` replaces those too. Nothing is written through a link: a link
//! in the folder is refused, and with `--force` replaced by a file (never followed). Every
//! check happens before the first write, so a refusal leaves the folder as it was. Files of an
//! earlier run that this run no longer writes (a node that left the cluster) are removed when
//! they are unchanged, so the folder never mixes two plans.
//!
//! Effects: reads and writes the one folder; [`decide`] is the pure rule.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::digest::sha256_hex;

/// The record of what spark-launch wrote into the folder.
pub const MANIFEST: &str = ".spark-launch-files.json";

/// The largest manifest read (a few hundred bytes per file).
const MANIFEST_MAX: crate::input::InputLimit = crate::input::InputLimit {
    max: 1 << 20,
    hint: "it lists a few hundred bytes per file spark-launch wrote; remove it if it is not spark-launch's",
};

/// The manifest's content.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The command that wrote the files (`spark-launch compose`).
    pub written_by: String,
    /// Each file written (a name inside the folder) and the SHA-256 of its text.
    pub files: BTreeMap<String, String>,
}

/// What is at a file's place in the folder now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Existing {
    Absent,
    /// A regular file with this SHA-256.
    File(String),
    /// A symbolic link (never followed).
    Link,
    /// A folder, FIFO, socket or device.
    Other,
}

/// What one file gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileAction {
    /// A new file.
    Create,
    /// spark-launch's own unchanged file, written anew.
    Replace,
    /// A file spark-launch did not write (or one changed since), replaced under `--force`.
    Overwrite,
    /// spark-launch's own unchanged file that this run no longer writes.
    Remove,
}

/// A file the folder holds that spark-launch may not replace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    pub name: String,
    pub why: &'static str,
    /// Whether `--force` would replace it (a folder or device never is).
    pub forcible: bool,
}

/// The rule: for every wanted file (name, SHA-256 of its text) and every file of the last
/// manifest, what to do, or every file that stops the write.
pub fn decide(
    wanted: &[(String, String)],
    existing: &BTreeMap<String, Existing>,
    manifest: &Manifest,
    force: bool,
) -> Result<Vec<(String, FileAction)>, Vec<Refused>> {
    let mut actions = Vec::new();
    let mut refused = Vec::new();
    let at = |name: &str| existing.get(name).cloned().unwrap_or(Existing::Absent);
    let ours = |name: &str, sha: &str| manifest.files.get(name).is_some_and(|s| s == sha);
    for (name, _) in wanted {
        match at(name) {
            Existing::Absent => actions.push((name.clone(), FileAction::Create)),
            Existing::File(sha) if ours(name, &sha) => {
                actions.push((name.clone(), FileAction::Replace))
            }
            Existing::Other => refused.push(Refused {
                name: name.clone(),
                why: "is not a regular file",
                forcible: false,
            }),
            _ if force => actions.push((name.clone(), FileAction::Overwrite)),
            Existing::File(_) if manifest.files.contains_key(name) => refused.push(Refused {
                name: name.clone(),
                why: "was changed since spark-launch wrote it",
                forcible: true,
            }),
            Existing::File(_) => refused.push(Refused {
                name: name.clone(),
                why: "exists and spark-launch did not write it",
                forcible: true,
            }),
            Existing::Link => refused.push(Refused {
                name: name.clone(),
                why: "is a link (never written through)",
                forcible: true,
            }),
        }
    }
    if !refused.is_empty() {
        return Err(refused);
    }
    for (name, sha) in &manifest.files {
        if wanted.iter().any(|(n, _)| n == name) {
            continue;
        }
        if at(name) == Existing::File(sha.clone()) {
            actions.push((name.clone(), FileAction::Remove));
        }
    }
    Ok(actions)
}

/// Why the folder could not be written.
#[derive(Debug, thiserror::Error)]
pub enum OwnedFilesError {
    #[error(
        "{} holds {} that spark-launch will not replace:{}\nfix: choose another --out folder{}",
        .dir.display(),
        if .refused.len() == 1 { "a file" } else { "files" },
        list(.dir, .refused),
        if .refused.iter().all(|r| r.forcible) { ", or add --force to replace them" } else { "" }
    )]
    Refused { dir: PathBuf, refused: Vec<Refused> },
    #[error(
        "{} is not spark-launch's record of the files it wrote ({why}): move it away, or choose another --out folder",
        .path.display()
    )]
    BadManifest { path: PathBuf, why: String },
    #[error("{} is not a folder: choose another --out folder", .0.display())]
    NotAFolder(PathBuf),
    #[error("cannot write {}: {source}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn list(dir: &Path, refused: &[Refused]) -> String {
    refused
        .iter()
        .map(|r| format!("\n  {}: {}", dir.join(&r.name).display(), r.why))
        .collect()
}

/// What [`write`] did, file by file (paths in the folder).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Written {
    pub created: Vec<PathBuf>,
    pub replaced: Vec<PathBuf>,
    /// Files spark-launch did not write, replaced under `--force`.
    pub overwritten: Vec<PathBuf>,
    /// Its own files of an earlier run that this run no longer writes.
    pub removed: Vec<PathBuf>,
}

/// Writes `files` (names inside `dir`, texts) into `dir` (created when missing) as
/// `written_by`, by the rule of [`decide`], and records them in [`MANIFEST`].
pub fn write(
    dir: &Path,
    files: &[(String, String)],
    written_by: &str,
    force: bool,
) -> Result<Written, OwnedFilesError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| OwnedFilesError::Io { path, source }
    };
    match std::fs::metadata(dir) {
        Ok(m) if !m.is_dir() => return Err(OwnedFilesError::NotAFolder(dir.to_path_buf())),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir).map_err(io(dir))?
        }
        Err(e) => return Err(io(dir)(e)),
    }
    let manifest_path = dir.join(MANIFEST);
    let manifest = read_manifest(&manifest_path)?;
    let mut names: Vec<&String> = files.iter().map(|(n, _)| n).collect();
    names.extend(manifest.files.keys());
    let mut existing = BTreeMap::new();
    for name in names {
        existing.insert(
            name.clone(),
            look(&dir.join(name)).map_err(io(&dir.join(name)))?,
        );
    }
    let wanted: Vec<(String, String)> = files
        .iter()
        .map(|(n, t)| (n.clone(), sha256_hex(t)))
        .collect();
    let actions = decide(&wanted, &existing, &manifest, force).map_err(|refused| {
        OwnedFilesError::Refused {
            dir: dir.to_path_buf(),
            refused,
        }
    })?;
    let mut done = Written::default();
    let mut record = Manifest {
        written_by: written_by.to_string(),
        files: BTreeMap::new(),
    };
    for (name, action) in actions {
        let path = dir.join(&name);
        if action == FileAction::Remove {
            std::fs::remove_file(&path).map_err(io(&path))?;
            done.removed.push(path);
            continue;
        }
        let Some((_, text)) = files.iter().find(|(n, _)| *n == name) else {
            continue;
        };
        match action {
            FileAction::Create => {
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&path)
                    .map_err(io(&path))?;
                f.write_all(text.as_bytes()).map_err(io(&path))?;
                done.created.push(path);
            }
            FileAction::Replace | FileAction::Overwrite => {
                replace(dir, &path, text.as_bytes()).map_err(io(&path))?;
                if action == FileAction::Replace {
                    done.replaced.push(path);
                } else {
                    done.overwritten.push(path);
                }
            }
            FileAction::Remove => {}
        }
        record.files.insert(name, sha256_hex(text));
    }
    let json = serde_json::to_string_pretty(&record).unwrap_or_default();
    match look(&manifest_path).map_err(io(&manifest_path))? {
        Existing::Absent | Existing::File(_) => {}
        _ => {
            return Err(OwnedFilesError::BadManifest {
                path: manifest_path,
                why: "not a regular file".into(),
            });
        }
    }
    replace(dir, &manifest_path, format!("{json}\n").as_bytes()).map_err(io(&manifest_path))?;
    Ok(done)
}

/// What is at `path`, without following a link.
fn look(path: &Path) -> std::io::Result<Existing> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Existing::Absent),
        Err(e) => return Err(e),
    };
    let kind = meta.file_type();
    if kind.is_symlink() {
        return Ok(Existing::Link);
    }
    if !kind.is_file() {
        return Ok(Existing::Other);
    }
    Ok(Existing::File(sha256_hex(std::fs::read(path)?)))
}

/// The last manifest; none is an empty one. One that is not spark-launch's is refused.
fn read_manifest(path: &Path) -> Result<Manifest, OwnedFilesError> {
    let bad = |why: String| OwnedFilesError::BadManifest {
        path: path.to_path_buf(),
        why,
    };
    match look(path) {
        Ok(Existing::Absent) => return Ok(Manifest::default()),
        Ok(Existing::File(_)) => {}
        Ok(_) => return Err(bad("not a regular file".into())),
        Err(e) => return Err(bad(e.to_string())),
    }
    let text = crate::input::read_text(path, MANIFEST_MAX).map_err(|e| bad(e.to_string()))?;
    let manifest: Manifest = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    if let Some(name) = manifest
        .files
        .keys()
        .find(|n| n.is_empty() || n.contains('/') || *n == "." || *n == "..")
    {
        return Err(bad(format!("{name:?} is not a file name in the folder")));
    }
    Ok(manifest)
}

/// Writes `bytes` to a new file in `dir`, then renames it over `path`: a link at `path` is
/// replaced, never written through, and a reader never sees half a file.
fn replace(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut tmp = tempfile::Builder::new()
        .prefix(".spark-launch-")
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    // A new temporary file is 0600: files of this folder are for whoever reads the folder.
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o644))?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(n, t)| (n.to_string(), t.to_string()))
            .collect()
    }

    #[test]
    fn a_file_spark_launch_did_not_write_is_refused_by_name_and_left_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("README.md"), "the checkout's own text\n").unwrap();
        let err = write(
            dir.path(),
            &files(&[("a.yaml", "a\n"), ("README.md", "ours\n")]),
            "spark-launch compose",
            false,
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("README.md: exists and spark-launch did not write it"),
            "{text}"
        );
        assert!(text.contains("--force"), "{text}");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("README.md")).unwrap(),
            "the checkout's own text\n"
        );
        // Nothing was written: the check comes before the first write.
        assert!(!dir.path().join("a.yaml").exists());
        assert!(!dir.path().join(MANIFEST).exists());
    }

    #[test]
    fn a_second_run_replaces_its_own_files_and_removes_the_ones_it_no_longer_writes() {
        let dir = tempfile::tempdir().unwrap();
        let by = "spark-launch compose";
        let first = write(
            dir.path(),
            &files(&[("a.yaml", "a1\n"), ("b.yaml", "b1\n")]),
            by,
            false,
        )
        .unwrap();
        assert_eq!(first.created.len(), 2);
        let second = write(dir.path(), &files(&[("a.yaml", "a2\n")]), by, false).unwrap();
        assert_eq!(second.replaced, vec![dir.path().join("a.yaml")]);
        assert_eq!(second.removed, vec![dir.path().join("b.yaml")]);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a.yaml")).unwrap(),
            "a2\n"
        );
        assert!(!dir.path().join("b.yaml").exists());
    }

    #[test]
    fn an_edited_file_is_refused_and_replaced_only_with_force() {
        let dir = tempfile::tempdir().unwrap();
        let by = "spark-launch compose";
        write(dir.path(), &files(&[("a.yaml", "a1\n")]), by, false).unwrap();
        std::fs::write(dir.path().join("a.yaml"), "my edit\n").unwrap();
        let err = write(dir.path(), &files(&[("a.yaml", "a2\n")]), by, false).unwrap_err();
        assert!(
            err.to_string()
                .contains("a.yaml: was changed since spark-launch wrote it"),
            "{err}"
        );
        let forced = write(dir.path(), &files(&[("a.yaml", "a2\n")]), by, true).unwrap();
        assert_eq!(forced.overwritten, vec![dir.path().join("a.yaml")]);
        // From now on it is spark-launch's again.
        write(dir.path(), &files(&[("a.yaml", "a3\n")]), by, false).unwrap();
    }

    #[test]
    fn a_link_in_the_folder_is_never_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let target = elsewhere.path().join("precious");
        std::fs::write(&target, "keep me\n").unwrap();
        std::os::unix::fs::symlink(&target, dir.path().join("a.yaml")).unwrap();
        let by = "spark-launch compose";
        let err = write(dir.path(), &files(&[("a.yaml", "a\n")]), by, false).unwrap_err();
        assert!(err.to_string().contains("is a link"), "{err}");
        write(dir.path(), &files(&[("a.yaml", "a\n")]), by, true).unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep me\n");
        let meta = std::fs::symlink_metadata(dir.path().join("a.yaml")).unwrap();
        assert!(meta.file_type().is_file());
    }

    #[test]
    fn a_manifest_that_names_a_path_outside_the_folder_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(MANIFEST),
            r#"{"written_by":"x","files":{"../../etc/passwd":"00"}}"#,
        )
        .unwrap();
        let err = write(dir.path(), &files(&[("a.yaml", "a\n")]), "x", false).unwrap_err();
        assert!(matches!(err, OwnedFilesError::BadManifest { .. }), "{err}");
    }

    #[test]
    fn a_folder_in_a_files_place_is_refused_even_with_force() {
        let wanted = vec![("a.yaml".to_string(), "00".to_string())];
        let existing = BTreeMap::from([("a.yaml".to_string(), Existing::Other)]);
        let refused = decide(&wanted, &existing, &Manifest::default(), true).unwrap_err();
        assert!(!refused[0].forcible);
    }
}
