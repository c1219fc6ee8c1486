//! K-quants: 256-value super-blocks with per-group scales (Q2_K..Q6_K weights, Q8_K activations).

pub mod q2_k;
pub mod q3_k;
pub mod q4_k;
pub mod q5_k;
pub mod q6_k;
pub mod q8_k;
pub(crate) mod scales;
#[cfg(test)]
pub(crate) mod test_util;
