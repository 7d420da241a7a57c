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

#define MTP_KEY_EMPTY 0
#define MTP_KEY_TOMBSTONE 1

struct mtp_obj {
	uint64_t key;		/* block start; object = key + 16 * offset16 */
	uint32_t prev;		/* low 32 bits of ob_refcnt at the last sample */
	uint8_t changes[MTP_HISTORY];
	uint8_t offset16 : 2;	/* pre-header size / 16 (GC head, managed dict) */
	uint8_t skip : 2;	/* sampling phases still to skip (all-zero history) */
	uint8_t fresh : 1;	/* no sample yet: prev is not a baseline */
	uint8_t pass : 1;	/* parity of the marking pass that traversed it */
};

#define MTP_PAGE_FILTER_BITS (1u << 20)	/* 128 KiB: stays in cache */

struct mtp_objtable {
	struct mtp_obj *slots;
	size_t cap;		/* power of two, or 0 */
	size_t live;
	size_t tombstones;
	/*
	 * One bit per hashed 4 KiB page that holds a tracked block: the free
	 * hook's misses (most frees) end here instead of in the big table.
	 */
	uint64_t page_filter[MTP_PAGE_FILTER_BITS / 64];
};

static inline uintptr_t mtp_obj_address(const struct mtp_obj *o)
{
	return (uintptr_t)o->key + 16u * o->offset16;
}

static inline int mtp_obj_live(const struct mtp_obj *o)
{
	return o->key > MTP_KEY_TOMBSTONE;
}

/* Returns the entry of @key, or NULL. */
struct mtp_obj *mtp_objtable_find(const struct mtp_objtable *t, uint64_t key);

/*
 * Returns the entry of @key, creating it (zeroed, fresh) if absent; *created
 * says which. NULL when memory ran out.
 */
struct mtp_obj *mtp_objtable_insert(struct mtp_objtable *t, uint64_t key, int *created);

/*
 * Turns the entry of @key into a tombstone; returns whether there was one.
 * Cheap for untracked keys (the page filter answers).
 */
int mtp_objtable_remove(struct mtp_objtable *t, uint64_t key);

/* Rehashes without tombstones; -1 when memory ran out (table unchanged). */
int mtp_objtable_compact(struct mtp_objtable *t);

void mtp_objtable_free(struct mtp_objtable *t);

static inline size_t mtp_objtable_bytes(const struct mtp_objtable *t)
{
	return t->cap * sizeof(struct mtp_obj);
}

#endif
