// SPDX-License-Identifier: Apache-2.0
/*
 * mtp._core: the interpreter-facing half of MTP. The Python package drives
 * the phases from its own thread; each call here holds the GIL except where
 * it says otherwise. One tracer per process.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "frames.h"
#include "metamem.h"
#include "numa.h"
#include "objtable.h"
#include "pages.h"
#include "policy.h"
#include "tracker.h"

static int enabled;
static struct mtp_model model;
static struct mtp_pages pages;
static size_t page_size;
static int llc_fds[2] = { -1, -1 };
static uint64_t llc_last[2];

static int parse_room(PyObject *obj, int64_t *room);

static int parse_nodes(PyObject *seq, uint8_t set[MTP_MAX_NODES])
{
	PyObject *fast = PySequence_Fast(seq, "nodes must be a sequence of node ids");

	if (!fast)
		return -1;
	memset(set, 0, MTP_MAX_NODES);
	for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast); i++) {
		long id = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));

		if (id == -1 && PyErr_Occurred())
			goto fail;
		if (id < 0 || id >= MTP_MAX_NODES) {
			PyErr_Format(PyExc_ValueError, "node %ld out of range 0..%d", id,
				     MTP_MAX_NODES - 1);
			goto fail;
		}
		set[id] = 1;
	}
	Py_DECREF(fast);
	return 0;
fail:
	Py_DECREF(fast);
	return -1;
}

static PyObject *u64_list(const uint64_t *v, size_t n)
{
	PyObject *l = PyList_New((Py_ssize_t)n);

	for (size_t i = 0; l && i < n; i++) {
		PyObject *x = PyLong_FromUnsignedLongLong(v[i]);

		if (!x) {
			Py_CLEAR(l);
			break;
		}
		PyList_SET_ITEM(l, (Py_ssize_t)i, x);
	}
	return l;
}

static int require_enabled(int want)
{
	if (enabled == want)
		return 0;
	PyErr_SetString(PyExc_RuntimeError, want ? "mtp is not running" : "mtp is already running");
	return -1;
}

static PyObject *core_enable(PyObject *self, PyObject *args)
{
	if (!PyArg_ParseTuple(args, "(ddddd)", &model.intercept, &model.coef[0], &model.coef[1],
			      &model.coef[2], &model.coef[3]))
		return NULL;
	if (require_enabled(0))
		return NULL;
	mtp_hook_install();
	mtp_meta_reset_failures();
	llc_last[0] = llc_last[1] = 0;
	if (mtp_llc_open(llc_fds) == 0)
		mtp_llc_ratio(llc_fds, llc_last);	/* baseline */
	enabled = 1;
	Py_RETURN_NONE;
}

static PyObject *core_disable(PyObject *self, PyObject *unused)
{
	if (require_enabled(1))
		return NULL;
	mtp_hook_remove();
	mtp_pages_free(&pages);
	for (int i = 0; i < 2; i++) {
		if (llc_fds[i] >= 0)
			close(llc_fds[i]);
		llc_fds[i] = -1;
	}
	enabled = 0;
	Py_RETURN_NONE;
}

static PyObject *core_mark(PyObject *self, PyObject *args)
{
	unsigned int depth, size;
	struct mtp_mark_result r;

	if (!PyArg_ParseTuple(args, "II", &depth, &size) || require_enabled(1))
		return NULL;
	if (mtp_mark(depth, size, &r))
		return NULL;
	return Py_BuildValue("{sn sn sn sn sn}", "roots", (Py_ssize_t)r.roots,
			     "visited", (Py_ssize_t)r.visited, "added", (Py_ssize_t)r.added,
			     "cut_depth", (Py_ssize_t)r.cut_depth,
			     "cut_size", (Py_ssize_t)r.cut_size);
}

static PyObject *core_sample(PyObject *self, PyObject *args)
{
	Py_ssize_t batch, slices = 1;
	struct mtp_sample_result r;

	if (!PyArg_ParseTuple(args, "n|n", &batch, &slices) || require_enabled(1))
		return NULL;
	if (batch < 1)
		return PyErr_Format(PyExc_ValueError, "batch must be positive");
	if (slices < 1 || slices > 1 << 20)
		return PyErr_Format(PyExc_ValueError, "slices must be in [1, 2^20]");
	mtp_sample((size_t)batch, (size_t)slices, &r);
	return Py_BuildValue("{sn sn sn sn}", "sampled", (Py_ssize_t)r.sampled,
			     "active", (Py_ssize_t)r.active, "skipped", (Py_ssize_t)r.skipped,
			     "overflow", (Py_ssize_t)r.overflow);
}

