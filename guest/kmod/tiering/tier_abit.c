// SPDX-License-Identifier: GPL-2.0
/*
 * Accessed-bit sampling source: works on any x86 CPU (no PMU needed).
 *
 * Stock 6.12 does not export walk_page_range(), ptep_test_and_clear_young()
 * or flush_tlb_mm_range() to modules, so the walk is done the way the
 * kernel's own lockless GUP (gup_fast) does it, with inline helpers only:
 *
 *  - The mm is pinned with get_task_mm() (mm_users > 0), so its page
 *    tables are not torn down by exit_mmap() while we look.
 *  - The walker runs with the target's mm loaded (kthread_use_mm(), done
 *    by the caller), exactly like gup_fast walking current->mm: that puts
 *    this CPU in mm_cpumask(mm), so the TLB shootdown that precedes the
 *    freeing of a page-table page (munmap, MADV_DONTNEED of a whole PMD)
 *    must interrupt us.  On bare-metal x86 (native pv_ops) page tables
 *    are freed right after that shootdown, not after an RCU grace
 *    period, and the shootdown only goes to the CPUs in mm_cpumask(mm):
 *    walking a foreign mm without loading it read (and cmpxchg'd!) freed
 *    and reused page-table pages after a munmap.
 *  - Each PMD's worth of entries (<= 512 PTEs) is walked with interrupts
 *    disabled, reading every level once with READ_ONCE (the *_lockless
 *    offset helpers).  A page-table page is freed only after a shootdown
 *    IPI to this CPU or an RCU grace period (MMU_GATHER_RCU_TABLE_FREE,
 *    pte_free_defer), and both wait for the interrupts-off section, so
 *    the table we read cannot be freed and reused under us.
 *  - An accessed bit is cleared with cmpxchg on the whole entry, and
 *    only if the entry is still the present, young entry we read.  If
 *    the kernel changed it meanwhile (zap, migration entry, protection
 *    change) the cmpxchg fails and we leave it alone; we never write a
 *    non-present (swap/migration) entry.  A concurrent plain store by
 *    the kernel under the PTL at worst re-sets the bit: this is exactly
 *    the race the hardware's own atomic A/D updates already have.
 *  - TLB: no flush (as DAMON: ptep_test_and_clear_young() without one).
 *    On x86 a cleared accessed bit with a stale TLB entry is harmless
 *    (ptep_clear_flush_young() skips the flush on x86 for this reason);
 *    a translation that stays cached is not seen young again until the
 *    TLB drops it, which for a working set larger than the TLB's reach
 *    (the sets worth tiering) happens within microseconds.  A flush on
 *    every CPU per scan cost the workload most of its throughput under
 *    shadow paging (Demeter section 2.3 argues the same for EPT).  A
 *    TLB that outlives the window (QEMU TCG's software TLB, with no VM
 *    exit to empty it) hides every access, though: the default
 *    abit_tlb_flush=2 flushes the CPUs that ran the target (mm_cpumask)
 *    only after a cycle whose samples showed no young page at all; 1
 *    flushes after every arming, 0 never.
 *  - Only a sample of pages is cleared and checked each cycle
 *    (tier_abit_arm(), tier_abit_check(); tier_abit_plan.h says why); the
 *    full walk (tier_abit_pass()) only reads, for the residency counts.
 *  - The mmap lock is not taken, so the target's page faults are never
 *    delayed by the scanner.
 */
#include <linux/delay.h>
#include <linux/ktime.h>
#include <linux/mm.h>
#include <linux/pgtable.h>
#include <linux/sched.h>
#include <linux/irqflags.h>
#include <linux/smp.h>
#include <linux/page_idle.h>
#include <linux/numa.h>
#include <asm/tlbflush.h>
#include "tier.h"
#include "tier_compat.h"
#include "tier_abit_plan.h"

static void tier_abit_flush_cpu(void *unused)
{
	__flush_tlb_all();
}

/* Flush the TLBs of the CPUs that ran @mm (mm_cpumask), by IPI. */
void tier_abit_flush(struct mm_struct *mm)
{
	on_each_cpu_mask(mm_cpumask(mm), tier_abit_flush_cpu, NULL, true);
}

/* What one pass counts; all in base pages (a THP counts 512). */
struct tier_abit_count {
	u64 young[2];		/* per half of the range */
	u64 present;		/* this range */
	u64 fast;		/* of @present, on the fast node */
};

/*
 * Tell reclaim what the cleared bit said, as DAMON does (mm/damon/
 * ops-common.c, damon_ptep_mkold()): folio_referenced() counts PG_young
 * like a young PTE.  PG_young exists only with CONFIG_PAGE_IDLE_FLAG
 * (Debian 6.12: yes, 6.1: no; there only a cycle's sampled pages lose
 * their bit, and an access in the window sets it again for reclaim to
 * see: tier_abit_check() only reads).  The reference keeps a
 * concurrently freed folio from being flagged; we run with interrupts
 * off, as gup_fast does.
 */
