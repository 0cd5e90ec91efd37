/* SPDX-License-Identifier: Apache-2.0 */
/* The programs' option parser (cli_options.h): typed values, each checked
 * whole before anything is stored. */
#include "cli_options.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Longest list or enum word copied for splitting; longer is refused. */
#define CLI_MAX_TEXT 4096

static int cli_vfail(const char *prog, const char *option, const char *fmt, va_list ap) {
    fprintf(stderr, "%s: ", prog);
    if (option) fprintf(stderr, "%s: ", option);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (%s --help lists the options)\n", prog);
    return CLI_USAGE_ERROR;
}

int cli_fail(const char *prog, const char *option, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int r = cli_vfail(prog, option, fmt, ap);
    va_end(ap);
    return r;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* A decimal integer: optional sign, digits, nothing else. */
static int parse_integer(const char *prog, const char *opt, const char *s, long long *out) {
    const char *p = s;
    if (*p == '-' || *p == '+') p++;
    if (!is_digit(*p))
        return cli_fail(prog, opt, "\"%s\" is not an integer", s);
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*end) return cli_fail(prog, opt, "\"%s\" is not an integer (trailing \"%s\")", s, end);
    if (errno == ERANGE) return cli_fail(prog, opt, "%s does not fit a 64-bit integer", s);
    *out = v;
    return CLI_OK;
}

static int check_integer_range(const char *prog, const char *opt, long long v, double min,
                               double max) {
    if ((double)v < min || (double)v > max)
        return cli_fail(prog, opt, "%lld is outside %.0f..%.0f", v, min, max);
    return CLI_OK;
}

static int parse_int_in(const char *prog, const char *opt, const char *s, double min, double max,
                        long long *out) {
    int r = parse_integer(prog, opt, s, out);
    return r ? r : check_integer_range(prog, opt, *out, min, max);
}

/* Decimal or 0x hex, no sign (strtoull would wrap "-1"). */
static int parse_u64(const char *prog, const char *opt, const char *s, uint64_t *out) {
    if (!is_digit(*s)) return cli_fail(prog, opt, "\"%s\" is not an unsigned integer", s);
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (*end) return cli_fail(prog, opt, "\"%s\" is not an unsigned integer", s);
    if (errno == ERANGE) return cli_fail(prog, opt, "%s does not fit 64 bits", s);
    *out = (uint64_t)v;
    return CLI_OK;
}

/* A finite decimal number (digits, '.', exponent): no NaN, infinity or hex. */
static int parse_double(const char *prog, const char *opt, const char *s, double min, double max,
                        double *out) {
    const char *p = s;
    if (*p == '-' || *p == '+') p++;
    if (!is_digit(*p) && !(*p == '.' && is_digit(p[1])))
        return cli_fail(prog, opt, "\"%s\" is not a number", s);
    for (const char *q = p; *q; q++)
        if (*q == 'x' || *q == 'X') return cli_fail(prog, opt, "\"%s\" is not a decimal number", s);
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end) return cli_fail(prog, opt, "\"%s\" is not a number (trailing \"%s\")", s, end);
    if (!isfinite(v) || (errno == ERANGE && fabs(v) > 1.0))
        return cli_fail(prog, opt, "%s is out of range (finite numbers only)", s);
    if (v < min || v > max) return cli_fail(prog, opt, "%s is outside %g..%g", s, min, max);
    *out = v;
    return CLI_OK;
}

int cli_parse_size(const char *prog, const char *opt, const char *text, const char *token_unit,
                   uint64_t token_bytes, double min, double max, uint64_t *out) {
    /* the number: digits with at most one '.', no sign, exponent or hex */
    const char *p = text;
    int digits = 0, dots = 0;
    for (; is_digit(*p) || *p == '.'; p++) {
        if (*p == '.') dots++;
        else digits++;
    }
    if (!digits || dots > 1)
        return cli_fail(prog, opt, "\"%s\" is not a size (e.g. 512MiB, 4GiB, 1.5GiB, 4096)", text);
    if (p - text > 64) return cli_fail(prog, opt, "\"%s\" has too many digits", text);
    char number[72];
    memcpy(number, text, (size_t)(p - text));
    number[p - text] = 0;
    double v = strtod(number, NULL);
    double mul;
    if (!*p || !strcmp(p, "B")) mul = 1;
    else if (!strcmp(p, "K") || !strcmp(p, "KiB")) mul = 1024.0;
    else if (!strcmp(p, "M") || !strcmp(p, "MiB")) mul = 1024.0 * 1024;
    else if (!strcmp(p, "G") || !strcmp(p, "GiB")) mul = 1024.0 * 1024 * 1024;
    else if (!strcmp(p, "T") || !strcmp(p, "TiB")) mul = 1024.0 * 1024 * 1024 * 1024;
    else if (token_unit && !strcmp(p, token_unit)) mul = (double)token_bytes;
    else
        return cli_fail(prog, opt, "\"%s\": unknown unit \"%s\" (B, KiB, MiB, GiB, TiB%s%s)", text,
                        p, token_unit ? ", " : "", token_unit ? token_unit : "");
    double bytes = v * mul;
    /* both bounds are checked in double; max <= 2^63 keeps the cast defined */
    if (!isfinite(bytes) || bytes < min || bytes > max || bytes >= 9223372036854775808.0)
        return cli_fail(prog, opt, "%s (%.6g bytes) is outside %.0f..%.0f bytes", text, bytes, min,
                        max);
    *out = (uint64_t)(bytes + 0.5);
    return CLI_OK;
}

