/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The frame sampler: a second, read-aware hotness signal for a stock
 * interpreter. The net refcount change between two sweeps misses every
 * access that takes and drops its reference in between (reads through a
 * container, NetworkX walking its adjacency dicts). Sampling, many times per
 * sweep, which objects the program's running frames hold in their local
 * variables (and what those reach within two references: the dict an
 * iterator walks, the items of a small container) sees the objects the
 * program is working on right now, without any hook in the interpreter.
 * Each sighting adds one to the object's pending hits, folded into its
 * change history by the next refcount sweep (tracker.c). GIL held.
 */
#ifndef MTP_FRAMES_H
#define MTP_FRAMES_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

struct mtp_frame_result {
	size_t frames;		/* Python frames looked at */
	size_t visited;		/* objects looked up */
	size_t hits;		/* of them tracked (hits recorded) */
};

/* Objects looked at per sample at most: bounds a sample's cost. */
#define MTP_FRAME_BUDGET 4096
/* Referents looked at per object at most (a big dict is not all hot). */
#define MTP_FRAME_FANOUT 32

/*
 * One sample of every other thread's running frames (the calling thread,
 * the tracer, is left out), at most @max_frames per thread.
 */
void mtp_sample_frames(unsigned int max_frames, struct mtp_frame_result *r);

#endif