static void tier_mark_young(unsigned long pfn)
{
#if TIER_HAVE_PG_YOUNG
	struct folio *folio;

	if (!pfn_valid(pfn))
		return;
	folio = page_folio(pfn_to_page(pfn));
	/* already marked (reclaim clears it when it looks): a read only */
	if (folio_test_young(folio) || !folio_try_get(folio))
		return;
	folio_set_young(folio);
	folio_put(folio);
#endif
}

/* Clear the accessed bit of an entry still equal to @old (present, young). */
static bool tier_clear_young(unsigned long *entry, unsigned long old,
			     unsigned long pfn)
{
	if (cmpxchg(entry, old, old & ~_PAGE_ACCESSED) != old)
		return false;
	tier_mark_young(pfn);
	return true;
}

/*
 * Is @pfn on the fast node?  A compare against the node's PFN span when
 * no other node's span overlaps it (tier_core.c checks at load and at
 * each memory hotplug; usually so in a VM): reading every mapped page's struct page for its node made
 * the walk several times slower (measured under TCG).
 */
static bool tier_on_fast(unsigned long pfn, const struct tier_pfn_span *f)
{
	if (f->nid == NUMA_NO_NODE)
		return false;
	if (READ_ONCE(f->exact)) {
		smp_rmb();	/* the span written before exact was set */
		return pfn >= READ_ONCE(f->start) && pfn < READ_ONCE(f->end);
	}
	return pfn_valid(pfn) && page_to_nid(pfn_to_page(pfn)) == f->nid;
}

/* One PMD's worth (or a whole empty upper-level entry); returns next addr. */
static unsigned long tier_abit_chunk(struct mm_struct *mm, unsigned long addr,
				     unsigned long end, bool clear,
				     const struct tier_pfn_span *fast, u64 *young,
				     struct tier_abit_count *n)
{
	unsigned long flags, next;
	pgd_t *pgdp, pgd;
	p4d_t *p4dp, p4d;
	pud_t *pudp, pud;
	pmd_t *pmdp, pmd;
	pte_t *ptep, pte;

	local_irq_save(flags);
	pgdp = pgd_offset(mm, addr);
	pgd = READ_ONCE(*pgdp);
	if (pgd_none(pgd) || pgd_bad(pgd)) {
		next = pgd_addr_end(addr, end);
		goto out;
	}
	p4dp = p4d_offset_lockless(pgdp, pgd, addr);
	p4d = READ_ONCE(*p4dp);
	if (p4d_none(p4d) || p4d_bad(p4d)) {
		next = p4d_addr_end(addr, end);
		goto out;
	}
	pudp = pud_offset_lockless(p4dp, p4d, addr);
	pud = READ_ONCE(*pudp);
	if (pud_none(pud) || !pud_present(pud) || pud_leaf(pud) ||
	    pud_bad(pud)) {
		next = pud_addr_end(addr, end);
		goto out;
	}
	pmdp = pmd_offset_lockless(pudp, pud, addr);
	pmd = tier_pmdp_get_lockless(pmdp);
	next = pmd_addr_end(addr, end);
	if (pmd_none(pmd) || !pmd_present(pmd))
		goto out;
	if (pmd_leaf(pmd)) {
		/*
		 * A transparent huge page: one bit for 512 base pages, counted
		 * as 512 so that ranking and capacity, which count base pages,
		 * see the same density as for 512 small pages.  The walk is
		 * bounded by the range, so only the part inside counts.
		 */
		u64 nr = (next - addr) >> PAGE_SHIFT;

		n->present += nr;
		if (tier_on_fast(pmd_pfn(pmd), fast))
			n->fast += nr;
		if (pmd_young(pmd) &&
		    (!clear || tier_clear_young((unsigned long *)pmdp,
						pmd_val(pmd), pmd_pfn(pmd))))
			*young += nr;
		goto out;
	}
	if (pmd_bad(pmd))
		goto out;
	ptep = pte_offset_kernel(&pmd, addr);
	for (; addr < next; addr += PAGE_SIZE, ptep++) {
		pte = ptep_get(ptep);
		if (!pte_present(pte))
			continue;
		n->present++;
		if (tier_on_fast(pte_pfn(pte), fast))
			n->fast++;
		if (pte_young(pte) &&
		    (!clear || tier_clear_young((unsigned long *)ptep,
						pte_val(pte), pte_pfn(pte))))
			(*young)++;
	}
out:
	local_irq_restore(flags);
	return next;
}

/**
 * tier_abit_pass() - test (and clear) the accessed bits over all ranges.
 * @t:		target (tier_lock held; its ranges do not change meanwhile).
 * @mm:		the target's mm, pinned and loaded (kthread_use_mm()) by the
 *		caller; see the comment at the top for why it must be loaded.
 * @record:	count young pages into the classifier.
 * @clear:	clear the bits seen young (see tier_abit_step() for when).
 * @fast:	the fast node's PFN span, for the per-range FMem residency.
 * @present:	out: present base pages seen.
 *
 * Every pass also records each range's resident and fast-node base pages
 * (hrc_set_resident()): the hot set is sized by them, and the agent skips
 * ranges with nothing to move.
 *
 * Return: young base pages seen.
 */
