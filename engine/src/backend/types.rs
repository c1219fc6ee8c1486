//! Value types shared by every backend and the model graphs: the rotary layout, the shape of an
//! attention call, the activation functions, and where an input row comes from.

/// Rotary position embedding layout, as ggml names them: NORM rotates adjacent pairs
/// `(x[2i], x[2i+1])` (llama, granite), NEOX rotates halves `(x[i], x[i + d/2])` (qwen2, gemma3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeKind {
    Norm,
    Neox,
}

/// YaRN's blend of interpolated and extrapolated angles (`rope.scaling.type = yarn`): pair `i`
/// takes `ext_factor · ramp(i)` of the extrapolated angle, the ramp falling from 1 to 0 between
/// the correction dims (ggml's `rope_yarn`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Yarn {
    pub ext_factor: f32,
    pub corr_dims: [f32; 2],
}

impl Yarn {
    /// The correction dims of `n_dims` rotated values trained on `n_ctx_orig` positions
    /// (ggml's `ggml_rope_yarn_corr_dims`, in the same f32 operations).
    pub fn corr_dims(n_dims: usize, n_ctx_orig: usize, freq_base: f32, beta_fast: f32, beta_slow: f32) -> [f32; 2] {
        let dim = |n_rot: f32| n_dims as f32 * (n_ctx_orig as f32 / (n_rot * 2.0 * std::f32::consts::PI)).ln() / (2.0 * freq_base.ln());
        [dim(beta_fast).floor().max(0.0), dim(beta_slow).ceil().min(n_dims as f32 - 1.0)]
    }
}

/// The rotation of one `rope` call: every head's first `n_dims` values, at each row's position.
/// Pair `i`'s angle is `pos · base^(-2i/n_dims) / factors[i] · freq_scale` (blended by YaRN
/// where it applies), and its cosine and sine are scaled by `attn_factor` (and YaRN's
/// magnitude correction), as ggml's `rope_ext` computes them.
#[derive(Clone, Debug, PartialEq)]
pub struct Rope {
    pub kind: RopeKind,
    pub head_dim: usize,
    pub n_dims: usize,
    pub freq_base: f32,
    pub freq_scale: f32,
    /// Divisors of the pairs' angles, `n_dims / 2` of them: Llama 3.1's `rope_freqs`, Phi-3's
    /// LongRoPE factors.
    pub factors: Option<std::sync::Arc<[f32]>>,
    pub yarn: Option<Yarn>,
    pub attn_factor: f32,
}

impl Rope {
    /// The plain rotation: no factors, no YaRN, cosines and sines unscaled.
    pub fn plain(kind: RopeKind, head_dim: usize, n_dims: usize, freq_base: f32, freq_scale: f32) -> Rope {
        Rope { kind, head_dim, n_dims, freq_base, freq_scale, factors: None, yarn: None, attn_factor: 1.0 }
    }

    /// `(cos, sin)` of every pair at position `pos`: the angles built by repeated f32 products,
    /// as ggml builds them (`ggml_rope_cache_init`), so every backend and tier gets these bits.
    pub fn angles(&self, pos: u32, out: &mut [(f32, f32)]) {
        let theta_scale = self.freq_base.powf(-2.0 / self.n_dims as f32);
        let mut theta = pos as f32;
        for (i, c) in out.iter_mut().enumerate() {
            let extrapolated = match &self.factors {
                Some(f) => theta / f[i],
                None => theta,
            };
            let interpolated = self.freq_scale * extrapolated;
            let (angle, mscale) = match self.yarn {
                None => (interpolated, self.attn_factor),
                Some(y) => {
                    let [low, high] = y.corr_dims;
                    let ramp = 1.0 - ((i as f32 - low) / (high - low).max(0.001)).clamp(0.0, 1.0);
                    let mix = ramp * y.ext_factor;
                    (interpolated * (1.0 - mix) + extrapolated * mix, self.attn_factor * (1.0 + 0.1 * (1.0 / self.freq_scale).ln()))
                }
            };
            *c = (angle.cos() * mscale, angle.sin() * mscale);
            theta *= theta_scale;
        }
    }
}

/// Column blocks of a tensor's rows: `count` runs of `width` values, the first at column `start`,
/// each `stride` after the one before (the same part of every head of a row, or one run of
/// columns when `count` is 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ColumnBlocks {
    pub start: usize,
    pub stride: usize,
    pub width: usize,
    pub count: usize,
}

impl ColumnBlocks {
    /// One run of `width` columns from `start`.
    pub fn run(start: usize, width: usize) -> ColumnBlocks {
        ColumnBlocks { start, stride: width, width, count: 1 }
    }

