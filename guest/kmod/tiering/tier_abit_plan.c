// SPDX-License-Identifier: GPL-2.0
/*
 * Accessed-bit sampling plan and scan back-off; see tier_abit_plan.h.
 */
#include "tier_abit_plan.h"

u32 tier_abit_samples_per_range(u32 nr_ranges, u32 want, u32 cap)
{
	u32 k = want ? want : 1;

	if (nr_ranges && (u64)nr_ranges * k > cap)
		k = cap / nr_ranges;
	return k ? k : 1;
}

u32 tier_abit_range_samples(u64 start, u64 end, u32 k)
{
	u64 pages = end > start ? (end - start) >> HRC_PAGE_SHIFT : 0;

	return pages < k ? (u32)pages : k;
}

u64 tier_abit_sample_weight(u64 start, u64 end, u32 k)
{
	u64 pages = end > start ? (end - start) >> HRC_PAGE_SHIFT : 0;
	u32 n = tier_abit_range_samples(start, end, k);

	return n && pages / n ? pages / n : 1;
}

u32 tier_abit_strata(u64 pages, u64 resident, bool known, u32 k,
		     u32 max_mult)
{
	u64 n = k, mult;

	if (known) {
		if (!resident)
			return 0;
		mult = (pages + resident - 1) / resident;
		if (mult > max_mult)
			mult = max_mult;
		n = (u64)k * (mult ? mult : 1);
	}
	return n < pages ? (u32)n : (u32)pages;
}

u64 tier_abit_present_weight(u64 pages, u32 stored)
{
	return stored && pages / stored ? pages / stored : 1;
}

static u64 tier_xorshift64(u64 *s)
{
	u64 x = *s ? *s : 0x9e3779b97f4a7c15ULL;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	*s = x;
	return x;
}

u64 tier_abit_sample_addr(u64 *rng, u64 start, u64 end, u32 i, u32 k)
{
	u64 pages = end > start ? (end - start) >> HRC_PAGE_SHIFT : 0;
	u64 lo, hi;

	if (!pages || !k)
		return start;
	if (i >= k)
		i = k - 1;
	/* stratum i: pages [pages*i/k, pages*(i+1)/k) */
	lo = pages * i / k;
	hi = pages * (i + 1) / k;
	if (hi <= lo)
		hi = lo + 1;
	return start + ((lo + tier_xorshift64(rng) % (hi - lo)) <<
			HRC_PAGE_SHIFT);
}

bool tier_abit_epoch_stable(u64 prev_hot_bytes, u64 hot_bytes, u64 moved)
{
	u64 d = hot_bytes > prev_hot_bytes ? hot_bytes - prev_hot_bytes :
					     prev_hot_bytes - hot_bytes;

	return !moved && d * 8 <= prev_hot_bytes;
}

u64 tier_abit_changes(u64 moved, u64 reshaped, u32 nr_ranges)
{
	return moved + (reshaped * 4 >= nr_ranges ? reshaped : 0);
}

u32 tier_abit_next_level(u32 level, bool stable, u32 max_level)
{
	if (!stable)
		return 0;
	return level < max_level ? level + 1 : max_level;
}

u64 tier_abit_young_weight(u64 weight, bool young, bool huge, u32 sub_young,
			   u32 nsub)
{
	if (!huge || !nsub)
		return young ? weight : 0;
	if (sub_young > nsub)
		sub_young = nsub;
	return weight * sub_young / nsub;
}

bool tier_abit_same_huge(u64 a, u64 b)
{
	return (a >> TIER_ABIT_HUGE_SHIFT) == (b >> TIER_ABIT_HUGE_SHIFT);
}

u32 tier_abit_huge_batch(u32 window_us, u64 probe_ns)
{
	u64 n = (u64)window_us * 1000 / 2 / (probe_ns ? probe_ns : 1);

	if (n > 0xffffffffULL)
		n = 0xffffffffULL;
	return n ? (u32)n : 1;
}

/* Sift @v[@i] down a max-heap of @n. */
static void tier_heap_down(u64 *v, u32 i, u32 n)
{
	for (;;) {
		u32 c = 2 * i + 1;
		u64 x;

		if (c >= n)
			return;
		if (c + 1 < n && v[c + 1] > v[c])
			c++;
		if (v[i] >= v[c])
			return;
		x = v[i];
		v[i] = v[c];
		v[c] = x;
		i = c;
	}
}

u64 tier_abit_tty_quantile(u64 *v, u32 n, u32 pct)
{
	u32 i;
	u64 x;

	if (!n)
		return TIER_ABIT_TTY_NONE;
	/* heapsort: no recursion, no allocation, n <= a few thousand */
	for (i = n / 2; i-- > 0;)
		tier_heap_down(v, i, n);
	for (i = n - 1; i > 0; i--) {
		x = v[0];
		v[0] = v[i];
		v[i] = x;
		tier_heap_down(v, 0, i);
	}
	i = (u32)((u64)n * (pct < 100 ? pct : 99) / 100);
	return v[i];
}

u64 tier_abit_tty_budget_us(u64 interval_ms, u32 permille)
{
	return interval_ms * permille;
}

u64 tier_abit_tty_tail_us(u32 max_us, u64 budget_us)
{
	return max_us < budget_us / 2 ? max_us : budget_us / 2;
}

u32 tier_abit_tty_batch(u32 nr_leads, u64 budget_us, u64 flush_ns,
			u32 slice_us)
{
	u64 per = flush_ns + (u64)slice_us * 1000;
	u64 nb = budget_us * 1000 / 2 / (per ? per : 1);
	u64 b;

	if (!nb)
		nb = 1;
	b = (nr_leads + nb - 1) / nb;
	return b ? (u32)b : 1;
}

bool tier_abit_tty_flush(u32 mode)
{
	return mode != 0;
}

u32 tier_abit_tty_bucket(u64 tty_ns)
{
	u64 us;
	u32 b = 0;

	if (tty_ns == TIER_ABIT_TTY_NONE)
		return TIER_ABIT_TTY_HIST - 1;
	for (us = tty_ns / 1000; us && b < TIER_ABIT_TTY_HIST - 1; us >>= 1)
		b++;
	return b;
}
