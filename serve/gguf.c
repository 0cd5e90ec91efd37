/* SPDX-License-Identifier: Apache-2.0 */
/* GGUF reader: header, metadata key/values, tensor infos and alignment of a
 * GGUF v2/v3 file (little-endian), tensors converted to f32 (F32, F16, BF16
 * and the quantized types of quant.c).
 * Every length and count is checked against the bytes left in the file
 * before anything is allocated, so a truncated or corrupt file gives a
 * status and a message, never a crash or a huge allocation. */
#define _FILE_OFFSET_BITS 64
#include "serve.h"
#include "quant.h"

#include <stdlib.h>
#include <string.h>

enum {
    GGUF_U8 = 0, GGUF_I8 = 1, GGUF_U16 = 2, GGUF_I16 = 3, GGUF_U32 = 4, GGUF_I32 = 5,
    GGUF_F32 = 6, GGUF_BOOL = 7, GGUF_STRING = 8, GGUF_ARRAY = 9, GGUF_U64 = 10,
    GGUF_I64 = 11, GGUF_F64 = 12
};

typedef struct serve_gguf_kv {
    char *key;
    uint32_t type;     /* GGUF_* */
    int64_t i;         /* integer and bool values (u64 above INT64_MAX: FORMAT on get) */
    uint64_t u;        /* the raw unsigned value */
    int is_unsigned;
    double f;          /* f32 / f64 values */
    char *s;           /* string values */
    uint64_t array_at; /* array values: file offset of the element type */
} serve_gguf_kv;

struct serve_gguf {
    FILE *file;
    char *path;
    uint64_t file_size;
    uint32_t version;
    uint64_t n_kv;
    serve_gguf_kv *kv;       /* [n_kv] */
    uint64_t n_tensors;
    serve_gguf_tensor *tensors; /* [n_tensors], names owned */
    const serve_gguf_tensor **by_name; /* [n_tensors] sorted by name (lookups) */
    uint64_t alignment;
    uint64_t data_start;
};

/* ---- bounded reading ---- */

typedef struct serve_reader {
    FILE *f;
    uint64_t pos, size;
    uint64_t last_len; /* length of the last string read */
} serve_reader;

static int gguf_truncated(serve_reader *r, uint64_t need, const char *what) {
    return serve_fail(LAZYATTN_STATUS_FORMAT,
                      "GGUF: truncated file: %s needs %llu bytes at offset %llu, file has %llu",
                      what, (unsigned long long)need, (unsigned long long)r->pos,
                      (unsigned long long)r->size);
}

static int gguf_read(serve_reader *r, void *dst, uint64_t n, const char *what) {
    if (n > r->size - r->pos) return gguf_truncated(r, n, what);
    if (n && fread(dst, 1, (size_t)n, r->f) != (size_t)n)
        return serve_fail(LAZYATTN_STATUS_IO, "GGUF: read error at offset %llu (%s)",
                          (unsigned long long)r->pos, what);
    r->pos += n;
    return LAZYATTN_STATUS_OK;
}

static int gguf_skip(serve_reader *r, uint64_t n, const char *what) {
    if (n > r->size - r->pos) return gguf_truncated(r, n, what);
    if (fseeko(r->f, (off_t)(r->pos + n), SEEK_SET) != 0)
        return serve_fail(LAZYATTN_STATUS_IO, "GGUF: seek failed (%s)", what);
    r->pos += n;
    return LAZYATTN_STATUS_OK;
}

static int gguf_u32(serve_reader *r, uint32_t *v, const char *what) {
    unsigned char b[4];
    int st = gguf_read(r, b, 4, what);
    if (st) return st;
    *v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    return LAZYATTN_STATUS_OK;
}

static int gguf_u64(serve_reader *r, uint64_t *v, const char *what) {
    unsigned char b[8];
    int st = gguf_read(r, b, 8, what);
    if (st) return st;
    *v = 0;
    for (int i = 7; i >= 0; i--) *v = *v << 8 | b[i];
    return LAZYATTN_STATUS_OK;
}

/* A string: u64 length + bytes, returned NUL-terminated (caller frees). */
static int gguf_string(serve_reader *r, char **out, const char *what) {
    *out = NULL;
    uint64_t len;
    int st = gguf_u64(r, &len, what);
    if (st) return st;
    if (len > r->size - r->pos) return gguf_truncated(r, len, what);
    char *s = malloc((size_t)len + 1);
    if (!s) return serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "GGUF: %s", what);
    if ((st = gguf_read(r, s, len, what))) {
        free(s);
        return st;
    }
    s[len] = 0;
    r->last_len = len;
    *out = s;
    return LAZYATTN_STATUS_OK;
}

static uint64_t gguf_scalar_size(uint32_t type) {
    switch (type) {
    case GGUF_U8: case GGUF_I8: case GGUF_BOOL: return 1;
    case GGUF_U16: case GGUF_I16: return 2;
    case GGUF_U32: case GGUF_I32: case GGUF_F32: return 4;
    case GGUF_U64: case GGUF_I64: case GGUF_F64: return 8;
    default: return 0;
    }
}

/* Reads one scalar value into kv (type already set). */
static int gguf_scalar(serve_reader *r, serve_gguf_kv *kv, const char *key) {
    unsigned char b[8] = {0};
    uint64_t n = gguf_scalar_size(kv->type);
    int st = gguf_read(r, b, n, key);
    if (st) return st;
    uint64_t u = 0;
    for (int i = (int)n - 1; i >= 0; i--) u = u << 8 | b[i];
    kv->u = u;
    kv->is_unsigned = 0;
    switch (kv->type) {
    case GGUF_U8: case GGUF_U16: case GGUF_U32: case GGUF_BOOL:
        kv->i = (int64_t)u; break;
    case GGUF_U64:
        kv->i = (int64_t)u, kv->is_unsigned = 1; break;
    case GGUF_I8: kv->i = (int8_t)u; break;
    case GGUF_I16: kv->i = (int16_t)u; break;
    case GGUF_I32: kv->i = (int32_t)u; break;
    case GGUF_I64: kv->i = (int64_t)u; break;
    case GGUF_F32: {
        uint32_t w = (uint32_t)u;
        float f;
        memcpy(&f, &w, 4);
        kv->f = f;
        break;
    }
    case GGUF_F64: memcpy(&kv->f, &u, 8); break;
    default: break;
    }
    return LAZYATTN_STATUS_OK;
}

