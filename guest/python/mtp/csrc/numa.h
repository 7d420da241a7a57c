/* SPDX-License-Identifier: Apache-2.0 */
/*
 * move_pages(2) in chunks, with failures counted per errno and an optional
 * time budget; LLC miss ratio.
 */
#ifndef MTP_NUMA_H
#define MTP_NUMA_H

#include <stddef.h>
#include <stdint.h>

#define MTP_ERRNO_MAX 256

struct mtp_move_result {
	uint64_t moved;
	uint64_t failed;
	uint64_t by_errno[MTP_ERRNO_MAX];	/* per-page status or call errno */
	uint64_t deferred;	/* left for the next round: the time budget ran out */
};

/* Pages per move_pages(2) call when moving: how far a round can overrun its budget. */
#define MTP_MOVE_CHUNK 32

/*
 * Writes the node each page of @pages is on to @node (MTP_NODE_UNKNOWN for
 * pages not present or not mapped). Returns 0, or -errno when the call
 * itself failed (then every node is unknown).
 */
int mtp_query_nodes(const uint64_t *pages, size_t n, int *node);

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t mtp_now_ns(void);

/*
 * Moves @pages to @target in chunks of MTP_MOVE_CHUNK, adding the outcome to
 * @r. With @deadline_ns (CLOCK_MONOTONIC; 0 = none) no chunk starts after
 * the deadline: the first chunk always goes, so every round makes progress,
 * and a round overruns by at most one chunk. Pages not attempted are added
 * to @r->deferred. Returns the number of pages attempted.
 */
size_t mtp_move(const uint64_t *pages, size_t n, int target, uint64_t deadline_ns,
		struct mtp_move_result *r);

/*
 * Last-level-cache load miss counter of the calling thread, where perf
 * events are available. Returns a file descriptor pair packed in @fds or -1.
 */
int mtp_llc_open(int fds[2]);

/* Miss ratio since the last read, or a negative value when unknown. */
double mtp_llc_ratio(const int fds[2], uint64_t last[2]);

#endif
