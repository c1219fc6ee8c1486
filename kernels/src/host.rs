//! The CPU execution harness (feature `host`): the same kernel sources compiled as host C++ by
//! the build script, launched like CUDA kernels (a grid of blocks of threads, the arguments as
//! an array of pointers to each), with each block's threads run as host threads. It runs the
//! kernels' arithmetic on a machine without a GPU, so they can be checked against the CPU
//! backend.

use std::ffi::c_void;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use crate::runtime::{Launch, RuntimeError};
use crate::steps::{Primitives, Recorded, Stepped};
use memory::GuardedMemory;

mod memory;

type Launcher = unsafe extern "C" fn(*const u32, *const u32, *mut *mut c_void) -> i32;

include!(concat!(env!("OUT_DIR"), "/host_launchers.rs"));

/// How long one launch may run before the process is stopped: a kernel that never returns
/// (a thread spinning, a barrier never met) would otherwise hang the tests.
const TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HostError {
    #[error("no kernel named {0}")]
    UnknownKernel(String),
    #[error("{0}: the block must be 1 to 1024 threads along x only, and the grid non-empty")]
    Geometry(String),
    /// The launch ran, and `kernel` did something a GPU would not do as the host did: the first
    /// such thing of the launch, `detail` saying where (a source line, an address).
    #[error("{kernel}: {fault} ({detail})")]
    Fault { kernel: String, fault: Fault, detail: String },
}

/// What a kernel can do that the harness finds and a GPU would not do as the host does. The
/// first five are the launch's status (`host.hpp`'s `Fault`), the last the buffers' check after
/// it.
#[derive(Debug, Clone, Copy, thiserror::Error, PartialEq, Eq)]
pub enum Fault {
    #[error("the threads of a block wait at barriers that cannot complete")]
    Deadlock,
    #[error("a load or store at an address its alignment rules out, where a GPU faults")]
    Misaligned,
    #[error("a warp shuffle with lanes of the warp returned or beyond the block, which the full mask leaves undefined on a GPU")]
    PartialWarp,
    #[error("the threads of a block met at __syncthreads from different source lines: undefined on a GPU")]
    DivergentBarrier,
    #[error("a shift by its operand's width or more, or a float converted out of an integer's range, which a GPU computes otherwise")]
    DiffersOnAGpu,
    #[error("a write out of a buffer's bounds, where a GPU would reach another allocation's bytes")]
    StrayWrite,
}

impl Fault {
    /// The fault a launch's status names (`host.hpp`'s `Fault`), if any.
    fn of_status(status: i32) -> Option<Fault> {
        match status {
            2 => Some(Fault::Deadlock),
            3 => Some(Fault::Misaligned),
            4 => Some(Fault::PartialWarp),
            5 => Some(Fault::DivergentBarrier),
            6 => Some(Fault::DiffersOnAGpu),
            _ => None,
        }
    }
}

extern "C" {
    /// The detail of the calling thread's last launch's fault, copied into `out` (`len` bytes,
    /// NUL-terminated); returns its length (`host.cpp`).
    fn kernels_host_last_fault(out: *mut std::ffi::c_char, len: usize) -> usize;
}

/// The detail of the fault the calling thread's last launch returned.
fn last_fault_detail() -> String {
    let mut buf = [0u8; 512];
    // SAFETY: the function writes at most `buf.len()` bytes, NUL-terminated, into `buf`.
    let n = unsafe { kernels_host_last_fault(buf.as_mut_ptr().cast(), buf.len()) };
    String::from_utf8_lossy(&buf[..n.min(buf.len() - 1)]).into_owned()
}

/// The kernels the harness has.
pub fn kernel_names() -> impl Iterator<Item = &'static str> {
    LAUNCHERS.iter().map(|(n, _)| *n)
}

/// The launch's arguments, moved to the thread that runs it.
struct Params(Vec<*mut c_void>);

// SAFETY: the pointers are only read by the launch, which `launch` waits for (or stops the
// process), while the caller keeps what they point to alive and unaliased.
unsafe impl Send for Params {}

