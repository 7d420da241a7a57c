// SPDX-License-Identifier: GPL-2.0
/*
 * The agent's page_move() against a scripted move_pages(2): which pages it
 * reports moved, and why the others did not, when the kernel answers as
 * it does for huge pages (-EBUSY for a later base page of a huge page
 * already queued; a positive return and no statuses when a queued page
 * failed to migrate).
 */
#include <errno.h>
#include <string.h>
#include "test_util.h"
#include "../../../agent/page_move.h"

#define NPAGES	8

/*
 * The fake kernel: where each page is (node), what the next move call
 * does to it, and how the call returns.
 */
static struct {
	int node[NPAGES];
	int first_status[NPAGES];	/* 1st move call: status to report */
	int first_moves[NPAGES];	/* 1st move call: page moves */
	int later_moves;		/* later calls: every page moves */
	int partial;			/* 1st call: return >0, no statuses */
	int calls, queries;
	int fail_call;			/* every call fails as a whole */
} k;

static long page_of(void *p)
{
	return (long)((unsigned long)p / 4096);
}

static long fake_move_pages(long pid, unsigned long n, void **pages,
			    const int *nodes, int *status, int flags)
{
	unsigned long i;
	long unmoved = 0;
	int first;

	(void)pid;
	(void)flags;
	if (k.fail_call)
		return -1;
	if (!nodes) {		/* where are they */
		k.queries++;
		for (i = 0; i < n; i++)
			status[i] = k.node[page_of(pages[i])];
		return 0;
	}
	first = k.calls++ == 0;
	for (i = 0; i < n; i++) {
		long p = page_of(pages[i]);
		int moves = first ? k.first_moves[p] : k.later_moves;

		if (moves)
			k.node[p] = nodes[i];
		else
			unmoved++;
		if (!(first && k.partial))
			status[i] = first && k.first_status[p] ?
				    k.first_status[p] : k.node[p];
	}
	return first && k.partial ? unmoved : 0;
}

static void *pages[NPAGES];

static void setup(void)
{
	int i;

	memset(&k, 0, sizeof(k));
	for (i = 0; i < NPAGES; i++) {
		pages[i] = (void *)(unsigned long)(i * 4096);
		k.node[i] = 1;		/* all on SMem */
		k.first_moves[i] = 1;
	}
}

static void all_move(void)
{
	struct page_move_stats s = { 0 };
	size_t failed = 0;

	setup();
	CHECK_EQ(page_move(fake_move_pages, 1, pages, NPAGES, 0, &failed, &s),
		 NPAGES);
	CHECK_EQ(failed, 0);
	CHECK_EQ(k.calls, 1);
	CHECK_EQ(s.retried, 0);
	CHECK_EQ(s.partial, 0);
}

/* Later base pages of a queued huge page: -EBUSY, moved by the time of a
 * second call. */
static void busy_pages_are_asked_again(void)
{
	struct page_move_stats s = { 0 };
	size_t failed = 0;

	setup();
	k.first_status[3] = -EBUSY;
	k.first_moves[3] = 0;
	k.first_status[4] = -EBUSY;
	k.first_moves[4] = 0;
	k.later_moves = 1;
	CHECK_EQ(page_move(fake_move_pages, 1, pages, NPAGES, 0, &failed, &s),
		 NPAGES);
	CHECK_EQ(failed, 0);
	CHECK_EQ(s.retried, 2);
	CHECK_EQ(k.calls, 2);
}

/*
 * A queued page that failed to migrate: the kernel returns the count and
 * writes no status.  The pages that did move must count as moved (the
 * old agent read the status array as the kernel left it: garbage), the
 * one that stayed is asked once more and counted as stayed.
 */
static void a_partial_call_reads_where_pages_are(void)
{
	struct page_move_stats s = { 0 };
	size_t failed = 0;

	setup();
	k.partial = 1;
	k.first_moves[5] = 0;
	k.later_moves = 0;	/* it stays on the second try too */
	CHECK_EQ(page_move(fake_move_pages, 1, pages, NPAGES, 0, &failed, &s),
		 NPAGES - 1);
	CHECK_EQ(failed, 1);
	CHECK_EQ(s.stayed, 1);
	CHECK_EQ(s.partial, 1);
	CHECK_EQ(s.retried, 1);
	CHECK(k.queries >= 1);
}

static void a_partial_call_then_a_retry_that_moves(void)
{
	struct page_move_stats s = { 0 };
	size_t failed = 0;

	setup();
	k.partial = 1;
	k.first_moves[0] = 0;
	k.first_moves[7] = 0;
	k.later_moves = 1;
	CHECK_EQ(page_move(fake_move_pages, 1, pages, NPAGES, 0, &failed, &s),
		 NPAGES);
	CHECK_EQ(failed, 0);
	CHECK_EQ(s.retried, 2);
}

static void errors_are_counted_by_reason(void)
{
	struct page_move_stats s = { 0 };
	size_t failed = 0;

	setup();
	k.first_status[1] = -ENOMEM;
	k.first_moves[1] = 0;
	k.first_status[2] = -EFAULT;
	k.first_moves[2] = 0;
	k.first_status[6] = -EACCES;
	k.first_moves[6] = 0;
	CHECK_EQ(page_move(fake_move_pages, 1, pages, NPAGES, 0, &failed, &s),
		 NPAGES - 3);
	CHECK_EQ(failed, 3);
	CHECK_EQ(s.nomem, 1);
	CHECK_EQ(s.gone, 1);
	CHECK_EQ(s.other, 1);
	CHECK_EQ(s.retried, 0);	/* errors other than busy are final */
}

static void a_failed_call_fails_every_page(void)
{
	struct page_move_stats s = { 0 };
	size_t failed = 0;

	setup();
	k.fail_call = 1;
	CHECK_EQ(page_move(fake_move_pages, 1, pages, NPAGES, 0, &failed, &s),
		 0);
	CHECK_EQ(failed, NPAGES);
	CHECK_EQ(s.call, NPAGES);
	CHECK_EQ(page_move(fake_move_pages, 1, pages, 0, 0, &failed, &s), 0);
	CHECK_EQ(failed, NPAGES);
}

const struct hrc_test hrc_page_move_tests[] = {
	HRC_TEST(all_move),
	HRC_TEST(busy_pages_are_asked_again),
	HRC_TEST(a_partial_call_reads_where_pages_are),
	HRC_TEST(a_partial_call_then_a_retry_that_moves),
	HRC_TEST(errors_are_counted_by_reason),
	HRC_TEST(a_failed_call_fails_every_page),
};
const unsigned int hrc_nr_page_move_tests =
	sizeof(hrc_page_move_tests) / sizeof(hrc_page_move_tests[0]);
