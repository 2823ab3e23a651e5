//! The NCCL a node's own processes load (`--runtime host`), as the probe recorded it: the same
//! loader model as in images (`loader`: preloads, `LD_LIBRARY_PATH`, `ld.so.cache`, the
//! system folders), read on the node's own files with the loader variables of the shell it
//! starts processes in, and what `import torch` of the node's first `python3` on `PATH` loads
//! (`python`: torch's `libtorch_cuda.so` asks for `libnccl.so.2` with its own RPATH first).
//!
//! Two answers, because two kinds of program run on a node: one without an RPATH of its own
//! (nccl-tests' binaries, mpirun's ranks) takes what the loader's own search finds; a PyTorch
//! program takes its wheel's copy when torch's RPATH names one. On a real GPU machine they
//! differ (the loader's copy 2.28.3, PyTorch's wheel 2.28.9).
//!
//! A running host job's processes are observed instead ([`ProcessNccl`], for `status`): the
//! `libnccl` files their `/proc/PID/maps` hold, with the build string of each.
//!
//! Pure: what the probe read in, the judge's `Loads` out. Reading the files is
//! `runtime::host_nccl`'s job.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::check::{LibraryOrigin, Loads};
use super::loader::{Found, Resolution};
use super::python::PythonSeen;
use super::version::LibVersion;

/// The snapshot file the probe writes it to (read back by `probe::read`).
pub const SNAPSHOT_FILE: &str = "host-nccl.json";

/// What the probe read of one node's own NCCL.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostNccl {
    /// `LD_LIBRARY_PATH` of the shell the node starts processes in (spark-launch's own
    /// environment on this machine, a non-interactive SSH shell on the others); `None`: unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ld_library_path: Option<String>,
    /// `LD_PRELOAD` of that shell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ld_preload: Option<String>,
    /// What the loader's own search takes (preload, `LD_LIBRARY_PATH`, `ld.so.cache`, system
    /// folders): a program without an RPATH of its own.
    #[serde(default)]
    pub loader: Resolution,
    /// What torch's CUDA library loads through its RPATH or RUNPATH, when the node's
    /// `python3` has PyTorch and that differs from nothing: `None` when no torch asks (no
    /// `python3`, no torch, a CPU build) or a preload comes first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torch: Option<Found>,
    /// What was seen of the node's `python3` and torch (`None`: not looked at, as when a
    /// preload comes first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<Box<PythonSeen>>,
    /// Why reading stopped, when it failed (what was read before stays).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Which program's view of the node's NCCL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Program {
    /// A program without an RPATH of its own (nccl-tests, mpirun's ranks).
    Plain,
    /// A PyTorch program (a serving engine, a training script).
    Torch,
}

impl HostNccl {
    /// What `program` loads on the node, for the judge: the loader's answer, or torch's, with
    /// the other one kept (`otherwise`, or a note's worth) when they differ. A failed read is
    /// not known, never "missing".
    pub fn loads(&self, program: Program) -> Loads {
        if let Some(e) = &self.error {
            return Loads::NotYetKnown {
                why: format!("reading the node's own NCCL failed: {e}"),
            };
        }
        let torch = match program {
            Program::Torch => self.torch.clone(),
            Program::Plain => None,
        };
        let resolution = match torch {
            Some(t) => Resolution {
                otherwise: self
                    .loader
                    .loads
                    .clone()
                    .filter(|o| o.path != t.path)
                    .map(Box::new),
                loads: Some(t),
                skipped: self.loader.skipped.clone(),
                python: self.python.clone(),
            },
            None => Resolution {
                python: self.python.clone(),
                ..self.loader.clone()
            },
        };
        Loads::from_resolution(resolution, LibraryOrigin::Host)
    }

    /// The other program's answer, when it is another file: `a PyTorch program loads NCCL
    /// 2.28.9 from … (RPATH of …)` for a plan of nccl-tests' binaries.
    pub fn other_note(&self, program: Program) -> Option<String> {
        if self.error.is_some() {
            return None;
        }
        let torch = self.torch.as_ref()?;
        let plain = self.loader.loads.as_ref();
        if plain.is_some_and(|p| p.path == torch.path) {
            return None;
        }
        let show = |f: &Found| {
            Loads::Known {
                lib: f.clone(),
                origin: LibraryOrigin::Host,
                skipped: Vec::new(),
                otherwise: None,
            }
            .to_string()
        };
        match program {
            Program::Plain => Some(format!(
                "a PyTorch program there loads {} instead",
                show(torch)
            )),
            Program::Torch => Some(match plain {
                Some(p) => format!("a program without an RPATH of its own loads {}", show(p)),
                None => "a program without an RPATH of its own finds no libnccl.so.2".to_string(),
            }),
        }
    }
}

/// One `libnccl` file a process of a running host job has mapped (`/proc/PID/maps`), with the
/// build string read from that file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mapped {
    /// A process of the job that maps it.
    pub pid: u32,
    pub path: String,
    /// NCCL's build string in the file; `None` when it has none or could not be read (`error`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<LibVersion>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What the processes of one running host job have loaded for NCCL (`status`): observed in
/// the processes themselves, so no loader order is claimed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum ProcessNccl {
    /// The files mapped, one per path.
    Mapped { libs: Vec<Mapped> },
    /// No process of the job has a `libnccl` mapped (yet: NCCL is mapped when a program
    /// first loads it, a PyTorch program at `import torch`).
    NoneMapped,
    /// Looking failed: why.
    Failed { error: String },
}

