// SPDX-License-Identifier: GPL-2.0
/*
 * Guest tiered-memory manager: the core (as DAMON's core.c).  Targets
 * and their life cycle, the FMem/SMem choice and capacity, and the
 * worker thread "ktieringd" that serves every target: it runs the
 * sampling source's steps (tier_abit.c, tier_pebs.c: the "ops"), and
 * every t_split it steps the range classifier (decay, split, merge),
 * ranks the ranges and publishes a promotion list (hottest ranges that
 * fit FMem) and a demotion list (the others).  Stock kernels do not
 * export migrate_pages()/folio isolation to modules, so the pages are
 * moved by the user-space agent (guest/agent) with move_pages(2); see
 * README.md.  Also: automatic targets (RSS, cgroup, forked children).
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/kthread.h>
#include <linux/sched.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/sched/task.h>
#include <linux/slab.h>
#include <linux/memory.h>
#include <linux/mm.h>
#include <linux/mmap_lock.h>
#include <linux/mmzone.h>
#include <linux/module.h>
#include <linux/nodemask.h>
#include <linux/ktime.h>
#include <linux/cgroup.h>
#include <linux/random.h>
#include "tier.h"
#include "tier_policy.h"
#include "tier_compat.h"
#include "tier_abit_plan.h"

DEFINE_MUTEX(tier_lock);

/* ---- global state ---- */

struct tier_target *tier_targets[TIER_MAX_TARGETS];
u32 tier_nr_targets;
struct task_struct *tier_worker;
bool tier_kick;
bool tier_exiting;	/* module unload in progress */
struct cgroup *tier_auto_cgrp;	/* auto targets: members of this */
char tier_auto_cgrp_path[TIER_CGRP_PATH_MAX];
int tier_fmem_node = NUMA_NO_NODE, tier_smem_node = NUMA_NO_NODE;
char tier_pebs_why[TIER_PEBS_WHY_MAX];
u64 tier_worker_busy_ns, tier_nr_epochs, tier_nr_scans;
u64 tier_fmem_samples, tier_smem_samples;

/*
 * The FMem node's managed pages above each zone's high watermark, minus
 * what demeter_balloon.ko (if loaded) holds there: the hot sets never
 * plan for memory the host took back or that kswapd would reclaim.
 */
u64 tier_fmem_capacity_pages(void)
{
	unsigned long (*ballooned)(int nid);
	struct tier_zone_pages zp[MAX_NR_ZONES];
	u64 mb = READ_ONCE(tier_fmem_capacity_mb);
	pg_data_t *pgdat;
	u64 held = 0;
	u32 n = 0;
	int z;

	if (mb)
		return mb << (20 - PAGE_SHIFT);
	if (tier_fmem_node == NUMA_NO_NODE)
		return 0;
	pgdat = NODE_DATA(tier_fmem_node);
	for (z = 0; z < MAX_NR_ZONES; z++) {
		struct zone *zone = &pgdat->node_zones[z];

		if (!populated_zone(zone))
			continue;
		zp[n].managed = zone_managed_pages(zone);
		zp[n].high = high_wmark_pages(zone);
		n++;
	}
	ballooned = symbol_get(dmb_node_ballooned_managed_pages);
	if (ballooned) {
		held = ballooned(tier_fmem_node);
		symbol_put(dmb_node_ballooned_managed_pages);
	}
	return tier_fmem_capacity(zp, n, held);
}

struct tier_pfn_span tier_fast_span = { .nid = NUMA_NO_NODE };

/*
 * The FMem node's PFN span, and whether a PFN compare alone is exact.
 * Recomputed when memory goes online or offline (virtio-mem grows and
 * shrinks a tier): a block plugged into FMem above its boot span was
 * otherwise counted as SMem.  Walks read the span without a lock, so
 * @exact drops first and rises last: a walk that sees it set finds a
 * span that is whole, else it asks each page's node (tier_on_fast()).
 */
