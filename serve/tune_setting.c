/* SPDX-License-Identifier: Apache-2.0 */
/* serve/'s own LAZYATTN_TUNE keys (serve.*, README "Environment"). */
#include "serve.h"

#include <stdlib.h>
#include <string.h>

int serve_tune_setting(const char *key) {
    const char *s = getenv("LAZYATTN_TUNE");
    const size_t kn = key ? strlen(key) : 0;
    int on = -1;
    while (kn && s && *s) {
        const char *comma = strchr(s, ',');
        const size_t n = comma ? (size_t)(comma - s) : strlen(s);
        if (n == kn + 2 && !strncmp(s, key, kn) && s[kn] == '=' &&
            (s[kn + 1] == '0' || s[kn + 1] == '1'))
            on = s[kn + 1] == '1';
        s = comma ? comma + 1 : s + n;
    }
    return on;
}
