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
//! Pure: what the probe read in, the judge's `Loads` out. Reading the files is
//! `runtime::host_nccl`'s job.

use serde::{Deserialize, Serialize};

use super::check::{LibraryOrigin, Loads};
use super::loader::{Found, Resolution};
use super::python::PythonSeen;

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
    fn what_the_probe_wrote_reads_back_the_same() {
        let h = gpu_machine();
        let text = serde_json::to_string(&h).unwrap();
        assert_eq!(serde_json::from_str::<HostNccl>(&text).unwrap(), h);
        // A file of an older or newer spark-launch with fields it does not know still reads.
        let older: HostNccl = serde_json::from_str(r#"{"loader": {}, "new": 1}"#).unwrap();
        assert_eq!(older, HostNccl::default());
    }
}
