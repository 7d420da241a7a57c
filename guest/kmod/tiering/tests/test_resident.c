// SPDX-License-Identifier: GPL-2.0
/*
 * Hot-set size in resident base pages (hrc_set_resident()) and filling
 * past a range that does not fit (the paper's f counts what can be
 * placed in FMem).
 */
#include "test_util.h"

#define MiB (1ULL << 20)

/* r0 [0,16) 16 MiB density 10/MiB, r1 [16,18) 2 MiB density 5/MiB,
 * r2 [18,20) 2 MiB density 1/MiB, r3 [20,28) cold. */
static void fixture(struct tctx *t)
{
	static const struct hrc_interval iv[] = {
		{ 0, 16 * MiB }, { 16 * MiB, 18 * MiB },
		{ 18 * MiB, 20 * MiB }, { 20 * MiB, 28 * MiB },
	};
	struct hrc_params p;

	hrc_default_params(&p);
	p.hot_pct = 0;	/* capacity mechanics only */
	p.max_ranges = 8;
	CHECK_EQ(tctx_init(t, 8, &p, iv, 4), 0);
	t->c.ranges[0].nr_access = 160;
	t->c.ranges[1].nr_access = 10;
	t->c.ranges[2].nr_access = 2;
	t->c.ranked = false;
}

static void select_fills_past_a_range_that_does_not_fit(void)
{
	struct hrc_interval pro[4], dem[4];
	struct hrc_selection s = {
		.promo = pro, .promo_max = 4, .demo = dem, .demo_max = 4,
	};
	struct tctx t;

	fixture(&t);
	/* 4 MiB: the hottest (16 MiB) does not fit; r1 and r2 do. */
	hrc_select(&t.c, 4 * MiB >> 12, &s);
	CHECK_EQ(s.nr_hot, 2);
	CHECK_EQ(s.hot_bytes, 4 * MiB);
	CHECK_EQ(pro[0].start, 16 * MiB);
	CHECK_EQ(pro[1].start, 18 * MiB);
	/* the others, coldest first: r3 (no accesses), then r0 */
	CHECK_EQ(s.nr_demo, 2);
	CHECK_EQ(dem[0].start, 20 * MiB);
	CHECK_EQ(dem[1].start, 0);
	CHECK_EQ(hrc_validate(&t.c), 0);
	tctx_free(&t);
}

static void select_counts_resident_pages(void)
{
	struct hrc_interval pro[4], dem[4];
	struct hrc_selection s = {
		.promo = pro, .promo_max = 4, .demo = dem, .demo_max = 4,
	};
	struct tctx t;

	fixture(&t);
	/* before any measurement: virtual sizes (r0 is 16 MiB) */
	CHECK_EQ(hrc_footprint_pages(&t.c, &t.c.ranges[0]), 16 * MiB >> 12);
	/* r0 has only one THP (512 base pages) and 100 small pages present */
	hrc_set_resident(&t.c, 0, 512 + 100, 512);
	hrc_set_resident(&t.c, 1, 512, 0);
	hrc_set_resident(&t.c, 2, 300, 0);
	hrc_set_resident(&t.c, 3, 1ULL << 40, 1ULL << 41);	/* clamped */
	CHECK_EQ(t.c.ranges[3].nr_resident, 8 * MiB >> 12);
	CHECK_EQ(t.c.ranges[3].nr_fast, 8 * MiB >> 12);
	hrc_select(&t.c, 4 * MiB >> 12, &s);
	/* 1024 pages: r0 (612) fits, r1 (512) not beside it, r2 (300) does */
	CHECK_EQ(s.nr_hot, 2);
	CHECK_EQ(pro[0].start, 0);
	CHECK_EQ(pro[1].start, 18 * MiB);	/* r1 passed over, r2 fits */
	CHECK_EQ(s.hot_bytes, (612ULL + 300) * 4096);
	tctx_free(&t);
}

