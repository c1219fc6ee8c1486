// lora-logits: llama.cpp's logits for one sequence of ids run with LoRA adapters, for the
// engine's LoRA goldens (tools/make-lora-goldens.py builds it against the llama.cpp build of
// ../shared/tools/build-llama-cpp.sh).
//
//   lora-logits -m MODEL.gguf [--lora FILE:SCALE ...] [--from N] --ids 1,2,3 -o OUT.bin [-t 2]
//
// One llama_decode of the whole sequence (f32 KV cache, flash attention off), logits at every
// position; OUT.bin holds them as little-endian f32, row after row ([n_ids][n_vocab]), and
// n_vocab is printed on stdout. With --from N the first N ids are decoded without the adapters
// and the rest with them, as llama-server runs an activated LoRA (aLoRA) from a position on.
// The activated adapters' invocation token counts are printed on stderr.
#include "llama.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

int main(int argc, char ** argv) {
    std::string model_path, out;
    std::vector<std::pair<std::string, float>> loras;
    std::vector<llama_token> ids;
    int n_threads = 2;
    size_t from = 0;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) { fprintf(stderr, "%s needs a value\n", a.c_str()); exit(2); }
            return argv[++i];
        };
        if (a == "-m") model_path = next();
        else if (a == "-o") out = next();
        else if (a == "-t") n_threads = atoi(next().c_str());
        else if (a == "--from") from = strtoul(next().c_str(), nullptr, 10);
        else if (a == "--lora") {
            std::string v = next();
            size_t colon = v.rfind(':');
            if (colon == std::string::npos) { fprintf(stderr, "--lora FILE:SCALE\n"); return 2; }
            loras.push_back({v.substr(0, colon), strtof(v.c_str() + colon + 1, nullptr)});
        } else if (a == "--ids") {
            std::string v = next();
            for (const char * p = v.c_str(); *p;) {
                char * e;
                ids.push_back((llama_token) strtol(p, &e, 10));
                p = *e == ',' ? e + 1 : e;
            }
        } else { fprintf(stderr, "unknown argument %s\n", a.c_str()); return 2; }
    }
    if (model_path.empty() || out.empty() || ids.empty()) {
        fprintf(stderr, "usage: lora-logits -m MODEL.gguf [--lora FILE:SCALE ...] [--from N] --ids 1,2,3 -o OUT.bin [-t 2]\n");
        return 2;
    }
    llama_log_set([](ggml_log_level level, const char * text, void *) {
        if (level >= GGML_LOG_LEVEL_WARN) fputs(text, stderr);
    }, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model * model = llama_model_load_from_file(model_path.c_str(), mp);
    if (!model) { fprintf(stderr, "failed to load %s\n", model_path.c_str()); return 1; }
    std::vector<llama_adapter_lora *> adapters;
    std::vector<float> scales;
    for (auto & [path, scale] : loras) {
        llama_adapter_lora * a = llama_adapter_lora_init(model, path.c_str());
        if (!a) { fprintf(stderr, "failed to load adapter %s\n", path.c_str()); return 1; }
        adapters.push_back(a);
        scales.push_back(scale);
        if (llama_adapter_get_alora_n_invocation_tokens(a) > 0) {
            fprintf(stderr, "%s: activated, %llu invocation tokens\n", path.c_str(),
                    (unsigned long long) llama_adapter_get_alora_n_invocation_tokens(a));
        }
    }
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 256; cp.n_batch = 256; cp.n_ubatch = 256; cp.n_seq_max = 1;
    cp.n_threads = n_threads; cp.n_threads_batch = n_threads;
    cp.type_k = GGML_TYPE_F32; cp.type_v = GGML_TYPE_F32;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "failed to create context\n"); return 1; }
    if (from > ids.size()) { fprintf(stderr, "--from %zu is past the %zu ids\n", from, ids.size()); return 2; }
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    std::vector<float> rows;
    // [begin, end) decoded in one batch, with the adapters or without, logits kept in order
    auto decode = [&](size_t begin, size_t end, bool with_adapters) -> bool {
        if (begin == end) return true;
        if (with_adapters && !adapters.empty() && llama_set_adapters_lora(ctx, adapters.data(), adapters.size(), scales.data()) != 0) {
            fprintf(stderr, "failed to set the adapters\n");
            return false;
        }
        llama_batch batch = llama_batch_init(end - begin, 0, 1);
        for (size_t i = begin; i < end; i++) {
            size_t j = i - begin;
            batch.token[j] = ids[i]; batch.pos[j] = i; batch.n_seq_id[j] = 1; batch.seq_id[j][0] = 0; batch.logits[j] = 1;
        }
        batch.n_tokens = end - begin;
        bool ok = llama_decode(ctx, batch) == 0;
        if (!ok) fprintf(stderr, "llama_decode failed\n");
        for (size_t j = 0; ok && j < end - begin; j++) {
            const float * row = llama_get_logits_ith(ctx, j);
            rows.insert(rows.end(), row, row + n_vocab);
        }
        llama_batch_free(batch);
        return ok;
    };
    if (!decode(0, from, false) || !decode(from, ids.size(), true)) return 1;
    FILE * f = fopen(out.c_str(), "wb");
    if (!f) { fprintf(stderr, "cannot write %s\n", out.c_str()); return 1; }
    fwrite(rows.data(), sizeof(float), rows.size(), f);
    fclose(f);
    printf("%d\n", n_vocab);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
