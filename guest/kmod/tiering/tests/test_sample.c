// SPDX-License-Identifier: GPL-2.0
/*
 * The sample path of the PEBS source with synthetic records: decoding and
 * filtering (tier_decode), the lossy NMI-safe ring, draining into the
 * classifier; the accessed-bit window controller; and the agent's
 * balanced relocation planning (guest/agent/reloc.c).
 */
#include "test_util.h"
#include "../tier_sample.h"
#include "../../../agent/reloc.h"

#define TGID		1234
#define HEAP_LO		(0x7f0000000000ULL)
#define HEAP_HI		(HEAP_LO + 64 * GiB)
#define HOT		(HEAP_LO + 5 * GiB + 6 * MiB)

static const struct tier_filter filt = {
	.tgid = TGID, .lo = HEAP_LO, .hi = HEAP_HI,
	.text_start = 0x400000, .text_end = 0x500000, .ldlat = 0,
};

static struct tier_raw_record rec(u64 cfg, u64 addr, u32 pid)
{
	struct tier_raw_record r = {
		.config = cfg, .sample_flags = TIER_SAMPLE_FLAG_ADDR,
		.addr = addr, .weight = 300, .pid = pid, .tid = pid,
	};
	return r;
}

static void decode_filters_records(void)
{
	struct tier_raw_record r;
	struct tier_filter f = filt;
	u64 a = 0;

	r = rec(TIER_EV_LOAD_LATENCY, HOT, TGID);
	CHECK_EQ(tier_decode(&r, &f, &a), TIER_SAMPLE_OK);
	CHECK_EQ(a, HOT);
	r = rec(TIER_EV_ALL_STORES | (1ULL << 22) /* enable bit */, HOT, TGID);
	CHECK_EQ(tier_decode(&r, &f, &a), TIER_SAMPLE_OK);
	r = rec(0x01d3, HOT, TGID);
	CHECK_EQ(tier_decode(&r, &f, &a), TIER_SAMPLE_EVENT);
	r = rec(TIER_EV_LOAD_LATENCY, 0, TGID);
	CHECK_EQ(tier_decode(&r, &f, &a), TIER_SAMPLE_NOADDR);
	r = rec(TIER_EV_LOAD_LATENCY, HOT, TGID);
	r.sample_flags = 0;
	CHECK_EQ(tier_decode(&r, &f, &a), TIER_SAMPLE_NOADDR);
	r = rec(TIER_EV_LOAD_LATENCY, HOT, TGID + 1);
	CHECK_EQ(tier_decode(&r, &f, &a), TIER_SAMPLE_PID);
	r = rec(TIER_EV_LOAD_LATENCY, 0xffff888000001000ULL, TGID);
	CHECK_EQ(tier_decode(&r, &f, &a), TIER_SAMPLE_IGNORE);
	r = rec(TIER_EV_LOAD_LATENCY, HEAP_HI, TGID);
	CHECK_EQ(tier_decode(&r, &f, &a), TIER_SAMPLE_IGNORE);
	f.lo = 0;
	r = rec(TIER_EV_LOAD_LATENCY, 0x401000, TGID);
	CHECK_EQ(tier_decode(&r, &f, &a), TIER_SAMPLE_IGNORE);
	/* software latency re-check (loads only) */
	f.ldlat = 400;
	r = rec(TIER_EV_LOAD_LATENCY, HOT, TGID);
	CHECK_EQ(tier_decode(&r, &f, &a), TIER_SAMPLE_LATENCY);
	r = rec(TIER_EV_ALL_STORES, HOT, TGID);
	r.weight = 0;
	CHECK_EQ(tier_decode(&r, &f, &a), TIER_SAMPLE_OK);
}