/* Skips an array value (element type, count, elements), nested at most 4 deep. */
static int gguf_skip_array(serve_reader *r, const char *key, int depth) {
    if (depth > 4)
        return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: key %s: arrays nested too deep", key);
    uint32_t type;
    uint64_t n;
    int st = gguf_u32(r, &type, key);
    if (!st) st = gguf_u64(r, &n, key);
    if (st) return st;
    uint64_t sz = gguf_scalar_size(type);
    if (sz) {
        if (n > (r->size - r->pos) / sz) return gguf_truncated(r, n * sz, key);
        return gguf_skip(r, n * sz, key);
    }
    if (type != GGUF_STRING && type != GGUF_ARRAY)
        return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: key %s: unknown array element type %u",
                          key, (unsigned)type);
    /* each string or array element takes at least 8 bytes */
    if (n > (r->size - r->pos) / 8) return gguf_truncated(r, n * 8, key);
    for (uint64_t i = 0; i < n; i++) {
        if (type == GGUF_STRING) {
            uint64_t len;
            if ((st = gguf_u64(r, &len, key)) || (st = gguf_skip(r, len, key))) return st;
        } else if ((st = gguf_skip_array(r, key, depth + 1))) {
            return st;
        }
    }
    return LAZYATTN_STATUS_OK;
}

/* ---- open / close ---- */

void serve_gguf_close(serve_gguf *g) {
    if (!g) return;
    if (g->kv)
        for (uint64_t i = 0; i < g->n_kv; i++) {
            free(g->kv[i].key);
            free(g->kv[i].s);
        }
    free(g->kv);
    if (g->tensors)
        for (uint64_t i = 0; i < g->n_tensors; i++) free((char *)g->tensors[i].name);
    free(g->tensors);
    free(g->by_name);
    if (g->file) fclose(g->file);
    free(g->path);
    free(g);
}

/* Makes room for entry i of a table (zeroed), doubling as entries are read:
 * the tables grow with what the file really holds, not with its counts
 * (a count that merely fits the file's size could still ask gigabytes).
 * The grown table, or NULL (the old one still valid) when out of memory. */
static void *gguf_grow(void *table, uint64_t *cap, uint64_t i, size_t size) {
    if (i < *cap) return table;
    uint64_t n = *cap ? *cap * 2 : 16;
    char *t = realloc(table, (size_t)n * size);
    if (!t) return NULL;
    memset(t + (size_t)*cap * size, 0, (size_t)(n - *cap) * size);
    *cap = n;
    return t;
}

/* Keys and tensor names are C strings here: an empty one, or one with a NUL
 * inside (it would read as a shorter, perhaps another, name), is refused. */
static int gguf_check_name(const char *s, uint64_t len, const char *what, uint64_t index) {
    if (len == 0)
        return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: %s %llu is empty", what,
                          (unsigned long long)index);
    if (strlen(s) != len)
        return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: %s \"%s\" has a NUL byte inside", what, s);
    return LAZYATTN_STATUS_OK;
}

static int gguf_cmp_names(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The first name of names[0..n) that appears twice, or NULL (sorts names). */
static const char *gguf_repeated_name(const char **names, uint64_t n) {
    qsort(names, (size_t)n, sizeof *names, gguf_cmp_names);
    for (uint64_t i = 1; i < n; i++)
        if (strcmp(names[i - 1], names[i]) == 0) return names[i];
    return NULL;
}

static int gguf_check_unique_keys(const serve_gguf *g) {
    if (g->n_kv < 2) return LAZYATTN_STATUS_OK;
    const char **names = malloc((size_t)g->n_kv * sizeof *names);
    if (!names) return serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "GGUF metadata");
    for (uint64_t i = 0; i < g->n_kv; i++) names[i] = g->kv[i].key;
    const char *dup = gguf_repeated_name(names, g->n_kv);
    int st = dup ? serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: metadata key %s appears twice", dup)
                 : LAZYATTN_STATUS_OK;
    free(names);
    return st;
}

static int gguf_cmp_offsets(const void *a, const void *b) {
    const serve_gguf_tensor *x = *(const serve_gguf_tensor *const *)a,
                            *y = *(const serve_gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static int gguf_cmp_tensor_names(const void *a, const void *b) {
    return strcmp((*(const serve_gguf_tensor *const *)a)->name,
                  (*(const serve_gguf_tensor *const *)b)->name);
}

/* Tensor names are unique (g->by_name: the tensors sorted by name) and no
 * two tensors' bytes overlap. */
static int gguf_check_tensor_layout(serve_gguf *g) {
    size_t n = (size_t)g->n_tensors;
    if (n == 0) return LAZYATTN_STATUS_OK;
    g->by_name = malloc(n * sizeof *g->by_name);
    const serve_gguf_tensor **by_offset = malloc(n * sizeof *by_offset);
    int st = LAZYATTN_STATUS_OK;
    if (!g->by_name || !by_offset) {
        st = serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "GGUF tensor infos");
        goto done;
    }
    for (size_t i = 0; i < n; i++) g->by_name[i] = by_offset[i] = &g->tensors[i];
    qsort(g->by_name, n, sizeof *g->by_name, gguf_cmp_tensor_names);
    for (size_t i = 1; i < n; i++)
        if (strcmp(g->by_name[i - 1]->name, g->by_name[i]->name) == 0) {
            st = serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: tensor %s appears twice",
                            g->by_name[i]->name);
            goto done;
        }
    qsort(by_offset, n, sizeof *by_offset, gguf_cmp_offsets);
    for (size_t i = 1; i < n; i++) {
        const serve_gguf_tensor *a = by_offset[i - 1], *b = by_offset[i];
        if (a->offset + a->n_bytes > b->offset) { /* both end inside the file: no wrap */
            st = serve_fail(LAZYATTN_STATUS_FORMAT,
                            "GGUF: tensors %s (bytes %llu..%llu) and %s (from %llu) overlap",
                            a->name, (unsigned long long)a->offset,
                            (unsigned long long)(a->offset + a->n_bytes), b->name,
                            (unsigned long long)b->offset);
            goto done;
        }
    }
done:
    free(by_offset);
    return st;
}

