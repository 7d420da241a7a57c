// SPDX-License-Identifier: Apache-2.0
/* Page temperature table and migration plan; see pages.h. */
#include <stdlib.h>
#include <string.h>

#include "pages.h"

static int by_page(const void *a, const void *b)
{
	uint64_t x = ((const struct mtp_heat *)a)->page;
	uint64_t y = ((const struct mtp_heat *)b)->page;

	return (x > y) - (x < y);
}

static size_t slot_of(uint64_t key, size_t slots)
{
	return (size_t)(((key >> 12) ^ key) * 0x9E3779B97F4A7C15ull >> 20) & (slots - 1);
}

/*
 * Finds or inserts @key (page + 1; 0 marks a free slot) by linear probing;
 * counts an insertion in @used.
 */
static struct mtp_heat *slot_for(struct mtp_heat *slot, size_t slots, uint64_t key,
				 size_t *used)
{
	size_t h = slot_of(key, slots);

	while (slot[h].page && slot[h].page != key)
		h = (h + 1) & (slots - 1);
	if (!slot[h].page) {
		slot[h].page = key;
		(*used)++;
	}
	return &slot[h];
}

/* Sorts @heat by page and sums it per page in place. */
static size_t sort_and_sum(struct mtp_heat *heat, size_t n)
{
	size_t out = 0;

	qsort(heat, n, sizeof(*heat), by_page);
	for (size_t i = 0; i < n; i++) {
		if (out && heat[out - 1].page == heat[i].page)
			heat[out - 1].heat += heat[i].heat;
		else
			heat[out++] = heat[i];
	}
	return out;
}

/*
 * Sums @heat per page into the front of @heat, in page order; returns the
 * number of pages. Objects far outnumber their pages, so the sums go
 * through a small open-addressing table (kept under half full) and only the
 * distinct pages are sorted: sorting every object's entry was most of a
 * round's time. Falls back to sorting everything when memory is short.
 */
static size_t aggregate(struct mtp_heat *heat, size_t n)
{
	struct mtp_heat *slot = NULL;
	size_t slots = 0, used = 0, out = 0;

	for (size_t i = 0; i < n; i++) {
		if (heat[i].page == UINT64_MAX)
			goto sort_all;	/* no key left for it */
		if (2 * (used + 1) > slots) {
			size_t grown = slots ? 2 * slots : 1024;
			struct mtp_heat *t = calloc(grown, sizeof(*t));

			if (!t)
				goto sort_all;
			size_t moved = 0;

			for (size_t j = 0; j < slots; j++)
				if (slot[j].page)
					slot_for(t, grown, slot[j].page, &moved)->heat = slot[j].heat;
			free(slot);
			slot = t;
			slots = grown;
		}
		slot_for(slot, slots, heat[i].page + 1, &used)->heat += heat[i].heat;
	}
	for (size_t j = 0; j < slots; j++)
		if (slot[j].page) {
			heat[out].page = slot[j].page - 1;
			heat[out++].heat = slot[j].heat;
		}
	free(slot);
	qsort(heat, out, sizeof(*heat), by_page);
	return out;

sort_all:
	free(slot);
	return sort_and_sum(heat, n);
}

