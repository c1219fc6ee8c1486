//! Run-time choice of kernels: the CPU's instruction-set tier is detected once (or forced by
//! `ENGINE_ISA=scalar|avx2|avx512|amx`) and every type gets a table of function pointers.

use std::fmt;
use std::sync::OnceLock;

use super::GgmlType;
use super::{float, iq4, iq_grid, k_quants, mxfp4, q4_0, q4_1, q5_0, q5_1, q8_0, q8_1, QuantError};

/// An instruction-set tier, lowest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    /// Portable Rust; the reference every other tier is tested against.
    Scalar,
    /// x86-64 AVX2 + FMA + F16C.
    Avx2,
    /// x86-64 AVX-512 F/BW/VL/DQ with VNNI (int8 dot products), plus the AVX2 tier's features.
    Avx512,
    /// The AVX-512 tier plus AMX-INT8 tiles (`x86::amx`): the same kernels, and the prompt GEMM
    /// of the K-quant panels on the tile unit.
    Amx,
}

impl Isa {
    pub const ALL: [Isa; 4] = [Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Amx];

    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
            Isa::Amx => "amx",
        }
    }

    pub fn from_name(s: &str) -> Option<Isa> {
        Isa::ALL.into_iter().find(|i| i.name().eq_ignore_ascii_case(s.trim()))
    }

    /// Whether this CPU can run the tier.
    pub fn is_available(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c"),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => {
                Isa::Avx2.is_available()
                    && is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vl")
                    && is_x86_feature_detected!("avx512dq")
                    && is_x86_feature_detected!("avx512vnni")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Amx => Isa::Avx512.is_available() && super::x86::amx::is_available(),
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// Every tier this CPU can run, lowest first.
    pub fn available() -> Vec<Isa> {
        Isa::ALL.into_iter().filter(|i| i.is_available()).collect()
    }

    /// The best tier this CPU can run.
    pub fn detect() -> Isa {
        Isa::available().into_iter().max().unwrap_or(Isa::Scalar)
    }

    /// The tier in use: detected once, lowered by `ENGINE_ISA` when set. A request for a tier
    /// the CPU lacks, or an unknown name, is logged and ignored.
    pub fn active() -> Isa {
        static ACTIVE: OnceLock<Isa> = OnceLock::new();
        *ACTIVE.get_or_init(|| Isa::choose(std::env::var("ENGINE_ISA").ok().as_deref(), &Isa::available()))
    }

    /// The tier to use given an `ENGINE_ISA` value and the tiers the CPU has: the best one,
    /// unless the request names another available tier.
    pub fn choose(requested: Option<&str>, available: &[Isa]) -> Isa {
        let best = available.iter().copied().max().unwrap_or(Isa::Scalar);
        let Some(req) = requested else { return best };
        match Isa::from_name(req) {
            Some(isa) if available.contains(&isa) => isa,
            Some(isa) => {
                tracing::warn!("ENGINE_ISA={req}: {isa} is not available on this CPU, using {best}");
                best
            }
            None => {
                tracing::warn!("ENGINE_ISA={req} is not one of scalar|avx2|avx512|amx, using {best}");
                best
            }
        }
    }
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Row bytes -> `out.len()` floats.
pub type DequantizeFn = fn(&[u8], &mut [f32]);
/// `x.len()` floats -> row bytes.
pub type QuantizeFn = fn(&[f32], &mut [u8]);
/// Dot product of a weight row with an activation row (raw bytes), same element count.
pub type VecDotFn = fn(&[u8], &[u8]) -> f32;

/// Weight rows and activation rows one tile kernel call dots together.
pub const TILE_W: usize = 2;
pub const TILE_A: usize = 3;

/// `out[r][c]` = the dot product of weight row `r` (`TILE_W` rows from `w`, `w_stride` bytes
/// apart) with activation row `c` (`TILE_A` rows of f32 from `a`, `a_stride` bytes apart), `n`
/// values each: each output the bits [`VecDotFn`] of the same tier gives it, at a fraction of
/// its loads (the matmul of many activation rows).
pub type VecDotTileFn = fn(w: &[u8], w_stride: usize, a: &[u8], a_stride: usize, n: usize, out: &mut [[f32; TILE_A]; TILE_W]);

/// The many-row product of float weight type `ty` on tier `isa` (`quant::float_gemm`), where
/// the tier has one (AVX2 and AVX-512, whose row dots' chain orders they follow) and the CPU
/// has the tier.
pub fn float_gemm_on(ty: GgmlType, isa: Isa) -> Option<super::float_gemm::FloatGemm> {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 if isa.is_available() => super::x86::avx2::float_gemm(ty),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 | Isa::Amx if isa.is_available() => super::x86::avx512::float_gemm(ty),
        _ => None,
    }
}