/// Runs kernel `name` over `grid` blocks of `block` threads. `params[i]` points to the kernel's
/// i-th argument (a device pointer argument is a host pointer here).
///
/// # Safety
/// Every pointer must point to a value of the type the kernel's parameter has, and every buffer
/// the kernel reads or writes must be as large as the launch geometry makes it access.
pub unsafe fn launch(name: &str, grid: [u32; 3], block: [u32; 3], params: &mut [*mut c_void]) -> Result<(), HostError> {
    let &(_, launcher) = LAUNCHERS.iter().find(|(n, _)| *n == name).ok_or_else(|| HostError::UnknownKernel(name.to_string()))?;
    let (tx, rx) = mpsc::channel();
    let args = Params(params.to_vec());
    let runner = std::thread::spawn(move || {
        let mut args = args;
        // SAFETY: the caller's contract (see above) covers the arguments; the geometry is
        // checked by the launcher, which returns non-zero instead of running.
        let status = unsafe { launcher(grid.as_ptr(), block.as_ptr(), args.0.as_mut_ptr()) };
        let fault = Fault::of_status(status).map(|fault| (fault, last_fault_detail()));
        let _ = tx.send((status, fault));
    });
    let status = rx.recv_timeout(TIMEOUT);
    if status.is_ok() {
        // finished: joining orders its writes before the caller's reads (for ThreadSanitizer too)
        let _ = runner.join();
    }
    match status {
        Ok((0, _)) => Ok(()),
        Ok((_, Some((fault, detail)))) => Err(HostError::Fault { kernel: name.to_string(), fault, detail }),
        Ok((_, None)) => Err(HostError::Geometry(name.to_string())),
        Err(_) => {
            // the launch still holds the caller's buffers: returning would free them under it
            eprintln!("kernel {name} did not finish within {} s: stopping", TIMEOUT.as_secs());
            std::process::abort();
        }
    }
}

/// The argument array of a launch: pointers to each argument, in order.
#[macro_export]
macro_rules! host_args {
    ($($arg:expr),* $(,)?) => {
        [$(std::ptr::from_ref(&$arg).cast_mut().cast::<std::ffi::c_void>()),*]
    };
}

/// Memory of the harness's "device": host memory written only by launches and copies, through
/// the pointers they are given, 256-byte aligned like a device allocation's start, so that the
/// kernels' aligned loads meet the alignments they would on a GPU (`host.hpp` checks them), and
/// ending at a page nothing may touch (`host/memory.rs`). A handle: clones share the memory.
#[derive(Clone)]
pub struct HostBuffer {
    mem: Arc<GuardedMemory>,
}

impl HostBuffer {
    fn ptr(&self) -> *mut u8 {
        self.mem.ptr()
    }
}

/// The CPU execution harness's primitives: the kernels run on host threads over host buffers;
/// launches from different threads run side by side (one at a time when built for
/// ThreadSanitizer). A replayed step issues its recorded operations again, one by one, its
/// uploads from the staging as a graph's copies would.
#[derive(Default)]
pub struct HostDevice;

/// The CPU execution harness as a [`Runtime`](crate::Runtime), recording and replaying steps as
/// `CudaRuntime` does, so that the harness issues what a GPU would.
pub type HostRuntime = Stepped<HostDevice>;

impl Primitives for HostDevice {
    type Buffer = HostBuffer;
    type Graph = ();
    type Staging = Vec<u8>;

    /// All bytes 0xFF: an f32 NaN in every value a launch fails to write, which the tests see.
    fn alloc(&self, bytes: usize) -> Result<HostBuffer, RuntimeError> {
        let mem = GuardedMemory::new(bytes, 0xFF).map_err(RuntimeError::Device)?;
        Ok(HostBuffer { mem: Arc::new(mem) })
    }

    fn len(&self, buf: &HostBuffer) -> usize {
        buf.mem.len()
    }

    fn address(&self, buf: &HostBuffer) -> u64 {
        buf.ptr() as u64
    }

    fn shared(&self, buf: &HostBuffer) -> bool {
        Arc::strong_count(&buf.mem) > 1
    }

