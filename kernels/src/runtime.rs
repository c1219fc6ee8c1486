//! What a backend needs of a device to run the kernels: buffers, copies to and from the host and
//! between buffers, and launches by kernel name. Two runtimes implement it: CUDA through the
//! driver (`cuda` feature) and the CPU execution harness (`host` feature), so the engine's
//! kernel backend is written once and its launch code is exercised without a GPU.

/// One kernel argument. A buffer is passed as the device address of its byte `offset`; scalars
/// by value. Every argument travels as one 8-byte slot (little-endian, low bytes first), which
/// is how both the driver and the host launchers read a parameter of 4 or 8 bytes.
#[derive(Clone, Copy)]
pub enum Arg<'a, B> {
    Buf(&'a B),
    BufAt(&'a B, usize),
    I32(i32),
    I64(i64),
    F32(f32),
}

/// A launch's geometry: a grid of blocks of `block` threads (along x).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Launch {
    pub kernel: &'static str,
    pub grid: [u32; 3],
    pub block: u32,
}

#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum RuntimeError {
    /// An allocation the device could not make.
    #[error("out of device memory: {bytes} bytes asked for")]
    OutOfMemory { bytes: usize },
    /// No kernel of that name in any source.
    #[error("no kernel named {0}")]
    UnknownKernel(String),
    /// A driver, compiler or harness failure, in its own words.
    #[error("{0}")]
    Device(String),
}

