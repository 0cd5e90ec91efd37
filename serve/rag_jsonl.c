/* SPDX-License-Identifier: Apache-2.0 */
/* lazyattn-rag's batch lines (rag_jsonl.h): a JSON reader for exactly the
 * object a line holds, and the string writer of its results. */
#include "rag_jsonl.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct json_in {
    const char *s;
    size_t n, i;
    char *err;
    size_t err_cap;
} json_in;

static int json_fail(json_in *in, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static int json_fail(json_in *in, const char *fmt, ...) {
    if (in->err && in->err_cap) {
        int k = snprintf(in->err, in->err_cap, "column %zu: ", in->i + 1);
        va_list ap;
        va_start(ap, fmt);
        if (k > 0 && (size_t)k < in->err_cap)
            vsnprintf(in->err + k, in->err_cap - (size_t)k, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static void skip_space(json_in *in) {
    while (in->i < in->n && (in->s[in->i] == ' ' || in->s[in->i] == '\t' ||
                             in->s[in->i] == '\r' || in->s[in->i] == '\n'))
        in->i++;
}

static int expect(json_in *in, char c) {
    skip_space(in);
    if (in->i >= in->n || in->s[in->i] != c) return json_fail(in, "expected '%c'", c);
    in->i++;
    return 0;
}

static int hex4(json_in *in, uint32_t *v) {
    *v = 0;
    if (in->n - in->i < 4) return json_fail(in, "a \\u escape needs 4 hex digits");
    for (int k = 0; k < 4; k++) {
        char c = in->s[in->i++];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return json_fail(in, "a \\u escape needs 4 hex digits");
        *v = *v * 16 + (uint32_t)d;
    }
    return 0;
}

static size_t put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* A string literal into *out (malloc'd, NUL-terminated; the decoded text is
 * never longer than the literal). */
static int read_string(json_in *in, char **out) {
    *out = NULL;
    if (expect(in, '"')) return -1;
    char *o = malloc(in->n - in->i + 1);
    if (!o) return json_fail(in, "out of memory");
    size_t k = 0;
    for (;;) {
        if (in->i >= in->n) {
            free(o);
            return json_fail(in, "unterminated string");
        }
        unsigned char c = (unsigned char)in->s[in->i++];
        if (c == '"') break;
        if (c < 0x20) {
            free(o);
            return json_fail(in, "a control character in a string (escape it)");
        }
        if (c != '\\') {
            o[k++] = (char)c;
            continue;
        }
        if (in->i >= in->n) {
            free(o);
            return json_fail(in, "unterminated escape");
        }
        char e = in->s[in->i++];
        const char *simple = strchr("\"\\/bfnrt", e);
        if (simple && e) {
            static const char map[] = "\"\\/\b\f\n\r\t";
            o[k++] = map[simple - "\"\\/bfnrt"];
            continue;
        }
        if (e != 'u') {
            free(o);
            return json_fail(in, "unknown escape \\%c", e);
        }
        uint32_t cp, lo;
        if (hex4(in, &cp)) {
            free(o);
            return -1;
        }
        if (cp >= 0xD800 && cp < 0xDC00) { /* a high surrogate: its low one must follow */
            if (in->n - in->i < 2 || in->s[in->i] != '\\' || in->s[in->i + 1] != 'u') {
                free(o);
                return json_fail(in, "a lone surrogate \\u%04X", (unsigned)cp);
            }
            in->i += 2;
            if (hex4(in, &lo) || lo < 0xDC00 || lo >= 0xE000) {
                free(o);
                return json_fail(in, "a lone surrogate \\u%04X", (unsigned)cp);
            }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        } else if (cp >= 0xDC00 && cp < 0xE000) {
            free(o);
            return json_fail(in, "a lone surrogate \\u%04X", (unsigned)cp);
        }
        if (cp == 0) {
            free(o);
            return json_fail(in, "\\u0000 in a string");
        }
        k += put_utf8(o + k, cp);
    }
    o[k] = 0;
    *out = o;
    return 0;
}

static int read_string_array(json_in *in, char ***items, int *n) {
    if (expect(in, '[')) return -1;
    skip_space(in);
    if (in->i < in->n && in->s[in->i] == ']') {
        in->i++;
        return 0;
    }
    for (;;) {
        char *v;
        if (read_string(in, &v)) return -1;
        char **grown = realloc(*items, (size_t)(*n + 1) * sizeof **items);
        if (!grown) {
            free(v);
            return json_fail(in, "out of memory");
        }
        *items = grown;
        (*items)[(*n)++] = v;
        skip_space(in);
        if (in->i < in->n && in->s[in->i] == ',') {
            in->i++;
            continue;
        }
        return expect(in, ']');
    }
}

void rag_batch_line_free(rag_batch_line *l) {
    if (!l) return;
    free(l->question);
    for (int i = 0; i < l->n_docs; i++) free(l->docs[i]);
    for (int i = 0; i < l->n_texts; i++) free(l->texts[i]);
    free(l->docs);
    free(l->texts);
    memset(l, 0, sizeof *l);
}

int rag_jsonl_parse(const char *line, size_t len, rag_batch_line *out, char *err,
                    size_t err_cap) {
    json_in in = {line, len, 0, err, err_cap};
    memset(out, 0, sizeof *out);
    int seen_docs = 0, seen_texts = 0, st = expect(&in, '{');
    skip_space(&in);
    int empty = !st && in.i < in.n && in.s[in.i] == '}';
    if (empty) in.i++;
    while (!st && !empty) {
        char *key = NULL;
        if ((st = read_string(&in, &key)) || (st = expect(&in, ':'))) {
            free(key);
            break;
        }
        skip_space(&in);
        if (!strcmp(key, "question") && !out->question) {
            st = read_string(&in, &out->question);
        } else if (!strcmp(key, "docs") && !seen_docs) {
            seen_docs = 1;
            st = read_string_array(&in, &out->docs, &out->n_docs);
        } else if (!strcmp(key, "texts") && !seen_texts) {
            seen_texts = 1;
            st = read_string_array(&in, &out->texts, &out->n_texts);
        } else {
            st = json_fail(&in, "key \"%s\" %s (question, docs, texts)", key,
                           strcmp(key, "question") && strcmp(key, "docs") && strcmp(key, "texts")
                               ? "unknown"
                               : "repeated");
        }
        free(key);
        if (st) break;
        skip_space(&in);
        if (in.i < in.n && in.s[in.i] == ',') {
            in.i++;
            continue;
        }
        st = expect(&in, '}');
        break;
    }
    skip_space(&in);
    if (!st && in.i < in.n) st = json_fail(&in, "bytes after the object");
    if (!st && (!out->question || !out->question[0]))
        st = json_fail(&in, "\"question\" (a non-empty string) is needed");
    if (st) rag_batch_line_free(out);
    return st;
}

/* Bytes of the valid UTF-8 character at s[0..n), 0 if none starts there. */
static size_t utf8_length(const unsigned char *s, size_t n) {
    size_t k = s[0] < 0x80 ? 1 : (s[0] >> 5) == 6 ? 2 : (s[0] >> 4) == 14 ? 3 : (s[0] >> 3) == 30 ? 4 : 0;
    if (k == 0 || k > n) return 0;
    for (size_t j = 1; j < k; j++)
        if ((s[j] & 0xC0) != 0x80) return 0;
    uint32_t cp = k == 1 ? s[0] : k == 2 ? s[0] & 0x1Fu : k == 3 ? s[0] & 0x0Fu : s[0] & 0x07u;
    for (size_t j = 1; j < k; j++) cp = cp << 6 | (s[j] & 0x3Fu);
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[k] || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) return 0;
    return k;
}

int rag_json_write_string(FILE *f, const char *s, size_t n) {
    if (fputc('"', f) == EOF) return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        int r;
        size_t k = c >= 0x80 ? utf8_length((const unsigned char *)s + i, n - i) : 1;
        if (k == 0) { /* not UTF-8: U+FFFD, as a JSON reader expects text */
            if (fputs("\\ufffd", f) < 0) return -1;
            continue;
        }
        if (k > 1) {
            if (fwrite(s + i, 1, k, f) != k) return -1;
            i += k - 1;
            continue;
        }
        if (c == '"' || c == '\\') r = fprintf(f, "\\%c", c);
        else if (c == '\n') r = fputs("\\n", f);
        else if (c == '\t') r = fputs("\\t", f);
        else if (c == '\r') r = fputs("\\r", f);
        else if (c < 0x20 || c == 0x7F) r = fprintf(f, "\\u%04x", c);
        else r = fputc(c, f) == EOF ? -1 : 0;
        if (r < 0) return -1;
    }
    return fputc('"', f) == EOF ? -1 : 0;
}
