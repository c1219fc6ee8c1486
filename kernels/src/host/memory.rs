//! The harness's device memory: each buffer in a mapping of its own, between two pages nothing
//! may touch, ending at the second, so that a kernel reading or writing past a buffer's end
//! (beyond the rounding to 256 bytes that a device allocation has too), or before its start
//! beyond the bytes up to the first page, stops the process with the address on stderr, where a
//! GPU would fault or reach another allocation's bytes. The bytes between the first page and the
//! buffer's start, and those of its rounding, keep their fill unless a kernel writes out of
//! bounds: [`stray_write_near`] finds such a write for the launch whose arguments name the
//! buffer (`HostDevice::launch`), and a buffer freed with one stops the process.

use std::collections::BTreeMap;
use std::ffi::{c_int, c_void};
use std::sync::{Mutex, OnceLock};

/// Where a device allocation starts: at a multiple of 256 bytes, as `cuMemAlloc`'s do.
pub(super) const ALIGN: usize = 256;

/// `len` bytes at a multiple of [`ALIGN`], rounded up to [`ALIGN`] and ending there, at the
/// start of an inaccessible page; the mapping's first page is inaccessible too.
pub(super) struct GuardedMemory {
    map: *mut u8,
    map_len: usize,
    start: *mut u8,
    len: usize,
    fill: u8,
}

// SAFETY: the memory is only written by the harness's launches and copies, one at a time; the
// backend above hands out each buffer mutably to one op at a time, as it would device memory.
unsafe impl Send for GuardedMemory {}
// SAFETY: as above: shared references only pass the address to a launch or a copy.
unsafe impl Sync for GuardedMemory {}

/// A live buffer as the launches' check finds it by address: the bytes around it a kernel may
/// not write, and their fill.
#[derive(Clone, Copy)]
struct Margins {
    /// the first byte after the leading inaccessible page
    from: usize,
    start: usize,
    len: usize,
    /// the end of the rounding, where the trailing inaccessible page starts
    to: usize,
    fill: u8,
}

/// Every live buffer by its first accessible byte ([`Margins::from`]). A buffer leaves it
/// before its mapping goes, under the lock, so a check holding the lock never reads a mapping
/// that is gone.
static LIVE: OnceLock<Mutex<BTreeMap<usize, Margins>>> = OnceLock::new();

/// `f` of the live buffers, under their lock.
fn with_live<R>(f: impl FnOnce(&mut BTreeMap<usize, Margins>) -> R) -> R {
    let lock = LIVE.get_or_init(Mutex::default);
    let mut live = lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    // ThreadSanitizer sees the map's copies (libc's memcpy) but not the lock, which Rust's std
    // takes without pthreads: it is told of the lock's order here
    #[cfg(feature = "tsan")]
    // SAFETY: annotations of an address, which the sanitizer only uses as a key.
    unsafe {
        tsan::__tsan_acquire(std::ptr::from_ref(lock).cast_mut().cast())
    };
    let result = f(&mut live);
    #[cfg(feature = "tsan")]
    // SAFETY: as above.
    unsafe {
        tsan::__tsan_release(std::ptr::from_ref(lock).cast_mut().cast())
    };
    result
}

#[cfg(feature = "tsan")]
mod tsan {
    use std::ffi::c_void;

    // ThreadSanitizer's annotations (libtsan, which the `tsan` build links)
    unsafe extern "C" {
        pub fn __tsan_acquire(address: *mut c_void);
        pub fn __tsan_release(address: *mut c_void);
    }
}

impl Margins {
    /// The addresses before the buffer's start, down to the leading inaccessible page, and
    /// after its end, up to the trailing one.
    fn ranges(&self) -> [std::ops::Range<usize>; 2] {
        [self.from..self.start, self.start + self.len..self.to]
    }

    /// How far out of the buffer's bounds a kernel wrote, if its margins lost their fill.
    ///
    /// # Safety
    /// The mapping must be live (its entry in [`LIVE`], whose lock the caller holds, or its
    /// owner's drop), and no launch may be writing the buffer.
    unsafe fn stray_write(&self) -> Option<String> {
        // SAFETY: both ranges lie inside the live mapping, between its inaccessible pages.
        let [before, after] = self.ranges().map(|r| unsafe { std::slice::from_raw_parts(r.start as *const u8, r.len()) });
        if let Some(i) = before.iter().position(|&b| b != self.fill) {
            return Some(format!("{} bytes before the start of a buffer of {} bytes at {:#x}", before.len() - i, self.len, self.start));
        }
        let i = after.iter().rposition(|&b| b != self.fill)?;
        Some(format!("up to byte {} of a buffer of {} bytes at {:#x}, past its end", self.len + i, self.len, self.start))
    }

    /// Puts the fill back in the margins.
    ///
    /// # Safety
    /// As [`Margins::stray_write`]'s.
    unsafe fn refill(&self) {
        for r in self.ranges() {
            // SAFETY: the range lies inside the live mapping, between its inaccessible pages,
            // and no launch writes it meanwhile.
            unsafe { std::ptr::write_bytes(r.start as *mut u8, self.fill, r.len()) };
        }
    }
}

/// The write out of the bounds of a live buffer whose mapping holds any of `addresses`, as a
/// launch's arguments name them (other arguments than addresses match no buffer). The margins it
/// reports get their fill back: the launch's error has told of it.
pub(super) fn stray_write_near(addresses: &[u64]) -> Option<String> {
    with_live(|live| {
        addresses.iter().find_map(|&at| {
            let at = usize::try_from(at).ok()?;
            let (_, margins) = live.range(..=at).next_back()?;
            if at >= margins.to {
                return None;
            }
            // SAFETY: a live buffer's mapping (the lock is held).
            let stray = unsafe { margins.stray_write() }?;
            // SAFETY: as above.
            unsafe { margins.refill() };
            Some(stray)
        })
    })
}

