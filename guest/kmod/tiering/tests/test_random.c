// SPDX-License-Identifier: GPL-2.0
/*
 * Deterministic random-input driver for the fuzz operations, so that the
 * invariant checker runs in every "make" even without clang/libFuzzer.
 * HRC_RANDOM_ITERS in the environment overrides the iteration count.
 */
#include <stdlib.h>
#include "test_util.h"
#include "hrc_fuzz_ops.h"

static void random_ops_keep_invariants(void)
{
	const char *env = getenv("HRC_RANDOM_ITERS");
	unsigned long iters = env ? strtoul(env, NULL, 0) : 3000;
	static uint8_t buf[8192];
	u64 rng = 0x5eed;
	unsigned long i, bad = 0;

	for (i = 0; i < iters; i++) {
		size_t len = 16 + trand_below(&rng, sizeof(buf) - 16), j;
		/* Bias op bytes towards epochs/bursts every few inputs. */
		u64 bias = trand_below(&rng, 4);

		for (j = 0; j < len; j++) {
			buf[j] = (uint8_t)trand(&rng);
			if (bias == 0 && j > 16 && !(j % 5))
				buf[j] = 5;		/* epoch */
		}
		if (hrc_fuzz_run(buf, len)) {
			fprintf(stderr, "  failing input: iteration %lu\n", i);
			bad++;
			if (bad > 3)
				break;
		}
	}
	CHECK_EQ(bad, 0);
}

const struct hrc_test hrc_random_tests[] = {
	HRC_TEST(random_ops_keep_invariants),
};
const unsigned int hrc_nr_random_tests =
	sizeof(hrc_random_tests) / sizeof(hrc_random_tests[0]);
