#!/usr/bin/env bash
# Proof of `spark-launch nccl-test` on real GPUs: builds nccl-tests on the GPU machine,
# then runs the same binary twice per case, once through a plain mpirun and once through
# `spark-launch nccl-test --local --runtime host`, with 2 GPUs as two ranks:
#   1. normally (NVLink / P2P), all_reduce and all_gather;
#   2. forced onto TCP sockets (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1
#      NCCL_SOCKET_IFNAME=lo), all_reduce.
# Checks: on the NVLink runs, spark-launch's reported bus bandwidth matches the plain mpirun's
# (ratio 0.95-1.05, average and peak); the normal run is not a failure (exit 0); the socket run
# is flagged as a socket fallback (exit 1, problem kind socket-fallback). The socket run exists
# to prove that verdict: its bandwidth over loopback TCP varies by more than 5% between two runs
# of the same binary, so its ratio is shown (INFO) and not judged. Exits 0 only when every
# check holds.
#
# usage: tests/gpu/nccl_proof.sh NCCL_TESTS_SRC SPARK_LAUNCH_BIN OUTDIR [SM]
#        tests/gpu/nccl_proof.sh --rejudge SUMMARY
#   --rejudge re-judges a summary this script wrote (results/*.txt) with today's checks, from
#   the figures and verdicts it recorded; it needs no GPU and prints the new summary's checks.
#   NCCL_TESTS_SRC    an nccl-tests source tree (not part of this repository)
#   SPARK_LAUNCH_BIN  the spark-launch binary to test
#   OUTDIR            where logs and the summary go (proof.txt, *.log, *.json)
#   SM                GPU architecture to compile for (default: 90, Hopper)
# Needs: nvcc (CUDA), Open MPI (mpirun + headers), NCCL (headers + library; a system install
# or the nvidia-nccl Python wheel), python3, 2 GPUs. NVLink multicast stays off
# (NCCL_NVLS_ENABLE=0) on shared machines.
set -uo pipefail

# A check line: "PASS  NAME  DETAIL", "FAIL  NAME  DETAIL", or "INFO  NAME  DETAIL" (shown,
# not judged). A bandwidth ratio is judged only on the NVLink runs.
judged_ratio() { # judged_ratio NAME -> exit 0 when NAME's ratio is a check
    case "$1" in *spark_launch_socket.json*) return 1 ;; *) return 0 ;; esac
}

