#!/usr/bin/env bash
# Benchmark (issue 4, "Measure" b): `spark-launch image push` of a 1 GiB image (incompressible
# payload) against the plain `docker save IMAGE | ssh NODE docker load` pipeline, both run in the
# same bench from inside the head as the test user, each onto nodes that do not have the image
# (it is removed before every run, outside the timing). Two cases:
#   - one target node: spark-launch vs one pipeline;
#   - three target nodes: spark-launch (one export teed to all three) vs the pipeline run once
#     per node in a loop (what the community scripts do) and vs three pipelines in parallel.
# Prints throughputs (image bytes / wall time) and the ratios (goal >= 1.0).
#
#   sudo bench/runtime_push.sh [RUNS] [MIB]   (defaults 3 runs, 1024 MiB)
#
# A benchmark, not a test: it asserts nothing about time.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench: run as root (simulated nodes need namespaces)" >&2; exit 2; }
RUNS=${1:-3}
MIB=${2:-1024}
P=sl4p$$-
. bench/runtime_common.sh
need hyperfine hyperfine
need jq jq
BIN=$(bench_binary)

up 4
IMAGE=sl4bench:big
base_image "$IMAGE" "$MIB"
BYTES=$(docker -H "unix://$(sock 1)" image inspect -f '{{.Size}}' "$IMAGE")
SL=$SIMNET_ROOT/$P/bin/spark-launch
SSH="ssh -o StrictHostKeyChecking=accept-new -o BatchMode=yes"
# Learn the host keys once, outside the timing.
for i in 2 3 4; do in_head $SSH "$(addr "$i")" true; done

rm_on() { # rm_on I...: remove the image from those nodes (not timed)
	local cmd="" i
	for i in "$@"; do cmd+="docker -H unix://$(sock "$i") image rm -f $IMAGE >/dev/null 2>&1; "; done
	echo "$cmd true"
}
pipe() { echo "docker save $IMAGE | $SSH $(addr "$1") docker load -q >/dev/null"; }

run() { # run NAME PREPARE COMMAND -> mean seconds
	local name=$1 prepare=$2 cmd=$3
	in_head hyperfine --runs "$RUNS" --export-json "/tmp/push.json" \
		--prepare "$prepare" --command-name "$name" "$cmd" >&2
	in_head cat /tmp/push.json | jq '.results[0].mean'
}

H2="$(hosts 2)"
H4="$(hosts 4)"
T_SL1=$(run "spark-launch push to 1 node" "$(rm_on 2)" "$SL image push $IMAGE --hosts $H2")
T_PIPE1=$(run "docker save | ssh docker load, 1 node" "$(rm_on 2)" "$(pipe 2)")
T_SL3=$(run "spark-launch push to 3 nodes" "$(rm_on 2 3 4)" "$SL image push $IMAGE --hosts $H4")
T_LOOP3=$(run "pipeline per node, in a loop" "$(rm_on 2 3 4)" "$(pipe 2); $(pipe 3); $(pipe 4)")
T_PAR3=$(run "pipeline per node, in parallel" "$(rm_on 2 3 4)" "$(pipe 2) & $(pipe 3) & $(pipe 4) & wait")

report() { # report NAME SECONDS NODES
	awk -v n="$1" -v t="$2" -v b="$BYTES" -v k="$3" \
		'BEGIN { printf "  %-40s %7.2f s  %7.1f MiB/s per node, %7.1f MiB/s total\n", n, t, b / t / 1048576, k * b / t / 1048576 }'
}
echo
echo "image push, $(awk -v b="$BYTES" 'BEGIN { printf "%.0f MiB", b / 1048576 }') image, mean of $RUNS runs, inside the head:"
report "spark-launch image push → 1 node" "$T_SL1" 1
report "docker save | ssh docker load → 1 node" "$T_PIPE1" 1
report "spark-launch image push → 3 nodes" "$T_SL3" 3
report "pipeline per node, in a loop → 3" "$T_LOOP3" 3
report "pipeline per node, in parallel → 3" "$T_PAR3" 3
awk -v a="$T_PIPE1" -v b="$T_SL1" 'BEGIN { printf "ratio, 1 node (pipeline time / spark-launch time): %.2f   (goal >= 1.0)\n", a / b }'
awk -v a="$T_LOOP3" -v b="$T_SL3" 'BEGIN { printf "ratio, 3 nodes vs the loop:                       %.2f\n", a / b }'
awk -v a="$T_PAR3" -v b="$T_SL3" 'BEGIN { printf "ratio, 3 nodes vs parallel pipelines:             %.2f\n", a / b }'
