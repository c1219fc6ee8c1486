//! Shared helpers of the criterion benches: random weights in any type, thread pools.

use engine::quant::{ops_for, GgmlType, Isa};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// `n` uniform floats in [-1, 1), reproducible from `seed`.
pub fn random_floats(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

/// `rows` rows of `cols` random values, quantized to `ty` by the reference quantizer.
pub fn random_matrix(ty: GgmlType, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    let quantize = ops_for(ty, Isa::Scalar).expect("supported type").quantize.expect("a type with a quantizer");
    let row_bytes = ty.row_bytes(cols).expect("whole blocks");
    let mut bytes = vec![0u8; rows * row_bytes];
    // 64 distinct random rows, repeated: the reference quantizers are slow, and neither the
    // kernels nor the caches care whether rows repeat.
    let distinct = rows.min(64);
    let base = random_floats(distinct * cols, seed);
    for (dst, src) in bytes.chunks_exact_mut(row_bytes).zip(base.chunks_exact(cols)) {
        quantize(src, dst);
    }
    for r in distinct..rows {
        bytes.copy_within((r % distinct) * row_bytes..(r % distinct + 1) * row_bytes, r * row_bytes);
    }
    bytes
}

/// A rayon pool of exactly `threads` threads.
pub fn pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("thread pool")
}

/// The weight types with SIMD kernels, in the order benches report them.
pub const WEIGHT_TYPES: [GgmlType; 16] = GgmlType::WEIGHT_TYPES;