/* Splits text at commas into a writable copy; refuses empty items.
 * items: [CLI_MAX_TEXT / 2 + 1] pointers into buf. */
static int split_list(const char *prog, const char *opt, const char *text, char *buf,
                      const char **items, int max_items, int *n) {
    size_t len = strlen(text);
    if (len >= CLI_MAX_TEXT) return cli_fail(prog, opt, "list longer than %d characters", CLI_MAX_TEXT - 1);
    memcpy(buf, text, len + 1);
    *n = 0;
    char *start = buf;
    for (;;) {
        char *comma = strchr(start, ',');
        if (comma) *comma = 0;
        if (!*start) return cli_fail(prog, opt, "\"%s\" has an empty item", text);
        if (*n == max_items) return cli_fail(prog, opt, "\"%s\" has more than %d items", text, max_items);
        items[(*n)++] = start;
        if (!comma) break;
        start = comma + 1;
    }
    return CLI_OK;
}

int cli_parse_size_list(const char *prog, const char *opt, const char *text,
                        const char *token_unit, uint64_t token_bytes, double min, double max,
                        uint64_t *out, int max_items, int *count) {
    char buf[CLI_MAX_TEXT];
    const char *items[CLI_MAX_TEXT / 2 + 1];
    int n, r = split_list(prog, opt, text, buf, items, max_items, &n);
    if (r) return r;
    for (int i = 0; i < n; i++)
        if ((r = cli_parse_size(prog, opt, items[i], token_unit, token_bytes, min, max, &out[i])))
            return r;
    *count = n;
    return CLI_OK;
}

int cli_parse_int_list(const char *prog, const char *opt, const char *text, double min,
                       double max, int unique, int *out, int max_items, int *count) {
    if (min < -2147483648.0 || max > 2147483647.0)
        return cli_fail(prog, opt, "bad option table (int range)");
    char buf[CLI_MAX_TEXT];
    const char *items[CLI_MAX_TEXT / 2 + 1];
    int n, r = split_list(prog, opt, text, buf, items, max_items, &n);
    if (r) return r;
    for (int k = 0; k < n; k++) {
        long long v;
        if ((r = parse_int_in(prog, opt, items[k], min, max, &v))) return r;
        for (int j = 0; unique && j < k; j++)
            if (out[j] == (int)v) return cli_fail(prog, opt, "\"%s\" names %lld twice", text, v);
        out[k] = (int)v;
    }
    *count = n;
    return CLI_OK;
}

/* Word of an enum: choices' index, or parse_item's value. */
static int parse_enum_word(const char *prog, const cli_option *o, const char *word, int *out) {
    const char *listed = o->choices ? o->choices : "see --help";
    if (o->parse_item) {
        if (o->parse_item(word, out) == 0) return CLI_OK;
        return cli_fail(prog, o->name, "unknown value \"%s\" (%s)", word, listed);
    }
    const char *c = o->choices;
    size_t wl = strlen(word);
    for (int idx = 0; c && *c; idx++) {
        const char *bar = strchr(c, '|');
        size_t cl = bar ? (size_t)(bar - c) : strlen(c);
        if (cl == wl && !strncmp(c, word, wl)) {
            *out = idx;
            return CLI_OK;
        }
        if (!bar) break;
        c = bar + 1;
    }
    return cli_fail(prog, o->name, "unknown value \"%s\" (%s)", word, listed);
}

static int parse_range(const char *prog, const cli_option *o, const char *s, int out[2]) {
    char buf[64];
    if (strlen(s) >= sizeof buf) return cli_fail(prog, o->name, "\"%s\" is too long", s);
    snprintf(buf, sizeof buf, "%s", s);
    /* the separator: ':' or a '-' after the first character (a leading one is a sign) */
    char *sep = strchr(buf, ':');
    if (!sep && buf[0]) sep = strchr(buf + 1, '-');
    long long lo, hi;
    int r;
    if (sep) {
        *sep = 0;
        if ((r = parse_int_in(prog, o->name, buf, o->min, o->max, &lo)) ||
            (r = parse_int_in(prog, o->name, sep + 1, o->min, o->max, &hi)))
            return r;
    } else {
        if ((r = parse_int_in(prog, o->name, buf, o->min, o->max, &lo))) return r;
        hi = lo;
    }
    if (lo > hi) return cli_fail(prog, o->name, "range %s is empty (%lld > %lld)", s, lo, hi);
    out[0] = (int)lo;
    out[1] = (int)hi;
    return CLI_OK;
}