int mtp_pages_update(struct mtp_pages *t, struct mtp_heat *heat, size_t n, double k,
		     double drop_below, int full)
{
	n = aggregate(heat, n);

	size_t cap = t->n + n, i = 0, j = 0, out = 0;
	uint64_t *page = malloc((cap ? cap : 1) * sizeof(*page));
	double *temp = malloc((cap ? cap : 1) * sizeof(*temp));
	int *node = malloc((cap ? cap : 1) * sizeof(*node));

	if (!page || !temp || !node) {
		free(page);
		free(temp);
		free(node);
		return -1;
	}
	while (i < t->n || j < n) {
		if (j == n || (i < t->n && t->page[i] < heat[j].page)) {
			/* no heat on this page this round: it cools */
			double c = mtp_cool(t->temp[i], 0, k);

			/* only a full round knows that no tracked object is left there */
			if (c >= drop_below || !full) {
				page[out] = t->page[i];
				temp[out] = c;
				node[out++] = t->node[i];
			}
			i++;
		} else if (i == t->n || heat[j].page < t->page[i]) {
			page[out] = heat[j].page;
			/* a new page has no history: take its heat as is */
			temp[out] = heat[j].heat;
			node[out++] = MTP_NODE_UNKNOWN;
			j++;
		} else {
			page[out] = t->page[i];
			temp[out] = mtp_cool(t->temp[i], heat[j].heat, k);
			node[out++] = t->node[i];
			i++;
			j++;
		}
	}
	mtp_pages_free(t);
	t->page = page;
	t->temp = temp;
	t->node = node;
	t->n = out;
	return 0;
}

void mtp_pages_free(struct mtp_pages *t)
{
	free(t->page);
	free(t->temp);
	free(t->node);
	memset(t, 0, sizeof(*t));
}

static int known(int node)
{
	return node >= 0 && node < MTP_MAX_NODES;
}

void mtp_histograms(const double *temp, const int *node, size_t n,
		    const uint8_t slow[MTP_MAX_NODES], struct mtp_histograms *out)
{
	memset(out, 0, sizeof(*out));
	for (size_t i = 0; i < n; i++) {
		if (!known(node[i]))
			continue;
		unsigned int b = mtp_bucket(temp[i]);

		out->by_node[node[i]][b]++;
		if (slow[node[i]]) {
			out->slow[b]++;
			out->temp_slow += temp[i];
		} else {
			out->fast[b]++;
			out->temp_fast += temp[i];
		}
	}
}

void mtp_select(const double *temp, const int *node, size_t n,
		const uint8_t slow[MTP_MAX_NODES], unsigned int h, size_t max, int64_t room,
		size_t *demote, size_t *n_demote, size_t *promote, size_t *n_promote)
{
	static const double band[] = { 1.0, MTP_ROOM_MIN_TEMP };
	size_t want = max;

	*n_demote = 0;
	*n_promote = 0;
	if (h >= MTP_BUCKETS)
		return;
	for (unsigned int b = MTP_BUCKETS; b-- > h && *n_promote < max;)
		for (size_t i = 0; i < n && *n_promote < max; i++)
			if (known(node[i]) && slow[node[i]] && mtp_bucket(temp[i]) == b)
				promote[(*n_promote)++] = i;
	/* free FMem beyond the promotions: bucket-0 pages with some signal */
	size_t limit = room > 0 ? ((uint64_t)room < max ? (size_t)room : max) : 0;

	for (size_t k = 0; k < 2 && *n_promote < limit; k++)
		for (size_t i = 0; i < n && *n_promote < limit; i++)
			if (known(node[i]) && slow[node[i]] && mtp_bucket(temp[i]) == 0 &&
			    temp[i] >= band[k] && (k == 0 || temp[i] < band[0]))
				promote[(*n_promote)++] = i;
	/* demote what the promotions (and a deficit below the reserve) need */
	if (room != MTP_ROOM_UNKNOWN) {
		int64_t need = (int64_t)*n_promote - room;

		want = need <= 0 ? 0 : ((uint64_t)need < max ? (size_t)need : max);
	}
	/* bucket 0 in two passes: pages without signal before the warm ones */
	for (size_t i = 0; i < n && *n_demote < want; i++)
		if (known(node[i]) && !slow[node[i]] && temp[i] < MTP_ROOM_MIN_TEMP)
			demote[(*n_demote)++] = i;
	for (unsigned int b = 0; b < h && *n_demote < want; b++)
		for (size_t i = 0; i < n && *n_demote < want; i++)
			if (known(node[i]) && !slow[node[i]] && mtp_bucket(temp[i]) == b &&
			    (b || !(temp[i] < MTP_ROOM_MIN_TEMP)))
				demote[(*n_demote)++] = i;
}
