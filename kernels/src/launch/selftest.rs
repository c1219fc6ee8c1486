//! Launchers of `selftest.cu`: the device's own instructions against their documented behaviour.

use super::{check, go};
use crate::runtime::{Arg, Runtime, RuntimeError};

/// `c = start + a · bᵀ` by the tensor cores' mma.sync m16n8k`k` (`selftest.cu`; `k` 32 or 16):
/// `a` 16 rows and `b` 8 rows of `k` signed bytes, `c` 16 x 8 `int32`, `start` each lane's
/// accumulators before the product (see the kernel).
pub fn mma_s8_check<R: Runtime>(rt: &R, a: &R::Buffer, b: &R::Buffer, c: &R::Buffer, k: usize) -> Result<(), RuntimeError> {
    const K: &str = "mma_s8_check";
    if k != 16 && k != 32 {
        return Err(RuntimeError::Device(format!("{K}: k {k} is neither 16 nor 32")));
    }
    check(rt, K, "a", a, 16 * k)?;
    check(rt, K, "b", b, 8 * k)?;
    check(rt, K, "c", c, 16 * 8 * 4)?;
    go(rt, K, [1, 1, 1], 32, &[Arg::Buf(a), Arg::Buf(b), Arg::Buf(c), Arg::I32(k as i32)])
}

/// The warp collectives of `selftest.cu` over `threads` threads of one block (whole warps: the
/// shuffles name all 32 lanes): `x` one f32 per thread, `out` ten per thread (see the kernel).
pub fn warp_collectives_check<R: Runtime>(rt: &R, x: &R::Buffer, out: &R::Buffer, threads: usize) -> Result<(), RuntimeError> {
    const K: &str = "warp_collectives_check";
    if threads == 0 || threads > 1024 || !threads.is_multiple_of(32) {
        return Err(RuntimeError::Device(format!("{K}: {threads} threads, not whole warps of 32 up to 1024")));
    }
    check(rt, K, "x", x, threads * 4)?;
    check(rt, K, "out", out, threads * 10 * 4)?;
    go(rt, K, [1, 1, 1], threads as u32, &[Arg::Buf(x), Arg::Buf(out)])
}
