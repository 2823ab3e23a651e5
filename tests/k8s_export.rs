//! `export k8s` as a user runs it on snapshots: the LeaderWorkerSet, the ConfigMap and the
//! Service of vLLM (native and Ray), SGLang and TensorRT-LLM jobs on two Sparks on one cable
//! (tests/fixtures/seed-001-two-sparks-both-twins) and four in a switchless ring
//! (tests/fixtures/ring-4-sparks). Each rank's environment in the export is compared with
//! `spark-launch env --json` for its node and with the Docker plan's container, and its engine
//! line — once the kubelet fills in the LeaderWorkerSet's variables for that rank — with the
//! Docker plan's (`up --dry-run --json`, the same snapshots).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde::Deserialize;
use serde_json::Value;
use spark_launch::k8s::script::{
    ENTRY_NAME, MOUNT_DIR, SECRET_DIR, kubelet_escape, kubelet_escape_except,
};

mod support;
use support::fixtures::snapshot_args;

/// The four launches: (profile, engine and mode as the plan names them).
const JOBS: [(&str, &str, &str); 4] = [
    ("smoke-test", "vllm", "native"),
    ("qwen-32b-ray-tp2", "vllm", "ray"),
    ("qwen38-flash-next-sglang-tp2", "sglang", "native"),
    ("trtllm-qwen-7b-tp2", "trtllm", "mpi"),
];

/// The clusters: fixture, and the shape flags that use every node.
const CLUSTERS: [(&str, &[&str]); 2] = [
    ("seed-001-two-sparks-both-twins", &[]),
    ("ring-4-sparks", &["--set", "nodes=4", "--tp", "4"]),
];

/// The folder every node's Hugging Face cache is at, in these tests.
const HF_HOME: &str = "/data/hf-cache";

