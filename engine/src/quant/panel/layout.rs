//! The panel layouts and the repacking of a row-major GGUF matrix into them.
//!
//! Per panel (8 rows) and block column, a layout stores the 8 rows' f16 scales side by side,
//! then the quants as the vectors `V_k` of the module docs, packed as tightly as the file has
//! them (the panels take the file's bytes, give or take the scales' arrangement):
//!
//! | type | bytes per panel block | contents |
//! |---|---|---|
//! | Q4_0 | 144 | `d` 8 x f16, nibbles `P` (4 x 32) |
//! | IQ4_NL | 144 | `d` 8 x f16, level-index nibbles `P` (4 x 32) |
//! | MXFP4 | 136 | E8M0 exponents `e` 8 x u8, code nibbles `P` (4 x 32) |
//! | Q5_0 | 176 | `d`, `P`, fifth bits `H` (32) |
//! | Q8_0 | 272 | `d`, `V_0..V_8` as signed bytes (8 x 32) |
//! | Q4_K | 1184 | `d`, `dmin` 8 x f16, scales and mins (64 + 64), then 8 chunks of `P` |
//! | Q5_K | 1440 | as Q4_K, then 8 chunks of `H` |
//! | IQ4_XS | 1104 | `d`, group scales (64, signed), then 8 chunks of level-index nibbles `P` |
//! | Q6_K | 1680 | `d`, scales (128), 8 chunks of `P`, then 8 chunks of high bits `QH` (2 x 32) |
//!
//! Nibbles: byte `4r + t` of `P_k` (`k < 4`) holds value `4k + t` of row `r` in its low nibble
//! and value `4(k + 4) + t` in its high nibble. Fifth bits: bit `k` of byte `4r + t` of `H` is
//! bit 4 of value `4k + t`. Q6_K's high bits: bits `2i..2i+2` of byte `4r + t` of `QH_h` are bits
//! 4..6 of value `4(4h + i) + t`. Scales and mins (bytes; IQ4_XS's are its 6-bit scales less
//! 32, as signed bytes): pair `p` of row `r` at `16p + 2r`,
//! `(s[2p], s[2p + 1])`, so that widening 16 bytes gives each row's pair of 16-bit scales in its
//! 32-bit lane.

use crate::quant::blocks::{BlockIQ4NL, BlockIQ4XS, BlockMXFP4, BlockQ4K, BlockQ4_0, BlockQ5K, BlockQ5_0, BlockQ6K, BlockQ8_0};
use crate::quant::k_quants::scales::scale_min_k4;
use crate::quant::k_quants::{q4_k, q5_k, q6_k};
use crate::quant::{iq4, q5_0, GgmlType, QK_K};

/// Weight rows per panel.
pub const PANEL_ROWS: usize = 8;

/// Where a type's panel block keeps its parts (byte offsets into one panel block).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PanelLayout {
    pub ty: GgmlType,
    /// The activation format its rows are prepared from (Q8_0 or Q8_K).
    pub act_ty: GgmlType,
    /// Values per block (32, or 256 for the K-quants: 8 chunks of 32).
    pub block_values: usize,
    /// Bytes of one panel block (8 rows).
    pub block_bytes: usize,
    /// Bytes of one prepared activation block.
    pub act_block_bytes: usize,
    /// The fewest activation rows a product takes the panels for where the tier has a row dot
    /// in the panels' order (`panel::row_dot_on`); with fewer it runs that row dot on the
    /// matrix's own bytes (the same bits), which therefore stay mapped. Q6_K's is 3, since its
    /// one-row tile unpacks more than a row dot does (2-core Zen 5, a 110 MB matrix, two
    /// threads, `matvec_throughput` in `backend/cpu/matmul.rs`: 29 GB/s against 51 for one row,
    /// 28 against 39 for two, 25 against 27 for three); 1 for the others, Q8_0 included (its
    /// one-row tile 43 to 48 GB/s against the row dot's 39 to 43 on the same machine and
    /// benchmark, 140 MB).
    pub min_batch: usize,
}

