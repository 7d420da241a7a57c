// SPDX-License-Identifier: GPL-2.0
/*
 * Parameters, initialisation, sampling, decay, ranking, selection,
 * saturation and the default layout helper.
 */
#include "test_util.h"

static const struct hrc_interval two_ranges[] = {
	{ 0, 64 * MiB },
	{ 128 * MiB, 192 * MiB },
};

static void params_defaults_are_valid(void)
{
	struct hrc_params p;

	hrc_default_params(&p);
	CHECK_EQ(hrc_params_validate(&p, HRC_DEF_MAX_RANGES), 0);
	CHECK_EQ(p.granularity, 2 * MiB);
	CHECK_EQ(p.split_thresh, 15);
	CHECK_EQ(p.significance_pct, 200);
	CHECK_EQ(p.split_period_ms, 500);
	CHECK_EQ(p.decay_shift, 1);
	CHECK(p.merge_epochs > 0);
}

static void params_invalid_values_are_rejected(void)
{
	struct hrc_params d, p;

	hrc_default_params(&d);
#define BAD(field, val)							\
	do {								\
		p = d;							\
		p.field = (val);					\
		CHECK_EQ(hrc_params_validate(&p, 2048), (u64)-EINVAL);	\
	} while (0)
	BAD(granularity, 0);
	BAD(granularity, 2048);
	BAD(granularity, 3 * MiB);
	BAD(granularity, 1ULL << 63);
	BAD(max_ranges, 0);
	BAD(max_ranges, 1);
	BAD(max_ranges, 2049);
	p = d;
	p.max_ranges = HRC_MAX_RANGES + 1;
	CHECK_EQ(hrc_params_validate(&p, U32_MAX), (u64)-EINVAL);
	BAD(split_thresh, 0);
	BAD(split_thresh, HRC_MAX_SPLIT_THRESH + 1);
	BAD(nr_cpus, 0);
	BAD(nr_cpus, HRC_MAX_CPUS + 1);
	BAD(significance_pct, 99);
	BAD(significance_pct, HRC_MAX_SIGNIFICANCE_PCT + 1);
	BAD(merge_epochs, HRC_MAX_MERGE_EPOCHS + 1);
	BAD(decay_shift, 0);
	BAD(decay_shift, HRC_MAX_DECAY_SHIFT + 1);
	BAD(split_period_ms, 9);
	BAD(split_period_ms, HRC_MAX_SPLIT_PERIOD_MS + 1);
#undef BAD
	CHECK_EQ(hrc_params_validate(NULL, 2048), (u64)-EINVAL);
	/* Boundary values that are valid. */
	p = d;
	p.granularity = 4096;
	p.max_ranges = 2;
	p.significance_pct = 100;
	p.merge_epochs = 0;
	CHECK_EQ(hrc_params_validate(&p, 2), 0);
}

static void set_params_applies_or_leaves_unchanged(void)
{
	struct hrc_params p;
	struct tctx t;

	hrc_default_params(&p);
	p.max_ranges = 8;
	CHECK_EQ(tctx_init(&t, 8, &p, two_ranges, 2), 0);

	p.split_thresh = 7;
	CHECK_EQ(hrc_set_params(&t.c, &p), 0);
	CHECK_EQ(t.c.p.split_thresh, 7);

	p.split_thresh = 0;
	CHECK_EQ(hrc_set_params(&t.c, &p), (u64)-EINVAL);
	CHECK_EQ(t.c.p.split_thresh, 7);
	p.split_thresh = 7;

	p.granularity = 4 * MiB;	/* granularity is fixed */
	CHECK_EQ(hrc_set_params(&t.c, &p), (u64)-EINVAL);
	p.granularity = 2 * MiB;

	p.max_ranges = 9;		/* above storage capacity */
	CHECK_EQ(hrc_set_params(&t.c, &p), (u64)-EINVAL);
	CHECK_EQ(t.c.p.max_ranges, 8);

	CHECK_EQ(hrc_validate(&t.c), 0);
	tctx_free(&t);

	/* Shrinking max_ranges below the current count is refused. */
	{
		static const struct hrc_interval three[] = {
			{ 0, 2 * MiB }, { 4 * MiB, 6 * MiB },
			{ 8 * MiB, 10 * MiB },
		};

		p.max_ranges = 8;
		CHECK_EQ(tctx_init(&t, 8, &p, three, 3), 0);
		p.max_ranges = 2;
		CHECK_EQ(hrc_set_params(&t.c, &p), (u64)-EBUSY);
		p.max_ranges = 3;
		CHECK_EQ(hrc_set_params(&t.c, &p), 0);
		tctx_free(&t);
	}
}

