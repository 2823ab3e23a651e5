# Shared by bench/runtime_start.sh and bench/runtime_push.sh: simulated nodes with
# their own dockerd and sshd, the test user's key on the head authorised everywhere, the
# spark-launch binary placed where the nodes can run it, a busybox base image built here.
# Sourced, not run. Everything carries the prefix $P and is removed on exit.

SIMNET=tests/harness/simnet
SIMNET_ROOT=${SIMNET_ROOT:-/var/tmp/simnet}
SL_USER=sparkuser

need() { command -v "$1" >/dev/null 2>&1 || { echo "bench: $1 not found (apt-get install $2)" >&2; exit 1; }; }

bench_binary() {
	if [ -n "${SPARK_LAUNCH_BIN:-}" ]; then
		echo "$SPARK_LAUNCH_BIN"
		return
	fi
	cargo build --release -q >&2
	echo "$PWD/target/release/spark-launch"
}

# up N: nodes 1..N with sshd and dockerd; the head (n1) trusts nobody, everyone trusts the head.
up() {
	local n=$1 i
	bash "$SIMNET" up "$P" "$n" --services sshd,dockerd >&2
	trap 'bash "$SIMNET" down "$P" >/dev/null 2>&1 || true' EXIT
	mkdir -p "$SIMNET_ROOT/$P/bin"
	cp "$BIN" "$SIMNET_ROOT/$P/bin/spark-launch"
	bash "$SIMNET" exec "$P" 1 --user "$SL_USER" -- sh -c \
		"mkdir -p ~/.ssh && chmod 700 ~/.ssh && ssh-keygen -q -t ed25519 -N '' -f ~/.ssh/id_ed25519"
	local pub=$SIMNET_ROOT/$P/n1/home/$SL_USER/.ssh/id_ed25519.pub
	for i in $(seq 2 "$n"); do
		local ssh=$SIMNET_ROOT/$P/n$i/home/$SL_USER/.ssh
		mkdir -p "$ssh"
		cp "$pub" "$ssh/authorized_keys"
		chown -R 4242:4242 "$ssh"
		chmod 700 "$ssh"
	done
}

sock() { echo "$SIMNET_ROOT/$P/n$1/docker.sock"; }
addr() { bash "$SIMNET" addr "$P" "$1"; }

# hosts N: --hosts value for nodes 1..N (head first).
hosts() {
	local n=$1 i out=""
	for i in $(seq 1 "$n"); do
		out+="${out:+,}${P}n$i=$(addr "$i")"
	done
	echo "$out"
}

# in_head CMD...: run as the test user inside the head node.
in_head() { bash "$SIMNET" exec "$P" 1 --user "$SL_USER" -e "SPARK_LAUNCH_NO_PROGRESS=1" -- "$@"; }

# base_image REF [PAYLOAD_MIB]: busybox (+ PAYLOAD_MIB of random bytes in /payload) imported on
# the head's engine only.
base_image() {
	local ref=$1 mib=${2:-0} root applet
	root=$(mktemp -d "/var/tmp/${P}rootfs.XXXX")
	mkdir -p "$root/bin" "$root/tmp" "$root/etc" "$root/proc" "$root/sys" "$root/dev"
	cp /bin/busybox "$root/bin/busybox"
	for applet in $(/bin/busybox --list); do
		[ "$applet" = busybox ] || ln -s busybox "$root/bin/$applet"
	done
	echo 'root:x:0:0:root:/root:/bin/sh' >"$root/etc/passwd"
	if [ "$mib" -gt 0 ]; then
		head -c "$((mib * 1024 * 1024))" /dev/urandom >"$root/payload"
	fi
	tar -C "$root" -cf - . | docker -H "unix://$(sock 1)" import -c 'CMD ["/bin/sh"]' - "$ref" >/dev/null
	rm -rf "$root"
}
