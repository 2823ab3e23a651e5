//! The API key of `--api-key`, resolved before planning: a key given as is, the first line of
//! `@FILE`, or `auto` — a key spark-launch generates once (32 random bytes from the kernel,
//! hex) and keeps in `$XDG_CONFIG_HOME/spark-launch/api-key`, created 0600 in a 0700 folder and
//! reused by every later job (and by the printed `curl`, which reads the file). A dry run
//! reads the file but never creates it. A key file that others can read is refused.
//!
//! Effects: files on this machine only. The key is never logged.

use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::plan::secret::Secret;
use crate::workload::endpoint::{ApiKey, ApiKeyAsk};

/// Why the key could not be had.
#[derive(Debug, thiserror::Error)]
pub enum ApiKeyError {
    #[error("--api-key: cannot read {path}: {cause}")]
    Read { path: String, cause: String },
    #[error("--api-key: {path} is empty")]
    Empty { path: String },
    #[error("--api-key: {path} can be read by other users (mode {mode:o}); fix: chmod 600 {path}")]
    Open { path: String, mode: u32 },
    #[error("--api-key auto: cannot create {path}: {cause}")]
    Create { path: String, cause: String },
}

/// `$XDG_CONFIG_HOME/spark-launch/api-key`, or `~/.config/spark-launch/api-key`.
pub fn auto_key_file() -> PathBuf {
    std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
        .unwrap_or_else(|| PathBuf::from(".config"))
        .join("spark-launch")
        .join("api-key")
}

/// The key `ask` names; with `create`, `auto` generates its file when there is none yet.
pub fn resolve(ask: &ApiKeyAsk, create: bool) -> Result<ApiKey, ApiKeyError> {
    match ask {
        ApiKeyAsk::Given(k) => Ok(ApiKey {
            key: k.clone(),
            file: None,
        }),
        ApiKeyAsk::File(path) => {
            let path = expand_home(path);
            Ok(ApiKey {
                key: read_key(&path)?,
                file: Some(path.display().to_string()),
            })
        }
        ApiKeyAsk::Auto => {
            let path = auto_key_file();
            let shown = Some(path.display().to_string());
            if path.exists() {
                return Ok(ApiKey {
                    key: read_key(&path)?,
                    file: shown,
                });
            }
            if !create {
                // A dry run: the plan shows `<set>` either way; the run generates the key.
                let key = Secret::new("not-generated-by-a-dry-run").ok_or(ApiKeyError::Empty {
                    path: path.display().to_string(),
                })?;
                return Ok(ApiKey { key, file: shown });
            }
            Ok(ApiKey {
                key: generate(&path)?,
                file: shown,
            })
        }
    }
}

/// The key `bench JOB` sends: `from_env` (`OPENAI_API_KEY`) when it is set, else the key
/// `--api-key auto` keeps in `auto_file` when there is one (the same user's jobs use it), else
/// none. A key file others can read is refused, as a launch refuses it.
pub fn key_for_job(
    from_env: Option<String>,
    auto_file: &Path,
) -> Result<Option<Secret>, ApiKeyError> {
    if let Some(k) = from_env.and_then(Secret::new) {
        return Ok(Some(k));
    }
    if !auto_file.exists() {
        return Ok(None);
    }
    read_key(auto_file).map(Some)
}

fn expand_home(path: &str) -> PathBuf {
    match (path.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => PathBuf::from(path),
    }
}

fn read_key(path: &Path) -> Result<Secret, ApiKeyError> {
    let shown = path.display().to_string();
    let read = |e: std::io::Error| ApiKeyError::Read {
        path: shown.clone(),
        cause: e.to_string(),
    };
    let meta = std::fs::metadata(path).map_err(read)?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(ApiKeyError::Open { path: shown, mode });
    }
    let mut text = String::new();
    std::fs::File::open(path)
        .map_err(read)?
        .take(4096)
        .read_to_string(&mut text)
        .map_err(read)?;
    Secret::new(text.lines().next().unwrap_or_default()).ok_or(ApiKeyError::Empty { path: shown })
}

fn generate(path: &Path) -> Result<Secret, ApiKeyError> {
    let shown = path.display().to_string();
    let create = |e: std::io::Error| ApiKeyError::Create {
        path: shown.clone(),
        cause: e.to_string(),
    };
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(create)?;
    let key = format!("sl-{}", crate::digest::hex(&bytes));
    if let Some(dir) = path.parent()
        && !dir.exists()
    {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(create)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(create)?;
    writeln!(f, "{key}").map_err(create)?;
    Secret::new(key).ok_or(ApiKeyError::Empty { path: shown })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bench_uses_openai_api_key_first_then_the_auto_key_file_then_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("spark-launch/api-key");
        assert_eq!(key_for_job(None, &file).unwrap(), None);
        generate(&file).unwrap();
        let saved = read_key(&file).unwrap();
        assert_eq!(key_for_job(None, &file).unwrap(), Some(saved.clone()));
        assert_eq!(
            key_for_job(Some(" ".into()), &file).unwrap(),
            Some(saved),
            "a blank variable counts as unset"
        );
        assert_eq!(
            key_for_job(Some("sk-env".into()), &file)
                .unwrap()
                .unwrap()
                .expose(),
            "sk-env"
        );
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            key_for_job(None, &file),
            Err(ApiKeyError::Open { .. })
        ));
    }

    #[test]
    fn auto_generates_a_0600_key_once_and_reuses_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cfg/spark-launch/api-key");
        let k1 = generate(&path).unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(k1.expose().len(), 3 + 64);
        assert_eq!(read_key(&path).unwrap(), k1);
        // A second generate never overwrites it.
        assert!(generate(&path).is_err());
    }

    #[test]
    fn a_key_file_others_can_read_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        std::fs::write(&path, "sk-1\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = read_key(&path).unwrap_err().to_string();
        assert!(e.contains("chmod 600"), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_key(&path).unwrap().expose(), "sk-1");
    }
}
