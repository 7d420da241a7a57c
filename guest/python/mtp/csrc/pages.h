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
 * page with eq. 1 (pages without tracked objects this round get 0), drops
 * pages that had no objects this round and cooled below @drop_below. New
 * pages start on MTP_NODE_UNKNOWN. Reorders @heat in place. -1 on ENOMEM with
 * @t unchanged.
 */
int mtp_pages_update(struct mtp_pages *t, struct mtp_heat *heat, size_t n, double k,
		     double drop_below);

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
 * Pages to move at threshold @h (MTP_BUCKETS: none): FMem pages in buckets
 * below h, coldest bucket first, and SMem pages in buckets h and above,
 * hottest bucket first; at most @max of each. Indices into @temp go to
 * @demote / @promote (each with room for @max). Returns the counts.
 */
void mtp_select(const double *temp, const int *node, size_t n,
		const uint8_t slow[MTP_MAX_NODES], unsigned int h, size_t max,
		size_t *demote, size_t *n_demote, size_t *promote, size_t *n_promote);

#endif