u64 tier_abit_pass(struct tier_target *t, struct mm_struct *mm, bool record,
		   bool clear, const struct tier_pfn_span *fast, u64 *present)
{
	struct hrc *c = &t->hrc;
	u64 total = 0, pres = 0;
	u32 i;

	if (WARN_ON_ONCE(current->mm != mm))
		return 0;
	for (i = 0; i < c->nr; i++) {
		unsigned long start = c->ranges[i].start;
		unsigned long end = c->ranges[i].end;
		/* where a split would cut (see hrc_halves_differ) */
		unsigned long mid = start + (((end - start) / 2) &
					     ~(c->p.granularity - 1));
		unsigned long addr = start;
		struct tier_abit_count n = { };

		/*
		 * Young pages are recorded per half (at the range's start and
		 * at its midpoint): one hrc_record_n() per half instead of one
		 * per page, and the classifier still sees how they spread.
		 */
		while (addr < end) {
			unsigned long stop = addr < mid ? mid : end;

			addr = tier_abit_chunk(mm, addr, stop, clear, fast,
					       &n.young[addr >= mid], &n);
			cond_resched();
		}
		if (record && n.young[0])
			hrc_record_n(c, start, n.young[0]);
		if (record && n.young[1])
			hrc_record_n(c, mid, n.young[1]);
		hrc_set_resident(c, i, n.present, n.fast);
		total += n.young[0] + n.young[1];
		pres += n.present;
	}
	*present = pres;
	return total;
}

/* What tier_abit_probe_entry() found at one address. */
struct tier_abit_entry {
	bool present, young, on_fast;
	bool huge;		/* a PMD-mapped huge page */
};

/*
 * One address: present / young / on the fast node / huge; clears the
 * accessed bit of a base entry if @clear, of a huge one if @clear_huge
 * (and hands it to reclaim).  Same rules as tier_abit_chunk(), for one
 * entry.
 */
static void tier_abit_probe_entry(struct mm_struct *mm, unsigned long addr,
				  bool clear, bool clear_huge,
				  const struct tier_pfn_span *fast,
				  struct tier_abit_entry *e)
{
	unsigned long flags;
	pgd_t *pgdp, pgd;
	p4d_t *p4dp, p4d;
	pud_t *pudp, pud;
	pmd_t *pmdp, pmd;
	pte_t *ptep, pte;

	e->present = false;
	e->young = false;
	e->on_fast = false;
	e->huge = false;
	local_irq_save(flags);
	pgdp = pgd_offset(mm, addr);
	pgd = READ_ONCE(*pgdp);
	if (pgd_none(pgd) || pgd_bad(pgd))
		goto out;
	p4dp = p4d_offset_lockless(pgdp, pgd, addr);
	p4d = READ_ONCE(*p4dp);
	if (p4d_none(p4d) || p4d_bad(p4d))
		goto out;
	pudp = pud_offset_lockless(p4dp, p4d, addr);
	pud = READ_ONCE(*pudp);
	if (pud_none(pud) || !pud_present(pud) || pud_leaf(pud) ||
	    pud_bad(pud))
		goto out;
	pmdp = pmd_offset_lockless(pudp, pud, addr);
	pmd = tier_pmdp_get_lockless(pmdp);
	if (pmd_none(pmd) || !pmd_present(pmd))
		goto out;
	if (pmd_leaf(pmd)) {
		e->present = true;
		e->huge = true;
		e->on_fast = tier_on_fast(pmd_pfn(pmd), fast);
		e->young = pmd_young(pmd) &&
			   (!clear_huge ||
			    tier_clear_young((unsigned long *)pmdp,
					     pmd_val(pmd), pmd_pfn(pmd)));
		goto out;
	}
	if (pmd_bad(pmd))
		goto out;
	ptep = pte_offset_kernel(&pmd, addr);
	pte = ptep_get(ptep);
	if (!pte_present(pte))
		goto out;
	e->present = true;
	e->on_fast = tier_on_fast(pte_pfn(pte), fast);
	e->young = pte_young(pte) &&
		   (!clear || tier_clear_young((unsigned long *)ptep,
					       pte_val(pte), pte_pfn(pte)));
out:
	local_irq_restore(flags);
}

/*
 * Time-to-young of huge entries (tier_abit_plan.h): the state of one
 * arming.  Each huge entry sampled (its first sample, the lead) is
 * cleared once; the clears are batched, and a batch's clocks start when
 * the TLB flush that follows it has completed on every CPU that ran the
 * target (without it a cached translation never sets the bit again);
 * each lead is then polled with plain reads until young, gone, or past
 * the bound: for a short spin right after its batch, then between later
 * clears, and in a bounded tail after the last one.
 */
