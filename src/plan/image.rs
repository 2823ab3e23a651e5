//! Which nodes need an image pushed, which already have it, and which must be refused because
//! the image is built for another CPU. Pure: facts about the image on each node in, one
//! decision per node out. The runtime gathers the facts and carries out the pushes.
//!
//! Images are compared by *content* (`ImageFacts::content`), not by what a storage driver or
//! image store happens to call them; see `runtime::image` for how the key is computed.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::layers::missing_layers;
use crate::node::NodeName;

/// One image as an engine holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageFacts {
    /// What the user named it (`nccl-tests:2.28-arm64`).
    pub reference: String,
    /// The engine's image ID (config digest on the classic store).
    pub id: String,
    /// The content key: equal keys mean the same layers and configuration.
    pub content: String,
    /// OCI architecture (`amd64`, `arm64`).
    pub arch: String,
    pub os: String,
    /// Bytes, as the engine reports (used as the transfer estimate).
    pub size: u64,
    /// The layers' diff IDs, bottom first (`RootFS.Layers`).
    #[serde(default)]
    pub layers: Vec<String>,
}

/// What we know about one target node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetFacts {
    pub node: NodeName,
    /// The node's OCI architecture (from its engine).
    pub arch: String,
    /// The image of that name on the node, if any.
    pub present: Option<ImageFacts>,
    /// Every layer chain the node's engine holds (any image's), when known; `None` when it
    /// could not be read or the engine's store is not one where `docker load` is proven to
    /// skip held layers (the containerd image store): the node then gets every layer.
    pub chains: Option<BTreeSet<String>>,
}

/// The decision for one node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "kebab-case")]
pub enum PushAction {
    /// The node already has the same content.
    Skip,
    /// The node has its own build of this name for its own architecture (a mixed cluster):
    /// nothing to push, and pushing ours would be wrong.
    SkipOwnArch { id: String },
    /// Stream the image to the node: only the layers it lacks (indices into
    /// [`ImageFacts::layers`]), with the image's configuration.
    Push { missing: Vec<usize>, layers: usize },
    /// Refused: the image cannot run there.
    Refuse { reason: String },
}

/// Decides, per target node, whether `image` must be pushed. A node whose CPU differs from
/// the image's is refused with what to do, unless it already holds an image of that name built
/// for its own CPU.
pub fn push_actions(image: &ImageFacts, targets: &[TargetFacts]) -> Vec<(NodeName, PushAction)> {
    targets
        .iter()
        .map(|t| {
            let action = match &t.present {
                Some(p) if p.content == image.content => PushAction::Skip,
                Some(p) if t.arch != image.arch && p.arch == t.arch => {
                    PushAction::SkipOwnArch { id: p.id.clone() }
                }
                _ if t.arch != image.arch => PushAction::Refuse {
                    reason: format!(
                        "image {} is built for {}/{} but {} is {}/{}; fix: build or pull the {} variant on {} (e.g. `docker buildx build --platform linux/{} -t {} ...`) — or push a {} image to it with `spark-launch image push IMAGE --to {}`",
                        image.reference,
                        image.os,
                        image.arch,
                        t.node,
                        image.os,
                        t.arch,
                        t.arch,
                        t.node,
                        t.arch,
                        image.reference,
                        t.arch,
                        t.node
                    ),
                },
                _ => PushAction::Push {
                    missing: match &t.chains {
                        Some(have) => missing_layers(&image.layers, have),
                        None => (0..image.layers.len()).collect(),
                    },
                    layers: image.layers.len(),
                },
            };
            (t.node.clone(), action)
        })
        .collect()
}

/// The architectures present in a cluster, when there is more than one (a mixed cluster:
/// images must exist per architecture).
pub fn mixed_arches(arches: &[(NodeName, String)]) -> Option<Vec<String>> {
    let mut set: Vec<String> = arches.iter().map(|(_, a)| a.clone()).collect();
    set.sort();
    set.dedup();
    (set.len() > 1).then_some(set)
}

