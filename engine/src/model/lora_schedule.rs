//! Where each of a sequence's adapters runs. A plain adapter corrects every position; an
//! activated LoRA (aLoRA, IBM's "activated" adapters) only the positions from the start of the
//! last occurrence of its invocation tokens in the prompt on, as PEFT, which trains them,
//! applies it (llama-server starts one position earlier), and nowhere when the prompt lacks
//! them. The positions before an activation are computed as without the adapter, so a
//! conversation cached by the base model is reused up to the invocation: a check by an aLoRA
//! costs the invocation and its output, not the conversation again.

use super::lora::{AdapterInfo, LoraScale};
use crate::kv_cache::CacheKey;
use crate::tokenizer::TokenId;

/// A sequence's adapters, each from the position it starts at.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoraSchedule {
    /// The adapters in the order of the position they start at (then by id), so that the
    /// adapters of a position are a prefix of the list.
    adapters: Vec<LoraScale>,
    /// `from[i]`: the first position `adapters[i]` corrects.
    from: Vec<u32>,
}

/// The start of the last occurrence of `invocation` in `prompt`, if any.
pub fn invocation_start(prompt: &[TokenId], invocation: &[TokenId]) -> Option<usize> {
    if invocation.is_empty() || invocation.len() > prompt.len() {
        return None;
    }
    prompt.windows(invocation.len()).rposition(|w| w == invocation)
}

impl LoraSchedule {
    /// No adapter anywhere.
    pub const EMPTY: LoraSchedule = LoraSchedule { adapters: Vec::new(), from: Vec::new() };

    /// `list` on every position (plain adapters).
    pub fn always(list: Vec<LoraScale>) -> LoraSchedule {
        let from = vec![0; list.len()];
        LoraSchedule { adapters: list, from }
    }

    /// `list` (adapters of `loaded`, by id) as a sequence of prompt `prompt` runs them: plain
    /// adapters everywhere, an activated one from its invocation in the prompt on (left out
    /// when the prompt lacks it), adapters at scale 0 left out.
    pub fn for_prompt(loaded: &[AdapterInfo], list: &[LoraScale], prompt: &[TokenId]) -> LoraSchedule {
        let mut starts: Vec<(u32, LoraScale)> = list
            .iter()
            .filter(|l| l.scale != 0.0)
            .filter_map(|&l| match loaded.get(l.adapter) {
                Some(info) if info.is_activated() => invocation_start(prompt, &info.invocation).map(|s| (s as u32, l)),
                _ => Some((0, l)),
            })
            .collect();
        starts.sort_by_key(|&(from, l)| (from, l.adapter));
        let (from, adapters) = starts.into_iter().unzip();
        LoraSchedule { adapters, from }
    }

    /// The adapters that correct position `pos`.
    pub fn at(&self, pos: u32) -> &[LoraScale] {
        &self.adapters[..self.from.partition_point(|&f| f <= pos)]
    }

    /// Every adapter of the sequence, wherever it starts.
    pub fn adapters(&self) -> &[LoraScale] {
        &self.adapters
    }

    /// Where adapter `adapter` starts, if the sequence runs it.
    pub fn start_of(&self, adapter: usize) -> Option<u32> {
        self.entry(adapter).map(|(_, from)| from)
    }

    pub fn is_empty(&self) -> bool {
        self.adapters.is_empty()
    }

    /// The entry of adapter `adapter`: its scale and start.
    fn entry(&self, adapter: usize) -> Option<(f32, u32)> {
        self.adapters.iter().position(|l| l.adapter == adapter).map(|i| (self.adapters[i].scale, self.from[i]))
    }

    /// How many leading positions run with the same adapters at the same scales under both
    /// (`usize::MAX` when the two are the same): up to the first start of an adapter the two
    /// run differently.
    pub fn agrees_for(&self, other: &LoraSchedule) -> usize {
        let mut n = usize::MAX;
        for l in self.adapters.iter().chain(&other.adapters) {
            let (mine, theirs) = (self.entry(l.adapter), other.entry(l.adapter));
            if mine != theirs {
                let start = |e: Option<(f32, u32)>| e.map_or(usize::MAX, |(_, from)| from as usize);
                n = n.min(start(mine).min(start(theirs)));
            }
        }
        n
    }
}

