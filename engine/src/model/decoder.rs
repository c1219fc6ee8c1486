//! The forward pass shared by the decoder-only architectures (llama, granite, qwen2, qwen3,
//! smollm3, olmo2, gemma3, gpt-oss, deepseek2's latent attention through `mla.rs`, ...),
//! over any [`Backend`]: a batch of (sequence, input, position) entries goes through every layer
//! at once (each weight matrix is multiplied with all the batch's rows in one call), keys and
//! values are written to the KV cache, and logits come out for the entries that ask for them.
//! What differs between architectures is read from `ModelConfig` and its `ArchFacts` row, never
//! from the name.
//!
//! Batch invariance: every row is normalised, projected, rotated and attended independently of
//! the other rows, by kernels whose summation order does not depend on the batch, so an entry's
//! logits are bitwise the same alone, in a prefill batch or beside other sequences.

use super::arch::EmbeddingScale;
use super::blocks::Linear;
use super::blocks::{gated_ffn, linear, linear_each, ScaleAt};
use super::config::ModelConfig;
use super::error::ModelError;
use super::lora::{LoraRows, LoraScale};
use super::weights::{DecoderWeights, FeedForward, Mixer, Projections};
use super::{delta_net, mamba2, mla, moe, short_conv};
use super::{InputEntry, Logits};
use crate::backend::{Activation, AttentionRow, Backend, BackendError, BlockId, ColumnBlocks, KvSlot, KvSource, RowInput, StateRun};
use crate::kv_cache::{KvCache, SeqId};

/// Checks the batch against the cache and makes room: every sequence's entries must continue it,
/// in order, from its current length; the blocks they will be written to are made the
/// sequence's own (reserved, and copied first where shared), and so are its recurrent states.
/// Returns each sequence's run of rows for the recurrent layers (none without them).
pub(crate) fn check_batch(c: &ModelConfig, kv: &mut KvCache, batch: &[InputEntry<'_>]) -> Result<Vec<StateRun>, ModelError> {
    if batch.is_empty() {
        return Err(ModelError::BadBatch("the batch is empty".into()));
    }
    // each sequence's first position and the position after its last entry
    let mut spans: std::collections::BTreeMap<SeqId, (usize, usize)> = Default::default();
    for (i, e) in batch.iter().enumerate() {
        match e.input {
            RowInput::Token(t) if t as usize >= c.n_vocab => {
                return Err(ModelError::BadBatch(format!("entry {i}: token {t} is outside the vocabulary of {}", c.n_vocab)));
            }
            RowInput::Embedding(row) if row.len() != c.n_embd => {
                return Err(ModelError::BadBatch(format!("entry {i}: an embedding row of {} values, not {}", row.len(), c.n_embd)));
            }
            _ => {}
        }
        let (_, expected) = spans.entry(e.seq).or_insert_with(|| {
            let len = kv.seq_len(e.seq);
            (len, len)
        });
        if e.pos as usize != *expected {
            return Err(ModelError::BadBatch(format!("entry {i}: sequence {} continues at position {expected}, not {}", e.seq, e.pos)));
        }
        *expected += 1;
    }
    let mut runs = Vec::new();
    for (&seq, &(start, end)) in &spans {
        kv.prepare_write(seq, start..end)?;
        if let Some(states) = kv.prepare_states(seq, start..end)? {
            let rows = (0..batch.len()).filter(|&i| batch[i].seq == seq).collect();
            runs.push(states.run(rows, start));
        }
    }
    Ok(runs)
}

/// The input rows times the model's embedding scale: every row for Granite (whose graph scales
/// its input whatever it is), only the tokens' rows for Gemma (llama.cpp leaves an embedding
/// row, an image's, as the projector made it). Gemma's given rows are added after the scaling
/// to rows of zeros (and the tokens' rows to zeros), which changes no value, so the rows stay
/// on the device.
/// Adapters of the token embeddings correct the tokens' rows before the scaling.
fn input_rows<B: Backend>(
    b: &B,
    c: &ModelConfig,
    table: &B::Matrix,
    inputs: &[RowInput<'_>],
    lora: &LoraRows<'_, B>,
) -> Result<B::Tensor, ModelError> {
    let given = |r: &RowInput<'_>| matches!(r, RowInput::Embedding(_));
    if c.embedding_scale == 1.0 || c.facts.embedding_scale != EmbeddingScale::SqrtEmbd || !inputs.iter().any(given) {
        let mut x = b.get_rows(table, inputs)?;
        lora.add_embeddings(b, inputs, &mut x)?;
        if c.embedding_scale != 1.0 {
            b.scale(&mut x, c.embedding_scale)?;
        }
        return Ok(x);
    }
    let (n, e) = (inputs.len(), c.n_embd);
    let zeros = vec![0.0f32; e];
    let tokens: Vec<RowInput<'_>> = inputs.iter().map(|r| if given(r) { RowInput::Embedding(&zeros) } else { *r }).collect();
    let mut x = b.get_rows(table, &tokens)?; // n x e, zeros in the given rows
    lora.add_embeddings(b, inputs, &mut x)?;
    b.scale(&mut x, c.embedding_scale)?;
    let mut rows = vec![0.0f32; n * e];
    for (row, input) in rows.chunks_exact_mut(e).zip(inputs) {
        if let RowInput::Embedding(values) = input {
            row.copy_from_slice(values);
        }
    }
    b.add_scaled(&mut x, &b.upload_tensor(n, e, &rows)?, 1.0)?;
    Ok(x)
}

/// A block's input: `x` normalised into `h`, or `x` itself where the architecture has no
/// pre-norm (OLMo 2).
fn pre_norm<'a, B: Backend>(
    b: &B,
    x: &'a B::Tensor,
    norm: Option<&B::Vector>,
    eps: f32,
    h: &'a mut B::Tensor,
) -> Result<&'a B::Tensor, ModelError> {
    match norm {
        Some(w) => {
            b.rms_norm(x, w, eps, h)?;
            Ok(h)
        }
        None => Ok(x),
    }
}

