//! Judging the NCCL a job's containers load, node by node: the same release everywhere (ranks
//! of different releases fail at init), at least [`RING_MIN`] on a switchless ring (one subnet
//! per cable needs `NCCL_IB_SUBNET_AWARE_ROUTING`, or NCCL times out in `ibv_modify_qp`), and a
//! `--nccl-from` library that really comes first. A version not known yet (a dry run on
//! snapshots, an image still to be pulled) is a note, never a failure.
//!
//! Plans, the executor's last check before starting and doctor's `cluster.image-nccl` all ask
//! this one function. Pure.

use crate::problem::Problem;
use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::loader::{Found, Machine, Resolution, Skipped, Via};
use super::python::PythonSeen;
use super::version::{LibVersion, NcclVersion, RING_MIN};
use crate::node::NodeName;

/// Where `--nccl-from` puts the library in the containers (first on `LD_LIBRARY_PATH`).
pub const MOUNT_DIR: &str = "/opt/spark-launch/nccl";

/// Where a loaded library came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LibraryOrigin {
    /// The image's own.
    Image,
    /// The library `--nccl-from` mounted.
    NcclFrom,
    /// The node's own (`--runtime host`: no image, the node's files and loader).
    Host,
}

/// What one node's container will load.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum Loads {
    /// Read on the node.
    Known {
        #[serde(flatten)]
        lib: Found,
        origin: LibraryOrigin,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        skipped: Vec<Skipped>,
        /// What the loader's own search would take instead, when torch's RPATH or RUNPATH
        /// changes the answer.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        otherwise: Option<Box<Found>>,
    },
    /// The loader finds no `libnccl.so.2`.
    Missing {
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        skipped: Vec<Skipped>,
        /// What was seen of the engine's Python and torch.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        python: Option<Box<PythonSeen>>,
    },
    /// Not read, and why.
    NotYetKnown { why: String },
}

impl Loads {
    /// From what the loader resolves (`origin` says whose library a hit is).
    pub fn from_resolution(r: Resolution, origin: LibraryOrigin) -> Loads {
        match r.loads {
            Some(lib) => Loads::Known {
                lib,
                origin,
                skipped: r.skipped,
                otherwise: r.otherwise,
            },
            None => Loads::Missing {
                skipped: r.skipped,
                python: r.python,
            },
        }
    }

    /// The release, when known.
    pub fn version(&self) -> Option<&LibVersion> {
        match self {
            Loads::Known { lib, .. } => lib.version.as_ref(),
            _ => None,
        }
    }
}

impl fmt::Display for Loads {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Loads::Known { lib, origin, .. } => {
                match &lib.version {
                    Some(v) => write!(f, "NCCL {v}")?,
                    None => write!(f, "a file without NCCL's version string")?,
                }
                write!(f, " from {}", lib.path)?;
                if let Some(file) = &lib.file {
                    write!(f, " → {file}")?;
                }
                write!(f, " ({}", lib.why())?;
                if *origin == LibraryOrigin::NcclFrom {
                    write!(f, ", --nccl-from")?;
                }
                write!(f, ")")
            }
            Loads::Missing { .. } => write!(f, "no libnccl.so.2 on the loader's path"),
            Loads::NotYetKnown { why } => write!(f, "not yet known ({why})"),
        }
    }
}

/// The library `--nccl-from` brings, as read on a node (before it is mounted).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FromLib {
    pub machine: Machine,
    pub version: Option<LibVersion>,
    /// Where it was read: `IMAGE:/opt/nccl/lib/libnccl.so.2` or the host path.
    pub source: String,
}

