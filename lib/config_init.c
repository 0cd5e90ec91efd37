/* SPDX-License-Identifier: Apache-2.0 */
/* Defaults of the public config and args structs (their _init functions),
 * in one place. lazyattn_context_options_init and lazyattn_cache_config_init
 * live with their objects; lazyattn_attention_config_default in
 * rope_config.c. */
#include "internal.h"

#include <string.h>

void lazyattn_attention_config_init(lazyattn_attention_config *config) {
    lazyattn_attention_config_default(config);
}

void lazyattn_pool_config_init(lazyattn_pool_config *config) {
    if (!config) return;
    memset(config, 0, sizeof *config);
    config->n_layers = 32;
    config->n_kv_heads = 8;
    config->head_dim = 128;
    config->block_size = 16;
    config->dtype = LAZYATTN_DTYPE_F16;
    config->budget_bytes = (uint64_t)1 << 30;
    config->kv_layout = LAZYATTN_KV_LAYOUT_ROWS;
}

void lazyattn_prefill_args_init(lazyattn_prefill_args *args) {
    if (args) memset(args, 0, sizeof *args);
}

void lazyattn_prefill_batch_args_init(lazyattn_prefill_batch_args *args) {
    if (args) memset(args, 0, sizeof *args);
}

void lazyattn_decode_args_init(lazyattn_decode_args *args) {
    if (args) memset(args, 0, sizeof *args);
}

void lazyattn_request_desc_init(lazyattn_request_desc *desc) {
    if (desc) memset(desc, 0, sizeof *desc);
}

void lazyattn_reference_args_init(lazyattn_reference_args *args) {
    if (args) memset(args, 0, sizeof *args);
}

void lazyattn_workload_config_init(lazyattn_workload_config *config) {
    if (config) lazyattn_workload_config_preset("paper", config);
}