/// Offsets inside a panel block.
pub mod at {
    /// 8 x f16 `d`, every type (MXFP4: 8 exponent bytes).
    pub const D: usize = 0;
    /// Legacy types: the quants after `d`.
    pub const LEGACY_QUANTS: usize = 16;
    /// MXFP4: 8 E8M0 exponent bytes in place of `d`, then the codes' nibbles.
    pub const MXFP4_QUANTS: usize = 8;
    /// Q5_0: the fifth bits after the nibbles.
    pub const Q5_0_HIGH: usize = 144;
    /// Q4_K / Q5_K: `dmin`, scales, mins, nibbles (chunk `c` at `+ 128 c`), Q5_K's fifth bits
    /// (chunk `c` at `+ 32 c`).
    pub const K4_DMIN: usize = 16;
    pub const K4_SCALES: usize = 32;
    pub const K4_MINS: usize = 96;
    pub const K4_NIBBLES: usize = 160;
    pub const Q5K_HIGH: usize = super::block_bytes::Q4_K;
    /// IQ4_XS: scales (4 pairs of 8 groups), nibbles (chunk `c` at `+ 128 c`).
    pub const IQ4XS_SCALES: usize = 16;
    pub const IQ4XS_NIBBLES: usize = 80;
    /// Q6_K: scales (8 pairs of 16 groups), nibbles (chunk `c` at `+ 128 c`), high bits (chunk
    /// `c` at `+ 64 c`).
    pub const Q6K_SCALES: usize = 16;
    pub const Q6K_NIBBLES: usize = 144;
    pub const Q6K_HIGH: usize = 1168;
}

/// Bytes of one panel block (8 rows) of each type: the kernels step through panels by these.
pub mod block_bytes {
    pub const Q4_0: usize = 144;
    pub const MXFP4: usize = 136;
    pub const IQ4_NL: usize = 144;
    pub const Q5_0: usize = 176;
    pub const Q8_0: usize = 272;
    pub const Q4_K: usize = 1184;
    pub const Q5_K: usize = 1440;
    pub const Q6_K: usize = 1680;
    pub const IQ4_XS: usize = 1104;
}

/// Prepared activation blocks (see `prepared`): legacy 40 bytes, K-quant 320 bytes (its quants
/// start 64 bytes in, so that rows of a 64-byte aligned buffer keep them on cache-line
/// boundaries: the AMX tile loads read 64 of them per row).
pub const ACT_LEGACY_BYTES: usize = 40;
pub const ACT_K_BYTES: usize = 320;

impl PanelLayout {
    /// The layout of `ty`, if it is repacked.
    pub fn of(ty: GgmlType) -> Option<PanelLayout> {
        use GgmlType as T;
        let (act_ty, block_values, block_bytes) = match ty {
            T::Q4_0 => (T::Q8_0, 32, block_bytes::Q4_0),
            T::Q5_0 => (T::Q8_0, 32, block_bytes::Q5_0),
            T::Q8_0 => (T::Q8_0, 32, block_bytes::Q8_0),
            T::MXFP4 => (T::Q8_0, 32, block_bytes::MXFP4),
            T::IQ4_NL => (T::Q8_0, 32, block_bytes::IQ4_NL),
            T::Q4_K => (T::Q8_K, QK_K, block_bytes::Q4_K),
            T::Q5_K => (T::Q8_K, QK_K, block_bytes::Q5_K),
            T::Q6_K => (T::Q8_K, QK_K, block_bytes::Q6_K),
            T::IQ4_XS => (T::Q8_K, QK_K, block_bytes::IQ4_XS),
            _ => return None,
        };
        let act_block_bytes = if act_ty == T::Q8_0 { ACT_LEGACY_BYTES } else { ACT_K_BYTES };
        let min_batch = if ty == T::Q6_K { 3 } else { 1 };
        Some(PanelLayout { ty, act_ty, block_values, block_bytes, act_block_bytes, min_batch })
    }
}

