#!/usr/bin/env bash
# Benchmark: three inputs that were quadratic or exponential are now linear.
# Each is a hostile snapshot made from a bundled fixture (`tests/fixtures/fresh-two-sparks`, with
# its link probe, for ping and glob; `seed-001-two-sparks-both-twins`, addressed, for overlap):
#
#   ping     its `links/enp1s0f1np1/ping` and `neigh` grown to N distinct answers, read with
#            `spark-launch probe --root DIR --json` (before: 200k lines took 60.8 s);
#            baseline: the same dedup in awk.
#   overlap  N more interfaces (`veth<i>`, an address and a route each, some inside the fabric
#            subnet) read by `spark-launch doctor --snapshot ...` (its fabric.subnet-overlap
#            check; before: 100k interfaces 39.8 s); baseline: `spark-launch env` on the
#            same snapshots (what the issue compared it with).
#   glob     N 40-character interface names and a netplan file matching `name:` with 14 stars,
#            planned with `spark-launch fabric plan` (before: one such name never finished);
#            baseline: the same plan of the same snapshot without that file (so the ratio is
#            what the glob adds; Python's fnmatch on the names is printed too).
#
#   bench/linear_parsers.sh               # SIZES="10000 100000 200000" REPS=3
#   BIN=path/to/spark-launch              # default: target/release/spark-launch (built if missing)
#   ONLY="ping overlap"                   # a subset
#
# Prints the median time of ours and the baseline per size, then `ratio, ...` lines: the
# baseline's time over ours per size, and the baseline's growth from the smallest to the
# largest size over ours (1 = as linear as the baseline; above 1: ours grows more slowly).
set -euo pipefail
cd "$(dirname "$0")/.."
SIZES=${SIZES:-"10000 100000 200000"}
REPS=${REPS:-3}
ONLY=${ONLY:-"ping overlap glob"}
BIN=${BIN:-$PWD/target/release/spark-launch}
command -v python3 >/dev/null || { echo "bench/linear_parsers.sh: python3 not found" >&2; exit 1; }
if [ ! -x "$BIN" ]; then
	echo "building $BIN (cargo build --release)" >&2
	cargo build --release --quiet
fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export SPARK_LAUNCH_NO_PROGRESS=1

ms() { # command... -> milliseconds (the command's exit status is not judged: doctor exits 1)
	local s e
	s=$(date +%s%N)
	"$@" >/dev/null 2>&1 || true
	e=$(date +%s%N)
	echo $(((e - s) / 1000000))
}

median() { sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : int((a[NR / 2] + a[NR / 2 + 1]) / 2) }'; }

# The fixture of KIND and its two nodes (head first).
fixture() { case $1 in overlap) echo tests/fixtures/seed-001-two-sparks-both-twins ;; *) echo tests/fixtures/fresh-two-sparks ;; esac; }
nodes() { case $1 in overlap) echo spark spark2 ;; *) echo spark-8c04 spark-3f21 ;; esac; }

# grow KIND N DIR: a copy of the fixture's two nodes with the hostile part of KIND at size N.
grow() {
	rm -rf "$3"
	cp -r "$(fixture "$1")" "$3"
	python3 - "$1" "$2" "$3" "$(nodes "$1" | cut -d' ' -f1)" <<'PY'
import json, os, sys
kind, n, root, first = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
head = os.path.join(root, first)
if kind == "ping":
    d = os.path.join(head, "links", "enp1s0f1np1")
    line = next(l for l in open(os.path.join(d, "ping")) if " bytes from " in l)
    pre, rest = line.split("fe80::", 1)
    post = rest[rest.index("%"):]
    entry = open(os.path.join(d, "neigh")).readline()
    tail = entry[entry.index(" "):]
    with open(os.path.join(d, "ping"), "w") as p, open(os.path.join(d, "neigh"), "w") as m:
        for i in range(n):
            a = "fe80::%x:%x" % (i >> 16, i & 0xFFFF)
            p.write(pre + a + post)
            m.write(a + tail)
elif kind in ("overlap", "glob"):
    addrs = json.load(open(os.path.join(head, "ip-addr.json")))
    routes = json.load(open(os.path.join(head, "ip-route.json")))
    for i in range(n):
        if kind == "glob":
            name = "a" * 30 + "%010d" % i
            info = []
        else:
            name = "veth%d" % i
            if i % 7 == 0:
                local, plen = "192.168.177.%d" % ((i // 7) % 64 * 4), 30
            else:
                local, plen = "10.%d.%d.%d" % (i >> 16 & 255, i >> 8 & 255, i & 255), 24
            info = [{"family": "inet", "local": local, "prefixlen": plen}]
            if i % 2 == 0:
                routes.append({"dst": "%s/%d" % (local, plen), "dev": name, "prefsrc": local})
        addrs.append({"ifindex": 1000 + i, "ifname": name, "mtu": 1500, "operstate": "UP",
                      "address": "02:00:%02x:%02x:%02x:01" % (i >> 16 & 255, i >> 8 & 255, i & 255),
                      "addr_info": info})
    json.dump(addrs, open(os.path.join(head, "ip-addr.json"), "w"))
    json.dump(routes, open(os.path.join(head, "ip-route.json"), "w"))
    if kind == "glob":
        os.makedirs(os.path.join(head, "etc", "netplan"), exist_ok=True)
        with open(os.path.join(head, "etc", "netplan", "60-hostile.yaml"), "w") as f:
            f.write("network:\n  version: 2\n  ethernets:\n    hostile:\n      match:\n        name: \"%sb\"\n      mtu: 1500\n" % ("a*" * 14))
        with open(os.path.join(root, "names"), "w") as f:
            f.write("\n".join("a" * 30 + "%010d" % i for i in range(n)))
PY
	if [ "$1" = glob ]; then
		cp -r "$3/spark-8c04" "$3/plain-8c04"
		rm "$3/plain-8c04/etc/netplan/60-hostile.yaml"
	fi
}

snaps() { # KIND DIR
	local n
	for n in $(nodes "$1"); do echo --snapshot "$n=$2/$n"; done
}

ours() { # KIND DIR
	case $1 in
	ping) "$BIN" --no-progress probe --json --root "$2/spark-8c04" ;;
	overlap) "$BIN" --no-progress doctor $(snaps "$1" "$2") ;;
	glob) "$BIN" --no-progress fabric plan --json $(snaps "$1" "$2") ;;
	esac
}

