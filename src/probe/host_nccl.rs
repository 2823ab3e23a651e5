//! Reading a node's own NCCL (`--runtime host`) for the probe: the walk that reads images
//! (`probe::nccl::walk`) over the node's own files, with the loader and Python variables of
//! the shell the node starts processes in. Only file contents are read (headers, NCCL's build
//! string, a dynamic section): nothing is loaded or run, no GPU is needed.
//!
//! This machine's files are read here ([`RootFiles`]: a root folder, `/` itself or a folder
//! laid out as a node's root, every symbolic link resolved inside that root, never out of
//! it); another node's through its shell (`runtime::host_nccl::ShellFiles`). What the answer
//! means is `libnccl::host`'s.

use std::ffi::OsString;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Component, Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use tokio::io::{AsyncRead, ReadBuf};

use super::nccl::{FileError, Files, LoaderVars, Opened, PathStat, walk};
use crate::libnccl::host::HostNccl;
use crate::libnccl::loader::{Machine, Resolution, Via, lexical};
use crate::libnccl::python::PythonEnv;

/// The most symbolic links followed for one path (the kernel's own limit).
const MAX_LINKS: usize = 40;
/// The most of a small file read (`ld.so.cache`, `pyvenv.cfg`).
pub const SMALL_MAX: u64 = 16 << 20;

/// The variables of the shell a node starts processes in that decide what they load.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostEnv {
    pub ld_library_path: Option<String>,
    pub ld_preload: Option<String>,
    pub python: PythonEnv,
}

impl HostEnv {
    /// From a variable lookup (this process's environment, or what a node's shell printed).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Self {
        HostEnv {
            ld_library_path: get("LD_LIBRARY_PATH"),
            ld_preload: get("LD_PRELOAD"),
            python: PythonEnv {
                path: get("PATH"),
                pythonpath: get("PYTHONPATH"),
                home: get("HOME"),
            },
        }
    }

    /// This process's own: what a host process started here (through the local shell) gets.
    pub fn this_process() -> Self {
        Self::from_lookup(|k| std::env::var(k).ok())
    }
}

/// Reads what the node's processes load: the loader's own answer and torch's. A read that
/// fails part-way is kept as far as it got, with the error.
pub async fn read(files: &dyn Files, env: &HostEnv, machine: Option<Machine>) -> HostNccl {
    let vars = LoaderVars {
        ld_preload: env.ld_preload.clone(),
        ld_library_path: env.ld_library_path.clone(),
    };
    let mut out = HostNccl {
        ld_library_path: env.ld_library_path.clone(),
        ld_preload: env.ld_preload.clone(),
        ..HostNccl::default()
    };
    match walk(files, &vars, &env.python, machine).await {
        Ok(w) => {
            let torch = w
                .loads
                .filter(|f| matches!(f.via, Via::Rpath | Via::Runpath));
            let skipped = if torch.is_some() {
                w.plain_skipped
            } else {
                w.skipped
            };
            out.loader = Resolution {
                loads: w.plain,
                skipped,
                ..Resolution::default()
            };
            out.torch = torch;
            out.python = w.python;
        }
        Err(e) => out.error = Some(e.to_string()),
    }
    out
}

/// This machine's own NCCL, for the local probe: its root, this process's variables, the CPU
/// `uname -m` gave (`arch`). Reads local files only, so it is driven to the end here.
pub fn read_this_machine(arch: Option<&str>) -> HostNccl {
    let files = RootFiles::new("/");
    let machine = arch.and_then(Machine::from_arch);
    futures::executor::block_on(read(&files, &HostEnv::this_process(), machine))
}

/// A root folder on this machine: `/` itself, or a folder laid out as a node's root.
#[derive(Clone, Debug)]
pub struct RootFiles {
    root: PathBuf,
}

/// A path resolved inside the root: as the node names it, and where it is here.
struct InRoot {
    name: String,
    here: PathBuf,
}

impl RootFiles {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        RootFiles { root: root.into() }
    }

    /// Follows `path` component by component inside the root, as the node's kernel would with
    /// that root as `/`: an absolute link starts again at the root, `..` stops there.
    /// `None` when a component does not exist.
    fn resolve(&self, path: &str) -> std::io::Result<Option<InRoot>> {
        let mut todo: Vec<OsString> = components(Path::new(path));
        todo.reverse();
        let mut done: Vec<OsString> = Vec::new();
        let mut links = 0;
        while let Some(c) = todo.pop() {
            if c == ".." {
                done.pop();
                continue;
            }
            let here = self.here(&done).join(&c);
            let meta = match std::fs::symlink_metadata(&here) {
                Ok(m) => m,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => return Ok(None),
                Err(e) => return Err(e),
            };
            if !meta.file_type().is_symlink() {
                done.push(c);
                continue;
            }
            links += 1;
            if links > MAX_LINKS {
                return Err(std::io::Error::other(format!(
                    "more than {MAX_LINKS} symbolic links"
                )));
            }
            let target = std::fs::read_link(&here)?;
            if target.is_absolute() {
                done.clear();
            }
            let mut more = components(&target);
            more.reverse();
            todo.extend(more);
        }
        let name = format!(
            "/{}",
            done.iter()
                .map(|c| c.to_string_lossy())
                .collect::<Vec<_>>()
                .join("/")
        );
        Ok(Some(InRoot {
            here: self.here(&done),
            name,
        }))
    }

    fn here(&self, parts: &[OsString]) -> PathBuf {
        let mut p = self.root.clone();
        p.extend(parts);
        p
    }

    fn io(&self, path: &str, e: std::io::Error) -> FileError {
        FileError(format!("read {path} {}: {e}", self.label()))
    }

    /// The resolved path of a regular file, `None` when absent or not a file.
    fn file(&self, path: &str) -> Result<Option<InRoot>, FileError> {
        let Some(r) = self.resolve(path).map_err(|e| self.io(path, e))? else {
            return Ok(None);
        };
        Ok(std::fs::metadata(&r.here)
            .map(|m| m.is_file())
            .unwrap_or(false)
            .then_some(r))
    }
}