static void residency_survives_split_and_merge(void)
{
	struct hrc_interval iv = { 0, 64 * MiB };
	struct hrc_params p;
	struct tctx t;
	u64 rng = 3, sum, fast;
	u32 e, i;

	hrc_default_params(&p);
	p.max_ranges = 64;
	p.merge_epochs = 2;
	CHECK_EQ(tctx_init(&t, 64, &p, &iv, 1), 0);
	hrc_set_resident(&t.c, 0, 10001, 4001);
	for (e = 0; e < 40; e++) {
		/* hot spot in the first 2 MiB for 20 epochs, then quiet */
		if (e < 20)
			tsample(&t.c, &rng, 0, 2 * MiB, 200);
		hrc_epoch(&t.c);
		for (sum = 0, fast = 0, i = 0; i < t.c.nr; i++) {
			sum += t.c.ranges[i].nr_resident;
			fast += t.c.ranges[i].nr_fast;
		}
		CHECK_EQ(sum, 10001);
		CHECK_EQ(fast, 4001);
	}
	CHECK(t.c.stats.nr_splits > 0);
	CHECK(t.c.stats.nr_merges > 0);
	tctx_free(&t);
}

static void share_counts_resident_pages(void)
{
	struct hrc_interval a_iv = { 0, 64 * MiB }, b_iv = { 64 * MiB, 66 * MiB };
	struct hrc_params p;
	struct tctx a, b;
	struct hrc *cs[2];

	hrc_default_params(&p);
	p.hot_pct = 0;	/* capacity mechanics only */
	p.max_ranges = 4;
	CHECK_EQ(tctx_init(&a, 4, &p, &a_iv, 1), 0);
	CHECK_EQ(tctx_init(&b, 4, &p, &b_iv, 1), 0);
	cs[0] = &a.c;
	cs[1] = &b.c;
	a.c.ranges[0].nr_access = 6400;	/* 100 per MiB, 64 MiB virtual */
	b.c.ranges[0].nr_access = 20;	/* 10 per MiB */
	/* 8 MiB: a's 64 MiB does not fit, b's 2 MiB does */
	CHECK_EQ(hrc_share(cs, 2, 0, 8 * MiB >> 12), 0);
	CHECK_EQ(hrc_share(cs, 2, 1, 8 * MiB >> 12), 2 * MiB >> 12);
	/* only 4 MiB of a is resident: both fit */
	hrc_set_resident(&a.c, 0, 4 * MiB >> 12, 0);
	a.c.ranked = false;
	CHECK_EQ(hrc_share(cs, 2, 0, 8 * MiB >> 12), 4 * MiB >> 12);
	CHECK_EQ(hrc_share(cs, 2, 1, 8 * MiB >> 12), 2 * MiB >> 12);
	tctx_free(&a);
	tctx_free(&b);
}

static void cover_adds_the_uncovered_parts(void)
{
	static const struct hrc_interval iv[] = {
		{ 0x40000000ULL, 0x80000000ULL },		/* heap */
		{ 0x7f0000000000ULL, 0x7f0040000000ULL },	/* mmap */
	};
	const u64 go = 0xc000000000ULL;
	struct hrc_params p;
	struct tctx t;

	hrc_default_params(&p);
	p.max_ranges = 6;
	CHECK_EQ(tctx_init(&t, 6, &p, iv, 2), 0);
	/* inside: nothing to do */
	CHECK_EQ(hrc_cover(&t.c, 0x40001000ULL, 0x40002000ULL), 0);
	CHECK_EQ(t.c.nr, 2);
	/* Go's heap, unaligned: widened to 2 MiB, one new range between */
	CHECK_EQ(hrc_cover(&t.c, go + 4096, go + 64 * MiB + 4096), 1);
	CHECK_EQ(t.c.nr, 3);
	CHECK_EQ(t.c.ranges[1].start, go);
	CHECK_EQ(t.c.ranges[1].end, go + 66 * MiB);
	CHECK_EQ(hrc_validate(&t.c), 0);
	/* samples there now count */
	CHECK(hrc_record(&t.c, go + MiB));
	/* across a range: only the two uncovered sides are added */
	CHECK_EQ(hrc_cover(&t.c, 0x40000000ULL - 4 * MiB,
			   0x80000000ULL + 4 * MiB), 2);
	CHECK_EQ(t.c.nr, 5);
	CHECK_EQ(t.c.ranges[0].end, 0x40000000ULL);
	CHECK_EQ(t.c.ranges[2].start, 0x80000000ULL);
	CHECK_EQ(hrc_validate(&t.c), 0);
	/* no room for two more: refused, nothing changed */
	CHECK_EQ(hrc_cover(&t.c, 0, 2 * MiB), 1);
	CHECK_EQ(hrc_cover(&t.c, 1ULL << 46, (1ULL << 46) + MiB), -ENOSPC);
	CHECK_EQ(t.c.nr, 6);
	CHECK_EQ(hrc_cover(&t.c, 5, 5), -EINVAL);
	CHECK_EQ(hrc_validate(&t.c), 0);
	tctx_free(&t);
}

