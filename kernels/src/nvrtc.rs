//! Compiling a kernel source with NVRTC for one GPU architecture: the library (NVRTC 12 or 13,
//! whichever is found first) is opened by its path through our own binding of the few functions
//! used, which have the same C signatures in both versions; the source is compiled to a CUBIN
//! for `sm_XX` (or PTX for `compute_XX`) with ptxas's resource report, read back per kernel.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::sources::{KernelSource, UnknownHeader};

/// NVRTC's library names, looked for in this order in each place (`candidates`).
pub const LIBRARIES: [&str; 2] = ["libnvrtc.so.12", "libnvrtc.so.13"];

/// Options every kernel is compiled with. `--fmad=false`: a product and a sum are fused only
/// where the source says `fmaf`, as the CPU backend fuses them, so results do not depend on the
/// compiler's choices. Division and square roots stay IEEE (NVRTC's default).
const OPTIONS: &[&str] = &["--std=c++17", "--fmad=false", "--ptxas-options=-v"];

#[derive(Clone, Debug, thiserror::Error)]
pub enum NvrtcError {
    #[error(
        "NVRTC (libnvrtc.so.12 or .13) was not found (looked in: {0}); set ENGINE_NVRTC to the library or its folder, or run tools/fetch-nvrtc.sh"
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

impl KernelReport {
    /// The largest block the kernel's registers allow: a block holds at most 64 Ki registers
    /// (sm_80, sm_90), given to each warp in units of 256, and at most 1024 threads.
    pub fn max_block_threads(&self) -> u32 {
        let per_warp = (self.registers * 32).div_ceil(256).max(1) * 256;
        (65_536 / per_warp * 32).min(1024)
    }
}

/// One source compiled for one architecture.
#[derive(Clone, Debug)]
pub struct CompiledModule {
    pub file: &'static str,
    pub arch: String,
    /// The device code for `arch`: an ELF image the driver loads as it is.
    pub cubin: Vec<u8>,
    /// The PTX it was assembled from, ending in a NUL: what the driver compiles for a GPU of
    /// `arch` or a later one.
    pub ptx: Vec<u8>,
    /// NVRTC's log (ptxas's report).
    pub log: String,
    pub kernels: Vec<KernelReport>,
}

/// The files looked at, first found wins: `ENGINE_NVRTC` (the library or its folder), the
/// folder `tools/fetch-nvrtc.sh` fills, `CUDA_PATH`, `/usr/local/cuda`, then the NVIDIA Python
/// packages of the usual Python installs (CUDA 13's `nvidia/cu13/lib`, CUDA 12's
/// `nvidia/cuda_nvrtc/lib`). In a folder, NVRTC 12 is taken before 13. When none exists, the
/// loader's search path is tried (`api`).
fn candidates() -> Vec<PathBuf> {
    let (mut files, mut folders) = (Vec::new(), Vec::new());
    match std::env::var_os("ENGINE_NVRTC").map(PathBuf::from) {
        Some(p) if p.is_dir() => folders.push(p),
        Some(p) => files.push(p),
        None => {}
    }
    let assets = std::env::var_os("ENGINE_ASSETS")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/engine-assets")));
    if let Some(versions) = assets.map(|a| a.join("nvrtc")).and_then(|d| std::fs::read_dir(d).ok()) {
        let mut found: Vec<PathBuf> = versions.flatten().map(|v| v.path().join("lib")).collect();
        found.sort();
        folders.extend(found.into_iter().rev()); // the newest version first
    }
    if let Some(cuda) = std::env::var_os("CUDA_PATH") {
        folders.push(Path::new(&cuda).join("lib64"));
    }
    folders.push(PathBuf::from("/usr/local/cuda/lib64"));
    folders.extend(python_package_folders());
    files.extend(folders.iter().flat_map(|f| LIBRARIES.iter().map(move |l| f.join(l))));
    files
}

/// `<site>/nvidia/{cu13,cuda_nvrtc}/lib` for the `site-packages` / `dist-packages` folders of
/// the Python installs under `/opt/*/.venv`, `/usr/local/lib` and `/usr/lib`.
fn python_package_folders() -> Vec<PathBuf> {
    let children = |dir: &Path| -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(dir).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
        v.sort();
        v
    };
    let mut lib_dirs: Vec<PathBuf> = children(Path::new("/opt")).into_iter().map(|o| o.join(".venv/lib")).collect();
    lib_dirs.extend([PathBuf::from("/usr/local/lib"), PathBuf::from("/usr/lib")]);
    let mut out = Vec::new();
    for lib in lib_dirs {
        for python in children(&lib).into_iter().filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("python3"))) {
            for site in ["site-packages", "dist-packages"] {
                for package in ["cu13", "cuda_nvrtc"] {
                    let dir = python.join(site).join("nvidia").join(package).join("lib");
                    if dir.is_dir() {
                        out.push(dir);
                    }
                }
            }
        }
    }
    out
}