/// The named components of a path (`.` and the root dropped; `..` kept for the walk).
fn components(p: &Path) -> Vec<OsString> {
    p.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            _ => None,
        })
        .collect()
}

/// A file on this machine as an `AsyncRead`: each read is a plain blocking read (a local
/// disk answers at once), so the walk needs no runtime to drive it.
struct BlockingFile(std::fs::File);

impl AsyncRead for BlockingFile {
    fn poll_read(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        match this.0.read(buf.initialize_unfilled()) {
            Ok(n) => {
                buf.advance(n);
                Poll::Ready(Ok(()))
            }
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}

impl Files for RootFiles {
    fn place(&self) -> &'static str {
        "the node"
    }

    fn label(&self) -> String {
        if self.root == Path::new("/") {
            "on this machine".to_string()
        } else {
            format!("under {}", self.root.display())
        }
    }

    fn stat<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Option<PathStat>, FileError>> {
        Box::pin(async move {
            let Some(r) = self.resolve(path).map_err(|e| self.io(path, e))? else {
                return Ok(None);
            };
            let dir = std::fs::metadata(&r.here)
                .map(|m| m.is_dir())
                .unwrap_or(false);
            Ok(Some(PathStat {
                dir,
                link: (r.name != lexical(path)).then_some(r.name),
            }))
        })
    }

    fn read_small<'a>(
        &'a self,
        path: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, FileError>> {
        Box::pin(async move {
            let Some(r) = self.file(path)? else {
                return Ok(None);
            };
            let mut out = Vec::new();
            std::fs::File::open(&r.here)
                .and_then(|f| f.take(SMALL_MAX).read_to_end(&mut out))
                .map_err(|e| self.io(path, e))?;
            Ok(Some(out))
        })
    }

    fn open<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Opened, FileError>> {
        Box::pin(async move {
            let r = match self.resolve(path) {
                Ok(Some(r)) => r,
                Ok(None) => return Ok(Opened::Absent),
                Err(e) => return Ok(Opened::NotFile(e.to_string())),
            };
            if !std::fs::metadata(&r.here)
                .map(|m| m.is_file())
                .unwrap_or(false)
            {
                return Ok(Opened::NotFile("not a file".to_string()));
            }
            let f = std::fs::File::open(&r.here).map_err(|e| self.io(path, e))?;
            Ok(Opened::File {
                path: r.name,
                body: Box::pin(BlockingFile(f)),
            })
        })
    }

    fn may_exist<'a>(&'a self, paths: &'a [String]) -> BoxFuture<'a, Result<Vec<bool>, FileError>> {
        Box::pin(async move {
            paths
                .iter()
                .map(|p| {
                    self.resolve(p)
                        .map(|r| r.is_some())
                        .map_err(|e| self.io(p, e))
                })
                .collect()
        })
    }

    fn random_access(&self) -> bool {
        true
    }

    fn read_at<'a>(
        &'a self,
        path: &'a str,
        offset: u64,
        len: u64,
    ) -> BoxFuture<'a, Result<Vec<u8>, FileError>> {
        Box::pin(async move {
            let Some(r) = self.file(path)? else {
                return Err(self.io(path, std::io::ErrorKind::NotFound.into()));
            };
            let mut out = Vec::new();
            std::fs::File::open(&r.here)
                .and_then(|mut f| {
                    f.seek(SeekFrom::Start(offset))?;
                    f.take(len).read_to_end(&mut out)
                })
                .map_err(|e| self.io(path, e))?;
            Ok(out)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_resolve_inside_the_root_and_never_out_of_it() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("usr/bin")).unwrap();
        std::fs::write(root.join("usr/bin/python3.12"), "").unwrap();
        std::os::unix::fs::symlink("python3.12", root.join("usr/bin/python3")).unwrap();
        // An absolute link names the node's root, not this machine's.
        std::os::unix::fs::symlink("/usr/bin/python3", root.join("python")).unwrap();
        // `..` stops at the root.
        std::os::unix::fs::symlink("../../../../etc/passwd", root.join("escape")).unwrap();
        std::os::unix::fs::symlink("loop", root.join("loop")).unwrap();
        let files = RootFiles::new(root);
        let stat = |p: &str| futures::executor::block_on(files.stat(p)).unwrap();
        assert_eq!(
            stat("/python"),
            Some(PathStat {
                dir: false,
                link: Some("/usr/bin/python3.12".into())
            })
        );
        assert_eq!(
            stat("/usr/bin/../bin/python3.12"),
            Some(PathStat {
                dir: false,
                link: None
            })
        );
        assert_eq!(stat("/escape"), None, "/etc/passwd of the root, not here");
        assert!(futures::executor::block_on(files.stat("/loop")).is_err());
        assert_eq!(
            futures::executor::block_on(files.may_exist(&[
                "/usr/bin/python3".to_string(),
                "/usr/bin/python3.12/x".to_string()
            ]))
            .unwrap(),
            vec![true, false]
        );
    }
}
