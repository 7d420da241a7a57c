// SPDX-License-Identifier: GPL-2.0
/*
 * Demeter double balloon: the statistics buffer.
 *
 * Without HETERO_MEM we send the stock 6.12 set (tags 0..15).  With it,
 * tags 0..9 plus the Demeter per-tier tags 11, 12, 14, 15 (see
 * demeter_balloon.h): on that wire 10..15 mean per-tier values, so the
 * stock meaning of 10..15 cannot be sent.  Either way, the guest-reported
 * vendor tags (DMB_S_GUEST_BASE.., written by user space through
 * guest_report) follow.
 */
#include <linux/mm.h>
#include <linux/mmzone.h>
#include <linux/vmstat.h>
#include <linux/swap.h>
#include <linux/virtio_config.h>
#include <linux/kernel.h>
#include <linux/string.h>

#include "demeter_balloon.h"
#include "dmb_compat.h"

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
	int i;

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

	/* The latest guest-reported values, every tag ever written. */
	spin_lock(&dmb->guest_lock);
	for (i = 0; i < DMB_S_GUEST_NR; i++)
		if (dmb->guest_mask & BIT(i))
			dmb_stat(dmb, &idx, DMB_S_GUEST_BASE + i,
				 dmb->guest_val[i]);
	spin_unlock(&dmb->guest_lock);

	dmb->nr_stats = idx;
	return idx;
}

/* A non-empty run of decimal digits, nothing else (no sign, no space). */
static bool dmb_all_digits(const char *s, size_t n)
{
	size_t i;

	if (!n)
		return false;
	for (i = 0; i < n; i++)
		if (s[i] < '0' || s[i] > '9')
			return false;
	return true;
}

/**
 * dmb_parse_guest_report() - parse a guest_report write.
 * @buf: the written bytes (not necessarily NUL-terminated)
 * @len: their number
 * @val: out: value by tag - DMB_S_GUEST_BASE
 * @mask: out: bit i set if tag DMB_S_GUEST_BASE + i was given
 *
 * One or more lines "TAG VALUE", newline-separated (a trailing newline
 * and empty lines are allowed): TAG decimal in [DMB_S_GUEST_BASE,
 * DMB_S_GUEST_BASE + DMB_S_GUEST_NR), exactly one space, VALUE a decimal
 * u64.  The last line for a tag wins.  All or nothing: any bad line makes
 * the whole write fail.  Pure (tested by selftest.c).
 *
 * Return: 0, or -EINVAL (bad syntax, out-of-range tag or value, no line).
 */
int dmb_parse_guest_report(const char *buf, size_t len,
			   u64 val[DMB_S_GUEST_NR], u32 *mask)
{
	const char *p = buf, *end = buf + len;
	char tok[24];
	u32 m = 0;

	while (p < end) {
		const char *nl = memchr(p, '\n', end - p);
		const char *le = nl ? nl : end;
		const char *sp;
		size_t tl, vl;
		u16 tag;
		u64 v;

		if (le == p) {		/* empty line */
			p = le + 1;
			continue;
		}
		sp = memchr(p, ' ', le - p);
		if (!sp)
			return -EINVAL;
		tl = sp - p;
		vl = le - sp - 1;
		if (!dmb_all_digits(p, tl) || tl >= sizeof(tok) ||
		    !dmb_all_digits(sp + 1, vl) || vl >= sizeof(tok))
			return -EINVAL;
		memcpy(tok, p, tl);
		tok[tl] = 0;
		if (kstrtou16(tok, 10, &tag) || tag < DMB_S_GUEST_BASE ||
		    tag >= DMB_S_GUEST_BASE + DMB_S_GUEST_NR)
			return -EINVAL;
		memcpy(tok, sp + 1, vl);
		tok[vl] = 0;
		if (kstrtou64(tok, 10, &v))
			return -EINVAL;
		val[tag - DMB_S_GUEST_BASE] = v;
		m |= BIT(tag - DMB_S_GUEST_BASE);
		p = le + 1;
	}
	if (!m)
		return -EINVAL;
	*mask = m;
	return 0;
}

/* Store a guest_report write; the next stats buffer carries it. */
int dmb_guest_report(struct dmb_dev *dmb, const char *buf, size_t len)
{
	u64 val[DMB_S_GUEST_NR];
	u32 mask;
	int i, err;

	err = dmb_parse_guest_report(buf, len, val, &mask);
	if (err)
		return err;
	spin_lock(&dmb->guest_lock);
	for (i = 0; i < DMB_S_GUEST_NR; i++)
		if (mask & BIT(i))
			dmb->guest_val[i] = val[i];
	dmb->guest_mask |= mask;
	dmb->nr_guest_reports++;
	spin_unlock(&dmb->guest_lock);
	return 0;
}
