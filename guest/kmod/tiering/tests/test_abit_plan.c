// SPDX-License-Identifier: GPL-2.0
/*
 * The accessed-bit source's sampling plan and scan back-off
 * (tier_abit_plan.c): the sample estimate matches a full scan's count,
 * samples stay inside their range and stratum, and the scan rate backs
 * off only while nothing changes.
 */
#include <string.h>
#include "test_util.h"
#include "../tier_abit_plan.h"
#include "../range_classifier.h"
#include "../tier_sample.h"
#include "sim_region.h"

/* tier.h (kernel-only): TIER_ABIT_HUGE_MAX_US */
#define TIER_TEST_HUGE_MAX_US	2000

static void samples_per_range_respects_the_cap(void)
{
	CHECK_EQ(tier_abit_samples_per_range(100, 32, 16384), 32);
	CHECK_EQ(tier_abit_samples_per_range(2048, 32, 16384), 8);
	CHECK_EQ(tier_abit_samples_per_range(100000, 32, 16384), 1);
	CHECK_EQ(tier_abit_samples_per_range(0, 32, 16384), 32);
	CHECK_EQ(tier_abit_samples_per_range(10, 0, 16384), 1);
}

static void weight_counts_base_pages(void)
{
	/* 64 MiB, 32 samples: each stands for 512 pages */
	CHECK_EQ(tier_abit_sample_weight(0x10000000, 0x10000000 + 64 * MIB, 32),
		 512);
	/* a range smaller than k: every page is a sample of weight 1 */
	CHECK_EQ(tier_abit_range_samples(0x1000, 0x5000, 32), 4);
	CHECK_EQ(tier_abit_sample_weight(0x1000, 0x5000, 32), 1);
	CHECK_EQ(tier_abit_range_samples(0x1000, 0x1000, 32), 0);
}

static void samples_stay_in_their_stratum(void)
{
	u64 rng = 12345, s = 0x7f0000000000ULL, e = s + 640 * MIB;
	u32 k = 32, i, round;

	for (round = 0; round < 100; round++) {
		for (i = 0; i < k; i++) {
			u64 a = tier_abit_sample_addr(&rng, s, e, i, k);
			u64 lo = s + (e - s) / k * i, hi = lo + (e - s) / k;

			CHECK(a % PG == 0);
			CHECK(a >= lo && a < hi);
		}
	}
	/* a one-page range: its only page */
	CHECK_EQ(tier_abit_sample_addr(&rng, 0x5000, 0x6000, 0, 1), 0x5000);
}

/*
 * A 640 MiB range whose first 64 MiB are all accessed: the weighted young
 * samples give the full scan's count (16384 pages), whatever the draw.
 */
static void estimate_matches_a_full_scan(void)
{
	u64 s = 0x7f0000000000ULL, e = s + 640 * MIB, hot_end = s + 64 * MIB;
	u64 rng = 99;
	u32 round;

	for (round = 0; round < 50; round++) {
		u32 k = 40, i;	/* 16 MiB strata: four are hot */
		u64 est = 0, w = tier_abit_sample_weight(s, e, k);

		for (i = 0; i < k; i++)
			if (tier_abit_sample_addr(&rng, s, e, i, k) < hot_end)
				est += w;
		CHECK_EQ(est, 64 * MIB / PG);
	}
}

/*
 * A 4 GiB range of which 640 MiB are resident (a mmap area holding one
 * big region): more strata, so that about k land on present pages; a
 * range with nothing resident gets none; unknown residency: k.
 */
static void strata_follow_residency(void)
{
	u64 pages = 4 * 1024 * MIB / PG, res = 640 * MIB / PG;

	CHECK_EQ(tier_abit_strata(pages, res, true, 32, 16), 32 * 7);
	CHECK_EQ(tier_abit_strata(pages, pages, true, 32, 16), 32);
	CHECK_EQ(tier_abit_strata(pages, 1, true, 32, 16), 32 * 16);
	CHECK_EQ(tier_abit_strata(pages, 0, true, 32, 16), 0);
	CHECK_EQ(tier_abit_strata(pages, 0, false, 32, 16), 32);
	CHECK_EQ(tier_abit_strata(4, 4, true, 32, 16), 4);
	/* each present sample stands for its share of the resident pages */
	CHECK_EQ(tier_abit_present_weight(res, 32), res / 32);
	CHECK_EQ(tier_abit_present_weight(res, 0), 1);
	CHECK_EQ(tier_abit_present_weight(3, 32), 1);
}

