// SPDX-License-Identifier: GPL-2.0
/*
 * Range-based hotness classifier: parameters, sampling and the epoch step
 * (decay, split, merge).  Ranking and selection live in hrc_rank.c.
 *
 * Everything is O(n) or O(log n) per call with n <= max_ranges, except
 * when more ranges want to split than max_ranges allows: then the split
 * candidates are sorted, O(n log n).  No recursion, no allocation, no
 * floating point.
 */
#include "hrc_internal.h"

static inline u64 hrc_align_down(u64 x, u64 gran)
{
	return x & ~(gran - 1);
}

static inline bool hrc_is_pow2(u64 x)
{
	return x && !(x & (x - 1));
}

static inline u64 hrc_sat_add(u64 a, u64 b, u64 max)
{
	return (a > max || b > max - a) ? max : a + b;
}

void hrc_default_params(struct hrc_params *p)
{
	p->granularity = HRC_DEF_GRANULARITY;
	p->max_ranges = HRC_DEF_MAX_RANGES;
	p->split_thresh = HRC_DEF_SPLIT_THRESH;
	p->nr_cpus = 1;
	p->significance_pct = HRC_DEF_SIGNIFICANCE_PCT;
	p->hot_pct = HRC_DEF_HOT_PCT;
	p->merge_epochs = HRC_DEF_MERGE_EPOCHS;
	p->decay_shift = HRC_DEF_DECAY_SHIFT;
	p->split_period_ms = HRC_DEF_SPLIT_PERIOD_MS;
	p->half_split = 0;
	p->edge_split = 0;
}

/**
 * hrc_params_validate() - check every tunable.
 * @p:		parameters.
 * @capacity:	entries of range storage available (bounds max_ranges).
 *
 * Return: 0 or -EINVAL.
 */
int hrc_params_validate(const struct hrc_params *p, u32 capacity)
{
	if (!p)
		return -EINVAL;
	if (!hrc_is_pow2(p->granularity) ||
	    p->granularity < HRC_MIN_GRANULARITY ||
	    p->granularity > (1ULL << 62))
		return -EINVAL;
	if (p->max_ranges < HRC_MIN_RANGES || p->max_ranges > capacity ||
	    p->max_ranges > HRC_MAX_RANGES)
		return -EINVAL;
	if (!p->split_thresh || p->split_thresh > HRC_MAX_SPLIT_THRESH)
		return -EINVAL;
	if (!p->nr_cpus || p->nr_cpus > HRC_MAX_CPUS)
		return -EINVAL;
	if (p->significance_pct < HRC_MIN_SIGNIFICANCE_PCT ||
	    p->significance_pct > HRC_MAX_SIGNIFICANCE_PCT)
		return -EINVAL;
	if (p->merge_epochs > HRC_MAX_MERGE_EPOCHS)
		return -EINVAL;
	if (!p->decay_shift || p->decay_shift > HRC_MAX_DECAY_SHIFT)
		return -EINVAL;
	if (p->split_period_ms < HRC_MIN_SPLIT_PERIOD_MS ||
	    p->split_period_ms > HRC_MAX_SPLIT_PERIOD_MS)
		return -EINVAL;
	if (p->half_split > 1 || p->edge_split > 1)
		return -EINVAL;
	if (p->hot_pct > HRC_MAX_HOT_PCT)
		return -EINVAL;
	return 0;
}

/* Initial intervals: sorted, non-overlapping, aligned, non-empty. */
static int hrc_check_intervals(const struct hrc_params *p,
			       const struct hrc_interval *iv, u32 n)
{
	u64 mask = p->granularity - 1;
	u32 i;

	if (!iv || !n || n > p->max_ranges)
		return -EINVAL;
	for (i = 0; i < n; i++) {
		if (iv[i].start >= iv[i].end)
			return -EINVAL;
		if ((iv[i].start & mask) || (iv[i].end & mask))
			return -EINVAL;
		if (i && iv[i - 1].end > iv[i].start)
			return -EINVAL;
	}
	return 0;
}

