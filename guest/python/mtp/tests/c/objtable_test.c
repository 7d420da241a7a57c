// SPDX-License-Identifier: Apache-2.0
/*
 * Randomised test of the object table against a plain shadow array:
 * inserts, tombstoning removes, lookups, growth and compaction, with each
 * entry's payload surviving every rehash. Exit status 0 on success.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../csrc/objtable.h"

#define KEYS 50000

static uint64_t key_of(size_t i)
{
	return 0x7f0000000000ull + 16 * (uint64_t)i * 7919;	/* 16-aligned, spread */
}

#define CHECK(cond) do { \
	if (!(cond)) { \
		fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #cond); \
		return 1; \
	} \
} while (0)

/*
 * The table is most of MTP's metadata: growing leaves it at least 55 %
 * full (not the 35 % a power-of-two doubling allows), a reserve makes
 * room without further rehashes, and a compaction shrinks a table most of
 * whose entries were freed.
 */
static int check_sizing(void)
{
	struct mtp_objtable t = { 0 };
	int created;

	for (size_t i = 0; i < 100000; i++) {
		CHECK(mtp_objtable_insert(&t, key_of(i), &created) && created);
		CHECK(t.cap <= 1024 || 100 * t.live >= 55 * t.cap);
	}
	for (size_t i = 0; i < 90000; i++)
		CHECK(mtp_objtable_remove(&t, key_of(i)));
	CHECK(mtp_objtable_compact(&t) == 0);
	CHECK(t.live == 10000 && t.tombstones == 0 && 100 * t.live >= 55 * t.cap);
	for (size_t i = 90000; i < 100000; i++)
		CHECK(mtp_objtable_find(&t, key_of(i)));
	CHECK(mtp_objtable_reserve(&t, 50000) == 0);
	const struct mtp_obj *slots = t.slots;

	for (size_t i = 0; i < 40000; i++)
		CHECK(mtp_objtable_insert(&t, key_of(i), &created) && created);
	CHECK(t.slots == slots);	/* no rehash after the reserve */
	for (size_t i = 90000; i < 100000; i++)
		CHECK(mtp_objtable_find(&t, key_of(i)));
	/* a reserve the entries did not fill is handed back, a full one kept */
	CHECK(mtp_objtable_fit(&t) == 0 && t.slots == slots);
	mtp_objtable_free(&t);
	CHECK(mtp_objtable_reserve(&t, 100000) == 0);
	for (size_t i = 0; i < 30000; i++)
		CHECK(mtp_objtable_insert(&t, key_of(i), &created) && created);
	CHECK(mtp_objtable_fit(&t) == 0);
	CHECK(t.live == 30000 && 100 * t.live >= 55 * t.cap);
	for (size_t i = 0; i < 30000; i++)
		CHECK(mtp_objtable_find(&t, key_of(i)));
	mtp_objtable_free(&t);
	return 0;
}

/* The packed 4-bit change history: slots independent, values saturate. */
static int check_history_packing(void)
{
	struct mtp_obj o = { 0 };
	uint8_t h[MTP_HISTORY];

	for (unsigned int i = 0; i < MTP_HISTORY; i++)
		mtp_obj_set_change(&o, i, i * 3);
	mtp_obj_set_change(&o, 7, 1000);	/* saturates */
	mtp_obj_set_change(&o, 2, 0);	/* clears one slot only */
	mtp_obj_history(&o, h);
	for (unsigned int i = 0; i < MTP_HISTORY; i++) {
		unsigned int want = i == 2 ? 0 : i * 3 > MTP_CHANGE_MAX ? MTP_CHANGE_MAX : i * 3;

		CHECK(h[i] == want && mtp_obj_change(&o, i) == want);
	}
	CHECK(sizeof(o) == 12);
	return 0;
}

int main(void)
{
	if (check_history_packing())
		return 1;
	static uint8_t present[KEYS];
	struct mtp_objtable t = { 0 };
	size_t live = 0;
	int created;

	srand(12345);
	for (int round = 0; round < 400000; round++) {
		size_t i = (size_t)rand() % KEYS;
		int op = rand() % 10;

		if (op < 5) {
			struct mtp_obj *o = mtp_objtable_insert(&t, key_of(i), &created);

			CHECK(o && mtp_obj_key(o) == key_of(i));
			CHECK(created == !present[i]);
			if (created) {
				CHECK(o->fresh && !o->prev);
				o->prev = (uint8_t)i;	/* payload to follow through rehashes */
				mtp_obj_set_change(o, i % MTP_HISTORY, i % 16);
				present[i] = 1;
				live++;
			}
		} else if (op < 8) {
			CHECK(mtp_objtable_remove(&t, key_of(i)) == present[i]);
			live -= present[i];
			present[i] = 0;
		} else if (op == 8) {
			struct mtp_obj *o = mtp_objtable_find(&t, key_of(i));

			CHECK(!!o == present[i]);
			CHECK(!o || (o->prev == (uint8_t)i &&
				     mtp_obj_change(o, i % MTP_HISTORY) == i % 16));
		} else if (round % 1000 == 0) {
			CHECK(mtp_objtable_compact(&t) == 0);
			CHECK(t.tombstones == 0);
		}
		CHECK(t.live == live);
		/* load at most 80 %, tombstones included */
		CHECK(100 * (t.live + t.tombstones) <= 80 * t.cap);
	}
	for (size_t i = 0; i < KEYS; i++) {
		struct mtp_obj *o = mtp_objtable_find(&t, key_of(i));

		CHECK(!!o == present[i]);
		CHECK(!o || o->prev == (uint8_t)i);
	}
	CHECK(check_sizing() == 0);
	CHECK(!mtp_objtable_find(&t, MTP_KEY_EMPTY));
	CHECK(!mtp_objtable_find(&t, MTP_KEY_TOMBSTONE));
	CHECK(!mtp_objtable_insert(&t, MTP_KEY_TOMBSTONE, &created));
	mtp_objtable_free(&t);
	CHECK(t.cap == 0 && !mtp_objtable_find(&t, key_of(1)));
	printf("objtable: ok (%zu live at the end)\n", live);
	return 0;
}