static void tier_fast_span_update(void)
{
	struct tier_pfn_span *f = &tier_fast_span;
	unsigned long start, end;
	bool exact = true;
	int nid;

	f->nid = tier_fmem_node;
	if (f->nid == NUMA_NO_NODE)
		return;
	WRITE_ONCE(f->exact, false);
	smp_wmb();
	start = node_start_pfn(f->nid);
	end = node_end_pfn(f->nid);
	for_each_node_state(nid, N_MEMORY)
		if (nid != f->nid && node_start_pfn(nid) < end &&
		    node_end_pfn(nid) > start)
			exact = false;
	WRITE_ONCE(f->start, start);
	WRITE_ONCE(f->end, end);
	smp_wmb();
	WRITE_ONCE(f->exact, exact);
}

static int tier_memory_event(struct notifier_block *nb, unsigned long action,
			     void *arg)
{
	if (action == MEM_ONLINE || action == MEM_OFFLINE)
		tier_fast_span_update();
	return NOTIFY_OK;
}

static struct notifier_block tier_memory_nb = {
	.notifier_call = tier_memory_event,
};

int tier_memory_watch(void)
{
	return register_memory_notifier(&tier_memory_nb);
}

void tier_memory_unwatch(void)
{
	unregister_memory_notifier(&tier_memory_nb);
}

/* FMem / SMem: the rule demeter_balloon uses too (tier_pick_nodes()). */
int tier_detect_nodes(void)
{
	struct tier_node_info *nodes;
	u32 nr = 0;
	int nid;

	nodes = kcalloc(nr_node_ids, sizeof(*nodes), GFP_KERNEL);
	if (!nodes)
		return -ENOMEM;
	for_each_online_node(nid) {
		nodes[nr].nid = nid;
		nodes[nr].has_cpu = node_state(nid, N_CPU);
		nodes[nr].has_mem = node_state(nid, N_MEMORY);
		nr++;
	}
	tier_pick_nodes(nodes, nr, &tier_fmem_node, &tier_smem_node);
	kfree(nodes);
	tier_fast_span_update();
	return 0;
}

static void tier_params(struct hrc_params *p)
{
	hrc_default_params(p);
	p->split_thresh = READ_ONCE(tier_split_thresh);
	p->significance_pct = READ_ONCE(tier_significance_pct);
	p->hot_pct = READ_ONCE(tier_hot_pct);
	p->merge_epochs = READ_ONCE(tier_merge_epochs);
	p->split_period_ms = READ_ONCE(tier_split_period_ms);
	p->half_split = READ_ONCE(tier_half_split);
	p->edge_split = READ_ONCE(tier_edge_split);
	p->nr_cpus = clamp_t(u32, num_online_cpus(), 1, HRC_MAX_CPUS);
}

/* ---- target life cycle (tier_lock held) ---- */

/*
 * Free the classifier storage and forget the context that points into it:
 * sysfs readers walk t->hrc.ranges[0..t->hrc.nr), so the context must
 * never outlive its storage (it did on the start error path).
 */
static void tier_target_free_ranges(struct tier_target *t)
{
	kvfree(t->ranges);
	kvfree(t->order);
	kvfree(t->abit_samp);
	kvfree(t->abit_pend);
	kvfree(t->abit_ttys);
	kvfree(t->abit_rprev);
	kvfree(t->abit_rcur);
	t->ranges = NULL;
	t->order = NULL;
	t->abit_samp = NULL;
	t->abit_pend = NULL;
	t->abit_ttys = NULL;
	t->abit_rprev = NULL;
	t->abit_rcur = NULL;
	t->abit_nrprev = 0;
	t->abit_nsamp = 0;
	t->abit_cap = 0;
	memset(&t->hrc, 0, sizeof(t->hrc));
}

void tier_target_stop(struct tier_target *t, enum tier_state st)
{
	if (t->source == TIER_SRC_PEBS)
		tier_pebs_stop(t);
	t->source = TIER_SRC_NONE;
	t->state = st;
	if (st == TIER_ST_EXITED)
		return;		/* keep ranges and stats for inspection */
	tier_target_free_ranges(t);
	t->nr_promo = 0;
	t->nr_demo = 0;
	t->nr_hot = 0;
	t->hot_bytes = 0;
	put_pid(t->pid);
	t->pid = NULL;
	t->pid_nr = -1;
}

