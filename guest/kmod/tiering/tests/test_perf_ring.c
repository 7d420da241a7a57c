// SPDX-License-Identifier: GPL-2.0
/*
 * The user-space PEBS delivery path with synthetic input: perf ring-buffer
 * images (as the kernel writes them for a sampling event with
 * PERF_SAMPLE_TID | ADDR | WEIGHT) read by guest/agent/perf_ring.c, the
 * samples filtered by tier_decode() and counted by the classifier.
 */
#include <stdlib.h>
#include <string.h>
#include "test_util.h"
#include "../tier_sample.h"
#include "../../../agent/perf_ring.h"

#define MiB	(1ULL << 20)
#define GiB	(1ULL << 30)
#define TGID	777
#define LO	0x7f0000000000ULL
#define HOT	(LO + 3 * GiB + 8 * MiB)
#define ST	(PERF_SAMPLE_TID | PERF_SAMPLE_ADDR | PERF_SAMPLE_WEIGHT)
#define AREA	4096

/* A fake kernel side: writes records at data_head, wrapping. */
struct fake_ring {
	struct perf_event_mmap_page meta;
	uint8_t data[AREA];
};

static int put(struct fake_ring *r, const void *rec, size_t len)
{
	uint64_t head = r->meta.data_head, i;

	if (AREA - (head - r->meta.data_tail) < len)
		return 0;	/* full: the kernel would count a loss */
	for (i = 0; i < len; i++)
		r->data[(head + i) % AREA] = ((const uint8_t *)rec)[i];
	__atomic_store_n(&r->meta.data_head, head + len, __ATOMIC_RELEASE);
	return 1;
}

static int put_sample(struct fake_ring *r, uint32_t pid, uint32_t tid,
		      uint64_t addr, uint64_t weight)
{
	struct {
		struct perf_event_header h;
		uint32_t pid, tid;
		uint64_t addr, weight;
	} s = { { PERF_RECORD_SAMPLE, 0, sizeof(s) }, pid, tid, addr, weight };

	return put(r, &s, sizeof(s));
}

static void ring_init(struct fake_ring *r, uint64_t start)
{
	memset(r, 0, sizeof(*r));
	r->meta.data_offset = 4096;
	r->meta.data_size = AREA;
	/* start near the end so that records wrap early */
	r->meta.data_head = start;
	r->meta.data_tail = start;
}

static void ring_records_round_trip_with_wrap(void)
{
	static struct fake_ring r;
	struct perf_ring_sample out[256];
	struct perf_ring_stats st = { 0 };
	struct {
		struct perf_event_header h;
		uint64_t id, lost;
	} lost = { { PERF_RECORD_LOST, 0, sizeof(lost) }, 1, 42 };
	struct {
		struct perf_event_header h;
		uint32_t pid, tid;
		char comm[16];
	} comm = { { PERF_RECORD_COMM, 0, sizeof(comm) }, TGID, TGID, "gups" };
	size_t n, i, total = 0;

	ring_init(&r, AREA - 20);	/* the first record straddles the end */
	CHECK(put(&r, &comm, sizeof(comm)));
	for (i = 0; i < 40; i++)
		CHECK(put_sample(&r, TGID, TGID + (uint32_t)i, LO + i * 4096,
				 100 + i));
	CHECK(put(&r, &lost, sizeof(lost)));
	/* read in two parts: at most 25, then the rest */
	n = perf_ring_read(&r.meta, r.data, ST, out, 25, &st);
	CHECK_EQ(n, 25);
	CHECK(r.meta.data_tail < r.meta.data_head);
	for (i = 0; i < n; i++) {
		CHECK_EQ(out[i].pid, TGID);
		CHECK_EQ(out[i].tid, TGID + i);
		CHECK_EQ(out[i].addr, LO + i * 4096);
		CHECK_EQ(out[i].weight, 100 + i);
	}
	total += n;
	n = perf_ring_read(&r.meta, r.data, ST, out, 256, &st);
	CHECK_EQ(n, 15);
	CHECK_EQ(out[14].addr, LO + 39 * 4096);
	total += n;
	CHECK_EQ(total, 40);
	CHECK_EQ(st.samples, 40);
	CHECK_EQ(st.lost, 42);
	CHECK_EQ(st.other, 1);
	CHECK_EQ(st.bad, 0);
	CHECK_EQ(r.meta.data_tail, r.meta.data_head);
	/* nothing new: nothing read */
	CHECK_EQ(perf_ring_read(&r.meta, r.data, ST, out, 256, &st), 0);

	/* WEIGHT_STRUCT: the latency is the low 32 bits */
	ring_init(&r, 0);
	CHECK(put_sample(&r, TGID, TGID, LO, (7ULL << 32) | 300));
	CHECK_EQ(perf_ring_read(&r.meta, r.data, PERF_SAMPLE_TID |
				PERF_SAMPLE_ADDR | PERF_SAMPLE_WEIGHT_STRUCT,
				out, 4, &st), 1);
	CHECK_EQ(out[0].weight, 300);
}

