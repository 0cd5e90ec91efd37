/* SPDX-License-Identifier: Apache-2.0 */
/* Chat prompts in the common templates. A GGUF's tokenizer.chat_template is
 * Jinja, which C does not run: the template is recognised by the markers it
 * writes (as llama.cpp's llm_chat_detect_template does) and formatted
 * here, or chosen by name. */
#include "tokenizer.h"

#include <stdlib.h>
#include <string.h>

int serve_chat_template_detect(const char *jinja, serve_chat_template *kind) {
    if (!kind) return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_chat_template_detect");
    static const struct {
        const char *marker;
        serve_chat_template kind;
    } known[] = {{"<|start_header_id|>", SERVE_CHAT_LLAMA3},
                 {"<|im_start|>", SERVE_CHAT_CHATML},
                 {"[INST]", SERVE_CHAT_LLAMA2}};
    for (size_t k = 0; jinja && k < sizeof known / sizeof known[0]; k++)
        if (strstr(jinja, known[k].marker)) {
            *kind = known[k].kind;
            return LAZYATTN_STATUS_OK;
        }
    return serve_fail(LAZYATTN_STATUS_NOT_FOUND, "chat template: %s: choose one by name (raw, "
                      "llama3, chatml, llama2)", jinja ? "not one of those known" : "the file has none");
}

int serve_chat_template_from_name(const char *name, serve_chat_template *kind) {
    static const struct {
        const char *name;
        serve_chat_template kind;
    } names[] = {{"raw", SERVE_CHAT_RAW},       {"llama3", SERVE_CHAT_LLAMA3},
                 {"chatml", SERVE_CHAT_CHATML}, {"llama2", SERVE_CHAT_LLAMA2},
                 {"mistral", SERVE_CHAT_LLAMA2}};
    for (size_t k = 0; name && kind && k < sizeof names / sizeof names[0]; k++)
        if (!strcmp(name, names[k].name)) {
            *kind = names[k].kind;
            return LAZYATTN_STATUS_OK;
        }
    return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "chat template \"%s\" is not one of raw, "
                      "llama3, chatml, llama2, mistral", name ? name : "(null)");
}

typedef struct chat_text {
    char *s;
    size_t n, cap;
    int failed;
} chat_text;

static void chat_put(chat_text *t, const char *s, size_t n) {
    if (t->failed) return;
    if (t->n + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 256;
        while (cap < t->n + n + 1) cap *= 2;
        char *grown = realloc(t->s, cap);
        if (!grown) {
            t->failed = 1;
            return;
        }
        t->s = grown, t->cap = cap;
    }
    memcpy(t->s + t->n, s, n);
    t->n += n;
    t->s[t->n] = 0;
}

static void chat_puts(chat_text *t, const char *s) { chat_put(t, s, strlen(s)); }

/* s without its leading and trailing whitespace (Jinja's trim). */
static void chat_put_trimmed(chat_text *t, const char *s) {
    size_t n = strlen(s);
    while (n && strchr(" \t\n\r\v\f", *s)) s++, n--;
    while (n && strchr(" \t\n\r\v\f", s[n - 1])) n--;
    chat_put(t, s, n);
}

int serve_chat_format(serve_chat_template kind, const serve_chat_message *msgs, size_t n,
                      int add_assistant, char **out) {
    if (!out) return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_chat_format: out is NULL");
    *out = NULL;
    if (!msgs && n) return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_chat_format: msgs");
    for (size_t i = 0; i < n; i++)
        if (!msgs[i].role || !msgs[i].content)
            return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_chat_format: message %zu "
                              "has no role or content", i);
    if (kind == SERVE_CHAT_LLAMA2)
        for (size_t i = 0; i < n; i++)
            if (strcmp(msgs[i].role, "system") && strcmp(msgs[i].role, "user") &&
                strcmp(msgs[i].role, "assistant"))
                return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "chat template llama2: role "
                                  "\"%s\" (system, user, assistant)", msgs[i].role);
    chat_text t = {0};
    chat_puts(&t, "");
    switch (kind) {
    case SERVE_CHAT_RAW:
        for (size_t i = 0; i < n; i++) chat_puts(&t, msgs[i].content);
        break;
    case SERVE_CHAT_LLAMA3:
        for (size_t i = 0; i < n; i++) {
            chat_puts(&t, "<|start_header_id|>");
            chat_puts(&t, msgs[i].role);
            chat_puts(&t, "<|end_header_id|>\n\n");
            chat_put_trimmed(&t, msgs[i].content);
            chat_puts(&t, "<|eot_id|>");
        }
        if (add_assistant) chat_puts(&t, "<|start_header_id|>assistant<|end_header_id|>\n\n");
        break;
    case SERVE_CHAT_CHATML:
        for (size_t i = 0; i < n; i++) {
            chat_puts(&t, "<|im_start|>");
            chat_puts(&t, msgs[i].role);
            chat_puts(&t, "\n");
            chat_puts(&t, msgs[i].content);
            chat_puts(&t, "<|im_end|>\n");
        }
        if (add_assistant) chat_puts(&t, "<|im_start|>assistant\n");
        break;
    case SERVE_CHAT_LLAMA2: { /* llama.cpp's llama2 with system and BOS inside the history */
        int inside_turn = 1;
        chat_puts(&t, "[INST] ");
        for (size_t i = 0; i < n; i++) {
            if (!inside_turn) {
                inside_turn = 1;
                chat_puts(&t, "<s>[INST] ");
            }
            if (!strcmp(msgs[i].role, "system")) {
                chat_puts(&t, "<<SYS>>\n");
                chat_puts(&t, msgs[i].content);
                chat_puts(&t, "\n<</SYS>>\n\n");
            } else if (!strcmp(msgs[i].role, "user")) {
                chat_puts(&t, msgs[i].content);
                chat_puts(&t, " [/INST]");
            } else {
                chat_puts(&t, msgs[i].content);
                chat_puts(&t, "</s>");
                inside_turn = 0;
            }
        }
        break; /* the prompt ends at [/INST]: the assistant's turn follows */
    }
    default:
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_chat_format: template %d",
                          (int)kind);
    }
    if (t.failed) {
        free(t.s);
        return serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "serve_chat_format");
    }
    *out = t.s;
    return LAZYATTN_STATUS_OK;
}
