//! The tiny models of the architectures beyond llama and granite (`fixtures/archs/`, shaped as
//! llama.cpp's test-llama-archs writes them, two seeds each) against llama.cpp's logits on the
//! same files and ids: every prompt position and 32 greedy steps within the bound, the same best
//! tokens, and the greedy steps bit for bit the same in one batch.

use engine::model::Model;
use engine_tests::archs::archs_match_llama_cpp;

#[test]
fn every_architecture_matches_llama_cpp() {
    archs_match_llama_cpp("cpu", |path| Model::load(path).unwrap());
}