static int gguf_parse(serve_gguf *g) {
    serve_reader r = {g->file, 0, g->file_size, 0};
    unsigned char magic[4];
    int st = gguf_read(&r, magic, 4, "magic");
    if (st) return st;
    if (memcmp(magic, "GGUF", 4) != 0)
        return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: %s: bad magic (not a GGUF file)", g->path);
    if ((st = gguf_u32(&r, &g->version, "version"))) return st;
    if (g->version == 1)
        return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: version 1 is not supported (need 2 or 3)");
    if (g->version != 2 && g->version != 3)
        return serve_fail(LAZYATTN_STATUS_FORMAT,
                          "GGUF: version %u not supported (need 3, little-endian)", g->version);
    uint64_t n_tensors, n_kv;
    if ((st = gguf_u64(&r, &n_tensors, "tensor count")) || (st = gguf_u64(&r, &n_kv, "kv count")))
        return st;
    /* a key/value takes at least 8 + 4 + 1 bytes, a tensor info 8 + 4 + 8 + 4 + 8 */
    if (n_kv > (r.size - r.pos) / 13)
        return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: %llu metadata entries cannot fit the file",
                          (unsigned long long)n_kv);
    if (n_tensors > (r.size - r.pos) / 32)
        return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: %llu tensors cannot fit the file",
                          (unsigned long long)n_tensors);
    g->alignment = 32;
    uint64_t cap = 0;
    for (uint64_t i = 0; i < n_kv; i++) {
        serve_gguf_kv *grown = gguf_grow(g->kv, &cap, i, sizeof *g->kv);
        if (!grown) return serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "GGUF metadata");
        g->kv = grown;
        serve_gguf_kv *kv = &g->kv[i];
        g->n_kv = i + 1; /* so that close frees what is read so far */
        if ((st = gguf_string(&r, &kv->key, "metadata key"))) return st;
        if ((st = gguf_check_name(kv->key, r.last_len, "metadata key", i))) return st;
        if ((st = gguf_u32(&r, &kv->type, kv->key))) return st;
        if (kv->type == GGUF_STRING) {
            if ((st = gguf_string(&r, &kv->s, kv->key))) return st;
        } else if (kv->type == GGUF_ARRAY) {
            kv->array_at = r.pos; /* read on demand: serve_gguf_read_strings, ... */
            if ((st = gguf_skip_array(&r, kv->key, 0))) return st;
        } else if (gguf_scalar_size(kv->type)) {
            if ((st = gguf_scalar(&r, kv, kv->key))) return st;
        } else {
            return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: key %s has unknown value type %u",
                              kv->key, (unsigned)kv->type);
        }
        if (strcmp(kv->key, "general.alignment") == 0) {
            if (kv->type != GGUF_U32 || kv->i == 0 || (kv->i & (kv->i - 1)) != 0)
                return serve_fail(LAZYATTN_STATUS_FORMAT,
                                  "GGUF: general.alignment must be a power-of-two u32");
            g->alignment = (uint64_t)kv->i;
        }
    }

    if ((st = gguf_check_unique_keys(g))) return st;

    cap = 0;
    for (uint64_t i = 0; i < n_tensors; i++) {
        serve_gguf_tensor *grown = gguf_grow(g->tensors, &cap, i, sizeof *g->tensors);
        if (!grown) return serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "GGUF tensor infos");
        g->tensors = grown;
        serve_gguf_tensor *t = &g->tensors[i];
        g->n_tensors = i + 1;
        char *name;
        if ((st = gguf_string(&r, &name, "tensor name"))) return st;
        t->name = name;
        if ((st = gguf_check_name(name, r.last_len, "tensor name", i))) return st;
        uint32_t n_dims;
        if ((st = gguf_u32(&r, &n_dims, name))) return st;
        if (n_dims < 1 || n_dims > 4)
            return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: tensor %s has %u dimensions (1..4)",
                              name, (unsigned)n_dims);
        t->n_dims = (int)n_dims;
        t->n_elements = 1;
        for (int d = 0; d < 4; d++) t->dims[d] = 1;
        for (uint32_t d = 0; d < n_dims; d++) {
            if ((st = gguf_u64(&r, &t->dims[d], name))) return st;
            if (t->dims[d] == 0 || t->dims[d] > ((uint64_t)1 << 40) / t->n_elements)
                return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: tensor %s has a bad dimension %llu",
                                  name, (unsigned long long)t->dims[d]);
            t->n_elements *= t->dims[d];
        }
        uint64_t offset;
        if ((st = gguf_u32(&r, &t->type, name)) || (st = gguf_u64(&r, &offset, name))) return st;
        /* a supported type, rows of whole blocks (FORMAT naming both) */
        uint64_t row_bytes;
        if ((st = serve_ggml_row_bytes(t->type, t->dims[0], name, &row_bytes))) return st;
        if (offset % g->alignment != 0)
            return serve_fail(LAZYATTN_STATUS_FORMAT,
                              "GGUF: tensor %s offset %llu is not a multiple of the alignment %llu",
                              name, (unsigned long long)offset, (unsigned long long)g->alignment);
        t->offset = offset; /* relative for now */
        t->n_bytes = t->n_elements / t->dims[0] * row_bytes;
    }
    uint64_t start = (r.pos + g->alignment - 1) / g->alignment * g->alignment;
    if (start > g->file_size)
        return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: truncated file: no tensor data section");
    g->data_start = start;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        serve_gguf_tensor *t = &g->tensors[i];
        uint64_t room = g->file_size - start;
        if (t->offset > room || t->n_bytes > room - t->offset)
            return serve_fail(LAZYATTN_STATUS_FORMAT,
                              "GGUF: truncated file: tensor %s (%llu bytes at data offset %llu) "
                              "ends past the end of the file",
                              t->name, (unsigned long long)t->n_bytes,
                              (unsigned long long)t->offset);
        t->offset += start;
    }
    return gguf_check_tensor_layout(g);
}

