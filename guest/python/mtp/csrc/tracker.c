// SPDX-License-Identifier: Apache-2.0
/* Allocator hook, marking and sampling; see tracker.h. */
#include "tracker.h"

#include "gcroots.h"
#include "metamem.h"

struct mtp_objtable mtp_table;
size_t mtp_freed_tracked;

static int tracking;		/* the hook drops freed blocks from mtp_table */
static int hooked;
static unsigned int history_pos;	/* slot of the next change, same for all */
static uint8_t pass_parity;

/*
 * The sweeps' active list: slot indices of the objects with a non-zero
 * change in their history or a pending sighting (their entry's active bit
 * set). Every sweep reads these; the other objects, whose eight changes are
 * all zero, are read one slice of the table per sweep. Rebuilt after every
 * marking pass (the only time slots move or are reused).
 */
static uint32_t *active;
static size_t n_active, cap_active;
static size_t slice_pos;	/* the table slice the next sweep reads */

/*
 * Allocation samples: the block of every alloc_every-th allocation on the
 * MEM and OBJ domains while tracking, in a ring that each migration round
 * empties. Where the program allocates and frees, its pages are written:
 * heat for pages the refcount signal cannot see (pools of short-lived
 * objects, fresh key tables), none of it for the pages of long-lived data.
 */
#define ALLOC_RING 16384
static uintptr_t alloc_ring[ALLOC_RING];
static size_t alloc_ring_n;	/* samples since the last round (may exceed the ring) */
static unsigned int alloc_every, alloc_countdown;

static inline void alloc_sample(void *ptr)
{
	if (!alloc_every || !ptr || --alloc_countdown)
		return;
	alloc_countdown = alloc_every;
	alloc_ring[alloc_ring_n++ % ALLOC_RING] = (uintptr_t)ptr;
}

static PyMemAllocatorEx inner_mem, inner_obj;

static void drop_block(void *ptr)
{
	if (tracking && ptr && mtp_objtable_remove(&mtp_table, (uintptr_t)ptr))
		mtp_freed_tracked++;
}

static void *hook_malloc(void *ctx, size_t size)
{
	PyMemAllocatorEx *inner = ctx;
	void *p = inner->malloc(inner->ctx, size);

	if (tracking)
		alloc_sample(p);
	return p;
}

static void *hook_calloc(void *ctx, size_t nelem, size_t elsize)
{
	PyMemAllocatorEx *inner = ctx;
	void *p = inner->calloc(inner->ctx, nelem, elsize);

	if (tracking)
		alloc_sample(p);
	return p;
}

static void *hook_realloc(void *ctx, void *ptr, size_t size)
{
	PyMemAllocatorEx *inner = ctx;
	void *moved = inner->realloc(inner->ctx, ptr, size);

	/* a resized object (tuple, str) that moved is a new block */
	if (moved && moved != ptr) {
		drop_block(ptr);
		if (tracking)
			alloc_sample(moved);
	}
	return moved;
}

static void hook_free(void *ctx, void *ptr)
{
	PyMemAllocatorEx *inner = ctx;

	drop_block(ptr);
	inner->free(inner->ctx, ptr);
}

static PyMemAllocatorEx hook_mem = {
	&inner_mem, hook_malloc, hook_calloc, hook_realloc, hook_free
};
static PyMemAllocatorEx hook_obj = {
	&inner_obj, hook_malloc, hook_calloc, hook_realloc, hook_free
};

const char *mtp_unsupported_reason(void)
{
#if PY_VERSION_HEX < 0x030B0000
	return "mtp needs CPython 3.11 or newer";
#elif defined(Py_GIL_DISABLED)
	return "mtp does not support the free-threaded build (no GIL, split refcounts)";
#else
	if (sizeof(void *) != 8)
		return "mtp needs a 64-bit interpreter";
	return NULL;
#endif
}

void mtp_hook_install(void)
{
	/*
	 * The RAW domain is left alone: it may be called without the GIL and
	 * no object is allocated from it.
	 */
	if (!hooked) {
		PyMem_GetAllocator(PYMEM_DOMAIN_MEM, &inner_mem);
		PyMem_GetAllocator(PYMEM_DOMAIN_OBJ, &inner_obj);
		PyMem_SetAllocator(PYMEM_DOMAIN_MEM, &hook_mem);
		PyMem_SetAllocator(PYMEM_DOMAIN_OBJ, &hook_obj);
		hooked = 1;
	}
	/* else still installed (someone wrapped it): it starts tracking again */
	tracking = 1;
	history_pos = 0;
	slice_pos = 0;
	n_active = 0;
	alloc_ring_n = 0;
	alloc_countdown = alloc_every ? alloc_every : 1;
	mtp_freed_tracked = 0;
}

