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

/// The warp collectives (`warp_collectives_check`) over `threads` threads: portable.cuh's
/// butterfly sum and maximum and its gather of several values against plain shuffles, bit for
/// bit, and the sums against the butterfly computed here. Whole warps only: a shuffle names all
/// 32 lanes, which must exist (the harness refuses a partial warp too). `Err` names the first
/// thread that differs.
pub fn warp_collectives<R: Runtime>(rt: &R, seed: u32, threads: usize) -> Result<(), String> {
    // values of many magnitudes and both signs, so that the order of the sums shows in the bits
    let x: Vec<f32> = bytes(threads, seed)
        .iter()
        .zip(bytes(threads, seed ^ 0x9e37))
        .map(|(&m, e)| (f32::from(m) - 127.5) * 2f32.powi(i32::from(e % 24) - 12))
        .collect();
    let x_bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let dx = rt.upload(&x_bytes).map_err(|e| e.to_string())?;
    let dout = rt.alloc(threads * 10 * 4).map_err(|e| e.to_string())?;
    launch::warp_collectives_check(rt, &dx, &dout, threads).map_err(|e| e.to_string())?;
    let mut bytes_out = vec![0u8; threads * 10 * 4];
    rt.download(&dout, &mut bytes_out).map_err(|e| e.to_string())?;
    let out: Vec<f32> = bytes_out.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    let sums = butterfly_sums(&x);
    for (t, o) in out.chunks_exact(10).enumerate() {
        let pairs = [
            ("warp_sum_f", 0, 1),
            ("warp_max_f", 2, 3),
            ("shfl_floats value 0", 4, 7),
            ("shfl_floats value 1", 5, 8),
            ("shfl_floats value 2", 6, 9),
        ];
        for (what, ours, shuffles) in pairs {
            if o[ours].to_bits() != o[shuffles].to_bits() {
                return Err(format!("thread {t}: {what} gives {:e}, plain shuffles {:e}", o[ours], o[shuffles]));
            }
        }
        if o[0].to_bits() != sums[t].to_bits() {
            return Err(format!("thread {t}: the warp's sum is {:e}, its butterfly {:e}", o[0], sums[t]));
        }
    }
    Ok(())
}

/// Each thread's butterfly sum over its warp: at each step of masks 16 down to 1 a lane's value
/// plus lane (lane ^ mask)'s, a lane beyond `x` giving the lane its own value.
fn butterfly_sums(x: &[f32]) -> Vec<f32> {
    let mut v = x.to_vec();
    for mask in [16, 8, 4, 2, 1] {
        let before = v.clone();
        for (t, value) in v.iter_mut().enumerate() {
            let partner = t ^ mask;
            *value = before[t] + if partner < before.len() { before[partner] } else { before[t] };
        }
    }
    v
}

#[cfg(all(test, feature = "host"))]
mod tests {
    #[test]
    fn the_harness_runs_mma_sync_in_its_documented_layout() {
        for seed in [1, 2, 3] {
            super::mma_s8(&crate::host::HostRuntime::default(), seed).unwrap();
        }
    }

    #[test]
    fn the_harness_gives_the_warp_collectives_the_bits_of_plain_shuffles() {
        for (seed, threads) in [(1, 32), (2, 128), (3, 256)] {
            super::warp_collectives(&crate::host::HostRuntime::default(), seed, threads).unwrap();
        }
        // a partial last warp is refused before the launch
        let err = super::warp_collectives(&crate::host::HostRuntime::default(), 4, 81).unwrap_err();
        assert!(err.contains("not whole warps"), "{err}");
    }
}