static PyObject *core_sample_frames(PyObject *self, PyObject *args)
{
	unsigned int max_frames;
	struct mtp_frame_result r;

	if (!PyArg_ParseTuple(args, "I", &max_frames) || require_enabled(1))
		return NULL;
	mtp_sample_frames(max_frames, &r);
	return Py_BuildValue("{sn sn sn}", "frames", (Py_ssize_t)r.frames,
			     "visited", (Py_ssize_t)r.visited, "hits", (Py_ssize_t)r.hits);
}

static PyObject *histograms_dict(const struct mtp_histograms *h)
{
	PyObject *fast = u64_list(h->fast, MTP_BUCKETS), *slow = u64_list(h->slow, MTP_BUCKETS);

	PyObject *nodes = PyDict_New();

	for (int i = 0; nodes && fast && slow && i < MTP_MAX_NODES; i++) {
		uint64_t total = 0;

		for (int b = 0; b < MTP_BUCKETS; b++)
			total += h->by_node[i][b];
		if (!total)
			continue;
		PyObject *key = PyLong_FromLong(i), *v = u64_list(h->by_node[i], MTP_BUCKETS);

		if (!key || !v || PyDict_SetItem(nodes, key, v))
			Py_CLEAR(nodes);
		Py_XDECREF(key);
		Py_XDECREF(v);
	}
	if (!fast || !slow || !nodes) {
		Py_XDECREF(fast);
		Py_XDECREF(slow);
		Py_XDECREF(nodes);
		return NULL;
	}
	return Py_BuildValue("{sN sN sN sd sd}", "fast", fast, "slow", slow, "nodes", nodes,
			     "temp_fast", h->temp_fast, "temp_slow", h->temp_slow);
}

/* Folds this round's object heat into the page table and locates the pages. */
static PyObject *core_update_pages(PyObject *self, PyObject *args)
{
	double k, alloc_heat = 0;
	PyObject *slow_nodes;
	uint8_t slow[MTP_MAX_NODES];
	struct mtp_histograms h;
	size_t n;
	int rc, query, full = 1;

	if (!PyArg_ParseTuple(args, "dO|pd", &k, &slow_nodes, &full, &alloc_heat) ||
	    require_enabled(1))
		return NULL;
	if (!(k > 0 && k <= 1))
		return PyErr_Format(PyExc_ValueError, "cooling factor k must be in (0, 1]");
	if (!(alloc_heat >= 0 && alloc_heat < 1e6))
		return PyErr_Format(PyExc_ValueError, "alloc_heat must be in [0, 1e6)");
	if (parse_nodes(slow_nodes, slow))
		return NULL;
	size_t heat_bytes;
	struct mtp_heat *heat = mtp_collect_heat(&model, page_size, full, alloc_heat, &n,
						 &heat_bytes);

	if (!heat)
		return PyErr_NoMemory();
	/* only this thread touches the page table: the program may run */
	Py_BEGIN_ALLOW_THREADS
	rc = mtp_pages_update(&pages, heat, n, k, 0.01, full);
	query = rc ? 0 : mtp_query_nodes(pages.page, pages.n, pages.node);
	if (!rc)
		mtp_histograms(pages.temp, pages.node, pages.n, slow, &h);
	Py_END_ALLOW_THREADS
	mtp_meta_free(heat, heat_bytes);
	if (rc)
		return PyErr_NoMemory();
	return Py_BuildValue("{sn sn sN si}", "pages", (Py_ssize_t)pages.n,
			     "heat_entries", (Py_ssize_t)n,
			     "histograms", histograms_dict(&h), "query_errno", -query);
}

static PyObject *errno_dict(const struct mtp_move_result *r)
{
	PyObject *d = PyDict_New();

	for (int e = 0; d && e < MTP_ERRNO_MAX; e++) {
		if (!r->by_errno[e])
			continue;
		const char *name = e ? strerrorname_np(e) : NULL;
		PyObject *v = PyLong_FromUnsignedLongLong(r->by_errno[e]);

		if (!v || PyDict_SetItemString(d, name ? name : (e ? "E?" : "wrong node"), v)) {
			Py_XDECREF(v);
			Py_CLEAR(d);
			break;
		}
		Py_DECREF(v);
	}
	return d;
}

