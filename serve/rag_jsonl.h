/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lazyattn-rag's batches: one request per line of a JSONL file,
 *   {"question": "...", "docs": ["a.txt", ...], "texts": ["a document's text", ...]}
 * question required (a non-empty string); docs (files) and texts (inline
 * documents) optional arrays of strings, the documents being the files,
 * then the texts. Unknown or repeated keys, other value types, trailing
 * bytes and invalid JSON are refused with the column. Strings are UTF-8
 * with JSON's escapes (\uXXXX, surrogate pairs joined; a lone surrogate
 * and \u0000 refused).
 */
#ifndef SERVE_RAG_JSONL_H
#define SERVE_RAG_JSONL_H

#include <stddef.h>
#include <stdio.h>

typedef struct rag_batch_line {
    char *question;
    char **docs; /* [n_docs] file paths */
    int n_docs;
    char **texts; /* [n_texts] document texts */
    int n_texts;
} rag_batch_line;

/* line: [len] bytes (no newline needed). 0, or -1 with the reason in
 * err[err_cap] (and *out freed and zeroed). */
int rag_jsonl_parse(const char *line, size_t len, rag_batch_line *out, char *err, size_t err_cap);
void rag_batch_line_free(rag_batch_line *l); /* zeroes it; NULL is a no-op */

/* Writes s[0..n) as a JSON string literal, quotes included; control
 * characters escaped, other bytes as they are. Returns fputs-like: < 0 on
 * a write error. */
int rag_json_write_string(FILE *f, const char *s, size_t n);

#endif
