#!/usr/bin/env bash
# Benchmark: how long `spark-launch run` takes to start one job on 1, 2,
# 4 and 8 simulated nodes, each with its own dockerd (the image is already on every node, so
# EnsureImage only compares). Three series, all in the same run:
#   ssh     from inside the head as the test user, as on a real cluster: the head's engine
#           locally, every other node's through its Docker socket forwarded over SSH (this
#           includes opening the SSH connections);
#   engine  the same nodes reached through their engine sockets directly (`--engine`), which
#           leaves out SSH and shows the fan-out itself;
#   serial  the ssh series for 8 nodes with --concurrency 1, to show what parallel start saves.
# Prints the means and T(8)/T(1) per series (goal < 1.5). All nodes share this machine's
# cores, so per-node work (SSH handshakes, dockerd creating containers) competes for CPU here in
# a way it does not on real nodes; the engine series and the serial/parallel ratio separate that
# from the code's own parallelism.
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
ARGS="--job benchjob --image $IMAGE --gpus none --ulimit memlock=8388608 --ulimit nofile=16384"
out=$(mktemp -d)

engines() { # engines N: --engine arguments for nodes 1..N
	local i a=""
	for i in $(seq 1 "$1"); do a+=" --engine n$i=unix://$(sock "$i")"; done
	echo "$a"
}

declare -A T
busy_s=0
wall_ns=0
for n in 1 2 4 8; do
	H=$(hosts "$n")
	in_head hyperfine --runs "$RUNS" --warmup 1 --export-json "/tmp/start-$n.json" \
		--prepare "$SL stop benchjob --hosts $H >/dev/null 2>&1 || true" \
		--command-name "ssh: start on $n node(s)" \
		"$SL run $ARGS --hosts $H -- sleep 600" >&2
	in_head "$SL" stop benchjob --hosts "$H" >/dev/null 2>&1 || true
	# The head's /tmp is its own tmpfs: read the result from inside.
	in_head cat "/tmp/start-$n.json" >"$out/ssh-$n.json"
	T[ssh-$n]=$(jq '.results[0].mean' "$out/ssh-$n.json")

	E=$(engines "$n")
	SPARK_LAUNCH_NO_PROGRESS=1 hyperfine --runs "$RUNS" --warmup 1 --export-json "$out/engine-$n.json" \
		--prepare "$BIN stop benchjob $E >/dev/null 2>&1 || true" \
		--command-name "engine: start on $n node(s)" \
		"$BIN run $ARGS $E -- sleep 600" >&2
	"$BIN" stop benchjob $E >/dev/null 2>&1 || true
	T[engine-$n]=$(jq '.results[0].mean' "$out/engine-$n.json")
done
H=$(hosts 8)
in_head hyperfine --runs "$RUNS" --warmup 1 --export-json "/tmp/serial.json" \
	--prepare "$SL stop benchjob --hosts $H >/dev/null 2>&1 || true" \
	--command-name "ssh, --concurrency 1: start on 8 nodes" \
	"$SL run $ARGS --concurrency 1 --hosts $H -- sleep 600" >&2
in_head "$SL" stop benchjob --hosts "$H" >/dev/null 2>&1 || true
in_head cat /tmp/serial.json >"$out/serial.json"
T[serial]=$(jq '.results[0].mean' "$out/serial.json")

# How busy the machine's cores are while 8 nodes start: busy CPU time (all processes, from
# /proc/stat) over wall time for a few starts. Near $(nproc) means the start is bound by this
# machine's cores, which every simulated node shares, rather than by waiting on each other.
busy() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 }' /proc/stat; }
H=$(hosts 8)
CPU_RUNS=5
b0=$(busy)
w0=$(date +%s%N)
for _ in $(seq 1 "$CPU_RUNS"); do
	in_head "$SL" run $ARGS --hosts "$H" -- sleep 600 >/dev/null
	w1=$(date +%s%N)
	b1=$(busy)
	in_head "$SL" stop benchjob --hosts "$H" >/dev/null 2>&1 || true
	busy_s=$((busy_s + b1 - b0))
	wall_ns=$((wall_ns + w1 - w0))
	b0=$(busy)
	w0=$(date +%s%N)
done
CORES_BUSY=$(awk -v b="$busy_s" -v w="$wall_ns" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", (b / hz) / (w / 1e9) }')

echo
echo "job start time, mean of $RUNS runs ($(nproc) cores shared by all nodes, load $(cut -d' ' -f1-3 /proc/loadavg)):"
printf '  %-8s %9s %9s\n' nodes "ssh" "engine"
for n in 1 2 4 8; do
	printf '  %-8s %8.3fs %8.3fs\n' "$n" "${T[ssh-$n]}" "${T[engine-$n]}"
done
awk -v a="${T[ssh-8]}" -v b="${T[ssh-1]}" 'BEGIN { printf "T(8)/T(1), ssh:    %.2f   (goal < 1.5)\n", a / b }'
awk -v a="${T[engine-8]}" -v b="${T[engine-1]}" 'BEGIN { printf "T(8)/T(1), engine: %.2f\n", a / b }'
awk -v a="${T[serial]}" -v b="${T[ssh-8]}" 'BEGIN { printf "8 nodes, serial (--concurrency 1) / parallel: %.2f\n", a / b }'
awk -v a="${T[ssh-8]}" -v b="${T[ssh-2]}" 'BEGIN { printf "T(8)/T(2), ssh:    %.2f   (both sides pay SSH; T(1) has no remote node)\n", a / b }'
echo "cores busy while 8 nodes start: $CORES_BUSY of $(nproc)"
rm -rf "$out"
