#!/usr/bin/env bash
# Benchmark (issue 4, "Measure" a): how long `spark-launch run` takes to start one job on 1, 2,
# 4 and 8 simulated nodes, each with its own dockerd, from inside the head as a user would
# (the head's engine locally, the others through SSH-forwarded Docker sockets; the image is
# already on every node, so EnsureImage only compares). Prints the times and T(8)/T(1): the
# start is parallel when the ratio stays well under N (goal < 1.5).
#
#   sudo bench/runtime_start.sh [RUNS]        (SPARK_LAUNCH_BIN to use a given binary)
#
# A benchmark, not a test: it asserts nothing about time.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench: run as root (simulated nodes need namespaces)" >&2; exit 2; }
RUNS=${1:-10}
P=sl4s$$-
. bench/runtime_common.sh
need hyperfine hyperfine
need jq jq
BIN=$(bench_binary)

up 8
IMAGE=sl4bench:base
base_image "$IMAGE"
in_head "$SIMNET_ROOT/$P/bin/spark-launch" image push "$IMAGE" --hosts "$(hosts 8)" >&2

SL=$SIMNET_ROOT/$P/bin/spark-launch
LIMITS="--ulimit memlock=8388608 --ulimit nofile=16384"
out=$(mktemp -d)
declare -A T
for n in 1 2 4 8; do
	H=$(hosts "$n")
	in_head hyperfine --runs "$RUNS" --warmup 1 --export-json "/tmp/start-$n.json" \
		--prepare "$SL stop benchjob --hosts $H >/dev/null 2>&1 || true" \
		--conclude "$SL stop benchjob --hosts $H >/dev/null 2>&1 || true" \
		--command-name "start on $n node(s)" \
		"$SL run --job benchjob --image $IMAGE --gpus none $LIMITS --hosts $H -- sleep 600" >&2
	# The head's /tmp is its own tmpfs: read the result from inside.
	in_head cat "/tmp/start-$n.json" >"$out/start-$n.json"
	T[$n]=$(jq '.results[0].mean' "$out/start-$n.json")
done
echo
echo "job start time (mean of $RUNS runs, inside the head, SSH to the other nodes):"
for n in 1 2 4 8; do
	printf '  %d node(s): %.3f s\n' "$n" "${T[$n]}"
done
awk -v a="${T[8]}" -v b="${T[1]}" 'BEGIN { printf "T(8)/T(1) = %.2f   (goal < 1.5)\n", a / b }'
rm -rf "$out"
