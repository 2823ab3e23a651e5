//! The launch profiles shipped inside the binary: every file of `launch-profiles/`, embedded
//! at build time (a test checks that none is missing from this list and that all are valid).

/// `(file name, text)` of every bundled profile.
pub const FILES: &[(&str, &str)] = &[
    (
        "smoke-test.yaml",
        include_str!("../../launch-profiles/smoke-test.yaml"),
    ),
    (
        "llama-70b-tp2.yaml",
        include_str!("../../launch-profiles/llama-70b-tp2.yaml"),
    ),
    (
        "gpt-oss-120b-tp2.yaml",
        include_str!("../../launch-profiles/gpt-oss-120b-tp2.yaml"),
    ),
    (
        "qwen-32b-ray-tp2.yaml",
        include_str!("../../launch-profiles/qwen-32b-ray-tp2.yaml"),
    ),
    (
        "trtllm-qwen-7b-tp2.yaml",
        include_str!("../../launch-profiles/trtllm-qwen-7b-tp2.yaml"),
    ),
    (
        "qwen38-flash-next-sglang-tp2.yaml",
        include_str!("../../launch-profiles/qwen38-flash-next-sglang-tp2.yaml"),
    ),
    (
        "deepseek-v4-flash-mtp-tp2.yaml",
        include_str!("../../launch-profiles/deepseek-v4-flash-mtp-tp2.yaml"),
    ),
    (
        "minimax-m27-nvfp4-tp2.yaml",
        include_str!("../../launch-profiles/minimax-m27-nvfp4-tp2.yaml"),
    ),
    (
        "nemotron3-super-nvfp4-tp2.yaml",
        include_str!("../../launch-profiles/nemotron3-super-nvfp4-tp2.yaml"),
    ),
    (
        "atlas-qwen36-35b-fp8-mtp.yaml",
        include_str!("../../launch-profiles/atlas-qwen36-35b-fp8-mtp.yaml"),
    ),
    (
        "nccl-allgather.yaml",
        include_str!("../../launch-profiles/nccl-allgather.yaml"),
    ),
];
