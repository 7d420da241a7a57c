// SPDX-License-Identifier: GPL-2.0
/*
 * FMem capacity for the hot sets; see tier_policy.h.
 */
#include "tier_policy.h"

/**
 * tier_fmem_capacity() - base pages of the FMem node the hot sets may use.
 * @z:		the node's populated zones.
 * @nr_zones:	entries in @z.
 * @balloon_in_managed: pages the balloon holds on the node that are still
 *		counted in @z's managed pages (a balloon that adjusts the
 *		managed count is already out of it).
 *
 * Each zone offers its managed pages above its high watermark (below it
 * kswapd starts reclaiming, i.e. demoting); whatever the balloon holds
 * is not usable.  Never negative.
 */
u64 tier_fmem_capacity(const struct tier_zone_pages *z, u32 nr_zones,
		       u64 balloon_in_managed)
{
	u64 sum = 0;
	u32 i;

	for (i = 0; i < nr_zones; i++)
		if (z[i].managed > z[i].high)
			sum += z[i].managed - z[i].high;
	return sum > balloon_in_managed ? sum - balloon_in_managed : 0;
}

/**
 * tier_pick_nodes() - choose the FMem and SMem nodes.
 * @nodes:	the nodes, in node id order.
 * @nr:		entries in @nodes.
 * @fmem_nid:	out: the first node with CPUs and memory; if none has
 *		both, the first node with memory; -1 if none.
 * @smem_nid:	out: the first node with memory and no CPUs other than
 *		@fmem_nid; -1 if none (single tier).
 *
 * The same rule as demeter_balloon.ko's dmb_pick_tiers() (balloon/tier.c,
 * checked on the same cases), so that the balloon inflates the tiers the
 * manager ranks.
 */
void tier_pick_nodes(const struct tier_node_info *nodes, u32 nr,
		     int *fmem_nid, int *smem_nid)
{
	u32 i;

	*fmem_nid = -1;
	*smem_nid = -1;
	for (i = 0; i < nr && *fmem_nid < 0; i++)
		if (nodes[i].has_mem && nodes[i].has_cpu)
			*fmem_nid = nodes[i].nid;
	for (i = 0; i < nr && *fmem_nid < 0; i++)
		if (nodes[i].has_mem)
			*fmem_nid = nodes[i].nid;
	for (i = 0; i < nr && *smem_nid < 0; i++)
		if (nodes[i].has_mem && !nodes[i].has_cpu &&
		    nodes[i].nid != *fmem_nid)
			*smem_nid = nodes[i].nid;
}