void mtp_set_alloc_every(unsigned int every)
{
	alloc_every = every;
	alloc_countdown = every ? every : 1;
	alloc_ring_n = 0;
}

size_t mtp_alloc_samples(void)
{
	return alloc_ring_n;
}

size_t mtp_active_count(void)
{
	return n_active;
}

void mtp_hook_remove(void)
{
	PyMemAllocatorEx cur_mem, cur_obj;

	tracking = 0;
	mtp_objtable_free(&mtp_table);
	free(active);
	active = NULL;
	n_active = cap_active = 0;
	alloc_ring_n = 0;
	if (!hooked)
		return;
	PyMem_GetAllocator(PYMEM_DOMAIN_MEM, &cur_mem);
	PyMem_GetAllocator(PYMEM_DOMAIN_OBJ, &cur_obj);
	if (cur_mem.free == hook_free && cur_obj.free == hook_free) {
		PyMem_SetAllocator(PYMEM_DOMAIN_MEM, &inner_mem);
		PyMem_SetAllocator(PYMEM_DOMAIN_OBJ, &inner_obj);
		hooked = 0;
	}
	/* otherwise stay as a pass-through below whoever wrapped us */
}

/* Bytes in front of the object in its memory block. */
static unsigned int preheader(PyObject *op)
{
	PyTypeObject *tp = Py_TYPE(op);
	unsigned int size = PyType_IS_GC(tp) ? 2 * sizeof(uintptr_t) : 0;

#if PY_VERSION_HEX >= 0x030C0000
	if (PyType_HasFeature(tp, Py_TPFLAGS_MANAGED_DICT | Py_TPFLAGS_MANAGED_WEAKREF))
		size += 2 * sizeof(PyObject *);
#else
	if (PyType_HasFeature(tp, Py_TPFLAGS_MANAGED_DICT))
		size += 2 * sizeof(PyObject *);
#endif
	return size;
}

struct mtp_obj *mtp_lookup(PyObject *op)
{
	return mtp_objtable_find(&mtp_table, (uintptr_t)op - preheader(op));
}

/*
 * Objects already traversed in this pass, direct-mapped by address: most
 * visits go to a few shared objects (heap types, interned attribute names,
 * None), and this check is cheaper than a table probe. Cleared every pass;
 * nothing is freed while a pass runs.
 */
#define SEEN_CACHE 256

struct mark_walk {
	PyObject *seen_cache[SEEN_CACHE];
	PyObject **stack;
	unsigned int *depth;
	size_t top, cap;
	unsigned int cur_depth, depth_limit, size_limit, children;
	int nomem;
	struct mtp_mark_result *r;
};

/*
 * Marks @op; returns its entry and whether it was already traversed. NULL
 * (w->nomem unset) for an object that cannot be a key.
 */
static struct mtp_obj *mark_one(PyObject *op, struct mark_walk *w, int *seen)
{
	unsigned int pre = preheader(op);
	int created;
	uint64_t key = (uintptr_t)op - pre;

	/* static objects (in the interpreter's data) may be 8-byte aligned */
	if (!mtp_objtable_key_ok(key))
		return NULL;
	struct mtp_obj *o = mtp_objtable_insert(&mtp_table, key, &created);

	if (!o) {
		w->nomem = 1;
		return NULL;
	}
	w->r->visited++;
	if (created) {
		PyTypeObject *tp = Py_TYPE(op);

		w->r->added++;
		o->offset16 = pre / 16;
		/* a block is never retyped while tracked: a free drops its entry */
		o->storage = tp == &PyDict_Type || tp == &PyList_Type;
		/*
		 * The pass reads the header anyway: the refcount now is the
		 * baseline, so that the first sweep already measures a change
		 * (one sweep, seconds under TCG, earlier). The pass holds no
		 * reference (roots come from the GC's lists, not a list of them).
		 */
		o->prev = (uint8_t)Py_REFCNT(op);
		o->fresh = 0;
		o->pass = !pass_parity;	/* not traversed in this pass yet */
	}
	*seen = o->pass == pass_parity;
	return o;
}

