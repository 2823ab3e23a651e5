#!/usr/bin/env bash
# The measured comparison: the real llama-benchy (bench/protocols-requirements.txt: pinned,
# sha256-checked, from PyPI, installed into .whl/llama-benchy) and `spark-launch bench
# --protocol llama-benchy` against the same paced stand-in server (tests/standin/vllm run
# directly on 127.0.0.1: prompts counted with tests/fixtures/bench/tokenizer.json, prefill
# paced at PREFILL tokens/s, decode at DECODE tokens/s per stream), same grid, one after the
# other in one run. Both cut their prompts from tests/fixtures/bench/book.txt (llama-benchy
# reads it from its own cache, seeded here under a throw-away HOME). llama-benchy's coherence
# test is skipped: the stand-in does not answer questions. spark-launch's JSON is also loaded
# with llama-benchy's own result model (pydantic), so its file is one llama-benchy's readers
# take. Ends with one line per figure and cell:
#   ratio, llama-benchy <metric> c=<N> depth=<D>: <ours / theirs>
# for pp t/s, tg t/s and TTFT (e2e_ttft). Goal: every ratio within 0.95-1.05.
#
#   bench/protocols.sh            (PREFILL=2000 DECODE=50 RUNS=3 PORT=18731 to change)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
PREFILL=${PREFILL:-2000}
DECODE=${DECODE:-50}
RUNS=${RUNS:-3}
PORT=${PORT:-18731}
grid=(--pp 512 --tg 32 --depth 0 1024 --concurrency 1 2 --runs "$RUNS")
venv=$repo/.whl/llama-benchy
if [ ! -f "$venv/.complete" ]; then
	python3 -m venv "$venv"
	"$venv/bin/pip" install -q --disable-pip-version-check --require-hashes --no-deps \
		-r "$repo/bench/protocols-requirements.txt"
	touch "$venv/.complete"
fi
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
(cd "$repo" && CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-1} cargo build -q)
work=$(mktemp -d)
standin=
cleanup() {
	if [ -n "$standin" ]; then kill "$standin" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/model" "$work/home/.cache/llama-benchy"
echo '{}' >"$work/model/config.json"
book_url=http://127.0.0.1/book.txt
key=$("$venv/bin/python" -c "import hashlib; print(hashlib.md5(b'$book_url').hexdigest())")
cp "$repo/tests/fixtures/bench/book.txt" "$work/home/.cache/llama-benchy/$key.txt"
tok=$repo/tests/fixtures/bench/tokenizer.json
HF_HUB_OFFLINE=1 VLLM_HOST_IP=127.0.0.1 NCCL_SOCKET_IFNAME=lo GLOO_SOCKET_IFNAME=lo NCCL_IB_HCA=none \
	PYTHONPATH=$site "$venv/bin/python" "$repo/tests/standin/vllm" serve "$work/model" \
	--served-model-name org/standin --port "$PORT" --fake-ttft-ms 0 \
	--fake-tokens-per-s "$DECODE" --fake-prefill-tokens-per-s "$PREFILL" \
	--fake-tokenizer "$tok" --fake-prefix-caching >"$work/standin.log" 2>&1 &
standin=$!
for _ in $(seq 50); do
	curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
	sleep 0.2
done
url=http://127.0.0.1:$PORT/v1
echo "llama-benchy $("$venv/bin/llama-benchy" --version 2>&1 | tail -n1), stand-in: prefill $PREFILL t/s, decode $DECODE t/s per stream" >&2
HOME=$work/home "$venv/bin/llama-benchy" --base-url "$url" --model org/standin --tokenizer "$tok" \
	--book-url "$book_url" "${grid[@]}" --skip-coherence --format json \
	--save-result "$work/theirs.json" >"$work/theirs.log" 2>&1 ||
	{ tail -n 20 "$work/theirs.log" >&2; exit 1; }
HOME=$work/home SPARK_LAUNCH_STATE_DIR=$work/state "$repo/target/debug/spark-launch" bench \
	--protocol llama-benchy --url "$url" --tokenizer "$tok" --book-url "$repo/tests/fixtures/bench/book.txt" \
	"${grid[@]}" --save-result "$work/ours.json" >"$work/ours.log" 2>&1 ||
	{ tail -n 20 "$work/ours.log" >&2; exit 1; }
"$venv/bin/python" - "$work/ours.json" "$work/theirs.json" <<'PY'
import json, sys
from llama_benchy.results import BenchmarkReport
ours, theirs = (json.load(open(p)) for p in sys.argv[1:3])
BenchmarkReport.model_validate(ours)  # llama-benchy's own model takes spark-launch's file
print("spark-launch's file loads as llama-benchy's BenchmarkReport")
key = lambda b: (b["concurrency"], b["context_size"], b["prompt_size"], b["response_size"], b["is_context_prefill_phase"])
t = {key(b): b for b in theirs["benchmarks"]}
for b in ours["benchmarks"]:
    other = t[key(b)]
    for name, field in (("pp t/s", "pp_throughput"), ("tg t/s", "tg_throughput"), ("TTFT", "e2e_ttft")):
        a, o = b.get(field), other.get(field)
        if a and o:
            print("ratio, llama-benchy %s c=%d depth=%d: %.3f (ours %.2f, theirs %.2f)"
                  % (name, b["concurrency"], b["context_size"], a["mean"] / o["mean"], a["mean"], o["mean"]))
PY
