//! llama.cpp's DRY ("don't repeat yourself") penalty, as its `llama-sampler.cpp` defines it
//! (after koboldcpp): a token that would extend a sequence of the last `penalty_last_n` tokens
//! (the prompt's and the output's) which already occurred earlier, at least `allowed_length`
//! tokens long and counted back no further than a sequence breaker, loses
//! `multiplier * base^(length - allowed_length)` from its logit. A breaker is a text (a line
//! end, `:`, a quote, `*` by default): every token whose text holds it, or starts a way of
//! writing it, begins a restart sequence.

use rustc_hash::FxHashMap;

use crate::tokenizer::{TokenId, Tokenizer};

/// The DRY settings of a request (off while `multiplier` is 0).
#[derive(Clone, Debug, PartialEq)]
pub struct DrySettings {
    pub multiplier: f32,
    /// At least 1 (a request's smaller base is llama-server's default, 1.75).
    pub base: f32,
    pub allowed_length: usize,
    /// The tokens scanned back from the end (0: off).
    pub penalty_last_n: usize,
    pub sequence_breakers: Vec<String>,
}

impl Default for DrySettings {
    fn default() -> DrySettings {
        DrySettings {
            multiplier: 0.0,
            base: 1.75,
            allowed_length: 2,
            penalty_last_n: 64,
            sequence_breakers: ["\n", ":", "\"", "*"].map(String::from).to_vec(),
        }
    }
}

impl DrySettings {
    pub fn is_on(&self) -> bool {
        self.multiplier != 0.0 && self.base >= 1.0 && self.penalty_last_n > 0
    }
}

/// A breaker's longest text (longer ones are cut) and the most tokens of a restart sequence's
/// tail, as llama.cpp bounds them.
const MAX_BREAKER_CHARS: usize = 40;
const MAX_TAIL_TOKENS: usize = 20;

/// The restart sequences of the breakers: for each head token, the token tails that complete a
/// breaker after it (empty: the head holds a whole breaker).
pub(super) type Breakers = FxHashMap<TokenId, Vec<Vec<TokenId>>>;

