//! The recipe registries a user keeps, as sparkrun keeps its list: `spark-launch registry add
//! SOURCE` (a local folder, or a git URL cloned with the system `git` into spark-launch's data
//! folder), `list`, `remove`. The list is `registries.yaml` in spark-launch's config folder,
//! written only by spark-launch: a file there that it did not write is never overwritten, and
//! `remove` deletes only a clone it made itself (a kept folder of the user's stays).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

use crate::recipe::mods::plain_name;
use crate::recipe::registry::RegistryDir;

/// The first line of the list: a file without it was not written by spark-launch.
const HEADER: &str = "# written by spark-launch registry add|remove; edit with those commands";

/// One kept registry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeptRegistry {
    /// How recipes and mods name it (`@NAME/recipe`, `@NAME/mods/x`) when the clone has no
    /// manifest of its own.
    pub name: String,
    /// What was added: a folder, or a git URL.
    pub source: String,
    /// The folder read.
    pub path: PathBuf,
    /// Whether spark-launch cloned it (and may delete it on `remove`).
    pub cloned: bool,
}

impl KeptRegistry {
    pub fn dir(&self) -> RegistryDir {
        RegistryDir {
            path: self.path.clone(),
            name: Some(self.name.clone()),
            source: is_url(&self.source).then(|| self.source.clone()),
        }
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct KeptFile {
    #[serde(default)]
    registries: Vec<KeptRegistry>,
}

/// Why the kept list could not be read or changed (the user's to fix, but `Io` and `Clone`).
#[derive(Debug, thiserror::Error)]
pub enum KeptError {
    #[error("{path}: {cause}")]
    Io { path: String, cause: String },
    #[error(
        "{path} was not written by spark-launch (no `{HEADER}` line): not overwritten; move it away to keep registries"
    )]
    NotOurs { path: String },
    #[error("{path}: not the list spark-launch writes: {cause}")]
    Invalid { path: String, cause: String },
    #[error(
        "a registry named {name:?} is kept already ({source_}); remove it first or add with --name"
    )]
    Taken { name: String, source_: String },
    #[error("{name:?} is not a registry name (letters, digits, `.`, `_`, `-`)")]
    BadName { name: String },
    #[error("{source_} is neither a folder nor a git URL")]
    NotASource { source_: String },
    #[error("git clone {url} failed: {cause}")]
    Clone { url: String, cause: String },
    #[error("no registry named {name:?} is kept (kept: {})", if kept.is_empty() { "none".to_string() } else { kept.join(", ") })]
    Unknown { name: String, kept: Vec<String> },
}

/// Whether `source` is a git URL rather than a folder.
pub fn is_url(source: &str) -> bool {
    source.contains("://") || source.starts_with("git@")
}

/// A name from a source: its last path word without `.git`.
fn name_of(source: &str) -> String {
    source
        .trim_end_matches('/')
        .rsplit(['/', ':'])
        .next()
        .unwrap_or(source)
        .trim_end_matches(".git")
        .to_string()
}

/// The kept registries, in the order they were added (none when the list does not exist).
pub fn read(file: &Path) -> Result<Vec<KeptRegistry>, KeptError> {
    let io = |e: std::io::Error| KeptError::Io {
        path: file.display().to_string(),
        cause: e.to_string(),
    };
    let text = match crate::input::read_utf8(file, crate::input::YAML) {
        Ok(t) => t,
        Err(crate::input::InputError::Io { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            return Ok(Vec::new());
        }
        Err(e) => return Err(io(std::io::Error::other(e.to_string()))),
    };
    if !text.starts_with(HEADER) {
        return Err(KeptError::NotOurs {
            path: file.display().to_string(),
        });
    }
    let kept: KeptFile = yaml_serde::from_str(&text).map_err(|e| KeptError::Invalid {
        path: file.display().to_string(),
        cause: e.to_string(),
    })?;
    Ok(kept.registries)
}

/// Writes the list; its callers read it first, so a file of someone else's is refused before
/// anything changes.
fn write(file: &Path, registries: &[KeptRegistry]) -> Result<(), KeptError> {
    let io = |e: std::io::Error| KeptError::Io {
        path: file.display().to_string(),
        cause: e.to_string(),
    };
    let body = yaml_serde::to_string(&KeptFile {
        registries: registries.to_vec(),
    })
    .map_err(|e| io(std::io::Error::other(e.to_string())))?;
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let tmp = file.with_extension("yaml.tmp");
    std::fs::write(&tmp, format!("{HEADER}\n{body}")).map_err(io)?;
    std::fs::rename(&tmp, file).map_err(io)
}

/// Keeps `source` (a folder, or a git URL cloned into `clones/NAME`) under `name` (default: the
/// source's last word).
pub fn add(
    file: &Path,
    clones: &Path,
    source: &str,
    name: Option<&str>,
) -> Result<KeptRegistry, KeptError> {
    let name = name.map(str::to_string).unwrap_or_else(|| name_of(source));
    if !plain_name(&name) {
        return Err(KeptError::BadName { name });
    }
    let mut kept = read(file)?;
    if let Some(k) = kept.iter().find(|k| k.name == name) {
        return Err(KeptError::Taken {
            name,
            source_: k.source.clone(),
        });
    }
    let entry = if is_url(source) {
        let dest = clones.join(&name);
        clone(source, &dest)?;
        KeptRegistry {
            name,
            source: source.to_string(),
            path: dest,
            cloned: true,
        }
    } else {
        let path = std::fs::canonicalize(source)
            .ok()
            .filter(|p| p.is_dir())
            .ok_or_else(|| KeptError::NotASource {
                source_: source.to_string(),
            })?;
        KeptRegistry {
            name,
            source: source.to_string(),
            path,
            cloned: false,
        }
    };
    kept.push(entry.clone());
    write(file, &kept)?;
    Ok(entry)
}

/// `git clone --depth 1 URL DEST`; a half-made clone is removed.
fn clone(url: &str, dest: &Path) -> Result<(), KeptError> {
    let fail = |cause: String| KeptError::Clone {
        url: url.to_string(),
        cause,
    };
    if dest.exists() {
        return Err(fail(format!(
            "{} exists already; remove it or add with another --name",
            dest.display()
        )));
    }
    if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent).map_err(|e| fail(e.to_string()))?;
    }
    let out = Command::new("git")
        .args(["clone", "--quiet", "--depth", "1", "--", url])
        .arg(dest)
        .env("GIT_TERMINAL_PROMPT", "0")
        .output()
        .map_err(|e| fail(format!("cannot run git: {e}")))?;
    if !out.status.success() {
        let _ = std::fs::remove_dir_all(dest);
        return Err(fail(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ));
    }
    Ok(())
}

