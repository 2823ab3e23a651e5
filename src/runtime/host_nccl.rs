//! A node's own NCCL (`--runtime host`) read through its shell, for the probe of a node that
//! is not this machine: [`ShellFiles`] gives the walk of `probe::nccl` the node's files
//! (`test`, `readlink -f`, `cat`, `tail | head` at an offset), batched so that a remote node
//! costs a dozen short commands, and [`read_through`] reads the shell's own variables first.
//! Effects only; this machine's files are read by `probe::host_nccl`, what the answer means
//! is `libnccl::host`'s.

use futures::StreamExt;
use futures::future::BoxFuture;
use tokio_util::io::StreamReader;

use super::shell::NodeShell;
use crate::libnccl::host::HostNccl;
use crate::libnccl::loader::{Machine, lexical};
use crate::probe::host_nccl::{HostEnv, SMALL_MAX, read};
use crate::probe::nccl::{FileError, Files, Opened, PathStat};
use crate::quote::{Style, quote};

/// A node's own NCCL read through its shell, with that shell's variables (a failure to read
/// them is the read's error).
pub async fn read_through(shell: &dyn NodeShell, arch: Option<&str>) -> HostNccl {
    let files = ShellFiles::new(shell);
    let machine = arch.and_then(Machine::from_arch);
    match files.env().await {
        Ok(env) => read(&files, &env, machine).await,
        Err(e) => HostNccl {
            error: Some(e.to_string()),
            ..HostNccl::default()
        },
    }
}

/// A node's files through its shell (`bash -c` there, locally or over SSH).
pub struct ShellFiles<'a> {
    shell: &'a dyn NodeShell,
}

/// What a read through the shell prints first when the file is there (an empty answer is an
/// absent file).
const PRESENT: u8 = b'Y';

impl<'a> ShellFiles<'a> {
    pub fn new(shell: &'a dyn NodeShell) -> Self {
        ShellFiles { shell }
    }

    /// The variables of the node's shell (`printf` of each set one), for [`read`].
    pub async fn env(&self) -> Result<HostEnv, FileError> {
        let names = [
            "LD_LIBRARY_PATH",
            "LD_PRELOAD",
            "PATH",
            "PYTHONPATH",
            "HOME",
        ];
        let script: String = names
            .iter()
            .map(|n| format!("[ -n \"${{{n}+x}}\" ] && printf '%s=%s\\0' {n} \"${n}\"\n"))
            .collect::<String>()
            + "exit 0\n";
        let out = self.run(&script).await?;
        let vars: Vec<(String, String)> = out
            .split('\0')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Ok(HostEnv::from_lookup(|k| {
            vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        }))
    }

    async fn run(&self, script: &str) -> Result<String, FileError> {
        let out = self
            .shell
            .run(script, Vec::new(), None)
            .await
            .map_err(|e| FileError(e.to_string()))?;
        if !out.success() {
            return Err(FileError(format!(
                "{}: a read of its files failed (exit {}): {}",
                self.shell.node(),
                out.status,
                out.stderr_tail()
            )));
        }
        Ok(out.stdout)
    }

    /// The bytes a script prints, at most `max`; `None` when it printed nothing (absent), the
    /// leading [`PRESENT`] byte taken off otherwise.
    async fn bytes(&self, script: &str, max: u64) -> Result<Option<Vec<u8>>, FileError> {
        let mut s = self.shell.stream(script);
        let mut out: Vec<u8> = Vec::new();
        while let Some(chunk) = s.next().await {
            let chunk = chunk.map_err(|e| FileError(e.to_string()))?;
            out.extend_from_slice(&chunk);
            if out.len() as u64 > max.saturating_add(1) {
                out.truncate(usize::try_from(max.saturating_add(1)).unwrap_or(usize::MAX));
                break;
            }
        }
        match out.first() {
            Some(&PRESENT) => Ok(Some(out.split_off(1))),
            _ => Ok(None),
        }
    }
}

