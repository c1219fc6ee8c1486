//! Mixture-of-experts feed-forward layers: a router chooses each token's experts, each expert
//! (a gated feed-forward block) runs once per step over the rows routed to it, and the rows come
//! back weighted, added in the order of the token's choices, as llama.cpp's `build_moe_ffn`
//! adds them. The experts' matrices are views of the file's 3-D tensors, zero-copy on the CPU.
//!
//! Batch invariance: a token's route depends on its row alone, each expert's product of a row
//! does not depend on the other rows it runs with (the dense kernels' guarantee), and the
//! weighted sum runs in the token's choice order, so a row's output is the same in any batch.

use super::blocks::{gated_ffn, linear, project, Linear, ScaleAt};
use super::config::{ExpertConfig, ExpertGroups};
use super::error::ModelError;
use super::lora::LoraRows;
use super::weights::Loader;
use crate::backend::{Activation, Backend};
use crate::model::arch::Gating;

/// One layer's experts: the router (`ffn_gate_inp`, `n_expert` x `n_embd`) and each expert's
/// gate, up (`n_ff` x `n_embd`) and down (`n_embd` x `n_ff`) projections.
pub struct Experts<B: Backend> {
    pub config: ExpertConfig,
    pub router: Linear<B>,
    /// Added to the probabilities for choosing the experts only, not to their weights
    /// (`exp_probs_b`: DeepSeek V3, GLM-4.5).
    pub selection_bias: Option<Vec<f32>>,
    pub gate: ExpertMatrices<B>,
    pub up: ExpertMatrices<B>,
    pub down: ExpertMatrices<B>,
    pub shared: Option<SharedExpert<B>>,
}

/// An expert every token uses beside its routed ones (`ffn_{gate,up,down}_shexp`: Qwen2-MoE,
/// Granite MoE shared), its output added to theirs, weighted per token by the sigmoid of
/// `ffn_gate_inp_shexp · x` where the file has that gate (Qwen2-MoE).
pub struct SharedExpert<B: Backend> {
    pub gate: Linear<B>,
    pub up: Linear<B>,
    pub down: Linear<B>,
    /// `1` x `n_embd`.
    pub gate_inp: Option<B::Matrix>,
}

/// One matrix per expert, from a 3-D tensor, with the tensor's optional per-expert output
/// scales (`.scale`, `n_expert` values: checkpoints converted from FP8 or NVFP4) and biases
/// (`.bias`, one row per expert: gpt-oss), applied in that order as llama.cpp does.
pub struct ExpertMatrices<B: Backend> {
    pub w: Vec<B::Matrix>,
    /// The first expert's site among the projections LoRA adapters may correct.
    pub site: Option<usize>,
    pub scales: Option<Vec<f32>>,
    /// `n_expert` x rows.
    pub biases: Option<B::Tensor>,
}

impl<B: Backend> ExpertMatrices<B> {
    fn load(l: &Loader<B>, prefix: &str, n_expert: usize, rows: usize, cols: usize) -> Result<ExpertMatrices<B>, ModelError> {
        let name = format!("{prefix}.weight");
        Ok(ExpertMatrices {
            w: l.expert_matrices(&name, n_expert, rows, cols)?,
            site: Some(l.expert_sites(&name, n_expert, 0..rows, rows, cols)),
            scales: l.host_vector_opt(&format!("{prefix}.scale"), n_expert)?,
            biases: l.expert_rows_opt(&format!("{prefix}.bias"), n_expert, rows)?,
        })
    }

    /// Whether the products need more than the matrices (a scale or a bias per expert).
    fn plain(&self) -> bool {
        self.scales.is_none() && self.biases.is_none()
    }

