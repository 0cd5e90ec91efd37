/* SPDX-License-Identifier: Apache-2.0 */
/* The dispatch order of the NVIDIA prefill's work-groups (prefill_order.c). */
#ifndef LZ_PREFILL_ORDER_H
#define LZ_PREFILL_ORDER_H

typedef enum {
    LZ_ORDER_AUTO = 0,     /* the one fewest heads at a time predicted within 1 % of the best */
    LZ_ORDER_HEADS = 1,    /* head by head, each from its last tile down */
    LZ_ORDER_LPT = 2,      /* the longest task first, over all heads (AUTO: or groups of heads) */
    LZ_ORDER_BALANCED = 3, /* the extra tasks of n = q * slots + r on the lightest slots */
} lz_order_policy;

/* order[k] = the task (tile * n_heads + head) the k-th work-group runs, for
 * tasks of cost[tile] (tiles 0 .. n_tiles - 1, any unit), started by list
 * scheduling on `slots` work-groups at once. Out (each may be NULL):
 * *chosen the policy used (AUTO resolved), *heads_at_once the heads whose
 * tasks it interleaves (1 for HEADS, n_heads for LPT over all and
 * BALANCED), *makespan the simulated end. INVALID_ARGUMENT on bad sizes,
 * OUT_OF_HOST_MEMORY. */
int lz_prefill_order(int n_tiles, int n_heads, const double *cost, int slots,
                     lz_order_policy policy, int *order, lz_order_policy *chosen,
                     int *heads_at_once, double *makespan);

#endif
