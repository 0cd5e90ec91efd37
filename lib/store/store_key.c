/* SPDX-License-Identifier: Apache-2.0 */
/* A document's key in a store, as text: "<model_id>-<digest>" (the file
 * name in a directory store, the Redis key). Shared by the built-in stores;
 * below the store wrapper, which calls them. */
#include "store/store_internal.h"

#include <inttypes.h>
#include <stdio.h>

void lz_store_key_text(lazyattn_doc_key key, char out[LZ_STORE_KEY_TEXT]) {
    static const char hex[] = "0123456789abcdef";
    snprintf(out, LZ_STORE_KEY_TEXT, "%016" PRIx64 "-", key.model_id);
    for (int i = 0; i < 32; i++) {
        out[17 + 2 * i] = hex[key.digest[i] >> 4];
        out[18 + 2 * i] = hex[key.digest[i] & 15];
    }
    out[LZ_STORE_KEY_TEXT - 1] = '\0';
}
