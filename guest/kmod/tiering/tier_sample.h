/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Access-sample path shared by the sampling sources: decoding of a PEBS
 * record into a sample, the filter that keeps only the target's user
 * data addresses, and a lossy multi-producer ring that the overflow
 * handler (NMI context) fills and the manager's worker drains into the
 * range classifier.
 *
 * Pure C: builds in the kernel and in user space (tests/test_sample.c
 * drives it with synthetic PEBS records).  No locks, no allocation.
 */
#ifndef _TIERING_TIER_SAMPLE_H
#define _TIERING_TIER_SAMPLE_H

#include "range_classifier.h"

#ifdef __KERNEL__
#include <linux/atomic.h>
typedef atomic64_t tier_counter_t;
#define tier_counter_inc(c)		atomic64_inc(c)
#define tier_counter_read(c)		((u64)atomic64_read(c))
#define tier_counter_set(c, v)		atomic64_set(c, v)
#define tier_xchg64(p, v)		xchg(p, v)
#define tier_fetch_inc32(p)		((u32)atomic_inc_return(p) - 1)
typedef atomic_t tier_atomic32_t;
#else
typedef struct { u64 counter; } tier_counter_t;
typedef struct { u32 counter; } tier_atomic32_t;
#define tier_counter_inc(c) \
	__atomic_fetch_add(&(c)->counter, 1, __ATOMIC_RELAXED)
#define tier_counter_read(c) \
	__atomic_load_n(&(c)->counter, __ATOMIC_RELAXED)
#define tier_counter_set(c, v) \
	__atomic_store_n(&(c)->counter, (v), __ATOMIC_RELAXED)
#define tier_xchg64(p, v)	__atomic_exchange_n(p, v, __ATOMIC_ACQ_REL)
#define tier_fetch_inc32(p) \
	__atomic_fetch_add(&(p)->counter, 1, __ATOMIC_RELAXED)
#endif

/* Intel raw event codes (SDM vol. 3B, "Skylake and later" tables). */
#define TIER_EV_LOAD_LATENCY	0x01cdULL	/* MEM_TRANS_RETIRED.LOAD_LATENCY */
#define TIER_EV_ALL_STORES	0x82d0ULL	/* MEM_INST_RETIRED.ALL_STORES */

/* perf sample_flags bit for a data address (PERF_SAMPLE_ADDR). */
#define TIER_SAMPLE_FLAG_ADDR	(1ULL << 3)

/*
 * The fields of one sample record as the perf core hands them over: a
 * PEBS record (kernel overflow handler, or the agent's ring buffers), or
 * with @page_fault a record of the software event PERF_COUNT_SW_PAGE_FAULTS
 * (the agent's fallback that works without a PMU; @config is not read).
 */
struct tier_raw_record {
	u64 config;		/* event->attr.config */
	bool page_fault;	/* software page-fault event, not PEBS */
	u64 sample_flags;	/* perf_sample_data.sample_flags */
	u64 addr;		/* data linear address (dla) */
	u64 weight;		/* load latency in core cycles */
	u32 pid;		/* thread group id */
	u32 tid;
};

enum tier_verdict {
	TIER_SAMPLE_OK = 0,
	TIER_SAMPLE_NOADDR,	/* no data address in the record / addr 0 */
	TIER_SAMPLE_PID,	/* another process */
	TIER_SAMPLE_IGNORE,	/* kernel / text / outside the managed span */
	TIER_SAMPLE_LATENCY,	/* load below the latency threshold */
	TIER_SAMPLE_EVENT,	/* not one of our events */
	TIER_NR_VERDICTS,
};

/**
 * struct tier_filter - what a sample must satisfy to be counted.
 * @tgid:	the target's thread group id.
 * @lo, @hi:	managed span [lo, hi) (union of the classifier's ranges).
 * @text_start, @text_end: program text [start, end) to ignore.
 * @ldlat:	minimum load latency (cycles); 0 = trust the PMU threshold.
 */
struct tier_filter {
	u32 tgid;
	u64 lo, hi;
	u64 text_start, text_end;
	u64 ldlat;
};

enum tier_verdict tier_decode(const struct tier_raw_record *rec,
			      const struct tier_filter *f, u64 *addr);

/*
 * The address part of tier_decode(): a canonical user address inside the
 * managed span and outside the program text (TIER_SAMPLE_OK), else
 * TIER_SAMPLE_IGNORE.  Also applied by the module to the addresses the
 * agent writes (tier_user.c), which it does not trust.
 */
enum tier_verdict tier_filter_addr(const struct tier_filter *f, u64 addr);

/**
 * struct tier_ring - lossy MPSC ring of sample addresses.
 * @slot:	@mask + 1 entries (power of two); 0 = empty.
 * @head:	producers' claim counter.
 * @overwritten: samples lost because the worker was late.
 *
 * A producer claims a slot with one atomic increment and exchanges its
 * address in; an occupied slot means the consumer was late, counted in
 * @overwritten.  The consumer exchanges every slot with 0.  Both sides
 * are wait-free, so the producer is NMI-safe.
 */
struct tier_ring {
	u64 *slot;
	u32 mask;
	tier_atomic32_t head;
	tier_counter_t overwritten;
};

void tier_ring_init(struct tier_ring *r, u64 *storage, u32 nr_pow2);
void tier_ring_push(struct tier_ring *r, u64 addr);
u64 tier_ring_drain(struct tier_ring *r, struct hrc *c);

/*
 * Accessed-bit sampling window control: the window is the time between
 * clearing and re-reading the accessed bits.  A window in which most
 * pages turn young loses the contrast between hot and cold pages (the
 * bit saturates), one in which almost none do gives too few samples.
 * Keep the young fraction of the scanned present pages within
 * [lo_pct, hi_pct] by halving / doubling the window within bounds.
 */
u32 tier_abit_next_window(u32 window_ms, u64 young, u64 present,
			  u32 lo_pct, u32 hi_pct, u32 min_ms, u32 max_ms);

#endif /* _TIERING_TIER_SAMPLE_H */
