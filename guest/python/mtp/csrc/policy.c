// SPDX-License-Identifier: Apache-2.0
/* MTP's decision arithmetic; see policy.h. */
#include <math.h>
#include <string.h>

#include "policy.h"

static void sort_small(double *v, size_t n)
{
	for (size_t i = 1; i < n; i++) {
		double x = v[i];
		size_t j = i;

		while (j > 0 && v[j - 1] > x) {
			v[j] = v[j - 1];
			j--;
		}
		v[j] = x;
	}
}

void mtp_features(const uint8_t changes[MTP_HISTORY], double out[MTP_FEATURES])
{
	double v[MTP_HISTORY], sum = 0, sq = 0, nonzero = 0;

	for (size_t i = 0; i < MTP_HISTORY; i++) {
		v[i] = changes[i];
		sum += v[i];
		nonzero += changes[i] != 0;
	}
	sort_small(v, MTP_HISTORY);
	double mean = sum / MTP_HISTORY;

	for (size_t i = 0; i < MTP_HISTORY; i++)
		sq += (v[i] - mean) * (v[i] - mean);
	out[0] = (v[MTP_HISTORY / 2 - 1] + v[MTP_HISTORY / 2]) / 2;
	out[1] = sqrt(sq / MTP_HISTORY);
	out[2] = nonzero;
	out[3] = v[MTP_HISTORY - 1] - v[0];
}

double mtp_hotness(const struct mtp_model *m, const uint8_t changes[MTP_HISTORY])
{
	double f[MTP_FEATURES], h = m->intercept;

	mtp_features(changes, f);
	for (size_t i = 0; i < MTP_FEATURES; i++)
		h += m->coef[i] * f[i];
	return h > 0 ? h : 0;
}

double mtp_page_heat(const struct mtp_model *m, const uint8_t changes[MTP_HISTORY])
{
	double f[MTP_FEATURES], h = 0;

	mtp_features(changes, f);
	for (size_t i = 0; i < MTP_FEATURES; i++)
		h += m->coef[i] * f[i];
	return h > 0 ? h : 0;
}

double mtp_cool(double previous, double current, double k)
{
	return k * current + (1 - k) * previous;
}

unsigned int mtp_bucket(double temperature)
{
	if (!(temperature >= 2))	/* also catches NaN */
		return 0;
	int e = ilogb(temperature);

	return e >= MTP_BUCKETS - 1 ? MTP_BUCKETS - 1 : (unsigned int)e;
}

unsigned int mtp_threshold(const uint64_t fast[MTP_BUCKETS],
			   const uint64_t slow[MTP_BUCKETS], uint64_t room)
{
	uint64_t cold_fast = room, hot_slow = 0;

	for (size_t i = 1; i < MTP_BUCKETS; i++)
		hot_slow += slow[i];
	for (unsigned int h = 1; h < MTP_BUCKETS; h++) {
		/* pages below h in FMem are cold, pages at h or above in SMem hot */
		cold_fast += fast[h - 1];
		if (cold_fast > hot_slow)
			return h;
		hot_slow -= slow[h];
	}
	return MTP_BUCKETS;
}

double mtp_zscore(const double *previous, size_t n, double current)
{
	double mean = 0, var = 0;

	if (n < 2)
		return 0;
	for (size_t i = 0; i < n; i++)
		mean += previous[i];
	mean /= n;
	for (size_t i = 0; i < n; i++)
		var += (previous[i] - mean) * (previous[i] - mean);
	var /= n;
	if (!(var > 1e-18))
		return 0;
	return (current - mean) / sqrt(var);
}

double mtp_eagerness(double rss_fast_share, double eager_llc, double eager_bw)
{
	return rss_fast_share * eager_llc * eager_bw;
}

unsigned int mtp_adjust_threshold(unsigned int h, double eager, double previous_eager,
				  int have_previous)
{
	if (have_previous && eager < previous_eager && h < MTP_BUCKETS)
		return h + 1;
	return h;
}

unsigned int mtp_next_limit(unsigned int limit, double last_seconds, double budget_seconds)
{
	if (last_seconds > budget_seconds) {
		if (limit == MTP_LIMIT_NONE)
			return MTP_LIMIT_START;
		return limit > 1 ? limit / 2 : 1;
	}
	if (limit != MTP_LIMIT_NONE && last_seconds < budget_seconds / 2)
		return limit >= MTP_LIMIT_CAP / 2 ? MTP_LIMIT_NONE : limit * 2;
	return limit;
}

int mtp_should_mark(uint64_t collections_since, unsigned int skipped_in_row,
		    uint64_t min_collections, unsigned int max_skips)
{
	if (collections_since >= min_collections)
		return 1;
	/* moderate GC activity for several passes in a row: mark anyway */
	return collections_since > 0 && skipped_in_row >= max_skips;
}