/*
 * The hot-set floor (hrc_params.hot_pct): a GUPS-like footprint of ten
 * 64 MiB ranges, one with 10x the access density of the nine others,
 * whose counts carry +-40 % sampling noise.  FMEM holds 8 of the 10.
 * With the floor (default 200 %) the hot set is the dense range in every
 * one of 200 noise draws, so nothing rotates; without it (0) the other
 * seven slots go to cold ranges picked by the noise, a different set
 * from draw to draw (the pages the agent would move for no gain).
 */
static void hot_floor_keeps_noise_out_of_the_hot_set(void)
{
	struct hrc_interval iv[10], pro[10], dem[10];
	struct hrc_selection s = {
		.promo = pro, .promo_max = 10, .demo = dem, .demo_max = 10,
	};
	struct hrc_params p;
	struct tctx t;
	u64 rng = 42, first_cold = 0;
	u32 i, draw, changed = 0;

	for (i = 0; i < 10; i++)
		iv[i] = (struct hrc_interval) { i * 64 * MiB, (i + 1) * 64 * MiB };
	hrc_default_params(&p);
	p.max_ranges = 16;
	CHECK_EQ(p.hot_pct, HRC_DEF_HOT_PCT);
	CHECK_EQ(tctx_init(&t, 16, &p, iv, 10), 0);
	for (i = 0; i < 10; i++)
		hrc_set_resident(&t.c, i, 64 * MiB >> 12, 0);
	for (draw = 0; draw < 200; draw++) {
		for (i = 0; i < 10; i++) {
			u64 base = i == 9 ? 10000 : 1000;

			t.c.ranges[i].nr_access = base * 6 / 10 +
				trand_below(&rng, base * 8 / 10 + 1);
		}
		t.c.ranked = false;
		t.c.p.hot_pct = HRC_DEF_HOT_PCT;
		hrc_select(&t.c, 8 * (64 * MiB >> 12), &s);
		CHECK_EQ(s.nr_hot, 1);
		CHECK_EQ(pro[0].start, 9 * 64 * MiB);
		CHECK_EQ(s.nr_demo, 9);
		/* without the floor: full capacity, cold ranges by noise */
		t.c.p.hot_pct = 0;
		hrc_select(&t.c, 8 * (64 * MiB >> 12), &s);
		CHECK_EQ(s.nr_hot, 8);
		CHECK_EQ(pro[0].start, 9 * 64 * MiB);
		if (draw && pro[7].start != first_cold)
			changed++;
		first_cold = pro[7].start;
	}
	/* the noise really reorders the cold ranges (the test has teeth) */
	CHECK(changed > 50);
	CHECK_EQ(hrc_validate(&t.c), 0);
	tctx_free(&t);
}

/*
 * The floor is a ratio to the footprint's mean: a uniform footprint has
 * no hot set at all; a range twice as dense as the mean qualifies at
 * 200 % (>=), just below it does not; resident pages, not virtual sizes,
 * make the mean once measured.
 */
