//! LoRA adapters: GGUF files as llama.cpp writes them (`general.type = adapter`,
//! `adapter.type = lora`, `adapter.lora.alpha`, a `NAME.lora_a` / `NAME.lora_b` pair per
//! corrected tensor), loaded beside a model and applied on the fly as low-rank corrections,
//! never merged into the weights: a projection `y = x · Wᵀ` of a row that uses adapter `i` at
//! scale `s` becomes `y + s' · ((x · Aᵀ) · Bᵀ)`, `s' = s · alpha / rank` (`s` itself when the
//! file's alpha is 0), added right after the product and before any bias, as llama.cpp's
//! `build_lora_mm`. Each row of a batch names its own adapters and scales, so requests with
//! different adapters share one forward pass: per adapter, the rows using it are gathered, go
//! through its two small products, and are added back into their rows (one rounded product
//! each, as ggml's scale then add). A row that uses no adapter gets the bits it gets without
//! any loaded. An activated LoRA (aLoRA) runs only from the last occurrence of its invocation
//! tokens in a sequence's prompt on ([`super::lora_schedule`]).

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::Arc;

use super::error::ModelError;
use crate::backend::{Backend, RowInput};
use crate::gguf::{Array, GgufFile, TensorInfo, Value};
use crate::quant;
use crate::tokenizer::TokenId;

/// One adapter at one scale, as a request or the command line chooses it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LoraScale {
    /// The adapter's index among the model's (its load order).
    pub adapter: usize,
    pub scale: f32,
}

/// A projection an adapter may correct: rows `rows` of the model tensor `tensor` (all of them,
/// or one part of a fused projection such as `attn_qkv`), of `cols` inputs; of an expert stack,
/// expert `e` of `n` (`expert: Some((e, n))`), whose adapter pair is stacked likewise (`lora_a`
/// of `[cols, rank, n]`, `lora_b` of `[rank, total_rows, n]`, as llama.cpp's
/// `build_lora_mm_id` reads them).
#[derive(Clone, Debug)]
pub struct LoraSite {
    pub tensor: String,
    pub rows: Range<usize>,
    pub total_rows: usize,
    pub cols: usize,
    pub expert: Option<(usize, usize)>,
}

/// What a loaded adapter is, for listings.
#[derive(Clone, Debug, PartialEq)]
pub struct AdapterInfo {
    /// `general.name`, or empty.
    pub name: String,
    /// The file it was loaded from, when loaded from one.
    pub path: Option<String>,
    pub alpha: f32,
    /// The largest rank among its tensors.
    pub rank: usize,
    /// Model tensors it corrects.
    pub tensors: usize,
    /// An activated LoRA's invocation tokens (`adapter.alora.invocation_tokens`): it runs from
    /// their last occurrence in a prompt on. Empty for a plain adapter, which runs everywhere.
    pub invocation: Vec<TokenId>,
}

impl AdapterInfo {
    /// Whether it is an activated LoRA.
    pub fn is_activated(&self) -> bool {
        !self.invocation.is_empty()
    }
}

/// One corrected tensor (or part of one): `a` is `rank` x `cols`, `b` is `rows` x `rank` (for
/// the token embeddings, `a` is the `n_vocab` x `rank` table rows are read from and `b` is
/// `n_embd` x `rank`). The parts of a fused projection share their `a`.
struct LoraPair<B: Backend> {
    a: Arc<B::Matrix>,
    b: B::Matrix,
    rank: usize,
}

impl<B: Backend> LoraPair<B> {
    /// llama.cpp's `get_scale`: `scale · alpha / rank`, in that order, or the scale itself
    /// without an alpha.
    fn factor(&self, alpha: f32, scale: f32) -> f32 {
        if alpha != 0.0 {
            scale * alpha / self.rank as f32
        } else {
            scale
        }
    }
}

/// An adapter's matrices on the model's backend, one slot per [`LoraSite`] of the model.
pub(crate) struct AdapterWeights<B: Backend> {
    alpha: f32,
    sites: Vec<Option<LoraPair<B>>>,
    embedding: Option<LoraPair<B>>,
}

/// The model's token-embedding shape, for an adapter of it: `None` when the model ties its
/// output to the token embeddings (an adapter of `token_embd` would then be ambiguous).
#[derive(Clone, Copy, Debug)]
pub(crate) struct EmbeddingShape {
    pub n_vocab: usize,
    pub n_embd: usize,
}

fn bad(reason: impl Into<String>) -> ModelError {
    ModelError::Adapter(reason.into())
}

