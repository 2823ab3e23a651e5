//! Which nodes need an image pushed, which already have it, and which must be refused because
//! the image is built for another CPU. Pure: facts about the image on each node in, one
//! decision per node out. The runtime gathers the facts and carries out the pushes.
//!
//! Images are compared by *content* (`ImageFacts::content`), not by what a storage driver or
//! image store happens to call them; see `runtime::image` for how the key is computed.

use serde::{Deserialize, Serialize};

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
}

/// What we know about one target node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetFacts {
    pub node: NodeName,
    /// The node's OCI architecture (from its engine).
    pub arch: String,
    /// The image of that name on the node, if any.
    pub present: Option<ImageFacts>,
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
    /// Stream the image to the node.
    Push,
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
                _ => PushAction::Push,
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
        }
    }

    fn t(node: &str, arch: &str, present: Option<ImageFacts>) -> TargetFacts {
        TargetFacts {
            node: NodeName::new(node).unwrap(),
            arch: arch.into(),
            present,
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
        assert_eq!(
            got,
            vec![PushAction::Skip, PushAction::Push, PushAction::Push]
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
