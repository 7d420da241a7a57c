/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Balanced relocation planning (pure logic, unit-tested in
 * tests/test_reloc.c): given promotion candidates (hot pages in SMem,
 * hottest first) and demotion candidates (cold pages in FMem, coldest
 * first), decide how many pages to move so that FMem never holds more
 * than it does now plus its free headroom.
 */
#ifndef _AGENT_RELOC_H
#define _AGENT_RELOC_H

#include <stddef.h>

/*
 * reloc_plan() - number of promotions and demotions for one round.
 * @nr_promo:	promotion candidates.
 * @nr_demo:	demotion candidates.
 * @headroom:	FMem pages that may still be filled (free minus reserve).
 * @max_moves:	cap on promotions per round.
 * @promo:	out: pages to promote.
 * @demo:	out: pages to demote (the swap partners first).
 *
 * Demotions are only planned for promotions that do not fit the headroom:
 * promo = min(nr_promo, max_moves, nr_demo + headroom),
 * demo = max(0, promo - headroom).
 */
void reloc_plan(size_t nr_promo, size_t nr_demo, size_t headroom,
		size_t max_moves, size_t *promo, size_t *demo);

/*
 * reloc_batch() - promotions allowed in one batch after @demoted_ok pages
 * of the batch actually left FMem; consumes *@headroom_left.
 */
size_t reloc_batch(size_t want, size_t demoted_ok, size_t *headroom_left);

/*
 * reloc_worthwhile() - how many of the first @np promotions are worth it.
 * @pd:		densities of the promotion pages' ranges (non-increasing).
 * @dd:		densities of the demotion pages' ranges (non-decreasing).
 * @nd:		demotion pages available.
 * @headroom:	the first @headroom promotions need no partner.
 * @alpha_pct:	promotion i >= headroom needs pd[i] * 100 > alpha_pct *
 *		dd[i - headroom]; the first pair that fails ends the list.
 */
size_t reloc_worthwhile(const double *pd, size_t np, const double *dd,
			size_t nd, size_t headroom, unsigned long alpha_pct);

/*
 * reloc_pair_worthwhile() - the rule for one swap, used by
 * reloc_worthwhile() and by the agent's walk: a promotion whose range
 * has density @promo_density may displace a page of density
 * @demo_density only if it is alpha times denser.
 */
int reloc_pair_worthwhile(double promo_density, double demo_density,
			  unsigned long alpha_pct);

/*
 * Hysteresis against sampling noise (issue 14: with sampled accessed
 * bits the agent kept swapping cold pages for cold pages whose estimated
 * densities differed by chance, 185 k moves for a 16 k-page hot set).
 *
 * reloc_density_floor() - the size-weighted mean density of the demote
 * list: a swap partner counts as at least this dense, so a promotion must
 * be alpha times denser than the cold tier on average, not merely than
 * the coldest-looking (often zero-sample) range.
 */
double reloc_density_floor(const double *dens, const double *bytes, size_t n);

/*
 * reloc_persists() - [@start, @end] overlaps one of the @n intervals that
 * qualified in the previous round: a range is promoted only once it has
 * qualified in two rounds in a row.
 */
int reloc_persists(unsigned long start, unsigned long end,
		   const unsigned long *ps, const unsigned long *pe, size_t n);

/*
 * CPU budget for the manager (agent + kernel worker): a token bucket in
 * nanoseconds of CPU.  It earns @pct % of the wall time that passes and
 * pays for all CPU the manager used; the pages a round may move follow
 * from the tokens and the measured cost of one page move.  Debt is
 * carried, so over any long run the manager's average stays within @pct
 * plus one burst.
 */
struct cpu_budget {
	unsigned int pct;		/* share of one CPU; 0 = unlimited */
	long long tokens_ns;		/* may go negative (debt) */
	long long burst_ns;		/* most tokens that can be saved up */
	unsigned long long wall_ns, cpu_ns;	/* at the last update */
	double page_ns;			/* CPU per page moved (EWMA) */
};

void cpu_budget_init(struct cpu_budget *b, unsigned int pct,
		     unsigned long long burst_ms, unsigned long long wall_ns,
		     unsigned long long cpu_ns);
/* Earn for the wall time since the last update, pay the CPU used since. */
void cpu_budget_update(struct cpu_budget *b, unsigned long long wall_ns,
		       unsigned long long cpu_ns);
/* Pages affordable now (at most @max); 0 while in debt. */
size_t cpu_budget_pages(const struct cpu_budget *b, size_t max);
/* Learn the cost of a page move from a round: @cpu_ns spent on @pages. */
void cpu_budget_learn(struct cpu_budget *b, unsigned long long cpu_ns,
		      size_t pages);

/*
 * Whether relocation waits for the FMem balloon: it holds @size pages of
 * its @target and last grew at @last_change_ms.  While it is inflating,
 * pages a demotion frees go to the balloon, not to the promotion they
 * were freed for; a balloon that has not grown for @stuck_ms is stuck
 * (its allocations fail) and does not hold relocation any longer.
 * @size < 0: no balloon driver.
 */
struct balloon_watch {
	long last_size;
	unsigned long long last_change_ms;
};

int reloc_balloon_holds(struct balloon_watch *w, long size, long target,
			unsigned long long now_ms, unsigned long long stuck_ms);

#endif /* _AGENT_RELOC_H */
