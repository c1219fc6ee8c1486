// tokenize-bench: llama.cpp's tokenizer speed on a text file, for comparison with
// `cargo bench -p benches --bench tokenize`. Loads the vocabulary only, then times
// llama_tokenize(text, add_special=false, parse_special=false) over the whole file, best of N.
//
// Build (tools/bench-tokenizer.sh does this against tools/build-llama-cpp.sh's tree):
//   g++ -O2 -std=c++17 tokenize-bench.cpp -I$SRC/include -I$SRC/ggml/include \
//       -Wl,--start-group $BUILD/src/libllama.a $BUILD/ggml/src/libggml*.a -Wl,--end-group \
//       -fopenmp -lpthread -ldl -o tokenize-bench
// Run: tokenize-bench VOCAB.gguf TEXT.txt [repeats]
#include "llama.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

int main(int argc, char ** argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s VOCAB.gguf TEXT.txt [repeats]\n", argv[0]);
        return 1;
    }
    const int repeats = argc > 3 ? atoi(argv[3]) : 10;
    std::ifstream in(argv[2], std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();

    llama_log_set([](ggml_log_level, const char *, void *) {}, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        fprintf(stderr, "cannot load %s\n", argv[1]);
        return 1;
    }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    std::vector<llama_token> ids(text.size() + 16);
    double best = 1e30;
    int n = 0;
    for (int r = 0; r < repeats; r++) {
        const auto t0 = std::chrono::steady_clock::now();
        n = llama_tokenize(vocab, text.data(), (int32_t) text.size(), ids.data(), (int32_t) ids.size(), false, false);
        const auto t1 = std::chrono::steady_clock::now();
        best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
    }
    printf("%s: %d tokens, best of %d: %.2f ms, %.2f M tokens/s\n", argv[1], n, repeats, best * 1e3, n / best / 1e6);
    llama_model_free(model);
    return 0;
}
