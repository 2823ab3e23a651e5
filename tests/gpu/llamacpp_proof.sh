#!/usr/bin/env bash
# Proof of `spark-launch llamacpp` on real GPUs: builds llama.cpp with CUDA and RPC from a
# source archive, writes a small random-weight GGUF with that tree's gguf-py, then:
#   1. direct: ggml-rpc-server on GPU 1 and llama-server --rpc on GPU 0, started by hand;
#      one streamed completion and llama-benchy against that server;
#   2. through spark-launch (skipped when SPARK_LAUNCH_BIN is "-"):
#      `spark-launch llamacpp --local --runtime host` with one RPC server (GPU 1) and the head
#      (GPU 0); start-up timings; a streamed completion; `spark-launch bench` next to
#      llama-benchy direct against the same server; then under `spark-launch supervise` the
#      RPC server is killed and the time until the group answers again is measured.
# Writes proof.txt (the summary), logs and JSON results to OUTDIR. Exits 0 only when every
# check holds.
#
# usage: tests/gpu/llamacpp_proof.sh LLAMA_TGZ WHEELS_DIR SPARK_LAUNCH_BIN OUTDIR [SM]
#   LLAMA_TGZ         a .tgz of a llama.cpp tree (top folder llama.cpp/) with at least
#                     CMakeLists.txt cmake common ggml include src tools vendor scripts gguf-py
#   WHEELS_DIR        wheels for llama-benchy and what the machine lacks of its needs
#   SPARK_LAUNCH_BIN  the spark-launch binary to test, or "-" for the direct part only
#   OUTDIR            where logs and the summary go
#   SM                GPU architecture to compile for (default: 90, Hopper)
# Needs: nvcc, cmake, a C++ compiler, python3 with numpy, tokenizers and aiohttp, 2 GPUs.
set -uo pipefail

