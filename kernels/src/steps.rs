//! A runtime written once over a device's primitives ([`Primitives`]: the CUDA driver, the CPU
//! execution harness), with steps recorded once and replayed as one graph.
//!
//! A step is the work of one forward pass between [`Runtime::begin_step`] and
//! [`Runtime::end_step`]; it falls into segments, each ending at a download (the host reads a
//! result: the logits, or a router's choices before the experts run). The first time a step of a
//! given key runs, every operation is issued at once and recorded: the buffers it allocates and
//! uploads into, its fills, copies and launches with their argument slots resolved to addresses
//! and values. The recording keeps its buffers, so their addresses stay valid. The next step
//! of that key issues nothing while it matches the recording: an allocation gets the recorded
//! buffer of its size, an upload puts its new bytes into the segment's staging (host memory the
//! device copies from: page-locked on CUDA), a fill, copy or launch must be the recorded one
//! exactly (same kernel, geometry, addresses and scalars); at the segment's download the segment
//! runs as one graph, one launch, made by the device the first time a segment matches whole
//! (CUDA: stream capture of its operations), so that a shape seen once never pays for a graph.
//! A replayed step thus sends nothing before its graph: the index arrays travel inside it, a
//! segment's uploads together in one copy of its staging, which a kernel spreads to their
//! buffers (`staging.cu`), a single upload as a copy of its own. The first operation that
//! differs (another split count in attention, another expert set) ends the replay: what matched
//! so far is issued as recorded and the rest of the step is recorded anew, replacing the old
//! recording; a key that differs [`DIVERGED_LIMIT`] steps in a row is left unrecorded for
//! [`UNRECORDED_STEPS`]. The result is the same bits either way: the same launches run in the
//! same order over the same buffers, only issued together.
//!
//! A recorded buffer is handed out again only while nothing but the recording holds it, so a
//! buffer the host kept from the last step (or one a store keeps for good) is never overwritten
//! by a replay.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::ThreadId;

use crate::runtime::{scalar_slot, Arg, Launch, ReadOnlyUploads, Runtime, RuntimeError};

mod spread;

/// What a device does at once, with nothing recorded: the primitives [`Stepped`] builds a
/// [`Runtime`] from. Buffers are handles (cloning one does not copy memory); fills, copies and
/// launches name memory by device address.
pub trait Primitives: Send + Sync + 'static {
    type Buffer: Clone + Send + Sync;
    /// A segment made into one launchable unit.
    type Graph: Send;
    /// Host memory a graph copies a replayed segment's uploads from when it runs (CUDA:
    /// page-locked). The host writes it only while no graph that reads it runs: a replayed
    /// segment ends in a download, which waits for its graph.
    type Staging: Send + AsRef<[u8]> + AsMut<[u8]>;

    /// `bytes` bytes whose contents are unspecified.
    fn alloc(&self, bytes: usize) -> Result<Self::Buffer, RuntimeError>;
    /// The buffer's size in bytes.
    fn len(&self, buf: &Self::Buffer) -> usize;
    /// The device address of the buffer's first byte.
    fn address(&self, buf: &Self::Buffer) -> u64;
    /// Whether another handle than `buf` itself holds the buffer.
    fn shared(&self, buf: &Self::Buffer) -> bool;
    /// Copies `data` to the start of `buf` (in bounds), in issue order.
    fn write(&self, buf: &Self::Buffer, data: &[u8]) -> Result<(), RuntimeError>;
    /// Copies the first `out.len()` bytes of `buf` (in bounds) to the host, after everything
    /// issued before.
    fn read(&self, buf: &Self::Buffer, out: &mut [u8]) -> Result<(), RuntimeError>;
    /// Zeros `bytes` bytes from address `at`.
    fn zero(&self, at: u64, bytes: usize) -> Result<(), RuntimeError>;
    /// Copies `bytes` bytes from address `from` to address `to` (ranges not overlapping).
    fn copy(&self, from: u64, to: u64, bytes: usize) -> Result<(), RuntimeError>;
    /// Device memory still free, when the device says.
    fn free_memory(&self) -> Option<usize>;
    /// Launches `launch` with its parameters as 8-byte slots (see [`Arg`]).
    ///
    /// # Safety
    /// The slots must be the kernel's parameters, and the addresses among them must point to
    /// live memory holding what the kernel reads and writes at this geometry.
    unsafe fn launch(&self, launch: Launch, slots: &[u64]) -> Result<(), RuntimeError>;
    /// `bytes` bytes of staging (more than 0).
    fn staging(&self, bytes: usize) -> Result<Self::Staging, RuntimeError>;
    /// The segment `ops` as a graph, built when a step first matches its recording (its
    /// operations not issued yet), each upload a copy from its place in `staged`, the bytes of
    /// the segment's staging (empty when it has no upload); an error leaves steps unrecorded
    /// from then on.
    fn build(&self, ops: &[Recorded<Self::Buffer>], staged: &[u8]) -> Result<Self::Graph, RuntimeError>;
    /// Runs `graph`, made of `ops` over `staged`, again.
    fn replay(&self, graph: &Self::Graph, ops: &[Recorded<Self::Buffer>], staged: &[u8]) -> Result<(), RuntimeError>;
}