/// The restart sequences of `breakers` in `vocab` (llama.cpp's `get_overlapping_token_sequences`):
/// a token whose text contains a breaker is a head with an empty tail; a token whose text ends
/// with a breaker's start is a head whose tail is the rest of the breaker, tokenized.
pub(super) fn restart_sequences(vocab: &Tokenizer, breakers: &[String]) -> Breakers {
    let breakers: Vec<Vec<u8>> =
        breakers.iter().filter(|b| !b.is_empty()).map(|b| b.chars().take(MAX_BREAKER_CHARS).collect::<String>().into_bytes()).collect();
    let mut out = Breakers::default();
    for id in 0..vocab.n_vocab() as TokenId {
        let word = vocab.detokenize(&[id], false, true);
        let mut tails: Vec<Vec<TokenId>> = Vec::new();
        for b in &breakers {
            if find(&word, b).is_some() {
                if !tails.contains(&Vec::new()) {
                    tails.push(Vec::new());
                }
                continue;
            }
            // every place the breaker's first byte occurs where the word's end cuts it short
            for pos in (0..word.len()).filter(|&p| word[p] == b[0]) {
                let shared = (1..b.len()).take_while(|&i| pos + i < word.len() && word[pos + i] == b[i]).count() + 1;
                if pos + shared < word.len() || shared >= b.len() {
                    continue;
                }
                let mut tail = vocab.encode(&String::from_utf8_lossy(&b[shared..]), false, false);
                tail.truncate(MAX_TAIL_TOKENS);
                if !tails.contains(&tail) {
                    tails.push(tail);
                }
            }
        }
        if !tails.is_empty() {
            out.insert(id, tails);
        }
    }
    out
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Takes the DRY penalty off `logits` for the tokens that would extend a repetition of the
/// last tokens of `history` (the prompt and the output so far).
pub(super) fn apply(s: &DrySettings, breakers: &Breakers, history: &[TokenId], logits: &mut [f32]) {
    let n = history.len().min(s.penalty_last_n);
    if !s.is_on() || n <= s.allowed_length {
        return;
    }
    let last = &history[history.len() - n..];
    // rat(i): the i-th token from the end
    let rat = |i: usize| last[n - 1 - i];
    // 1: the nearest restart sequence bounds how far back a repetition counts
    let mut rep_limit = n;
    for i in 0..n {
        let Some(tails) = breakers.get(&rat(i)) else { continue };
        let longest = tails.iter().filter(|t| t.len() <= i && (0..t.len()).all(|o| t[o] == rat(i - o - 1))).map(Vec::len).max();
        if let Some(len) = longest {
            rep_limit = i - len;
            break;
        }
    }
    if rep_limit < s.allowed_length {
        return;
    }
    // 2: the reversed Z-algorithm: for each position, how long a suffix of the context ends
    // there too (at most `rep_limit`)
    let mut repeat = vec![0usize; n];
    let (mut lt, mut rt) = (0usize, 0usize);
    for k in 1..n {
        if k > rt {
            let mut m = 0;
            while m + k < n && rat(m) == rat(m + k) {
                m += 1;
            }
            repeat[n - 1 - k] = m.min(rep_limit);
            if m > 0 {
                (lt, rt) = (k, k + m - 1);
            }
        } else {
            let p = k - lt;
            let right = rt - k + 1;
            if repeat[n - 1 - p] < right {
                repeat[n - 1 - k] = repeat[n - 1 - p].min(rep_limit);
            } else {
                let mut i = rt + 1;
                while i < n && rat(i) == rat(i - k) {
                    i += 1;
                }
                repeat[n - 1 - k] = (i - k).min(rep_limit);
                (lt, rt) = (k, i - 1);
            }
        }
    }
    // 3: the token after each repeat would extend it: the longest repeat each token extends
    let mut extends: FxHashMap<TokenId, usize> = FxHashMap::default();
    for (i, &len) in repeat.iter().enumerate().take(n - 1) {
        if len >= s.allowed_length {
            let next = rat(n - 2 - i);
            let e = extends.entry(next).or_default();
            *e = (*e).max(len);
        }
    }
    // 4: the penalty, its exponent kept where f32 does not overflow; a token that is a whole
    // breaker is never penalised
    let max_exponent = if s.base > 1.000_001 { (88.722_84f32 / s.base.ln()) as usize } else { 0 };
    for (&token, &len) in &extends {
        if breakers.get(&token).is_some_and(|tails| tails.iter().any(Vec::is_empty)) {
            continue;
        }
        let Some(l) = logits.get_mut(token as usize) else { continue };
        let mut exponent = len - s.allowed_length;
        if max_exponent > 0 && exponent > max_exponent {
            exponent = max_exponent;
        }
        *l -= s.multiplier * s.base.powi(exponent as i32);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on(multiplier: f32, base: f32, allowed_length: usize, penalty_last_n: usize) -> DrySettings {
        DrySettings { multiplier, base, allowed_length, penalty_last_n, sequence_breakers: Vec::new() }
    }

    /// The probabilities after DRY of llama.cpp's tests/test-sampling.cpp cases (b11434):
    /// `probs` as logits, the `history` accepted, breakers given as token sequences.
    fn run(probs: &[f32], history: &[TokenId], s: &DrySettings, breakers: &[Vec<TokenId>]) -> Vec<f32> {
        let mut map = Breakers::default();
        for b in breakers {
            map.entry(b[0]).or_default().push(b[1..].to_vec());
        }
        let mut logits: Vec<f32> = probs.iter().map(|p| p.ln()).collect();
        apply(s, &map, history, &mut logits);
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let w: Vec<f32> = logits.iter().map(|l| (l - max).exp()).collect();
        let total: f32 = w.iter().sum();
        w.iter().map(|x| x / total).collect()
    }

    fn close(got: &[f32], want: &[f32]) -> bool {
        got.iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-5)
    }

    #[test]
    fn dry_penalises_what_would_extend_a_repetition_as_llama_cpp_does() {
        let (quarter, fifth) = ([0.25f32; 4], [0.2f32; 5]);
        assert!(close(&run(&quarter, &[0, 1], &on(1.0, 1.1, 2, 4), &[]), &quarter));
        let got = run(&quarter, &[0, 1, 2, 0, 1], &on(1.0, 1.1, 2, 5), &[]);
        assert!(close(&got, &[0.296_923, 0.296_923, 0.109_232, 0.296_923]), "{got:?}");
        // token 3 is a breaker: the repeat of `0 1` it would extend is not penalised
        assert!(close(&run(&fifth, &[0, 1, 3, 4, 0, 1], &on(1.0, 1.1, 2, 6), &[vec![3]]), &fifth));
        let got = run(&fifth, &[0, 1, 2, 0, 1], &on(2.0, 1.1, 2, 5), &[]);
        assert!(close(&got, &[0.241_818, 0.241_818, 0.032_727, 0.241_818, 0.241_818]), "{got:?}");
        assert!(close(&run(&fifth, &[0, 1, 2, 3, 4, 0, 1], &on(1.0, 1.1, 4, 7), &[]), &fifth));
        // a longer repeat: base^(length - allowed)
        let got = run(&quarter, &[0, 1, 2, 3, 0, 1, 2], &on(1.0, 2.0, 2, 7), &[]);
        let w = (-2.0f32).exp();
        assert!(close(&got, &[1.0 / (3.0 + w), 1.0 / (3.0 + w), 1.0 / (3.0 + w), w / (3.0 + w)]), "{got:?}");
    }

    #[test]
    fn off_changes_nothing() {
        let p = [0.25f32, 0.25, 0.25, 0.25];
        assert!(close(&run(&p, &[0, 1, 2, 0, 1], &on(0.0, 1.1, 2, 5), &[]), &p));
        assert!(close(&run(&p, &[0, 1, 2, 0, 1], &on(1.0, 1.1, 2, 0), &[]), &p));
    }
}
