// SPDX-License-Identifier: GPL-2.0
/*
 * Behaviour over many epochs with synthetic sample streams.
 *
 * The address space for the hot spot tests is one 64 TiB range
 * [64 TiB, 128 TiB).  Each epoch halves the range containing the hot spot
 * once (split decisions use the state at the start of the step, so a
 * child never splits again in the same step), so a 2 MiB hot spot is
 * isolated after exactly log2(64 TiB / 2 MiB) = 25 splits and 25 epochs
 * (the paper's "approximately 24").  26 ranges exist at that point; the
 * 24 cold siblings then merge into one range on each side after tau_merge
 * epochs, leaving 3.
 */
#include "test_util.h"

#define SPACE_START	(64 * TiB)
#define SPACE_END	(128 * TiB)
#define HOT_A		(SPACE_START + 0x123456600000ULL)
#define HOT_B		(SPACE_START + 0x3a5a5a400000ULL)
#define HOT_SIZE	(2 * MiB)
#define ISOLATION_EPOCHS 25

static void setup_space(struct tctx *t, u32 nr_cpus)
{
	static const struct hrc_interval iv[] = {
		{ SPACE_START, SPACE_END },
	};
	struct hrc_params p;

	hrc_default_params(&p);
	p.nr_cpus = nr_cpus;
	CHECK_EQ(tctx_init(t, HRC_DEF_MAX_RANGES, &p, iv, 1), 0);
}

static bool isolated(const struct hrc *c, u64 hot)
{
	int i = hrc_find(c, hot);

	return i >= 0 && c->ranges[i].start == hot &&
	       c->ranges[i].end == hot + HOT_SIZE;
}

/*
 * Feed @hot_rate samples/epoch into [hot, hot + 2 MiB) plus @noise
 * uniform samples/epoch over the space, for at most @max_epochs; return
 * the epoch at which the hot spot became its own range (0 = never).
 */
static u32 run_until_isolated(struct tctx *t, u64 *rng, u64 hot,
			      u32 hot_rate, u32 noise, u32 max_epochs,
			      u32 *max_nr)
{
	u32 e;

	for (e = 1; e <= max_epochs; e++) {
		tsample(&t->c, rng, hot, hot + HOT_SIZE, hot_rate);
		tsample(&t->c, rng, SPACE_START, SPACE_END, noise);
		hrc_epoch(&t->c);
		CHECK_EQ(hrc_validate(&t->c), 0);
		if (max_nr && t->c.nr > *max_nr)
			*max_nr = t->c.nr;
		if (isolated(&t->c, hot))
			return e;
	}
	return 0;
}

static void hot_spot_isolated_in_exactly_25_splits(void)
{
	struct tctx t;
	u64 rng = 1;
	u32 e;

	setup_space(&t, 1);
	e = run_until_isolated(&t, &rng, HOT_A, 200, 0, 100, NULL);
	printf("     hot spot isolated after %u epochs, %llu splits, %u ranges\n",
	       e, (unsigned long long)t.c.stats.nr_splits, t.c.nr);
	CHECK_EQ(e, ISOLATION_EPOCHS);
	CHECK_EQ(t.c.stats.nr_splits, ISOLATION_EPOCHS);
	/* Cold siblings older than tau_merge already merged on the way. */
	CHECK_EQ(t.c.nr, 1 + t.c.stats.nr_splits - t.c.stats.nr_merges);
	CHECK(t.c.nr <= ISOLATION_EPOCHS + 1);

	/* Keep it hot: the cold siblings collapse, the hot spot stays. */
	for (e = 0; e < 2 * HRC_DEF_MERGE_EPOCHS; e++) {
		tsample(&t.c, &rng, HOT_A, HOT_A + HOT_SIZE, 200);
		hrc_epoch(&t.c);
	}
	CHECK(isolated(&t.c, HOT_A));
	CHECK_EQ(t.c.nr, 3);
	CHECK_EQ(t.c.stats.nr_splits, ISOLATION_EPOCHS);
	tctx_free(&t);
}

static void hot_spot_isolated_with_many_cpus_and_noise(void)
{
	struct tctx t;
	u64 rng = 2;
	u32 e, max_nr = 0;

	setup_space(&t, 8);		/* threshold 120 samples/epoch */
	e = run_until_isolated(&t, &rng, HOT_A, 400, 300, 100, &max_nr);
	printf("     with noise: isolated after %u epochs, %llu splits, max %u ranges\n",
	       e, (unsigned long long)t.c.stats.nr_splits, max_nr);
	CHECK_EQ(e, ISOLATION_EPOCHS);
	CHECK(max_nr < 50);
	tctx_free(&t);
}

static void weak_hot_spot_below_threshold_is_not_chased(void)
{
	struct tctx t;
	u64 rng = 3;

	setup_space(&t, 1);
	CHECK_EQ(run_until_isolated(&t, &rng, HOT_A, 14, 0, 60, NULL), 0);
	CHECK_EQ(t.c.nr, 1);
	tctx_free(&t);
}