base() { # KIND DIR
	case $1 in
	ping) awk '/ bytes from / { a = $4; sub(/%.*/, "", a); sub(/:$/, "", a); if (!seen[a]++) n++ } END { print n }' "$2/spark-8c04/links/enp1s0f1np1/ping" ;;
	overlap) "$BIN" --no-progress env $(snaps "$1" "$2") ;;
	glob) "$BIN" --no-progress fabric plan --json --snapshot "spark-8c04=$2/plain-8c04" --snapshot "spark-3f21=$2/spark-3f21" ;;
	esac
}

fnmatch() { # DIR: Python's fnmatch of the same glob on the same names, for reference
	python3 -c 'import fnmatch, sys; print(len(fnmatch.filter(open(sys.argv[1]).read().split(), sys.argv[2])))' "$1/names" "$(printf 'a*%.0s' $(seq 14))b"
}

what() {
	case $1 in
	ping) echo "lines of ping (awk's dedup over spark-launch probe --root)" ;;
	overlap) echo "interfaces (spark-launch env over spark-launch doctor)" ;;
	glob) echo "interfaces against a 14-star netplan glob (spark-launch fabric plan without the glob over with it)" ;;
	esac
}

# check KIND N DIR: ours really did the work (so a refusal is never timed as a fast run).
check() {
	local out
	out=$(ours "$1" "$3" 2>&1 || true)
	case $1 in
	ping) [ "$(printf '%s' "$out" | grep -c '"addr"')" -ge "$2" ] ;;
	overlap) [ "$(printf '%s' "$out" | grep -c 'overlaps')" -ge 1 ] ;;
	glob) printf '%s' "$out" | grep -q '"topology"' ;;
	esac || { echo "bench/linear_parsers.sh: $1 at $2 did not give the expected output:" >&2; printf '%s\n' "$out" | tail -5 >&2; exit 1; }
}

declare -A OURS BASE
printf '%-8s %10s %10s %10s\n' input size ours_ms base_ms
for kind in $ONLY; do
	for n in $SIZES; do
		dir="$WORK/$kind-$n"
		grow "$kind" "$n" "$dir"
		check "$kind" "$n" "$dir"
		o=() b=()
		for _ in $(seq 1 "$REPS"); do
			o+=("$(ms ours "$kind" "$dir")")
			b+=("$(ms base "$kind" "$dir")")
		done
		OURS[$kind-$n]=$(printf '%s\n' "${o[@]}" | median)
		BASE[$kind-$n]=$(printf '%s\n' "${b[@]}" | median)
		extra=
		[ "$kind" = glob ] && extra="(python fnmatch: $(ms fnmatch "$dir") ms)"
		printf '%-8s %10s %10s %10s %s\n' "$kind" "$n" "${OURS[$kind-$n]}" "${BASE[$kind-$n]}" "$extra"
		rm -rf "$dir"
	done
done
echo
sizes=($SIZES)
lo=${sizes[0]} hi=${sizes[-1]}
for kind in $ONLY; do
	for n in $SIZES; do
		awk -v a="${BASE[$kind-$n]}" -v s="${OURS[$kind-$n]}" -v n="$n" -v w="$(what "$kind")" \
			'BEGIN { printf "ratio, %s, %d %s: %.2f\n", "'"$kind"'", n, w, a / (s > 0 ? s : 1) }'
	done
	if [ "$lo" != "$hi" ]; then
		awk -v a="${OURS[$kind-$lo]}" -v b="${OURS[$kind-$hi]}" -v c="${BASE[$kind-$lo]}" -v d="${BASE[$kind-$hi]}" -v lo="$lo" -v hi="$hi" \
			'BEGIN { printf "ratio, %s, growth %d -> %d (baseline T%d/T%d over ours T%d/T%d; 1 = as linear as the baseline): %.2f\n", "'"$kind"'", lo, hi, hi, lo, hi, lo, (d / (c > 0 ? c : 1)) / (b / (a > 0 ? a : 1)) }'
	fi
done