static void ring_counts_overwrites_and_drains(void)
{
	static const struct hrc_interval iv[] = { { HEAP_LO, HEAP_HI } };
	static u64 slots[8];
	struct tier_ring ring;
	struct hrc_params p;
	struct tctx t;
	u32 i;

	hrc_default_params(&p);
	p.max_ranges = 64;
	CHECK_EQ(tctx_init(&t, 64, &p, iv, 1), 0);
	tier_ring_init(&ring, slots, 8);
	for (i = 0; i < 8; i++)
		tier_ring_push(&ring, HOT + i * 4096);
	CHECK_EQ(tier_counter_read(&ring.overwritten), 0);
	for (i = 0; i < 3; i++)
		tier_ring_push(&ring, HOT);
	CHECK_EQ(tier_counter_read(&ring.overwritten), 3);
	CHECK_EQ(tier_ring_drain(&ring, &t.c), 8);
	CHECK_EQ(t.c.stats.nr_samples, 8);
	CHECK_EQ(tier_ring_drain(&ring, &t.c), 0);	/* emptied */
	tier_ring_push(&ring, 0x1000);			/* outside */
	CHECK_EQ(tier_ring_drain(&ring, &t.c), 0);
	CHECK_EQ(t.c.stats.nr_outside, 1);
	tctx_free(&t);
}

/*
 * A synthetic PEBS stream: 70 % of load samples on a 2 MiB hot spot, the
 * rest uniform over 64 GiB, plus foreign-pid, null and kernel records.
 * Decoded, pushed into a ring, drained once per epoch: the hot spot must
 * be isolated and be the only promotion candidate for 2 MiB of FMem.
 */
static void pebs_stream_finds_hot_spot(void)
{
	static const struct hrc_interval iv[] = { { HEAP_LO, HEAP_HI } };
	static u64 slots[4096];
	struct hrc_interval pro[4], dem[4];
	struct hrc_selection sel = {
		.promo = pro, .promo_max = 4, .demo = dem, .demo_max = 4,
	};
	u64 rng = 99, counts[TIER_NR_VERDICTS] = { 0 };
	struct tier_ring ring;
	struct hrc_params p;
	struct tctx t;
	u32 e, i, found = 0, extra = 3;

	hrc_default_params(&p);
	p.nr_cpus = 4;
	p.half_split = 1;
	CHECK_EQ(tctx_init(&t, HRC_DEF_MAX_RANGES, &p, iv, 1), 0);
	tier_ring_init(&ring, slots, 4096);
	/* until isolated, then a few epochs for the counts to settle */
	for (e = 1; e <= 60 && extra; e++) {
		if (found)
			extra--;
		for (i = 0; i < 2000; i++) {
			u64 x = trand(&rng), a;
			struct tier_raw_record r;
			enum tier_verdict v;

			if (x % 10 < 7)
				a = HOT + trand_below(&rng, 2 * MiB);
			else
				a = HEAP_LO + trand_below(&rng, 64 * GiB);
			r = rec(x & 1 ? TIER_EV_LOAD_LATENCY :
				TIER_EV_ALL_STORES, a, TGID);
			if (x % 97 == 0)
				r.pid = 1;
			if (x % 89 == 0)
				r.addr = 0;
			if (x % 83 == 0)
				r.addr = 0xffffffff81000000ULL;
			v = tier_decode(&r, &filt, &a);
			counts[v]++;
			if (v == TIER_SAMPLE_OK)
				tier_ring_push(&ring, a);
		}
		tier_ring_drain(&ring, &t.c);
		hrc_epoch(&t.c);
		CHECK_EQ(hrc_validate(&t.c), 0);
		i = hrc_find(&t.c, HOT);
		if (!found && t.c.ranges[i].start == HOT &&
		    t.c.ranges[i].end == HOT + 2 * MiB)
			found = e;
	}
	printf("     hot spot isolated after %u epochs; verdicts ok %llu "
	       "noaddr %llu pid %llu ignore %llu\n", found,
	       (unsigned long long)counts[TIER_SAMPLE_OK],
	       (unsigned long long)counts[TIER_SAMPLE_NOADDR],
	       (unsigned long long)counts[TIER_SAMPLE_PID],
	       (unsigned long long)counts[TIER_SAMPLE_IGNORE]);
	CHECK(found > 0 && found <= 20);
	CHECK(counts[TIER_SAMPLE_PID] > 0 && counts[TIER_SAMPLE_NOADDR] > 0 &&
	      counts[TIER_SAMPLE_IGNORE] > 0);
	CHECK_EQ(tier_counter_read(&ring.overwritten), 0);
	hrc_select(&t.c, (2 * MiB) >> 12, &sel);
	CHECK_EQ(sel.nr_promo, 1);
	CHECK_EQ(pro[0].start, HOT);
	CHECK_EQ(pro[0].end, HOT + 2 * MiB);
	tctx_free(&t);
}

