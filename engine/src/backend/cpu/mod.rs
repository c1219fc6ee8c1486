//! CPU operations: one matmul entry point for every weight type (parallel with rayon), row
//! norms, rotary embeddings, activations and attention, the recurrent layers' state updates
//! (`recurrent.rs`), and the CPU implementation of the `Backend` trait over them (`backend.rs`,
//! with its KV block storage in `kv.rs` and the rows attention reads from it in `kv_rows.rs`).

pub mod activation;
#[cfg(target_arch = "x86_64")]
mod activation_x86;
pub mod attention;
#[cfg(target_arch = "x86_64")]
mod attention_x86;
mod backend;
mod chunked;
pub mod kv;
pub mod kv_rows;
mod low_rank;
pub mod matmul;
mod matmul_indexed;
mod matmul_panels;
pub mod norm;
mod packed_head;
mod recurrent;
pub mod rope;
pub mod transpose;

pub use backend::{CpuBackend, CpuMatrix, HostTensor};
pub use matmul::{get_rows, matmul, matmul_each, matmul_each_on, matmul_rows_on, Rows};