static void tier_target_clear_stats(struct tier_target *t)
{
	t->nr_samples = 0;
	t->nr_scans = 0;
	t->scan_ns = 0;
	t->epoch_ns = 0;
	t->epoch_samples = 0;
	t->last_rate = 0;
	t->reloc_promoted = 0;
	t->reloc_demoted = 0;
	t->reloc_failed = 0;
	t->reloc_rounds = 0;
	t->sel_epoch = 0;
	t->abit_present = 0;
	t->abit_young = 0;
	t->abit_huge = 0;
	t->abit_huge_young = 0;
	t->huge_ns = 0;
	t->nr_huge_checks = 0;
	t->abit_huge_in_slice = 0;
	t->huge_tty_floor_ns = 0;
	t->huge_rate_ref_ns = 0;
	t->nr_huge_flushes = 0;
	memset(t->huge_tty_hist, 0, sizeof(t->huge_tty_hist));
	memset(t->huge_obs, 0, sizeof(t->huge_obs));
	memset(t->huge_tau_q, 0, sizeof(t->huge_tau_q));
	t->base_recorded = 0;
	t->huge_recorded = 0;
	t->arm_ns = 0;
	t->check_ns = 0;
	t->resident_ns = 0;
	t->flush_ns = 0;
	t->nr_resident_walks = 0;
	t->nr_flushes = 0;
	t->nr_stable_epochs = 0;
	tier_user_clear_stats(t);
	memset(&t->hrc.stats, 0, sizeof(t->hrc.stats));
}