/// Runs the binary with no cluster file, no user profiles and the Hub out of reach.
fn run(args: &[String]) -> Output {
    let cfg = tempfile::tempdir().unwrap();
    Command::new(env!("CARGO_BIN_EXE_spark-launch"))
        .args(args)
        .env("SPARK_LAUNCH_NO_PROGRESS", "1")
        .env("XDG_CONFIG_HOME", cfg.path())
        .env("SPARK_LAUNCH_STATE_DIR", cfg.path().join("state"))
        .env("HF_HUB_OFFLINE", "1")
        .env_remove("SPARK_LAUNCH_PROFILES")
        .env_remove("SPARK_LAUNCH_CLUSTER")
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn json_of(args: &[String]) -> Value {
    let out = run(args);
    assert_eq!(out.status.code(), Some(0), "{args:?}\n{}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn strings(words: &[&str]) -> Vec<String> {
    words.iter().map(|s| s.to_string()).collect()
}

/// Every document of a YAML file.
fn docs(text: &str) -> Vec<Value> {
    yaml_serde::Deserializer::from_str(text)
        .map(|d| serde_json::to_value(yaml_serde::Value::deserialize(d).unwrap()).unwrap())
        .collect()
}

/// The kubelet's expansion of `$(NAME)` in a container's command and args (`$$` is `$`; an
/// unknown name stays as written; any other `$` stays): what the export's escaping is checked
/// against, here and in the round trip below.
fn kubelet_expand(s: &str, vars: &BTreeMap<&str, String>) -> String {
    let b = s.as_bytes();
    let mut out = String::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'$' && i + 1 < b.len() {
            match b[i + 1] {
                b'$' => {
                    out.push('$');
                    i += 2;
                }
                b'(' => match s[i + 2..].find(')') {
                    Some(end) => {
                        let name = &s[i + 2..i + 2 + end];
                        match vars.get(name) {
                            Some(v) => out.push_str(v),
                            None => out.push_str(&s[i..i + 3 + end]),
                        }
                        i += 3 + end;
                    }
                    None => {
                        out.push_str("$(");
                        i += 2;
                    }
                },
                _ => {
                    out.push('$');
                    i += 1;
                }
            }
        } else {
            let c = s[i..].chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

#[test]
fn an_escaped_word_comes_back_from_the_kubelet_as_written_with_only_the_references_filled() {
    let vars = BTreeMap::from([
        ("LWS_WORKER_INDEX", "3".to_string()),
        ("HOME", "/x".to_string()),
    ]);
    for word in [
        "plain",
        "$$ $( $(HOME) $$(HOME) $HOME ${HOME} $",
        "exec \"$@\"",
        "c=$(cat /a/refs/main)",
    ] {
        assert_eq!(kubelet_expand(&kubelet_escape(word), &vars), word, "{word}");
    }
    let line = kubelet_escape_except(
        "--node-rank=$(LWS_WORKER_INDEX) $(HOME)",
        &["$(LWS_WORKER_INDEX)"],
    );
    assert_eq!(kubelet_expand(&line, &vars), "--node-rank=3 $(HOME)");
}

/// The variables an environment file sets, as bash reads it (`. FILE` in an empty
/// environment; what bash sets itself left out).
fn env_file(text: &str) -> BTreeMap<String, String> {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), text).unwrap();
    let out = Command::new("bash")
        .args(["--noprofile", "--norc", "-c", ". \"$1\" && env -0", "bash"])
        .arg(file.path())
        .env_clear()
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text);
    String::from_utf8(out.stdout)
        .unwrap()
        .split('\0')
        .filter_map(|kv| kv.split_once('='))
        .filter(|(k, _)| !matches!(*k, "PWD" | "SHLVL" | "_"))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// One export: the plan it was made from, its files, `env --json` of the same nodes.
struct Exported {
    /// The folder written (removed when dropped).
    dir: tempfile::TempDir,
    plan: Value,
    env: Value,
    lws: Value,
    configmap: Value,
    service: Value,
    readme: String,
    all_text: String,
}

fn export(profile: &str, fixture: &str, shape: &[&str], extra: &[&str]) -> Exported {
    let snaps = snapshot_args(fixture);
    let out_dir = tempfile::tempdir().unwrap();
    let mut a = strings(&["export", "k8s", profile, "--hf-home", HF_HOME, "--json"]);
    a.extend(strings(&["--out", out_dir.path().to_str().unwrap()]));
    a.extend(strings(shape));
    a.extend(strings(extra));
    a.extend(snaps.clone());
    let written = json_of(&a);
    let mut u = strings(&["up", profile, "--hf-home", HF_HOME, "--dry-run", "--json"]);
    u.extend(strings(shape));
    u.extend(strings(extra));
    u.extend(snaps.clone());
    let plan = json_of(&u);
    assert_eq!(written["plan"], plan, "export plans as `up --dry-run` does");
    let mut e = strings(&["env", "--json"]);
    e.extend(snaps);
    let env = json_of(&e);
    let read = |name: &str| std::fs::read_to_string(out_dir.path().join(name)).unwrap();
    let all_text = [
        "leaderworkerset.yaml",
        "configmap.yaml",
        "service.yaml",
        "README.md",
    ]
    .iter()
    .map(|f| read(f))
    .collect::<Vec<_>>()
    .join("\n");
    let lws = docs(&read("leaderworkerset.yaml")).remove(0);
    let configmap = docs(&read("configmap.yaml")).remove(0);
    let service = docs(&read("service.yaml")).remove(0);
    let readme = read("README.md");
    Exported {
        dir: out_dir,
        plan,
        env,
        lws,
        configmap,
        service,
        readme,
        all_text,
    }
}

/// The node plans of the Docker plan, head first: (name, container).
fn containers(plan: &Value) -> Vec<(String, Value)> {
    plan["job"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["node"].as_str().unwrap().to_string(),
                n["launch"]["container"].clone(),
            )
        })
        .collect()
}

