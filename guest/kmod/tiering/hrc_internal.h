/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Internal helpers of the range classifier core: exact integer density
 * comparisons and the shared hotness order.  Not part of the API.
 */
#ifndef _TIERING_HRC_INTERNAL_H
#define _TIERING_HRC_INTERNAL_H

#include "range_classifier.h"

/* Set in struct hrc_range::flags during hrc_epoch() only. */
#define HRC_F_SPLIT		0x1
/* Set during hrc_select() only: the range is in the hot set. */
#define HRC_F_HOT		0x2

static inline u64 hrc_size(const struct hrc_range *r)
{
	return r->end - r->start;
}

/* Full 64x64 -> 128 bit product as (hi, lo), portable to 32-bit. */
static inline void hrc_mul_u64(u64 a, u64 b, u64 *hi, u64 *lo)
{
	u64 al = (u32)a, ah = a >> 32, bl = (u32)b, bh = b >> 32;
	u64 p0 = al * bl, p1 = al * bh, p2 = ah * bl, p3 = ah * bh;
	u64 mid = (p0 >> 32) + (u32)p1 + (u32)p2;

	*lo = (mid << 32) | (u32)p0;
	*hi = p3 + (p1 >> 32) + (p2 >> 32) + (mid >> 32);
}

/* Sign of a * b - c * d, computed exactly. */
static inline int hrc_cmp_prod(u64 a, u64 b, u64 c, u64 d)
{
	u64 h1, l1, h2, l2;

	hrc_mul_u64(a, b, &h1, &l1);
	hrc_mul_u64(c, d, &h2, &l2);
	if (h1 != h2)
		return h1 > h2 ? 1 : -1;
	if (l1 != l2)
		return l1 > l2 ? 1 : -1;
	return 0;
}

/*
 * True if the access density (nr_access / size) of @x exceeds @pct / 100
 * times that of @y.  Counts are <= 2^40 and pct <= 10^5 < 2^17, so both
 * pre-multiplied factors fit in 64 bits and the products in 128 bits.
 */
static inline bool hrc_denser(const struct hrc_range *x,
			      const struct hrc_range *y, u32 pct)
{
	return hrc_cmp_prod(x->nr_access * 100, hrc_size(y),
			    (u64)pct * y->nr_access, hrc_size(x)) > 0;
}

/*
 * Total hotness order used for ranking and for choosing which split
 * candidates win when max_ranges is reached: higher density first, then
 * the younger range (later birth) first, then the lower address.
 */
static inline bool hrc_hotter(const struct hrc_range *a,
			      const struct hrc_range *b)
{
	int cmp = hrc_cmp_prod(a->nr_access, hrc_size(b),
			       b->nr_access, hrc_size(a));

	if (cmp)
		return cmp > 0;
	if (a->birth != b->birth)
		return a->birth > b->birth;
	return a->start < b->start;
}

/* Sort @idx[0..@n) (indices into @ranges) hottest first; heapsort. */
void hrc_sort_hottest_first(const struct hrc_range *ranges, u32 *idx, u32 n);

#endif /* _TIERING_HRC_INTERNAL_H */