struct tier_tty {
	struct tier_target *t;
	struct mm_struct *mm;
	bool on;		/* time-to-young this arming */
	bool flush;		/* flush after each batch of clears */
	u32 npend;		/* leads in t->abit_pend[] */
	u32 bstart;		/* first of the open batch (no clock yet) */
	u32 batch;		/* clears per batch when flushing */
	u32 slice_us;		/* spin after a batch */
	u32 leads, young, in_slice, ndone;
	int prev;		/* the last huge lead (index), or -1 */
	u64 max_ns, pass_ns, spin_left_ns, tail_ns, last_pass_ns;
	u64 clear_ns, clears;	/* cost of the writes that cleared a bit */
	u64 floor_ns;		/* fastest time-to-young seen */
	u64 poll_ns;		/* time spent reading (spins, passes) */
};

/* Done with lead @sp: time-to-young @tty (or TIER_ABIT_TTY_NONE). */
static void tier_tty_done(struct tier_tty *tt, struct tier_abit_sample *sp,
			  u64 tty)
{
	sp->tty_done = true;
	sp->tty_ns = tty;
	tt->t->abit_ttys[tt->ndone++] = tty;
	tt->t->huge_tty_hist[tier_abit_tty_bucket(tty)]++;
	if (tty == TIER_ABIT_TTY_NONE)
		return;
	tt->young++;
	/*
	 * The fastest entry, early ones included: what every entry paid.
	 * Not the fastest timed one alone: when the hot entries are all
	 * early, that is a cold entry (1.6 ms in a GUPS -r 10 THP run), and
	 * taking it off made every other timed entry look hot.
	 */
	if (tty < tt->floor_ns)
		tt->floor_ns = tty;
}

/* Read lead @sp once (no write); true when its time-to-young is known. */
static bool tier_tty_poll(struct tier_tty *tt, struct tier_abit_sample *sp,
			  u64 now)
{
	struct tier_abit_entry e;

	if (sp->tty_done)
		return true;
	if (!sp->t_clear)
		return false;		/* its batch is not flushed yet */
	tier_abit_probe_entry(tt->mm, sp->addr, false, false, &tier_fast_span,
			      &e);
	if (!e.present) {
		tier_tty_done(tt, sp, TIER_ABIT_TTY_NONE);
	} else if (e.young) {
		/* touched during the flush, or before this read at least */
		sp->early = !sp->polled;
		tier_tty_done(tt, sp,
			      now > sp->t_clear ? now - sp->t_clear : 0);
	} else if (now - sp->t_clear >= tt->max_ns) {
		tier_tty_done(tt, sp, TIER_ABIT_TTY_NONE);
	}
	sp->polled = true;
	return sp->tty_done;
}

/* One read of every lead still pending; drops the known ones. */
static void tier_tty_pass(struct tier_tty *tt)
{
	u16 *pend = tt->t->abit_pend;
	u64 now = ktime_get_ns();
	u32 i, j;

	for (i = 0, j = 0; i < tt->npend; i++) {
		struct tier_abit_sample *sp = &tt->t->abit_samp[pend[i]];

		/* the open batch (bstart..) is kept in place */
		if (!tier_tty_poll(tt, sp, now) || i >= tt->bstart)
			pend[j++] = pend[i];
	}
	tt->bstart -= min(tt->bstart, tt->npend - j);
	tt->npend = j;
	tt->last_pass_ns = now;
	tt->poll_ns += ktime_get_ns() - now;
}

/*
 * Close the open batch: flush the target's CPUs (tier_abit_tty_flush()
 * says why), start the batch's clocks when the flush is done, and spin on
 * its leads for up to a slice (within the budget), so that entries
 * touched within microseconds are told apart however slow the next
 * clear is.
 */
static void tier_tty_start(struct tier_tty *tt)
{
	struct tier_target *t = tt->t;
	u64 now, end, spent, d = 0;
	u32 i, left;

	if (tt->bstart >= tt->npend)
		return;
	if (tt->flush) {
		u64 t0 = ktime_get_ns();

		/* returns once every CPU that ran the target has flushed */
		tier_abit_flush(tt->mm);
		d = ktime_get_ns() - t0;
		t->huge_flush_ns = (3 * t->huge_flush_ns + d) / 4;
		tt->spin_left_ns -= min(tt->spin_left_ns, d);
		tt->poll_ns += d;
		t->nr_flushes++;
		t->nr_huge_flushes++;
	}
	now = ktime_get_ns();
	for (i = tt->bstart; i < tt->npend; i++) {
		t->abit_samp[t->abit_pend[i]].t_clear = now;
		t->abit_samp[t->abit_pend[i]].flush_ns = d;
	}
	end = now + min_t(u64, (u64)tt->slice_us * NSEC_PER_USEC,
			  tt->spin_left_ns);
	for (left = tt->npend - tt->bstart; left && now < end;) {
		u64 t1 = ktime_get_ns();

		for (i = tt->bstart, left = 0; i < tt->npend; i++) {
			struct tier_abit_sample *sp =
				&t->abit_samp[t->abit_pend[i]];

			if (sp->tty_done)
				continue;
			if (!tier_tty_poll(tt, sp, t1))
				left++;
			else if (sp->tty_ns != TIER_ABIT_TTY_NONE)
				tt->in_slice++;
		}
		now = ktime_get_ns();
	}
	spent = now - t->abit_samp[t->abit_pend[tt->bstart]].t_clear;
	tt->spin_left_ns -= min(tt->spin_left_ns, spent);
	tt->poll_ns += spent;
	tt->bstart = tt->npend;
}