static void move_selected(const size_t *idx, size_t n, int target, uint64_t deadline_ns,
			  struct mtp_move_result *r)
{
	if (!n)
		return;
	uint64_t *list = calloc(n, sizeof(*list));
	uint64_t before = r->moved;

	if (!list) {
		r->failed += n;
		r->by_errno[ENOMEM] += n;
		return;
	}
	for (size_t i = 0; i < n; i++)
		list[i] = pages.page[idx[i]];
	size_t tried = mtp_move(list, n, target, deadline_ns, r);
	/* assume success where counted so; the next query corrects */
	if (r->moved > before)
		for (size_t i = 0; i < tried; i++)
			pages.node[idx[i]] = MTP_NODE_UNKNOWN;
	free(list);
}

/*
 * Demotes cold FMem pages, then promotes hot SMem pages, at threshold h,
 * within @budget_ms (negative: no budget). Demotion goes first but gets only
 * half the budget when there is something to promote, so that a large cold
 * backlog cannot starve promotion round after round.
 */
static PyObject *core_move(PyObject *self, PyObject *args)
{
	unsigned int h;
	int fast_target, slow_target;
	Py_ssize_t max;
	double budget_ms = -1;
	PyObject *slow_nodes, *room_obj = Py_None;
	int64_t room;
	uint8_t slow[MTP_MAX_NODES];
	struct mtp_move_result demoted = { 0 }, promoted = { 0 };
	size_t nd = 0, np = 0;

	if (!PyArg_ParseTuple(args, "IiiOn|dO", &h, &fast_target, &slow_target, &slow_nodes, &max,
			      &budget_ms, &room_obj) ||
	    require_enabled(1) || parse_room(room_obj, &room))
		return NULL;
	if (max < 0)
		return PyErr_Format(PyExc_ValueError, "max_pages must not be negative");
	if (budget_ms != budget_ms || budget_ms > 1e9)
		return PyErr_Format(PyExc_ValueError,
				    "budget_ms must be a number of milliseconds below 1e9");
	if (parse_nodes(slow_nodes, slow))
		return NULL;
	size_t cap = pages.n < (size_t)max ? pages.n : (size_t)max;
	size_t *demote = malloc((cap ? cap : 1) * sizeof(*demote));
	size_t *promote = malloc((cap ? cap : 1) * sizeof(*promote));
	uint64_t t0, demote_by = 0, promote_by = 0;

	if (!demote || !promote) {
		free(demote);
		free(promote);
		return PyErr_NoMemory();
	}
	Py_BEGIN_ALLOW_THREADS
	mtp_select(pages.temp, pages.node, pages.n, slow, h, cap, room, demote, &nd, promote, &np);
	t0 = mtp_now_ns();
	if (budget_ms >= 0) {
		uint64_t budget_ns = (uint64_t)(budget_ms * 1e6);

		promote_by = t0 + budget_ns + 1;
		demote_by = t0 + (np ? budget_ns / 2 : budget_ns) + 1;
	}
	move_selected(demote, nd, slow_target, demote_by, &demoted);
	move_selected(promote, np, fast_target, promote_by, &promoted);
	Py_END_ALLOW_THREADS
	free(demote);
	free(promote);
	return Py_BuildValue("{sK sK sK sK sK sK sN sN sd}", "demoted", demoted.moved,
			     "promoted", promoted.moved, "demote_failed", demoted.failed,
			     "promote_failed", promoted.failed,
			     "demote_deferred", demoted.deferred,
			     "promote_deferred", promoted.deferred,
			     "demote_errors", errno_dict(&demoted),
			     "promote_errors", errno_dict(&promoted),
			     "took_ms", (double)(mtp_now_ns() - t0) / 1e6);
}

