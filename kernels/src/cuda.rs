//! The CUDA runtime (feature `cuda`): a context and one stream on GPU N, buffers as driver
//! allocations, and each kernel source loaded the first time one of its kernels is launched, its
//! functions kept for the life of the runtime: from the folder of prepared modules when
//! `ENGINE_CUDA_MODULES` names one (`prepared.rs`: the CUBIN of the GPU's own `sm_XY`, else PTX),
//! otherwise compiled by NVRTC for the GPU's own `sm_XY` (a CUBIN the driver loads as it is: no
//! PTX of a newer ISA than the driver knows). A source's image is made once per process and
//! reused by every later runtime (model load). The driver library is looked for before any call
//! into `cudarc`, which panics when it is missing. `ENGINE_CUDA_SYNC=1` waits for every launch
//! and names the kernel that failed; otherwise a fault surfaces at the next wait, which names
//! the last kernel launched.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::ThreadId;

use cudarc::driver::{
    result, sys, CudaContext, CudaFunction, CudaGraph, CudaSlice, CudaStream, DevicePtr, DriverError, LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::Ptx;

use crate::prepared::Prepared;
use crate::runtime::{Launch, RuntimeError};
use crate::steps::{Primitives, Recorded, Stepped};
use crate::SOURCES;

/// The driver library, as the loader finds it.
pub const DRIVER_LIBRARY: &str = "libcuda.so.1";

/// Folders the driver is looked for in when the loader does not find it by name: where GPU
/// container images mount it (`/usr/local/nvidia`) and the distributions' library folders.
const DRIVER_FOLDERS: [&str; 4] = ["/usr/local/nvidia/lib64", "/usr/local/nvidia/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib64"];

/// Set to 1: every launch is waited for and checked, so a fault names its kernel.
pub const SYNC_VAR: &str = "ENGINE_CUDA_SYNC";

fn driver_error(what: &str, e: DriverError) -> RuntimeError {
    if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
        return RuntimeError::OutOfMemory { bytes: 0 };
    }
    RuntimeError::Device(format!("{what}: {e}"))
}

/// Makes the driver loadable by name: when the loader's search misses it, the first
/// `libcuda.so.1` of `ENGINE_CUDA_DRIVER` (the library or its folder) or [`DRIVER_FOLDERS`] is
/// opened by its path and kept open; the loader then finds it by its soname. Once per process.
fn find_driver() -> Result<(), RuntimeError> {
    static FOUND: OnceLock<Result<(), String>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            // SAFETY: only tries to open the driver library by its names; never panics.
            if unsafe { sys::is_culib_present() } {
                return Ok(());
            }
            let mut looked: Vec<PathBuf> = Vec::new();
            if let Some(p) = std::env::var_os("ENGINE_CUDA_DRIVER").map(PathBuf::from) {
                looked.push(if p.is_dir() { p.join(DRIVER_LIBRARY) } else { p });
            }
            looked.extend(DRIVER_FOLDERS.iter().map(|d| PathBuf::from(d).join(DRIVER_LIBRARY)));
            for path in looked.iter().filter(|p| p.is_file()) {
                // SAFETY: loading the driver runs its initialisers, which have no preconditions;
                // the handle is leaked so the library stays loaded for cudarc's open by name.
                if let Ok(lib) = unsafe { libloading::Library::new(path) } {
                    std::mem::forget(lib);
                    // SAFETY: as above.
                    if unsafe { sys::is_culib_present() } {
                        return Ok(());
                    }
                }
            }
            let list: Vec<String> = looked.iter().map(|p| p.display().to_string()).collect();
            Err(format!("no CUDA driver: {DRIVER_LIBRARY} was not found by the loader nor at {}", list.join(", ")))
        })
        .clone()
        .map_err(RuntimeError::Device)
}

/// A source's loadable image for one architecture and how it was made.
type Image = (Ptx, String);