int tier_target_start(struct tier_target *t, pid_t nr)
{
	struct hrc_interval iv[2];
	struct task_struct *task;
	struct mm_struct *mm;
	struct hrc_params p;
	struct pid *pid;
	int n, ret, req, i;
	u32 cap = READ_ONCE(tier_max_ranges);

	pid = find_get_pid(nr);
	if (!pid)
		return -ESRCH;
	task = get_pid_task(pid, PIDTYPE_PID);
	if (!task) {
		put_pid(pid);
		return -ESRCH;
	}
	ret = -EINVAL;
	if (task->flags & PF_KTHREAD)
		goto out_task;
	ret = -ESRCH;
	mm = get_task_mm(task);
	if (!mm)
		goto out_task;

	ret = -EBUSY;
	for (i = 0; i < tier_nr_targets; i++) {
		struct tier_target *o = tier_targets[i];

		if (o != t && o->state == TIER_ST_RUNNING && o->pid == pid)
			goto out_mm;
	}

	/* tier_sampler_check() refuses this too; the CPU cannot change */
	ret = -ENODEV;
	if (READ_ONCE(tier_sampler) == TIER_REQ_PEBS && !tier_pebs_ok)
		goto out_mm;

	if (t->state != TIER_ST_IDLE)
		tier_target_stop(t, TIER_ST_IDLE);

	n = hrc_default_layout(mm->start_brk, mm->mmap_base,
			       (u64)totalram_pages() << PAGE_SHIFT, iv);
	ret = n < 0 ? n : -ENOMEM;
	if (n < 0)
		goto out_mm;
	t->ranges = kvcalloc(cap, sizeof(*t->ranges), GFP_KERNEL);
	t->order = kvcalloc(cap, sizeof(*t->order), GFP_KERNEL);
	t->abit_samp = kvcalloc(TIER_ABIT_MAX_SAMPLES, sizeof(*t->abit_samp),
				GFP_KERNEL);
	t->abit_pend = kvcalloc(TIER_ABIT_MAX_SAMPLES, sizeof(*t->abit_pend),
				GFP_KERNEL);
	t->abit_ttys = kvcalloc(TIER_ABIT_MAX_SAMPLES, sizeof(*t->abit_ttys),
				GFP_KERNEL);
	t->abit_rprev = kvcalloc(TIER_ABIT_RATE_CAP, sizeof(*t->abit_rprev),
				 GFP_KERNEL);
	t->abit_rcur = kvcalloc(TIER_ABIT_RATE_CAP, sizeof(*t->abit_rcur),
				GFP_KERNEL);
	if (!t->ranges || !t->order || !t->abit_samp || !t->abit_pend ||
	    !t->abit_ttys || !t->abit_rprev || !t->abit_rcur)
		goto out_free;
	t->abit_cap = TIER_ABIT_MAX_SAMPLES;
	t->abit_nsamp = 0;
	t->abit_nrprev = 0;
	t->abit_rng = get_random_u64() | 1;
	tier_params(&p);
	p.max_ranges = cap;
	ret = hrc_init(&t->hrc, t->ranges, t->order, cap, &p, iv, n);
	if (ret)
		goto out_free;
	t->span_lo = iv[0].start;
	t->span_hi = iv[n - 1].end;

	t->filter.tgid = task->tgid;
	t->filter.lo = t->span_lo;
	t->filter.hi = t->span_hi;
	t->filter.text_start = mm->start_code;
	t->filter.text_end = mm->end_code;
	t->filter.ldlat = 0;	/* the PMU applies the threshold */

	tier_target_clear_stats(t);
	t->auto_added = false;
	t->parent_nr = 0;
	t->fmem_share = 0;
	req = READ_ONCE(tier_sampler);
	t->source = TIER_SRC_ABIT;
	if (req != TIER_REQ_ABIT && tier_pebs_ok) {
		ret = tier_pebs_start(t, task);
		if (!ret)
			t->source = TIER_SRC_PEBS;
		else if (req == TIER_REQ_PEBS)
			goto out_free;
	}
	t->pid = pid;
	t->pid_nr = nr;
	t->last_source = t->source;
	t->state = TIER_ST_RUNNING;
	t->started_ns = ktime_get_ns();
	t->epoch_period_ns = (u64)READ_ONCE(tier_split_period_ms) *
			     NSEC_PER_MSEC;
	t->next_epoch_ns = t->started_ns + t->epoch_period_ns;
	t->next_scan_ns = t->started_ns;
	t->abit_armed = false;
	t->abit_none_young = false;
	t->abit_huge_none_young = false;
	t->window_ms = min(50U, READ_ONCE(tier_scan_interval_ms));
	t->huge_window_us = TIER_ABIT_HUGE_START_US;
	t->huge_probe_ns = TIER_ABIT_HUGE_PROBE_NS;
	t->huge_slice_us = TIER_ABIT_TTY_SLICE_START_US;
	t->huge_flush_ns = TIER_ABIT_TTY_FLUSH_START_NS;
	t->scan_level = 0;
	t->next_resident_ns = t->started_ns;
	t->prev_hot_bytes = 0;
	t->moved_seen = 0;
	t->reshaped_seen = 0;
	mmput(mm);
	put_task_struct(task);
	WRITE_ONCE(tier_kick, true);
	if (tier_worker)
		wake_up_process(tier_worker);
	return 0;

out_free:
	tier_target_free_ranges(t);
	t->source = TIER_SRC_NONE;
out_mm:
	mmput(mm);
out_task:
	put_task_struct(task);
	put_pid(pid);
	return ret;
}

/* ---- the worker ---- */

#define TIER_ABIT_WARMUP_EPOCHS	4

/* The scan interval with the back-off applied (ms). */
static u64 tier_abit_interval_ms(const struct tier_target *t)
{
	return (u64)READ_ONCE(tier_scan_interval_ms) << t->scan_level;
}

/*
 * Residency (read-only walk of every PTE: resident and FMem pages per
 * range, for the hot-set size, the sampling plan and the agent) once per
 * resident_ms, or per scan interval when backed off further.  Reading
 * page tables costs the workload nothing (no write, no flush); it is the
 * worker's CPU, hence the period.
 */