    /// Each slot's expert scale, LoRA corrections and bias applied to `y` (a row per slot of
    /// `ids`), as `(x · wₑᵀ) · scaleₑ + corrections + biasₑ` (llama.cpp's `build_lora_mm_id`
    /// order): the scale as a weighted addition onto zeros (the product's bits), the bias as a
    /// weighted addition of weight 1 (the sum's bits).
    fn finish(&self, b: &B, slots: &Slots<'_, '_, B>, x: &B::Tensor, y: B::Tensor) -> Result<B::Tensor, ModelError> {
        let ids = slots.ids;
        let mut y = match &self.scales {
            None => y,
            Some(s) => {
                let mut scaled = b.zeros(ids.len(), b.shape(&y).1)?;
                let pairs: Vec<(usize, usize, f32)> = ids.iter().enumerate().map(|(p, &e)| (p, p, s[e])).collect();
                b.add_weighted_rows(&mut scaled, &y, &pairs)?;
                scaled
            }
        };
        slots.lora.add_slots(b, self.site, (ids, slots.n_used), x, &mut y)?;
        if let Some(bias) = &self.biases {
            let pairs: Vec<(usize, usize, f32)> = ids.iter().enumerate().map(|(p, &e)| (e, p, 1.0)).collect();
            b.add_weighted_rows(&mut y, bias, &pairs)?;
        }
        Ok(y)
    }

    /// Every slot's product with its expert (`x`: a row per slot or per token, see
    /// [`Backend::matmul_indexed`]), scaled, corrected and biased.
    fn indexed(&self, b: &B, slots: &Slots<'_, '_, B>, x: &B::Tensor) -> Result<B::Tensor, ModelError> {
        let y = b.matmul_indexed(&[&self.w], slots.ids, x)?.pop().expect("one set");
        self.finish(b, slots, x, y)
    }
}

/// A layer's (token, choice) slots: slot `s` is row `s / n_used`'s choice `s % n_used`, of
/// expert `ids[s]`; and the batch's LoRA adapters, by row.
struct Slots<'s, 'a, B: Backend> {
    ids: &'s [usize],
    n_used: usize,
    lora: &'s LoraRows<'a, B>,
}

impl<B: Backend> Experts<B> {
    /// Layer `i`'s experts, if the file gives it a router.
    pub(crate) fn load(l: &Loader<B>, i: usize, x: &ExpertConfig, n_embd: usize) -> Result<Option<Experts<B>>, ModelError> {
        let n = |s: &str| format!("blk.{i}.{s}");
        let Some(router) = l.linear_opt(&n("ffn_gate_inp"), x.n_expert, n_embd)? else { return Ok(None) };
        // gate and up as two tensors, or one `ffn_gate_up_exps` of both (gate first)
        let (gate, up) = match l.expert_matrix_halves(&n("ffn_gate_up_exps.weight"), x.n_expert, x.n_ff, n_embd)? {
            Some([gate, up]) => {
                let name = n("ffn_gate_up_exps.weight");
                let [gate_site, up_site] =
                    [0..x.n_ff, x.n_ff..2 * x.n_ff].map(|rows| l.expert_sites(&name, x.n_expert, rows, 2 * x.n_ff, n_embd));
                (
                    ExpertMatrices { w: gate, site: Some(gate_site), scales: None, biases: None },
                    ExpertMatrices { w: up, site: Some(up_site), scales: None, biases: None },
                )
            }
            None => (
                ExpertMatrices::load(l, &n("ffn_gate_exps"), x.n_expert, x.n_ff, n_embd)?,
                ExpertMatrices::load(l, &n("ffn_up_exps"), x.n_expert, x.n_ff, n_embd)?,
            ),
        };
        Ok(Some(Experts {
            config: *x,
            router,
            selection_bias: l.host_vector_opt(&n("exp_probs_b.bias"), x.n_expert)?,
            gate,
            up,
            down: ExpertMatrices::load(l, &n("ffn_down_exps"), x.n_expert, n_embd, x.n_ff)?,
            shared: match l.linear_opt(&n("ffn_up_shexp"), x.n_ff_shared, n_embd)? {
                None => None,
                Some(up) => Some(SharedExpert {
                    gate: l.linear(&n("ffn_gate_shexp"), x.n_ff_shared, n_embd)?,
                    up,
                    down: l.linear(&n("ffn_down_shexp"), n_embd, x.n_ff_shared)?,
                    gate_inp: l.row_matrix_opt(&n("ffn_gate_inp_shexp.weight"), n_embd)?,
                }),
            },
        }))
    }

