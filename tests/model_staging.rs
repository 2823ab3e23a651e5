//! Model staging end to end on this machine: the head downloads from a stand-in Hub (real
//! HTTP, real curl, real scripts), the workers copy from the head, the HF cache layout comes
//! out right, a second run moves nothing, an interrupted run resumes, a gated model without a
//! token fails before any byte moves. Each "node" is a folder with its own cache; the SSH path
//! between simulated nodes is exercised in `tests/serve_sim.rs`.

mod hub_standin;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use hub_standin::{FakeRepo, HubStandin, gguf_repo, tiny_repo};
use spark_launch::model::ModelSource;
use spark_launch::model::hub::HubError;
use spark_launch::node::NodeName;
use spark_launch::progress::{NullReporter, RecordingReporter};
use spark_launch::runtime::shell::LocalShell;
use spark_launch::staging::{
    HeadAccess, NodeStaged, StageError, StageNode, StageOptions, StageSpec, resolve_on_head, stage,
};

struct Cluster {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl Cluster {
    fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("sl7-stage-")
            .tempdir()
            .unwrap();
        let root = dir.path().to_path_buf();
        Cluster { _dir: dir, root }
    }

    fn node(&self, name: &str) -> StageNode {
        let home = self.root.join(name);
        std::fs::create_dir_all(home.join("cache")).unwrap();
        let shell = LocalShell::new(NodeName::new(name).unwrap())
            .with_env("XDG_CACHE_HOME", home.join("cache").to_str().unwrap());
        StageNode {
            shell: Arc::new(shell),
            hf_home: home.join("hf").to_str().unwrap().to_string(),
        }
    }

    /// A node whose `PATH` has every program of `/usr/bin` and `/bin` but Python's: its copies
    /// receive through the shell loop.
    fn node_without_python(&self, name: &str) -> StageNode {
        let bin = self.root.join(format!("{name}-bin"));
        std::fs::create_dir_all(&bin).unwrap();
        for dir in ["/usr/bin", "/bin"] {
            for e in std::fs::read_dir(dir).unwrap().flatten() {
                let to = bin.join(e.file_name());
                if !e.file_name().to_string_lossy().starts_with("python") && !to.exists() {
                    std::os::unix::fs::symlink(e.path(), to).unwrap();
                }
            }
        }
        let home = self.root.join(name);
        std::fs::create_dir_all(home.join("cache")).unwrap();
        let shell = LocalShell::new(NodeName::new(name).unwrap())
            .with_env("XDG_CACHE_HOME", home.join("cache").to_str().unwrap())
            .with_env("PATH", bin.to_str().unwrap());
        StageNode {
            shell: Arc::new(shell),
            hf_home: home.join("hf").to_str().unwrap().to_string(),
        }
    }

    fn repo_dir(&self, name: &str, repo: &str) -> PathBuf {
        self.root
            .join(name)
            .join("hf/hub")
            .join(format!("models--{}", repo.replace('/', "--")))
    }
}

fn opts() -> StageOptions {
    StageOptions {
        streams: 4,
        range_size: 64 * 1024,
        hash_jobs: 2,
    }
}

async fn spec_for(
    hub: &HubStandin,
    c: &Cluster,
    repo: &str,
    token: Option<&str>,
    workers: &[&str],
) -> Result<StageSpec, HubError> {
    let head = c.node("head");
    let model = ModelSource::parse(repo, None).unwrap();
    let resolved = resolve_on_head(
        head.shell.clone(),
        &hub.url,
        &model,
        token.map(|t| t.to_string()),
    )
    .await?;
    Ok(StageSpec {
        model: resolved.as_ref().map(|r| r.source()).unwrap_or(model),
        resolved,
        endpoint: hub.url.clone(),
        token: token.map(|t| t.to_string()),
        head,
        workers: workers
            .iter()
            .map(|w| (c.node(w), HeadAccess::Local))
            .collect(),
        options: opts(),
    })
}

