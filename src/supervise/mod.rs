//! Keeping a served job alive: the supervisor that probes a job and restarts its whole group
//! (issue 23, wave 2), and what starts that supervisor at boot — [`unit`], the systemd unit
//! that runs `spark-launch supervise JOB`.
//!
//! Why systemd and not Docker's restart policies: a multi-node job is one NCCL group. Docker
//! restarting one rank's container alone brings back a process that cannot rejoin the group
//! the other ranks still hold (they wait in a collective, or have died with it), so the job
//! stays broken while every container looks "up". Only a restart of every rank, in the order
//! the plan says, heals it; the supervisor does that, and systemd only keeps the supervisor
//! running (and starts it after a reboot, once the network and Docker are up). Containers
//! therefore keep restart policy `no`.

pub mod unit;
