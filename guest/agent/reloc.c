// SPDX-License-Identifier: GPL-2.0
#include "reloc.h"

static size_t min_sz(size_t a, size_t b)
{
	return a < b ? a : b;
}

void reloc_plan(size_t nr_promo, size_t nr_demo, size_t headroom,
		size_t max_moves, size_t *promo, size_t *demo)
{
	size_t p = min_sz(min_sz(nr_promo, max_moves), nr_demo + headroom);

	*promo = p;
	*demo = p > headroom ? p - headroom : 0;
}

size_t reloc_batch(size_t want, size_t demoted_ok, size_t *headroom_left)
{
	size_t extra, n;

	if (want <= demoted_ok)
		return want;
	extra = min_sz(want - demoted_ok, *headroom_left);
	n = demoted_ok + extra;
	*headroom_left -= extra;
	return n;
}

int reloc_pair_worthwhile(double promo_density, double demo_density,
			  unsigned long alpha_pct)
{
	return promo_density * 100.0 > (double)alpha_pct * demo_density;
}

size_t reloc_worthwhile(const double *pd, size_t np, const double *dd,
			size_t nd, size_t headroom, unsigned long alpha_pct)
{
	size_t i;

	for (i = 0; i < np; i++) {
		if (i < headroom)
			continue;
		if (i - headroom >= nd)
			break;
		if (!reloc_pair_worthwhile(pd[i], dd[i - headroom], alpha_pct))
			break;
	}
	return i;
}

double reloc_density_floor(const double *dens, const double *bytes, size_t n)
{
	double sum = 0, size = 0;
	size_t i;

	for (i = 0; i < n; i++) {
		sum += dens[i] * bytes[i];
		size += bytes[i];
	}
	return size > 0 ? sum / size : 0;
}

int reloc_persists(unsigned long start, unsigned long end,
		   const unsigned long *ps, const unsigned long *pe, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (start <= pe[i] && ps[i] <= end)
			return 1;
	return 0;
}

/* A first guess for one page move before any has been measured. */
#define CPU_BUDGET_FIRST_PAGE_NS	20000.0

void cpu_budget_init(struct cpu_budget *b, unsigned int pct,
		     unsigned long long burst_ms, unsigned long long wall_ns,
		     unsigned long long cpu_ns)
{
	b->pct = pct;
	b->burst_ns = (long long)(burst_ms * 1000000ULL * pct / 100);
	b->tokens_ns = b->burst_ns;	/* start with one burst */
	b->wall_ns = wall_ns;
	b->cpu_ns = cpu_ns;
	b->page_ns = CPU_BUDGET_FIRST_PAGE_NS;
}

void cpu_budget_update(struct cpu_budget *b, unsigned long long wall_ns,
		       unsigned long long cpu_ns)
{
	unsigned long long dw = wall_ns > b->wall_ns ? wall_ns - b->wall_ns : 0;
	unsigned long long dc = cpu_ns > b->cpu_ns ? cpu_ns - b->cpu_ns : 0;

	b->wall_ns = wall_ns;
	b->cpu_ns = cpu_ns;
	if (!b->pct)
		return;
	b->tokens_ns += (long long)(dw / 100 * b->pct) - (long long)dc;
	if (b->tokens_ns > b->burst_ns)
		b->tokens_ns = b->burst_ns;
}

size_t cpu_budget_pages(const struct cpu_budget *b, size_t max)
{
	double n;

	if (!b->pct)
		return max;
	if (b->tokens_ns <= 0)
		return 0;
	n = (double)b->tokens_ns / b->page_ns;
	return n >= (double)max ? max : (size_t)n;
}

void cpu_budget_learn(struct cpu_budget *b, unsigned long long cpu_ns,
		      size_t pages)
{
	double cost;

	if (!pages)
		return;
	cost = (double)cpu_ns / (double)pages;
	if (cost < 100.0)
		cost = 100.0;	/* a clock tick's granularity is coarse */
	b->page_ns = b->page_ns * 0.5 + cost * 0.5;
}

int reloc_balloon_holds(struct balloon_watch *w, long size, long target,
			unsigned long long now_ms, unsigned long long stuck_ms)
{
	if (size != w->last_size) {
		w->last_size = size;
		w->last_change_ms = now_ms;
	}
	return size >= 0 && target > size &&
	       now_ms - w->last_change_ms < stuck_ms;
}