static void uniform_noise_keeps_range_count_small(void)
{
	struct hrc_interval iv[2];
	struct hrc_params p;
	struct tctx t;
	u64 rng = 4, total = 0;
	u32 e, max_nr = 0;
	int n = hrc_default_layout(0x555555556000ULL, 0x7ffff7fff000ULL,
				   64 * GiB, iv);

	CHECK_EQ(n, 2);
	hrc_default_params(&p);
	p.nr_cpus = 4;
	CHECK_EQ(tctx_init(&t, HRC_DEF_MAX_RANGES, &p, iv, 2), 0);
	for (e = 0; e < 1000; e++) {
		/* 2000 samples/epoch uniformly over both ranges. */
		tsample(&t.c, &rng, iv[0].start, iv[0].end, 1000);
		tsample(&t.c, &rng, iv[1].start, iv[1].end, 1000);
		hrc_epoch(&t.c);
		CHECK_EQ(hrc_validate(&t.c), 0);
		if (t.c.nr > max_nr)
			max_nr = t.c.nr;
		total += t.c.nr;
	}
	printf("     uniform noise: max %u ranges, mean %.1f, %llu splits, %llu merges\n",
	       max_nr, (double)total / 1000,
	       (unsigned long long)t.c.stats.nr_splits,
	       (unsigned long long)t.c.stats.nr_merges);
	CHECK(max_nr <= 16);
	CHECK(t.c.nr <= 8);
	tctx_free(&t);
}

static void moving_hot_spot_is_followed(void)
{
	struct hrc_interval pro[4], dem[64];
	struct hrc_selection s = {
		.promo = pro, .promo_max = 4, .demo = dem, .demo_max = 64,
	};
	struct tctx t;
	u64 rng = 5;
	u32 e, k, max_nr = 0;
	int i;

	setup_space(&t, 1);
	CHECK_EQ(run_until_isolated(&t, &rng, HOT_A, 200, 50, 100, &max_nr),
		 ISOLATION_EPOCHS);
	for (e = 0; e < 20; e++) {
		tsample(&t.c, &rng, HOT_A, HOT_A + HOT_SIZE, 200);
		tsample(&t.c, &rng, SPACE_START, SPACE_END, 50);
		hrc_epoch(&t.c);
	}
	CHECK(isolated(&t.c, HOT_A));

	/*
	 * The hot spot moves to B.  B's range [A + 2 MiB, 128 TiB) has only
	 * one adjacent range, the still-warm A, and is not alpha times
	 * denser than it, so it cannot split until A's count has decayed
	 * below the threshold and A merged away: ceil(log2(200 / 15)) = 4
	 * epochs.  Then B (in a 48 TiB range, depth ceil(log2(48 Ti / 2 Mi))
	 * = 25) is isolated: K = 4 + 25.
	 */
	e = run_until_isolated(&t, &rng, HOT_B, 200, 50, 100, &max_nr);
	printf("     moved hot spot isolated after %u epochs (max %u ranges)\n",
	       e, max_nr);
	CHECK(e > 0 && e <= 4 + ISOLATION_EPOCHS);

	/* A cools down and is merged back into a large cold range. */
	for (k = 0; k < 2 * HRC_DEF_MERGE_EPOCHS; k++) {
		tsample(&t.c, &rng, HOT_B, HOT_B + HOT_SIZE, 200);
		tsample(&t.c, &rng, SPACE_START, SPACE_END, 50);
		hrc_epoch(&t.c);
	}
	i = hrc_find(&t.c, HOT_A);
	CHECK(i >= 0 && t.c.ranges[i].end - t.c.ranges[i].start >= 1 * TiB);
	CHECK(isolated(&t.c, HOT_B));
	CHECK(t.c.nr <= 5);
	CHECK(max_nr < 50);

	/* With 2 MiB of FMEM exactly B is promoted; A is only demotable. */
	hrc_select(&t.c, HOT_SIZE >> 12, &s);
	CHECK_EQ(s.nr_promo, 1);
	CHECK_EQ(pro[0].start, HOT_B);
	CHECK_EQ(s.nr_demo, t.c.nr - 1);
	for (k = 0; k < s.nr_demo; k++)
		CHECK(dem[k].start != HOT_B);
	tctx_free(&t);
}

static void tiny_max_ranges_bounds_count_but_still_isolates(void)
{
	/*
	 * With room for only 4 ranges the descent stalls whenever the table
	 * is full, until cold siblings reach tau_merge epochs and merge; the
	 * bound is never exceeded and the hot spot is still isolated.
	 */
	struct hrc_params p;
	struct tctx t;
	static const struct hrc_interval iv[] = {
		{ SPACE_START, SPACE_END },
	};
	u64 rng = 6;
	u32 e, max_nr = 0;

	hrc_default_params(&p);
	p.max_ranges = 4;
	CHECK_EQ(tctx_init(&t, 4, &p, iv, 1), 0);
	e = run_until_isolated(&t, &rng, HOT_A, 200, 20, 400, &max_nr);
	printf("     max_ranges 4: isolated after %u epochs, %llu splits refused\n",
	       e, (unsigned long long)t.c.stats.nr_split_dropped);
	CHECK(e >= ISOLATION_EPOCHS);
	CHECK(max_nr <= 4);
	CHECK(t.c.stats.nr_split_dropped > 0);
	tctx_free(&t);
}

const struct hrc_test hrc_dynamics_tests[] = {
	HRC_TEST(hot_spot_isolated_in_exactly_25_splits),
	HRC_TEST(hot_spot_isolated_with_many_cpus_and_noise),
	HRC_TEST(weak_hot_spot_below_threshold_is_not_chased),
	HRC_TEST(uniform_noise_keeps_range_count_small),
	HRC_TEST(moving_hot_spot_is_followed),
	HRC_TEST(tiny_max_ranges_bounds_count_but_still_isolates),
};
const unsigned int hrc_nr_dynamics_tests =
	sizeof(hrc_dynamics_tests) / sizeof(hrc_dynamics_tests[0]);
