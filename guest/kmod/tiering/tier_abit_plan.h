/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Accessed-bit source, the decisions that need no kernel state (pure C,
 * tested in user space by tests/test_abit_plan.c):
 *
 *  - Sampling: each cycle looks at a few pages per range (as DAMON looks
 *    at one page per region), not at every PTE.  Clearing an accessed
 *    bit is a page-table write, which a hypervisor using shadow paging
 *    must intercept, and a full scan writes thousands per cycle; a
 *    sample of k pages, each standing for pages/k of its range, gives
 *    the classifier the same density estimate for a fixed, small cost.
 *  - Back-off: once the hot set is in place and nothing moves, each
 *    stable epoch doubles the scan interval (up to 2^max_level), and any
 *    change returns to the base rate: after convergence the manager does
 *    almost nothing.
 */
#ifndef _TIERING_TIER_ABIT_PLAN_H
#define _TIERING_TIER_ABIT_PLAN_H

#include "hrc_compat.h"


/* Samples per range: @want each, fewer if @nr_ranges * @want > @cap. */
u32 tier_abit_samples_per_range(u32 nr_ranges, u32 want, u32 cap);

/*
 * Strata to draw in a range of @pages pages of which @resident are
 * present (@known: measured): k where all is present, more where little
 * is (k * pages / resident, at most k * @max_mult), so that about k
 * samples land on present pages; none if nothing is present.
 */
u32 tier_abit_strata(u64 pages, u64 resident, bool known, u32 k,
		     u32 max_mult);

/* Pages each of @stored present samples stands for: @pages / @stored. */
u64 tier_abit_present_weight(u64 pages, u32 stored);

/* Base pages a sample of a range [start, end) stands for (>= 1). */
u64 tier_abit_sample_weight(u64 start, u64 end, u32 k);

/* Samples of [start, end): min(k, its pages). */
u32 tier_abit_range_samples(u64 start, u64 end, u32 k);

/*
 * The @i-th of @k sample addresses of [start, end): one page drawn in
 * each of k equal strata, so the samples spread over the range (a pure
 * random draw can leave half a range unseen).  @rng: xorshift64 state.
 */
u64 tier_abit_sample_addr(u64 *rng, u64 start, u64 end, u32 i, u32 k);

/*
 * An epoch is stable when nothing changed since the last one (@moved:
 * pages the agent moved, plus splits and merges when they reshaped a
 * quarter of the ranges) and
 * the hot set's size changed by at most 1/8.
 */
bool tier_abit_epoch_stable(u64 prev_hot_bytes, u64 hot_bytes, u64 moved);

/*
 * Changes in an epoch for tier_abit_epoch_stable(): pages moved, plus the
 * splits and merges if they reshaped at least a quarter of @nr_ranges (a
 * few per epoch are what sampling noise causes).
 */
u64 tier_abit_changes(u64 moved, u64 reshaped, u32 nr_ranges);

/* Next back-off level: up by one when stable (to @max_level), else 0. */
u32 tier_abit_next_level(u32 level, bool stable, u32 max_level);

/*
 * Huge entries (a transparent huge page mapped by one PMD): one accessed
 * bit stands for 512 base pages, so in a window long enough for base
 * pages (>= abit_min_window_ms) a workload that touches its cold memory
 * at all sets the bit of nearly every huge entry, and "young once" says
 * nothing.  A huge sample is instead re-armed and re-read over @nsub
 * short sub-windows (tier_abit.c), and counts by the fraction of them in
 * which it was found young: how often, not whether.
 */
#define TIER_ABIT_HUGE_SHIFT	21	/* x86 PMD: 2 MiB */

/*
 * Base pages a checked sample adds to its range.  A base entry, or a
 * huge one without sub-windows (@nsub 0): @weight if @young (the bit at
 * the end of the main window).  A huge entry with sub-windows: @weight *
 * @sub_young / @nsub, whatever @young said.
 */
u64 tier_abit_young_weight(u64 weight, bool young, bool huge, u32 sub_young,
			   u32 nsub);

/* Do addresses @a and @b lie in the same huge entry? */
bool tier_abit_same_huge(u64 a, u64 b);

/*
 * Huge entries per batch of sub-windows: as many as one probe of @probe_ns
 * each can read in half a sub-window of @window_us (at least 1), so that
 * an entry's window (sleep + one pass over its batch) stays within 1.5x
 * the sub-window however slow the probes are.
 */
u32 tier_abit_huge_batch(u32 window_us, u64 probe_ns);

#endif /* _TIERING_TIER_ABIT_PLAN_H */