/* page_table() -> [(page, temperature, node)]: the table as the last round left it. */
static PyObject *core_page_table(PyObject *self, PyObject *unused)
{
	if (require_enabled(1))
		return NULL;
	PyObject *l = PyList_New((Py_ssize_t)pages.n);

	for (size_t i = 0; l && i < pages.n; i++) {
		PyObject *t = Py_BuildValue("(Kdi)", (unsigned long long)pages.page[i],
					    pages.temp[i], pages.node[i]);

		if (!t) {
			Py_CLEAR(l);
			break;
		}
		PyList_SET_ITEM(l, (Py_ssize_t)i, t);
	}
	return l;
}

static PyObject *core_counters(PyObject *self, PyObject *unused)
{
	return Py_BuildValue("{sn sn sn sn sn sn sn sn si sk}",
			     "objects_tracked", (Py_ssize_t)mtp_table.live,
			     "objects_active", (Py_ssize_t)mtp_active_count(),
			     "alloc_samples_pending", (Py_ssize_t)mtp_alloc_samples(),
			     "objects_freed", (Py_ssize_t)mtp_freed_tracked,
			     "tombstones", (Py_ssize_t)mtp_table.tombstones,
			     "metadata_bytes", (Py_ssize_t)mtp_objtable_bytes(&mtp_table),
			     "pages_tracked", (Py_ssize_t)pages.n,
			     "page_table_bytes",
			     (Py_ssize_t)(pages.n * (sizeof(uint64_t) + sizeof(double) + sizeof(int))),
			     "metadata_node", mtp_meta_node(),
			     "metadata_bind_failures", mtp_meta_bind_failures());
}

static PyObject *core_set_alloc_every(PyObject *self, PyObject *arg)
{
	long every = PyLong_AsLong(arg);

	if (every == -1 && PyErr_Occurred())
		return NULL;
	if (every < 0 || every > 1 << 30)
		return PyErr_Format(PyExc_ValueError, "alloc_every %ld out of range", every);
	mtp_set_alloc_every((unsigned int)every);
	Py_RETURN_NONE;
}

static PyObject *core_set_metadata_node(PyObject *self, PyObject *arg)
{
	long node = PyLong_AsLong(arg);

	if (node == -1 && PyErr_Occurred())
		return NULL;
	if (node < -1 || node >= MTP_MAX_NODES)
		return PyErr_Format(PyExc_ValueError, "metadata node %ld out of range", node);
	mtp_meta_set_node((int)node);
	Py_RETURN_NONE;
}

static PyObject *core_history(PyObject *self, PyObject *op)
{
	if (require_enabled(1))
		return NULL;
	const struct mtp_obj *o = mtp_lookup(op);

	if (!o)
		Py_RETURN_NONE;
	PyObject *t = PyTuple_New(MTP_HISTORY);

	for (int i = 0; t && i < MTP_HISTORY; i++) {
		PyObject *v = PyLong_FromLong((long)mtp_obj_change(o, (unsigned int)i));

		if (!v) {
			Py_CLEAR(t);
			break;
		}
		PyTuple_SET_ITEM(t, i, v);
	}
	return t;
}

static PyObject *core_storage(PyObject *self, PyObject *op)
{
	return PyLong_FromSize_t(mtp_storage_of(op));
}

static PyObject *core_llc_ratio(PyObject *self, PyObject *unused)
{
	double r = mtp_llc_ratio(llc_fds, llc_last);

	if (r < 0)
		Py_RETURN_NONE;
	return PyFloat_FromDouble(r);
}

/* ---- the pure policy, exposed for the tests ---- */

static int parse_history(PyObject *seq, uint8_t changes[MTP_HISTORY])
{
	PyObject *fast = PySequence_Fast(seq, "changes must be a sequence");

	if (!fast)
		return -1;
	if (PySequence_Fast_GET_SIZE(fast) != MTP_HISTORY) {
		Py_DECREF(fast);
		PyErr_Format(PyExc_ValueError, "changes must have %d entries", MTP_HISTORY);
		return -1;
	}
	for (int i = 0; i < MTP_HISTORY; i++) {
		long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));

		if (v == -1 && PyErr_Occurred()) {
			Py_DECREF(fast);
			return -1;
		}
		if (v < 0 || v > 255) {
			Py_DECREF(fast);
			PyErr_SetString(PyExc_ValueError, "a change is 0..255");
			return -1;
		}
		changes[i] = (uint8_t)v;
	}
	Py_DECREF(fast);
	return 0;
}

