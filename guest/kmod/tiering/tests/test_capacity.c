// SPDX-License-Identifier: GPL-2.0
/*
 * Tier policy: FMem capacity (managed pages above the watermarks, minus
 * the balloon) and the node choice (the cases of balloon/selftest.c).
 */
#include "test_util.h"
#include "../tier_policy.h"

static void capacity_subtracts_watermarks_and_balloon(void)
{
	/* DMA32 + Normal of a 512 MiB node */
	const struct tier_zone_pages z[] = {
		{ .managed = 3900, .high = 100 },
		{ .managed = 120000, .high = 2000 },
	};
	const struct tier_zone_pages tiny[] = { { .managed = 10, .high = 50 } };

	CHECK_EQ(tier_fmem_capacity(z, 2, 0), 3800 + 118000);
	/* a 64 MiB balloon still counted in managed is not usable */
	CHECK_EQ(tier_fmem_capacity(z, 2, 16384), 3800 + 118000 - 16384);
	/* a zone below its watermark contributes nothing, never negative */
	CHECK_EQ(tier_fmem_capacity(tiny, 1, 0), 0);
	CHECK_EQ(tier_fmem_capacity(z, 2, 1ULL << 40), 0);
	CHECK_EQ(tier_fmem_capacity(z, 0, 0), 0);
}

struct pick_case {
	struct tier_node_info nodes[4];
	u32 nr;
	int fmem, smem;
};

/* The same cases as demeter_balloon's dmb_pick_tiers() self-test. */
static const struct pick_case pick_cases[] = {
	{ { { 0, true, true }, { 1, false, true } }, 2, 0, 1 },
	{ { { 0, false, true }, { 1, true, true } }, 2, 1, 0 },
	{ { { 0, true, true } }, 1, 0, -1 },
	{ { { 0, true, true }, { 1, true, true } }, 2, 0, -1 },
	{ { { 0, true, false }, { 1, false, true }, { 2, false, true } }, 3, 1, 2 },
	{ { { 0, true, true }, { 3, false, true }, { 5, false, true } }, 3, 0, 3 },
	{ { }, 0, -1, -1 },
};

static void nodes_picked_as_the_balloon_does(void)
{
	unsigned int i;
	int f, s;

	for (i = 0; i < sizeof(pick_cases) / sizeof(pick_cases[0]); i++) {
		tier_pick_nodes(pick_cases[i].nodes, pick_cases[i].nr, &f, &s);
		CHECK_EQ(f, pick_cases[i].fmem);
		CHECK_EQ(s, pick_cases[i].smem);
	}
}

const struct hrc_test hrc_capacity_tests[] = {
	HRC_TEST(nodes_picked_as_the_balloon_does),
	HRC_TEST(capacity_subtracts_watermarks_and_balloon),
};
const unsigned int hrc_nr_capacity_tests =
	sizeof(hrc_capacity_tests) / sizeof(hrc_capacity_tests[0]);