/// The tensor `t` checked to be of a computable type with `dims`.
fn checked<'t>(t: &'t TensorInfo, dims: &[usize]) -> Result<&'t TensorInfo, ModelError> {
    let want: Vec<u64> = dims.iter().map(|&d| d as u64).collect();
    if t.dims != want {
        return Err(bad(format!(
            "tensor {} has shape {:?} where the model needs {:?} (an adapter of another base model?)",
            t.name, t.dims, want
        )));
    }
    if quant::ops(t.ty).is_err() || t.ty.row_bytes(dims[0]).is_none() {
        return Err(ModelError::TensorType { name: t.name.clone(), ty: t.ty });
    }
    Ok(t)
}

/// An activated LoRA's invocation tokens, as llama.cpp reads them (an array of u32 ids; empty
/// or absent: a plain adapter), each checked to be one of the model's `n_vocab` ids.
fn invocation_tokens(file: &GgufFile, n_vocab: usize) -> Result<Vec<TokenId>, ModelError> {
    const KEY: &str = "adapter.alora.invocation_tokens";
    let Some(value) = file.get(KEY) else { return Ok(Vec::new()) };
    let Value::Array(Array::U32(ids)) = value else {
        return Err(bad(format!("{KEY} is not an array of u32 token ids")));
    };
    if let Some(id) = ids.iter().find(|&&id| id as usize >= n_vocab) {
        return Err(bad(format!("{KEY} holds the id {id}, beyond the model's {n_vocab} tokens")));
    }
    Ok(ids.clone())
}

/// The adapter `file` for a model of architecture `arch` and `n_vocab` tokens whose
/// correctable projections are `sites`, checked as llama.cpp checks it (its type,
/// architecture, pairs and shapes) and uploaded to `backend` (an expert stack's pair one
/// matrix per expert). A tensor it corrects that the model has no site for (latent attention's
/// absorbed matrices) is an error naming it: the adapter would otherwise run without it.
pub(crate) fn load<B: Backend>(
    file: &Arc<GgufFile>,
    backend: &B,
    arch: &str,
    n_vocab: usize,
    sites: &[LoraSite],
    embedding: Option<EmbeddingShape>,
) -> Result<(AdapterWeights<B>, AdapterInfo), ModelError> {
    match file.get_str("general.type") {
        Some("adapter") => {}
        other => return Err(bad(format!("general.type is {:?}, not \"adapter\" (is it a model?)", other.unwrap_or("")))),
    }
    let file_arch = file.architecture().unwrap_or("");
    if file_arch != arch {
        return Err(bad(format!("it is an adapter of {file_arch:?}, the model is {arch:?}")));
    }
    match file.get_str("adapter.type") {
        Some("lora") => {}
        other => return Err(bad(format!("adapter.type is {:?}, not \"lora\"", other.unwrap_or("")))),
    }
    let invocation = invocation_tokens(file, n_vocab)?;
    let alpha = match file.get("adapter.lora.alpha") {
        None => 0.0,
        Some(v) => v.as_f64().ok_or_else(|| bad("adapter.lora.alpha is not a number"))? as f32,
    };
    // the pairs, by the name of the tensor they correct
    let mut pairs: std::collections::BTreeMap<&str, [Option<&TensorInfo>; 2]> = Default::default();
    for t in file.tensors() {
        if let Some(base) = t.name.strip_suffix(".lora_a") {
            pairs.entry(base).or_default()[0] = Some(t);
        } else if let Some(base) = t.name.strip_suffix(".lora_b") {
            pairs.entry(base).or_default()[1] = Some(t);
        } else if t.name.ends_with("_norm.weight") {
            // llama.cpp skips norm vectors too ("most adapters still work fine without it")
            continue;
        } else {
            return Err(bad(format!("tensor {} is neither a .lora_a nor a .lora_b", t.name)));
        }
    }
    if pairs.is_empty() {
        return Err(bad("it corrects no tensor"));
    }
    let mut weights = AdapterWeights { alpha, sites: (0..sites.len()).map(|_| None).collect(), embedding: None };
    let mut rank_max = 0;
    for (&name, pair) in &pairs {
        let [Some(a), Some(b)] = *pair else {
            return Err(bad(format!("{name} has only one of its .lora_a and .lora_b tensors")));
        };
        if a.dims.len() < 2 || a.dims.contains(&0) {
            return Err(bad(format!("tensor {} is not a matrix", a.name)));
        }
        if name == "token_embd.weight" {
            let Some(e) = embedding else {
                return Err(bad("it corrects token_embd.weight, which this model also uses as its output projection"));
            };
            // llama.cpp's layout for the embeddings: `a` is read by rows (one per token), `b`
            // is not transposed
            let rank = a.dims[0] as usize;
            rank_max = rank_max.max(rank);
            let table = checked(a, &[rank, e.n_vocab])?;
            let b = checked(b, &[rank, e.n_embd])?;
            weights.embedding = Some(LoraPair {
                a: Arc::new(backend.upload_matrix(file, table, e.n_vocab, rank)?),
                b: backend.upload_matrix(file, b, e.n_embd, rank)?,
                rank,
            });
            continue;
        }
        let rank = a.dims[1] as usize;
        rank_max = rank_max.max(rank);
        let mut found = false;
        // the parts of a fused projection read the same `a`: uploaded once for all of them
        let mut whole_a: Option<Arc<B::Matrix>> = None;
        for (i, site) in sites.iter().enumerate().filter(|(_, s)| s.tensor == name) {
            found = true;
            // an expert's pair: its slices of the stacked pair
            let (e, n) = site.expert.unwrap_or((0, 1));
            let (a, b) = match site.expert {
                None => (checked(a, &[site.cols, rank])?, checked(b, &[rank, site.total_rows])?),
                Some(_) => (checked(a, &[site.cols, rank, n])?, checked(b, &[rank, site.total_rows, n])?),
            };
            let a_part = a.rows((e * rank) as u64, rank as u64).expect("the rows of a checked tensor");
            let b_part =
                b.rows((e * site.total_rows + site.rows.start) as u64, site.rows.len() as u64).expect("the rows of a checked tensor");
            let a = match (&whole_a, site.expert) {
                (Some(a), None) => a.clone(),
                (None, None) => whole_a.insert(Arc::new(backend.upload_matrix(file, &a_part, rank, site.cols)?)).clone(),
                (_, Some(_)) => Arc::new(backend.upload_matrix(file, &a_part, rank, site.cols)?),
            };
            weights.sites[i] = Some(LoraPair { a, b: backend.upload_matrix(file, &b_part, site.rows.len(), rank)?, rank });
        }
        if !found {
            return Err(bad(format!("it corrects {name}, which is not a projection of this {arch} model the engine can adapt")));
        }
    }
    let name = file.get_str("general.name").unwrap_or("").to_string();
    let info = AdapterInfo { name, path: None, alpha, rank: rank_max, tensors: pairs.len(), invocation };
    Ok((weights, info))
}

