// SPDX-License-Identifier: Apache-2.0
/* Open-addressing (linear probing) table of tracked objects; see objtable.h. */
#include <stdlib.h>
#include <string.h>

#include "objtable.h"

#define MIN_CAP 1024

static inline size_t slot_of(uint64_t key, size_t cap)
{
	/*
	 * Fibonacci hashing: blocks are 16-byte aligned and mostly sequential,
	 * the top bits of the product spread such runs evenly.
	 */
	return (size_t)(((key >> 4) * 0x9E3779B97F4A7C15ull) >> (64 - __builtin_ctzll(cap)));
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

	for (size_t i = slot_of(key, t->cap);; i = (i + 1) & (t->cap - 1)) {
		struct mtp_obj *o = &t->slots[i];

		if (o->key == stored)
			return o;
		if (o->key == MTP_KEY_EMPTY)
			return NULL;
	}
}

static size_t cap_for(size_t live)
{
	size_t cap = MIN_CAP;

	while (2 * live > cap)
		cap *= 2;
	return cap;
}

static int rehash(struct mtp_objtable *t, size_t cap)
{
	struct mtp_obj *slots = calloc(cap, sizeof(*slots));

	if (!slots)
		return -1;
	for (size_t i = 0; i < t->cap; i++) {
		const struct mtp_obj *o = &t->slots[i];

		if (!mtp_obj_live(o))
			continue;
		size_t j = slot_of(mtp_obj_key(o), cap);

		while (slots[j].key != MTP_KEY_EMPTY)
			j = (j + 1) & (cap - 1);
		slots[j] = *o;
	}
	free(t->slots);
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
	/*
	 * Load (tombstones included) at most 0.7: the free hook's misses probe
	 * about six slots. A rehash leaves it at most 0.5.
	 */
	if (10 * (t->live + t->tombstones + 1) > 7 * t->cap) {
		if (rehash(t, cap_for(t->live + 1)))
			return NULL;
	}
	size_t i = slot_of(key, t->cap);

	while (mtp_obj_live(&t->slots[i]))
		i = (i + 1) & (t->cap - 1);
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

int mtp_objtable_compact(struct mtp_objtable *t)
{
	if (!t->tombstones)
		return 0;
	return rehash(t, cap_for(t->live));
}

void mtp_objtable_free(struct mtp_objtable *t)
{
	free(t->slots);
	memset(t, 0, sizeof(*t));
}
