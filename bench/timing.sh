# Shared by bench/runtime_push.sh and bench/stage.sh: interleaved timing on a shared
# machine. Each case is measured as wall time of one command run inside the head as the test
# user (after an untimed prepare), and the cores' busy time over the same interval (all
# processes, /proc/stat: other engineers' builds included), so every figure can be read next
# to how busy the machine was. Baseline and spark-launch runs alternate within one loop, so a
# burst of load elsewhere hits both; the reports are medians. Sourced, not run; needs $OUT
# (a folder), and in_head from runtime_common.sh.

busy_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 }' /proc/stat; }

# measure NAME PREPARE COMMAND: one timed run; appends "seconds cores_busy" to $OUT/NAME.
measure() {
	local name=$1 prepare=$2 cmd=$3 b0 b1 w0 w1
	in_head bash -c "$prepare" >/dev/null 2>&1 || true
	sync
	b0=$(busy_ticks)
	w0=$(date +%s%N)
	if ! in_head bash -c "$cmd" >"$OUT/last.out" 2>&1; then
		echo "bench: $name failed:" >&2
		tail -n 20 "$OUT/last.out" >&2
		exit 1
	fi
	w1=$(date +%s%N)
	b1=$(busy_ticks)
	awk -v w="$((w1 - w0))" -v b="$((b1 - b0))" -v hz="$(getconf CLK_TCK)" \
		'BEGIN { printf "%.3f %.2f\n", w / 1e9, (b / hz) / (w / 1e9) }' >>"$OUT/$name"
	echo "  $name: $(tail -n1 "$OUT/$name" | awk '{ printf "%.2f s, cores busy %.2f", $1, $2 }')" >&2
}

# median NAME [COLUMN]: the median of a column (1: seconds, 2: cores busy) of NAME's runs.
median() {
	awk -v c="${2:-1}" '{ print $c }' "$OUT/$1" | sort -g |
		awk '{ a[NR] = $1 } END { if (NR % 2) print a[(NR + 1) / 2]; else printf "%.3f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}

# detail WHAT BASELINE OURS: the medians behind a ratio, with how busy the cores were.
detail() {
	awk -v w="$1" -v a="$(median "$2")" -v b="$(median "$3")" -v ba="$(median "$2" 2)" -v bb="$(median "$3" 2)" -v n="$(nproc)" -v k="$(wc -l <"$OUT/$3")" \
		'BEGIN { printf "  %-28s baseline %7.2f s (cores busy %.2f of %d), spark-launch %7.2f s (cores busy %.2f), median of %d\n", w, a, ba, n, b, bb, k }'
}

# ratio WHAT BASELINE OURS: `ratio, WHAT: baseline time / spark-launch time` (medians).
ratio() {
	awk -v w="$1" -v a="$(median "$2")" -v b="$(median "$3")" 'BEGIN { printf "ratio, %s: %.2f\n", w, a / b }'
}

# peak_rss_mib COMMAND...: runs COMMAND inside the head and prints its peak RSS in MiB.
peak_rss_mib() {
	in_head /usr/bin/time -f "%M" -o /tmp/rss.txt "$@" >/dev/null 2>&1 || { echo "bench: $* failed" >&2; exit 1; }
	in_head cat /tmp/rss.txt | tail -n1 | awk '{ printf "%.1f", $1 / 1024 }'
}
