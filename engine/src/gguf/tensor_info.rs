//! Tensor records of a GGUF file: name, shape, type and where the data lies, with the shape
//! rules shared by the reader and the writer.

use super::error::Problem;
use super::types::GgmlType;

/// ggml tensors have at most this many dimensions.
pub const MAX_DIMS: usize = 4;

/// One tensor of a GGUF file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    /// Sizes in ggml's `ne` order: the innermost (contiguous) dimension first.
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    /// Start of the data, relative to the start of the tensor data section.
    pub offset: u64,
    /// Product of `dims`.
    pub n_elements: u64,
    /// Bytes of data (`n_rows` rows of `row_len` elements of `ty`).
    pub n_bytes: u64,
}

impl TensorInfo {
    /// Builds a record, checking the shape against the type (see [`shape_size`]).
    pub fn new(name: impl Into<String>, dims: Vec<u64>, ty: GgmlType, offset: u64) -> Result<TensorInfo, Problem> {
        let (n_elements, n_bytes) = shape_size(&dims, ty)?;
        Ok(TensorInfo { name: name.into(), dims, ty, offset, n_elements, n_bytes })
    }

    /// Elements per row: `dims[0]`.
    pub fn row_len(&self) -> u64 {
        self.dims.first().copied().unwrap_or(0)
    }

    /// Number of rows: the product of every dimension but the first.
    pub fn n_rows(&self) -> u64 {
        // The shape was checked when the record was built, so the product cannot overflow;
        // saturating keeps a hand-made record from panicking anyway.
        self.dims.iter().skip(1).fold(1u64, |a, &d| a.saturating_mul(d))
    }

    /// Bytes of one row.
    pub fn row_bytes(&self) -> u64 {
        self.n_bytes.checked_div(self.n_rows()).unwrap_or(0)
    }

    /// End of the data, relative to the data section.
    pub fn end(&self) -> u64 {
        self.offset.saturating_add(self.n_bytes)
    }

    /// Rows `start..start + n` as a matrix of their own over the same bytes (`None` when they
    /// are not all rows of this tensor). Rows count across every dimension but the first, so a
    /// 3-D stack of matrices (a mixture of experts' weights) gives matrix `e` of `r` rows as
    /// `rows(e·r, r)`, and a fused projection gives each of its parts.
    pub fn rows(&self, start: u64, n: u64) -> Option<TensorInfo> {
        if n == 0 || start.checked_add(n)? > self.n_rows() {
            return None;
        }
        let offset = self.offset.checked_add(start.checked_mul(self.row_bytes())?)?;
        let name = format!("{}[rows {start}..{}]", self.name, start + n);
        TensorInfo::new(name, vec![self.row_len(), n], self.ty, offset).ok()
    }
}

/// Checks a shape and returns `(n_elements, n_bytes)`.
///
/// Rules: 1 to 4 dimensions, each at least 1 and at most `i64::MAX` (ggml stores them as
/// `int64_t`), the element count fits in an `i64`, rows are whole blocks of the type and the
/// byte size does not overflow.
pub fn shape_size(dims: &[u64], ty: GgmlType) -> Result<(u64, u64), Problem> {
    if dims.is_empty() || dims.len() > MAX_DIMS {
        return Err(Problem::BadDimCount(u32::try_from(dims.len()).unwrap_or(u32::MAX)));
    }
    for (index, &dim) in dims.iter().enumerate() {
        if dim == 0 || dim > i64::MAX as u64 {
            return Err(Problem::BadDim { index, dim });
        }
    }
    let n_elements = dims
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d))
        .filter(|&n| n <= i64::MAX as u64)
        .ok_or_else(|| Problem::TooManyElements(dims.to_vec()))?;
    let row_len = dims[0];
    let block = ty.block_size() as u64;
    if !row_len.is_multiple_of(block) {
        return Err(Problem::PartialBlock { row_len, ty });
    }
    // n_elements is a multiple of the block size because row_len is.
    let n_bytes = (n_elements / block).checked_mul(ty.type_size() as u64).ok_or_else(|| Problem::TooManyElements(dims.to_vec()))?;
    Ok((n_elements, n_bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_the_type_table() {
        assert_eq!(shape_size(&[512, 3], GgmlType::Q4_K), Ok((1536, 3 * 288)));
        assert_eq!(shape_size(&[7], GgmlType::F16), Ok((7, 14)));
        let t = TensorInfo::new("w", vec![256, 4, 2], GgmlType::Q8_0, 64).unwrap();
        assert_eq!((t.row_len(), t.n_rows(), t.row_bytes(), t.end()), (256, 8, 272, 64 + 8 * 272));
    }

    #[test]
    fn row_ranges_are_matrices_over_the_same_bytes() {
        // two experts of 4 rows of 256 Q8_0 values: expert 1 starts at row 4
        let t = TensorInfo::new("exps", vec![256, 4, 2], GgmlType::Q8_0, 64).unwrap();
        let e1 = t.rows(4, 4).unwrap();
        assert_eq!((e1.dims.as_slice(), e1.offset, e1.n_bytes, e1.end()), (&[256, 4][..], 64 + 4 * 272, 4 * 272, t.end()));
        assert_eq!(e1.name, "exps[rows 4..8]");
        assert_eq!(t.rows(7, 1).unwrap().offset, 64 + 7 * 272);
        assert_eq!(t.rows(7, 2), None);
        assert_eq!(t.rows(0, 0), None);
        assert_eq!(t.rows(u64::MAX, 1), None);
    }

    #[test]
    fn bad_shapes_are_rejected() {
        assert_eq!(shape_size(&[], GgmlType::F32), Err(Problem::BadDimCount(0)));
        assert_eq!(shape_size(&[1; 5], GgmlType::F32), Err(Problem::BadDimCount(5)));
        assert_eq!(shape_size(&[4, 0], GgmlType::F32), Err(Problem::BadDim { index: 1, dim: 0 }));
        assert!(matches!(shape_size(&[1 << 62, 4], GgmlType::F32), Err(Problem::TooManyElements(_))));
        assert!(matches!(shape_size(&[u64::MAX], GgmlType::F32), Err(Problem::BadDim { .. })));
        assert_eq!(shape_size(&[100], GgmlType::Q4_K), Err(Problem::PartialBlock { row_len: 100, ty: GgmlType::Q4_K }));
        // Element count fits, byte count does not.
        assert!(matches!(shape_size(&[1 << 31, 1 << 31], GgmlType::F64), Err(Problem::TooManyElements(_))));
    }
}
