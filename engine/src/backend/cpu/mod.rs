//! CPU operations: one matmul entry point for every weight type (parallel with rayon), row
//! norms, rotary embeddings, activations and attention.

pub mod activation;
pub mod attention;
pub mod matmul;
pub mod norm;
pub mod rope;

pub use matmul::{get_rows, matmul, matmul_each, MatmulError, WeightMatrix};

use crate::quant::dispatch::Isa;

/// Whether the element-wise kernels written with `f32::mul_add` (attention, SiLU, rope) run
/// their copy compiled with AVX2 + FMA: the active tier has them. Both copies compute the same
/// bits; without the target feature each `mul_add` is a call to the C library's `fmaf` and no
/// loop vectorises.
pub(crate) fn fma_tier() -> bool {
    Isa::active() >= Isa::Avx2
}

/// Defines `$name(args..)`, which runs `$body(args..)` on the active tier, and
/// `$with(fused: bool, args..)`, which runs it compiled with AVX2 + FMA when `fused` (and the
/// CPU has them), plainly otherwise: tests call both copies and compare their bits.
macro_rules! fma_variants {
    (
        $(#[$meta:meta])*
        $vis:vis fn $name:ident, $wvis:vis fn $with:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? = $body:ident
    ) => {
        $(#[$meta])*
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            $with($crate::backend::cpu::fma_tier(), $($arg),*)
        }

        $wvis fn $with(fused: bool, $($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2,fma")]
                unsafe fn with_fma($($arg: $ty),*) $(-> $ret)? {
                    $body($($arg),*)
                }
                if fused && $crate::quant::dispatch::Isa::Avx2.is_available() {
                    // SAFETY: the CPU has AVX2 and FMA (checked just above).
                    return unsafe { with_fma($($arg),*) };
                }
            }
            let _ = fused;
            $body($($arg),*)
        }
    };
}
pub(crate) use fma_variants;