    /// Part `[offset, offset + width)` of each of `count` heads of `head` values.
    pub fn heads(count: usize, head: usize, offset: usize, width: usize) -> ColumnBlocks {
        ColumnBlocks { start: offset, stride: head, width, count }
    }

    /// Why the blocks do not fit rows of `cols` values (or overlap), if they do not.
    pub fn misfit(&self, cols: usize) -> Option<String> {
        let end = self.count.checked_sub(1).map(|last| self.start + last * self.stride + self.width);
        match end {
            Some(end) if end > cols => Some(format!("{self:?} end at column {end} of {cols}")),
            Some(_) if self.count > 1 && self.width > self.stride => Some(format!("{self:?} overlap")),
            _ => None,
        }
    }
}

/// The shape of an attention call.
#[derive(Clone, Copy, Debug)]
pub struct AttentionShape {
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim_k: usize,
    pub head_dim_v: usize,
    pub scale: f32,
    /// Soft cap of the scaled scores, `cap · tanh(s / cap)` (Gemma 2's 50; 0: none), as ggml's
    /// flash attention computes it: the scale divided by the cap first.
    pub softcap: f32,
}

impl AttentionShape {
    /// `n_head` heads sharing `width` values, each its own key/value head, scaled by
    /// 1/sqrt(head_dim) (the encoders: Whisper's, the ViTs').
    pub fn multi_head(width: usize, n_head: usize) -> AttentionShape {
        let head_dim = width / n_head;
        AttentionShape {
            n_head,
            n_head_kv: n_head,
            head_dim_k: head_dim,
            head_dim_v: head_dim,
            scale: 1.0 / (head_dim as f32).sqrt(),
            softcap: 0.0,
        }
    }

    /// A raw score `q · k` as the softmax takes it: scaled, then soft-capped when asked.
    #[inline(always)]
    pub fn score(&self, dot: f32) -> f32 {
        if self.softcap == 0.0 {
            dot * self.scale
        } else {
            self.softcap * (dot * (self.scale / self.softcap)).tanh()
        }
    }

    /// Query heads per key/value head.
    pub fn group(&self) -> usize {
        self.n_head / self.n_head_kv
    }

    /// Values of one query row (all heads).
    pub fn q_dim(&self) -> usize {
        self.n_head * self.head_dim_k
    }

    /// Values of one output row (all heads).
    pub fn out_dim(&self) -> usize {
        self.n_head * self.head_dim_v
    }
}

/// An activation function, applied alone (`activate`) or as the gate of a gated feed-forward
/// block (`act(gate) * up`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// `x · sigmoid(x)`; gated, ggml's SwiGLU with its polynomial exp.
    Silu,
    /// GELU, tanh form, through ggml's f16 table.
    Gelu,
    /// GELU with the exact error function (BERT).
    GeluErf,
    /// gpt-oss's gated unit, gated only: `g' · sigmoid(α g') · (u' + 1)` with
    /// `g' = min(g, limit)`, `u' = clamp(u, -limit, limit)` ([`SWIGLU_OAI_ALPHA`],
    /// [`SWIGLU_OAI_LIMIT`]: the values llama.cpp gives ggml's `swiglu_oai`).
    SwigluOai,
    /// `1 / (1 + e^-x)` with the C library's exp (ggml's `sigmoid`); gated, `sigmoid(g) · u`
    /// (Qwen3.5's gated attention output).
    Sigmoid,
}

/// [`Activation::SwigluOai`]'s slope.
pub const SWIGLU_OAI_ALPHA: f32 = 1.702;
/// [`Activation::SwigluOai`]'s clamp.
pub const SWIGLU_OAI_LIMIT: f32 = 7.0;

/// Where one row of a batch's input comes from: row `id` of an embedding table (a token's
/// embedding, or a position's), or a row given as it is (what a vision projector or an audio
/// encoder feeds a language model, as `llama_batch.embd`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RowInput<'a> {
    Token(u32),
    Embedding(&'a [f32]),
}

/// Positions per KV-cache block: the unit in which cache space is allocated, shared and copied.
pub const BLOCK_POSITIONS: usize = 32;

/// The element type of the KV cache's keys or values: floats, or ggml's 32-value blocks of 8-bit
/// (Q8_0) or 4-bit (Q4_0) quants with one f16 scale, a row of `dim` values taking
/// `dim.div_ceil(32)` blocks (the last one padded with zeros).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KvType {
    F32,
    F16,
    Q8_0,
    Q4_0,
}