/*
 * The sampled accessed-bit source end to end with the real classifier,
 * on tiering-gups' layout: one 4 GiB mmap-area range holding a 640 MiB
 * region whose last 64 MiB are hot (10x the density).  In a 10 ms window
 * (the window controller keeps 2-15 % young) a hot page turns young with
 * probability 0.36, a cold one 0.044.  Each cycle arms as tier_abit_arm()
 * does (strata by residency, two draws each, present samples only,
 * weight resident / stored) and records the young ones; the residency
 * is measured every 4th cycle, as the walk runs every 2 s.  After 60
 * epochs the hot set must lie inside the promote list for 460 MiB of
 * FMem, and the hottest range must be hot.
 */

static void sampled_abit_isolates_the_hot_set(void)
{
	static const struct hrc_interval iv[] = {
		{ SIM_BASE, SIM_BASE + 4 * 1024 * MIB },
	};
	static u64 addr[16384], weight[16384];
	struct hrc_interval pro[128], dem[128];
	struct hrc_selection sel = {
		.promo = pro, .promo_max = 128, .demo = dem, .demo_max = 128,
	};
	u64 rng = 7, srng = 11, covered = 0;
	struct hrc_params p;
	struct tctx t;
	u32 ep, i, j, n;

	hrc_default_params(&p);
	p.nr_cpus = 2;
	CHECK_EQ(tctx_init(&t, 2048, &p, iv, 1), 0);
	for (ep = 0; ep < 60; ep++) {
		struct hrc *c = &t.c;
		u32 k = tier_abit_samples_per_range(c->nr, 32, 2048);

		if (ep % 4 == 0)
			for (i = 0; i < c->nr; i++)
				hrc_set_resident(c, i, sim_overlap(c->ranges[i].start,
					c->ranges[i].end, SIM_REG_LO, SIM_REG_HI) / PG, 0);
		n = 0;
		for (i = 0; i < c->nr; i++) {
			const struct hrc_range *r = &c->ranges[i];
			u64 pages = (r->end - r->start) / PG, w;
			u32 m = tier_abit_strata(pages, r->nr_resident,
						 c->resident_known, k, 16);
			u32 first = n, tries;

			for (j = 0; j < m && n < 2048; j++)
				for (tries = 0; tries < 2; tries++) {
					u64 a = tier_abit_sample_addr(&srng, r->start,
								      r->end, j, m);

					if (a < SIM_REG_LO || a >= SIM_REG_HI)
						continue;
					addr[n++] = a;
					break;
				}
			w = tier_abit_present_weight(c->resident_known ?
						     r->nr_resident : pages, n - first);
			for (j = first; j < n; j++)
				weight[j] = w;
		}
		for (j = 0; j < n; j++) {
			u64 prob = addr[j] >= SIM_HOT_LO ? 360 : 44;

			if (trand_below(&rng, 1000) < prob)
				hrc_record_n(c, addr[j], weight[j]);
		}
		hrc_epoch(c);
	}
	hrc_select(&t.c, 460 * MIB / PG, &sel);
	CHECK(sel.nr_promo > 0);
	for (i = 0; i < sel.nr_promo; i++)
		covered += sim_overlap(pro[i].start, pro[i].end + 1, SIM_HOT_LO,
				       SIM_REG_HI);
	printf("     %u ranges, %u promoted, hot set covered %llu of %llu MiB, hottest [%llx, %llx]\n",
	       t.c.nr, sel.nr_promo, (unsigned long long)(covered / MIB),
	       64ULL, (unsigned long long)pro[0].start,
	       (unsigned long long)pro[0].end);
	CHECK(covered * 10 >= 64 * MIB * 9);
	CHECK(pro[0].start >= SIM_HOT_LO - 32 * MIB && pro[0].end <= SIM_REG_HI);
	CHECK_EQ(hrc_validate(&t.c), 0);
	tctx_free(&t);
}

/*
 * Huge entries (THP): the young weight of a huge sample is its young
 * rate over the sub-windows, not "young once"; base entries, and huge
 * ones with sub-windows off, keep the single-bit rule.
 */