fn assert_layout(dir: &Path, repo: &FakeRepo) {
    let snap = dir.join("snapshots").join(&repo.commit);
    for f in &repo.files {
        let link = snap.join(&f.path);
        let target = std::fs::read_link(&link)
            .unwrap_or_else(|e| panic!("{} is not a symlink: {e}", link.display()));
        let depth = f.path.matches('/').count() + 2;
        assert_eq!(
            target,
            PathBuf::from(format!("{}blobs/{}", "../".repeat(depth), f.blob())),
            "relative target of {}",
            f.path
        );
        assert_eq!(
            std::fs::read(&link).unwrap(),
            f.content,
            "content of {}",
            f.path
        );
    }
    assert_eq!(
        std::fs::read_to_string(dir.join("refs/main")).unwrap(),
        repo.commit
    );
    let leftovers: Vec<_> = std::fs::read_dir(dir.join("blobs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".sl-"))
        .collect();
    assert!(leftovers.is_empty(), "partial files left: {leftovers:?}");
}

fn fetched(reports: &[NodeStaged]) -> Vec<u64> {
    reports.iter().map(|r| r.fetched_bytes).collect()
}

#[tokio::test]
async fn the_head_downloads_once_and_workers_copy_it_keeping_the_hf_cache_layout() {
    let repo = tiny_repo("spark-test/tiny", 300_000);
    let hub = HubStandin::start(vec![repo.clone()]).await;
    let c = Cluster::new();
    let spec = spec_for(&hub, &c, &repo.id, None, &["w1", "w2"])
        .await
        .unwrap();
    let recorder = RecordingReporter::new();
    let reports = stage(&spec, recorder.clone()).await.unwrap();
    let total: u64 = repo.files.iter().map(|f| f.content.len() as u64).sum();
    assert_eq!(fetched(&reports), vec![total, total, total]);
    for node in ["head", "w1", "w2"] {
        assert_layout(&c.repo_dir(node, &repo.id), &repo);
    }
    let mut transfers: Vec<String> = recorder
        .events()
        .into_iter()
        .filter(|e| e.starts_with("transfer:"))
        .collect();
    // The head first; the workers copy at the same time, in any order.
    transfers[1..].sort();
    assert_eq!(
        transfers,
        vec![
            "transfer:head:model spark-test/tiny",
            "transfer:w1:model spark-test/tiny",
            "transfer:w2:model spark-test/tiny"
        ]
    );
}

#[tokio::test]
async fn a_second_run_moves_nothing_and_asks_the_hub_for_no_file() {
    let repo = tiny_repo("spark-test/tiny", 200_000);
    let hub = HubStandin::start(vec![repo.clone()]).await;
    let c = Cluster::new();
    let spec = spec_for(&hub, &c, &repo.id, None, &["w1"]).await.unwrap();
    stage(&spec, Arc::new(NullReporter)).await.unwrap();
    let ranges = hub.range_requests.load(Ordering::SeqCst);
    let again = stage(&spec, Arc::new(NullReporter)).await.unwrap();
    assert_eq!(fetched(&again), vec![0, 0]);
    assert!(again.iter().all(|r| r.present_files == 3 && r.links == 0));
    assert_eq!(hub.range_requests.load(Ordering::SeqCst), ranges);
}

#[tokio::test]
async fn a_corrupted_file_on_a_worker_is_fetched_again_and_only_that_one() {
    let repo = tiny_repo("spark-test/tiny", 200_000);
    let hub = HubStandin::start(vec![repo.clone()]).await;
    let c = Cluster::new();
    let spec = spec_for(&hub, &c, &repo.id, None, &["w1"]).await.unwrap();
    stage(&spec, Arc::new(NullReporter)).await.unwrap();
    let weights = &repo.files[2];
    let blob = c
        .repo_dir("w1", &repo.id)
        .join("blobs")
        .join(weights.blob());
    let mut bad = std::fs::read(&blob).unwrap();
    bad[1000] ^= 0xff;
    std::fs::write(&blob, bad).unwrap();
    let again = stage(&spec, Arc::new(NullReporter)).await.unwrap();
    assert_eq!(fetched(&again), vec![0, weights.content.len() as u64]);
    assert_layout(&c.repo_dir("w1", &repo.id), &repo);
}

#[tokio::test]
async fn a_download_cut_mid_way_resumes_with_only_the_missing_ranges() {
    let repo = tiny_repo("spark-test/tiny", 1024 * 1024);
    let hub = HubStandin::start(vec![repo.clone()]).await;
    let c = Cluster::new();
    let mut spec = spec_for(&hub, &c, &repo.id, None, &[]).await.unwrap();
    spec.options.streams = 1;
    hub.fail_ranges_after(Some(5));
    let err = stage(&spec, Arc::new(NullReporter)).await.unwrap_err();
    match &err {
        StageError::Fetch {
            node, message, fix, ..
        } => {
            assert_eq!(node.as_str(), "head");
            assert!(
                message.contains("500") || message.contains("error"),
                "{message}"
            );
            assert!(fix.contains("run again to resume"), "{fix}");
        }
        other => panic!("unexpected error: {other}"),
    }
    hub.fail_ranges_after(None);
    let before = hub.range_requests.load(Ordering::SeqCst);
    let reports = stage(&spec, Arc::new(NullReporter)).await.unwrap();
    let total: u64 = repo.files.iter().map(|f| f.content.len() as u64).sum();
    assert!(
        reports[0].resumed_bytes >= 5 * 64 * 1024 - 64 * 1024,
        "{reports:?}"
    );
    assert_eq!(reports[0].fetched_bytes + reports[0].resumed_bytes, total);
    let ranges_total = 16 + 2; // 1 MiB in 64 KiB ranges, plus the two small files
    let asked = hub.range_requests.load(Ordering::SeqCst) - before;
    assert!(
        asked <= ranges_total - 4,
        "asked for {asked} ranges after resuming"
    );
    assert_layout(&c.repo_dir("head", &repo.id), &repo);
}

#[tokio::test]
async fn a_copy_interrupted_by_a_drop_resumes_on_the_worker() {
    let repo = tiny_repo("spark-test/tiny", 2 * 1024 * 1024);
    let hub = HubStandin::start(vec![repo.clone()]).await;
    let c = Cluster::new();
    let mut spec = spec_for(&hub, &c, &repo.id, None, &[]).await.unwrap();
    stage(&spec, Arc::new(NullReporter)).await.unwrap();
    spec.workers = vec![(c.node("w1"), HeadAccess::Local)];
    spec.options.streams = 1;
    spec.options.range_size = 16 * 1024;
    // Drop the copy (as Ctrl-C does) once 10 ranges arrived: its processes die with it.
    let cancel = CancelAfter::new(10 * 16 * 1024);
    tokio::select! {
        r = stage(&spec, cancel.clone()) => panic!("the copy finished before the interruption: {r:?}"),
        _ = cancel.notify.notified() => {}
    }
    // Every range the copy reported done before the drop was journaled: none is sent again
    // (only the range in flight is lost).
    let seen = cancel.seen.load(Ordering::SeqCst);
    let reports = stage(&spec, Arc::new(NullReporter)).await.unwrap();
    let total: u64 = repo.files.iter().map(|f| f.content.len() as u64).sum();
    assert!(reports[1].resumed_bytes >= 10 * 16 * 1024, "{reports:?}");
    assert!(
        reports[1].resumed_bytes >= seen,
        "{seen} bytes were reported done before the drop, {reports:?}"
    );
    assert_eq!(reports[1].fetched_bytes + reports[1].resumed_bytes, total);
    assert_layout(&c.repo_dir("w1", &repo.id), &repo);
}

#[tokio::test]
async fn a_gated_model_without_a_token_fails_before_any_byte_moves() {
    let mut repo = tiny_repo("spark-test/gated", 1000);
    repo.gated = true;
    repo.token = Some("hf_good".into());
    let hub = HubStandin::start(vec![repo.clone()]).await;
    let c = Cluster::new();
    let err = spec_for(&hub, &c, &repo.id, None, &["w1"])
        .await
        .err()
        .unwrap();
    assert!(matches!(err, HubError::GatedNoToken { .. }), "{err}");
    assert!(err.to_string().contains("export HF_TOKEN"), "{err}");
    assert_eq!(hub.range_requests.load(Ordering::SeqCst), 0);
    assert!(!c.repo_dir("head", &repo.id).exists());

    let err = spec_for(&hub, &c, &repo.id, Some("hf_wrong"), &["w1"])
        .await
        .err()
        .unwrap();
    assert!(
        matches!(err, HubError::NoAccess { status: 403, .. }),
        "{err}"
    );

    let spec = spec_for(&hub, &c, &repo.id, Some("hf_good"), &["w1"])
        .await
        .unwrap();
    stage(&spec, Arc::new(NullReporter)).await.unwrap();
    assert_layout(&c.repo_dir("w1", &repo.id), &repo);
}

#[tokio::test]
async fn a_local_folder_must_exist_on_the_head_and_is_hashed_there() {
    let c = Cluster::new();
    let src = c.root.join("models/my-llm");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::write(src.join("weights.bin"), hub_standin::bytes(9, 100_000)).unwrap();
    std::fs::write(src.join("sub/config.json"), b"{}").unwrap();
    std::os::unix::fs::symlink("../weights.bin", src.join("sub/w.bin")).unwrap();
    let spec = StageSpec {
        model: ModelSource::parse(src.to_str().unwrap(), None).unwrap(),
        resolved: None,
        endpoint: String::new(),
        token: None,
        head: c.node("head"),
        workers: vec![],
        options: opts(),
    };
    let reports = stage(&spec, Arc::new(NullReporter)).await.unwrap();
    assert_eq!(reports[0].present_files, 2);
    assert_eq!(reports[0].present_bytes, 100_002);

    let spec = StageSpec {
        model: ModelSource::parse(c.root.join("nope").to_str().unwrap(), None).unwrap(),
        ..spec
    };
    let err = stage(&spec, Arc::new(NullReporter)).await.unwrap_err();
    assert!(
        err.to_string().contains("missing or empty on the head"),
        "{err}"
    );
}

/// A reporter that wakes a waiter once `limit` bytes were reported.
struct CancelAfter {
    limit: u64,
    seen: Arc<std::sync::atomic::AtomicU64>,
    notify: Arc<tokio::sync::Notify>,
}

impl CancelAfter {
    fn new(limit: u64) -> Arc<Self> {
        Arc::new(CancelAfter {
            limit,
            seen: Arc::new(0.into()),
            notify: Arc::new(tokio::sync::Notify::new()),
        })
    }
}

struct Counting {
    limit: u64,
    seen: Arc<std::sync::atomic::AtomicU64>,
    notify: Arc<tokio::sync::Notify>,
}

impl spark_launch::progress::Transfer for Counting {
    fn advance(&self, bytes: u64) {
        if self.seen.fetch_add(bytes, Ordering::SeqCst) + bytes >= self.limit {
            self.notify.notify_one();
        }
    }
    fn set_total(&self, _total: u64) {}
    fn finish(&self, _message: &str) {}
}

impl spark_launch::progress::Reporter for CancelAfter {
    fn step(&self, title: &str) -> spark_launch::progress::ProgressStep {
        spark_launch::progress::ProgressStep::silent(title)
    }
    fn transfer(
        &self,
        _node: &NodeName,
        _label: &str,
        _total: Option<u64>,
    ) -> Box<dyn spark_launch::progress::Transfer> {
        Box::new(Counting {
            limit: self.limit,
            seen: self.seen.clone(),
            notify: self.notify.clone(),
        })
    }
    fn node_line(&self, _node: &NodeName, _message: &str) {}
    fn warn(&self, _message: &str) {}
    fn end_step(&self, _title: &str, _ok: bool, _detail: Option<&str>) {}
}

#[tokio::test]
async fn a_link_planted_in_a_shared_cache_is_refused_by_name_and_what_it_points_to_is_untouched() {
    // Seen once: `FILE.sl-partial -> /victim` in a shared cache had the victim's first
    // bytes overwritten, and the error then said the file was "discarded".
    let repo = tiny_repo("spark-test/tiny", 300_000);
    let hub = HubStandin::start(vec![repo.clone()]).await;
    let c = Cluster::new();
    let victim = c.root.join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    let weights = repo.files.iter().find(|f| f.lfs).unwrap().blob();
    let partial = |node: &str| {
        c.repo_dir(node, &repo.id)
            .join("blobs")
            .join(format!("{weights}.sl-partial"))
    };
    let plant = |node: &str| {
        std::fs::create_dir_all(partial(node).parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(&victim, partial(node)).unwrap();
    };
    let refused = format!("refused blobs/{weights}.sl-partial: it is a symbolic link");

    // The head's download (HTTP ranges, `fetch_stream`).
    plant("head");
    let mut spec = spec_for(&hub, &c, &repo.id, None, &[]).await.unwrap();
    let err = stage(&spec, Arc::new(NullReporter)).await.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, StageError::Fetch { .. }), "{text}");
    assert!(text.contains(&refused), "{text}");
    assert!(text.contains("remove it and run again"), "{text}");
    assert!(
        !text.contains("discarded") && !text.contains("resume"),
        "{text}"
    );
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");

    // Gone, the head downloads; then the copies: Python's receiver on w1, the shell loop on w2.
    std::fs::remove_file(partial("head")).unwrap();
    stage(&spec, Arc::new(NullReporter)).await.unwrap();
    plant("w1");
    plant("w2");
    spec.workers = vec![
        (c.node("w1"), HeadAccess::Local),
        (c.node_without_python("w2"), HeadAccess::Local),
    ];
    let err = stage(&spec, Arc::new(NullReporter)).await.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, StageError::Workers(_)), "{text}");
    for w in ["w1", "w2"] {
        assert!(
            text.contains(&format!("{w}: fetching blobs/{weights} failed: {refused}")),
            "{text}"
        );
        assert!(
            partial(w).is_symlink(),
            "{w}: the link itself is left for its owner"
        );
    }
    assert!(!text.contains("discarded"), "{text}");
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
}

