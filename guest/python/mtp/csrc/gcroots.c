// SPDX-License-Identifier: Apache-2.0
/* GC generation lists as marking roots; see gcroots.h. */
#define Py_BUILD_CORE
#include "gcroots.h"

#include <internal/pycore_gc.h>
#include <internal/pycore_interp.h>

#if PY_VERSION_HEX >= 0x030E0000 || defined(Py_GIL_DISABLED)
#error "the GC's generation lists changed in 3.14 and the free-threaded build"
#endif

static int walk(PyGC_Head *head, int (*visit)(PyObject *, void *), void *arg, size_t *count)
{
	for (PyGC_Head *g = _PyGCHead_NEXT(head); g != head; g = _PyGCHead_NEXT(g)) {
		int rc = visit((PyObject *)(g + 1), arg);

		++*count;
		if (rc)
			return rc;
	}
	return 0;
}

int mtp_gc_roots(int (*visit)(PyObject *op, void *arg), void *arg, size_t *count)
{
	/* the public getter: the internal one reads a thread-local 3.12+ does not export */
	struct _gc_runtime_state *gc = &PyInterpreterState_Get()->gc;
	int rc = 0;

	*count = 0;
	for (int i = 0; i < NUM_GENERATIONS && !rc; i++)
		rc = walk(&gc->generations[i].head, visit, arg, count);
	if (!rc)
		rc = walk(&gc->permanent_generation.head, visit, arg, count);
	return rc;
}
