// SPDX-License-Identifier: GPL-2.0
/*
 * Access rate of a huge entry from censored times-to-young; see
 * tier_abit_rate.h.
 */
#include "tier_abit_rate.h"

#define Q16		65536ULL
#define Q30		(1ULL << 30)
#define RATE_T_MAX_NS	(1ULL << 31)	/* one measurement's F + t, capped */

static u64 rate_decay(u64 v)
{
	return v * TIER_RATE_DECAY_NUM / TIER_RATE_DECAY_DEN;
}

void tier_rate_observe(struct tier_rate_stats *s, enum tier_rate_obs obs,
		       u64 flush_ns, u64 t_ns)
{
	u64 f = flush_ns < RATE_T_MAX_NS ? flush_ns : RATE_T_MAX_NS;
	u64 ft = t_ns < RATE_T_MAX_NS - f ? f + t_ns : RATE_T_MAX_NS;

	s->n_early = (u32)rate_decay(s->n_early);
	s->n_timed = (u32)rate_decay(s->n_timed);
	s->n_none = (u32)rate_decay(s->n_none);
	s->early_f = rate_decay(s->early_f);
	s->exposed = rate_decay(s->exposed);
	s->flush = rate_decay(s->flush);
	s->flush += f * TIER_RATE_ONE;
	s->age = 0;
	switch (obs) {
	case TIER_RATE_EARLY:
		/* touched within the flush; at least the first read's time */
		if (f < TIER_RATE_PRIOR_MIN_NS)
			f = TIER_RATE_PRIOR_MIN_NS;
		s->n_early += TIER_RATE_ONE;
		s->early_f += f * TIER_RATE_ONE;
		break;
	case TIER_RATE_TIMED:
		s->n_timed += TIER_RATE_ONE;
		s->exposed += ft * TIER_RATE_ONE;
		break;
	case TIER_RATE_NONE:
		s->n_none += TIER_RATE_ONE;
		s->exposed += ft * TIER_RATE_ONE;
		break;
	}
}

/* e^-h in 1/2^30 for 0 <= h <= 1/16 (@h_q30 = h * 2^30): Taylor to h^3. */
static u64 rate_exp_small(u64 h_q30)
{
	u64 h2 = h_q30 * h_q30 >> 30, h3 = h2 * h_q30 >> 30;

	return Q30 - h_q30 + h2 / 2 - h3 / 6;
}

u32 tier_rate_q16(u64 x_q16)
{
	u64 e;
	u32 m = 0;

	if (!x_q16)
		return (u32)Q16;
	if (x_q16 < Q16 / 8)	/* 1 - x/2 + x^2/12: no cancellation */
		return (u32)(Q16 - x_q16 / 2 + x_q16 * x_q16 / (12 * Q16));
	if (x_q16 >= 40 * Q16)	/* below 2^-50 */
		return 0;
	/* e^-x = (e^-(x / 2^m))^(2^m) with x / 2^m <= 1/16 */
	while ((x_q16 >> m) > Q16 / 16)
		m++;
	e = rate_exp_small((x_q16 << 14) >> m);
	while (m--)
		e = e * e >> 30;
	if (e >= Q30)
		return (u32)Q16;
	return (u32)(x_q16 * e / (Q30 - e));
}

/* Left side of the score equation at @tau (x TIER_RATE_ONE, ns). */
static u64 rate_lhs(const struct tier_rate_stats *s, u64 fbar, u64 tau)
{
	u64 v = (u64)s->n_timed * tau;

	/* F / (e^(F / tau) - 1) = tau * q(F / tau) */
	if (s->n_early)
		v += (u64)s->n_early *
		     (tau * tier_rate_q16(fbar * Q16 / tau) / Q16);
	return v;
}

u64 tier_rate_tau_ns(const struct tier_rate_stats *s)
{
	u32 n = s->n_early + s->n_timed + s->n_none;
	u64 fbar, s0, rhs, lo = 1, hi = TIER_RATE_TAU_MAX_NS;
	u32 i;

	if (!s->n_early && !s->n_timed)
		return TIER_RATE_TAU_MAX_NS;
	fbar = s->n_early ? s->early_f / s->n_early : 0;
	s0 = n ? (s->flush / n) >> TIER_RATE_PRIOR_SHIFT : 0;
	if (s0 < TIER_RATE_PRIOR_MIN_NS)
		s0 = TIER_RATE_PRIOR_MIN_NS;
	rhs = s->exposed + s0 * TIER_RATE_ONE;
	if (rate_lhs(s, fbar, hi) < rhs)
		return TIER_RATE_TAU_MAX_NS;
	/* the left side grows with tau: bisect to 1 ns */
	for (i = 0; i < 40 && hi - lo > 1; i++) {
		u64 mid = lo + (hi - lo) / 2;

		if (rate_lhs(s, fbar, mid) < rhs)
			lo = mid;
		else
			hi = mid;
	}
	return hi;
}

u32 tier_rate_count(const struct tier_rate_stats *s)
{
	return s->n_early + s->n_timed + s->n_none;
}

u32 tier_rate_frac(u64 tau_ns, u32 n, u64 ref_ns, u32 one)
{
	u64 f = tau_ns <= ref_ns ? one : (u64)one * ref_ns / tau_ns;

	/* less than TIER_RATE_MIN_EVIDENCE measurements: in proportion */
	if (n < TIER_RATE_MIN_EVIDENCE * TIER_RATE_ONE)
		f = f * n / (TIER_RATE_MIN_EVIDENCE * TIER_RATE_ONE);
	return (u32)f;
}

/* Copy the entries of @old below @page, aged, while @out is under half. */
static void rate_age_below(const struct tier_rate_stats *old, u32 nold,
			   u32 *pos, struct tier_rate_stats *out, u32 *nout,
			   u32 cap, u64 page)
{
	for (; *pos < nold && old[*pos].page < page; (*pos)++) {
		if (old[*pos].age + 1 > TIER_RATE_MAX_AGE || *nout >= cap / 2)
			continue;
		out[*nout] = old[*pos];
		out[(*nout)++].age++;
	}
}

struct tier_rate_stats *tier_rate_merge_one(const struct tier_rate_stats *old,
					    u32 nold, u32 *pos,
					    struct tier_rate_stats *out,
					    u32 *nout, u32 cap, u64 page)
{
	struct tier_rate_stats *s;

	rate_age_below(old, nold, pos, out, nout, cap, page);
	if (*nout >= cap)
		return NULL;
	s = &out[(*nout)++];
	if (*pos < nold && old[*pos].page == page)
		*s = old[(*pos)++];
	else
		*s = (struct tier_rate_stats){ .page = page };
	return s;
}

void tier_rate_merge_end(const struct tier_rate_stats *old, u32 nold,
			 u32 *pos, struct tier_rate_stats *out, u32 *nout,
			 u32 cap)
{
	rate_age_below(old, nold, pos, out, nout, cap, U64_MAX);
}
