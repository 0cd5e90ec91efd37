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

/* The work-groups' task lists of the persistent prefill (cl/nv/prefill_persistent.cl,
 * LZ_NV_PERSIST): the n = n_tiles * n_heads tasks of `order` (from
 * lz_prefill_order) given to `slots` work-groups as list scheduling with
 * cost[task / n_heads] would start them (the earliest free first, ties to
 * the lower slot). *lists (malloc'd, the caller frees it) holds *len =
 * (rounds + 1) * slots ints: lists[k * slots + s] the k-th task of slot s,
 * -1 after its last (rounds: the most tasks of a slot). INVALID_ARGUMENT
 * on bad sizes, OUT_OF_HOST_MEMORY. */
int lz_prefill_order_lists(const int *order, int n_tiles, int n_heads, const double *cost, int slots,
                           int **lists, int *len);

#endif
