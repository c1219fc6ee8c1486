//! The CUDA kernels through the kernel backend on GPU 0 (`--features cuda`), at the shapes of
//! Qwen2.5-0.5B: matrix products for one decode row (the matrix-vector kernels) and a 512-row
//! prompt (the tiled kernels), attention of one decode row over 1024 cached positions, and an
//! RMS norm. Each iteration waits for the stream, so times are the GPU's. Without a GPU (or
//! without the driver / NVRTC) it prints why and measures nothing.
//!
//! `cargo bench -p benches --features cuda --bench cuda_kernels`

use std::sync::Arc;

use benches::{random_floats, random_matrix};
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use engine::backend::kernel::CudaBackend;
use engine::backend::{AttentionRow, AttentionShape, Backend, KvSlot, KvSource, KvStorage, KvType, KvValues, BLOCK_POSITIONS};
use engine::gguf::{GgufFile, GgufWriter};
use engine::quant::GgmlType;

/// (matrix, rows, cols, type) of the Q4_K_M file of Qwen2.5-0.5B.
const SHAPES: [(&str, usize, usize, GgmlType); 3] =
    [("ffn_up", 4864, 896, GgmlType::Q5_0), ("ffn_down", 896, 4864, GgmlType::Q4_K), ("lm_head", 151936, 896, GgmlType::Q8_0)];

fn sync(b: &CudaBackend) {
    b.runtime().synchronize().expect("synchronize");
}

fn cuda(c: &mut Criterion) {
    let backend = match CudaBackend::open(0) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("cuda_kernels: nothing measured: {e}");
            return;
        }
    };
    eprintln!("cuda_kernels on {}", backend.runtime().description());
    let b = &backend;
    for (name, rows, cols, ty) in SHAPES {
        let mut w = GgufWriter::new();
        w.add_tensor("w", &[cols as u64, rows as u64], ty, random_matrix(ty, rows, cols, 5)).expect("tensor");
        let file = Arc::new(GgufFile::from_bytes(w.to_bytes().expect("gguf")).expect("gguf"));
        let m = b.upload_matrix(&file, file.tensor("w").expect("w"), rows, cols).expect("upload");
        let mut group = c.benchmark_group(format!("cuda/matmul/qwen2.5-0.5b/{name}"));
        for batch in [1usize, 512] {
            let x = b.upload_tensor(batch, cols, &random_floats(batch * cols, 3)).expect("x");
            group.throughput(Throughput::Bytes((rows * ty.row_bytes(cols).expect("row")) as u64));
            group.bench_function(BenchmarkId::new(format!("{ty}"), format!("batch{batch}")), |bench| {
                bench.iter(|| {
                    let y = b.matmul_each(&[&m], &[None], black_box(&x)).expect("matmul");
                    sync(b);
                    black_box(y)
                })
            });
        }
        group.finish();
    }

    // one decode row of 14 query heads (2 key/value heads of 64) over 1024 cached positions
    let shape = AttentionShape { n_head: 14, n_head_kv: 2, head_dim_k: 64, head_dim_v: 64, scale: 0.125, softcap: 0.0 };
    let (len, kd) = (1024usize, 128usize);
    let mut store = b.new_kv_store(KvType::F16.into(), 1, kd, KvValues::Rows(kd), 0);
    let table: Vec<u32> = (0..(len / BLOCK_POSITIONS) as u32).collect();
    table.iter().for_each(|&id| store.alloc_block(id).expect("block"));
    let slots: Vec<KvSlot> = (0..len).map(|p| KvSlot { block: table[p / BLOCK_POSITIONS], offset: p % BLOCK_POSITIONS }).collect();
    let kv = b.upload_tensor(len, kd, &random_floats(len * kd, 7)).expect("kv");
    b.kv_write(&mut store, 0, &slots, &kv, &kv).expect("kv_write");
    let q = b.upload_tensor(1, shape.q_dim(), &random_floats(shape.q_dim(), 9)).expect("q");
    let rows = [AttentionRow { kv: 0, positions: 0..len }];
    let tables = [table.as_slice()];
    c.bench_function("cuda/attention/decode/1024 positions f16", |bench| {
        bench.iter(|| {
            let out =
                b.attention(&q, KvSource::Cache { store: &store, layer: 0, tables: &tables }, &rows, &shape, None).expect("attention");
            sync(b);
            black_box(out)
        })
    });

    let x = b.upload_tensor(512, 896, &random_floats(512 * 896, 11)).expect("x");
    let w = b.upload_vector(&random_floats(896, 13)).expect("w");
    let mut y = b.zeros(512, 896).expect("y");
    c.bench_function("cuda/rms_norm/512x896", |bench| {
        bench.iter(|| {
            b.rms_norm(&x, &w, 1e-6, &mut y).expect("rms_norm");
            sync(b);
        })
    });
}

criterion_group!(benches, cuda);
criterion_main!(benches);