static void init_rejects_bad_intervals(void)
{
	struct hrc_params p;
	struct tctx t;
	struct hrc_interval iv[3];

	hrc_default_params(&p);
	p.max_ranges = 2;

	iv[0] = (struct hrc_interval) { 2 * MiB, 2 * MiB };	/* empty */
	CHECK_EQ(tctx_init(&t, 2, &p, iv, 1), (u64)-EINVAL);
	tctx_free(&t);
	iv[0] = (struct hrc_interval) { 1 * MiB, 4 * MiB };	/* unaligned */
	CHECK_EQ(tctx_init(&t, 2, &p, iv, 1), (u64)-EINVAL);
	tctx_free(&t);
	iv[0] = (struct hrc_interval) { 0, 3 * MiB };		/* unaligned */
	CHECK_EQ(tctx_init(&t, 2, &p, iv, 1), (u64)-EINVAL);
	tctx_free(&t);
	iv[0] = (struct hrc_interval) { 8 * MiB, 16 * MiB };	/* unsorted */
	iv[1] = (struct hrc_interval) { 0, 4 * MiB };
	CHECK_EQ(tctx_init(&t, 2, &p, iv, 2), (u64)-EINVAL);
	tctx_free(&t);
	iv[0] = (struct hrc_interval) { 0, 8 * MiB };		/* overlap */
	iv[1] = (struct hrc_interval) { 6 * MiB, 10 * MiB };
	CHECK_EQ(tctx_init(&t, 2, &p, iv, 2), (u64)-EINVAL);
	tctx_free(&t);
	CHECK_EQ(tctx_init(&t, 2, &p, iv, 0), (u64)-EINVAL);	/* none */
	tctx_free(&t);
	iv[0] = (struct hrc_interval) { 0, 2 * MiB };		/* too many */
	iv[1] = (struct hrc_interval) { 2 * MiB, 4 * MiB };
	iv[2] = (struct hrc_interval) { 4 * MiB, 6 * MiB };
	CHECK_EQ(tctx_init(&t, 2, &p, iv, 3), (u64)-EINVAL);
	tctx_free(&t);
	/* Touching intervals are fine. */
	CHECK_EQ(tctx_init(&t, 2, &p, iv, 2), 0);
	CHECK_EQ(hrc_validate(&t.c), 0);
	CHECK_EQ(hrc_reset(&t.c, NULL, 1), (u64)-EINVAL);
	CHECK_EQ(t.c.nr, 2);
	tctx_free(&t);
	/* Bad parameters and storage. */
	p.max_ranges = 3;
	CHECK_EQ(tctx_init(&t, 2, &p, iv, 2), (u64)-EINVAL);
	tctx_free(&t);
	CHECK_EQ(hrc_init(&t.c, NULL, NULL, 2, &p, iv, 2), (u64)-EINVAL);
}

