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

/* Sums the sorted @heat per page in place; returns the number of pages. */
static size_t aggregate(struct mtp_heat *heat, size_t n)
{
	size_t out = 0;

	for (size_t i = 0; i < n; i++) {
		if (out && heat[out - 1].page == heat[i].page)
			heat[out - 1].heat += heat[i].heat;
		else
			heat[out++] = heat[i];
	}
	return out;
}

int mtp_pages_update(struct mtp_pages *t, struct mtp_heat *heat, size_t n, double k,
		     double drop_below)
{
	qsort(heat, n, sizeof(*heat), by_page);
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
			/* no tracked object on this page this round: it cools */
			double c = mtp_cool(t->temp[i], 0, k);

			if (c >= drop_below) {
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
		const uint8_t slow[MTP_MAX_NODES], unsigned int h, size_t max,
		size_t *demote, size_t *n_demote, size_t *promote, size_t *n_promote)
{
	*n_demote = 0;
	*n_promote = 0;
	if (h >= MTP_BUCKETS)
		return;
	for (unsigned int b = 0; b < h && *n_demote < max; b++)
		for (size_t i = 0; i < n && *n_demote < max; i++)
			if (known(node[i]) && !slow[node[i]] && mtp_bucket(temp[i]) == b)
				demote[(*n_demote)++] = i;
	for (unsigned int b = MTP_BUCKETS; b-- > h && *n_promote < max;)
		for (size_t i = 0; i < n && *n_promote < max; i++)
			if (known(node[i]) && slow[node[i]] && mtp_bucket(temp[i]) == b)
				promote[(*n_promote)++] = i;
}
