//! The op harness on a real GPU (`--features cuda`): every op of the table on GPU 0 against the
//! f64 reference, within the same bounds as the CPU tiers and the simulated GPU. Ignored by
//! default (it needs a GPU):
//!
//! `cargo test -p engine --features cuda --lib cuda_check -- --ignored --nocapture`

use super::harness::failures;
use super::kernel::CudaBackend;

#[test]
#[ignore = "needs a CUDA GPU"]
fn every_op_on_the_gpu_is_within_its_bound() {
    let b = CudaBackend::open(0).expect("GPU 0");
    eprintln!("op harness on {}", b.runtime().description());
    let failed = failures(&b, "cuda:0");
    assert!(failed.is_empty(), "{failed:#?}");
}