static void samples_hit_containing_range_or_outside(void)
{
	struct hrc_params p;
	struct tctx t;

	hrc_default_params(&p);
	CHECK_EQ(tctx_init(&t, 16, (p.max_ranges = 16, &p), two_ranges, 2),
		 0);
	CHECK(hrc_record(&t.c, 0));			/* first byte */
	CHECK(hrc_record(&t.c, 64 * MiB - 1));		/* last byte */
	CHECK(!hrc_record(&t.c, 64 * MiB));		/* end exclusive */
	CHECK(!hrc_record(&t.c, 100 * MiB));		/* in the gap */
	CHECK(hrc_record(&t.c, 128 * MiB));
	CHECK(!hrc_record(&t.c, 192 * MiB));		/* above all */
	CHECK(!hrc_record(&t.c, U64_MAX));
	CHECK_EQ(t.c.ranges[0].nr_access, 2);
	CHECK_EQ(t.c.ranges[0].nr_fresh, 2);
	CHECK_EQ(t.c.ranges[1].nr_access, 1);
	CHECK_EQ(t.c.stats.nr_samples, 3);
	CHECK_EQ(t.c.stats.nr_outside, 4);
	CHECK_EQ(hrc_find(&t.c, 130 * MiB), 1);
	CHECK_EQ((u64)(s64)hrc_find(&t.c, 64 * MiB), (u64)-1);
	tctx_free(&t);

	/* Nothing below the first range either. */
	{
		static const struct hrc_interval hi[] = { { 2 * MiB, 4 * MiB } };

		CHECK_EQ(tctx_init(&t, 16, &p, hi, 1), 0);
		CHECK(!hrc_record(&t.c, 0));
		CHECK(!hrc_record(&t.c, 2 * MiB - 1));
		CHECK_EQ(t.c.stats.nr_outside, 2);
		tctx_free(&t);
	}
}

static void counts_decay_by_shift_each_epoch(void)
{
	static const struct hrc_interval one[] = { { 0, 2 * MiB } };
	struct hrc_params p;
	struct tctx t;

	hrc_default_params(&p);
	p.max_ranges = 4;
	CHECK_EQ(tctx_init(&t, 4, &p, one, 1), 0);
	hrc_record_n(&t.c, 0, 101);
	hrc_epoch(&t.c);			/* too small to split */
	CHECK_EQ(t.c.nr, 1);
	CHECK_EQ(t.c.ranges[0].nr_access, 50);
	CHECK_EQ(t.c.ranges[0].nr_fresh, 0);
	hrc_epoch(&t.c);
	CHECK_EQ(t.c.ranges[0].nr_access, 25);
	p.decay_shift = 2;
	CHECK_EQ(hrc_set_params(&t.c, &p), 0);
	hrc_epoch(&t.c);
	CHECK_EQ(t.c.ranges[0].nr_access, 6);
	CHECK_EQ(t.c.epoch, 3);
	tctx_free(&t);
}

static void counts_saturate_instead_of_wrapping(void)
{
	struct hrc_params p;
	struct tctx t;
	int i;

	hrc_default_params(&p);
	p.max_ranges = 64;
	CHECK_EQ(tctx_init(&t, 64, &p, two_ranges, 2), 0);
	CHECK(hrc_record_n(&t.c, 0, U64_MAX));
	CHECK(hrc_record_n(&t.c, 0, U64_MAX));
	CHECK(hrc_record_n(&t.c, 0, 5));
	CHECK_EQ(t.c.ranges[0].nr_access, HRC_COUNT_MAX);
	CHECK_EQ(t.c.ranges[0].nr_fresh, U32_MAX);
	CHECK_EQ(t.c.stats.nr_samples, U64_MAX);
	CHECK(!hrc_record_n(&t.c, 100 * MiB, U64_MAX));
	CHECK(!hrc_record_n(&t.c, 100 * MiB, 1));
	CHECK_EQ(t.c.stats.nr_outside, U64_MAX);
	/* Saturated counts still split, decay and rank sanely. */
	for (i = 0; i < 40; i++) {
		hrc_record_n(&t.c, 0, U64_MAX);
		hrc_record_n(&t.c, 130 * MiB, U64_MAX);
		hrc_epoch(&t.c);
		CHECK_EQ(hrc_validate(&t.c), 0);
	}
	hrc_rank(&t.c);
	for (i = 1; i < (int)t.c.nr; i++)
		CHECK(!hrc_hotter(&t.c.ranges[t.c.order[i]],
				  &t.c.ranges[t.c.order[i - 1]]));
	tctx_free(&t);
}

