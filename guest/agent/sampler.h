/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Access sampling of one target process from user space: one perf event
 * per thread (or two, PEBS loads and stores), each with an mmap'd ring
 * buffer, so that large PEBS keeps every record (guest/kmod/tiering
 * README.md, "PEBS from user space").  The records are read with
 * perf_ring.c, filtered with the module's own tier_decode() and handed
 * to a sink in batches (the agent's sink writes them to the module's
 * targets/<i>/samples_in, sampler_daemon.c).
 *
 * Threads: every thread listed in /proc/PID/task at attach gets its
 * events; sampler_rescan() opens events for threads created since and
 * closes those of threads that exited (their events report POLLHUP, or
 * their TID is no longer listed).  No inheritance: an inherited event
 * writes into its parent's ring, and a rescan would then sample the new
 * thread twice.  A thread is sampled from the first rescan after its
 * creation on.
 */
#ifndef _AGENT_SAMPLER_H
#define _AGENT_SAMPLER_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include "perf_ring.h"
#include "tier_sample.h"	/* guest/kmod/tiering: -I */

enum sampler_kind {
	SAMPLER_OFF = 0,
	SAMPLER_PEBS,		/* Intel PEBS load latency + stores */
	SAMPLER_PAGEFAULT,	/* software event: page faults (any machine) */
};

struct sampler_opts {
	enum sampler_kind kind;
	uint32_t ring_pages;	/* data pages per event, a power of two */
	uint32_t watermark_pages;	/* wake the reader at this fill */
	uint64_t load_period, store_period;	/* PEBS */
	uint64_t ldlat_cycles;	/* PEBS load-latency threshold */
	uint64_t fault_period;	/* page faults per sample */
};

/* Defaults for @kind (rings, periods as the module's PEBS source). */
void sampler_default_opts(struct sampler_opts *o, enum sampler_kind kind);
const char *sampler_kind_name(enum sampler_kind kind);

/* One perf event of one thread. */
struct sampler_ev {
	int fd;			/* -1 in tests (a ring image, no event) */
	struct perf_event_mmap_page *meta;
	size_t map_len;		/* 0: @meta is not an mmap (tests) */
	uint32_t tid;
	bool store;		/* PEBS stores (else loads / faults) */
	bool hup;		/* the thread exited: drain, then close */
};

#define SAMPLER_BATCH	512	/* addresses per sink call: one page */

struct sampler_stats {
	uint64_t threads_opened, threads_closed, open_failed;
	uint64_t threads_max;	/* most threads with events at once */
	uint64_t verdicts[TIER_NR_VERDICTS];	/* tier_decode() results */
	uint64_t batches;	/* sink calls */
	struct perf_ring_stats ring;
};

/*
 * Where batches of accepted addresses go; returns 0, or -errno to stop
 * the drain (the addresses of that batch are counted as not sent).
 */
typedef int (*sampler_sink_fn)(void *ctx, const uint64_t *addr, size_t n);

struct sampler_target {
	int pid;
	struct sampler_opts o;
	struct tier_filter filter;
	struct sampler_ev *ev;
	size_t nev, cap;
	uint64_t batch[SAMPLER_BATCH];
	size_t nbatch;
	uint64_t sent;		/* addresses the sink took */
	struct sampler_stats st;
};

/*
 * Whether this machine can open @o's events; @why gets a one-line reason
 * when it cannot (e.g. "no PEBS: ...", "perf_event_paranoid ...").
 */
int sampler_probe(const struct sampler_opts *o, char *why, size_t len);

/* Open events on every thread of @pid (0, or -errno if none opened). */
int sampler_attach(struct sampler_target *t, const struct sampler_opts *o,
		   int pid);
/* Follow thread creation and exit (0, or -ESRCH when the process went). */
int sampler_rescan(struct sampler_target *t);
/*
 * Read every ring, filter, and hand the accepted addresses to @sink in
 * batches of at most SAMPLER_BATCH (the last one partial).  Returns the
 * number of addresses handed over, or the sink's -errno.
 */
long sampler_drain(struct sampler_target *t, sampler_sink_fn sink,
		   void *ctx);
/* pollfd entries (POLLIN) for the events, at most @max; returns how many. */
size_t sampler_pollfds(const struct sampler_target *t, struct pollfd *pfd,
		       size_t max);
/* Mark the events whose pollfd (from sampler_pollfds()) saw POLLHUP. */
void sampler_note_hup(struct sampler_target *t, const struct pollfd *pfd,
		      size_t n);
void sampler_detach(struct sampler_target *t);

/*
 * Thread following: @have and @now are sorted TID lists; @add gets the
 * TIDs in @now but not in @have, @gone those in @have but not in @now.
 * Both outputs need room for their input's length.
 */
void sampler_tid_diff(const uint32_t *have, size_t nhave,
		      const uint32_t *now, size_t nnow,
		      uint32_t *add, size_t *nadd,
		      uint32_t *gone, size_t *ngone);

/* The record of one ring sample as tier_decode() takes it. */
struct tier_raw_record sampler_raw(enum sampler_kind kind, bool store,
				   const struct perf_ring_sample *s);

/*
 * Testing only: track a ring image (no event) as the events of thread
 * @tid; the target then drains it like a real ring.
 */
int sampler_add_ring(struct sampler_target *t, uint32_t tid, bool store,
		     struct perf_event_mmap_page *meta);

#endif /* _AGENT_SAMPLER_H */
