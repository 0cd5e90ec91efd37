/* SPDX-License-Identifier: Apache-2.0 */
/* A GGUF file's tokenizer on the command line: text (or a chat prompt made
 * from it) to token ids, as llama.cpp's llama-tokenize. */
#include "cli_options.h"
#include "tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: tokenize --gguf FILE --text TEXT [options]\n"
    "Token ids of TEXT with the tokenizer of a GGUF file (tokenizer.ggml.*), on one line.\n"
    "  --gguf FILE        the GGUF file\n"
    "  --text TEXT        the text; under a chat template, the user's message\n"
    "  --template NAME    raw (default: the text as it is), auto (recognised from the file's\n"
    "                     tokenizer.chat_template), llama3, chatml, llama2, mistral\n"
    "  --system TEXT      a system message (chat templates only)\n"
    "  --no-bos           no BOS / EOS, even where the file adds them\n"
    "  --no-special       special tokens' text in a raw text stays text\n"
    "  --pieces           one line per token: its id and its text\n"
    "Exit status: 0 done, 1 the file or its tokenizer refused, 2 a bad command line.\n";

static const char *const template_names[] = {"raw", "auto", "llama3", "chatml", "llama2", "mistral"};

/* One token's bytes, control characters escaped. */
static void print_piece(const serve_tokenizer *t, int32_t id, char *buf, size_t cap) {
    serve_detokenizer d;
    serve_detokenizer_init(&d, SERVE_DETOK_SPECIAL);
    d.at_text_start = 0; /* the token as it is, its space included */
    size_t n = 0, m = 0;
    if (serve_tokenizer_decode_token(t, &d, id, buf, cap, &n) == 0)
        serve_detokenizer_flush(&d, buf + n, cap - n, &m);
    /* part of a character (a byte token, a byte-level piece): bytes as \xNN */
    int whole = 1;
    for (size_t i = 0; i < n + m;) {
        unsigned char c = (unsigned char)buf[i];
        size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        for (size_t j = 1; k && j < k; j++)
            if (i + j >= n + m || ((unsigned char)buf[i + j] & 0xC0) != 0x80) k = 0;
        if (!k) {
            whole = 0;
            break;
        }
        i += k;
    }
    printf("%d\t", (int)id);
    for (size_t i = 0; i < n + m; i++) {
        unsigned char c = (unsigned char)buf[i];
        if (c == '\\') printf("\\\\");
        else if (c < 0x20 || c == 0x7F || (c >= 0x80 && !whole)) printf("\\x%02x", c);
        else putchar(c);
    }
    putchar('\n');
}

static int fail(const char *what) {
    fprintf(stderr, "tokenize: %s: %s\n", what, serve_last_error());
    return 1;
}

int main(int argc, char **argv) {
    const char *path = NULL, *text = NULL, *system = NULL;
    int template_index = 0, no_bos = 0, no_special = 0, pieces = 0;
    cli_option opts[] = {
        {.name = "--gguf", .type = CLI_STRING, .dest = &path},
        {.name = "--text", .type = CLI_STRING, .dest = &text, .allow_empty = 1},
        {.name = "--template", .type = CLI_ENUM, .dest = &template_index,
         .choices = "raw|auto|llama3|chatml|llama2|mistral"},
        {.name = "--system", .type = CLI_STRING, .dest = &system, .allow_empty = 1},
        {.name = "--no-bos", .type = CLI_FLAG, .dest = &no_bos},
        {.name = "--no-special", .type = CLI_FLAG, .dest = &no_special},
        {.name = "--pieces", .type = CLI_FLAG, .dest = &pieces},
    };
    int n_opts = (int)(sizeof opts / sizeof opts[0]);
    int r = cli_parse("tokenize", usage_text, opts, n_opts, argc, argv);
    if (r) return r == CLI_HELP ? 0 : 2;
    if (!path) return cli_fail("tokenize", "--gguf", "a GGUF file is needed");
    if (!text) return cli_fail("tokenize", "--text", "a text is needed");
    if (template_index == 0 && system)
        return cli_fail("tokenize", "--system", "needs a chat template (--template)");
    if (template_index != 0 && no_special)
        return cli_fail("tokenize", "--no-special", "a chat template's markers are special tokens");

    serve_gguf *g;
    if (serve_gguf_open(path, &g)) return fail(path);
    serve_tokenizer *t;
    int st = serve_tokenizer_from_gguf(g, &t);
    serve_chat_template kind = SERVE_CHAT_RAW;
    if (!st && template_index == 1) {
        const char *jinja = NULL;
        serve_gguf_get_string(g, "tokenizer.chat_template", &jinja);
        if ((st = serve_chat_template_detect(jinja, &kind))) fail("--template auto");
    } else if (!st) {
        serve_chat_template_from_name(template_names[template_index], &kind);
    } else {
        fail(path);
    }
    serve_gguf_close(g);
    if (st) {
        serve_tokenizer_free(t);
        return 1;
    }

    char *prompt = NULL;
    const char *input = text;
    unsigned flags = (no_bos ? 0u : SERVE_TOKENIZE_ADD_SPECIAL) |
                     (no_special ? 0u : SERVE_TOKENIZE_PARSE_SPECIAL);
    if (kind != SERVE_CHAT_RAW) {
        serve_chat_message msgs[2] = {{"system", system ? system : ""}, {"user", text}};
        int skip = system ? 0 : 1;
        if ((st = serve_chat_format(kind, msgs + skip, (size_t)(2 - skip), 1, &prompt))) {
            fail("chat template");
            serve_tokenizer_free(t);
            return 1;
        }
        input = prompt;
    }
    int32_t *ids;
    size_t n;
    if ((st = serve_tokenizer_encode(t, input, strlen(input), flags, &ids, &n))) fail("--text");
    free(prompt);
    if (!st && pieces) {
        size_t cap = serve_tokenizer_decode_capacity(t);
        char *buf = malloc(cap);
        if (!buf) st = fail("memory");
        for (size_t k = 0; k < n && buf; k++) print_piece(t, ids[k], buf, cap);
        free(buf);
    } else if (!st) {
        for (size_t k = 0; k < n; k++) printf(k ? " %d" : "%d", (int)ids[k]);
        printf("\n");
    }
    free(ids);
    serve_tokenizer_free(t);
    return st ? 1 : 0;
}