    /// Every matrix a product reads (for the backend's preparation).
    pub(crate) fn matrices(&self) -> impl Iterator<Item = &B::Matrix> {
        let shared = self.shared.iter().flat_map(|s| [&s.gate.w, &s.up.w, &s.down.w].into_iter().chain(&s.gate_inp));
        self.gate.w.iter().chain(&self.up.w).chain(&self.down.w).chain([&self.router.w]).chain(shared)
    }
}

/// A token's experts, most probable first, with their weights.
pub(crate) type Route = Vec<(usize, f32)>;

/// The routes of every row of `logits` (`rows` x `n_expert`), as llama.cpp computes them:
/// probabilities by softmax (max subtracted, `expf`, a sum in f64 and one reciprocal), by
/// sigmoid, or the logits themselves (softmax-weight gating); the `n_used` most probable experts
/// (the lower index first on a tie); their probabilities as weights (under softmax-weight gating
/// the softmax of the chosen logits), divided by their sum (at least 2^-14) when asked, then
/// scaled.
pub(crate) fn routes(x: &ExpertConfig, logits: &[f32], selection_bias: Option<&[f32]>) -> Vec<Route> {
    logits
        .chunks_exact(x.n_expert)
        .map(|row| {
            let probs: Vec<f32> = match x.gating {
                Gating::Softmax => softmax(row),
                Gating::Sigmoid => row.iter().map(|&v| 1.0 / (1.0 + (-v).exp())).collect(),
                Gating::SoftmaxWeight => row.to_vec(),
            };
            let mut chosen_by: Vec<f32> = match selection_bias {
                Some(bias) => probs.iter().zip(bias).map(|(&p, &b)| p + b).collect(),
                None => probs.clone(),
            };
            if let Some(g) = x.groups {
                mask_groups(&mut chosen_by, g);
            }
            let mut order: Vec<usize> = (0..x.n_expert).collect();
            order.sort_by(|&a, &b| chosen_by[b].total_cmp(&chosen_by[a]).then(a.cmp(&b)));
            let mut route: Route = order[..x.n_used].iter().map(|&e| (e, probs[e])).collect();
            if x.gating == Gating::SoftmaxWeight {
                let weights = softmax(&route.iter().map(|&(_, w)| w).collect::<Vec<f32>>());
                route.iter_mut().zip(weights).for_each(|((_, w), p)| *w = p);
            }
            if x.normalize {
                let sum = (route.iter().map(|&(_, w)| f64::from(w)).sum::<f64>() as f32).max(6.103_515_6e-5);
                route.iter_mut().for_each(|(_, w)| *w /= sum);
            }
            if x.weights_scale != 1.0 {
                route.iter_mut().for_each(|(_, w)| *w *= x.weights_scale);
            }
            route
        })
        .collect()
}

/// Group-limited routing: the experts of every group but the `used` best (by the sum of their
/// two highest scores; the lower group first on a tie) can no longer be chosen.
fn mask_groups(scores: &mut [f32], g: ExpertGroups) {
    let per = scores.len() / g.count;
    let group_score = |group: &[f32]| {
        let mut s = group.to_vec();
        s.sort_by(|a, b| b.total_cmp(a));
        s.iter().take(2).fold(0.0f32, |sum, &v| sum + v)
    };
    let totals: Vec<f32> = scores.chunks_exact(per).map(group_score).collect();
    let mut order: Vec<usize> = (0..g.count).collect();
    order.sort_by(|&a, &b| totals[b].total_cmp(&totals[a]).then(a.cmp(&b)));
    for &dropped in &order[g.used..] {
        scores[dropped * per..(dropped + 1) * per].fill(f32::NEG_INFINITY);
    }
}

