//! TEMPORARY placeholder until the scalar K-quant code lands.
pub fn dequantize_row(_: &[u8], _: &mut [f32]) { todo!() }
pub fn quantize_row(_: &[f32], _: &mut [u8]) { todo!() }
pub fn vec_dot_row(_: &[u8], _: &[u8]) -> f32 { todo!() }
