/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Object tracking inside the interpreter: the allocator hook that notices
 * freed objects, the marking pass (Algorithm 1) and the sampling pass
 * (section 5.2). Every function here runs with the GIL held.
 */
#ifndef MTP_TRACKER_H
#define MTP_TRACKER_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "objtable.h"
#include "pages.h"

struct mtp_mark_result {
	size_t roots, visited, added;
	size_t cut_depth, cut_size;	/* containers not (fully) traversed */
};

struct mtp_sample_result {
	size_t sampled, skipped;
};

extern struct mtp_objtable mtp_table;
extern size_t mtp_freed_tracked;	/* entries dropped by the free hook */

/* Reason this interpreter cannot be traced, or NULL. */
const char *mtp_unsupported_reason(void);

/* Installs the allocator hook on the MEM and OBJ domains. */
void mtp_hook_install(void);

/*
 * Stops tracking frees and removes the hook if it is still the active
 * allocator (someone like tracemalloc may have wrapped it since; then it
 * stays installed as a pass-through). Frees the table.
 */
void mtp_hook_remove(void);

/* Algorithm 1 from the GC's object list; limits 0 are unbounded. */
int mtp_mark(unsigned int depth_limit, unsigned int size_limit, struct mtp_mark_result *r);

/*
 * One sampling phase over every tracked object; drops the GIL every @batch
 * objects so that the program keeps running.
 */
void mtp_sample(size_t batch, struct mtp_sample_result *r);

/*
 * Where a dict keeps its key (or split value) table and a list its item
 * array, separate blocks its reads go to; 0 for other objects.
 */
uintptr_t mtp_storage_of(PyObject *op);

/* The entry of a live object, or NULL when it is not tracked. */
struct mtp_obj *mtp_lookup(PyObject *op);

/*
 * This round's heat per object: an array of (page, hotness) for every
 * tracked object with a full baseline. *n gets its length, *bytes the size
 * to give mtp_meta_free(); NULL and *n = 0 on ENOMEM.
 */
struct mtp_heat *mtp_collect_heat(const struct mtp_model *m, size_t page_size, size_t *n,
				  size_t *bytes);

#endif
