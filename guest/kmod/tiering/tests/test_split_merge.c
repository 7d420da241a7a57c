// SPDX-License-Identifier: GPL-2.0
/*
 * Exact split and merge rules on small hand-built fixtures.  Unless noted:
 * granularity 2 MiB, one vCPU, tau_split 15 (threshold 15 fresh samples),
 * alpha 2.00, decay by halving.
 */
#include "test_util.h"

static void setup(struct tctx *t, const struct hrc_interval *iv, u32 n,
		  u32 max_ranges, u32 merge_epochs)
{
	struct hrc_params p;

	hrc_default_params(&p);
	p.max_ranges = max_ranges;
	p.merge_epochs = merge_epochs;
	CHECK_EQ(tctx_init(t, max_ranges, &p, iv, n), 0);
}

static const struct hrc_interval adjacent[] = {
	{ 0, 64 * MiB }, { 64 * MiB, 128 * MiB },
};

/* Fresh samples a on range 0 and b on range 1, then one epoch. */
static u32 split_after(u64 a, u64 b)
{
	struct tctx t;
	u32 ret;

	setup(&t, adjacent, 2, 16, 0);
	if (a)
		hrc_record_n(&t.c, 0, a);
	if (b)
		hrc_record_n(&t.c, 64 * MiB, b);
	ret = hrc_epoch(&t.c);
	CHECK_EQ(hrc_validate(&t.c), 0);
	tctx_free(&t);
	return ret;
}

static void split_needs_alpha_times_neighbour_density(void)
{
	/* decayed 20 vs 5: 4x denser, fresh 40 >= 15 -> split. */
	CHECK_EQ(split_after(40, 10), 1);
	/* decayed 20 vs 10: exactly alpha, strict '>' -> no split. */
	CHECK_EQ(split_after(40, 20), 0);
	/* decayed 21 vs 10: above alpha -> split. */
	CHECK_EQ(split_after(42, 20), 1);
	/* Equal densities never split. */
	CHECK_EQ(split_after(500, 500), 0);
}

static void split_needs_threshold_fresh_samples(void)
{
	CHECK_EQ(split_after(14, 0), 0);
	CHECK_EQ(split_after(15, 0), 1);
}

static void split_threshold_scales_with_cpus(void)
{
	struct hrc_params p;
	struct tctx t;

	setup(&t, adjacent, 2, 16, 0);
	p = t.c.p;
	p.nr_cpus = 4;			/* threshold 60 */
	CHECK_EQ(hrc_set_params(&t.c, &p), 0);
	hrc_record_n(&t.c, 0, 59);
	CHECK_EQ(hrc_epoch(&t.c), 0);
	hrc_record_n(&t.c, 0, 60);
	CHECK_EQ(hrc_epoch(&t.c), 1);
	tctx_free(&t);
}

static void split_compares_density_not_raw_count(void)
{
	/* 64 MiB with 40 vs 128 MiB with 80: same density, no split. */
	static const struct hrc_interval iv[] = {
		{ 0, 64 * MiB }, { 64 * MiB, 192 * MiB },
	};
	struct tctx t;

	setup(&t, iv, 2, 16, 0);
	hrc_record_n(&t.c, 0, 40);
	hrc_record_n(&t.c, 64 * MiB, 80);
	CHECK_EQ(hrc_epoch(&t.c), 0);
	tctx_free(&t);
}

static void split_halves_at_aligned_midpoint(void)
{
	/* 6 MiB = 3 granules: cut at 2 MiB; counts shared, total kept. */
	static const struct hrc_interval iv[] = { { 0, 6 * MiB } };
	struct tctx t;

	setup(&t, iv, 1, 16, 0);
	hrc_record_n(&t.c, 0, 31);
	CHECK_EQ(hrc_epoch(&t.c), 1);	/* alone: threshold only */
	CHECK_EQ(t.c.nr, 2);
	CHECK_EQ(t.c.ranges[0].end, 2 * MiB);
	CHECK_EQ(t.c.ranges[1].start, 2 * MiB);
	CHECK_EQ(t.c.ranges[1].end, 6 * MiB);
	CHECK_EQ(t.c.ranges[0].nr_access + t.c.ranges[1].nr_access, 15);
	CHECK_EQ(t.c.ranges[0].birth, 1);
	CHECK_EQ(t.c.ranges[1].birth, 1);
	tctx_free(&t);
}

static void split_never_below_two_granules(void)
{
	static const struct hrc_interval iv[] = { { 0, 2 * MiB } };
	struct tctx t;

	setup(&t, iv, 1, 16, 0);
	hrc_record_n(&t.c, 0, 100000);
	CHECK_EQ(hrc_epoch(&t.c), 0);
	CHECK_EQ(t.c.nr, 1);
	tctx_free(&t);
}

static void ranges_across_a_gap_are_not_neighbours(void)
{
	/* Not touching: each is alone, so equal counts still split both. */
	static const struct hrc_interval iv[] = {
		{ 0, 64 * MiB }, { 128 * MiB, 192 * MiB },
	};
	struct tctx t;

	setup(&t, iv, 2, 16, 1);
	hrc_record_n(&t.c, 0, 15);
	hrc_record_n(&t.c, 128 * MiB, 15);
	CHECK_EQ(hrc_epoch(&t.c), 2);
	/* ... and cold ranges never merge across the gap. */
	for (int i = 0; i < 10; i++)
		hrc_epoch(&t.c);
	CHECK_EQ(t.c.nr, 2);
	CHECK_EQ(t.c.ranges[0].end, 64 * MiB);
	CHECK_EQ(t.c.ranges[1].start, 128 * MiB);
	tctx_free(&t);
}

