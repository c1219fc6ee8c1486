// ggml-dots: ggml's CPU dot products of quantized weight rows with activation rows, for the
// goldens of tests/fixtures/quants/golden/dots/ (tools/make-dot-goldens.py builds and runs it).
//
// Usage: ggml-dots TYPE COLS ROWS.bin X.f32 DOTS.f32 XQ.bin
//   ROWS.bin: whole rows of TYPE (COLS values each) as a GGUF stores them; X.f32: activation rows
//   of COLS little-endian f32. Each activation row is converted by the CPU backend's from_float of
//   TYPE's vec_dot_type (what llama.cpp's matmul does to its activations on this build; written to
//   XQ.bin, row after row), and DOTS.f32 gets vec_dot(weight row, activation row) as f32, one
//   activation row after another: [activation row][weight row].
#include "ggml.h"
#include "ggml-cpu.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

static std::vector<uint8_t> read_all(const char * path) {
    FILE * f = fopen(path, "rb");
    if (!f) { perror(path); exit(1); }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    std::vector<uint8_t> v(n);
    if (fread(v.data(), 1, n, f) != (size_t) n) { perror(path); exit(1); }
    fclose(f);
    return v;
}

static void write_all(const char * path, const void * data, size_t n) {
    FILE * f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n) { perror(path); exit(1); }
    fclose(f);
}

static ggml_type type_named(const std::string & name) {
    for (int t = 0; t < GGML_TYPE_COUNT; t++) {
        const char * n = ggml_type_name((ggml_type) t);
        if (n && strcasecmp(n, name.c_str()) == 0) return (ggml_type) t;
    }
    fprintf(stderr, "unknown type %s\n", name.c_str());
    exit(1);
}

int main(int argc, char ** argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: ggml-dots TYPE COLS ROWS.bin X.f32 DOTS.f32 XQ.bin\n");
        return 2;
    }
    ggml_cpu_init();
    const ggml_type type = type_named(argv[1]);
    const int64_t cols = atoll(argv[2]);
    const auto rows = read_all(argv[3]);
    const auto x_bytes = read_all(argv[4]);
    const auto * traits = ggml_get_type_traits_cpu(type);
    if (!traits->vec_dot) { fprintf(stderr, "%s has no vec_dot\n", argv[1]); return 1; }
    const ggml_type act = traits->vec_dot_type;
    const auto * act_traits = ggml_get_type_traits_cpu(act);
    const size_t row_bytes = ggml_row_size(type, cols), act_bytes = ggml_row_size(act, cols);
    if (rows.size() % row_bytes != 0 || x_bytes.size() % (4 * cols) != 0) {
        fprintf(stderr, "ROWS.bin or X.f32 is not a whole number of rows\n");
        return 1;
    }
    const size_t n_rows = rows.size() / row_bytes, n_x = x_bytes.size() / (4 * cols);
    std::vector<uint8_t> xq(n_x * act_bytes);
    std::vector<float> dots(n_x * n_rows);
    for (size_t i = 0; i < n_x; i++) {
        const float * x = (const float *) (x_bytes.data() + 4 * cols * i);
        uint8_t * q = xq.data() + act_bytes * i;
        if (act == GGML_TYPE_F32) {
            memcpy(q, x, act_bytes);
        } else {
            act_traits->from_float(x, q, cols);
        }
        for (size_t r = 0; r < n_rows; r++) {
            traits->vec_dot((int) cols, &dots[i * n_rows + r], 0, rows.data() + row_bytes * r, 0, q, 0, 1);
        }
    }
    write_all(argv[5], dots.data(), dots.size() * sizeof(float));
    write_all(argv[6], xq.data(), xq.size());
    fprintf(stderr, "%s: %zu rows x %zu activation rows (%s)\n", argv[1], n_rows, n_x, ggml_type_name(act));
    return 0;
}
