/* SPDX-License-Identifier: Apache-2.0 */
/*
 * MTP's decision arithmetic (paper sections 5.1, 5.3 and 6), free of any
 * Python or kernel dependency so that it can be unit-tested on its own.
 */
#ifndef MTP_POLICY_H
#define MTP_POLICY_H

#include <stddef.h>
#include <stdint.h>

#define MTP_HISTORY 8		/* refcount changes kept per object */
#define MTP_BUCKETS 10		/* exponential histogram buckets */
#define MTP_FEATURES 4		/* median, std, non-zero count, range */
#define MTP_LIMIT_NONE 0	/* marking depth/size limit: unbounded */
#define MTP_LIMIT_START 10	/* first limit once marking runs long (Fig. 3) */
#define MTP_LIMIT_CAP (1u << 20) /* above this a limit is dropped again */

struct mtp_model {
	double intercept;
	double coef[MTP_FEATURES];
};

/* Features of one object's change history, in the model's order. */
void mtp_features(const uint8_t changes[MTP_HISTORY], double out[MTP_FEATURES]);

/*
 * Predicted hotness of one object; never negative. An all-zero history
 * still gets the intercept: the stock-interpreter signal misses many
 * accesses, and the fit says how many on average (docs/mtp.md).
 */
double mtp_hotness(const struct mtp_model *m, const uint8_t changes[MTP_HISTORY]);

/*
 * What one object adds to its page's temperature: the model without its
 * intercept, never negative. The intercept is the heat the model expects of
 * an object whose refcount never moved (a workload-wide prior); summed per
 * page it would only count objects, ranking dense pages of untouched
 * objects above sparse pages of hot ones.
 */
double mtp_page_heat(const struct mtp_model *m, const uint8_t changes[MTP_HISTORY]);

/* Eq. 1: hotness_i = k * x + (1 - k) * hotness_{i-1}. */
double mtp_cool(double previous, double current, double k);

/* Bucket n holds temperatures in [2^n, 2^(n+1)); bucket 0 also holds [0, 2). */
unsigned int mtp_bucket(double temperature);

/*
 * Section 6: the smallest bucket index h >= 1 at which the FMem pages colder
 * than h (to demote) plus @room (pages FMem can take without demotions)
 * outnumber the SMem pages at h or above (to promote). MTP_BUCKETS when no
 * such h exists: nothing moves. Bucket 0 is never promoted (no signal).
 */
unsigned int mtp_threshold(const uint64_t fast[MTP_BUCKETS],
			   const uint64_t slow[MTP_BUCKETS], uint64_t room);

/*
 * Eq. 3: z-score of @current against the @n previous values; 0 when the
 * history is too short or flat to say anything.
 */
double mtp_zscore(const double *previous, size_t n, double current);

/* Eq. 2: Eager_total = RSS_fast * Eager_llc * Eager_bw. */
double mtp_eagerness(double rss_fast_share, double eager_llc, double eager_bw);

/*
 * The threshold actually used: the most eager threshold @h when eagerness
 * did not fall since the last interval, otherwise one bucket more
 * conservative (fewer promotions and demotions).
 */
unsigned int mtp_adjust_threshold(unsigned int h, double eager, double previous_eager,
				  int have_previous);

/*
 * Fig. 3: marking depth/size limits for the next pass given how long the
 * last pass took against its budget. Unbounded while passes are short; the
 * first long pass sets MTP_LIMIT_START, further long passes halve it (not
 * below 1), passes under half the budget double it until it is dropped.
 */
unsigned int mtp_next_limit(unsigned int limit, double last_seconds, double budget_seconds);

/*
 * Fig. 2: whether a marking pass is worth it, given the cyclic-GC
 * collections since the last pass and how many passes were skipped in a row.
 */
int mtp_should_mark(uint64_t collections_since, unsigned int skipped_in_row,
		    uint64_t min_collections, unsigned int max_skips);

#endif
