// SPDX-License-Identifier: GPL-2.0
/* Moving a batch of pages to one node; see page_move.h. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "page_move.h"

#define MPOL_MF_MOVE	2
#define NO_STATUS	INT_MIN		/* the kernel wrote nothing here */

long page_move_syscall(long pid, unsigned long n, void **pages,
		       const int *nodes, int *status, int flags)
{
	return syscall(SYS_move_pages, pid, n, pages, nodes, status, flags);
}

/*
 * One move call with every page's outcome in @st: the node it is on or
 * -errno.  Returns -1 when the call failed as a whole.
 */
static int move_and_locate(move_pages_fn mp, long pid, void **pages,
			   size_t n, const int *nodes, int *st,
			   struct page_move_stats *stats)
{
	size_t k;
	long r;

	for (k = 0; k < n; k++)
		st[k] = NO_STATUS;
	r = mp(pid, n, pages, nodes, st, MPOL_MF_MOVE);
	if (r < 0)
		return -1;
	if (r > 0) {
		/* some did not move, and no status was written: ask */
		stats->partial++;
		for (k = 0; k < n; k++)
			st[k] = NO_STATUS;
		if (mp(pid, n, pages, NULL, st, 0) < 0)
			return -1;
	}
	return 0;
}

static int worth_asking_again(int status, int node)
{
	return status == -EBUSY || status == -EAGAIN ||
	       (status >= 0 && status != node);
}

/* The pages that did not move but might: one more call, @st updated. */
static void ask_again(move_pages_fn mp, long pid, void **pages, size_t n,
		      const int *nodes, int *st, int node,
		      struct page_move_stats *stats)
{
	void **again;
	int *st2;
	size_t k, m = 0;

	for (k = 0; k < n; k++)
		m += worth_asking_again(st[k], node);
	if (!m)
		return;
	again = malloc(m * sizeof(*again));
	st2 = malloc(m * sizeof(*st2));
	if (again && st2) {
		for (k = 0, m = 0; k < n; k++)
			if (worth_asking_again(st[k], node))
				again[m++] = pages[k];
		if (!move_and_locate(mp, pid, again, m, nodes, st2, stats)) {
			for (k = 0, m = 0; k < n; k++)
				if (worth_asking_again(st[k], node))
					st[k] = st2[m++];
			stats->retried += m;
		}
	}
	free(again);
	free(st2);
}

static void count_failure(int status, struct page_move_stats *stats)
{
	if (status >= 0) {
		stats->stayed++;
		return;
	}
	switch (-status) {
	case ENOMEM: stats->nomem++; break;
	case EBUSY: case EAGAIN: stats->busy++; break;
	case EFAULT: case ENOENT: stats->gone++; break;
	default: stats->other++; break;
	}
}

size_t page_move(move_pages_fn mp, long pid, void **pages, size_t n,
		 int node, size_t *failed, struct page_move_stats *stats)
{
	int *nodes, *st;
	size_t done = 0, k;

	if (!n)
		return 0;
	nodes = malloc(n * sizeof(*nodes));
	st = malloc(n * sizeof(*st));
	if (!nodes || !st) {
		*failed += n;
		stats->call += n;
		goto out;
	}
	for (k = 0; k < n; k++)
		nodes[k] = node;
	if (move_and_locate(mp, pid, pages, n, nodes, st, stats)) {
		*failed += n;
		stats->call += n;
		goto out;
	}
	ask_again(mp, pid, pages, n, nodes, st, node, stats);
	for (k = 0; k < n; k++) {
		if (st[k] == node) {
			done++;
		} else {
			(*failed)++;
			if (st[k] == NO_STATUS)
				stats->other++;
			else
				count_failure(st[k], stats);
		}
	}
out:
	free(nodes);
	free(st);
	return done;
}
