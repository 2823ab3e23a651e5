//! The NCCL part of a launch plan: what each node's container will load (from the pre-plan
//! lookup, or "not yet known"), `--nccl-from IMAGE|PATH` (the library mounted read-only at
//! `/opt/spark-launch/nccl`, preloaded with `LD_PRELOAD` — an RPATH such as PyTorch's comes
//! before `LD_LIBRARY_PATH`, a preload before both — and put first on `LD_LIBRARY_PATH`, the
//! image's own values kept behind), the steps that stage it and check it once the images are on
//! the nodes (placed by the planners, right after their images), and the refusals
//! `libnccl::check` gives (an old NCCL on a ring, different releases, a `--nccl-from` the loader
//! would not take).
//!
//! Pure: the job's nodes, the request and what was read in; the nodes' mounts, the steps and
//! the NCCL section out.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::derive::NodeInput;
use crate::libnccl::check::NcclProblem;
use crate::libnccl::{
    FromLib, FromRead, ImageRead, LibraryVerdict, Loads, MOUNT_DIR, NodeNccl, Rule, judge,
};
use crate::node::NodeName;
use crate::plan::spec::{ContainerSpec, Mount, MountKind};
use crate::plan::{Launch, NodePlan, RuntimeKind, Step};
use crate::workload::nccl_build;
use crate::workload::steps;

/// What stands in for the image of a host process in the NCCL section and its notes.
pub const HOST: &str = "the host";

/// `--nccl-from`: the `libnccl.so.2` of an image (the one its own loader resolves; an
/// `nccl-build` image), or a folder on every node holding `libnccl.so.2`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NcclFrom {
    Image(String),
    Path(String),
}

impl FromStr for NcclFrom {
    type Err = String;
    /// An absolute path is a folder on the nodes; anything else an image reference.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if s.is_empty() {
            return Err("--nccl-from needs an image or an absolute folder".into());
        }
        if s.starts_with('/') {
            return Ok(NcclFrom::Path(s.trim_end_matches('/').to_string()));
        }
        if s.starts_with('.') || s.starts_with('~') {
            return Err(format!(
                "--nccl-from {s}: give the folder as an absolute path on the nodes (e.g. /opt/nccl-2.30.7/lib), or an image"
            ));
        }
        if s.chars().any(|c| c.is_whitespace()) {
            return Err(format!("--nccl-from {s:?}: not an image reference"));
        }
        Ok(NcclFrom::Image(s.to_string()))
    }
}

impl fmt::Display for NcclFrom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NcclFrom::Image(i) => f.write_str(i),
            NcclFrom::Path(p) => f.write_str(p),
        }
    }
}

/// The named volume that holds `image`'s library on each node: readable, and unique per image
/// reference (`sl-nccl-spark-launch-nccl-tests-nccl-v2.30.7-1-sm121-arm64-1a2b3c4d`).
pub fn volume_name(image: &str) -> String {
    let mut slug: String = image
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    slug.truncate(80);
    let hash = crate::digest::hex(&Sha256::digest(image.as_bytes())[..4]);
    format!("sl-nccl-{}-{hash}", slug.trim_matches('-'))
}

/// An image whose NCCL the pre-plan lookup reads on a node, with the loader variables the job
/// sets over the image's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageAsk {
    pub image: String,
    pub ld_library_path: Option<String>,
    pub ld_preload: Option<String>,
}

/// What the pre-plan lookup read for the NCCL (empty in a dry run on snapshots).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NcclReads {
    /// Per node: the image read there (its reference) and what came of it.
    pub images: BTreeMap<NodeName, (String, ImageRead)>,
    /// Per node: `--nccl-from`'s library.
    pub from: BTreeMap<NodeName, FromRead>,
}

/// The NCCL section of a plan: what each node's container loads, the rule it was judged by,
/// and what the user should read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NcclPlan {
    /// Head first.
    pub nodes: Vec<NodeNccl>,
    pub rule: Rule,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_from: Option<NcclFrom>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// The rule a job's NCCL is judged by: a ring when derive says so; the image `nccl-build`
/// makes for the head's architecture named in the fixes.
pub fn rule(
    ring: bool,
    allow_old: bool,
    nccl_from: Option<&NcclFrom>,
    serving: bool,
    head: Option<&NodeInput>,
) -> Rule {
    Rule {
        ring,
        allow_old,
        nccl_from: nccl_from.map(|f| f.to_string()),
        serving,
        build_image: head
            .and_then(|h| h.facts.arch.as_deref())
            .and_then(nccl_build::CpuArch::from_uname)
            .map(nccl_build::default_image),
        host: false,
    }
}