/// One operation of a recorded segment.
#[derive(Clone)]
pub enum Recorded<B> {
    /// A buffer the step allocated (kept by the recording).
    Alloc(B),
    /// A buffer the step uploaded `bytes` bytes into (kept; its bytes are the next step's own),
    /// which a replay of the segment stages from byte `at` of its staging.
    Upload {
        buf: B,
        at: usize,
        bytes: usize,
    },
    Zero {
        at: u64,
        bytes: usize,
    },
    Copy {
        from: u64,
        to: u64,
        bytes: usize,
    },
    Launch {
        launch: Launch,
        slots: Vec<u64>,
    },
}

impl<B> Recorded<B> {
    /// Whether `self` and `other`, operations that name memory by address, are the same work:
    /// a fill, a copy or a launch with the same addresses and values.
    fn same_work(&self, other: &Recorded<B>) -> bool {
        match (self, other) {
            (Recorded::Zero { at, bytes }, Recorded::Zero { at: a, bytes: b }) => (at, bytes) == (a, b),
            (Recorded::Copy { from, to, bytes }, Recorded::Copy { from: f, to: t, bytes: b }) => (from, to, bytes) == (f, t, b),
            (Recorded::Launch { launch, slots }, Recorded::Launch { launch: l, slots: s }) => launch == l && slots == s,
            _ => false,
        }
    }

    /// Issues the operation of a replayed segment on its own, an upload from its place in
    /// `staged` (the segment's staging), written as any upload is.
    ///
    /// # Safety
    /// The addresses must still be live: the recording's own buffers and the ones it was
    /// recorded with (weights, caches), kept by their owners.
    pub unsafe fn issue<P: Primitives<Buffer = B>>(&self, p: &P, staged: &[u8]) -> Result<(), RuntimeError> {
        match self {
            Recorded::Alloc(_) => Ok(()),
            Recorded::Upload { bytes: 0, .. } => Ok(()),
            Recorded::Upload { buf, at, bytes } => p.write(buf, &staged[*at..*at + *bytes]),
            Recorded::Zero { at, bytes } => p.zero(*at, *bytes),
            Recorded::Copy { from, to, bytes } => p.copy(*from, *to, *bytes),
            // SAFETY: the caller's contract; the slots were the kernel's when recorded.
            Recorded::Launch { launch, slots } => unsafe { p.launch(*launch, slots) },
        }
    }
}

/// Where a segment's staging places uploads: each at a multiple of this.
const STAGING_ALIGN: usize = 16;

/// The staging bytes the uploads of `ops` take (where the next one would go).
fn staging_end<B>(ops: &[Recorded<B>]) -> usize {
    ops.iter()
        .rev()
        .find_map(|op| match op {
            Recorded::Upload { at, bytes, .. } => Some((at + bytes).next_multiple_of(STAGING_ALIGN)),
            _ => None,
        })
        .unwrap_or(0)
}

/// A recorded segment, its graph (`None` until it is built, and when it issues nothing) and
/// the staging its uploads are replayed from (made when a step first replays it, `None` when it
/// has no upload).
struct Segment<P: Primitives> {
    ops: Vec<Recorded<P::Buffer>>,
    graph: Option<Built<P>>,
    staging: Option<P::Staging>,
}

/// A segment's graph and the operations it was made of when they are not the segment's own:
/// its uploads carried in one copy (see [`spread::spread_ops`]).
struct Built<P: Primitives> {
    graph: P::Graph,
    spread: Option<Vec<Recorded<P::Buffer>>>,
}

impl<P: Primitives> Segment<P> {
    fn recorded(ops: Vec<Recorded<P::Buffer>>) -> Segment<P> {
        Segment { ops, graph: None, staging: None }
    }

    /// The staging's bytes (none without an upload).
    fn staged(&self) -> &[u8] {
        self.staging.as_ref().map_or(&[], AsRef::as_ref)
    }
}