int serve_gguf_open(const char *path, serve_gguf **out) {
    if (!out) return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_gguf_open: out is NULL");
    *out = NULL;
    if (!path) return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_gguf_open: path is NULL");
    serve_gguf *g = calloc(1, sizeof *g);
    if (!g) return serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "serve_gguf_open");
    g->path = malloc(strlen(path) + 1);
    if (!g->path) {
        free(g);
        return serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "serve_gguf_open");
    }
    strcpy(g->path, path);
    g->file = fopen(path, "rb");
    int st;
    if (!g->file) {
        st = serve_fail(LAZYATTN_STATUS_IO, "GGUF: cannot open %s", path);
    } else if (fseeko(g->file, 0, SEEK_END) != 0 || ftello(g->file) < 0) {
        st = serve_fail(LAZYATTN_STATUS_IO, "GGUF: cannot seek in %s", path);
    } else {
        g->file_size = (uint64_t)ftello(g->file);
        rewind(g->file);
        st = gguf_parse(g);
    }
    if (st) {
        serve_gguf_close(g);
        return st;
    }
    *out = g;
    return LAZYATTN_STATUS_OK;
}

/* ---- queries ---- */

uint32_t serve_gguf_version(const serve_gguf *g) { return g ? g->version : 0; }
int64_t serve_gguf_n_tensors(const serve_gguf *g) { return g ? (int64_t)g->n_tensors : 0; }

static const serve_gguf_kv *gguf_find(const serve_gguf *g, const char *key) {
    if (!g || !key) return NULL;
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (strcmp(g->kv[i].key, key) == 0) return &g->kv[i];
    return NULL;
}

int serve_gguf_get_int(const serve_gguf *g, const char *key, int64_t *value) {
    const serve_gguf_kv *kv = gguf_find(g, key);
    if (!kv || !value) return serve_fail(LAZYATTN_STATUS_NOT_FOUND, "GGUF: no key %s", key ? key : "");
    if (kv->type == GGUF_STRING || kv->type == GGUF_ARRAY || kv->type == GGUF_F32 ||
        kv->type == GGUF_F64)
        return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: key %s is not an integer", key);
    if (kv->is_unsigned && kv->u > (uint64_t)INT64_MAX)
        return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: key %s does not fit int64", key);
    *value = kv->i;
    return LAZYATTN_STATUS_OK;
}

int serve_gguf_get_float(const serve_gguf *g, const char *key, double *value) {
    const serve_gguf_kv *kv = gguf_find(g, key);
    if (!kv || !value) return serve_fail(LAZYATTN_STATUS_NOT_FOUND, "GGUF: no key %s", key ? key : "");
    if (kv->type == GGUF_F32 || kv->type == GGUF_F64) {
        *value = kv->f;
        return LAZYATTN_STATUS_OK;
    }
    int64_t i;
    int st = serve_gguf_get_int(g, key, &i);
    if (st) return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: key %s is not a number", key);
    *value = (double)i;
    return LAZYATTN_STATUS_OK;
}

int serve_gguf_get_string(const serve_gguf *g, const char *key, const char **value) {
    const serve_gguf_kv *kv = gguf_find(g, key);
    if (!kv || !value) return serve_fail(LAZYATTN_STATUS_NOT_FOUND, "GGUF: no key %s", key ? key : "");
    if (kv->type != GGUF_STRING)
        return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: key %s is not a string", key);
    *value = kv->s;
    return LAZYATTN_STATUS_OK;
}

/* ---- array values (read from the file on demand) ---- */

/* Positions a reader on the first element of array key; its element type
 * and count. The array was walked, bounds checked, when the file opened. */
static int gguf_array_start(const serve_gguf *g, const char *key, serve_reader *r,
                            uint32_t *type, uint64_t *n) {
    const serve_gguf_kv *kv = gguf_find(g, key);
    if (!kv) return serve_fail(LAZYATTN_STATUS_NOT_FOUND, "GGUF: no key %s", key ? key : "");
    if (kv->type != GGUF_ARRAY)
        return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: key %s is not an array", key);
    *r = (serve_reader){g->file, kv->array_at, g->file_size, 0};
    if (fseeko(g->file, (off_t)kv->array_at, SEEK_SET) != 0)
        return serve_fail(LAZYATTN_STATUS_IO, "GGUF: seek to %s failed", key);
    int st = gguf_u32(r, type, key);
    if (!st) st = gguf_u64(r, n, key);
    return st;
}

int serve_gguf_get_array(const serve_gguf *g, const char *key, uint32_t *elem_type, uint64_t *n) {
    if (!g || !key || !elem_type || !n)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_gguf_get_array: NULL");
    serve_reader r;
    return gguf_array_start(g, key, &r, elem_type, n);
}

void serve_gguf_strings_free(serve_gguf_strings *s) {
    if (!s) return;
    free(s->bytes);
    free(s->offsets);
    memset(s, 0, sizeof *s);
}