/// A matrix repacked into panels: `rows.div_ceil(8)` panels of `blocks` panel blocks each (the
/// last panel's missing rows are zero weights).
pub struct Panels {
    pub layout: PanelLayout,
    pub rows: usize,
    pub cols: usize,
    /// Blocks per row.
    pub blocks: usize,
    data: Vec<u8>,
}

impl std::fmt::Debug for Panels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Panels({} {}x{}, {} bytes)", self.layout.ty, self.rows, self.cols, self.data.len())
    }
}

impl Panels {
    pub fn panel_count(&self) -> usize {
        self.rows.div_ceil(PANEL_ROWS)
    }

    pub fn panel_bytes(&self) -> usize {
        self.blocks * self.layout.block_bytes
    }

    /// The bytes of panel `p`.
    pub fn panel(&self, p: usize) -> &[u8] {
        &self.data[p * self.panel_bytes()..(p + 1) * self.panel_bytes()]
    }

    /// The bytes of panels `p` and `p + 1`.
    pub fn panel_pair(&self, p: usize) -> &[u8] {
        &self.data[p * self.panel_bytes()..(p + 2) * self.panel_bytes()]
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.data.len()
    }
}

/// Repacks the row-major matrix `data` (`rows` rows of `cols` values of `ty`) into panels;
/// `None` if `ty` has no panel layout or `data` is not that matrix.
pub fn repack(ty: GgmlType, rows: usize, cols: usize, data: &[u8]) -> Option<Panels> {
    let layout = PanelLayout::of(ty)?;
    let row_bytes = ty.row_bytes(cols)?;
    if data.len() != rows * row_bytes || !cols.is_multiple_of(layout.block_values) {
        return None;
    }
    let blocks = cols / layout.block_values;
    let src_block = row_bytes / blocks.max(1);
    let panels = rows.div_ceil(PANEL_ROWS);
    let mut out = vec![0u8; panels * blocks * layout.block_bytes];
    let zero = vec![0u8; src_block];
    // panels are independent: repacked in parallel
    use rayon::prelude::*;
    out.par_chunks_exact_mut((blocks * layout.block_bytes).max(1)).take(panels).enumerate().for_each(|(p, panel)| {
        for (b, dst) in panel.chunks_exact_mut(layout.block_bytes).enumerate() {
            let src: [&[u8]; PANEL_ROWS] = std::array::from_fn(|r| {
                let row = p * PANEL_ROWS + r;
                if row < rows {
                    &data[row * row_bytes + b * src_block..row * row_bytes + (b + 1) * src_block]
                } else {
                    &zero
                }
            });
            let decoded = src.map(|s| RowBlock::decode(ty, s));
            encode(&layout, &decoded, dst);
        }
    });
    Some(Panels { layout, rows, cols, blocks, data: out })
}

/// One row's block, decoded: f16 scales as stored (MXFP4: its exponent byte in `d[0]`), quants
/// in element order (unsigned, MXFP4's codes, or the signed bytes of Q8_0), per-group scales
/// and mins.
struct RowBlock {
    d: [u8; 2],
    dmin: [u8; 2],
    q: [u8; QK_K],
    scales: [u8; 16],
    mins: [u8; 8],
}

