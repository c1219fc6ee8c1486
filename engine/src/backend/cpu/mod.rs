//! CPU operations: one matmul entry point for every weight type (parallel with rayon), row
//! norms, rotary embeddings, activations and attention, and the CPU implementation of the
//! `Backend` trait over them (`backend.rs`, with its KV block storage in `kv.rs`).

pub mod activation;
pub mod attention;
mod backend;
pub mod kv;
pub mod matmul;
mod matmul_panels;
pub mod norm;
pub mod rope;
pub mod transpose;

pub use backend::{CpuBackend, CpuMatrix, HostTensor};
pub use matmul::{get_rows, matmul, matmul_each, matmul_each_on, MatmulError, WeightMatrix};

/// The element-wise kernels written with `f32::mul_add` (attention, SiLU, rope, the softmax's
/// exp) run a copy compiled for the active tier: AVX-512 (16 lanes), AVX2 + FMA (8 lanes), or
/// plain. Every copy computes the same bits: each output element is its own chain of fused
/// multiply-adds, and every reduction is written out in a fixed order, so the vector width
/// changes only how many elements advance at once. Without the target features each
/// `mul_add` is a call to the C library's `fmaf` and no loop vectorises.
///
/// `fma_variants!` defines `$name(args..)`, which runs `$body(args..)` on the active tier, and
/// `$with(tier, args..)`, which runs the copy of `tier` (or of the best tier below it that the
/// CPU has): tests call every copy and compare their bits.
macro_rules! fma_variants {
    (
        $(#[$meta:meta])*
        $vis:vis fn $name:ident, $wvis:vis fn $with:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? = $body:ident
    ) => {
        $(#[$meta])*
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            $with($crate::quant::dispatch::Isa::active(), $($arg),*)
        }

        // the kernel's own arguments and the tier: a struct would only rename them
        #[allow(clippy::too_many_arguments)]
        $wvis fn $with(tier: $crate::quant::dispatch::Isa, $($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            {
                use $crate::quant::dispatch::Isa;
                #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
                unsafe fn with_avx512($($arg: $ty),*) $(-> $ret)? {
                    $body($($arg),*)
                }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn with_fma($($arg: $ty),*) $(-> $ret)? {
                    $body($($arg),*)
                }
                if tier >= Isa::Avx512 && Isa::Avx512.is_available() {
                    // SAFETY: the CPU has AVX-512 F/BW/VL/DQ, AVX2, FMA and F16C (checked just above).
                    return unsafe { with_avx512($($arg),*) };
                }
                if tier >= Isa::Avx2 && Isa::Avx2.is_available() {
                    // SAFETY: the CPU has AVX2 and FMA (checked just above).
                    return unsafe { with_fma($($arg),*) };
                }
            }
            let _ = tier;
            $body($($arg),*)
        }
    };
}
pub(crate) use fma_variants;
