#!/usr/bin/env bash
# Measurement: the floor of the registry route for an image update, next to the
# engine export the archive route (`image push`) waits for. Two simulated nodes; the head runs
# a stand-in registry (bench/registry_standin.py) on 127.0.0.1; the node reaches it as its
# own localhost:5000 through `ssh -R` (the engine allows plain HTTP to localhost registries).
# Images as bench/runtime_push.sh builds them: base (MIB - 64 MiB) + a 64 MiB top layer, in
# versions old, new and new3 (same base, another top layer each). One run of each step:
#   1. docker save new >/dev/null on the head (the archive route's floor);
#   2. docker push old to a fresh registry (what a short-lived registry costs: the engine
#      compresses and uploads every layer);
#   3. docker push new to the registry that holds old (only the new top layer);
#   4. the node, which got old by `docker load`, pulls new (does it skip the base?);
#   5. push new3 and pull it on the node that pulled new from this registry (the steady state
#      of a registry kept on the head between pushes).
#
#   sudo bench/registry_route.sh [MIB]     (default 1024; SPARK_LAUNCH_BIN)
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench: run as root (simulated nodes need namespaces)" >&2; exit 2; }
MIB=${1:-1024}
TOP_MIB=64
P=sl14g$$-
. bench/runtime_common.sh
BIN=$(bench_binary)
up 2
HEAD_SOCK=$(sock 1)
SL=$SIMNET_ROOT/$P/bin/spark-launch
REG=$SIMNET_ROOT/$P/bin/registry_standin.py
cp bench/registry_standin.py "$REG"
chmod 755 "$REG"
SSH="ssh -o StrictHostKeyChecking=accept-new -o BatchMode=yes"
A2=$(addr 2)
in_head $SSH "$A2" true
top_layer() { # top_layer FROM TAG SEED
	local ctx
	ctx=$(mktemp -d "/var/tmp/${P}ctx.XXXX")
	head -c "$((TOP_MIB * 1024 * 1024))" /dev/urandom >"$ctx/top$3"
	printf 'FROM %s\nCOPY top%s /top\n' "$1" "$3" >"$ctx/Dockerfile"
	DOCKER_BUILDKIT=0 docker -H "unix://$HEAD_SOCK" build -q -t "$2" "$ctx" >/dev/null 2>&1
	rm -rf "$ctx"
}
base_image sl14bench:base "$((MIB - TOP_MIB))"
top_layer sl14bench:base sl14bench:old 1
top_layer sl14bench:base sl14bench:new 2
top_layer sl14bench:base sl14bench:new3 3
in_head "$SL" image push sl14bench:old --hosts "$(hosts 2)" >/dev/null
# The registry's folder on the head's disk (not its /tmp, a tmpfs).
STORE=/home/$SL_USER/registry
in_head bash -c "setsid python3 $REG 5000 $STORE </dev/null >/dev/null 2>&1 & echo \$! > /home/$SL_USER/registry.pid"
sleep 1
for t in old new new3; do in_head docker tag "sl14bench:$t" "localhost:5000/sl14bench:$t"; done
step() { # step WHAT COMMAND: one timed run inside the head
	local w0 w1
	w0=$(date +%s%N)
	in_head bash -c "$2" >/dev/null 2>&1 || { echo "bench: $1 failed" >&2; exit 1; }
	w1=$(date +%s%N)
	awk -v w="$((w1 - w0))" -v what="$1" 'BEGIN { printf "  %-62s %6.2f s\n", what, w / 1e9 }'
}
pull() { echo "$SSH -o ExitOnForwardFailure=yes -R 5000:127.0.0.1:5000 $A2 docker pull -q localhost:5000/sl14bench:$1"; }
echo
echo "registry route, $MIB MiB image (top layer $TOP_MIB MiB), one run each, inside the head ($(nproc) cores shared by all nodes and other work, load $(cut -d' ' -f1 /proc/loadavg)):"
step "1. docker save new >/dev/null (archive route's floor)" "docker save sl14bench:new >/dev/null"
step "2. docker push old, fresh registry (every layer)" "docker push localhost:5000/sl14bench:old"
step "3. docker push new, registry holds old (top layer only)" "docker push localhost:5000/sl14bench:new"
step "4. node pulls new, holding old by docker load" "$(pull new)"
step "5a. docker push new3, registry holds new" "docker push localhost:5000/sl14bench:new3"
step "5b. node pulls new3, having pulled new from this registry" "$(pull new3)"
in_head bash -c "kill \$(cat /home/$SL_USER/registry.pid)" || true
