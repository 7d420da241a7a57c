// SPDX-License-Identifier: GPL-2.0
/*
 * Demeter double balloon: the statistics buffer.
 *
 * Without HETERO_MEM we send the stock 6.12 set (tags 0..15).  With it,
 * tags 0..9 plus the Demeter per-tier tags 11, 12, 14, 15 (see
 * demeter_balloon.h): on that wire 10..15 mean per-tier values, so the
 * stock meaning of 10..15 cannot be sent.
 */
#include <linux/mm.h>
#include <linux/mmzone.h>
#include <linux/vmstat.h>
#include <linux/swap.h>
#include <linux/virtio_config.h>

#include "demeter_balloon.h"

#define pages_to_bytes(x) ((u64)(x) << PAGE_SHIFT)

/* Free and managed kernel pages of node @nid (0 for an absent node). */
void dmb_node_mem(int nid, unsigned long *free_pages,
		  unsigned long *managed_pages)
{
	pg_data_t *pgdat;
	int z;

	*free_pages = 0;
	*managed_pages = 0;
	if (nid < 0 || nid >= MAX_NUMNODES || !node_state(nid, N_MEMORY))
		return;
	pgdat = NODE_DATA(nid);
	for (z = 0; z < MAX_NR_ZONES; z++) {
		struct zone *zone = &pgdat->node_zones[z];

		if (!populated_zone(zone))
			continue;
		*free_pages += zone_page_state(zone, NR_FREE_PAGES);
		*managed_pages += zone_managed_pages(zone);
	}
}

static void dmb_stat(struct dmb_dev *dmb, unsigned int *idx, u16 tag, u64 val)
{
	if (WARN_ON_ONCE(*idx >= DMB_STATS_MAX))
		return;
	dmb->stats[*idx].tag = cpu_to_virtio16(dmb->vdev, tag);
	dmb->stats[*idx].val = cpu_to_virtio64(dmb->vdev, val);
	(*idx)++;
}

/* Fill dmb->stats; returns the number of entries. */
unsigned int dmb_fill_stats(struct dmb_dev *dmb)
{
	unsigned long events[NR_VM_EVENT_ITEMS];
	unsigned long free, managed;
	struct sysinfo si;
	unsigned int idx = 0;

	all_vm_events(events);
	si_meminfo(&si);

	dmb_stat(dmb, &idx, VIRTIO_BALLOON_S_SWAP_IN,
		 pages_to_bytes(events[PSWPIN]));
	dmb_stat(dmb, &idx, VIRTIO_BALLOON_S_SWAP_OUT,
		 pages_to_bytes(events[PSWPOUT]));
	dmb_stat(dmb, &idx, VIRTIO_BALLOON_S_MAJFLT, events[PGMAJFAULT]);
	dmb_stat(dmb, &idx, VIRTIO_BALLOON_S_MINFLT, events[PGFAULT]);
	dmb_stat(dmb, &idx, VIRTIO_BALLOON_S_MEMFREE,
		 pages_to_bytes(si.freeram));
	dmb_stat(dmb, &idx, VIRTIO_BALLOON_S_MEMTOT,
		 pages_to_bytes(si.totalram));
	dmb_stat(dmb, &idx, VIRTIO_BALLOON_S_AVAIL,
		 pages_to_bytes(si_mem_available()));
	dmb_stat(dmb, &idx, VIRTIO_BALLOON_S_CACHES,
		 pages_to_bytes(global_node_page_state(NR_FILE_PAGES)));
#ifdef CONFIG_HUGETLB_PAGE
	dmb_stat(dmb, &idx, VIRTIO_BALLOON_S_HTLB_PGALLOC,
		 events[HTLB_BUDDY_PGALLOC]);
	dmb_stat(dmb, &idx, VIRTIO_BALLOON_S_HTLB_PGFAIL,
		 events[HTLB_BUDDY_PGALLOC_FAIL]);
#endif

	if (dmb->hetero) {
		dmb_node_mem(dmb->tier[DMB_FMEM].nid, &free, &managed);
		dmb_stat(dmb, &idx, DMB_S_FMEM_FREE, pages_to_bytes(free));
		dmb_stat(dmb, &idx, DMB_S_FMEM_TOTAL, pages_to_bytes(managed));
		dmb_node_mem(dmb->tier[DMB_SMEM].nid, &free, &managed);
		dmb_stat(dmb, &idx, DMB_S_SMEM_FREE, pages_to_bytes(free));
		dmb_stat(dmb, &idx, DMB_S_SMEM_TOTAL, pages_to_bytes(managed));
	} else {
		unsigned long stall = 0;
		int z;

		for (z = 0; z < MAX_NR_ZONES; z++)
			stall += events[ALLOCSTALL_NORMAL - ZONE_NORMAL + z];
		dmb_stat(dmb, &idx, VIRTIO_BALLOON_S_OOM_KILL, events[OOM_KILL]);
		dmb_stat(dmb, &idx, VIRTIO_BALLOON_S_ALLOC_STALL, stall);
		dmb_stat(dmb, &idx, VIRTIO_BALLOON_S_ASYNC_SCAN,
			 pages_to_bytes(events[PGSCAN_KSWAPD]));
		dmb_stat(dmb, &idx, VIRTIO_BALLOON_S_DIRECT_SCAN,
			 pages_to_bytes(events[PGSCAN_DIRECT]));
		dmb_stat(dmb, &idx, VIRTIO_BALLOON_S_ASYNC_RECLAIM,
			 pages_to_bytes(events[PGSTEAL_KSWAPD]));
		dmb_stat(dmb, &idx, VIRTIO_BALLOON_S_DIRECT_RECLAIM,
			 pages_to_bytes(events[PGSTEAL_DIRECT]));
	}
	dmb->nr_stats = idx;
	return idx;
}
