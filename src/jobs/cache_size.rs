//! The runtime caches of the work `status` found (`workload::runtime_cache`), measured on their
//! nodes: each folder a container's or process's label names, its size on disk by `du -sk`
//! through the node's shell, every node at once. The script and the reading of its answer are
//! pure ([`script`], [`read`]); [`measure`] runs them. What could not be measured says so
//! (`not recorded`, with why); a folder the node does not have is `absent`.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::node::{NodeName, for_each_node};
use crate::runtime::{Cluster, JobEntry, RuntimeError};

/// How long `du` may take over one folder (a compile cache holds many small files).
const DU_TIMEOUT_S: u32 = 60;

/// What a node said of one runtime cache folder.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum CacheSize {
    /// There, taking `kib` KiB on disk; `partial`: `du` could not read all of it (at least
    /// this much).
    Present {
        kib: u64,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        partial: bool,
    },
    /// The node has no such folder.
    Absent,
    /// Not measured: the node could not be asked, or its answer could not be read.
    NotRecorded { why: String },
}

impl std::fmt::Display for CacheSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CacheSize::Present { kib, partial } => write!(
                f,
                "{}{}",
                if *partial { "at least " } else { "" },
                crate::progress::human_bytes(kib.saturating_mul(1024))
            ),
            CacheSize::Absent => f.write_str("absent"),
            CacheSize::NotRecorded { why } => write!(f, "not recorded ({why})"),
        }
    }
}

/// One runtime cache folder on one node, as measured.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CacheSeen {
    pub node: NodeName,
    pub folder: String,
    /// The jobs whose work names it.
    pub jobs: Vec<String>,
    #[serde(flatten)]
    pub size: CacheSize,
}

/// The script that measures `dir` (`~/` is the home on the node): `absent`, or `du`'s line and
/// its exit status.
pub fn script(dir: &str) -> String {
    let d = match dir.strip_prefix("~/") {
        Some(rest) => format!("\"$HOME\"/{}", crate::model::script::quote(rest)),
        None => crate::model::script::quote(dir),
    };
    format!(
        "d={d}\nif [ -d \"$d\" ]; then timeout {DU_TIMEOUT_S} du -sk -- \"$d\" 2>/dev/null; echo \"du-exit $?\"; else echo absent; fi"
    )
}

/// What [`script`]'s output says.
pub fn read(stdout: &str) -> CacheSize {
    let mut lines = stdout.lines().map(str::trim).filter(|l| !l.is_empty());
    let Some(first) = lines.next() else {
        return CacheSize::NotRecorded {
            why: "the node answered nothing".into(),
        };
    };
    if first == "absent" {
        return CacheSize::Absent;
    }
    let exit = |l: &str| l.strip_prefix("du-exit ").map(|c| c.trim().to_string());
    let kib = first
        .split_whitespace()
        .next()
        .and_then(|n| n.parse::<u64>().ok());
    match (kib, lines.next().and_then(exit)) {
        (Some(kib), Some(code)) => CacheSize::Present {
            kib,
            partial: code != "0",
        },
        (None, _) => match exit(first).as_deref() {
            Some("124") => CacheSize::NotRecorded {
                why: format!("du did not finish within {DU_TIMEOUT_S} s"),
            },
            Some(code) => CacheSize::NotRecorded {
                why: format!("du exited {code} without a size"),
            },
            None => CacheSize::NotRecorded {
                why: "du's answer could not be read".into(),
            },
        },
        (Some(_), None) => CacheSize::NotRecorded {
            why: "du's answer was cut short".into(),
        },
    }
}

