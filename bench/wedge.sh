#!/usr/bin/env bash
# Benchmark: a 2-node stand-in vLLM job (tests/standin/vllm: every token
# is a round trip to the worker rank, so a frozen worker wedges generation while /health still
# answers) started on simulated nodes (tests/harness/simnet, each with its own dockerd), kept by
# `spark-launch supervise JOB` with its default policy (a token probe every 5 s, 10 s for a
# token, a wedge after 2 probes in a row without one), under a steady load (`spark-launch bench
# JOB --soak 120s --concurrency 4`). 15 s into the load the worker's container is frozen with
# `docker pause`. Ends with three lines:
#   detected after N s        the pause → the supervisor's `wedge` event      (goal ≤ 30)
#   serving again after M s   the pause → its `ready` event (token answered)   (goal ≤ 60)
#   requests failed K         the soak's failed requests: those in flight at the wedge that the
#                             restart cut (goal: K ≤ the streams in flight at the wedge)
#   refused while restarting and sent again R
#                             requests the API refused before taking them while the group
#                             restarted (no connection), sent again as a client with retries
#                             does; each finished or failed once, by its last try
# The scenario lives in tests/supervise_sim.rs (`wedge_bench`, ignored in normal test runs),
# so the bench and the tests build the cluster the same way.
#
#   sudo bench/wedge.sh
#
# A benchmark, not a test: it asserts nothing about time.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench: run as root (simulated nodes need namespaces)" >&2; exit 2; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
cargo test -q --test supervise_sim -- --ignored --exact wedge_bench --nocapture 2>&1 | tee "$out" >&2
grep -E '^(streams in flight at the wedge|detected after|serving again after|requests failed|refused while restarting and sent again) ' "$out"
