// gbnf-accepts: which texts llama.cpp's own GBNF engine takes whole, for the goldens of
// tests/fixtures/gbnf/ (tools/make-gbnf-goldens.py builds and runs it).
//
// Usage: gbnf-accepts GRAMMAR.gbnf TEXTS
//   TEXTS holds the texts separated by NUL bytes. Prints "invalid" when llama.cpp refuses the
//   grammar, else one line per text: 1 when the grammar takes the whole text and may end there
//   (some parse stack is empty), 0 otherwise. No vocabulary: text only (`<[id]>` tokens parse,
//   `<text>` tokens need a vocabulary and make the grammar invalid here).
#include "llama.h"
#include "../src/llama-grammar.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

static std::string read_file(const char * path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

static bool takes(llama_grammar * grammar, const llama_grammar_stacks & start, const std::string & text) {
    llama_grammar_get_stacks(grammar) = start;
    try {
        // one code point at a time, as generated text arrives in pieces
        llama_grammar_accept_str(*grammar, text);
    } catch (const std::runtime_error &) {
        return false;
    }
    for (const auto & stack : llama_grammar_get_stacks(grammar)) {
        if (stack.empty()) {
            return true;
        }
    }
    return false;
}

int main(int argc, char ** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s GRAMMAR.gbnf TEXTS\n", argv[0]);
        return 2;
    }
    llama_log_set([](ggml_log_level, const char *, void *) {}, nullptr);
    const std::string grammar_text = read_file(argv[1]);
    const std::string texts = read_file(argv[2]);
    // llama.cpp prints parse errors to stderr; the goldens only need the verdict
    freopen("/dev/null", "w", stderr);
    llama_grammar * grammar = llama_grammar_init_impl(nullptr, grammar_text.c_str(), "root", false, nullptr, 0, nullptr, 0);
    if (grammar == nullptr) {
        printf("invalid\n");
        return 0;
    }
    const llama_grammar_stacks start = llama_grammar_get_stacks(grammar);
    size_t begin = 0;
    while (begin <= texts.size()) {
        size_t end = texts.find('\0', begin);
        if (end == std::string::npos) {
            end = texts.size();
        }
        printf("%d\n", takes(grammar, start, texts.substr(begin, end - begin)) ? 1 : 0);
        begin = end + 1;
    }
    llama_grammar_free_impl(grammar);
    return 0;
}
