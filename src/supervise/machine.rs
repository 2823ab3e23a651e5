//! The supervisor's decisions, as a state machine: what it saw (a token probe's outcome, a
//! rank's container that stopped, how a restart of the group ended) and the time go in; what to
//! do next ([`Move`]: look again, restart the whole group, wait, give up) and the events to
//! record come out.
//!
//! - A **wedge** is named after [`Policy::failures`] probes in a row got no token within the
//!   bound while `/health` still answered (a rank stuck in a collective); probes that find the
//!   API not answering at all name the job **not serving** the same way. A failed probe is
//!   followed by the next one at once, so a wedge is named within about
//!   `failures × bound` of the first probe it caught.
//! - A rank's container that stopped (exited, OOM-killed) restarts the group at once; one that
//!   was removed ends supervising (the job was stopped: nothing is left to restart).
//! - **Memory.** Every look reads `MemAvailable` on every node; below [`Policy::memory_floor`]
//!   on any node the machine stops the job ([`Move::StopJob`], event `memory_floor` with the
//!   figures) instead of waiting for the host to hang, and then gives up (the caller exits 1).
//!   During a restart, once the ranks are stopped and before they start again, memory must
//!   come back ([`Supervisor::memory_back`]): every node must have the need of its share (the
//!   plan's memory) plus the floor available, and, from the second restart on, no less than it
//!   had after the first stop (less 4 GiB or 5 %). Memory that does not come back within
//!   [`Policy::settle`] is a leak across restarts (event `memory_leak`): it is named, the job
//!   is left stopped and the restarts end.
//! - **A node that does not answer** (its SSH connection dropped, and opening it again failed)
//!   is named once when lost (event `connection_lost`) and once when it answers again
//!   (`connected_again`); meanwhile it is looked at again every interval, and a restart that
//!   is due waits until every node answers: a restart that cannot reach a node can only fail,
//!   and would spend the restarts on the link rather than on the job.
//! - Every restart is of the whole group. The first one after a healthy spell starts at once;
//!   each further one waits [`Policy::backoff`], doubled every time, at most
//!   [`Policy::backoff_max`]. After [`Policy::max_restarts`] restarts without a healthy spell of
//!   [`Policy::stable_after`] in between, it gives up (the caller exits 1).
//!
//! Pure: time is a number of milliseconds given by the caller (tests drive it with a fake
//! clock); no effects, no clock, no logs of its own.

use std::time::Duration;

use serde::Serialize;

use crate::node::NodeName;
use crate::records::{EventKind as Kind, JobEvent};

/// How the supervisor probes and restarts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Policy {
    /// Between two probes of a healthy job.
    #[serde(rename = "interval_s", serialize_with = "secs")]
    pub interval: Duration,
    /// How long a probe waits for its first token.
    #[serde(rename = "probe_timeout_s", serialize_with = "secs")]
    pub probe_timeout: Duration,
    /// Failed probes in a row that name a wedge.
    pub failures: u32,
    /// The wait before the second restart in a row; doubled for each further one.
    #[serde(rename = "backoff_s", serialize_with = "secs")]
    pub backoff: Duration,
    /// The longest wait between restarts.
    #[serde(rename = "backoff_max_s", serialize_with = "secs")]
    pub backoff_max: Duration,
    /// Restarts in a row (without a healthy spell between them) before giving up.
    pub max_restarts: u32,
    /// Healthy this long after a restart, the count of restarts starts again from zero.
    #[serde(rename = "stable_after_s", serialize_with = "secs")]
    pub stable_after: Duration,
    /// `MemAvailable` below this on any node stops the job (bytes).
    pub memory_floor: u64,
    /// How long memory may take to come back after the ranks stopped, before a restart.
    #[serde(rename = "settle_s", serialize_with = "secs")]
    pub settle: Duration,
}

/// The floor the supervisor keeps: half of what every container's cap leaves the host. A
/// node below it has lost memory outside the containers (what the driver keeps of a GPU
/// allocation is not always charged to the container), and sshd is next.
pub const DEFAULT_MEMORY_FLOOR: u64 = crate::workload::memory::HOST_FLOOR / 2;

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            interval: Duration::from_secs(5),
            probe_timeout: Duration::from_secs(10),
            failures: 2,
            backoff: Duration::from_secs(10),
            backoff_max: Duration::from_secs(300),
            max_restarts: 5,
            stable_after: Duration::from_secs(600),
            memory_floor: DEFAULT_MEMORY_FLOOR,
            settle: Duration::from_secs(30),
        }
    }
}

impl Policy {
    /// The wait before restart number `n` in a row (1-based): none for the first, then
    /// `backoff`, doubled each time, at most `backoff_max`.
    pub fn delay(&self, n: u32) -> Duration {
        if n <= 1 {
            return Duration::ZERO;
        }
        let doubled = self
            .backoff
            .saturating_mul(2u32.saturating_pow((n - 2).min(31)));
        doubled.min(self.backoff_max)
    }
}

