/* SPDX-License-Identifier: Apache-2.0 */
/* common/cli_options.c: each option type parsed from good and bad
 * command lines, values compared with hand-computed ones; a refused
 * command line never writes a value the program would then use silently
 * (its status is CLI_USAGE_ERROR and the programs exit). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "cli_options.h"

typedef struct values {
    int flag, i, range[2], e, list[3], n_list, ints[3], n_ints;
    int64_t i64;
    uint64_t u, size, sizes[3];
    int n_sizes;
    double d;
    const char *str;
} values;

static int word_upper(const char *w, int *v) {
    if (!strcmp(w, "ONE") || !strcmp(w, "one")) return *v = 1, 0;
    if (!strcmp(w, "TWO")) return *v = 2, 0;
    return -1;
}

/* Parses the words of line (space separated, at most 16) into *v. */
static int parse(const char *line, values *v) {
    static char buf[512];
    char *argv[18] = {"prog"};
    int argc = 1;
    snprintf(buf, sizeof buf, "%s", line);
    for (char *t = strtok(buf, " "); t && argc < 17; t = strtok(NULL, " ")) argv[argc++] = t;
    memset(v, 0, sizeof *v);
    cli_option opts[] = {
        {.name = "--flag", .type = CLI_FLAG, .dest = &v->flag},
        {.name = "--int", .type = CLI_INT, .dest = &v->i, .min = -5, .max = 100},
        {.name = "--i64", .type = CLI_INT64, .dest = &v->i64, .min = 0, .max = 1e15},
        {.name = "--u64", .type = CLI_U64, .dest = &v->u},
        {.name = "--double", .type = CLI_DOUBLE, .dest = &v->d, .min = 1e-3, .max = 1e6},
        {.name = "--size", .type = CLI_SIZE, .dest = &v->size, .min = 1, .max = 1099511627776.0,
         .size_token_unit = "tok"},
        {.name = "--sizes", .type = CLI_SIZE_LIST, .dest = v->sizes, .min = 1, .max = 1e12,
         .max_items = 3, .count = &v->n_sizes},
        {.name = "--range", .type = CLI_RANGE, .dest = v->range, .min = 0, .max = 1000},
        {.name = "--str", .type = CLI_STRING, .dest = &v->str},
        {.name = "--enum", .type = CLI_ENUM, .dest = &v->e, .choices = "a|bb|c"},
        {.name = "--list", .type = CLI_ENUM_LIST, .dest = v->list, .choices = "ONE|TWO",
         .parse_item = word_upper, .max_items = 3, .count = &v->n_list},
        {.name = "--ints", .type = CLI_INT_LIST, .dest = v->ints, .min = -3, .max = 256,
         .max_items = 3, .count = &v->n_ints},
    };
    return cli_parse("prog", "usage: prog\n", opts, (int)(sizeof opts / sizeof opts[0]), argc,
                     argv);
}

static void test_good_values(void **state) {
    (void)state;
    values v;
    assert_int_equal(parse("", &v), CLI_OK);
    assert_int_equal(parse("--flag --int -5 --i64 1000000000000000 --u64 0x10", &v), CLI_OK);
    assert_int_equal(v.flag, 1);
    assert_int_equal(v.i, -5);
    assert_true(v.i64 == 1000000000000000LL);
    assert_true(v.u == 16);
    assert_int_equal(parse("--u64 18446744073709551615 --int=100", &v), CLI_OK);
    assert_true(v.u == UINT64_MAX);
    assert_int_equal(v.i, 100);
    assert_int_equal(parse("--double 1e-3", &v), CLI_OK);
    assert_true(v.d == 1e-3);
    assert_int_equal(parse("--double=.5", &v), CLI_OK);
    assert_true(v.d == 0.5);
    /* sizes: powers of 1024, fractions rounded to the nearest byte */
    assert_int_equal(parse("--size 1.5GiB", &v), CLI_OK);
    assert_true(v.size == 1610612736ull);
    assert_int_equal(parse("--size 4096", &v), CLI_OK);
    assert_true(v.size == 4096);
    assert_int_equal(parse("--size 3K", &v), CLI_OK);
    assert_true(v.size == 3072);
    assert_int_equal(parse("--size 1TiB", &v), CLI_OK);
    assert_true(v.size == 1099511627776ull);
    assert_int_equal(parse("--size 0.1KiB", &v), CLI_OK);
    assert_true(v.size == 102); /* 102.4 */
    assert_int_equal(parse("--size 7tok", &v), CLI_OK); /* a token is 1 byte at parse time */
    assert_true(v.size == 7);
    assert_int_equal(parse("--sizes 1MiB,2,3B", &v), CLI_OK);
    assert_int_equal(v.n_sizes, 3);
    assert_true(v.sizes[0] == 1048576 && v.sizes[1] == 2 && v.sizes[2] == 3);
    assert_int_equal(parse("--range 7", &v), CLI_OK);
    assert_true(v.range[0] == 7 && v.range[1] == 7);
    assert_int_equal(parse("--range 3-1000", &v), CLI_OK);
    assert_true(v.range[0] == 3 && v.range[1] == 1000);
    assert_int_equal(parse("--range 0:0", &v), CLI_OK);
    assert_true(v.range[0] == 0 && v.range[1] == 0);
    assert_int_equal(parse("--enum c --str x", &v), CLI_OK);
    assert_int_equal(v.e, 2);
    assert_string_equal(v.str, "x");
    assert_int_equal(parse("--list TWO,one", &v), CLI_OK);
    assert_int_equal(v.n_list, 2);
    assert_true(v.list[0] == 2 && v.list[1] == 1);
    assert_int_equal(parse("--ints 256,-3,0", &v), CLI_OK);
    assert_int_equal(v.n_ints, 3);
    assert_true(v.ints[0] == 256 && v.ints[1] == -3 && v.ints[2] == 0);
    assert_int_equal(parse("--ints 7", &v), CLI_OK);
    assert_true(v.n_ints == 1 && v.ints[0] == 7);
    /* the function form, repeats allowed or not */
    int out[4], n = 0;
    assert_int_equal(cli_parse_int_list("prog", "--x", "1,1,2", 0, 9, 0, out, 4, &n), CLI_OK);
    assert_true(n == 3 && out[0] == 1 && out[1] == 1 && out[2] == 2);
    assert_int_equal(cli_parse_int_list("prog", "--x", "1,1", 0, 9, 1, out, 4, &n), CLI_USAGE_ERROR);
    assert_int_equal(cli_parse_int_list("prog", "--x", "1", 0, 3e9, 0, out, 4, &n), CLI_USAGE_ERROR);
    assert_int_equal(parse("--str=--x", &v), CLI_OK); /* a value starting with -- needs '=' */
    assert_string_equal(v.str, "--x");
    assert_int_equal(parse("--int 3 --help", &v), CLI_HELP);
    assert_int_equal(parse("-h", &v), CLI_HELP);
}

