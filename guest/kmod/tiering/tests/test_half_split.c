// SPDX-License-Identifier: GPL-2.0
/*
 * half_split: a GUPS-like region (640 MiB, its last 64 MiB with 10x the
 * access density) whose left neighbour is a small, denser range (a thread
 * stack, say).  Under the neighbour-density rule alone the region never
 * splits (it is not alpha times denser than that neighbour and has no
 * other); with half_split its halves are compared and the hot set is
 * isolated and selected for promotion.
 */
#include "test_util.h"

#define STACK_START	(0x7f0000000000ULL)
#define STACK_END	(STACK_START + 2 * MiB)
#define REG_START	STACK_END
#define REG_END		(REG_START + 640 * MiB)
#define HOT_START	(REG_END - 64 * MiB)

static void feed(struct hrc *c, u64 *rng)
{
	/* per 4 KiB page: cold 1 sample, hot 10 (scaled down x 1/64) */
	tsample(c, rng, REG_START, HOT_START, 576 * 256 / 64);
	tsample(c, rng, HOT_START, REG_END, 64 * 256 * 10 / 64);
	/* the stack: 200 samples in 2 MiB, far denser than the region */
	tsample(c, rng, STACK_START, STACK_END, 200);
}

static u64 hot_selected(struct hrc *c, u64 cap_pages, u64 *cold_bytes)
{
	struct hrc_interval pro[64], dem[64];
	struct hrc_selection sel = {
		.promo = pro, .promo_max = 64, .demo = dem, .demo_max = 64,
	};
	u64 hot = 0;
	u32 i;

	hrc_select(c, cap_pages, &sel);
	*cold_bytes = 0;
	for (i = 0; i < sel.nr_promo; i++) {
		u64 s = pro[i].start, e = pro[i].end;

		if (e <= REG_START)
			continue;	/* the stack */
		if (s < HOT_START)
			*cold_bytes += (e < HOT_START ? e : HOT_START) - s;
		if (e > HOT_START)
			hot += e - (s > HOT_START ? s : HOT_START);
	}
	return hot;
}

static u32 run(u32 half_split, u32 epochs, u64 *hot, u64 *cold)
{
	/* as seen in the module after a few epochs: stack | region */
	static const struct hrc_interval iv[] = {
		{ STACK_START, STACK_END }, { REG_START, REG_END },
	};
	struct hrc_params p;
	struct tctx t;
	u64 rng = 42;
	u32 e;

	hrc_default_params(&p);
	p.nr_cpus = 2;
	p.half_split = half_split;
	CHECK_EQ(tctx_init(&t, HRC_DEF_MAX_RANGES, &p, iv, 2), 0);
	for (e = 0; e < epochs; e++) {
		feed(&t.c, &rng);
		hrc_epoch(&t.c);
		CHECK_EQ(hrc_validate(&t.c), 0);
	}
	feed(&t.c, &rng);
	/* FMem for the hot set: 100 MiB */
	*hot = hot_selected(&t.c, (100 * MiB) >> 12, cold);
	e = t.c.nr;
	tctx_free(&t);
	return e;
}

static void halves_isolate_hot_set_next_to_denser_neighbour(void)
{
	u64 hot, cold;
	u32 nr;

	nr = run(0, 40, &hot, &cold);
	printf("     half_split=0: %u ranges, hot selected %llu MiB, cold %llu MiB\n",
	       nr, (unsigned long long)(hot >> 20),
	       (unsigned long long)(cold >> 20));
	/* blocked: the 640 MiB region never fits 100 MiB of FMem */
	CHECK_EQ(hot, 0);

	nr = run(1, 40, &hot, &cold);
	printf("     half_split=1: %u ranges, hot selected %llu MiB, cold %llu MiB\n",
	       nr, (unsigned long long)(hot >> 20),
	       (unsigned long long)(cold >> 20));
	CHECK(hot >= 60 * MiB);
	CHECK(cold <= 40 * MiB);
	CHECK(nr <= 24);
}

