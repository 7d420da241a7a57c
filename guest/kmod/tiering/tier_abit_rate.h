/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Access rate of a huge entry from its censored times-to-young (pure C,
 * tested in user space by tests/test_abit_rate.c).
 *
 * Each cycle a sampled huge entry is cleared, its batch's TLB flush takes
 * F, and the entry is then read until it is young again (tier_abit.c,
 * struct tier_tty).  One measurement is one of:
 *  - early: already young at the first read after the flush, i.e. touched
 *    at some time T <= F: a left-censored time (likelihood 1 - e^-lF);
 *  - timed: young t after the flush: T = F + t (l e^-l(F+t));
 *  - none: not young within the bound B: T > F + B (e^-l(F+B)).
 * Weighing each measurement by its own time alone failed whenever F was
 * long against the cold entries' time between touches (a nested-paging
 * L1: F = 0.2-1.6 ms, a cold 2 MiB entry of GUPS -r 10 touched every
 * ~0.44 ms): cold entries were mostly early and weighed as much as hot
 * ones.  Here every measurement enters the maximum-likelihood rate of an
 * exponential inter-access time, over the entry's recent cycles (counts
 * decayed by TIER_RATE_DECAY per measurement), so an early measurement
 * after a long flush says little and one after a short flush much, and a
 * cold entry's occasional timed or none measurement pulls its rate down.
 *
 * The statistics are sufficient for that likelihood when the early ones'
 * flush times are replaced by their mean (exact when F is constant).
 * The score equation for the mean time between touches tau = 1 / l is
 *	n_early * F / (e^(F / tau) - 1) + n_timed * tau = S + S0
 * with S the timed and none measurements' exposure (F + t or F + B) and
 * S0 a prior exposure (a Gamma(1, S0) prior on l, as if the entry had
 * been seen idle for S0 once), so that an entry early in every cycle
 * gets a finite tau near F rather than 0.  The left side grows with tau:
 * one root, found by bisection in integers (no floating point in the
 * kernel).
 */
#ifndef _TIERING_TIER_ABIT_RATE_H
#define _TIERING_TIER_ABIT_RATE_H

#include "hrc_compat.h"

#define TIER_RATE_ONE		256	/* fixed point of the counts */
/* weight of the history at each new measurement: 3/4 (~4 cycles) */
#define TIER_RATE_DECAY_NUM	7
#define TIER_RATE_DECAY_DEN	8
/* prior exposure S0 as a fraction of the mean flush time (1/4) */
#define TIER_RATE_PRIOR_SHIFT	4
#define TIER_RATE_PRIOR_MIN_NS	1000
/* an entry not measured for this many cycles is forgotten */
#define TIER_RATE_MAX_AGE	8
/* reference: the entries' TIER_RATE_REF_PCT-th percentile mean time */
#define TIER_RATE_REF_PCT	5
#define TIER_RATE_TAU_MAX_NS	(1ULL << 34)	/* ~17 s: "never" */

enum tier_rate_obs {
	TIER_RATE_EARLY,	/* young by the first read after the flush */
	TIER_RATE_TIMED,	/* young at a measured time after it */
	TIER_RATE_NONE,		/* not young within the bound */
};

/* One huge entry's decayed sufficient statistics (times in ns). */
struct tier_rate_stats {
	u64 page;		/* huge page number (address >> 21) */
	u32 n_early, n_timed, n_none;	/* counts x TIER_RATE_ONE */
	u64 early_f;		/* early ones' flush times, summed x ONE */
	u64 exposed;		/* timed and none ones' F + t, summed x ONE */
	u64 flush;		/* every measurement's flush time, x ONE */
	u32 age;		/* cycles since it was last measured */
};

/*
 * Add one measurement: @obs after a flush of @flush_ns; @t_ns is the
 * time after the flush (TIER_RATE_TIMED) or the bound (TIER_RATE_NONE).
 */
void tier_rate_observe(struct tier_rate_stats *s, enum tier_rate_obs obs,
		       u64 flush_ns, u64 t_ns);

/*
 * x / (e^x - 1) in 1/65536 for @x_q16 = x * 65536 (1 at x = 0, falling
 * towards 0): the early measurements' term of the score equation.
 */
u32 tier_rate_q16(u64 x_q16);

/*
 * Maximum-likelihood mean time between touches (ns) of an entry with
 * statistics @s, or TIER_RATE_TAU_MAX_NS when it was never seen young.
 */
u64 tier_rate_tau_ns(const struct tier_rate_stats *s);

/*
 * Fraction (of @one) a sample of an entry with mean time @tau_ns and @n
 * measurements (tier_rate_count()) counts: @one at or below the
 * reference @ref_ns (the hottest entries'), then @one * @ref_ns /
 * @tau_ns, i.e. linear in the rate; and in proportion to its
 * measurements while it has fewer than TIER_RATE_MIN_EVIDENCE (decayed).
 * Why the last: an entry measured once, and early, gets a mean time near
 * the flush's resolution, close to the hot entries' (in the flush
 * simulation with a third of the entries measured per cycle, GUPS
 * -r 100: hot set found in 6 of 6 draws with the rule, 5 of 6 without).
 */
#define TIER_RATE_MIN_EVIDENCE	2
u32 tier_rate_frac(u64 tau_ns, u32 n, u64 ref_ns, u32 one);

/* Measurements in @s, decayed (x TIER_RATE_ONE). */
u32 tier_rate_count(const struct tier_rate_stats *s);

/*
 * Merge this cycle's measurements into the history.  @old (@nold entries,
 * sorted by page) is read; the result goes to @out (at most @cap) in page
 * order: an entry measured now (tier_rate_merge_one()) gets its new
 * measurement, the others age, and those older than TIER_RATE_MAX_AGE
 * are dropped; entries that aged are kept only while @out is less than
 * half full, so that the cycle's measured entries (at most @cap / 2)
 * always fit.  Calls come in ascending page order; @pos keeps the place
 * in @old and @nout the length of @out; tier_rate_merge_end() copies the
 * rest.  Returns the entry's slot in @out, or NULL when @out is full.
 */
struct tier_rate_stats *tier_rate_merge_one(const struct tier_rate_stats *old,
					    u32 nold, u32 *pos,
					    struct tier_rate_stats *out,
					    u32 *nout, u32 cap, u64 page);
void tier_rate_merge_end(const struct tier_rate_stats *old, u32 nold,
			 u32 *pos, struct tier_rate_stats *out, u32 *nout,
			 u32 cap);

#endif /* _TIERING_TIER_ABIT_RATE_H */
