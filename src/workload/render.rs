//! The one plan renderer: any launch plan as text for `--dry-run` (a workload header, then per
//! node its container or process, then the numbered steps as `plan::Step::describe` words
//! them), and the few result lines every launching command shares (a job started, still
//! running after Ctrl-C, a launch check). JSON needs no renderer: the plan value is printed as
//! is.

use crate::plan::spec::{IpcMode, NetworkMode};
use crate::plan::{Gpus, JobPlan, Launch};
use crate::workload::engines::LinkVerdict;
use crate::workload::launch::LaunchPlan;
use crate::workload::nccl_build::BuildPlan;
use crate::workload::nccl_lib::NcclPlan;
use crate::workload::nccl_test::NcclTestPlan;
use crate::workload::runtime_cache::RuntimeCache;
use crate::workload::serve::ServePlan;

/// A plan as a person reads it.
pub fn plan(p: &LaunchPlan) -> String {
    match p {
        LaunchPlan::Run(job) => {
            if job.is_noop() {
                return "nothing to do".to_string();
            }
            format!(
                "job {} ({}, runtime {})\n{}",
                job.job,
                job.workload,
                job.runtime,
                job_body(job)
            )
        }
        LaunchPlan::NcclTest(t) => nccl_test(t),
        LaunchPlan::Serve(s) => serve(s),
        LaunchPlan::NcclBuild(b) => build(b),
    }
}

pub use crate::node::join as names;

