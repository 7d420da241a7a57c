// SPDX-License-Identifier: GPL-2.0
/*
 * Sample decoding, filtering and the lossy sample ring; see tier_sample.h.
 */
#include "tier_sample.h"

/* Canonical user addresses on x86-64 are below 2^47 (2^56 with LA57). */
#define TIER_USER_TOP	(1ULL << 56)

enum tier_verdict tier_filter_addr(const struct tier_filter *f, u64 addr)
{
	if (!addr || addr >= TIER_USER_TOP || addr < f->lo || addr >= f->hi ||
	    (addr >= f->text_start && addr < f->text_end))
		return TIER_SAMPLE_IGNORE;
	return TIER_SAMPLE_OK;
}

enum tier_verdict tier_decode(const struct tier_raw_record *rec,
			      const struct tier_filter *f, u64 *addr)
{
	u64 cfg = rec->config & 0xffffULL;
	bool load = !rec->page_fault && cfg == TIER_EV_LOAD_LATENCY;

	if (!rec->page_fault && !load && cfg != TIER_EV_ALL_STORES)
		return TIER_SAMPLE_EVENT;
	if (!(rec->sample_flags & TIER_SAMPLE_FLAG_ADDR) || !rec->addr)
		return TIER_SAMPLE_NOADDR;
	if (rec->pid != f->tgid)
		return TIER_SAMPLE_PID;
	if (tier_filter_addr(f, rec->addr) != TIER_SAMPLE_OK)
		return TIER_SAMPLE_IGNORE;
	/* Stores and faults carry no latency; loads must reach the threshold. */
	if (load && f->ldlat && rec->weight < f->ldlat)
		return TIER_SAMPLE_LATENCY;
	*addr = rec->addr;
	return TIER_SAMPLE_OK;
}

void tier_ring_init(struct tier_ring *r, u64 *storage, u32 nr_pow2)
{
	u32 i;

	r->slot = storage;
	r->mask = nr_pow2 - 1;
	for (i = 0; i < nr_pow2; i++)
		r->slot[i] = 0;
	tier_counter_set(&r->overwritten, 0);
#ifdef __KERNEL__
	atomic_set(&r->head, 0);
#else
	r->head.counter = 0;
#endif
}

void tier_ring_push(struct tier_ring *r, u64 addr)
{
	u32 i = tier_fetch_inc32(&r->head) & r->mask;

	if (tier_xchg64(&r->slot[i], addr))
		tier_counter_inc(&r->overwritten);
}

/* Returns the number of samples moved into @c (inside some range). */
u64 tier_ring_drain(struct tier_ring *r, struct hrc *c)
{
	u64 n = 0, a;
	u32 i;

	for (i = 0; i <= r->mask; i++) {
		if (!r->slot[i])
			continue;
		a = tier_xchg64(&r->slot[i], 0);
		if (a && hrc_record(c, a))
			n++;
	}
	return n;
}

u32 tier_abit_next_window(u32 window_ms, u64 young, u64 present,
			  u32 lo_pct, u32 hi_pct, u32 min_ms, u32 max_ms)
{
	u64 w = window_ms;

	if (!present)
		return window_ms;
	if (young * 100 > present * hi_pct)
		w = w / 2;
	else if (young * 100 < present * lo_pct)
		w = w * 2;
	if (w < min_ms)
		w = min_ms;
	if (w > max_ms)
		w = max_ms;
	return (u32)w;
}
