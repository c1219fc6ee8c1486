//! The op harness on a real GPU (`--features cuda`): every op of the table on GPU 0 against the
//! f64 reference, within the same bounds as the CPU tiers and the simulated GPU. Ignored by
//! default (it needs a GPU):
//!
//! `cargo test -p engine --features cuda --lib cuda_check -- --ignored --nocapture`

use super::harness::run_table;
use super::kernel::CudaBackend;

#[test]
#[ignore = "needs a CUDA GPU"]
fn every_op_on_the_gpu_is_within_its_bound() {
    let b = CudaBackend::open(0).expect("GPU 0");
    eprintln!("op harness on {}", b.runtime().description());
    let mut failed = Vec::new();
    for r in run_table(&b, "cuda:0") {
        assert!(r.cases > 0, "{}: no cases", r.op);
        if !r.passed() {
            failed.push(format!("{}: nmse {:e} > {:e} in {}", r.op, r.worst_nmse, r.bound, r.worst_case));
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
}
