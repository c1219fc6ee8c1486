//! Every quantized weight type's dot products against ggml's own: the 256 rows of the tiny
//! llama's `blk.0.ffn_down` (768 columns, llama-quantize's blocks) times five activation rows,
//! as ggml-cpu's `from_float` and `vec_dot` give them on llama.cpp's build
//! (`tests/fixtures/quants/golden/dots/`, made by tools/make-dot-goldens.py). The activations
//! must quantize to ggml's bytes, and every row dot (each tier), every CPU backend product (each
//! tier, one row, a batch, and a batch on the tile paths) and the simulated GPU's products (on the
//! activation row every format holds exactly) must give ggml's values within a few roundings.

use std::sync::Arc;

use engine::backend::{Backend, CpuBackend};
use engine::gguf::{GgufFile, GgufWriter};
use engine::quant::{ops_for, GgmlType, Isa};
use engine_tests::quant_goldens::sha256;
use engine_tests::{fixture, read_f32s, read_json};

const TENSOR: &str = "blk.0.ffn_down.weight";
const COLS: usize = 768;
const ROWS: usize = 256;

/// How far a dot may be from ggml's, as a share of `Σ |w_i x_i|`: both sum the same exact
/// products of each block in f32, in different orders (ggml's SIMD lanes against ours), which
/// moves a result by a few roundings of the sum's magnitude. A wrong value, scale or block moves
/// it by a share of the dot itself (about 1/√768 of `Σ |w_i x_i|` for these rows).
const BOUND: f64 = 1.5e-6;

fn index() -> serde_json::Value {
    read_json(&fixture("quants/golden/dots/index.json"))
}

fn types() -> Vec<GgmlType> {
    let index = index();
    let types: Vec<GgmlType> =
        index["types"].as_object().unwrap().keys().map(|name| GgmlType::from_name(name).unwrap_or_else(|| panic!("{name}"))).collect();
    assert_eq!(types.len(), 20, "every quantized type the engine computes");
    types
}

/// llama-quantize's blocks of `blk.0.ffn_down` in `ty`, from where the golden says, checked.
fn weights(ty: GgmlType) -> Vec<u8> {
    let entry = &index()["types"][ty.name()];
    let from = entry["weights_from"].as_str().unwrap();
    let blocks = if let Some(path) = from.strip_suffix(".blocks").map(|p| format!("{p}.blocks")) {
        let at = &read_json(&fixture(&format!("quants/tiny-llama-{ty}.tensors.json")))["tensors"][TENSOR];
        let offset = at["offset"].as_u64().unwrap() as usize;
        std::fs::read(fixture(&path)).unwrap()[offset..offset + at["bytes"].as_u64().unwrap() as usize].to_vec()
    } else if from.starts_with("models/") {
        let file = GgufFile::open(fixture(from)).unwrap();
        file.tensor_data(file.tensor(TENSOR).unwrap()).to_vec()
    } else {
        // the types the engine writes: its quantizer gives llama-quantize --pure's blocks
        let file = GgufFile::open(fixture("models/tiny-llama-F32.gguf")).unwrap();
        let values: Vec<f32> =
            file.tensor_data(file.tensor(TENSOR).unwrap()).chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
        let quantize = ops_for(ty, Isa::Scalar).unwrap().quantize.unwrap();
        let row_bytes = ty.row_bytes(COLS).unwrap();
        let mut blocks = vec![0u8; ROWS * row_bytes];
        for (x, q) in values.chunks_exact(COLS).zip(blocks.chunks_exact_mut(row_bytes)) {
            quantize(x, q);
        }
        blocks
    };
    assert_eq!(sha256(&blocks), entry["sha256_weights"].as_str().unwrap(), "{ty}: llama-quantize's blocks");
    blocks
}

fn activations() -> Vec<f32> {
    let x = read_f32s(&fixture("quants/golden/dots/activations.f32"));
    assert_eq!(x.len(), 5 * COLS);
    x
}

/// `Σ_i |w_i x_i|` for every (activation row, weight row), the weights dequantized (as ggml does,
/// bit for bit: `grid_quants.rs`, `table_quants.rs`).
fn magnitudes(ty: GgmlType, blocks: &[u8], x: &[f32]) -> Vec<f64> {
    let dequantize = ops_for(ty, Isa::Scalar).unwrap().dequantize;
    let mut w = vec![0f32; ROWS * COLS];
    for (q, row) in blocks.chunks_exact(ty.row_bytes(COLS).unwrap()).zip(w.chunks_exact_mut(COLS)) {
        dequantize(q, row);
    }
    x.chunks_exact(COLS)
        .flat_map(|x| w.chunks_exact(COLS).map(move |w| w.iter().zip(x).map(|(&w, &x)| (w as f64 * x as f64).abs()).sum::<f64>()))
        .collect()
}

/// Checks `got` against ggml's dots of activation rows `x_rows` (`got` row after row, each
/// `ROWS` values); returns the largest |difference| as a share of its magnitude.
fn compare(label: &str, got: &[f32], want: &[f32], magnitude: &[f64], x_rows: &[usize]) -> f64 {
    assert_eq!(got.len(), x_rows.len() * ROWS, "{label}");
    let mut worst = 0f64;
    for (g, &xr) in got.chunks_exact(ROWS).zip(x_rows) {
        for (r, &got) in g.iter().enumerate() {
            let at = xr * ROWS + r;
            let share = (got as f64 - want[at] as f64).abs() / magnitude[at].max(f64::MIN_POSITIVE);
            assert!(
                share <= BOUND,
                "{label}: activation row {xr}, weight row {r}: {got} against ggml's {} ({share:.2e} of Σ|w·x| {:.3e})",
                want[at],
                magnitude[at]
            );
            worst = worst.max(share);
        }
    }
    worst
}

