//! A weight matrix as the file stores it (its type, shape and row bytes, checked once) and the
//! shape errors of products over such matrices: what every backend's product and row lookup
//! take and report, whatever the device.

use super::panel::Panels;
use super::{GgmlType, QuantError};

/// A shape or type problem with a matmul's operands.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MatmulError {
    #[error("weight matrix {rows}x{cols} of {ty} needs {expected} bytes, got {got}")]
    WeightBytes { ty: GgmlType, rows: usize, cols: usize, expected: usize, got: usize },
    #[error("weight row length {cols} is not a whole number of {ty} blocks")]
    PartialBlock { ty: GgmlType, cols: usize },
    #[error("activations: expected {expected} values ({batch} rows of {cols}), got {got}")]
    Activations { batch: usize, cols: usize, expected: usize, got: usize },
    #[error("output: expected {expected} values, got {got}")]
    Output { expected: usize, got: usize },
    #[error("row id {id} is out of range for a matrix of {rows} rows")]
    RowId { id: u32, rows: usize },
    #[error("an embedding row of {got} values, not {cols}")]
    RowLength { got: usize, cols: usize },
    #[error(transparent)]
    Quant(#[from] QuantError),
}

/// A row-major weight matrix of `rows` rows of `cols` elements, viewed in place.
#[derive(Clone, Copy, Debug)]
pub struct WeightMatrix<'a> {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub data: &'a [u8],
    row_bytes: usize,
    /// The same matrix repacked into 8-row panels, when it has been: products then run the
    /// panel kernels (their own order of sums, the same for every batch).
    pub panels: Option<&'a Panels>,
}

impl<'a> WeightMatrix<'a> {
    /// Checks that `data` holds exactly `rows` rows of `cols` elements of `ty`.
    pub fn new(ty: GgmlType, rows: usize, cols: usize, data: &'a [u8]) -> Result<Self, MatmulError> {
        let row_bytes = ty.row_bytes(cols).ok_or(MatmulError::PartialBlock { ty, cols })?;
        let expected = row_bytes.checked_mul(rows);
        if expected != Some(data.len()) {
            let expected = expected.unwrap_or(usize::MAX);
            return Err(MatmulError::WeightBytes { ty, rows, cols, expected, got: data.len() });
        }
        Ok(WeightMatrix { ty, rows, cols, data, row_bytes, panels: None })
    }

    /// This matrix with its panels (a repacking of exactly these rows).
    pub fn with_panels(self, panels: &'a Panels) -> Self {
        assert_eq!((panels.layout.ty, panels.rows, panels.cols), (self.ty, self.rows, self.cols), "panels of another matrix");
        WeightMatrix { panels: Some(panels), ..self }
    }

    /// The bytes of row `r`.
    #[inline]
    pub fn row(&self, r: usize) -> &'a [u8] {
        &self.data[r * self.row_bytes..(r + 1) * self.row_bytes]
    }

    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }
}
