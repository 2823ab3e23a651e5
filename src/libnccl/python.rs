//! Where an image's Python finds `torch`, decided from the image's environment and a few
//! facts read from its files (never by running Python): the first `python3` on `PATH` (what
//! the serving engines start), its version from the `python3.N` it leads to, a virtual
//! environment when a `pyvenv.cfg` sits above it, and the folders `sys.path` holds, in
//! CPython's order: `PYTHONPATH`, the user site (`~/.local/lib/python3.N/site-packages`), then
//! the prefix's site folders (Debian's `dist-packages` for `/usr`, `site-packages` otherwise;
//! a venv's own, and the base's when `include-system-site-packages = true`). The first folder
//! holding `torch/__init__.py` is the `torch` an `import torch` gets.
//!
//! Then what PyTorch's pip wheels do: `torch/lib/libtorch_cuda.so` asks for `libnccl.so.2`
//! with an RPATH of `$ORIGIN/../../nvidia/nccl/lib` (the `nvidia-nccl-cu*` wheel beside it).
//! Pure: paths and file contents in, paths out; `runtime::libnccl` reads the image.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::elf::Dynamic;
use super::loader::SONAME;

/// Docker's `PATH` when an image sets none.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// Where PyTorch keeps its CUDA library, under a site folder.
pub const TORCH_CUDA: &str = "torch/lib/libtorch_cuda.so";
/// What makes a folder the `torch` package.
pub const TORCH_INIT: &str = "torch/__init__.py";

/// The image's variables that decide where Python looks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PythonEnv {
    pub path: Option<String>,
    pub pythonpath: Option<String>,
    pub home: Option<String>,
}

/// `DIR/python3` for every absolute folder of `PATH`, in order (the first that exists is the
/// one a `python3` command runs).
pub fn interpreters(path: Option<&str>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for d in path.unwrap_or(DEFAULT_PATH).split(':') {
        if !d.starts_with('/') {
            continue;
        }
        let p = join(d, "python3");
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

/// `3.12` from the first of `names` whose file name is `python3.12`.
pub fn version_of(names: &[&str]) -> Option<String> {
    names.iter().find_map(|n| {
        let base = n.rsplit('/').next().unwrap_or(n);
        let v = base.strip_prefix("python")?;
        let (major, minor) = v.split_once('.')?;
        (major == "3" && !minor.is_empty() && minor.chars().all(|c| c.is_ascii_digit()))
            .then(|| v.to_string())
    })
}

/// What a `pyvenv.cfg` says.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Venv {
    /// Its root (the folder of `pyvenv.cfg`).
    pub root: String,
    /// `home`: the folder of the base interpreter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home: Option<String>,
    /// `include-system-site-packages = true`.
    #[serde(default)]
    pub system_site: bool,
    /// `3.12` from `version`/`version_info`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// Reads a `pyvenv.cfg` found in `root`.
pub fn parse_pyvenv(root: &str, text: &str) -> Venv {
    let mut v = Venv {
        root: root.to_string(),
        ..Venv::default()
    };
    for line in text.lines() {
        let Some((k, val)) = line.split_once('=') else {
            continue;
        };
        let val = val.trim();
        match k.trim() {
            "home" => v.home = Some(val.trim_end_matches('/').to_string()),
            "include-system-site-packages" => v.system_site = val.eq_ignore_ascii_case("true"),
            "version" | "version_info" => {
                let mut parts = val.split('.');
                if let (Some(a), Some(b)) = (parts.next(), parts.next()) {
                    v.version = Some(format!("{a}.{b}"));
                }
            }
            _ => {}
        }
    }
    v
}

/// The folders a `pyvenv.cfg` is looked for in: beside the interpreter and one up (CPython
/// looks there, by the path as run, before following links).
pub fn venv_roots(named: &str) -> Vec<String> {
    let bin = parent(named);
    vec![bin.clone(), parent(&bin)]
}

fn parent(p: &str) -> String {
    match p.trim_end_matches('/').rsplit_once('/') {
        Some(("", _)) | None => "/".to_string(),
        Some((d, _)) => d.to_string(),
    }
}

fn join(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{}/{name}", dir.trim_end_matches('/'))
    }
}

/// A prefix's site folders for Python `version`.
fn prefix_sites(prefix: &str, version: &str) -> Vec<String> {
    let py = format!("python{version}");
    let mut out = Vec::new();
    if prefix == "/usr" {
        // Debian and Ubuntu: pip writes /usr/local/…/dist-packages, apt /usr/lib/python3/….
        out.push(format!("/usr/local/lib/{py}/dist-packages"));
        out.push("/usr/lib/python3/dist-packages".to_string());
        out.push(format!("/usr/lib/{py}/dist-packages"));
        out.push(format!("/usr/lib64/{py}/site-packages"));
    }
    out.push(join(prefix, &format!("lib/{py}/site-packages")));
    out
}

/// The interpreter a `python3` command runs, as found in the image.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interpreter {
    /// As found on `PATH`.
    pub path: String,
    /// The file it leads to, when a link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub venv: Option<Venv>,
}