static PyObject *core_features(PyObject *self, PyObject *arg)
{
	uint8_t c[MTP_HISTORY];
	double f[MTP_FEATURES];

	if (parse_history(arg, c))
		return NULL;
	mtp_features(c, f);
	return Py_BuildValue("(dddd)", f[0], f[1], f[2], f[3]);
}

static PyObject *core_hotness(PyObject *self, PyObject *args)
{
	PyObject *seq;
	struct mtp_model m;
	uint8_t c[MTP_HISTORY];

	if (!PyArg_ParseTuple(args, "O(ddddd)", &seq, &m.intercept, &m.coef[0], &m.coef[1],
			      &m.coef[2], &m.coef[3]) || parse_history(seq, c))
		return NULL;
	return PyFloat_FromDouble(mtp_hotness(&m, c));
}

static PyObject *core_page_heat(PyObject *self, PyObject *args)
{
	PyObject *seq;
	struct mtp_model m;
	uint8_t c[MTP_HISTORY];

	if (!PyArg_ParseTuple(args, "O(ddddd)", &seq, &m.intercept, &m.coef[0], &m.coef[1],
			      &m.coef[2], &m.coef[3]) || parse_history(seq, c))
		return NULL;
	return PyFloat_FromDouble(mtp_page_heat(&m, c));
}

static PyObject *core_bucket(PyObject *self, PyObject *arg)
{
	double t = PyFloat_AsDouble(arg);

	if (t == -1 && PyErr_Occurred())
		return NULL;
	return PyLong_FromUnsignedLong(mtp_bucket(t));
}

static int parse_hist(PyObject *seq, uint64_t out[MTP_BUCKETS])
{
	PyObject *fast = PySequence_Fast(seq, "a histogram is a sequence");

	if (!fast)
		return -1;
	if (PySequence_Fast_GET_SIZE(fast) != MTP_BUCKETS) {
		Py_DECREF(fast);
		PyErr_Format(PyExc_ValueError, "a histogram has %d buckets", MTP_BUCKETS);
		return -1;
	}
	for (int i = 0; i < MTP_BUCKETS; i++) {
		out[i] = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(fast, i));
		if (out[i] == (uint64_t)-1 && PyErr_Occurred()) {
			Py_DECREF(fast);
			return -1;
		}
	}
	Py_DECREF(fast);
	return 0;
}

static PyObject *core_threshold(PyObject *self, PyObject *args)
{
	PyObject *f, *s;
	uint64_t fast[MTP_BUCKETS], slow[MTP_BUCKETS];
	unsigned long long room = 0;

	if (!PyArg_ParseTuple(args, "OO|K", &f, &s, &room) || parse_hist(f, fast) ||
	    parse_hist(s, slow))
		return NULL;
	return PyLong_FromUnsignedLong(mtp_threshold(fast, slow, room));
}

static PyObject *core_zscore(PyObject *self, PyObject *args)
{
	PyObject *seq, *fast;
	double cur;

	if (!PyArg_ParseTuple(args, "Od", &seq, &cur))
		return NULL;
	fast = PySequence_Fast(seq, "previous values must be a sequence");
	if (!fast)
		return NULL;
	Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
	double *v = PyMem_Malloc((n ? n : 1) * sizeof(double));

	if (!v) {
		Py_DECREF(fast);
		return PyErr_NoMemory();
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		v[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(fast, i));
		if (v[i] == -1 && PyErr_Occurred()) {
			PyMem_Free(v);
			Py_DECREF(fast);
			return NULL;
		}
	}
	double z = mtp_zscore(v, (size_t)n, cur);

	PyMem_Free(v);
	Py_DECREF(fast);
	return PyFloat_FromDouble(z);
}

static PyObject *core_eagerness(PyObject *self, PyObject *args)
{
	double rss, llc, bw;

	if (!PyArg_ParseTuple(args, "ddd", &rss, &llc, &bw))
		return NULL;
	return PyFloat_FromDouble(mtp_eagerness(rss, llc, bw));
}

static PyObject *core_adjust_threshold(PyObject *self, PyObject *args)
{
	unsigned int h;
	double e, prev;
	int have;

	if (!PyArg_ParseTuple(args, "Iddp", &h, &e, &prev, &have))
		return NULL;
	return PyLong_FromUnsignedLong(mtp_adjust_threshold(h, e, prev, have));
}

