//! CPU operations: one matmul entry point for every weight type, parallel with rayon.

pub mod matmul;

pub use matmul::{get_rows, matmul, MatmulError, WeightMatrix};
