//! Speculation under load: which decoding sequences propose in a step. A sequence's proposals
//! add rows to the step's pass (and, with a draft model, the draft's passes before it), which
//! pays only when the tokens kept raise the step's tokens per second. Where a pass of the
//! batch's size is bound by reading the weights (one sequence; a GPU) a few more rows are nearly
//! free; where it is bound by compute (many sequences on few cores) every row costs about its
//! share, and proposals that are seldom kept lower the throughput. So the loop learns what its
//! passes cost by row count ([`PassTimes`]) and what each sequence's rounds keep
//! ([`RoundYield`]), and [`SpecCost::choose`] lets through the sequences whose proposals raise
//! the step's expected tokens per second.

/// Where a round's proposals come from: the sequence's own tokens (an n-gram lookup, which costs
/// nothing to make) or the draft model (whose passes cost). With both configured, a sequence
/// whose lookup finds something proposes that, and the draft model drafts for the rest; each
/// source keeps its own yields, since they keep very different shares of what they propose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Ngram,
    Draft,
}

impl Source {
    /// Both, in the order of their index.
    pub const ALL: [Source; 2] = [Source::Ngram, Source::Draft];

    /// Its name in metrics' labels: `ngram`, `draft`.
    pub fn name(self) -> &'static str {
        match self {
            Source::Ngram => "ngram",
            Source::Draft => "draft",
        }
    }
}

/// Whether the loop weighs speculation's cost against its yield.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpecPolicy {
    /// Every sequence that may draft proposes in every step (its back-off aside).
    Always,
    /// A sequence proposes when that is expected to raise the step's tokens per second
    /// (`SpecCost::choose`).
    WhenItPays,
}

/// Row-count buckets: 1, 2, 3-4, 5-8, ... (the last takes every larger pass).
const BUCKETS: usize = 16;

/// The newest measurement's weight in a moving average.
const NEWEST: f64 = 0.3;

/// A moving average `average` after the measurement `newest`.
fn moved(average: f64, newest: f64) -> f64 {
    average + NEWEST * (newest - average)
}

/// A sequence with n-gram proposals that has had no round for this many steps gets one
/// whatever its estimates say (its text may have turned predictable, and the passes' costs
/// drift), at the next step that is a multiple of it, so that those exploring share a step. (A
/// draft model's round after a pause would first catch up on everything the sequence gave
/// since: no exploring there; its sequences propose again when the load makes rows cheap.)
pub(crate) const EXPLORE_EVERY: u64 = 32;

/// Whether a sequence whose last round was at `last_round` explores at step `step`.
pub(crate) fn explores(step: u64, last_round: u64) -> bool {
    step.is_multiple_of(EXPLORE_EVERY) && step - last_round >= EXPLORE_EVERY
}

/// The seconds a forward pass takes by its row count, learned from the passes run: per bucket
/// of row counts, the moving averages of its passes' rows and seconds.
#[derive(Clone, Debug, Default)]
pub(crate) struct PassTimes {
    points: [Option<Point>; BUCKETS],
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Point {
    rows: f64,
    seconds: f64,
}

fn bucket(rows: usize) -> usize {
    // 1 -> 0, 2 -> 1, 3..=4 -> 2, 5..=8 -> 3, ...
    ((usize::BITS - (rows - 1).leading_zeros()) as usize).min(BUCKETS - 1)
}

impl PassTimes {
    /// Records a pass of `rows` rows that took `seconds`.
    pub fn record(&mut self, rows: usize, seconds: f64) {
        if rows == 0 || !seconds.is_finite() || seconds < 0.0 {
            return;
        }
        let point = &mut self.points[bucket(rows)];
        *point = Some(match *point {
            None => Point { rows: rows as f64, seconds },
            Some(p) => Point { rows: moved(p.rows, rows as f64), seconds: moved(p.seconds, seconds) },
        });
    }

