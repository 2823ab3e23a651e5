//! Result files: every run saved as JSON (0600, in a 0700 folder) under the state folder
//! (`crate::state::state_dir`), `bench/` inside; read back for `--compare`.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::BenchError;
use super::measure::BenchReport;

/// `DIR/bench/LABEL-20261123T204158Z.json`; the label is the job's name, or the server's
/// host and port.
pub fn default_path(state: &Path, label: &str, started_at: &str) -> PathBuf {
    let label: String = label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let stamp: String = started_at
        .chars()
        .filter(|c| *c != '-' && *c != ':')
        .collect();
    state.join("bench").join(format!("{label}-{stamp}.json"))
}

/// Writes `report` (any result file's JSON) to `path`, readable by its owner only; creates the folder (0700) if needed.
pub fn save<T: serde::Serialize + ?Sized>(report: &T, path: &Path) -> Result<(), BenchError> {
    let io = |source| BenchError::Io {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
        && !dir.exists()
    {
        std::fs::create_dir_all(dir).map_err(io)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io)?;
    }
    let text = serde_json::to_string_pretty(report)
        .map_err(|e| io(std::io::Error::other(e.to_string())))?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(io)?;
    // An existing file keeps its mode on open: make it 0600 as well.
    f.set_permissions(std::fs::Permissions::from_mode(0o600))
        .map_err(io)?;
    f.write_all(text.as_bytes()).map_err(io)?;
    f.write_all(b"\n").map_err(io)
}

/// Reads a result file saved by an earlier run.
pub fn load(path: &Path) -> Result<BenchReport, BenchError> {
    let text = std::fs::read_to_string(path).map_err(|source| BenchError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let report: BenchReport = serde_json::from_str(&text).map_err(|e| {
        BenchError::Invalid(format!(
            "{} is not a result file of `spark-launch bench` ({e})",
            path.display()
        ))
    })?;
    if report.version != BenchReport::VERSION {
        return Err(BenchError::Invalid(format!(
            "{} is a version {} result file; this spark-launch reads version {}",
            path.display(),
            report.version,
            BenchReport::VERSION
        )));
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::request::Api;

    fn report() -> BenchReport {
        BenchReport {
            version: 1,
            started_at: "2026-11-23T20:41:58Z".into(),
            url: "http://127.0.0.1:8000/v1".into(),
            job: None,
            model: "m".into(),
            api: Api::Completions,
            prompt_tokens: 8,
            output_tokens: 8,
            levels: vec![],
            soak: None,
            answer_check: None,
        }
    }

    #[test]
    fn a_result_file_is_private_and_reads_back_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let path = default_path(dir.path(), "127.0.0.1:8000", "2026-11-23T20:41:58Z");
        assert!(path.ends_with("bench/127.0.0.1-8000-20261123T204158Z.json"));
        save(&report(), &path).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        assert_eq!(load(&path).unwrap(), report());
    }

    #[test]
    fn a_file_that_is_not_a_result_is_refused_with_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.json");
        std::fs::write(&p, "{}").unwrap();
        let e = load(&p).unwrap_err().to_string();
        assert!(e.contains("x.json is not a result file"), "{e}");
        let e = load(&dir.path().join("missing.json"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing.json"), "{e}");
    }
}
