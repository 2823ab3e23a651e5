//! The NCCL a job's containers load, read on live nodes: the pre-plan lookup (every node's
//! image, once per image digest; `--nccl-from`'s library), the reads the executor's
//! CheckNccl and StageNccl phases and doctor's `cluster.image-nccl` make, and what the
//! containers of running jobs load (`status`).
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

/// Bumped when what is cached changes meaning (2: torch's RPATH is followed).
const CACHE_SCHEMA: &str = "libnccl-2";

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

/// The key of what a container of `image` loads with `probe`'s loader variables: the image ID
/// and every variable that decides it, as the container sees them (the probe's over the
/// image's), so that a job's running container finds what its launch read.
fn cache_key(image: &ImageLoader, probe: &LoaderProbe) -> String {
    let mut h = Sha256::new();
    let effective = |job: &Option<String>, own: &Option<String>| job.clone().or(own.clone());
    let parts = [
        Some(CACHE_SCHEMA.to_string()),
        Some(image.id.clone()),
        effective(&probe.ld_library_path, &image.ld_library_path),
        effective(&probe.ld_preload, &image.ld_preload),
        image.python.path.clone(),
        image.python.pythonpath.clone(),
        image.python.home.clone(),
    ];
    for part in parts {
        let part = part.unwrap_or_else(|| "\u{0}".to_string());
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
    let key = probe.mounts.is_empty().then(|| cache_key(&image, probe));
    if let Some(hit) = key.as_deref().and_then(cached) {
        return Ok(hit);
    }
    let resolution = libnccl::resolve(engine, probe, &image).await?;
    let read = ImageRead::Read {
        id: image.id.clone(),
        machine: image.machine,
        ld_library_path: image.ld_library_path.clone(),
        resolution,
        ld_preload: image.ld_preload.clone(),
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
                let key = cache_key(&image, &probes[&node]);
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

/// What the containers of running jobs load (`status`), read in each container as it is (its
/// own variables and mounts); the answer for each of `entries`, `None` for host processes and
/// containers that are gone. Cached as the launch's reads are (a container without an NCCL
/// mount, by its image ID and variables), so a job whose launch read its image costs no read.
pub async fn in_containers(
    cluster: &Cluster,
    entries: &[crate::runtime::JobEntry],
    concurrency: usize,
) -> Vec<Option<Loads>> {
    use crate::plan::RuntimeKind;
    let nodes: Vec<NodeName> = {
        let mut n: Vec<NodeName> = entries
            .iter()
            .filter(|e| e.runtime == RuntimeKind::Docker)
            .map(|e| e.node.clone())
            .collect();
        n.sort();
        n.dedup();
        n
    };
    let read = for_each_node(nodes, concurrency, |node| async move {
        let engine = cluster.node(&node)?.engine().await?;
        let mut out = BTreeMap::new();
        for e in entries.iter().filter(|e| e.node == node) {
            if e.runtime != RuntimeKind::Docker || e.job == libnccl::PROBE_JOB {
                continue;
            }
            let loads = match container_loads(engine, &e.name).await {
                Ok(Some(l)) => l,
                Ok(None) => continue,
                Err(err) => Loads::NotYetKnown {
                    why: format!("reading it failed: {err}"),
                },
            };
            out.insert(e.name.clone(), loads);
        }
        Ok::<_, RuntimeError>(out)
    })
    .await;
    let mut by_name: BTreeMap<(NodeName, String), Loads> = BTreeMap::new();
    for (node, r) in read {
        if let Ok(m) = r {
            for (name, l) in m {
                by_name.insert((node.clone(), name), l);
            }
        }
    }
    entries
        .iter()
        .map(|e| by_name.remove(&(e.node.clone(), e.name.clone())))
        .collect()
}

/// One container's NCCL: the launch's read of its image with the same variables when cached
/// (what the process found at its start), else read in the container and cached by its ID.
async fn container_loads(
    engine: &crate::runtime::engine::Engine,
    name: &str,
) -> Result<Option<Loads>, RuntimeError> {
    let Some((image, container_id, mounted)) = libnccl::container_loader(engine, name).await?
    else {
        return Ok(None);
    };
    let by_image = (!mounted).then(|| cache_key(&image, &LoaderProbe::default()));
    let by_container = cache_key(
        &ImageLoader {
            id: format!("container {container_id}"),
            ..image.clone()
        },
        &LoaderProbe::default(),
    );
    let hit = by_image
        .as_deref()
        .and_then(cached)
        .or_else(|| cached(&by_container));
    let resolution = match hit {
        Some(ImageRead::Read { resolution, .. }) => resolution,
        _ => {
            let r = libnccl::resolve_container(engine, name, &image).await?;
            store(
                &by_container,
                &ImageRead::Read {
                    id: image.id.clone(),
                    machine: image.machine,
                    ld_library_path: image.ld_library_path.clone(),
                    resolution: r.clone(),
                    ld_preload: image.ld_preload.clone(),
                },
            );
            r
        }
    };
    let from_mount = resolution
        .loads
        .as_ref()
        .is_some_and(|f| f.path.starts_with(&format!("{MOUNT_DIR}/")));
    Ok(Some(Loads::from_resolution(
        resolution,
        if from_mount {
            LibraryOrigin::NcclFrom
        } else {
            LibraryOrigin::Image
        },
    )))
}
