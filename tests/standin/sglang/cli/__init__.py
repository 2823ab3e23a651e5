"""Stand-in for `sglang.cli` (the `sglang` console script's package)."""
