/* SPDX-License-Identifier: Apache-2.0 */
/* Projections through CLBlast SGEMM (f32: NVIDIA's OpenCL has no fp16).
 *
 * Written in CLBlast's column-major terms so that its indirect kernel
 * (GEMMK = 0) reads the weight in place: C'[out, rows] = Wt'[out, in] .
 * X'[in, rows] where ' is the column-major view of our row-major buffers.
 * Only the activations get a padded/transposed temporary, in a buffer the
 * model owns: CLBlast allocating and releasing temporaries itself makes
 * every call wait for the device on some drivers (NVIDIA), which turned an
 * 8B forward host-bound. */
#include "serve.h"

#include <clblast_c.h>

static int serve_clblast_status(CLBlastStatusCode st, const char *what, int rows, int out, int in) {
    int status = LAZYATTN_STATUS_OPENCL;
    if (st == CLBlastOpenCLOutOfResources || st == CLBlastTempBufferAllocFailure)
        status = LAZYATTN_STATUS_OUT_OF_DEVICE_MEMORY;
    if (st == CLBlastOpenCLOutOfHostMemory) status = LAZYATTN_STATUS_OUT_OF_HOST_MEMORY;
    return serve_fail(status, "%s %d x %d x %d: CLBlast status %d", what, rows, out, in, (int)st);
}

int serve_gemm(cl_command_queue queue, int rows, int out, int in, cl_mem a, size_t a_off,
               cl_mem w, cl_mem c, size_t c_off, float beta, cl_mem temp, cl_event *event) {
    if (rows <= 0 || out <= 0 || in <= 0 || !a || !w || !c)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_gemm: bad shape %d x %d x %d",
                          rows, out, in);
    CLBlastStatusCode st;
    if (temp)
        st = CLBlastSgemmWithTempBuffer(CLBlastLayoutColMajor, CLBlastTransposeNo,
                                        CLBlastTransposeNo, (size_t)out, (size_t)rows, (size_t)in,
                                        1.0f, w, 0, (size_t)out, a, a_off, (size_t)in, beta, c,
                                        c_off, (size_t)out, &queue, event, temp);
    else
        st = CLBlastSgemm(CLBlastLayoutColMajor, CLBlastTransposeNo, CLBlastTransposeNo,
                          (size_t)out, (size_t)rows, (size_t)in, 1.0f, w, 0, (size_t)out, a, a_off,
                          (size_t)in, beta, c, c_off, (size_t)out, &queue, event);
    return st == CLBlastSuccess ? LAZYATTN_STATUS_OK
                                : serve_clblast_status(st, "CLBlastSgemm", rows, out, in);
}

int serve_gemm_temp_size(cl_command_queue queue, int rows, int out, int in, size_t a_off,
                         size_t c_off, size_t *bytes) {
    size_t size = 0;
    CLBlastStatusCode st = CLBlastSGemmTempBufferSize(
        CLBlastLayoutColMajor, CLBlastTransposeNo, CLBlastTransposeNo, (size_t)out, (size_t)rows,
        (size_t)in, 0, (size_t)out, a_off, (size_t)in, c_off, (size_t)out, &queue, &size);
    if (st != CLBlastSuccess)
        return serve_clblast_status(st, "CLBlastSGemmTempBufferSize", rows, out, in);
    *bytes = size;
    return LAZYATTN_STATUS_OK;
}