static void mul128_compare_matches_int128(void)
{
	static const u64 edge[] = {
		0, 1, 2, 0xffffffffULL, 0x100000000ULL, HRC_COUNT_MAX,
		U64_MAX - 1, U64_MAX, 1ULL << 63, 0x8000000080000001ULL,
	};
	u64 rng = 42;
	unsigned int i, j, bad = 0;

	for (i = 0; i < 20000; i++) {
		u64 v[4];
		unsigned __int128 l, r;
		int want;

		for (j = 0; j < 4; j++)
			v[j] = (i & 1) ? edge[trand_below(&rng, 10)] :
				trand(&rng) >> trand_below(&rng, 64);
		l = (unsigned __int128)v[0] * v[1];
		r = (unsigned __int128)v[2] * v[3];
		want = l > r ? 1 : (l < r ? -1 : 0);
		bad += hrc_cmp_prod(v[0], v[1], v[2], v[3]) != want;
		bad += hrc_cmp_prod(v[0], v[1], v[0], v[1]) != 0;
	}
	CHECK_EQ(bad, 0);
}

/*
 * Hand-built fixture (sizes in MiB, counts, birth epoch):
 *   r0 [0,4)   8  b0 -> 2/MiB     r3 [8,16)  16 b5 -> 2/MiB
 *   r1 [4,6)   8  b0 -> 4/MiB     r4 [16,18)  0 b0
 *   r2 [6,8)   4  b3 -> 2/MiB     r5 [18,20)  0 b2
 * Hottest first: r1, then the 2/MiB tie younger first (r3, r2, r0),
 * then the zero tie younger first (r5, r4).
 */
static void fixture(struct tctx *t)
{
	static const struct hrc_interval iv[] = {
		{ 0, 4 * MiB }, { 4 * MiB, 6 * MiB }, { 6 * MiB, 8 * MiB },
		{ 8 * MiB, 16 * MiB }, { 16 * MiB, 18 * MiB },
		{ 18 * MiB, 20 * MiB },
	};
	static const u64 cnt[] = { 8, 8, 4, 16, 0, 0 };
	static const u64 birth[] = { 0, 0, 3, 5, 0, 2 };
	struct hrc_params p;
	unsigned int i;

	hrc_default_params(&p);
	p.hot_pct = 0;	/* capacity mechanics only (floor: test_capacity.c) */
	p.max_ranges = 6;
	CHECK_EQ(tctx_init(t, 6, &p, iv, 6), 0);
	t->c.epoch = 5;
	for (i = 0; i < 6; i++) {
		t->c.ranges[i].nr_access = cnt[i];
		t->c.ranges[i].birth = birth[i];
	}
	t->c.ranked = false;
	CHECK_EQ(hrc_validate(&t->c), 0);
}

static void rank_by_density_then_younger_first(void)
{
	static const u32 want[] = { 1, 3, 2, 0, 5, 4 };
	struct tctx t;
	unsigned int i;

	fixture(&t);
	hrc_rank(&t.c);
	for (i = 0; i < 6; i++)
		CHECK_EQ(t.c.order[i], want[i]);
	tctx_free(&t);
}

static bool iv_eq(struct hrc_interval a, u64 s_mib, u64 e_mib)
{
	return a.start == s_mib * MiB && a.end == e_mib * MiB;
}

