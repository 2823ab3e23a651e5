//! What one Docker Engine can do, as plain data read once from `/version` and `/info`: API
//! version, architecture, runtimes, CDI. And the decisions that follow only from that data:
//! is the API new enough, and how GPUs are requested. No I/O here; `engine` fills it in.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::plan::Gpus;

/// The oldest Engine API we speak: 1.40 (Docker 19.03) introduced `DeviceRequests`, which is
/// how GPUs are asked for.
pub const MIN_API: ApiVersion = ApiVersion {
    major: 1,
    minor: 40,
};

/// An Engine API version, `1.41`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ApiVersion {
    pub major: u32,
    pub minor: u32,
}

impl ApiVersion {
    pub fn parse(s: &str) -> Option<ApiVersion> {
        let (a, b) = s.trim().split_once('.')?;
        Some(ApiVersion {
            major: a.parse().ok()?,
            minor: b.parse().ok()?,
        })
    }
}

impl fmt::Display for ApiVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// A CPU architecture in OCI terms (`amd64`, `arm64`), whatever spelling the source used.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Arch(String);

impl Arch {
    /// `x86_64` (what `/info` says) and `amd64` (what images say) are one architecture.
    pub fn normalize(raw: &str) -> Arch {
        let a = match raw.trim() {
            "x86_64" | "x86-64" | "amd64" => "amd64",
            "aarch64" | "arm64" | "arm64/v8" => "arm64",
            other => other,
        };
        Arch(a.to_string())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What an engine told us about itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineFeatures {
    /// `20.10.24`.
    pub server_version: String,
    pub api: ApiVersion,
    pub os: String,
    pub arch: Arch,
    /// Registered OCI runtimes (`runc`, `nvidia`, ...).
    pub runtimes: Vec<String>,
    pub default_runtime: Option<String>,
    /// Where the engine reads CDI specs; empty when CDI is off or unsupported.
    pub cdi_spec_dirs: Vec<String>,
    pub storage_driver: String,
    /// `DockerRootDir` (`/var/lib/docker`): where the engine keeps its stores, on its machine.
    pub root_dir: String,
}

impl EngineFeatures {
    pub fn has_nvidia_runtime(&self) -> bool {
        self.runtimes.iter().any(|r| r == "nvidia")
    }
}

/// How a container gets its GPUs on one engine.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "via", rename_all = "kebab-case")]
pub enum GpuAccess {
    /// No GPUs.
    None,
    /// `DeviceRequests: [{Driver: "", Count: N, Capabilities: [["gpu"]]}]`, served by the
    /// NVIDIA Container Toolkit (count -1 = all).
    DeviceRequest { count: i64 },
    /// `DeviceRequests: [{Driver: "cdi", DeviceIDs: [...]}]`: what `docker run --device
    /// nvidia.com/gpu=all` sends; served by the engine's own CDI support.
    Cdi { device_ids: Vec<String> },
}

/// GPUs were asked for and the engine cannot provide them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "GPUs requested (--gpus {gpus}) but this engine has neither the NVIDIA runtime nor CDI (runtimes: {runtimes}); fix: install the NVIDIA Container Toolkit and run `sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker` (or enable CDI), or pass --gpus none"
)]
pub struct NoGpuSupport {
    pub gpus: Gpus,
    pub runtimes: String,
}

/// Decides how GPUs are requested on this engine: the NVIDIA runtime's device requests when
/// it is registered; otherwise CDI (`nvidia.com/gpu=...`) when the engine reads CDI specs;
/// otherwise a refusal, before any container is created.
pub fn gpu_access(gpus: Gpus, engine: &EngineFeatures) -> Result<GpuAccess, NoGpuSupport> {
    if !gpus.wanted() {
        return Ok(GpuAccess::None);
    }
    if engine.has_nvidia_runtime() {
        let count = match gpus {
            Gpus::Count(n) => i64::from(n),
            _ => -1,
        };
        return Ok(GpuAccess::DeviceRequest { count });
    }
    if !engine.cdi_spec_dirs.is_empty() {
        let device_ids = match gpus {
            Gpus::Count(n) => (0..n).map(|i| format!("nvidia.com/gpu={i}")).collect(),
            _ => vec!["nvidia.com/gpu=all".to_string()],
        };
        return Ok(GpuAccess::Cdi { device_ids });
    }
    Err(NoGpuSupport {
        gpus,
        runtimes: if engine.runtimes.is_empty() {
            "none".to_string()
        } else {
            engine.runtimes.join(", ")
        },
    })
}

#[cfg(test)]
pub(crate) fn sample(runtimes: &[&str], cdi: &[&str]) -> EngineFeatures {
    EngineFeatures {
        server_version: "28.3.3".into(),
        api: ApiVersion {
            major: 1,
            minor: 51,
        },
        os: "linux".into(),
        arch: Arch::normalize("aarch64"),
        runtimes: runtimes.iter().map(|s| s.to_string()).collect(),
        default_runtime: Some("runc".into()),
        cdi_spec_dirs: cdi.iter().map(|s| s.to_string()).collect(),
        storage_driver: "overlay2".into(),
        root_dir: "/var/lib/docker".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nvidia_runtime_wins_over_cdi() {
        let e = sample(&["runc", "nvidia"], &["/etc/cdi"]);
        assert_eq!(
            gpu_access(Gpus::All, &e),
            Ok(GpuAccess::DeviceRequest { count: -1 })
        );
        assert_eq!(
            gpu_access(Gpus::Count(2), &e),
            Ok(GpuAccess::DeviceRequest { count: 2 })
        );
    }

    #[test]
    fn cdi_is_the_fallback_when_the_nvidia_runtime_is_missing() {
        let e = sample(&["runc"], &["/etc/cdi", "/var/run/cdi"]);
        assert_eq!(
            gpu_access(Gpus::All, &e),
            Ok(GpuAccess::Cdi {
                device_ids: vec!["nvidia.com/gpu=all".into()]
            })
        );
        assert_eq!(
            gpu_access(Gpus::Count(2), &e),
            Ok(GpuAccess::Cdi {
                device_ids: vec!["nvidia.com/gpu=0".into(), "nvidia.com/gpu=1".into()]
            })
        );
    }

    #[test]
    fn gpus_on_an_engine_without_either_are_refused_with_the_fix() {
        let e = sample(&["runc"], &[]);
        let err = gpu_access(Gpus::All, &e).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("--gpus all"), "{text}");
        assert!(text.contains("nvidia-ctk runtime configure"), "{text}");
        assert!(text.contains("--gpus none"), "{text}");
        assert_eq!(gpu_access(Gpus::None, &e), Ok(GpuAccess::None));
    }

    #[test]
    fn architectures_are_compared_in_oci_spelling() {
        assert_eq!(Arch::normalize("x86_64"), Arch::normalize("amd64"));
        assert_eq!(Arch::normalize("aarch64"), Arch::normalize("arm64"));
        assert_ne!(Arch::normalize("aarch64"), Arch::normalize("amd64"));
    }

    #[test]
    fn api_versions_parse_and_compare_numerically() {
        let v = ApiVersion::parse("1.41").unwrap();
        assert!(v >= MIN_API);
        assert!(ApiVersion::parse("1.9").unwrap() < MIN_API);
        assert!(ApiVersion::parse("1.100").unwrap() > v);
        assert_eq!(ApiVersion::parse("x"), None);
    }
}