static PyObject *core_next_limit(PyObject *self, PyObject *args)
{
	unsigned int limit;
	double last, budget;

	if (!PyArg_ParseTuple(args, "Idd", &limit, &last, &budget))
		return NULL;
	return PyLong_FromUnsignedLong(mtp_next_limit(limit, last, budget));
}

static PyObject *core_should_mark(PyObject *self, PyObject *args)
{
	unsigned long long since, min;
	unsigned int skipped, max_skips;

	if (!PyArg_ParseTuple(args, "KIKI", &since, &skipped, &min, &max_skips))
		return NULL;
	return PyBool_FromLong(mtp_should_mark(since, skipped, min, max_skips));
}

static PyObject *core_cool(PyObject *self, PyObject *args)
{
	double prev, cur, k;

	if (!PyArg_ParseTuple(args, "ddd", &prev, &cur, &k))
		return NULL;
	return PyFloat_FromDouble(mtp_cool(prev, cur, k));
}

/*
 * room: pages FMem takes beyond its reserve (negative: its deficit), or
 * None (unknown: every page below the threshold may be demoted).
 */
static int parse_room(PyObject *obj, int64_t *room)
{
	if (obj == Py_None) {
		*room = MTP_ROOM_UNKNOWN;
		return 0;
	}
	long long v = PyLong_AsLongLong(obj);

	if (v == -1 && PyErr_Occurred())
		return -1;
	if (v <= -(1ll << 50) || v >= 1ll << 50) {
		PyErr_Format(PyExc_ValueError, "room of %lld pages out of range", v);
		return -1;
	}
	*room = v;
	return 0;
}

/* plan(temps, nodes, slow_nodes, h, max, room=None) -> (histograms, demote, promote) */
static PyObject *core_plan(PyObject *self, PyObject *args)
{
	PyObject *t_seq, *n_seq, *slow_nodes, *t = NULL, *nd = NULL, *res = NULL;
	unsigned int h;
	Py_ssize_t max, n;
	PyObject *room_obj = Py_None;
	int64_t room;
	uint8_t slow[MTP_MAX_NODES];
	double *temp = NULL;
	int *node = NULL;
	size_t *dem = NULL, *pro = NULL, ndem, npro;
	struct mtp_histograms hist;

	if (!PyArg_ParseTuple(args, "OOOIn|O", &t_seq, &n_seq, &slow_nodes, &h, &max, &room_obj) ||
	    parse_nodes(slow_nodes, slow) || parse_room(room_obj, &room))
		return NULL;
	if (max < 0)
		return PyErr_Format(PyExc_ValueError, "max must not be negative");
	t = PySequence_Fast(t_seq, "temperatures must be a sequence");
	nd = PySequence_Fast(n_seq, "nodes must be a sequence");
	if (!t || !nd)
		goto out;
	n = PySequence_Fast_GET_SIZE(t);
	if (PySequence_Fast_GET_SIZE(nd) != n) {
		PyErr_SetString(PyExc_ValueError, "temperatures and nodes differ in length");
		goto out;
	}
	temp = PyMem_Malloc((n ? n : 1) * sizeof(*temp));
	node = PyMem_Malloc((n ? n : 1) * sizeof(*node));
	dem = PyMem_Malloc((n ? n : 1) * sizeof(*dem));
	pro = PyMem_Malloc((n ? n : 1) * sizeof(*pro));
	if (!temp || !node || !dem || !pro) {
		PyErr_NoMemory();
		goto out;
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		temp[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(t, i));
		node[i] = (int)PyLong_AsLong(PySequence_Fast_GET_ITEM(nd, i));
		if (PyErr_Occurred())
			goto out;
	}
	mtp_histograms(temp, node, (size_t)n, slow, &hist);
	mtp_select(temp, node, (size_t)n, slow, h, (size_t)(max < n ? max : n), room,
		   dem, &ndem, pro, &npro);
	{
		PyObject *dl = PyList_New((Py_ssize_t)ndem), *pl = PyList_New((Py_ssize_t)npro);

		for (size_t i = 0; dl && i < ndem; i++)
			PyList_SET_ITEM(dl, (Py_ssize_t)i, PyLong_FromSize_t(dem[i]));
		for (size_t i = 0; pl && i < npro; i++)
			PyList_SET_ITEM(pl, (Py_ssize_t)i, PyLong_FromSize_t(pro[i]));
		if (dl && pl)
			res = Py_BuildValue("(NNN)", histograms_dict(&hist), dl, pl);
		else {
			Py_XDECREF(dl);
			Py_XDECREF(pl);
		}
	}
out:
	PyMem_Free(temp);
	PyMem_Free(node);
	PyMem_Free(dem);
	PyMem_Free(pro);
	Py_XDECREF(t);
	Py_XDECREF(nd);
	return res;
}