/**
 * hrc_reset() - replace all ranges by @init and restart the epoch count.
 * @c:		context.
 * @init:	initial intervals.
 * @nr_init:	number of initial intervals.
 *
 * Return: 0, or -EINVAL if @init is empty, unsorted, overlapping, not
 * aligned to the granularity or longer than max_ranges (nothing changed).
 */
int hrc_reset(struct hrc *c, const struct hrc_interval *init, u32 nr_init)
{
	u32 i;
	int ret;

	ret = hrc_check_intervals(&c->p, init, nr_init);
	if (ret)
		return ret;
	for (i = 0; i < nr_init; i++) {
		c->ranges[i] = (struct hrc_range) {
			.start = init[i].start,
			.end = init[i].end,
		};
	}
	c->nr = nr_init;
	c->epoch = 0;
	c->ranked = false;
	c->resident_known = false;
	c->stats = (struct hrc_stats) { 0 };
	return 0;
}

/**
 * hrc_init() - set up a context on caller-provided storage.
 * @c:		context to initialise.
 * @ranges:	storage for @capacity ranges (kvcalloc()/calloc()).
 * @order:	storage for @capacity u32 (ranking scratch).
 * @capacity:	number of entries in both arrays.
 * @p:		parameters (copied).
 * @init:	initial intervals, see hrc_reset().
 * @nr_init:	number of initial intervals.
 *
 * Return: 0 or -EINVAL.
 */
int hrc_init(struct hrc *c, struct hrc_range *ranges, u32 *order,
	     u32 capacity, const struct hrc_params *p,
	     const struct hrc_interval *init, u32 nr_init)
{
	int ret;

	if (!c || !ranges || !order)
		return -EINVAL;
	ret = hrc_params_validate(p, capacity);
	if (ret)
		return ret;
	*c = (struct hrc) {
		.p = *p,
		.ranges = ranges,
		.order = order,
		.capacity = capacity,
	};
	return hrc_reset(c, init, nr_init);
}

/**
 * hrc_set_params() - change tunables at run time.
 * @c:		context.
 * @p:		new parameters (copied).
 *
 * The granularity cannot change (existing ranges are aligned to it).
 * Return: 0; -EINVAL for invalid values or a different granularity;
 * -EBUSY if max_ranges is below the current number of ranges.
 */
int hrc_set_params(struct hrc *c, const struct hrc_params *p)
{
	int ret;

	ret = hrc_params_validate(p, c->capacity);
	if (ret)
		return ret;
	if (p->granularity != c->p.granularity)
		return -EINVAL;
	if (p->max_ranges < c->nr)
		return -EBUSY;
	c->p = *p;
	return 0;
}

/**
 * hrc_find() - binary search for the range containing @addr.
 * @c:		context.
 * @addr:	guest-virtual address.
 *
 * Return: its index, or -1 if @addr lies in no range.
 */
