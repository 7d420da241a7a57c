// SPDX-License-Identifier: GPL-2.0
/*
 * Range classifier: hotness ranking and promotion/demotion selection.
 *
 * Ranking is an O(n log n) in-place heapsort of range indices (no
 * recursion, no allocation) by hrc_hotter(): access density first (exact
 * 128-bit cross-multiplication, no division), then younger first, then
 * lower address, so the order is total and deterministic.
 */
#include "hrc_internal.h"

/* True if ranges[a] must come after ranges[b] (a is colder). */
static inline bool hrc_after(const struct hrc_range *ranges, u32 a, u32 b)
{
	return hrc_hotter(&ranges[b], &ranges[a]);
}

static void hrc_sift_down(const struct hrc_range *ranges, u32 *idx,
			  u32 root, u32 n)
{
	for (;;) {
		u32 child = 2 * root + 1, t;

		if (child >= n)
			return;
		if (child + 1 < n &&
		    hrc_after(ranges, idx[child + 1], idx[child]))
			child++;
		if (!hrc_after(ranges, idx[child], idx[root]))
			return;
		t = idx[root];
		idx[root] = idx[child];
		idx[child] = t;
		root = child;
	}
}

void hrc_sort_hottest_first(const struct hrc_range *ranges, u32 *idx, u32 n)
{
	u32 i, t;

	if (n < 2)
		return;
	/* Heap whose root is the range that sorts last (the coldest). */
	for (i = n / 2; i--; )
		hrc_sift_down(ranges, idx, i, n);
	for (i = n - 1; i > 0; i--) {
		t = idx[0];
		idx[0] = idx[i];
		idx[i] = t;
		hrc_sift_down(ranges, idx, 0, i);
	}
}

/**
 * hrc_rank() - order all ranges hottest first into @c->order.
 * @c:		context.
 *
 * Cached until the next sample, epoch step or reset.
 */
void hrc_rank(struct hrc *c)
{
	u32 i;

	if (c->ranked)
		return;
	for (i = 0; i < c->nr; i++)
		c->order[i] = i;
	hrc_sort_hottest_first(c->ranges, c->order, c->nr);
	c->ranked = true;
}

static inline struct hrc_interval hrc_iv(const struct hrc_range *r)
{
	return (struct hrc_interval) { .start = r->start, .end = r->end };
}

/**
 * hrc_select() - promotion and demotion candidates for an FMEM capacity.
 * @c:		context.
 * @fmem_pages:	FMEM capacity available to the target, in pages.
 * @sel:	caller arrays in, results out (see struct hrc_selection).
 *
 * The hot set is the longest prefix [0, f) of the ranking whose ranges
 * all have accesses and whose total size fits @fmem_pages (the paper's
 * "largest index f"); it is returned hottest first in @sel->promo.  The
 * remaining ranges [f, n) are returned coldest first in @sel->demo; the
 * caller walks them until it has as many FMEM pages as it promotes.
 */
void hrc_select(struct hrc *c, u64 fmem_pages, struct hrc_selection *sel)
{
	u64 cap, used = 0;
	u32 f, i;

	if (fmem_pages > (U64_MAX >> HRC_PAGE_SHIFT))
		cap = U64_MAX;
	else
		cap = fmem_pages << HRC_PAGE_SHIFT;

	hrc_rank(c);
	sel->nr_promo = 0;
	sel->nr_demo = 0;
	for (f = 0; f < c->nr; f++) {
		const struct hrc_range *r = &c->ranges[c->order[f]];

		if (!r->nr_access || hrc_size(r) > cap - used)
			break;
		used += hrc_size(r);
		if (sel->nr_promo < sel->promo_max)
			sel->promo[sel->nr_promo++] = hrc_iv(r);
	}
	sel->nr_hot = f;
	sel->hot_bytes = used;
	for (i = c->nr; i > f && sel->nr_demo < sel->demo_max; i--) {
		const struct hrc_range *r = &c->ranges[c->order[i - 1]];

		sel->demo[sel->nr_demo++] = hrc_iv(r);
	}
}

/**
 * hrc_share() - one context's share of an FMEM capacity split among several.
 * @cs:		contexts (targets) that share the capacity; none may be NULL.
 * @n:		number of contexts.
 * @which:	index of the context whose share is returned.
 * @fmem_pages:	FMEM capacity for all of them, in pages.
 *
 * The capacity goes to the hottest ranges of all contexts together: a
 * k-way merge of their rankings by access density, stopping at the first
 * range that has no accesses or does not fit (the rule hrc_select() uses
 * within one context).  Context @which gets the size of its own ranges in
 * that prefix, so hrc_select() with the returned share selects exactly
 * those.  With one context the share is the whole capacity.  Densities
 * are only comparable between contexts fed by the same sampling source.
 *
 * Return: the share in pages (rounded down); an even split beyond
 *	    HRC_SHARE_MAX contexts.
 */
u64 hrc_share(struct hrc *const *cs, u32 n, u32 which, u64 fmem_pages)
{
	u32 pos[HRC_SHARE_MAX] = { 0 };
	u64 cap, used = 0, mine = 0;
	u32 i;

	if (which >= n)
		return 0;
	if (n == 1)
		return fmem_pages;
	if (n > HRC_SHARE_MAX)
		return fmem_pages / n;	/* beyond the merge's bound: even split */
	if (fmem_pages > (U64_MAX >> HRC_PAGE_SHIFT))
		cap = U64_MAX;
	else
		cap = fmem_pages << HRC_PAGE_SHIFT;
	for (i = 0; i < n; i++)
		hrc_rank(cs[i]);
	for (;;) {
		const struct hrc_range *best = NULL;
		u32 bi = 0;

		for (i = 0; i < n; i++) {
			const struct hrc *c = cs[i];
			const struct hrc_range *r;

			if (pos[i] >= c->nr)
				continue;
			r = &c->ranges[c->order[pos[i]]];
			if (!r->nr_access)
				continue;	/* the rest of c is colder */
			if (!best || hrc_hotter(r, best)) {
				best = r;
				bi = i;
			}
		}
		if (!best || hrc_size(best) > cap - used)
			break;
		used += hrc_size(best);
		if (bi == which)
			mine += hrc_size(best);
		pos[bi]++;
	}
	return mine >> HRC_PAGE_SHIFT;
}
