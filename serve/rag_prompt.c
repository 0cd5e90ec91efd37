/* SPDX-License-Identifier: Apache-2.0 */
/* lazyattn-rag's prompt: the chat template cut around the user's content,
 * the documents and the question tokenized (rag.h). */
#include "rag.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void rag_prompt_free(rag_prompt *p) {
    if (!p) return;
    free(p->head);
    free(p->tail);
    for (int i = 0; p->docs && i < p->n_docs; i++) free(p->docs[i]);
    free(p->docs);
    free(p->doc_len);
    memset(p, 0, sizeof *p);
}

/* The template around a user message, cut at a marker in its content. */
static int template_parts(serve_chat_template kind, const char *system, char **head, char **tail) {
    static const char marker[] = "\x01LAZYATTN-CONTENT\x01";
    serve_chat_message msgs[2] = {{"system", system ? system : ""}, {"user", marker}};
    int skip = system ? 0 : 1;
    char *text = NULL;
    *head = *tail = NULL;
    int st = serve_chat_format(kind, msgs + skip, (size_t)(2 - skip), 1, &text);
    if (st) return st;
    char *m = strstr(text, marker);
    if (!m) {
        free(text);
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "chat template: the content was not kept as it is");
    }
    *m = 0;
    *head = text;
    *tail = strdup(m + sizeof marker - 1);
    if (!*tail) {
        free(text);
        *head = NULL;
        return serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "chat template");
    }
    return LAZYATTN_STATUS_OK;
}

/* "what: <the detail already recorded>" (copied first: the detail is the
 * buffer serve_fail writes). */
static int prefix_error(int st, const char *what) {
    char detail[1024];
    snprintf(detail, sizeof detail, "%s", serve_last_error());
    return serve_fail(st, "%s: %s", what, detail);
}

static int encode(const serve_tokenizer *t, const char *what, const char *text, unsigned flags,
                  int32_t **ids, size_t *n) {
    int st = serve_tokenizer_encode(t, text, strlen(text), flags, ids, n);
    return st ? prefix_error(st, what) : LAZYATTN_STATUS_OK;
}

static int choose_template(const serve_gguf *g, const char *name, const char *system,
                           serve_chat_template *kind) {
    *kind = SERVE_CHAT_RAW;
    int st;
    if (!name || !strcmp(name, "auto")) {
        const char *jinja = NULL;
        if (serve_gguf_get_string(g, "tokenizer.chat_template", &jinja) == 0 &&
            (st = serve_chat_template_detect(jinja, kind)))
            return prefix_error(st, "--template auto");
    } else if ((st = serve_chat_template_from_name(name, kind))) {
        return st;
    }
    if (*kind == SERVE_CHAT_RAW && system)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "--system: the prompt has no chat template (give --template)");
    return LAZYATTN_STATUS_OK;
}

static int build(const serve_gguf *g, const serve_tokenizer *tok, const char *template_name,
                 const char *system, const char *question, int n_docs, const char *const *names,
                 const char *const *texts, rag_prompt *p) {
    serve_chat_template kind;
    char *head = NULL, *tail = NULL;
    int st = choose_template(g, template_name, system, &kind);
    if (!st && kind != SERVE_CHAT_RAW) st = template_parts(kind, system, &head, &tail);
    if (!st)
        st = encode(tok, "template", head ? head : "",
                    SERVE_TOKENIZE_ADD_SPECIAL | SERVE_TOKENIZE_PARSE_SPECIAL, &p->head,
                    &p->n_head);
    int32_t *q = NULL, *t = NULL;
    size_t nq = 0, nt = 0;
    if (!st) st = encode(tok, "the question", question, 0, &q, &nq);
    if (!st) st = encode(tok, "template", tail ? tail : "", SERVE_TOKENIZE_PARSE_SPECIAL, &t, &nt);
    if (!st && nq == 0) st = serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "the question is empty");
    if (!st && !(p->tail = malloc((nq + nt) * sizeof *p->tail)))
        st = serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "prompt");
    if (!st) {
        memcpy(p->tail, q, nq * sizeof *q);
        if (nt) memcpy(p->tail + nq, t, nt * sizeof *t);
        p->n_tail = nq + nt;
    }
    free(q);
    free(t);
    free(head);
    free(tail);
    if (st) return st;
    p->docs = calloc((size_t)n_docs + 1, sizeof *p->docs);
    p->doc_len = calloc((size_t)n_docs + 1, sizeof *p->doc_len);
    if (!p->docs || !p->doc_len) return serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "prompt");
    for (int i = 0; !st && i < n_docs; i++) {
        st = encode(tok, names[i], texts[i], 0, &p->docs[i], &p->doc_len[i]);
        p->n_docs = i + 1;
        if (!st && p->doc_len[i] == 0)
            st = serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "%s: no text (0 tokens)", names[i]);
        if (!st && p->doc_len[i] > (size_t)LAZYATTN_MAX_POSITION)
            st = serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                            "%s: %zu tokens, more than a prompt can hold", names[i], p->doc_len[i]);
    }
    return st;
}

int rag_prompt_build(const serve_gguf *g, const serve_tokenizer *tok, const char *template_name,
                     const char *system, const char *question, int n_docs,
                     const char *const *names, const char *const *texts, rag_prompt *p) {
    if (!p) return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "rag_prompt_build: p NULL");
    memset(p, 0, sizeof *p);
    if (!g || !tok || !question || n_docs < 0 || (n_docs > 0 && (!names || !texts)))
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "rag_prompt_build: bad arguments");
    int st = build(g, tok, template_name, system, question, n_docs, names, texts, p);
    if (st) rag_prompt_free(p);
    return st;
}
