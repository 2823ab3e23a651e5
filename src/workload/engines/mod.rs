//! The serving engines, one file each (vLLM, TensorRT-LLM).
//!
//! Pure: options and facts in, plans out.

pub mod trtllm;
pub mod vllm;
