//! Compiling a kernel source with NVRTC for one GPU architecture: the library is found and
//! loaded first (never a panic when it is missing: `cudarc` panics if it cannot load it, so its
//! presence is checked before any call), the source is compiled to a CUBIN for `sm_XX` with
//! ptxas's resource report, and the report is read back per kernel.

use std::ffi::{c_char, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use cudarc::nvrtc::{result, sys};

use crate::sources::{KernelSource, UnknownHeader};

/// The library's file name for the NVRTC major version `cudarc` is built for (12).
pub const LIBRARY: &str = "libnvrtc.so.12";

/// Options every kernel is compiled with. `--fmad=false`: a product and a sum are fused only
/// where the source says `fmaf`, as the CPU backend fuses them, so results do not depend on the
/// compiler's choices. Division and square roots stay IEEE (NVRTC's default).
const OPTIONS: &[&str] = &["--std=c++17", "--fmad=false", "--ptxas-options=-v"];

#[derive(Clone, Debug, thiserror::Error)]
pub enum NvrtcError {
    #[error(
        "NVRTC ({LIBRARY}) was not found (looked in: {0}); set ENGINE_NVRTC to the library or its folder, or run tools/fetch-nvrtc.sh"
    )]
    NotFound(String),
    #[error("NVRTC ({path}) could not be loaded: {reason}")]
    Load { path: String, reason: String },
    #[error(transparent)]
    Source(#[from] UnknownHeader),
    #[error("{file} for {arch}: NVRTC failed ({status}):\n{log}")]
    Compile { file: String, arch: String, status: String, log: String },
}

/// What ptxas reported for one kernel.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelReport {
    pub name: String,
    pub registers: u32,
    pub spill_stores: u32,
    pub spill_loads: u32,
    pub stack_frame: u32,
    /// Static shared memory, bytes.
    pub shared: u32,
}

/// One source compiled for one architecture.
#[derive(Clone, Debug)]
pub struct CompiledModule {
    pub file: &'static str,
    pub arch: String,
    /// The device code for `arch`: an ELF image the driver loads as it is (a CUBIN), or PTX
    /// text ending in a NUL (for a virtual `compute_XY` architecture).
    pub cubin: Vec<u8>,
    /// NVRTC's log (ptxas's report).
    pub log: String,
    pub kernels: Vec<KernelReport>,
}

/// The places looked in for [`LIBRARY`], first found wins: `ENGINE_NVRTC` (the library or its
/// folder), the folder `tools/fetch-nvrtc.sh` fills, `CUDA_PATH`, `/usr/local/cuda`.
fn candidates() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(p) = std::env::var_os("ENGINE_NVRTC").map(PathBuf::from) {
        out.push(if p.is_dir() { p.join(LIBRARY) } else { p });
    }
    let assets = std::env::var_os("ENGINE_ASSETS")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/engine-assets")));
    if let Some(versions) = assets.map(|a| a.join("nvrtc")).and_then(|d| std::fs::read_dir(d).ok()) {
        let mut found: Vec<PathBuf> = versions.flatten().map(|v| v.path().join("lib").join(LIBRARY)).collect();
        found.sort();
        out.extend(found.into_iter().rev()); // the newest version first
    }
    if let Some(cuda) = std::env::var_os("CUDA_PATH") {
        out.push(Path::new(&cuda).join("lib64").join(LIBRARY));
    }
    out.push(Path::new("/usr/local/cuda/lib64").join(LIBRARY));
    out
}

/// Loads NVRTC once per process. A library found in [`candidates`] is opened by its path and
/// kept open, so that `cudarc`'s own open by name finds it already loaded; otherwise the
/// loader's search path (`LD_LIBRARY_PATH`, the system's) must have it.
pub fn load() -> Result<(), NvrtcError> {
    static LOADED: OnceLock<Result<(), NvrtcError>> = OnceLock::new();
    LOADED
        .get_or_init(|| {
            let looked = candidates();
            if let Some(path) = looked.iter().find(|p| p.is_file()) {
                // SAFETY: loading NVRTC runs its initialisers, which have no preconditions; the
                // handle is kept for the life of the process (never unloaded under cudarc).
                let lib = unsafe { libloading::Library::new(path) }
                    .map_err(|e| NvrtcError::Load { path: path.display().to_string(), reason: e.to_string() })?;
                std::mem::forget(lib);
            }
            // SAFETY: only tries to open the library by its names; never panics.
            if unsafe { sys::is_culib_present() } {
                Ok(())
            } else {
                let list: Vec<String> = looked.iter().map(|p| p.display().to_string()).collect();
                Err(NvrtcError::NotFound(format!("{} and the loader's search path", list.join(", "))))
            }
        })
        .clone()
}

/// An NVRTC program, destroyed when dropped.
struct Program(sys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: the program was created by `create_program` and is destroyed once, here.
        let _ = unsafe { result::destroy_program(self.0) };
    }
}

fn chars_to_string(chars: &[c_char]) -> String {
    // SAFETY: NVRTC's log is NUL-terminated within the buffer it sized.
    unsafe { CStr::from_ptr(chars.as_ptr()) }.to_string_lossy().into_owned()
}

/// Compiles `source` for `arch` (`sm_80`, `sm_90`, ...) to a CUBIN.
pub fn compile(source: &KernelSource, arch: &str) -> Result<CompiledModule, NvrtcError> {
    compile_as(source, arch, Image::Cubin)
}