impl Interpreter {
    /// The folders `sys.path` holds that may carry packages, in CPython's order.
    pub fn site_dirs(&self, env: &PythonEnv) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let mut push = |d: String| {
            if d.starts_with('/') && !out.contains(&d) {
                out.push(d);
            }
        };
        for d in env.pythonpath.as_deref().unwrap_or("").split(':') {
            push(d.trim_end_matches('/').to_string());
        }
        let Some(version) = self
            .version
            .clone()
            .or_else(|| self.venv.as_ref().and_then(|v| v.version.clone()))
        else {
            // No `python3.N` to go by: Debian's unversioned folder is all that can be named.
            push("/usr/lib/python3/dist-packages".to_string());
            return out;
        };
        let file = self.file.as_deref().unwrap_or(&self.path);
        let base_prefix = match &self.venv {
            Some(v) => v.home.as_deref().map(parent),
            None => Some(parent(&parent(file))),
        };
        let user = self.venv.as_ref().is_none_or(|v| v.system_site);
        if user {
            let home = env.home.as_deref().unwrap_or("/root");
            push(join(
                home,
                &format!(".local/lib/python{version}/site-packages"),
            ));
        }
        if let Some(v) = &self.venv {
            push(join(&v.root, &format!("lib/python{version}/site-packages")));
        }
        if self.venv.as_ref().is_none_or(|v| v.system_site) {
            for d in base_prefix
                .map(|p| prefix_sites(&p, &version))
                .unwrap_or_default()
            {
                push(d);
            }
        }
        out
    }
}

/// The library that asks the loader for `libnccl.so.2`, and where it tells it to look.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Requester {
    /// Its path (`$ORIGIN` is its folder).
    pub object: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpath: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runpath: Option<String>,
}

/// What was found of PyTorch in an image.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Torch {
    /// The `torch` package folder.
    pub package: String,
    /// `torch/lib/libtorch_cuda.so` and what it says; `None` when there is none (a CPU build).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_lib: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dynamic: Option<Dynamic>,
    /// Why its dynamic section could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Torch {
    /// The loader's requester when torch's CUDA library asks for `libnccl.so.2`.
    pub fn requester(&self) -> Option<Requester> {
        let d = self.dynamic.as_ref()?;
        if !d.needed.iter().any(|n| n == SONAME) {
            return None;
        }
        Some(Requester {
            object: self.cuda_lib.clone()?,
            rpath: d.rpath.clone(),
            runpath: d.runpath.clone(),
        })
    }
}

/// What was looked at for the engine's Python: the interpreter, the folders searched, and
/// torch when found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PythonSeen {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interpreter: Option<Interpreter>,
    /// `PATH`'s `python3` candidates when none exists, or the site folders searched.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub searched: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torch: Option<Torch>,
}

