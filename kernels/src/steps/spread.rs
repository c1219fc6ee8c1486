//! A replayed segment's uploads carried to the device in one copy: the table of destinations
//! its staging holds after their bytes, and the operations of a graph that copies the staging
//! whole and spreads it into the uploads' buffers (`staging.cu`).

use super::{staging_end, Primitives, Recorded};
use crate::runtime::{Launch, RuntimeError};

/// The kernel that puts the uploads into their buffers, its threads per block, and the bytes
/// of an entry of its table: the destination's address, then the upload's offset in the staging
/// and its length (little-endian).
pub(super) const SPREAD_KERNEL: &str = "spread_staging";
const SPREAD_THREADS: u32 = 256;
const SPREAD_ENTRY_BYTES: usize = 16;

/// The uploads of `ops` that carry bytes: buffer, offset in the staging, length.
fn uploads<B>(ops: &[Recorded<B>]) -> impl Iterator<Item = (&B, usize, usize)> {
    ops.iter().filter_map(|op| match op {
        Recorded::Upload { buf, at, bytes } if *bytes > 0 => Some((buf, *at, *bytes)),
        _ => None,
    })
}

/// Where the staging of a segment of `ops` holds the table `spread_staging` reads, after the
/// uploads' bytes: with two uploads or more (a single one is a single copy already), and while
/// the offsets fit the kernel's 32-bit ones.
fn table_at<B>(ops: &[Recorded<B>]) -> Option<usize> {
    let (at, entries) = (staging_end(ops), uploads(ops).count());
    (entries >= 2 && at + entries * SPREAD_ENTRY_BYTES <= i32::MAX as usize).then_some(at)
}

/// Staging for the replays of a segment of `ops`: room for their uploads' bytes, then the table
/// of where each goes when the graph spreads them from one copy ([`table_at`]), written now:
/// the recorded buffers keep their addresses.
pub(super) fn new_staging<P: Primitives>(device: &P, ops: &[Recorded<P::Buffer>]) -> Result<P::Staging, RuntimeError> {
    let Some(table_at) = table_at(ops) else { return device.staging(staging_end(ops)) };
    let table: Vec<u8> = uploads(ops)
        .flat_map(|(buf, at, bytes)| {
            let to = device.address(buf).to_le_bytes();
            // both fit: `table_at` bounds the staging by i32::MAX
            let (at, bytes) = ((at as u32).to_le_bytes(), (bytes as u32).to_le_bytes());
            to.into_iter().chain(at).chain(bytes)
        })
        .collect();
    let mut staging = device.staging(table_at + table.len())?;
    staging.as_mut()[table_at..].copy_from_slice(&table);
    Ok(staging)
}

/// The operations of a graph that carries the uploads of a segment of `ops` in one copy of
/// `staged`, its staging: the whole staging into a buffer of its own, `spread_staging` from
/// there into each upload's buffer, then the segment's other operations in order. Moving the
/// uploads to the segment's start changes nothing any operation reads: an upload's buffer is
/// new to the step where it was recorded (the recording keeps every buffer it handed out), so
/// no operation before the upload touches it. The uploads' own entries are left out, so the
/// recorded buffers are held by the recording alone and stay free to be handed out again
/// ([`Primitives::shared`]). `None` when the segment has fewer than two uploads or the buffer
/// cannot be had: the graph then copies each upload itself.
pub(super) fn spread_ops<P: Primitives>(device: &P, ops: &[Recorded<P::Buffer>], staged: &[u8]) -> Option<Vec<Recorded<P::Buffer>>> {
    let table_at = table_at(ops)?;
    let entries = u32::try_from(uploads(ops).count()).ok()?;
    let mirror = device.alloc(staged.len()).ok()?;
    let launch = Launch { kernel: SPREAD_KERNEL, grid: [entries, 1, 1], block: SPREAD_THREADS };
    let slots = vec![device.address(&mirror), u64::from(table_at as u32)];
    let mut spread = vec![Recorded::Upload { buf: mirror, at: 0, bytes: staged.len() }, Recorded::Launch { launch, slots }];
    spread.extend(ops.iter().filter(|op| !matches!(op, Recorded::Alloc(_) | Recorded::Upload { .. })).cloned());
    Some(spread)
}