/// The adapters one batch uses: per adapter, the rows that use it and their scales.
pub(crate) struct LoraRows<'a, B: Backend> {
    active: Vec<ActiveAdapter<'a, B>>,
}

struct ActiveAdapter<'a, B: Backend> {
    weights: &'a AdapterWeights<B>,
    /// (row, scale), rows ascending.
    rows: Vec<(usize, f32)>,
}

impl<'a, B: Backend> LoraRows<'a, B> {
    /// The adapters of the batch's rows (`per_row[r]`: row `r`'s), checked: every adapter
    /// loaded, named once per row, its scale finite. Adapters at scale 0 are left out.
    pub(crate) fn of_batch<'r>(
        adapters: &'a [AdapterWeights<B>],
        per_row: impl Iterator<Item = &'r [LoraScale]>,
    ) -> Result<LoraRows<'a, B>, ModelError> {
        let mut rows: Vec<Vec<(usize, f32)>> = vec![Vec::new(); adapters.len()];
        for (r, list) in per_row.enumerate() {
            for (j, l) in list.iter().enumerate() {
                if l.adapter >= adapters.len() {
                    return Err(ModelError::BadBatch(format!("entry {r}: adapter {} is not loaded ({} are)", l.adapter, adapters.len())));
                }
                if !l.scale.is_finite() {
                    return Err(ModelError::BadBatch(format!("entry {r}: adapter {} has scale {}", l.adapter, l.scale)));
                }
                if list[..j].iter().any(|o| o.adapter == l.adapter) {
                    return Err(ModelError::BadBatch(format!("entry {r}: adapter {} is named twice", l.adapter)));
                }
                if l.scale != 0.0 {
                    rows[l.adapter].push((r, l.scale));
                }
            }
        }
        let active =
            adapters.iter().zip(rows).filter(|(_, rows)| !rows.is_empty()).map(|(weights, rows)| ActiveAdapter { weights, rows }).collect();
        Ok(LoraRows { active })
    }

    /// The same adapters for the rows `rows` of the batch, renumbered in that order (the rows
    /// whose logits are computed).
    pub(crate) fn select(&self, rows: &[usize]) -> LoraRows<'a, B> {
        let active = self
            .active
            .iter()
            .map(|a| ActiveAdapter {
                weights: a.weights,
                rows: rows.iter().enumerate().filter_map(|(i, r)| a.rows.iter().find(|(ar, _)| ar == r).map(|&(_, s)| (i, s))).collect(),
            })
            .filter(|a| !a.rows.is_empty())
            .collect();
        LoraRows { active }
    }

    /// Whether any row's adapter corrects site `site`.
    pub(crate) fn touches(&self, site: Option<usize>) -> bool {
        site.is_some_and(|s| self.active.iter().any(|a| a.weights.sites[s].is_some()))
    }

    /// Whether an adapter of these rows corrects one of the `n` sites from `first` (a set of
    /// experts).
    pub(crate) fn touches_any(&self, first: Option<usize>, n: usize) -> bool {
        first.is_some_and(|f| self.active.iter().any(|a| a.weights.sites[f..f + n].iter().any(Option::is_some)))
    }

    /// `ys[p][r] += s' · (x[r] · Aᵀ) · Bᵀ` for every row `r` of every adapter correcting site
    /// `sites[p]` (`x` the projections' input, `ys[p]` the products), adapters in load order;
    /// the parts of a fused projection, which share an adapter's `A`, take one pass of it.
    pub(crate) fn add_each(&self, b: &B, sites: &[Option<usize>], x: &B::Tensor, ys: &mut [B::Tensor]) -> Result<(), ModelError> {
        for a in &self.active {
            let pair_of = |p: usize| sites[p].and_then(|s| a.weights.sites[s].as_ref());
            let mut done = vec![false; sites.len()];
            for p in 0..sites.len() {
                let Some(pair) = pair_of(p).filter(|_| !done[p]) else { continue };
                let group: Vec<usize> = (p..sites.len()).filter(|&q| pair_of(q).is_some_and(|o| Arc::ptr_eq(&o.a, &pair.a))).collect();
                group.iter().for_each(|&q| done[q] = true);
                let pairs: Vec<(usize, usize, f32)> = a.rows.iter().map(|&(r, s)| (r, r, pair.factor(a.weights.alpha, s))).collect();
                let bs: Vec<&B::Matrix> = group.iter().filter_map(|&q| pair_of(q)).map(|o| &o.b).collect();
                let mut outs: Vec<&mut B::Tensor> = ys.iter_mut().enumerate().filter(|(q, _)| group.contains(q)).map(|(_, y)| y).collect();
                b.add_low_rank_parts(&mut outs, &pair.a, &bs, x, &pairs)?;
            }
        }
        Ok(())
    }

    /// The corrections of an expert stack's products: `y` has a row per slot of `ids` (slot
    /// `s` is row `s / n_used`'s choice `s % n_used`, `ids[s]` its expert), `x` a row per slot
    /// or per row (as [`Backend::matmul_indexed`] reads it); each slot's row's adapters correct
    /// it with the pair of its expert (`first + ids[s]`'s site), adapters in load order.
    pub(crate) fn add_slots(
        &self,
        b: &B,
        first: Option<usize>,
        slots: (&[usize], usize),
        x: &B::Tensor,
        y: &mut B::Tensor,
    ) -> Result<(), ModelError> {
        let (Some(first), (ids, n_used)) = (first, slots) else { return Ok(()) };
        let slots_per_x_row = ids.len() / b.shape(x).0.max(1);
        for a in &self.active {
            // the scale of this adapter of each row that runs it
            let scale_of_row: HashMap<usize, f32> = a.rows.iter().copied().collect();
            // per expert, its slots' (input row, slot, factor), slots ascending
            let mut by_expert: BTreeMap<usize, Vec<(usize, usize, f32)>> = BTreeMap::new();
            for (s, &e) in ids.iter().enumerate() {
                let row = s / n_used;
                let (Some(&scale), Some(pair)) = (scale_of_row.get(&row), &a.weights.sites[first + e]) else { continue };
                let x_row = s / slots_per_x_row.max(1);
                by_expert.entry(e).or_default().push((x_row, s, pair.factor(a.weights.alpha, scale)));
            }
            for (e, pairs) in by_expert {
                let pair = a.weights.sites[first + e].as_ref().expect("an expert with a pair");
                b.add_low_rank(y, &pair.a, &pair.b, x, &pairs)?;
            }
        }
        Ok(())
    }

    /// The token-embedding corrections of the token rows of `inputs` added to their rows `x`
    /// (before any embedding scale, as llama.cpp's `build_inp_embd`); given embedding rows
    /// are left as they are.
    pub(crate) fn add_embeddings(&self, b: &B, inputs: &[RowInput<'_>], x: &mut B::Tensor) -> Result<(), ModelError> {
        for a in &self.active {
            let Some(pair) = &a.weights.embedding else { continue };
            let (tokens, weights): (Vec<RowInput<'_>>, Vec<(usize, usize, f32)>) = a
                .rows
                .iter()
                .filter(|&&(r, _)| matches!(inputs[r], RowInput::Token(_)))
                .enumerate()
                .map(|(i, &(r, s))| (inputs[r], (i, r, pair.factor(a.weights.alpha, s))))
                .unzip();
            if tokens.is_empty() {
                continue;
            }
            let low = b.get_rows(&pair.a, &tokens)?; // rows x rank
            let delta = b.matmul_each(&[&pair.b], &[None], &low)?.pop().expect("one product"); // rows x n_embd
            b.add_weighted_rows(x, &delta, &weights)?;
        }
        Ok(())
    }
}