/// The images made so far in this process, by (source, architecture): a second runtime (a
/// second model) loads them without compiling again.
fn image_cache() -> &'static Mutex<HashMap<(&'static str, String), Image>> {
    static CACHE: OnceLock<Mutex<HashMap<(&'static str, String), Image>>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// A loaded kernel and the largest block its resources allow on this GPU (the driver's
/// `CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK`: its registers decide it).
#[derive(Clone)]
struct Kernel {
    function: CudaFunction,
    max_threads: u32,
}

/// GPU `ordinal` with its context, stream and compiled kernels: the primitives of
/// [`CudaRuntime`].
pub struct CudaDevice {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    arch: String,
    name: String,
    functions: Mutex<HashMap<&'static str, Kernel>>,
    /// How each source loaded so far was compiled (prepared CUBIN or PTX, or NVRTC).
    origins: Mutex<BTreeMap<&'static str, String>>,
    /// `ENGINE_CUDA_SYNC=1`: wait for and check every launch.
    sync_launches: bool,
    /// The kernel launched last, named when a fault surfaces later.
    last_kernel: Mutex<&'static str>,
    /// Kept from the stream while a segment is captured (shared with the buffers, whose frees
    /// go to the stream too).
    stream_lock: Arc<StreamLock>,
}

/// Held while a step's segment is captured into a graph, so that no other thread's work on the
/// stream (a launch, a copy, a buffer's free) is captured with it.
#[derive(Default)]
struct StreamLock {
    lock: Mutex<()>,
    /// The thread capturing: its operations are recorded, not run (so none is waited for),
    /// and go to the stream without the lock it holds.
    capturer: Mutex<Option<ThreadId>>,
}

impl StreamLock {
    /// Whether the calling thread is capturing a segment.
    fn capturing(&self) -> bool {
        *self.capturer.lock().unwrap_or_else(|p| p.into_inner()) == Some(std::thread::current().id())
    }

    /// Runs `f`, which issues work to the stream, with the stream to itself: never while
    /// another thread captures a segment on it.
    fn exclusive<T>(&self, f: impl FnOnce() -> T) -> T {
        if self.capturing() {
            return f();
        }
        let _stream = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        f()
    }
}

/// A driver allocation from the stream-ordered pool, freed on the stream when dropped (never
/// into another thread's capture).
struct Allocation {
    slice: Option<CudaSlice<u8>>,
    stream_lock: Arc<StreamLock>,
}

impl Allocation {
    fn slice(&self) -> &CudaSlice<u8> {
        self.slice.as_ref().expect("taken only when dropped")
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        let slice = self.slice.take();
        self.stream_lock.exclusive(|| {
            if let Some(slice) = &slice {
                // the last handle may go on a thread that never made the context current, and
                // cudarc's free does not make it so; `set_current`, not `bind_to_thread`, which
                // would take an error stored for the next call to report
                // SAFETY: the context is alive: the slice's stream holds it.
                let _ = unsafe { result::ctx::set_current(slice.stream().context().cu_ctx()) };
            }
            drop(slice)
        });
    }
}

/// The CUDA runtime: GPU `ordinal`'s primitives, steps recorded and replayed as CUDA graphs
/// (`steps.rs`).
pub type CudaRuntime = Stepped<CudaDevice>;

/// A buffer on the GPU: a driver allocation from the stream-ordered pool, freed when its last
/// handle goes, and its address.
#[derive(Clone)]
pub struct CudaBuffer {
    allocation: Arc<Allocation>,
    address: u64,
}

/// A captured segment, instantiated.
pub struct StepGraph(CudaGraph);

/// Page-locked host memory a step graph copies a segment's uploads from (`cuMemHostAlloc`):
/// a captured copy from pageable memory is not allowed, and the graph reads these bytes each
/// time it runs.
pub struct PinnedStaging {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
    stream: Arc<CudaStream>,
    stream_lock: Arc<StreamLock>,
}

// SAFETY: the memory is the process's, usable from any thread; the runtime's step state, behind
// its mutex, owns the staging and writes it only while no graph that reads it runs.
unsafe impl Send for PinnedStaging {}

impl AsRef<[u8]> for PinnedStaging {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `len` bytes allocated by `cuMemHostAlloc`, initialised (zeroed) when made.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl AsMut<[u8]> for PinnedStaging {
    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above; `&mut self` is the only access from the host.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for PinnedStaging {
    fn drop(&mut self) {
        // Copies from it may still be queued: a step that diverged from its recording issues
        // the segment's uploads from its staging, then drops the segment. The stream is waited
        // for first (under its lock: never while another thread captures on it), as the
        // driver documents no wait of its own in `cuMemFreeHost`.
        // SAFETY: the context is alive: the stream holds it.
        let _ = unsafe { result::ctx::set_current(self.stream.context().cu_ctx()) };
        let _ = self.stream_lock.exclusive(|| self.stream.synchronize());
        // SAFETY: allocated by `cuMemHostAlloc` in `staging`, freed once.
        let _ = unsafe { result::free_host(self.ptr.as_ptr().cast()) };
    }
}

// SAFETY: a graph is used by one thread at a time: the runtime's step state, behind its mutex,
// owns it, and builds, replays and drops it under that lock.
unsafe impl Send for StepGraph {}

/// Buffers come from the device's stream-ordered pool (`cuMemAllocAsync`, freed by
/// `cuMemFreeAsync` when dropped): an activation lives for one operation of one step. By default
/// the pool hands its free memory back to the driver at every synchronization, and each step
/// ends in one (its download), so the next step's allocations would go back to the driver;
/// with no release threshold the pool keeps them and a step reuses the last one's memory.
fn keep_pool_memory(ctx: &CudaContext) -> Result<(), RuntimeError> {
    if !ctx.has_async_alloc() {
        return Ok(());
    }
    let mut threshold = u64::MAX;
    // SAFETY: the device is the context's; the attribute takes a u64, which `threshold` is.
    unsafe {
        let pool = result::device::get_default_mem_pool(ctx.cu_device()).map_err(|e| driver_error("finding the memory pool", e))?;
        result::mem_pool::set_attribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&mut threshold as *mut u64).cast(),
        )
        .map_err(|e| driver_error("keeping the memory pool's memory", e))
    }
}

impl CudaRuntime {
    /// Opens GPU `ordinal`: the driver must be present, NVRTC too unless prepared modules are
    /// named, and the GPU must exist. Steps are replayed as graphs unless `ENGINE_GRAPHS=0`.
    pub fn open(ordinal: usize) -> Result<CudaRuntime, RuntimeError> {
        CudaDevice::open(ordinal).map(Stepped::new)
    }
}

impl CudaDevice {
    fn open(ordinal: usize) -> Result<CudaDevice, RuntimeError> {
        find_driver()?;
        // prepared modules need no NVRTC (a source missing from them still asks for it, then)
        if crate::prepared::folder().is_none() {
            crate::nvrtc::load().map_err(|e| RuntimeError::Device(e.to_string()))?;
        }
        let count = CudaContext::device_count().map_err(|e| driver_error("counting the GPUs", e))?;
        if ordinal >= count.max(0) as usize {
            return Err(RuntimeError::Device(format!("cuda:{ordinal}: this machine has {count} CUDA device(s)")));
        }
        let ctx = CudaContext::new(ordinal).map_err(|e| driver_error("creating the context", e))?;
        // SAFETY: every launch and copy goes through the one stream below, in issue order, so
        // cudarc's events between streams are not needed.
        unsafe { ctx.disable_event_tracking() };
        // a stream of its own: a second model on the same GPU does not wait for this one
        let stream = ctx.new_stream().map_err(|e| driver_error("creating a stream", e))?;
        keep_pool_memory(&ctx)?;
        let (major, minor) = ctx.compute_capability().map_err(|e| driver_error("reading the compute capability", e))?;
        let name = ctx.name().unwrap_or_else(|_| "CUDA GPU".into());
        Ok(CudaDevice {
            ctx,
            stream,
            arch: format!("sm_{major}{minor}"),
            name,
            functions: Mutex::new(HashMap::new()),
            origins: Mutex::new(BTreeMap::new()),
            sync_launches: std::env::var(SYNC_VAR).is_ok_and(|v| v == "1"),
            last_kernel: Mutex::new("none"),
            stream_lock: Arc::default(),
        })
    }

    /// The GPU's name and architecture, e.g. `NVIDIA H100 80GB HBM3 (sm_90)`.
    pub fn description(&self) -> String {
        format!("{} ({})", self.name, self.arch)
    }

    /// The GPU's architecture, e.g. `sm_90`.
    pub fn arch(&self) -> &str {
        &self.arch
    }

    /// The driver's CUDA version, e.g. `13.0`.
    pub fn driver_version(&self) -> Result<String, RuntimeError> {
        let mut v = 0i32;
        // SAFETY: a valid out pointer; the driver is loaded (checked in `open`).
        unsafe { sys::cuDriverGetVersion(&mut v) }.result().map_err(|e| driver_error("reading the driver version", e))?;
        Ok(format!("{}.{}", v / 1000, (v % 1000) / 10))
    }

    /// How each kernel source loaded so far was compiled: `(file, how)`.
    pub fn kernel_origins(&self) -> Vec<(&'static str, String)> {
        self.origins.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|(k, v)| (*k, v.clone())).collect()
    }

    /// Waits for everything issued so far.
    pub fn synchronize(&self) -> Result<(), RuntimeError> {
        self.stream.synchronize().map_err(|e| self.fault("synchronizing", e))
    }

    /// A driver error that may report an earlier launch's fault (launches are asynchronous):
    /// names the last kernel launched, unless every launch is checked already.
    fn fault(&self, what: &str, e: DriverError) -> RuntimeError {
        match driver_error(what, e) {
            RuntimeError::Device(message) if !self.sync_launches => {
                let last = *self.last_kernel.lock().unwrap_or_else(|p| p.into_inner());
                RuntimeError::Device(format!("{message} (last kernel launched: {last}; {SYNC_VAR}=1 names the one that failed)"))
            }
            other => other,
        }
    }

    /// The kernel `name`, compiling and loading its source on first use.
    fn function(&self, name: &'static str) -> Result<Kernel, RuntimeError> {
        let mut functions = self.functions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = functions.get(name) {
            return Ok(f.clone());
        }
        let source = SOURCES.iter().find(|s| s.entry_points().contains(&name)).ok_or_else(|| RuntimeError::UnknownKernel(name.into()))?;
        let key = (source.name, self.arch.clone());
        let cached = image_cache().lock().unwrap_or_else(|p| p.into_inner()).get(&key).cloned();
        let (image, origin) = match cached {
            Some(made) => made,
            None => {
                let made = self.make_image(source)?;
                image_cache().lock().unwrap_or_else(|p| p.into_inner()).insert(key, made.clone());
                made
            }
        };
        let loaded = self.ctx.load_module(image).map_err(|e| driver_error(source.name, e))?;
        self.origins.lock().unwrap_or_else(|p| p.into_inner()).insert(source.name, origin);
        for entry in source.entry_points() {
            let function = loaded.load_function(entry).map_err(|e| driver_error(entry, e))?;
            let max_threads = function.max_threads_per_block().map_err(|e| driver_error(entry, e))?;
            functions.insert(entry, Kernel { function, max_threads: u32::try_from(max_threads).unwrap_or(0) });
        }
        functions.get(name).cloned().ok_or_else(|| RuntimeError::UnknownKernel(name.into()))
    }

    /// `source`'s image for this GPU: the prepared CUBIN or PTX, else NVRTC's CUBIN.
    fn make_image(&self, source: &crate::sources::KernelSource) -> Result<Image, RuntimeError> {
        let prepared = crate::prepared::folder().and_then(|dir| crate::prepared::find(&dir, source, &self.arch));
        Ok(match prepared {
            Some(Prepared::Cubin(cubin)) => (Ptx::from_binary(cubin), format!("prepared CUBIN {}", self.arch)),
            Some(Prepared::Ptx(mut ptx)) => {
                // the driver takes PTX as a C string
                if ptx.last() == Some(&0) {
                    ptx.pop();
                }
                let text =
                    String::from_utf8(ptx).map_err(|_| RuntimeError::Device(format!("{}: prepared PTX is not text", source.name)))?;
                (Ptx::from_src(text), format!("prepared PTX {} (compiled by the driver)", crate::prepared::PTX_ARCH))
            }
            None => {
                let module = crate::nvrtc::compile(source, &self.arch).map_err(|e| RuntimeError::Device(e.to_string()))?;
                let nvrtc = crate::nvrtc::describe().unwrap_or_default();
                (Ptx::from_binary(module.cubin), format!("NVRTC {nvrtc} for {}", self.arch))
            }
        })
    }

    fn capturing(&self) -> bool {
        self.stream_lock.capturing()
    }

    fn exclusive<T>(&self, f: impl FnOnce() -> T) -> T {
        self.stream_lock.exclusive(f)
    }

    /// `ops` issued into a graph under stream capture (recorded, not run), the uploads as
    /// copies from `staged`, page-locked staging.
    fn capture(&self, ops: &[Recorded<CudaBuffer>], staged: &[u8]) -> Result<StepGraph, RuntimeError> {
        // the raw copies below do not make the context current on this thread themselves
        self.ctx.bind_to_thread().map_err(|e| self.fault("capturing", e))?;
        // every kernel's module loaded before the capture, which should hold stream work only
        // (a graph's own kernels, such as `spread_staging`, have not run before)
        for op in ops {
            if let Recorded::Launch { launch, .. } = op {
                self.function(launch.kernel)?;
            }
        }
        let _stream = self.stream_lock.lock.lock().unwrap_or_else(|p| p.into_inner());
        self.stream
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
            .map_err(|e| self.fault("beginning a capture", e))?;
        *self.stream_lock.capturer.lock().unwrap_or_else(|p| p.into_inner()) = Some(std::thread::current().id());
        let issued = ops.iter().try_for_each(|op| match op {
            Recorded::Upload { bytes: 0, .. } => Ok(()),
            Recorded::Upload { buf, at, bytes } => {
                let from = &staged[*at..*at + *bytes];
                // SAFETY: in bounds of the recorded buffer (its upload's size); `staged` is the
                // segment's page-locked staging, which the segment keeps as long as the graph.
                unsafe { result::memcpy_htod_async(buf.address, from, self.stream.cu_stream()) }
                    .map_err(|e| driver_error("staging an upload", e))
            }
            // SAFETY: the addresses are the recording's own buffers and those the step that
            // matched it asked for again, which their owners keep.
            _ => unsafe { op.issue(self, staged) },
        });
        *self.stream_lock.capturer.lock().unwrap_or_else(|p| p.into_inner()) = None;
        // the capture ends whatever happened, so that the stream runs work again
        let graph = self.stream.end_capture(sys::CUgraphInstantiate_flags(0)).map_err(|e| driver_error("instantiating a graph", e));
        issued?;
        graph?.map(StepGraph).ok_or_else(|| RuntimeError::Device("a captured segment made no graph".into()))
    }
}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        // work still queued may run this device's kernels: it finishes before the fields' drops
        // unload their modules
        // SAFETY: the context is alive: this device holds it.
        let _ = unsafe { result::ctx::set_current(self.ctx.cu_ctx()) };
        let _ = self.exclusive(|| self.stream.synchronize());
    }
}

