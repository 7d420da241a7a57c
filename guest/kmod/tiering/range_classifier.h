/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Range-based hotness classifier: the pure algorithmic core of the guest
 * tiered-memory manager (Demeter, SOSP'25, section 3.2.1).
 *
 * A target process' guest-virtual address space is covered by a sorted
 * set of non-overlapping, granularity-aligned ranges.  Access samples
 * (virtual addresses) are counted per range; every epoch the counts decay
 * and hot ranges are split in two while cold, similar neighbours are
 * merged back.  Ranking by access density yields promotion and demotion
 * candidates as plain address intervals.
 *
 * The core owns no memory and takes no locks: the caller provides the
 * storage (hrc_init()) and serialises all calls on one context (mutate it
 * only from the worker that owns it).  See README.md for the algorithm.
 */
#ifndef _TIERING_RANGE_CLASSIFIER_H
#define _TIERING_RANGE_CLASSIFIER_H

#include "hrc_compat.h"

/* Access counts saturate here; keeps all products within 128 bits. */
#define HRC_COUNT_MAX			(1ULL << 40)

/* Defaults (Demeter paper / authors' reference implementation). */
#define HRC_DEF_GRANULARITY		(2ULL << 20)	/* 2 MiB */
#define HRC_DEF_MAX_RANGES		2048
#define HRC_DEF_SPLIT_THRESH		15	/* tau_split per vCPU */
#define HRC_DEF_SIGNIFICANCE_PCT	200	/* alpha = 2.00 */
#define HRC_DEF_MERGE_EPOCHS		8	/* tau_merge */
#define HRC_DEF_DECAY_SHIFT		1	/* halve per epoch */
#define HRC_DEF_SPLIT_PERIOD_MS		500	/* t_split */

/* Validation bounds. */
#define HRC_MIN_GRANULARITY		4096ULL
#define HRC_MIN_RANGES			2
#define HRC_MAX_RANGES			(1U << 20)
#define HRC_MAX_CPUS			65536
#define HRC_MAX_SPLIT_THRESH		(1U << 20)
#define HRC_MIN_SIGNIFICANCE_PCT	100
#define HRC_MAX_SIGNIFICANCE_PCT	100000
#define HRC_DEF_HOT_PCT			200
#define HRC_MAX_HOT_PCT			100000
#define HRC_MAX_MERGE_EPOCHS		(1U << 20)
#define HRC_MAX_DECAY_SHIFT		16
#define HRC_MIN_SPLIT_PERIOD_MS		10
#define HRC_MAX_SPLIT_PERIOD_MS		600000
#define HRC_SHARE_MAX			64	/* contexts hrc_share() merges */

/**
 * struct hrc_params - tunables; validate with hrc_params_validate().
 * @granularity:	smallest range size and alignment, bytes, power of two
 *			>= 4 KiB.  Fixed for the lifetime of a context.
 * @max_ranges:		upper bound on the number of ranges, in
 *			[HRC_MIN_RANGES, capacity of the storage].
 * @split_thresh:	tau_split: samples per vCPU a range must receive in
 *			one epoch before it may be split.
 * @nr_cpus:		number of vCPUs sampling (threshold multiplier).
 * @significance_pct:	alpha in hundredths (200 = 2.0): a range splits if
 *			its access density exceeds alpha times that of an
 *			adjacent range; ranges whose densities are within
 *			alpha of each other may merge.
 * @merge_epochs:	tau_merge: both ranges must be at least this many
 *			epochs old before they may merge; 0 disables merging.
 * @decay_shift:	counts are shifted right by this much every epoch.
 * @half_split:		0 or 1.  1: a range may also split when one of its
 *			halves received alpha times the fresh samples of
 *			the other (and at least tau_split * nr_cpus of
 *			them), whatever its neighbours.  This lifts the
 *			"equal neighbours block refinement" limit (a big
 *			range next to a small, denser one); see README.
 * @edge_split:		0 or 1.  1: a range with enough fresh samples may also
 *			split when an adjacent range is alpha times denser
 *			than it, so that the boundary of a hot area that is
 *			not on a halving point is found (see README).
 * @hot_pct:		a range joins the hot set only if its access density
 *			per footprint page is at least @hot_pct / 100 times
 *			the mean over the whole footprint (all ranges'
 *			accesses over all their footprint pages); 0: any
 *			range with accesses may fill the capacity (the
 *			paper's f).  Without this floor, FMEM room beyond the
 *			real hot set is filled with cold ranges whose order
 *			is sampling noise, and pages rotate between the tiers
 *			for no gain.
 * @split_period_ms:	t_split: epoch length.  Not used by the core (the
 *			caller drives time); kept here so that one struct
 *			holds every knob and is validated in one place.
 */
struct hrc_params {
	u64 granularity;
	u32 max_ranges;
	u32 split_thresh;
	u32 nr_cpus;
	u32 significance_pct;
	u32 merge_epochs;
	u32 decay_shift;
	u32 split_period_ms;
	u32 half_split;
	u32 edge_split;
	u32 hot_pct;
};

/**
 * struct hrc_range - one classified address range [@start, @end).
 * @nr_access:	decayed access count (saturates at HRC_COUNT_MAX).
 * @birth:	epoch in which the range was created (init, split, merge).
 * @nr_fresh:	samples recorded since the last epoch step.
 * @flags:	internal, zero between calls.
 * @nr_fresh_hi: of @nr_fresh, those in the upper half (at or above the
 *		granularity-aligned midpoint where a split would cut).
 * @nr_resident: base pages of the range present in memory, as the caller
 *		last measured them (hrc_set_resident()); a THP counts as its
 *		512 base pages.  A split gives each child half, a merge adds:
 *		estimates until the caller measures again.
 * @nr_fast:	of @nr_resident, pages on the fast tier (same upkeep).
 */
struct hrc_range {
	u64 start;
	u64 end;
	u64 nr_access;
	u64 birth;
	u32 nr_fresh;
	u32 flags;
	u32 nr_fresh_hi;
	u64 nr_resident;
	u64 nr_fast;
};

/* A half-open address interval [start, end). */
struct hrc_interval {
	u64 start;
	u64 end;
};

struct hrc_stats {
	u64 nr_samples;		/* samples inside some range */
	u64 nr_outside;		/* samples outside every range */
	u64 nr_splits;
	u64 nr_merges;
	u64 nr_split_dropped;	/* split candidates refused: max_ranges */
};

/**
 * struct hrc - a classifier context.  Treat as opaque except for reading
 * @ranges[0..@nr), @epoch and @stats.
 */
struct hrc {
	struct hrc_params p;
	struct hrc_range *ranges;	/* caller storage, @capacity entries */
	u32 *order;			/* caller storage, ranking scratch */
	u32 capacity;
	u32 nr;
	u64 epoch;
	bool ranked;			/* @order matches @ranges */
	bool resident_known;		/* hrc_set_resident() was called */
	struct hrc_stats stats;
};

/**
 * struct hrc_selection - result of hrc_select().
 * @promo:	caller array of @promo_max entries; filled hottest first.
 * @demo:	caller array of @demo_max entries; filled coldest first.
 * @nr_promo:	entries written to @promo.
 * @nr_demo:	entries written to @demo.
 * @nr_hot:	number f of ranges selected as the hot set; if larger
 *		than @nr_promo the @promo array was too small.
 * @hot_bytes:	footprint of the f hot ranges (<= FMEM capacity): their
 *		resident bytes once the caller measured residency, else
 *		their sizes.
 *
 * No range ever appears in both lists: @demo holds exactly the ranges
 * not selected for @promo.
 */
struct hrc_selection {
	struct hrc_interval *promo;
	u32 promo_max;
	u32 nr_promo;
	struct hrc_interval *demo;
	u32 demo_max;
	u32 nr_demo;
	u32 nr_hot;
	u64 hot_bytes;
};

void hrc_default_params(struct hrc_params *p);
int hrc_params_validate(const struct hrc_params *p, u32 capacity);

int hrc_init(struct hrc *c, struct hrc_range *ranges, u32 *order,
	     u32 capacity, const struct hrc_params *p,
	     const struct hrc_interval *init, u32 nr_init);
int hrc_reset(struct hrc *c, const struct hrc_interval *init, u32 nr_init);
int hrc_set_params(struct hrc *c, const struct hrc_params *p);

int hrc_find(const struct hrc *c, u64 addr);
bool hrc_record_n(struct hrc *c, u64 addr, u64 n);

/* Record one access sample; returns false if @addr is in no range. */
static inline bool hrc_record(struct hrc *c, u64 addr)
{
	return hrc_record_n(c, addr, 1);
}

u32 hrc_epoch(struct hrc *c);

void hrc_set_resident(struct hrc *c, u32 idx, u64 resident, u64 fast);
int hrc_cover(struct hrc *c, u64 start, u64 end);
u64 hrc_footprint_pages(const struct hrc *c, const struct hrc_range *r);

void hrc_rank(struct hrc *c);
void hrc_select(struct hrc *c, u64 fmem_pages, struct hrc_selection *sel);
u64 hrc_share(struct hrc *const *cs, u32 n, u32 which, u64 fmem_pages);

int hrc_validate(const struct hrc *c);

int hrc_default_layout(u64 start_brk, u64 mmap_base, u64 totalram_bytes,
		       struct hrc_interval out[2]);

#endif /* _TIERING_RANGE_CLASSIFIER_H */