/* fold(table, heat, k, drop) with lists of (page, value): eq. 1 on a table. */
static PyObject *core_fold(PyObject *self, PyObject *args)
{
	PyObject *tab, *heat_seq, *res = NULL;
	double k, drop;
	int full = 1;
	struct mtp_pages t = { 0 };
	struct mtp_heat *heat = NULL;

	if (!PyArg_ParseTuple(args, "OOdd|p", &tab, &heat_seq, &k, &drop, &full))
		return NULL;
	PyObject *tf = PySequence_Fast(tab, "table must be a sequence");
	PyObject *hf = tf ? PySequence_Fast(heat_seq, "heat must be a sequence") : NULL;

	if (!hf)
		goto out;
	Py_ssize_t nt = PySequence_Fast_GET_SIZE(tf), nh = PySequence_Fast_GET_SIZE(hf);

	t.page = malloc((nt ? nt : 1) * sizeof(*t.page));
	t.temp = malloc((nt ? nt : 1) * sizeof(*t.temp));
	t.node = malloc((nt ? nt : 1) * sizeof(*t.node));
	heat = malloc((nh ? nh : 1) * sizeof(*heat));
	if (!t.page || !t.temp || !t.node || !heat) {
		PyErr_NoMemory();
		goto out;
	}
	for (Py_ssize_t i = 0; i < nt; i++) {
		unsigned long long p;

		if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(tf, i), "Kd", &p, &t.temp[i]))
			goto out;
		if (i && p <= t.page[i - 1]) {
			PyErr_SetString(PyExc_ValueError, "table pages must be ascending");
			goto out;
		}
		t.page[i] = p;
		t.node[i] = MTP_NODE_UNKNOWN;
		t.n = (size_t)i + 1;
	}
	for (Py_ssize_t i = 0; i < nh; i++) {
		unsigned long long p;

		if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(hf, i), "Kd", &p, &heat[i].heat))
			goto out;
		heat[i].page = p;
	}
	if (mtp_pages_update(&t, heat, (size_t)nh, k, drop, full)) {
		PyErr_NoMemory();
		goto out;
	}
	res = PyList_New((Py_ssize_t)t.n);
	for (size_t i = 0; res && i < t.n; i++) {
		PyObject *item = Py_BuildValue("(Kd)", (unsigned long long)t.page[i], t.temp[i]);

		if (!item) {
			Py_CLEAR(res);
			break;
		}
		PyList_SET_ITEM(res, (Py_ssize_t)i, item);
	}
out:
	mtp_pages_free(&t);
	free(heat);
	Py_XDECREF(tf);
	Py_XDECREF(hf);
	return res;
}