static int push(struct mark_walk *w, PyObject *op, unsigned int depth)
{
	if (w->top == w->cap) {
		size_t cap = w->cap ? 2 * w->cap : 4096;
		PyObject **stack = realloc(w->stack, cap * sizeof(*stack));

		if (!stack)
			return -1;
		w->stack = stack;
		unsigned int *d = realloc(w->depth, cap * sizeof(*d));

		if (!d)
			return -1;
		w->depth = d;
		w->cap = cap;
	}
	w->stack[w->top] = op;
	w->depth[w->top++] = depth;
	return 0;
}

static int visit_child(PyObject *child, void *arg)
{
	struct mark_walk *w = arg;
	int seen;

	if (!child)
		return 0;
	if (w->size_limit && ++w->children > w->size_limit) {
		w->r->cut_size++;
		return 1;	/* stops this container's tp_traverse */
	}
	PyObject **cached = &w->seen_cache[((uintptr_t)child >> 4) % SEEN_CACHE];

	if (*cached == child) {
		w->r->visited++;
		return 0;
	}
	struct mtp_obj *o = mark_one(child, w, &seen);

	if (!o)
		return w->nomem ? -1 : 0;	/* untrackable: neither marked nor walked */
	if (seen || !PyObject_IS_GC(child)) {
		/* a non-container is done once marked */
		*cached = child;
		return 0;
	}
	if (w->depth_limit && w->cur_depth + 1 > w->depth_limit) {
		/* marked, not traversed: a later root may still reach it */
		w->r->cut_depth++;
		return 0;
	}
	o->pass = pass_parity;
	if (push(w, child, w->cur_depth + 1)) {
		w->nomem = 1;
		return -1;
	}
	return 0;
}

static void traverse_from(PyObject *root, struct mark_walk *w)
{
	if (push(w, root, 0)) {
		w->nomem = 1;
		return;
	}
	while (w->top && !w->nomem) {
		PyObject *op = w->stack[--w->top];
		traverseproc traverse = Py_TYPE(op)->tp_traverse;

		w->cur_depth = w->depth[w->top];
		w->children = 0;
		if (traverse)
			traverse(op, visit_child, w);
	}
}

static int count_root(PyObject *op, void *arg)
{
	return 0;
}

static int mark_root(PyObject *op, void *arg)
{
	struct mark_walk *w = arg;
	int seen;
	struct mtp_obj *o = mark_one(op, w, &seen);

	if (o && !seen) {
		o->pass = pass_parity;
		traverse_from(op, w);
	}
	return w->nomem;
}

static void active_rebuild(void);

int mtp_mark(unsigned int depth_limit, unsigned int size_limit, struct mtp_mark_result *r)
{
	struct mark_walk w = {
		.depth_limit = depth_limit, .size_limit = size_limit, .r = r,
	};
	size_t gc_objects;
	int first = !mtp_table.live;

	memset(r, 0, sizeof(*r));
	/* drop tombstones, and shrink a table most of whose objects died */
	if ((mtp_table.tombstones > mtp_table.live / 4 || 3 * mtp_table.live < mtp_table.cap) &&
	    mtp_objtable_compact(&mtp_table)) {
		PyErr_NoMemory();
		return -1;
	}
	/*
	 * First pass: reachable objects are about twice the GC's (ints, strs
	 * and floats hang off containers), so one rehash now instead of a
	 * dozen while growing. Later passes find most entries in place.
	 */
	if (first) {
		mtp_gc_roots(count_root, NULL, &gc_objects);
		if (mtp_objtable_reserve(&mtp_table, 2 * gc_objects)) {
			PyErr_NoMemory();
			return -1;
		}
	}
	pass_parity = !pass_parity;
	/* no Python code runs from here on: the world stands still */
	mtp_gc_roots(mark_root, &w, &r->roots);
	free(w.stack);
	free(w.depth);
	/*
	 * The first pass reserved for an estimate (NetworkX: 271 000 slots for
	 * 148 000 objects, 6.5 % of the RSS): hand back what it did not use.
	 * Before the active list is rebuilt, which holds slot indices.
	 */
	if (!w.nomem && first && mtp_objtable_fit(&mtp_table))
		w.nomem = 1;
	active_rebuild();
	if (w.nomem) {
		PyErr_NoMemory();
		return -1;
	}
	return 0;
}

