//! A plan is plain data: the per-node container specs or host processes, and the order of
//! steps. Workloads build plans; `--dry-run` prints them; the executor runs exactly them.