    fn write(&self, buf: &HostBuffer, data: &[u8]) -> Result<(), RuntimeError> {
        if data.len() > buf.mem.len() {
            return Err(RuntimeError::Device(format!("write of {} bytes into a buffer of {}", data.len(), buf.mem.len())));
        }
        // SAFETY: in bounds (checked); no launch runs while this copy does (launches finish
        // before `launch` returns).
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), buf.ptr(), data.len()) };
        Ok(())
    }

    fn read(&self, buf: &HostBuffer, out: &mut [u8]) -> Result<(), RuntimeError> {
        if out.len() > buf.mem.len() {
            return Err(RuntimeError::Device(format!("download of {} bytes from a buffer of {}", out.len(), buf.mem.len())));
        }
        // SAFETY: in bounds (checked); no launch runs while this copy does.
        unsafe { std::ptr::copy_nonoverlapping(buf.ptr(), out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    fn zero(&self, at: u64, bytes: usize) -> Result<(), RuntimeError> {
        // SAFETY: the runtime passes the address range of a live buffer (its own check).
        unsafe { std::ptr::write_bytes(at as *mut u8, 0, bytes) };
        Ok(())
    }

    fn copy(&self, from: u64, to: u64, bytes: usize) -> Result<(), RuntimeError> {
        // SAFETY: the runtime passes ranges of live buffers, checked against their sizes.
        unsafe { std::ptr::copy(from as *const u8, to as *mut u8, bytes) };
        Ok(())
    }

    fn free_memory(&self) -> Option<usize> {
        None
    }

    unsafe fn launch(&self, l: Launch, slots: &[u64]) -> Result<(), RuntimeError> {
        let mut params: Vec<*mut c_void> = slots.iter().map(|s| std::ptr::from_ref(s).cast_mut().cast()).collect();
        // SAFETY: the caller's contract; each slot holds the parameter's bytes first.
        let launched = unsafe { launch(l.kernel, l.grid, [l.block, 1, 1], &mut params) }.and_then(|()| {
            // the buffers the arguments name, whose margins only a write out of bounds changes
            memory::stray_write_near(slots)
                .map_or(Ok(()), |detail| Err(HostError::Fault { kernel: l.kernel.to_string(), fault: Fault::StrayWrite, detail }))
        });
        launched.map_err(|e| match e {
            HostError::UnknownKernel(n) => RuntimeError::UnknownKernel(n),
            e => RuntimeError::Device(e.to_string()),
        })
    }

    fn staging(&self, bytes: usize) -> Result<Vec<u8>, RuntimeError> {
        Ok(vec![0; bytes])
    }

    fn build(&self, _ops: &[Recorded<HostBuffer>], _staged: &[u8]) -> Result<(), RuntimeError> {
        Ok(())
    }

    fn replay(&self, _graph: &(), ops: &[Recorded<HostBuffer>], staged: &[u8]) -> Result<(), RuntimeError> {
        for op in ops {
            // SAFETY: the recording keeps its buffers and matched every other address in this
            // step, whose owners keep them.
            unsafe { op.issue(self, staged) }?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_start_as_aligned_as_device_allocations() {
        for bytes in [1, 7, 256, 1000] {
            assert_eq!(HostDevice.address(&HostDevice.alloc(bytes).unwrap()) % 256, 0, "{bytes} bytes");
        }
    }

    /// `spread_staging` (`staging.cu`) copies 8 bytes from `offset` of a buffer into another,
    /// `shift` bytes from its start: its 4-byte loads are misaligned unless the offset is a
    /// multiple of 4.
    fn spread(offset: u32, shift: i64) -> (Result<(), RuntimeError>, Vec<u8>) {
        let (mirror, out) = (HostDevice.alloc(64).unwrap(), HostDevice.alloc(8).unwrap());
        let mut staged: Vec<u8> = (0..32).collect();
        staged.extend(HostDevice.address(&out).wrapping_add_signed(shift).to_le_bytes());
        staged.extend(offset.to_le_bytes());
        staged.extend(8u32.to_le_bytes());
        HostDevice.write(&mirror, &staged).unwrap();
        let launch = Launch { kernel: "spread_staging", grid: [1, 1, 1], block: 32 };
        // SAFETY: the kernel's two parameters; the table entry at byte 32 names 8 bytes of the
        // mirror's first 32 and the 8-byte buffer `out`, both live (the tests that shift the
        // destination out of `out` or read past the mirror are those of the bounds).
        let result = unsafe { HostDevice.launch(launch, &[HostDevice.address(&mirror), 32]) };
        let mut got = vec![0u8; 8];
        HostDevice.read(&out, &mut got).unwrap();
        (result, got)
    }

    fn spread_from(offset: u32) -> (Result<(), RuntimeError>, Vec<u8>) {
        spread(offset, 0)
    }

    #[test]
    fn a_load_a_gpu_would_fault_on_fails_the_launch() {
        let (fine, got) = spread_from(8);
        assert_eq!(fine, Ok(()));
        assert_eq!(got, (8..16).collect::<Vec<u8>>());
        let (misaligned, _) = spread_from(2);
        let error = misaligned.expect_err("a 4-byte load at an address of 2 mod 4");
        let message = error.to_string();
        assert!(message.starts_with("spread_staging: a load or store at an address its alignment rules out"), "{message}");
        // where in the grid, the load, its address and the alignment it needed
        assert!(message.contains("(block (0, 0, 0), thread ") && message.contains(": an aligned load at 0x"), "{message}");
        assert!(message.ends_with("which is not 4-byte aligned)"), "{message}");
    }

    /// Set in the child processes of the tests below, to the case that ends the process.
    const CHILD_CASE: &str = "KERNELS_TEST_CHILD_CASE";

    /// The status and stderr of `test` of this binary run alone in a child process, `case` in
    /// [`CHILD_CASE`].
    fn in_child(test: &str, case: &str) -> (std::process::ExitStatus, String) {
        let child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", test, "--nocapture", "--test-threads", "1"])
            .env(CHILD_CASE, case)
            .output()
            .unwrap();
        (child.status, String::from_utf8_lossy(&child.stderr).into_owned())
    }

    /// Whether the child stopped at a memory fault with the harness's note.
    fn stopped_at_a_fault(status: std::process::ExitStatus, stderr: &str) -> bool {
        use std::os::unix::process::ExitStatusExt;
        // ThreadSanitizer reports the fault it is handed back and exits with its own status
        let stopped = if cfg!(feature = "tsan") {
            !status.success() && stderr.contains("ThreadSanitizer: SEGV")
        } else {
            status.signal() == Some(libc::SIGSEGV)
        };
        stopped && stderr.contains("memory fault at 0x") && stderr.contains("out of a buffer's bounds")
    }

    /// A launch that reads past a buffer's end, beyond its rounding to 256 bytes, or writes
    /// before its start, beyond the bytes down to the page before it, stops the process with
    /// the address on stderr (in a child process of this test binary: the fault ends it). Reads
    /// within the rounding pass, as they do on a GPU.
    #[test]
    fn an_access_beyond_a_buffers_pages_stops_the_process_with_its_address() {
        match std::env::var(CHILD_CASE).as_deref() {
            // the 64-byte mirror's bytes 256 to 263: the first past its 256 rounded bytes
            Ok("past the end") => drop(spread_from(256)),
            // a page before the 8-byte buffer's start: within the page before its mapping's
            Ok("before the start") => drop(spread(0, -4096)),
            _ => {
                // the last bytes of the rounding: read (0xFF, as every byte a launch did not write)
                let (within, got) = spread_from(248);
                assert_eq!((within, got), (Ok(()), vec![0xFF; 8]));
                let test = "host::tests::an_access_beyond_a_buffers_pages_stops_the_process_with_its_address";
                for case in ["past the end", "before the start"] {
                    let (status, stderr) = in_child(test, case);
                    assert!(stopped_at_a_fault(status, &stderr), "{case}: {status:?}: {stderr}");
                }
            }
        }
    }

    /// A write just out of a buffer's bounds, where no page stops it, fails the launch whose
    /// arguments name the buffer; one through an address the kernel read from memory stops the
    /// process when the buffer is freed. Either way the message says where.
    #[test]
    fn a_write_out_of_a_buffers_bounds_is_found() {
        if std::env::var(CHILD_CASE).as_deref() == Ok("through a table") {
            // `spread_staging`'s destination comes from its table: 4 bytes before `out`'s start
            let (result, _) = spread(0, -4);
            assert_eq!(result, Ok(()), "no argument names the buffer written");
            return;
        }
        let test = "host::tests::a_write_out_of_a_buffers_bounds_is_found";
        let (status, stderr) = in_child(test, "through a table");
        assert!(!status.success(), "{status:?}: {stderr}");
        assert!(stderr.contains("a kernel wrote 4 bytes before the start of a buffer of 8 bytes at 0x"), "{stderr}");
        // `warp_collectives_check` writes 40 bytes per thread: 4 more than its output holds
        let threads = 32;
        let (x, out) = (HostDevice.alloc(threads * 4).unwrap(), HostDevice.alloc(threads * 40 - 4).unwrap());
        let launch = Launch { kernel: "warp_collectives_check", grid: [1, 1, 1], block: threads as u32 };
        // SAFETY: the kernel's two pointers; its last 4 bytes of output land in `out`'s rounding
        // to 256 bytes, inside its mapping.
        let error = unsafe { HostDevice.launch(launch, &[HostDevice.address(&x), HostDevice.address(&out)]) }.unwrap_err();
        let want = format!(
            "warp_collectives_check: a write out of a buffer's bounds, where a GPU would reach another allocation's bytes \
             (up to byte 1279 of a buffer of 1276 bytes at {:#x}, past its end)",
            HostDevice.address(&out)
        );
        assert!(error.to_string().contains(&want), "{error}");
        // the launch's error told of it: freeing the buffer now passes
        drop(out);
    }

    /// `warp_collectives_check` (`selftest.cu`: shuffles and butterflies) over one block of
    /// `threads` threads, its input `x_offset` bytes into its buffer.
    fn collectives_at(threads: u32, x_offset: u64) -> Result<(), HostError> {
        let (x, out) = (HostDevice.alloc(threads as usize * 4 + 4).unwrap(), HostDevice.alloc(threads as usize * 40).unwrap());
        let (xp, op) = (HostDevice.address(&x) + x_offset, HostDevice.address(&out));
        // SAFETY: the kernel's two pointers, to one float per thread (the buffer has 4 bytes to
        // spare for the offset) and ten per thread.
        unsafe { launch("warp_collectives_check", [1, 1, 1], [threads, 1, 1], &mut host_args![xp, op]) }
    }

    fn collectives(threads: u32) -> Result<(), HostError> {
        collectives_at(threads, 0)
    }

    /// The fault that `launched`'s error names, the thread of block (0, 0, 0) that met it, and
    /// what it was.
    fn fault_of<T: std::fmt::Debug>(launched: Result<T, HostError>) -> (Fault, u32, String) {
        let (fault, detail) = match launched {
            Err(HostError::Fault { fault, detail, .. }) => (fault, detail),
            other => panic!("expected a fault, got {other:?}"),
        };
        let (thread, what) = detail
            .strip_prefix("block (0, 0, 0), thread ")
            .and_then(|rest| rest.split_once(": "))
            .unwrap_or_else(|| panic!("a detail that names no block and thread: {detail}"));
        (fault, thread.parse().expect("a thread number"), what.to_string())
    }

    /// The `selftest.cu` lines a fault's detail names.
    fn selftest_lines(detail: &str) -> Vec<u32> {
        detail
            .split("selftest.cu:")
            .skip(1)
            .map(|rest| rest.split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap())
            .collect()
    }

    /// A kernel's plain typed read (`x[i]` of a `const float*`) is checked too: the compiler's
    /// alignment instrumentation reports it, as the explicit aligned loads report theirs.
    #[test]
    fn a_typed_read_a_gpu_would_fault_on_fails_the_launch() {
        assert_eq!(collectives_at(32, 4), Ok(()));
        let (fault, _, detail) = fault_of(collectives_at(32, 2));
        assert_eq!(fault, Fault::Misaligned, "{detail}");
        // the typed access, its address and its source line
        assert!(detail.starts_with("a 'const float' at 0x") && detail.ends_with("which is not 4-byte aligned"), "{detail}");
        assert_eq!(selftest_lines(&detail).len(), 1, "{detail}");
    }

    /// `barrier_divergence_check` (`selftest.cu`) over one block of 64 threads, those before
    /// `split` meeting the barrier at another line: each thread's result.
    fn barrier_split_at(split: i32) -> Result<Vec<i32>, HostError> {
        let out = HostDevice.alloc(64 * 4).unwrap();
        let op = HostDevice.address(&out);
        // SAFETY: the kernel's pointer to one int per thread, and its split.
        unsafe { launch("barrier_divergence_check", [1, 1, 1], [64, 1, 1], &mut host_args![op, split]) }?;
        Ok(ints(&out, 64))
    }

    /// The first `n` ints of `buf`.
    fn ints(buf: &HostBuffer, n: usize) -> Vec<i32> {
        let mut got = vec![0u8; n * 4];
        HostDevice.read(buf, &mut got).unwrap();
        got.chunks(4).map(|b| i32::from_le_bytes(b.try_into().unwrap())).collect()
    }

    #[test]
    fn a_barrier_the_threads_meet_at_different_lines_fails_the_launch() {
        let neighbours: Vec<i32> = (1..=64).map(|t| t % 64).collect();
        assert_eq!(barrier_split_at(0), Ok(neighbours.clone()));
        assert_eq!(barrier_split_at(64), Ok(neighbours));
        let (fault, _, detail) = fault_of(barrier_split_at(5));
        assert_eq!(fault, Fault::DivergentBarrier, "{detail}");
        // both lines: the first arrival's and the other's
        let lines = selftest_lines(&detail);
        assert!(lines.len() == 2 && lines[0] != lines[1], "{detail}");
    }

    /// `arithmetic_check` (`selftest.cu`) over one block of 32 threads, every one converting `x`
    /// to an int and shifting 0x80000001 right by `count`: each thread's two results.
    fn arithmetic(x: f32, count: i32) -> Result<Vec<i32>, HostError> {
        let (xs, counts, out) = (HostDevice.alloc(32 * 4).unwrap(), HostDevice.alloc(32 * 4).unwrap(), HostDevice.alloc(64 * 4).unwrap());
        HostDevice.write(&xs, &[x.to_le_bytes(); 32].concat()).unwrap();
        HostDevice.write(&counts, &[count.to_le_bytes(); 32].concat()).unwrap();
        let (xp, cp, op) = (HostDevice.address(&xs), HostDevice.address(&counts), HostDevice.address(&out));
        // SAFETY: the kernel's three pointers, to one float, one int and two ints per thread.
        unsafe { launch("arithmetic_check", [1, 1, 1], [32, 1, 1], &mut host_args![xp, cp, op]) }?;
        Ok(ints(&out, 64))
    }

    /// A shift by 32 or more and a float converted out of int's range (or a NaN) give x86's
    /// results on the host, not a GPU's: the compiler's checks fail the launch.
    #[test]
    fn a_shift_or_conversion_a_gpu_computes_otherwise_fails_the_launch() {
        assert_eq!(arithmetic(-3.7, 31), Ok([-3, 1].repeat(32)));
        for (x, count, what) in [(3e9, 0, "conversion"), (f32::NAN, 0, "conversion"), (1.0, 32, "shift"), (1.0, -1, "shift")] {
            let (fault, _, detail) = fault_of(arithmetic(x, count));
            assert_eq!(fault, Fault::DiffersOnAGpu, "{x} shifted by {count}: {detail}");
            assert!(detail.starts_with(what) && selftest_lines(&detail).len() == 1, "{x} shifted by {count}: {detail}");
        }
    }

    #[test]
    fn a_shuffle_a_gpu_leaves_undefined_fails_the_launch() {
        assert_eq!(collectives(64), Ok(()));
        // the last warp of 81 threads has 17 lanes; the shuffles name all 32
        let (fault, thread, what) = fault_of(collectives(81));
        assert_eq!((fault, what.as_str()), (Fault::PartialWarp, "warp 2 exchanged values with fewer than 32 lanes running"));
        // a lane of that warp
        assert!((64..81).contains(&thread), "thread {thread}");
    }
}