/// The many-row product of grid i-quant `ty` on tier `isa` (`iq_grid::gemm`), where the CPU
/// has the tier; `None` for every other type.
pub fn grid_gemm_on(ty: GgmlType, isa: Isa) -> Option<super::iq_grid::gemm::GridGemm> {
    if !isa.is_available() {
        return None;
    }
    match isa {
        Isa::Scalar => super::iq_grid::gemm::tile_type(ty).map(super::iq_grid::gemm::scalar_gemm),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => super::x86::avx2::grid_gemm(ty),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => super::x86::avx512::grid_gemm(ty),
        #[cfg(target_arch = "x86_64")]
        Isa::Amx => super::x86::amx::grid_gemm(ty),
        #[allow(unreachable_patterns)]
        _ => None,
    }
}

/// The tile kernel of weight type `ty` on tier `isa`, where the tier has one (float weights on
/// AVX2 and AVX-512) and the CPU has the tier.
pub fn dot_tile_on(ty: GgmlType, isa: Isa) -> Option<VecDotTileFn> {
    if !isa.is_available() {
        return None;
    }
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => super::x86::avx2::dot_tile(ty),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 | Isa::Amx => super::x86::avx512::dot_tile(ty),
        _ => None,
    }
}

/// Row kernels of one SIMD tier for one type, over raw little-endian bytes.
#[derive(Clone, Copy)]
pub struct Kernels {
    pub dequantize: DequantizeFn,
    /// Against an activation row of the type's `vec_dot_type`.
    pub vec_dot: VecDotFn,
}

/// Everything the engine needs to compute with one tensor type on one tier.
#[derive(Clone, Copy)]
pub struct TypeOps {
    pub ty: GgmlType,
    pub isa: Isa,
    /// The format activations are converted to before [`TypeOps::vec_dot`]: Q8_0, Q8_1 or
    /// Q8_K for quantized weights, F32 for float weights.
    pub vec_dot_type: GgmlType,
    pub dequantize: DequantizeFn,
    /// The scalar reference quantizer (ggml's `quantize_row_*_ref`, what llama-quantize writes);
    /// `None` for the grid i-quants, which llama.cpp makes from an importance matrix.
    pub quantize: Option<QuantizeFn>,
    /// The quantizer for matmul activations of this type: llama.cpp's x86 CPU variant for
    /// Q8_0 / Q8_1, the reference for the rest (the grid i-quants' stands for none: they are
    /// never activations).
    pub quantize_activations: QuantizeFn,
    /// Against a row of `vec_dot_type`.
    pub vec_dot: VecDotFn,
}

/// The scalar kernels of a type.
fn scalar(ty: GgmlType) -> Option<TypeOps> {
    use GgmlType as T;
    // (activation type, module): every scalar module has the same three row functions.
    macro_rules! row {
        ($act:expr, $($m:ident)::+) => {
            ($act, $($m)::+::dequantize_row, Some($($m)::+::quantize_row as QuantizeFn), $($m)::+::vec_dot_row)
        };
    }
    // the grid i-quants: Q8_K activations, no quantizer
    macro_rules! grid {
        ($m:ident) => {
            (T::Q8_K, iq_grid::$m::dequantize_row, None, iq_grid::$m::vec_dot_row)
        };
    }
    let (vec_dot_type, dequantize, quantize, vec_dot): (GgmlType, DequantizeFn, Option<QuantizeFn>, VecDotFn) = match ty {
        T::F32 => (T::F32, float::dequantize_f32, Some(float::quantize_f32), float::vec_dot_f32),
        T::F16 => (T::F32, float::dequantize_f16, Some(float::quantize_f16), float::vec_dot_f16),
        T::BF16 => (T::F32, float::dequantize_bf16, Some(float::quantize_bf16), float::vec_dot_bf16),
        T::Q4_0 => row!(T::Q8_0, q4_0),
        T::Q4_1 => row!(T::Q8_1, q4_1),
        T::Q5_0 => row!(T::Q8_0, q5_0),
        T::Q5_1 => row!(T::Q8_1, q5_1),
        T::Q8_0 => row!(T::Q8_0, q8_0),
        T::Q8_1 => row!(T::Q8_1, q8_1),
        T::Q2_K => row!(T::Q8_K, k_quants::q2_k),
        T::Q3_K => row!(T::Q8_K, k_quants::q3_k),
        T::Q4_K => row!(T::Q8_K, k_quants::q4_k),
        T::Q5_K => row!(T::Q8_K, k_quants::q5_k),
        T::Q6_K => row!(T::Q8_K, k_quants::q6_k),
        T::Q8_K => row!(T::Q8_K, k_quants::q8_k),
        T::IQ4_NL => row!(T::Q8_0, iq4::nl),
        T::IQ4_XS => row!(T::Q8_K, iq4::xs),
        T::MXFP4 => row!(T::Q8_0, mxfp4),
        T::IQ2_XXS => grid!(iq2_xxs),
        T::IQ2_XS => grid!(iq2_xs),
        T::IQ2_S => grid!(iq2_s),
        T::IQ3_XXS => grid!(iq3_xxs),
        T::IQ3_S => grid!(iq3_s),
        T::IQ1_S => grid!(iq1_s),
        T::IQ1_M => grid!(iq1_m),
        _ => return None,
    };
    let quantize_activations: QuantizeFn = match (ty, quantize) {
        (T::Q8_0, _) => q8_0::quantize_activations,
        (T::Q8_1, _) => q8_1::quantize_activations,
        (_, Some(q)) => q,
        (_, None) => k_quants::q8_k::quantize_row,
    };
    Some(TypeOps { ty, isa: Isa::Scalar, vec_dot_type, dequantize, quantize, quantize_activations, vec_dot })
}

