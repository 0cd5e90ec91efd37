/* SPDX-License-Identifier: Apache-2.0 */
/* Lists every OpenCL device with the global index that LAZYATTN_DEVICE=#N,
 * LAZYATTN_DEVICE_INDEX=N and lazyattn_context_options.device_index take,
 * and the device the default choice picks. Usage: list_devices */
#include "cli_options.h"
#include "lazyattn.h"

#include <stdio.h>

static const char *kind_name(lazyattn_device_kind k) {
    return k == LAZYATTN_DEVICE_GPU ? "GPU" : k == LAZYATTN_DEVICE_CPU ? "CPU" : "other";
}

static const char usage_text[] =
    "usage: list_devices\n"
    "Lists every OpenCL device with its global index (LAZYATTN_DEVICE=#N or\n"
    "LAZYATTN_DEVICE_INDEX=N choose it) and the device the default choice takes. No options.\n"
    "Exit status: 0 listed, 1 no OpenCL platform or device, 2 a bad command line.\n";

int main(int argc, char **argv) {
    int r = cli_parse("list_devices", usage_text, NULL, 0, argc, argv);
    if (r) return r == CLI_HELP ? 0 : 2;
    int n = 0;
    int st = lazyattn_device_count(&n);
    if (st) {
        fprintf(stderr, "list_devices: %s (%s)\n", lazyattn_status_string(st), lazyattn_last_error());
        return 1;
    }
    printf("%d OpenCL device%s\n", n, n == 1 ? "" : "s");
    for (int i = 0; i < n; i++) {
        lazyattn_device_info d;
        st = lazyattn_device_get_info(i, &d);
        if (st) {
            fprintf(stderr, "list_devices: device #%d: %s\n", i, lazyattn_last_error());
            return 1;
        }
        printf("#%d  %-5s %8.1f GiB %4d units  %s / %s (%s)\n", d.index, kind_name(d.kind),
               d.global_memory / 1073741824.0, d.compute_units, d.platform, d.name, d.vendor);
    }
    lazyattn_context *ctx;
    st = lazyattn_context_create(NULL, &ctx);
    if (st) {
        printf("default choice: none (%s)\n", lazyattn_last_error());
        return n ? 1 : 0;
    }
    printf("default choice (with this environment): %s\n", lazyattn_context_device_name(ctx));
    lazyattn_context_destroy(ctx);
    return 0;
}