/// What a container with `--nccl-from` loads: the mounted library, preloaded (`LD_PRELOAD`, so
/// that it comes before any RPATH, torch's included) and first on `LD_LIBRARY_PATH`, unless
/// the image preloads an NCCL of its own (two NCCLs in one process) or the library is built
/// for another CPU (the loader ignores the preload and goes on to the image's).
pub fn with_nccl_from(image: &Resolution, from: &FromLib, arch: Option<Machine>) -> Loads {
    let preloaded = image.loads.as_ref().is_some_and(|f| f.via == Via::Preload);
    let mounted = format!("{MOUNT_DIR}/libnccl.so.2");
    if preloaded {
        return Loads::from_resolution(image.clone(), LibraryOrigin::Image);
    }
    if let Some(want) = arch
        && want != from.machine
    {
        let mut r = image.clone();
        r.skipped.insert(
            0,
            Skipped {
                path: mounted,
                why: format!("built for {}, the container is {want}", from.machine),
            },
        );
        return Loads::from_resolution(r, LibraryOrigin::Image);
    }
    Loads::Known {
        lib: Found {
            path: mounted,
            file: None,
            via: Via::Preload,
            by: None,
            machine: from.machine,
            version: from.version.clone(),
        },
        origin: LibraryOrigin::NcclFrom,
        skipped: Vec::new(),
        otherwise: None,
    }
}

/// What reading an image on one node gave (the pre-plan lookup).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
// One value per node, matched by every reader: boxing the read would buy nothing.
#[allow(clippy::large_enum_variant)]
pub enum ImageRead {
    /// Read on the node: the image's ID, CPU, own `LD_LIBRARY_PATH` and `LD_PRELOAD`, and what
    /// its loader resolves with the job's loader variables.
    Read {
        id: String,
        machine: Option<Machine>,
        ld_library_path: Option<String>,
        resolution: Resolution,
        /// The image's own `LD_PRELOAD` (kept behind `--nccl-from`'s).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ld_preload: Option<String>,
    },
    /// The image is not on this node (yet).
    NotOnNode,
    /// Reading failed: why.
    Failed { error: String },
}

/// What reading `--nccl-from`'s library on one node gave.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum FromRead {
    Read(FromLib),
    /// `--nccl-from IMAGE` is on no node (yet).
    NotOnNode,
    Failed {
        error: String,
    },
}

/// One node's container and what it loads.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeNccl {
    pub node: NodeName,
    pub image: String,
    #[serde(flatten)]
    pub loads: Loads,
}

/// What the job needs of its NCCL.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rule {
    /// A switchless ring (one subnet per cable): [`RING_MIN`] or later.
    pub ring: bool,
    /// `--allow-old-nccl`: an old release on a ring is a warning, not a refusal.
    pub allow_old: bool,
    /// `--nccl-from` as given, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_from: Option<String>,
    /// Serving (`--nccl-from` can fix an old image) or nccl-test (a newer nccl-build can).
    pub serving: bool,
    /// The image `nccl-build` makes by default, named in the fixes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_image: Option<String>,
    /// `--runtime host`: each node's own NCCL, fixed on the nodes, not in an image.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub host: bool,
}

/// One reason not to start, with the fix and the nodes it is about.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NcclProblem {
    #[serde(flatten)]
    pub problem: Problem,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<NodeName>,
}

impl NcclProblem {
    /// `what` is wrong on `nodes`, and its fix.
    pub fn new(nodes: Vec<NodeName>, what: impl Into<String>, fix: impl Into<String>) -> Self {
        NcclProblem {
            problem: Problem::new(what, fix),
            nodes,
        }
    }
}

/// The judgement: problems refuse the launch (exit 2), warnings and notes are printed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LibraryVerdict {
    pub problems: Vec<NcclProblem>,
    pub warnings: Vec<String>,
    pub notes: Vec<String>,
}

/// The fix for different releases on the nodes themselves (`--runtime host`).
const HOST_SAME_FIX: &str = "install one NCCL release on every node (the same libnccl2 package, or one folder first on LD_LIBRARY_PATH everywhere; a PyTorch program takes its wheel's: the same torch everywhere), or run in containers of one image";