/// Where the step in progress stands.
enum Mode<P: Primitives> {
    /// Matching the old segment: `cursor` operations matched so far, none issued (the uploads
    /// among them staged).
    Replay { segment: Segment<P>, cursor: usize },
    /// Issuing and recording.
    Record { ops: Vec<Recorded<P::Buffer>> },
}

/// A key's recording: its segments, how many steps in a row diverged from theirs, and how many
/// more steps of the key run unrecorded (a key whose steps keep differing, such as a mixture's
/// expert choices, would otherwise pay a recording every step).
struct Recording<P: Primitives> {
    segments: Vec<Segment<P>>,
    /// The step's read-only uploads, call by call: a new upload (`None`) or the one of an
    /// earlier call (`Some(i)`, the i-th distinct).
    shares: Vec<Option<usize>>,
    diverged: u32,
    unrecorded: u32,
}

impl<P: Primitives> Recording<P> {
    /// Nothing recorded, the key's next `steps` steps issued as they come.
    fn unrecorded(steps: u32) -> Recording<P> {
        Recording { segments: Vec::new(), shares: Vec::new(), diverged: 0, unrecorded: steps }
    }
}

/// The step in progress on one thread.
struct Active<P: Primitives> {
    thread: ThreadId,
    key: u64,
    /// Steps of this key before it that diverged, in a row.
    diverged_before: u32,
    /// This step diverged from its recording.
    diverged: bool,
    /// The old recording's segments not reached yet.
    old: VecDeque<Segment<P>>,
    /// The segments this step has completed, its recording once it ends.
    done: Vec<Segment<P>>,
    mode: Mode<P>,
    /// This step's distinct read-only uploads with the call site that asked and their bytes:
    /// a step's layers ask for the same index arrays at the same sites, uploaded once. Arrays
    /// of other sites are never shared, whatever their bytes (a position equal to its slot for
    /// a while), so that the sharing stays the same from one step to the next.
    read_only: Vec<(Site, Vec<u8>, Arc<P::Buffer>)>,
    /// How this step's read-only uploads were shared, call by call (see [`Recording`]).
    shares: Vec<Option<usize>>,
    /// The recording's sharing, followed while replaying: bytes that happen to be equal in
    /// this step (a position equal to its slot) must not change which calls share, or the
    /// launches' addresses would differ from the recording's.
    old_shares: Option<Vec<Option<usize>>>,
}

struct State<P: Primitives> {
    /// Recordings by key, the most recently used first.
    recordings: VecDeque<(u64, Recording<P>)>,
    active: Option<Active<P>>,
    /// Steps are recorded (the device built its graphs so far).
    enabled: bool,
}

/// The [`Runtime`] of device `P`, recording and replaying steps (see the module's note).
pub struct Stepped<P: Primitives> {
    // dropped in this order: the recordings' graphs and buffers, then the device they were made
    // on (whose drop may unload the modules their kernels come from)
    state: Mutex<State<P>>,
    read_only: ReadOnlyUploads<P::Buffer>,
    device: P,
}

/// The place in the source that asked for a read-only upload.
type Site = &'static std::panic::Location<'static>;

/// How many recordings (keys) a runtime keeps: each holds its step's activations.
pub const KEPT_RECORDINGS: usize = 4;

/// After this many steps of a key in a row diverge from their recording, the key's next
/// [`UNRECORDED_STEPS`] steps are issued as they come, then recorded again.
pub const DIVERGED_LIMIT: u32 = 3;
pub const UNRECORDED_STEPS: u32 = 64;

/// Set to 0: no step is recorded or replayed; every operation is issued as it comes.
pub const GRAPHS_VAR: &str = "ENGINE_GRAPHS";

impl<P: Primitives + Default> Default for Stepped<P> {
    fn default() -> Self {
        Stepped::new(P::default())
    }
}

impl<P: Primitives> std::ops::Deref for Stepped<P> {
    type Target = P;
    fn deref(&self) -> &P {
        &self.device
    }
}

impl<P: Primitives> Stepped<P> {
    /// The runtime of `device`, recording steps unless [`GRAPHS_VAR`] is 0.
    pub fn new(device: P) -> Stepped<P> {
        let enabled = std::env::var(GRAPHS_VAR).map_or(true, |v| v != "0");
        Stepped::with_graphs(device, enabled)
    }