static PyMethodDef core_methods[] = {
	{ "enable", core_enable, METH_VARARGS, "enable(model): start tracking objects" },
	{ "disable", core_disable, METH_NOARGS, "disable(): stop and free all metadata" },
	{ "mark", core_mark, METH_VARARGS, "mark(depth_limit, size_limit) -> dict" },
	{ "sample", core_sample, METH_VARARGS,
	  "sample(batch, slices=1) -> dict: active objects and one slice of the idle ones" },
	{ "sample_frames", core_sample_frames, METH_VARARGS,
	  "sample_frames(max_frames) -> dict: one sighting of other threads' frame locals" },
	{ "update_pages", core_update_pages, METH_VARARGS,
	  "update_pages(k, slow_nodes, full=True, alloc_heat=0.0) -> dict" },
	{ "set_alloc_every", core_set_alloc_every, METH_O,
	  "set_alloc_every(n): sample every n-th allocation for allocation heat (0: off)" },
	{ "set_metadata_node", core_set_metadata_node, METH_O,
	  "set_metadata_node(node): the node MTP's own large arrays prefer (-1: default policy)" },
	{ "move", core_move, METH_VARARGS,
	  "move(h, fast_node, slow_node, slow_nodes, max_pages[, budget_ms, room]) -> dict "
	  "(room: pages FMem takes beyond its reserve, None: unknown)" },
	{ "counters", core_counters, METH_NOARGS, "counters() -> dict" },
	{ "page_table", core_page_table, METH_NOARGS,
	  "page_table() -> [(page, temperature, node)] (diagnostics)" },
	{ "history", core_history, METH_O,
	  "history(obj) -> the object's refcount changes, or None if untracked" },
	{ "storage", core_storage, METH_O,
	  "storage(obj) -> address of a dict's table or a list's items, 0 for others" },
	{ "llc_ratio", core_llc_ratio, METH_NOARGS, "LLC load miss ratio since last call" },
	{ "features", core_features, METH_O, "features(changes) -> 4 floats" },
	{ "hotness", core_hotness, METH_VARARGS, "hotness(changes, model) -> float" },
	{ "page_heat", core_page_heat, METH_VARARGS,
	  "page_heat(changes, model) -> what the object adds to its page" },
	{ "bucket", core_bucket, METH_O, "bucket(temperature) -> int" },
	{ "threshold", core_threshold, METH_VARARGS, "threshold(fast, slow, room=0) -> int" },
	{ "zscore", core_zscore, METH_VARARGS, "zscore(previous, current) -> float" },
	{ "eagerness", core_eagerness, METH_VARARGS, "eagerness(rss_fast, llc, bw) -> float" },
	{ "adjust_threshold", core_adjust_threshold, METH_VARARGS,
	  "adjust_threshold(h, eager, previous, have_previous) -> int" },
	{ "next_limit", core_next_limit, METH_VARARGS, "next_limit(limit, last, budget) -> int" },
	{ "should_mark", core_should_mark, METH_VARARGS,
	  "should_mark(collections, skipped, min_collections, max_skips) -> bool" },
	{ "cool", core_cool, METH_VARARGS, "cool(previous, current, k) -> float" },
	{ "plan", core_plan, METH_VARARGS, "plan(temps, nodes, slow_nodes, h, max, room=None)" },
	{ "fold", core_fold, METH_VARARGS, "fold(table, heat, k, drop, full=True) -> table" },
	{ NULL, NULL, 0, NULL }
};

static struct PyModuleDef core_module = {
	PyModuleDef_HEAD_INIT, "mtp._core", "MTP's interpreter-facing core.", -1, core_methods,
};

/* The block layout we assume: sys.getsizeof adds the GC header of a list. */
static int check_layout(void)
{
	PyObject *list = PyList_New(0), *sys = PyImport_ImportModule("sys");
	PyObject *whole = NULL, *inner = NULL;
	int ok = 0;

	if (list && sys) {
		whole = PyObject_CallMethod(sys, "getsizeof", "O", list);
		inner = PyObject_CallMethod(list, "__sizeof__", NULL);
	}
	if (whole && inner)
		ok = PyLong_AsLong(whole) - PyLong_AsLong(inner) == 2 * sizeof(uintptr_t);
	Py_XDECREF(list);
	Py_XDECREF(sys);
	Py_XDECREF(whole);
	Py_XDECREF(inner);
	PyErr_Clear();
	return ok;
}

PyMODINIT_FUNC PyInit__core(void)
{
	const char *reason = mtp_unsupported_reason();

	if (reason) {
		PyErr_SetString(PyExc_ImportError, reason);
		return NULL;
	}
	if (!check_layout()) {
		PyErr_SetString(PyExc_ImportError,
				"mtp: unexpected GC header size in this interpreter build");
		return NULL;
	}
	long ps = sysconf(_SC_PAGESIZE);

	page_size = ps > 0 ? (size_t)ps : 4096;
	PyObject *m = PyModule_Create(&core_module);

	if (m && (PyModule_AddIntConstant(m, "HISTORY", MTP_HISTORY) ||
		  PyModule_AddIntConstant(m, "BUCKETS", MTP_BUCKETS) ||
		  PyModule_AddIntConstant(m, "MOVE_CHUNK", MTP_MOVE_CHUNK) ||
		  PyModule_AddIntConstant(m, "MAX_NODES", MTP_MAX_NODES))) {
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
