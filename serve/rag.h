/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The pieces of lazyattn-rag (serve/lazyattn_rag.c is the program): the
 * prompt of a question over documents, and the model identity its
 * documents are cached under. Conventions as in serve.h: int status,
 * serve_last_error() for the detail.
 */
#ifndef SERVE_RAG_H
#define SERVE_RAG_H

#include "serve.h"
#include "tokenizer.h"

#include <stddef.h>
#include <stdint.h>

/* ---- the prompt (rag_prompt.c) ------------------------------------------- */

/* [head] [docs[0]] ... [docs[n_docs-1]] [tail]: the template's markers are
 * parsed as special tokens, what a user wrote (documents, question) is text;
 * each document is tokenized alone, without BOS, so its tokens (and its
 * cache key) do not depend on its neighbours. */
typedef struct rag_prompt {
    int32_t *head;    /* [n_head] BOS + the template up to the user's content */
    size_t n_head;
    int32_t *tail;    /* [n_tail] the question + the template after it */
    size_t n_tail;
    int32_t **docs;   /* [n_docs], docs[i]: [doc_len[i]] */
    size_t *doc_len;  /* [n_docs] */
    int n_docs;
} rag_prompt;

/*
 * template_name: "auto" (the file's tokenizer.chat_template recognised, raw
 * when it has none), "raw", "llama3", "chatml", "llama2", "mistral".
 * system: a system message or NULL (a chat template needed).
 * names[i] names document i in messages; texts[i] its UTF-8 text.
 * INVALID_ARGUMENT (with the name) for an empty question or document, a
 * document of more than LAZYATTN_MAX_POSITION tokens, text that is not
 * UTF-8, an unknown template or one not recognised; *p is then freed.
 */
int rag_prompt_build(const serve_gguf *g, const serve_tokenizer *tok, const char *template_name,
                     const char *system, const char *question, int n_docs,
                     const char *const *names, const char *const *texts, rag_prompt *p);
void rag_prompt_free(rag_prompt *p); /* zeroes it */

/* ---- the model's identity (rag_identity.c) ------------------------------- */

/*
 * What a document's KV depends on, as the cache's model_id: XXH3-64 of 32
 * bytes: XXH3-128 of every byte of the file (low, high u64 LE), the file's
 * size (u64 LE), mode (the projections' arithmetic: one byte, bit 0 bf16
 * projections, bit 1 weights kept quantized on the device; then 7 zero
 * bytes).
 * Two files that differ in any byte get other keys. The content hash is
 * memoized, when memo_dir is not NULL, in memo_dir/models/<hex>.id keyed by
 * (realpath, size, mtime_ns, ctime_ns, inode, device), written through a
 * temporary file and a rename; a memo with another key is ignored, and a
 * memo that cannot be written only costs a re-read. IO naming the file when
 * it cannot be read.
 */
int rag_model_identity(const char *path, const char *memo_dir, int mode, uint64_t *id);

#endif