    /// The seconds a pass of `rows` rows is expected to take (`None` before any pass): along
    /// the line between the learned points on either side, each point's seconds raised to the
    /// largest of the smaller passes' (a pass never costs less for more rows); outside them,
    /// in proportion to the rows from the nearest. Past the largest pass that errs high (a
    /// row's cost falls as passes grow), so an unexplored size counts against speculating.
    pub fn estimate(&self, rows: f64) -> Option<f64> {
        let mut known: Vec<Point> = Vec::with_capacity(BUCKETS);
        for p in self.points.iter().flatten() {
            let floor = known.last().map_or(0.0, |q: &Point| q.seconds);
            known.push(Point { rows: p.rows, seconds: p.seconds.max(floor) });
        }
        let (first, last) = (*known.first()?, *known.last()?);
        if rows <= first.rows {
            return Some(first.seconds * rows / first.rows);
        }
        if rows >= last.rows {
            return Some(last.seconds * rows / last.rows);
        }
        let at = known.iter().position(|p| p.rows >= rows).expect("rows is below the last point");
        let (a, b) = (known[at - 1], known[at]);
        Some(a.seconds + (b.seconds - a.seconds) * (rows - a.rows) / (b.rows - a.rows))
    }
}

/// What a sequence's speculation rounds propose and keep: moving averages per round.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct RoundYield {
    pub proposed: f64,
    pub kept: f64,
}

impl RoundYield {
    /// A new sequence's: `n_draft` proposals, all kept, so that it drafts at once and its own
    /// rounds say what it really keeps.
    pub fn hopeful(n_draft: usize) -> RoundYield {
        RoundYield { proposed: n_draft as f64, kept: n_draft as f64 }
    }

    /// Records a round that proposed `proposed` tokens and kept `kept` of them.
    pub fn record(&mut self, proposed: usize, kept: usize) {
        self.drift(RoundYield { proposed: proposed as f64, kept: kept as f64 });
    }

    /// Moves toward `typical` by a round's weight: what a left-out sequence is expected to
    /// keep when no round of its own says otherwise.
    pub fn drift(&mut self, typical: RoundYield) {
        self.proposed = moved(self.proposed, typical.proposed);
        self.kept = moved(self.kept, typical.kept);
    }

    /// The share of its proposals kept (1 before any was made).
    pub fn kept_share(&self) -> f64 {
        if self.proposed <= f64::EPSILON {
            1.0
        } else {
            (self.kept / self.proposed).min(1.0)
        }
    }

    /// Tokens kept per proposal (a round that proposes nothing costs no rows: the best).
    fn kept_per_row(&self) -> f64 {
        if self.proposed <= f64::EPSILON {
            f64::INFINITY
        } else {
            self.kept / self.proposed
        }
    }
}

/// One sequence that may propose in a step: where its proposals come from, what its round is
/// expected to propose and keep, whether it explores ([`explores`]), and the tokens a draft
/// model must catch up on that the round is charged (what the sequence gave while it did not
/// draft; a prompt not yet read its [`prompt_share`]; 0 for n-gram proposals).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Candidate {
    pub source: Source,
    pub expected: RoundYield,
    pub explore: bool,
    pub catch_up: f64,
}

/// The part of a prompt of `prompt` tokens that the draft model has not read yet charged to one
/// round of a sequence with `remaining` tokens left to generate: the prompt is read once for
/// all of its rounds, about `remaining / (kept + 1)` of them, each keeping `expected.kept`
/// proposals and adding the model's own token. (Where the rounds cannot pay for their share,
/// as on a machine whose passes are bound by compute under load, the draft never reads the
/// prompt at all.)
pub(crate) fn prompt_share(prompt: usize, remaining: usize, expected: RoundYield) -> f64 {
    let rounds = (remaining as f64 / (expected.kept.max(0.0) + 1.0)).max(1.0);
    prompt as f64 / rounds
}

/// What a set of proposing candidates adds to a step: the pass's rows (from the step's own),
/// the tokens expected kept, the sequences the draft model drafts for and the tokens it
/// catches up on.
#[derive(Clone, Copy)]
struct Proposing {
    rows: f64,
    kept: f64,
    drafting: usize,
    catch_up: f64,
}

impl Proposing {
    fn with(self, c: &Candidate) -> Proposing {
        Proposing {
            rows: self.rows + c.expected.proposed,
            kept: self.kept + c.expected.kept,
            drafting: self.drafting + usize::from(c.source == Source::Draft),
            catch_up: self.catch_up + c.catch_up,
        }
    }
}

