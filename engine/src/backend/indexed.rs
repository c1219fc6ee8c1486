//! The plan of an indexed product ([`Backend::matmul_indexed`], ggml's `mul_mat_id`), the same
//! on every backend: which matrices the slots use, each one's slots in slot order, and the
//! activation rows each reads, gathered once per distinct list of rows.
//!
//! [`Backend::matmul_indexed`]: super::Backend::matmul_indexed

/// Slots grouped by the matrix they name.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct IndexedPlan {
    /// The matrices some slot names, in index order.
    pub used: Vec<usize>,
    /// Per used matrix: its slots, in order.
    pub slots: Vec<Vec<usize>>,
    /// The distinct lists of activation rows the used matrices read (in one token's step every
    /// chosen expert reads the same row: one list).
    pub sources: Vec<Vec<usize>>,
    /// Per used matrix: its list in `sources`.
    pub source_of: Vec<usize>,
}

impl IndexedPlan {
    /// The plan of `ids` over `n_matrix` matrices and `x_rows` activation rows (slot `p` reads
    /// row `p / (ids.len() / x_rows)`); [`indexed_misfit`] has accepted them.
    pub fn new(ids: &[usize], n_matrix: usize, x_rows: usize) -> IndexedPlan {
        let per_row = ids.len() / x_rows.max(1);
        let mut slots_of: Vec<Vec<usize>> = vec![Vec::new(); n_matrix];
        for (p, &e) in ids.iter().enumerate() {
            slots_of[e].push(p);
        }
        let used: Vec<usize> = (0..n_matrix).filter(|&e| !slots_of[e].is_empty()).collect();
        let slots: Vec<Vec<usize>> = used.iter().map(|&e| std::mem::take(&mut slots_of[e])).collect();
        let mut sources: Vec<Vec<usize>> = Vec::new();
        let source_of = slots
            .iter()
            .map(|slots| {
                let rows: Vec<usize> = slots.iter().map(|&p| p / per_row).collect();
                sources.iter().position(|s| *s == rows).unwrap_or_else(|| {
                    sources.push(rows);
                    sources.len() - 1
                })
            })
            .collect();
        IndexedPlan { used, slots, sources, source_of }
    }
}

/// Why `ids` cannot index the sets of matrices of shapes `sets` (per set, each matrix's rows x
/// cols) over an `x` of `x_rows` x `x_cols`, if they cannot: sets of different sizes or a set of
/// mixed shapes, an id past the matrices, a slot count that is not a whole multiple of the rows,
/// or matrices whose columns are not the rows' length.
pub(crate) fn indexed_misfit(sets: &[Vec<(usize, usize)>], ids: &[usize], x_rows: usize, x_cols: usize) -> Option<String> {
    let n_matrix = sets.first().map_or(0, Vec::len);
    if sets.iter().any(|s| s.len() != n_matrix) {
        return Some("sets of different sizes".into());
    }
    if let Some(&e) = ids.iter().find(|&&e| e >= n_matrix) {
        return Some(format!("matrix {e} of {n_matrix}"));
    }
    if ids.len() < x_rows || (x_rows == 0 && !ids.is_empty()) || (x_rows > 0 && !ids.len().is_multiple_of(x_rows)) {
        return Some(format!("{} slots for {x_rows} activation rows", ids.len()));
    }
    for set in sets {
        if let Some(&(rows, cols)) = set.iter().find(|&&shape| shape != set[0] || shape.1 != x_cols) {
            return Some(format!("{rows}x{cols} matrices in a set of {}x{} for rows of {x_cols}", set[0].0, set[0].1));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_group_by_matrix_and_share_their_rows() {
        // two tokens, two slots each: token 0 chose 3 and 1, token 1 chose 1 and 0
        let plan = IndexedPlan::new(&[3, 1, 1, 0], 4, 2);
        assert_eq!(plan.used, [0, 1, 3]);
        assert_eq!(plan.slots, [vec![3], vec![1, 2], vec![0]]);
        assert_eq!(plan.sources, [vec![1], vec![0, 1], vec![0]]);
        assert_eq!(plan.source_of, [0, 1, 2]);
        // one token: every chosen matrix reads its row, gathered once
        let one = IndexedPlan::new(&[2, 0, 1], 3, 1);
        assert_eq!(one.sources, [vec![0]]);
        assert_eq!(one.source_of, [0, 0, 0]);
        // one row per slot
        assert_eq!(IndexedPlan::new(&[1, 1], 2, 2).sources, [vec![0, 1]]);
    }

    #[test]
    fn misfits_are_named() {
        let set = |n: usize, cols: usize| vec![(8, cols); n];
        assert_eq!(indexed_misfit(&[set(4, 16)], &[0, 4], 1, 16).as_deref(), Some("matrix 4 of 4"));
        assert_eq!(indexed_misfit(&[set(4, 16)], &[0, 1, 2], 2, 16).as_deref(), Some("3 slots for 2 activation rows"));
        assert_eq!(indexed_misfit(&[set(4, 16)], &[0], 2, 16).as_deref(), Some("1 slots for 2 activation rows"));
        assert_eq!(
            indexed_misfit(&[set(4, 16), set(4, 12)], &[0], 1, 16).as_deref(),
            Some("8x12 matrices in a set of 8x12 for rows of 16")
        );
        assert_eq!(indexed_misfit(&[set(4, 16), set(3, 16)], &[0], 1, 16).as_deref(), Some("sets of different sizes"));
        let mut mixed = set(4, 16);
        mixed[2] = (9, 16);
        assert_eq!(indexed_misfit(&[mixed], &[0], 1, 16).as_deref(), Some("9x16 matrices in a set of 8x16 for rows of 16"));
        assert_eq!(indexed_misfit(&[set(4, 16)], &[0, 3], 1, 16), None);
        assert_eq!(indexed_misfit(&[set(4, 16)], &[], 0, 16), None);
    }
}