impl Primitives for CudaDevice {
    type Buffer = CudaBuffer;
    type Graph = StepGraph;
    type Staging = PinnedStaging;

    fn alloc(&self, bytes: usize) -> Result<CudaBuffer, RuntimeError> {
        // SAFETY: the memory is device memory, reached only by launches and copies; the caller
        // has a launch or a copy write every byte before anything reads it (`Runtime::alloc`).
        let slice =
            self.exclusive(|| unsafe { self.stream.alloc::<u8>(bytes.max(1)) }).map_err(|e| match driver_error("allocating", e) {
                RuntimeError::OutOfMemory { .. } => RuntimeError::OutOfMemory { bytes },
                other => other,
            })?;
        let address = {
            let (address, _sync) = slice.device_ptr(&self.stream);
            address
        };
        Ok(CudaBuffer { allocation: Arc::new(Allocation { slice: Some(slice), stream_lock: Arc::clone(&self.stream_lock) }), address })
    }

    fn len(&self, buf: &CudaBuffer) -> usize {
        buf.allocation.slice().len()
    }

    fn address(&self, buf: &CudaBuffer) -> u64 {
        buf.address
    }

    fn shared(&self, buf: &CudaBuffer) -> bool {
        Arc::strong_count(&buf.allocation) > 1
    }

