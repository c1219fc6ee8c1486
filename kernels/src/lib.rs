//! The engine's CUDA kernels: CUDA C sources (`cuda/*.cu`, one file per op family, with the
//! portability header and the block layouts in `cuda/*.cuh`), embedded in the binary and
//! compiled at run time by NVRTC, loaded dynamically through `cudarc`, so that building needs no
//! CUDA toolkit. A leaf crate: it knows nothing of GGUF files or models.

#[cfg(feature = "cuda")]
pub mod cuda;
#[cfg(feature = "host")]
pub mod host;
pub mod launch;
pub mod nvrtc;
pub mod prepared;
pub mod runtime;
pub mod selftest;
pub mod sources;
pub mod steps;

pub use nvrtc::{compile, CompiledModule, KernelReport, NvrtcError};
pub use runtime::{Arg, Issued, Launch, Runtime, RuntimeError};
pub use sources::{KernelSource, Param, HEADERS, SOURCES};