    /// The runtime of `device`, recording steps when `graphs`.
    pub fn with_graphs(device: P, graphs: bool) -> Stepped<P> {
        let state = State { recordings: VecDeque::new(), active: None, enabled: graphs };
        Stepped { device, read_only: ReadOnlyUploads::default(), state: Mutex::new(state) }
    }

    /// Whether steps are recorded and replayed.
    pub fn graphs(&self) -> bool {
        self.lock().enabled
    }

    fn lock(&self) -> MutexGuard<'_, State<P>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The step in progress, when the calling thread runs it.
    fn mine(state: &mut State<P>) -> Option<&mut Active<P>> {
        let me = std::thread::current().id();
        state.active.as_mut().filter(|a| a.thread == me)
    }

    /// Ends a replay at its first difference: the operations matched so far are issued as
    /// recorded, and they begin the segment recorded in its place; the old recording's later
    /// segments are dropped (the step is recorded anew from here).
    fn diverge(&self, active: &mut Active<P>) -> Result<(), RuntimeError> {
        if !matches!(active.mode, Mode::Replay { .. }) {
            return Ok(());
        }
        let Mode::Replay { segment, cursor } = std::mem::replace(&mut active.mode, Mode::Record { ops: Vec::new() }) else {
            unreachable!("matched above")
        };
        let issued = self.issue_all(&segment.ops[..cursor], segment.staged());
        let mut ops = segment.ops;
        ops.truncate(cursor);
        active.old.clear();
        active.old_shares = None;
        active.diverged = true;
        active.mode = Mode::Record { ops };
        issued
    }

    /// Issues operations of a replayed segment one by one, counting them; its uploads from
    /// `staged`, the segment's staging.
    fn issue_all(&self, ops: &[Recorded<P::Buffer>], staged: &[u8]) -> Result<(), RuntimeError> {
        // SAFETY: the recording keeps its buffers, and the others' owners kept them (a replay
        // matched their addresses in this step).
        ops.iter().try_for_each(|op| unsafe { self.issue_counted(op, staged) })
    }

    /// Issues `op` on its own, counted in [`crate::Issued`].
    ///
    /// # Safety
    /// As [`Recorded::issue`].
    unsafe fn issue_counted(&self, op: &Recorded<P::Buffer>, staged: &[u8]) -> Result<(), RuntimeError> {
        match op {
            Recorded::Launch { .. } => crate::runtime::count_launch(),
            Recorded::Zero { .. } | Recorded::Copy { .. } => crate::runtime::count_transfer(),
            Recorded::Upload { bytes, .. } if *bytes > 0 => crate::runtime::count_transfer(),
            Recorded::Alloc(_) | Recorded::Upload { .. } => {}
        }
        // SAFETY: the caller's contract.
        unsafe { op.issue(&self.device, staged) }
    }

    /// The next segment: the old recording's, with staging for its uploads, else a new one
    /// (also when the staging cannot be had: the rest of the step is recorded anew).
    fn next_mode(&self, active: &mut Active<P>) -> Mode<P> {
        let Some(mut segment) = active.old.pop_front() else { return Mode::Record { ops: Vec::new() } };
        if segment.staging.is_none() && staging_end(&segment.ops) > 0 {
            match spread::new_staging(&self.device, &segment.ops) {
                Ok(staging) => segment.staging = Some(staging),
                Err(_) => {
                    active.old.clear();
                    active.old_shares = None;
                    return Mode::Record { ops: Vec::new() };
                }
            }
        }
        Mode::Replay { segment, cursor: 0 }
    }

    /// Issues `op`, an operation that names memory by address only: at once when no step runs
    /// on this thread, at once and recorded while one records, not at all while a replay
    /// matches it (the graph will).
    ///
    /// # Safety
    /// The operation's addresses must be live, and a launch's slots its kernel's parameters
    /// (see [`Runtime::launch`]).
    unsafe fn step_op(&self, op: Recorded<P::Buffer>) -> Result<(), RuntimeError> {
        let mut state = self.lock();
        let Some(active) = Self::mine(&mut state) else {
            drop(state);
            // SAFETY: the caller's contract.
            return unsafe { self.issue_counted(&op, &[]) };
        };
        if let Mode::Replay { segment, cursor } = &mut active.mode {
            if segment.ops.get(*cursor).is_some_and(|recorded| recorded.same_work(&op)) {
                *cursor += 1;
                return Ok(());
            }
            self.diverge(active)?;
        }
        let Mode::Record { ops } = &mut active.mode else { unreachable!("diverge records") };
        // SAFETY: the caller's contract.
        unsafe { self.issue_counted(&op, &[]) }?;
        ops.push(op);
        Ok(())
    }

