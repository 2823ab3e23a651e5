#!/usr/bin/env bash
# Benchmark: `spark-launch discover` against `avahi-browse -p -r -f -t _ssh._tcp` (what NVIDIA's
# discover-sparks runs) on 2, 4 and 8 simulated nodes (tests/harness/simnet: real avahi-daemons
# on a bridged link-local fabric), in two cases:
#
#   warm  the daemons have been up for a while (simnet waits out their announcements); both
#         tools run on node 1 as the test user, alternately, REPS times per size, spaced by GAP
#         seconds (an mDNS responder does not multicast a record again within a second of
#         doing so, RFC 6762 §6, so a browse right after another one would measure that
#         hold-off, not the tool).
#   cold  the nodes just booted: every run gets a fresh cluster whose daemons established their
#         service a moment ago (SIMNET_AVAHI_SETTLE=0) and runs right away; COLD_REPS runs per
#         tool and size, the tools alternating which goes first.
#
# Every run is timed inside the node and checked for missed nodes (a node counts as found when
# it appears with its fabric IPv4 address on enp1s0f1np1).
#
#   sudo bench/discover.sh                 # REPS=20 COLD_REPS=6 SIZES="2 4 8"
#   sudo REPS=5 COLD_REPS=2 SIZES=8 bench/discover.sh
#   BIN=path/to/spark-launch               # default: target/release/spark-launch (built if missing)
#
# Prints one line per size and case with both tools side by side (median/mean/p95 in ms and
# the nodes missed over all runs), then `ratio, ...` lines: avahi-browse's median time over
# spark-launch's (above 1: spark-launch is faster).
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-20}
COLD_REPS=${COLD_REPS:-6}
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

# run_tool TOOL N: one timed run inside node 1; prints "<milliseconds> <nodes missed>".
run_tool() {
	local tool=$1 n=$2 out ns found
	out=$(mktemp "/var/tmp/simnet/$PREFIX/run.XXXXXX")
	chmod 666 "$out"
	if [ "$tool" = sl ]; then
		set -- "$BIN" --no-progress discover --json
	else
		set -- avahi-browse -p -r -f -t _ssh._tcp
	fi
	ns=$(bash $SIMNET exec "$PREFIX" 1 --user "$USER_" -- sh -c \
		's=$(date +%s%N); "$@" >"$0" 2>/dev/null || true; e=$(date +%s%N); echo $((e - s))' "$out" "$@")
	if [ "$tool" = sl ]; then
		found=$(grep -c '"interface": "enp1s0f1np1"' "$out" || true)
	else
		found=$(grep '^=;enp1s0f1np1;IPv4;' "$out" | cut -d';' -f4 | sort -u | wc -l)
	fi
	echo "$((ns / 1000000)) $((found >= n ? 0 : n - found))"
}

stats() { # numbers on stdin (ms) -> "median mean p95"
	sort -n | awk '{ a[NR] = $1; s += $1 } END {
		if (NR == 0) { print "- - -"; exit }
		m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
		p = a[int(0.95 * NR + 0.999)]; if (p == "") p = a[NR]
		printf "%.0f %.0f %.0f\n", m, s / NR, p }'
}

up() { # up N [cold]
	if [ "${2:-}" = cold ]; then
		SIMNET_AVAHI_SETTLE=0 bash $SIMNET up "$PREFIX" "$1" --services dbus,avahi >/dev/null 2>&1
	else
		bash $SIMNET up "$PREFIX" "$1" --services dbus,avahi >/dev/null 2>&1
	fi
}

# record CASE N TOOL "ms missed": appends to the per-case arrays.
declare -A TIMES MISSED
record() {
	local key="$1 $2 $3" ms missed
	read -r ms missed <<<"$4"
	TIMES[$key]="${TIMES[$key]:-} $ms"
	MISSED[$key]=$((${MISSED[$key]:-0} + missed))
}

for n in $SIZES; do
	up "$n"
	for r in $(seq 1 "$REPS"); do
		order="sl ab"
		[ $((r % 2)) = 0 ] && order="ab sl"
		for tool in $order; do
			sleep "$GAP"
			record warm "$n" "$tool" "$(run_tool "$tool" "$n")"
		done
	done
	bash $SIMNET down "$PREFIX" >/dev/null
	for r in $(seq 1 "$COLD_REPS"); do
		order="sl ab"
		[ $((r % 2)) = 0 ] && order="ab sl"
		for tool in $order; do
			up "$n" cold
			record cold "$n" "$tool" "$(run_tool "$tool" "$n")"
			bash $SIMNET down "$PREFIX" >/dev/null
		done
	done
done

printf '%-5s %-5s %5s | %-31s | %-31s\n' nodes case runs "spark-launch median/mean/p95 ms" "avahi-browse median/mean/p95 ms"
ratios=()
for n in $SIZES; do
	for c in warm cold; do
		runs=$REPS
		[ $c = cold ] && runs=$COLD_REPS
		read -r slm slmean slp < <(printf '%s\n' ${TIMES["$c $n sl"]} | stats)
		read -r abm abmean abp < <(printf '%s\n' ${TIMES["$c $n ab"]} | stats)
		printf '%-5s %-5s %5s | %5s %5s %5s  missed %-6s | %5s %5s %5s  missed %-6s\n' "$n" "$c" "$runs" \
			"$slm" "$slmean" "$slp" "${MISSED["$c $n sl"]}" "$abm" "$abmean" "$abp" "${MISSED["$c $n ab"]}"
		ratios+=("$(awk -v a="$abm" -v s="$slm" -v n="$n" -v c="$c" -v sm="${MISSED["$c $n sl"]}" -v am="${MISSED["$c $n ab"]}" \
			'BEGIN { printf "ratio, %d nodes %s (avahi-browse / spark-launch median time): %.2f   (nodes missed: spark-launch %d, avahi-browse %d)", n, c, a / s, sm, am }')")
	done
done
echo
printf '%s\n' "${ratios[@]}"
