// SPDX-License-Identifier: GPL-2.0
/*
 * The rule tiering.ko weighed huge samples by until the censored rate
 * (tier_abit_rate.c): each measurement on its own, by its time beyond the
 * cycle's fastest against a reference of about twice the hottest
 * entries' times.  Kept only as the baseline the simulations in
 * test_abit_plan.c compare the module's rule with.
 */
#include "old_tty_rule.h"

u64 old_tty_weight(u64 weight, u64 tty_ns, u64 floor_ns, u64 ref_ns)
{
	u64 d;

	if (tty_ns == TIER_ABIT_TTY_NONE)
		return 0;
	d = tty_ns > floor_ns ? tty_ns - floor_ns : 0;
	if (!ref_ns)
		ref_ns = 1;
	if (d <= ref_ns)
		return weight;
	/* weight <= 2^40 base pages, ref_ns <= 2^21: no overflow */
	return weight * ref_ns / d * ref_ns / d;
}

u64 old_tty_ref_time(u64 *v, u32 n, u32 pct)
{
	u64 q = tier_abit_tty_quantile(v, n, pct);
	u32 young = 0;

	if (q != TIER_ABIT_TTY_NONE)
		return q;
	while (young < n && v[young] != TIER_ABIT_TTY_NONE)
		young++;
	return young ? v[young / 2] : TIER_ABIT_TTY_NONE;
}

u64 old_tty_ref_ns(u64 prev_ns, u64 q_ns, u64 floor_ns)
{
	u64 r;

	if (q_ns == TIER_ABIT_TTY_NONE)
		r = prev_ns;	/* nothing to go by: keep it */
	else
		r = 2 * (q_ns > floor_ns ? q_ns - floor_ns : 0);
	if (prev_ns)
		r = (3 * prev_ns + r) / 4;
	if (r > OLD_TTY_REF_MAX_NS)
		r = OLD_TTY_REF_MAX_NS;
	return r > OLD_TTY_REF_MIN_NS ? r : OLD_TTY_REF_MIN_NS;
}