    /// A buffer for the step: the recorded one of `bytes` when replaying (`data`, when given,
    /// staged for the graph to copy), else a fresh one (written with `data`), recorded when a
    /// step runs on this thread.
    fn step_buffer(&self, bytes: usize, data: Option<&[u8]>) -> Result<P::Buffer, RuntimeError> {
        let write = |buf: &P::Buffer| -> Result<(), RuntimeError> {
            match data.filter(|d| !d.is_empty()) {
                Some(data) => {
                    crate::runtime::count_transfer();
                    self.device.write(buf, data)
                }
                None => Ok(()),
            }
        };
        let mut state = self.lock();
        let Some(active) = Self::mine(&mut state) else {
            let buf = self.device.alloc(bytes.max(1))?;
            write(&buf)?;
            return Ok(buf);
        };
        if let Mode::Replay { segment, cursor } = &mut active.mode {
            let fits = |b: &P::Buffer| self.device.len(b) == bytes.max(1) && !self.device.shared(b);
            match (segment.ops.get(*cursor), data) {
                (Some(Recorded::Alloc(buf)), None) if fits(buf) => {
                    *cursor += 1;
                    return Ok(buf.clone());
                }
                (Some(Recorded::Upload { buf, at, bytes: n }), Some(data)) if fits(buf) && *n == data.len() => {
                    if let Some(staging) = segment.staging.as_mut() {
                        staging.as_mut()[*at..*at + *n].copy_from_slice(data);
                    }
                    *cursor += 1;
                    return Ok(buf.clone());
                }
                _ => self.diverge(active)?,
            }
        }
        let Mode::Record { ops } = &mut active.mode else { unreachable!("diverge records") };
        let buf = self.device.alloc(bytes.max(1))?;
        write(&buf)?;
        ops.push(match data {
            Some(data) => Recorded::Upload { buf: buf.clone(), at: staging_end(ops), bytes: data.len() },
            None => Recorded::Alloc(buf.clone()),
        });
        Ok(buf)
    }

    /// Ends the segment in progress before a download: replayed when it matched whole (made a
    /// graph the first time it is, so that a shape that comes once never pays for one), kept
    /// when recorded; the next begins.
    fn end_segment(&self) -> Result<(), RuntimeError> {
        let mut state = self.lock();
        let Some(active) = Self::mine(&mut state) else { return Ok(()) };
        if let Mode::Replay { segment, cursor } = &active.mode {
            if *cursor < segment.ops.len() {
                self.diverge(active)?;
            }
        }
        let next = self.next_mode(active);
        let segment = match std::mem::replace(&mut active.mode, next) {
            Mode::Replay { mut segment, .. } => {
                let issues = segment.ops.iter().any(|op| !matches!(op, Recorded::Alloc(_) | Recorded::Upload { bytes: 0, .. }));
                if issues && segment.graph.is_none() {
                    let spread = spread::spread_ops(&self.device, &segment.ops, segment.staged());
                    match self.device.build(spread.as_deref().unwrap_or(&segment.ops), segment.staged()) {
                        Ok(graph) => segment.graph = Some(Built { graph, spread }),
                        Err(e) => {
                            // the device cannot make graphs: this segment's work is issued as
                            // recorded, and from now on steps are issued as they come
                            eprintln!("warning: steps are no longer replayed as graphs: {e}");
                            let issued = self.issue_all(&segment.ops, segment.staged());
                            state.enabled = false;
                            state.active = None;
                            state.recordings.clear();
                            return issued;
                        }
                    }
                }
                if let Some(built) = &segment.graph {
                    crate::runtime::count_launch();
                    self.device.replay(&built.graph, built.spread.as_deref().unwrap_or(&segment.ops), segment.staged())?;
                }
                segment
            }
            Mode::Record { ops } => Segment::recorded(ops),
        };
        active.done.push(segment);
        Ok(())
    }
}

impl<P: Primitives> Runtime for Stepped<P> {
    type Buffer = P::Buffer;

    fn alloc_zeroed(&self, bytes: usize) -> Result<P::Buffer, RuntimeError> {
        let buf = self.step_buffer(bytes, None)?;
        let zero = Recorded::Zero { at: self.device.address(&buf), bytes: self.device.len(&buf) };
        // SAFETY: the whole of a buffer just handed out.
        unsafe { self.step_op(zero) }?;
        Ok(buf)
    }

    fn alloc(&self, bytes: usize) -> Result<P::Buffer, RuntimeError> {
        self.step_buffer(bytes, None)
    }

