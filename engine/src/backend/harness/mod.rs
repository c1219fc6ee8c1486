//! The cross-backend op harness (the idea of llama.cpp's `test-backend-ops`): one table of every
//! [`Backend`] operation over representative shapes (odd sizes, grouped-query heads, windows,
//! several sequences, every weight type), each case run on the backend under test and on the
//! plain f64 reference of `reference.rs`, compared by normalised mean squared error against a
//! bound per op. Each backend runs the same table: today the CPU backend on every SIMD tier the
//! machine has; a new device plugs in by calling [`run_table`].

mod cases;
mod reference;

use std::io::Write as _;

use crate::backend::Backend;

/// `Σ (got - want)² / Σ want²` (plain squared error when the reference is all zeros).
pub fn nmse(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len(), "output length");
    let err: f64 = got.iter().zip(want).map(|(&g, &w)| (f64::from(g) - w).powi(2)).sum();
    let norm: f64 = want.iter().map(|w| w * w).sum();
    if norm == 0.0 {
        err
    } else {
        err / norm
    }
}

/// One row of the table: an op, the most error it may show, and its cases (each a description
/// and its NMSE).
pub struct OpCases<B: Backend> {
    pub op: &'static str,
    pub bound: f64,
    pub run: fn(&B, &mut Rng) -> Vec<(String, f64)>,
}

/// The worst case of one op on one backend.
#[derive(Debug)]
pub struct OpResult {
    pub op: &'static str,
    pub bound: f64,
    pub worst_case: String,
    pub worst_nmse: f64,
    pub cases: usize,
}

impl OpResult {
    pub fn passed(&self) -> bool {
        self.worst_nmse <= self.bound
    }
}

/// Runs every op of the table on `b`, printing one line per op (to the terminal even under the
/// test harness's capture, so that CI logs show the errors).
pub fn run_table<B: Backend>(b: &B, name: &str) -> Vec<OpResult> {
    let mut results = Vec::new();
    for row in cases::table::<B>() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let cases = (row.run)(b, &mut rng);
        let (worst_case, worst_nmse) = cases.iter().max_by(|a, b| a.1.total_cmp(&b.1)).map(|(c, e)| (c.clone(), *e)).unwrap_or_default();
        let r = OpResult { op: row.op, bound: row.bound, worst_case, worst_nmse, cases: cases.len() };
        let line = format!(
            "op harness {name:<12} {:<34} {:>3} cases  worst nmse {:.2e} (bound {:.0e}) {} [{}]\n",
            r.op,
            r.cases,
            r.worst_nmse,
            r.bound,
            if r.passed() { "ok" } else { "FAIL" },
            r.worst_case
        );
        let _ = std::io::stderr().write_all(line.as_bytes());
        results.push(r);
    }
    results
}

/// Runs the table on `b` and lists the ops outside their bounds (an op without cases fails).
pub fn failures<B: Backend>(b: &B, name: &str) -> Vec<String> {
    run_table(b, name)
        .into_iter()
        .filter(|r| r.cases == 0 || !r.passed())
        .map(|r| format!("{name} {}: nmse {:e} > {:e} in {} ({} cases)", r.op, r.worst_nmse, r.bound, r.worst_case, r.cases))
        .collect()
}

/// xorshift64*: inputs that repeat from run to run.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub fn next_f32(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let bits = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40; // 24 bits
        bits as f32 / (1u32 << 24) as f32 * 2.0 - 1.0
    }

    /// `n` values uniform in `[-scale, scale)`.
    pub fn values(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.next_f32() * scale).collect()
    }
}

/// `rows` rows of `cols` values of weight type `ty`: values uniform in `[-scale, scale)` through
/// the scalar reference quantizer, or random valid blocks for a type without one (the grid
/// i-quants).
pub(crate) fn quantized_rows(ty: crate::quant::GgmlType, rows: usize, cols: usize, scale: f32, rng: &mut Rng) -> Vec<u8> {
    let row_bytes = ty.row_bytes(cols).expect("whole blocks");
    match crate::quant::ops_for(ty, crate::quant::Isa::Scalar).expect("a computable type").quantize {
        Some(quantize) => {
            let x = rng.values(rows * cols, scale);
            let mut bytes = vec![0u8; rows * row_bytes];
            for (src, dst) in x.chunks_exact(cols).zip(bytes.chunks_exact_mut(row_bytes)) {
                quantize(src, dst);
            }
            bytes
        }
        None => crate::quant::iq_grid::random_row(ty, rows * cols / ty.block_size(), u64::from(rng.next_f32().to_bits())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::CpuBackend;
    use crate::quant::Isa;

    #[test]
    fn every_op_on_every_cpu_tier_is_within_its_bound() {
        let mut failed = Vec::new();
        for tier in Isa::available() {
            let b = CpuBackend::with_isa(tier);
            assert_eq!(b.isa(), tier);
            failed.extend(failures(&b, &format!("cpu/{}", tier.name())));
        }
        assert!(failed.is_empty(), "{failed:#?}");
    }

    #[test]
    fn nmse_is_relative_to_the_reference() {
        assert_eq!(nmse(&[1.0, 2.0], &[1.0, 2.0]), 0.0);
        assert!((nmse(&[1.1, 0.0], &[1.0, 0.0]) - 0.01).abs() < 1e-6);
        assert_eq!(nmse(&[0.5], &[0.0]), 0.25);
    }
}