fn names<'a>(nodes: impl Iterator<Item = &'a NodeName>) -> String {
    nodes.map(|n| n.as_str()).collect::<Vec<_>>().join(", ")
}

/// Judges every node's NCCL (head first) against `rule`.
pub fn judge(nodes: &[NodeNccl], rule: &Rule) -> LibraryVerdict {
    let mut v = LibraryVerdict::default();
    let build = rule
        .build_image
        .clone()
        .unwrap_or_else(|| "the image `spark-launch nccl-build` makes".to_string());
    // Not yet known: one note for all such nodes.
    let unknown: Vec<(&NodeName, &String)> = nodes
        .iter()
        .filter_map(|x| match &x.loads {
            Loads::NotYetKnown { why } => Some((&x.node, why)),
            _ => None,
        })
        .collect();
    if let Some((_, why)) = unknown.first() {
        v.notes.push(format!(
            "the NCCL the containers load on {} is not yet known: {why}{}",
            names(unknown.iter().map(|(n, _)| *n)),
            if rule.host {
                String::new()
            } else if rule.ring {
                format!("; the launch checks it (≥ {RING_MIN} on this ring) before starting")
            } else {
                "; the launch checks it before starting".to_string()
            }
        ));
    }
    for x in nodes {
        node_findings(x, rule, &build, &mut v);
    }
    // The same release everywhere.
    let mut by_version: BTreeMap<NcclVersion, Vec<&NodeName>> = BTreeMap::new();
    for x in nodes {
        if let Some(lv) = x.loads.version() {
            by_version.entry(lv.version).or_default().push(&x.node);
        }
    }
    if by_version.len() > 1 {
        let listed: Vec<String> = by_version
            .iter()
            .map(|(ver, ns)| format!("{ver} on {}", names(ns.iter().copied())))
            .collect();
        // Every node but those on the head's release (or the most common one).
        let keep = nodes
            .first()
            .and_then(|h| h.loads.version().map(|v| v.version))
            .or_else(|| {
                by_version
                    .iter()
                    .max_by_key(|(_, ns)| ns.len())
                    .map(|(v, _)| *v)
            });
        let odd: Vec<NodeName> = by_version
            .iter()
            .filter(|(v, _)| Some(**v) != keep)
            .flat_map(|(_, ns)| ns.iter().map(|n| (*n).clone()))
            .collect();
        v.problems.push(NcclProblem::new(
            odd,
            format!(
                "the containers would load different NCCL releases ({}): ranks of different releases fail at init (`NCCL version mismatch`) or hang",
                listed.join("; ")
            ),
            if rule.host {
                HOST_SAME_FIX.to_string()
            } else if rule.serving {
                format!(
                    "give every node the same library: --nccl-from {build} (or one image on every node: `spark-launch image push IMAGE`)"
                )
            } else {
                "build the nccl-tests image once per architecture from one NCCL ref (`spark-launch nccl-build --nccl-ref REF`), or pass --image with one NCCL everywhere".to_string()
            },
        ));
    }
    if rule.ring {
        let old: Vec<(&NodeName, &LibVersion)> = nodes
            .iter()
            .filter_map(|x| x.loads.version().map(|lv| (&x.node, lv)))
            .filter(|(_, lv)| lv.version < RING_MIN)
            .collect();
        if let Some((_, first)) = old.first() {
            let from_flag = nodes.iter().any(|x| {
                matches!(
                    x.loads,
                    Loads::Known {
                        origin: LibraryOrigin::NcclFrom,
                        ..
                    }
                )
            });
            let problem = format!(
                "{} would load NCCL {} on this switchless ring: a ring with one subnet per cable needs NCCL_IB_SUBNET_AWARE_ROUTING, which NCCL has only from {RING_MIN} on; older releases time out connecting (`ibv_modify_qp … Connection timed out`)",
                names(old.iter().map(|(n, _)| *n)),
                first
            );
            let fix = if rule.host {
                format!(
                    "install NCCL {RING_MIN} or later on every node where the loader finds it first (or put its folder first on LD_LIBRARY_PATH there), or run in containers with an image that has it (`spark-launch nccl-build`); or start anyway with --allow-old-nccl"
                )
            } else if from_flag {
                format!(
                    "give --nccl-from a library of NCCL {RING_MIN} or later: `spark-launch nccl-build` builds one ({build})"
                )
            } else if rule.serving {
                format!(
                    "bring a newer NCCL without rebuilding the image: `spark-launch nccl-build` (NCCL v{RING_MIN}-1), then add --nccl-from {build}; or start anyway with --allow-old-nccl"
                )
            } else {
                format!(
                    "build the nccl-tests image with NCCL {RING_MIN} or later (`spark-launch nccl-build`, its default) and run nccl-test with it; or start anyway with --allow-old-nccl"
                )
            };
            if rule.allow_old {
                v.warnings
                    .push(format!("{problem} (--allow-old-nccl: starting anyway)"));
            } else {
                v.problems.push(NcclProblem::new(
                    old.iter().map(|(n, _)| (*n).clone()).collect(),
                    problem,
                    fix,
                ));
            }
        }
    }
    v
}