static void tier_abit_resident(struct tier_target *t, struct mm_struct *mm,
			       u64 now)
{
	u64 t0, present = 0;

	if (now < t->next_resident_ns)
		return;
	t0 = ktime_get_ns();
	tier_abit_pass(t, mm, false, false, &tier_fast_span, &present);
	t->resident_ns += ktime_get_ns() - t0;
	t->nr_resident_walks++;
	t->next_resident_ns = now + max_t(u64, READ_ONCE(tier_resident_ms),
					  tier_abit_interval_ms(t)) *
				    NSEC_PER_MSEC;
}

/*
 * One step of the accessed-bit source.  A cycle: arm (pick sample pages,
 * clear their bits), wait window_ms, check (read them, record the young
 * ones), wait for the rest of the interval.  The window adapts so that
 * the young fraction stays informative (tier_abit_next_window()).
 */
static void tier_abit_step(struct tier_target *t, struct mm_struct *mm,
			   u64 now)
{
	u64 ival = tier_abit_interval_ms(t);
	u64 t0 = ktime_get_ns(), t1, young, present = 0, nyoung = 0;
	u32 flush;

	if (!t->abit_armed) {
		tier_abit_resident(t, mm, now);
		t1 = ktime_get_ns();
		tier_abit_arm(t, mm, READ_ONCE(tier_abit_samples), ival);
		t->arm_ns += ktime_get_ns() - t1;
		flush = READ_ONCE(tier_abit_tlb_flush);
		if (flush == TIER_FLUSH_ALWAYS ||
		    (flush == TIER_FLUSH_AUTO && t->abit_none_young)) {
			t1 = ktime_get_ns();
			tier_abit_flush(mm);
			t->flush_ns += ktime_get_ns() - t1;
			t->nr_flushes++;
		}
		t->abit_armed = true;
		t->cycle_start_ns = now;
		t->next_scan_ns = now + (u64)t->window_ms * NSEC_PER_MSEC;
	} else {
		t1 = ktime_get_ns();
		young = tier_abit_check(t, mm, &present, &nyoung);
		t->check_ns += ktime_get_ns() - t1;
		t->nr_samples += young;
		t->epoch_samples += young;
		t->abit_present = present;
		t->abit_young = nyoung;
		t->abit_none_young = present && !nyoung;
		t->nr_scans++;
		tier_nr_scans++;
		t->abit_armed = false;
		t->next_scan_ns = t->cycle_start_ns + ival * NSEC_PER_MSEC;
		if (t->next_scan_ns <= now)
			t->next_scan_ns = now;
		/* the window never exceeds the base interval: contrast */
		t->window_ms = tier_abit_next_window(t->window_ms, nyoung,
						     present,
						     READ_ONCE(tier_abit_young_lo_pct),
						     READ_ONCE(tier_abit_young_hi_pct),
						     min(READ_ONCE(tier_abit_min_window_ms),
							 READ_ONCE(tier_scan_interval_ms)),
						     READ_ONCE(tier_scan_interval_ms));
	}
	t->scan_ns += ktime_get_ns() - t0;
}

/*
 * After an epoch: back off while stable (nothing moved and few ranges
 * split or merged since the last epoch, hot set the same size), back to
 * the base rate on any change.
 */
static void tier_abit_backoff(struct tier_target *t, u64 now)
{
	u64 moved = t->reloc_promoted + t->reloc_demoted;
	u64 reshaped = t->hrc.stats.nr_splits + t->hrc.stats.nr_merges;
	u64 d_reshaped = reshaped - t->reshaped_seen;
	u64 changes = tier_abit_changes(moved - t->moved_seen, d_reshaped,
					t->hrc.nr);
	/* the first epochs only warm the classifier up: no back-off yet */
	bool stable = t->hrc.epoch >= TIER_ABIT_WARMUP_EPOCHS &&
		      tier_abit_epoch_stable(t->prev_hot_bytes, t->hot_bytes,
					     changes);
	u32 lvl = tier_abit_next_level(t->scan_level, stable,
				       READ_ONCE(tier_abit_max_level));

	t->nr_stable_epochs += stable;
	t->moved_seen = moved;
	t->reshaped_seen = reshaped;
	t->prev_hot_bytes = t->hot_bytes;
	if (lvl < t->scan_level) {
		/* a change: scan and measure residency again at once */
		t->next_resident_ns = now;
		if (!t->abit_armed)
			t->next_scan_ns = now;
	}
	t->scan_level = lvl;
}