/* Parses value v of option o into its destination. */
static int parse_value(const char *prog, cli_option *o, const char *v) {
    long long i;
    int r;
    switch (o->type) {
    case CLI_FLAG:
        *(int *)o->dest = 1;
        return CLI_OK;
    case CLI_INT:
        if (o->min < -2147483648.0 || o->max > 2147483647.0)
            return cli_fail(prog, o->name, "bad option table (int range)");
        if ((r = parse_int_in(prog, o->name, v, o->min, o->max, &i))) return r;
        *(int *)o->dest = (int)i;
        return CLI_OK;
    case CLI_INT64:
        if ((r = parse_int_in(prog, o->name, v, o->min, o->max, &i))) return r;
        *(int64_t *)o->dest = (int64_t)i;
        return CLI_OK;
    case CLI_U64:
        return parse_u64(prog, o->name, v, (uint64_t *)o->dest);
    case CLI_DOUBLE:
        return parse_double(prog, o->name, v, o->min, o->max, (double *)o->dest);
    case CLI_SIZE:
        return cli_parse_size(prog, o->name, v, o->size_token_unit, 1, o->min, o->max,
                              (uint64_t *)o->dest);
    case CLI_SIZE_LIST:
        return cli_parse_size_list(prog, o->name, v, o->size_token_unit, 1, o->min, o->max,
                                   (uint64_t *)o->dest, o->max_items, o->count);
    case CLI_RANGE:
        return parse_range(prog, o, v, (int *)o->dest);
    case CLI_STRING:
        if (!*v && !o->allow_empty) return cli_fail(prog, o->name, "the value is empty");
        *(const char **)o->dest = v;
        return CLI_OK;
    case CLI_ENUM:
        return parse_enum_word(prog, o, v, (int *)o->dest);
    case CLI_INT_LIST:
        return cli_parse_int_list(prog, o->name, v, o->min, o->max, 1, (int *)o->dest, o->max_items,
                                  o->count);
    case CLI_ENUM_LIST: {
        char buf[CLI_MAX_TEXT];
        const char *items[CLI_MAX_TEXT / 2 + 1];
        int n, *dest = (int *)o->dest;
        if ((r = split_list(prog, o->name, v, buf, items, o->max_items, &n))) return r;
        for (int k = 0; k < n; k++) {
            if ((r = parse_enum_word(prog, o, items[k], &dest[k]))) return r;
            for (int j = 0; j < k; j++)
                if (dest[j] == dest[k])
                    return cli_fail(prog, o->name, "\"%s\" names %s twice", v, items[k]);
        }
        *o->count = n;
        return CLI_OK;
    }
    }
    return cli_fail(prog, o->name, "bad option table (type %d)", (int)o->type);
}

int cli_given(const cli_option *opts, int n, const char *name) {
    for (int k = 0; k < n; k++)
        if (!strcmp(opts[k].name, name)) return opts[k].given;
    return 0;
}

int cli_parse(const char *prog, const char *usage, cli_option *opts, int n, int argc,
              char **argv) {
    for (int k = 0; k < n; k++) opts[k].given = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage, stdout);
            return CLI_HELP;
        }
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-' || a[1] != '-' || !a[2])
            return cli_fail(prog, NULL, "unexpected argument \"%s\" (options start with --)", a);
        const char *eq = strchr(a, '=');
        size_t name_len = eq ? (size_t)(eq - a) : strlen(a);
        cli_option *o = NULL;
        for (int k = 0; k < n && !o; k++)
            if (strlen(opts[k].name) == name_len && !strncmp(opts[k].name, a, name_len))
                o = &opts[k];
        if (!o) return cli_fail(prog, NULL, "unknown option %.*s", (int)name_len, a);
        if (o->given) return cli_fail(prog, o->name, "given twice");
        o->given = 1;
        const char *v = NULL;
        if (o->type == CLI_FLAG) {
            if (eq) return cli_fail(prog, o->name, "takes no value");
        } else if (eq) {
            v = eq + 1;
        } else {
            if (i + 1 >= argc) return cli_fail(prog, o->name, "needs a value");
            v = argv[++i];
            if (v[0] == '-' && v[1] == '-')
                return cli_fail(prog, o->name, "needs a value (got option %s; write %s=VALUE "
                                "for a value starting with --)", v, o->name);
        }
        int r = parse_value(prog, o, v);
        if (r) return r;
    }
    return CLI_OK;
}