/// The kernels of `ty` on tier `isa`: that tier's SIMD kernels where it has them, the scalar
/// ones otherwise. Errors if the type is unsupported or the CPU lacks the tier.
pub fn ops_for(ty: GgmlType, isa: Isa) -> Result<TypeOps, QuantError> {
    if !isa.is_available() {
        return Err(QuantError::IsaUnavailable(isa));
    }
    let mut ops = scalar(ty).ok_or(QuantError::Unsupported(ty))?;
    let simd = match isa {
        Isa::Scalar => None,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => super::x86::avx2::kernels(ty),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 | Isa::Amx => super::x86::avx512::kernels(ty),
        #[cfg(not(target_arch = "x86_64"))]
        _ => None,
    };
    // Q8_K has no SIMD row kernels, but every K-quant matmul quantizes its activations to it:
    // the AVX2 quantizer (the reference's bytes) serves the tiers above scalar
    #[cfg(target_arch = "x86_64")]
    if ty == GgmlType::Q8_K && isa >= Isa::Avx2 {
        ops.quantize_activations = super::x86::avx2::q8_k::quantize_row;
    }
    if let Some(k) = simd {
        ops.isa = isa;
        ops.dequantize = k.dequantize;
        ops.vec_dot = k.vec_dot;
    }
    Ok(ops)
}

/// The kernels of `ty` on the active tier ([`Isa::active`]), built once per type.
pub fn ops(ty: GgmlType) -> Result<&'static TypeOps, QuantError> {
    ops_on(ty, Isa::active())
}

/// The kernels of `ty` on tier `isa`, built once per tier and type (a tier the CPU lacks has
/// none: every type is then an error).
pub fn ops_on(ty: GgmlType, isa: Isa) -> Result<&'static TypeOps, QuantError> {
    static TABLES: [OnceLock<Vec<Option<TypeOps>>>; Isa::ALL.len()] = [const { OnceLock::new() }; Isa::ALL.len()];
    let table =
        TABLES[isa as usize].get_or_init(|| (0..64u32).map(|id| GgmlType::from_id(id).and_then(|t| ops_for(t, isa).ok())).collect());
    match table.get(ty.id() as usize).and_then(Option::as_ref) {
        Some(ops) => Ok(ops),
        None if !isa.is_available() => Err(QuantError::IsaUnavailable(isa)),
        None => Err(QuantError::Unsupported(ty)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_isa_lowers_the_tier_and_never_raises_it() {
        let all = [Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Amx];
        assert_eq!(Isa::choose(None, &all), Isa::Amx);
        assert_eq!(Isa::choose(Some("avx512"), &all), Isa::Avx512);
        assert_eq!(Isa::choose(Some("scalar"), &all), Isa::Scalar);
        assert_eq!(Isa::choose(Some(" AVX2 "), &all), Isa::Avx2);
        let no_512 = [Isa::Scalar, Isa::Avx2];
        assert_eq!(Isa::choose(Some("avx512"), &no_512), Isa::Avx2);
        assert_eq!(Isa::choose(Some("neon9"), &no_512), Isa::Avx2);
    }

    #[test]
    fn the_table_serves_every_supported_type() {
        for ty in GgmlType::SUPPORTED {
            let ops = ops(ty).unwrap();
            assert_eq!(ops.ty, ty);
            // Activation-only types (Q8_1, Q8_K) have scalar kernels alone.
            assert!(ops.isa == Isa::active() || ops.isa == Isa::Scalar, "{ty} on {}", ops.isa);
        }
        assert_eq!(ops(GgmlType::TQ1_0).err(), Some(QuantError::Unsupported(GgmlType::TQ1_0)));
    }
}