/// Compiles `source` for the virtual architecture `arch` (`compute_80`, ...) to PTX: text the
/// driver compiles for any GPU of that architecture or a later one.
pub fn compile_ptx(source: &KernelSource, arch: &str) -> Result<CompiledModule, NvrtcError> {
    compile_as(source, arch, Image::Ptx)
}

/// What NVRTC is asked for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Image {
    Cubin,
    Ptx,
}

fn compile_as(source: &KernelSource, arch: &str, image: Image) -> Result<CompiledModule, NvrtcError> {
    load()?;
    let code = CString::new(source.expanded()?).map_err(|_| NvrtcError::Compile {
        file: source.name.into(),
        arch: arch.into(),
        status: "source".into(),
        log: "the source holds a NUL byte".into(),
    })?;
    let name = CString::new(source.name).expect("file names hold no NUL");
    let failed = |status: String, log: String| NvrtcError::Compile { file: source.name.into(), arch: arch.into(), status, log };
    let program = Program(result::create_program(&code, Some(&name)).map_err(|e| failed(format!("{e:?}"), String::new()))?);
    // PTX is not assembled here, so there is no ptxas report to ask for
    let mut options: Vec<String> =
        OPTIONS.iter().filter(|o| image == Image::Cubin || !o.starts_with("--ptxas")).map(|o| o.to_string()).collect();
    options.push(format!("--gpu-architecture={arch}"));
    // SAFETY: `program` is a live program; the options are plain strings.
    let compiled = unsafe { result::compile_program(program.0, &options) };
    // SAFETY: `program` is a live program.
    let log = unsafe { result::get_program_log(program.0) }.map(|l| chars_to_string(&l)).unwrap_or_default();
    compiled.map_err(|e| failed(format!("{e:?}"), log.clone()))?;
    // the image's size, then its bytes (PTX: the text and its NUL)
    type SizeFn = unsafe fn(sys::nvrtcProgram, *mut usize) -> sys::nvrtcResult;
    type BytesFn = unsafe fn(sys::nvrtcProgram, *mut c_char) -> sys::nvrtcResult;
    let (get_size, get_bytes): (SizeFn, BytesFn) = match image {
        Image::Cubin => (sys::nvrtcGetCUBINSize, sys::nvrtcGetCUBIN),
        Image::Ptx => (sys::nvrtcGetPTXSize, sys::nvrtcGetPTX),
    };
    let mut size = 0usize;
    // SAFETY: `program` compiled successfully; `size` is a valid out pointer.
    unsafe { get_size(program.0, &mut size) }.result().map_err(|e| failed(format!("{e:?}"), log.clone()))?;
    let mut cubin = vec![0u8; size];
    // SAFETY: `cubin` holds the `size` bytes NVRTC said the image takes.
    unsafe { get_bytes(program.0, cubin.as_mut_ptr().cast::<c_char>()) }.result().map_err(|e| failed(format!("{e:?}"), log.clone()))?;
    let kernels = parse_report(&log);
    Ok(CompiledModule { file: source.name, arch: arch.to_string(), cubin, log, kernels })
}

/// The numbers before each `what` in `line` (`"0 bytes spill stores"` gives 0 for
/// `"bytes spill stores"`).
fn number_before(line: &str, what: &str) -> Option<u32> {
    let at = line.find(what)?;
    line[..at].split([' ', ',', ':']).rev().find(|w| !w.is_empty())?.parse().ok()
}

/// ptxas's `-v` report, kernel by kernel:
/// `Compiling entry function 'k' for 'sm_80'`, then `N bytes stack frame, N bytes spill stores,
/// N bytes spill loads`, then `Used N registers, [N bytes smem, ]...`.
pub fn parse_report(log: &str) -> Vec<KernelReport> {
    let mut out: Vec<KernelReport> = Vec::new();
    for line in log.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            let name = rest.split('\'').next().unwrap_or_default();
            out.push(KernelReport { name: name.to_string(), ..KernelReport::default() });
            continue;
        }
        let Some(k) = out.last_mut() else { continue };
        if line.contains("bytes stack frame") {
            k.stack_frame = number_before(line, "bytes stack frame").unwrap_or(0);
            k.spill_stores = number_before(line, "bytes spill stores").unwrap_or(0);
            k.spill_loads = number_before(line, "bytes spill loads").unwrap_or(0);
        }
        if line.contains("registers") {
            k.registers = number_before(line, "registers").unwrap_or(0);
            k.shared = number_before(line, "bytes smem").unwrap_or(0);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ptxas_report_is_read_kernel_by_kernel() {
        let log = "ptxas info    : 0 bytes gmem\n\
            ptxas info    : Compiling entry function 'rms_norm' for 'sm_80'\n\
            ptxas info    : Function properties for rms_norm\n\
            ptxas         .     8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n\
            ptxas info    : Used 24 registers, used 1 barriers, 256 bytes smem, 384 bytes cmem[0]\n\
            ptxas info    : Compiling entry function 'scale' for 'sm_80'\n\
            ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n\
            ptxas info    : Used 8 registers, used 0 barriers, 368 bytes cmem[0]\n";
        let r = parse_report(log);
        assert_eq!(
            r,
            vec![
                KernelReport { name: "rms_norm".into(), registers: 24, spill_stores: 4, spill_loads: 12, stack_frame: 8, shared: 256 },
                KernelReport { name: "scale".into(), registers: 8, ..KernelReport::default() },
            ]
        );
    }
}
