// SPDX-License-Identifier: Apache-2.0
/* Open-addressing (linear probing) table of tracked objects; see objtable.h. */
#include <stdlib.h>
#include <string.h>

#include "metamem.h"
#include "objtable.h"

#define MIN_CAP 1024

/*
 * Load (tombstones included) kept between these percentages: the table is
 * most of MTP's metadata, and a power-of-two size would leave it between
 * 35 and 70 % full (12 / 0.35 = 34 bytes per object). At 80 % a free hook
 * miss probes about 13 slots (three cache lines), a hit about 3.
 */
#define MAX_LOAD_PCT 80
#define REHASH_LOAD_PCT 60
#define MIN_LOAD_PCT 35
#define FIT_LOAD_PCT 55

static inline size_t slot_of(uint64_t key, size_t cap)
{
	/*
	 * Fibonacci hashing (blocks are 16-byte aligned and mostly sequential,
	 * the product spreads such runs), then the product's top bits scaled
	 * to [0, cap) (multiply-shift), so that any capacity works.
	 */
	uint64_t h = (key >> 4) * 0x9E3779B97F4A7C15ull;

	return (size_t)(((unsigned __int128)h * cap) >> 64);
}

static inline size_t next_slot(size_t i, size_t cap)
{
	return i + 1 == cap ? 0 : i + 1;
}

static inline size_t filter_bit(uint64_t key)
{
	return (size_t)(((key >> 12) * 0x9E3779B97F4A7C15ull) >> 44);	/* 20 bits */
}

static inline void filter_add(struct mtp_objtable *t, uint64_t key)
{
	size_t b = filter_bit(key);

	t->page_filter[b / 64] |= 1ull << (b % 64);
}

static inline int filter_may_hold(const struct mtp_objtable *t, uint64_t key)
{
	size_t b = filter_bit(key);

	return t->page_filter[b / 64] >> (b % 64) & 1;
}

struct mtp_obj *mtp_objtable_find(const struct mtp_objtable *t, uint64_t key)
{
	if (!t->cap || !mtp_objtable_key_ok(key))
		return NULL;
	uint64_t stored = key >> 4;

	for (size_t i = slot_of(key, t->cap);; i = next_slot(i, t->cap)) {
		struct mtp_obj *o = &t->slots[i];

		if (o->key == stored)
			return o;
		if (o->key == MTP_KEY_EMPTY)
			return NULL;
	}
}

/* A capacity @live entries fill to REHASH_LOAD_PCT. */
static size_t cap_for(size_t live)
{
	size_t cap = live / REHASH_LOAD_PCT * 100 + 100;

	return cap < MIN_CAP ? MIN_CAP : cap;
}

static int rehash(struct mtp_objtable *t, size_t cap)
{
	struct mtp_obj *slots = mtp_meta_alloc(cap * sizeof(*slots));

	if (!slots)
		return -1;
	for (size_t i = 0; i < t->cap; i++) {
		const struct mtp_obj *o = &t->slots[i];

		if (!mtp_obj_live(o))
			continue;
		size_t j = slot_of(mtp_obj_key(o), cap);

		while (slots[j].key != MTP_KEY_EMPTY)
			j = next_slot(j, cap);
		slots[j] = *o;
	}
	mtp_meta_free(t->slots, mtp_objtable_bytes(t));
	t->slots = slots;
	t->cap = cap;
	t->tombstones = 0;
	/* forget the pages of dropped entries */
	memset(t->page_filter, 0, sizeof(t->page_filter));
	for (size_t i = 0; i < cap; i++)
		if (mtp_obj_live(&slots[i]))
			filter_add(t, mtp_obj_key(&slots[i]));
	return 0;
}

struct mtp_obj *mtp_objtable_insert(struct mtp_objtable *t, uint64_t key, int *created)
{
	struct mtp_obj *o = mtp_objtable_find(t, key);

	*created = 0;
	if (o)
		return o;
	if (!mtp_objtable_key_ok(key))
		return NULL;
	if (100 * (t->live + t->tombstones + 1) > MAX_LOAD_PCT * t->cap) {
		if (rehash(t, cap_for(t->live + 1)))
			return NULL;
	}
	size_t i = slot_of(key, t->cap);

	while (mtp_obj_live(&t->slots[i]))
		i = next_slot(i, t->cap);
	o = &t->slots[i];
	if (o->key == MTP_KEY_TOMBSTONE)
		t->tombstones--;
	memset(o, 0, sizeof(*o));
	o->key = key >> 4;
	o->fresh = 1;
	filter_add(t, key);
	t->live++;
	*created = 1;
	return o;
}

int mtp_objtable_remove(struct mtp_objtable *t, uint64_t key)
{
	if (!t->cap || !filter_may_hold(t, key))
		return 0;
	struct mtp_obj *o = mtp_objtable_find(t, key);

	if (!o)
		return 0;
	o->key = MTP_KEY_TOMBSTONE;
	t->live--;
	t->tombstones++;
	return 1;
}

int mtp_objtable_reserve(struct mtp_objtable *t, size_t n)
{
	if (100 * (n + t->tombstones) <= MAX_LOAD_PCT * t->cap)
		return 0;
	return rehash(t, cap_for(n));
}

int mtp_objtable_compact(struct mtp_objtable *t)
{
	/* also shrinks a table most of whose objects were freed */
	if (!t->tombstones && (t->cap <= MIN_CAP || 100 * t->live >= MIN_LOAD_PCT * t->cap))
		return 0;
	return rehash(t, cap_for(t->live));
}

int mtp_objtable_fit(struct mtp_objtable *t)
{
	if (t->cap <= MIN_CAP || 100 * (t->live + t->tombstones) >= FIT_LOAD_PCT * t->cap)
		return 0;
	return rehash(t, cap_for(t->live));
}

void mtp_objtable_free(struct mtp_objtable *t)
{
	mtp_meta_free(t->slots, mtp_objtable_bytes(t));
	memset(t, 0, sizeof(*t));
}
