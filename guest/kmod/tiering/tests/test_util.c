// SPDX-License-Identifier: GPL-2.0
#include <stdlib.h>
#include "test_util.h"

unsigned int hrc_test_failed_checks;

int tctx_init(struct tctx *t, u32 capacity, const struct hrc_params *p,
	      const struct hrc_interval *init, u32 nr_init)
{
	t->ranges = calloc(capacity ? capacity : 1, sizeof(*t->ranges));
	t->order = calloc(capacity ? capacity : 1, sizeof(*t->order));
	if (!t->ranges || !t->order) {
		fprintf(stderr, "out of memory\n");
		exit(2);
	}
	return hrc_init(&t->c, t->ranges, t->order, capacity, p, init,
			nr_init);
}

void tctx_free(struct tctx *t)
{
	free(t->ranges);
	free(t->order);
	t->ranges = NULL;
	t->order = NULL;
}

u64 trand(u64 *state)
{
	u64 z = (*state += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

u64 trand_below(u64 *state, u64 n)
{
	return trand(state) % n;
}

void tsample(struct hrc *c, u64 *rng, u64 start, u64 end, u32 n)
{
	while (n--)
		hrc_record(c, start + trand_below(rng, end - start));
}
