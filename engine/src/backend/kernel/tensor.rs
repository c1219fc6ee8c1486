//! Activations on the device: `rows x cols` f32 values and, when the op that wrote them also
//! quantized them for the products that read them next, their Q8_1 blocks.

use kernels::Runtime;

/// `rows x cols` f32 activations on the device.
///
/// The backend reads the values through `buf` and writes them through `written`, which drops
/// the Q8_1 blocks: blocks are only ever those of the values now in the buffer.
pub struct DeviceTensor<R: Runtime> {
    buf: R::Buffer,
    pub(super) rows: usize,
    pub(super) cols: usize,
    /// The values' Q8_1 blocks (`rows · cols / 32`, row after row), written in the same pass as
    /// the values by the op that wrote them (the RMS norms).
    q8_1: Option<R::Buffer>,
}

impl<R: Runtime> DeviceTensor<R> {
    pub(super) fn new(buf: R::Buffer, rows: usize, cols: usize) -> DeviceTensor<R> {
        DeviceTensor { buf, rows, cols, q8_1: None }
    }

    /// The values, for a launch that reads them.
    pub(super) fn buf(&self) -> &R::Buffer {
        &self.buf
    }

    /// The values, for a launch that writes them: their Q8_1 blocks, if any, are dropped.
    pub(super) fn written(&mut self) -> &R::Buffer {
        self.q8_1 = None;
        &self.buf
    }

    /// The values for a launch that writes them with their Q8_1 blocks, and the blocks' buffer:
    /// the one the tensor had (a norm's output is rewritten by the next norm, layer after
    /// layer), else one from `alloc` (of the bytes it takes). None without whole blocks.
    pub(super) fn written_with_q8_1<E>(
        &mut self,
        block_bytes: usize,
        alloc: impl FnOnce(usize) -> Result<R::Buffer, E>,
    ) -> Result<(&R::Buffer, Option<&R::Buffer>), E> {
        if !self.cols.is_multiple_of(32) {
            self.q8_1 = None;
            return Ok((&self.buf, None));
        }
        if self.q8_1.is_none() {
            self.q8_1 = Some(alloc(self.rows * self.cols / 32 * block_bytes)?);
        }
        Ok((&self.buf, self.q8_1.as_ref()))
    }

    /// The values' Q8_1 blocks, when the op that wrote them wrote those too.
    pub(super) fn q8_1(&self) -> Option<&R::Buffer> {
        self.q8_1.as_ref()
    }
}
