//! The NCCL library a container loads: its version as the library itself states it
//! (`version`), which `libnccl.so.2` a container's dynamic loader resolves (`loader`), and the
//! judgement plans, the executor and doctor share (`check`: one release everywhere, ≥ 2.30.7
//! on a switchless ring, `--nccl-from` first on the loader path).
//!
//! What the engine's PyTorch loads is part of it: `python` finds `torch` in an image the way
//! its Python would, and `elf` reads its `libtorch_cuda.so`'s RPATH, which comes before
//! `LD_LIBRARY_PATH`.
//!
//! A node's own NCCL (`--runtime host`) is read with the same model on the node's files; what
//! the probe recorded of it is `host`.
//!
//! Pure: the bytes of a library, an image's `ld.so.cache` and environment in; decisions out.
//! Reading them from an image or a node is `runtime::libnccl`'s and `apply::nccl`'s job.

pub mod check;
pub mod elf;
pub mod host;
pub mod loader;
pub mod python;
pub mod version;

pub use check::{
    FromLib, FromRead, ImageRead, LibraryOrigin, LibraryVerdict, Loads, MOUNT_DIR, NodeNccl, Rule,
    judge,
};
pub use loader::{Found, LoaderEnv, Machine, Resolution, SONAME, Via};
pub use version::{LibVersion, NcclVersion, RING_MIN};