static void ring_rejects_malformed_input(void)
{
	static struct fake_ring r;
	struct perf_ring_sample out[8];
	struct perf_ring_stats st = { 0 };
	struct perf_event_header zero = { PERF_RECORD_SAMPLE, 0, 0 };
	struct {
		struct perf_event_header h;
		uint32_t pid, tid;
	} shortrec = { { PERF_RECORD_SAMPLE, 0, sizeof(shortrec) }, 1, 1 };

	/* a zero-size record would loop forever: stop, skip to head */
	ring_init(&r, 100);
	CHECK(put_sample(&r, TGID, TGID, LO, 1));
	CHECK(put(&r, &zero, sizeof(zero)));
	CHECK_EQ(perf_ring_read(&r.meta, r.data, ST, out, 8, &st), 1);
	CHECK_EQ(st.bad, 1);
	CHECK_EQ(r.meta.data_tail, r.meta.data_head);
	/* a sample shorter than its sample_type says */
	CHECK(put(&r, &shortrec, sizeof(shortrec)));
	CHECK_EQ(perf_ring_read(&r.meta, r.data, ST, out, 8, &st), 0);
	CHECK_EQ(st.bad, 2);
	/* a head more than the area ahead of the tail (corrupt page) */
	r.meta.data_head = r.meta.data_tail + 2 * AREA;
	CHECK_EQ(perf_ring_read(&r.meta, r.data, ST, out, 8, &st), 0);
	CHECK_EQ(st.bad, 3);
	/* configurations it cannot read */
	CHECK(!perf_ring_supported(PERF_SAMPLE_TID));
	CHECK(!perf_ring_supported(ST | PERF_SAMPLE_CALLCHAIN));
	CHECK(!perf_ring_supported(ST | PERF_SAMPLE_WEIGHT_STRUCT));
	CHECK(perf_ring_supported(ST | PERF_SAMPLE_TIME | PERF_SAMPLE_DATA_SRC));
	r.meta.data_size = 3000;	/* not a power of two */
	CHECK_EQ(perf_ring_read(&r.meta, r.data, ST, out, 8, &st), 0);
	CHECK_EQ(st.bad, 4);
}

/* Ring images -> perf_ring_read -> tier_decode -> classifier. */
static void ring_stream_finds_hot_spot(void)
{
	static const struct hrc_interval iv[] = { { LO, LO + 64 * GiB } };
	static struct fake_ring r;
	const struct tier_filter f = {
		.tgid = TGID, .lo = LO, .hi = LO + 64 * GiB,
		.text_start = 0x400000, .text_end = 0x800000,
	};
	struct perf_ring_sample out[128];
	struct perf_ring_stats st = { 0 };
	struct hrc_params p;
	struct tctx t;
	u64 rng = 5, written = 0, decoded = 0, ok = 0;
	u32 e, i, found = 0;
	int k;

	hrc_default_params(&p);
	p.nr_cpus = 2;
	p.half_split = 1;
	CHECK_EQ(tctx_init(&t, HRC_DEF_MAX_RANGES, &p, iv, 1), 0);
	ring_init(&r, 0);
	for (e = 1; e <= 60 && !found; e++) {
		for (i = 0; i < 1000; i++) {
			u64 x = trand(&rng);
			u64 a = x % 10 < 7 ? HOT + trand_below(&rng, 2 * MiB) :
				LO + trand_below(&rng, 64 * GiB);
			size_t n, j;

			/* the kernel writes; the agent drains when full */
			while (!put_sample(&r, x % 50 ? TGID : 1, TGID, a, 200)) {
				n = perf_ring_read(&r.meta, r.data, ST, out,
						   128, &st);
				for (j = 0; j < n; j++) {
					struct tier_raw_record rec = {
						.config = TIER_EV_LOAD_LATENCY,
						.sample_flags = TIER_SAMPLE_FLAG_ADDR,
						.addr = out[j].addr,
						.weight = out[j].weight,
						.pid = out[j].pid,
						.tid = out[j].tid,
					};
					u64 addr;

					decoded++;
					if (tier_decode(&rec, &f, &addr) ==
					    TIER_SAMPLE_OK && hrc_record(&t.c, addr))
						ok++;
				}
			}
			written++;
		}
		hrc_epoch(&t.c);
		k = hrc_find(&t.c, HOT);
		if (k >= 0 && t.c.ranges[k].start == HOT &&
		    t.c.ranges[k].end == HOT + 2 * MiB)
			found = e;
	}
	printf("     ring stream: %llu records written, %llu read, %llu "
	       "counted; hot spot isolated after %u epochs\n",
	       (unsigned long long)written, (unsigned long long)decoded,
	       (unsigned long long)ok, found);
	CHECK(found > 0);
	CHECK_EQ(st.bad, 0);
	/* every record read except those still in the ring */
	CHECK_EQ(decoded + (r.meta.data_head - r.meta.data_tail) / 32, written);
	CHECK(ok > decoded * 9 / 10);	/* only the foreign pid (2%) dropped */
	tctx_free(&t);
}

const struct hrc_test hrc_perf_ring_tests[] = {
	HRC_TEST(ring_records_round_trip_with_wrap),
	HRC_TEST(ring_rejects_malformed_input),
	HRC_TEST(ring_stream_finds_hot_spot),
};
const unsigned int hrc_nr_perf_ring_tests =
	sizeof(hrc_perf_ring_tests) / sizeof(hrc_perf_ring_tests[0]);