fn q(path: &str) -> Result<String, FileError> {
    quote(path, Style::Minimal)
        .map(|w| w.into_owned())
        .map_err(|e| FileError(e.to_string()))
}

impl Files for ShellFiles<'_> {
    fn place(&self) -> &'static str {
        "the node"
    }

    fn label(&self) -> String {
        format!("on {}", self.shell.node())
    }

    fn stat<'b>(&'b self, path: &'b str) -> BoxFuture<'b, Result<Option<PathStat>, FileError>> {
        Box::pin(async move {
            let p = q(path)?;
            let out = self
                .run(&format!(
                    "p={p}\n[ -e \"$p\" ] || exit 0\nif [ -d \"$p\" ]; then echo d; else echo f; fi\nreadlink -f -- \"$p\"\n"
                ))
                .await?;
            let mut lines = out.lines();
            let Some(kind) = lines.next() else {
                return Ok(None);
            };
            let target = lines.next().unwrap_or(path).to_string();
            Ok(Some(PathStat {
                dir: kind == "d",
                link: (target != lexical(path)).then_some(target),
            }))
        })
    }

    fn read_small<'b>(
        &'b self,
        path: &'b str,
    ) -> BoxFuture<'b, Result<Option<Vec<u8>>, FileError>> {
        Box::pin(async move {
            let p = q(path)?;
            self.bytes(
                &format!(
                    "p={p}\n[ -f \"$p\" ] && [ -r \"$p\" ] || exit 0\nprintf Y\nexec head -c {SMALL_MAX} -- \"$p\"\n"
                ),
                SMALL_MAX,
            )
            .await
        })
    }

    fn open<'b>(&'b self, path: &'b str) -> BoxFuture<'b, Result<Opened, FileError>> {
        Box::pin(async move {
            let Some(st) = self.stat(path).await? else {
                return Ok(Opened::Absent);
            };
            if st.dir {
                return Ok(Opened::NotFile("not a file".to_string()));
            }
            let at = st.link.unwrap_or_else(|| path.to_string());
            let p = q(&at)?;
            let node = self.shell.node().clone();
            let stream = self
                .shell
                .stream(&format!("exec cat -- {p}"))
                .map(move |r| r.map_err(|e| std::io::Error::other(format!("{node}: {e}"))));
            Ok(Opened::File {
                path: at,
                body: Box::pin(StreamReader::new(stream.boxed())),
            })
        })
    }

    fn may_exist<'b>(&'b self, paths: &'b [String]) -> BoxFuture<'b, Result<Vec<bool>, FileError>> {
        Box::pin(async move {
            if paths.is_empty() {
                return Ok(Vec::new());
            }
            let mut script = String::new();
            for p in paths {
                script.push_str(&format!(
                    "if [ -e {} ]; then echo 1; else echo 0; fi\n",
                    q(p)?
                ));
            }
            let out = self.run(&script).await?;
            let seen: Vec<bool> = out.lines().map(|l| l.trim() == "1").collect();
            if seen.len() != paths.len() {
                return Err(FileError(format!(
                    "{}: looked for {} paths, got {} answers",
                    self.shell.node(),
                    paths.len(),
                    seen.len()
                )));
            }
            Ok(seen)
        })
    }

    fn random_access(&self) -> bool {
        true
    }

    fn read_at<'b>(
        &'b self,
        path: &'b str,
        offset: u64,
        len: u64,
    ) -> BoxFuture<'b, Result<Vec<u8>, FileError>> {
        Box::pin(async move {
            let p = q(path)?;
            // `tail -c +N` seeks in a regular file: only the range travels.
            let from = offset.saturating_add(1);
            let got = self
                .bytes(
                    &format!(
                        "p={p}\n[ -f \"$p\" ] || exit 0\nprintf Y\ntail -c +{from} -- \"$p\" | head -c {len}\n"
                    ),
                    len,
                )
                .await?;
            got.ok_or_else(|| FileError(format!("{path} {}: not found", self.label())))
        })
    }
}