/// Device memory and kernel launches. Buffers are written only by launches and copies, which a
/// runtime runs in the order they are issued (one stream); a download waits for everything
/// issued before it.
pub trait Runtime: Send + Sync + 'static {
    type Buffer: Send + Sync;

    /// `bytes` zero bytes on the device.
    fn alloc_zeroed(&self, bytes: usize) -> Result<Self::Buffer, RuntimeError>;
    /// `bytes` bytes on the device for a launch that writes every one of them before anything
    /// reads them: their contents are unspecified (zeros unless a runtime does better).
    fn alloc(&self, bytes: usize) -> Result<Self::Buffer, RuntimeError> {
        self.alloc_zeroed(bytes)
    }
    /// A new buffer holding `data`.
    fn upload(&self, data: &[u8]) -> Result<Self::Buffer, RuntimeError>;
    /// A buffer holding `data` that launches only read (index arrays): a runtime may hand back
    /// the buffer of an earlier call with the same bytes instead of uploading again.
    #[track_caller]
    fn upload_read_only(&self, data: &[u8]) -> Result<std::sync::Arc<Self::Buffer>, RuntimeError> {
        self.upload(data).map(std::sync::Arc::new)
    }
    /// Copies the first `out.len()` bytes of `buf` to the host.
    fn download(&self, buf: &Self::Buffer, out: &mut [u8]) -> Result<(), RuntimeError>;
    /// Copies `bytes` bytes from `src` at `src_at` to `dst` at `dst_at` (ranges in bounds; the
    /// same buffer is allowed, the ranges must not overlap).
    fn copy(&self, src: &Self::Buffer, src_at: usize, dst: &Self::Buffer, dst_at: usize, bytes: usize) -> Result<(), RuntimeError>;
    /// The buffer's size in bytes.
    fn len(&self, buf: &Self::Buffer) -> usize;
    /// Device memory still free, when the device says.
    fn free_memory(&self) -> Option<usize>;
    /// Runs `launch` with `args`.
    ///
    /// # Safety
    /// The arguments must match the kernel's parameters in number and type, and every buffer
    /// must hold what the kernel reads and writes at this geometry.
    unsafe fn launch(&self, launch: Launch, args: &[Arg<'_, Self::Buffer>]) -> Result<(), RuntimeError>;
    /// Marks the start of a step on this thread: the work of one forward pass, which a runtime
    /// may record and replay as one graph when a step of the same `key` comes again (see
    /// `steps.rs`). The key tells steps of different structure apart (rows, sequences, logits).
    fn begin_step(&self, _key: u64) {}
    /// Marks the end of the step this thread began; issues anything it still holds back.
    fn end_step(&self) -> Result<(), RuntimeError> {
        Ok(())
    }
}

/// The 8-byte slot of a scalar argument (see [`Arg`]).
pub fn scalar_slot<B>(arg: &Arg<'_, B>) -> Option<u64> {
    match *arg {
        Arg::I32(v) => Some(u64::from(v as u32)),
        Arg::I64(v) => Some(v as u64),
        Arg::F32(v) => Some(u64::from(v.to_bits())),
        Arg::Buf(_) | Arg::BufAt(..) => None,
    }
}

/// The read-only uploads a runtime made lately, newest first, with their bytes: the launches of
/// one step read the same positions, slots and block tables in every layer, so each goes up once
/// per step instead of once per launch. Both runtimes keep one, so that the harness issues the
/// transfers a GPU would.
pub struct ReadOnlyUploads<B> {
    kept: std::sync::Mutex<std::collections::VecDeque<(Vec<u8>, std::sync::Arc<B>)>>,
}

impl<B> Default for ReadOnlyUploads<B> {
    fn default() -> Self {
        ReadOnlyUploads { kept: std::sync::Mutex::new(std::collections::VecDeque::new()) }
    }
}

impl<B> ReadOnlyUploads<B> {
    /// How many are kept, and the largest kept (bigger ones are uploaded every time).
    pub const KEPT: usize = 16;
    pub const MAX_BYTES: usize = 64 << 10;

    /// The kept buffer holding `data`, else a new one from `upload(data)`, kept.
    pub fn get_or_upload(
        &self,
        data: &[u8],
        upload: impl FnOnce(&[u8]) -> Result<B, RuntimeError>,
    ) -> Result<std::sync::Arc<B>, RuntimeError> {
        if data.len() > Self::MAX_BYTES {
            return upload(data).map(std::sync::Arc::new);
        }
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(at) = kept.iter().position(|(bytes, _)| bytes.as_slice() == data) {
            let hit = kept.remove(at).expect("found above");
            let buf = std::sync::Arc::clone(&hit.1);
            kept.push_front(hit);
            return Ok(buf);
        }
        // no launch writes the buffer, so one issued later reads these bytes too
        let buf = std::sync::Arc::new(upload(data)?);
        kept.push_front((data.to_vec(), std::sync::Arc::clone(&buf)));
        kept.truncate(Self::KEPT);
        Ok(buf)
    }
}

/// What this process has issued to devices so far, for the figures per generated token:
/// launches (each kernel issued on its own, and each replayed graph once, whatever it holds) and
/// transfers (uploads, downloads, and the copies and fills of zeroed allocations issued on their
/// own), over every runtime.
static LAUNCHES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static TRANSFERS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Counts issued so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Issued {
    pub launches: u64,
    pub transfers: u64,
}

impl Issued {
    /// The counts so far.
    pub fn now() -> Issued {
        use std::sync::atomic::Ordering::Relaxed;
        Issued { launches: LAUNCHES.load(Relaxed), transfers: TRANSFERS.load(Relaxed) }
    }

    /// What was issued since `earlier`.
    pub fn since(earlier: Issued) -> Issued {
        let now = Issued::now();
        Issued { launches: now.launches - earlier.launches, transfers: now.transfers - earlier.transfers }
    }

    /// What the calling thread has issued so far (a test's own work, whatever other threads
    /// issue meanwhile).
    pub fn on_this_thread() -> Issued {
        THREAD_ISSUED.with(std::cell::Cell::get)
    }
}

thread_local! {
    static THREAD_ISSUED: std::cell::Cell<Issued> = const { std::cell::Cell::new(Issued { launches: 0, transfers: 0 }) };
}

pub(crate) fn count_launch() {
    LAUNCHES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    THREAD_ISSUED.with(|c| c.set(Issued { launches: c.get().launches + 1, ..c.get() }));
}

pub(crate) fn count_transfer() {
    TRANSFERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    THREAD_ISSUED.with(|c| c.set(Issued { transfers: c.get().transfers + 1, ..c.get() }));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn read_only_uploads_reuse_recent_bytes_newest_first() {
        let cache: ReadOnlyUploads<Vec<u8>> = ReadOnlyUploads::default();
        let uploads = std::cell::Cell::new(0);
        let upload = |d: &[u8]| {
            uploads.set(uploads.get() + 1);
            Ok(d.to_vec())
        };
        let a = cache.get_or_upload(&[1, 2, 3], upload).unwrap();
        let b = cache.get_or_upload(&[1, 2, 3], upload).unwrap();
        assert!(Arc::ptr_eq(&a, &b) && uploads.get() == 1);
        // other bytes: another buffer
        let c = cache.get_or_upload(&[1, 2, 4], upload).unwrap();
        assert!(!Arc::ptr_eq(&a, &c) && uploads.get() == 2 && *c == [1, 2, 4]);
        // the oldest goes when more than KEPT are kept; a use makes one the newest
        for i in 0..ReadOnlyUploads::<Vec<u8>>::KEPT - 2 {
            cache.get_or_upload(&(i as u32).to_le_bytes(), upload).unwrap();
        }
        cache.get_or_upload(&[1, 2, 3], upload).unwrap();
        let before = uploads.get();
        cache.get_or_upload(&[9], upload).unwrap();
        cache.get_or_upload(&[1, 2, 3], upload).unwrap();
        assert_eq!(uploads.get(), before + 1, "[1, 2, 3] was used last, so [1, 2, 4] went");
        cache.get_or_upload(&[1, 2, 4], upload).unwrap();
        assert_eq!(uploads.get(), before + 2);
        // too large to keep: uploaded every time
        let big = vec![7u8; ReadOnlyUploads::<Vec<u8>>::MAX_BYTES + 1];
        let (x, y) = (cache.get_or_upload(&big, upload).unwrap(), cache.get_or_upload(&big, upload).unwrap());
        assert!(!Arc::ptr_eq(&x, &y) && uploads.get() == before + 4);
    }
}
