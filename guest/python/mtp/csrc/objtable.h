/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The per-object temperature metadata of section 5.2: an open-addressing
 * hash table keyed by the address of the object's memory block (what the
 * allocator's free() receives), so that the free hook can drop an entry in
 * O(1). The table itself is the metadata array: no separate visited set.
 */
#ifndef MTP_OBJTABLE_H
#define MTP_OBJTABLE_H

#include <stddef.h>
#include <stdint.h>

#include "policy.h"

/* Stored key values (block address / 16) that are no block. */
#define MTP_KEY_EMPTY 0
#define MTP_KEY_TOMBSTONE 1
#define MTP_KEY_BITS 44		/* 16-byte aligned user addresses below 2^48 */

/*
 * 12 bytes per object (the metadata share of RSS): the block address / 16
 * in 44 bits, 8 bits of refcount baseline (a change of 128 or more between
 * two sweeps reads wrong; changes saturate at 15 anyway), sightings
 * saturating at 15, whether it is a dict or list (so that a migration round
 * reads only those objects, not every object's type), whether it is in the
 * sweeps' active list (tracker.c: an object outside it has eight zero
 * changes), and eight 4-bit changes saturating at MTP_CHANGE_MAX.
 */
struct __attribute__((packed, aligned(4))) mtp_obj {
	uint64_t key : MTP_KEY_BITS;	/* block start / 16, or EMPTY/TOMBSTONE */
	uint64_t offset16 : 2;	/* pre-header size / 16 (GC head, managed dict) */
	uint64_t active : 1;	/* in the sweep's active list (some change or sighting) */
	uint64_t spare : 1;
	uint64_t fresh : 1;	/* no sample yet: prev is not a baseline */
	uint64_t pass : 1;	/* parity of the marking pass that traversed it */
	uint64_t prev : 8;	/* low 8 bits of ob_refcnt at the last sample */
	uint64_t hits : 4;	/* frame-sampler sightings since the last sweep */
	uint64_t storage : 1;	/* an exact dict or list: its table heats a page too */
	uint32_t changes;	/* MTP_HISTORY 4-bit changes, slot i at bits 4i */
};

_Static_assert(sizeof(struct mtp_obj) == 12, "object metadata must stay 12 bytes");

#define MTP_HITS_MAX 15

/* Whether a block address can be a key: 16-byte aligned, below 2^48. */
static inline int mtp_objtable_key_ok(uint64_t addr)
{
	return !(addr & 15) && addr >> (MTP_KEY_BITS + 4) == 0 && addr >> 4 > MTP_KEY_TOMBSTONE;
}

#define MTP_CHANGE_MAX 15

static inline unsigned int mtp_obj_change(const struct mtp_obj *o, unsigned int slot)
{
	return o->changes >> (4 * slot) & 0xf;
}

/* Stores @value in @slot, saturating at MTP_CHANGE_MAX. */
static inline void mtp_obj_set_change(struct mtp_obj *o, unsigned int slot, uint64_t value)
{
	uint32_t v = value > MTP_CHANGE_MAX ? MTP_CHANGE_MAX : (uint32_t)value;

	o->changes = (o->changes & ~(0xfu << (4 * slot))) | v << (4 * slot);
}

static inline void mtp_obj_history(const struct mtp_obj *o, uint8_t out[MTP_HISTORY])
{
	for (unsigned int i = 0; i < MTP_HISTORY; i++)
		out[i] = (uint8_t)mtp_obj_change(o, i);
}

#define MTP_PAGE_FILTER_BITS (1u << 20)	/* 128 KiB: stays in cache */

struct mtp_objtable {
	struct mtp_obj *slots;
	size_t cap;		/* slots, or 0 */
	size_t live;
	size_t tombstones;
	/*
	 * One bit per hashed 4 KiB page that holds a tracked block: the free
	 * hook's misses (most frees) end here instead of in the big table.
	 */
	uint64_t page_filter[MTP_PAGE_FILTER_BITS / 64];
};

/* The block address of a live entry. */
static inline uint64_t mtp_obj_key(const struct mtp_obj *o)
{
	return (uint64_t)o->key << 4;
}

static inline uintptr_t mtp_obj_address(const struct mtp_obj *o)
{
	return (uintptr_t)mtp_obj_key(o) + 16u * o->offset16;
}

static inline int mtp_obj_live(const struct mtp_obj *o)
{
	return o->key > MTP_KEY_TOMBSTONE;
}

/* Returns the entry of @key (a block address), or NULL. */
struct mtp_obj *mtp_objtable_find(const struct mtp_objtable *t, uint64_t key);

/*
 * Returns the entry of @key, creating it (zeroed, fresh) if absent; *created
 * says which. NULL when memory ran out or @key fails mtp_objtable_key_ok().
 */
struct mtp_obj *mtp_objtable_insert(struct mtp_objtable *t, uint64_t key, int *created);

/*
 * Turns the entry of @key into a tombstone; returns whether there was one.
 * Cheap for untracked keys (the page filter answers).
 */
int mtp_objtable_remove(struct mtp_objtable *t, uint64_t key);

/*
 * Grows the table so that @n entries fit without another rehash; -1 when
 * memory ran out (table unchanged).
 */
int mtp_objtable_reserve(struct mtp_objtable *t, size_t n);

/*
 * Rehashes without tombstones, shrinking a table most of whose entries
 * were freed; -1 when memory ran out (table unchanged).
 */
int mtp_objtable_compact(struct mtp_objtable *t);

/*
 * Shrinks a table that a reserve left less than 55 % full to the size its
 * live entries need (a first marking pass reserves for an estimate); -1
 * when memory ran out (table unchanged).
 */
int mtp_objtable_fit(struct mtp_objtable *t);

void mtp_objtable_free(struct mtp_objtable *t);

static inline size_t mtp_objtable_bytes(const struct mtp_objtable *t)
{
	return t->cap * sizeof(struct mtp_obj);
}

#endif
