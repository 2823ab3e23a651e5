//! The private folder (mode 0700) that holds this process's ControlPath sockets, forwarded
//! sockets and askpass files: `$XDG_RUNTIME_DIR/sl-XXXXXX` or `$TMPDIR/sl-XXXXXX`. Short, because
//! a unix socket path must fit in 108 bytes; removed when the last user drops it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A private folder, deleted on drop.
#[derive(Debug, Clone)]
pub struct RuntimeDir(Arc<tempfile::TempDir>);

impl RuntimeDir {
    /// Creates the folder under `$XDG_RUNTIME_DIR` (when set and usable), else the temp dir.
    pub fn create() -> std::io::Result<RuntimeDir> {
        let bases: Vec<PathBuf> = std::env::var_os("XDG_RUNTIME_DIR")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .into_iter()
            .chain(std::iter::once(std::env::temp_dir()))
            .collect();
        let mut last = None;
        for base in bases {
            match tempfile::Builder::new().prefix("sl-").tempdir_in(&base) {
                Ok(dir) => return Ok(RuntimeDir(Arc::new(dir))),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| std::io::Error::other("no runtime folder")))
    }

    pub fn path(&self) -> &Path {
        self.0.path()
    }

    /// A path inside the folder.
    pub fn join(&self, name: &str) -> PathBuf {
        self.0.path().join(name)
    }
}
