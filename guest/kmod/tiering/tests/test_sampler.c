// SPDX-License-Identifier: GPL-2.0
/*
 * The agent's user-space sampler (guest/agent/sampler.c) without perf
 * events: thread following (which TIDs to open and close), and the drain
 * of several threads' rings through tier_decode() into batches for the
 * module, with ring images as the kernel writes them.  The same code
 * with real events: sampler_native_test.c.
 */
#include <stdlib.h>
#include <string.h>
#include "test_util.h"
#include "../../../agent/sampler.h"

#define TGID	4242
#define LO	0x7f0000000000ULL
#define HI	(LO + 64 * GiB)
#define AREA	(16 * 4096)

struct img {
	struct perf_event_mmap_page meta;
	uint8_t pad[4096 - sizeof(struct perf_event_mmap_page)];
	uint8_t data[AREA];
};

static void img_init(struct img *r)
{
	memset(r, 0, sizeof(*r));
	r->meta.data_offset = 4096;
	r->meta.data_size = AREA;
}

/* A page-fault sample (TID | ADDR), as the kernel writes it. */
static int img_put(struct img *r, uint32_t pid, uint32_t tid, uint64_t addr)
{
	struct {
		struct perf_event_header h;
		uint32_t pid, tid;
		uint64_t addr;
	} s = { { PERF_RECORD_SAMPLE, 0, sizeof(s) }, pid, tid, addr };
	uint64_t head = r->meta.data_head, i;

	if (AREA - (head - r->meta.data_tail) < sizeof(s))
		return 0;
	for (i = 0; i < sizeof(s); i++)
		r->data[(head + i) % AREA] = ((const uint8_t *)&s)[i];
	__atomic_store_n(&r->meta.data_head, head + sizeof(s), __ATOMIC_RELEASE);
	return 1;
}

struct capture {
	uint64_t *a;
	size_t n, cap, calls, max_batch;
	int fail_after;		/* calls before returning an error; <0 never */
};

static int cap_sink(void *ctx, const uint64_t *addr, size_t n)
{
	struct capture *c = ctx;

	if (c->fail_after >= 0 && c->calls >= (size_t)c->fail_after)
		return -EBUSY;
	c->calls++;
	if (n > c->max_batch)
		c->max_batch = n;
	if (c->n + n > c->cap) {
		c->cap = (c->n + n) * 2;
		c->a = realloc(c->a, c->cap * sizeof(*c->a));
	}
	memcpy(c->a + c->n, addr, n * sizeof(*addr));
	c->n += n;
	return 0;
}

static void sampler_follows_threads(void)
{
	static const uint32_t have[] = { 10, 11, 12, 20 };
	static const uint32_t now[] = { 10, 12, 13, 21, 22 };
	uint32_t add[8], gone[8];
	size_t na, ng;

	sampler_tid_diff(have, 4, now, 5, add, &na, gone, &ng);
	CHECK_EQ(na, 3);
	CHECK_EQ(add[0], 13);
	CHECK_EQ(add[1], 21);
	CHECK_EQ(add[2], 22);
	CHECK_EQ(ng, 2);
	CHECK_EQ(gone[0], 11);
	CHECK_EQ(gone[1], 20);
	/* attach: everything is new; exit of the process: everything gone */
	sampler_tid_diff(NULL, 0, now, 5, add, &na, gone, &ng);
	CHECK_EQ(na, 5);
	CHECK_EQ(ng, 0);
	sampler_tid_diff(have, 4, NULL, 0, add, &na, gone, &ng);
	CHECK_EQ(na, 0);
	CHECK_EQ(ng, 4);
	sampler_tid_diff(have, 4, have, 4, add, &na, gone, &ng);
	CHECK_EQ(na + ng, 0);
}

static void sampler_records_filtered_like_the_module(void)
{
	struct perf_ring_sample s = { .pid = TGID, .tid = TGID + 1,
				      .addr = LO + 4096, .weight = 10 };
	const struct tier_filter f = { .tgid = TGID, .lo = LO, .hi = HI,
				       .ldlat = 100 };
	struct tier_raw_record r;
	u64 a = 0;

	/* a fault carries no latency: the threshold does not apply */
	r = sampler_raw(SAMPLER_PAGEFAULT, false, &s);
	CHECK_EQ(tier_decode(&r, &f, &a), TIER_SAMPLE_OK);
	CHECK_EQ(a, LO + 4096);
	/* the same record from the PEBS load event is below the threshold */
	r = sampler_raw(SAMPLER_PEBS, false, &s);
	CHECK_EQ(tier_decode(&r, &f, &a), TIER_SAMPLE_LATENCY);
	r = sampler_raw(SAMPLER_PEBS, true, &s);
	CHECK_EQ(tier_decode(&r, &f, &a), TIER_SAMPLE_OK);
	s.addr = HI;
	r = sampler_raw(SAMPLER_PAGEFAULT, false, &s);
	CHECK_EQ(tier_decode(&r, &f, &a), TIER_SAMPLE_IGNORE);
	/* without the flag a record of an unknown event is refused */
	r.page_fault = false;
	r.config = 0x2;
	CHECK_EQ(tier_decode(&r, &f, &a), TIER_SAMPLE_EVENT);
	/* what the module applies to the agent's addresses */
	CHECK_EQ(tier_filter_addr(&f, LO), TIER_SAMPLE_OK);
	CHECK_EQ(tier_filter_addr(&f, LO - 1), TIER_SAMPLE_IGNORE);
	CHECK_EQ(tier_filter_addr(&f, 0), TIER_SAMPLE_IGNORE);
	CHECK_EQ(tier_filter_addr(&f, HI), TIER_SAMPLE_IGNORE);
}

