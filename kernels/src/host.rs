//! The CPU execution harness (feature `host`): the same kernel sources compiled as host C++ by
//! the build script, launched like CUDA kernels (a grid of blocks of threads, the arguments as
//! an array of pointers to each), with each block's threads run as host threads. It runs the
//! kernels' arithmetic on a machine without a GPU, so they can be checked against the CPU
//! backend.

use std::ffi::c_void;
use std::sync::mpsc;
use std::time::Duration;

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
        let _ = tx.send(status);
    });
    let status = rx.recv_timeout(TIMEOUT);
    if status.is_ok() {
        // finished: joining orders its writes before the caller's reads (for ThreadSanitizer too)
        let _ = runner.join();
    }
    match status {
        Ok(0) => Ok(()),
        Ok(_) => Err(HostError::Geometry(name.to_string())),
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
