/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The marking pass's roots straight from the cyclic GC's generation lists
 * (and the permanent generation of gc.freeze()), without gc.get_objects():
 * that builds a list holding a reference to every GC-tracked object, one
 * more touch of each when built and one when dropped (a quarter of a pass
 * natively, more under TCG), and the references themselves skew the
 * refcounts a pass reads as baselines. Needs the GIL; @visit must neither
 * run Python code nor allocate or free Python objects (the lists must
 * stay as they are during the walk).
 */
#ifndef MTP_GCROOTS_H
#define MTP_GCROOTS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/*
 * Calls @visit(op, @arg) for every GC-tracked object; stops when it returns
 * non-zero and returns that value, else 0. *@count gets the objects visited.
 */
int mtp_gc_roots(int (*visit)(PyObject *op, void *arg), void *arg, size_t *count);

#endif
