//! K-quants and activation quantizers against ggml's own output: dequantization bit for bit,
//! `llama-quantize`'s K-quant blocks byte for byte from the F32 model, and the Q8_0 / Q8_1 /
//! Q8_K activation blocks byte for byte.

use engine::quant::blocks::BlockQ8K;
use engine::quant::k_quants::q8_k;
use engine::quant::{ops_for, q8_0, q8_1, GgmlType, Isa, QK_K};
use engine_tests::{fixture, read_f32s, read_json};
use sha2::{Digest, Sha256};

const K_TYPES: [GgmlType; 5] =
    [GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K];

/// Just enough GGUF to find tensors by name; the engine's own reader replaces it later.
mod mini_gguf {
    pub struct Tensor {
        pub name: String,
        pub ty: u32,
        pub n_elements: usize,
        pub offset: usize,
    }

    pub struct File {
        pub bytes: Vec<u8>,
        pub data_start: usize,
        pub tensors: Vec<Tensor>,
    }

    struct Cursor<'a> {
        b: &'a [u8],
        pos: usize,
    }

    impl Cursor<'_> {
        fn take(&mut self, n: usize) -> &[u8] {
            let s = &self.b[self.pos..self.pos + n];
            self.pos += n;
            s
        }
        fn u32(&mut self) -> u32 {
            u32::from_le_bytes(self.take(4).try_into().unwrap())
        }
        fn u64(&mut self) -> u64 {
            u64::from_le_bytes(self.take(8).try_into().unwrap())
        }
        fn string(&mut self) -> String {
            let n = self.u64() as usize;
            String::from_utf8(self.take(n).to_vec()).unwrap()
        }
        /// Skips a value of GGUF value type `ty`, returning it when it is an integer.
        fn value(&mut self, ty: u32) -> Option<u64> {
            match ty {
                0 | 1 | 7 => Some(self.take(1)[0] as u64),
                2 | 3 => Some(u16::from_le_bytes(self.take(2).try_into().unwrap()) as u64),
                4 | 5 => Some(self.u32() as u64),
                6 => {
                    self.take(4);
                    None
                }
                8 => {
                    self.string();
                    None
                }
                9 => {
                    let (ety, n) = (self.u32(), self.u64());
                    for _ in 0..n {
                        self.value(ety);
                    }
                    None
                }
                10 | 11 => Some(self.u64()),
                12 => {
                    self.take(8);
                    None
                }
                _ => panic!("unknown GGUF value type {ty}"),
            }
        }
    }

    pub fn open(path: &std::path::Path) -> File {
        let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut c = Cursor { b: &bytes, pos: 0 };
        assert_eq!(c.take(4), b"GGUF");
        assert_eq!(c.u32(), 3, "GGUF version");
        let (n_tensors, n_kv) = (c.u64(), c.u64());
        let mut alignment = 32;
        for _ in 0..n_kv {
            let key = c.string();
            let ty = c.u32();
            let v = c.value(ty);
            if key == "general.alignment" {
                alignment = v.unwrap() as usize;
            }
        }
        let mut tensors = Vec::new();
        for _ in 0..n_tensors {
            let name = c.string();
            let n_dims = c.u32();
            let n_elements = (0..n_dims).map(|_| c.u64() as usize).product();
            let ty = c.u32();
            let offset = c.u64() as usize;
            tensors.push(Tensor { name, ty, n_elements, offset });
        }
        let data_start = c.pos.div_ceil(alignment) * alignment;
        File { bytes, data_start, tensors }
    }

    impl File {
        pub fn tensor(&self, name: &str) -> &Tensor {
            self.tensors.iter().find(|t| t.name == name).unwrap_or_else(|| panic!("no tensor {name}"))
        }

        pub fn data(&self, t: &Tensor, n_bytes: usize) -> &[u8] {
            &self.bytes[self.data_start + t.offset..self.data_start + t.offset + n_bytes]
        }
    }
}