impl fmt::Display for PythonSeen {
    /// What was seen, for notes: `torch at DIR (libtorch_cuda.so needs no libnccl.so.2)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(i) = &self.interpreter else {
            return write!(
                f,
                "no python3 on PATH (looked at {})",
                self.searched.join(", ")
            );
        };
        let Some(t) = &self.torch else {
            return write!(
                f,
                "{} has no torch (looked in {})",
                i.path,
                self.searched.join(", ")
            );
        };
        match (&t.cuda_lib, &t.dynamic, &t.error) {
            (None, _, _) => write!(
                f,
                "torch at {} has no {TORCH_CUDA} (a CPU build)",
                t.package
            ),
            (Some(lib), _, Some(e)) => write!(f, "{lib} could not be read: {e}"),
            (Some(lib), Some(d), None) if !d.needed.iter().any(|n| n == SONAME) => write!(
                f,
                "{lib} does not ask for {SONAME} (NCCL linked into it, or none)"
            ),
            (Some(lib), Some(d), None) => {
                let (kind, list) = match (&d.runpath, &d.rpath) {
                    (Some(r), _) => ("RUNPATH", r.as_str()),
                    (None, Some(r)) => ("RPATH", r.as_str()),
                    (None, None) => ("no RPATH", ""),
                };
                write!(f, "{lib} asks for {SONAME} with {kind} {list}")
            }
            (Some(lib), None, None) => write!(f, "{lib} was not read"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(path: &str) -> PythonEnv {
        PythonEnv {
            path: Some(path.into()),
            pythonpath: None,
            home: None,
        }
    }

    #[test]
    fn python3_is_looked_for_in_every_absolute_path_folder_in_order() {
        assert_eq!(
            interpreters(Some("/opt/venv/bin:relative:/usr/bin/:/usr/bin")),
            vec!["/opt/venv/bin/python3", "/usr/bin/python3"]
        );
        assert_eq!(interpreters(None)[0], "/usr/local/sbin/python3");
        assert_eq!(
            version_of(&["/usr/bin/python3", "/usr/bin/python3.12"]),
            Some("3.12".into())
        );
        assert_eq!(
            version_of(&["/usr/bin/python3", "/usr/bin/python3-config"]),
            None
        );
    }

    #[test]
    fn a_debian_python_looks_in_the_user_site_then_local_and_system_dist_packages() {
        let i = Interpreter {
            path: "/usr/bin/python3".into(),
            file: Some("/usr/bin/python3.12".into()),
            version: Some("3.12".into()),
            venv: None,
        };
        assert_eq!(
            i.site_dirs(&PythonEnv {
                pythonpath: Some("/opt/ray/site:rel".into()),
                ..env("/usr/bin")
            }),
            vec![
                "/opt/ray/site",
                "/root/.local/lib/python3.12/site-packages",
                "/usr/local/lib/python3.12/dist-packages",
                "/usr/lib/python3/dist-packages",
                "/usr/lib/python3.12/dist-packages",
                "/usr/lib64/python3.12/site-packages",
                "/usr/lib/python3.12/site-packages",
            ]
        );
        // A python.org build in /usr/local (the `python:3.12` images).
        let local = Interpreter {
            path: "/usr/local/bin/python3".into(),
            file: Some("/usr/local/bin/python3.12".into()),
            version: Some("3.12".into()),
            venv: None,
        };
        assert_eq!(
            local.site_dirs(&env("/usr/local/bin")).last().unwrap(),
            "/usr/local/lib/python3.12/site-packages"
        );
    }

    #[test]
    fn a_venv_looks_in_its_own_site_packages_and_the_base_only_when_it_says_so() {
        let cfg = "home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.12.3\n";
        let v = parse_pyvenv("/opt/venv", cfg);
        assert_eq!(v.home.as_deref(), Some("/usr/bin"));
        assert_eq!(v.version.as_deref(), Some("3.12"));
        let i = Interpreter {
            path: "/opt/venv/bin/python3".into(),
            file: Some("/usr/bin/python3.12".into()),
            version: Some("3.12".into()),
            venv: Some(v.clone()),
        };
        assert_eq!(
            i.site_dirs(&env("/opt/venv/bin:/usr/bin")),
            vec!["/opt/venv/lib/python3.12/site-packages"]
        );
        let with_system = Interpreter {
            venv: Some(Venv {
                system_site: true,
                ..v
            }),
            ..i
        };
        let dirs = with_system.site_dirs(&env("/opt/venv/bin"));
        assert_eq!(dirs[1], "/opt/venv/lib/python3.12/site-packages");
        assert!(dirs.contains(&"/usr/local/lib/python3.12/dist-packages".to_string()));
        assert_eq!(
            venv_roots("/opt/venv/bin/python3"),
            vec!["/opt/venv/bin", "/opt/venv"]
        );
    }

    #[test]
    fn torch_is_a_requester_only_when_its_cuda_library_needs_libnccl() {
        let mut t = Torch {
            package: "/sp/torch".into(),
            cuda_lib: Some("/sp/torch/lib/libtorch_cuda.so".into()),
            dynamic: Some(Dynamic {
                needed: vec!["libc10.so".into(), "libnccl.so.2".into()],
                soname: Some("libtorch_cuda.so".into()),
                rpath: Some("$ORIGIN/../../nvidia/nccl/lib:$ORIGIN".into()),
                runpath: None,
            }),
            error: None,
        };
        let r = t.requester().unwrap();
        assert_eq!(r.object, "/sp/torch/lib/libtorch_cuda.so");
        let seen = PythonSeen {
            interpreter: Some(Interpreter::default()),
            searched: vec![],
            torch: Some(t.clone()),
        };
        assert_eq!(
            seen.to_string(),
            "/sp/torch/lib/libtorch_cuda.so asks for libnccl.so.2 with RPATH $ORIGIN/../../nvidia/nccl/lib:$ORIGIN"
        );
        if let Some(d) = &mut t.dynamic {
            d.needed.pop();
        }
        assert_eq!(t.requester(), None);
    }
}