static void abit_window_tracks_young_fraction(void)
{
	CHECK_EQ(tier_abit_next_window(40, 500, 1000, 2, 15, 5, 500), 20);
	CHECK_EQ(tier_abit_next_window(40, 10, 1000, 2, 15, 5, 500), 80);
	CHECK_EQ(tier_abit_next_window(40, 100, 1000, 2, 15, 5, 500), 40);
	CHECK_EQ(tier_abit_next_window(6, 900, 1000, 2, 15, 5, 500), 5);
	CHECK_EQ(tier_abit_next_window(400, 0, 1000, 2, 15, 5, 500), 500);
	CHECK_EQ(tier_abit_next_window(40, 0, 0, 2, 15, 5, 500), 40);
}

/*
 * Sampling noise: cold ranges whose estimates differ by chance must not
 * be swapped.  A partner counts as at least the demote list's mean
 * density, and a range must qualify in two rounds in a row.
 */
static void reloc_hysteresis_ignores_noise(void)
{
	/* demote list: 3 cold ranges, one estimated 0 by chance */
	double dd[3] = { 0, 1, 2 }, sz[3] = { 1 << 21, 1 << 21, 1 << 22 };
	unsigned long ps[2] = { 0x1000, 0x9000 }, pe[2] = { 0x1fff, 0x9fff };
	double floor = reloc_density_floor(dd, sz, 3);

	CHECK(floor > 1.24 && floor < 1.26);	/* (0 + 1 + 2 * 2) / 4 */
	CHECK_EQ(reloc_density_floor(dd, sz, 0), 0);
	/* a cold range estimated at 2: beats the zero partner, not the mean */
	CHECK(reloc_pair_worthwhile(2, 0, 200));
	CHECK(!reloc_pair_worthwhile(2, floor, 200));
	/* a hot range (10x) beats both */
	CHECK(reloc_pair_worthwhile(12.5 + 0.1, floor, 200));
	/* persistence: overlap with last round's qualifiers */
	CHECK(reloc_persists(0x1800, 0x27ff, ps, pe, 2));
	CHECK(reloc_persists(0x9fff, 0xafff, ps, pe, 2));
	CHECK(!reloc_persists(0x2000, 0x8fff, ps, pe, 2));
	CHECK(!reloc_persists(0x1000, 0x1fff, ps, pe, 0));
}

static void reloc_plan_is_balanced(void)
{
	size_t p, d, hl;
	double pd[6] = { 50, 50, 40, 10, 3, 3 }, dd[6] = { 0, 1, 1, 5, 20, 30 };

	/* FMem full: one demotion per promotion */
	reloc_plan(100, 300, 0, 1000, &p, &d);
	CHECK_EQ(p, 100);
	CHECK_EQ(d, 100);
	/* not enough partners: promotions limited by them */
	reloc_plan(100, 30, 0, 1000, &p, &d);
	CHECK_EQ(p, 30);
	CHECK_EQ(d, 30);
	/* headroom absorbs the first promotions */
	reloc_plan(100, 30, 50, 1000, &p, &d);
	CHECK_EQ(p, 80);
	CHECK_EQ(d, 30);
	reloc_plan(10, 0, 50, 1000, &p, &d);
	CHECK_EQ(p, 10);
	CHECK_EQ(d, 0);
	/* per-round cap */
	reloc_plan(100, 300, 0, 64, &p, &d);
	CHECK_EQ(p, 64);
	CHECK_EQ(d, 64);
	/* batches: promote only what left FMem, plus headroom */
	hl = 5;
	CHECK_EQ(reloc_batch(10, 10, &hl), 10);
	CHECK_EQ(hl, 5);
	CHECK_EQ(reloc_batch(10, 3, &hl), 8);
	CHECK_EQ(hl, 0);
	CHECK_EQ(reloc_batch(10, 3, &hl), 3);
	CHECK_EQ(reloc_batch(10, 0, &hl), 0);
	/* alpha hysteresis: 50>2*0, 50>2*1, 40>2*1, 10 vs 2*5 stops */
	CHECK_EQ(reloc_worthwhile(pd, 6, dd, 6, 0, 200), 3);
	/* headroom 2, pairs shift: 40>2*0, 10>2*1, 3>2*1, 3 vs 2*5 stops */
	CHECK_EQ(reloc_worthwhile(pd, 6, dd, 6, 2, 200), 5);
	CHECK_EQ(reloc_worthwhile(pd, 6, dd, 1, 0, 200), 1);
}