if [ "${1:-}" = "--rejudge" ]; then
    in=${2:?usage: nccl_proof.sh --rejudge SUMMARY}
    ok=1
    while IFS= read -r line; do
        case "$line" in PASS\ \ *|FAIL\ \ *|INFO\ \ *) ;; *) continue ;; esac
        rest=${line#????  }
        name=${rest%%  *}
        detail=${rest#"$name"  }
        verdict=${line%%  *}
        if [[ "$detail" =~ ratio\ ([0-9.]+) ]]; then
            if judged_ratio "$name"; then
                r=${BASH_REMATCH[1]}
                verdict=$(awk -v r="$r" 'BEGIN { print (r >= 0.95 && r <= 1.05) ? "PASS" : "FAIL" }')
            else
                verdict=INFO
            fi
        fi
        [ "$verdict" = FAIL ] && ok=0
        echo "$verdict  $name  $detail"
    done < "$in"
    echo "== proof: $([ $ok -eq 1 ] && echo OK || echo FAILED)"
    [ $ok -eq 1 ]
    exit
fi

src=$(readlink -f "${1:?usage: nccl_proof.sh NCCL_TESTS_SRC SPARK_LAUNCH_BIN OUTDIR [SM]}")
bin=$(readlink -f "${2:?spark-launch binary}")
out=$(readlink -f "${3:?output folder}")
sm="${4:-90}"
mkdir -p "$out"
summary="$out/proof.txt"
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }
fail=0
check() { # check NAME CONDITION-EXIT-STATUS DETAIL
    if [ "$2" -eq 0 ]; then say "PASS  $1  $3"; else say "FAIL  $1  $3"; fail=1; fi
}

export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export SPARK_LAUNCH_NO_PROGRESS=1

say "== machine"
{
    date -u +%FT%TZ
    uname -a
    nvidia-smi -L
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    nvidia-smi topo -m 2>/dev/null | head -5
    (nvcc --version | tail -2) 2>&1
    ldd --version 2>&1 | head -1
} 2>&1 | tee -a "$summary"

# ---- find Open MPI and NCCL ------------------------------------------------------------------
mpirun_bin=$(command -v mpirun || find / -xdev -name mpirun -type f -perm -u+x 2>/dev/null | head -1)
[ -n "$mpirun_bin" ] || { say "FAIL  no mpirun on this machine"; exit 1; }
mpi_home=$(dirname "$(dirname "$(readlink -f "$mpirun_bin")")")
if [ ! -f "$mpi_home/include/mpi.h" ]; then
    h=$(find / -xdev -name mpi.h -path '*openmpi*' 2>/dev/null | head -1)
    [ -n "$h" ] || h=$(find / -xdev -name mpi.h 2>/dev/null | head -1)
    [ -n "$h" ] && mpi_inc=$(dirname "$h")
fi
mpi_lib=$(dirname "$(find "$mpi_home" /usr/lib -xdev -name 'libmpi.so*' 2>/dev/null | head -1)")
say "mpirun: $mpirun_bin ($("$mpirun_bin" --version 2>&1 | head -1)); MPI_HOME=$mpi_home"
export PATH="$(dirname "$mpirun_bin"):$PATH"

nccl_h=""
for c in /usr/include/nccl.h /usr/local/cuda/include/nccl.h /usr/local/include/nccl.h; do
    [ -f "$c" ] && nccl_h=$c && break
done
if [ -z "$nccl_h" ]; then
    py_nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null ||
        python3 -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null)
    [ -n "$py_nccl" ] && [ -f "$py_nccl/include/nccl.h" ] && nccl_h="$py_nccl/include/nccl.h"
fi
[ -n "$nccl_h" ] || nccl_h=$(find / -xdev -name nccl.h 2>/dev/null | head -1)
nccl_lib=$(find "$(dirname "$(dirname "$nccl_h")")" /usr/lib/x86_64-linux-gnu /usr/local/cuda/lib64 -xdev \
    -name 'libnccl.so*' 2>/dev/null | head -1)
[ -n "$nccl_h" ] && [ -n "$nccl_lib" ] || { say "FAIL  no NCCL headers/library (nccl.h: '$nccl_h', lib: '$nccl_lib')"; exit 1; }
# A NCCL_HOME with include/ and lib/libnccl.so, whatever the install looks like.
nccl_home=/tmp/sl-nccl-home
rm -rf "$nccl_home"
mkdir -p "$nccl_home/include" "$nccl_home/lib"
ln -s "$nccl_h" "$nccl_home/include/nccl.h"
[ -f "$(dirname "$nccl_h")/nccl_net.h" ] && ln -s "$(dirname "$nccl_h")/nccl_net.h" "$nccl_home/include/"
ln -s "$(readlink -f "$nccl_lib")" "$nccl_home/lib/libnccl.so"
ln -s "$(readlink -f "$nccl_lib")" "$nccl_home/lib/libnccl.so.2"
export LD_LIBRARY_PATH="$nccl_home/lib:${mpi_lib:-$mpi_home/lib}:${LD_LIBRARY_PATH:-}"
say "NCCL: $nccl_h, $(readlink -f "$nccl_lib")"

# mpirun needs an rsh agent to exist even when every rank is local.
if ! command -v ssh >/dev/null; then
    mkdir -p /tmp/sl-fake-ssh
    printf '#!/bin/sh\necho "no ssh on this machine" >&2\nexit 255\n' > /tmp/sl-fake-ssh/ssh
    chmod 755 /tmp/sl-fake-ssh/ssh
    export PATH="/tmp/sl-fake-ssh:$PATH"
