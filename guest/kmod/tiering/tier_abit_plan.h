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

#endif /* _TIERING_TIER_ABIT_PLAN_H */