impl GuardedMemory {
    /// `len` bytes (at least one), every one of them `fill`.
    pub fn new(len: usize, fill: u8) -> Result<GuardedMemory, String> {
        note_faults();
        let page = page_size();
        let body = len.max(1).next_multiple_of(ALIGN);
        let pages = body.next_multiple_of(page);
        let map_len = page + pages + page;
        let (rw, private) = (libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS);
        // SAFETY: a fresh anonymous mapping, which nothing else refers to.
        let map = unsafe { libc::mmap(std::ptr::null_mut(), map_len, rw, private, -1, 0) };
        if map == libc::MAP_FAILED {
            return Err(format!("mapping {map_len} bytes: {}", std::io::Error::last_os_error()));
        }
        let map = map.cast::<u8>();
        let memory = GuardedMemory {
            map,
            map_len,
            // SAFETY: `page + pages - body` is within the mapping (body <= pages).
            start: unsafe { map.add(page + pages - body) },
            len,
            fill,
        };
        // SAFETY: the mapping's first and last pages, inside the mapping just made.
        let guarded = unsafe { [map, map.add(page + pages)] }.into_iter().all(|at| {
            // SAFETY: as above.
            unsafe { libc::mprotect(at.cast(), page, libc::PROT_NONE) == 0 }
        });
        if !guarded {
            return Err(format!("protecting a guard page: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: the pages between the guard pages, inside the mapping.
        unsafe { std::ptr::write_bytes(map.add(page), fill, pages) };
        let margins = memory.margins();
        with_live(|live| live.insert(margins.from, margins));
        Ok(memory)
    }

    fn margins(&self) -> Margins {
        let page = page_size();
        Margins {
            from: self.map as usize + page,
            start: self.start as usize,
            len: self.len,
            to: self.map as usize + self.map_len - page,
            fill: self.fill,
        }
    }

    pub fn ptr(&self) -> *mut u8 {
        self.start
    }

    pub fn len(&self) -> usize {
        self.len
    }
}

/// The system's page size, asked once.
fn page_size() -> usize {
    static PAGE: OnceLock<usize> = OnceLock::new();
    // SAFETY: sysconf only reads a constant of the system.
    *PAGE.get_or_init(|| usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096))
}

impl Drop for GuardedMemory {
    /// Unmaps the buffer; a write out of its bounds that no launch's check saw stops the process
    /// (a kernel reached it through an address it read from memory, not an argument).
    fn drop(&mut self) {
        let margins = self.margins();
        with_live(|live| live.remove(&margins.from));
        // SAFETY: the mapping made in `new`, still mapped, which no launch uses any more.
        if let Some(stray) = unsafe { margins.stray_write() } {
            eprintln!("a kernel wrote {stray}: where a GPU would reach another allocation's bytes");
            std::process::abort();
        }
        // SAFETY: the mapping made in `new`, which nothing uses any more (its owner is gone and
        // it has left the live buffers).
        unsafe { libc::munmap(self.map.cast(), self.map_len) };
    }
}

/// The SIGSEGV action there was before [`note_faults`] put its own.
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();

/// Puts [`note_fault`] before whatever handles SIGSEGV (Rust's report of a stack overflow, or
/// the default: the process stops), once per process.
fn note_faults() {
    PREVIOUS.get_or_init(|| {
        // SAFETY: sigaction with zeroed structs (a valid empty mask), a handler of the
        // SA_SIGINFO form, and the alternate stack Rust gives each thread.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = note_fault as *const () as libc::sighandler_t;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            let mut previous: libc::sigaction = std::mem::zeroed();
            libc::sigaction(libc::SIGSEGV, &action, &mut previous);
            previous
        }
    });
}

/// Writes the faulting address to stderr, then puts the previous action back and returns: the
/// access runs again and meets it. Only async-signal-safe calls, and no allocation.
extern "C" fn note_fault(signal: c_int, info: *mut libc::siginfo_t, _context: *mut c_void) {
    const HEAD: &[u8] = b"memory fault at 0x";
    const TAIL: &[u8] =
        b": where a kernel runs on the CPU execution harness, a read or write out of a buffer's bounds (each one lies between pages nothing may touch)\n";
    // SAFETY: the system passes a valid siginfo to an SA_SIGINFO handler of SIGSEGV.
    let address = unsafe { (*info).si_addr() } as usize;
    let mut line = [0u8; HEAD.len() + 16 + TAIL.len()];
    line[..HEAD.len()].copy_from_slice(HEAD);
    for (i, digit) in line[HEAD.len()..HEAD.len() + 16].iter_mut().enumerate() {
        *digit = b"0123456789abcdef"[(address >> (60 - 4 * i)) & 15];
    }
    line[HEAD.len() + 16..].copy_from_slice(TAIL);
    // SAFETY: write(2) and sigaction(2) are async-signal-safe; the buffer and the saved action
    // outlive the calls.
    unsafe {
        libc::write(2, line.as_ptr().cast(), line.len());
        match PREVIOUS.get() {
            Some(previous) => libc::sigaction(signal, previous, std::ptr::null_mut()),
            None => libc::signal(signal, libc::SIG_DFL) as c_int,
        };
    }
}