static void young_weight_follows_the_rate(void)
{
	CHECK_EQ(tier_abit_young_weight(5120, true, false, 0, 0), 5120);
	CHECK_EQ(tier_abit_young_weight(5120, false, false, 0, 0), 0);
	CHECK_EQ(tier_abit_young_weight(5120, true, false, 0, 8), 5120);
	CHECK_EQ(tier_abit_young_weight(5120, true, true, 0, 0), 5120);
	CHECK_EQ(tier_abit_young_weight(5120, true, true, 8, 8), 5120);
	CHECK_EQ(tier_abit_young_weight(5120, true, true, 1, 8), 640);
	CHECK_EQ(tier_abit_young_weight(5120, true, true, 0, 8), 0);
	CHECK_EQ(tier_abit_young_weight(5120, false, true, 4, 8), 2560);
	CHECK_EQ(tier_abit_young_weight(5120, true, true, 9, 8), 5120);
	/* batches: half a sub-window's worth of probes, at least one */
	CHECK_EQ(tier_abit_huge_batch(200, 1000), 100);
	CHECK_EQ(tier_abit_huge_batch(20, 100000), 1);
	CHECK_EQ(tier_abit_huge_batch(20, 0), 10000);
	CHECK_EQ(tier_abit_huge_batch(2000, 300), 3333);
	CHECK(tier_abit_same_huge(0x7f0000200000ULL, 0x7f00003ff000ULL));
	CHECK(!tier_abit_same_huge(0x7f00001ff000ULL, 0x7f0000200000ULL));
}

/*
 * Time-to-young's plan (huge entries): the percentile, the polling
 * budget, spin, tail, batches, flush rule and histogram.
 */
static void tty_plan_helpers(void)
{
	u64 v[8];
	u32 i;

	/* the percentile; "never young" counts as longest */
	for (i = 0; i < 8; i++)
		v[i] = (7 - i) * 1000;
	v[3] = TIER_ABIT_TTY_NONE;
	CHECK_EQ(tier_abit_tty_quantile(v, 8, 0), 0);
	CHECK_EQ(tier_abit_tty_quantile(v, 8, 25), 2000);
	for (i = 1; i < 8; i++)
		CHECK(v[i - 1] <= v[i]);
	CHECK_EQ(v[7], TIER_ABIT_TTY_NONE);
	CHECK_EQ(tier_abit_tty_quantile(v, 8, 100), TIER_ABIT_TTY_NONE);
	CHECK_EQ(tier_abit_tty_quantile(v, 0, 15), TIER_ABIT_TTY_NONE);
	/* 2 % of a 500 ms interval: 10 ms, half to spins, half to the tail */
	CHECK_EQ(tier_abit_tty_budget_us(500, 20), 10000);
	CHECK_EQ(tier_abit_tty_budget_us(8000, 20), 160000);
	CHECK_EQ(tier_abit_tty_tail_us(2000, 10000), 2000);
	CHECK_EQ(tier_abit_tty_tail_us(2000, 1000), 500);
	/*
	 * Batches: 5 ms of spins at 0.5 ms a flush + 50 us a spin: 9 of
	 * them, 318 entries in batches of 36; a cheap flush (hardware): 4;
	 * no budget: one batch; always at least one entry.
	 */
	CHECK_EQ(tier_abit_tty_batch(318, 10000, 500000, 50), 36);
	CHECK_EQ(tier_abit_tty_batch(318, 10000, 5000, 50), 4);
	CHECK_EQ(tier_abit_tty_batch(318, 0, 500000, 50), 318);
	CHECK_EQ(tier_abit_tty_batch(0, 10000, 500000, 50), 1);
	CHECK_EQ(tier_abit_tty_batch(3, 10000, 0, 0), 1);
	/* flush after each batch unless told never to */
	CHECK(!tier_abit_tty_flush(0));
	CHECK(tier_abit_tty_flush(1));
	CHECK(tier_abit_tty_flush(2));
	/* histogram: <1 us, [1,2), [2,4) ... [1024,2048) us, later / none */
	CHECK_EQ(tier_abit_tty_bucket(999), 0);
	CHECK_EQ(tier_abit_tty_bucket(1000), 1);
	CHECK_EQ(tier_abit_tty_bucket(3999), 2);
	CHECK_EQ(tier_abit_tty_bucket(1500000), 11);
	CHECK_EQ(tier_abit_tty_bucket(2048000), TIER_ABIT_TTY_HIST - 1);
	CHECK_EQ(tier_abit_tty_bucket(TIER_ABIT_TTY_NONE),
		 TIER_ABIT_TTY_HIST - 1);
}

