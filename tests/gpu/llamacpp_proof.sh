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
RPC_NAME=ggml-rpc-server
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
        --book-url "$book_url" --pp 512 --tg 128 --runs 3 --skip-coherence \
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
# The programs of this build, found on PATH by the host processes spark-launch starts.
export PATH="$llama_bin:$PATH"
export SPARK_LAUNCH_STATE_DIR="$work/state"
job=llama-proof
url=http://127.0.0.1:8080
served=$(basename "$model_dir")
"$bin" llamacpp "$model_dir" --local --runtime host --gpus-per-node 2 --rpc-gpus "$rpc_gpu" \
    --no-stage --no-check --job "$job" --dry-run --json > "$out/sl-plan.json" 2> "$out/sl-plan.err"
check sl-plan $? "dry run: $(python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); print(p.get("mode"), [n["launch"]["process"]["command"][0] for n in p["job"]["nodes"]] if "job" in p else list(p)[:8])' "$out/sl-plan.json" 2>&1 | head -c 300)"
t0=$(now)
"$bin" llamacpp "$model_dir" --local --runtime host --gpus-per-node 2 --rpc-gpus "$rpc_gpu" \
    --no-stage --no-check --job "$job" --supervise \
    > "$out/sl-launch.log" 2>&1 &
sup_pid=$!
wait_http "$url/health" 240 "$sup_pid"
rc=$?
t1=$(now)
check sl-health "$rc" "spark-launch llamacpp: /health 200 after $(elapsed "$t0" "$t1") s (launch to ready, RPC server on GPU $rpc_gpu, llama-server on the other)"
# spark-launch's own word that it serves (its readiness: /v1/models and a streamed token).
deadline=$(( $(date +%s) + 120 ))
until grep -q -i -E 'serv(es|ing)|supervis' "$out/sl-launch.log" || [ "$(date +%s)" -ge "$deadline" ]; do sleep 0.5; done
t2=$(now)
say "  spark-launch said it serves after $(elapsed "$t0" "$t2") s"
grep -E '^\s*(✓|✗|ok|\[)|took|[0-9]+(\.[0-9]+)?s\b' "$out/sl-launch.log" | head -20 | sed 's/^/  | /' | tee -a "$summary"
nvidia-smi --query-gpu=index,memory.used --format=csv,noheader | sed 's/^/  GPU memory: /' | tee -a "$summary"
python3 "$here/llamacpp_stream.py" "$url/v1" "$served" "The man said that" 128 > "$out/sl-stream.json"
check sl-stream $? "$(cat "$out/sl-stream.json")"
state_log=$(ls -d "$SPARK_LAUNCH_STATE_DIR"/jobs/*/ 2>/dev/null | head -1)
say "  transport (engine's reading of the head's log): $(grep -h -E 'RDMA|transport' "$state_log/log" 2>/dev/null | head -3 | tr '\n' ' ')"

say "== bench: spark-launch (llama-benchy protocol) and llama-benchy direct, same server"
"$bin" bench --url "$url/v1" --protocol llama-benchy --pp 512 --tg 128 --runs 3 \
    --tokenizer "$model_dir/tokenizer.json" --book-url "$book_url" --skip-check \
    --save-result "$out/sl-benchy.json" --out "$out/sl-bench-result.json" > "$out/sl-bench.log" 2>&1
check sl-bench $? "spark-launch bench: $(benchy_figures "$out/sl-benchy.json" 2>&1 | head -3)"
benchy "$url/v1" "$served" "$out/direct2-benchy.json" > "$out/direct2-benchy.log" 2>&1
check benchy-same-server $? "llama-benchy: $(benchy_figures "$out/direct2-benchy.json" 2>&1 | head -3)"
python3 - "$out/sl-benchy.json" "$out/direct2-benchy.json" <<'EOF' | tee -a "$summary"
import json, sys
a, b = (json.load(open(f))["benchmarks"][0] for f in sys.argv[1:3])
for k in ("pp_throughput", "tg_throughput", "e2e_ttft"):
    x, y = a[k]["mean"], b[k]["mean"]
    print(f"INFO  ratio-{k}  spark-launch {x:.1f} / llama-benchy {y:.1f} = {x / y:.3f}")
EOF
"$bin" bench --url "$url/v1" --concurrency 1,4 --prompt-tokens 128 --output-tokens 128 \
    --requests 8 --skip-check --out "$out/sl-sweep.json" > "$out/sl-sweep.log" 2>&1
check sl-sweep $? "$(grep -i -E 'tok/s|ttft' "$out/sl-sweep.log" | head -4 | tr '\n' ' ' | head -c 400)"

say "== supervise: kill the RPC server, time the group coming back"
rpc_pids=$(pgrep -f "$RPC_NAME --host 127.0.0.1" | tr '\n' ' ')
t0=$(now)
kill -9 $rpc_pids 2>/dev/null
check rpc-killed $? "killed ggml-rpc-server (pids $rpc_pids)"
# Down first (the server aborts once its RPC peer is gone), then up again.
deadline=$(( $(date +%s) + 60 ))
while wait_http "$url/health" 1 "$sup_pid" && [ "$(date +%s)" -lt "$deadline" ]; do sleep 0.2; done
t_down=$(now)
wait_http "$url/health" 240 "$sup_pid"
rc=$?
t_up=$(now)
check restart-health "$rc" "down after $(elapsed "$t0" "$t_down") s, /health 200 again $(elapsed "$t0" "$t_up") s after the kill"
python3 "$here/llamacpp_stream.py" "$url/v1" "$served" "The world was" 64 > "$out/sl-stream-after.json"
rc=$?
t_tok=$(now)
check restart-stream "$rc" "tokens again $(elapsed "$t0" "$t_tok") s after the kill: $(cat "$out/sl-stream-after.json" | head -c 200)"
grep -i -E 'restart|stopped|start .* again|wedge|rank' "$out/sl-launch.log" | tail -8 | sed 's/^/  | /' | tee -a "$summary"
kill -INT "$sup_pid" 2>/dev/null; wait "$sup_pid" 2>/dev/null
"$bin" stop "$job" > "$out/sl-stop.log" 2>&1
check sl-stop $? "$(tail -1 "$out/sl-stop.log")"
cp -r "$SPARK_LAUNCH_STATE_DIR" "$out/state" 2>/dev/null
say "== proof: $([ $fail -eq 0 ] && echo OK || echo FAILED)"
exit $fail