/// Every runtime cache folder named by `entries`, measured on its node (each folder once, with
/// the jobs that name it), in the entries' order.
pub async fn measure(
    cluster: &Cluster,
    entries: &[JobEntry],
    concurrency: usize,
) -> Vec<CacheSeen> {
    let mut wanted: Vec<(NodeName, String, Vec<String>)> = Vec::new();
    for e in entries {
        let Some(folder) = &e.runtime_cache else {
            continue;
        };
        match wanted
            .iter_mut()
            .find(|(n, f, _)| *n == e.node && f == folder)
        {
            Some((_, _, jobs)) if !jobs.contains(&e.job) => jobs.push(e.job.clone()),
            Some(_) => {}
            None => wanted.push((e.node.clone(), folder.clone(), vec![e.job.clone()])),
        }
    }
    let mut nodes: Vec<NodeName> = wanted.iter().map(|(n, _, _)| n.clone()).collect();
    nodes.sort();
    nodes.dedup();
    let wanted = &wanted;
    let results = for_each_node(nodes, concurrency, |node| async move {
        let shell = cluster.node(&node)?.target.shell()?;
        let mut out: BTreeMap<String, CacheSize> = BTreeMap::new();
        for (_, folder, _) in wanted.iter().filter(|(n, _, _)| *n == node) {
            let size = match shell.run(&script(folder), Vec::new(), None).await {
                Ok(o) => read(&o.stdout),
                Err(e) => CacheSize::NotRecorded {
                    why: RuntimeError::from(e).to_string(),
                },
            };
            out.insert(folder.clone(), size);
        }
        Ok::<_, RuntimeError>(out)
    })
    .await;
    let mut by_node: BTreeMap<NodeName, Result<BTreeMap<String, CacheSize>, String>> = results
        .into_iter()
        .map(|(n, r)| (n, r.map_err(|e| e.to_string())))
        .collect();
    wanted
        .iter()
        .map(|(node, folder, jobs)| {
            let size = match by_node.get_mut(node) {
                Some(Ok(sizes)) => sizes.remove(folder),
                Some(Err(why)) => Some(CacheSize::NotRecorded { why: why.clone() }),
                None => None,
            }
            .unwrap_or_else(|| CacheSize::NotRecorded {
                why: "the node was not asked".into(),
            });
            CacheSeen {
                node: node.clone(),
                folder: folder.clone(),
                jobs: jobs.clone(),
                size,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::shell::{LocalShell, NodeShell};

    async fn measured(dir: &str) -> CacheSize {
        let shell = LocalShell::new(NodeName::new("local").unwrap());
        read(
            &shell
                .run(&script(dir), Vec::new(), None)
                .await
                .unwrap()
                .stdout,
        )
    }

    #[tokio::test]
    async fn a_folder_is_measured_on_disk_and_a_missing_one_is_absent() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("runtime/vllm/a--b/img-0123abcd");
        std::fs::create_dir_all(dir.join("triton")).unwrap();
        std::fs::write(dir.join("triton/kernel.cubin"), vec![7u8; 64 * 1024]).unwrap();
        match measured(dir.to_str().unwrap()).await {
            CacheSize::Present { kib, partial } => {
                assert!(kib >= 64, "{kib}");
                assert!(!partial);
            }
            other => panic!("{other:?}"),
        }
        let gone = tmp.path().join("never made");
        assert_eq!(measured(gone.to_str().unwrap()).await, CacheSize::Absent);
    }

    #[tokio::test]
    async fn status_measures_each_folder_the_work_names_once_with_every_job_that_names_it() {
        let tmp = tempfile::tempdir().unwrap();
        let kept = tmp.path().join("runtime/sglang/a--b/img-0123abcd");
        std::fs::create_dir_all(kept.join("sglang/jit")).unwrap();
        std::fs::write(kept.join("sglang/jit/module.so"), vec![1u8; 32 * 1024]).unwrap();
        let gone = tmp.path().join("runtime/vllm/a--b/img-4567cdef");
        let here = NodeName::new("here").unwrap();
        let cluster = Cluster::new(vec![crate::runtime::NodeTarget::local(
            here.clone(),
            crate::node::Role::Head,
        )]);
        let entry = |job: &str, node: &NodeName, folder: Option<&std::path::Path>| JobEntry {
            job: job.into(),
            node: node.clone(),
            role: Some("head".into()),
            name: format!("sl-{job}-{node}"),
            runtime: crate::plan::RuntimeKind::Host,
            state: "running".into(),
            exit_code: None,
            image: "serve".into(),
            started_at: None,
            ports: Vec::new(),
            bind: None,
            memory_limit: None,
            oom_killed: false,
            workload: None,
            runtime_cache: folder.map(|f| f.display().to_string()),
        };
        let elsewhere = NodeName::new("elsewhere").unwrap();
        let entries = [
            entry("one", &here, Some(&kept)),
            entry("two", &here, Some(&kept)),
            entry("three", &here, Some(&gone)),
            entry("four", &here, None),
            entry("five", &elsewhere, Some(&kept)),
        ];
        let seen = measure(&cluster, &entries, 0).await;
        assert_eq!(seen.len(), 3, "{seen:#?}");
        assert_eq!(seen[0].jobs, ["one", "two"]);
        assert!(
            matches!(seen[0].size, CacheSize::Present { kib, partial: false } if kib >= 32),
            "{seen:#?}"
        );
        assert_eq!(seen[1].size, CacheSize::Absent);
        // A node that could not be asked says so, never a size.
        assert_eq!(seen[2].node, elsewhere);
        assert!(
            matches!(&seen[2].size, CacheSize::NotRecorded { .. }),
            "{seen:#?}"
        );
    }

    #[test]
    fn an_answer_that_is_not_a_size_is_not_recorded_never_zero() {
        assert_eq!(
            read("12345\t/x\ndu-exit 0\n"),
            CacheSize::Present {
                kib: 12345,
                partial: false
            }
        );
        assert_eq!(
            read("12\t/x\ndu-exit 1\n"),
            CacheSize::Present {
                kib: 12,
                partial: true
            }
        );
        for (out, why) in [
            ("", "nothing"),
            ("du-exit 124\n", "within 60 s"),
            ("du-exit 1\n", "exited 1"),
            ("12\t/x\n", "cut short"),
            ("Permission denied\n", "could not be read"),
        ] {
            match read(out) {
                CacheSize::NotRecorded { why: w } => assert!(w.contains(why), "{out:?}: {w}"),
                other => panic!("{out:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_folder_under_the_home_is_measured_there_and_any_other_is_quoted() {
        let s = script("~/.cache/spark-launch/runtime/vllm/a b");
        assert!(s.starts_with("d=\"$HOME\"/"), "{s}");
        assert!(!script("/x/$(reboot)").contains("d=/x/$(reboot)"));
    }

    #[test]
    fn sizes_read_as_people_say_them() {
        assert_eq!(
            CacheSize::Present {
                kib: 2048,
                partial: true
            }
            .to_string(),
            format!("at least {}", crate::progress::human_bytes(2 << 20))
        );
        assert_eq!(CacheSize::Absent.to_string(), "absent");
    }
}
