//! `nccl-build` as a plan: which image to build where, with which build arguments and tag,
//! and which nodes get it afterwards. One build per CPU architecture of the cluster (a Spark is
//! arm64, a workstation amd64), on the first node of that architecture (the head when it has
//! it); the other nodes of the architecture get the image pushed. Pure: the build context is
//! the `images/nccl-tests` folder embedded in the binary.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use crate::node::NodeName;

/// The image repository spark-launch tags its builds with.
pub const IMAGE_REPO: &str = "spark-launch/nccl-tests";
/// NCCL's default tag: the first release with `NCCL_IB_SUBNET_AWARE_ROUTING` (what a
/// switchless ring of Sparks needs), and the one NVIDIA's newest cluster helper builds for every
/// topology (`images/README.md` says why).
pub const DEFAULT_NCCL_REF: &str = "v2.30.7-1";

/// The build context (`images/nccl-tests`): path in the context, content, mode.
pub const CONTEXT: &[(&str, &str, u32)] = &[
    (
        "Dockerfile",
        include_str!("../../images/nccl-tests/Dockerfile"),
        0o644,
    ),
    (
        "sl-entrypoint",
        include_str!("../../images/nccl-tests/sl-entrypoint"),
        0o755,
    ),
    (
        "sl-wait-ssh",
        include_str!("../../images/nccl-tests/sl-wait-ssh"),
        0o755,
    ),
];

/// A CPU architecture images are built for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CpuArch {
    Arm64,
    Amd64,
}

impl CpuArch {
    /// From `uname -m` (`aarch64`, `x86_64`) or Docker's names (`arm64`, `amd64`).
    pub fn from_uname(s: &str) -> Option<CpuArch> {
        match s.trim() {
            "aarch64" | "arm64" => Some(CpuArch::Arm64),
            "x86_64" | "amd64" => Some(CpuArch::Amd64),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            CpuArch::Arm64 => "arm64",
            CpuArch::Amd64 => "amd64",
        }
    }

    /// `linux/arm64`.
    pub fn platform(self) -> String {
        format!("linux/{}", self.as_str())
    }

    /// The GPU these boxes usually carry: GB10 (`sm_121`) on a DGX Spark; Blackwell
    /// workstation cards (RTX PRO 6000, RTX 5090: `sm_120`) on amd64.
    pub fn default_cuda_arch(self) -> CudaArch {
        match self {
            CpuArch::Arm64 => CudaArch(121),
            CpuArch::Amd64 => CudaArch(120),
        }
    }
}

impl fmt::Display for CpuArch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A GPU compute capability: `sm_121` is 121.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(into = "String")]
pub struct CudaArch(pub u32);

impl From<CudaArch> for String {
    fn from(a: CudaArch) -> String {
        a.to_string()
    }
}

impl fmt::Display for CudaArch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sm_{}", self.0)
    }
}

impl FromStr for CudaArch {
    type Err = String;
    /// `sm_121`, `121`, `12.1` or `compute_121`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        let digits: String = if let Some((major, minor)) = t.split_once('.') {
            format!("{major}{minor}")
        } else {
            t.trim_start_matches("sm_")
                .trim_start_matches("compute_")
                .to_string()
        };
        match digits.parse::<u32>() {
            Ok(n) if (30..=999).contains(&n) => Ok(CudaArch(n)),
            _ => Err(format!(
                "expected a GPU architecture such as sm_121 (GB10), sm_120 or sm_90, got {s:?}"
            )),
        }
    }
}

/// `-gencode=arch=compute_121,code=sm_121` for each architecture.
pub fn nvcc_gencode(archs: &[CudaArch]) -> String {
    archs
        .iter()
        .map(|a| format!("-gencode=arch=compute_{0},code=sm_{0}", a.0))
        .collect::<Vec<_>>()
        .join(" ")
}

/// What the user asked for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BuildOptions {
    /// `--nccl-ref` (default [`DEFAULT_NCCL_REF`]).
    pub nccl_ref: Option<String>,
    /// `--cuda-arch` (default per CPU architecture).
    pub cuda_archs: Vec<CudaArch>,
    pub mesh_plugin: bool,
    pub nccl_tests_ref: Option<String>,
    pub cuda_devel_image: Option<String>,
    pub cuda_runtime_image: Option<String>,
    /// `--jobs`: compile jobs (0 = all cores).
    pub jobs: u32,
    /// `--tag`: the image name instead of the default one (one architecture only).
    pub tag: Option<String>,
}