static int active_push(size_t idx)
{
	if (n_active == cap_active) {
		size_t cap = cap_active ? 2 * cap_active : 4096;
		uint32_t *a = realloc(active, cap * sizeof(*a));

		if (!a)
			return -1;
		active = a;
		cap_active = cap;
	}
	active[n_active++] = (uint32_t)idx;
	return 0;
}

int mtp_activate(struct mtp_obj *o)
{
	if (o->active)
		return 0;
	/* no room: the object waits for its slice of the table */
	if (active_push((size_t)(o - mtp_table.slots)))
		return -1;
	o->active = 1;
	return 0;
}

/* After a pass moved or reused slots: the list from the entries' bits. */
static void active_rebuild(void)
{
	n_active = 0;
	for (size_t i = 0; i < mtp_table.cap; i++) {
		struct mtp_obj *o = &mtp_table.slots[i];

		if (!mtp_obj_live(o) || !o->active)
			continue;
		if (active_push(i))
			o->active = 0;	/* read with its slice instead */
	}
}

/* Reads one object's refcount change (plus sightings) into history slot @pos. */
static void sample_one(struct mtp_obj *o, unsigned int pos)
{
	PyObject *op = (PyObject *)mtp_obj_address(o);
	uint8_t now = (uint8_t)Py_REFCNT(op);
	int64_t delta = (int8_t)(uint8_t)(now - o->prev);

	if (delta < 0)
		delta = -delta;
	if (o->fresh)
		delta = 0;	/* no baseline yet; sightings still count */
	delta += o->hits;
	mtp_obj_set_change(o, pos, (uint64_t)delta);
	o->hits = 0;
	o->prev = now;
	o->fresh = 0;
}

void mtp_sample(size_t batch, size_t slices, struct mtp_sample_result *r)
{
	unsigned int pos = history_pos;
	size_t done = 0;

	memset(r, 0, sizeof(*r));
	if (!slices)
		slices = 1;
	/*
	 * The active objects, every sweep. An object outside the list has
	 * eight zero changes, so its slot for this sweep is already 0.
	 */
	for (size_t j = 0; j < n_active;) {
		if (batch && ++done % batch == 0) {
			/* let the program run; frees only turn entries into tombstones */
			Py_BEGIN_ALLOW_THREADS
			Py_END_ALLOW_THREADS
		}
		struct mtp_obj *o = &mtp_table.slots[active[j]];

		if (!mtp_obj_live(o) || !o->active) {
			active[j] = active[--n_active];	/* freed */
			continue;
		}
		sample_one(o, pos);
		r->sampled++;
		r->active++;
		if (!o->changes) {
			/* idle for a whole history: back to the slices */
			o->active = 0;
			active[j] = active[--n_active];
			continue;
		}
		j++;
	}
	/*
	 * One slice of the table: the idle objects, each read every @slices
	 * sweeps (its change is then the net change over that many sweeps).
	 */
	size_t cap = mtp_table.cap, s = slice_pos % slices;
	size_t lo = cap / slices * s + (s < cap % slices ? s : cap % slices);
	size_t hi = lo + cap / slices + (s < cap % slices);

	for (size_t i = lo; i < hi && i < mtp_table.cap; i++) {
		if (batch && ++done % batch == 0) {
			Py_BEGIN_ALLOW_THREADS
			Py_END_ALLOW_THREADS
		}
		struct mtp_obj *o = &mtp_table.slots[i];

		if (!mtp_obj_live(o) || o->active)
			continue;
		sample_one(o, pos);
		r->sampled++;
		if (o->changes && mtp_activate(o))
			r->overflow++;
	}
	r->skipped = mtp_table.live > r->sampled ? mtp_table.live - r->sampled : 0;
	slice_pos = (s + 1) % slices;
	history_pos = (pos + 1) % MTP_HISTORY;
}

uintptr_t mtp_storage_of(PyObject *op)
{
	/*
	 * The type pointer is compared, never followed: an object on a free
	 * list may hold a link there (floats). A free-listed dict or list keeps
	 * its type, and a stale storage pointer only misdirects heat.
	 */
	PyTypeObject *tp = Py_TYPE(op);

	if (tp == &PyDict_Type) {
		PyDictObject *d = (PyDictObject *)op;

		if (d->ma_used <= 0)
			return 0;	/* maybe the shared static empty table */
		return d->ma_values ? (uintptr_t)d->ma_values : (uintptr_t)d->ma_keys;
	}
	if (tp == &PyList_Type)
		return (uintptr_t)((PyListObject *)op)->ob_item;
	return 0;
}