/// A command line, shell-quoted; a multi-line script argument is shown by its size.
fn argv(words: &[String]) -> String {
    words
        .iter()
        .map(|a| {
            if a.contains('\n') {
                format!("<script: {} lines, --json shows it>", a.lines().count())
            } else {
                crate::plan::job::shell_words(std::slice::from_ref(a))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Every node's part, then the steps.
fn job_body(job: &JobPlan) -> String {
    let mut out = String::new();
    for n in &job.nodes {
        match &n.launch {
            Launch::Container(c) => {
                out.push_str(&format!(
                    "\n{} ({}): container {}  image {}\n",
                    n.node, n.role, c.name, c.image
                ));
                match &c.entrypoint {
                    Some(e) if e.is_empty() => {
                        out.push_str("  entry    (the image's cleared: the command runs alone)\n")
                    }
                    Some(e) => out.push_str(&format!("  entry    {}\n", argv(e))),
                    None => {}
                }
                if c.command.is_empty() {
                    // Never an empty line: what runs is the entrypoint's alone.
                    out.push_str("  command  (none: the entrypoint runs alone)\n");
                } else {
                    out.push_str(&format!("  command  {}\n", argv(&c.command)));
                }
                for (k, v) in &crate::plan::secret::masked_env(&c.env) {
                    out.push_str(&format!("  env      {k}={}\n", value(v)));
                }
                for m in &c.mounts {
                    out.push_str(&format!(
                        "  mount    {} → {}{}\n",
                        m.source,
                        m.target,
                        if m.read_only { " (read-only)" } else { "" }
                    ));
                }
                for d in &c.devices {
                    out.push_str(&format!("  device   {}\n", d.host));
                }
                for f in &c.files {
                    out.push_str(&format!(
                        "  file     {} ({} bytes, put in before the start)\n",
                        f.path,
                        f.content.len()
                    ));
                }
                let gpus = match c.gpus {
                    Gpus::None => "none".to_string(),
                    Gpus::All => "all".to_string(),
                    Gpus::Count(n) => n.to_string(),
                };
                let network = match c.network {
                    NetworkMode::Host => "host",
                    NetworkMode::Bridge => "bridge",
                };
                let ipc = match c.ipc {
                    IpcMode::Host => "host",
                    IpcMode::Private => "private",
                };
                let ulimits: Vec<String> = c
                    .ulimits
                    .iter()
                    .map(|u| format!("{}={}:{}", u.name, u.soft, u.hard))
                    .collect();
                out.push_str(&format!(
                    "  runs     gpus {gpus} · network {network} · ipc {ipc} · cap {} · ulimit {}{}\n",
                    if c.cap_add.is_empty() {
                        "-".to_string()
                    } else {
                        c.cap_add.join(",")
                    },
                    if ulimits.is_empty() {
                        "-".to_string()
                    } else {
                        ulimits.join(" ")
                    },
                    // Said only where given: most containers keep Docker's defaults.
                    if c.security_opt.is_empty() {
                        String::new()
                    } else {
                        format!(" · security-opt {}", c.security_opt.join(","))
                    }
                ));
            }
            Launch::Process(p) => {
                out.push_str(&format!("\n{} ({}): process {}\n", n.node, n.role, p.name));
                out.push_str(&format!("  command  {}\n", argv(&p.command)));
                for (k, v) in &crate::plan::secret::masked_env(&p.env) {
                    out.push_str(&format!("  env      {k}={}\n", value(v)));
                }
            }
        }
    }
    out.push_str("\nsteps\n");
    for (i, s) in job.steps.iter().enumerate() {
        out.push_str(&format!("  {}. {}\n", i + 1, s.describe()));
    }
    out
}

/// A variable's value for the text plan: a multi-line value is shown by its size.
fn value(v: &str) -> String {
    if v.contains('\n') {
        format!("<{} lines, --json shows it>", v.lines().count())
    } else {
        v.to_string()
    }
}

fn nccl_test(p: &NcclTestPlan) -> String {
    let ranks: u32 = p.nodes.iter().map(|n| n.gpus).sum();
    let mut out = format!(
        "nccl-test: {} node{}, {} rank{}{}\n",
        p.nodes.len(),
        if p.nodes.len() == 1 { "" } else { "s" },
        ranks,
        if ranks == 1 { "" } else { "s" },
        p.topology
            .map(|t| format!(", topology {t}"))
            .unwrap_or_default()
    );
    for n in &p.nodes {
        out.push_str(&format!(
            "  {} ({}) at {}, {} GPU{}{}\n",
            n.name,
            n.role,
            n.addr,
            n.gpus,
            if n.gpus == 1 { "" } else { "s" },
            if n.hcas.is_empty() {
                String::new()
            } else {
                format!(", RDMA {}", n.hcas.join(","))
            }
        ));
    }
    if let Some(n) = &p.nccl {
        out.push_str(&nccl(n));
    }
    out.push_str(&job_body(&p.plan));
    if let Some(n) = &p.nccl
        && !n.notes.is_empty()
    {
        out.push_str("\nnotes\n");
        for x in &n.notes {
            out.push_str(&format!("  - {x}\n"));
        }
    }
    out.push_str(&format!(
        "\nthe head's driver script writes the hostfile {}:\n",
        p.hostfile_path
    ));
    for l in p.hostfile.lines() {
        out.push_str(&format!("  {l}\n"));
    }
    for r in &p.runs {
        out.push_str(&format!(
            "\nthen runs {} on {}:\n{}\n",
            r.test,
            p.nodes[0].name,
            r.pretty()
        ));
    }
    if !p.notes.is_empty() {
        out.push_str("\nnotes\n");
        for n in &p.notes {
            out.push_str(&format!("  - {n}\n"));
        }
    }
    out
}

fn serve(p: &ServePlan) -> String {
    let ep = p
        .expert_parallel
        .map(|e| format!(" · ep {e}"))
        .unwrap_or_default();
    let mut out = format!(
        "{} ({}) · {} · tp {} × pp {}{ep} on {}\n",
        p.engine,
        p.mode,
        p.model,
        p.tp,
        p.pp,
        names(&p.nodes)
    );
    out.push_str(&format!(
        "endpoint once ready: {}  (model {})\n",
        p.endpoint.url, p.served_name
    ));
    if let Some(r) = &p.recipe {
        out.push_str(&format!(
            "recipe {} ({}, {}){}\n",
            r.name,
            match r.format {
                crate::workload::recipe_part::RecipeFormat::V1 => "v1",
                crate::workload::recipe_part::RecipeFormat::V2 => "v2",
            },
            r.file,
            if r.mods.is_empty() {
                String::new()
            } else {
                format!(
                    " · mods {} (run in every container before the engine)",
                    r.mods.join(", ")
                )
            }
        ));
        if let Some(before) = &r.before_engine {
            out.push_str(&format!(
                "before the engine (on the head, in the bash that then runs the engine, as the recipe's command runs them):\n  {}\n",
                before.replace('\n', "\n  ")
            ));
        }
        match r.entrypoint.as_deref() {
            None => {}
            Some("") => out.push_str(
                "executor_config.entrypoint \"\": the image's entrypoint is cleared in every container\n",
            ),
            Some(e) => out.push_str(&format!(
                "executor_config.entrypoint {e:?}: runs in every container instead of the image's\n"
            )),
        }
        if !r.pre_exec.is_empty() {
            out.push_str(&format!(
                "pre_exec (run in every container first, in order, each with bash -c):\n{}",
                r.pre_exec
                    .iter()
                    .enumerate()
                    .map(|(i, c)| format!("  [{}] {}\n", i + 1, c.replace('\n', "\n      ")))
                    .collect::<String>()
            ));
        }
    }
    if let Some(n) = &p.nccl {
        out.push_str(&nccl(n));
    }
    out.push_str(&job_body(&p.job));
    if let Some(c) = &p.runtime_cache {
        out.push_str(&runtime_cache(c));
    }
    if !p.memory.nodes.is_empty() {
        out.push_str("\nmemory (GiB)\n");
        for l in p.memory.lines() {
            out.push_str(&format!("  {l}\n"));
        }
    }
    if !p.notes.is_empty() {
        out.push_str("\nnotes\n");
        for n in &p.notes {
            out.push_str(&format!("  - {n}\n"));
        }
    }
    out
}

/// Where each node keeps what the engine compiles at start, and where the ranks see it.
fn runtime_cache(c: &RuntimeCache) -> String {
    let mut out = format!(
        "\nruntime cache (compile and JIT caches; kept across restarts and stops, `status` shows its size){}\n",
        match &c.mount {
            Some(m) => format!(", at {m} in every rank"),
            None => String::new(),
        }
    );
    for (node, folder) in &c.folders {
        out.push_str(&format!("  {node}  {folder}\n"));
    }
    out
}

/// What each container will load, and what the job needs of it.
fn nccl(n: &NcclPlan) -> String {
    let mut need = Vec::new();
    if n.rule.ring {
        need.push(format!(
            "a switchless ring: NCCL {} or later{}",
            crate::libnccl::RING_MIN,
            if n.rule.allow_old {
                " (--allow-old-nccl: not enforced)"
            } else {
                ""
            }
        ));
    }
    if let Some(f) = &n.nccl_from {
        need.push(format!("--nccl-from {f} first on the loader path"));
    }
    let mut out = format!(
        "NCCL {}{}:\n",
        if n.rule.host {
            "each node's own processes load (--runtime host)"
        } else {
            "the containers load"
        },
        if need.is_empty() {
            String::new()
        } else {
            format!(" ({})", need.join("; "))
        }
    );
    let width = n
        .nodes
        .iter()
        .map(|x| x.node.as_str().len())
        .max()
        .unwrap_or(0);
    for x in &n.nodes {
        out.push_str(&format!(
            "  {:width$}  {}\n",
            x.node.as_str(),
            x.loads,
            width = width
        ));
    }
    for w in &n.warnings {
        out.push_str(&format!("  ! {w}\n"));
    }
    out
}

fn build(plan: &BuildPlan) -> String {
    let mut out = String::new();
    for b in &plan.builds {
        out.push_str(&format!(
            "build {} ({}) on {}\n",
            b.tag, b.platform, b.build_on
        ));
        for (k, v) in &b.build_args {
            out.push_str(&format!("  --build-arg {k}={v}\n"));
        }
        if b.push_to.is_empty() {
            out.push_str("  no other node of this architecture\n");
        } else {
            out.push_str(&format!("  then image push to {}\n", names(&b.push_to)));
        }
    }
    for n in &plan.notes {
        out.push_str(&format!("note: {n}\n"));
    }
    out
}

/// `nccl-test --launch-check`'s result: which ranks of which node answered, and what failed.
pub fn launch_check(check: &crate::report::nccl::launch::LaunchCheck) -> String {
    let mut out = String::new();
    for n in &check.nodes {
        let mark = if n.answered >= n.expected {
            "✓"
        } else {
            "✗"
        };
        out.push_str(&format!(
            "{mark} {} ({}): {} of {} rank{} answered\n",
            n.node,
            n.hostname,
            n.answered,
            n.expected,
            if n.expected == 1 { "" } else { "s" }
        ));
    }
    for u in &check.unexpected {
        out.push_str(&format!("? an unexpected host answered: {u}\n"));
    }
    match &check.cause {
        None => out.push_str("✓ mpirun reaches every node through the job's launch path\n"),
        Some(c) => {
            out.push_str(&format!("✗ FAILED: {}\n", c.problem.what));
            if let Some(f) = &c.problem.fix {
                out.push_str(&format!("  fix: {f}\n"));
            }
        }
    }
    out
}

/// A job `run` started (detached): where it runs and how to look at it or stop it.
pub fn started(plan: &JobPlan) -> String {
    format!(
        "job {} runs on {} node{}: `spark-launch status {}`, `spark-launch logs {}`, `spark-launch stop {}`",
        plan.job,
        plan.nodes.len(),
        if plan.nodes.len() == 1 { "" } else { "s" },
        plan.job,
        plan.job,
        plan.job
    )
}

/// [`started`] for `--json`: the job, each node's container or process name, the plan.
pub fn started_json(plan: &JobPlan) -> serde_json::Value {
    let names: Vec<serde_json::Value> = plan
        .nodes
        .iter()
        .map(|n| {
            serde_json::json!({
                "node": n.node,
                "name": plan.job.container_name(&n.node),
            })
        })
        .collect();
    serde_json::json!({ "job": plan.job, "started": names, "plan": plan })
}

/// An attached job ended with Ctrl-C: what was stopped (the exit is 130).
pub fn stopped_after_ctrl_c(job: &JobPlan) -> String {
    format!(
        "interrupted: job {} was stopped on {}",
        job.job,
        names(&job.node_names())
    )
}

/// A detached job that was fully started when Ctrl-C came: what keeps running, and how to
/// stop it.
pub fn still_running(job: &JobPlan) -> String {
    format!(
        "interrupted after job {} had fully started: it keeps running on {} ({}); stop it with `spark-launch stop {}`",
        job.job,
        names(&job.node_names()),
        names(
            &job.node_names()
                .iter()
                .map(|n| job.job.container_name(n))
                .collect::<Vec<_>>()
        ),
        job.job
    )
}

/// The `curl` to paste against a serving job: its endpoint, its model, the API key as the
/// plan says to read it (its file, or `$SPARK_LAUNCH_API_KEY`), never the key itself.
fn ready_curl(plan: &ServePlan) -> String {
    let body = serde_json::json!({
        "model": plan.served_name,
        "messages": [{"role": "user", "content": "Say hello from both nodes."}],
        "max_tokens": 64,
    });
    let auth = plan
        .api_key
        .as_ref()
        .map(|k| format!(" {}", k.curl_header()))
        .unwrap_or_default();
    format!(
        "curl {}/chat/completions{auth} -H 'Content-Type: application/json' -d '{}'",
        plan.endpoint.url, body
    )
}

/// A serving job that answered with a token: the endpoint, the model, the start-up timings, a
/// request to paste, how to look at it and stop it (and the transport: when NCCL uses sockets,
/// and what the engine's logs said of its links, `link`).
pub fn ready(
    plan: &ServePlan,
    startup: &crate::workload::startup::Startup,
    link: Option<&LinkVerdict>,
) -> String {
    let job = &plan.job.job;
    let mut out = format!(
        "ready: {} serves {} (job {job}, {} on {})\n{}\n\n  {}\n\nlogs: spark-launch logs {job}    stop: spark-launch stop {job}",
        plan.endpoint.url,
        plan.served_name,
        plan.engine,
        names(&plan.nodes),
        startup.text(),
        ready_curl(plan),
    );
    if let Some(why) = &plan.sockets {
        out.push_str(&format!(
            "\ntransport: NCCL uses TCP sockets between the nodes, not RDMA ({why})"
        ));
    }
    if let Some(link) = link {
        out.push_str(&format!("\n{link}"));
    }
    out
}

/// [`ready`] for `--json`: the same facts, the start-up timings and the plan that ran.
pub fn ready_json(
    plan: &ServePlan,
    startup: &crate::workload::startup::Startup,
    link: Option<&LinkVerdict>,
) -> serde_json::Value {
    serde_json::json!({
        "job": plan.job.job,
        "engine": plan.engine,
        "endpoint": plan.endpoint.url,
        "model": plan.served_name,
        "nodes": plan.nodes,
        "curl": ready_curl(plan),
        "sockets": plan.sockets,
        "link": link,
        "startup": startup,
        "plan": plan,
    })
}