static void select_respects_capacity_and_is_disjoint(void)
{
	struct hrc_interval pro[8], dem[8];
	struct hrc_selection s = {
		.promo = pro, .promo_max = 8, .demo = dem, .demo_max = 8,
	};
	struct tctx t;

	fixture(&t);
	/* 2 MiB: r1 fits, nothing else with accesses does. */
	hrc_select(&t.c, 2 * MiB >> 12, &s);
	CHECK_EQ(s.nr_hot, 1);
	CHECK_EQ(s.nr_promo, 1);
	CHECK(iv_eq(pro[0], 4, 6));
	CHECK_EQ(s.hot_bytes, 2 * MiB);
	CHECK_EQ(s.nr_demo, 5);
	CHECK(iv_eq(dem[0], 16, 18));	/* coldest first */
	CHECK(iv_eq(dem[1], 18, 20));
	CHECK(iv_eq(dem[2], 0, 4));
	CHECK(iv_eq(dem[4], 8, 16));

	/* 12 MiB: r1 + r3 + r2 = 12 MiB exactly; r0 would exceed. */
	hrc_select(&t.c, 12 * MiB >> 12, &s);
	CHECK_EQ(s.nr_hot, 3);
	CHECK_EQ(s.hot_bytes, 12 * MiB);
	CHECK_EQ(s.nr_demo, 3);
	CHECK(iv_eq(dem[2], 0, 4));

	/* Unlimited: zero-count ranges are never promoted. */
	hrc_select(&t.c, U64_MAX, &s);
	CHECK_EQ(s.nr_hot, 4);
	CHECK_EQ(s.nr_demo, 2);

	/* Zero capacity: nothing hot, everything a demotion candidate. */
	hrc_select(&t.c, 0, &s);
	CHECK_EQ(s.nr_hot, 0);
	CHECK_EQ(s.nr_promo, 0);
	CHECK_EQ(s.nr_demo, 6);

	/* Short arrays truncate but never move hot ranges to demo. */
	s.promo_max = 1;
	s.demo_max = 1;
	hrc_select(&t.c, U64_MAX, &s);
	CHECK_EQ(s.nr_hot, 4);
	CHECK_EQ(s.nr_promo, 1);
	CHECK_EQ(s.nr_demo, 1);
	CHECK(iv_eq(dem[0], 16, 18));
	tctx_free(&t);
}

static void default_layout_matches_reference(void)
{
	struct hrc_interval iv[2];
	struct hrc_params p;
	struct tctx t;

	/* 4 GiB guest: 8 GiB above the heap start, 8 GiB below mmap_base. */
	CHECK_EQ(hrc_default_layout(0x555555556000ULL, 0x7ffff7fff000ULL,
				    4 * GiB - 4096, iv), 2);
	CHECK_EQ(iv[0].start, 0x555540000000ULL);
	CHECK_EQ(iv[0].end, 0x555540000000ULL + 8 * GiB);
	CHECK_EQ(iv[1].end, 0x800000000000ULL);
	CHECK_EQ(iv[1].start, 0x800000000000ULL - 8 * GiB);
	hrc_default_params(&p);
	CHECK_EQ(tctx_init(&t, 2048, &p, iv, 2), 0);
	tctx_free(&t);

	/* Overlapping coverage is fused into one interval. */
	CHECK_EQ(hrc_default_layout(10 * GiB, 12 * GiB, 4 * GiB, iv), 1);
	CHECK_EQ(iv[0].start, 4 * GiB);
	CHECK_EQ(iv[0].end, 18 * GiB);

	/* mmap area below the heap: still sorted. */
	CHECK_EQ(hrc_default_layout(100 * GiB, 20 * GiB, GiB, iv), 2);
	CHECK_EQ(iv[0].start, 18 * GiB);
	CHECK_EQ(iv[1].start, 100 * GiB);

	CHECK_EQ(hrc_default_layout(0, 1 * GiB, 0, iv), (u64)-EINVAL);
	CHECK_EQ(hrc_default_layout(0, 0, GiB, iv), (u64)-EINVAL);
	/* Clamped at the top of the address space. */
	CHECK_EQ(hrc_default_layout(U64_MAX, U64_MAX, GiB, iv),
		 (u64)-EINVAL);
	CHECK_EQ(hrc_default_layout(U64_MAX - 4 * GiB, 1ULL << 47, GiB, iv),
		 2);
	CHECK(iv[1].end > iv[1].start);
}


/*
 * Two targets share 8 MiB: the capacity goes to the densest ranges of
 * both, and each target's share is the size of its ranges in that prefix.
 */
