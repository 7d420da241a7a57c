/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The software page temperature table of section 6: the pages holding
 * tracked objects, each with the summed hotness of its objects cooled over
 * rounds (eq. 1) and the NUMA node it was last seen on; and the migration
 * plan drawn from it (histogram per tier, demotion and promotion lists).
 * No Python or syscall dependency.
 */
#ifndef MTP_PAGES_H
#define MTP_PAGES_H

#include <stddef.h>
#include <stdint.h>

#include "policy.h"

#define MTP_MAX_NODES 64
#define MTP_NODE_UNKNOWN (-1)

/* One object's contribution to a page in this round. */
struct mtp_heat {
	uint64_t page;
	double heat;
};

/* Sorted by page address. */
struct mtp_pages {
	uint64_t *page;
	double *temp;
	int *node;
	size_t n;
};

/*
 * Folds one round of object heat into @t: sums @heat per page, cools every
 * page with eq. 1 (pages without heat this round get 0). When @full (@heat
 * names every page holding a tracked object), drops the pages it does not
 * name that cooled below @drop_below; a partial round (the active objects
 * only) keeps them. New pages start on MTP_NODE_UNKNOWN. Reorders @heat in
 * place. -1 on ENOMEM with @t unchanged.
 */
int mtp_pages_update(struct mtp_pages *t, struct mtp_heat *heat, size_t n, double k,
		     double drop_below, int full);

void mtp_pages_free(struct mtp_pages *t);

struct mtp_histograms {
	uint64_t fast[MTP_BUCKETS];
	uint64_t slow[MTP_BUCKETS];
	double temp_fast, temp_slow;	/* summed temperature per tier */
	uint64_t by_node[MTP_MAX_NODES][MTP_BUCKETS];
};

/*
 * Histograms of the pages per tier; @slow[node] says whether a node is a
 * slow (demotion) node. Pages on unknown or out-of-range nodes are left out.
 */
void mtp_histograms(const double *temp, const int *node, size_t n,
		    const uint8_t slow[MTP_MAX_NODES], struct mtp_histograms *out);

/*
 * The least temperature of a bucket-0 page that free FMem takes (some
 * signal within the last rounds: one object's single change heats its page
 * by about 2, which cools below this in three rounds without another).
 */
#define MTP_ROOM_MIN_TEMP 0.25

/* mtp_select()'s @room when FMem's free memory is unknown: no bound on demotion. */
#define MTP_ROOM_UNKNOWN INT64_MIN

/*
 * Pages to move at threshold @h (MTP_BUCKETS: none). Promotion: SMem pages
 * in buckets h and above, hottest bucket first, at most @max; then, while
 * @room (pages FMem takes beyond its reserve) exceeds the promotions, SMem
 * pages of bucket 0 with at least MTP_ROOM_MIN_TEMP, warmer first: free
 * FMem serves them better than nothing. Demotion (section 6: "if there
 * isn't enough space in the fast tier for hot pages"): FMem pages below h,
 * those without signal first, then coldest bucket first, as many as the
 * promotions need beyond @room (a negative @room, FMem below its reserve,
 * adds its deficit), at most @max; every page below h with
 * MTP_ROOM_UNKNOWN. Indices into @temp go to @demote / @promote (each with
 * room for @max). Returns the counts.
 */
void mtp_select(const double *temp, const int *node, size_t n,
		const uint8_t slow[MTP_MAX_NODES], unsigned int h, size_t max, int64_t room,
		size_t *demote, size_t *n_demote, size_t *promote, size_t *n_promote);

#endif