/// `x += residual · scale` when there is one, then [`pre_norm`]: the residual of the sub-layer
/// before added as this one's norm reads the rows (one pass on a device: `Backend::add_rms_norm`).
#[allow(clippy::too_many_arguments)]
fn add_then_norm<'a, B: Backend>(
    b: &B,
    x: &'a mut B::Tensor,
    residual: Option<B::Tensor>,
    scale: f32,
    norm: Option<&B::Vector>,
    eps: f32,
    h: &'a mut B::Tensor,
) -> Result<&'a B::Tensor, ModelError> {
    match (residual, norm) {
        (Some(r), Some(w)) => {
            b.add_rms_norm(x, &r, scale, w, eps, h)?;
            Ok(h)
        }
        (Some(r), None) => {
            b.add_scaled(x, &r, scale)?;
            Ok(x)
        }
        (None, norm) => pre_norm(b, x, norm, eps, h),
    }
}

/// What every attention layer of a pass shares: the rows' positions, where their keys and values
/// go, each row's block table and span, the cache's rotations.
struct AttentionInputs<'a> {
    positions: Vec<u32>,
    /// Each row's query scale under an attention temperature: the same in every layer that takes
    /// it.
    query_scales: Option<Vec<(usize, usize, f32)>>,
    n_ctx: usize,
    rotate_keys: Option<usize>,
    rotate_values: Option<usize>,
    slots: Vec<KvSlot>,
    /// One block table per sequence of the batch (in order of first appearance).
    tables: Vec<&'a [BlockId]>,
    /// Each row's sequence, as an index into `tables`.
    row_seq: Vec<usize>,
    /// How far each non-causal row sees: the end of its run of non-causal rows (one image's).
    run_end: Vec<usize>,
}

