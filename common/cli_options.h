/* SPDX-License-Identifier: Apache-2.0 */
/* Command-line options of the example, serve and bench programs: one table
 * of typed options per program, parsed with range checks. An internal
 * static library (common/meson.build), not part of lazyattn's API.
 *
 * Every value is checked whole: trailing garbage, NaN, infinities,
 * overflow, values outside the option's range, empty list items, repeated
 * list items, unknown or repeated options and missing values are refused
 * with one line on stderr that names the option ("hitratio: --docs: ...").
 * Options take their value as the next argument or after '='
 * (--docs 100, --docs=100); a value may not start with "--" unless given
 * with '='. Positional arguments are refused.
 *
 * Exit codes of the programs: 0 success, 1 the run could not do what was
 * asked (a failure, a check that failed, nothing completed), 2 a bad
 * command line (CLI_USAGE_ERROR). */
#ifndef LAZYATTN_CLI_OPTIONS_H
#define LAZYATTN_CLI_OPTIONS_H

#include <stdint.h>

typedef enum cli_type {
    CLI_FLAG,      /* no value; dest: int, set to 1 */
    CLI_INT,       /* dest: int, in [min, max] */
    CLI_INT64,     /* dest: int64_t, in [min, max] (bounds exact up to 2^53) */
    CLI_U64,       /* dest: uint64_t, decimal or 0x hex, any value (seeds) */
    CLI_DOUBLE,    /* dest: double, finite, in [min, max] */
    CLI_SIZE,      /* dest: uint64_t bytes, "4GiB", "1.5MiB", "512"; in [min, max] */
    CLI_SIZE_LIST, /* dest: uint64_t[max_items], comma separated sizes; *count items */
    CLI_RANGE,     /* dest: int[2], "A-B", "A:B" or "A" (= A-A), min <= A <= B <= max */
    CLI_STRING,    /* dest: const char *, non-empty unless allow_empty */
    CLI_ENUM,      /* dest: int, index of the value in choices, or parse_item's result */
    CLI_ENUM_LIST, /* dest: int[max_items], comma separated, no repeats; *count items */
    CLI_INT_LIST   /* dest: int[max_items], comma separated integers in [min, max], no
                      repeats; *count items */
} cli_type;

/* Maps one enum word to a value (0: known). For enums with aliases. */
typedef int (*cli_enum_parser)(const char *word, int *value);

typedef struct cli_option {
    const char *name;      /* "--docs" */
    cli_type type;
    void *dest;            /* written only when the option is given */
    double min, max;       /* numbers, sizes (bytes) and both ends of a range */
    const char *choices;   /* enums: "f16|bf16|f32" (also what messages list) */
    cli_enum_parser parse_item; /* enums: used instead of choices' indices when set */
    int max_items;         /* lists: capacity of dest */
    int *count;            /* lists: number of items parsed */
    int allow_empty;       /* strings: "" is a value (e.g. "no file") */
    const char *size_token_unit; /* sizes: an extra unit name ("tok"), 1 byte at parse time */
    int given;             /* set by cli_parse: the option was on the command line */
} cli_option;

enum { CLI_OK = 0, CLI_HELP = 1, CLI_USAGE_ERROR = 2 };

/* Parses argv[1..argc) against opts[0..n). --help / -h prints usage on
 * stdout and returns CLI_HELP; a bad command line prints the reason on
 * stderr and returns CLI_USAGE_ERROR. May be called again on the same
 * table (e.g. once to find a preset, once more to override it). */
int cli_parse(const char *prog, const char *usage, cli_option *opts, int n, int argc,
              char **argv);

/* Whether option name was on the command line of the last cli_parse. */
int cli_given(const cli_option *opts, int n, const char *name);

/* Prints "prog: option: message" on stderr and returns CLI_USAGE_ERROR
 * (option may be NULL), for checks across options after cli_parse. */
int cli_fail(const char *prog, const char *option, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* One size ("4GiB", "300KiB", "1.5G", "123", "8192tok" when token_unit is
 * "tok": token_bytes bytes each): units B, K/KiB, M/MiB, G/GiB, T/TiB
 * (powers of 1024). Range [min, max] in bytes; a fraction is rounded to the
 * nearest byte. Returns CLI_OK or prints the reason and returns
 * CLI_USAGE_ERROR. */
int cli_parse_size(const char *prog, const char *option, const char *text,
                   const char *token_unit, uint64_t token_bytes, double min, double max,
                   uint64_t *out);
/* A comma separated list of integers in [min, max] (each as CLI_INT takes
 * it: decimal, nothing around it) into out[0..max_items), *count items;
 * unique: a repeated value is refused. For lists inside other values (e.g.
 * one item of a ';' separated option); options of their own use
 * CLI_INT_LIST. */
int cli_parse_int_list(const char *prog, const char *option, const char *text, double min,
                       double max, int unique, int *out, int max_items, int *count);
/* A comma separated list of sizes into out[0..max_items), *count items. */
int cli_parse_size_list(const char *prog, const char *option, const char *text,
                        const char *token_unit, uint64_t token_bytes, double min, double max,
                        uint64_t *out, int max_items, int *count);

#endif