/* Three threads' rings -> decode -> batches of at most one page. */
static void sampler_drains_threads_in_batches(void)
{
	static struct img r[3];
	static const size_t per[3] = { 700, 300, 10 };
	struct sampler_opts o;
	struct sampler_target t;
	struct capture c = { .fail_after = -1 };
	size_t i, k, foreign = 0, outside = 0, good = 0;
	long n;

	sampler_default_opts(&o, SAMPLER_PAGEFAULT);
	memset(&t, 0, sizeof(t));
	t.pid = TGID;
	t.o = o;
	t.filter = (struct tier_filter){ .tgid = TGID, .lo = LO, .hi = HI };
	for (i = 0; i < 3; i++) {
		img_init(&r[i]);
		CHECK_EQ(sampler_add_ring(&t, TGID + (uint32_t)i, false,
					  &r[i].meta), 0);
		for (k = 0; k < per[i]; k++) {
			uint64_t a = LO + ((i << 20) | (k << 12));
			uint32_t pid = TGID;

			if (k % 50 == 7) {
				pid = 1;	/* another process */
				foreign++;
			} else if (k % 50 == 9) {
				a = HI + k;	/* outside the span */
				outside++;
			} else {
				good++;
			}
			CHECK(img_put(&r[i], pid, TGID + (uint32_t)i, a));
		}
	}
	n = sampler_drain(&t, cap_sink, &c);
	CHECK_EQ(n, good);
	CHECK_EQ(c.n, good);
	CHECK_EQ(c.max_batch, SAMPLER_BATCH);
	/* 1010 records, full batches plus one partial */
	CHECK_EQ(c.calls, (good + SAMPLER_BATCH - 1) / SAMPLER_BATCH);
	CHECK_EQ(t.st.batches, c.calls);
	CHECK_EQ(t.st.verdicts[TIER_SAMPLE_OK], good);
	CHECK_EQ(t.st.verdicts[TIER_SAMPLE_PID], foreign);
	CHECK_EQ(t.st.verdicts[TIER_SAMPLE_IGNORE], outside);
	CHECK_EQ(t.st.ring.samples, 1010);
	for (i = 0; i < 3; i++)
		CHECK_EQ(r[i].meta.data_tail, r[i].meta.data_head);
	/* addresses in ring order: the first is thread 0's first page */
	CHECK_EQ(c.a[0], LO);
	for (k = 0; k < c.n; k++)
		CHECK(c.a[k] >= LO && c.a[k] < HI);
	/* nothing new: no call at all */
	CHECK_EQ(sampler_drain(&t, cap_sink, &c), 0);
	CHECK_EQ(t.st.batches, (good + SAMPLER_BATCH - 1) / SAMPLER_BATCH);

	/*
	 * A thread that exited (POLLHUP or no longer listed) is read to its
	 * end, then dropped; the others stay.
	 */
	CHECK(img_put(&r[1], TGID, TGID + 1, LO + 5 * 4096));
	t.ev[1].hup = true;
	c.n = 0;
	CHECK_EQ(sampler_drain(&t, cap_sink, &c), 1);
	CHECK_EQ(c.a[0], LO + 5 * 4096);
	CHECK_EQ(t.nev, 2);
	CHECK_EQ(t.ev[0].tid, TGID);
	CHECK_EQ(t.ev[1].tid, TGID + 2);
	CHECK_EQ(t.st.threads_closed, 1);

	/* the module refuses (EBUSY): the rings are still consumed */
	for (k = 0; k < 600; k++)
		CHECK(img_put(&r[0], TGID, TGID, LO + (k << 12)));
	c.fail_after = (int)c.calls;
	CHECK_EQ(sampler_drain(&t, cap_sink, &c), -EBUSY);
	CHECK_EQ(r[0].meta.data_tail, r[0].meta.data_head);
	sampler_detach(&t);
	free(c.a);
}

const struct hrc_test hrc_sampler_tests[] = {
	HRC_TEST(sampler_follows_threads),
	HRC_TEST(sampler_records_filtered_like_the_module),
	HRC_TEST(sampler_drains_threads_in_batches),
};
const unsigned int hrc_nr_sampler_tests =
	sizeof(hrc_sampler_tests) / sizeof(hrc_sampler_tests[0]);
