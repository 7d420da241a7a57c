// SPDX-License-Identifier: GPL-2.0
/*
 * Demeter double balloon: pure policy (tier choice, target clamping, batch
 * sizing, OOM order).  No device or allocator access here, so selftest.c
 * can check it on hand-built inputs.
 */
#include <linux/kernel.h>
#include <linux/minmax.h>
#include <linux/numa.h>

#include "demeter_balloon.h"

/**
 * dmb_pick_tiers() - choose the FMem and SMem nodes.
 * @nodes: the nodes, in node id order
 * @nr: number of entries in @nodes
 * @fmem_nid: out: the first node with CPUs and memory; if no node has
 *            both, the first node with memory; NUMA_NO_NODE if none
 * @smem_nid: out: the first node with memory and no CPUs other than
 *            @fmem_nid; NUMA_NO_NODE if none (single-tier guest)
 */
void dmb_pick_tiers(const struct dmb_node_info *nodes, int nr,
		    int *fmem_nid, int *smem_nid)
{
	int i;

	*fmem_nid = NUMA_NO_NODE;
	*smem_nid = NUMA_NO_NODE;

	for (i = 0; i < nr; i++) {
		if (nodes[i].has_mem && nodes[i].has_cpu) {
			*fmem_nid = nodes[i].nid;
			break;
		}
	}
	if (*fmem_nid == NUMA_NO_NODE) {
		for (i = 0; i < nr; i++) {
			if (nodes[i].has_mem) {
				*fmem_nid = nodes[i].nid;
				break;
			}
		}
	}
	for (i = 0; i < nr; i++) {
		if (nodes[i].has_mem && !nodes[i].has_cpu &&
		    nodes[i].nid != *fmem_nid) {
			*smem_nid = nodes[i].nid;
			break;
		}
	}
}

/**
 * dmb_clamp_target() - bound a host-requested tier size by the node.
 * @host_target: 4 KiB pages the host asks for (untrusted)
 * @node_pages_4k: 4 KiB pages present on the tier's node
 *
 * Return: the number of pages the driver will try to hold.
 */
u32 dmb_clamp_target(u32 host_target, unsigned long node_pages_4k)
{
	if (host_target > node_pages_4k)
		return (u32)node_pages_4k;
	return host_target;
}

/**
 * dmb_step() - size of the next batch towards the target.
 * @target: clamped target, 4 KiB pages
 * @balloon_pages: current balloon size, 4 KiB pages
 * @max_batch: largest batch, 4 KiB pages
 *
 * Return: > 0 pages to inflate, < 0 pages to deflate, 0 at the target.
 */
long dmb_step(u32 target, unsigned int balloon_pages, unsigned int max_batch)
{
	long diff = (long)target - (long)balloon_pages;

	return clamp_t(long, diff, -(long)max_batch, (long)max_batch);
}

/**
 * dmb_oom_order() - which tier's balloon to shrink first on OOM.
 * @hetero: the SMem balloon exists
 * @fmem_pages: FMem balloon size
 * @smem_pages: SMem balloon size
 * @order: out: tiers to try, in order
 *
 * SMem first: an unconstrained allocation falls back to the memory-only
 * node, so SMem pages end the OOM as well as FMem pages do, and they are
 * the cheaper memory for the host to give back (the FMem balloon is the
 * host's scarce fast memory).  FMem comes next, so an allocation bound to
 * the FMem node still gets pages once the SMem balloon is empty (each OOM
 * round frees a batch, so a bound allocation reaches FMem after a few).
 *
 * Return: number of entries written to @order.
 */
int dmb_oom_order(bool hetero, unsigned int fmem_pages,
		  unsigned int smem_pages, enum dmb_tier_id order[DMB_NR_TIERS])
{
	int n = 0;

	if (hetero && smem_pages)
		order[n++] = DMB_SMEM;
	if (fmem_pages)
		order[n++] = DMB_FMEM;
	return n;
}