    fn upload(&self, data: &[u8]) -> Result<P::Buffer, RuntimeError> {
        self.step_buffer(data.len(), Some(data))
    }

    #[track_caller]
    fn upload_read_only(&self, data: &[u8]) -> Result<Arc<P::Buffer>, RuntimeError> {
        let site: Site = std::panic::Location::caller();
        let mut state = self.lock();
        let Some(active) = Self::mine(&mut state) else {
            drop(state);
            return self.read_only.get_or_upload(data, |d| self.upload(d));
        };
        let call = active.shares.len();
        let found = |active: &Active<P>| active.read_only.iter().position(|(at, bytes, _)| *at == site && bytes.as_slice() == data);
        let same = |active: &Active<P>, i: usize| {
            active.read_only.get(i).filter(|(at, bytes, _)| *at == site && bytes.as_slice() == data).map(|(_, _, b)| Arc::clone(b))
        };
        let share = match active.old_shares.as_ref().map(|s| s.get(call).copied()) {
            // replaying: the recording's choice, if these bytes allow it
            Some(Some(Some(i))) => match same(active, i) {
                Some(buf) => {
                    active.shares.push(Some(i));
                    return Ok(buf);
                }
                None => {
                    self.diverge(active)?;
                    found(active)
                }
            },
            Some(Some(None)) => None,
            // recording: by the bytes
            Some(None) | None => found(active),
        };
        if let Some(i) = share {
            active.shares.push(Some(i));
            return Ok(same(active, i).expect("found by its bytes"));
        }
        drop(state);
        let buf = Arc::new(self.step_buffer(data.len(), Some(data))?);
        if let Some(active) = Self::mine(&mut self.lock()) {
            active.read_only.push((site, data.to_vec(), Arc::clone(&buf)));
            active.shares.push(None);
        }
        Ok(buf)
    }

    fn download(&self, buf: &P::Buffer, out: &mut [u8]) -> Result<(), RuntimeError> {
        if out.len() > self.device.len(buf) {
            return Err(RuntimeError::Device(format!("download of {} bytes from a buffer of {}", out.len(), self.device.len(buf))));
        }
        self.end_segment()?;
        crate::runtime::count_transfer();
        self.device.read(buf, out)
    }

    fn copy(&self, src: &P::Buffer, src_at: usize, dst: &P::Buffer, dst_at: usize, bytes: usize) -> Result<(), RuntimeError> {
        if src_at + bytes > self.device.len(src) || dst_at + bytes > self.device.len(dst) {
            return Err(RuntimeError::Device(format!("copy of {bytes} bytes out of bounds")));
        }
        let (from, to) = (self.device.address(src) + src_at as u64, self.device.address(dst) + dst_at as u64);
        // SAFETY: ranges of the two live buffers, in bounds (checked).
        unsafe { self.step_op(Recorded::Copy { from, to, bytes }) }
    }

    fn len(&self, buf: &P::Buffer) -> usize {
        self.device.len(buf)
    }

    fn free_memory(&self) -> Option<usize> {
        self.device.free_memory()
    }

    unsafe fn launch(&self, launch: Launch, args: &[Arg<'_, P::Buffer>]) -> Result<(), RuntimeError> {
        let slots: Vec<u64> = args
            .iter()
            .map(|a| match *a {
                Arg::Buf(b) => self.device.address(b),
                Arg::BufAt(b, at) => self.device.address(b) + at as u64,
                _ => scalar_slot(a).expect("a scalar"),
            })
            .collect();
        // SAFETY: the caller's contract covers the arguments, resolved to their slots.
        unsafe { self.step_op(Recorded::Launch { launch, slots }) }
    }

    fn begin_step(&self, key: u64) {
        let mut state = self.lock();
        if !state.enabled || state.active.is_some() {
            return;
        }
        let old = state.recordings.iter().position(|(k, _)| *k == key).and_then(|at| state.recordings.remove(at)).map(|(_, r)| r);
        let old = match old {
            Some(r) if r.unrecorded > 0 => {
                let rest = Recording { unrecorded: r.unrecorded - 1, ..Recording::unrecorded(0) };
                state.recordings.push_front((key, rest));
                return;
            }
            Some(r) => r,
            None => Recording::unrecorded(0),
        };
        let mut active = Active {
            thread: std::thread::current().id(),
            key,
            diverged_before: old.diverged,
            diverged: false,
            old: old.segments.into(),
            done: Vec::new(),
            mode: Mode::Record { ops: Vec::new() },
            read_only: Vec::new(),
            shares: Vec::new(),
            old_shares: Some(old.shares),
        };
        active.mode = self.next_mode(&mut active);
        state.active = Some(active);
    }

    fn end_step(&self) -> Result<(), RuntimeError> {
        let mut state = self.lock();
        if Self::mine(&mut state).is_none() {
            return Ok(());
        }
        let mut active = state.active.take().expect("mine");
        // work after the last download (none in a forward pass) is issued now and not kept
        let issued = match std::mem::replace(&mut active.mode, Mode::Record { ops: Vec::new() }) {
            Mode::Replay { segment, cursor } => self.issue_all(&segment.ops[..cursor], segment.staged()),
            Mode::Record { .. } => Ok(()),
        };
        if issued.is_ok() && state.enabled {
            let diverged = if active.diverged { active.diverged_before + 1 } else { 0 };
            let recording = if diverged >= DIVERGED_LIMIT {
                Recording::unrecorded(UNRECORDED_STEPS)
            } else {
                Recording { segments: active.done, shares: active.shares, diverged, unrecorded: 0 }
            };
            state.recordings.push_front((active.key, recording));
            state.recordings.truncate(KEPT_RECORDINGS);
        }
        issued
    }
}

#[cfg(all(test, feature = "host"))]
mod tests {
    use super::*;
    use crate::host::{HostBuffer, HostDevice, HostRuntime};
    use crate::runtime::Issued;