    fn write(&self, buf: &CudaBuffer, data: &[u8]) -> Result<(), RuntimeError> {
        if data.len() > buf.allocation.slice().len() {
            return Err(RuntimeError::Device(format!("upload of {} bytes into a buffer of {}", data.len(), buf.allocation.slice().len())));
        }
        if data.is_empty() {
            return Ok(());
        }
        // the raw copy below does not make the context current on this thread itself
        self.ctx.bind_to_thread().map_err(|e| self.fault("upload", e))?;
        // SAFETY: in bounds (checked). `data` is pageable memory: the driver has copied it to
        // its staging memory when the call returns, so it may go after.
        self.exclusive(|| unsafe { result::memcpy_htod_async(buf.address, data, self.stream.cu_stream()) })
            .map_err(|e| self.fault("upload", e))
    }

    fn read(&self, buf: &CudaBuffer, out: &mut [u8]) -> Result<(), RuntimeError> {
        if out.len() > buf.allocation.slice().len() {
            return Err(RuntimeError::Device(format!("download of {} bytes from a buffer of {}", out.len(), buf.allocation.slice().len())));
        }
        // the wait under the stream's lock too: waiting for a stream another thread captures
        // on would invalidate its capture
        self.exclusive(|| {
            self.stream.memcpy_dtoh(&buf.allocation.slice().slice(0..out.len()), out).map_err(|e| self.fault("download", e))?;
            self.synchronize()
        })
    }