impl RowBlock {
    fn decode(ty: GgmlType, bytes: &[u8]) -> RowBlock {
        let mut rb = RowBlock { d: [0; 2], dmin: [0; 2], q: [0; QK_K], scales: [0; 16], mins: [0; 8] };
        match ty {
            GgmlType::Q4_0 => {
                let b: &BlockQ4_0 = bytemuck::from_bytes(bytes);
                rb.d = b.d;
                split_nibbles(&b.qs, &mut rb.q[..32]);
            }
            GgmlType::IQ4_NL => {
                let b: &BlockIQ4NL = bytemuck::from_bytes(bytes);
                rb.d = b.d;
                split_nibbles(&b.qs, &mut rb.q[..32]);
            }
            GgmlType::MXFP4 => {
                let b: &BlockMXFP4 = bytemuck::from_bytes(bytes);
                rb.d = [b.e, 0];
                split_nibbles(&b.qs, &mut rb.q[..32]);
            }
            GgmlType::Q5_0 => {
                let b: &BlockQ5_0 = bytemuck::from_bytes(bytes);
                rb.d = b.d;
                rb.q[..32].copy_from_slice(&q5_0::unpack5(&b.qs, b.qh));
            }
            GgmlType::Q8_0 => {
                let b: &BlockQ8_0 = bytemuck::from_bytes(bytes);
                rb.d = b.d;
                rb.q[..32].copy_from_slice(bytemuck::cast_slice(&b.qs));
            }
            GgmlType::Q4_K | GgmlType::Q5_K => {
                let (d, dmin, scales, q) = if ty == GgmlType::Q4_K {
                    let b: &BlockQ4K = bytemuck::from_bytes(bytes);
                    (b.d, b.dmin, b.scales, q4_k::unpack(&b.qs))
                } else {
                    let b: &BlockQ5K = bytemuck::from_bytes(bytes);
                    (b.d, b.dmin, b.scales, q5_k::unpack(b))
                };
                (rb.d, rb.dmin, rb.q) = (d, dmin, q);
                for j in 0..8 {
                    (rb.scales[j], rb.mins[j]) = scale_min_k4(j, &scales);
                }
            }
            GgmlType::Q6_K => {
                let b: &BlockQ6K = bytemuck::from_bytes(bytes);
                rb.d = b.d;
                rb.q = q6_k::unpack(b);
                rb.scales = bytemuck::cast(b.scales);
            }
            GgmlType::IQ4_XS => {
                let b: &BlockIQ4XS = bytemuck::from_bytes(bytes);
                rb.d = b.d;
                for g in 0..8 {
                    split_nibbles(&b.qs[16 * g..16 * g + 16], &mut rb.q[32 * g..32 * g + 32]);
                    rb.scales[g] = iq4::xs::group_scale_of(b, g) as i8 as u8;
                }
            }
            _ => unreachable!("{ty} has no panel layout"),
        }
        rb
    }
}

/// A 32-value group's 16 nibble bytes in value order: the low nibbles are values 0..16, the
/// high ones 16..32.
fn split_nibbles(qs: &[u8], q: &mut [u8]) {
    for (j, &byte) in qs.iter().enumerate().take(16) {
        q[j] = byte & 0x0F;
        q[j + 16] = byte >> 4;
    }
}

