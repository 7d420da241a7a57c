/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Differences between the stock kernels the module builds against
 * (Debian 12: 6.1 LTS and 6.12), in one place.  Only inline helpers and
 * exported symbols of both versions are used.
 */
#ifndef _TIERING_TIER_COMPAT_H
#define _TIERING_TIER_COMPAT_H

#include <linux/version.h>
#include <linux/pgtable.h>

/*
 * pmdp_get_lockless() appeared in 6.2 ("mm: Fix pmd_read_atomic()").  On
 * x86-64 a PMD is one machine word, so the lockless read is a plain
 * READ_ONCE(), which is what 6.1's own gup_fast does.
 */
#if LINUX_VERSION_CODE < KERNEL_VERSION(6, 2, 0)
static inline pmd_t tier_pmdp_get_lockless(pmd_t *pmdp)
{
	return READ_ONCE(*pmdp);
}
#else
#define tier_pmdp_get_lockless(pmdp)	pmdp_get_lockless(pmdp)
#endif

/*
 * PG_young (folio_set_young()) exists with CONFIG_PAGE_IDLE_FLAG: Debian
 * 6.12 (DAMON built in) has it, Debian 6.1 does not.  Without it a
 * cleared accessed bit cannot be handed to reclaim (tier_abit.c).
 */
#define TIER_HAVE_PG_YOUNG	IS_ENABLED(CONFIG_PAGE_IDLE_FLAG)

#endif /* _TIERING_TIER_COMPAT_H */