/* table entries between a prefetch and the read it serves */
#define HEAT_PREFETCH 16
/*
 * Page heat depends only on an object's eight changes, and few distinct
 * histories occur: a direct-mapped memo of the model's result spares its
 * floating point (emulated, hence slow, under TCG).
 */
#define HEAT_MEMO 1024

struct heat_memo {
	uint64_t key;		/* changes + 1; 0 = empty */
	double heat;
};

static double memo_heat(struct heat_memo *memo, const struct mtp_model *m,
			const struct mtp_obj *o)
{
	if (!o->changes)
		return 0;	/* every feature is 0, and page heat has no intercept */
	struct heat_memo *e = &memo[(o->changes * 0x9E3779B1u) >> 22];
	uint8_t changes[MTP_HISTORY];

	if (e->key == (uint64_t)o->changes + 1)
		return e->heat;
	mtp_obj_history(o, changes);
	e->key = (uint64_t)o->changes + 1;
	e->heat = mtp_page_heat(m, changes);
	return e->heat;
}

/* Appends @o's heat (and its table's, for a dict or list) to @heat. */
static void add_heat(struct heat_memo *memo, const struct mtp_model *m, const struct mtp_obj *o,
		     size_t page_size, struct mtp_heat *heat, size_t *n, size_t cap)
{
	if (*n >= cap)
		return;
	heat[*n].page = mtp_obj_address(o) & ~(uint64_t)(page_size - 1);
	heat[*n].heat = memo_heat(memo, m, o);
	/* only dicts and lists are read: the other objects' pages come from the key */
	uintptr_t storage = o->storage ? mtp_storage_of((PyObject *)mtp_obj_address(o)) : 0;
	uint64_t page = storage & ~(uint64_t)(page_size - 1);

	(*n)++;
	/* the reads go to the table too: it heats its own page */
	if (storage && page != heat[*n - 1].page && *n < cap) {
		heat[*n].page = page;
		heat[*n].heat = heat[*n - 1].heat;
		(*n)++;
	}
}

struct mtp_heat *mtp_collect_heat(const struct mtp_model *m, size_t page_size, int full,
				  double alloc_heat, size_t *n, size_t *bytes)
{
	size_t objects = full ? mtp_table.live : n_active;
	size_t allocs = alloc_ring_n < ALLOC_RING ? alloc_ring_n : ALLOC_RING;
	/* room for a second page per object (dicts' and lists' storage) and the allocations */
	size_t cap = 2 * objects + allocs + 1;
	struct mtp_heat *heat = mtp_meta_alloc(cap * sizeof(*heat));

	*bytes = cap * sizeof(*heat);
	*n = 0;
	if (!heat)
		return NULL;
	struct heat_memo *memo = calloc(HEAT_MEMO, sizeof(*memo));

	if (!memo) {
		mtp_meta_free(heat, *bytes);
		return NULL;
	}
	if (!full) {
		/*
		 * Only the active objects have heat (the others' changes are
		 * all zero); pages of idle objects only cool, which the page
		 * table does for every page this round does not name.
		 */
		for (size_t j = 0; j < n_active; j++) {
			const struct mtp_obj *o = &mtp_table.slots[active[j]];

			if (mtp_obj_live(o) && o->active && !o->fresh)
				add_heat(memo, m, o, page_size, heat, n, cap);
		}
	} else {
		for (size_t i = 0; i < mtp_table.cap; i++) {
			const struct mtp_obj *o = &mtp_table.slots[i];

			/*
			 * Reading a dict's or list's table pointer is a cache
			 * miss: start the one a few entries ahead now. A
			 * prefetch never faults.
			 */
			if (i + HEAT_PREFETCH < mtp_table.cap) {
				const struct mtp_obj *ahead = &mtp_table.slots[i + HEAT_PREFETCH];

				if (mtp_obj_live(ahead) && ahead->storage)
					__builtin_prefetch((const void *)mtp_obj_address(ahead));
			}
			if (mtp_obj_live(o) && !o->fresh)
				add_heat(memo, m, o, page_size, heat, n, cap);
		}
	}
	/* every sampled allocation since the last round heats its page */
	for (size_t i = 0; i < allocs && *n < cap && alloc_heat > 0; i++) {
		heat[*n].page = alloc_ring[i] & ~(uint64_t)(page_size - 1);
		heat[(*n)++].heat = alloc_heat;
	}
	alloc_ring_n = 0;
	free(memo);
	return heat;
}
