// SPDX-License-Identifier: GPL-2.0
/*
 * The censored-rate estimator of huge entries (tier_abit_rate.c): its
 * integer exponential term, the maximum-likelihood mean time against a
 * floating-point solution of the same equation, and the history merge.
 */
#include <math.h>
#include "test_util.h"
#include "../tier_abit_rate.h"

static void q16_matches_x_over_expm1(void)
{
	static const double xs[] = { 0.001, 0.05, 0.124, 0.125, 0.3, 1.0,
				     2.5, 5.0, 10.0, 20.0, 39.0 };
	unsigned int i;

	CHECK_EQ(tier_rate_q16(0), 65536);
	CHECK_EQ(tier_rate_q16(40ULL << 16), 0);
	CHECK_EQ(tier_rate_q16(1ULL << 40), 0);
	for (i = 0; i < sizeof(xs) / sizeof(xs[0]); i++) {
		double want = xs[i] / expm1(xs[i]) * 65536.0;
		double got = tier_rate_q16((u64)(xs[i] * 65536.0));

		/* 0.2 % or one unit */
		if (fabs(got - want) > want * 0.002 + 1.0)
			printf("     q16(%g) = %.0f, want %.1f\n", xs[i], got,
			       want);
		CHECK(fabs(got - want) <= want * 0.002 + 1.0);
	}
	/* falls with x (to x = 10) */
	for (i = 1; i < 40; i++)
		CHECK(tier_rate_q16((u64)i << 14) <
		      tier_rate_q16((u64)(i - 1) << 14));
}

/* The score equation in doubles, bisected in log space. */
static double tau_double(const struct tier_rate_stats *s)
{
	double ne = s->n_early, nt = s->n_timed;
	double n = s->n_early + s->n_timed + s->n_none;
	double fbar = ne ? (double)s->early_f / ne : 0;
	double s0 = fmax(s->flush / n / (1 << TIER_RATE_PRIOR_SHIFT),
			 TIER_RATE_PRIOR_MIN_NS);
	double rhs = s->exposed + s0 * TIER_RATE_ONE, lo = 1, hi = 1e12;
	int i;

	for (i = 0; i < 200; i++) {
		double mid = sqrt(lo * hi);
		double lhs = nt * mid + (ne ? ne * fbar / expm1(fbar / mid) : 0);

		if (lhs < rhs)
			lo = mid;
		else
			hi = mid;
	}
	return hi;
}

static void tau_matches_the_likelihood(void)
{
	struct tier_rate_stats s = { .page = 1 };
	unsigned int i;

	/* never young: "never" */
	tier_rate_observe(&s, TIER_RATE_NONE, 100000, 2000000);
	CHECK_EQ(tier_rate_tau_ns(&s), TIER_RATE_TAU_MAX_NS);
	/* timed only, no flush: (exposure + prior) / count */
	s = (struct tier_rate_stats){ .page = 1 };
	for (i = 0; i < 4; i++)
		tier_rate_observe(&s, TIER_RATE_TIMED, 0, 100000);
	CHECK(fabs((double)tier_rate_tau_ns(&s) -
		   (double)(s.exposed + 1000 * TIER_RATE_ONE) / s.n_timed) <
	      2.0);
	/* mixtures, against the floating-point root */
	for (i = 0; i < 64; i++) {
		u64 f = 20000 + 30000ULL * (i % 7);
		double want, got;

		switch (i % 3) {
		case 0:
			tier_rate_observe(&s, TIER_RATE_EARLY, f, 0);
			break;
		case 1:
			tier_rate_observe(&s, TIER_RATE_TIMED, f,
					  5000 + 7919ULL * i);
			break;
		default:
			tier_rate_observe(&s, i % 2 ? TIER_RATE_EARLY :
					  TIER_RATE_NONE, f, 2000000);
		}
		want = tau_double(&s);
		got = (double)tier_rate_tau_ns(&s);
		if (fabs(got - want) > want * 0.005 + 2)
			printf("     step %u: tau %.0f, want %.0f\n", i, got, want);
		CHECK(fabs(got - want) <= want * 0.005 + 2);
	}
}

/*
 * The behaviour the module relies on: an entry early after short flushes
 * is hotter than one early after long flushes; a timed measurement makes
 * an entry colder the longer it took; "none" colder still.
 */