static void cpu_budget_limits_moves(void)
{
	struct cpu_budget b;
	const unsigned long long s = 1000000000ULL;

	/* unlimited */
	cpu_budget_init(&b, 0, 1000, 0, 0);
	cpu_budget_update(&b, s, 10 * s);
	CHECK_EQ(cpu_budget_pages(&b, 777), 777);

	/* 5 %, 1 s burst: 50 ms of tokens, 20 us per page -> 2500 pages */
	cpu_budget_init(&b, 5, 1000, 0, 0);
	CHECK_EQ(cpu_budget_pages(&b, 100000), 2500);
	CHECK_EQ(cpu_budget_pages(&b, 100), 100);
	/* a round spent 200 ms on 2000 pages: 100 us/page, in debt */
	cpu_budget_learn(&b, 200000000ULL, 2000);
	cpu_budget_update(&b, s / 10, 200000000ULL);
	CHECK(b.tokens_ns < 0);
	CHECK_EQ(cpu_budget_pages(&b, 100000), 0);
	/* 5 % of 4 s repays the debt: 55 - 200 + 200 = 55 ms saved, cap 50 */
	cpu_budget_update(&b, s / 10 + 4 * s, 200000000ULL);
	CHECK_EQ(b.tokens_ns, 50000000LL);
	/* learned cost 60 us (EWMA of 20 and 100): 833 pages */
	CHECK_EQ(cpu_budget_pages(&b, 100000), 833);
	/* other work (the kernel worker) also pays */
	cpu_budget_update(&b, s / 10 + 5 * s, 400000000ULL);
	CHECK(b.tokens_ns < 0);
	/* clocks going backwards earn and pay nothing */
	cpu_budget_update(&b, 0, 0);
	cpu_budget_update(&b, 0, 0);
	CHECK(b.tokens_ns < 0);
	/* tiny measured costs are clamped */
	cpu_budget_learn(&b, 0, 1000);
	CHECK(b.page_ns >= 100.0);
	cpu_budget_learn(&b, 123, 0);
}

/*
 * Relocation waits while the FMem balloon inflates and grows, and no
 * longer once it is stuck (5 s without growth), deflating or absent.
 */
static void balloon_hold_waits_only_for_a_growing_balloon(void)
{
	struct balloon_watch w = { .last_size = -1 };

	CHECK(!reloc_balloon_holds(&w, -1, -1, 0, 5000));	/* no driver */
	CHECK(!reloc_balloon_holds(&w, 0, 0, 100, 5000));	/* at target */
	CHECK(reloc_balloon_holds(&w, 0, 16384, 200, 5000));	/* inflating */
	CHECK(reloc_balloon_holds(&w, 4096, 16384, 1200, 5000));
	CHECK(reloc_balloon_holds(&w, 4096, 16384, 6100, 5000));
	CHECK(!reloc_balloon_holds(&w, 4096, 16384, 6300, 5000)); /* stuck */
	CHECK(reloc_balloon_holds(&w, 4100, 16384, 6400, 5000)); /* grew again */
	CHECK(!reloc_balloon_holds(&w, 16384, 16384, 7000, 5000)); /* reached */
	CHECK(!reloc_balloon_holds(&w, 16000, 0, 8000, 5000));	/* deflating */
}

const struct hrc_test hrc_sample_tests[] = {
	HRC_TEST(decode_filters_records),
	HRC_TEST(ring_counts_overwrites_and_drains),
	HRC_TEST(pebs_stream_finds_hot_spot),
	HRC_TEST(abit_window_tracks_young_fraction),
	HRC_TEST(reloc_plan_is_balanced),
	HRC_TEST(reloc_hysteresis_ignores_noise),
	HRC_TEST(cpu_budget_limits_moves),
	HRC_TEST(balloon_hold_waits_only_for_a_growing_balloon),
};
const unsigned int hrc_nr_sample_tests =
	sizeof(hrc_sample_tests) / sizeof(hrc_sample_tests[0]);