/*
 * @t's share of the FMem capacity: the hottest ranges of all running
 * targets together fill it (hrc_share), so a target with a small, dense
 * hot set is not starved by one with a large, lukewarm one.
 */
static u64 tier_target_fmem_pages(struct tier_target *t)
{
	static struct hrc *cs[TIER_MAX_TARGETS];	/* tier_lock held */
	u32 n = 0, me = 0, i;

	for (i = 0; i < tier_nr_targets; i++) {
		struct tier_target *o = tier_targets[i];

		if (o->state != TIER_ST_RUNNING || !o->ranges)
			continue;
		if (o == t)
			me = n;
		cs[n++] = &o->hrc;
	}
	return hrc_share(cs, n, me, tier_fmem_capacity_pages());
}

static void tier_epoch(struct tier_target *t, u64 now)
{
	struct hrc_selection sel = {
		.promo = t->promo, .promo_max = TIER_SEL_MAX,
		.demo = t->demo, .demo_max = TIER_SEL_MAX,
	};
	u64 t0 = ktime_get_ns(), period, elapsed;
	struct hrc_params p;

	if (t->source == TIER_SRC_PEBS) {
		u64 n = tier_pebs_drain(t);

		t->nr_samples += n;
		t->epoch_samples += n;
	}
	tier_params(&p);
	p.max_ranges = t->hrc.p.max_ranges;
	p.granularity = t->hrc.p.granularity;
	if (memcmp(&p, &t->hrc.p, sizeof(p)))
		hrc_set_params(&t->hrc, &p);	/* -EBUSY: keep the old */
	hrc_epoch(&t->hrc);
	t->fmem_share = tier_target_fmem_pages(t);
	hrc_select(&t->hrc, t->fmem_share, &sel);
	t->nr_promo = sel.nr_promo;
	t->nr_demo = sel.nr_demo;
	t->nr_hot = sel.nr_hot;
	t->hot_bytes = sel.hot_bytes;
	t->sel_epoch = t->hrc.epoch;

	period = (u64)READ_ONCE(tier_split_period_ms) * NSEC_PER_MSEC;
	elapsed = now - (t->next_epoch_ns - t->epoch_period_ns);
	if (elapsed)
		t->last_rate = div64_u64(t->epoch_samples * NSEC_PER_SEC,
					 elapsed);
	t->epoch_samples = 0;
	if (t->source == TIER_SRC_ABIT) {
		/*
		 * An epoch decays the counts: with scans backed off it must
		 * not outrun them, or hot ranges would fade between scans.
		 */
		tier_abit_backoff(t, now);
		period = max(period, tier_abit_interval_ms(t) * NSEC_PER_MSEC);
	}
	t->epoch_period_ns = period;
	t->next_epoch_ns += period;
	if (t->next_epoch_ns <= now)
		t->next_epoch_ns = now + period;
	t->epoch_ns += ktime_get_ns() - t0;
	tier_nr_epochs++;
}

/*
 * Cover mappings created after the target started (e.g. Go's heap at
 * 0xc000000000, far above the initial heap/mmap layout): every private,
 * writable, anonymous mapping gets ranges.  Never waits for the mmap
 * lock: a busy lock is tried again next epoch.
 */
static void tier_cover_new_vmas(struct tier_target *t, struct mm_struct *mm)
{
	struct vm_area_struct *vma;
	bool grew = false;
	VMA_ITERATOR(vmi, mm, 0);

	if (!mmap_read_trylock(mm))
		return;
	for_each_vma(vmi, vma) {
		if (!vma_is_anonymous(vma) || !(vma->vm_flags & VM_WRITE) ||
		    (vma->vm_flags & (VM_SHARED | VM_GROWSDOWN)))
			continue;
		if (hrc_cover(&t->hrc, vma->vm_start, vma->vm_end) > 0)
			grew = true;
	}
	mmap_read_unlock(mm);
	if (!grew || !t->hrc.nr)
		return;
	t->span_lo = t->hrc.ranges[0].start;
	t->span_hi = t->hrc.ranges[t->hrc.nr - 1].end;
	/* read by the PEBS handler (NMI): single aligned stores */
	WRITE_ONCE(t->filter.lo, t->span_lo);
	WRITE_ONCE(t->filter.hi, t->span_hi);
}