/// Layer `il`'s attention over the normalised `input` (`n` x `n_embd`), its keys and values
/// written to `store` first, then the output projection: `n` x `n_embd`.
#[allow(clippy::too_many_arguments)]
fn attention_mixer<B: Backend>(
    b: &B,
    c: &ModelConfig,
    il: usize,
    (projections, o, sinks): (&Projections<B>, &Linear<B>, Option<&B::Vector>),
    input: &B::Tensor,
    a: &AttentionInputs<'_>,
    store: &mut B::KvStore,
    batch: &[InputEntry<'_>],
    lora: &LoraRows<'_, B>,
) -> Result<B::Tensor, ModelError> {
    let (n, eps) = (batch.len(), c.norm_eps);
    let rope = c.layer_rope(il, a.n_ctx);
    // a gated attention's gate, n x (n_head · head_dim)
    let mut gate = None;
    // n x (n_head · head_dim_k), n x k_dim, n x v_dim
    let [mut q, mut k, mut v] = match projections {
        Projections::Heads { q, k, v, q_norm, k_norm, norm_after_rope } => {
            let [mut q, mut k, v] = linear_each(b, [q, k, v], ScaleAt::BeforeBias, input, lora)?;
            if c.facts.gated_attention {
                // n x (n_head · 2 head_dim): each head's queries, then its gate
                let (heads, hd) = (c.n_head, c.head_dim_k);
                let mut queries = b.zeros(n, heads * hd)?;
                let mut g = b.zeros(n, heads * hd)?;
                let each = |start| ColumnBlocks { start, stride: 2 * hd, width: hd, count: heads };
                let packed = ColumnBlocks { start: 0, stride: hd, width: hd, count: heads };
                b.copy_columns(&mut queries, packed, &q, each(0))?;
                b.copy_columns(&mut g, packed, &q, each(hd))?;
                (q, gate) = (queries, Some(g));
            }
            // the norms before RoPE, or after it (Llama 4)
            let norms = |b: &B, q: &mut B::Tensor, k: &mut B::Tensor| -> Result<(), ModelError> {
                if let Some(qn) = q_norm {
                    b.rms_norm_in_place(q, qn, eps)?;
                }
                if let Some(kn) = k_norm {
                    b.rms_norm_in_place(k, kn, eps)?;
                }
                Ok(())
            };
            if !norm_after_rope {
                norms(b, &mut q, &mut k)?;
            }
            if let Some(rope) = &rope {
                b.rope_pair(&mut q, &mut k, rope, &a.positions)?;
            }
            if *norm_after_rope {
                norms(b, &mut q, &mut k)?;
            }
            [q, k, v]
        }
        Projections::Latent(w) => {
            let latent = c.latent.as_ref().expect("latent weights come with a latent configuration");
            mla::queries_keys_values(b, latent, w, input, eps, rope.as_ref().map(|r| (r, &a.positions[..])), lora)?
        }
    };
    if c.facts.prescaled_queries {
        b.scale(&mut q, c.attention_scale)?;
    }
    if let Some(pairs) = a.query_scales.as_ref().filter(|_| c.layer_has_temperature(il)) {
        // q · scale(pos) per row: added to zeros, which changes no value
        let mut scaled = b.zeros(n, c.n_head * c.head_dim_k)?;
        b.add_weighted_rows(&mut scaled, &q, pairs)?;
        q = scaled;
    }
    // a quantized cache holds keys and values rotated; the queries turn with the keys
    if let Some(block) = a.rotate_keys {
        b.hadamard(&mut q, block)?;
        b.hadamard(&mut k, block)?;
    }
    if let Some(block) = a.rotate_values {
        b.hadamard(&mut v, block)?;
    }
    let layer = c.kv_layer(il);
    b.kv_write(store, layer, &a.slots, &k, &v)?;
    let window = c.layer_window(il);
    let rows: Vec<AttentionRow> = batch
        .iter()
        .enumerate()
        .map(|(i, entry)| {
            let pos = entry.pos as usize;
            let lo = window.map_or(0, |wnd| wnd.first(pos));
            let end = if entry.non_causal { a.run_end[i] } else { pos + 1 };
            AttentionRow { kv: a.row_seq[i], positions: lo..end }
        })
        .collect();
    let source = KvSource::Cache { store: &*store, layer, tables: &a.tables };
    let shape = c.attention_shape();
    let mut attn = b.attention(&q, source, &rows, &shape, sinks)?; // n x (n_head · head_dim_v)
    if let Some(block) = a.rotate_values {
        b.hadamard(&mut attn, block)?; // the rotation is its own inverse
    }
    if let (Projections::Latent(w), Some(latent)) = (projections, &c.latent) {
        attn = mla::head_values(b, latent, w, &attn)?; // n x (n_head · v_head)
    }
    if let Some(mut g) = gate {
        b.glu(Activation::Sigmoid, &mut g, &attn)?; // sigmoid(gate) · attention
        attn = g;
    }
    linear(b, o, ScaleAt::BeforeBias, &attn, lora) // n x e
}

/// A backend's pass ([`Backend::begin_pass`]), ended by [`Pass::end`] with its error, or when
/// dropped by a pass that failed (whose own error is the one reported).
struct Pass<'a, B: Backend>(Option<&'a B>);

