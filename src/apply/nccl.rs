//! The NCCL a job's containers load, read on live nodes: the pre-plan lookup (every node's
//! image, once per image digest; `--nccl-from`'s library) and the reads the executor's
//! CheckNccl and StageNccl phases and doctor's `cluster.image-nccl` make.
//!
//! An image's answer depends only on its content and the loader variables the job sets, so it
//! is read on one node per image ID and cached in
//! `$XDG_CACHE_HOME/spark-launch/libnccl/` (an image ID is the digest of its config, which
//! names every layer: the same ID is the same files). Reads through a job's NCCL mounts (a
//! host folder can change) are never cached. Effects only; the judgement is `libnccl::check`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use sha2::{Digest, Sha256};

use crate::libnccl::{FromLib, FromRead, ImageRead, LibraryOrigin, Loads, MOUNT_DIR, SONAME};
use crate::node::{NodeName, for_each_node};
use crate::runtime::libnccl::{self, ImageLoader, LoaderProbe};
use crate::runtime::{Cluster, RuntimeError};
use crate::workload::nccl_lib::{NcclFrom, NcclReads};

/// Bumped when what is cached changes meaning.
const CACHE_SCHEMA: &str = "libnccl-1";

/// `$XDG_CACHE_HOME/spark-launch/libnccl` (`~/.cache/...`).
fn cache_dir() -> Option<PathBuf> {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    env("XDG_CACHE_HOME")
        .or_else(|| env("HOME").map(|h| h.join(".cache")))
        .map(|d| d.join("spark-launch").join("libnccl"))
}

fn cache_key(id: &str, probe: &LoaderProbe) -> String {
    let mut h = Sha256::new();
    for part in [
        CACHE_SCHEMA,
        id,
        probe.ld_library_path.as_deref().unwrap_or("\u{0}"),
        probe.ld_preload.as_deref().unwrap_or("\u{0}"),
    ] {
        h.update(part.as_bytes());
        h.update([0xff]);
    }
    crate::digest::hex(&h.finalize())
}

fn cached(key: &str) -> Option<ImageRead> {
    let path = cache_dir()?.join(format!("{key}.json"));
    let text = std::fs::read_to_string(path).ok()?;
    serde_json::from_str(&text)
        .ok()
        .filter(|r| matches!(r, ImageRead::Read { .. }))
}

fn store(key: &str, read: &ImageRead) {
    let Some(dir) = cache_dir() else { return };
    let Ok(text) = serde_json::to_string(read) else {
        return;
    };
    if std::fs::create_dir_all(&dir).is_err() {
        return;
    }
    let tmp = dir.join(format!(".{key}.{}", std::process::id()));
    if std::fs::write(&tmp, text).is_ok()
        && std::fs::rename(&tmp, dir.join(format!("{key}.json"))).is_err()
    {
        let _ = std::fs::remove_file(&tmp);
    }
}

/// Reads what `probe` loads on `node`: the image inspected there, then resolved (from the cache
/// when the same image ID and loader variables were read before and no mount is involved).
pub async fn read_on(cluster: &Cluster, node: &NodeName, probe: &LoaderProbe) -> ImageRead {
    match read_inner(cluster, node, probe).await {
        Ok(r) => r,
        Err(e) => ImageRead::Failed {
            error: e.to_string(),
        },
    }
}

async fn read_inner(
    cluster: &Cluster,
    node: &NodeName,
    probe: &LoaderProbe,
) -> Result<ImageRead, RuntimeError> {
    let engine = cluster.node(node)?.engine().await?;
    let Some(image) = libnccl::image_loader(engine, &probe.image).await? else {
        return Ok(ImageRead::NotOnNode);
    };
    let key = probe.mounts.is_empty().then(|| cache_key(&image.id, probe));
    if let Some(hit) = key.as_deref().and_then(cached) {
        return Ok(hit);
    }
    let resolution = libnccl::resolve(engine, probe, &image).await?;
    let read = ImageRead::Read {
        id: image.id.clone(),
        machine: image.machine,
        ld_library_path: image.ld_library_path.clone(),
        resolution,
    };
    if let Some(k) = &key {
        store(k, &read);
    }
    Ok(read)
}

/// Reads every node's image (`probes` by node), once per image ID: every node is inspected,
/// then one node per distinct (image ID, loader variables) resolves it.
pub async fn read_images(
    cluster: &Cluster,
    probes: &BTreeMap<NodeName, LoaderProbe>,
    concurrency: usize,
) -> BTreeMap<NodeName, ImageRead> {
    let inspected = for_each_node(probes.keys().cloned(), concurrency, |node| async move {
        let probe = &probes[&node];
        let engine = cluster.node(&node)?.engine().await?;
        libnccl::image_loader(engine, &probe.image).await
    })
    .await;
    let mut out = BTreeMap::new();
    // The first node holding each (ID, loader variables) reads it for all.
    let mut readers: BTreeMap<String, NodeName> = BTreeMap::new();
    let mut waiting: Vec<(NodeName, String)> = Vec::new();
    for (node, r) in inspected {
        match r {
            Ok(None) => {
                out.insert(node, ImageRead::NotOnNode);
            }
            Err(e) => {
                out.insert(
                    node,
                    ImageRead::Failed {
                        error: e.to_string(),
                    },
                );
            }
            Ok(Some(image)) => {
                let key = cache_key(&image.id, &probes[&node]);
                readers.entry(key.clone()).or_insert_with(|| node.clone());
                waiting.push((node, key));
            }
        }
    }
    let read = for_each_node(readers.values().cloned(), concurrency, |node| async move {
        Ok::<_, std::convert::Infallible>(read_on(cluster, &node, &probes[&node]).await)
    })
    .await;
    let mut by_key: BTreeMap<String, ImageRead> = BTreeMap::new();
    for (node, r) in read {
        let Ok(r) = r;
        if let Some((k, _)) = readers.iter().find(|(_, n)| **n == node) {
            by_key.insert(k.clone(), r);
        }
    }
    for (node, key) in waiting {
        if let Some(r) = by_key.get(&key) {
            out.insert(node, r.clone());
        }
    }
    out
}