/// What the loop has learned of its passes (the model's by row count, the draft model's by the
/// number of sequences it drafts for) and of its sequences' rounds.
#[derive(Clone, Debug, Default)]
pub(crate) struct SpecCost {
    pub pass: PassTimes,
    pub draft: PassTimes,
    /// The draft model's catch-ups (prompts, and what its sequences gave while they did not
    /// draft) by the tokens read, beyond its rounds' own passes.
    pub catch_up: PassTimes,
    /// Every sequence's rounds together (none before the first), by [`Source`].
    typical: [Option<RoundYield>; 2],
    /// With the lookup and a draft model both: the share of the decoding sequences whose
    /// lookups had been quiet long enough for the draft, a moving average over steps (`None`
    /// before the first: all).
    quiet: Option<f64>,
}

impl SpecCost {
    /// A step in which `quiet` of the `decoding` sequences that may propose had lookups quiet
    /// long enough for the draft model.
    pub fn note_quiet(&mut self, quiet: usize, decoding: usize) {
        if decoding > 0 {
            let share = quiet as f64 / decoding as f64;
            self.quiet = Some(self.quiet.map_or(share, |q| moved(q, share)));
        }
    }

    /// The share of a sequence's rounds the draft model is expected to have: those when its
    /// lookups are quiet ([`SpecCost::note_quiet`]; all before any step says).
    pub fn draft_share(&self) -> f64 {
        self.quiet.unwrap_or(1.0)
    }

    /// Every sequence's rounds with proposals from `source` together (`None` before the first).
    pub fn typical(&self, source: Source) -> Option<RoundYield> {
        self.typical[source as usize]
    }

    /// What a new sequence's rounds from `source` are expected to yield: with n-gram proposals
    /// all `n_draft` kept ([`RoundYield::hopeful`]: its first rounds, which cost no pass, say
    /// better); with a draft model `n_draft` at the share all sequences' draft rounds have
    /// kept, so that where the draft's proposals are mostly rejected, a new sequence's draft
    /// does not catch up on its prompt only to find that out again.
    pub fn first_yield(&self, source: Source, n_draft: usize) -> RoundYield {
        let hopeful = RoundYield::hopeful(n_draft);
        match (source, self.typical(source)) {
            (Source::Draft, Some(t)) => RoundYield { kept: hopeful.proposed * t.kept_share(), ..hopeful },
            _ => hopeful,
        }
    }

    /// Records a round of one sequence (`its` yield from `source`) that proposed `proposed`
    /// tokens and kept `kept`.
    pub fn round(&mut self, source: Source, its: &mut RoundYield, proposed: usize, kept: usize) {
        self.typical[source as usize].get_or_insert(*its).record(proposed, kept);
        its.record(proposed, kept);
    }

    /// A step in which a sequence with n-gram proposals was left out: its expectation drifts
    /// toward the loop's typical round, so that where most rounds are kept (a reply that
    /// copies its input, past the one place it changes) a sequence whose last rounds were poor
    /// proposes again within a few steps, and where few are (free text) it stays out.
    pub fn left_out(&self, its: &mut RoundYield) {
        if let Some(t) = self.typical(Source::Ngram) {
            its.drift(t);
        }
    }

