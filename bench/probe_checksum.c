/* SPDX-License-Identifier: Apache-2.0 */
/* The export format's payload checksum (lz_kv_checksum, lib/doc_export.c)
 * in GB/s on one core: the median of --reps passes over --size bytes of
 * seeded random data (never zeros), after one untimed pass. A tier load
 * checks every byte it imports on the serving thread: at 10 GB/s a
 * 256 MiB document (2048 tokens of the 8B shape) costs ~27 ms. */
#include "cache/cache_internal.h" /* lz_kv_checksum */
#include "bench_util.h"
#include "cli_options.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    uint64_t size = 256ull << 20;
    int reps = 9;
    cli_option opts[] = {
        {.name = "--size", .type = CLI_SIZE, .dest = &size, .min = 1, .max = 4.0 * (1ull << 30)},
        {.name = "--reps", .type = CLI_INT, .dest = &reps, .min = 1, .max = 1000},
    };
    const char *usage = "usage: probe_checksum [--size BYTES (default 256MiB, at most 4GiB)] "
                        "[--reps N (default 9)]\n"
                        "Prints the export payload checksum's speed on one core, GB/s (median).\n";
    int r = cli_parse("probe_checksum", usage, opts, 2, argc, argv);
    if (r) return r == CLI_HELP ? 0 : 2;
    uint8_t *p = malloc((size_t)size);
    double *t = malloc((size_t)reps * sizeof *t);
    if (!p || !t) {
        fprintf(stderr, "probe_checksum: out of host memory for %llu bytes\n", (unsigned long long)size);
        free(p);
        free(t);
        return 1;
    }
    uint64_t s = 0x5EEDull;
    for (uint64_t i = 0; i < size; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (uint8_t)(s >> 56);
    }
    volatile uint64_t sink = lz_kv_checksum(p, (size_t)size);
    for (int i = 0; i < reps; i++) {
        double t0 = bench_seconds();
        sink ^= lz_kv_checksum(p, (size_t)size);
        t[i] = bench_seconds() - t0;
    }
    qsort(t, (size_t)reps, sizeof *t, bench_cmp_double);
    printf("payload checksum: %.2f GB/s (median of %d over %llu bytes; best %.2f)\n",
           (double)size / t[reps / 2] / 1e9, reps, (unsigned long long)size, (double)size / t[0] / 1e9);
    (void)sink;
    free(p);
    free(t);
    return 0;
}
