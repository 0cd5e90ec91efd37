/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GGUF file's own tokenizer (tokenizer.ggml.*) and chat prompts.
 *
 * Two models, as llama.cpp reads them:
 *   gpt2   byte-level BPE: the text is split by the pre-tokenizer named in
 *          tokenizer.ggml.pre (llama-bpe = Llama 3's regex, qwen2 = Qwen 2's;
 *          any other is refused by name), each piece's bytes mapped to
 *          GPT-2's printable code points and merged by tokenizer.ggml.merges
 *          rank (a piece that is itself a token is taken whole for
 *          llama-bpe, Hugging Face's ignore_merges);
 *   llama  SentencePiece BPE: spaces become U+2581, one is prepended to each
 *          run of text (tokenizer.ggml.add_space_prefix, default on),
 *          adjacent pieces merge while their concatenation is a token, the
 *          best tokenizer.ggml.scores first, and a character that is no
 *          token becomes its bytes' <0xNN> tokens (else the unknown token).
 * Special tokens (CONTROL, UNKNOWN; USER_DEFINED always) are matched in the
 * text first, longest at the leftmost place, and never merged into.
 * Text in and out is UTF-8; ids are int32 in [0, n_vocab).
 * Conventions as in serve.h: int status, serve_last_error() for the detail.
 */
#ifndef SERVE_TOKENIZER_H
#define SERVE_TOKENIZER_H

#include "serve.h"

#include <stddef.h>
#include <stdint.h>

typedef struct serve_tokenizer serve_tokenizer;

/* GGUF token types (tokenizer.ggml.token_type). */
enum {
    SERVE_TOKEN_NORMAL = 1,
    SERVE_TOKEN_UNKNOWN = 2,
    SERVE_TOKEN_CONTROL = 3,
    SERVE_TOKEN_USER_DEFINED = 4,
    SERVE_TOKEN_UNUSED = 5,
    SERVE_TOKEN_BYTE = 6
};

/* Reads tokenizer.ggml.model, .pre, .tokens, .token_type, .scores, .merges,
 * .bos/.eos/.eot/.unknown/.padding_token_id, .add_bos_token, .add_eos_token,
 * .add_space_prefix. FORMAT, naming the key or value, for an unknown model
 * or pre-tokenizer, a missing or malformed array, an id out of range. */
int serve_tokenizer_from_gguf(const serve_gguf *g, serve_tokenizer **out);
void serve_tokenizer_free(serve_tokenizer *t); /* NULL is a no-op */

typedef struct serve_tokenizer_info {
    const char *model;    /* "gpt2" / "llama" */
    const char *pre;      /* "llama-bpe", "qwen2", ... ("" for llama) */
    int32_t n_vocab;
    int32_t bos, eos, eot, unk, pad; /* -1 when the file has none */
    int add_bos, add_eos;
} serve_tokenizer_info;
void serve_tokenizer_get_info(const serve_tokenizer *t, serve_tokenizer_info *info);
/* A token's type (SERVE_TOKEN_*), 0 for an id out of range. */
int serve_tokenizer_token_type(const serve_tokenizer *t, int32_t id);

#define SERVE_TOKENIZE_ADD_SPECIAL 1u   /* BOS / EOS where the file's add_bos / add_eos say */
#define SERVE_TOKENIZE_PARSE_SPECIAL 2u /* control tokens' text in the input becomes their id */

/* text: [len] bytes of UTF-8 (INVALID_ARGUMENT, with the offset, if not).
 * *ids: [*n_ids] token ids, malloc'd (free() it; NULL when *n_ids is 0). */
int serve_tokenizer_encode(const serve_tokenizer *t, const char *text, size_t len, unsigned flags,
                           int32_t **ids, size_t *n_ids);

/* Streaming decode: one token's bytes at a time. A character split across
 * tokens (byte-level pieces, <0xNN> byte tokens) is held until complete,
 * so every chunk written is whole UTF-8 characters (invalid bytes pass as
 * they are). For llama models the space encode prepends to a run of text
 * is taken off again (at the start, after a special token). */
#define SERVE_DETOK_SPECIAL 1u /* write control / unknown tokens' text (else nothing) */
typedef struct serve_detokenizer {
    unsigned flags;
    int at_text_start;      /* llama: the next text piece's leading space is the prefix */
    unsigned char held[4];  /* an unfinished UTF-8 character */
    int n_held;
} serve_detokenizer;
void serve_detokenizer_init(serve_detokenizer *d, unsigned flags);
/* The most bytes one serve_tokenizer_decode_token call writes. */
size_t serve_tokenizer_decode_capacity(const serve_tokenizer *t);
/* out: [cap] bytes, cap >= serve_tokenizer_decode_capacity(t); *n_out
 * bytes written (no NUL). INVALID_ARGUMENT for an id out of range. */
int serve_tokenizer_decode_token(const serve_tokenizer *t, serve_detokenizer *d, int32_t id,
                                 char *out, size_t cap, size_t *n_out);
/* Writes what is held (at most 4 bytes) and resets the state. */
void serve_detokenizer_flush(serve_detokenizer *d, char *out, size_t cap, size_t *n_out);
/* Whole-sequence decode: *text [*len] bytes + NUL, malloc'd (free() it). */
int serve_tokenizer_decode(const serve_tokenizer *t, const int32_t *ids, size_t n_ids,
                           unsigned flags, char **text, size_t *len);

/* ---- chat prompts (chat_template.c) ------------------------------------- */

/* The file's Jinja template is not run: the common ones are recognised
 * (serve_chat_template_detect) or chosen by name (a --template option). */
typedef enum serve_chat_template {
    SERVE_CHAT_RAW = 0,    /* the messages' contents, concatenated, nothing added */
    SERVE_CHAT_LLAMA3 = 1, /* <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|> */
    SERVE_CHAT_CHATML = 2, /* <|im_start|>role\ncontent<|im_end|>\n (Qwen, ...) */
    SERVE_CHAT_LLAMA2 = 3  /* [INST] <<SYS>>..<</SYS>> user [/INST] (Llama 2, Mistral v1) */
} serve_chat_template;

typedef struct serve_chat_message {
    const char *role; /* "system", "user", "assistant" */
    const char *content;
} serve_chat_message;

/* From the file's tokenizer.chat_template text: NOT_FOUND when none of the
 * known templates is recognised (the message says to choose one by name). */
int serve_chat_template_detect(const char *jinja, serve_chat_template *kind);
/* "raw", "llama3", "chatml", "llama2" / "mistral"; INVALID_ARGUMENT
 * listing the names otherwise. */
int serve_chat_template_from_name(const char *name, serve_chat_template *kind);
/* Formats msgs[n] into *out (malloc'd, NUL-terminated; free() it), with the
 * assistant's header at the end when add_assistant. The BOS is not written:
 * the tokenizer adds it (SERVE_TOKENIZE_ADD_SPECIAL); tokenize the result
 * with SERVE_TOKENIZE_PARSE_SPECIAL. llama3 trims each content's outer
 * whitespace, as Llama 3's template does. */
int serve_chat_format(serve_chat_template kind, const serve_chat_message *msgs, size_t n,
                      int add_assistant, char **out);

#endif
