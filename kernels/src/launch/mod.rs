//! Typed launchers, one per kernel: each checks that its buffers hold what the launch geometry
//! makes the kernel read and write, uploads the small index arrays it is given from the host
//! (checking their values), and launches. They are safe to call: a size or an index that does
//! not fit is an error, never an out-of-bounds access on the device.

mod attention;
mod elementwise;
mod experts;
mod matmul;
mod recurrent;
mod selftest;

pub use attention::*;
pub use elementwise::*;
pub use experts::*;
pub use matmul::*;
pub use recurrent::*;
pub use selftest::*;

use std::sync::OnceLock;

use rustc_hash::FxHashMap;

use crate::runtime::{Arg, Launch, Runtime, RuntimeError};
use crate::sources::Param;

/// Threads per block of the element-wise and row kernels.
const THREADS: u32 = 256;

fn check<R: Runtime>(rt: &R, kernel: &str, what: &str, buf: &R::Buffer, bytes: usize) -> Result<(), RuntimeError> {
    let have = rt.len(buf);
    if have < bytes {
        return Err(RuntimeError::Device(format!("{kernel}: {what} holds {have} bytes, the launch needs {bytes}")));
    }
    Ok(())
}

fn dim(kernel: &str, what: &str, v: usize) -> Result<u32, RuntimeError> {
    u32::try_from(v).ok().filter(|&v| v < 1 << 31).ok_or_else(|| RuntimeError::Device(format!("{kernel}: {what} {v} is out of range")))
}

fn int(kernel: &str, what: &str, v: usize) -> Result<i32, RuntimeError> {
    i32::try_from(v).map_err(|_| RuntimeError::Device(format!("{kernel}: {what} {v} is out of range")))
}

/// An index array for a launch to read (see [`Runtime::upload_read_only`]), from the caller's
/// place in the source (a recorded step shares index arrays by it).
#[track_caller]
fn ints<R: Runtime>(rt: &R, v: &[i32]) -> Result<std::sync::Arc<R::Buffer>, RuntimeError> {
    rt.upload_read_only(&v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>())
}

/// CUDA's limits on a launch (every GPU since compute capability 3.0): blocks along x, along y
/// and z, and threads per block.
pub const MAX_GRID_X: u32 = (1 << 31) - 1;
pub const MAX_GRID_YZ: u32 = 65_535;
pub const MAX_BLOCK_THREADS: u32 = 1024;

/// The largest block `kernel`'s launcher uses. A block holds its threads' registers all at once,
/// out of a multiprocessor's 64 Ki: the NVRTC test checks every kernel's registers (ptxas's
/// report) against this, and `go` refuses a larger block, so that no launch meets the
/// driver's `CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES`.
pub fn max_block_threads(kernel: &str) -> u32 {
    BLOCK_LIMITS.iter().find(|(names, _)| names.contains(&kernel)).map_or(THREADS, |&(_, threads)| threads)
}

/// The kernels whose launchers use blocks other than [`THREADS`], and the largest each uses.
const BLOCK_LIMITS: &[(&[&str], u32)] = &[
    (&["hadamard", "warp_collectives_check"], MAX_BLOCK_THREADS),
    (&["ssm_scan"], SSM_SCAN_MAX_HEAD as u32),
    (&["delta_rule"], RECURRENT_MAX_KEY as u32),
    // a warp per query head of a block's group
    (&["attention", "attention_split", "attention_wide", "attention_split_wide"], (32 * ATTENTION_GROUP_MAX) as u32),
    (&["attention_fold", "attention_fold_wide", "mma_s8_check"], 32),
    (
        &[
            "mul_mat_q",
            "mul_mat_f",
            "mul_mat_vec_q",
            "mul_mat_vec_q_glu",
            "mul_mat_vec_q_glu_rows",
            "mul_mat_vec_q_sets",
            "mul_mat_vec_q_sets_rows",
            "mul_mat_vec_f",
        ],
        MULMAT_THREADS as u32,
    ),
];

