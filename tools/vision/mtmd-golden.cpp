// Reference outputs of llama.cpp's multimodal library for the vision tests: a language model
// and a projector, one image, one prompt with the media marker. Writes
//   OUT.json        the chunks of the tokenized prompt (text tokens, or an image chunk's row
//                   count and the offset of its rows in OUT.embd.bin), the settings, n_embd, n_vocab
//   OUT.embd.bin    every image chunk's embedding rows (mtmd_encode_chunk, then
//                   mtmd_get_output_embd), little-endian f32, chunk after chunk
//   OUT.logits.bin  the logits after the whole prompt (mtmd_helper_eval_chunks, logits_last)
// Flash attention off in the projector and the language model, KV cache f32, CPU only.
//
//   mtmd-golden -m LM.gguf --mmproj MMPROJ.gguf --image IMG.png -p "text <__media__> text" -o OUT
// Built by tools/vision/make-vision-goldens.sh against the static libraries of
// ../shared/tools/build-llama-cpp.sh's build.
#include "llama.h"
#include "mtmd.h"
#include "mtmd-helper.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

static void die(const char * msg) {
    fprintf(stderr, "mtmd-golden: %s\n", msg);
    exit(1);
}

int main(int argc, char ** argv) {
    std::string lm, mmproj, image, prompt, out;
    int threads = 2;
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string a = argv[i];
        if (a == "-m") lm = argv[i + 1];
        else if (a == "--mmproj") mmproj = argv[i + 1];
        else if (a == "--image") image = argv[i + 1];
        else if (a == "-p") prompt = argv[i + 1];
        else if (a == "-o") out = argv[i + 1];
        else if (a == "-t") threads = atoi(argv[i + 1]);
        else die("unknown argument");
    }
    if (lm.empty() || mmproj.empty() || image.empty() || prompt.empty() || out.empty()) die("need -m, --mmproj, --image, -p, -o");

    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    llama_model * model = llama_model_load_from_file(lm.c_str(), mp);
    if (!model) die("cannot load the language model");
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 512;
    cp.n_batch = 512;
    cp.n_ubatch = 512;
    cp.n_threads = threads;
    cp.n_threads_batch = threads;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.type_k = GGML_TYPE_F32;
    cp.type_v = GGML_TYPE_F32;
    llama_context * lctx = llama_init_from_model(model, cp);
    if (!lctx) die("cannot make a context");

    mtmd_context_params vp = mtmd_context_params_default();
    vp.use_gpu = false;
    vp.n_threads = threads;
    vp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    vp.warmup = false;
    mtmd_context * vctx = mtmd_init_from_file(mmproj.c_str(), model, vp);
    if (!vctx) die("cannot load the projector");

    mtmd_helper_bitmap_wrapper bw = mtmd_helper_bitmap_init_from_file(vctx, image.c_str(), false, mtmd_helper_init_opt_default());
    if (!bw.bitmap) die("cannot read the image");
    mtmd_input_text text = {prompt.c_str(), prompt.size(), true, true};
    mtmd_input_chunks * chunks = mtmd_input_chunks_init();
    const mtmd_bitmap * bitmaps[1] = {bw.bitmap};
    if (mtmd_tokenize(vctx, chunks, &text, bitmaps, 1) != 0) die("mtmd_tokenize failed");

    const int n_embd = llama_model_n_embd_inp(model);
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    FILE * fe = fopen((out + ".embd.bin").c_str(), "wb");
    FILE * fj = fopen((out + ".json").c_str(), "w");
    if (!fe || !fj) die("cannot write the outputs");
    fprintf(fj, "{\"lm\": \"%s\", \"mmproj\": \"%s\", \"image\": \"%s\", \"n_embd\": %d, \"n_vocab\": %d, \"threads\": %d,\n",
            lm.c_str(), mmproj.c_str(), image.c_str(), n_embd, n_vocab, threads);
    fprintf(fj, " \"settings\": \"llama.cpp b11434 CPU, flash attention off (projector and LM), KV f32, n_batch 512\",\n");
    fprintf(fj, " \"non_causal\": %s,\n \"chunks\": [\n", mtmd_decode_use_non_causal(vctx, nullptr) ? "true" : "false");
    size_t offset = 0;
    for (size_t i = 0; i < mtmd_input_chunks_size(chunks); i++) {
        const mtmd_input_chunk * c = mtmd_input_chunks_get(chunks, i);
        if (i) fprintf(fj, ",\n");
        if (mtmd_input_chunk_get_type(c) == MTMD_INPUT_CHUNK_TYPE_TEXT) {
            size_t n = 0;
            const llama_token * t = mtmd_input_chunk_get_tokens_text(c, &n);
            fprintf(fj, "  {\"text\": [");
            for (size_t j = 0; j < n; j++) fprintf(fj, "%s%d", j ? ", " : "", t[j]);
            fprintf(fj, "]}");
        } else {
            if (mtmd_encode_chunk(vctx, c) != 0) die("mtmd_encode_chunk failed");
            const size_t n = mtmd_input_chunk_get_n_tokens(c);
            fwrite(mtmd_get_output_embd(vctx), sizeof(float), n * n_embd, fe);
            fprintf(fj, "  {\"image_rows\": %zu, \"offset_rows\": %zu}", n, offset);
            offset += n;
        }
    }
    fprintf(fj, "\n ]}\n");
    fclose(fj);
    fclose(fe);

    llama_pos n_past = 0;
    if (mtmd_helper_eval_chunks(vctx, lctx, chunks, 0, 0, 512, true, &n_past) != 0) die("mtmd_helper_eval_chunks failed");
    const float * logits = llama_get_logits_ith(lctx, -1);
    FILE * fl = fopen((out + ".logits.bin").c_str(), "wb");
    fwrite(logits, sizeof(float), n_vocab, fl);
    fclose(fl);
    fprintf(stderr, "mtmd-golden: %zu chunks, %zu image rows, %d positions\n", mtmd_input_chunks_size(chunks), offset, (int) n_past);

    mtmd_input_chunks_free(chunks);
    mtmd_bitmap_free(bw.bitmap);
    mtmd_free(vctx);
    llama_free(lctx);
    llama_model_free(model);
    return 0;
}