/// One image build.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ImageBuild {
    pub arch: CpuArch,
    /// The node whose engine builds it.
    pub build_on: NodeName,
    pub tag: String,
    pub platform: String,
    pub build_args: BTreeMap<String, String>,
    /// The other nodes of this architecture: they get the image with `image push`.
    pub push_to: Vec<NodeName>,
}

/// Every build of one `nccl-build`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BuildPlan {
    pub builds: Vec<ImageBuild>,
    /// What the user should know (a ref that names no release).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BuildPlanError {
    #[error("no nodes to build for")]
    NoNodes,
    #[error(
        "{0}: unknown CPU architecture {1:?}; spark-launch builds for arm64 (DGX Spark) and amd64"
    )]
    UnknownArch(NodeName, String),
    #[error("{0}: its CPU architecture is not known (probe it again: `spark-launch probe`)")]
    NoArch(NodeName),
    #[error("invalid NCCL ref {0:?}: use a tag or branch name such as v2.28.9-1")]
    BadRef(String),
    #[error("--tag names one image, but this cluster needs one per architecture ({0})")]
    TagForMany(String),
    #[error(
        "--nccl-ref {nccl_ref} builds NCCL {version} for a switchless ring (one subnet per cable): rings need NCCL_IB_SUBNET_AWARE_ROUTING, which NCCL has only from {min} on, and time out connecting (`ibv_modify_qp … Connection timed out`) without it\n    fix: build {default} (the default: drop --nccl-ref) or a later release; or keep this ref and add --mesh-plugin (the mesh net plugin routes by subnet itself)"
    )]
    OldForRing {
        nccl_ref: String,
        version: crate::libnccl::NcclVersion,
        min: crate::libnccl::NcclVersion,
        default: &'static str,
    },
}

/// A build for a switchless ring must bring subnet-aware routing: NCCL ≥ 2.30.7, or the mesh
/// plugin. A ref that names no release (a branch, a commit) cannot be judged here: a note
/// says its version is read from the image once built.
pub fn ring_check(opts: &BuildOptions, ring: bool) -> Result<Vec<String>, BuildPlanError> {
    let nccl_ref = opts.nccl_ref.as_deref().unwrap_or(DEFAULT_NCCL_REF);
    let Some(version) = crate::libnccl::NcclVersion::from_ref(nccl_ref) else {
        return Ok(vec![format!(
            "--nccl-ref {nccl_ref} names no release: the NCCL it builds is read from the image after the build (`nccl-test` and serving plans show it{})",
            if ring {
                format!("; a ring needs {} or later", crate::libnccl::RING_MIN)
            } else {
                String::new()
            }
        )]);
    };
    if ring && version < crate::libnccl::RING_MIN && !opts.mesh_plugin {
        return Err(BuildPlanError::OldForRing {
            nccl_ref: nccl_ref.to_string(),
            version,
            min: crate::libnccl::RING_MIN,
            default: DEFAULT_NCCL_REF,
        });
    }
    Ok(Vec::new())
}

/// The default tag of the image for `arch`: `spark-launch/nccl-tests:nccl-v2.28.9-1-sm121-arm64`.
pub fn image_tag(nccl_ref: &str, archs: &[CudaArch], arch: CpuArch, mesh: bool) -> String {
    let sms: Vec<String> = archs.iter().map(|a| format!("sm{}", a.0)).collect();
    format!(
        "{IMAGE_REPO}:nccl-{}-{}-{}{}",
        sanitize(nccl_ref),
        sms.join("."),
        arch,
        if mesh { "-mesh" } else { "" }
    )
}

/// The image `nccl-test` uses on a node of `arch` when no `--image` is given.
pub fn default_image(arch: CpuArch) -> String {
    image_tag(DEFAULT_NCCL_REF, &[arch.default_cuda_arch()], arch, false)
}

