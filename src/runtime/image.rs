//! Images on one engine: what an image is (by content), and streaming one out of an engine
//! (`GET /images/{name}/get`) or into one (`POST /images/load`) without ever holding the whole
//! image in memory or on disk. Fanning a push out to several nodes is `images`' job.
//!
//! ## Why a content key and not the image ID
//!
//! The image ID is only comparable between engines that store images the same way: the classic
//! store calls an image by its config digest, the containerd image store by its manifest or index
//! digest, so one image loaded on two nodes can carry two IDs. `RepoDigests` exist only for
//! images pulled from a registry (a `docker load`ed image has none). And what describes the
//! layers on disk (`GraphDriver`: overlay2 / fuse-overlayfs cache folders, the on-disk size) is
//! storage-driver specific and differs between two nodes holding the very same image. So we
//! compare what the image *is*: the uncompressed layer digests (`RootFS.Layers`, the diff IDs,
//! which `docker save`/`load` preserve bit for bit), the platform, the creation time and the
//! run configuration (entrypoint, command, env, workdir, user, labels, ports, volumes). Equal keys
//! mean the same layers started the same way; a false "different" only costs a push.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bollard::query_parameters::{ImportImageOptionsBuilder, ListImagesOptionsBuilder};
use bytes::Bytes;
use futures::{Stream, StreamExt};

use super::engine::Engine;
use super::error::{RuntimeError, describe_bollard, status_of};
use super::features::Arch;
use crate::digest::sha256_hex;
use crate::plan::ImageFacts;
use crate::plan::layers::chain_ids;

/// How long an import may go without the engine answering after the last byte was sent.
const LOAD_ANSWER_TIMEOUT: Duration = Duration::from_secs(600);

/// The image `reference` on `engine`, or `None` when the engine does not have it.
pub async fn image_facts(
    engine: &Engine,
    reference: &str,
) -> Result<Option<ImageFacts>, RuntimeError> {
    let inspect = match engine.docker().inspect_image(reference).await {
        Ok(i) => i,
        Err(e) if status_of(&e) == Some(404) => return Ok(None),
        Err(e) => return Err(RuntimeError::api(format!("inspect image {reference}"), e)),
    };
    let arch = Arch::normalize(inspect.architecture.as_deref().unwrap_or(""));
    let os = inspect.os.clone().unwrap_or_else(|| "linux".to_string());
    let layers: Vec<String> = inspect
        .root_fs
        .as_ref()
        .and_then(|r| r.layers.clone())
        .unwrap_or_default();
    let config = inspect.config.clone().unwrap_or_default();
    let labels: BTreeMap<String, String> = config
        .labels
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    let mut ports = config.exposed_ports.clone().unwrap_or_default();
    ports.sort();
    let mut volumes = config.volumes.clone().unwrap_or_default();
    volumes.sort();
    let key = serde_json::json!({
        "arch": arch.as_str(),
        "os": os,
        "variant": inspect.variant,
        "layers": layers,
        "created": inspect.created,
        "entrypoint": config.entrypoint,
        "cmd": config.cmd,
        "env": config.env,
        "workdir": config.working_dir,
        "user": config.user,
        "labels": labels,
        "ports": ports,
        "volumes": volumes,
    });
    let content = sha256_hex(key.to_string());
    Ok(Some(ImageFacts {
        reference: reference.to_string(),
        id: inspect.id.clone().unwrap_or_default(),
        content: format!("sha256:{content}"),
        arch: arch.to_string(),
        os,
        size: inspect
            .size
            .and_then(|s| u64::try_from(s).ok())
            .unwrap_or(0),
        layers,
    }))
}

/// Every layer chain `engine` holds, read from all its images (`/images/json?all=1`, each
/// inspected: the chain of every prefix of its `RootFS.Layers`). `None` on the containerd
/// image store (`driver-type io.containerd.snapshotter.v1`), where layers live as content
/// blobs and skipping them on `docker load` is not proven here.
pub async fn layer_chains(engine: &Engine) -> Result<Option<BTreeSet<String>>, RuntimeError> {
    let docker = engine.docker();
    let info = docker
        .info()
        .await
        .map_err(|e| RuntimeError::api("read the engine's info", e))?;
    let containerd_store = info.driver_status.iter().flatten().any(|kv| {
        kv.first().is_some_and(|k| k == "driver-type")
            && kv
                .get(1)
                .is_some_and(|v| v.contains("containerd.snapshotter"))
    });
    if containerd_store {
        return Ok(None);
    }
    let images = docker
        .list_images(Some(ListImagesOptionsBuilder::new().all(true).build()))
        .await
        .map_err(|e| RuntimeError::api("list images", e))?;
    let inspected: Vec<Option<Vec<String>>> = futures::stream::iter(images)
        .map(|summary| async move {
            // An image removed meanwhile is simply not there.
            let i = docker.inspect_image(&summary.id).await.ok()?;
            i.root_fs.and_then(|r| r.layers)
        })
        .buffer_unordered(8)
        .collect()
        .await;
    let mut chains = BTreeSet::new();
    for layers in inspected.into_iter().flatten() {
        chains.extend(chain_ids(&layers));
    }
    Ok(Some(chains))
}

/// Gives the image `source` another name, `target` (`REPO:TAG`; `docker tag`).
pub async fn tag(engine: &Engine, source: &str, target: &str) -> Result<(), RuntimeError> {
    let slash = target.rfind('/').map_or(0, |i| i + 1);
    let (repo, tag) = match target[slash..].rfind(':') {
        Some(i) => (&target[..slash + i], &target[slash + i + 1..]),
        None => (target, "latest"),
    };
    let options = bollard::query_parameters::TagImageOptionsBuilder::new()
        .repo(repo)
        .tag(tag)
        .build();
    engine
        .docker()
        .tag_image(source, Some(options))
        .await
        .map_err(|e| RuntimeError::api(format!("tag image {source} as {target}"), e))
}

/// The image as a tar stream, straight from the engine (`docker save`).
pub fn export(
    engine: &Engine,
    reference: &str,
) -> impl Stream<Item = Result<Bytes, RuntimeError>> + Send + 'static {
    let what = format!("export image {reference}");
    engine
        .streaming()
        .export_image(reference)
        .map(move |r| r.map_err(|e| RuntimeError::api(what.clone(), e)))
}

/// Loads a tar stream into the engine (`docker load`); returns once the engine has taken
/// the whole image.
pub async fn import<S>(engine: &Engine, tar: S) -> Result<(), RuntimeError>
where
    S: Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static,
{
    let options = ImportImageOptionsBuilder::new().quiet(true).build();
    let mut answers = engine.streaming().import_image_stream(options, tar, None);
    loop {
        match tokio::time::timeout(LOAD_ANSWER_TIMEOUT, answers.next()).await {
            Err(_) => {
                return Err(RuntimeError::Timeout {
                    what: "load the image".to_string(),
                    after: LOAD_ANSWER_TIMEOUT,
                    last: "no answer from the engine".to_string(),
                });
            }
            Ok(None) => return Ok(()),
            Ok(Some(Ok(info))) => {
                if let Some(err) = info.error_detail.and_then(|d| d.message) {
                    return Err(RuntimeError::Other(format!("load the image: {err}")));
                }
            }
            Ok(Some(Err(e))) => {
                return Err(RuntimeError::Other(format!(
                    "load the image: {}",
                    describe_bollard(&e)
                )));
            }
        }
    }
}