/// ggml's softmax of a row: the maximum subtracted, `expf`, the sum in f64 and one reciprocal.
fn softmax(row: &[f32]) -> Vec<f32> {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f32> = row.iter().map(|&v| (v - max).exp()).collect();
    let inv = (1.0 / e.iter().map(|&v| f64::from(v)).sum::<f64>()) as f32;
    e.iter().map(|&v| v * inv).collect()
}

/// The experts' feed-forward output for every row of `h` (`rows` x `n_embd`): the gate and up
/// products of every (row, choice) slot by indexed products (each expert's weights read once for
/// all the rows that chose it), the gated unit, the down products likewise, then the slots added
/// back into their rows weighted, the first choice of every row first. Where the weights weigh
/// the experts' inputs (Llama 4), each slot's input is its row times its weight, and the slots
/// come back with weight 1.
pub(crate) fn forward<B: Backend>(
    b: &B,
    act: Activation,
    w: &Experts<B>,
    h: &B::Tensor,
    lora: &LoraRows<'_, B>,
) -> Result<B::Tensor, ModelError> {
    let (x, (rows, n_embd)) = (&w.config, b.shape(h));
    let logits = b.to_host(linear(b, &w.router, ScaleAt::BeforeBias, h, lora)?)?; // rows x n_expert
    let routes = routes(x, &logits, w.selection_bias.as_deref());
    // slot r · n_used + k: row r's choice k
    let ids: Vec<usize> = routes.iter().flat_map(|route| route.iter().map(|&(e, _)| e)).collect();
    // the experts' input: a row per token, or per slot, weighted (onto zeros: the product's bits)
    let weighted_inputs = match x.weights_on_input {
        false => None,
        true => {
            let mut slots = b.zeros(ids.len(), n_embd)?; // slots x n_embd
            let pairs: Vec<(usize, usize, f32)> = routes
                .iter()
                .enumerate()
                .flat_map(|(r, route)| route.iter().enumerate().map(move |(k, &(_, w))| (r, r * route.len() + k, w)))
                .collect();
            b.add_weighted_rows(&mut slots, h, &pairs)?;
            Some(slots)
        }
    };
    let input = weighted_inputs.as_ref().unwrap_or(h);
    let slots = Slots { ids: &ids, n_used: x.n_used, lora };
    let plain = w.gate.plain() && w.up.plain();
    let lora_free = !lora.touches_any(w.gate.site, w.gate.w.len()) && !lora.touches_any(w.up.site, w.up.w.len());
    let gate = if plain && lora_free {
        // nothing between the products and the unit: a backend may do them in one pass
        b.matmul_indexed_glu(act, [&w.gate.w, &w.up.w], &ids, input)?
    } else {
        let (mut gate, up) = if plain {
            // both sets in one pass over one gathering of the rows
            let mut ys = b.matmul_indexed(&[&w.gate.w, &w.up.w], &ids, input)?.into_iter();
            let (gate, up) = (ys.next().expect("the gate set"), ys.next().expect("the up set"));
            (w.gate.finish(b, &slots, input, gate)?, w.up.finish(b, &slots, input, up)?)
        } else {
            (w.gate.indexed(b, &slots, input)?, w.up.indexed(b, &slots, input)?)
        }; // slots x n_ff twice
        b.glu(act, &mut gate, &up)?;
        gate
    }; // slots x n_ff
    let down = w.down.indexed(b, &slots, &gate)?; // slots x n_embd
    let mut out = b.zeros(rows, n_embd)?;
    for k in 0..x.n_used {
        let weight = |route: &Route| if x.weights_on_input { 1.0 } else { route[k].1 };
        let pairs: Vec<(usize, usize, f32)> = routes.iter().enumerate().map(|(r, route)| (r * x.n_used + k, r, weight(route))).collect();
        b.add_weighted_rows(&mut out, &down, &pairs)?;
    }
    if let Some(s) = &w.shared {
        let y = gated_ffn(b, act, [&s.gate, &s.up, &s.down], h, lora)?; // rows x n_embd
                                                                        // llama.cpp's sigmoid here is silu(g) / g, in f32
        let gates = match &s.gate_inp {
            Some(m) => b.to_host(project(b, m, None, h)?)?.into_iter().map(|g| g / (1.0 + (-g).exp()) / g).collect(),
            None => vec![1.0; rows],
        };
        let pairs: Vec<(usize, usize, f32)> = gates.into_iter().enumerate().map(|(r, g)| (r, r, g)).collect();
        b.add_weighted_rows(&mut out, &y, &pairs)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(n_expert: usize, n_used: usize, normalize: bool) -> ExpertConfig {
        ExpertConfig {
            n_expert,
            n_used,
            n_ff: 8,
            gating: Gating::Softmax,
            normalize,
            weights_scale: 1.0,
            n_ff_shared: 8,
            groups: None,
            weights_on_input: false,
        }
    }

    #[test]
    fn group_limited_routing_chooses_within_the_best_groups() {
        // groups {0, 1}, {2, 3}, {4, 5}: sums of the two best 0.9+0.1, 0.8+0.7, 0.6+0.5
        let logits = [0.9f32, 0.1, 0.8, 0.7, 0.6, 0.5];
        let x = ExpertConfig { gating: Gating::SoftmaxWeight, groups: Some(ExpertGroups { count: 3, used: 2 }), ..config(6, 3, false) };
        let chosen: Vec<usize> = routes(&x, &logits, None)[0].iter().map(|p| p.0).collect();
        // group 0 holds the best expert but scores lowest (1.0 against 1.5 and 1.1): its experts are out
        assert_eq!(chosen, [2, 3, 4]);
        // without groups the best three win
        let free: Vec<usize> = routes(&ExpertConfig { groups: None, ..x }, &logits, None)[0].iter().map(|p| p.0).collect();
        assert_eq!(free, [0, 2, 3]);
    }

    #[test]
    fn routes_take_the_most_probable_experts_first_and_normalise() {
        let logits = [0.5f32, 2.0, -1.0, 2.0, /* row 2 */ 0.0, 0.0, 0.0, 3.0];
        let r = routes(&config(4, 2, true), &logits, None);
        // a tie goes to the lower index; the two weights sum to 1
        assert_eq!(r[0].iter().map(|p| p.0).collect::<Vec<_>>(), [1, 3]);
        assert!((r[0][0].1 - 0.5).abs() < 1e-7 && (r[0][1].1 - 0.5).abs() < 1e-7);
        assert_eq!(r[1][0].0, 3);
        let plain = routes(&config(4, 2, false), &logits, None);
        let e3 = 3f32.exp();
        assert!((plain[1][0].1 - e3 / (e3 + 3.0)).abs() < 1e-6, "{:?}", plain[1]);
        let sig = routes(&ExpertConfig { gating: Gating::Sigmoid, weights_scale: 2.0, ..config(4, 1, false) }, &logits, None);
        assert!((sig[1][0].1 - 2.0 / (1.0 + (-3f32).exp())).abs() < 1e-6);
        // a selection bias chooses expert 0 of row 2, but its weight is its own probability
        let biased = routes(&config(4, 1, false), &logits, Some(&[5.0, 0.0, 0.0, 0.0]));
        assert_eq!(biased[1][0].0, 0);
        assert!((biased[1][0].1 - 1.0 / (e3 + 3.0)).abs() < 1e-6, "{:?}", biased[1]);
    }

    #[test]
    fn softmax_weight_gating_chooses_by_logit_and_weighs_the_chosen_alone() {
        let logits = [0.5f32, 2.0, -1.0, 1.0];
        let r = routes(&ExpertConfig { gating: Gating::SoftmaxWeight, ..config(4, 2, false) }, &logits, None);
        assert_eq!(r[0].iter().map(|p| p.0).collect::<Vec<_>>(), [1, 3]);
        // softmax over (2, 1): e / (e + 1) and 1 / (e + 1)
        let e = 1f32.exp();
        assert!((r[0][0].1 - e / (e + 1.0)).abs() < 1e-7 && (r[0][1].1 - 1.0 / (e + 1.0)).abs() < 1e-7, "{:?}", r[0]);
    }
}
