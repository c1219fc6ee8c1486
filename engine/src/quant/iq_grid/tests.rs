//! The grid types against values built by hand from their layouts, and each type's dot product
//! against its own dequantization.

use super::*;
use crate::quant::blocks::f16_le_from;
use crate::quant::k_quants::q8_k;

const TYPES: [GgmlType; 7] = GgmlType::GRID_TYPES;

#[test]
fn the_sign_byte_completes_seven_bits_to_even_parity() {
    // ggml's ksigns_iq2xs: 0, 129, 130, 3, 132, 5, 6, 135, ...
    assert_eq!((0..8).map(signs7).collect::<Vec<_>>(), [0, 129, 130, 3, 132, 5, 6, 135]);
    assert_eq!(signs7(127), 255);
    assert!((0..128).all(|b| signs7(b).count_ones().is_multiple_of(2)));
}

#[test]
fn iq2_xxs_reads_its_indices_signs_and_scale() {
    let mut b = vec![0u8; 66];
    b[..2].copy_from_slice(&f16_le_from(0.5));
    // group of 32 number 1: grid entries 1, 0, 0, 0; the first sign set 0b0000001 (value 0
    // negative, and the parity bit: value 7), scale nibble 3 (odd scale 7)
    b[2 + 8] = 1;
    let aux: u32 = 1 | (3 << 28);
    b[2 + 12..2 + 16].copy_from_slice(&aux.to_le_bytes());
    let mut y = vec![0.0f32; 256];
    iq2_xxs::dequantize_row(&b, &mut y);
    // entry 1 of the grid is 0x080808080808082b: magnitudes 43, 8, 8, ..., 8 (lowest byte first)
    let db = 0.5 * 7.0 * 0.125;
    assert_eq!(y[32], -db * 43.0);
    assert_eq!(&y[33..39], &[db * 8.0; 6]);
    assert_eq!(y[39], -db * 8.0);
    // the other groups: grid entry 0 (all 8), scale nibble 0 (odd scale 1), no signs
    assert_eq!(y[0], 0.5 * 0.125 * 8.0);
}

#[test]
fn iq1_s_values_are_the_grid_plus_the_shift() {
    let mut b = vec![0u8; 50];
    b[..2].copy_from_slice(&f16_le_from(2.0));
    // group of 32 number 0: scale 3 bits = 2 (odd scale 5), negative shift, index high bits 0
    let qh: u16 = (2 << 12) | 0x8000;
    b[34..36].copy_from_slice(&qh.to_le_bytes());
    let mut y = vec![0.0f32; 256];
    iq1_s::dequantize_row(&b, &mut y);
    // grid entry 0 is all -1
    assert_eq!(&y[..8], &[2.0 * 5.0 * (-1.0 - 0.125); 8]);
    // group 1 (positive shift, odd scale 1)
    assert_eq!(y[32], 2.0 * (-1.0 + 0.125));
}

#[test]
fn every_dot_product_equals_its_dequantization_times_the_activations() {
    for (k, name) in TYPES.into_iter().enumerate() {
        let t = grid_type(name).unwrap();
        let n = 3;
        let row = random_row(name, n, k as u64);
        let mut w = vec![0.0f32; n * QK_K];
        t.dequantize(&row, &mut w);
        assert!(w.iter().all(|v| v.is_finite()), "{name}");
        let x: Vec<f32> = (0..n * QK_K).map(|i| ((i * 37 % 101) as f32 - 50.0) / 40.0).collect();
        let mut act = vec![0u8; n * 292];
        q8_k::quantize_row(&x, &mut act);
        let mut xq = vec![0.0f32; n * QK_K];
        q8_k::dequantize_row(&act, &mut xq);
        let want: f64 = w.iter().zip(&xq).map(|(&a, &b)| f64::from(a) * f64::from(b)).sum();
        let got = f64::from(t.vec_dot(&row, bytemuck::cast_slice(&act)));
        let scale: f64 = w.iter().zip(&xq).map(|(&a, &b)| (f64::from(a) * f64::from(b)).abs()).sum();
        assert!((got - want).abs() <= 1e-5 * scale, "{name}: {got} against {want} (scale {scale})");
    }
}

/// `scale_values` is each type's scale granularity: the groups of 8 it spans share one scale.
#[test]
fn the_groups_of_one_scale_share_it() {
    for ty in TYPES.into_iter().chain([GgmlType::Q2_K, GgmlType::Q3_K]) {
        let t = gemm::gemm_type(ty).unwrap();
        let per_scale = t.scale_values / GROUP;
        let mut u = Unpacked::default();
        let mut differs_across = false;
        for seed in 0..8 {
            (t.unpack)(&random_row(ty, 1, seed), &mut u);
            for g in 0..GROUPS {
                assert_eq!(u.scales[g], u.scales[g - g % per_scale], "{ty}: group {g}");
            }
            differs_across |= (per_scale..GROUPS).step_by(per_scale).any(|g| u.scales[g] != u.scales[g - per_scale]);
        }
        assert!(differs_across, "{ty}: one scale for the whole block in every random block");
    }
}
