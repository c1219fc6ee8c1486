//! CPU operations: matmul over every weight type, parallel with rayon.