fn model(name: &str) -> mini_gguf::File {
    mini_gguf::open(&fixture(&format!("models/{name}")))
}

/// A tensor's type and raw bytes.
fn tensor_bytes<'a>(f: &'a mini_gguf::File, t: &mini_gguf::Tensor) -> (GgmlType, &'a [u8]) {
    let ty = GgmlType::from_id(t.ty).unwrap();
    (ty, f.data(t, ty.row_bytes(t.n_elements).unwrap()))
}

fn dequantize(ty: GgmlType, bytes: &[u8], n: usize) -> Vec<f32> {
    let mut out = vec![0.0f32; n];
    (ops_for(ty, Isa::Scalar).unwrap().dequantize)(bytes, &mut out);
    out
}

#[test]
fn dequantization_is_bit_exact() {
    for ty in K_TYPES {
        let f = model(&format!("tiny-llama-{}.gguf", ty.name()));
        let t = f.tensor("blk.0.attn_q.weight");
        let (file_ty, bytes) = tensor_bytes(&f, t);
        assert_eq!(file_ty, ty);
        let got = dequantize(ty, bytes, t.n_elements);
        let want =
            read_f32s(&fixture(&format!("models/dequant/tiny-llama-{}.blk.0.attn_q.weight.f32", ty.name())));
        assert_eq!(got.len(), want.len());
        let bad = got.iter().zip(&want).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
        assert_eq!(bad, 0, "{}: {bad} of {} values differ from ggml", ty.name(), want.len());
    }
}

/// Every K-quant tensor of both tiny models: the sha256 of our dequantized values equals the
/// sha256 of ggml's.
#[test]
fn dequantization_of_every_tensor_matches_ggml_sha256() {
    let sums = read_json(&fixture("models/dequant/sha256.json"));
    let mut checked = 0;
    for m in ["tiny-llama", "tiny-granite"] {
        for ty in K_TYPES {
            let file = format!("{m}-{}.gguf", ty.name());
            let f = model(&file);
            for t in &f.tensors {
                let (tty, bytes) = tensor_bytes(&f, t);
                if !K_TYPES.contains(&tty) {
                    continue;
                }
                let mut h = Sha256::new();
                for v in dequantize(tty, bytes, t.n_elements) {
                    h.update(v.to_le_bytes());
                }
                let got = format!("{:x}", h.finalize());
                let want = sums[&file][&t.name]["sha256_f32"].as_str().unwrap();
                assert_eq!(got, want, "{file} {}", t.name);
                checked += 1;
            }
        }
    }
    assert!(checked >= 70, "only {checked} K-quant tensors found");
}

/// `llama-quantize --pure` (no importance matrix) made the K-quant files from the F32 model
/// with ggml's reference quantizers; ours reproduce every block byte for byte.
#[test]
fn quantization_reproduces_llama_quantize() {
    for m in ["tiny-llama", "tiny-granite"] {
        let src = model(&format!("{m}-F32.gguf"));
        for ty in K_TYPES {
            let file = format!("{m}-{}.gguf", ty.name());
            let f = model(&file);
            let quantize = ops_for(ty, Isa::Scalar).unwrap().quantize;
            let block_bytes = ty.type_size();
            let (mut blocks, mut bad) = (0usize, Vec::new());
            for t in &f.tensors {
                let (tty, want) = tensor_bytes(&f, t);
                if tty != ty {
                    continue;
                }
                let (sty, raw) = tensor_bytes(&src, src.tensor(&t.name));
                assert_eq!(sty, GgmlType::F32);
                let x: Vec<f32> =
                    raw.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
                let mut got = vec![0u8; want.len()];
                quantize(&x, &mut got);
                for (i, (g, w)) in
                    got.chunks_exact(block_bytes).zip(want.chunks_exact(block_bytes)).enumerate()
                {
                    blocks += 1;
                    if g != w && bad.len() < 5 {
                        bad.push(format!("{} block {i}: {g:?} vs {w:?}", t.name));
                    }
                }
            }
            assert!(blocks > 0, "{file}: no {} tensors", ty.name());
            assert!(bad.is_empty(), "{file}: blocks differ from llama-quantize:\n{}", bad.join("\n"));
        }
    }
}