/* P(an entry touched at @per_mille_us / 1000 per us is young in @us). */
static u64 young_per_mille(u64 per_mille_us, u32 us)
{
	double idle = 1.0;
	u32 i;

	for (i = 0; i < us; i++)
		idle *= 1.0 - per_mille_us / 1000.0;
	return (u64)((1.0 - idle) * 1000.0);
}

/*
 * The sub-window controller: starting at the longest sub-window, where
 * cold and hot huge entries are both nearly always young (cold touched
 * once per ms, hot 10x as often; 10 % of the entries hot), it narrows
 * the sub-window until the young fraction is in [2 %, 15 %]; there a hot
 * entry is young at least 4x as often as a cold one.
 */
static void huge_subwindow_finds_contrast(void)
{
	u32 us = TIER_TEST_HUGE_MAX_US, round;
	u64 ph = 0, pc = 0;

	ph = young_per_mille(10, us);
	pc = young_per_mille(1, us);
	CHECK(pc > 800);	/* saturated: no contrast at the start */
	for (round = 0; round < 20; round++) {
		ph = young_per_mille(10, us);
		pc = young_per_mille(1, us);
		/* 100 entries x 8 sub-windows, 10 of them hot */
		us = tier_abit_next_window(us, (10 * ph + 90 * pc) * 8 / 1000,
					   100 * 8, 2, 15, 20, 2000);
	}
	printf("     sub-window %u us: hot young %llu / 1000, cold %llu / 1000\n",
	       us, (unsigned long long)ph, (unsigned long long)pc);
	CHECK(us < TIER_TEST_HUGE_MAX_US);
	CHECK(ph >= 4 * pc);
	CHECK((10 * ph + 90 * pc) <= 100 * 150);
}

static void backoff_only_while_stable(void)
{
	u32 lvl = 0, i;

	/* nothing moved and the hot set kept its size: back off to max */
	for (i = 0; i < 6; i++)
		lvl = tier_abit_next_level(lvl, tier_abit_epoch_stable(
				64 * MIB, 64 * MIB + MIB, 0), 4);
	CHECK_EQ(lvl, 4);
	/* the agent moved pages: back to the base rate at once */
	CHECK(!tier_abit_epoch_stable(64 * MIB, 64 * MIB, 1));
	lvl = tier_abit_next_level(lvl, false, 4);
	CHECK_EQ(lvl, 0);
	/* the hot set grew by a quarter: a change */
	CHECK(!tier_abit_epoch_stable(64 * MIB, 80 * MIB, 0));
	CHECK(!tier_abit_epoch_stable(64 * MIB, 48 * MIB, 0));
	CHECK(tier_abit_epoch_stable(64 * MIB, 68 * MIB, 0));
	/* nothing hot yet, nothing moved: stable; something appeared: not */
	CHECK(tier_abit_epoch_stable(0, 0, 0));
	CHECK(!tier_abit_epoch_stable(0, MIB, 0));
	CHECK_EQ(tier_abit_next_level(0, true, 0), 0);
	/* 12 splits among 184 ranges: noise; 2 among 4: a change */
	CHECK_EQ(tier_abit_changes(0, 12, 184), 0);
	CHECK_EQ(tier_abit_changes(0, 2, 4), 2);
	CHECK_EQ(tier_abit_changes(5, 12, 184), 5);
	CHECK_EQ(tier_abit_changes(0, 0, 0), 0);
}

const struct hrc_test hrc_abit_plan_tests[] = {
	HRC_TEST(samples_per_range_respects_the_cap),
	HRC_TEST(weight_counts_base_pages),
	HRC_TEST(samples_stay_in_their_stratum),
	HRC_TEST(estimate_matches_a_full_scan),
	HRC_TEST(strata_follow_residency),
	HRC_TEST(sampled_abit_isolates_the_hot_set),
	HRC_TEST(young_weight_follows_the_rate),
	HRC_TEST(huge_subwindow_finds_contrast),
	HRC_TEST(tty_plan_helpers),
	HRC_TEST(backoff_only_while_stable),
};
const unsigned int hrc_nr_abit_plan_tests =
	sizeof(hrc_abit_plan_tests) / sizeof(hrc_abit_plan_tests[0]);