    fn floats(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    /// One step of key 7: `x + y · scale` computed in a fresh buffer, read back. Returns the
    /// values and what the step issued.
    fn step(rt: &HostRuntime, x: &[f32], y: &[f32], scale: f32) -> (Vec<f32>, Issued) {
        let before = Issued::on_this_thread();
        rt.begin_step(7);
        let out = rt.alloc_zeroed(x.len() * 4).unwrap();
        let (xb, yb) = (rt.upload(&floats(x)).unwrap(), rt.upload(&floats(y)).unwrap());
        crate::launch::add_scaled(rt, &out, &xb, 1.0, x.len()).unwrap();
        crate::launch::add_scaled(rt, &out, &yb, scale, x.len()).unwrap();
        let mut bytes = vec![0u8; x.len() * 4];
        rt.download(&out, &mut bytes).unwrap();
        rt.end_step().unwrap();
        let after = Issued::on_this_thread();
        let issued = Issued { launches: after.launches - before.launches, transfers: after.transfers - before.transfers };
        (bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect(), issued)
    }

    #[test]
    fn a_step_of_the_same_shape_replays_as_one_launch_with_its_new_data() {
        let rt = HostRuntime::with_graphs(HostDevice, true);
        let (first, issued) = step(&rt, &[1.0, 2.0, 3.0], &[10.0, 20.0, 30.0], 1.0);
        assert_eq!(first, [11.0, 22.0, 33.0]);
        // recorded: two launches, the fill, two uploads and the download
        assert_eq!((issued.launches, issued.transfers), (2, 4));
        let (second, issued) = step(&rt, &[4.0, 5.0, 6.0], &[1.0, 1.0, 1.0], 1.0);
        assert_eq!(second, [5.0, 6.0, 7.0]);
        // replayed: one graph, the uploads copied inside it from the staging; the download
        assert_eq!((issued.launches, issued.transfers), (1, 1));
        let (third, issued) = step(&rt, &[0.5, 0.5, 0.5], &[2.0, 4.0, 8.0], 1.0);
        assert_eq!(third, [2.5, 4.5, 8.5]);
        assert_eq!((issued.launches, issued.transfers), (1, 1));
    }

    #[test]
    fn a_segment_s_uploads_travel_in_one_copy_and_land_in_their_buffers() {
        let rt = HostRuntime::with_graphs(HostDevice, true);
        // uploads of 3, 17 and 64 bytes (a tail alone, words and a tail, words), each read back;
        // the first download ends the segment that holds them
        let step = |key: u64, sizes: &[usize], seed: u8| {
            let data: Vec<Vec<u8>> =
                sizes.iter().map(|&n| (0..n).map(|i| seed.wrapping_mul(37).wrapping_add(i as u8 * 3)).collect()).collect();
            let before = Issued::on_this_thread();
            rt.begin_step(key);
            let bufs: Vec<HostBuffer> = data.iter().map(|d| rt.upload(d).unwrap()).collect();
            for (buf, want) in bufs.iter().zip(&data) {
                let mut got = vec![0u8; want.len()];
                rt.download(buf, &mut got).unwrap();
                assert_eq!(&got, want, "seed {seed}");
            }
            rt.end_step().unwrap();
            let after = Issued::on_this_thread();
            (after.launches - before.launches, after.transfers - before.transfers)
        };
        // recorded: three uploads and three downloads, no launch
        assert_eq!(step(3, &[3, 17, 64], 1), (0, 6));
        // replayed: one graph (built on the first replay), the downloads
        for seed in 2..5 {
            assert_eq!(step(3, &[3, 17, 64], seed), (1, 3));
        }
        let spread_of = |key: u64| {
            let state = rt.lock();
            let recording = &state.recordings.iter().find(|(k, _)| *k == key).expect("recorded").1;
            recording.segments[0].graph.as_ref().expect("a graph").spread.as_ref().map(|ops| {
                let uploads = ops.iter().filter(|op| matches!(op, Recorded::Upload { .. })).count();
                let first_launch = ops.iter().find_map(|op| match op {
                    Recorded::Launch { launch, .. } => Some(launch.kernel),
                    _ => None,
                });
                (uploads, first_launch)
            })
        };
        // the graph's one copy, then the kernel that spreads it
        assert_eq!(spread_of(3), Some((1, Some(spread::SPREAD_KERNEL))));
        // a single upload is a single copy already
        for seed in 0..3 {
            step(4, &[40], seed);
        }
        assert_eq!(spread_of(4), None);
    }

    #[test]
    fn a_step_that_differs_is_issued_as_it_comes_and_recorded_anew() {
        let rt = HostRuntime::with_graphs(HostDevice, true);
        step(&rt, &[1.0, 2.0], &[1.0, 1.0], 1.0);
        // another scale: the second launch differs from the recording after the first matched
        let (values, issued) = step(&rt, &[1.0, 2.0], &[1.0, 1.0], 2.0);
        assert_eq!(values, [3.0, 4.0]);
        assert_eq!(issued.launches, 2, "both launches issued one by one");
        // the new recording replays
        let (values, issued) = step(&rt, &[0.0, 1.0], &[3.0, 3.0], 2.0);
        assert_eq!(values, [6.0, 7.0]);
        assert_eq!(issued.launches, 1);
        // more values: the first allocation already differs
        let (values, issued) = step(&rt, &[1.0, 1.0, 1.0], &[1.0, 2.0, 3.0], 2.0);
        assert_eq!(values, [3.0, 5.0, 7.0]);
        assert_eq!(issued.launches, 2);
    }

    #[test]
    fn a_buffer_the_host_still_holds_is_not_handed_out_again() {
        let rt = HostRuntime::with_graphs(HostDevice, true);
        rt.begin_step(1);
        let kept = rt.upload(&floats(&[1.0, 2.0])).unwrap();
        let mut out = [0u8; 8];
        rt.download(&kept, &mut out).unwrap();
        rt.end_step().unwrap();
        // the next step's upload of that size would be the recorded buffer, which `kept` holds
        rt.begin_step(1);
        let other = rt.upload(&floats(&[5.0, 6.0])).unwrap();
        rt.download(&other, &mut out).unwrap();
        rt.end_step().unwrap();
        assert_ne!(rt.address(&kept), rt.address(&other));
        rt.download(&kept, &mut out).unwrap();
        assert_eq!(out, floats(&[1.0, 2.0])[..]);
    }

    #[test]
    fn keys_that_keep_diverging_run_unrecorded_for_a_while() {
        let rt = HostRuntime::with_graphs(HostDevice, true);
        step(&rt, &[1.0], &[1.0], 1.0);
        // every step another scale: a divergence each time
        for i in 0..DIVERGED_LIMIT {
            let (_, issued) = step(&rt, &[1.0], &[1.0], 2.0 + i as f32);
            assert_eq!(issued.launches, 2);
        }
        // unrecorded now: the same step twice issues its launches both times
        for _ in 0..2 {
            let (values, issued) = step(&rt, &[1.0], &[1.0], 1.0);
            assert_eq!(values, [2.0]);
            assert_eq!((issued.launches, issued.transfers), (2, 4));
        }
    }

    #[test]
    fn with_graphs_off_every_step_is_issued_as_it_comes() {
        let rt = HostRuntime::with_graphs(HostDevice, false);
        for _ in 0..3 {
            let (values, issued) = step(&rt, &[1.0, 2.0], &[1.0, 1.0], 1.0);
            assert_eq!(values, [2.0, 3.0]);
            assert_eq!(issued.launches, 2);
        }
    }
}
