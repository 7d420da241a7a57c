/* SPDX-License-Identifier: GPL-2.0 */
/* The previous huge-entry rule, as a test baseline; see old_tty_rule.c. */
#ifndef _TIERING_TESTS_OLD_TTY_RULE_H
#define _TIERING_TESTS_OLD_TTY_RULE_H

#include "../tier_abit_plan.h"

#define OLD_TTY_REF_PCT		15
#define OLD_TTY_REF_MIN_NS	250
#define OLD_TTY_REF_MAX_NS	(1ULL << 21)

/* @weight while tty - @floor_ns <= @ref_ns, then (ref / time)^2 of it */
u64 old_tty_weight(u64 weight, u64 tty_ns, u64 floor_ns, u64 ref_ns);
/* the @pct-th percentile, else the young ones' median (sorts @v) */
u64 old_tty_ref_time(u64 *v, u32 n, u32 pct);
/* twice @q_ns beyond @floor_ns, averaged 3:1 with @prev_ns, bounded */
u64 old_tty_ref_ns(u64 prev_ns, u64 q_ns, u64 floor_ns);

#endif