/// One node's own notes and problems: no NCCL found (and what was looked at), a copy torch
/// loads that the loader's own search would not name, a file without NCCL's version, skipped
/// candidates, and a `--nccl-from` the container would not load.
fn node_findings(x: &NodeNccl, rule: &Rule, build: &str, v: &mut LibraryVerdict) {
    let n = &x.node;
    match &x.loads {
        Loads::Missing { skipped, python } => v.notes.push(format!(
            "{n}: {} has no libnccl.so.2 on its loader's path{}{}",
            x.image,
            skipped_text(skipped),
            python
                .as_ref()
                .map(|p| format!("; {p}"))
                .unwrap_or_default()
        )),
        Loads::Known {
            lib,
            origin,
            skipped,
            otherwise,
        } => {
            if let Some(o) = otherwise
                && o.path != lib.path
                && *origin != LibraryOrigin::NcclFrom
            {
                v.notes.push(format!(
                    "{n}: the loader's own search finds {} ({}, {}), but {} loads its own through its {}: that is the NCCL the engine runs",
                    o.path,
                    o.version.as_ref().map(|v| format!("NCCL {v}")).unwrap_or_else(|| "no NCCL version string".into()),
                    o.why(),
                    lib.by.as_deref().unwrap_or("a library"),
                    lib.via
                ));
            }
            if lib.version.is_none() {
                v.warnings.push(format!(
                    "{n}: {} holds no NCCL version string: it is not an NCCL build spark-launch can judge",
                    lib.path
                ));
            }
            if !skipped.is_empty() {
                v.notes
                    .push(format!("{n}: the loader skips{}", skipped_text(skipped)));
            }
            if let (Some(given), LibraryOrigin::Image) = (&rule.nccl_from, origin) {
                let why = if lib.via == Via::Preload {
                    format!(
                        "the image preloads {} (LD_PRELOAD or /etc/ld.so.preload), which comes before any search path",
                        lib.path
                    )
                } else {
                    skipped
                        .first()
                        .map(|s| format!("the loader skips it: {}", s.why))
                        .unwrap_or_else(|| "another copy comes first".to_string())
                };
                v.problems.push(NcclProblem::new(
                    vec![n.clone()],
                    format!(
                        "{n}: --nccl-from {given} would not be what the container loads: {why}; it would load NCCL {} from {}",
                        lib.version.as_ref().map(|v| v.to_string()).unwrap_or_else(|| "?".into()),
                        lib.path
                    ),
                    if lib.via == Via::Preload {
                        "if LD_PRELOAD names it, unset it for this job (`--env LD_PRELOAD=`); if /etc/ld.so.preload does, use an image without that file".to_string()
                    } else {
                        format!("give --nccl-from a library built for the nodes' CPU ({build} for their architecture)")
                    },
                ));
            }
        }
        Loads::NotYetKnown { .. } => {}
    }
}

