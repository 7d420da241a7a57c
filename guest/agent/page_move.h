/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Moving a batch of a process's pages to one node with move_pages(2), and
 * learning where each page really ended (unit-tested in
 * ../kmod/tiering/tests/test_page_move.c with a scripted kernel).
 *
 * Two kernel behaviours shape this:
 *  - When some pages of a call fail to migrate after they were queued
 *    (e.g. no free 2 MiB block on the target node for a huge page), the
 *    kernel returns how many did not move and writes no status for the
 *    pages of that batch -- the status array keeps whatever it held.
 *    So the statuses are then asked for again (nodes = NULL).
 *  - With transparent huge pages a call holds several base pages of one
 *    huge page: an earlier address takes it off the LRU and the later
 *    ones get -EBUSY; by the time of a second call it has moved (or was
 *    split and its base pages moved).
 */
#ifndef _AGENT_PAGE_MOVE_H
#define _AGENT_PAGE_MOVE_H

#include <stddef.h>

/* move_pages(2) as the kernel offers it (a fake in the tests) */
typedef long (*move_pages_fn)(long pid, unsigned long n, void **pages,
			      const int *nodes, int *status, int flags);

/*
 * Why moves failed, over a whole run: a target node without room
 * (-ENOMEM), a page off the LRU (-EBUSY, -EAGAIN: under I/O or migration),
 * an address no longer mapped (-EFAULT, -ENOENT), a page left on another
 * node with no error (stayed: its migration failed after it was queued),
 * anything else, and pages whose whole call failed.
 */
struct page_move_stats {
	unsigned long long nomem, busy, gone, stayed, other, call;
	unsigned long long retried;	/* pages asked a second time */
	unsigned long long partial;	/* calls whose statuses were re-read */
};

/*
 * page_move() - move @n pages of @pid to @node; one call for the batch
 * (each call drains the LRU caches on every CPU: fewer, larger calls cost
 * the guest less), then one more for the pages that did not move but
 * might (busy, or stayed in a call that failed in part).
 * Returns how many pages are on @node afterwards; the others are counted
 * in *@failed and in @stats by reason.
 */
size_t page_move(move_pages_fn mp, long pid, void **pages, size_t n,
		 int node, size_t *failed, struct page_move_stats *stats);

/* the real move_pages(2) */
long page_move_syscall(long pid, unsigned long n, void **pages,
		       const int *nodes, int *status, int flags);

#endif /* _AGENT_PAGE_MOVE_H */