int serve_gguf_read_strings(const serve_gguf *g, const char *key, serve_gguf_strings *out) {
    if (!g || !key || !out)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_gguf_read_strings: NULL");
    memset(out, 0, sizeof *out);
    serve_reader r;
    uint32_t type;
    uint64_t n;
    int st = gguf_array_start(g, key, &r, &type, &n);
    if (st) return st;
    if (type != GGUF_STRING)
        return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: %s is an array of type %u, not of "
                          "strings", key, (unsigned)type);
    /* the bytes of all strings, one NUL after each: at most the file's size */
    uint64_t start = r.pos, total = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t len;
        if ((st = gguf_u64(&r, &len, key)) || (st = gguf_skip(&r, len, key))) return st;
        total += len + 1;
    }
    out->offsets = malloc((size_t)(n + 1) * sizeof *out->offsets);
    out->bytes = malloc((size_t)total + 1);
    if (!out->offsets || !out->bytes) {
        serve_gguf_strings_free(out);
        return serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "GGUF: %s", key);
    }
    r.pos = start;
    if (fseeko(g->file, (off_t)start, SEEK_SET) != 0) st = serve_fail(LAZYATTN_STATUS_IO, "GGUF: seek");
    uint64_t at = 0;
    for (uint64_t i = 0; i < n && !st; i++) {
        uint64_t len;
        if ((st = gguf_u64(&r, &len, key))) break;
        if (len > total - at) { /* the file changed under us */
            st = serve_fail(LAZYATTN_STATUS_IO, "GGUF: %s changed while read", key);
            break;
        }
        out->offsets[i] = at;
        if ((st = gguf_read(&r, out->bytes + at, len, key))) break;
        at += len;
        out->bytes[at++] = 0;
    }
    if (st) {
        serve_gguf_strings_free(out);
        return st;
    }
    out->offsets[n] = at;
    out->n = n;
    return LAZYATTN_STATUS_OK;
}

int serve_gguf_read_numbers(const serve_gguf *g, const char *key, double *dst, uint64_t n) {
    if (!g || !key || (!dst && n))
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_gguf_read_numbers: NULL");
    serve_reader r;
    uint32_t type;
    uint64_t count;
    int st = gguf_array_start(g, key, &r, &type, &count);
    if (st) return st;
    if (count != n)
        return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: %s has %llu elements, %llu expected", key,
                          (unsigned long long)count, (unsigned long long)n);
    if (!gguf_scalar_size(type))
        return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: %s is an array of type %u, not of "
                          "numbers", key, (unsigned)type);
    serve_gguf_kv v = {.type = type};
    for (uint64_t i = 0; i < n; i++) {
        if ((st = gguf_scalar(&r, &v, key))) return st;
        dst[i] = (type == GGUF_F32 || type == GGUF_F64) ? v.f
                 : v.is_unsigned ? (double)v.u : (double)v.i;
    }
    return LAZYATTN_STATUS_OK;
}

int serve_gguf_find_tensor(const serve_gguf *g, const char *name, const serve_gguf_tensor **out) {
    if (!g || !name || !out)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_gguf_find_tensor: NULL");
    /* binary search of the name index (complete once the file is open) */
    size_t lo = 0, hi = g->by_name ? (size_t)g->n_tensors : 0;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(g->by_name[mid]->name, name);
        if (c == 0) {
            *out = g->by_name[mid];
            return LAZYATTN_STATUS_OK;
        }
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    *out = NULL;
    return serve_fail(LAZYATTN_STATUS_NOT_FOUND, "GGUF: no tensor %s", name);
}

int serve_gguf_read_f32(const serve_gguf *g, const serve_gguf_tensor *t, float *dst, uint64_t n) {
    if (!g || !t || !dst)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_gguf_read_f32: NULL");
    if (n != t->n_elements)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "serve_gguf_read_f32: %s has %llu elements, %llu asked", t->name,
                          (unsigned long long)t->n_elements, (unsigned long long)n);
    uint64_t row = t->dims[0], row_bytes;
    int st = serve_ggml_row_bytes(t->type, row, t->name, &row_bytes);
    if (st) return st;
    if (row_bytes * (n / row) != t->n_bytes)
        return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: tensor %s: %llu bytes, its type and "
                          "shape need %llu", t->name, (unsigned long long)t->n_bytes,
                          (unsigned long long)(row_bytes * (n / row)));
    if (fseeko(g->file, (off_t)t->offset, SEEK_SET) != 0)
        return serve_fail(LAZYATTN_STATUS_IO, "GGUF: seek to tensor %s failed", t->name);
    if (t->type == SERVE_GGML_F32) {
        if (fread(dst, 4, (size_t)n, g->file) != (size_t)n)
            return serve_fail(LAZYATTN_STATUS_IO, "GGUF: short read of tensor %s", t->name);
        return LAZYATTN_STATUS_OK; /* little-endian host assumed, as GGUF is */
    }
    /* other types: whole rows at a time through a buffer of about 64 KiB */
    uint64_t rows_per_read = row_bytes >= 65536 ? 1 : 65536 / row_bytes;
    unsigned char *buf = malloc((size_t)(rows_per_read * row_bytes));
    if (!buf) return serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "GGUF: tensor %s", t->name);
    for (uint64_t r = 0, n_rows = n / row; r < n_rows && !st;) {
        uint64_t k = n_rows - r < rows_per_read ? n_rows - r : rows_per_read;
        if (fread(buf, 1, (size_t)(k * row_bytes), g->file) != (size_t)(k * row_bytes))
            st = serve_fail(LAZYATTN_STATUS_IO, "GGUF: short read of tensor %s", t->name);
        else
            st = serve_dequantize(t->type, buf, k * row_bytes, dst + r * row, k * row, t->name);
        r += k;
    }
    free(buf);
    return st;
}

