// SPDX-License-Identifier: GPL-2.0
/*
 * perf ring-buffer reader; see perf_ring.h.
 */
#include <string.h>
#include "perf_ring.h"

/* Fields before WEIGHT that are one u64 each (or two u32 for TID). */
#define PR_FIXED	(PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | \
			 PERF_SAMPLE_TID | PERF_SAMPLE_TIME | \
			 PERF_SAMPLE_ADDR | PERF_SAMPLE_ID | \
			 PERF_SAMPLE_STREAM_ID | PERF_SAMPLE_CPU | \
			 PERF_SAMPLE_PERIOD)
#define PR_AFTER	(PERF_SAMPLE_WEIGHT | PERF_SAMPLE_WEIGHT_STRUCT | \
			 PERF_SAMPLE_DATA_SRC | PERF_SAMPLE_TRANSACTION | \
			 PERF_SAMPLE_PHYS_ADDR)

int perf_ring_supported(uint64_t sample_type)
{
	if (sample_type & ~(uint64_t)(PR_FIXED | PR_AFTER))
		return 0;	/* variable-size fields: not needed here */
	if ((sample_type & PERF_SAMPLE_WEIGHT) &&
	    (sample_type & PERF_SAMPLE_WEIGHT_STRUCT))
		return 0;	/* the kernel refuses both */
	return (sample_type & PERF_SAMPLE_ADDR) != 0;
}

static uint64_t rd64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

/* Decode one PERF_RECORD_SAMPLE body of @len bytes; 0 if too short. */
static int pr_sample(const uint8_t *b, size_t len, uint64_t st,
		     struct perf_ring_sample *s)
{
	static const uint64_t order[] = {
		PERF_SAMPLE_IDENTIFIER, PERF_SAMPLE_IP, PERF_SAMPLE_TID,
		PERF_SAMPLE_TIME, PERF_SAMPLE_ADDR, PERF_SAMPLE_ID,
		PERF_SAMPLE_STREAM_ID, PERF_SAMPLE_CPU, PERF_SAMPLE_PERIOD,
		PERF_SAMPLE_WEIGHT | PERF_SAMPLE_WEIGHT_STRUCT,
		PERF_SAMPLE_DATA_SRC, PERF_SAMPLE_TRANSACTION,
		PERF_SAMPLE_PHYS_ADDR,
	};
	size_t off = 0, i;

	memset(s, 0, sizeof(*s));
	for (i = 0; i < sizeof(order) / sizeof(order[0]); i++) {
		uint64_t v;

		if (!(st & order[i]))
			continue;
		if (off + 8 > len)
			return 0;
		v = rd64(b + off);
		off += 8;
		if (order[i] == PERF_SAMPLE_TID) {
			s->pid = (uint32_t)v;		/* little endian: pid first */
			s->tid = (uint32_t)(v >> 32);
		} else if (order[i] == PERF_SAMPLE_ADDR) {
			s->addr = v;
		} else if (order[i] & PERF_SAMPLE_WEIGHT) {
			s->weight = (st & PERF_SAMPLE_WEIGHT) ? v :
				    (uint32_t)v;	/* var1_dw: latency */
		}
	}
	return 1;
}

size_t perf_ring_read(struct perf_event_mmap_page *meta, const uint8_t *data,
		      uint64_t sample_type, struct perf_ring_sample *out,
		      size_t max, struct perf_ring_stats *st)
{
	uint64_t size = meta->data_size, mask = size - 1;
	uint64_t head = __atomic_load_n(&meta->data_head, __ATOMIC_ACQUIRE);
	uint64_t tail = meta->data_tail;
	uint8_t rec[1 << 16];	/* header.size is a u16 */
	size_t n = 0;

	if (!size || (size & mask) || !perf_ring_supported(sample_type) ||
	    head - tail > size) {
		st->bad++;
		__atomic_store_n(&meta->data_tail, head, __ATOMIC_RELEASE);
		return 0;
	}
	while (tail < head && n < max) {
		struct perf_event_header h;
		uint64_t off = tail & mask, first;

		if (head - tail < sizeof(h))
			goto bad;
		first = size - off < sizeof(h) ? size - off : sizeof(h);
		memcpy(&h, data + off, first);
		memcpy((uint8_t *)&h + first, data, sizeof(h) - first);
		if (h.size < sizeof(h) || h.size > head - tail)
			goto bad;
		/* a record that wraps is copied into one piece */
		first = size - off < h.size ? size - off : h.size;
		memcpy(rec, data + off, first);
		memcpy(rec + first, data, h.size - first);
		if (h.type == PERF_RECORD_SAMPLE) {
			if (!pr_sample(rec + sizeof(h), h.size - sizeof(h),
				       sample_type, &out[n]))
				goto bad;
			n++;
			st->samples++;
		} else if (h.type == PERF_RECORD_LOST) {
			/* u64 id; u64 lost; */
			if (h.size >= sizeof(h) + 16)
				st->lost += rd64(rec + sizeof(h) + 8);
		} else {
			st->other++;
		}
		tail += h.size;
	}
	__atomic_store_n(&meta->data_tail, tail, __ATOMIC_RELEASE);
	return n;
bad:
	st->bad++;
	__atomic_store_n(&meta->data_tail, head, __ATOMIC_RELEASE);
	return n;
}