/// What a host process of the job loads on `node` (`--runtime host`): the node's own NCCL as
/// the probe read it, for a program without an RPATH of its own (the host runtime's NCCL
/// workload is nccl-tests' binaries under mpirun); not known when the probe did not record it
/// or the job sets the loader's variables to other values than the probe read with.
fn host_loads(
    node: &NodeName,
    input: Option<&NodeInput>,
    env: &BTreeMap<String, String>,
    notes: &mut Vec<String>,
) -> Loads {
    use crate::libnccl::host::Program;
    let Some(h) = input.and_then(|i| i.facts.host.nccl.as_ref()) else {
        return Loads::NotYetKnown {
            why: format!(
                "the probe of {node} does not record its own NCCL (host-nccl.json: a snapshot of an older capture); capture it again with this spark-launch (`spark-launch probe --capture DIR` there)"
            ),
        };
    };
    for (var, read) in [
        ("LD_LIBRARY_PATH", &h.ld_library_path),
        ("LD_PRELOAD", &h.ld_preload),
    ] {
        if let Some(set) = env.get(var)
            && Some(set) != read.as_ref()
        {
            return Loads::NotYetKnown {
                why: format!(
                    "the job sets {var}={set}, the probe read {node} with {}",
                    read.as_deref()
                        .map(|r| format!("{var}={r}"))
                        .unwrap_or_else(|| format!("{var} unset"))
                ),
            };
        }
    }
    if let Some(n) = h.other_note(Program::Plain) {
        notes.push(format!("{node}: {n}"));
    }
    h.loads(Program::Plain)
}

/// The ring's cabling direction (`fabric::cabling::ring_direction`) as plan warnings.
pub fn direction_warnings(inputs: &[NodeInput]) -> Vec<String> {
    crate::fabric::cabling::link_map(inputs, &[])
        .map(|m| crate::fabric::cabling::ring_direction(inputs, &m))
        .unwrap_or_default()
        .into_iter()
        .map(|(_, p)| format!("{} (fix: {})", p.what, p.fix))
        .collect()
}

/// Why the reads say nothing for a node.
fn unknown(reads: Option<&NcclReads>, node: &NodeName, image: &str) -> Loads {
    Loads::NotYetKnown {
        why: match reads {
            None => "a dry run on snapshots reads no image".to_string(),
            Some(_) => format!("{image} is not on {node} yet: it is pushed or pulled at launch"),
        },
    }
}

/// The image read for `node`, or (the image is not there yet) the read of the same reference
/// on another node: the launch gives every node the same content.
fn image_read<'a>(reads: &'a NcclReads, node: &NodeName, image: &str) -> Option<&'a ImageRead> {
    let own = reads
        .images
        .get(node)
        .filter(|(i, _)| i == image)
        .map(|(_, r)| r);
    match own {
        Some(r @ ImageRead::Read { .. }) => Some(r),
        _ => reads
            .images
            .values()
            .find(|(i, r)| i == image && matches!(r, ImageRead::Read { .. }))
            .map(|(_, r)| r)
            .or(own),
    }
}

fn from_lib<'a>(
    reads: &'a NcclReads,
    node: &NodeName,
    from: &NcclFrom,
) -> Result<&'a FromLib, String> {
    match reads.from.get(node) {
        Some(FromRead::Read(l)) => Ok(l),
        other => {
            // An image's library is the same on every node that has the image.
            if let NcclFrom::Image(_) = from
                && let Some(l) = reads.from.values().find_map(|r| match r {
                    FromRead::Read(l) => Some(l),
                    _ => None,
                })
            {
                return Ok(l);
            }
            Err(match other {
                Some(FromRead::Failed { error }) => error.clone(),
                Some(FromRead::NotOnNode) | None => format!("{from} is on no node yet"),
                Some(FromRead::Read(_)) => String::new(),
            })
        }
    }
}

