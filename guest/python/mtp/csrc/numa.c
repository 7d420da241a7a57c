// SPDX-License-Identifier: Apache-2.0
/* move_pages(2) and perf counters; see numa.h. */
#include <errno.h>
#include <linux/perf_event.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "numa.h"
#include "pages.h"

#ifndef MPOL_MF_MOVE
#define MPOL_MF_MOVE (1 << 1)
#endif

#define CHUNK 4096

static long move_pages(size_t n, void **pages, const int *nodes, int *status)
{
	return syscall(SYS_move_pages, 0, (unsigned long)n, pages, nodes, status,
		       MPOL_MF_MOVE);
}

static void count_errno(struct mtp_move_result *r, int err, uint64_t pages)
{
	r->failed += pages;
	r->by_errno[err > 0 && err < MTP_ERRNO_MAX ? err : 0] += pages;
}

int mtp_query_nodes(const uint64_t *pages, size_t n, int *node)
{
	void *chunk[CHUNK];

	for (size_t i = 0; i < n; i += CHUNK) {
		size_t len = n - i < CHUNK ? n - i : CHUNK;

		for (size_t j = 0; j < len; j++)
			chunk[j] = (void *)(uintptr_t)pages[i + j];
		if (move_pages(len, chunk, NULL, node + i) < 0) {
			int err = errno;

			for (size_t j = 0; j < n; j++)
				node[j] = MTP_NODE_UNKNOWN;
			return -err;
		}
		for (size_t j = 0; j < len; j++)
			if (node[i + j] < 0)
				node[i + j] = MTP_NODE_UNKNOWN;
	}
	return 0;
}

uint64_t mtp_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

size_t mtp_move(const uint64_t *pages, size_t n, int target, uint64_t deadline_ns,
		struct mtp_move_result *r)
{
	void *chunk[MTP_MOVE_CHUNK];
	int nodes[MTP_MOVE_CHUNK], status[MTP_MOVE_CHUNK];
	size_t i;

	for (i = 0; i < n; i += MTP_MOVE_CHUNK) {
		size_t len = n - i < MTP_MOVE_CHUNK ? n - i : MTP_MOVE_CHUNK;

		if (i && deadline_ns && mtp_now_ns() >= deadline_ns)
			break;
		for (size_t j = 0; j < len; j++) {
			chunk[j] = (void *)(uintptr_t)pages[i + j];
			nodes[j] = target;
			status[j] = 0;
		}
		if (move_pages(len, chunk, nodes, status) < 0) {
			count_errno(r, errno, len);
			continue;
		}
		for (size_t j = 0; j < len; j++) {
			if (status[j] == target)
				r->moved++;
			else
				count_errno(r, status[j] < 0 ? -status[j] : 0, 1);
		}
	}
	if (i > n)
		i = n;
	r->deferred += n - i;
	return i;
}

static int perf_open(uint64_t result)
{
	struct perf_event_attr attr;

	memset(&attr, 0, sizeof(attr));
	attr.size = sizeof(attr);
	attr.type = PERF_TYPE_HW_CACHE;
	attr.config = PERF_COUNT_HW_CACHE_LL | (PERF_COUNT_HW_CACHE_OP_READ << 8) |
		      (result << 16);
	attr.exclude_kernel = 1;
	attr.exclude_hv = 1;
	return (int)syscall(SYS_perf_event_open, &attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
}

int mtp_llc_open(int fds[2])
{
	fds[0] = perf_open(PERF_COUNT_HW_CACHE_RESULT_ACCESS);
	if (fds[0] < 0)
		return -1;
	fds[1] = perf_open(PERF_COUNT_HW_CACHE_RESULT_MISS);
	if (fds[1] < 0) {
		close(fds[0]);
		fds[0] = -1;
		return -1;
	}
	return 0;
}

double mtp_llc_ratio(const int fds[2], uint64_t last[2])
{
	uint64_t now[2];

	for (int i = 0; i < 2; i++)
		if (fds[i] < 0 || read(fds[i], &now[i], sizeof(now[i])) != sizeof(now[i]))
			return -1;
	uint64_t access = now[0] - last[0], miss = now[1] - last[1];

	last[0] = now[0];
	last[1] = now[1];
	return access ? (double)miss / (double)access : -1;
}