int hrc_find(const struct hrc *c, u64 addr)
{
	u32 lo = 0, hi = c->nr;

	/* First range whose start is above addr. */
	while (lo < hi) {
		u32 mid = lo + (hi - lo) / 2;

		if (c->ranges[mid].start <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (!lo || addr >= c->ranges[lo - 1].end)
		return -1;
	return lo - 1;
}

/**
 * hrc_record_n() - account @n samples at @addr (saturating).
 * @c:		context.
 * @addr:	sampled guest-virtual address.
 * @n:		weight (number of samples).
 *
 * Return: true if @addr is in a range, false if it was counted as outside.
 */
bool hrc_record_n(struct hrc *c, u64 addr, u64 n)
{
	struct hrc_range *r;
	int i = hrc_find(c, addr);

	if (unlikely(i < 0)) {
		c->stats.nr_outside = hrc_sat_add(c->stats.nr_outside, n,
						  U64_MAX);
		return false;
	}
	r = &c->ranges[i];
	r->nr_access = hrc_sat_add(r->nr_access, n, HRC_COUNT_MAX);
	r->nr_fresh = (u32)hrc_sat_add(r->nr_fresh, n, U32_MAX);
	if (addr >= r->start + hrc_align_down(hrc_size(r) / 2,
					      c->p.granularity))
		r->nr_fresh_hi = (u32)hrc_sat_add(r->nr_fresh_hi, n, U32_MAX);
	c->stats.nr_samples = hrc_sat_add(c->stats.nr_samples, n, U64_MAX);
	c->ranked = false;
	return true;
}

static inline u64 hrc_split_min_fresh(const struct hrc *c)
{
	return (u64)c->p.split_thresh * c->p.nr_cpus;
}

/* Neighbour of ranges[i] on one side, only if it shares a boundary. */
static const struct hrc_range *hrc_left(const struct hrc *c, u32 i)
{
	if (i && c->ranges[i - 1].end == c->ranges[i].start)
		return &c->ranges[i - 1];
	return NULL;
}

static const struct hrc_range *hrc_right(const struct hrc *c, u32 i)
{
	if (i + 1 < c->nr && c->ranges[i].end == c->ranges[i + 1].start)
		return &c->ranges[i + 1];
	return NULL;
}

/*
 * Half test (half_split): one half of @r received alpha times the fresh
 * samples of the other, and at least tau_split * nr_cpus of them (so that
 * a handful of stray samples cannot split a cold range).  The halves are
 * the children a split would create; they are not always of equal size
 * (the cut is granularity-aligned), so the counts are compared as
 * densities: cnt_hi * size_lo vs alpha * cnt_lo * size_hi.
 */
static bool hrc_halves_differ(const struct hrc *c, const struct hrc_range *r)
{
	u64 size = hrc_size(r);
	u64 lo_size = hrc_align_down(size / 2, c->p.granularity);
	u64 hi_size = size - lo_size;
	u64 hi = r->nr_fresh_hi, lo = r->nr_fresh - r->nr_fresh_hi;
	u64 min = hrc_split_min_fresh(c);
	u32 pct = c->p.significance_pct;

	if (!c->p.half_split || r->nr_fresh_hi > r->nr_fresh)
		return false;
	/* counts < 2^32, pct < 2^17: all factors fit 64 bits */
	if (hi >= min &&
	    hrc_cmp_prod(hi * 100, lo_size, lo * pct, hi_size) > 0)
		return true;
	if (lo >= min &&
	    hrc_cmp_prod(lo * 100, hi_size, hi * pct, lo_size) > 0)
		return true;
	return false;
}

/*
 * Split test.  @r may split if it spans at least two granules, received
 * at least tau_split * nr_cpus samples in the epoch just ended, and either
 * has no adjacent range (it is alone in its part of the address space)
 * or is alpha times denser than an adjacent range (@l or @r, may be NULL),
 * or (edge_split) an adjacent range is alpha times denser than it, or
 * (half_split, unless @no_halves) its halves differ by alpha.  The merge
 * guard applies the edge rule too, so fragments next to a hot range do
 * not merge back into a range that would split again.
 */
static bool hrc_split_ok_x(const struct hrc *c, const struct hrc_range *r,
			   const struct hrc_range *left,
			   const struct hrc_range *right, bool no_halves)
{
	u32 pct = c->p.significance_pct;

	if (hrc_size(r) < 2 * c->p.granularity)
		return false;
	if (r->nr_fresh < hrc_split_min_fresh(c))
		return false;
	if (!left && !right)
		return true;
	if ((left && hrc_denser(r, left, pct)) ||
	    (right && hrc_denser(r, right, pct)))
		return true;
	/* edge_split: cut toward a much denser neighbour's boundary */
	if (c->p.edge_split &&
	    ((left && hrc_denser(left, r, pct)) ||
	     (right && hrc_denser(right, r, pct))))
		return true;
	return !no_halves && hrc_halves_differ(c, r);
}

static bool hrc_split_ok(const struct hrc *c, const struct hrc_range *r,
			 const struct hrc_range *left,
			 const struct hrc_range *right)
{
	return hrc_split_ok_x(c, r, left, right, false);
}

/* Mark split candidates; if too many, keep the hottest. */
static u32 hrc_mark_splits(struct hrc *c)
{
	u32 i, nc = 0, room;

	for (i = 0; i < c->nr; i++) {
		const struct hrc_range *r = &c->ranges[i];

		if (hrc_split_ok(c, r, hrc_left(c, i), hrc_right(c, i)))
			c->order[nc++] = i;
	}
	room = c->p.max_ranges > c->nr ? c->p.max_ranges - c->nr : 0;
	if (nc > room) {
		hrc_sort_hottest_first(c->ranges, c->order, nc);
		c->stats.nr_split_dropped += nc - room;
		nc = room;
	}
	for (i = 0; i < nc; i++)
		c->ranges[c->order[i]].flags |= HRC_F_SPLIT;
	return nc;
}

/*
 * Split every marked range in place.  Walking backwards from the new end
 * never overwrites an unread entry because the write index is always at
 * or above the read index.  Children are cut at the granularity-aligned
 * midpoint, share the (already decayed) count and are born now.
 */
static void hrc_do_splits(struct hrc *c, u32 nsplit)
{
	u64 gran = c->p.granularity;
	u32 i = c->nr, w = c->nr + nsplit;

	while (i--) {
		struct hrc_range r = c->ranges[i];
		u64 mid;

		if (!(r.flags & HRC_F_SPLIT)) {
			c->ranges[--w] = r;
			continue;
		}
		mid = r.start + hrc_align_down(hrc_size(&r) / 2, gran);
		c->ranges[--w] = (struct hrc_range) {
			.start = mid,
			.end = r.end,
			.nr_access = r.nr_access - r.nr_access / 2,
			.birth = c->epoch,
			.nr_resident = r.nr_resident - r.nr_resident / 2,
			.nr_fast = r.nr_fast - r.nr_fast / 2,
		};
		c->ranges[--w] = (struct hrc_range) {
			.start = r.start,
			.end = mid,
			.nr_access = r.nr_access / 2,
			.birth = c->epoch,
			.nr_resident = r.nr_resident / 2,
			.nr_fast = r.nr_fast / 2,
		};
	}
	c->nr += nsplit;
	c->stats.nr_splits += nsplit;
}

/*
 * Merge test for adjacent ranges @a and @b (with outer neighbours @l and
 * @r, possibly NULL).  Both must be at least tau_merge epochs old; neither
 * may be significantly hotter than the other (alpha, only counted once a
 * range has tau_split * nr_cpus decayed accesses, so that a couple of
 * stray samples do not keep cold ranges apart); and the merged range must
 * not pass the split test, otherwise it would split again next epoch.
 */
static bool hrc_merge_ok(const struct hrc *c, const struct hrc_range *a,
			 const struct hrc_range *b, const struct hrc_range *l,
			 const struct hrc_range *r, struct hrc_range *m)
{
	u64 min_cnt = hrc_split_min_fresh(c);
	u32 pct = c->p.significance_pct;

	if (a->end != b->start)
		return false;
	if (c->epoch - a->birth < c->p.merge_epochs ||
	    c->epoch - b->birth < c->p.merge_epochs)
		return false;
	if (a->nr_access >= min_cnt && hrc_denser(a, b, pct))
		return false;
	if (b->nr_access >= min_cnt && hrc_denser(b, a, pct))
		return false;
	*m = (struct hrc_range) {
		.start = a->start,
		.end = b->end,
		.nr_access = hrc_sat_add(a->nr_access, b->nr_access,
					 HRC_COUNT_MAX),
		.nr_fresh = (u32)hrc_sat_add(a->nr_fresh, b->nr_fresh,
					     U32_MAX),
		.birth = a->birth > b->birth ? a->birth : b->birth,
		.nr_resident = a->nr_resident + b->nr_resident,
		.nr_fast = a->nr_fast + b->nr_fast,
	};
	/*
	 * The halves of @m are not known (a and b need not be its halves);
	 * a and b passed the "neither significantly hotter" test above, so
	 * only the neighbour rule can make @m split right away.
	 */
	return !hrc_split_ok_x(c, m, l, r, true);
}

/* One left-to-right pass; a merged range may absorb further ranges. */
static void hrc_do_merges(struct hrc *c)
{
	struct hrc_range *rg = c->ranges;
	u32 i, w = 0;

	if (!c->p.merge_epochs)
		return;
	for (i = 1; i < c->nr; i++) {
		const struct hrc_range *l = NULL, *r = NULL;
		struct hrc_range m;

		if (w && rg[w - 1].end == rg[w].start)
			l = &rg[w - 1];
		if (i + 1 < c->nr && rg[i].end == rg[i + 1].start)
			r = &rg[i + 1];
		if (hrc_merge_ok(c, &rg[w], &rg[i], l, r, &m)) {
			rg[w] = m;
			c->stats.nr_merges++;
			continue;
		}
		rg[++w] = rg[i];
	}
	c->nr = w + 1;
}

/**
 * hrc_epoch() - end the current epoch (call every t_split).
 * @c:		context.
 *
 * Decays all counts, splits hot ranges (decisions use the state before
 * any split of this step), merges cold/similar neighbours, and clears the
 * per-epoch sample counts.
 *
 * Return: number of ranges split in this step.
 */
u32 hrc_epoch(struct hrc *c)
{
	u32 i, nsplit;

	c->epoch++;
	for (i = 0; i < c->nr; i++)
		c->ranges[i].nr_access >>= c->p.decay_shift;
	nsplit = hrc_mark_splits(c);
	if (nsplit)
		hrc_do_splits(c, nsplit);
	hrc_do_merges(c);
	for (i = 0; i < c->nr; i++) {
		c->ranges[i].nr_fresh = 0;
		c->ranges[i].nr_fresh_hi = 0;
		c->ranges[i].flags = 0;
	}
	c->ranked = false;
	return nsplit;
}

/**
 * hrc_validate() - check the structural invariants (debug / tests).
 * @c:		context.
 *
 * Return: 0, or -EINVAL if ranges are unsorted, overlapping, empty,
 * unaligned, too many, from the future, or have out-of-range counts.
 */
int hrc_validate(const struct hrc *c)
{
	u64 mask = c->p.granularity - 1;
	u32 i;

	if (!c->nr || c->nr > c->p.max_ranges || c->nr > c->capacity)
		return -EINVAL;
	for (i = 0; i < c->nr; i++) {
		const struct hrc_range *r = &c->ranges[i];

		if (r->start >= r->end || (r->start & mask) || (r->end & mask))
			return -EINVAL;
		if (i && c->ranges[i - 1].end > r->start)
			return -EINVAL;
		if (r->nr_access > HRC_COUNT_MAX || r->birth > c->epoch ||
		    r->flags || r->nr_fresh_hi > r->nr_fresh)
			return -EINVAL;
	}
	return 0;
}

/**
 * hrc_default_layout() - the reference implementation's initial ranges.
 * @start_brk:		mm->start_brk of the target.
 * @mmap_base:		mm->mmap_base of the target.
 * @totalram_bytes:	guest RAM size.
 * @out:		receives one or two sorted, 1 GiB aligned intervals.
 *
 * Coverage is 2 * ALIGN(totalram, 1 GiB) above ALIGN_DOWN(start_brk, 1G)
 * (heap) and below ALIGN(mmap_base, 1G) (top-down mmap area); the two are
 * fused into one interval if they touch or overlap.  Clamped to the
 * 64-bit address space.
 *
 * Return: number of intervals written (1 or 2), or -EINVAL.
 */
int hrc_default_layout(u64 start_brk, u64 mmap_base, u64 totalram_bytes,
		       struct hrc_interval out[2])
{
	const u64 gib = 1ULL << 30, top = hrc_align_down(U64_MAX, gib);
	u64 cov, hs, he, ms, me;

	if (!totalram_bytes || totalram_bytes > (1ULL << 60))
		return -EINVAL;
	cov = 2 * hrc_align_down(totalram_bytes + gib - 1, gib);
	hs = hrc_align_down(start_brk, gib);
	he = hs < top - cov ? hs + cov : top;
	me = mmap_base < top ? hrc_align_down(mmap_base + gib - 1, gib) : top;
	ms = me > cov ? me - cov : 0;
	if (hs >= he || ms >= me)
		return -EINVAL;
	if (ms < hs) {
		u64 t;

		t = ms, ms = hs, hs = t;
		t = me, me = he, he = t;
	}
	if (he >= ms) {
		out[0] = (struct hrc_interval) {
			.start = hs,
			.end = me > he ? me : he,
		};
		return 1;
	}
	out[0] = (struct hrc_interval) { .start = hs, .end = he };
	out[1] = (struct hrc_interval) { .start = ms, .end = me };
	return 2;
}

/**
 * hrc_set_resident() - record the measured residency of range @idx.
 * @c:		context.
 * @idx:	index into @c->ranges (< @c->nr).
 * @resident:	base pages present (clamped to the range's size).
 * @fast:	of those, pages on the fast tier (clamped to @resident).
 *
 * From the first call on, hrc_select() and hrc_share() measure the hot
 * set by resident pages (the paper's f counts pages that can move), not
 * by virtual size.
 */
void hrc_set_resident(struct hrc *c, u32 idx, u64 resident, u64 fast)
{
	struct hrc_range *r;
	u64 pages;

	if (idx >= c->nr)
		return;
	r = &c->ranges[idx];
	pages = hrc_size(r) >> HRC_PAGE_SHIFT;
	if (resident > pages)
		resident = pages;
	if (fast > resident)
		fast = resident;
	r->nr_resident = resident;
	r->nr_fast = fast;
	c->resident_known = true;
}

/* The FMem pages range @r needs: resident pages if measured, else size. */
u64 hrc_footprint_pages(const struct hrc *c, const struct hrc_range *r)
{
	if (c->resident_known)
		return r->nr_resident;
	return hrc_size(r) >> HRC_PAGE_SHIFT;
}

/* Gaps of [start, end) not covered by any range; inserts them if @add. */
static u32 hrc_gaps(struct hrc *c, u64 start, u64 end, bool add)
{
	u64 cur = start;
	u32 i = 0, n = 0;

	while (cur < end) {
		u64 stop;

		while (i < c->nr && c->ranges[i].end <= cur)
			i++;
		stop = i < c->nr && c->ranges[i].start < end ?
		       c->ranges[i].start : end;
		if (stop > cur) {
			if (add) {
				u32 k;

				for (k = c->nr; k > i; k--)
					c->ranges[k] = c->ranges[k - 1];
				c->ranges[i] = (struct hrc_range) {
					.start = cur, .end = stop,
					.birth = c->epoch,
				};
				c->nr++;
				i++;
			}
			n++;
		}
		if (i >= c->nr || c->ranges[i].start >= end)
			break;
		cur = c->ranges[i].end;
	}
	return n;
}

/**
 * hrc_cover() - make sure the ranges cover [@start, @end).
 * @c:		context.
 * @start, @end: an address interval, e.g. a mapping the target created
 *		after the context was set up (a heap mapped far above the
 *		initial layout, such as Go's at 0xc000000000).
 *
 * The interval is widened to the granularity; each part of it that no
 * range covers becomes a new range of its own (no accesses, born now).
 *
 * Return: number of ranges added; -EINVAL for an empty interval;
 *	   -ENOSPC if max_ranges does not leave room (nothing changed).
 */
int hrc_cover(struct hrc *c, u64 start, u64 end)
{
	u64 gran = c->p.granularity, top = hrc_align_down(U64_MAX, gran);
	u32 n;
	int k;

	if (start >= end)
		return -EINVAL;
	start = hrc_align_down(start, gran);
	end = end > top ? top : hrc_align_down(end + gran - 1, gran);
	if (start >= end)
		return -EINVAL;
	k = hrc_find(c, start);
	if (k >= 0 && c->ranges[k].end >= end)
		return 0;	/* the common case, O(log n) */
	n = hrc_gaps(c, start, end, false);
	if (!n)
		return 0;
	if (n > c->p.max_ranges - c->nr)
		return -ENOSPC;
	hrc_gaps(c, start, end, true);
	c->ranked = false;
	return (int)n;
}