/// Where `image push` reads the image and which nodes it goes to: `from` (else this machine,
/// else the head) and `to` (else every other node), among `names` (head first).
pub fn push_route(
    from: Option<&NodeName>,
    to: &[NodeName],
    names: &[NodeName],
    local: Option<&NodeName>,
) -> Result<(NodeName, Vec<NodeName>), String> {
    let known = |n: &NodeName| {
        if names.contains(n) {
            Ok(())
        } else {
            Err(format!(
                "no node named {n}; the nodes are {}",
                names
                    .iter()
                    .map(|n| n.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        }
    };
    let source = match from {
        Some(n) => {
            known(n)?;
            n.clone()
        }
        None => local
            .or_else(|| names.first())
            .cloned()
            .ok_or_else(|| "no nodes".to_string())?,
    };
    let to: Vec<NodeName> = if to.is_empty() {
        names.iter().filter(|n| **n != source).cloned().collect()
    } else {
        for n in to {
            known(n)?;
        }
        to.to_vec()
    };
    Ok((source, to))
}

/// One node of a push planned on snapshots, with its CPU when the snapshot recorded it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NodeCpu {
    pub node: NodeName,
    pub arch: Option<String>,
}

/// `image push --dry-run` on snapshots: snapshots hold no images, so the plan says what a live
/// push compares and where it would stream from, with each node's CPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SnapshotPush {
    pub dry_run: bool,
    pub image: String,
    pub source: NodeCpu,
    pub targets: Vec<NodeCpu>,
    pub mixed_arches: Option<Vec<String>>,
    pub steps: Vec<String>,
}

/// The push of `image` from `source` to `to`, planned on what snapshots know (`arch` per node).
pub fn snapshot_push(
    image: &str,
    source: &NodeName,
    to: &[NodeName],
    arch: &dyn Fn(&NodeName) -> Option<String>,
) -> SnapshotPush {
    let cpu = |n: &NodeName| NodeCpu {
        node: n.clone(),
        arch: arch(n),
    };
    let known: Vec<(NodeName, String)> = std::iter::once(source)
        .chain(to)
        .filter_map(|n| arch(n).map(|a| (n.clone(), a)))
        .collect();
    SnapshotPush {
        dry_run: true,
        image: image.to_string(),
        source: cpu(source),
        targets: to.iter().map(cpu).collect(),
        mixed_arches: mixed_arches(&known),
        steps: vec![
            format!("read {image} on {source} (it must be there)"),
            format!(
                "compare it by content with what each of {} holds under that name",
                to.iter().map(|n| n.as_str()).collect::<Vec<_>>().join(", ")
            ),
            "refuse a node whose CPU differs from the image's (unless it has its own build)"
                .to_string(),
            format!(
                "send every node that lacks it only the layers it lacks, from one export of {source}, all at once"
            ),
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn img(content: &str, arch: &str) -> ImageFacts {
        ImageFacts {
            reference: "nccl:1".into(),
            id: format!("sha256:{content}"),
            content: content.into(),
            arch: arch.into(),
            os: "linux".into(),
            size: 100,
            layers: vec!["sha256:l0".into(), "sha256:l1".into()],
        }
    }

    fn t(node: &str, arch: &str, present: Option<ImageFacts>) -> TargetFacts {
        TargetFacts {
            node: NodeName::new(node).unwrap(),
            arch: arch.into(),
            present,
            chains: None,
        }
    }

    #[test]
    fn nodes_with_the_same_content_are_skipped_and_others_get_the_push() {
        let source = img("aaa", "arm64");
        let actions = push_actions(
            &source,
            &[
                t("n1", "arm64", Some(img("aaa", "arm64"))),
                t("n2", "arm64", Some(img("old", "arm64"))),
                t("n3", "arm64", None),
            ],
        );
        let got: Vec<_> = actions.into_iter().map(|(_, a)| a).collect();
        let all = PushAction::Push {
            missing: vec![0, 1],
            layers: 2,
        };
        assert_eq!(got, vec![PushAction::Skip, all.clone(), all]);
    }

    #[test]
    fn a_node_holding_the_lower_layers_is_sent_only_the_ones_above() {
        let source = img("new", "arm64");
        let mut target = t("n1", "arm64", Some(img("old", "arm64")));
        target.chains = Some(
            crate::plan::layers::chain_ids(&source.layers)[..1]
                .iter()
                .cloned()
                .collect(),
        );
        assert_eq!(
            push_actions(&source, &[target])[0].1,
            PushAction::Push {
                missing: vec![1],
                layers: 2
            }
        );
    }

    #[test]
    fn a_wrong_arch_node_is_refused_with_what_to_do() {
        let source = img("aaa", "arm64");
        let actions = push_actions(&source, &[t("ws", "amd64", None)]);
        let PushAction::Refuse { reason } = &actions[0].1 else {
            panic!("{actions:?}")
        };
        assert!(
            reason.contains("built for linux/arm64 but ws is linux/amd64"),
            "{reason}"
        );
        assert!(reason.contains("--platform linux/amd64"), "{reason}");
    }

    #[test]
    fn a_node_with_its_own_arch_build_of_the_name_keeps_it() {
        let source = img("aaa", "arm64");
        let actions = push_actions(&source, &[t("ws", "amd64", Some(img("bbb", "amd64")))]);
        assert_eq!(
            actions[0].1,
            PushAction::SkipOwnArch {
                id: "sha256:bbb".into()
            }
        );
    }

    #[test]
    fn a_mixed_cluster_is_detected() {
        let n = |s: &str| NodeName::new(s).unwrap();
        assert_eq!(
            mixed_arches(&[(n("a"), "arm64".into()), (n("b"), "amd64".into())]),
            Some(vec!["amd64".to_string(), "arm64".to_string()])
        );
        assert_eq!(
            mixed_arches(&[(n("a"), "arm64".into()), (n("b"), "arm64".into())]),
            None
        );
    }
}