int serve_gguf_read_raw(const serve_gguf *g, const serve_gguf_tensor *t, void *dst,
                        uint64_t n_bytes) {
    if (!g || !t || !dst)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_gguf_read_raw: NULL");
    if (n_bytes != t->n_bytes)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "serve_gguf_read_raw: %s has %llu bytes, %llu asked", t->name,
                          (unsigned long long)t->n_bytes, (unsigned long long)n_bytes);
    if (fseeko(g->file, (off_t)t->offset, SEEK_SET) != 0)
        return serve_fail(LAZYATTN_STATUS_IO, "GGUF: seek to tensor %s failed", t->name);
    if (fread(dst, 1, (size_t)n_bytes, g->file) != (size_t)n_bytes)
        return serve_fail(LAZYATTN_STATUS_IO, "GGUF: short read of tensor %s", t->name);
    return LAZYATTN_STATUS_OK;
}

/* ---- llama metadata ---- */

static int gguf_need_int(const serve_gguf *g, const char *key, int lo, int hi, int *out) {
    int64_t v;
    int st = serve_gguf_get_int(g, key, &v);
    if (st == LAZYATTN_STATUS_NOT_FOUND)
        return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: llama model lacks %s", key);
    if (st) return st;
    if (v < lo || v > hi)
        return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: %s = %lld outside %d..%d", key,
                          (long long)v, lo, hi);
    *out = (int)v;
    return LAZYATTN_STATUS_OK;
}

/* An optional integer key in lo..hi: *found = 0 when absent; a key of
 * another type or out of range is FORMAT (never read as "absent"). */
static int gguf_opt_int(const serve_gguf *g, const char *key, int64_t lo, int64_t hi, int *found,
                        int64_t *out) {
    int st = serve_gguf_get_int(g, key, out);
    *found = st == LAZYATTN_STATUS_OK;
    if (st == LAZYATTN_STATUS_NOT_FOUND) return LAZYATTN_STATUS_OK;
    if (st) return st;
    if (*out < lo || *out > hi)
        return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: %s = %lld outside %lld..%lld", key,
                          (long long)*out, (long long)lo, (long long)hi);
    return LAZYATTN_STATUS_OK;
}

/* An optional number key, finite, in [lo, hi] (lo excluded when lo_open):
 * NaN, infinities and out-of-range values are FORMAT with the key's name. */
static int gguf_opt_float(const serve_gguf *g, const char *key, double lo, int lo_open, double hi,
                          int *found, double *out) {
    int st = serve_gguf_get_float(g, key, out);
    *found = st == LAZYATTN_STATUS_OK;
    if (st == LAZYATTN_STATUS_NOT_FOUND) return LAZYATTN_STATUS_OK;
    if (st) return st;
    double v = *out;
    if (v != v || v < lo || (lo_open && v == lo) || v > hi) /* NaN fails v == v, inf the range */
        return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: %s = %g is not in %c%g, %g]", key, v,
                          lo_open ? '(' : '[', lo, hi);
    return LAZYATTN_STATUS_OK;
}

/* Every tensor the decoder reads exists with the shape the metadata says
 * (so that the file, not its counts, bounds what the model allocates).
 * ggml order: dims[0] is the row length. */
static int gguf_check_model_tensors(const serve_gguf *g, const serve_model_config *c) {
    uint64_t h = (uint64_t)c->hidden, qd = (uint64_t)c->n_heads * (uint64_t)c->head_dim,
             kvd = (uint64_t)c->n_kv_heads * (uint64_t)c->head_dim, ff = (uint64_t)c->ffn,
             V = (uint64_t)c->vocab;
    struct {
        const char *suffix;
        uint64_t d0, d1;
    } per_layer[] = {{"attn_norm", h, 1}, {"attn_q", h, qd},     {"attn_k", h, kvd},
                     {"attn_v", h, kvd},  {"attn_output", qd, h}, {"ffn_norm", h, 1},
                     {"ffn_gate", h, ff}, {"ffn_up", h, ff},      {"ffn_down", ff, h}};
    int n_per_layer = (int)(sizeof per_layer / sizeof per_layer[0]);
    char name[96];
    for (int i = -3; i < c->n_layers * n_per_layer; i++) {
        uint64_t d0 = h, d1 = 1;
        if (i == -3) snprintf(name, sizeof name, "token_embd.weight"), d1 = V;
        else if (i == -2) snprintf(name, sizeof name, "output_norm.weight");
        else if (i == -1) {
            if (c->tied_embeddings) continue;
            snprintf(name, sizeof name, "output.weight"), d1 = V;
        } else {
            int l = i / n_per_layer, k = i % n_per_layer;
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, per_layer[k].suffix);
            d0 = per_layer[k].d0, d1 = per_layer[k].d1;
        }
        const serve_gguf_tensor *t;
        if (serve_gguf_find_tensor(g, name, &t) != LAZYATTN_STATUS_OK)
            return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: llama model lacks tensor %s", name);
        uint64_t t1 = t->n_dims > 1 ? t->dims[1] : 1;
        if (t->dims[0] != d0 || t1 != d1 || t->n_elements != d0 * d1)
            return serve_fail(LAZYATTN_STATUS_FORMAT,
                              "GGUF: tensor %s has shape [%llu, %llu], the metadata says "
                              "[%llu, %llu]",
                              name, (unsigned long long)t->dims[0], (unsigned long long)t1,
                              (unsigned long long)d0, (unsigned long long)d1);
    }
    return LAZYATTN_STATUS_OK;
}

/* The llama.* keys this reader knows: those it reads, and those that do not
 * change the arithmetic (context_length: the training context; finetuned:
 * a flag; the expert counts, refused unless 0). Any other llama.* key may
 * change what the model computes (a logit or embedding scale, a soft cap,
 * YaRN's parameters, ...): it is refused by name, never ignored. */
static const char *const gguf_llama_keys[] = {
    "llama.block_count", "llama.embedding_length", "llama.feed_forward_length",
    "llama.attention.head_count", "llama.attention.head_count_kv", "llama.attention.key_length",
    "llama.attention.value_length", "llama.attention.layer_norm_rms_epsilon",
    "llama.rope.freq_base", "llama.rope.dimension_count", "llama.rope.scaling.type",
    "llama.rope.scaling.factor", "llama.rope.scale_linear",
    "llama.rope.scaling.original_context_length", "llama.rope.scaling.finetuned",
    "llama.vocab_size", "llama.context_length", "llama.expert_count", "llama.expert_used_count"};