static void tier_tty_begin(struct tier_tty *tt, struct tier_target *t,
			   struct mm_struct *mm, u64 interval_ms)
{
	u32 max_us = READ_ONCE(tier_abit_huge_tty_us);
	u64 budget;

	memset(tt, 0, sizeof(*tt));
	tt->t = t;
	tt->mm = mm;
	tt->prev = -1;
	tt->on = max_us && !READ_ONCE(tier_abit_huge_subwindows);
	if (!tt->on)
		return;
	budget = READ_ONCE(tier_abit_huge_budget_permille);
	budget = tier_abit_tty_budget_us(interval_ms, budget);
	tt->max_ns = (u64)max_us * NSEC_PER_USEC;
	tt->slice_us = min_t(u32, t->huge_slice_us, TIER_ABIT_TTY_SLICE_MAX_US);
	/* between clears, the pending leads are read every quarter slice */
	tt->pass_ns = max_t(u64, (u64)tt->slice_us * NSEC_PER_USEC / 4,
			    NSEC_PER_USEC);
	tt->spin_left_ns = budget / 2 * NSEC_PER_USEC;
	tt->tail_ns = tier_abit_tty_tail_us(max_us, budget) * NSEC_PER_USEC;
	tt->flush = tier_abit_tty_flush(READ_ONCE(tier_abit_tlb_flush));
	/* before the first cycle the number of entries is a guess */
	tt->batch = tt->flush ?
		    tier_abit_tty_batch(t->abit_huge ? t->abit_huge :
					TIER_ABIT_TTY_LEADS_GUESS, budget,
					t->huge_flush_ns, tt->slice_us) : 1;
	tt->floor_ns = TIER_ABIT_TTY_NONE;
}

/*
 * Sample @n at @a was just probed (@e) with its huge bit cleared if
 * @cleared: a new lead joins the batch, a sample in the last lead's
 * entry follows it.
 */
static void tier_tty_add(struct tier_tty *tt, u32 n,
			 const struct tier_abit_entry *e, bool cleared,
			 u64 write_ns)
{
	struct tier_abit_sample *sp = &tt->t->abit_samp[n];

	if (!e->huge)
		return;
	sp->tty = true;
	if (!cleared) {
		sp->lead_idx = tt->prev;
		return;
	}
	sp->lead = true;
	sp->lead_idx = n;
	sp->t_clear = 0;
	sp->flush_ns = 0;
	sp->polled = false;
	sp->early = false;
	sp->tty_done = false;
	sp->tty_ns = TIER_ABIT_TTY_NONE;
	tt->prev = n;
	tt->leads++;
	tt->t->abit_pend[tt->npend++] = n;
	if (e->young) {		/* the bit was set: a write happened */
		tt->clear_ns += write_ns;
		tt->clears++;
	}
	if (tt->npend - tt->bstart >= tt->batch)
		tier_tty_start(tt);
}

/* Between clears: read the pending leads once per reference time. */
static void tier_tty_between(struct tier_tty *tt)
{
	if (!tt->bstart)	/* no clock started */
		return;
	if (ktime_get_ns() - tt->last_pass_ns >= tt->pass_ns)
		tier_tty_pass(tt);
}

/* After the last clear: the tail, then the cycle's figures. */
static void tier_tty_end(struct tier_tty *tt)
{
	struct tier_target *t = tt->t;
	u64 end;
	u32 i;

	if (!tt->on || !tt->leads)
		return;
	tier_tty_start(tt);
	end = ktime_get_ns() + tt->tail_ns;
	while (tt->npend && ktime_get_ns() < end) {
		tier_tty_pass(tt);
		if (need_resched())
			cond_resched();
	}
	/* past the tail: not seen young */
	for (i = 0; i < tt->npend; i++)
		tier_tty_done(tt, &t->abit_samp[t->abit_pend[i]],
			      TIER_ABIT_TTY_NONE);
	tt->npend = 0;
	if (tt->clears)
		t->huge_probe_ns = max_t(u64, div64_u64(tt->clear_ns,
							tt->clears), 1);
	t->abit_huge = tt->leads;
	t->abit_huge_young = tt->young;
	t->abit_huge_in_slice = tt->in_slice;
	t->huge_tty_floor_ns = tt->floor_ns == TIER_ABIT_TTY_NONE ? 0 :
			       tt->floor_ns;
	/* keep 2-15 % of the leads young within the spin: the hot ones */
	t->huge_slice_us = tier_abit_next_window(t->huge_slice_us, tt->in_slice,
						 tt->leads,
						 READ_ONCE(tier_abit_young_lo_pct),
						 READ_ONCE(tier_abit_young_hi_pct),
						 TIER_ABIT_TTY_SLICE_MIN_US,
						 TIER_ABIT_TTY_SLICE_MAX_US);
	t->nr_huge_checks++;
	t->huge_ns += tt->poll_ns;
}

