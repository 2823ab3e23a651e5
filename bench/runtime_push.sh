#!/usr/bin/env bash
# Benchmark (issues 4 and 14): `spark-launch image push` against the plain
# `docker save IMAGE | ssh NODE docker load` pipeline, from inside the head as the test user, on
# simulated nodes with their own dockerd. Baseline and spark-launch runs alternate (RUNS each);
# medians are reported with how busy the machine's cores were. Cases:
#   - update 1 node / update 3 nodes vs the loop: a MIB image whose top 64 MiB layer changed,
#     the previous version present on the targets (what a new nightly is);
#   - 1 node: the whole image to a node that has none of it;
#   - 3 nodes vs the loop / vs parallel pipelines: one export teed to three nodes vs the
#     pipeline run once per node in a loop (what community scripts do) or three at once.
# Alongside the update cases, `docker save IMAGE >/dev/null` alone on the head: the engine's
# whole-image export, which every route through its API must wait for (Docker 20.10 writes the
# whole export to its temporary folder before the first byte), so baseline / that time is the
# best ratio an update can reach (printed as `ceiling, update 1 node`).
# Then the peak RSS of spark-launch pushing the whole image to one node.
#
#   sudo bench/runtime_push.sh [RUNS] [MIB]   (defaults 3 runs, 1024 MiB; SPARK_LAUNCH_BIN)
#   SKIP_CASES=1 sudo bench/runtime_push.sh 1 4096   # only the peak RSS, for a 4 GiB image
#
# A benchmark, not a test: it asserts nothing about time. Ends with `ratio, <what>: <n>` lines
# (baseline time / spark-launch time).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench: run as root (simulated nodes need namespaces)" >&2; exit 2; }
RUNS=${1:-3}
MIB=${2:-1024}
TOP_MIB=64
P=sl14p$$-
. bench/runtime_common.sh
. bench/timing.sh
need setfacl acl
need jq jq
BIN=$(bench_binary)
OUT=$(mktemp -d)

up 4
trap 'bash "$SIMNET" down "$P" >/dev/null 2>&1 || true; rm -rf "$OUT"' EXIT
HEAD_SOCK=$(sock 1)
SL=$SIMNET_ROOT/$P/bin/spark-launch
SSH="ssh -o StrictHostKeyChecking=accept-new -o BatchMode=yes"
for i in 2 3 4; do in_head $SSH "$(addr "$i")" true; done
H2="$(hosts 2)"
H4="$(hosts 4)"

# top_layer FROM TAG SEED: FROM + one COPY of TOP_MIB random MiB (a new top layer).
top_layer() {
	local ctx
	ctx=$(mktemp -d "/var/tmp/${P}ctx.XXXX")
	head -c "$((TOP_MIB * 1024 * 1024))" /dev/urandom >"$ctx/top$3"
	printf 'FROM %s\nCOPY top%s /top\n' "$1" "$3" >"$ctx/Dockerfile"
	DOCKER_BUILDKIT=0 docker -H "unix://$HEAD_SOCK" build -q -t "$2" "$ctx" >/dev/null 2>&1
	rm -rf "$ctx"
}
# The whole image: base (MIB - TOP_MIB of payload) + a top layer; the update: the same base
# with another top layer.
base_image sl14bench:base "$((MIB - TOP_MIB))"
top_layer sl14bench:base sl14bench:old 1
top_layer sl14bench:base sl14bench:new 2
BYTES=$(docker -H "unix://$HEAD_SOCK" image inspect -f '{{.Size}}' sl14bench:new)
# Let the test user read the head engine's layer store (README: "Image updates"), so that
# `image push` reads the new layers there instead of waiting for the whole-image export.
# STORE=export leaves it unreadable: the push then goes through the export, as before.
if [ "${STORE:-read}" = read ]; then
	ROOT=$(docker -H "unix://$HEAD_SOCK" info -f '{{.DockerRootDir}}')
	DRIVER=$(docker -H "unix://$HEAD_SOCK" info -f '{{.Driver}}')
	setfacl -m "u:4242:x" "$ROOT" # 4242: the test user's uid in the simulated nodes
	setfacl -R -m "u:4242:rX" "$ROOT/image" "$ROOT/$DRIVER"
fi