    fn zero(&self, at: u64, bytes: usize) -> Result<(), RuntimeError> {
        if bytes == 0 {
            return Ok(());
        }
        self.ctx.bind_to_thread().map_err(|e| self.fault("zeroing", e))?;
        // SAFETY: the runtime passes the range of a live buffer; ordered on the one stream.
        self.exclusive(|| unsafe { result::memset_d8_async(at, 0, bytes, self.stream.cu_stream()) }).map_err(|e| self.fault("zeroing", e))
    }

    fn copy(&self, from: u64, to: u64, bytes: usize) -> Result<(), RuntimeError> {
        // an empty copy is nothing to do, and a capture may refuse one
        if bytes == 0 {
            return Ok(());
        }
        self.ctx.bind_to_thread().map_err(|e| self.fault("copy", e))?;
        // SAFETY: the runtime passes ranges of live buffers, checked against their sizes;
        // ordered on the one stream.
        self.exclusive(|| unsafe { result::memcpy_dtod_async(to, from, bytes, self.stream.cu_stream()) }).map_err(|e| self.fault("copy", e))
    }

    fn free_memory(&self) -> Option<usize> {
        // what the pool keeps unused is free for this process: hand it back first, so that the
        // figure counts it (`keep_pool_memory`)
        if self.ctx.has_async_alloc() {
            // SAFETY: the device is the context's; trimming frees only memory no buffer holds.
            let _ =
                unsafe { result::device::get_default_mem_pool(self.ctx.cu_device()).and_then(|pool| result::mem_pool::trim_to(pool, 0)) };
        }
        self.ctx.mem_get_info().ok().map(|(free, _total)| free)
    }

