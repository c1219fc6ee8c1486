//! The harness's device memory: each buffer in a mapping of its own that ends at a page nothing
//! may touch, so that a kernel reading or writing past a buffer's end (beyond the rounding to
//! 256 bytes that a device allocation has too) stops the process with the address on stderr,
//! where a GPU would fault or read another allocation's bytes.

use std::ffi::{c_int, c_void};
use std::sync::OnceLock;

/// Where a device allocation starts: at a multiple of 256 bytes, as `cuMemAlloc`'s do.
pub(super) const ALIGN: usize = 256;

/// `len` bytes at a multiple of [`ALIGN`], rounded up to [`ALIGN`] and ending there, at the
/// start of an inaccessible page.
pub(super) struct GuardedMemory {
    map: *mut u8,
    map_len: usize,
    start: *mut u8,
    len: usize,
}

// SAFETY: the memory is only written by the harness's launches and copies, one at a time; the
// backend above hands out each buffer mutably to one op at a time, as it would device memory.
unsafe impl Send for GuardedMemory {}
// SAFETY: as above: shared references only pass the address to a launch or a copy.
unsafe impl Sync for GuardedMemory {}

impl GuardedMemory {
    /// `len` bytes (at least one), every one of them `fill`.
    pub fn new(len: usize, fill: u8) -> Result<GuardedMemory, String> {
        note_faults();
        let page = page_size();
        let body = len.max(1).next_multiple_of(ALIGN);
        let pages = body.next_multiple_of(page);
        let map_len = pages + page;
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
            // SAFETY: `pages - body` is within the mapping (body <= pages).
            start: unsafe { map.add(pages - body) },
            len,
        };
        // SAFETY: the mapping's last page, inside the mapping just made.
        if unsafe { libc::mprotect(map.add(pages).cast(), page, libc::PROT_NONE) } != 0 {
            return Err(format!("protecting a guard page: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: `body` bytes from `start` end at the guard page, inside the mapping.
        unsafe { std::ptr::write_bytes(memory.start, fill, body) };
        Ok(memory)
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
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, which nothing uses any more (its owner is gone).
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
        b": where a kernel runs on the CPU execution harness, a read or write past a buffer's end (each one ends at a page nothing may touch)\n";
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
