//! The kernel backend's attention: the query rows' positions and block tables flattened for the
//! launch, and its output written with the blocks the output projection reads.

use kernels::launch::{self, HeadArgs, KvArgs, QueryRow, Q8_1_BYTES};
use kernels::Runtime;

use super::{DeviceKvStore, DeviceTensor, DeviceVector, KernelBackend};
use crate::backend::{kv_rows_misfit, AttentionRow, AttentionShape, BackendError, KvSource, OwnKvStore};

/// [`Backend::keep_kv`](crate::backend::Backend::keep_kv)'s keys and values: the rows as they
/// are, which the attention kernel reads as it reads a batch's own rows.
pub struct KeptRows<R: Runtime> {
    k: DeviceTensor<R>,
    v: DeviceTensor<R>,
}

impl<R: Runtime> KernelBackend<R>
where
    DeviceKvStore<R>: OwnKvStore,
{
    /// [`Backend::keep_kv`](crate::backend::Backend::keep_kv).
    pub(super) fn keep(&self, k: DeviceTensor<R>, v: DeviceTensor<R>, shape: &AttentionShape) -> Result<KeptRows<R>, BackendError> {
        if let Some(why) = kv_rows_misfit(shape, (k.rows, k.cols), (v.rows, v.cols)) {
            return Err(BackendError::shape("keep_kv", why));
        }
        Ok(KeptRows { k, v })
    }
}

impl<R: Runtime> KernelBackend<R>
where
    DeviceKvStore<R>: OwnKvStore,
{
    /// [`Backend::attention`](crate::backend::Backend::attention): every query row over its
    /// positions in the cache's pools or the batch's own rows, the output rows with their Q8_1
    /// blocks for the output projection when the heads are whole blocks.
    pub(super) fn attend(
        &self,
        q: &DeviceTensor<R>,
        kv: KvSource<'_, Self>,
        rows: &[AttentionRow],
        shape: &AttentionShape,
        sinks: Option<&DeviceVector<R>>,
    ) -> Result<DeviceTensor<R>, BackendError> {
        if q.cols != shape.q_dim() || rows.len() != q.rows || shape.n_head_kv == 0 || !shape.n_head.is_multiple_of(shape.n_head_kv) {
            return Err(BackendError::shape("attention", format!("{}x{} queries, {} rows, {shape:?}", q.rows, q.cols, rows.len())));
        }
        if let Some(s) = sinks.filter(|s| s.len != shape.n_head) {
            return Err(BackendError::shape("attention", format!("{} sinks for {} heads", s.len, shape.n_head)));
        }
        let sinks = sinks.map(|s| &s.buf);
        let mut out = self.output("attention", q.rows, shape.out_dim())?;
        // the rows are the output projection's input: their Q8_1 blocks in the same pass, for
        // a quantized projection (heads of whole blocks)
        let (values, q8_1) = if shape.head_dim_v.is_multiple_of(32) {
            out.written_with_q8_1(Q8_1_BYTES, |bytes| self.rt.alloc(bytes)).map_err(self.fail("attention"))?
        } else {
            (out.written(), None)
        };
        let written = launch::AttentionOut { values, q8_1 };
        let heads = HeadArgs {
            n_head: shape.n_head,
            n_head_kv: shape.n_head_kv,
            dk: shape.head_dim_k,
            dv: shape.head_dim_v,
            scale: shape.scale,
            softcap: shape.softcap,
        };
        match kv {
            KvSource::Cache { store, layer, tables } => {
                let Some((k, v, k_pool, v_pool)) = store.pools() else {
                    return Err(BackendError::shape("attention", "an empty KV cache"));
                };
                // the tables one after another; a row's keys start at its table's offset
                let mut flat = Vec::new();
                let mut offsets = Vec::with_capacity(tables.len());
                for t in tables {
                    offsets.push(flat.len());
                    flat.extend_from_slice(t);
                }
                let mut query_rows = Vec::with_capacity(rows.len());
                for r in rows {
                    let &kv = offsets
                        .get(r.kv)
                        .ok_or_else(|| BackendError::shape("attention", format!("block table {} of {}", r.kv, tables.len())))?;
                    query_rows.push(QueryRow { kv, positions: r.positions.clone() });
                }
                let source = KvArgs::Pool { k, v, k_pool, v_pool, layer, tables: &flat };
                launch::attention(&*self.rt, q.buf(), source, &query_rows, heads, sinks, written).map_err(self.fail("attention"))?;
            }
            KvSource::Batch { k, v } | KvSource::Kept(KeptRows { k, v }) => {
                if let Some(why) = kv_rows_misfit(shape, (k.rows, k.cols), (v.rows, v.cols)) {
                    return Err(BackendError::shape("attention", why));
                }
                let query_rows: Vec<QueryRow> = rows.iter().map(|r| QueryRow { kv: r.kv, positions: r.positions.clone() }).collect();
                let source = KvArgs::Rows { k: k.buf(), v: v.buf(), rows: k.rows };
                launch::attention(&*self.rt, q.buf(), source, &query_rows, heads, sinks, written).map_err(self.fail("attention"))?;
            }
        }
        Ok(out)
    }
}
