//! Keeping a served job alive: the supervisor that probes a job with a tiny real
//! generation, watches every rank's container, and restarts the **whole group** when a rank
//! wedges or stops; and what starts that supervisor at boot — [`mod@unit`], the systemd unit that
//! runs `spark-launch supervise JOB`.
//!
//! - [`machine`]: the decisions, pure (what was seen and the time in; look, restart, wait or
//!   give up out; events to record), tested with a fake clock.
//! - [`export`]: `export systemd JOB`, the unit written where systemd reads it.
//! - The plan kept at launch and the event log are `crate::records`' (`records/<JOB>/`).
//! - [`run`]: the effects, `supervise JOB` and the loop that ties the
//!   machine to the looks (each rank's container: exit, OOM kill, first error line; the token
//!   probe on the head and `/health`; error lines in the ranks' logs) and to the restart (stop
//!   every rank, start them again in the plan's order, wait ready).
//!
//! **How a restart knows what to start.** Every serving launch keeps its plan (as
//! `--dry-run --json` prints it, secrets as `<set>`) in `records/<JOB>/plan.json`. A restart
//! does not create the containers again from that plan — it could not: the plan holds no
//! secret's value — but stops the job's labelled containers and starts the same containers
//! again (`docker stop`, `docker start`: their configuration, environment and secrets are
//! Docker's, unchanged), in the order of the plan's start steps, then runs the plan's steps
//! that follow the start (Ray's members, the API ready) as the launch did. This is the
//! simplest way that is correct for every engine: the group comes back exactly as launched,
//! with nothing re-derived. A rank whose container was removed cannot come back this way: the
//! restart fails, naming it (launch the job again). The API key the probe sends is read again
//! from the file the plan names (`--api-key auto` or `@FILE`), or `$SPARK_LAUNCH_API_KEY`.
//!
//! **Why systemd and not Docker's restart policies:** a multi-node job is one NCCL group.
//! Docker restarting one rank's container alone brings back a process that cannot rejoin the
//! group the other ranks still hold (they wait in a collective, or have died with it), so the
//! job stays broken while every container looks "up". Only a restart of every rank, in the
//! order the plan says, heals it; the supervisor does that, and systemd only keeps the
//! supervisor running (and starts it after a reboot, once the network and Docker are up).
//! Containers therefore keep restart policy `no`.

pub mod export;
pub mod machine;
pub mod run;
pub mod unit;

pub use machine::{Policy, PolicyAsk};