/// With `--nccl-from`: the container's `LD_LIBRARY_PATH` and `LD_PRELOAD` with the mounted
/// library first and the image's own values behind (a note when a dry run cannot know them, a
/// problem when a live launch cannot); the image's CPU, when read.
fn loader_vars(
    spec: &mut ContainerSpec,
    read: Option<&ImageRead>,
    reads: Option<&NcclReads>,
    node: &NodeName,
    notes: &mut Vec<String>,
    problems: &mut Vec<NcclProblem>,
) -> Option<crate::libnccl::loader::Machine> {
    let (own_path, own_preload, machine) = match read {
        Some(ImageRead::Read {
            ld_library_path,
            ld_preload,
            machine,
            ..
        }) => (
            Some(ld_library_path.clone()),
            Some(ld_preload.clone()),
            *machine,
        ),
        _ => (None, None, None),
    };
    let base = match (spec.env.get("LD_LIBRARY_PATH"), own_path) {
        (Some(given), _) => Some(Some(given.clone())),
        (None, known) => known,
    };
    let value = match &base {
        Some(Some(b)) if !b.is_empty() => format!("{MOUNT_DIR}:{b}"),
        _ => MOUNT_DIR.to_string(),
    };
    spec.env.insert("LD_LIBRARY_PATH".into(), value);
    // Preloaded, so that it wins over an RPATH too (PyTorch's, to its own wheel).
    let preload_base = match (spec.env.get("LD_PRELOAD"), own_preload) {
        (Some(given), _) => Some(Some(given.clone())),
        (None, known) => known,
    };
    let lib = format!("{MOUNT_DIR}/{}", crate::libnccl::SONAME);
    let preload = match &preload_base {
        Some(Some(b)) if !b.trim().is_empty() => format!("{lib}:{b}"),
        _ => lib,
    };
    spec.env.insert("LD_PRELOAD".into(), preload);
    if base.is_none() || preload_base.is_none() {
        match reads {
            None => {
                let note = format!(
                    "LD_PRELOAD={MOUNT_DIR}/{} and LD_LIBRARY_PATH={MOUNT_DIR}: a live launch keeps {}'s own values behind them, read from the image on the nodes",
                    crate::libnccl::SONAME,
                    spec.image
                );
                if !notes.contains(&note) {
                    notes.push(note);
                }
            }
            Some(_) => problems.push(NcclProblem::new(
                vec![node.clone()],
                format!(
                    "{node}: {} is on no node yet, so its own LD_LIBRARY_PATH and LD_PRELOAD cannot be kept behind --nccl-from",
                    spec.image
                ),
                format!(
                    "put the image on the head first (`docker pull {}` there), then launch again: spark-launch pushes it to the others",
                    spec.image
                ),
            )),
        }
    }
    machine
}

/// The NCCL steps of a Docker job whose containers run on `nodes`, for the planner to place
/// right after its images are ensured: with `--nccl-from IMAGE`, that image on every node and
/// its library staged into the volume; then the check of what every container will load.
pub fn steps(nodes: &[NodeName], nccl_from: Option<&NcclFrom>, rule: &Rule) -> Vec<Step> {
    let mut out = Vec::new();
    if nodes.is_empty() {
        return out;
    }
    if let Some(NcclFrom::Image(image)) = nccl_from {
        out.push(steps::ensure_image(image.clone(), nodes.to_vec()));
        out.push(steps::stage_nccl(
            image.clone(),
            volume_name(image),
            nodes.to_vec(),
        ));
    }
    out.push(steps::check_nccl(nodes.to_vec(), rule.clone()));
    out
}

