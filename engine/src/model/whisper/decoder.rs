//! Whisper's decoder: token rows through self-attention over the window's earlier tokens (a
//! KV cache of one sequence), cross-attention over the encoded audio, and the feed-forward
//! block; the logits of the last row come out (the output projection is the token embedding
//! table).

use super::config::WhisperConfig;
use super::encoder::EncodedAudio;
use super::weights::WhisperWeights;
use crate::backend::{Activation, AttentionRow, Backend, BackendError, BlockId, KvSlot, KvSource, KvType, KvValues, RowInput};
use crate::kv_cache::{KvCache, SeqId};
use crate::model::blocks::{attention_out, plain_ffn, project, project_each};
use crate::model::error::ModelError;
use crate::tokenizer::TokenId;

/// The one sequence a window decodes.
const SEQ: SeqId = 0;

/// A KV cache for one window's tokens (`n_ctx` of the decoder, 448).
pub fn new_cache<B: Backend>(b: &B, c: &WhisperConfig) -> KvCache {
    let d = &c.decoder;
    let storage = b.new_kv_store(KvType::F32.into(), d.n_layer, d.n_state, KvValues::Rows(d.n_state), 0);
    KvCache::with_storage(KvType::F32, d.n_ctx, b.device(), storage)
}

/// Runs `tokens` at positions `start..` of the window (the cache holds positions `..start`)
/// and returns the logits of the last token (`n_vocab` values).
pub fn step<B: Backend>(
    b: &B,
    c: &WhisperConfig,
    w: &WhisperWeights<B>,
    audio: &EncodedAudio<B>,
    kv: &mut KvCache,
    tokens: &[TokenId],
    start: usize,
) -> Result<Vec<f32>, ModelError> {
    let (d, n) = (&c.decoder, tokens.len());
    if n == 0 {
        return Err(ModelError::BadBatch("no tokens".into()));
    }
    if start + n > d.n_ctx {
        return Err(ModelError::BadBatch(format!("{} tokens exceed the decoder's {} positions", start + n, d.n_ctx)));
    }
    if let Some(&t) = tokens.iter().find(|&&t| t as usize >= c.n_vocab) {
        return Err(ModelError::BadBatch(format!("token {t} is outside the vocabulary of {}", c.n_vocab)));
    }
    let dw = &w.decoder;
    let ids: Vec<RowInput> = tokens.iter().map(|&t| RowInput::Token(t)).collect();
    let positions: Vec<RowInput> = (start..start + n).map(|p| RowInput::Token(p as u32)).collect();
    let mut x = b.get_rows(&dw.token_embd, &ids)?; // n x d
    b.add_scaled(&mut x, &b.get_rows(&dw.position, &positions)?, 1.0)?;

    kv.prepare_write(SEQ, start..start + n)?;
    let (table, store) = kv.parts_mut::<B::KvStore>().ok_or(BackendError::ForeignKvCache(b.device()))?;
    let slots: Vec<KvSlot> = (start..start + n).map(|p| table.slot(SEQ, p)).collect();
    let tables: [&[BlockId]; 1] = [table.table(SEQ)];
    let self_rows: Vec<AttentionRow> = (0..n).map(|i| AttentionRow { kv: 0, positions: 0..start + i + 1 }).collect();
    // every audio state the encoder made (`encoder::encode`: the encoder's context)
    let cross_rows = vec![AttentionRow { kv: 0, positions: 0..c.encoder.n_ctx }; n];
    let shape = d.attention_shape();
    let mut h = b.zeros(n, d.n_state)?;
    for (il, layer) in dw.layers.iter().enumerate() {
        // self-attention over this window's tokens so far
        b.layer_norm(&x, &layer.attn_norm.weight, &layer.attn_norm.bias, c.eps, &mut h)?;
        let a = &layer.attn;
        let [q, k, v] = project_each(b, [&a.q.w, &a.k.w, &a.v.w], [a.q.b.as_ref(), a.k.b.as_ref(), a.v.b.as_ref()], &h)?;
        b.kv_write(store, il, &slots, &k, &v)?;
        let source = KvSource::Cache { store: &*store, layer: il, tables: &tables };
        let o = attention_out(b, &q, source, &self_rows, &shape, &a.out.w, a.out.b.as_ref())?;
        b.add_scaled(&mut x, &o, 1.0)?;

        // cross-attention over the audio
        let (norm, a) = (layer.cross_norm.as_ref().expect("decoder layer"), layer.cross.as_ref().expect("decoder layer"));
        b.layer_norm(&x, &norm.weight, &norm.bias, c.eps, &mut h)?;
        let q = project(b, &a.q.w, a.q.b.as_ref(), &h)?;
        let o = attention_out(b, &q, KvSource::Kept(&audio.cross_kv[il]), &cross_rows, &shape, &a.out.w, a.out.b.as_ref())?;
        b.add_scaled(&mut x, &o, 1.0)?;

        // feed-forward
        b.layer_norm(&x, &layer.ffn_norm.weight, &layer.ffn_norm.bias, c.eps, &mut h)?;
        let f = plain_ffn(
            b,
            Activation::GeluErf,
            (&layer.ffn_up.w, layer.ffn_up.b.as_ref()),
            (&layer.ffn_down.w, layer.ffn_down.b.as_ref()),
            &h,
        )?;
        b.add_scaled(&mut x, &f, 1.0)?;
    }
    kv.set_len(SEQ, start + n);
    let last = b.select_rows(&x, &[n - 1])?;
    let mut normed = b.zeros(1, d.n_state)?;
    b.layer_norm(&last, &dw.output_norm.weight, &dw.output_norm.bias, c.eps, &mut normed)?;
    let logits = project(b, &dw.token_embd, None, &normed)?;
    Ok(b.to_host(logits)?)
}