fn skipped_text(skipped: &[Skipped]) -> String {
    if skipped.is_empty() {
        return String::new();
    }
    format!(
        " ({})",
        skipped
            .iter()
            .map(|s| format!("{}: {}", s.path, s.why))
            .collect::<Vec<_>>()
            .join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::libnccl::version::parse_build_string;

    fn known(v: &str, origin: LibraryOrigin) -> NodeNccl {
        NodeNccl {
            node: NodeName::new("x").unwrap(),
            image: "img".into(),
            loads: Loads::Known {
                lib: Found {
                    path: "/usr/lib/x86_64-linux-gnu/libnccl.so.2".into(),
                    file: None,
                    via: Via::LdSoCache,
                    by: None,
                    machine: Machine::Arm64,
                    version: parse_build_string(v),
                },
                origin,
                skipped: vec![],
                otherwise: None,
            },
        }
    }

    fn nodes(list: &[(&str, NodeNccl)]) -> Vec<NodeNccl> {
        list.iter()
            .map(|(n, x)| NodeNccl {
                node: NodeName::new(*n).unwrap(),
                ..x.clone()
            })
            .collect()
    }

    fn ring() -> Rule {
        Rule {
            ring: true,
            serving: true,
            build_image: Some("spark-launch/nccl-tests:nccl-v2.30.7-1-sm121-arm64".into()),
            ..Rule::default()
        }
    }

    #[test]
    fn an_old_nccl_on_a_ring_is_refused_with_nccl_from_as_the_fix() {
        let n = nodes(&[
            ("a", known("2.28.9+cuda12.9", LibraryOrigin::Image)),
            ("b", known("2.28.9+cuda12.9", LibraryOrigin::Image)),
            ("c", known("2.28.9+cuda12.9", LibraryOrigin::Image)),
        ]);
        let v = judge(&n, &ring());
        assert_eq!(v.problems.len(), 1, "{v:?}");
        assert!(
            v.problems[0]
                .problem
                .what
                .starts_with("a, b, c would load NCCL 2.28.9+cuda12.9 on this switchless ring")
        );
        assert!(
            v.problems[0]
                .problem
                .fix
                .contains("--nccl-from spark-launch/nccl-tests:nccl-v2.30.7-1-sm121-arm64"),
            "{}",
            v.problems[0].problem.fix
        );
        let allowed = judge(
            &n,
            &Rule {
                allow_old: true,
                ..ring()
            },
        );
        assert!(allowed.problems.is_empty());
        assert!(allowed.warnings[0].contains("--allow-old-nccl"));
        let two_nodes = judge(
            &n,
            &Rule {
                ring: false,
                ..ring()
            },
        );
        assert!(two_nodes.problems.is_empty());
    }

    #[test]
    fn different_releases_on_two_nodes_are_refused_and_unknown_ones_are_a_note() {
        let n = nodes(&[
            ("a", known("2.30.7+cuda13.3", LibraryOrigin::Image)),
            ("b", known("2.28.9+cuda12.9", LibraryOrigin::Image)),
            (
                "c",
                NodeNccl {
                    node: NodeName::new("c").unwrap(),
                    image: "img".into(),
                    loads: Loads::NotYetKnown {
                        why: "a dry run on snapshots".into(),
                    },
                },
            ),
        ]);
        let v = judge(
            &n,
            &Rule {
                ring: false,
                ..ring()
            },
        );
        assert_eq!(v.problems.len(), 1);
        assert!(
            v.problems[0]
                .problem
                .what
                .contains("2.28.9 on b; 2.30.7 on a"),
            "{v:?}"
        );
        assert_eq!(
            v.notes[0],
            "the NCCL the containers load on c is not yet known: a dry run on snapshots; the launch checks it before starting"
        );
    }

    #[test]
    fn torchs_own_copy_is_judged_and_a_note_names_what_the_loaders_search_alone_finds() {
        // As seen on a GPU machine: the cache names 2.28.3, torch maps its wheel's 2.28.9.
        let torch = Found {
            path: "/sp/nvidia/nccl/lib/libnccl.so.2".into(),
            file: None,
            via: Via::Rpath,
            by: Some("/sp/torch/lib/libtorch_cuda.so".into()),
            machine: Machine::Arm64,
            version: parse_build_string("2.28.9+cuda13.0"),
        };
        let system = Found {
            path: "/lib/aarch64-linux-gnu/libnccl.so.2".into(),
            via: Via::LdSoCache,
            by: None,
            version: parse_build_string("2.28.3+cuda13.0"),
            ..torch.clone()
        };
        let loads = Loads::from_resolution(
            Resolution {
                loads: Some(torch),
                otherwise: Some(Box::new(system)),
                ..Resolution::default()
            },
            LibraryOrigin::Image,
        );
        assert_eq!(
            loads.to_string(),
            "NCCL 2.28.9+cuda13.0 from /sp/nvidia/nccl/lib/libnccl.so.2 (RPATH of /sp/torch/lib/libtorch_cuda.so)"
        );
        let n = nodes(&[(
            "a",
            NodeNccl {
                node: NodeName::new("a").unwrap(),
                image: "img".into(),
                loads,
            },
        )]);
        let v = judge(&n, &ring());
        assert!(
            v.problems[0]
                .problem
                .what
                .starts_with("a would load NCCL 2.28.9+cuda13.0 on this switchless ring"),
            "{v:?}"
        );
        assert_eq!(
            v.notes,
            vec![
                "a: the loader's own search finds /lib/aarch64-linux-gnu/libnccl.so.2 (NCCL 2.28.3+cuda13.0, ld.so.cache), but /sp/torch/lib/libtorch_cuda.so loads its own through its RPATH: that is the NCCL the engine runs"
            ]
        );
    }

    #[test]
    fn nccl_from_wins_unless_the_image_preloads_nccl_or_the_library_is_for_another_cpu() {
        let image = Resolution {
            loads: Some(Found {
                path: "/usr/lib/aarch64-linux-gnu/libnccl.so.2".into(),
                file: None,
                via: Via::LdSoCache,
                by: None,
                machine: Machine::Arm64,
                version: parse_build_string("2.28.9+cuda12.9"),
            }),
            ..Resolution::default()
        };
        let from = FromLib {
            machine: Machine::Arm64,
            version: parse_build_string("2.30.7+cuda13.3"),
            source: "nccl:/opt/nccl/lib/libnccl.so.2".into(),
        };
        let l = with_nccl_from(&image, &from, Some(Machine::Arm64));
        assert_eq!(
            l.to_string(),
            "NCCL 2.30.7+cuda13.3 from /opt/spark-launch/nccl/libnccl.so.2 (preloaded, --nccl-from)"
        );
        let wrong = with_nccl_from(
            &image,
            &FromLib {
                machine: Machine::Amd64,
                ..from.clone()
            },
            Some(Machine::Arm64),
        );
        let n = nodes(&[(
            "a",
            NodeNccl {
                node: NodeName::new("a").unwrap(),
                image: "img".into(),
                loads: wrong,
            },
        )]);
        let v = judge(
            &n,
            &Rule {
                nccl_from: Some("nccl:amd64".into()),
                ..ring()
            },
        );
        assert!(
            v.problems[0]
                .problem
                .what
                .contains("built for amd64, the container is arm64"),
            "{v:?}"
        );
        let mut pre = image.clone();
        if let Some(f) = &mut pre.loads {
            f.via = Via::Preload;
        }
        let l = with_nccl_from(&pre, &from, Some(Machine::Arm64));
        assert!(matches!(
            l,
            Loads::Known {
                origin: LibraryOrigin::Image,
                ..
            }
        ));
    }
}
