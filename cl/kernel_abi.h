/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the host and every kernel must agree on, defined once: the error
 * bits the kernels record instead of touching memory out of range (decoded
 * by lazyattn_attention_check), the largest position, the RoPE style codes
 * and the position checks of a table entry. The kernels get this file
 * prepended (right after block_entry.h); lib/attention.c includes it and
 * asserts at build time that the values equal their public twins in
 * include/lazyattn.h (LAZYATTN_MAX_POSITION, lazyattn_rope_style).
 */
#ifndef LAZYATTN_KERNEL_ABI_H
#define LAZYATTN_KERNEL_ABI_H

/* Error bits, one per kind of skipped input: X(NAME, bit, what was skipped).
 * The kernels use the LZ_ERR_NAME constants; the host prints the text. */
#define LZ_ERR_LIST(X)                                                                   \
    X(BLOCK, 1, "block id outside the pool")                                             \
    X(LENGTH, 2, "valid length above the block size")                                    \
    X(POSITION, 4, "write or rotation position outside 0..2^24-1")                       \
    X(SLOT, 8, "write slot outside the pool")                                            \
    X(TABLE, 16,                                                                         \
      "sequence offsets outside the table or the queries, decreasing, or past "          \
      "max_entries / max_queries")                                                       \
    X(QUERY_POSITION, 32, "query position q_pos outside 0..2^24-1")                      \
    X(ENTRY_POSITION, 64,                                                                \
      "entry_pos (logical start) or stored start entry_pos - delta outside 0..2^24-1 "   \
      "over the entry's valid length")

#define LZ_ERR_X_ENUM(name, bit, what) LZ_ERR_##name = bit,
enum lz_err_bit { LZ_ERR_LIST(LZ_ERR_X_ENUM) };
#undef LZ_ERR_X_ENUM

/* Largest logical or stored position (LAZYATTN_MAX_POSITION). */
#define LZ_MAX_POSITION ((1 << 24) - 1)

/* RoPE styles (lazyattn_rope_style). */
#define LZ_ROPE_NONE 0
#define LZ_ROPE_NEOX 1
#define LZ_ROPE_GPTJ 2

/* A position in 0..LZ_MAX_POSITION. */
#define LZ_POSITION_OK(p) ((p) >= 0 && (p) <= LZ_MAX_POSITION)

/* A table entry with logical start pos0, delta (|delta| <= 2^24) and valid
 * length len (1..256): every logical position pos0 + j and every stored
 * position pos0 - delta + j (j < len) lies in 0..LZ_MAX_POSITION. pos0 is
 * bounded before pos0 - delta is formed, so nothing overflows. */
#define LZ_ENTRY_POSITIONS_OK(pos0, delta, len)                                          \
    ((pos0) >= 0 && (pos0) <= LZ_MAX_POSITION - ((len) - 1) && (pos0) - (delta) >= 0 &&  \
     (pos0) - (delta) <= LZ_MAX_POSITION - ((len) - 1))

/* One sequence's entries begin .. end - 1 of a split decode are bad
 * (LZ_ERR_TABLE): negative, decreasing, past n_table, or more than its
 * splits hold (max_entries = entries a split x splits). */
#define LZ_SPLIT_OFFSETS_BAD(begin, end, n_table, max_entries) \
    ((begin) < 0 || (end) < (begin) || (end) > (n_table) || (end) - (begin) > (max_entries))

/* One sequence's offsets in a batched prefill are bad (LZ_ERR_TABLE): its
 * rows q_begin .. q_end - 1 or entries t_begin .. t_end - 1 negative,
 * decreasing or past n_queries / n_entries, or more than max_queries rows. */
#define LZ_BATCH_OFFSETS_BAD(q_begin, q_end, t_begin, t_end, n_queries, n_entries, max_queries)       \
    ((q_begin) < 0 || (q_end) < (q_begin) || (q_end) > (n_queries) ||                                 \
     (q_end) - (q_begin) > (max_queries) || (t_begin) < 0 || (t_end) < (t_begin) || (t_end) > (n_entries))

#endif