impl fmt::Display for ProcessNccl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProcessNccl::Mapped { libs } => {
                let shown: Vec<String> = libs
                    .iter()
                    .map(|m| {
                        let what = match (&m.version, &m.error) {
                            (Some(v), _) => format!("NCCL {v}"),
                            (None, Some(e)) => format!("a file not read ({e})"),
                            (None, None) => "a file without NCCL's version string".to_string(),
                        };
                        format!("{what} from {} (mapped by pid {})", m.path, m.pid)
                    })
                    .collect();
                if libs.len() > 1 {
                    write!(f, "{} NCCL files in one job: ", libs.len())?;
                }
                f.write_str(&shown.join("; "))
            }
            ProcessNccl::NoneMapped => f.write_str(
                "no process of it has libnccl mapped (yet: it is mapped when a program first loads NCCL)",
            ),
            ProcessNccl::Failed { error } => write!(f, "not read: {error}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::libnccl::loader::{Machine, Via};
    use crate::libnccl::version::parse_build_string;

    /// As on the real GPU machine of the fixtures' README: the cache names 2.28.3, torch maps
    /// its wheel's 2.28.9.
    fn gpu_machine() -> HostNccl {
        HostNccl {
            loader: Resolution {
                loads: Some(Found {
                    path: "/usr/lib/x86_64-linux-gnu/libnccl.so.2".into(),
                    file: Some("/usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3".into()),
                    via: Via::LdSoCache,
                    by: None,
                    machine: Machine::Amd64,
                    version: parse_build_string("2.28.3+cuda13.0"),
                }),
                ..Resolution::default()
            },
            torch: Some(Found {
                path: "/sp/nvidia/nccl/lib/libnccl.so.2".into(),
                file: None,
                via: Via::Rpath,
                by: Some("/sp/torch/lib/libtorch_cuda.so".into()),
                machine: Machine::Amd64,
                version: parse_build_string("2.28.9+cuda12.9"),
            }),
            ..HostNccl::default()
        }
    }

    #[test]
    fn a_plain_program_takes_the_loaders_copy_and_a_torch_program_its_wheels() {
        let h = gpu_machine();
        assert_eq!(
            h.loads(Program::Plain).to_string(),
            "NCCL 2.28.3+cuda13.0 from /usr/lib/x86_64-linux-gnu/libnccl.so.2 → /usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3 (ld.so.cache)"
        );
        assert_eq!(
            h.loads(Program::Torch).to_string(),
            "NCCL 2.28.9+cuda12.9 from /sp/nvidia/nccl/lib/libnccl.so.2 (RPATH of /sp/torch/lib/libtorch_cuda.so)"
        );
        assert_eq!(
            h.other_note(Program::Plain).as_deref(),
            Some(
                "a PyTorch program there loads NCCL 2.28.9+cuda12.9 from /sp/nvidia/nccl/lib/libnccl.so.2 (RPATH of /sp/torch/lib/libtorch_cuda.so) instead"
            )
        );
        let Loads::Known { otherwise, .. } = h.loads(Program::Torch) else {
            panic!("known")
        };
        assert_eq!(
            otherwise.map(|o| o.path),
            Some("/usr/lib/x86_64-linux-gnu/libnccl.so.2".to_string())
        );
    }

    #[test]
    fn a_failed_read_is_not_known_and_a_node_without_nccl_is_missing() {
        let failed = HostNccl {
            error: Some("python3: permission denied".into()),
            ..gpu_machine()
        };
        assert!(matches!(
            failed.loads(Program::Plain),
            Loads::NotYetKnown { .. }
        ));
        assert_eq!(failed.other_note(Program::Plain), None);
        assert!(matches!(
            HostNccl::default().loads(Program::Torch),
            Loads::Missing { .. }
        ));
    }

    #[test]
    fn what_a_running_jobs_processes_mapped_is_said_with_the_pid_and_two_copies_are_named() {
        let one = |pid, path: &str, v: &str| Mapped {
            pid,
            path: path.into(),
            version: parse_build_string(v),
            error: None,
        };
        let p = ProcessNccl::Mapped {
            libs: vec![one(
                4242,
                "/usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3",
                "2.28.3+cuda13.0",
            )],
        };
        assert_eq!(
            p.to_string(),
            "NCCL 2.28.3+cuda13.0 from /usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3 (mapped by pid 4242)"
        );
        let two = ProcessNccl::Mapped {
            libs: vec![
                one(1, "/a/libnccl.so.2", "2.28.3"),
                one(2, "/b/libnccl.so.2", "2.28.9"),
            ],
        };
        assert!(
            two.to_string()
                .starts_with("2 NCCL files in one job: NCCL 2.28.3"),
            "{two}"
        );
    }

    #[test]
    fn what_the_probe_wrote_reads_back_the_same() {
        let h = gpu_machine();
        let text = serde_json::to_string(&h).unwrap();
        assert_eq!(serde_json::from_str::<HostNccl>(&text).unwrap(), h);
        // A file of an older or newer spark-launch with fields it does not know still reads.
        let older: HostNccl = serde_json::from_str(r#"{"loader": {}, "new": 1}"#).unwrap();
        assert_eq!(older, HostNccl::default());
    }
}