static void halves_do_not_split_uniform_load(void)
{
	static const struct hrc_interval iv[] = { { REG_START, REG_END } };
	struct hrc_params p;
	struct tctx t;
	u64 rng = 7;
	u32 e, max_nr = 0;

	hrc_default_params(&p);
	p.nr_cpus = 2;
	p.half_split = 1;
	CHECK_EQ(tctx_init(&t, HRC_DEF_MAX_RANGES, &p, iv, 1), 0);
	for (e = 0; e < 200; e++) {
		tsample(&t.c, &rng, REG_START, REG_END, 2000);
		hrc_epoch(&t.c);
		if (t.c.nr > max_nr)
			max_nr = t.c.nr;
	}
	CHECK_EQ(hrc_validate(&t.c), 0);
	/* the "only range" rule splits it once; halves never differ by 2x */
	CHECK(max_nr <= 3);
	tctx_free(&t);
}

/*
 * edge_split: a state seen in the module: an earlier cut fell 6 MiB inside
 * the hot set (HOT2), so a big cold range ends with 6 MiB of hot pages.
 * Its halves differ by far less than alpha, so halves alone never find
 * those 6 MiB; the edge rule cuts the cold range toward its much denser
 * neighbour until they are found.
 */
#define HOT2		(REG_END - 70 * MiB)
#define CUT		(HOT2 + 6 * MiB)

static u64 run_edge(u32 edge, u32 *nr)
{
	static const struct hrc_interval iv[] = {
		{ STACK_START, STACK_END }, { REG_START, CUT }, { CUT, REG_END },
	};
	struct hrc_interval pro[64], dem[64];
	struct hrc_selection sel = {
		.promo = pro, .promo_max = 64, .demo = dem, .demo_max = 64,
	};
	struct hrc_params p;
	struct tctx t;
	u64 rng = 5, hot = 0;
	u32 e, i;

	hrc_default_params(&p);
	p.nr_cpus = 2;
	p.half_split = 1;
	p.edge_split = edge;
	CHECK_EQ(tctx_init(&t, HRC_DEF_MAX_RANGES, &p, iv, 3), 0);
	for (e = 0; e < 60; e++) {
		tsample(&t.c, &rng, REG_START, HOT2, 570 * 256 / 64);
		tsample(&t.c, &rng, HOT2, REG_END, 70 * 256 * 10 / 64);
		tsample(&t.c, &rng, STACK_START, STACK_END, 200);
		hrc_epoch(&t.c);
		CHECK_EQ(hrc_validate(&t.c), 0);
	}
	hrc_select(&t.c, (100 * MiB) >> 12, &sel);
	for (i = 0; i < sel.nr_promo; i++) {
		u64 s = pro[i].start > HOT2 ? pro[i].start : HOT2;
		u64 en = pro[i].end;

		if (en > s && pro[i].start >= REG_START)
			hot += en - s;
	}
	*nr = t.c.nr;
	tctx_free(&t);
	return hot;
}

static void edges_find_unaligned_hot_set_boundary(void)
{
	u32 nr0, nr1;
	u64 h0 = run_edge(0, &nr0), h1 = run_edge(1, &nr1);

	printf("     70 MiB hot set: selected %llu MiB without edge rule "
	       "(%u ranges), %llu MiB with (%u ranges)\n",
	       (unsigned long long)(h0 >> 20), nr0,
	       (unsigned long long)(h1 >> 20), nr1);
	CHECK(h0 <= 64 * MiB);
	CHECK(h1 >= 68 * MiB);
	CHECK(nr1 <= 40);
}

const struct hrc_test hrc_half_split_tests[] = {
	HRC_TEST(edges_find_unaligned_hot_set_boundary),
	HRC_TEST(halves_isolate_hot_set_next_to_denser_neighbour),
	HRC_TEST(halves_do_not_split_uniform_load),
};
const unsigned int hrc_nr_half_split_tests =
	sizeof(hrc_half_split_tests) / sizeof(hrc_half_split_tests[0]);