    /// Which of `candidates` propose in a step whose pass has `base_rows` rows without any
    /// proposal, among `streams` sequences that decode (now, or once their prompts are read).
    /// A sequence that explores proposes. The rest are taken best kept-per-row first, as many
    /// as give the most tokens kept beyond what their time is worth: the extra seconds (the
    /// pass's growth from `base_rows` by the proposed rows, and the draft's passes for the
    /// proposing sequences, and their catch-ups) at the rate of a plain decoding pass over
    /// `streams` rows. (The sequences still reading their prompts count: while they do, the
    /// few decoding ones see a lull, and a draft that starts on a prompt then pays for it at
    /// the full load that follows.) Before any pass is measured, every candidate proposes.
    pub fn choose(&self, base_rows: usize, streams: usize, candidates: &[Candidate]) -> Vec<bool> {
        let mut chosen: Vec<bool> = candidates.iter().map(|c| c.explore).collect();
        let (Some(base), Some(plain)) = (self.pass.estimate(base_rows as f64), self.pass.estimate(streams.max(1) as f64)) else {
            return vec![true; candidates.len()];
        };
        // tokens a second of this machine's plain decoding of the streams gives
        let rate = streams.max(1) as f64 / plain.max(f64::MIN_POSITIVE);
        let net = |p: Proposing| -> f64 {
            let draft = if p.drafting == 0 { 0.0 } else { self.draft.estimate(p.drafting as f64).unwrap_or(0.0) };
            let catch_up = if p.catch_up <= 0.0 { 0.0 } else { self.catch_up.estimate(p.catch_up).unwrap_or(0.0) };
            let extra = self.pass.estimate(p.rows).unwrap_or(base) - base + draft + catch_up;
            p.kept - extra * rate
        };
        // each source's candidates best kept-per-row first; then the best pair of leading runs
        // (the draft's passes are one cost for all its sequences, so its run is weighed whole
        // beside every run of the lookups', whose rows are their only cost)
        let order = |source: Source| -> Vec<usize> {
            let mut order: Vec<usize> = (0..candidates.len()).filter(|&i| !chosen[i] && candidates[i].source == source).collect();
            order.sort_by(|&a, &b| candidates[b].expected.kept_per_row().total_cmp(&candidates[a].expected.kept_per_row()));
            order
        };
        let (looked_up, drafted) = (order(Source::Ngram), order(Source::Draft));
        let explorers = Proposing { rows: base_rows as f64, kept: 0.0, drafting: 0, catch_up: 0.0 };
        let mut with_lookups = candidates.iter().zip(&chosen).filter(|(_, &c)| c).fold(explorers, |p, (c, _)| p.with(c));
        let (mut best, mut best_lens) = (f64::NEG_INFINITY, (0, 0));
        for n in 0..=looked_up.len() {
            if n > 0 {
                with_lookups = with_lookups.with(&candidates[looked_up[n - 1]]);
            }
            let mut proposing = with_lookups;
            for m in 0..=drafted.len() {
                if m > 0 {
                    proposing = proposing.with(&candidates[drafted[m - 1]]);
                }
                let v = net(proposing);
                // a tie goes to proposing: a round that proposes nothing costs nothing
                if v >= best {
                    (best, best_lens) = (v, (n, m));
                }
            }
        }
        for &i in looked_up[..best_lens.0].iter().chain(&drafted[..best_lens.1]) {
            chosen[i] = true;
        }
        chosen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Passes timed as `seconds(rows)` at 1, 2, 4, ..., 512 rows.
    fn learned(seconds: impl Fn(f64) -> f64) -> PassTimes {
        let mut p = PassTimes::default();
        for k in 0..10 {
            let rows = 1usize << k;
            p.record(rows, seconds(rows as f64));
        }
        p
    }

    #[test]
    fn pass_times_interpolate_never_fall_with_rows_and_extrapolate_in_proportion() {
        let mut p = PassTimes::default();
        assert_eq!(p.estimate(4.0), None);
        p.record(8, 0.080);
        // one point: in proportion on either side
        assert_eq!(p.estimate(4.0), Some(0.040));
        assert_eq!(p.estimate(16.0), Some(0.160));
        p.record(64, 0.320);
        // between the two: on the line; past the last: in proportion to it
        assert!((p.estimate(36.0).unwrap() - 0.200).abs() < 1e-12);
        assert!((p.estimate(128.0).unwrap() - 0.640).abs() < 1e-12);
        // a noisy slow small pass does not make a larger one cheaper
        p.record(16, 0.500);
        assert_eq!(p.estimate(64.0), Some(0.500));
        // a bucket's point moves by the newest measurement's weight
        let mut q = PassTimes::default();
        q.record(8, 0.1);
        q.record(7, 0.2);
        let expect = (8.0 - NEWEST, 0.1 + NEWEST * 0.1);
        assert_eq!(q.points[bucket(8)], Some(Point { rows: expect.0, seconds: expect.1 }));
        assert_eq!((bucket(1), bucket(2), bucket(3), bucket(4), bucket(5), bucket(1 << 40)), (0, 1, 2, 2, 3, BUCKETS - 1));
    }

    #[test]
    fn round_yields_start_hopeful_and_follow_the_rounds() {
        let mut y = RoundYield::hopeful(8);
        assert_eq!(y.kept_per_row(), 1.0);
        for _ in 0..20 {
            y.record(8, 1);
        }
        assert!((y.kept_per_row() - 0.125).abs() < 1e-3, "{y:?}");
        assert_eq!(RoundYield { proposed: 0.0, kept: 0.0 }.kept_per_row(), f64::INFINITY);
        // rounds that propose nothing leave the share kept as it was
        let mut z = RoundYield::hopeful(8);
        z.record(8, 2);
        let share = z.kept_share();
        z.record(0, 0);
        assert!((z.kept_share() - share).abs() < 1e-12 && share < 1.0);
    }

    #[test]
    fn the_loops_rounds_together_are_a_new_sequences_expectation() {
        let mut cost = SpecCost::default();
        let (mut a, mut b) = (RoundYield::hopeful(8), RoundYield::hopeful(8));
        cost.round(Source::Draft, &mut a, 8, 0);
        cost.round(Source::Draft, &mut b, 8, 8);
        // one round each: the typical round has seen both
        assert_eq!(a, RoundYield { proposed: 8.0, kept: 8.0 * (1.0 - NEWEST) });
        let t = cost.typical(Source::Draft).unwrap();
        assert_eq!(t.proposed, 8.0);
        assert!((t.kept - (8.0 * (1.0 - NEWEST) + NEWEST * 8.0 * NEWEST)).abs() < 1e-12, "{t:?}");
        // a draft model's new sequence expects all proposals at that share; an n-gram one hopes
        let first = cost.first_yield(Source::Draft, 8);
        assert_eq!(first.proposed, 8.0);
        assert!((first.kept_share() - t.kept_share()).abs() < 1e-12 && first.kept_share() < 1.0);
        assert_eq!(cost.first_yield(Source::Ngram, 8), RoundYield::hopeful(8));
        assert_eq!(SpecCost::default().first_yield(Source::Draft, 8), RoundYield::hopeful(8));
        // each source's rounds are its own: the draft's say nothing of the lookups'
        assert_eq!(cost.typical(Source::Ngram), None);
        let mut c = RoundYield::hopeful(8);
        cost.round(Source::Ngram, &mut c, 8, 8);
        assert_eq!(cost.typical(Source::Ngram), Some(RoundYield::hopeful(8)));
        assert_eq!(cost.typical(Source::Draft), Some(t));
    }

    #[test]
    fn the_drafts_share_of_rounds_follows_the_steps_quiet_lookups() {
        let mut cost = SpecCost::default();
        assert_eq!(cost.draft_share(), 1.0);
        // a step with no sequence that may propose says nothing
        cost.note_quiet(0, 0);
        assert_eq!(cost.draft_share(), 1.0);
        cost.note_quiet(1, 8);
        assert_eq!(cost.draft_share(), 0.125);
        cost.note_quiet(8, 8);
        assert!((cost.draft_share() - (0.125 + NEWEST * 0.875)).abs() < 1e-12);
        for _ in 0..40 {
            cost.note_quiet(0, 4);
        }
        assert!(cost.draft_share() < 1e-3, "{}", cost.draft_share());
    }

    #[test]
    fn a_left_out_sequence_drifts_toward_the_typical_round() {
        let mut cost = SpecCost::default();
        let mut poor = RoundYield { proposed: 8.0, kept: 1.0 };
        // nothing typical yet: nothing to drift toward
        cost.left_out(&mut poor);
        assert_eq!(poor, RoundYield { proposed: 8.0, kept: 1.0 });
        let mut good = RoundYield::hopeful(8);
        for _ in 0..20 {
            cost.round(Source::Ngram, &mut good, 8, 7);
        }
        let share = |y: RoundYield| y.kept_share();
        let before = share(poor);
        cost.left_out(&mut poor);
        assert!(share(poor) > before, "{poor:?}");
        for _ in 0..20 {
            cost.left_out(&mut poor);
        }
        assert!((share(poor) - share(cost.typical(Source::Ngram).unwrap())).abs() < 0.01, "{poor:?}");
    }

    #[test]
    fn idle_sequences_explore_together_on_the_shared_clock() {
        let at: Vec<u64> = (1..=100).filter(|&step| explores(step, 5)).collect();
        assert_eq!(at, [64, 96]);
        assert!(explores(EXPLORE_EVERY, 0) && !explores(EXPLORE_EVERY, 1));
    }

    fn candidate(proposed: f64, kept: f64) -> Candidate {
        Candidate { source: Source::Draft, expected: RoundYield { proposed, kept }, explore: false, catch_up: 0.0 }
    }

    #[test]
    fn weight_bound_passes_take_proposals_compute_bound_ones_only_well_kept() {
        // bound by the weights: 40 ms whatever the rows up to 64, then compute
        let weights = SpecCost { pass: learned(|r| 0.040f64.max(r * 0.000_6)), ..SpecCost::default() };
        // bound by compute: 5 ms a row
        let compute = SpecCost { pass: learned(|r| 0.005 * r), ..SpecCost::default() };
        let story = candidate(8.0, 1.0);
        let edit = candidate(8.0, 6.0);
        // one sequence: even a story's one kept token in eight is worth rows that cost nothing
        assert_eq!(weights.choose(1, 1, &[story]), [true]);
        assert_eq!(weights.choose(1, 1, &[edit]), [true]);
        // eight sequences on a compute-bound machine: a row costs a token's time, and no
        // proposal is kept every time
        assert_eq!(compute.choose(8, 8, &[story; 8]), [false; 8]);
        assert_eq!(compute.choose(8, 8, &[edit; 8]), [false; 8]);
        // prompts in the pass do not make its rows cheaper
        assert_eq!(compute.choose(8 + 256, 8, &[edit, story]), [false, false]);
        // eight sequences where rows are nearly free up to 64 (the pass reads the weights
        // anyway): the edits' rows fit
        assert_eq!(weights.choose(8, 8, &[edit, edit, edit, edit]), [true; 4]);
    }

    #[test]
    fn the_best_kept_per_row_go_first_and_idle_sequences_explore() {
        // 20 ms plus 2 ms a row: a proposal kept half the time pays, a quarter does not
        let cost = SpecCost { pass: learned(|r| 0.020 + 0.002 * r), ..SpecCost::default() };
        let (good, poor) = (candidate(8.0, 4.0), candidate(8.0, 0.5));
        assert_eq!(cost.choose(4, 4, &[poor, good, poor, good]), [false, true, false, true]);
        let idle = Candidate { explore: true, ..poor };
        assert_eq!(cost.choose(4, 4, &[poor, idle]), [false, true]);
        // a round that proposes nothing costs nothing
        assert_eq!(cost.choose(4, 4, &[candidate(0.0, 0.0)]), [true]);
        // nothing measured yet: everyone proposes
        assert_eq!(SpecCost::default().choose(4, 4, &[poor, poor]), [true, true]);
    }

    #[test]
    fn a_draft_models_passes_count_against_its_proposals() {
        let pass = learned(|r| 0.040f64.max(r * 0.000_6));
        let cheap = SpecCost { pass: pass.clone(), draft: learned(|_| 0.002), catch_up: learned(|r| 0.001 * r), ..SpecCost::default() };
        let dear = SpecCost { pass, draft: learned(|n| 0.060 + 0.001 * n), ..SpecCost::default() };
        let modest = candidate(2.0, 1.0);
        assert_eq!(cheap.choose(1, 1, &[modest]), [true]);
        // 40 ms for 1 token, or 101 ms for 2
        assert_eq!(dear.choose(1, 1, &[modest]), [false]);
        // after a pause of 100 tokens the same round first costs their 100 ms of catching up
        let paused = Candidate { catch_up: 100.0, ..modest };
        assert_eq!(cheap.choose(1, 1, &[paused]), [false]);
        assert_eq!(cheap.choose(1, 1, &[Candidate { catch_up: 10.0, ..modest }]), [true]);
    }

    #[test]
    fn only_the_draft_models_rounds_pay_for_its_passes() {
        // 40 ms whatever the rows up to 64; the draft's passes 60 ms and 1 ms a sequence
        let dear = SpecCost { pass: learned(|r| 0.040f64.max(r * 0.000_6)), draft: learned(|n| 0.060 + 0.001 * n), ..SpecCost::default() };
        let drafted = candidate(2.0, 1.0);
        let looked_up = Candidate { source: Source::Ngram, ..drafted };
        // one sequence: 40 ms for 1 token, 40 ms for 2 with the lookup's proposals, 101 ms
        // with the draft's
        assert_eq!(dear.choose(1, 1, &[looked_up]), [true]);
        assert_eq!(dear.choose(1, 1, &[drafted]), [false]);
        // side by side (the draft's candidate first at the same yield): the lookups' rows are
        // taken without paying for the draft's pass
        assert_eq!(dear.choose(2, 2, &[drafted, looked_up, drafted]), [false, true, false]);
        // a cheap draft: both sources' rounds pay
        let cheap = SpecCost { draft: learned(|_| 0.002), ..dear.clone() };
        assert_eq!(cheap.choose(2, 2, &[drafted, looked_up]), [true, true]);
        // many well-kept drafts pay for the draft's pass together where one alone does not
        let edit = candidate(8.0, 7.0);
        assert_eq!(dear.choose(1, 1, &[candidate(8.0, 1.0)]), [false]);
        assert_eq!(dear.choose(8, 8, &[edit; 8]), [true; 8]);
    }

    #[test]
    fn a_prompt_is_charged_over_the_rounds_its_sequence_has_left() {
        let edit = RoundYield { proposed: 8.0, kept: 7.0 };
        // 200 tokens left, 8 a round: 25 rounds share a prompt of 300
        assert_eq!(prompt_share(300, 200, edit), 12.0);
        // the last round, or fewer tokens left than a round gives: the whole prompt
        assert_eq!(prompt_share(300, 5, edit), 300.0);
        assert_eq!(prompt_share(300, 0, edit), 300.0);
        // rounds that keep nothing: a round per token
        assert_eq!(prompt_share(300, 150, RoundYield { proposed: 8.0, kept: 0.0 }), 2.0);

        // reading a prompt costs 4 ms a token; one sequence whose rows cost nothing: its round
        // pays for its share of a long prompt
        let catch_up = learned(|r| 0.004 * r);
        let weights = SpecCost {
            pass: learned(|r| 0.040f64.max(r * 0.000_6)),
            draft: learned(|_| 0.004),
            catch_up: catch_up.clone(),
            ..SpecCost::default()
        };
        let fresh = |share| Candidate { source: Source::Draft, expected: edit, explore: false, catch_up: share };
        assert_eq!(weights.choose(1, 1, &[fresh(prompt_share(300, 200, edit))]), [true]);
        // eight, where a pass costs 40 ms and 2 ms a row and the draft's 50 ms: rounds that pay
        // for themselves do not pay for their prompts' shares too
        let compute = SpecCost { pass: learned(|r| 0.040 + 0.002 * r), draft: learned(|_| 0.050), catch_up, ..SpecCost::default() };
        let lean = RoundYield { proposed: 8.0, kept: 7.9 };
        let fresh = |share| Candidate { source: Source::Draft, expected: lean, explore: false, catch_up: share };
        assert_eq!(compute.choose(8, 8, &[fresh(0.0); 8]), [true; 8]);
        assert_eq!(compute.choose(8, 8, &[fresh(prompt_share(300, 200, lean)); 8]), [false; 8]);
        // one sequence decoding beside 7 reading their prompts (256 rows of them in the pass):
        // its round is valued at the rate of the 8 streams that follow, not of one alone
        let first = [fresh(prompt_share(300, 200, lean))];
        assert_eq!(compute.choose(1 + 256, 1, &first), [true]);
        assert_eq!(compute.choose(1 + 256, 8, &first), [false]);
    }
}