    unsafe fn launch(&self, l: Launch, slots: &[u64]) -> Result<(), RuntimeError> {
        let kernel = self.function(l.kernel)?;
        if l.block > kernel.max_threads {
            // the driver's own refusal would be a bare CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES
            return Err(RuntimeError::Device(format!(
                "{}: blocks of {} threads, more than the {} its registers allow on this GPU",
                l.kernel, l.block, kernel.max_threads
            )));
        }
        let mut builder = self.stream.launch_builder(&kernel.function);
        for slot in slots {
            builder.arg(slot);
        }
        let cfg = LaunchConfig { grid_dim: (l.grid[0], l.grid[1], l.grid[2]), block_dim: (l.block, 1, 1), shared_mem_bytes: 0 };
        let capturing = self.capturing();
        if !capturing {
            *self.last_kernel.lock().unwrap_or_else(|p| p.into_inner()) = l.kernel;
        }
        self.exclusive(|| {
            // SAFETY: the caller's contract covers the arguments; each slot holds its
            // parameter's bytes first (little-endian) and lives until the launch call returns.
            unsafe { builder.launch(cfg) }.map_err(|e| driver_error(l.kernel, e))?;
            // a captured launch is recorded, not run: nothing to wait for
            if self.sync_launches && !capturing {
                self.stream.synchronize().map_err(|e| RuntimeError::Device(format!("kernel {} failed: {e}", l.kernel)))?;
            }
            Ok(())
        })
    }

    fn staging(&self, bytes: usize) -> Result<PinnedStaging, RuntimeError> {
        self.ctx.bind_to_thread().map_err(|e| self.fault("staging", e))?;
        // SAFETY: a fresh page-locked allocation of `bytes` (more than 0) bytes, zeroed below
        // before anything reads it.
        let ptr = self.exclusive(|| unsafe { result::malloc_host(bytes, 0) }).map_err(|e| driver_error("page-locked staging", e))?;
        let ptr =
            std::ptr::NonNull::new(ptr.cast::<u8>()).ok_or_else(|| RuntimeError::Device("page-locked staging: a null pointer".into()))?;
        // SAFETY: `bytes` writable bytes just allocated.
        unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, bytes) };
        Ok(PinnedStaging { ptr, len: bytes, stream: Arc::clone(&self.stream), stream_lock: Arc::clone(&self.stream_lock) })
    }

    fn build(&self, ops: &[Recorded<CudaBuffer>], staged: &[u8]) -> Result<StepGraph, RuntimeError> {
        self.capture(ops, staged)
    }

    fn replay(&self, graph: &StepGraph, _ops: &[Recorded<CudaBuffer>], _staged: &[u8]) -> Result<(), RuntimeError> {
        *self.last_kernel.lock().unwrap_or_else(|p| p.into_inner()) = "a replayed step graph";
        self.exclusive(|| {
            graph.0.launch().map_err(|e| self.fault("replaying a step", e))?;
            if self.sync_launches {
                self.stream.synchronize().map_err(|e| RuntimeError::Device(format!("a replayed step graph failed: {e}")))?;
            }
            Ok(())
        })
    }
}