#[tokio::test]
async fn a_gguf_spec_stages_only_the_files_it_picks_and_the_hub_serves_no_other() {
    let repo = gguf_repo("spark-test/m-GGUF");
    let hub = HubStandin::start(vec![repo.clone()]).await;
    let c = Cluster::new();
    // The quant in another case, as llama.cpp's -hf matches it.
    let spec = spec_for(&hub, &c, "spark-test/m-GGUF:q3_k_m", None, &[])
        .await
        .unwrap();
    let listed: Vec<&str> = spec
        .resolved
        .as_ref()
        .unwrap()
        .files
        .iter()
        .map(|f| f.path.as_str())
        .collect();
    assert_eq!(
        listed,
        [
            "Q3_K_M/m-Q3_K_M-00001-of-00002.gguf",
            "Q3_K_M/m-Q3_K_M-00002-of-00002.gguf",
            "mmproj-F16.gguf"
        ]
    );
    let reports = stage(&spec, Arc::new(NullReporter)).await.unwrap();
    let picked: Vec<&hub_standin::FakeFile> = repo
        .files
        .iter()
        .filter(|f| listed.contains(&f.path.as_str()))
        .collect();
    let bytes: u64 = picked.iter().map(|f| f.content.len() as u64).sum();
    assert_eq!(fetched(&reports), vec![bytes]);
    let snap = c
        .repo_dir("head", &repo.id)
        .join("snapshots")
        .join(&repo.commit);
    for f in &repo.files {
        let there = snap.join(&f.path);
        if listed.contains(&f.path.as_str()) {
            assert_eq!(std::fs::read(&there).unwrap(), f.content, "{}", f.path);
        } else {
            assert!(!there.exists(), "{} was staged", f.path);
        }
    }
    // The model the engine is pointed at: the first part, in the snapshot.
    assert!(
        spec.model.container_path().ends_with(&format!(
            "{}/Q3_K_M/m-Q3_K_M-00001-of-00002.gguf",
            repo.commit
        )),
        "{}",
        spec.model.container_path()
    );
}

#[tokio::test]
async fn a_gguf_spec_that_picks_nothing_is_refused_naming_the_repository_s_files() {
    let repo = gguf_repo("spark-test/m-GGUF");
    let hub = HubStandin::start(vec![repo.clone()]).await;
    let c = Cluster::new();
    let e = spec_for(&hub, &c, "spark-test/m-GGUF:IQ2_XXS", None, &[])
        .await
        .err()
        .expect("no file carries IQ2_XXS");
    assert!(matches!(e, HubError::Gguf { .. }), "{e}");
    assert!(e.is_refusal());
    let text = e.to_string();
    assert!(text.contains("matching IQ2_XXS"), "{text}");
    assert!(text.contains("m-Q4_K_M.gguf"), "{text}");
    assert_eq!(hub.range_requests.load(Ordering::SeqCst), 0);
}