static void split_full_table_prefers_hottest(void)
{
	static const struct hrc_interval iv[] = {
		{ 0, 64 * MiB }, { 128 * MiB, 192 * MiB },
	};
	struct tctx t;

	setup(&t, iv, 2, 3, 0);		/* room for one more range */
	hrc_record_n(&t.c, 130 * MiB, 100);
	hrc_record_n(&t.c, 0, 30);
	CHECK_EQ(hrc_epoch(&t.c), 1);
	CHECK_EQ(t.c.nr, 3);
	CHECK_EQ(t.c.ranges[0].end, 64 * MiB);	/* colder one kept whole */
	CHECK_EQ(t.c.ranges[1].end, 160 * MiB);
	CHECK_EQ(t.c.stats.nr_split_dropped, 1);
	hrc_record_n(&t.c, 0, 30);
	CHECK_EQ(hrc_epoch(&t.c), 0);		/* full */
	CHECK_EQ(hrc_validate(&t.c), 0);
	tctx_free(&t);
}

static void cold_neighbours_merge_after_tau_merge(void)
{
	static const struct hrc_interval iv[] = {
		{ 0, 2 * MiB }, { 2 * MiB, 4 * MiB }, { 4 * MiB, 8 * MiB },
		{ 8 * MiB, 16 * MiB },
	};
	struct tctx t;

	setup(&t, iv, 4, 16, 3);
	hrc_epoch(&t.c);
	hrc_epoch(&t.c);
	CHECK_EQ(t.c.nr, 4);		/* ages 2 < tau_merge */
	hrc_epoch(&t.c);
	CHECK_EQ(t.c.nr, 1);		/* one pass merges the whole run */
	CHECK_EQ(t.c.ranges[0].start, 0);
	CHECK_EQ(t.c.ranges[0].end, 16 * MiB);
	CHECK_EQ(t.c.stats.nr_merges, 3);
	tctx_free(&t);
}

static void merge_disabled_with_zero_tau(void)
{
	static const struct hrc_interval iv[] = {
		{ 0, 2 * MiB }, { 2 * MiB, 4 * MiB },
	};
	struct tctx t;

	setup(&t, iv, 2, 16, 0);
	for (int i = 0; i < 50; i++)
		hrc_epoch(&t.c);
	CHECK_EQ(t.c.nr, 2);
	CHECK_EQ(t.c.stats.nr_merges, 0);
	tctx_free(&t);
}

static void hot_range_does_not_merge_with_cold_neighbour(void)
{
	static const struct hrc_interval iv[] = {
		{ 0, 2 * MiB }, { 2 * MiB, 4 * MiB }, { 4 * MiB, 6 * MiB },
	};
	struct tctx t;

	setup(&t, iv, 3, 16, 1);
	for (int i = 0; i < 20; i++) {
		hrc_record_n(&t.c, 2 * MiB, 100);
		hrc_epoch(&t.c);
	}
	CHECK_EQ(t.c.nr, 3);
	/* Once the hot spot stops, everything decays and merges. */
	for (int i = 0; i < 12; i++)
		hrc_epoch(&t.c);
	CHECK_EQ(t.c.nr, 1);
	tctx_free(&t);
}

static void merge_refused_if_result_would_split_again(void)
{
	/*
	 * Uniform load on one range: it splits once (alone, above the
	 * threshold); the equally dense halves must not merge back, since
	 * the merged range would immediately split again (oscillation).
	 */
	static const struct hrc_interval iv[] = { { 0, 1 * GiB } };
	struct tctx t;
	u64 rng = 7;

	setup(&t, iv, 1, 16, 1);
	for (int i = 0; i < 50; i++) {
		for (int j = 0; j < 64; j++)
			hrc_record(&t.c, (u64)j * 16 * MiB +
				   trand_below(&rng, 16 * MiB));
		hrc_epoch(&t.c);
	}
	CHECK_EQ(t.c.stats.nr_splits, 1);
	CHECK_EQ(t.c.stats.nr_merges, 0);
	CHECK_EQ(t.c.nr, 2);
	tctx_free(&t);
}

const struct hrc_test hrc_split_merge_tests[] = {
	HRC_TEST(split_needs_alpha_times_neighbour_density),
	HRC_TEST(split_needs_threshold_fresh_samples),
	HRC_TEST(split_threshold_scales_with_cpus),
	HRC_TEST(split_compares_density_not_raw_count),
	HRC_TEST(split_halves_at_aligned_midpoint),
	HRC_TEST(split_never_below_two_granules),
	HRC_TEST(ranges_across_a_gap_are_not_neighbours),
	HRC_TEST(split_full_table_prefers_hottest),
	HRC_TEST(cold_neighbours_merge_after_tau_merge),
	HRC_TEST(merge_disabled_with_zero_tau),
	HRC_TEST(hot_range_does_not_merge_with_cold_neighbour),
	HRC_TEST(merge_refused_if_result_would_split_again),
};
const unsigned int hrc_nr_split_merge_tests =
	sizeof(hrc_split_merge_tests) / sizeof(hrc_split_merge_tests[0]);