/// Writes the panel block of 8 decoded rows.
fn encode(l: &PanelLayout, rows: &[RowBlock; PANEL_ROWS], dst: &mut [u8]) {
    let chunk = |c: usize| -> [&[u8]; PANEL_ROWS] { std::array::from_fn(|r| &rows[r].q[32 * c..32 * c + 32]) };
    if l.ty == GgmlType::MXFP4 {
        for (r, rb) in rows.iter().enumerate() {
            dst[at::D + r] = rb.d[0];
        }
        put_nibbles(chunk(0), &mut dst[at::MXFP4_QUANTS..at::MXFP4_QUANTS + 128]);
        return;
    }
    for (r, rb) in rows.iter().enumerate() {
        dst[at::D + 2 * r..at::D + 2 * r + 2].copy_from_slice(&rb.d);
    }
    match l.ty {
        GgmlType::Q4_0 | GgmlType::IQ4_NL => put_nibbles(chunk(0), &mut dst[at::LEGACY_QUANTS..at::LEGACY_QUANTS + 128]),
        GgmlType::Q5_0 => {
            put_nibbles(chunk(0), &mut dst[at::LEGACY_QUANTS..at::LEGACY_QUANTS + 128]);
            put_fifth_bits(chunk(0), &mut dst[at::Q5_0_HIGH..at::Q5_0_HIGH + 32]);
        }
        GgmlType::Q8_0 => {
            for (r, q) in chunk(0).iter().enumerate() {
                for k in 0..8 {
                    let o = at::LEGACY_QUANTS + 32 * k + 4 * r;
                    dst[o..o + 4].copy_from_slice(&q[4 * k..4 * k + 4]);
                }
            }
        }
        GgmlType::Q4_K | GgmlType::Q5_K => {
            for (r, rb) in rows.iter().enumerate() {
                dst[at::K4_DMIN + 2 * r..at::K4_DMIN + 2 * r + 2].copy_from_slice(&rb.dmin);
                for p in 0..4 {
                    let o = 16 * p + 2 * r;
                    dst[at::K4_SCALES + o..at::K4_SCALES + o + 2].copy_from_slice(&rb.scales[2 * p..2 * p + 2]);
                    dst[at::K4_MINS + o..at::K4_MINS + o + 2].copy_from_slice(&rb.mins[2 * p..2 * p + 2]);
                }
            }
            for c in 0..8 {
                put_nibbles(chunk(c), &mut dst[at::K4_NIBBLES + 128 * c..at::K4_NIBBLES + 128 * (c + 1)]);
                if l.ty == GgmlType::Q5_K {
                    put_fifth_bits(chunk(c), &mut dst[at::Q5K_HIGH + 32 * c..at::Q5K_HIGH + 32 * (c + 1)]);
                }
            }
        }
        GgmlType::IQ4_XS => {
            for (r, rb) in rows.iter().enumerate() {
                for p in 0..4 {
                    let o = at::IQ4XS_SCALES + 16 * p + 2 * r;
                    dst[o..o + 2].copy_from_slice(&rb.scales[2 * p..2 * p + 2]);
                }
            }
            for c in 0..8 {
                put_nibbles(chunk(c), &mut dst[at::IQ4XS_NIBBLES + 128 * c..at::IQ4XS_NIBBLES + 128 * (c + 1)]);
            }
        }
        GgmlType::Q6_K => {
            for (r, rb) in rows.iter().enumerate() {
                for p in 0..8 {
                    let o = at::Q6K_SCALES + 16 * p + 2 * r;
                    dst[o..o + 2].copy_from_slice(&rb.scales[2 * p..2 * p + 2]);
                }
            }
            for c in 0..8 {
                put_nibbles(chunk(c), &mut dst[at::Q6K_NIBBLES + 128 * c..at::Q6K_NIBBLES + 128 * (c + 1)]);
                let high = &mut dst[at::Q6K_HIGH + 64 * c..at::Q6K_HIGH + 64 * (c + 1)];
                for (r, q) in chunk(c).iter().enumerate() {
                    for t in 0..4 {
                        for h in 0..2 {
                            high[32 * h + 4 * r + t] = (0..4).map(|i| ((q[4 * (4 * h + i) + t] >> 4) & 3) << (2 * i)).fold(0, |a, b| a | b);
                        }
                    }
                }
            }
        }
        _ => unreachable!(),
    }
}

/// The nibbles `P_0..P_4` of a chunk of 32 values of 8 rows (128 bytes).
fn put_nibbles(q: [&[u8]; PANEL_ROWS], out: &mut [u8]) {
    // fixed sizes: every index below is known in range, so the loops unroll without checks
    // (repacking a model at load runs this for every chunk)
    let out: &mut [u8; 32 * PANEL_ROWS / 2] = (&mut out[..32 * PANEL_ROWS / 2]).try_into().expect("128 bytes");
    for (r, q) in q.iter().enumerate() {
        let q: &[u8; 32] = q[..32].try_into().expect("a chunk of 32 values");
        for k in 0..4 {
            for t in 0..4 {
                out[32 * k + 4 * r + t] = (q[4 * k + t] & 0x0F) | ((q[4 * (k + 4) + t] & 0x0F) << 4);
            }
        }
    }
}

/// The fifth bits `H` of a chunk of 32 values of 8 rows (32 bytes).
fn put_fifth_bits(q: [&[u8]; PANEL_ROWS], out: &mut [u8]) {
    for (r, q) in q.iter().enumerate() {
        for t in 0..4 {
            out[4 * r + t] = (0..8).map(|k| ((q[4 * k + t] >> 4) & 1) << k).fold(0, |a, b| a | b);
        }
    }
}
