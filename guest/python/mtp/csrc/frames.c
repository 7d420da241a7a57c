// SPDX-License-Identifier: Apache-2.0
/*
 * Frame sampler; see frames.h. The interpreter frame layout is internal
 * (pycore_frame.h, shipped with the development headers): the public
 * PyFrame_GetLocals() would, before 3.13, copy the locals into a dict that
 * stays on the frame and keeps the objects alive, changing the program's
 * refcounts and object lifetimes. Reading localsplus directly takes no
 * reference. Only the locals (named variables, cells, free variables) and
 * the frame's code, function and globals are read: a running frame's value
 * stack top is not published at a GIL switch.
 */
#define Py_BUILD_CORE
#include "frames.h"

#include <internal/pycore_frame.h>

#include "tracker.h"

struct frame_walk {
	struct mtp_frame_result *r;
	size_t budget;
	unsigned int depth;
};

static void look_at(PyObject *op, struct frame_walk *w, unsigned int depth);

static int count_referent(PyObject *child, void *arg)
{
	unsigned int *n = arg;

	return child && ++*n > MTP_FRAME_FANOUT;	/* stop once too many */
}

static int visit_referent(PyObject *child, void *arg)
{
	struct frame_walk *w = arg;

	if (!child)
		return 0;
	if (!w->budget)
		return 1;	/* stops this object's tp_traverse */
	unsigned int depth = w->depth;

	look_at(child, w, depth + 1);
	w->depth = depth;
	return 0;
}

/*
 * Records a sighting of @op and looks at what it holds, two levels deep,
 * when it holds at most MTP_FRAME_FANOUT objects: of a big container (the
 * whole graph in a local) the frame works on a few items, not all, and
 * tp_traverse would always name the same first ones.
 */
static void look_at(PyObject *op, struct frame_walk *w, unsigned int depth)
{
	if (!w->budget)
		return;
	w->budget--;
	w->r->visited++;
	struct mtp_obj *o = mtp_lookup(op);

	if (o) {
		if (o->hits < MTP_HITS_MAX)
			o->hits++;
		/* read by the next sweep even if idle so far (else at its slice) */
		mtp_activate(o);
		w->r->hits++;
	}
	traverseproc traverse = Py_TYPE(op)->tp_traverse;

	if (depth >= 2 || !PyObject_IS_GC(op) || !traverse)
		return;
	unsigned int n = 0;

	traverse(op, count_referent, &n);
	if (n > MTP_FRAME_FANOUT)
		return;
	w->depth = depth;
	traverse(op, visit_referent, w);
}

static _PyInterpreterFrame *current_frame(PyThreadState *ts)
{
#if PY_VERSION_HEX >= 0x030D0000
	return ts->current_frame;
#else
	return ts->cframe ? ts->cframe->current_frame : NULL;
#endif
}

static PyCodeObject *frame_code(_PyInterpreterFrame *f)
{
#if PY_VERSION_HEX >= 0x030D0000
	return f->f_executable && PyCode_Check(f->f_executable) ?
		(PyCodeObject *)f->f_executable : NULL;
#else
	return f->f_code;
#endif
}

static PyObject *frame_func(_PyInterpreterFrame *f)
{
#if PY_VERSION_HEX >= 0x030C0000
	return f->f_funcobj;
#else
	return (PyObject *)f->f_func;
#endif
}

static int frame_readable(_PyInterpreterFrame *f)
{
#if PY_VERSION_HEX >= 0x030C0000
	/* shim frames of C calls carry no locals */
	if (f->owner == FRAME_OWNED_BY_CSTACK)
		return 0;
#endif
	/* a frame still being set up may hold uninitialised slots */
	return frame_code(f) && !_PyFrame_IsIncomplete(f);
}

void mtp_sample_frames(unsigned int max_frames, struct mtp_frame_result *r)
{
	PyThreadState *self = PyThreadState_Get();
	struct frame_walk w = { .r = r, .budget = MTP_FRAME_BUDGET };

	memset(r, 0, sizeof(*r));
	/*
	 * The GIL holds the other threads at a safe point: their frames are
	 * consistent, and threads unlink themselves only with the GIL held.
	 */
	for (PyThreadState *ts = PyInterpreterState_ThreadHead(self->interp); ts;
	     ts = PyThreadState_Next(ts)) {
		if (ts == self)
			continue;
		unsigned int n = 0;

		for (_PyInterpreterFrame *f = current_frame(ts); f && n < max_frames && w.budget;
		     f = f->previous) {
			if (!frame_readable(f))
				continue;
			n++;
			r->frames++;
			PyCodeObject *code = frame_code(f);

			for (int i = 0; i < code->co_nlocalsplus && w.budget; i++)
				if (f->localsplus[i])
					look_at(f->localsplus[i], &w, 0);
			/*
			 * What the interpreter reads to run the frame: its code
			 * object (the bytecode and inline caches live in it), its
			 * function and its module's globals (a dict: its key
			 * table heats too). Read on every call and global
			 * lookup, they never change a refcount across a sweep.
			 * Sightings only: depth 2 looks at nothing beyond them.
			 */
			look_at((PyObject *)code, &w, 2);
			if (frame_func(f))
				look_at(frame_func(f), &w, 2);
			if (f->f_globals)
				look_at(f->f_globals, &w, 2);
		}
	}
}