impl KvType {
    /// Every type, in the order `--kv-type` lists them.
    pub const ALL: [KvType; 4] = [KvType::F32, KvType::F16, KvType::Q8_0, KvType::Q4_0];

    /// The type llama.cpp names `s` (`--cache-type-k`): f32, f16, q8_0 or q4_0.
    pub fn from_name(s: &str) -> Option<KvType> {
        KvType::ALL.into_iter().find(|t| t.name() == s)
    }

    pub fn name(self) -> &'static str {
        match self {
            KvType::F32 => "f32",
            KvType::F16 => "f16",
            KvType::Q8_0 => "q8_0",
            KvType::Q4_0 => "q4_0",
        }
    }

    /// Whether values are stored as blocks of quants.
    pub fn is_quantized(self) -> bool {
        matches!(self, KvType::Q8_0 | KvType::Q4_0)
    }

    /// Bytes of one row of `dim` values.
    pub fn row_bytes(self, dim: usize) -> usize {
        match self {
            KvType::F32 => 4 * dim,
            KvType::F16 => 2 * dim,
            // an f16 scale and 32 one-byte quants, or 16 bytes of two 4-bit quants each
            KvType::Q8_0 => dim.div_ceil(KV_QUANT_BLOCK) * (2 + 32),
            KvType::Q4_0 => dim.div_ceil(KV_QUANT_BLOCK) * (2 + 16),
        }
    }
}

/// Values per block of a quantized KV type.
pub const KV_QUANT_BLOCK: usize = 32;

/// Where a KV store keeps each position's values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvValues {
    /// Rows of their own, of this many values.
    Rows(usize),
    /// The leading this-many values of the key row, which holds one head (multi-head latent
    /// attention: the key is the latent, then the rotary key, and the value is the latent, as
    /// llama.cpp's cache keeps it): nothing is stored for the values, and they take the keys'
    /// type. With a quantized key type the width is a multiple of [`KV_QUANT_BLOCK`].
    KeyPrefix(usize),
}

impl KvValues {
    /// A value row's width.
    pub fn dim(self) -> usize {
        match self {
            KvValues::Rows(d) | KvValues::KeyPrefix(d) => d,
        }
    }

    /// Whether the values are read from the key rows.
    pub fn in_keys(self) -> bool {
        matches!(self, KvValues::KeyPrefix(_))
    }

    /// The types a store asked for `types` keeps: the keys' for values in the keys.
    pub fn kept_types(self, types: KvTypes) -> KvTypes {
        if self.in_keys() {
            KvTypes::from(types.key)
        } else {
            types
        }
    }

    /// Bytes a store spends on one position's value row of type `ty`: none for values in the
    /// keys.
    pub fn stored_row_bytes(self, ty: KvType) -> usize {
        match self {
            KvValues::Rows(dim) => ty.row_bytes(dim),
            KvValues::KeyPrefix(_) => 0,
        }
    }
}

/// The element types of a KV cache's keys and of its values (llama.cpp's `--cache-type-k` and
/// `--cache-type-v`); one type converts to both.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KvTypes {
    pub key: KvType,
    pub value: KvType,
}

impl From<KvType> for KvTypes {
    fn from(ty: KvType) -> KvTypes {
        KvTypes { key: ty, value: ty }
    }
}

impl KvTypes {
    /// The Walsh-Hadamard blocks that keys and values of these types are stored rotated by, as
    /// llama.cpp rotates a quantized cache's (an outlier's magnitude spread over its block, so
    /// the block's scale fits the rest): for a quantized key type and key heads of a multiple of
    /// 64, the largest power of two from 64 that divides the head (at most 1024); for a quantized
    /// value type and value heads of a multiple of 64, 64. `None`: stored as they are. The
    /// queries turn with the keys, so the scores stay; the attention's output turns back.
    pub fn rotation(&self, head_dim_k: usize, head_dim_v: usize) -> (Option<usize>, Option<usize>) {
        let keys = (self.key.is_quantized() && head_dim_k.is_multiple_of(64)).then(|| {
            let mut n = 64;
            while head_dim_k.is_multiple_of(2 * n) && 2 * n <= 1024 {
                n *= 2;
            }
            n
        });
        let values = (self.value.is_quantized() && head_dim_v.is_multiple_of(64)).then_some(64);
        (keys, values)
    }

    /// The rotation of a cache whose values are the keys' leading `head_dim_v` values
    /// ([`KvValues::KeyPrefix`]): one block for both, the keys' halved until it divides the
    /// values too (a block of a stored key row is then also a block of its value).
    pub fn rotation_in_keys(&self, head_dim_k: usize, head_dim_v: usize) -> Option<usize> {
        let mut block = self.rotation(head_dim_k, head_dim_v).0?;
        while !head_dim_v.is_multiple_of(block) {
            block /= 2;
        }
        (block >= 64).then_some(block)
    }
}