static void test_bad_values(void **state) {
    (void)state;
    static const char *const bad[] = {
        /* integers */
        "--int", "--int 101", "--int -6", "--int 5x", "--int x", "--int 1e2", "--int 0x10",
        "--int=", "--int 99999999999999999999", "--int 1 --int 2", "--i64 -1", "--i64 1000000000000001",
        /* unsigned */
        "--u64 -1", "--u64 18446744073709551616", "--u64 12q", "--u64 +1",
        /* doubles */
        "--double nan", "--double inf", "--double -inf", "--double 1e400", "--double 0x1p3",
        "--double 1e-4", "--double 1000001", "--double 1.0.0", "--double 1e", "--double .",
        /* sizes */
        "--size nan", "--size inf", "--size 1e30", "--size -1", "--size 0", "--size 1.5.0GiB",
        "--size GiB", "--size 1GB", "--size 1kib", "--size 1025GiB", "--size 1GiB2",
        "--size 99999999999999999999999999999999999999999999999999999999999999999999999",
        "--sizes ,", "--sizes 1,,2", "--sizes 1,", "--sizes ,1", "--sizes 1,2,3,4",
        /* ranges */
        "--range 5-2", "--range -1", "--range 1-1001", "--range 1:", "--range :1", "--range 1-2-3",
        /* strings, enums */
        "--str", "--str --flag", "--enum d", "--enum A", "--enum", "--enum a|bb", "--list one,ONE",
        "--list one,,TWO", "--list three",
        /* integer lists */
        "--ints", "--ints ,", "--ints 1,,2", "--ints 1,", "--ints ,1", "--ints 1,2,3,4", "--ints 1,1",
        "--ints 257", "--ints -4", "--ints 1,x", "--ints 0x10", "--ints 1.0", "--ints=", "--ints 1,+",
        /* the command line itself */
        "--flag=1", "--flag --flag", "--bogus", "-x", "word", "--", "--str=a extra",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        values v;
        int r = parse(bad[i], &v);
        if (r != CLI_USAGE_ERROR) fail_msg("\"%s\": status %d, want a usage error", bad[i], r);
    }
    /* "--str=" is an empty value: refused unless the option allows it */
    values v;
    assert_int_equal(parse("--str=", &v), CLI_USAGE_ERROR);
}

/* A second parse of the same table starts afresh (programs parse twice:
 * once for a preset, once to override it). */
static void test_parse_twice(void **state) {
    (void)state;
    int x = 0, y = 0;
    cli_option opts[] = {{.name = "--x", .type = CLI_INT, .dest = &x, .min = 0, .max = 9},
                         {.name = "--y", .type = CLI_FLAG, .dest = &y}};
    char *argv[] = {"prog", "--x", "4"};
    for (int k = 0; k < 2; k++) {
        assert_int_equal(cli_parse("prog", "usage\n", opts, 2, 3, argv), CLI_OK);
        assert_int_equal(x, 4);
        assert_int_equal(cli_given(opts, 2, "--x"), 1);
        assert_int_equal(cli_given(opts, 2, "--y"), 0);
        assert_int_equal(cli_given(opts, 2, "--z"), 0);
    }
    uint64_t s[2];
    int n = 0;
    assert_int_equal(cli_parse_size_list("prog", "--b", "3tok,1KiB", "tok", 4096, 1, 1e9, s, 2, &n),
                     CLI_OK);
    assert_int_equal(n, 2);
    assert_true(s[0] == 12288 && s[1] == 1024);
    assert_int_equal(cli_parse_size("prog", "--b", "1e3tok", "tok", 4096, 1, 1e9, s),
                     CLI_USAGE_ERROR);
    assert_int_equal(cli_parse_size("prog", "--b", "300000tok", "tok", 4096, 1, 1e9, s),
                     CLI_USAGE_ERROR); /* 1.2e9 bytes */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_values),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_parse_twice),
    };
    return cmocka_run_group_tests_name("cli_options", tests, NULL, NULL);
}