/// The activation vectors of `act-quant/`, and the expected bytes of one output kind.
fn act_cases(kind: &str) -> Vec<(String, Vec<f32>, Vec<u8>)> {
    let index = read_json(&fixture("models/act-quant/index.json"));
    let mut cases = Vec::new();
    for (name, v) in index["vectors"].as_object().unwrap() {
        let x = read_f32s(&fixture(&format!("models/act-quant/{}", v["file"].as_str().unwrap())));
        assert_eq!(x.len(), v["n"].as_u64().unwrap() as usize);
        let out = v["outputs"][kind]["file"].as_str().unwrap();
        let want = std::fs::read(fixture(&format!("models/act-quant/{out}"))).unwrap();
        cases.push((name.clone(), x, want));
    }
    assert_eq!(cases.len(), 8);
    cases
}

/// The differing bytes, as `offset: got vs want`, for a failure message.
fn diff(got: &[u8], want: &[u8]) -> String {
    let d: Vec<String> = (0..got.len())
        .filter(|&i| got[i] != want[i])
        .take(20)
        .map(|i| format!("{i}: {} vs {}", got[i], want[i]))
        .collect();
    d.join(", ")
}

#[test]
fn q8_k_activations_are_byte_exact() {
    for (name, x, want) in act_cases("q8_K_ref") {
        let mut got = vec![0u8; want.len()];
        q8_k::quantize_row(&x, &mut got);
        assert!(got == want, "{name}: {}", diff(&got, &want));
    }
}

#[test]
fn q8_0_and_q8_1_activations_are_byte_exact() {
    for (kind, quantize) in
        [("q8_0_ref", q8_0::quantize_row as fn(&[f32], &mut [u8])), ("q8_1_ref", q8_1::quantize_row)]
    {
        for (name, x, want) in act_cases(kind) {
            let mut got = vec![0u8; want.len()];
            quantize(&x, &mut got);
            assert!(got == want, "{kind} {name}: {}", diff(&got, &want));
        }
    }
}

/// The integer dot of every row of each real K-quant tensor with Q8_K activations equals the
/// f64 dot of the dequantized operands to 1e-5 of `Σ|w_i a_i|`.
#[test]
fn dot_products_on_real_tensors_match_exact_math() {
    let a = read_f32s(&fixture("models/act-quant/vec0-256.f32"));
    let mut ab = vec![0u8; std::mem::size_of::<BlockQ8K>()];
    q8_k::quantize_row(&a, &mut ab);
    let mut ad = vec![0.0f32; QK_K];
    q8_k::dequantize_row(&ab, &mut ad);
    for ty in K_TYPES {
        let f = model(&format!("tiny-llama-{}.gguf", ty.name()));
        let (_, bytes) = tensor_bytes(&f, f.tensor("blk.0.attn_q.weight"));
        let ops = ops_for(ty, Isa::Scalar).unwrap();
        assert_eq!(ops.vec_dot_type, GgmlType::Q8_K);
        for row in bytes.chunks_exact(ty.type_size()) {
            let w = dequantize(ty, row, QK_K);
            let exact: f64 = w.iter().zip(&ad).map(|(&p, &q)| p as f64 * q as f64).sum();
            let scale: f64 = w.iter().zip(&ad).map(|(&p, &q)| (p as f64 * q as f64).abs()).sum();
            let got = (ops.vec_dot)(row, &ab) as f64;
            assert!((got - exact).abs() <= 1e-5 * scale, "{}: {got} vs {exact}", ty.name());
        }
    }
}
