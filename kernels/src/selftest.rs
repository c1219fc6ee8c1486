//! The device's own instructions against their documented behaviour (`cuda/selftest.cu`): run
//! by the tests on the CPU execution harness, whose emulation they check, and by the device
//! check on a GPU, whose hardware they check; the two agreeing is what lets kernels built on
//! those instructions be tested here.

use crate::launch;
use crate::runtime::Runtime;

/// Signed bytes from a seed (a multiplicative hash; any spread of values does).
fn bytes(n: usize, seed: u32) -> Vec<u8> {
    (0..n as u32).map(|i| (i.wrapping_add(seed).wrapping_mul(2_654_435_761) >> 13) as u8).collect()
}

/// One mma.sync m16n8k32 and one m16n8k16 of signed bytes against the plain sums of products:
/// `Err` names the first output that differs.
pub fn mma_s8<R: Runtime>(rt: &R, seed: u32) -> Result<(), String> {
    [32, 16].into_iter().try_for_each(|k| mma_s8_shape(rt, seed, k))
}

fn mma_s8_shape<R: Runtime>(rt: &R, seed: u32, k: usize) -> Result<(), String> {
    let (a, b) = (bytes(16 * k, seed), bytes(8 * k, seed ^ 0x5bd1));
    let (da, db) = (rt.upload(&a).map_err(|e| e.to_string())?, rt.upload(&b).map_err(|e| e.to_string())?);
    let dc = rt.alloc(16 * 8 * 4).map_err(|e| e.to_string())?;
    launch::mma_s8_check(rt, &da, &db, &dc, k).map_err(|e| e.to_string())?;
    let mut out = vec![0u8; 16 * 8 * 4];
    rt.download(&dc, &mut out).map_err(|e| e.to_string())?;
    for i in 0..16 {
        for j in 0..8 {
            // the kernel's accumulators start at (lane, -lane, 2 lane, 7) for lane 4 (i % 8) + j / 2
            let lane = 4 * (i % 8) as i32 + j as i32 / 2;
            let start = match (i < 8, j % 2) {
                (true, 0) => lane,
                (true, _) => -lane,
                (false, 0) => 2 * lane,
                (false, _) => 7,
            };
            let want = start + (0..k).map(|l| i32::from(a[i * k + l] as i8) * i32::from(b[j * k + l] as i8)).sum::<i32>();
            let at = (i * 8 + j) * 4;
            let got = i32::from_le_bytes([out[at], out[at + 1], out[at + 2], out[at + 3]]);
            if got != want {
                return Err(format!("mma.sync m16n8k{k} s8: C[{i}][{j}] is {got}, the sum of products {want}"));
            }
        }
    }
    Ok(())
}

#[cfg(all(test, feature = "host"))]
mod tests {
    #[test]
    fn the_harness_runs_mma_sync_in_its_documented_layout() {
        for seed in [1, 2, 3] {
            super::mma_s8(&crate::host::HostRuntime::default(), seed).unwrap();
        }
    }
}