static void tier_target_tick(struct tier_target *t, u64 now, u64 *next)
{
	struct task_struct *task;
	struct mm_struct *mm;

	task = get_pid_task(t->pid, PIDTYPE_PID);
	if (!task) {
		tier_target_stop(t, TIER_ST_EXITED);
		return;
	}
	if (t->source == TIER_SRC_ABIT && now >= t->next_scan_ns) {
		mm = get_task_mm(task);
		if (!mm) {
			put_task_struct(task);
			tier_target_stop(t, TIER_ST_EXITED);
			return;
		}
		/* Load the mm so page-table frees must IPI us (tier_abit.c). */
		kthread_use_mm(mm);
		tier_abit_step(t, mm, now);
		kthread_unuse_mm(mm);
		mmput(mm);
	}
	/*
	 * The user source (samples from the agent, tier_user.c) still needs
	 * the read-only residency walk: hot-set size and the agent's skips.
	 */
	if (t->source == TIER_SRC_USER && now >= t->next_resident_ns) {
		mm = get_task_mm(task);
		if (mm) {
			kthread_use_mm(mm);
			tier_abit_resident(t, mm, now);
			kthread_unuse_mm(mm);
			mmput(mm);
		}
	}
	if (now >= t->next_epoch_ns) {
		mm = get_task_mm(task);
		if (mm) {
			tier_cover_new_vmas(t, mm);
			mmput(mm);
		}
		tier_epoch(t, now);
	}
	put_task_struct(task);
	if (t->source == TIER_SRC_ABIT)
		*next = min(*next, t->next_scan_ns);
	if (t->source == TIER_SRC_USER)
		*next = min(*next, t->next_resident_ns);
	*next = min(*next, t->next_epoch_ns);
}

static void tier_auto_scan(void);
static u64 tier_next_auto_ns;

int tier_worker_fn(void *unused)
{
	while (!kthread_should_stop()) {
		u64 now = ktime_get_ns(), next = now + NSEC_PER_SEC, end;
		u32 i;

		if ((READ_ONCE(tier_auto_rss_mb) || READ_ONCE(tier_auto_cgrp) ||
		     READ_ONCE(tier_follow_children)) &&
		    now >= tier_next_auto_ns) {
			tier_auto_scan();
			tier_next_auto_ns = now + 2 * NSEC_PER_SEC;
		}
		mutex_lock(&tier_lock);
		for (i = 0; i < tier_nr_targets; i++) {
			struct tier_target *t = tier_targets[i];

			if (t->state == TIER_ST_RUNNING)
				tier_target_tick(t, now, &next);
		}
		end = ktime_get_ns();
		tier_worker_busy_ns += end - now;
		mutex_unlock(&tier_lock);

		set_current_state(TASK_INTERRUPTIBLE);
		if (!kthread_should_stop() && !READ_ONCE(tier_kick) &&
		    next > end)
			schedule_timeout(nsecs_to_jiffies(next - end) + 1);
		__set_current_state(TASK_RUNNING);
		WRITE_ONCE(tier_kick, false);
	}
	return 0;
}

#define TIER_AUTO_BATCH	16

/*
 * Automatic targets: every 2 s (worker context), processes whose RSS is at
 * least tier_auto_rss_mb, or that belong to the cgroup (v2) auto_cgroup or one
 * below it, or (tier_follow_children) that a running target forked and that
 * have an address space of their own, and that are in no slot (running or
 * exited) are put into the first idle or exited slot, or a new one.  A
 * process stopped by hand (pid -1) is picked up again while it qualifies;
 * one that leaves the cgroup stays managed.
 */
