/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Build-time helper: the programs the library precompiles to SPIR-V.
 *
 *   spirv_programs OUTDIR > manifest.tsv
 *
 * For every configuration of the supported set below it forms the program
 * with the library's own function (lz_portable_program, the one
 * lazyattn_attention_create calls) and its cache key with lz_program_key,
 * writes OUTDIR/<i>.cl (the embedded sources concatenated exactly as
 * clCreateProgramWithSource would see them) and prints "<i>\t<key>\t<options>".
 * tools/spirv_embed.py compiles each to SPIR-V and embeds it under the key,
 * so a change of sources or options can never leave a stale variant in use:
 * the key no longer matches and the program is built from source (the log
 * says so; LAZYATTN_PROGRAM=il turns that into an error).
 *
 * The supported set: head dim 64 and 128 (most open models), block size 16
 * and 32, every storage type, GQA group 4 (lazyattn_attention_config_default),
 * ROWS pages (its kv_layout: a TILED attention's programs carry
 * -DLZ_KV_TILED=1, a key no variant has, so they are built from source),
 * for each device profile below. The portable programs carry their tile
 * geometry as -D options, chosen per device (lib/attn/tuning.c: the device's row
 * of lib/attn/tuning_db.inc, else defaults from its local memory and work-group
 * limit), so a variant serves the devices whose choice gives the same
 * options. Other configurations and devices are built from source.
 */
#include "internal.h"
#include "attn/tuning.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The library's IL table, empty here: this program produces it. */
const lz_il_program lz_embedded_il[1] = {{"", NULL, 0}};
const int lz_n_embedded_il = 0;

static const int head_dims[] = {64, 128};
static const int block_sizes[] = {16, 32};
static const lazyattn_dtype dtypes[] = {LAZYATTN_DTYPE_F32, LAZYATTN_DTYPE_F16, LAZYATTN_DTYPE_BF16};
/* Devices that take SPIR-V: Intel's OpenCL CPU runtime (256 KiB of local
 * memory, work-groups of up to 8192), without a database row and with its
 * row. PoCL and NVIDIA's driver list no IL. */
static const lz_device_limits profiles[] = {
    {NULL, 262144, 8192},
    {"Intel(R) OpenCL / Intel(R) Xeon(R) Processor", 262144, 8192},
};

/* Keys already written: two profiles may choose the same geometry. */
static char *emitted[512];
static int n_emitted;

/* Writes the program as OUTDIR/<index>.cl and its manifest line, once per key. */
static int emit(const char *dir, int *index, const lz_program_spec *spec) {
    char *key = lz_program_key(spec->sources, spec->n_sources, spec->options);
    if (!key || strchr(key, '\t') || strchr(key, '\n')) {
        fprintf(stderr, "spirv_programs: no key, or a key with a tab or newline\n");
        free(key);
        return 1;
    }
    for (int i = 0; i < n_emitted; i++)
        if (!strcmp(emitted[i], key)) {
            free(key);
            return 0;
        }
    if (n_emitted == (int)(sizeof emitted / sizeof *emitted)) {
        fprintf(stderr, "spirv_programs: more than %d programs\n", n_emitted);
        free(key);
        return 1;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/%d.cl", dir, *index);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "spirv_programs: cannot write %s\n", path);
        free(key);
        return 1;
    }
    for (int i = 0; i < spec->n_sources; i++) {
        const char *text = lz_source_text(spec->sources[i]);
        if (!text) {
            fprintf(stderr, "spirv_programs: no embedded source \"%s\"\n", spec->sources[i]);
            fclose(f);
            free(key);
            return 1;
        }
        fputs(text, f);
    }
    if (fclose(f) != 0) {
        free(key);
        return 1;
    }
    printf("%d\t%s\t%s\n", (*index)++, key, spec->options);
    emitted[n_emitted++] = key;
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: spirv_programs OUTDIR > manifest.tsv\n");
        return 2;
    }
    int index = 0;
    for (size_t d = 0; d < sizeof head_dims / sizeof *head_dims; d++)
        for (size_t b = 0; b < sizeof block_sizes / sizeof *block_sizes; b++)
            for (size_t t = 0; t < sizeof dtypes / sizeof *dtypes; t++) {
                lazyattn_attention_config c;
                lazyattn_attention_config_default(&c);
                c.head_dim = head_dims[d];
                c.block_size = block_sizes[b];
                c.dtype = dtypes[t];
                for (size_t p = 0; p < sizeof profiles / sizeof *profiles; p++) {
                    lazyattn_kernel_tuning tune;
                    if (lz_tuning_choose_for(&profiles[p], &c, NULL, &tune) != LAZYATTN_STATUS_OK)
                        goto fail;
                    for (int which = 0; which < LZ_PORTABLE_PROGRAMS; which++) {
                        lz_program_spec spec;
                        if (lz_portable_program(&c, &tune, which, &spec) != LAZYATTN_STATUS_OK)
                            goto fail;
                        if (emit(argv[1], &index, &spec)) return 1;
                    }
                }
            }
    return fflush(stdout) == 0 ? 0 : 1;
fail:
    fprintf(stderr, "spirv_programs: %s\n", lazyattn_last_error());
    return 1;
}