/// The policy's settings as the user gave them (`None`: the default), for `supervise` and for
/// the unit that runs it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PolicyAsk {
    pub probe_every_s: Option<u64>,
    pub probe_timeout_s: Option<u64>,
    pub failures: Option<u32>,
    pub backoff_s: Option<u64>,
    pub max_restarts: Option<u32>,
    /// `--memory-floor`, in bytes.
    pub memory_floor: Option<u64>,
}

impl PolicyAsk {
    /// The policy: the defaults with what was given over them.
    pub fn policy(&self) -> Policy {
        let d = Policy::default();
        let secs = |v: Option<u64>, d: Duration| v.map(Duration::from_secs).unwrap_or(d);
        Policy {
            interval: secs(self.probe_every_s, d.interval).max(Duration::from_secs(1)),
            probe_timeout: secs(self.probe_timeout_s, d.probe_timeout).max(Duration::from_secs(1)),
            failures: self.failures.unwrap_or(d.failures).max(1),
            backoff: secs(self.backoff_s, d.backoff),
            max_restarts: self.max_restarts.unwrap_or(d.max_restarts),
            memory_floor: self.memory_floor.unwrap_or(d.memory_floor),
            ..d
        }
    }

    /// The `supervise` flags that give these settings again (for the systemd unit).
    pub fn args(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut push = |flag: &str, v: Option<String>| {
            if let Some(v) = v {
                out.push(flag.to_string());
                out.push(v);
            }
        };
        push("--probe-every", self.probe_every_s.map(|v| v.to_string()));
        push(
            "--probe-timeout",
            self.probe_timeout_s.map(|v| v.to_string()),
        );
        push("--failures", self.failures.map(|v| v.to_string()));
        push("--backoff", self.backoff_s.map(|v| v.to_string()));
        push("--max-restarts", self.max_restarts.map(|v| v.to_string()));
        push(
            "--memory-floor",
            self.memory_floor.map(|b| format!("{}M", b >> 20)),
        );
        out
    }
}

/// What one token probe found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Probed {
    /// A token came back after this many milliseconds.
    Token { after_ms: u64 },
    /// No token within the bound (or an empty or failed generation); `health` says whether
    /// `/health` still answered 200.
    NoToken { health: bool, why: String },
}

/// What the supervisor saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seen {
    Probe(Probed),
    /// A rank's container is no longer running (`detail`: its state, exit code, OOM kill, the
    /// first error line of its log).
    RankStopped {
        node: NodeName,
        detail: String,
    },
    /// A rank's container is not there any more (`spark-launch stop JOB`, or removed by
    /// hand): a restart cannot bring it back, so supervising ends.
    RankGone {
        node: NodeName,
    },
    /// An error line in a rank's log, new since the last look (recorded, not acted on: the
    /// probes decide).
    EngineError {
        node: NodeName,
        line: String,
    },
    /// The restart of the group ended: ready again, or why not.
    Restarted(Result<(), String>),
    /// `MemAvailable` of every node that could be read.
    Memory(Vec<HostMemory>),
    /// A node did not answer through its connection, and connecting again failed (`detail`
    /// says how it is reached and why).
    Unreachable {
        node: NodeName,
        detail: String,
    },
    /// A node answered.
    Reachable {
        node: NodeName,
    },
}

/// One node's `/proc/meminfo`, in bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostMemory {
    pub node: NodeName,
    pub total: u64,
    pub available: u64,
}

/// Whether the ranks may start again after a stop ([`Supervisor::memory_back`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Gate {
    /// Memory came back: start every rank.
    Start,
    /// Not yet: read again after this long.
    Wait(Duration),
    /// It did not come back: a leak; the job stays stopped and the restarts end.
    Leak(String),
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

/// What the caller does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Move {
    /// Look at every rank's container and probe the job; report with [`Supervisor::saw`].
    Look,
    /// Nothing until this much time has passed (or something is seen).
    Wait(Duration),
    /// Restart the whole group (restart number `attempt` in a row); report how it ended with
    /// [`Seen::Restarted`].
    Restart { attempt: u32 },
    /// Stop supervising: the job could not be kept up.
    GiveUp { reason: String },
    /// Stop supervising: the job is gone (its containers were removed); nothing to keep up.
    Gone { reason: String },
    /// Stop every rank now (memory below the floor), then give up with `reason`.
    StopJob { reason: String },
}

/// Something to record in the job's event log (the caller stamps the time).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Happened {
    pub kind: Kind,
    pub detail: String,
    /// A duration that goes with it (the backoff before a restart, the time a restart took).
    pub seconds: Option<f64>,
}

impl Happened {
    /// This event as the log keeps it, stamped with the time `now_ms` (milliseconds since the
    /// epoch).
    pub fn stamped(self, now_ms: i64) -> JobEvent {
        JobEvent::at(now_ms, self.kind, self.detail, self.seconds)
    }

