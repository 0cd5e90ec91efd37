/* SPDX-License-Identifier: Apache-2.0 */
/* Two cmocka cases for tests/test_cmocka_run.py: argv[1] "skip" skips both,
 * "mixed" skips one and passes the other, "fail" skips one and fails the other. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

static const char *mode = "skip";

static void first(void **state) {
    (void)state;
    print_message("skipped on purpose\n");
    skip();
}

static void second(void **state) {
    (void)state;
    if (strcmp(mode, "fail") == 0) fail_msg("failed on purpose");
    if (strcmp(mode, "skip") == 0) skip();
}

int main(int argc, char **argv) {
    if (argc > 1) mode = argv[1];
    const struct CMUnitTest tests[] = {cmocka_unit_test(first), cmocka_unit_test(second)};
    return cmocka_run_group_tests_name("cmocka_skips", tests, NULL, NULL);
}
