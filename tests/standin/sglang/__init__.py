"""A stand-in for the `sglang` package in the serving stand-in image (tests/standin/README.md):
only its two server entry points, both reaching `standin_serve.main_sglang` (tests/standin/vllm,
installed as a module)."""
