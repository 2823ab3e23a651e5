"""Stand-in for `python3 -m sglang.launch_server ARGS` (runs tests/standin/vllm's SGLang side)."""
import sys

import standin_serve

if __name__ == "__main__":
    standin_serve.main_sglang(sys.argv[1:])