static void hot_floor_is_relative_to_the_resident_mean(void)
{
	struct hrc_interval iv[4] = {
		{ 0, 4 * MiB }, { 4 * MiB, 8 * MiB },
		{ 8 * MiB, 12 * MiB }, { 12 * MiB, 16 * MiB },
	}, pro[4], dem[4];
	struct hrc_selection s = {
		.promo = pro, .promo_max = 4, .demo = dem, .demo_max = 4,
	};
	struct hrc_params p;
	struct tctx t;
	u32 i;

	hrc_default_params(&p);
	p.max_ranges = 8;
	CHECK_EQ(tctx_init(&t, 8, &p, iv, 4), 0);
	for (i = 0; i < 4; i++)
		t.c.ranges[i].nr_access = 100;
	t.c.ranked = false;
	hrc_select(&t.c, U64_MAX, &s);
	CHECK_EQ(s.nr_hot, 0);		/* uniform: nothing worth a move */
	CHECK_EQ(s.nr_demo, 4);
	/* mean = 500 / 4 ranges = 125 per range: 250 is exactly 2x */
	t.c.ranges[0].nr_access = 250;
	t.c.ranges[1].nr_access = 50;
	t.c.ranked = false;
	hrc_select(&t.c, U64_MAX, &s);
	CHECK_EQ(s.nr_hot, 1);
	CHECK_EQ(pro[0].start, 0);
	t.c.ranges[0].nr_access = 249;
	t.c.ranges[1].nr_access = 51;
	t.c.ranked = false;
	hrc_select(&t.c, U64_MAX, &s);
	CHECK_EQ(s.nr_hot, 0);
	/*
	 * Residency: range 3 has only 64 of its 1024 pages present, so its
	 * 100 accesses are dense per resident page (mean: 500 accesses over
	 * 3 * 1024 + 64 pages); by virtual size it would be ordinary.
	 */
	t.c.ranges[0].nr_access = 100;
	t.c.ranges[1].nr_access = 100;
	for (i = 0; i < 3; i++)
		hrc_set_resident(&t.c, i, 1024, 0);
	hrc_set_resident(&t.c, 3, 64, 0);
	t.c.ranked = false;
	hrc_select(&t.c, U64_MAX, &s);
	CHECK_EQ(s.nr_hot, 1);
	CHECK_EQ(pro[0].start, 12 * MiB);
	CHECK_EQ(s.hot_bytes, 64ULL * 4096);
	/* hot_pct 0 restores filling with any range that has accesses */
	t.c.p.hot_pct = 0;
	hrc_select(&t.c, U64_MAX, &s);
	CHECK_EQ(s.nr_hot, 4);
	tctx_free(&t);
}

/* hrc_share() applies each context's own floor: a context with a flat
 * footprint gets no share, however dense its ranges are globally. */
static void share_applies_each_contexts_floor(void)
{
	struct hrc_interval a_iv[2] = { { 0, 4 * MiB }, { 4 * MiB, 8 * MiB } };
	struct hrc_interval b_iv[2] = { { 64 * MiB, 68 * MiB }, { 68 * MiB, 72 * MiB } };
	struct hrc_params p;
	struct tctx a, b;
	struct hrc *cs[2];

	hrc_default_params(&p);
	p.max_ranges = 4;
	CHECK_EQ(tctx_init(&a, 4, &p, a_iv, 2), 0);
	CHECK_EQ(tctx_init(&b, 4, &p, b_iv, 2), 0);
	cs[0] = &a.c;
	cs[1] = &b.c;
	a.c.ranges[0].nr_access = 1000;	/* flat, but dense */
	a.c.ranges[1].nr_access = 1000;
	b.c.ranges[0].nr_access = 300;	/* skewed: all in range 0, 2x the mean */
	b.c.ranges[1].nr_access = 0;
	a.c.ranked = b.c.ranked = false;
	CHECK_EQ(hrc_share(cs, 2, 0, U64_MAX), 0);
	CHECK_EQ(hrc_share(cs, 2, 1, U64_MAX), 4 * MiB >> 12);
	tctx_free(&a);
	tctx_free(&b);
}

const struct hrc_test hrc_resident_tests[] = {
	HRC_TEST(cover_adds_the_uncovered_parts),
	HRC_TEST(select_fills_past_a_range_that_does_not_fit),
	HRC_TEST(select_counts_resident_pages),
	HRC_TEST(residency_survives_split_and_merge),
	HRC_TEST(share_counts_resident_pages),
	HRC_TEST(hot_floor_keeps_noise_out_of_the_hot_set),
	HRC_TEST(hot_floor_is_relative_to_the_resident_mean),
	HRC_TEST(share_applies_each_contexts_floor),
};
const unsigned int hrc_nr_resident_tests =
	sizeof(hrc_resident_tests) / sizeof(hrc_resident_tests[0]);