static int gguf_check_llama_keys(const serve_gguf *g) {
    size_t n_known = sizeof gguf_llama_keys / sizeof gguf_llama_keys[0];
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const char *key = g->kv[i].key;
        if (strncmp(key, "llama.", 6) != 0) continue;
        size_t k = 0;
        while (k < n_known && strcmp(key, gguf_llama_keys[k]) != 0) k++;
        if (k == n_known)
            return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: key %s is not supported (this "
                              "llama reader refuses keys it does not implement)", key);
    }
    static const char *const zero_keys[] = {"llama.expert_count", "llama.expert_used_count"};
    for (int k = 0; k < 2; k++) {
        int64_t v;
        int st = serve_gguf_get_int(g, zero_keys[k], &v);
        if (st == LAZYATTN_STATUS_NOT_FOUND) continue;
        if (st) return st; /* FORMAT, naming the key */
        if (v != 0)
            return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: %s = %lld: mixture-of-experts models "
                              "are not supported", zero_keys[k], (long long)v);
    }
    return LAZYATTN_STATUS_OK;
}

/* Every tensor is one the decoder reads: an unknown one (a bias, an expert,
 * a layer past block_count) would change the arithmetic if it were used. */
static int gguf_check_tensor_names(const serve_gguf *g, const serve_model_config *c) {
    static const char *const top[] = {"token_embd.weight", "output_norm.weight", "output.weight",
                                      "rope_freqs.weight"};
    static const char *const per_layer[] = {"attn_norm", "attn_q",  "attn_k",
                                            "attn_v",    "attn_output", "ffn_norm",
                                            "ffn_gate",  "ffn_up",  "ffn_down"};
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const char *name = g->tensors[i].name;
        int ok = 0;
        for (size_t k = 0; k < sizeof top / sizeof top[0] && !ok; k++) ok = !strcmp(name, top[k]);
        if (!ok && strncmp(name, "blk.", 4) == 0 && name[4] >= '0' && name[4] <= '9') {
            char *end;
            long l = strtol(name + 4, &end, 10);
            if (*end == '.' && l < c->n_layers && (l == 0 || name[4] != '0'))
                for (size_t k = 0; k < sizeof per_layer / sizeof per_layer[0] && !ok; k++) {
                    size_t len = strlen(per_layer[k]);
                    ok = !strncmp(end + 1, per_layer[k], len) && !strcmp(end + 1 + len, ".weight");
                }
        }
        if (!ok)
            return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: tensor %s is not supported (not one "
                              "a llama model of %d layers reads here)", name, c->n_layers);
    }
    return LAZYATTN_STATUS_OK;
}

/* RoPE scaling: llama.rope.scaling.type none / linear (llama.cpp's default
 * when a factor is given without a type) / llama3 (this reader's own form:
 * factor, original context, frequency factors 1 and 4), and the
 * rope_freqs.weight tensor llama.cpp's converter writes for Llama 3.x
 * ([rotary_dim / 2] divisors, ggml's freq_factors). Anything else (yarn,
 * longrope, ...) is refused by name. */
static int gguf_rope_scaling(const serve_gguf *g, int rot, lazyattn_rope_config *rope) {
    static const char *TYPE = "llama.rope.scaling.type", *FACTOR = "llama.rope.scaling.factor",
                      *LEGACY = "llama.rope.scale_linear",
                      *CTX = "llama.rope.scaling.original_context_length";
    const char *type = NULL;
    int st = serve_gguf_get_string(g, TYPE, &type);
    if (st && st != LAZYATTN_STATUS_NOT_FOUND) return st;
    int found_factor, found_legacy, found_ctx;
    double factor = 1.0, legacy = 1.0;
    int64_t ctx = 8192;
    if ((st = gguf_opt_float(g, FACTOR, 1.0, 0, 1024.0, &found_factor, &factor)) ||
        (st = gguf_opt_float(g, LEGACY, 1.0, 0, 1024.0, &found_legacy, &legacy)) ||
        (st = gguf_opt_int(g, CTX, 1, 1 << 24, &found_ctx, &ctx)))
        return st;
    if (!found_factor) factor = found_legacy ? legacy : 1.0;
    if (!found_ctx) ctx = 8192;
    rope->llama3_factor = 0.0;
    rope->linear_factor = 0.0;
    rope->n_freq_factors = 0;
    if (!type || !strcmp(type, "linear")) {
        if (factor != 1.0) rope->linear_factor = factor;
    } else if (!strcmp(type, "llama3")) {
        if (factor != 1.0) {
            rope->llama3_factor = factor;
            rope->llama3_low_freq_factor = 1.0;
            rope->llama3_high_freq_factor = 4.0;
            rope->llama3_original_context = (int)ctx;
        }
    } else if (strcmp(type, "none") != 0) { /* none: never scaled, as in llama.cpp */
        return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: %s = \"%s\" is not supported (none, "
                          "linear, llama3)", TYPE, type);
    }
    const serve_gguf_tensor *t;
    if (serve_gguf_find_tensor(g, "rope_freqs.weight", &t) != LAZYATTN_STATUS_OK)
        return LAZYATTN_STATUS_OK;
    if (rope->llama3_factor > 0.0)
        return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: rope_freqs.weight and %s = llama3 "
                          "would both scale RoPE", TYPE);
    if (t->n_elements != (uint64_t)rot / 2 || t->dims[0] != (uint64_t)rot / 2)
        return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: rope_freqs.weight has %llu elements, "
                          "the rotary dimension %d needs %d", (unsigned long long)t->n_elements,
                          rot, rot / 2);
    if ((st = serve_gguf_read_f32(g, t, rope->freq_factors, (uint64_t)rot / 2))) return st;
    for (int i = 0; i < rot / 2; i++)
        if (!(rope->freq_factors[i] > 0.0f && rope->freq_factors[i] <= 1e6f))
            return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: rope_freqs.weight[%d] = %g is not "
                              "in (0, 1e6]", i, (double)rope->freq_factors[i]);
    rope->n_freq_factors = rot / 2;
    return LAZYATTN_STATUS_OK;
}

