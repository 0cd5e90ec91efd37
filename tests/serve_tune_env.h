/* SPDX-License-Identifier: Apache-2.0 */
/* tune_env_set(orig, setting): LAZYATTN_TUNE as the run started (orig,
 * NULL when unset) with one key=value after it (the last setting of a key
 * wins), for the tests whose kernels read it at create; tune_env_restore
 * puts orig back. Include after cmocka.h. */
#ifndef LAZYATTN_TESTS_SERVE_TUNE_ENV_H
#define LAZYATTN_TESTS_SERVE_TUNE_ENV_H

#include <stdio.h>
#include <stdlib.h>

static inline void tune_env_set(const char *orig, const char *setting) {
    char v[512];
    int n = snprintf(v, sizeof v, "%s%s%s", orig ? orig : "", orig && *orig ? "," : "", setting);
    assert_true(n > 0 && (size_t)n < sizeof v);
    assert_int_equal(setenv("LAZYATTN_TUNE", v, 1), 0);
}

static inline void tune_env_restore(const char *orig) {
    if (orig) {
        assert_int_equal(setenv("LAZYATTN_TUNE", orig, 1), 0);
    } else {
        assert_int_equal(unsetenv("LAZYATTN_TUNE"), 0);
    }
}

#endif
