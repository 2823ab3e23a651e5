//! What a simulated cluster is built from, carried inside the binary (a `cargo install` has no
//! checkout): the simulated-node harness (`tests/harness/simnet`, the same script the
//! integration tests use), the stand-in engine (`tests/standin/vllm`, which also answers as
//! SGLang, and its image builder), the stand-in Hub and the model it serves. [`Assets::write`]
//! puts them into a private temporary folder (0700, removed when dropped) for one command.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

/// `(path inside the folder, text, executable)` of every file.
const FILES: &[(&str, &str, bool)] = &[
    (
        "harness/simnet",
        include_str!("../../tests/harness/simnet"),
        true,
    ),
    (
        "standin/build-image",
        include_str!("../../tests/standin/build-image"),
        true,
    ),
    (
        "standin/vllm",
        include_str!("../../tests/standin/vllm"),
        true,
    ),
    (
        "standin/sglang/__init__.py",
        include_str!("../../tests/standin/sglang/__init__.py"),
        false,
    ),
    (
        "standin/sglang/launch_server.py",
        include_str!("../../tests/standin/sglang/launch_server.py"),
        false,
    ),
    (
        "standin/sglang/cli/__init__.py",
        include_str!("../../tests/standin/sglang/cli/__init__.py"),
        false,
    ),
    (
        "standin/sglang/cli/main.py",
        include_str!("../../tests/standin/sglang/cli/main.py"),
        false,
    ),
    ("hub/hub_standin.py", include_str!("hub_standin.py"), true),
];

/// The files of the stand-in model, `(name, text)`: what the stand-in Hub serves under the
/// model's id.
pub const MODEL_FILES: &[(&str, &str)] = &[
    ("config.json", include_str!("model/config.json")),
    ("README.md", include_str!("model/README.md")),
];

/// The assets, written out for one command.
pub struct Assets {
    dir: tempfile::TempDir,
}

impl Assets {
    /// Writes every file into a new private folder.
    pub fn write() -> std::io::Result<Assets> {
        let dir = tempfile::Builder::new()
            .prefix("spark-launch-sim-")
            .tempdir()?;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))?;
        for (rel, text, exec) in FILES {
            let path = dir.path().join(rel);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(&path, text)?;
            let mode = if *exec { 0o700 } else { 0o600 };
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))?;
        }
        Ok(Assets { dir })
    }

    /// The simulated-node harness.
    pub fn simnet(&self) -> PathBuf {
        self.dir.path().join("harness/simnet")
    }

    /// The stand-in image builder (its sources beside it).
    pub fn build_image(&self) -> PathBuf {
        self.dir.path().join("standin/build-image")
    }

    /// The stand-in Hub.
    pub fn hub(&self) -> PathBuf {
        self.dir.path().join("hub/hub_standin.py")
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_asset_is_written_where_the_scripts_look_for_their_neighbours() {
        let a = Assets::write().unwrap();
        let mode = std::fs::metadata(a.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        // build-image finds the stand-in and its sglang package beside itself.
        let here = a.build_image().parent().unwrap().to_path_buf();
        assert!(here.join("vllm").is_file());
        assert!(here.join("sglang/cli/main.py").is_file());
        assert!(a.simnet().is_file() && a.hub().is_file());
        let exec = std::fs::metadata(a.simnet()).unwrap().permissions().mode();
        assert_ne!(exec & 0o100, 0);
    }
}
