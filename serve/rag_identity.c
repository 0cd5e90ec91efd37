/* SPDX-License-Identifier: Apache-2.0 */
/* The model identity lazyattn-rag caches documents under (rag.h). */
#include "rag.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The tensors of a llama file the decoder reads (the loader refuses any other). */
static const char *const top_tensors[] = {"token_embd.weight", "output_norm.weight",
                                          "output.weight", "rope_freqs.weight"};
static const char *const layer_tensors[] = {"attn_norm", "attn_q",   "attn_k",
                                            "attn_v",    "attn_output", "ffn_norm",
                                            "ffn_gate",  "ffn_up",   "ffn_down"};

static int model_tensors(const serve_gguf *g, int n_layers, const serve_gguf_tensor **list,
                         int cap) {
    int n = 0;
    for (int i = 0; i < 4; i++)
        if (n < cap && serve_gguf_find_tensor(g, top_tensors[i], &list[n]) == 0) n++;
    for (int l = 0; l < n_layers; l++)
        for (int i = 0; i < 9; i++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, layer_tensors[i]);
            if (n < cap && serve_gguf_find_tensor(g, name, &list[n]) == 0) n++;
        }
    return n;
}

/* Reads n bytes at offset into dst. */
static int read_at(FILE *f, uint64_t offset, void *dst, size_t n) {
    return fseeko(f, (off_t)offset, SEEK_SET) == 0 && fread(dst, 1, n, f) == n ? 0 : -1;
}

int rag_model_identity(const char *path, const serve_gguf *g, int n_layers, int bf16,
                       uint64_t *id) {
    if (!path || !g || !id || n_layers < 1 || n_layers > 1024)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "rag_model_identity: bad arguments");
    const int cap = 4 + 9 * n_layers;
    const uint64_t slice = 4096;
    const serve_gguf_tensor **list = calloc((size_t)cap, sizeof *list);
    if (!list) return serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "rag_model_identity");
    const int nt = model_tensors(g, n_layers, list, cap);
    uint64_t header = UINT64_MAX;
    for (int i = 0; i < nt; i++)
        if (list[i]->offset < header) header = list[i]->offset;
    if (header == UINT64_MAX) header = 0;
    if (header > ((uint64_t)1 << 30)) {
        free(list);
        return serve_fail(LAZYATTN_STATUS_FORMAT, "%s: a header of %llu bytes", path,
                          (unsigned long long)header);
    }
    size_t total = 16 + (size_t)header + (size_t)nt * 2 * (size_t)slice + 4;
    unsigned char *buf = calloc(1, total);
    FILE *f = buf ? fopen(path, "rb") : NULL;
    if (!f) {
        int e = errno;
        free(buf);
        free(list);
        return buf ? serve_fail(LAZYATTN_STATUS_IO, "%s: %s", path, strerror(e))
                   : serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "rag_model_identity");
    }
    struct stat sb;
    int ok = fstat(fileno(f), &sb) == 0;
    if (ok) {
        uint64_t size = (uint64_t)sb.st_size;
        for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(size >> (8 * i));
        buf[8] = (unsigned char)(bf16 ? 1 : 0);
    }
    size_t n = 16;
    ok = ok && read_at(f, 0, buf + n, (size_t)header) == 0;
    n += (size_t)header;
    for (int i = 0; ok && i < nt; i++) {
        const serve_gguf_tensor *t = list[i];
        size_t a = (size_t)(t->n_bytes < slice ? t->n_bytes : slice);
        ok = read_at(f, t->offset, buf + n, a) == 0;
        n += a;
        if (ok && t->n_bytes > slice) {
            ok = read_at(f, t->offset + t->n_bytes - a, buf + n, a) == 0;
            n += a;
        }
    }
    fclose(f);
    free(list);
    uint8_t digest[32];
    int st = ok ? lazyattn_doc_digest(0, (const int32_t *)(void *)buf, (int)((n + 3) / 4), digest)
                : serve_fail(LAZYATTN_STATUS_IO, "%s: could not be read to compute its identity",
                             path);
    free(buf);
    if (ok && st) return serve_lz_fail(st, "lazyattn_doc_digest");
    if (st) return st;
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)digest[i] << (8 * i);
    *id = v;
    return LAZYATTN_STATUS_OK;
}