/// The NCCL part of a job's nodes: with `--nccl-from`, the mount, `LD_PRELOAD` and
/// `LD_LIBRARY_PATH` in
/// every container; and the plan's NCCL section. Every problem refuses the launch. The steps
/// are [`steps`]'s.
pub fn section(
    job_nodes: &mut [NodePlan],
    runtime: RuntimeKind,
    nccl_from: Option<&NcclFrom>,
    mut rule: Rule,
    reads: Option<&NcclReads>,
    inputs: &[NodeInput],
) -> Result<NcclPlan, Vec<NcclProblem>> {
    let mut problems = Vec::new();
    let mut notes = Vec::new();
    let mut nodes = Vec::new();
    rule.host = runtime == RuntimeKind::Host;
    for n in job_nodes.iter_mut() {
        let node = n.node.clone();
        let spec = match &mut n.launch {
            Launch::Container(spec) => spec,
            Launch::Process(p) => {
                let input = inputs.iter().find(|i| i.name == node);
                let loads = host_loads(&node, input, &p.env, &mut notes);
                nodes.push(NodeNccl {
                    node,
                    image: HOST.to_string(),
                    loads,
                });
                continue;
            }
        };
        let read = reads.and_then(|r| image_read(r, &node, &spec.image));
        let image_loads = match read {
            Some(ImageRead::Read { resolution, .. }) => {
                Loads::from_resolution(resolution.clone(), crate::libnccl::LibraryOrigin::Image)
            }
            Some(ImageRead::Failed { error }) => Loads::NotYetKnown {
                why: format!("reading {} on {node} failed: {error}", spec.image),
            },
            Some(ImageRead::NotOnNode) | None => unknown(reads, &node, &spec.image),
        };
        let loads = match nccl_from {
            None => image_loads,
            Some(from) => {
                // The mount, and the loader path with the image's own behind it.
                let (source, kind) = match from {
                    NcclFrom::Image(i) => (volume_name(i), MountKind::Volume),
                    NcclFrom::Path(p) => (p.clone(), MountKind::Bind),
                };
                spec.mounts.retain(|m| m.target != MOUNT_DIR);
                spec.mounts.push(Mount {
                    source,
                    target: MOUNT_DIR.to_string(),
                    read_only: true,
                    kind,
                });
                let machine = loader_vars(spec, read, reads, &node, &mut notes, &mut problems);
                match (reads.map(|r| from_lib(r, &node, from)), read) {
                    (Some(Ok(lib)), Some(ImageRead::Read { resolution, .. })) => {
                        crate::libnccl::check::with_nccl_from(resolution, lib, machine)
                    }
                    (Some(Ok(lib)), _) => Loads::NotYetKnown {
                        why: format!(
                            "--nccl-from brings NCCL {} ({}), but {} is not read yet",
                            lib.version
                                .as_ref()
                                .map(|v| v.to_string())
                                .unwrap_or_else(|| "?".into()),
                            lib.source,
                            spec.image
                        ),
                    },
                    (Some(Err(why)), _) => Loads::NotYetKnown {
                        why: format!("--nccl-from {from}: {why}"),
                    },
                    (None, _) => unknown(reads, &node, &spec.image),
                }
            }
        };
        nodes.push(NodeNccl {
            node,
            image: spec.image.clone(),
            loads,
        });
    }
    let LibraryVerdict {
        problems: judged,
        warnings,
        notes: more,
    } = judge(&nodes, &rule);
    problems.extend(judged);
    notes.extend(more);
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(NcclPlan {
        nodes,
        rule,
        nccl_from: nccl_from.cloned(),
        warnings,
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node whose probe read its own NCCL with `LD_LIBRARY_PATH=/opt/nccl/lib`.
    fn host_node() -> NodeInput {
        let mut tree = crate::probe::MemTree::default();
        tree.insert_file("hostname", "a".into());
        tree.insert_file(
            crate::libnccl::host::SNAPSHOT_FILE,
            r#"{"ld_library_path": "/opt/nccl/lib", "loader": {"loads": {"path": "/opt/nccl/lib/libnccl.so.2", "via": "ld-library-path", "machine": "arm64", "version": "2.30.7"}}}"#.into(),
        );
        NodeInput {
            name: NodeName::new("a").unwrap(),
            facts: crate::probe::read_facts(&tree).unwrap(),
        }
    }

    #[test]
    fn a_host_process_loads_what_the_probe_read_unless_the_job_sets_the_loaders_variables_otherwise()
     {
        let node = NodeName::new("a").unwrap();
        let input = host_node();
        let mut notes = Vec::new();
        let same = BTreeMap::from([("LD_LIBRARY_PATH".to_string(), "/opt/nccl/lib".to_string())]);
        assert_eq!(
            host_loads(&node, Some(&input), &same, &mut notes).to_string(),
            "NCCL 2.30.7 from /opt/nccl/lib/libnccl.so.2 (LD_LIBRARY_PATH)"
        );
        let other = BTreeMap::from([("LD_LIBRARY_PATH".to_string(), "/x".to_string())]);
        assert_eq!(
            host_loads(&node, Some(&input), &other, &mut notes).to_string(),
            "not yet known (the job sets LD_LIBRARY_PATH=/x, the probe read a with LD_LIBRARY_PATH=/opt/nccl/lib)"
        );
        let preload = BTreeMap::from([("LD_PRELOAD".to_string(), "/x/libnccl.so.2".to_string())]);
        assert!(
            host_loads(&node, Some(&input), &preload, &mut notes)
                .to_string()
                .contains("LD_PRELOAD unset"),
        );
        assert!(notes.is_empty());
    }

    #[test]
    fn nccl_from_is_a_folder_when_absolute_and_an_image_otherwise() {
        assert_eq!(
            "/opt/nccl/lib/".parse::<NcclFrom>(),
            Ok(NcclFrom::Path("/opt/nccl/lib".into()))
        );
        assert_eq!(
            "spark-launch/nccl-tests:nccl-v2.30.7-1-sm121-arm64".parse::<NcclFrom>(),
            Ok(NcclFrom::Image(
                "spark-launch/nccl-tests:nccl-v2.30.7-1-sm121-arm64".into()
            ))
        );
        assert!(
            "./lib"
                .parse::<NcclFrom>()
                .unwrap_err()
                .contains("absolute")
        );
        assert!("".parse::<NcclFrom>().is_err());
    }

    #[test]
    fn a_volume_name_is_readable_and_differs_per_image() {
        let a = volume_name("spark-launch/nccl-tests:nccl-v2.30.7-1-sm121-arm64");
        assert!(
            a.starts_with("sl-nccl-spark-launch-nccl-tests-nccl-v2.30.7-1-sm121-arm64-"),
            "{a}"
        );
        assert_ne!(
            a,
            volume_name("spark-launch/nccl-tests:nccl-v2.30.7-1-sm121-amd64")
        );
    }
}