/// What `--nccl-from` brings, read on every node: `IMAGE` in that image (as its own loader
/// resolves it, once per image ID), `PATH` as `PATH/libnccl.so.2` on each node.
pub async fn read_from(
    cluster: &Cluster,
    nodes: &[NodeName],
    from: &NcclFrom,
    concurrency: usize,
) -> BTreeMap<NodeName, FromRead> {
    match from {
        NcclFrom::Image(image) => {
            let probes: BTreeMap<NodeName, LoaderProbe> = nodes
                .iter()
                .map(|n| {
                    (
                        n.clone(),
                        LoaderProbe {
                            image: image.clone(),
                            ..LoaderProbe::default()
                        },
                    )
                })
                .collect();
            read_images(cluster, &probes, concurrency)
                .await
                .into_iter()
                .map(|(n, r)| (n, from_image(image, r)))
                .collect()
        }
        NcclFrom::Path(dir) => {
            let file = format!("{}/{SONAME}", dir.trim_end_matches('/'));
            let results = for_each_node(nodes.iter().cloned(), concurrency, |node| {
                let file = file.clone();
                async move {
                    let shell = cluster.node(&node)?.target.shell()?;
                    libnccl::read_host_lib(shell.as_ref(), &file)
                        .await
                        .map(|(machine, version)| FromLib {
                            machine,
                            version,
                            source: format!("{node}:{file}"),
                        })
                }
            })
            .await;
            results
                .into_iter()
                .map(|(n, r)| {
                    (
                        n,
                        match r {
                            Ok(lib) => FromRead::Read(lib),
                            Err(e) => FromRead::Failed {
                                error: e.to_string(),
                            },
                        },
                    )
                })
                .collect()
        }
    }
}

fn from_image(image: &str, read: ImageRead) -> FromRead {
    match read {
        ImageRead::Read { resolution, .. } => match resolution.loads {
            Some(f) => FromRead::Read(FromLib {
                machine: f.machine,
                version: f.version,
                source: format!("{image}:{}", f.path),
            }),
            None => FromRead::Failed {
                error: format!("{image} has no {SONAME} its loader finds"),
            },
        },
        ImageRead::NotOnNode => FromRead::NotOnNode,
        ImageRead::Failed { error } => FromRead::Failed { error },
    }
}

/// Everything the plan needs about NCCL: each node's image (`images` by node) and, when
/// given, `--nccl-from`'s library.
pub async fn lookups(
    cluster: &Cluster,
    probes: &BTreeMap<NodeName, LoaderProbe>,
    from: Option<&NcclFrom>,
    concurrency: usize,
) -> NcclReads {
    let images = read_images(cluster, probes, concurrency).await;
    let nodes: Vec<NodeName> = probes.keys().cloned().collect();
    let from = match from {
        Some(f) => read_from(cluster, &nodes, f, concurrency).await,
        None => BTreeMap::new(),
    };
    NcclReads {
        images: images
            .into_iter()
            .filter_map(|(n, r)| probes.get(&n).map(|p| (n, (p.image.clone(), r))))
            .collect(),
        from,
    }
}

/// What a job's container on `node` will load, read through the job's own loader variables and
/// NCCL mounts (never cached): the executor's last look before starting.
pub async fn loads_on(cluster: &Cluster, node: &NodeName, probe: &LoaderProbe) -> Loads {
    match read_on(cluster, node, probe).await {
        ImageRead::Read { resolution, .. } => {
            let from_mount = resolution
                .loads
                .as_ref()
                .is_some_and(|f| f.path.starts_with(&format!("{MOUNT_DIR}/")));
            Loads::from_resolution(
                resolution,
                if from_mount {
                    LibraryOrigin::NcclFrom
                } else {
                    LibraryOrigin::Image
                },
            )
        }
        ImageRead::NotOnNode => Loads::NotYetKnown {
            why: format!("{} is not on {node}", probe.image),
        },
        ImageRead::Failed { error } => Loads::NotYetKnown {
            why: format!("reading it failed: {error}"),
        },
    }
}

/// Fills the `--nccl-from IMAGE` volume on `node` (see `runtime::libnccl::stage_volume`).
pub async fn stage_on(
    cluster: &Cluster,
    node: &NodeName,
    image: &str,
    volume: &str,
    cancel: &tokio_util::sync::CancellationToken,
) -> Result<bool, RuntimeError> {
    let engine = cluster.node(node)?.engine().await?;
    let loader: ImageLoader =
        libnccl::image_loader(engine, image)
            .await?
            .ok_or_else(|| RuntimeError::ImageMissing {
                image: image.to_string(),
                node: node.to_string(),
            })?;
    let probe = LoaderProbe {
        image: image.to_string(),
        ..LoaderProbe::default()
    };
    let source = match read_on(cluster, node, &probe).await {
        ImageRead::Read { resolution, .. } => resolution.loads.map(|f| f.file.unwrap_or(f.path)),
        ImageRead::Failed { error } => return Err(RuntimeError::Other(error)),
        ImageRead::NotOnNode => None,
    }
    .ok_or_else(|| {
        RuntimeError::Other(format!(
            "{image} has no {SONAME} its loader finds: it cannot serve as --nccl-from"
        ))
    })?;
    libnccl::stage_volume(engine, &loader, image, &source, volume, cancel).await
}
