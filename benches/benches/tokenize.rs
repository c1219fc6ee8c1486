//! Encoding speed of the tokenizers on 1 MiB of English (`benches/data/english-1mib.txt`):
//! byte-level BPE with the Llama 3 (`llama-bpe`) and Refact/Granite (`refact`) pre-tokenizers,
//! and SentencePiece (`llama-spm`). Throughput is reported in tokens per second; one
//! `encode` call covers the whole text, as `llama-tokenize -f` does.
//!
//! `cargo bench -p benches --bench tokenize -- llama-bpe` filters.

use std::path::Path;

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use engine::gguf::GgufFile;
use engine::tokenizer::Tokenizer;

const VOCABS: [&str; 3] = ["llama-bpe", "refact", "llama-spm"];

fn tokenize(c: &mut Criterion) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("data/english-1mib.txt")).expect("benches/data/english-1mib.txt");
    let mut group = c.benchmark_group("encode-1mib");
    group.sample_size(10);
    for name in VOCABS {
        let path = root.join(format!("../tests/fixtures/tokenizer/ggml-vocab-{name}.gguf"));
        let file = GgufFile::open(&path).expect("vocab fixture");
        let tok = Tokenizer::from_gguf(&file).expect("tokenizer");
        let n_tokens = tok.encode(&text, false, false).len();
        group.throughput(Throughput::Elements(n_tokens as u64));
        group.bench_function(name, |b| b.iter(|| black_box(tok.encode(black_box(&text), false, false))));
    }
    group.finish();
}

criterion_group!(benches, tokenize);
criterion_main!(benches);