fi

# ---- build nccl-tests ------------------------------------------------------------------------
build=/tmp/sl-nccl-tests-build
rm -rf "$build"
say "== build nccl-tests ($(cat "$src/src/common.h" 2>/dev/null | grep -m1 NCCL_TESTS_VERSION || echo "$src")) for sm_$sm"
start=$(date +%s)
# mpi.h and libmpi outside MPI_HOME (some installs split them): the compilers read these.
[ -n "${mpi_inc:-}" ] && export CPATH="$mpi_inc${CPATH:+:$CPATH}"
[ -n "${mpi_lib:-}" ] && export LIBRARY_PATH="$mpi_lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
timeout 330 make -C "$src/src" -j"$(nproc)" MPI=1 MPI_HOME="$mpi_home" CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}" \
    NCCL_HOME="$nccl_home" NVCC_GENCODE="-gencode=arch=compute_$sm,code=sm_$sm" \
    BUILDDIR="$build" \
    "$build/all_reduce_perf" "$build/all_gather_perf" > "$out/build.txt" 2>&1
rc=$?
say "build exit $rc in $(($(date +%s) - start)) s"
if [ $rc -ne 0 ] || [ ! -x "$build/all_reduce_perf" ]; then
    tail -40 "$out/build.txt" | tee -a "$summary"
    exit 1
fi
rm -f "$out/build.txt"

# ---- the runs --------------------------------------------------------------------------------
sizes=(-b 8 -e 1G -f 2 -n 20)
socket_env=(NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME=lo)
plain() { # plain LOG OP [VAR=VALUE...]
    local log=$1 op=$2
    shift 2
    local xs=()
    for kv in NCCL_DEBUG=INFO NCCL_NVLS_ENABLE=0 "$@"; do xs+=(-x "$kv"); done
    say "\$ mpirun --allow-run-as-root -np 2 --bind-to none ${xs[*]} -x LD_LIBRARY_PATH $build/${op}_perf ${run_sizes[*]} -g 1"
    timeout 120 "$mpirun_bin" --allow-run-as-root -np 2 --bind-to none "${xs[@]}" -x LD_LIBRARY_PATH -x PATH \
        "$build/${op}_perf" "${run_sizes[@]}" -g 1 > "$log" 2>&1
    say "exit $?"
}
sl() { # sl LOG JSON OPS [VAR=VALUE...]
    local log=$1 json=$2 ops=$3
    shift 3
    local envs=(--env NCCL_NVLS_ENABLE=0)
    for kv in "$@"; do envs+=(--env "$kv"); done
    say "\$ spark-launch --json nccl-test --local --runtime host --gpus-per-node 2 --op $ops ${run_sizes[*]} --tests-dir $build --mpirun $mpirun_bin ${envs[*]} --save-log $(basename "$log")"
    timeout 180 "$bin" --json nccl-test --local --runtime host --gpus-per-node 2 --op "$ops" "${run_sizes[@]}" \
        --tests-dir "$build" --mpirun "$mpirun_bin" "${envs[@]}" --save-log "$log" > "$json" 2> "$json.stderr"
    local rc=$?
    say "exit $rc"
    sed 's/^/  stderr: /' "$json.stderr" | head -20 | tee -a "$summary"
    rm -f "$json.stderr"
    return $rc
}

run_sizes=("${sizes[@]}")
say "== normal: plain mpirun"
plain "$out/gpu_h200x2_all_reduce_plain.log" all_reduce
plain "$out/gpu_h200x2_all_gather_plain.log" all_gather
say "== normal: spark-launch"
sl "$out/gpu_h200x2_spark_launch.log" "$out/spark_launch_normal.json" all_reduce,all_gather
sl_normal_rc=$?

