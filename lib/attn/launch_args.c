/* SPDX-License-Identifier: Apache-2.0 */
/* Defaults of the launch arguments (lazyattn_prefill_args,
 * lazyattn_prefill_batch_args, lazyattn_decode_args): all zero. */
#include "internal.h"

#include <string.h>

void lazyattn_prefill_args_init(lazyattn_prefill_args *args) {
    if (args) memset(args, 0, sizeof *args);
}

void lazyattn_prefill_batch_args_init(lazyattn_prefill_batch_args *args) {
    if (args) memset(args, 0, sizeof *args);
}

void lazyattn_decode_args_init(lazyattn_decode_args *args) {
    if (args) memset(args, 0, sizeof *args);
}
