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

/* All accesses and all footprint pages of @c: the mean hrc_above_mean() uses. */
static void hrc_totals(const struct hrc *c, u64 *acc, u64 *fp)
{
	u32 i;

	*acc = 0;
	*fp = 0;
	for (i = 0; i < c->nr; i++) {
		*acc += c->ranges[i].nr_access;
		*fp += hrc_footprint_pages(c, &c->ranges[i]);
	}
}

/*
 * Whether @r is at least @c->p.hot_pct / 100 times as dense, per footprint
 * page, as the whole footprint (@acc accesses over @fp pages).  Exact:
 * nr_access * 100 <= 2^47 and @fp <= 2^52 (pages of a 64-bit space);
 * @acc <= max_ranges * 2^40 and hot_pct * footprint is clamped.
 */
static bool hrc_above_mean(const struct hrc *c, const struct hrc_range *r,
			   u64 acc, u64 fp)
{
	u64 mine = hrc_footprint_pages(c, r), scaled;

	if (!c->p.hot_pct)
		return true;
	scaled = mine > U64_MAX / c->p.hot_pct ? U64_MAX :
		 mine * c->p.hot_pct;
	return hrc_cmp_prod(r->nr_access * 100, fp, acc, scaled) >= 0;
}

/**
 * hrc_select() - promotion and demotion candidates for an FMEM capacity.
 * @c:		context.
 * @fmem_pages:	FMEM capacity available to the target, in pages.
 * @sel:	caller arrays in, results out (see struct hrc_selection).
 *
 * The hot set is filled in ranking order with every range that has
 * accesses, is significantly denser than the footprint's mean
 * (hrc_params.hot_pct) and whose footprint (hrc_footprint_pages():
 * resident base pages once measured, else its size) still fits
 * @fmem_pages; a range that does not fit is passed over and smaller,
 * colder ones keep filling the capacity (the paper's f counts what can
 * be placed, and one big range must not leave FMEM half empty).  The
 * mean floor keeps ranges of ordinary density out: what is not clearly
 * hotter than the rest gains nothing from a move, and the order among
 * such ranges is sampling noise, which would rotate them between the
 * tiers.  The hot ranges are returned hottest first in @sel->promo, all
 * others coldest first in @sel->demo; the caller walks them until it has
 * as many FMEM pages as it promotes.
 */
void hrc_select(struct hrc *c, u64 fmem_pages, struct hrc_selection *sel)
{
	u64 used = 0, acc, fp;
	u32 f, i, nr_hot = 0;

	hrc_rank(c);
	sel->nr_promo = 0;
	sel->nr_demo = 0;
	hrc_totals(c, &acc, &fp);
	for (f = 0; f < c->nr; f++) {
		struct hrc_range *r = &c->ranges[c->order[f]];
		u64 need = hrc_footprint_pages(c, r);

		if (!r->nr_access)
			break;		/* the rest is colder still */
		if (!hrc_above_mean(c, r, acc, fp))
			continue;	/* ranked by size, judged by footprint */
		if (need > fmem_pages - used)
			continue;	/* too big: smaller ones may fit */
		used += need;
		r->flags |= HRC_F_HOT;
		nr_hot++;
		if (sel->nr_promo < sel->promo_max)
			sel->promo[sel->nr_promo++] = hrc_iv(r);
	}
	sel->nr_hot = nr_hot;
	sel->hot_bytes = used > (U64_MAX >> HRC_PAGE_SHIFT) ? U64_MAX :
			 used << HRC_PAGE_SHIFT;
	for (i = c->nr; i > 0; i--) {
		struct hrc_range *r = &c->ranges[c->order[i - 1]];

		if (r->flags & HRC_F_HOT)
			r->flags &= ~HRC_F_HOT;
		else if (sel->nr_demo < sel->demo_max)
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
 * k-way merge of their rankings by access density, with the rule
 * hrc_select() uses within one context (ranges with accesses and above
 * their own context's mean floor, in order, each taken if its footprint
 * still fits, passed over otherwise).
 * Context @which gets the footprint of its own ranges so taken, so
 * hrc_select() with the returned share selects exactly those.  With one
 * context the share is the whole capacity.  Densities are only comparable
 * between contexts fed by the same sampling source.
 *
 * Return: the share in pages; an even split beyond HRC_SHARE_MAX
 *	    contexts.
 */
u64 hrc_share(struct hrc *const *cs, u32 n, u32 which, u64 fmem_pages)
{
	u32 pos[HRC_SHARE_MAX] = { 0 };
	u64 acc[HRC_SHARE_MAX], fp[HRC_SHARE_MAX];
	u64 used = 0, mine = 0;
	u32 i;

	if (which >= n)
		return 0;
	if (n == 1)
		return fmem_pages;
	if (n > HRC_SHARE_MAX)
		return fmem_pages / n;	/* beyond the merge's bound: even split */
	for (i = 0; i < n; i++) {
		hrc_rank(cs[i]);
		hrc_totals(cs[i], &acc[i], &fp[i]);
	}
	for (;;) {
		const struct hrc_range *best = NULL;
		u32 bi = 0;
		u64 need;

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
		if (!best)
			break;
		pos[bi]++;
		if (!hrc_above_mean(cs[bi], best, acc[bi], fp[bi]))
			continue;
		need = hrc_footprint_pages(cs[bi], best);
		if (need > fmem_pages - used)
			continue;	/* too big: smaller ones may fit */
		used += need;
		if (bi == which)
			mine += need;
	}
	return mine;
}
