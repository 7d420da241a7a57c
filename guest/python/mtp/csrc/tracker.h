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
	size_t sampled;		/* refcounts read */
	size_t active;		/* of them from the active list */
	size_t skipped;		/* idle objects outside this sweep's slice */
	size_t overflow;	/* active objects the list had no room for */
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
 * One sampling phase: reads the refcount of every active object (a non-zero
 * change in its history, or a pending sighting) and of the idle objects in
 * one of @slices slices of the table, in turn, so that an idle object is
 * read every @slices sweeps (1: every object every sweep). An object with a
 * change joins the active list, one idle for a whole history leaves it.
 * Drops the GIL every @batch objects so that the program keeps running.
 */
void mtp_sample(size_t batch, size_t slices, struct mtp_sample_result *r);

/* Puts @o on the active list (read every sweep); -1 when out of memory. */
int mtp_activate(struct mtp_obj *o);

/* Objects on the active list (some dead ones until the next sweep). */
size_t mtp_active_count(void);

/* Samples every @every-th allocation's block for allocation heat (0: off). */
void mtp_set_alloc_every(unsigned int every);

/* Allocations sampled since the last migration round. */
size_t mtp_alloc_samples(void);

/*
 * Where a dict keeps its key (or split value) table and a list its item
 * array, separate blocks its reads go to; 0 for other objects.
 */
uintptr_t mtp_storage_of(PyObject *op);

/* The entry of a live object, or NULL when it is not tracked. */
struct mtp_obj *mtp_lookup(PyObject *op);

/*
 * This round's heat: an array of (page, heat) for every tracked object
 * (@full) or for the active ones (the only ones with heat; the page table
 * then keeps the pages it does not see), plus @alloc_heat for each
 * allocation sampled since the last round (which it forgets). *n gets its
 * length, *bytes the size to give mtp_meta_free(); NULL and *n = 0 on ENOMEM.
 */
struct mtp_heat *mtp_collect_heat(const struct mtp_model *m, size_t page_size, int full,
				  double alloc_heat, size_t *n, size_t *bytes);

#endif