type NvrtcResult = c_int;
type ProgramHandle = *mut c_void;

/// The NVRTC functions used, resolved from the library once.
struct Api {
    /// The library's path, as found.
    path: String,
    version: (i32, i32),
    create: unsafe extern "C" fn(
        *mut ProgramHandle,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> NvrtcResult,
    compile: unsafe extern "C" fn(ProgramHandle, c_int, *const *const c_char) -> NvrtcResult,
    destroy: unsafe extern "C" fn(*mut ProgramHandle) -> NvrtcResult,
    log_size: unsafe extern "C" fn(ProgramHandle, *mut usize) -> NvrtcResult,
    log: unsafe extern "C" fn(ProgramHandle, *mut c_char) -> NvrtcResult,
    cubin_size: unsafe extern "C" fn(ProgramHandle, *mut usize) -> NvrtcResult,
    cubin: unsafe extern "C" fn(ProgramHandle, *mut c_char) -> NvrtcResult,
    ptx_size: unsafe extern "C" fn(ProgramHandle, *mut usize) -> NvrtcResult,
    ptx: unsafe extern "C" fn(ProgramHandle, *mut c_char) -> NvrtcResult,
    error_string: unsafe extern "C" fn(NvrtcResult) -> *const c_char,
}

impl Api {
    /// Opens the library at `path` and resolves every function (kept for the process's life).
    fn open(path: &Path) -> Result<Api, NvrtcError> {
        let fail = |reason: String| NvrtcError::Load { path: path.display().to_string(), reason };
        preload_builtins(path);
        // SAFETY: loading NVRTC runs its initialisers, which have no preconditions; the handle
        // is leaked below, so the functions resolved from it stay valid for the process.
        let lib: &'static libloading::Library =
            Box::leak(Box::new(unsafe { libloading::Library::new(path) }.map_err(|e| fail(e.to_string()))?));
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the symbol is NVRTC's C function of that name; the field it is stored
                // in has that function's C signature (the same in NVRTC 12 and 13).
                *unsafe { lib.get(concat!($name, "\0").as_bytes()) }.map_err(|e| fail(format!("{}: {e}", $name)))?
            };
        }
        let version_fn: unsafe extern "C" fn(*mut c_int, *mut c_int) -> NvrtcResult = sym!("nvrtcVersion");
        let (mut major, mut minor) = (0, 0);
        // SAFETY: two valid out pointers.
        unsafe { version_fn(&mut major, &mut minor) };
        Ok(Api {
            path: path.display().to_string(),
            version: (major, minor),
            create: sym!("nvrtcCreateProgram"),
            compile: sym!("nvrtcCompileProgram"),
            destroy: sym!("nvrtcDestroyProgram"),
            log_size: sym!("nvrtcGetProgramLogSize"),
            log: sym!("nvrtcGetProgramLog"),
            cubin_size: sym!("nvrtcGetCUBINSize"),
            cubin: sym!("nvrtcGetCUBIN"),
            ptx_size: sym!("nvrtcGetPTXSize"),
            ptx: sym!("nvrtcGetPTX"),
            error_string: sym!("nvrtcGetErrorString"),
        })
    }

    /// NVRTC's name for a status, e.g. `NVRTC_ERROR_COMPILATION`.
    fn status(&self, r: NvrtcResult) -> String {
        // SAFETY: NVRTC returns a static NUL-terminated string for every status.
        let s = unsafe { (self.error_string)(r) };
        if s.is_null() {
            return format!("status {r}");
        }
        // SAFETY: non-null, static and NUL-terminated (above).
        unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
    }
}

/// NVRTC opens its builtins library (`libnvrtc-builtins.so.13.0`, ...) by name when it
/// compiles; NVRTC 13 does not look beside itself, so the one in NVRTC's folder is opened first by
/// its path (and kept open), where the loader then finds it by its soname.
fn preload_builtins(nvrtc: &Path) {
    let Some(folder) = nvrtc.parent() else { return };
    let Ok(entries) = std::fs::read_dir(folder) else { return };
    let mut builtins: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("libnvrtc-builtins.so.")))
        .collect();
    builtins.sort();
    for path in builtins {
        // SAFETY: the builtins library has no initialisers with preconditions; leaked so that it
        // stays loaded for NVRTC's own open by name.
        if let Ok(lib) = unsafe { libloading::Library::new(&path) } {
            std::mem::forget(lib);
        }
    }
}

