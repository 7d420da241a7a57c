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

size_t reloc_worthwhile(const double *pd, size_t np, const double *dd,
			size_t nd, size_t headroom, unsigned long alpha_pct)
{
	size_t i;

	for (i = 0; i < np; i++) {
		if (i < headroom)
			continue;
		if (i - headroom >= nd)
			break;
		if (pd[i] * 100.0 <= (double)alpha_pct * dd[i - headroom])
			break;
	}
	return i;
}