impl std::fmt::Display for KvTypes {
    /// `q8_0`, or `q8_0 keys, f16 values` when they differ.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.key == self.value {
            f.write_str(self.key.name())
        } else {
            write!(f, "{} keys, {} values", self.key.name(), self.value.name())
        }
    }
}

/// The block-table id of one KV-cache block: an index into the backend's block storage.
pub type BlockId = u32;

/// Where one row's key and value go: block `block`, position `offset` inside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvSlot {
    pub block: BlockId,
    pub offset: usize,
}

/// The id of one recurrent-state slot: every recurrent layer's state of one sequence at one
/// length, an index into the backend's state storage.
pub type StateId = u32;

/// Where one layer's state lies in a state slot: `len` values from `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatePart {
    pub offset: usize,
    pub len: usize,
}

/// Positions per chunk of the recurrent layers' chunked form (Mamba-2's selective scan, the
/// gated delta rule). Chunks lie at fixed positions of a sequence (`0..32`, `32..64`, ...): a
/// state slot holds the state at the start of the current chunk and the chunk's rows so far, a
/// row's output is computed from those by one formula, and the state moves on only when a chunk
/// is complete. So a row's bits do not depend on where its pass began (decode, a prompt's pass,
/// a pass resumed from a checkpoint).
pub const RECURRENT_CHUNK: usize = 32;

/// Values of one head's part of a state slot in the chunked form: the state at the chunk's start
/// (`rows` rows of `key_width`), the chunk's row count, then per row of the chunk
/// ([`RECURRENT_CHUNK`] places) its cumulative log-decay, its key (`key_width`) and its value
/// (`rows`).
pub const fn chunk_head_len(rows: usize, key_width: usize) -> usize {
    rows * key_width + 1 + RECURRENT_CHUNK * (1 + key_width + rows)
}

/// A Mamba-2 layer's selective scan: `n_head` heads of `head_dim` values, each with a state of
/// `head_dim` x `d_state`, and `n_group` groups of B and C (`d_state` values each) that
/// consecutive heads share.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SsmShape {
    pub n_head: usize,
    pub head_dim: usize,
    pub n_group: usize,
    pub d_state: usize,
}

impl SsmShape {
    /// Values of one head's part of a state slot ([`chunk_head_len`]): `head_dim` rows of
    /// `d_state`, the keys B, the values `x · Δ`.
    pub fn head_state_len(&self) -> usize {
        chunk_head_len(self.head_dim, self.d_state)
    }

    /// Values of the layer's part of a state slot: every head's, one after the other.
    pub fn state_len(&self) -> usize {
        self.n_head * self.head_state_len()
    }
}

/// A gated delta-net layer's recurrence (Qwen3.5's linear attention): `n_v_heads` heads of
/// `head_dim` values, each with a `head_dim` x `head_dim` state, reading the query and key heads
/// `h % n_k_heads`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeltaShape {
    pub n_k_heads: usize,
    pub n_v_heads: usize,
    pub head_dim: usize,
}

impl DeltaShape {
    /// Values of a row of queries, keys and values together.
    pub fn qkv_width(&self) -> usize {
        (2 * self.n_k_heads + self.n_v_heads) * self.head_dim
    }

    /// Values of one value head's part of a state slot ([`chunk_head_len`]): `head_dim` rows of
    /// `head_dim`, the keys the normalised keys, the values the corrections `u`.
    pub fn head_state_len(&self) -> usize {
        chunk_head_len(self.head_dim, self.head_dim)
    }

    /// Values of the layer's part of a state slot: every value head's, one after the other.
    pub fn state_len(&self) -> usize {
        self.n_v_heads * self.head_state_len()
    }
}

/// One sequence's rows of a batch for a recurrent layer: the rows in position order, the slot
/// whose state the first row continues and which holds the state after the last, and the slots
/// that get a copy of the state after some of the rows (`(i, slot)`: after `rows[i]`), which a
/// later truncation can return to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateRun {
    pub rows: Vec<usize>,
    pub state: StateId,
    pub snapshots: Vec<(usize, StateId)>,
}

/// The positions one query row attends to: `positions` of the keys and values named by `kv`
/// (an index into the call's block tables, or the first batch row of the row's sequence).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttentionRow {
    pub kv: usize,
    pub positions: std::ops::Range<usize>,
}