struct Case {
    ty: GgmlType,
    blocks: Vec<u8>,
    want: Vec<f32>,
    magnitude: Vec<f64>,
}

fn cases() -> Vec<Case> {
    let x = activations();
    types()
        .into_iter()
        .map(|ty| {
            let blocks = weights(ty);
            let want = read_f32s(&fixture(&format!("quants/golden/dots/{ty}.f32")));
            assert_eq!(want.len(), 5 * ROWS, "{ty}");
            Case { ty, magnitude: magnitudes(ty, &blocks, &x), blocks, want }
        })
        .collect()
}

#[test]
fn every_tiers_row_dot_gives_ggmls_dot_products() {
    let x = activations();
    let index = index();
    let mut report = Vec::new();
    for case in cases() {
        let ty = case.ty;
        for isa in Isa::available() {
            let ops = ops_for(ty, isa).unwrap();
            let act = ops_for(ops.vec_dot_type, isa).unwrap();
            let act_bytes = ops.vec_dot_type.row_bytes(COLS).unwrap();
            let mut xq = vec![0u8; 5 * act_bytes];
            for (x, q) in x.chunks_exact(COLS).zip(xq.chunks_exact_mut(act_bytes)) {
                (act.quantize_activations)(x, q);
            }
            assert_eq!(
                sha256(&xq),
                index["types"][ty.name()]["sha256_activations_quantized"].as_str().unwrap(),
                "{ty} on {isa}: the activations as ggml quantizes them ({})",
                ops.vec_dot_type
            );
            let row_bytes = ty.row_bytes(COLS).unwrap();
            let got: Vec<f32> =
                xq.chunks_exact(act_bytes).flat_map(|q| case.blocks.chunks_exact(row_bytes).map(move |w| (ops.vec_dot)(w, q))).collect();
            let worst = compare(&format!("{ty} row dot on {isa}"), &got, &case.want, &case.magnitude, &[0, 1, 2, 3, 4]);
            report.push(format!("{ty:<8} {isa:<7} row dot: worst {worst:.1e} of Σ|w·x|"));
        }
    }
    eprintln!("{}", report.join("\n"));
}

/// The weights as a one-tensor file, for a backend's `upload_matrix`.
fn matrix_file(case: &Case) -> Arc<GgufFile> {
    let mut w = GgufWriter::new();
    w.add_tensor(TENSOR.to_string(), &[COLS as u64, ROWS as u64], case.ty, case.blocks.clone()).unwrap();
    Arc::new(GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap())
}

/// `b`'s products of the weights with activation rows `x_rows` in one batch.
fn products<B: Backend>(b: &B, m: &B::Matrix, x: &[f32], x_rows: &[usize]) -> Vec<f32> {
    let batch: Vec<f32> = x_rows.iter().flat_map(|&r| x[r * COLS..(r + 1) * COLS].iter().copied()).collect();
    let input = b.upload_tensor(x_rows.len(), COLS, &batch).unwrap();
    b.to_host(b.matmul_each(&[m], &[None], &input).unwrap().remove(0)).unwrap()
}

#[test]
fn the_cpu_backends_products_give_ggmls_dot_products_on_every_tier_and_batch() {
    // one row (the one-row paths), the five together (panel tiles), and eighty (sixteen rows or
    // more: the AVX-512 pair kernels and the tile unit where the tier has them)
    let x = activations();
    let batches: [Vec<usize>; 3] = [vec![2], (0..5).collect(), (0..80).map(|r| r % 5).collect()];
    let mut report = Vec::new();
    for case in cases() {
        let file = matrix_file(&case);
        for isa in Isa::available() {
            let b = CpuBackend::with_isa(isa);
            let m = b.upload_matrix(&file, file.tensor(TENSOR).unwrap(), ROWS, COLS).unwrap();
            let mut worst = 0f64;
            for rows in &batches {
                let label = format!("{} product of {} rows on {isa}", case.ty, rows.len());
                worst = worst.max(compare(&label, &products(&b, &m, &x, rows), &case.want, &case.magnitude, rows));
            }
            report.push(format!("{:<8} {isa:<7} products: worst {worst:.1e} of Σ|w·x|", case.ty));
        }
    }
    eprintln!("{}", report.join("\n"));
}

#[cfg(feature = "sim")]
#[test]
fn the_simulated_gpus_products_give_ggmls_dot_products_on_exactly_held_activations() {
    // The CUDA kernels on host threads quantize activations to Q8_1 blocks of 32 where ggml's CPU
    // uses Q8_K blocks of 256 for most types: the same values only on the lattice row (the fifth),
    // which both hold exactly. One row (the matrix-vector kernel), 8 (its rows form) and 40 (the
    // tensor-core tiles).
    let b = engine::backend::kernel::SimBackend::new();
    let x = activations();
    let mut report = Vec::new();
    for case in cases() {
        let file = matrix_file(&case);
        let m = b.upload_matrix(&file, file.tensor(TENSOR).unwrap(), ROWS, COLS).unwrap();
        let mut worst = 0f64;
        for n in [1usize, 8, 40] {
            let rows = vec![4usize; n];
            let label = format!("{} simulated GPU product of {n} rows", case.ty);
            worst = worst.max(compare(&label, &products(&b, &m, &x, &rows), &case.want, &case.magnitude, &rows));
        }
        report.push(format!("{:<8} simulated GPU: worst {worst:.1e} of Σ|w·x|", case.ty));
    }
    eprintln!("{}", report.join("\n"));
}
