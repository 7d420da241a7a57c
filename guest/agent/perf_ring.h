/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Reader of a perf_event_open(2) ring buffer (the mmap'd data pages of a
 * sampling event): the user-space half of the PEBS design that keeps
 * large PEBS (guest/kmod/tiering/README.md, "PEBS from user space").
 * Pure C over the uapi layout, tested with ring images built in
 * guest/kmod/tiering/tests/test_perf_ring.c; used by sampler.c.
 */
#ifndef _AGENT_PERF_RING_H
#define _AGENT_PERF_RING_H

#include <stddef.h>
#include <stdint.h>
#include <linux/perf_event.h>

/* The sample fields the tiering path needs (others are skipped). */
struct perf_ring_sample {
	uint32_t pid, tid;	/* PERF_SAMPLE_TID */
	uint64_t addr;		/* PERF_SAMPLE_ADDR (data linear address) */
	uint64_t weight;	/* PERF_SAMPLE_WEIGHT(_STRUCT): load latency */
};

struct perf_ring_stats {
	uint64_t samples;	/* PERF_RECORD_SAMPLE decoded */
	uint64_t lost;		/* records the kernel dropped (PERF_RECORD_LOST) */
	uint64_t other;		/* other record types, skipped */
	uint64_t bad;		/* malformed records (reading stopped) */
};

/*
 * The sample_type bits the reader understands; perf_ring_supported()
 * says whether a configuration can be read.
 */
int perf_ring_supported(uint64_t sample_type);

/*
 * perf_ring_read() - consume the records between data_tail and data_head.
 * @meta:	the first mmap'd page (struct perf_event_mmap_page).
 * @data:	the data area (meta + meta->data_offset), @meta->data_size
 *		bytes, a power of two.
 * @sample_type: the event's attr.sample_type (perf_ring_supported()).
 * @out, @max:	where the samples go; reading stops when @max are out.
 * @st:		counters, added to.
 *
 * Records may wrap around the end of the area.  data_head is read with
 * acquire order and data_tail written with release order after the last
 * record consumed, as the perf ABI requires, so the kernel may reuse the
 * space.  A record that is malformed (size 0 or past data_head) stops
 * the read and is counted in @st->bad; the tail is then set to head.
 *
 * Return: the number of samples written to @out.
 */
size_t perf_ring_read(struct perf_event_mmap_page *meta, const uint8_t *data,
		      uint64_t sample_type, struct perf_ring_sample *out,
		      size_t max, struct perf_ring_stats *st);

#endif /* _AGENT_PERF_RING_H */