fn api() -> Result<&'static Api, NvrtcError> {
    static API: OnceLock<Result<Api, NvrtcError>> = OnceLock::new();
    API.get_or_init(|| {
        let looked = candidates();
        if let Some(path) = looked.iter().find(|p| p.is_file()) {
            return Api::open(path);
        }
        // a bare name: the loader's search path (LD_LIBRARY_PATH, ldconfig's folders)
        LIBRARIES.iter().find_map(|name| Api::open(Path::new(name)).ok()).ok_or_else(|| {
            let list: Vec<String> = looked.iter().map(|p| p.display().to_string()).collect();
            NvrtcError::NotFound(format!("{} and the loader's search path", list.join(", ")))
        })
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// Finds and loads NVRTC once per process.
pub fn load() -> Result<(), NvrtcError> {
    api().map(|_| ())
}

/// The NVRTC in use: its path and version, e.g. `/usr/local/cuda/lib64/libnvrtc.so.12 (12.9)`.
pub fn describe() -> Result<String, NvrtcError> {
    api().map(|a| format!("{} ({}.{})", a.path, a.version.0, a.version.1))
}

/// An NVRTC program, destroyed when dropped.
struct Program<'a> {
    api: &'a Api,
    handle: ProgramHandle,
}

impl Drop for Program<'_> {
    fn drop(&mut self) {
        if !self.handle.is_null() {
            // SAFETY: the program was created by `nvrtcCreateProgram` and is destroyed once, here.
            unsafe { (self.api.destroy)(&mut self.handle) };
        }
    }
}

/// Compiles `source` for the real architecture `arch` (`sm_80`, `sm_90`, ...) to a CUBIN, keeping
/// the PTX NVRTC made on the way (the text a compile for the virtual `compute_XY` gives).
pub fn compile(source: &KernelSource, arch: &str) -> Result<CompiledModule, NvrtcError> {
    let api = api()?;
    let failed = |status: String, log: String| NvrtcError::Compile { file: source.name.into(), arch: arch.into(), status, log };
    let code = CString::new(source.expanded()?).map_err(|_| failed("source".into(), "the source holds a NUL byte".into()))?;
    let name = CString::new(source.name).expect("file names hold no NUL");
    let mut program = Program { api, handle: std::ptr::null_mut() };
    // SAFETY: valid out pointer and NUL-terminated strings; no headers (the source is expanded).
    let r = unsafe { (api.create)(&mut program.handle, code.as_ptr(), name.as_ptr(), 0, std::ptr::null(), std::ptr::null()) };
    if r != 0 {
        program.handle = std::ptr::null_mut(); // nothing was created
        return Err(failed(api.status(r), String::new()));
    }
    let mut options: Vec<CString> = OPTIONS.iter().map(|o| CString::new(*o).expect("no NUL")).collect();
    options.push(CString::new(format!("--gpu-architecture={arch}")).map_err(|_| failed("options".into(), "NUL in arch".into()))?);
    let pointers: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();
    // SAFETY: a live program; `pointers` holds `options.len()` NUL-terminated strings alive here.
    let compiled = unsafe { (api.compile)(program.handle, pointers.len() as c_int, pointers.as_ptr()) };
    let log = read_sized(api, &program, api.log_size, api.log).map(|l| text_of(&l)).unwrap_or_default();
    if compiled != 0 {
        return Err(failed(api.status(compiled), log));
    }
    let cubin = read_sized(api, &program, api.cubin_size, api.cubin).map_err(|status| failed(status, log.clone()))?;
    // the text and its NUL
    let ptx = read_sized(api, &program, api.ptx_size, api.ptx).map_err(|status| failed(status, log.clone()))?;
    let kernels = parse_report(&log);
    Ok(CompiledModule { file: source.name, arch: arch.to_string(), cubin, ptx, log, kernels })
}

type SizeFn = unsafe extern "C" fn(ProgramHandle, *mut usize) -> NvrtcResult;
type BytesFn = unsafe extern "C" fn(ProgramHandle, *mut c_char) -> NvrtcResult;

/// One of the program's outputs (log, CUBIN, PTX): its size, then its bytes; NVRTC's status
/// name on failure.
fn read_sized(api: &Api, program: &Program<'_>, size_fn: SizeFn, bytes_fn: BytesFn) -> Result<Vec<u8>, String> {
    let mut size = 0usize;
    // SAFETY: a live program and a valid out pointer.
    let r = unsafe { size_fn(program.handle, &mut size) };
    if r != 0 {
        return Err(api.status(r));
    }
    let mut bytes = vec![0u8; size];
    // SAFETY: `bytes` holds the `size` bytes NVRTC said this output takes.
    let r = unsafe { bytes_fn(program.handle, bytes.as_mut_ptr().cast::<c_char>()) };
    if r != 0 {
        return Err(api.status(r));
    }
    Ok(bytes)
}

/// A NUL-terminated log as text.
fn text_of(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
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

    #[test]
    fn a_kernels_registers_bound_its_block() {
        let threads = |registers| KernelReport { registers, ..KernelReport::default() }.max_block_threads();
        // 64 a thread fill 64 Ki at 1024 threads; 88 take 2,816 a warp (11 units of 256): 23
        // warps; 167 take 5,376: 12 warps; 255: 8
        assert_eq!(
            [threads(0), threads(32), threads(64), threads(65), threads(88), threads(167), threads(255)],
            [1024, 1024, 1024, 896, 736, 384, 256]
        );
    }
}