/// Forgets the registry `name`; its clone is deleted when spark-launch made it.
pub fn remove(file: &Path, name: &str) -> Result<KeptRegistry, KeptError> {
    let mut kept = read(file)?;
    let Some(i) = kept.iter().position(|k| k.name == name) else {
        return Err(KeptError::Unknown {
            name: name.to_string(),
            kept: kept.iter().map(|k| k.name.clone()).collect(),
        });
    };
    let gone = kept.remove(i);
    write(file, &kept)?;
    if gone.cloned {
        std::fs::remove_dir_all(&gone.path).map_err(|e| KeptError::Io {
            path: gone.path.display().to_string(),
            cause: e.to_string(),
        })?;
    }
    Ok(gone)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_is_kept_under_its_name_and_removed_without_touching_it() {
        let t = tempfile::tempdir().unwrap();
        let file = t.path().join("cfg/registries.yaml");
        let folder = t.path().join("my-recipes");
        std::fs::create_dir(&folder).unwrap();
        let k = add(
            &file,
            &t.path().join("clones"),
            folder.to_str().unwrap(),
            None,
        )
        .unwrap();
        assert_eq!((k.name.as_str(), k.cloned), ("my-recipes", false));
        assert_eq!(read(&file).unwrap(), std::slice::from_ref(&k));
        let e = add(&file, t.path(), folder.to_str().unwrap(), None).unwrap_err();
        assert!(e.to_string().contains("kept already"), "{e}");
        remove(&file, "my-recipes").unwrap();
        assert!(folder.is_dir(), "the user's folder stays");
        assert!(read(&file).unwrap().is_empty());
    }

    #[test]
    fn a_list_spark_launch_did_not_write_is_never_overwritten() {
        let t = tempfile::tempdir().unwrap();
        let file = t.path().join("registries.yaml");
        std::fs::write(&file, "registries: []\n").unwrap();
        let e = add(&file, t.path(), t.path().to_str().unwrap(), Some("x")).unwrap_err();
        assert!(matches!(e, KeptError::NotOurs { .. }), "{e}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "registries: []\n");
    }

    #[test]
    fn a_git_url_is_cloned_and_its_clone_removed_with_it() {
        let t = tempfile::tempdir().unwrap();
        let repo = t.path().join("origin");
        std::fs::create_dir_all(repo.join("recipes")).unwrap();
        std::fs::write(repo.join("recipes/demo.yaml"), "recipe_version: \"2\"\n").unwrap();
        let git = |args: &[&str]| {
            let ok = Command::new("git")
                .args(["-c", "user.email=t@t", "-c", "user.name=t"])
                .args(args)
                .current_dir(&repo)
                .output()
                .unwrap()
                .status
                .success();
            assert!(ok, "git {args:?}");
        };
        git(&["init", "-q"]);
        git(&["add", "."]);
        git(&["commit", "-qm", "demo"]);
        let url = format!("file://{}", repo.display());
        let file = t.path().join("registries.yaml");
        let k = add(&file, &t.path().join("clones"), &url, Some("eugr")).unwrap();
        assert!(
            k.cloned && k.path.join("recipes/demo.yaml").is_file(),
            "{k:?}"
        );
        remove(&file, "eugr").unwrap();
        assert!(!k.path.exists());
        let e = add(
            &file,
            &t.path().join("clones"),
            "file:///nonexistent/repo",
            None,
        )
        .unwrap_err();
        assert!(matches!(e, KeptError::Clone { .. }), "{e}");
        assert!(!t.path().join("clones/repo").exists(), "no half-made clone");
    }
}