int serve_gguf_model_config(const serve_gguf *g, serve_model_config *cfg) {
    if (!g || !cfg) return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_gguf_model_config");
    const char *arch;
    int st = serve_gguf_get_string(g, "general.architecture", &arch);
    if (st) return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: no general.architecture");
    if (strcmp(arch, "llama") != 0)
        return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: architecture \"%s\", only llama", arch);
    if ((st = gguf_check_llama_keys(g))) return st;
    serve_model_config c = *cfg;
    if ((st = gguf_need_int(g, "llama.block_count", 1, 1024, &c.n_layers)) ||
        (st = gguf_need_int(g, "llama.embedding_length", 8, 65536, &c.hidden)) ||
        (st = gguf_need_int(g, "llama.feed_forward_length", 1, 1 << 20, &c.ffn)) ||
        (st = gguf_need_int(g, "llama.attention.head_count", 1, 4096, &c.n_heads)))
        return st;
    int found;
    int64_t v;
    if ((st = gguf_opt_int(g, "llama.attention.head_count_kv", 1, c.n_heads, &found, &v)))
        return st;
    c.n_kv_heads = found ? (int)v : c.n_heads;
    if (c.n_heads % c.n_kv_heads != 0)
        return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: llama.attention.head_count %d is not a "
                          "multiple of llama.attention.head_count_kv %d", c.n_heads, c.n_kv_heads);
    /* head dim: llama.attention.key_length (= value_length: the engine has
     * one head dim), else embedding_length / head_count as in llama.cpp */
    int64_t kl, vl;
    int found_k, found_v;
    if ((st = gguf_opt_int(g, "llama.attention.key_length", 1, 1 << 20, &found_k, &kl)) ||
        (st = gguf_opt_int(g, "llama.attention.value_length", 1, 1 << 20, &found_v, &vl)))
        return st;
    if (!found_k && c.hidden % c.n_heads != 0)
        return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: llama.embedding_length %d not a multiple "
                          "of llama.attention.head_count %d (and no llama.attention.key_length)",
                          c.hidden, c.n_heads);
    if (!found_k) kl = c.hidden / c.n_heads;
    if (!found_v) vl = kl;
    if (kl != vl)
        return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: llama.attention.key_length %lld != "
                          "llama.attention.value_length %lld: one head dim only",
                          (long long)kl, (long long)vl);
    c.head_dim = (int)kl;
    if (c.head_dim < 16 || c.head_dim > 256 || c.head_dim % 8)
        return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: head dim %d (%s): lazyattn needs "
                          "16..256, a multiple of 8", c.head_dim,
                          found_k ? "llama.attention.key_length"
                                  : "llama.embedding_length / llama.attention.head_count");
    double f;
    c.rope.style = LAZYATTN_ROPE_GPTJ; /* llama.cpp's converter permutes Q/K for pair (2i, 2i+1) */
    c.rope.theta = 10000.0;
    /* base: above 1 (frequencies must fall), at most 1e12 (beyond, every
     * rotation but the first is below float resolution) */
    if ((st = gguf_opt_float(g, "llama.rope.freq_base", 1.0, 1, 1e12, &found, &f))) return st;
    if (found) c.rope.theta = f;
    /* llama rotates the whole head (llama.cpp refuses another n_rot; the
     * converter's Q/K permutation pairs dims across the whole head) */
    c.rope.rotary_dim = 0;
    if ((st = gguf_opt_int(g, "llama.rope.dimension_count", 2, c.head_dim, &found, &v))) return st;
    if (found && v != c.head_dim)
        return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: llama.rope.dimension_count = %lld: "
                          "partial rotary is not supported (head dim %d)", (long long)v,
                          c.head_dim);
    if ((st = gguf_rope_scaling(g, c.head_dim, &c.rope))) return st;
    /* epsilon: positive (0 divides by zero on a zero row), at most 1 (larger
     * drowns the activations: all-equal outputs) */
    c.rms_eps = 1e-5f;
    if ((st = gguf_opt_float(g, "llama.attention.layer_norm_rms_epsilon", 0.0, 1, 1.0, &found, &f)))
        return st;
    if (found) {
        if ((float)f == 0.0f)
            return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: llama.attention.layer_norm_rms_epsilon"
                              " = %g is zero in float", f);
        c.rms_eps = (float)f;
    }
    const serve_gguf_tensor *t;
    if ((st = serve_gguf_find_tensor(g, "token_embd.weight", &t)))
        return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: no token_embd.weight");
    if (t->n_dims != 2 || t->dims[0] != (uint64_t)c.hidden || t->dims[1] < 2 ||
        t->dims[1] > (1u << 22))
        return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: token_embd.weight has a bad shape");
    c.vocab = (int)t->dims[1];
    /* the vocabulary: llama.vocab_size, when present, must agree with the
     * embedding's rows (and output.weight's, checked with the tensors) */
    if ((st = gguf_opt_int(g, "llama.vocab_size", 1, 1 << 30, &found, &v))) return st;
    if (found && v != c.vocab)
        return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: llama.vocab_size = %lld but "
                          "token_embd.weight has %d rows", (long long)v, c.vocab);
    c.tied_embeddings = serve_gguf_find_tensor(g, "output.weight", &t) != LAZYATTN_STATUS_OK;
    if ((st = serve_model_config_check(&c))) {
        char detail[512];
        snprintf(detail, sizeof detail, "%s", serve_last_error());
        return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: unsupported shape: %s", detail);
    }
    if ((st = gguf_check_model_tensors(g, &c)) || (st = gguf_check_tensor_names(g, &c))) return st;
    *cfg = c;
    return LAZYATTN_STATUS_OK;
}