tgz=$(readlink -f "${1:?usage: llamacpp_proof.sh LLAMA_TGZ WHEELS_DIR SPARK_LAUNCH_BIN OUTDIR [SM]}")
wheels=$(readlink -f "${2:?wheels folder}")
bin_arg=${3:?spark-launch binary or -}
out=$(readlink -f "${4:?output folder}")
sm="${5:-90}"
here=$(dirname "$(readlink -f "$0")")
work=${LLAMACPP_PROOF_WORK:-/tmp/llamacpp-proof}
mkdir -p "$out" "$work"
summary="$out/proof.txt"
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }
fail=0
check() { # check NAME CONDITION-EXIT-STATUS DETAIL
    if [ "$2" -eq 0 ]; then say "PASS  $1  $3"; else say "FAIL  $1  $3"; fail=1; fi
}
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
json_field() { # json_field FILE KEY -> value of a top-level key
    python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get(sys.argv[2]))' "$1" "$2"
}
wait_http() { # wait_http URL SECONDS [PID] -> 0 once URL answers 200 (1 once PID is gone)
    local deadline=$(( $(date +%s) + $2 ))
    while [ "$(date +%s)" -lt "$deadline" ]; do
        if [ -n "${3:-}" ] && ! kill -0 "$3" 2>/dev/null; then return 1; fi
        if python3 - "$1" <<'EOF' 2>/dev/null; then return 0; fi
import sys, urllib.request
sys.exit(0 if urllib.request.urlopen(sys.argv[1], timeout=2).status == 200 else 1)
EOF
        sleep 0.2
    done
    return 1
}
wait_port() { # wait_port HOST PORT SECONDS
    local deadline=$(( $(date +%s) + $3 ))
    while [ "$(date +%s)" -lt "$deadline" ]; do
        (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null && return 0
        sleep 0.2
    done
    return 1
}

export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export SPARK_LAUNCH_NO_PROGRESS=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1

say "== machine"
{
    date -u +%FT%TZ
    uname -m
    nvidia-smi -L
    nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1
    nvcc --version | tail -2
    cmake --version | head -1
    echo "cores: $(nproc)"
    python3 --version
} 2>&1 | tee -a "$summary"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')

say "== python packages (llama-benchy from wheels)"
site="$work/site"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" "$wheels"/*.whl > "$out/pip.log" 2>&1
check wheels-installed $? "$(ls "$wheels" | tr '\n' ' ')"
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"

say "== build llama.cpp (CUDA sm_$sm, RPC)"
src="$work/src"
build="$work/build"
t0=$(now)
if [ "${LLAMACPP_PROOF_REUSE:-0}" = 1 ] && [ -x "$build/bin/llama-server" ]; then
    say "(reusing the build in $build)"; true
else
rm -rf "$src" && mkdir -p "$src" && tar xzf "$tgz" -C "$src" --strip-components=1
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DGGML_CUDA=ON -DGGML_RPC=ON -DCMAKE_CUDA_ARCHITECTURES="$sm" -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
    > "$out/build.log" 2>&1 &&
    cmake --build "$build" -j "$(nproc)" --target llama-server ggml-rpc-server >> "$out/build.log" 2>&1
fi
rc=$?
t1=$(now)
rdma=$(grep -o 'RDMA transport [a-z]*' "$out/build.log" | head -1)
check build "$rc" "llama-server and ggml-rpc-server in $(elapsed "$t0" "$t1") s; ${rdma:-RDMA: not said}"
if [ "$rc" -ne 0 ]; then tail -40 "$out/build.log"; exit 1; fi
llama_bin="$build/bin"
"$llama_bin/llama-server" --version 2>&1 | tail -2 | tee -a "$summary"

say "== model"
model_dir="$work/model"
t0=$(now)
python3 "$here/make_tiny_gguf.py" "$src/gguf-py" "$model_dir" 2>&1 | tee -a "$summary"
check model "${PIPESTATUS[0]}" "written in $(elapsed "$t0" "$(now)") s"
model="$model_dir/tiny-llama-f16.gguf"

# llama-benchy reads its prompt text from a book it downloads once and caches by the URL's
# MD5; nothing can be downloaded here, so the cache is seeded with the model's own corpus.
book_url="http://corpus.invalid/tiny.txt"
mkdir -p "$HOME/.cache/llama-benchy"
cp "$model_dir/corpus.txt" "$HOME/.cache/llama-benchy/$(printf %s "$book_url" | md5sum | cut -d' ' -f1).txt"

benchy() { # benchy BASE_URL MODEL_NAME RESULT_JSON -> llama-benchy's run
    python3 -m llama_benchy --base-url "$1" --model "$2" --tokenizer "$model_dir/tokenizer.json" \
        --book-url "$book_url" --pp 512 --tg 128 --runs 3 --exact-tg --skip-coherence \
        --latency-mode api --format json --save-result "$3"
}
benchy_figures() { # benchy_figures RESULT_JSON -> "pp T tok/s, tg T tok/s, ttft T ms"
    python3 - "$1" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["benchmarks"]:
    print(f"pp{r['prompt_size']} {r['pp_throughput']['mean']:.0f} tok/s, "
          f"tg{r['response_size']} {r['tg_throughput']['mean']:.1f} tok/s, "
          f"ttft {r['e2e_ttft']['mean']:.1f} ms")
EOF
}

say "== 1. direct: ggml-rpc-server on GPU 1, llama-server --rpc on GPU 0"
[ "$gpus" -ge 2 ] || say "WARN  only $gpus GPU(s): the RPC server shares GPU 0"
rpc_gpu=$(( gpus >= 2 ? 1 : 0 ))
t0=$(now)
CUDA_VISIBLE_DEVICES=$rpc_gpu "$llama_bin/ggml-rpc-server" -H 127.0.0.1 -p 50052 > "$out/direct-rpc.log" 2>&1 &
rpc_pid=$!
wait_port 127.0.0.1 50052 60
check direct-rpc-up $? "RPC server listening after $(elapsed "$t0" "$(now)") s"
t0=$(now)
CUDA_VISIBLE_DEVICES=0 "$llama_bin/llama-server" -m "$model" --rpc 127.0.0.1:50052 -ngl 99 \
    --host 127.0.0.1 --port 8080 -c 4096 --alias tiny > "$out/direct-server.log" 2>&1 &
srv_pid=$!
wait_http http://127.0.0.1:8080/health 180 "$srv_pid"
check direct-health $? "llama-server /health 200 after $(elapsed "$t0" "$(now)") s"
nvidia-smi --query-gpu=index,memory.used --format=csv,noheader | sed 's/^/  GPU memory: /' | tee -a "$summary"
python3 "$here/llamacpp_stream.py" http://127.0.0.1:8080/v1 tiny "The man said that" 128 > "$out/direct-stream.json"
check direct-stream $? "$(cat "$out/direct-stream.json")"
benchy http://127.0.0.1:8080/v1 tiny "$out/direct-benchy.json" > "$out/direct-benchy.log" 2>&1
check direct-benchy $? "llama-benchy: $(benchy_figures "$out/direct-benchy.json" 2>&1)"
grep -E 'RDMA|transport' "$out/direct-rpc.log" "$out/direct-server.log" | head -5 | sed 's/^/  /' | tee -a "$summary"
kill "$srv_pid" "$rpc_pid" 2>/dev/null
wait "$srv_pid" "$rpc_pid" 2>/dev/null

if [ "$bin_arg" = "-" ]; then
    say "== proof (direct part only): $([ $fail -eq 0 ] && echo OK || echo FAILED)"
    exit $fail
fi
bin=$(readlink -f "$bin_arg")
say "== 2. through spark-launch: $("$bin" --version 2>&1)"
# (filled in with the engine)
say "== proof: $([ $fail -eq 0 ] && echo OK || echo FAILED)"
exit $fail
