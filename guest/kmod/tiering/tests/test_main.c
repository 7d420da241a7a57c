// SPDX-License-Identifier: GPL-2.0
/*
 * Runs every test table; prints "N passed, M failed"; exit 1 on failure.
 */
#include <string.h>
#include "test_util.h"

static void run_table(const struct hrc_test *t, unsigned int n,
		      const char *filter, unsigned int *pass,
		      unsigned int *fail)
{
	unsigned int i;

	for (i = 0; i < n; i++) {
		unsigned int before = hrc_test_failed_checks;

		if (filter && !strstr(t[i].name, filter))
			continue;
		t[i].fn();
		if (hrc_test_failed_checks == before) {
			printf("ok   %s\n", t[i].name);
			(*pass)++;
		} else {
			printf("FAIL %s\n", t[i].name);
			(*fail)++;
		}
	}
}

int main(int argc, char **argv)
{
	const char *filter = argc > 1 ? argv[1] : NULL;
	unsigned int pass = 0, fail = 0;

	run_table(hrc_basic_tests, hrc_nr_basic_tests, filter, &pass, &fail);
	run_table(hrc_resident_tests, hrc_nr_resident_tests, filter, &pass,
		  &fail);
	run_table(hrc_abit_plan_tests, hrc_nr_abit_plan_tests, filter, &pass,
		  &fail);
	run_table(hrc_thp_sim_tests, hrc_nr_thp_sim_tests, filter, &pass,
		  &fail);
	run_table(hrc_abit_rate_tests, hrc_nr_abit_rate_tests, filter, &pass,
		  &fail);
	run_table(hrc_capacity_tests, hrc_nr_capacity_tests, filter, &pass,
		  &fail);
	run_table(hrc_perf_ring_tests, hrc_nr_perf_ring_tests, filter, &pass,
		  &fail);
	run_table(hrc_sampler_tests, hrc_nr_sampler_tests, filter, &pass,
		  &fail);
	run_table(hrc_page_move_tests, hrc_nr_page_move_tests, filter, &pass,
		  &fail);
	run_table(hrc_split_merge_tests, hrc_nr_split_merge_tests, filter,
		  &pass, &fail);
	run_table(hrc_dynamics_tests, hrc_nr_dynamics_tests, filter, &pass,
		  &fail);
	run_table(hrc_half_split_tests, hrc_nr_half_split_tests, filter,
		  &pass, &fail);
	run_table(hrc_sample_tests, hrc_nr_sample_tests, filter, &pass,
		  &fail);
	run_table(hrc_random_tests, hrc_nr_random_tests, filter, &pass,
		  &fail);
	printf("%u passed, %u failed\n", pass, fail);
	return fail ? 1 : 0;
}
