/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Minimal user-space test harness for the range classifier core.
 * A test is a void function; it fails if any CHECK in it fails.
 */
#ifndef _TIERING_TEST_UTIL_H
#define _TIERING_TEST_UTIL_H

#include <stdio.h>
#include "../hrc_internal.h"

struct hrc_test {
	const char *name;
	void (*fn)(void);
};

#define HRC_TEST(fn)	{ #fn, fn }

extern unsigned int hrc_test_failed_checks;

#define CHECK(cond)							\
	do {								\
		if (!(cond)) {						\
			fprintf(stderr, "  %s:%d: CHECK(%s) failed\n",	\
				__FILE__, __LINE__, #cond);		\
			hrc_test_failed_checks++;			\
		}							\
	} while (0)

#define CHECK_EQ(a, b)							\
	do {								\
		unsigned long long _a = (a), _b = (b);			\
		if (_a != _b) {						\
			fprintf(stderr,					\
				"  %s:%d: %s == %s failed: %llu != %llu\n", \
				__FILE__, __LINE__, #a, #b, _a, _b);	\
			hrc_test_failed_checks++;			\
		}							\
	} while (0)

/* A context plus its heap storage. */
struct tctx {
	struct hrc c;
	struct hrc_range *ranges;
	u32 *order;
};

int tctx_init(struct tctx *t, u32 capacity, const struct hrc_params *p,
	      const struct hrc_interval *init, u32 nr_init);
void tctx_free(struct tctx *t);

/* Deterministic PRNG (splitmix64). */
u64 trand(u64 *state);
/* Uniform in [0, n), n > 0 (modulo bias irrelevant here). */
u64 trand_below(u64 *state, u64 n);

/* Record @n samples uniformly in [start, end). */
void tsample(struct hrc *c, u64 *rng, u64 start, u64 end, u32 n);

extern const struct hrc_test hrc_basic_tests[];
extern const struct hrc_test hrc_resident_tests[];
extern const struct hrc_test hrc_capacity_tests[];
extern const struct hrc_test hrc_abit_plan_tests[];
extern const struct hrc_test hrc_abit_rate_tests[];
extern const struct hrc_test hrc_thp_sim_tests[];
extern const unsigned int hrc_nr_thp_sim_tests;
extern const unsigned int hrc_nr_abit_rate_tests;
extern const struct hrc_test hrc_perf_ring_tests[];
extern const struct hrc_test hrc_sampler_tests[];
extern const unsigned int hrc_nr_sampler_tests;
extern const struct hrc_test hrc_page_move_tests[];
extern const unsigned int hrc_nr_page_move_tests;
extern const unsigned int hrc_nr_perf_ring_tests;
extern const unsigned int hrc_nr_capacity_tests;
extern const unsigned int hrc_nr_abit_plan_tests;
extern const unsigned int hrc_nr_resident_tests;
extern const unsigned int hrc_nr_basic_tests;
extern const struct hrc_test hrc_split_merge_tests[];
extern const unsigned int hrc_nr_split_merge_tests;
extern const struct hrc_test hrc_dynamics_tests[];
extern const unsigned int hrc_nr_dynamics_tests;
extern const struct hrc_test hrc_half_split_tests[];
extern const unsigned int hrc_nr_half_split_tests;
extern const struct hrc_test hrc_sample_tests[];
extern const unsigned int hrc_nr_sample_tests;
extern const struct hrc_test hrc_random_tests[];
extern const unsigned int hrc_nr_random_tests;

#define MiB	(1ULL << 20)
#define GiB	(1ULL << 30)
#define TiB	(1ULL << 40)

#endif /* _TIERING_TEST_UTIL_H */