/**
 * tier_abit_arm() - pick this cycle's sample pages and clear their bits.
 * @t:		target (tier_lock held).
 * @mm:		its mm, pinned and loaded by the caller.
 * @per_range:	samples wanted per range.
 * @interval_ms: the scan interval (backed off), for the polling budget.
 *
 * Each range is cut into equal strata (more where little of it is
 * resident: tier_abit_strata()) and one address is drawn in each, up to
 * TIER_ABIT_TRIES times until it is present: about @per_range present
 * pages per range, each standing for resident / stored pages.  Only the
 * present ones are kept (with their weight), so that tier_abit_check()
 * reads the same entries even if the classifier splits or merges ranges
 * in between.  A range with nothing resident is skipped.
 *
 * Huge entries (abit_huge_tty_us > 0, sub-windows off): each is cleared
 * once, by its first sample, and timed until it is young again (struct
 * tier_tty); later samples in the same entry only read it.  With no huge
 * entry (THP off) none of this runs.
 */
void tier_abit_arm(struct tier_target *t, struct mm_struct *mm, u32 per_range,
		   u64 interval_ms)
{
	struct hrc *c = &t->hrc;
	u32 k = tier_abit_samples_per_range(c->nr, per_range, t->abit_cap);
	u32 i, j, n = 0;
	struct tier_tty tt;

	if (WARN_ON_ONCE(current->mm != mm))
		return;
	tier_tty_begin(&tt, t, mm, interval_ms);
	for (i = 0; i < c->nr && n < t->abit_cap; i++) {
		const struct hrc_range *r = &c->ranges[i];
		u64 s = r->start, e = r->end, pages = (e - s) >> PAGE_SHIFT;
		u32 m = tier_abit_strata(pages, r->nr_resident,
					 c->resident_known, k,
					 TIER_ABIT_MAX_STRATA_MULT);
		u32 first = n, tries;
		u64 w;

		for (j = 0; j < m && n < t->abit_cap; j++) {
			for (tries = 0; tries < TIER_ABIT_TRIES; tries++) {
				u64 a = tier_abit_sample_addr(&t->abit_rng, s,
							      e, j, m);
				struct tier_abit_entry en;
				/* one clear per huge entry when timing them */
				bool ch = !tt.on || tt.prev < 0 ||
					  !tier_abit_same_huge(
						t->abit_samp[tt.prev].addr, a);
				u64 t1 = tt.on ? ktime_get_ns() : 0;

				/* arming clears base and huge entries alike */
				tier_abit_probe_entry(mm, a, true, ch,
						      &tier_fast_span, &en);
				t->abit_samp[n].addr = a;
				t->abit_samp[n].tty = false;
				t->abit_samp[n].lead = false;
				if (tt.on) {
					t1 = ktime_get_ns() - t1;
					if (en.present)
						tier_tty_add(&tt, n, &en, ch,
							     t1);
					tier_tty_between(&tt);
				}
				if (!en.present)
					continue;
				n++;
				break;
			}
		}
		w = tier_abit_present_weight(c->resident_known ?
					     r->nr_resident : pages, n - first);
		for (j = first; j < n; j++)
			t->abit_samp[j].weight = w;
		if (need_resched())
			cond_resched();
	}
	t->abit_nsamp = n;
	tier_tty_end(&tt);
}

/* Record a young sample's @w base pages; returns what the ranges took. */
static u64 tier_abit_record(struct tier_target *t,
			    const struct tier_abit_sample *sp, u64 w)
{
	if (!w)
		return 0;
	/* per-tier access counts for the host (tags 0x800d/0x800e) */
	if (sp->on_fast)
		tier_fmem_samples += w;
	else
		tier_smem_samples += w;
	return hrc_record_n(&t->hrc, sp->addr, w) ? w : 0;
}

/* Arm (@count false) or read and re-arm the lead huge samples [@i, @end). */
static u32 tier_abit_huge_pass(struct tier_target *t, struct mm_struct *mm,
			       u32 i, u32 end, bool count)
{
	struct tier_abit_entry e;
	u32 young = 0;

	for (; i < end; i++) {
		struct tier_abit_sample *sp = &t->abit_samp[i];

		if (!sp->lead)
			continue;
		tier_abit_probe_entry(mm, sp->addr, true, true, &tier_fast_span,
				      &e);
		if (count && e.young) {
			sp->sub_young++;
			young++;
		}
	}
	return young;
}

/*
 * The huge samples' sub-windows (tier_abit_plan.h says why).  Samples are
 * in ascending address order (strata within sorted ranges), so several
 * in one huge entry are adjacent: only the first (the lead) is read, as a
 * second read would find the bit the first just cleared, and the others
 * take its count.  The leads are taken in batches small enough that one
 * pass over a batch is short beside the sub-window (entries are slow to
 * write under shadow paging: the window of an entry is the sleep plus
 * one pass): clear the batch, then @nsub times sleep huge_window_us and
 * read and clear it again, counting per lead the sub-windows in which it
 * was young.  The sub-window adapts like the main window, to keep the
 * huge entries' young fraction informative.
 *
 * Return: estimated young base pages recorded.
 */
