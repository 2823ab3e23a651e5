//! Builds an image through a node's Docker Engine API (`POST /build`) from an in-memory build
//! context, streaming every line of the build's output to the caller as it arrives. Decides
//! nothing: the tag, build arguments and platform come from the plan (`workload::nccl_build`).

use std::collections::{BTreeMap, HashMap, VecDeque};

use bollard::query_parameters::BuildImageOptions;
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use super::engine::Engine;
use crate::node::NodeName;

/// One build.
#[derive(Clone, Debug)]
pub struct BuildRequest<'a> {
    pub tag: &'a str,
    /// `linux/arm64`; `None` builds for the engine's own platform.
    pub platform: Option<&'a str>,
    pub build_args: &'a BTreeMap<String, String>,
    /// The context: path, content, mode. `Dockerfile` must be among them.
    pub files: &'a [(&'a str, &'a str, u32)],
    pub labels: BTreeMap<String, String>,
}

/// A finished build.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Built {
    /// `sha256:...`, when the engine said.
    pub image_id: Option<String>,
    /// How many output lines the build printed.
    pub lines: usize,
}

/// Why a build did not finish.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("{node}: cannot pack the build context: {source}")]
    Context {
        node: NodeName,
        #[source]
        source: std::io::Error,
    },
    #[error("{node}: build {tag}: the Docker Engine refused it: {source}")]
    Engine {
        node: NodeName,
        tag: String,
        #[source]
        source: bollard::errors::Error,
    },
    #[error("{node}: build {tag} failed: {message}\n  last output:\n    {}", .tail.join("\n    "))]
    Failed {
        node: NodeName,
        tag: String,
        message: String,
        tail: Vec<String>,
    },
    #[error("{node}: build {tag} interrupted")]
    Cancelled { node: NodeName, tag: String },
}

/// Packs the context files into an uncompressed tar, as `POST /build` takes it.
pub fn context_tar(files: &[(&str, &str, u32)]) -> std::io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, content, mode) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(*mode);
        header.set_mtime(0);
        header.set_uid(0);
        header.set_gid(0);
        header.set_cksum();
        builder.append_data(&mut header, path, content.as_bytes())?;
    }
    builder.into_inner()
}

/// Builds on `engine`, calling `on_line` with every output line (without its newline) as the
/// engine streams it. Keeps the last lines for the error when the build fails.
pub async fn build_image(
    engine: &Engine,
    req: &BuildRequest<'_>,
    on_line: &mut (dyn FnMut(&str) + Send),
    cancel: &CancellationToken,
) -> Result<Built, BuildError> {
    let node = engine.node().clone();
    let tar = context_tar(req.files).map_err(|source| BuildError::Context {
        node: node.clone(),
        source,
    })?;
    let options = BuildImageOptions {
        dockerfile: "Dockerfile".to_string(),
        t: Some(req.tag.to_string()),
        rm: true,
        forcerm: true,
        buildargs: Some(
            req.build_args
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect::<HashMap<_, _>>(),
        ),
        labels: Some(req.labels.clone().into_iter().collect::<HashMap<_, _>>()),
        platform: req.platform.unwrap_or_default().to_string(),
        ..Default::default()
    };
    let mut stream = engine.docker().build_image(
        options,
        None,
        Some(bollard::body_full(bytes::Bytes::from(tar))),
    );
    let mut tail: VecDeque<String> = VecDeque::with_capacity(20);
    let mut built = Built {
        image_id: None,
        lines: 0,
    };
    let mut partial = String::new();
    loop {
        let item = tokio::select! {
            item = stream.next() => item,
            _ = cancel.cancelled() => {
                return Err(BuildError::Cancelled { node, tag: req.tag.to_string() });
            }
        };
        let Some(item) = item else { break };
        let info = item.map_err(|source| match source {
            bollard::errors::Error::DockerStreamError { error } => BuildError::Failed {
                node: node.clone(),
                tag: req.tag.to_string(),
                message: error,
                tail: tail.iter().cloned().collect(),
            },
            source => BuildError::Engine {
                node: node.clone(),
                tag: req.tag.to_string(),
                source,
            },
        })?;
        if let Some(err) = info.error_detail.as_ref().and_then(|d| d.message.clone()) {
            return Err(BuildError::Failed {
                node,
                tag: req.tag.to_string(),
                message: err,
                tail: tail.into_iter().collect(),
            });
        }
        if let Some(id) = info.aux.as_ref().and_then(|a| a.id.clone()) {
            built.image_id = Some(id);
        }
        let text = info.stream.or(info.status).unwrap_or_default();
        partial.push_str(&text);
        while let Some(i) = partial.find('\n') {
            let line: String = partial.drain(..=i).collect();
            let line = line.trim_end();
            if line.is_empty() {
                continue;
            }
            built.lines += 1;
            if tail.len() == 20 {
                tail.pop_front();
            }
            tail.push_back(line.to_string());
            on_line(line);
        }
    }
    if !partial.trim().is_empty() {
        built.lines += 1;
        on_line(partial.trim_end());
    }
    Ok(built)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_context_tar_holds_every_file_with_its_mode() {
        let bytes = context_tar(&[
            ("Dockerfile", "FROM x\n", 0o644),
            ("run.sh", "#!/bin/sh\n", 0o755),
        ])
        .unwrap();
        let mut archive = tar::Archive::new(bytes.as_slice());
        let entries: Vec<(String, u32, u64)> = archive
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.path().unwrap().display().to_string(),
                    e.header().mode().unwrap(),
                    e.header().size().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            entries,
            vec![
                ("Dockerfile".to_string(), 0o644, 7),
                ("run.sh".to_string(), 0o755, 10)
            ]
        );
    }
}