/// Launches, unless the grid is empty (nothing to compute: no rows, no values). A grid beyond
/// CUDA's limits is an error here, naming the kernel, rather than the driver's bare
/// `CUDA_ERROR_INVALID_VALUE`; so is a block larger than [`max_block_threads`], and arguments
/// that are not the kernel's parameters ([`check_arguments`]).
fn go<R: Runtime>(rt: &R, kernel: &'static str, grid: [u32; 3], block: u32, args: &[Arg<'_, R::Buffer>]) -> Result<(), RuntimeError> {
    if grid.contains(&0) {
        return Ok(());
    }
    if grid[0] > MAX_GRID_X || grid[1] > MAX_GRID_YZ || grid[2] > MAX_GRID_YZ || block > MAX_BLOCK_THREADS {
        return Err(RuntimeError::Device(format!(
            "{kernel}: a grid of {}x{}x{} blocks of {block} threads is beyond CUDA's limits ({MAX_GRID_X} blocks along x, \
             {MAX_GRID_YZ} along y and z, {MAX_BLOCK_THREADS} threads); split the batch",
            grid[0], grid[1], grid[2]
        )));
    }
    let known = kernel_table().get(kernel).ok_or_else(|| RuntimeError::UnknownKernel(kernel.into()))?;
    check_arguments(kernel, &known.parameters, args)?;
    if block > known.max_block_threads {
        return Err(RuntimeError::Device(format!(
            "{kernel}: blocks of {block} threads, more than the {} its registers are sized for",
            known.max_block_threads
        )));
    }
    // SAFETY: every caller below passes the kernel's parameters in order with their C types
    // (pointers as buffers, `int` as I32, `int64_t` as I64, `float` as F32), and has checked
    // that each buffer and index covers what this geometry touches.
    unsafe { rt.launch(Launch { kernel, grid, block }, args) }
}

/// What [`go`] checks a launch of a kernel against.
struct KnownKernel {
    parameters: Vec<Param>,
    max_block_threads: u32,
}

/// Every kernel's parameters (read from the sources) and largest block, made once: one lookup
/// per launch, on the path every step's launches take.
fn kernel_table() -> &'static FxHashMap<&'static str, KnownKernel> {
    static TABLE: OnceLock<FxHashMap<&'static str, KnownKernel>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let known = |s: &crate::sources::KernelSource, k: &'static str| {
            Some((k, KnownKernel { parameters: s.parameters(k)?, max_block_threads: max_block_threads(k) }))
        };
        crate::sources::SOURCES.iter().flat_map(|s| s.entry_points().into_iter().filter_map(move |k| known(s, k))).collect()
    })
}