impl CacheKey for LoraSchedule {
    fn shared_positions(&self, other: &Self) -> usize {
        self.agrees_for(other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(invocation: &[TokenId]) -> AdapterInfo {
        AdapterInfo { name: String::new(), path: None, alpha: 0.0, rank: 4, tensors: 1, invocation: invocation.to_vec() }
    }

    fn l(adapter: usize, scale: f32) -> LoraScale {
        LoraScale { adapter, scale }
    }

    #[test]
    fn an_invocation_is_found_at_its_last_occurrence() {
        assert_eq!(invocation_start(&[5, 1, 2, 7, 1, 2, 9], &[1, 2]), Some(4));
        assert_eq!(invocation_start(&[1, 2], &[1, 2]), Some(0));
        assert_eq!(invocation_start(&[1, 1, 2], &[1, 2]), Some(1), "a false start does not hide the match");
        assert_eq!(invocation_start(&[1, 3, 2], &[1, 2]), None);
        assert_eq!(invocation_start(&[2], &[1, 2]), None);
        assert_eq!(invocation_start(&[1, 2], &[]), None);
    }

    #[test]
    fn plain_adapters_run_everywhere_and_activated_ones_from_their_invocation() {
        // adapter 0 plain, 1 activated by [7, 8], 2 activated by [9]
        let loaded = [info(&[]), info(&[7, 8]), info(&[9])];
        let prompt = [1, 7, 8, 2, 3, 7, 8, 4];
        let s = LoraSchedule::for_prompt(&loaded, &[l(0, 1.0), l(1, 0.5), l(2, 2.0)], &prompt);
        assert_eq!(s.adapters(), [l(0, 1.0), l(1, 0.5)], "no [9] in the prompt: adapter 2 is off");
        assert_eq!((s.start_of(0), s.start_of(1), s.start_of(2)), (Some(0), Some(5), None));
        assert_eq!(s.at(0), [l(0, 1.0)]);
        assert_eq!(s.at(4), [l(0, 1.0)], "the earlier occurrence does not activate it");
        assert_eq!(s.at(5), [l(0, 1.0), l(1, 0.5)], "from the invocation's first token on");
        assert_eq!(s.at(1000), [l(0, 1.0), l(1, 0.5)], "and on every output token");
        // an adapter at scale 0 is not run
        assert!(LoraSchedule::for_prompt(&loaded, &[l(0, 0.0)], &prompt).is_empty());
        // the order adapters are listed in does not matter
        assert_eq!(LoraSchedule::for_prompt(&loaded, &[l(1, 0.5), l(0, 1.0)], &prompt), s);
    }

    #[test]
    fn two_schedules_agree_up_to_where_an_adapter_first_runs_differently() {
        let plain = LoraSchedule::always(vec![l(0, 1.0)]);
        let base = LoraSchedule::default();
        assert_eq!(base.agrees_for(&base), usize::MAX);
        assert_eq!(plain.agrees_for(&plain), usize::MAX);
        assert_eq!(plain.agrees_for(&base), 0, "a plain adapter changes every position");
        let loaded = [info(&[]), info(&[7])];
        let at = |prompt: &[TokenId], list: &[LoraScale]| LoraSchedule::for_prompt(&loaded, list, prompt);
        let checked = at(&[1, 2, 3, 7, 4], &[l(1, 1.0)]);
        assert_eq!(checked.agrees_for(&base), 3, "the base model's positions before the invocation");
        assert_eq!(base.agrees_for(&checked), 3);
        let later = at(&[1, 2, 3, 7, 4, 5, 7], &[l(1, 1.0)]);
        assert_eq!(checked.agrees_for(&later), 3, "activated at 3 and at 6: the same up to 3");
        let rescaled = at(&[1, 2, 3, 7, 4], &[l(1, 0.5)]);
        assert_eq!(checked.agrees_for(&rescaled), 3, "another scale from the same start");
        assert_eq!(checked.agrees_for(&at(&[1, 2, 3, 7, 4], &[l(1, 1.0)])), usize::MAX);
        // with a plain adapter on both, the activated one still decides
        let both = at(&[1, 7], &[l(0, 1.0), l(1, 1.0)]);
        assert_eq!(both.agrees_for(&plain), 1);
        assert_eq!(both.agrees_for(&base), 0);
    }
}
