//! Writes the tests' cross-encoder (`engine_tests::reranker`) to a file, for llama.cpp's
//! reranking on the same file (`tools/make-rerank-goldens.py`):
//!
//!   reranker-model MINILM.gguf OUT.gguf

use std::process::ExitCode;

use engine::gguf::GgufFile;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [minilm, out] = args.as_slice() else {
        eprintln!("usage: reranker-model MINILM.gguf OUT.gguf");
        return ExitCode::from(2);
    };
    let made = GgufFile::open(minilm).map_err(|e| format!("{minilm}: {e}")).and_then(|f| engine_tests::reranker::make(&f));
    match made.and_then(|bytes| std::fs::write(out, bytes).map_err(|e| format!("{out}: {e}"))) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("reranker-model: {e}");
            ExitCode::from(2)
        }
    }
}
