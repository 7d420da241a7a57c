/* SPDX-License-Identifier: GPL-2.0 */
/*
 * tiering-gups' layout in the simulations: a 640 MiB region in the mmap
 * area whose last 64 MiB are hot.
 */
#ifndef _TIERING_TESTS_SIM_REGION_H
#define _TIERING_TESTS_SIM_REGION_H

#include "../hrc_compat.h"

#define MIB		(1ULL << 20)
#define PG		4096ULL
#define SIM_BASE	0x7f0000000000ULL
#define SIM_REG_LO	(SIM_BASE + 3 * 1024 * MIB)
#define SIM_REG_HI	(SIM_REG_LO + 640 * MIB)
#define SIM_HOT_LO	(SIM_REG_HI - 64 * MIB)

/* bytes of [@a, @b) within [@lo, @hi) */
static inline u64 sim_overlap(u64 a, u64 b, u64 lo, u64 hi)
{
	u64 s = a > lo ? a : lo, e = b < hi ? b : hi;

	return e > s ? e - s : 0;
}

#endif
