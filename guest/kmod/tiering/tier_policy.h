/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Tier policy that needs no kernel state: which nodes are FMem and SMem,
 * and how much of FMem the hot sets may fill (pure C, tested in user
 * space by tests/test_capacity.c).
 */
#ifndef _TIERING_TIER_POLICY_H
#define _TIERING_TIER_POLICY_H

#include "hrc_compat.h"

/* One zone of the FMem node, in base pages. */
struct tier_zone_pages {
	u64 managed;	/* zone_managed_pages() */
	u64 high;	/* high watermark: kswapd keeps this much free */
};

u64 tier_fmem_capacity(const struct tier_zone_pages *z, u32 nr_zones,
		       u64 balloon_in_managed);

/* One NUMA node as the node-choice rule sees it. */
struct tier_node_info {
	int nid;
	bool has_cpu;
	bool has_mem;
};

void tier_pick_nodes(const struct tier_node_info *nodes, u32 nr,
		     int *fmem_nid, int *smem_nid);

#endif /* _TIERING_TIER_POLICY_H */