fn words(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn every_rank_gets_its_own_nodes_environment_and_the_docker_plans_line_on_two_and_four_sparks() {
    for (fixture, shape) in CLUSTERS {
        for (profile, engine, mode) in JOBS {
            let what = format!("{profile} on {fixture}");
            let x = export(profile, fixture, shape, &[]);
            assert_eq!(x.plan["engine"], engine, "{what}");
            assert_eq!(x.plan["mode"], mode, "{what}");
            let nodes = containers(&x.plan);
            let n = nodes.len();
            assert_eq!(
                n,
                x.env["nodes"].as_object().unwrap().len(),
                "{what}: every node serves"
            );
            let lwt = &x.lws["spec"]["leaderWorkerTemplate"];
            assert_eq!(lwt["size"], n, "{what}");
            let head_addr = nodes[0].1["env"]["MASTER_ADDR"]
                .as_str()
                .unwrap()
                .to_string();
            for (rank, (node, spec)) in nodes.iter().enumerate() {
                // The node's environment file: exactly the Docker container's (secrets come
                // from the Secret), and every variable `env --json` derives for that node.
                let file = x.configmap["data"][format!("{node}.env")]
                    .as_str()
                    .unwrap_or_else(|| panic!("{what}: no {node}.env"));
                let vars = env_file(file);
                let docker: BTreeMap<String, String> = spec["env"]
                    .as_object()
                    .unwrap()
                    .iter()
                    .filter(|(_, v)| *v != "<set>")
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                    .collect();
                assert_eq!(vars, docker, "{what}: {node}'s environment");
                for (k, v) in x.env["nodes"][node]["env"].as_object().unwrap() {
                    assert_eq!(
                        vars.get(k).map(String::as_str),
                        v.as_str(),
                        "{what}: {node} {k} as `env --json` derives it"
                    );
                }

                // The line: the template of its side, the LWS variables filled in for this
                // rank, equals the Docker plan's command.
                let side = if rank == 0 {
                    "leaderTemplate"
                } else {
                    "workerTemplate"
                };
                let pod = &lwt[side]["spec"];
                let c = &pod["containers"][0];
                let vars = BTreeMap::from([
                    ("LWS_GROUP_SIZE", n.to_string()),
                    ("LWS_WORKER_INDEX", rank.to_string()),
                    ("LWS_LEADER_ADDRESS", head_addr.clone()),
                ]);
                let mut args: Vec<String> = words(&c["args"])
                    .iter()
                    .map(|a| kubelet_expand(a, &vars))
                    .collect();
                if args.first().map(String::as_str) == Some("env") {
                    args.remove(0);
                    while let Some((k, v)) = args
                        .first()
                        .and_then(|a| a.split_once('='))
                        .filter(|(k, _)| k.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                    {
                        assert_eq!(spec["env"][&k], v, "{what}: {node}'s {k}");
                        args.remove(0);
                    }
                }
                assert_eq!(args, words(&spec["command"]), "{what}: {node}'s line");
                // The entrypoint reads the node's file by the name the downward API gives.
                let entry = kubelet_expand(c["command"][2].as_str().unwrap(), &BTreeMap::new());
                assert!(
                    entry.contains("/etc/spark-launch/k8s'/\"${NODE_NAME:?"),
                    "{entry}"
                );
                assert_eq!(
                    c["env"][0],
                    serde_json::json!({"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}),
                    "{what}"
                );
                // Pinned to the plan's nodes, one rank per node.
                let pinned = &pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                    ["nodeSelectorTerms"][0]["matchFields"][0];
                assert_eq!(pinned["key"], "metadata.name", "{what}");
                assert!(
                    pinned["values"]
                        .as_array()
                        .unwrap()
                        .contains(&Value::from(node.as_str())),
                    "{what}: {node} in {pinned}"
                );
                assert_eq!(
                    pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                        [0]["topologyKey"],
                    "kubernetes.io/hostname"
                );
                // What a rank needs of its node.
                assert_eq!(pod["hostNetwork"], true, "{what}");
                assert_eq!(pod["dnsPolicy"], "ClusterFirstWithHostNet", "{what}");
                assert_eq!(
                    c["securityContext"]["capabilities"]["add"],
                    serde_json::json!(["IPC_LOCK"]),
                    "{what}"
                );
                assert_eq!(
                    c["resources"]["limits"]["rdma/rdma_shared_device_a"], 1,
                    "{what}"
                );
                assert_eq!(c["resources"]["limits"]["nvidia.com/gpu"], 1, "{what}");
                let cap = x.plan["memory"]["nodes"][node]["limit_bytes"]
                    .as_u64()
                    .unwrap();
                assert_eq!(
                    c["resources"]["limits"]["memory"],
                    cap.to_string(),
                    "{what}: the plan's memory cap"
                );
                let vols = pod["volumes"].as_array().unwrap();
                assert!(
                    vols.contains(
                        &serde_json::json!({"name": "dshm", "emptyDir": {"medium": "Memory"}})
                    ),
                    "{what}: {vols:?}"
                );
                assert!(
                    vols.contains(&serde_json::json!({"name": "hf-cache", "hostPath": {"path": HF_HOME, "type": "Directory"}})),
                    "{what}: {vols:?}"
                );
            }
            assert_eq!(lwt["restartPolicy"], "RecreateGroupOnPodRestart", "{what}");
            // The leader's API, ready only with a token.
            let leader = &lwt["leaderTemplate"]["spec"]["containers"][0];
            assert_eq!(
                leader["readinessProbe"]["exec"]["command"],
                serde_json::json!(["python3", "/etc/spark-launch/k8s/ready.py"])
            );
            let ready = x.configmap["data"]["ready.py"].as_str().unwrap();
            assert!(ready.contains("\\\"max_tokens\\\":1"), "{ready}");
            let port = x.plan["endpoint"]["port"].clone();
            assert_eq!(x.service["spec"]["ports"][0]["port"], port, "{what}");
            assert_eq!(
                x.service["spec"]["selector"]["app.kubernetes.io/component"],
                "leader"
            );
            // Everything is spark-launch's.
            for o in [&x.lws, &x.configmap, &x.service] {
                assert_eq!(
                    o["metadata"]["labels"]["app.kubernetes.io/managed-by"], "spark-launch",
                    "{what}: {}",
                    o["kind"]
                );
            }
            // The image is not pinned by a digest on snapshots: said, never implied.
            assert!(
                x.readme.contains("is not pinned by a digest"),
                "{what}: {}",
                x.readme
            );
        }
    }
}

#[test]
fn an_api_key_is_a_secret_reference_never_a_value_in_the_files() {
    let key = "sk-k8s-export-test-0123456789";
    let key_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(key_file.path(), format!("{key}\n")).unwrap();
    let at = format!("@{}", key_file.path().display());
    for (profile, var) in [
        ("smoke-test", "VLLM_API_KEY"),
        ("qwen38-flash-next-sglang-tp2", "SL_SGLANG_API_KEY"),
    ] {
        let x = export(
            profile,
            "seed-001-two-sparks-both-twins",
            &[],
            &["--api-key", &at],
        );
        assert!(!x.all_text.contains(key), "{profile}: the key is in a file");
        let env = &x.lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]
            ["env"];
        let name = format!("{}-secrets", profile);
        assert!(
            env.as_array().unwrap().contains(&serde_json::json!({
                "name": var,
                "valueFrom": {"secretKeyRef": {"name": name, "key": var}},
            })),
            "{profile}: {env}"
        );
        assert!(
            x.configmap["data"]["ready.py"]
                .as_str()
                .unwrap()
                .contains(&format!("KEY_VAR = \"{var}\"")),
            "{profile}"
        );
        assert!(
            x.readme
                .contains(&format!("kubectl create secret generic {name}")),
            "{}",
            x.readme
        );
    }
}

#[test]
fn a_cache_under_home_is_refused_with_the_flags_that_name_it() {
    let mut a = strings(&["export", "k8s", "smoke-test", "--dry-run"]);
    a.extend(snapshot_args("seed-001-two-sparks-both-twins"));
    let out = run(&a);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("is not an absolute path").count(), 1, "{err}");
    assert!(err.contains("--hf-home") && err.contains("--pvc"), "{err}");

    // A claim instead of the nodes' folders.
    a.extend(strings(&["--pvc", "hf-cache", "--json"]));
    let v = json_of(&a);
    let lws = v["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "leaderworkerset.yaml")
        .unwrap();
    let lws = &docs(lws["text"].as_str().unwrap())[0];
    let vols = &lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["volumes"];
    assert_eq!(
        vols[0],
        serde_json::json!({"name": "hf-cache", "persistentVolumeClaim": {"claimName": "hf-cache"}})
    );
}

/// The site of the pinned validators (tests/standin/fetch-k8s-validate, which scripts/test-all
/// runs first): a missing one fails the test, never skips it.
fn validator_site() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(root.join("tests/standin/fetch-k8s-validate"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// `tests/standin/k8s_validate.py` on a folder of manifests, against LWS v0.7.0's and
/// v0.10.0's CRD schemas (tests/fixtures/k8s/README.md).
fn validate(dir: &Path) -> Output {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    Command::new("python3")
        .arg(root.join("tests/standin/k8s_validate.py"))
        .arg(dir)
        .arg(root.join("tests/fixtures/k8s/lws-v0.7.0.schema.json"))
        .arg(root.join("tests/fixtures/k8s/lws-v0.10.0.schema.json"))
        .env("PYTHONPATH", validator_site())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap()
}

/// The files of the README's `kubectl apply`, in its order.
const APPLIED: [&str; 3] = ["configmap.yaml", "service.yaml", "leaderworkerset.yaml"];

#[test]
fn the_manifests_pass_the_kubernetes_schemas_the_lws_crd_schemas_and_kubectl() {
    for (fixture, shape) in CLUSTERS {
        for (profile, _, _) in JOBS {
            let what = format!("{profile} on {fixture}");
            let x = export(profile, fixture, shape, &[]);
            let out = validate(x.dir.path());
            let report = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success(), "{what}\n{}", text(&out));
            assert!(
                report.contains("3 objects, 0 failed checks"),
                "{what}\n{report}"
            );
            for check in [
                "ok LeaderWorkerSet/",
                "lws-v0.7.0 (fields the API server would prune)",
                "lws-v0.10.0",
                "workerTemplate as a PodTemplate, k8s 1.37.0",
                "ok Service/",
                "ok ConfigMap/",
            ] {
                assert!(report.contains(check), "{what}: {check}\n{report}");
            }
            // kubectl decodes every object as the API types it names. `apply --dry-run=client`
            // asks an API server for its kinds, and none runs here: `--local` asks none.
            let home = tempfile::tempdir().unwrap();
            let mut k = Command::new("kubectl");
            k.args(["label", "--local", "-o", "name"]);
            for f in APPLIED {
                k.arg("-f").arg(x.dir.path().join(f));
            }
            let out = k
                .arg("spark-launch.dev/checked=yes")
                .env("HOME", home.path())
                .env("KUBECONFIG", home.path().join("none"))
                .output()
                .expect("kubectl is installed (scripts/test-all installs it)");
            assert!(out.status.success(), "{what}: kubectl\n{}", text(&out));
            let name = x.lws["metadata"]["name"].as_str().unwrap().to_string();
            assert_eq!(
                String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .collect::<Vec<_>>(),
                [
                    format!("configmap/{name}-env"),
                    format!("service/{name}-api"),
                    format!("leaderworkerset.leaderworkerset.x-k8s.io/{name}"),
                ],
                "{what}"
            );
            assert!(
                x.readme.contains(&format!(
                    "kubectl apply -f {} -f {} -f {}",
                    APPLIED[0], APPLIED[1], APPLIED[2]
                )),
                "{}",
                x.readme
            );
        }
    }
}

#[test]
fn the_validators_refuse_what_the_api_server_would_refuse_or_silently_drop() {
    // A check that passes everything proves nothing: the same export, spoilt three ways.
    let x = export("smoke-test", "seed-001-two-sparks-both-twins", &[], &[]);
    let path = x.dir.path().join("leaderworkerset.yaml");
    let text_of = std::fs::read_to_string(&path).unwrap();
    let spoilt = text_of
        .replace("RecreateGroupOnPodRestart", "Always")
        .replace(
            "  startupPolicy: LeaderCreated",
            "  startupPolicy: LeaderCreated\n  groupSize: 2",
        )
        .replacen(
            "hostNetwork: true",
            "hostNetwork: true\n        hostNetworking: true",
            1,
        );
    std::fs::write(&path, spoilt).unwrap();
    let out = validate(x.dir.path());
    let report = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(
        report.contains("restartPolicy: 'Always' is not one of"),
        "{report}"
    );
    assert!(report.contains("spec.groupSize"), "{report}");
    assert!(
        report.contains("leaderTemplate as a PodTemplate, k8s 1.37.0: Additional properties are not allowed ('hostNetworking' was unexpected)"),
        "{report}"
    );
}

#[test]
fn a_job_started_here_is_exported_from_its_kept_plan_as_its_profile_would_be() {
    // The plan `up` keeps for a job it starts is the `--dry-run --json` plan (secrets shown as
    // `<set>`); written here as `up` would, then exported by the job's name.
    let mut u = strings(&[
        "up",
        "smoke-test",
        "--job",
        "kept-demo",
        "--hf-home",
        HF_HOME,
        "--dry-run",
        "--json",
    ]);
    u.extend(snapshot_args("seed-001-two-sparks-both-twins"));
    let plan = json_of(&u);
    let state = tempfile::tempdir().unwrap();
    let records = state.path().join("records/kept-demo");
    std::fs::create_dir_all(&records).unwrap();
    std::fs::write(records.join("plan.json"), plan.to_string()).unwrap();
    let out_dir = tempfile::tempdir().unwrap();
    let cfg = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_spark-launch"))
        .args(["export", "k8s", "kept-demo", "--out"])
        .arg(out_dir.path())
        .env("SPARK_LAUNCH_NO_PROGRESS", "1")
        .env("XDG_CONFIG_HOME", cfg.path())
        .env("SPARK_LAUNCH_STATE_DIR", state.path())
        .env_remove("SPARK_LAUNCH_PROFILES")
        .env_remove("SPARK_LAUNCH_CLUSTER")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let kept = docs(&std::fs::read_to_string(out_dir.path().join("leaderworkerset.yaml")).unwrap())
        .remove(0);
    let fresh = export(
        "smoke-test",
        "seed-001-two-sparks-both-twins",
        &[],
        &["--job", "kept-demo"],
    );
    assert_eq!(kept, fresh.lws);
    let readme = std::fs::read_to_string(out_dir.path().join("README.md")).unwrap();
    assert!(
        readme.contains("the plan kept for job kept-demo"),
        "{readme}"
    );

    // A name that is neither a profile, a recipe nor a job kept here says so.
    let out = run(&strings(&["export", "k8s", "no-such-job"]));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no launch profile named \"no-such-job\"")
            && err.contains("nor a job started from this machine"),
        "{err}"
    );
}

#[test]
fn a_recipe_s_mods_reach_every_rank_from_a_configmap_with_their_modes() {
    // tests/fixtures/recipes/README.md: eugr's checkout layout, a v1 recipe in a sub-folder
    // with the mod `fix-demo-chat-template` (a chat template and its run.sh).
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/recipes/eugr-checkout");
    let recipe = root.join("recipes/2x-cluster/demo-qwen-pp2.yaml");
    let out_dir = tempfile::tempdir().unwrap();
    let mut a = strings(&[
        "export",
        "k8s",
        recipe.to_str().unwrap(),
        "--hf-home",
        HF_HOME,
    ]);
    a.extend(strings(&["--out", out_dir.path().to_str().unwrap()]));
    a.extend(snapshot_args("seed-001-two-sparks-both-twins"));
    let out = run(&a);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let read = |f: &str| std::fs::read_to_string(out_dir.path().join(f)).unwrap();
    let maps = docs(&read("configmap.yaml"));
    let files = maps
        .iter()
        .find(|m| m["metadata"]["name"] == "demo-qwen-pp2-files")
        .expect("a ConfigMap of the recipe's files");
    let mod_dir = root.join("mods/fix-demo-chat-template");
    assert_eq!(
        files["data"]["file-0-chat.jinja"].as_str().unwrap(),
        std::fs::read_to_string(mod_dir.join("chat.jinja")).unwrap()
    );
    assert_eq!(
        files["data"]["file-1-run.sh"].as_str().unwrap(),
        std::fs::read_to_string(mod_dir.join("run.sh")).unwrap()
    );
    let lws = docs(&read("leaderworkerset.yaml")).remove(0);
    for side in ["leaderTemplate", "workerTemplate"] {
        let entry = lws["spec"]["leaderWorkerTemplate"][side]["spec"]["containers"][0]["command"]
            [2]
        .as_str()
        .unwrap();
        assert!(
            entry.contains("install -D -m 755 '/etc/spark-launch/k8s-files/file-1-run.sh' '/workspace/mods/fix-demo-chat-template/run.sh'"),
            "{side}: {entry}"
        );
    }
    let out = validate(out_dir.path());
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{report}");
    assert!(report.contains("4 objects, 0 failed checks"), "{report}");
}

/// The pod templates' `args` (what spark-launch's entrypoint script execs), leader first.
fn pod_args(dir: &Path) -> Vec<Vec<String>> {
    let lws = docs(&std::fs::read_to_string(dir.join("leaderworkerset.yaml")).unwrap()).remove(0);
    ["leaderTemplate", "workerTemplate"]
        .iter()
        .map(|side| {
            words(&lws["spec"]["leaderWorkerTemplate"][side]["spec"]["containers"][0]["args"])
        })
        .collect()
}

#[test]
fn a_recipe_s_executor_entrypoint_reaches_the_pods_as_the_first_words_they_run_or_none() {
    // tests/fixtures/recipes/local/demo-qwen-consuming-entrypoint.yaml clears the image's
    // entrypoint: the pod's command (spark-launch's script, which replaces the image's
    // ENTRYPOINT as Kubernetes does) then runs the engine's line alone. A program instead
    // comes first, as Docker's --entrypoint runs it with the command as its arguments.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/recipes/local");
    let cleared = root.join("demo-qwen-consuming-entrypoint.yaml");
    let t = tempfile::tempdir().unwrap();
    let replaced = t.path().join("demo-qwen-wrapped.yaml");
    std::fs::write(
        &replaced,
        std::fs::read_to_string(&cleared).unwrap().replace(
            "entrypoint: \"\"",
            "entrypoint: /opt/nvidia/nvidia_entrypoint.sh",
        ),
    )
    .unwrap();
    for (recipe, first) in [
        (&cleared, None),
        (&replaced, Some("/opt/nvidia/nvidia_entrypoint.sh")),
    ] {
        let out_dir = tempfile::tempdir().unwrap();
        let mut a = strings(&[
            "export",
            "k8s",
            recipe.to_str().unwrap(),
            "--hf-home",
            HF_HOME,
        ]);
        a.extend(strings(&["--out", out_dir.path().to_str().unwrap()]));
        a.extend(snapshot_args("seed-001-two-sparks-both-twins"));
        let out = run(&a);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        for args in pod_args(out_dir.path()) {
            // After `env NAME=value…`, the words the container runs.
            let start = args
                .iter()
                .position(|w| w == "vllm" || w.starts_with('/'))
                .unwrap_or_else(|| panic!("no program in {args:?}"));
            match first {
                None => assert_eq!(args[start], "vllm", "{args:?}"),
                Some(p) => {
                    assert_eq!(args[start], p, "{args:?}");
                    assert_eq!(args[start + 1], "vllm", "{args:?}");
                }
            }
        }
    }
}

#[test]
fn atlas_pods_run_with_the_unconfined_seccomp_profile_as_its_docker_containers_do() {
    // tests/fixtures/recipes/atlas-recipes: the expert-parallel recipe on two Sparks, whose
    // containers run with Docker's seccomp=unconfined (io_uring).
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/recipes/atlas-recipes");
    let out_dir = tempfile::tempdir().unwrap();
    let mut a = strings(&[
        "export",
        "k8s",
        "@atlas/minimax-m2.7-nvfp4-ep2",
        "--registry",
        root.to_str().unwrap(),
        "--hf-home",
        HF_HOME,
    ]);
    a.extend(strings(&["--out", out_dir.path().to_str().unwrap()]));
    a.extend(snapshot_args("seed-001-two-sparks-both-twins"));
    let out = run(&a);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let lws = docs(&std::fs::read_to_string(out_dir.path().join("leaderworkerset.yaml")).unwrap())
        .remove(0);
    for side in ["leaderTemplate", "workerTemplate"] {
        let ctx =
            &lws["spec"]["leaderWorkerTemplate"][side]["spec"]["containers"][0]["securityContext"];
        assert_eq!(ctx["seccompProfile"]["type"], "Unconfined", "{side}: {ctx}");
        assert_eq!(
            ctx["capabilities"]["add"],
            serde_json::json!(["IPC_LOCK", "SYS_NICE"]),
            "{side}: {ctx}"
        );
    }
    let out = validate(out_dir.path());
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{report}");
    assert!(report.contains("3 objects, 0 failed checks"), "{report}");
}

#[test]
fn a_node_no_kubernetes_node_can_be_named_as_is_refused_before_any_file() {
    let root =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/seed-001-two-sparks-both-twins");
    let out_dir = tempfile::tempdir().unwrap();
    let mut a = strings(&["export", "k8s", "smoke-test", "--hf-home", HF_HOME, "--out"]);
    a.push(out_dir.path().join("k8s").display().to_string());
    a.extend([
        "--snapshot".to_string(),
        format!("Spark_1={}", root.join("spark").display()),
        "--snapshot".to_string(),
        format!("spark2={}", root.join("spark2").display()),
    ]);
    let out = run(&a);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("node Spark_1 cannot be a Kubernetes node's name"),
        "{err}"
    );
    assert!(!out_dir.path().join("k8s").exists(), "nothing written");
}

#[test]
fn the_entrypoint_reads_its_node_s_file_puts_the_keys_in_place_and_finds_the_model_s_commit() {
    // The leader's entrypoint of a TensorRT-LLM export, run by bash here with its absolute
    // folders moved under a temporary root (the kubelet's `$$` read as `$`): what a rank does
    // before the engine starts.
    let x = export(
        "trtllm-qwen-7b-tp2",
        "seed-001-two-sparks-both-twins",
        &[],
        &[],
    );
    let root = tempfile::tempdir().unwrap();
    let r = root.path().display().to_string();
    let k8s = root.path().join(MOUNT_DIR.trim_start_matches('/'));
    let secret = root.path().join(SECRET_DIR.trim_start_matches('/'));
    let hub = root
        .path()
        .join("root/.cache/huggingface/hub/models--Qwen--Qwen2.5-7B-Instruct");
    for d in [&k8s, &secret, &hub.join("refs")] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(
        k8s.join("spark.env"),
        x.configmap["data"]["spark.env"].as_str().unwrap(),
    )
    .unwrap();
    for k in ["id_ed25519", "ssh_host_ed25519_key"] {
        std::fs::write(secret.join(k), format!("key {k}\n")).unwrap();
    }
    std::fs::write(hub.join("refs/main"), "0123abcd").unwrap();
    let c = &x.lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0];
    let script = kubelet_expand(c["command"][2].as_str().unwrap(), &BTreeMap::new())
        .replace("/etc/spark-launch", &format!("{r}/etc/spark-launch"))
        .replace("/root/.cache", &format!("{r}/root/.cache"));
    let planned =
        format!("{r}/root/.cache/huggingface/hub/models--Qwen--Qwen2.5-7B-Instruct/snapshots/main");
    let rank = |node: &str| {
        Command::new("bash")
            .args(["-c", &script, ENTRY_NAME, "sh", "-c"])
            .arg("printf '%s|%s|%s\\n' \"$1\" \"$NCCL_IB_HCA\" \"$SL_SSHD_LISTEN\"")
            .arg("sh")
            .arg(format!("--model={planned}"))
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("NODE_NAME", node)
            .output()
            .unwrap()
    };
    let out = rank("spark");
    assert!(out.status.success(), "{}", text(&out));
    let head_env = &containers(&x.plan)[0].1["env"];
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!(
            "--model={r}/root/.cache/huggingface/hub/models--Qwen--Qwen2.5-7B-Instruct/snapshots/0123abcd|{}|{}\n",
            head_env["NCCL_IB_HCA"].as_str().unwrap(),
            head_env["SL_SSHD_LISTEN"].as_str().unwrap()
        )
    );
    use std::os::unix::fs::PermissionsExt;
    for k in ["id_ed25519", "ssh_host_ed25519_key"] {
        let p = root.path().join("etc/spark-launch/job-ssh").join(k);
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600,
            "{}",
            p.display()
        );
    }
    // A node the plan does not name has no file: the rank refuses to start, naming the plan's.
    let out = rank("spark9");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("node spark9 has no environment in ConfigMap trtllm-qwen-7b-tp2-env: this group runs only on the plan's nodes (spark, spark2)"),
        "{}",
        text(&out)
    );
}