/// That `args` are `kernel`'s parameters `params` in number and type: a slot of the wrong kind
/// would be read as another value (an `int` where the kernel takes an `int64_t` loses its sign),
/// and a missing one read from beyond the array.
fn check_arguments<B>(kernel: &str, params: &[Param], args: &[Arg<'_, B>]) -> Result<(), RuntimeError> {
    if params.len() != args.len() {
        return Err(RuntimeError::Device(format!("{kernel}: {} arguments for {} parameters", args.len(), params.len())));
    }
    for (i, (param, arg)) in params.iter().zip(args).enumerate() {
        let fits = matches!(
            (param, arg),
            (Param::Pointer, Arg::Buf(_) | Arg::BufAt(..) | Arg::I64(0))
                | (Param::Int, Arg::I32(_))
                | (Param::Int64, Arg::I64(_))
                | (Param::Float, Arg::F32(_))
        );
        if !fits {
            let given = match arg {
                Arg::Buf(_) | Arg::BufAt(..) => "a buffer",
                Arg::I32(_) => "an I32",
                Arg::I64(_) => "an I64",
                Arg::F32(_) => "an F32",
            };
            return Err(RuntimeError::Device(format!("{kernel}: argument {i} is {given}, the parameter a {param:?}")));
        }
    }
    Ok(())
}

fn blocks_of(n: usize) -> usize {
    n.div_ceil(THREADS as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn the_sources_sizes_are_the_launchers() {
        let define = |file: &str, name: &str| -> usize {
            let code = crate::sources::SOURCES.iter().chain(crate::sources::HEADERS).find(|s| s.name == file).expect("a source").code;
            let line = code.lines().find(|l| l.starts_with(&format!("#define {name} "))).expect("the define");
            line.split_whitespace().nth(2).and_then(|v| v.parse().ok()).expect("a number")
        };
        assert_eq!(define("recurrent.cu", "RECURRENT_CHUNK"), RECURRENT_CHUNK);
        assert_eq!(define("recurrent.cu", "RECURRENT_MAX_KEY"), RECURRENT_MAX_KEY);
        assert_eq!(define("attention.cu", "ATTN_SPLIT"), ATTENTION_SPLIT);
        assert_eq!(define("attention.cu", "ATTN_MAX_HEAD"), ATTENTION_MAX_HEAD);
        assert_eq!(define("attention.cu", "ATTN_WIDE_KEY"), ATTENTION_WIDE_KEY);
        assert_eq!(define("attention.cu", "ATTN_WIDE_VALUE"), ATTENTION_WIDE_VALUE);
        assert_eq!(define("attention.cu", "KV_BLOCK_POSITIONS"), KV_BLOCK_POSITIONS);
        assert_eq!(define("attention.cu", "ATTN_GROUP_MAX"), ATTENTION_GROUP_MAX);
        assert_eq!(define("mulmat.cuh", "MULMAT_THREADS"), MULMAT_THREADS);
        assert_eq!(define("mulmat.cuh", "MULMAT_WARPS"), MULMAT_WARPS);
        assert_eq!(define("matmul.cu", "MULMAT_TILE"), MULMAT_TILE);
        assert_eq!(define("mulmat.cuh", "SEGMENT_CHUNKS"), SEGMENT_CHUNKS);
        assert_eq!(define("matmul.cu", "MMA_W"), MMA_W);
        assert_eq!(define("matmul.cu", "MMA_X"), MMA_X);
        assert_eq!(define("matvec.cu", "MATVEC_ROWS"), MATVEC_ROWS);
    }

    /// Host buffers and a record of launches, no kernel run: for the checks made before one.
    #[derive(Default)]
    struct Recorder(Mutex<Vec<Launch>>);

    impl Runtime for Recorder {
        type Buffer = Vec<u8>;
        fn alloc_zeroed(&self, bytes: usize) -> Result<Vec<u8>, RuntimeError> {
            Ok(vec![0; bytes])
        }
        fn upload(&self, data: &[u8]) -> Result<Vec<u8>, RuntimeError> {
            Ok(data.to_vec())
        }
        fn download(&self, buf: &Vec<u8>, out: &mut [u8]) -> Result<(), RuntimeError> {
            out.copy_from_slice(&buf[..out.len()]);
            Ok(())
        }
        fn copy(&self, _: &Vec<u8>, _: usize, _: &Vec<u8>, _: usize, _: usize) -> Result<(), RuntimeError> {
            Ok(())
        }
        fn len(&self, buf: &Vec<u8>) -> usize {
            buf.len()
        }
        fn free_memory(&self) -> Option<usize> {
            None
        }
        unsafe fn launch(&self, launch: Launch, _: &[Arg<'_, Vec<u8>>]) -> Result<(), RuntimeError> {
            self.0.lock().unwrap().push(launch);
            Ok(())
        }
    }

    #[test]
    fn a_grid_beyond_cudas_limits_is_refused_before_the_launch() {
        let rt = Recorder::default();
        let (gate, up) = (vec![0u8; 70_000 * 4], vec![0u8; 70_000 * 4]);
        // one row per grid row along y: 65,535 rows launch, 65,536 do not
        glu(&rt, &gate, &up, 65_535, 1, 0).unwrap();
        let err = glu(&rt, &gate, &up, 65_536, 1, 0).unwrap_err().to_string();
        assert!(err.starts_with("glu: a grid of 1x65536x1 blocks"), "{err}");
        assert!(err.contains("65535 along y and z"), "{err}");
        let launched = rt.0.lock().unwrap();
        assert_eq!(launched.len(), 1);
        assert_eq!(launched[0].grid, [1, 65_535, 1]);
    }

    #[test]
    fn a_block_larger_than_its_kernel_is_sized_for_is_refused_before_the_launch() {
        let rt = Recorder::default();
        let (x, out) = (vec![0u8; 1024 * 4], vec![0u8; 1024 * 10 * 4]);
        // the self-test takes any block CUDA allows; the same geometry under a kernel sized for
        // 256 threads is refused by `go` itself
        warp_collectives_check(&rt, &x, &out, 1024).unwrap();
        let err = go(&rt, "scale", [1, 1, 1], 512, &[Arg::Buf(&x), Arg::F32(1.0), Arg::I64(512)]).unwrap_err().to_string();
        assert_eq!(err, "scale: blocks of 512 threads, more than the 256 its registers are sized for");
        assert_eq!(rt.0.lock().unwrap().len(), 1);
        assert_eq!([max_block_threads("hadamard"), max_block_threads("attention"), max_block_threads("mul_mat_q")], [1024, 256, 128]);
    }

    #[test]
    fn arguments_that_are_not_the_kernels_parameters_are_refused_before_the_launch() {
        let rt = Recorder::default();
        let x = vec![0u8; 64];
        // scale(float* x, float s, int64_t n)
        go(&rt, "scale", [1, 1, 1], 32, &[Arg::Buf(&x), Arg::F32(2.0), Arg::I64(16)]).unwrap();
        let wrong = |args: &[Arg<'_, Vec<u8>>]| go(&rt, "scale", [1, 1, 1], 32, args).unwrap_err().to_string();
        assert_eq!(wrong(&[Arg::Buf(&x), Arg::F32(2.0), Arg::I32(16)]), "scale: argument 2 is an I32, the parameter a Int64");
        assert_eq!(wrong(&[Arg::Buf(&x), Arg::F32(2.0)]), "scale: 2 arguments for 3 parameters");
        assert_eq!(wrong(&[Arg::I64(1), Arg::F32(2.0), Arg::I64(16)]), "scale: argument 0 is an I64, the parameter a Pointer");
        // a null pointer is an I64 of 0
        go(&rt, "scale", [1, 1, 1], 32, &[Arg::I64(0), Arg::F32(2.0), Arg::I64(16)]).unwrap();
        assert_eq!(rt.0.lock().unwrap().len(), 2);
    }

    #[test]
    fn an_indexed_product_of_no_slots_per_row_is_refused() {
        let rt = Recorder::default();
        // two f32 experts of 4 x 32, one activation row
        let m = MatrixArgs { ty: 0, rows: 4, cols: 32, row_bytes: 128 };
        let (w, x, out) = (vec![0u8; 2 * 4 * 128], vec![0u8; 128], vec![0u8; 2 * 4 * 4]);
        let stack = Stack { m, at: 0, stride: 4 * 128, count: 2 };
        mul_mat_id(&rt, &w, stack, MatmulInput::F32(&x), &[0, 1], 2, &out).unwrap();
        let err = mul_mat_id(&rt, &w, stack, MatmulInput::F32(&x), &[0, 1], 0, &out).unwrap_err().to_string();
        assert_eq!(err, "mul_mat_id: 0 slots per activation row");
        assert_eq!(rt.0.lock().unwrap().len(), 1);
    }

    #[test]
    fn every_kernel_named_in_the_block_table_exists() {
        let kernels: Vec<&str> = crate::sources::SOURCES.iter().flat_map(|s| s.entry_points()).collect();
        for name in BLOCK_LIMITS.iter().flat_map(|(names, _)| names.iter()) {
            assert!(kernels.contains(name), "{name} is no kernel");
        }
    }
}
