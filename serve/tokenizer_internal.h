/* SPDX-License-Identifier: Apache-2.0 */
/* What tokenizer.c, tokenizer_bpe.c and tokenizer_spm.c share: the
 * vocabulary, its lookups, and the merge queue (tokenizer_vocab.c). Not a
 * public header. */
#ifndef SERVE_TOKENIZER_INTERNAL_H
#define SERVE_TOKENIZER_INTERNAL_H

#include "tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stddef.h>
#include <stdint.h>

typedef enum { TOK_MODEL_GPT2, TOK_MODEL_LLAMA } tok_model;

/* gpt2 merges: (left id, right id) -> rank and the merged token. */
typedef struct tok_merge {
    int32_t left, right, rank, result; /* left < 0: empty slot */
} tok_merge;

struct serve_tokenizer {
    tok_model model;
    char model_name[16], pre_name[64];
    int32_t n_vocab;
    serve_gguf_strings text;  /* the tokens as the file spells them */
    serve_gguf_strings piece; /* the bytes each token decodes to */
    uint8_t *type;            /* [n_vocab] SERVE_TOKEN_* */
    float *score;             /* [n_vocab] (llama) */
    int32_t *index;           /* open-addressing table text -> id, -1 empty */
    uint64_t index_mask;
    tok_merge *merges;        /* gpt2: open addressing, merges_mask + 1 slots */
    uint64_t merges_mask;
    int32_t *specials;        /* ids matched in the text before tokenizing, longest first */
    int32_t n_specials;
    unsigned char special_first[256]; /* 1: a special token starts with this byte */
    int32_t byte_token[256];  /* gpt2: the token of a byte's code point; llama: <0xNN> */
    int32_t bos, eos, eot, unk, pad;
    int add_bos, add_eos, add_space_prefix, ignore_merges;
    pcre2_code *regex;        /* gpt2: the pre-tokenizer */
    size_t max_piece;
};

/* The index of the vocabulary, text -> id (a text that appears twice maps to
 * its last id), and the id of a token's text, -1 if none (tokenizer_vocab.c). */
int tok_build_index(serve_tokenizer *t);
int32_t tok_lookup(const serve_tokenizer *t, const char *s, size_t n);
static inline const char *tok_text(const serve_tokenizer *t, int32_t id, size_t *n) {
    *n = (size_t)(t->text.offsets[id + 1] - t->text.offsets[id] - 1);
    return t->text.bytes + t->text.offsets[id];
}

/* A growable id list. */
typedef struct tok_ids {
    int32_t *v;
    size_t n, cap;
} tok_ids;
int tok_push(tok_ids *ids, int32_t id);

/* The merge queue: the lowest key first, then the lowest position. */
typedef struct tok_candidate {
    double key;
    int32_t pos, a, b;
} tok_candidate;
typedef struct tok_queue {
    tok_candidate *v;
    size_t n, cap;
} tok_queue;
int tok_queue_push(tok_queue *q, tok_candidate c);
tok_candidate tok_queue_pop(tok_queue *q); /* q->n > 0 */

/* A run of text between special tokens into ids. */
int tok_bpe_encode(const serve_tokenizer *t, const char *text, size_t len, tok_ids *out);
int tok_spm_encode(const serve_tokenizer *t, const char *text, size_t len, tok_ids *out);
/* gpt2 loading: the merges table, the byte map, the pre-tokenizer, the
 * decoded pieces. */
int tok_bpe_load(serve_tokenizer *t, const serve_gguf *g);
/* GPT-2's byte <-> code point map. */
uint32_t tok_byte_to_cp(unsigned char b);

#endif