struct tier_cand {
	pid_t nr;
	pid_t ptgid;	/* its parent */
	bool own_mm;	/* not sharing the parent's mm (vfork, CLONE_VM) */
};

/* tier_lock held */
static bool tier_pid_running(pid_t nr)
{
	u32 j;

	for (j = 0; j < tier_nr_targets; j++)
		if (tier_targets[j]->state == TIER_ST_RUNNING &&
		    tier_targets[j]->pid_nr == nr)
			return true;
	return false;
}

static void tier_auto_scan(void)
{
	unsigned long min_pages = (unsigned long)READ_ONCE(tier_auto_rss_mb) <<
				  (20 - PAGE_SHIFT);
	static pid_t managed[TIER_MAX_TARGETS];	/* worker thread only */
	struct tier_cand cand[TIER_AUTO_BATCH];
	bool follow = READ_ONCE(tier_follow_children);
	struct task_struct *p;
	struct cgroup *cgrp;
	int nc = 0, nm = 0, i, k;
	u32 j;

	mutex_lock(&tier_lock);
	cgrp = tier_auto_cgrp;
	if (cgrp)
		cgroup_get(cgrp);
	for (j = 0; follow && j < tier_nr_targets; j++)
		if (tier_targets[j]->state == TIER_ST_RUNNING)
			managed[nm++] = tier_targets[j]->pid_nr;
	mutex_unlock(&tier_lock);
	if (!min_pages && !cgrp && !nm)
		return;

	rcu_read_lock();
	for_each_process(p) {
		struct task_struct *pp = rcu_dereference(p->real_parent);
		pid_t ptgid = task_tgid_nr(pp);
		bool own_mm, forked = false;
		unsigned long rss = 0;
		struct mm_struct *mm;
		bool in_cg;

		if (p->flags & (PF_KTHREAD | PF_EXITING))
			continue;
		in_cg = cgrp && task_under_cgroup_hierarchy(p, cgrp);
		task_lock(p);
		mm = p->mm;
		if (mm)
			rss = get_mm_rss(mm);
		else
			in_cg = false;
		task_unlock(p);
		/* a vfork child shares its parent's mm: nothing of its own */
		own_mm = mm && mm != READ_ONCE(pp->mm);
		for (k = 0; own_mm && k < nm; k++)
			if (managed[k] == ptgid)
				forked = true;
		if (((min_pages && rss >= min_pages) || in_cg || forked) &&
		    nc < TIER_AUTO_BATCH)
			cand[nc++] = (struct tier_cand) {
				.nr = task_tgid_nr(p), .ptgid = ptgid,
				.own_mm = own_mm };
	}
	rcu_read_unlock();
	if (cgrp)
		cgroup_put(cgrp);

	mutex_lock(&tier_lock);
	for (i = 0; i < nc && !tier_exiting; i++) {
		struct tier_target *t = NULL;

		for (j = 0; j < tier_nr_targets; j++) {
			if (tier_targets[j]->state != TIER_ST_IDLE &&
			    tier_targets[j]->pid_nr == cand[i].nr)
				break;
		}
		if (j < tier_nr_targets)
			continue;	/* already managed (or exited) */
		for (j = 0; j < tier_nr_targets && !t; j++)
			if (tier_targets[j]->state != TIER_ST_RUNNING)
				t = tier_targets[j];
		if (!t)
			t = tier_add_slot();
		if (IS_ERR(t))
			break;
		if (!tier_target_start(t, cand[i].nr)) {
			/*
			 * A child of a target, even one that also qualified
			 * by RSS: for_each_process() lists parents first, so
			 * a parent picked in this batch is running by now.
			 */
			t->auto_added = true;
			if (cand[i].own_mm && tier_pid_running(cand[i].ptgid))
				t->parent_nr = cand[i].ptgid;
			if (t->parent_nr)
				pr_info("child %d of target %d in slot %u\n",
					cand[i].nr, t->parent_nr, t->idx);
			else
				pr_info("auto target %d in slot %u\n",
					cand[i].nr, t->idx);
		}
	}
	mutex_unlock(&tier_lock);
}