rm_on() { # rm_on IMAGE I...: remove IMAGE from those nodes (not timed)
	local image=$1 cmd="" i
	shift
	for i in "$@"; do cmd+="docker -H unix://$(sock "$i") image rm -f $image >/dev/null 2>&1; "; done
	echo "$cmd true"
}
# The prepare runs inside the head; the node sockets are reachable as root only: run it here.
prep() { bash -c "$1" >/dev/null 2>&1 || true; }
pipe() { echo "docker save $1 | $SSH $(addr "$2") docker load -q >/dev/null"; }
pair() { # pair CASE PREPARE BASELINE OURS: one baseline run and one spark-launch run
	prep "$2"
	measure "$1.base" true "$3"
	prep "$2"
	measure "$1.sl" true "$4"
}

if [ -z "${SKIP_CASES:-}" ]; then
	# The previous version on every target (untimed).
	in_head "$SL" image push sl14bench:old --hosts "$H4" >/dev/null
	for r in $(seq 1 "$RUNS"); do
		echo "run $r of $RUNS" >&2
		pair upd1 "$(rm_on sl14bench:new 2)" "$(pipe sl14bench:new 2)" "$SL image push sl14bench:new --hosts $H2"
		measure save.floor true "docker save sl14bench:new >/dev/null"
		pair upd3 "$(rm_on sl14bench:new 2 3 4)" "$(pipe sl14bench:new 2); $(pipe sl14bench:new 3); $(pipe sl14bench:new 4)" \
			"$SL image push sl14bench:new --hosts $H4"
	done
	# Whole pushes: nothing of the image on the targets.
	prep "$(rm_on sl14bench:old 2 3 4); $(rm_on sl14bench:new 2 3 4)"
	for r in $(seq 1 "$RUNS"); do
		echo "run $r of $RUNS" >&2
		pair full1 "$(rm_on sl14bench:new 2)" "$(pipe sl14bench:new 2)" "$SL image push sl14bench:new --hosts $H2"
		pair loop3 "$(rm_on sl14bench:new 2 3 4)" "$(pipe sl14bench:new 2); $(pipe sl14bench:new 3); $(pipe sl14bench:new 4)" \
			"$SL image push sl14bench:new --hosts $H4"
		prep "$(rm_on sl14bench:new 2 3 4)"
		measure par3.base true "$(pipe sl14bench:new 2) & $(pipe sl14bench:new 3) & $(pipe sl14bench:new 4) & wait"
	done
	cp "$OUT/loop3.sl" "$OUT/par3.sl"
fi
prep "$(rm_on sl14bench:new 2)"
RSS=$(peak_rss_mib "$SL" image push sl14bench:new --hosts "$H2")
# Where the push read the image from (the same for every case of this run).
prep "$(rm_on sl14bench:new 2)"
ROUTE=$(in_head "$SL" image push sl14bench:new --hosts "$H2" --json | jq -r '.nodes[0][1].read_from')

echo
echo "image push, $(awk -v b="$BYTES" 'BEGIN { printf "%.0f MiB", b / 1048576 }') image (top layer $TOP_MIB MiB), $RUNS runs each, alternating, inside the head ($(nproc) cores shared by all nodes and other work):"
if [ -z "${SKIP_CASES:-}" ]; then
	detail "update 1 node" upd1.base upd1.sl
	awk -v a="$(median save.floor)" -v b="$(median save.floor 2)" -v k="$(wc -l <"$OUT/save.floor")" \
		'BEGIN { printf "  %-28s %7.2f s (cores busy %.2f): the engine export any route waits for, median of %d\n", "  docker save alone", a, b, k }'
	detail "update 3 nodes vs the loop" upd3.base upd3.sl
	detail "1 node" full1.base full1.sl
	detail "3 nodes vs the loop" loop3.base loop3.sl
	detail "3 nodes vs parallel pipes" par3.base par3.sl
fi
echo "  spark-launch read the image from: $ROUTE"
echo "  peak RSS of spark-launch pushing the whole $(awk -v b="$BYTES" 'BEGIN { printf "%.0f MiB", b / 1048576 }') image to 1 node: $RSS MiB"
if [ -z "${SKIP_CASES:-}" ]; then
	ratio "update 1 node" upd1.base upd1.sl
	ratio "update 1 node" upd1.base save.floor | sed 's/^ratio, /ceiling, /'
	ratio "update 3 nodes vs the loop" upd3.base upd3.sl
	ratio "1 node" full1.base full1.sl
	ratio "3 nodes vs the loop" loop3.base loop3.sl
	ratio "3 nodes vs parallel pipelines" par3.base par3.sl
fi