fn sanitize(r: &str) -> String {
    r.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// Plans one build per architecture, head's first. `nodes` are `(name, uname -m)`, head first.
pub fn build_plan(
    nodes: &[(NodeName, Option<String>)],
    opts: &BuildOptions,
) -> Result<BuildPlan, BuildPlanError> {
    if nodes.is_empty() {
        return Err(BuildPlanError::NoNodes);
    }
    let nccl_ref = opts.nccl_ref.as_deref().unwrap_or(DEFAULT_NCCL_REF);
    if nccl_ref.is_empty()
        || nccl_ref.starts_with('-')
        || nccl_ref.chars().any(|c| c.is_whitespace() || c == ':')
    {
        return Err(BuildPlanError::BadRef(nccl_ref.to_string()));
    }
    let mut by_arch: Vec<(CpuArch, Vec<NodeName>)> = Vec::new();
    for (name, uname) in nodes {
        let arch = match uname {
            None => return Err(BuildPlanError::NoArch(name.clone())),
            Some(u) => CpuArch::from_uname(u)
                .ok_or_else(|| BuildPlanError::UnknownArch(name.clone(), u.clone()))?,
        };
        match by_arch.iter_mut().find(|(a, _)| *a == arch) {
            Some((_, list)) => list.push(name.clone()),
            None => by_arch.push((arch, vec![name.clone()])),
        }
    }
    if opts.tag.is_some() && by_arch.len() > 1 {
        let archs: Vec<&str> = by_arch.iter().map(|(a, _)| a.as_str()).collect();
        return Err(BuildPlanError::TagForMany(archs.join(", ")));
    }
    let builds = by_arch
        .into_iter()
        .map(|(arch, names)| {
            let archs = if opts.cuda_archs.is_empty() {
                vec![arch.default_cuda_arch()]
            } else {
                opts.cuda_archs.clone()
            };
            let mut args = BTreeMap::new();
            args.insert("NCCL_REF".to_string(), nccl_ref.to_string());
            args.insert("NVCC_GENCODE".to_string(), nvcc_gencode(&archs));
            args.insert(
                "MESH_PLUGIN".to_string(),
                if opts.mesh_plugin { "1" } else { "0" }.to_string(),
            );
            args.insert("BUILD_JOBS".to_string(), opts.jobs.to_string());
            if let Some(r) = &opts.nccl_tests_ref {
                args.insert("NCCL_TESTS_REF".to_string(), r.clone());
            }
            if let Some(i) = &opts.cuda_devel_image {
                args.insert("CUDA_DEVEL_IMAGE".to_string(), i.clone());
            }
            if let Some(i) = &opts.cuda_runtime_image {
                args.insert("CUDA_RUNTIME_IMAGE".to_string(), i.clone());
            }
            ImageBuild {
                arch,
                build_on: names[0].clone(),
                tag: opts
                    .tag
                    .clone()
                    .unwrap_or_else(|| image_tag(nccl_ref, &archs, arch, opts.mesh_plugin)),
                platform: arch.platform(),
                build_args: args,
                push_to: names[1..].to_vec(),
            }
        })
        .collect();
    Ok(BuildPlan {
        builds,
        notes: Vec::new(),
    })
}

/// The `ARG` names the Dockerfile declares (for checking that every build argument is
/// documented and that the plan only passes declared ones).
pub fn dockerfile_args(dockerfile: &str) -> Vec<String> {
    let mut out: Vec<String> = dockerfile
        .lines()
        .filter_map(|l| l.trim().strip_prefix("ARG "))
        .map(|a| a.split('=').next().unwrap_or(a).trim().to_string())
        .collect();
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> NodeName {
        NodeName::new(s).unwrap()
    }

    #[test]
    fn cuda_architectures_parse_in_every_usual_spelling() {
        assert_eq!("sm_121".parse(), Ok(CudaArch(121)));
        assert_eq!("121".parse(), Ok(CudaArch(121)));
        assert_eq!("12.1".parse(), Ok(CudaArch(121)));
        assert_eq!("compute_90".parse(), Ok(CudaArch(90)));
        assert!("gb10".parse::<CudaArch>().is_err());
        assert_eq!(
            nvcc_gencode(&[CudaArch(90), CudaArch(120)]),
            "-gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_120,code=sm_120"
        );
    }

    #[test]
    fn two_sparks_build_once_on_the_head_and_push_to_the_other() {
        let p = build_plan(
            &[
                (n("spark-a"), Some("aarch64".into())),
                (n("spark-b"), Some("aarch64".into())),
            ],
            &BuildOptions::default(),
        )
        .unwrap();
        assert_eq!(p.builds.len(), 1);
        let b = &p.builds[0];
        assert_eq!(b.build_on, n("spark-a"));
        assert_eq!(b.push_to, vec![n("spark-b")]);
        assert_eq!(b.tag, "spark-launch/nccl-tests:nccl-v2.30.7-1-sm121-arm64");
        assert_eq!(b.platform, "linux/arm64");
        assert_eq!(b.build_args["NCCL_REF"], "v2.30.7-1");
        assert_eq!(
            b.build_args["NVCC_GENCODE"],
            "-gencode=arch=compute_121,code=sm_121"
        );
        assert_eq!(b.build_args["MESH_PLUGIN"], "0");
        assert_eq!(default_image(CpuArch::Arm64), b.tag);
    }

    #[test]
    fn a_spark_and_a_workstation_build_once_per_architecture_on_their_own_engines() {
        let p = build_plan(
            &[
                (n("spark"), Some("aarch64".into())),
                (n("ws"), Some("x86_64".into())),
            ],
            &BuildOptions {
                nccl_ref: Some("v2.29.2-1".into()),
                mesh_plugin: true,
                ..BuildOptions::default()
            },
        )
        .unwrap();
        let tags: Vec<&str> = p.builds.iter().map(|b| b.tag.as_str()).collect();
        assert_eq!(
            tags,
            vec![
                "spark-launch/nccl-tests:nccl-v2.29.2-1-sm121-arm64-mesh",
                "spark-launch/nccl-tests:nccl-v2.29.2-1-sm120-amd64-mesh"
            ]
        );
        assert_eq!(p.builds[1].build_on, n("ws"));
        assert!(p.builds[1].push_to.is_empty());
        assert_eq!(p.builds[1].build_args["MESH_PLUGIN"], "1");
    }

    #[test]
    fn an_unknown_architecture_or_a_single_tag_for_two_is_refused() {
        assert_eq!(
            build_plan(
                &[(n("x"), Some("riscv64".into()))],
                &BuildOptions::default()
            ),
            Err(BuildPlanError::UnknownArch(n("x"), "riscv64".into()))
        );
        let opts = BuildOptions {
            tag: Some("mine:1".into()),
            ..BuildOptions::default()
        };
        assert!(matches!(
            build_plan(
                &[
                    (n("a"), Some("aarch64".into())),
                    (n("b"), Some("x86_64".into()))
                ],
                &opts
            ),
            Err(BuildPlanError::TagForMany(_))
        ));
        assert!(matches!(
            build_plan(
                &[(n("a"), Some("aarch64".into()))],
                &BuildOptions {
                    nccl_ref: Some("v2 x".into()),
                    ..BuildOptions::default()
                }
            ),
            Err(BuildPlanError::BadRef(_))
        ));
    }

    #[test]
    fn a_ring_build_older_than_2_30_7_is_refused_unless_the_mesh_plugin_comes_with_it() {
        let old = BuildOptions {
            nccl_ref: Some("v2.28.9-1".into()),
            ..BuildOptions::default()
        };
        let e = ring_check(&old, true).unwrap_err();
        let text = e.to_string();
        assert!(
            text.starts_with("--nccl-ref v2.28.9-1 builds NCCL 2.28.9 for a switchless ring"),
            "{text}"
        );
        assert!(
            text.contains("fix: build v2.30.7-1 (the default: drop --nccl-ref)"),
            "{text}"
        );
        assert_eq!(ring_check(&old, false), Ok(vec![]));
        let mesh = BuildOptions {
            mesh_plugin: true,
            ..old.clone()
        };
        assert_eq!(ring_check(&mesh, true), Ok(vec![]));
        assert_eq!(ring_check(&BuildOptions::default(), true), Ok(vec![]));
        let branch = BuildOptions {
            nccl_ref: Some("master".into()),
            ..BuildOptions::default()
        };
        assert!(ring_check(&branch, true).unwrap()[0].contains("a ring needs 2.30.7 or later"));
    }

    #[test]
    fn every_build_argument_the_plan_passes_is_declared_in_the_dockerfile() {
        let declared = dockerfile_args(CONTEXT[0].1);
        let p = build_plan(
            &[(n("a"), Some("aarch64".into()))],
            &BuildOptions {
                nccl_tests_ref: Some("v2.19.6".into()),
                cuda_devel_image: Some("x".into()),
                cuda_runtime_image: Some("y".into()),
                ..BuildOptions::default()
            },
        )
        .unwrap();
        for k in p.builds[0].build_args.keys() {
            assert!(declared.contains(k), "{k} is not an ARG of the Dockerfile");
        }
    }
}