run_sizes=(-b 8 -e 256M -f 2 -n 20)
say "== sockets: plain mpirun"
plain "$out/gpu_h200x2_all_reduce_socket_plain.log" all_reduce "${socket_env[@]}"
say "== sockets: spark-launch"
sl "$out/gpu_h200x2_spark_launch_socket.log" "$out/spark_launch_socket.json" all_reduce "${socket_env[@]}"
sl_socket_rc=$?

# ---- checks ----------------------------------------------------------------------------------
say "== checks"
check "spark-launch normal run exits 0" $([ "$sl_normal_rc" -eq 0 ]; echo $?) "(exit $sl_normal_rc)"
check "spark-launch socket run exits 1" $([ "$sl_socket_rc" -eq 1 ]; echo $?) "(exit $sl_socket_rc)"
python3 - "$out" >> "$summary" <<'PY'
import json, re, sys
out = sys.argv[1]

def plain_figures(path):
    """Average (footer) and peak bus bandwidth of a plain nccl-tests log, read independently
    of spark-launch's parser."""
    avg, peak = None, 0.0
    for line in open(path, errors="replace"):
        m = re.match(r"#\s*Avg bus bandwidth\s*:\s*([0-9.eE+-]+)", line)
        if m:
            avg = float(m.group(1))
        t = line.split()
        if len(t) == 13 and t[0].isdigit() and t[1].isdigit():
            peak = max(peak, float(t[7]), float(t[11]))
    return avg, peak

def sl_figures(path, test):
    a = json.load(open(path))
    for t in a["tests"]:
        if t["test"] == test:
            v = t["verdict"]
            return v["avg_busbw_gbs"], v["peak_busbw_gbs"], a, t
    raise SystemExit(f"no {test} in {path}")

ok = True
def check(name, cond, detail):
    global ok
    print(("PASS  " if cond else "FAIL  ") + name + "  " + detail)
    ok = ok and cond

def info(name, detail):
    print("INFO  " + name + "  " + detail)

for test, plain_log, sl_json in [
    ("all_reduce_perf", "gpu_h200x2_all_reduce_plain.log", "spark_launch_normal.json"),
    ("all_gather_perf", "gpu_h200x2_all_gather_plain.log", "spark_launch_normal.json"),
    ("all_reduce_perf", "gpu_h200x2_all_reduce_socket_plain.log", "spark_launch_socket.json"),
]:
    p_avg, p_peak = plain_figures(f"{out}/{plain_log}")
    s_avg, s_peak, a, t = sl_figures(f"{out}/{sl_json}", test)
    for what, p, s in [("avg busbw", p_avg, s_avg), ("peak busbw", p_peak, s_peak)]:
        ratio = (s / p) if (p and s) else 0.0
        name = f"{test} {what} spark-launch/plain ({sl_json})"
        detail = f"spark-launch {s} GB/s, plain {p} GB/s, ratio {ratio:.3f}"
        # Loopback TCP's bandwidth differs from run to run: the socket run proves the verdict.
        if sl_json == "spark_launch_socket.json":
            info(name, detail + " (loopback TCP: shown, not judged)")
        else:
            check(name, 0.95 <= ratio <= 1.05, detail)

a = json.load(open(f"{out}/spark_launch_normal.json"))
trans = {p["transport"] for t in a["tests"] for p in t["run"]["transport"]["processes"]}
check("normal run: transport intra-node, no problem", trans == {"intra-node"} and a["status"] != "fail",
      f"status {a['status']}, transports {sorted(trans)}")
s = json.load(open(f"{out}/spark_launch_socket.json"))
kinds = [p["kind"] for t in s["tests"] for p in t["verdict"]["problems"]]
check("socket run: flagged as a socket fallback", s["status"] == "fail" and "socket-fallback" in kinds,
      f"status {s['status']}, problems {kinds}")
print("CHECKS " + ("OK" if ok else "FAILED"))
sys.exit(0 if ok else 1)
PY
[ $? -eq 0 ] || fail=1
say "== proof: $([ $fail -eq 0 ] && echo OK || echo FAILED)"
exit $fail