static void tau_orders_what_it_saw(void)
{
	struct tier_rate_stats a = { 0 }, b = { 0 }, c = { 0 }, d = { 0 };
	unsigned int i;

	for (i = 0; i < 6; i++) {
		tier_rate_observe(&a, TIER_RATE_EARLY, 50000, 0);
		tier_rate_observe(&b, TIER_RATE_EARLY, 800000, 0);
	}
	CHECK(tier_rate_tau_ns(&a) < tier_rate_tau_ns(&b));
	c = a;
	d = a;
	tier_rate_observe(&c, TIER_RATE_TIMED, 50000, 100000);
	tier_rate_observe(&d, TIER_RATE_TIMED, 50000, 1000000);
	CHECK(tier_rate_tau_ns(&a) < tier_rate_tau_ns(&c));
	CHECK(tier_rate_tau_ns(&c) < tier_rate_tau_ns(&d));
	c = a;
	tier_rate_observe(&c, TIER_RATE_NONE, 50000, 2000000);
	CHECK(tier_rate_tau_ns(&d) < tier_rate_tau_ns(&c));
	/* saturation of the weights */
	CHECK_EQ(tier_rate_frac(1000, 4 * TIER_RATE_ONE, 2000, 1024), 1024);
	CHECK_EQ(tier_rate_frac(8000, 4 * TIER_RATE_ONE, 2000, 1024), 256);
	CHECK_EQ(tier_rate_frac(TIER_RATE_TAU_MAX_NS, 4 * TIER_RATE_ONE, 2000,
				1024), 0);
	/* little evidence: in proportion */
	CHECK_EQ(tier_rate_frac(1000, TIER_RATE_ONE, 2000, 1024),
		 1024 / TIER_RATE_MIN_EVIDENCE);
	CHECK_EQ(tier_rate_frac(1000, 0, 2000, 1024), 0);
	CHECK_EQ(tier_rate_count(&a), a.n_early + a.n_timed + a.n_none);
}

/*
 * History merge: measured entries keep their statistics and lose their
 * age, unmeasured ones age and go after TIER_RATE_MAX_AGE cycles, the
 * result stays sorted, and aged entries never crowd out measured ones.
 */
static void merge_keeps_ages_and_order(void)
{
	struct tier_rate_stats old[4] = {
		{ .page = 2, .n_timed = 9, .age = 0 },
		{ .page = 5, .n_timed = 7, .age = 3 },
		{ .page = 7, .age = TIER_RATE_MAX_AGE },
		{ .page = 9, .age = 1 },
	};
	struct tier_rate_stats out[8], *s;
	u32 pos = 0, n = 0;

	s = tier_rate_merge_one(old, 4, &pos, out, &n, 8, 1);
	CHECK(s && s->page == 1 && s->n_timed == 0);
	s = tier_rate_merge_one(old, 4, &pos, out, &n, 8, 5);
	CHECK(s && s->page == 5 && s->n_timed == 7);
	tier_rate_observe(s, TIER_RATE_EARLY, 1000, 0);
	CHECK_EQ(s->age, 0);
	tier_rate_merge_end(old, 4, &pos, out, &n, 8);
	/* 1 (new), 2 (aged), 5 (measured), 9 (aged); 7 too old */
	CHECK_EQ(n, 4);
	CHECK(out[0].page == 1 && out[1].page == 2 && out[2].page == 5 &&
	      out[3].page == 9);
	CHECK(out[1].age == 1 && out[3].age == 2);
	/* aged entries stop at half of @cap, measured ones still fit */
	pos = 0;
	n = 0;
	CHECK(tier_rate_merge_one(old, 4, &pos, out, &n, 4, 1) != NULL);
	CHECK(tier_rate_merge_one(old, 4, &pos, out, &n, 4, 3) != NULL);
	tier_rate_merge_end(old, 4, &pos, out, &n, 4);
	CHECK_EQ(n, 3);
	CHECK(out[0].page == 1 && out[1].page == 2 && out[2].page == 3);
	/* and a full table refuses */
	pos = 0;
	n = 0;
	CHECK(tier_rate_merge_one(old, 4, &pos, out, &n, 1, 1) != NULL);
	CHECK(tier_rate_merge_one(old, 4, &pos, out, &n, 1, 3) == NULL);
}

const struct hrc_test hrc_abit_rate_tests[] = {
	HRC_TEST(q16_matches_x_over_expm1),
	HRC_TEST(tau_matches_the_likelihood),
	HRC_TEST(tau_orders_what_it_saw),
	HRC_TEST(merge_keeps_ages_and_order),
};
const unsigned int hrc_nr_abit_rate_tests =
	sizeof(hrc_abit_rate_tests) / sizeof(hrc_abit_rate_tests[0]);