static u64 tier_abit_huge_windows(struct tier_target *t, struct mm_struct *mm,
				  u32 nsub)
{
	u32 flush = READ_ONCE(tier_abit_tlb_flush);
	u64 t0 = ktime_get_ns(), leads = 0, sum = 0, est = 0, probe_ns = 0;
	u64 batch = tier_abit_huge_batch(t->huge_window_us, t->huge_probe_ns);
	struct tier_abit_sample *sp, *prev = NULL;
	u32 i, end, s, nl;

	for (i = 0; i < t->abit_nsamp; i++) {
		sp = &t->abit_samp[i];
		sp->lead = sp->huge &&
			   !(prev && tier_abit_same_huge(prev->addr, sp->addr));
		if (sp->huge)
			prev = sp;
	}
	for (i = 0; i < t->abit_nsamp; i = end) {
		u64 t1 = ktime_get_ns();

		for (end = i, nl = 0; end < t->abit_nsamp && nl < batch; end++)
			nl += t->abit_samp[end].lead;
		if (!nl)
			break;
		tier_abit_huge_pass(t, mm, i, end, false);
		probe_ns += ktime_get_ns() - t1;
		leads += nl;
		for (s = 0; s < nsub; s++) {
			/* a TLB entry that outlives the window hides accesses */
			if (flush == TIER_FLUSH_ALWAYS ||
			    (flush == TIER_FLUSH_AUTO && t->abit_huge_none_young)) {
				tier_abit_flush(mm);
				t->nr_flushes++;
			}
			fsleep(t->huge_window_us);
			sum += tier_abit_huge_pass(t, mm, i, end, true);
		}
		if (need_resched())
			cond_resched();
	}
	for (i = 0, prev = NULL; i < t->abit_nsamp; i++) {
		sp = &t->abit_samp[i];
		if (!sp->huge)
			continue;
		if (!sp->lead && prev)
			sp->sub_young = prev->sub_young;
		prev = sp;
		est += tier_abit_record(t, sp,
					tier_abit_young_weight(sp->weight, true,
							       true,
							       sp->sub_young,
							       nsub));
	}
	if (leads)
		t->huge_probe_ns = max_t(u64, div64_u64(probe_ns, leads), 1);
	t->abit_huge = leads;
	t->abit_huge_young = sum;
	t->abit_huge_none_young = leads && !sum;
	t->huge_window_us = tier_abit_next_window(t->huge_window_us, sum,
						  leads * nsub,
						  READ_ONCE(tier_abit_young_lo_pct),
						  READ_ONCE(tier_abit_young_hi_pct),
						  TIER_ABIT_HUGE_MIN_US,
						  TIER_ABIT_HUGE_MAX_US);
	t->nr_huge_checks++;
	t->huge_ns += ktime_get_ns() - t0;
	return est;
}

/*
 * Lead @ld's measurement for its entry's rate (tier_abit_rate.h).  The
 * vCPU that runs the target takes the flush's IPI at some point within
 * it, so an entry is taken to be exposed for half the flush before its
 * clock starts.
 */
static void tier_abit_tty_observe(struct tier_target *t,
				  struct tier_rate_stats *st,
				  const struct tier_abit_sample *ld)
{
	u64 f = ld->flush_ns / 2;

	if (ld->tty_ns == TIER_ABIT_TTY_NONE) {
		tier_rate_observe(st, TIER_RATE_NONE, f,
				  (u64)READ_ONCE(tier_abit_huge_tty_us) *
				  NSEC_PER_USEC);
		t->huge_obs[TIER_RATE_NONE]++;
	} else if (ld->early) {	/* young by its first read: T <= f + that */
		tier_rate_observe(st, TIER_RATE_EARLY, f + ld->tty_ns, 0);
		t->huge_obs[TIER_RATE_EARLY]++;
	} else {	/* beyond what every timed entry paid (a trap to L1) */
		tier_rate_observe(st, TIER_RATE_TIMED, f, ld->tty_ns -
				  min(ld->tty_ns, t->huge_tty_floor_ns));
		t->huge_obs[TIER_RATE_TIMED]++;
	}
}

/*
 * Record the huge samples timed at arming.  Each lead's measurement
 * joins its entry's history (kept by huge page number across cycles,
 * sorted: samples come in ascending address order, strata within sorted
 * ranges), which gives the entry's maximum-likelihood mean time between
 * touches; a sample counts the fraction tier_rate_frac() gives that time
 * against the hottest entries' (the TIER_RATE_REF_PCT-th percentile of
 * this check's): linear in the entry's rate.  @sp->huge says the entry
 * was still present at the check.
 */
