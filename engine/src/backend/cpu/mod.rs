//! CPU operations: one matmul entry point for every weight type (parallel with rayon), row
//! norms, rotary embeddings, activations and attention.

pub mod activation;
pub mod attention;
pub mod matmul;
pub mod norm;
pub mod rope;

pub use matmul::{get_rows, matmul, MatmulError, WeightMatrix};