impl<'a, B: Backend> Pass<'a, B> {
    fn begin(b: &'a B, rows: usize, shape: u64) -> Pass<'a, B> {
        b.begin_pass(rows, shape);
        Pass(Some(b))
    }

    fn end(mut self) -> Result<(), BackendError> {
        self.0.take().map_or(Ok(()), |b| b.end_pass())
    }
}

impl<B: Backend> Drop for Pass<'_, B> {
    fn drop(&mut self) {
        if let Some(b) = self.0.take() {
            let _ = b.end_pass();
        }
    }
}

/// What a pass's launches depend on besides its data, hashed: each row's sequence (as the
/// first row of it, not its id), whether it wants logits or hidden states, is non-causal or a
/// token, and its adapters.
fn pass_shape(batch: &[InputEntry<'_>], default_lora: &[LoraScale]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for (i, e) in batch.iter().enumerate() {
        let first = batch[..i].iter().position(|o| o.seq == e.seq).unwrap_or(i);
        (first, e.logits, e.hidden, e.non_causal, matches!(e.input, RowInput::Token(_))).hash(&mut h);
        for l in e.lora.unwrap_or(default_lora) {
            (l.adapter, l.scale.to_bits()).hash(&mut h);
        }
    }
    h.finish()
}

/// The forward pass of `batch`; an entry without adapters of its own (`lora: None`) takes
/// `default_lora`. One pass for the backend once the cache has made room, shaped by what tells
/// decoding steps apart: the rows' sequences, which rows want logits or hidden states, and
/// their adapters.
pub(crate) fn forward<B: Backend>(
    b: &B,
    c: &ModelConfig,
    w: &DecoderWeights<B>,
    kv: &mut KvCache,
    batch: &[InputEntry<'_>],
    default_lora: &[LoraScale],
) -> Result<Logits, ModelError> {
    let lora = LoraRows::of_batch(&w.adapters, batch.iter().map(|e| e.lora.unwrap_or(default_lora)))?;
    let state_runs = check_batch(c, kv, batch)?;
    // after the cache made room (the pass's launches are its own; its buffers stay the cache's)
    let pass = Pass::begin(b, batch.len(), pass_shape(batch, default_lora));
    let (n, e, eps) = (batch.len(), c.n_embd, c.norm_eps);
    let inputs: Vec<RowInput> = batch.iter().map(|b| b.input).collect();
    let mut x = input_rows(b, c, &w.token_embd, &inputs, &lora)?; // n x e
    let positions: Vec<u32> = batch.iter().map(|e| e.pos).collect();
    let query_scales = c.attention_temperature.map(|_| positions.iter().enumerate().map(|(r, &p)| (r, r, c.query_scale(p))).collect());
    let n_ctx = kv.n_ctx();
    let (shape, types) = (c.attention_shape(), kv.kv_types());
    // values kept as the keys' leading columns turn with the keys' blocks
    let (rotate_keys, rotate_values) = if c.kv_layout(types).1.in_keys() {
        let block = types.rotation_in_keys(shape.head_dim_k, shape.head_dim_v);
        (block, block)
    } else {
        types.rotation(shape.head_dim_k, shape.head_dim_v)
    };
    let (table, store) = kv.parts_mut::<B::KvStore>().ok_or(BackendError::ForeignKvCache(b.device()))?;
    let slots: Vec<KvSlot> = batch.iter().map(|e| table.slot(e.seq, e.pos as usize)).collect();
    // each row attends to its own sequence's block table, and rows of one sequence share tiles
    // of its keys
    let mut seqs = Vec::new();
    let row_seq: Vec<usize> = batch
        .iter()
        .map(|e| {
            seqs.iter().position(|&s| s == e.seq).unwrap_or_else(|| {
                seqs.push(e.seq);
                seqs.len() - 1
            })
        })
        .collect();
    let tables: Vec<&[BlockId]> = seqs.iter().map(|&s| table.table(s)).collect();
    let mut run_end = vec![0usize; n];
    let mut later: Vec<Option<(u32, usize)>> = vec![None; seqs.len()]; // (position, run end)
    for i in (0..n).rev() {
        let (s, pos) = (row_seq[i], batch[i].pos);
        if batch[i].non_causal {
            run_end[i] = match later[s] {
                Some((p, end)) if p == pos + 1 => end,
                _ => pos as usize + 1,
            };
            later[s] = Some((pos, run_end[i]));
        } else {
            later[s] = None;
        }
    }
    let a = AttentionInputs { positions, query_scales, n_ctx, rotate_keys, rotate_values, slots, tables, row_seq, run_end };
    let mut h = b.zeros(n, e)?;
    // the feed-forward's output of the layer before, added into `x` as this layer's norm reads it
    let mut residual = None;
    for (il, layer) in w.layers.iter().enumerate() {
        // attention, or the layer's recurrent mixer
        let input = add_then_norm(b, &mut x, residual.take(), c.residual_scale, layer.attn_norm.as_ref(), eps, &mut h)?;
        let mut o = match &layer.mixer {
            Mixer::Attention { projections, o, sinks } => {
                attention_mixer(b, c, il, (projections, o, sinks.as_ref()), input, &a, store, batch, &lora)?
            }
            Mixer::ShortConv(conv) => {
                let part = c.state_part(il).expect("a recurrent layer has a state part");
                short_conv::forward(b, conv, input, store, part, &state_runs, &lora)?
            }
            Mixer::Mamba2(w) => {
                let (part, ssm) =
                    (c.state_part(il).expect("a recurrent layer has a state part"), c.ssm.as_ref().expect("Mamba-2 dimensions"));
                mamba2::forward(b, w, ssm, eps, input, store, part, &state_runs, &lora)?
            }
            Mixer::DeltaNet(w) => {
                let (part, ssm) =
                    (c.state_part(il).expect("a recurrent layer has a state part"), c.ssm.as_ref().expect("delta-net dimensions"));
                delta_net::forward(b, w, ssm, eps, input, store, part, &state_runs, &lora)?
            }
        }; // n x e
        if let Some(pn) = &layer.attn_post_norm {
            b.rms_norm_in_place(&mut o, pn, eps)?;
        }

        // feed-forward
        let input = add_then_norm(b, &mut x, Some(o), c.residual_scale, layer.ffn_norm.as_ref(), eps, &mut h)?;
        let mut d = match &layer.ffn {
            FeedForward::Dense { gate, up, down } => gated_ffn(b, c.facts.activation, [gate, up, down], input, &lora)?, // n x e
            FeedForward::Experts(x) => moe::forward(b, c.facts.activation, x, input, &lora)?,                           // n x e
        };
        if let Some(pn) = &layer.ffn_post_norm {
            b.rms_norm_in_place(&mut d, pn, eps)?;
        }
        residual = Some(d);
    }
    for entry in batch {
        kv.set_len(entry.seq, entry.pos as usize + 1);
    }

    // logits for the entries that want them
    let wanted: Vec<usize> = (0..n).filter(|&i| batch[i].logits).collect();
    let mut normed = b.zeros(wanted.len(), e)?;
    if wanted.len() == n {
        // every row (a decoding step): the last residual added in the output norm's pass, no
        // rows selected (the bits of the addition, the selection of all rows, then the norm)
        add_then_norm(b, &mut x, residual, c.residual_scale, Some(&w.output_norm), eps, &mut normed)?;
    } else {
        if let Some(d) = residual {
            b.add_scaled(&mut x, &d, c.residual_scale)?;
        }
        let xs = b.select_rows(&x, &wanted)?;
        b.rms_norm(&xs, &w.output_norm, eps, &mut normed)?;
    }
    let mut logits = linear(b, &w.output, ScaleAt::BeforeBias, &normed, &lora.select(&wanted))?; // wanted x n_logits
    if c.logit_scale != 1.0 {
        b.scale(&mut logits, 1.0 / c.logit_scale)?;
    }
    if let Some(cap) = c.final_logit_softcap {
        b.softcap(&mut logits, cap)?;
    }
    let hidden = if batch.iter().any(|e| e.hidden) { b.to_host(normed)? } else { Vec::new() };
    let values = b.to_host(logits)?;
    pass.end()?;
    Ok(Logits { n_vocab: w.n_logits, values, entries: wanted, hidden })
}