static u64 tier_abit_tty_record(struct tier_target *t)
{
	struct tier_rate_stats *swap, *st, lone;
	u32 i, pos = 0, nout = 0, ntau = 0;
	u64 est = 0, ref;

	for (i = 0; i < t->abit_nsamp; i++) {
		struct tier_abit_sample *sp = &t->abit_samp[i];
		u64 page = sp->addr >> TIER_ABIT_HUGE_SHIFT;

		if (!sp->lead || !sp->tty || !sp->tty_done)
			continue;
		if (nout && t->abit_rcur[nout - 1].page >= page)
			st = NULL;	/* out of order: would unsort */
		else
			st = tier_rate_merge_one(t->abit_rprev,
						 t->abit_nrprev, &pos,
						 t->abit_rcur, &nout,
						 TIER_ABIT_RATE_CAP, page);
		if (!st) {		/* no history: this measurement alone */
			lone = (struct tier_rate_stats){ .page = page };
			st = &lone;
		}
		tier_abit_tty_observe(t, st, sp);
		sp->tau_ns = tier_rate_tau_ns(st);
		sp->rate_n = tier_rate_count(st);
		t->abit_ttys[ntau++] = sp->tau_ns;
	}
	tier_rate_merge_end(t->abit_rprev, t->abit_nrprev, &pos, t->abit_rcur,
			    &nout, TIER_ABIT_RATE_CAP);
	swap = t->abit_rprev;
	t->abit_rprev = t->abit_rcur;
	t->abit_rcur = swap;
	t->abit_nrprev = nout;
	if (!ntau)
		return 0;
	ref = tier_abit_tty_quantile(t->abit_ttys, ntau, TIER_RATE_REF_PCT);
	t->huge_rate_ref_ns = ref;
	/* sorted now: the spread of the entries' mean times, for the stats */
	for (i = 0; i < ARRAY_SIZE(t->huge_tau_q); i++) {
		static const u32 pct[] = { 5, 25, 50, 75, 95 };

		t->huge_tau_q[i] = t->abit_ttys[(u64)ntau * pct[i] / 100];
	}
	for (i = 0; i < t->abit_nsamp; i++) {
		struct tier_abit_sample *sp = &t->abit_samp[i];
		const struct tier_abit_sample *ld;
		u32 frac;

		if (!sp->tty || !sp->huge || sp->lead_idx >= t->abit_nsamp)
			continue;
		ld = &t->abit_samp[sp->lead_idx];
		if (!ld->lead || !ld->tty_done)
			continue;
		frac = tier_rate_frac(ld->tau_ns, ld->rate_n, ref,
				      TIER_ABIT_FRAC_ONE);
		est += tier_abit_record(t, sp, sp->weight * frac /
					       TIER_ABIT_FRAC_ONE);
	}
	return est;
}

/**
 * tier_abit_check() - read the sample pages' bits and record the young.
 * @t:		target (tier_lock held).
 * @mm:		its mm, pinned and loaded by the caller.
 * @present:	out: base sample pages present.
 * @young:	out: of them, young.
 *
 * Base entries are only read: the bits stay set for reclaim.  Each young
 * one is recorded at its address with its weight (hrc_record_n()).  Huge
 * entries are judged by their time-to-young, measured at arming
 * (tier_abit_tty_record()), or with abit_huge_subwindows > 0 by their
 * young rate over short sub-windows (tier_abit_huge_windows()); either
 * way they are left out of @present and @young, which steer the main
 * window.
 *
 * Return: estimated young base pages (sum of the recorded weights).
 */
u64 tier_abit_check(struct tier_target *t, struct mm_struct *mm,
		    u64 *present, u64 *young)
{
	u32 nsub = READ_ONCE(tier_abit_huge_subwindows);
	u32 i, nhuge = 0, ntty = 0;
	u64 est = 0;

	*present = 0;
	*young = 0;
	if (WARN_ON_ONCE(current->mm != mm))
		return 0;
	for (i = 0; i < t->abit_nsamp; i++) {
		struct tier_abit_sample *sp = &t->abit_samp[i];
		struct tier_abit_entry e;

		tier_abit_probe_entry(mm, sp->addr, false, false,
				      &tier_fast_span, &e);
		sp->on_fast = e.on_fast;
		if (sp->tty) {		/* timed at arming */
			sp->huge = e.present;
			ntty++;
			continue;
		}
		sp->huge = e.present && e.huge && nsub;
		sp->sub_young = 0;
		if (sp->huge) {
			nhuge++;
			continue;
		}
		*present += e.present;
		if (!e.young)
			continue;
		(*young)++;
		est += tier_abit_record(t, sp,
					tier_abit_young_weight(sp->weight, true,
							       e.huge, 0, 0));
		if (need_resched())
			cond_resched();
	}
	t->base_recorded += est;
	if (ntty) {
		u64 h = tier_abit_tty_record(t);

		t->huge_recorded += h;
		est += h;
	}
	if (nhuge)
		est += tier_abit_huge_windows(t, mm, nsub);
	else if (!ntty)
		t->abit_huge = t->abit_huge_young = 0;
	t->abit_nsamp = 0;
	return est;
}
