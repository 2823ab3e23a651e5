#!/usr/bin/env bash
# Benchmark: `spark-launch model pull` of a model folder on the head (MIB MiB of
# weights as 4 safetensors-like shards plus a config) to the other simulated nodes, against
#   - one plain `tar c | ssh NODE tar x` stream per node, all nodes at once (the fastest plain
#     copy), and
#   - `rsync -a` looped over the 3 targets of 4 nodes (what people script; the issue's goal
#     is stated against it: `3 targets vs rsync in a loop`);
# with 2 nodes (1 target) and 4 nodes (3 targets). Every node runs sshd in its own network
# namespace; all share this machine's cores. spark-launch and the baselines alternate (RUNS
# each); the targets' copies are deleted before every run (untimed). Medians, with how busy
# the cores were. Then the peak RSS of spark-launch copying a 1 GiB and a 4 GiB file.
#
#   sudo bench/stage.sh [RUNS] [MIB]     (defaults 3 runs, 1024 MiB; SPARK_LAUNCH_BIN)
#
# A benchmark, not a test: it asserts nothing about time. Ends with `ratio, <what>: <n>` lines
# (baseline time / spark-launch time).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench: run as root (simulated nodes need namespaces)" >&2; exit 2; }
RUNS=${1:-3}
MIB=${2:-1024}
P=sl14s$$-
SIMNET=tests/harness/simnet
SIMNET_ROOT=${SIMNET_ROOT:-/var/tmp/simnet}
SL_USER=sparkuser
need() { command -v "$1" >/dev/null 2>&1 || { echo "bench: $1 not found (apt-get install $2)" >&2; exit 1; }; }
need rsync rsync
need /usr/bin/time time
. bench/runtime_common.sh
. bench/timing.sh
BIN=$(bench_binary)
OUT=$(mktemp -d)
N=4
bash "$SIMNET" up "$P" "$N" --services sshd >&2
trap 'bash "$SIMNET" down "$P" >/dev/null 2>&1 || true; rm -rf "$OUT"' EXIT
mkdir -p "$SIMNET_ROOT/$P/bin"
cp "$BIN" "$SIMNET_ROOT/$P/bin/spark-launch"
SL=$SIMNET_ROOT/$P/bin/spark-launch
home() { echo "$SIMNET_ROOT/$P/n$1/home/$SL_USER"; }

# Every node trusts every node (what `spark-launch trust` leaves): one key each, all keys
# authorised everywhere, host keys known under the node names.
keys="" known=""
for i in $(seq 1 "$N"); do
	bash "$SIMNET" exec "$P" "$i" --user "$SL_USER" -- sh -c \
		"mkdir -p ~/.ssh && chmod 700 ~/.ssh && ssh-keygen -q -t ed25519 -N '' -f ~/.ssh/id_ed25519"
	keys+="$(cat "$(home "$i")/.ssh/id_ed25519.pub")"$'\n'
	known+="${P}n$i $(cut -d' ' -f1,2 "$SIMNET_ROOT/$P/n$i/state/ssh_host_ed25519_key.pub")"$'\n'
	known+="$(addr "$i") $(cut -d' ' -f1,2 "$SIMNET_ROOT/$P/n$i/state/ssh_host_ed25519_key.pub")"$'\n'
done
for i in $(seq 1 "$N"); do
	printf '%s' "$keys" >"$(home "$i")/.ssh/authorized_keys"
	printf '%s' "$known" >"$(home "$i")/.ssh/known_hosts"
	chown 4242:4242 "$(home "$i")/.ssh/authorized_keys" "$(home "$i")/.ssh/known_hosts"
done

# The model on the head: 4 shards of random bytes and a config.
MODEL=/home/$SL_USER/models/bench
M=$(home 1)/models/bench
mkdir -p "$M"
for s in 1 2 3 4; do head -c "$((MIB * 1024 * 1024 / 4))" /dev/urandom >"$M/model-0000$s-of-00004.safetensors"; done
echo '{"architectures": ["Bench"]}' >"$M/config.json"
chown -R 4242:4242 "$(home 1)/models"
BYTES=$(du -sb "$M" | cut -f1)

SSH="ssh -o BatchMode=yes"
clean() { # clean I...: delete the copies on those nodes (untimed)
	local i
	for i in "$@"; do rm -rf "$(home "$i")/models" "$(home "$i")/.cache/spark-launch"; done
}
tar_each() { # tar_each I...: one tar | ssh stream per node, all at once
	local i c=""
	for i in "$@"; do c+="tar -C /home/$SL_USER -cf - models | $SSH $(addr "$i") tar -C /home/$SL_USER -xf - & "; done
	echo "$c wait"
}
rsync_loop() {
	local i c=""
	for i in "$@"; do c+="rsync -a -e ssh /home/$SL_USER/models $(addr "$i"):/home/$SL_USER/ && "; done
	echo "$c true"
}
# Warm up: page cache and host keys, outside the timing.
cat "$M"/* >/dev/null
in_head bash -c "$(tar_each 2)" >/dev/null
clean 2

H2=$(hosts 2)
H4=$(hosts 4)
for r in $(seq 1 "$RUNS"); do
	echo "run $r of $RUNS" >&2
	clean 2; measure n2.tar true "$(tar_each 2)"
	clean 2; measure n2.sl true "$SL model pull $MODEL --hosts $H2 --json"
	clean 2 3 4; measure n4.tar true "$(tar_each 2 3 4)"
	clean 2 3 4; measure n4.sl true "$SL model pull $MODEL --hosts $H4 --json"
	clean 2 3 4; measure n4.rsync true "$(rsync_loop 2 3 4)"
done
cp "$OUT/n4.sl" "$OUT/n4r.sl"

# Peak RSS of spark-launch for a 1 GiB and a 4 GiB file (the orchestrator's memory; the bytes
# flow through the streams' processes, whose memory is fixed by their buffers).
rss_for() { # rss_for MIB
	local d=$(home 1)/models/rss$1
	mkdir -p "$d"
	head -c "$(($1 * 1024 * 1024))" /dev/urandom >"$d/weights.safetensors"
	chown -R 4242:4242 "$d"
	clean 2
	peak_rss_mib "$SL" model pull "/home/$SL_USER/models/rss$1" --hosts "$H2" --json
	rm -rf "$d"
}
clean 2
RSS1=$(rss_for 1024)
RSS4=$(rss_for 4096)

echo
echo "model pull, $(awk -v b="$BYTES" 'BEGIN { printf "%.0f MiB", b / 1048576 }') of weights (4 shards + config), $RUNS runs each, alternating, from inside the head ($(nproc) cores shared by all nodes and other work):"
detail "2 nodes" n2.tar n2.sl
detail "4 nodes" n4.tar n4.sl
detail "3 targets vs rsync in a loop" n4.rsync n4r.sl
echo "  peak RSS of spark-launch copying one file to 1 node: 1 GiB $RSS1 MiB, 4 GiB $RSS4 MiB"
ratio "2 nodes" n2.tar n2.sl
ratio "4 nodes" n4.tar n4.sl
ratio "3 targets vs rsync in a loop" n4.rsync n4r.sl
