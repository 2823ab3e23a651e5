#!/usr/bin/env bash
# Benchmark: `spark-launch discover` against `avahi-browse -p -r -f -t _ssh._tcp` (what NVIDIA's
# discover-sparks runs) on 2, 4 and 8 simulated nodes (tests/harness/simnet: real avahi-daemons
# on a bridged link-local fabric). Both run on node 1 as the test user, alternately, REPS times
# per size; every run is timed inside the node and checked for missed nodes (a node counts as
# found when it appears with its fabric IPv4 address on enp1s0f1np1).
#
#   sudo bench/discover.sh                 # REPS=20 SIZES="2 4 8"
#   sudo REPS=5 SIZES=2 bench/discover.sh
#   BIN=path/to/spark-launch               # default: target/release/spark-launch (built if missing)
#
# Runs are spaced by GAP seconds (default 1.2): an mDNS responder does not multicast a record
# again within a second of doing so (RFC 6762 §6), so a browse right after another one would
# measure that hold-off, not the tool. Prints per size the median/mean/p95 time of each tool,
# the ratio avahi-browse / spark-launch (above 1: spark-launch is faster) and the misses.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-20}
SIZES=${SIZES:-"2 4 8"}
GAP=${GAP:-1.2}
SIMNET=tests/harness/simnet
USER_=${SIMNET_USER:-sparkuser}
BIN=${BIN:-$PWD/target/release/spark-launch}
[ "$(id -u)" = 0 ] || { echo "bench/discover.sh: run as root (it creates network namespaces)" >&2; exit 2; }
command -v avahi-browse >/dev/null || { echo "bench/discover.sh: avahi-browse not found (apt-get install avahi-utils)" >&2; exit 1; }
if [ ! -x "$BIN" ]; then
	echo "building $BIN (cargo build --release)" >&2
	cargo build --release --quiet
fi
PREFIX=bd$$-
trap 'bash $SIMNET down "$PREFIX" >/dev/null 2>&1 || true' EXIT

# time_in_node CMD...: prints "<nanoseconds> <path of its stdout>" for one run inside node 1.
time_in_node() {
	local out
	out=$(mktemp "/var/tmp/simnet/$PREFIX/run.XXXXXX")
	chmod 666 "$out"
	local ns
	ns=$(bash $SIMNET exec "$PREFIX" 1 --user "$USER_" -- sh -c \
		's=$(date +%s%N); "$@" >"$0" 2>/dev/null || true; e=$(date +%s%N); echo $((e - s))' "$out" "$@")
	echo "$ns $out"
}

stats() { # numbers on stdin (ms) -> "median mean p95"
	sort -n | awk '{ a[NR] = $1; s += $1 } END {
		if (NR == 0) { print "- - -"; exit }
		m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
		p = a[int(0.95 * NR + 0.999)]; if (p == "") p = a[NR]
		printf "%.0f %.0f %.0f\n", m, s / NR, p }'
}

printf '%-6s %-14s %8s %8s %8s %8s\n' nodes tool median_ms mean_ms p95_ms missed
summary=()
for n in $SIZES; do
	bash $SIMNET up "$PREFIX" "$n" --services dbus,avahi >/dev/null
	sl_times=() ab_times=() sl_missed=0 ab_missed=0
	for r in $(seq 1 "$REPS"); do
		for tool in sl ab; do
			# alternate which tool goes first
			if [ $((r % 2)) = 0 ]; then tool=$([ $tool = sl ] && echo ab || echo sl); fi
			sleep "$GAP"
			if [ $tool = sl ]; then
				read -r ns out < <(time_in_node "$BIN" --no-progress discover --json)
				found=$(grep -c '"interface": "enp1s0f1np1"' "$out" || true)
				sl_times+=($((ns / 1000000)))
				[ "$found" -ge "$n" ] || sl_missed=$((sl_missed + n - found))
			else
				read -r ns out < <(time_in_node avahi-browse -p -r -f -t _ssh._tcp)
				found=$(grep '^=;enp1s0f1np1;IPv4;' "$out" | cut -d';' -f4 | sort -u | wc -l)
				ab_times+=($((ns / 1000000)))
				[ "$found" -ge "$n" ] || ab_missed=$((ab_missed + n - found))
			fi
		done
	done
	read -r slm slmean slp < <(printf '%s\n' "${sl_times[@]}" | stats)
	read -r abm abmean abp < <(printf '%s\n' "${ab_times[@]}" | stats)
	printf '%-6s %-14s %8s %8s %8s %8s\n' "$n" spark-launch "$slm" "$slmean" "$slp" "$sl_missed"
	printf '%-6s %-14s %8s %8s %8s %8s\n' "$n" avahi-browse "$abm" "$abmean" "$abp" "$ab_missed"
	summary+=("$(awk -v a="$abm" -v s="$slm" -v n="$n" -v r="$REPS" -v sm="$sl_missed" -v am="$ab_missed" \
		'BEGIN { printf "%d nodes: avahi-browse / spark-launch = %.2fx (median), missed nodes over %d runs: spark-launch %d, avahi-browse %d", n, a / s, r, sm, am }')")
	bash $SIMNET down "$PREFIX" >/dev/null
done
echo
printf '%s\n' "${summary[@]}"
