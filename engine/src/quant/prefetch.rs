//! Asking the cache for weight bytes ahead of their use. Generation reads every weight once,
//! straight from memory, and the hardware's own prefetchers alone leave the kernels waiting on
//! it: on the 2-core Xeon, IQ2_XXS generation ran at half its speed and Q4_K's rows at 0.8x
//! llama.cpp's without these hints.

/// How many bytes ahead of the ones being read the kernels ask for the next.
pub const AHEAD: usize = 512;

/// Asks for `bytes` to be brought into the cache, a 64-byte line at a time (a hint: nothing
/// waits for it, and targets without a prefetch instruction do nothing).
#[inline]
pub fn prefetch(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    for line in (0..bytes.len()).step_by(64) {
        // SAFETY: `line` is within `bytes`; a prefetch reads nothing architecturally and never
        // faults. SSE, which `_mm_prefetch` needs, is part of every x86_64 CPU.
        unsafe { core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(bytes.as_ptr().add(line).cast()) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

/// The longest row [`row_ahead`] asks for. Past it the hardware's stream prefetchers keep up
/// alone, and a whole row of hints at every row start gets in their way: on a 2-core Zen 4, one
/// activation row against a 113 MB Q6_K matrix of 7,350-byte rows read at 19-25 GB/s with the
/// hints and 31-52 without (2,940-byte rows: 36-48 against 50-55); rows of 1,260 and 1,632 bytes
/// read at about the same rate either way (`matvec_throughput` in `backend/cpu/matmul.rs`).
/// Qwen2.5-Coder-1.5B Q4_K_M generation, whose Q6_K down projections have 7,350-byte rows, went
/// from 26.2 to 29.4 tokens/s there. The Xeon that needed the hints has not run long rows since.
pub const LONGEST_HINTED_ROW: usize = 2048;

/// The row to ask for while row `r` of the rows of `row_bytes` bytes in `data` is read: the
/// first one at least [`AHEAD`] bytes on (empty past the end, and for rows longer than
/// [`LONGEST_HINTED_ROW`]). Asking for one row per row read keeps every row asked for once,
/// that far ahead.
pub fn row_ahead(data: &[u8], row_bytes: usize, r: usize) -> &[u8] {
    if row_bytes > LONGEST_HINTED_ROW {
        return &[];
    }
    let ahead = r + AHEAD.div_ceil(row_bytes.max(1));
    let start = (ahead * row_bytes).min(data.len());
    &data[start..(start + row_bytes).min(data.len())]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_row_asked_for_is_the_first_one_far_enough_on() {
        let data: Vec<u8> = (0..100u32).flat_map(|r| [r as u8; 100]).collect();
        // rows of 100 bytes: the one at least AHEAD bytes on is ceil(AHEAD / 100) rows later
        let ahead = AHEAD.div_ceil(100);
        assert_eq!(row_ahead(&data, 100, 3), &[(3 + ahead) as u8; 100][..]);
        // rows longer than AHEAD: the next one
        let long: Vec<u8> = (0..4u8).flat_map(|r| vec![r; AHEAD + 1]).collect();
        assert_eq!(row_ahead(&long, AHEAD + 1, 1), &vec![2u8; AHEAD + 1][..]);
        // rows longer than the hardware needs hints for: none
        let longest: Vec<u8> = (0..4u8).flat_map(|r| vec![r; LONGEST_HINTED_ROW]).collect();
        assert_eq!(row_ahead(&longest, LONGEST_HINTED_ROW, 1), &vec![2u8; LONGEST_HINTED_ROW][..]);
        let longer: Vec<u8> = (0..4u8).flat_map(|r| vec![r; LONGEST_HINTED_ROW + 1]).collect();
        assert!(row_ahead(&longer, LONGEST_HINTED_ROW + 1, 1).is_empty());
        // past the end: nothing (and no panic)
        assert!(row_ahead(&data, 100, 99).is_empty());
        assert!(row_ahead(&long, AHEAD + 1, 3).is_empty());
        prefetch(row_ahead(&data, 100, 0));
    }
}
