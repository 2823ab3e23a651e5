#!/usr/bin/env bash
# Benchmark: the snapshot reader parses in linear time. A snapshot whose
# `ip-addr.json` lists 20,000 and then 200,000 interfaces (each with an IPv4 address, as `ip -j
# addr` prints them) is read with `spark-launch probe --root DIR --json`; the baseline is a
# plain parse of the same file (`jq length`). Before the fix 20k took 2.4 s and 200k 380 s
# (quadratic). Linear means T(200k) / T(20k) close to 10, as for the baseline.
#
#   bench/snapshot_read.sh                 # SIZES="20000 200000" REPS=3
#   BIN=path/to/spark-launch               # default: target/release/spark-launch (built if missing)
#
# Prints the median time of each tool per size, then `ratio, ...` lines (baseline / ours).
set -euo pipefail
cd "$(dirname "$0")/.."
SIZES=${SIZES:-"20000 200000"}
REPS=${REPS:-3}
BIN=${BIN:-$PWD/target/release/spark-launch}
command -v jq >/dev/null || { echo "bench/snapshot_read.sh: jq not found (apt-get install jq)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "bench/snapshot_read.sh: python3 not found" >&2; exit 1; }
if [ ! -x "$BIN" ]; then
	echo "building $BIN (cargo build --release)" >&2
	cargo build --release --quiet
fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

make_snapshot() { # DIR N
	mkdir -p "$1"
	echo bench-node >"$1/hostname"
	python3 - "$1/ip-addr.json" "$2" <<'PY'
import json, sys
path, n = sys.argv[1], int(sys.argv[2])
with open(path, "w") as f:
    f.write("[")
    for i in range(n):
        if i:
            f.write(",")
        f.write(json.dumps({
            "ifindex": i + 2, "ifname": f"veth{i}", "flags": ["BROADCAST", "MULTICAST", "UP"],
            "mtu": 9000, "operstate": "UP", "address": "02:00:%02x:%02x:%02x:01" % (i >> 16 & 255, i >> 8 & 255, i & 255),
            "addr_info": [{"family": "inet", "local": f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}", "prefixlen": 8}],
        }, separators=(",", ":")))
    f.write("]")
PY
}

ms() { # command... -> milliseconds
	local s e
	s=$(date +%s%N)
	"$@" >/dev/null
	e=$(date +%s%N)
	echo $(((e - s) / 1000000))
}

median() { sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : int((a[NR / 2] + a[NR / 2 + 1]) / 2) }'; }

declare -A OURS BASE
printf '%-10s %10s %14s %14s\n' interfaces file_MiB spark-launch_ms jq_ms
for n in $SIZES; do
	dir="$WORK/snap-$n"
	make_snapshot "$dir" "$n"
	ours=() base=()
	for _ in $(seq 1 "$REPS"); do
		ours+=("$(ms "$BIN" --no-progress probe --json --root "$dir")")
		base+=("$(ms jq length "$dir/ip-addr.json")")
	done
	OURS[$n]=$(printf '%s\n' "${ours[@]}" | median)
	BASE[$n]=$(printf '%s\n' "${base[@]}" | median)
	size=$(du -m "$dir/ip-addr.json" | cut -f1)
	printf '%-10s %10s %14s %14s\n' "$n" "$size" "${OURS[$n]}" "${BASE[$n]}"
done
echo
sizes=($SIZES)
for n in $SIZES; do
	awk -v a="${BASE[$n]}" -v s="${OURS[$n]}" -v n="$n" \
		'BEGIN { printf "ratio, %d interfaces (jq parse / spark-launch probe --root): %.2f\n", n, a / (s > 0 ? s : 1) }'
done
if [ "${#sizes[@]}" -ge 2 ]; then
	lo=${sizes[0]} hi=${sizes[-1]}
	awk -v a="${OURS[$lo]}" -v b="${OURS[$hi]}" -v c="${BASE[$lo]}" -v d="${BASE[$hi]}" -v lo="$lo" -v hi="$hi" \
		'BEGIN { printf "ratio, growth %d -> %d interfaces (jq T%d/T%d over spark-launch T%d/T%d; 1 = as linear as the baseline): %.2f\n", lo, hi, hi, lo, hi, lo, (d / (c > 0 ? c : 1)) / (b / (a > 0 ? a : 1)) }'
fi