    /// The first event of a supervisor: what it watches, how often.
    pub fn watching(job: &crate::plan::JobName, ranks: usize, policy: &Policy) -> Happened {
        Happened {
            kind: Kind::Watching,
            detail: format!(
                "watching {ranks} rank(s) of {job}: a token probe every {} s (Ctrl-C stops supervising, not the job)",
                policy.interval.as_secs_f64()
            ),
            seconds: None,
        }
    }

    /// The last event of a supervisor that Ctrl-C (or SIGTERM) ended.
    pub fn stopped() -> Happened {
        Happened {
            kind: Kind::Stopped,
            detail: "supervising stopped (Ctrl-C); the job keeps running".into(),
            seconds: None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum State {
    /// Watching a job that serves; the next look is due at `next_look`.
    Watching {
        next_look: u64,
    },
    /// A restart is due at `at`.
    Backoff {
        at: u64,
        reason: String,
    },
    /// A restart is under way since `since`.
    Restarting {
        since: u64,
    },
    GaveUp {
        reason: String,
    },
    Gone {
        reason: String,
    },
    /// Memory fell below the floor: the job is to be stopped, then the machine gives up.
    Halting {
        reason: String,
    },
}

/// The supervisor's state (see the module docs).
#[derive(Clone, Debug)]
pub struct Supervisor {
    policy: Policy,
    state: State,
    /// Failed probes in a row.
    fails: u32,
    /// Whether the failed probes in a row all found `/health` answering.
    health_all_along: bool,
    /// Restarts in a row (reset after a healthy spell).
    restarts: u32,
    /// When the job was last seen ready (start or restart).
    ready_at: u64,
    /// What each node's share of the job needs (the plan's memory), in bytes.
    needs: std::collections::BTreeMap<NodeName, u64>,
    /// `MemAvailable` of each node after the first stop of a restart: what a stopped job
    /// gives back.
    baseline: Option<std::collections::BTreeMap<NodeName, u64>>,
    /// When the current wait for memory to come back began.
    settling_since: Option<u64>,
    /// The nodes that do not answer, with when they were found so.
    lost: std::collections::BTreeMap<NodeName, u64>,
    /// When a node that does not answer was last looked at while a restart waited for it.
    looked_lost: Option<u64>,
    out: Vec<Happened>,
}

impl Supervisor {
    /// A machine watching a job that is ready at `now`.
    pub fn new(policy: Policy, now: u64) -> Supervisor {
        Supervisor {
            policy,
            state: State::Watching { next_look: now },
            fails: 0,
            health_all_along: true,
            restarts: 0,
            ready_at: now,
            needs: Default::default(),
            baseline: None,
            settling_since: None,
            lost: Default::default(),
            looked_lost: None,
            out: Vec::new(),
        }
    }

    /// What each node's share of the job needs, in bytes (the plan's memory), for the check
    /// that memory came back before a restart.
    pub fn with_needs(mut self, needs: std::collections::BTreeMap<NodeName, u64>) -> Supervisor {
        self.needs = needs;
        self
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Restarts in a row so far.
    pub fn restarts(&self) -> u32 {
        self.restarts
    }

    /// Whether `node` does not answer (found so, and not answering since).
    pub fn is_lost(&self, node: &NodeName) -> bool {
        self.lost.contains_key(node)
    }

    /// Whether it is watching a job that serves (not waiting to restart it, nor restarting).
    pub fn watching(&self) -> bool {
        matches!(self.state, State::Watching { .. })
    }

    /// The events to record since the last call.
    pub fn drain(&mut self) -> Vec<Happened> {
        std::mem::take(&mut self.out)
    }

    fn note(&mut self, kind: Kind, detail: impl Into<String>, seconds: Option<f64>) {
        self.out.push(Happened {
            kind,
            detail: detail.into(),
            seconds,
        });
    }

    /// What to do at `now`.
    pub fn next_move(&mut self, now: u64) -> Move {
        match self.state.clone() {
            State::GaveUp { reason } => Move::GiveUp { reason },
            State::Gone { reason } => Move::Gone { reason },
            State::Halting { reason } => {
                self.state = State::GaveUp {
                    reason: reason.clone(),
                };
                Move::StopJob { reason }
            }
            State::Watching { next_look } if now >= next_look => Move::Look,
            State::Watching { next_look } => Move::Wait(ms(next_look - now)),
            // A restart is due, but a node does not answer: look again (each look connects
            // to it again) every interval until it does, then restart.
            State::Backoff { at, .. } if now >= at && !self.lost.is_empty() => {
                let interval = self.policy.interval.as_millis() as u64;
                match self.looked_lost {
                    Some(last) if now.saturating_sub(last) < interval => {
                        Move::Wait(ms(interval - now.saturating_sub(last)))
                    }
                    _ => {
                        self.looked_lost = Some(now);
                        Move::Look
                    }
                }
            }
            State::Backoff { at, reason } if now >= at => {
                self.state = State::Restarting { since: now };
                let n = self.restarts;
                self.note(
                    Kind::Restart,
                    format!(
                        "restarting every rank (restart {n} of at most {} in a row): {reason}",
                        self.policy.max_restarts
                    ),
                    Some(self.policy.delay(n).as_secs_f64()),
                );
                Move::Restart { attempt: n }
            }
            State::Backoff { at, .. } => Move::Wait(ms(at - now)),
            // The caller is restarting; it reports the end with `Seen::Restarted`.
            State::Restarting { .. } => Move::Wait(self.policy.interval),
        }
    }

    /// Takes in what was seen at `now`.
    pub fn saw(&mut self, now: u64, seen: Seen) {
        match (self.state.clone(), seen) {
            (State::Restarting { since }, Seen::Restarted(Ok(()))) => {
                self.note(
                    Kind::Ready,
                    "every rank restarted; the job answers with a token again",
                    Some(secs_between(since, now)),
                );
                self.fails = 0;
                self.health_all_along = true;
                self.ready_at = now;
                self.state = State::Watching {
                    next_look: now + self.policy.interval.as_millis() as u64,
                };
            }
            (State::Restarting { since }, Seen::Restarted(Err(why))) => {
                self.note(
                    Kind::RestartFailed,
                    why.clone(),
                    Some(secs_between(since, now)),
                );
                self.schedule(now, format!("the last restart failed: {why}"));
            }
            (State::Watching { .. }, Seen::Probe(Probed::Token { after_ms })) => {
                if self.fails > 0 {
                    self.note(
                        Kind::ProbeRecovered,
                        format!(
                            "a token after {} ms, after {} failed probe(s)",
                            after_ms, self.fails
                        ),
                        Some(after_ms as f64 / 1000.0),
                    );
                }
                self.fails = 0;
                self.health_all_along = true;
                if self.restarts > 0
                    && now.saturating_sub(self.ready_at)
                        >= self.policy.stable_after.as_millis() as u64
                {
                    self.restarts = 0;
                }
                self.state = State::Watching {
                    next_look: now + self.policy.interval.as_millis() as u64,
                };
            }
            (State::Watching { .. }, Seen::Probe(Probed::NoToken { health, why })) => {
                self.fails += 1;
                self.health_all_along &= health;
                let bound = self.policy.probe_timeout.as_secs_f64();
                self.note(
                    Kind::ProbeFailed,
                    format!(
                        "{why}; /health {}",
                        if health {
                            "answers 200"
                        } else {
                            "does not answer"
                        }
                    ),
                    Some(bound),
                );
                if self.fails >= self.policy.failures {
                    let (kind, what) = if self.health_all_along {
                        (Kind::Wedge, "a wedge: /health answers but no token comes")
                    } else {
                        (Kind::NotServing, "the API does not serve")
                    };
                    let detail = format!("{what} ({} probes in a row, {bound} s each)", self.fails);
                    self.note(kind, detail.clone(), None);
                    self.schedule(now, detail);
                } else {
                    // Probe again at once: a wedge is named within `failures` bounds.
                    self.state = State::Watching { next_look: now };
                }
            }
            (State::Watching { .. }, Seen::RankStopped { node, detail }) => {
                let detail = format!("{node}: {detail}");
                self.note(Kind::ContainerStopped, detail.clone(), None);
                self.schedule(now, detail);
            }
            (State::Watching { .. }, Seen::RankGone { node }) => {
                let reason = format!(
                    "the container of {node} was removed (spark-launch stop?): a restart cannot bring it back; launch the job again"
                );
                self.note(Kind::Gone, reason.clone(), None);
                self.state = State::Gone { reason };
            }
            (_, Seen::EngineError { node, line }) => {
                self.note(Kind::EngineError, format!("{node}: {line}"), None);
            }
            (State::Watching { .. }, Seen::Memory(readings)) => {
                let low: Vec<String> = readings
                    .iter()
                    .filter(|r| r.available < self.policy.memory_floor)
                    .map(|r| {
                        format!(
                            "{}: {:.1} GiB available of {:.1} GiB",
                            r.node,
                            gib(r.available),
                            gib(r.total)
                        )
                    })
                    .collect();
                if !low.is_empty() {
                    let reason = format!(
                        "memory below the floor of {:.1} GiB ({}): the job was stopped before the host stops answering; find what holds the memory (`spark-launch status`, `free -g` on the node; a reboot frees what the driver kept), then launch the job again",
                        gib(self.policy.memory_floor),
                        low.join("; ")
                    );
                    self.note(Kind::MemoryFloor, reason.clone(), None);
                    self.state = State::Halting { reason };
                }
            }
            (_, Seen::Unreachable { node, detail }) if !self.lost.contains_key(&node) => {
                self.note(
                    Kind::ConnectionLost,
                    format!(
                        "{node}: {detail}; connecting to {node} again every {} s until it answers (a restart waits for it)",
                        self.policy.interval.as_secs_f64()
                    ),
                    None,
                );
                self.lost.insert(node, now);
            }
            (_, Seen::Reachable { node }) => {
                if let Some(since) = self.lost.remove(&node) {
                    self.note(
                        Kind::ConnectedAgain,
                        format!("{node}: connected again"),
                        Some(secs_between(since, now)),
                    );
                    if self.lost.is_empty() {
                        self.looked_lost = None;
                    }
                }
            }
            // Anything else is stale (a probe that ended after a restart was decided): ignored.
            _ => {}
        }
    }

    /// A restart of the group is needed because of `reason`: due after the backoff, or give up.
    fn schedule(&mut self, now: u64, reason: String) {
        self.fails = 0;
        self.health_all_along = true;
        if self.restarts >= self.policy.max_restarts {
            let reason = format!(
                "gave up after {} restarts in a row without {} of health: {reason}",
                self.restarts,
                crate::progress::human_duration(self.policy.stable_after)
            );
            self.note(Kind::GaveUp, reason.clone(), None);
            self.state = State::GaveUp { reason };
            return;
        }
        self.restarts += 1;
        let delay = self.policy.delay(self.restarts);
        self.state = State::Backoff {
            at: now + delay.as_millis() as u64,
            reason,
        };
    }

    /// Whether memory came back on every node after the ranks stopped (`readings`, at
    /// `now`), so the restart may start them again (see the module docs). A leak ends the
    /// restarts: the machine gives up.
    pub fn memory_back(&mut self, now: u64, readings: &[HostMemory]) -> Gate {
        let since = *self.settling_since.get_or_insert(now);
        let mut short = Vec::new();
        for r in readings {
            let need = self.needs.get(&r.node).copied().unwrap_or(0);
            let want_plan = need.saturating_add(self.policy.memory_floor);
            let base = self.baseline.as_ref().and_then(|b| b.get(&r.node)).copied();
            // What a restart may lose to the rest of the host (a build, a login, the page
            // cache): 4 GiB, or 5 % of the node. A leak grows past it within a few restarts,
            // long before the host runs out.
            let tolerance = (4u64 << 30).max(r.total / 20);
            let want_base = base.map(|b| b.saturating_sub(tolerance)).unwrap_or(0);
            let want = want_plan.max(want_base);
            if r.available < want {
                let against = match base {
                    Some(b) if want_base >= want_plan => {
                        format!("after the first restart's stop it had {:.1} GiB", gib(b))
                    }
                    _ => format!(
                        "its share of the job needs {:.1} GiB and the host keeps {:.1} GiB",
                        gib(need),
                        gib(self.policy.memory_floor)
                    ),
                };
                short.push(format!(
                    "{}: {:.1} GiB available of {:.1} GiB with every rank stopped; {against}",
                    r.node,
                    gib(r.available),
                    gib(r.total)
                ));
            }
        }
        if short.is_empty() {
            if self.baseline.is_none() {
                self.baseline = Some(
                    readings
                        .iter()
                        .map(|r| (r.node.clone(), r.available))
                        .collect(),
                );
            }
            self.settling_since = None;
            return Gate::Start;
        }
        let waited = now.saturating_sub(since);
        if waited < self.policy.settle.as_millis() as u64 {
            return Gate::Wait(
                Duration::from_secs(2).min(ms(self.policy.settle.as_millis() as u64 - waited)),
            );
        }
        self.settling_since = None;
        let reason = format!(
            "memory did not come back {:.0} s after every rank stopped ({}): a leak across restarts; the job is left stopped; reboot the node to free what the driver kept, then launch the job again",
            waited as f64 / 1000.0,
            short.join("; ")
        );
        self.note(Kind::MemoryLeak, reason.clone(), None);
        self.state = State::GaveUp {
            reason: reason.clone(),
        };
        Gate::Leak(reason)
    }

    /// True when memory fell below the floor and the job is to be stopped.
    pub fn stopping(&self) -> bool {
        matches!(self.state, State::Halting { .. })
    }

    /// True once it gave up.
    pub fn gave_up(&self) -> bool {
        matches!(self.state, State::GaveUp { .. })
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs_between(from: u64, to: u64) -> f64 {
    to.saturating_sub(from) as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(n: &str) -> NodeName {
        NodeName::new(n).unwrap()
    }

    fn wedged() -> Seen {
        Seen::Probe(Probed::NoToken {
            health: true,
            why: "no token".into(),
        })
    }

    fn token() -> Seen {
        Seen::Probe(Probed::Token { after_ms: 120 })
    }

    fn kinds(m: &mut Supervisor) -> Vec<Kind> {
        m.drain().into_iter().map(|h| h.kind).collect()
    }

    #[test]
    fn a_healthy_job_is_looked_at_every_interval_and_records_nothing() {
        let mut m = Supervisor::new(Policy::default(), 0);
        assert_eq!(m.next_move(0), Move::Look);
        m.saw(0, token());
        assert_eq!(m.next_move(1_000), Move::Wait(Duration::from_secs(4)));
        assert_eq!(m.next_move(5_000), Move::Look);
        assert!(m.drain().is_empty());
    }

    #[test]
    fn two_probes_without_a_token_while_health_answers_name_a_wedge_and_restart_the_group_at_once()
    {
        let mut m = Supervisor::new(Policy::default(), 0);
        m.next_move(0);
        m.saw(10_000, wedged());
        // The second probe goes out at once.
        assert_eq!(m.next_move(10_000), Move::Look);
        m.saw(20_000, wedged());
        assert_eq!(
            kinds(&mut m),
            [Kind::ProbeFailed, Kind::ProbeFailed, Kind::Wedge]
        );
        assert_eq!(m.next_move(20_000), Move::Restart { attempt: 1 });
        assert_eq!(kinds(&mut m), [Kind::Restart]);
        m.saw(45_000, Seen::Restarted(Ok(())));
        let ready = m.drain();
        assert_eq!(ready[0].kind, Kind::Ready);
        assert_eq!(ready[0].seconds, Some(25.0));
        assert_eq!(m.next_move(45_000), Move::Wait(Duration::from_secs(5)));
    }

    #[test]
    fn one_failed_probe_then_a_token_is_no_wedge() {
        let mut m = Supervisor::new(Policy::default(), 0);
        m.saw(10_000, wedged());
        m.saw(10_500, token());
        assert_eq!(kinds(&mut m), [Kind::ProbeFailed, Kind::ProbeRecovered]);
        assert!(matches!(m.next_move(11_000), Move::Wait(_)));
    }

    #[test]
    fn probes_that_find_no_api_at_all_name_the_job_not_serving() {
        let mut m = Supervisor::new(Policy::default(), 0);
        let down = Seen::Probe(Probed::NoToken {
            health: false,
            why: "connection refused".into(),
        });
        m.saw(1_000, down.clone());
        m.saw(2_000, down);
        assert_eq!(
            kinds(&mut m),
            [Kind::ProbeFailed, Kind::ProbeFailed, Kind::NotServing]
        );
        assert_eq!(m.next_move(2_000), Move::Restart { attempt: 1 });
    }

    #[test]
    fn a_stopped_rank_restarts_the_whole_group_at_once() {
        let mut m = Supervisor::new(Policy::default(), 0);
        m.saw(
            3_000,
            Seen::RankStopped {
                node: node("n2"),
                detail: "exited (code 137)".into(),
            },
        );
        let h = m.drain();
        assert_eq!(h[0].kind, Kind::ContainerStopped);
        assert_eq!(h[0].detail, "n2: exited (code 137)");
        assert_eq!(m.next_move(3_000), Move::Restart { attempt: 1 });
    }

    #[test]
    fn a_node_that_stops_answering_is_named_once_and_once_again_when_it_answers() {
        let mut m = Supervisor::new(Policy::default(), 0);
        let lost = || Seen::Unreachable {
            node: node("n2"),
            detail: "no answer through the SSH connection (ssh root@10.0.0.2)".into(),
        };
        m.saw(1_000, lost());
        m.saw(6_000, lost());
        m.saw(11_000, Seen::Reachable { node: node("n1") });
        let h = m.drain();
        assert_eq!(h.len(), 1, "{h:?}");
        assert_eq!(h[0].kind, Kind::ConnectionLost);
        assert!(
            h[0].detail.starts_with(
                "n2: no answer through the SSH connection (ssh root@10.0.0.2); connecting to n2 again every 5 s"
            ),
            "{}",
            h[0].detail
        );
        assert!(m.is_lost(&node("n2")));
        m.saw(31_000, Seen::Reachable { node: node("n2") });
        m.saw(36_000, Seen::Reachable { node: node("n2") });
        let h = m.drain();
        assert_eq!(h.len(), 1, "{h:?}");
        assert_eq!(h[0].kind, Kind::ConnectedAgain);
        assert_eq!(h[0].detail, "n2: connected again");
        assert_eq!(h[0].seconds, Some(30.0));
        assert!(!m.is_lost(&node("n2")));
    }

    #[test]
    fn a_restart_that_could_not_reach_a_node_waits_for_it_to_answer_before_the_next() {
        let policy = Policy {
            backoff: Duration::from_secs(10),
            ..Policy::default()
        };
        let mut m = Supervisor::new(policy, 0);
        m.saw(
            0,
            Seen::RankStopped {
                node: node("n2"),
                detail: "exited".into(),
            },
        );
        assert_eq!(m.next_move(0), Move::Restart { attempt: 1 });
        // The restart finds n2's connection gone, and cannot open it again.
        m.saw(
            2,
            Seen::Unreachable {
                node: node("n2"),
                detail: "no answer through the SSH connection".into(),
            },
        );
        m.saw(2, Seen::Restarted(Err("n2: no answer".into())));
        assert_eq!(m.restarts(), 2);
        // The backoff passes; n2 still does not answer: a look every interval, no restart.
        assert_eq!(m.next_move(10_002), Move::Look);
        assert_eq!(
            m.next_move(11_000),
            Move::Wait(Duration::from_millis(4_002))
        );
        assert_eq!(m.next_move(15_002), Move::Look);
        assert_eq!(m.restarts(), 2);
        m.saw(
            15_100,
            Seen::Unreachable {
                node: node("n2"),
                detail: "no answer".into(),
            },
        );
        // It answers: the restart goes ahead, counted as before.
        m.saw(20_000, Seen::Reachable { node: node("n2") });
        assert_eq!(m.next_move(20_000), Move::Restart { attempt: 2 });
        assert_eq!(
            kinds(&mut m),
            [
                Kind::ContainerStopped,
                Kind::Restart,
                Kind::ConnectionLost,
                Kind::RestartFailed,
                Kind::ConnectedAgain,
                Kind::Restart
            ]
        );
    }

    #[test]
    fn restarts_in_a_row_back_off_exponentially_and_give_up_at_the_cap() {
        let policy = Policy {
            backoff: Duration::from_secs(10),
            backoff_max: Duration::from_secs(35),
            max_restarts: 4,
            ..Policy::default()
        };
        let mut m = Supervisor::new(policy, 0);
        let crash = || Seen::RankStopped {
            node: node("n2"),
            detail: "exited".into(),
        };
        let mut now = 0;
        m.saw(now, crash());
        // Restart 1 at once, 2 after 10 s, 3 after 20 s, 4 after 35 s (the cap on the wait).
        let mut waits = Vec::new();
        for attempt in 1..=4 {
            let due = match m.next_move(now) {
                Move::Restart { attempt: a } => {
                    assert_eq!(a, attempt);
                    0
                }
                Move::Wait(d) => {
                    let d = d.as_millis() as u64;
                    // Not a moment earlier.
                    assert_eq!(
                        m.next_move(now + d - 1),
                        Move::Wait(Duration::from_millis(1))
                    );
                    assert_eq!(m.next_move(now + d), Move::Restart { attempt });
                    d
                }
                other => panic!("{other:?}"),
            };
            waits.push(due / 1000);
            now += due + 30_000;
            // The restart came up, then a rank stopped again within seconds.
            m.saw(now, Seen::Restarted(Ok(())));
            now += 2_000;
            m.saw(now, crash());
        }
        assert_eq!(waits, [0, 10, 20, 35]);
        // The fifth would exceed the cap: give up, with the reason.
        match m.next_move(now) {
            Move::GiveUp { reason } => {
                assert!(reason.contains("4 restarts in a row"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
        assert!(m.gave_up());
        assert_eq!(m.drain().last().map(|h| h.kind), Some(Kind::GaveUp));
    }

    #[test]
    fn a_failed_restart_counts_and_the_next_waits_its_backoff() {
        let mut m = Supervisor::new(Policy::default(), 0);
        m.saw(
            0,
            Seen::RankStopped {
                node: node("n1"),
                detail: "OOM-killed".into(),
            },
        );
        assert_eq!(m.next_move(0), Move::Restart { attempt: 1 });
        m.saw(60_000, Seen::Restarted(Err("not ready after 3m".into())));
        assert_eq!(m.next_move(60_000), Move::Wait(Duration::from_secs(10)));
        assert_eq!(m.next_move(70_000), Move::Restart { attempt: 2 });
        assert_eq!(
            kinds(&mut m),
            [
                Kind::ContainerStopped,
                Kind::Restart,
                Kind::RestartFailed,
                Kind::Restart
            ]
        );
    }

    #[test]
    fn a_healthy_spell_after_a_restart_resets_the_count() {
        let policy = Policy {
            max_restarts: 1,
            ..Policy::default()
        };
        let stable = policy.stable_after.as_millis() as u64;
        let mut m = Supervisor::new(policy, 0);
        let crash = Seen::RankStopped {
            node: node("n2"),
            detail: "exited".into(),
        };
        m.saw(0, crash.clone());
        assert_eq!(m.next_move(0), Move::Restart { attempt: 1 });
        m.saw(1_000, Seen::Restarted(Ok(())));
        // Healthy for the whole spell: the next crash restarts at once again.
        m.saw(1_000 + stable, token());
        assert_eq!(m.restarts(), 0);
        m.saw(2_000 + stable, crash);
        assert_eq!(m.next_move(2_000 + stable), Move::Restart { attempt: 1 });
    }

    #[test]
    fn a_removed_rank_ends_supervising_without_a_restart() {
        let mut m = Supervisor::new(Policy::default(), 0);
        m.saw(5_000, Seen::RankGone { node: node("n2") });
        match m.next_move(5_000) {
            Move::Gone { reason } => assert!(reason.contains("n2"), "{reason}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(kinds(&mut m), [Kind::Gone]);
    }

    fn reading(node: &str, available_gib: u64) -> HostMemory {
        HostMemory {
            node: NodeName::new(node).unwrap(),
            total: 119 << 30,
            available: available_gib << 30,
        }
    }

    #[test]
    fn memory_below_the_floor_stops_the_job_and_gives_up_naming_the_figures() {
        let mut m = Supervisor::new(Policy::default(), 0);
        m.saw(0, Seen::Memory(vec![reading("n1", 40), reading("n2", 20)]));
        assert!(m.drain().is_empty());
        assert_eq!(m.next_move(0), Move::Look);
        m.saw(
            5_000,
            Seen::Memory(vec![
                reading("n1", 40),
                HostMemory {
                    node: node("n2"),
                    total: 119 << 30,
                    available: 2 << 30,
                },
            ]),
        );
        let h = m.drain();
        assert_eq!(h[0].kind, Kind::MemoryFloor);
        assert!(
            h[0].detail
                .contains("floor of 3.0 GiB (n2: 2.0 GiB available of 119.0 GiB)"),
            "{}",
            h[0].detail
        );
        match m.next_move(5_000) {
            Move::StopJob { reason } => assert!(reason.contains("n2"), "{reason}"),
            other => panic!("{other:?}"),
        }
        // Then it gives up: nothing restarts a job that ran the host out of memory.
        assert!(matches!(m.next_move(5_001), Move::GiveUp { .. }));
        assert!(m.gave_up());
    }

    #[test]
    fn a_restart_starts_the_ranks_again_once_memory_came_back() {
        let needs = [(node("n1"), 60u64 << 30), (node("n2"), 60 << 30)]
            .into_iter()
            .collect();
        let mut m = Supervisor::new(Policy::default(), 0).with_needs(needs);
        // Right after the stop the driver has not given everything back yet: wait.
        assert_eq!(
            m.memory_back(1_000, &[reading("n1", 50), reading("n2", 110)]),
            Gate::Wait(Duration::from_secs(2))
        );
        assert_eq!(
            m.memory_back(3_000, &[reading("n1", 110), reading("n2", 110)]),
            Gate::Start
        );
        assert!(m.drain().is_empty());
    }

    #[test]
    fn memory_that_does_not_come_back_after_a_stop_is_a_leak_that_ends_the_restarts() {
        let mut m = Supervisor::new(Policy::default(), 0);
        // The first restart: 110 GiB back with every rank stopped.
        assert_eq!(
            m.memory_back(0, &[reading("n1", 110), reading("n2", 110)]),
            Gate::Start
        );
        // A later restart: n2 has 10 GiB less with every rank stopped, for the whole settle.
        let after = [reading("n1", 110), reading("n2", 100)];
        assert!(matches!(m.memory_back(600_000, &after), Gate::Wait(_)));
        assert!(matches!(m.memory_back(620_000, &after), Gate::Wait(_)));
        let Gate::Leak(reason) = m.memory_back(630_000, &after) else {
            panic!("a leak was not named")
        };
        assert!(
            reason.contains("n2: 100.0 GiB available of 119.0 GiB with every rank stopped; after the first restart's stop it had 110.0 GiB"),
            "{reason}"
        );
        assert!(!reason.contains("n1:"), "{reason}");
        assert_eq!(kinds(&mut m), [Kind::MemoryLeak]);
        assert!(m.gave_up());
        // Whatever ends the restart now, it is not restarted again.
        m.saw(630_001, Seen::Restarted(Err(reason.clone())));
        assert!(matches!(m.next_move(630_002), Move::GiveUp { .. }));
    }

    #[test]
    fn the_first_restart_refuses_to_start_a_job_whose_share_no_longer_fits() {
        let needs = [(node("n1"), 100u64 << 30)].into_iter().collect();
        let mut m = Supervisor::new(Policy::default(), 0).with_needs(needs);
        let low = [reading("n1", 90)];
        assert!(matches!(m.memory_back(0, &low), Gate::Wait(_)));
        let Gate::Leak(reason) = m.memory_back(30_000, &low) else {
            panic!("started into a host without the memory")
        };
        assert!(
            reason.contains("its share of the job needs 100.0 GiB and the host keeps 3.0 GiB"),
            "{reason}"
        );
    }

    #[test]
    fn an_error_line_is_recorded_but_decides_nothing() {
        let mut m = Supervisor::new(Policy::default(), 0);
        m.saw(
            0,
            Seen::EngineError {
                node: node("n1"),
                line: "ERROR NCCL timeout".into(),
            },
        );
        assert_eq!(kinds(&mut m), [Kind::EngineError]);
        assert_eq!(m.next_move(0), Move::Look);
    }
}