static void share_splits_capacity_by_global_density(void)
{
	struct hrc_interval a_iv[8], b_iv[8];
	struct hrc_params p;
	struct tctx a, b;
	struct hrc *cs[2];
	u64 rng = 7;
	u32 i, k;

	/* two targets of eight 2 MiB ranges each */
	for (i = 0; i < 8; i++) {
		a_iv[i] = (struct hrc_interval) { i * 2 * MiB, (i + 1) * 2 * MiB };
		b_iv[i] = (struct hrc_interval) { 64 * MiB + i * 2 * MiB,
						  64 * MiB + (i + 1) * 2 * MiB };
	}
	hrc_default_params(&p);
	p.hot_pct = 0;
	p.max_ranges = 8;
	CHECK_EQ(tctx_init(&a, 8, &p, a_iv, 8), 0);
	CHECK_EQ(tctx_init(&b, 8, &p, b_iv, 8), 0);
	cs[0] = &a.c;
	cs[1] = &b.c;
	/* before any sample nobody has a hot range: no share */
	CHECK_EQ(hrc_share(cs, 2, 0, 8 * MiB >> 12), 0);
	CHECK_EQ(hrc_share(cs, 1, 0, 8 * MiB >> 12), 8 * MiB >> 12);
	CHECK_EQ(hrc_share(cs, 2, 2, 8 * MiB >> 12), 0);

	/* a: three ranges of density 100, 90, 10; b: two of 95, 80 */
	a.c.ranges[1].nr_access = 100;
	a.c.ranges[4].nr_access = 90;
	a.c.ranges[6].nr_access = 10;
	b.c.ranges[0].nr_access = 95;
	b.c.ranges[7].nr_access = 80;
	a.c.ranked = false;
	b.c.ranked = false;
	CHECK_EQ(hrc_validate(&a.c), 0);
	CHECK_EQ(hrc_validate(&b.c), 0);
	/* 8 MiB = a100, b95, a90, b80 */
	CHECK_EQ(hrc_share(cs, 2, 0, 8 * MiB >> 12), 4 * MiB >> 12);
	CHECK_EQ(hrc_share(cs, 2, 1, 8 * MiB >> 12), 4 * MiB >> 12);
	/* 6 MiB = a100, b95, a90 */
	CHECK_EQ(hrc_share(cs, 2, 0, 6 * MiB >> 12), 4 * MiB >> 12);
	CHECK_EQ(hrc_share(cs, 2, 1, 6 * MiB >> 12), 2 * MiB >> 12);
	/* 5 MiB: the third range does not fit, the prefix stops there */
	CHECK_EQ(hrc_share(cs, 2, 0, 5 * MiB >> 12), 2 * MiB >> 12);
	CHECK_EQ(hrc_share(cs, 2, 1, 5 * MiB >> 12), 2 * MiB >> 12);
	/* plenty: every range with accesses, none without */
	CHECK_EQ(hrc_share(cs, 2, 0, 1ULL << 40), 6 * MiB >> 12);
	CHECK_EQ(hrc_share(cs, 2, 1, 1ULL << 40), 4 * MiB >> 12);
	CHECK_EQ(hrc_share(cs, 2, 1, U64_MAX), 4 * MiB >> 12);
	/* the shares never add up to more than the capacity */
	for (k = 0; k < 200; k++) {
		u64 cap = trand_below(&rng, 20 * MiB >> 12);

		CHECK(hrc_share(cs, 2, 0, cap) + hrc_share(cs, 2, 1, cap) <= cap);
	}
	tctx_free(&a);
	tctx_free(&b);
}

const struct hrc_test hrc_basic_tests[] = {
	HRC_TEST(params_defaults_are_valid),
	HRC_TEST(params_invalid_values_are_rejected),
	HRC_TEST(set_params_applies_or_leaves_unchanged),
	HRC_TEST(init_rejects_bad_intervals),
	HRC_TEST(samples_hit_containing_range_or_outside),
	HRC_TEST(counts_decay_by_shift_each_epoch),
	HRC_TEST(counts_saturate_instead_of_wrapping),
	HRC_TEST(mul128_compare_matches_int128),
	HRC_TEST(rank_by_density_then_younger_first),
	HRC_TEST(select_respects_capacity_and_is_disjoint),
	HRC_TEST(default_layout_matches_reference),
	HRC_TEST(share_splits_capacity_by_global_density),
};
const unsigned int hrc_nr_basic_tests =
	sizeof(hrc_basic_tests) / sizeof(hrc_basic_tests[0]);
