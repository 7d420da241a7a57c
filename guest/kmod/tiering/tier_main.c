// SPDX-License-Identifier: GPL-2.0
/*
 * Guest tiered-memory manager (Demeter, SOSP'25, section 3.2) for stock
 * kernels: targets, the epoch worker and the sysfs interface.
 *
 * One kernel thread, "ktieringd", serves every target: it runs the
 * accessed-bit scans when that source is active, and every t_split it
 * drains the PEBS ring (PEBS source), steps the range classifier
 * (decay, split, merge), ranks the ranges and publishes a promotion list
 * (hottest ranges that fit FMem) and a demotion list (coldest ranges).
 * Stock kernels do not export migrate_pages()/folio isolation to
 * modules, so the pages are moved by the user-space agent (guest/agent)
 * with move_pages(2), in balanced batches; see README.md.
 *
 * sysfs (/sys/kernel/tiering, DAMON-style):
 *   sampler  fmem_node  smem_node  fmem_capacity_pages  pebs  stats
 *   targets/nr_targets
 *   targets/<i>/{pid,state,source,sample_rate,stats,ranges,promote,
 *                demote,relocated}
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/kthread.h>
#include <linux/sched.h>
#include <linux/sched/mm.h>
#include <linux/sched/task.h>
#include <linux/slab.h>
#include <linux/mm.h>
#include <linux/mmzone.h>
#include <linux/nodemask.h>
#include <linux/sysfs.h>
#include <linux/string.h>
#include <linux/ktime.h>
#include <linux/stringify.h>
#include <linux/cgroup.h>
#include "tier.h"

DEFINE_MUTEX(tier_lock);

/* ---- module parameters (validated; also writable at run time) ---- */

static unsigned int split_period_ms = HRC_DEF_SPLIT_PERIOD_MS;
static unsigned int split_thresh = HRC_DEF_SPLIT_THRESH;
static unsigned int significance_pct = HRC_DEF_SIGNIFICANCE_PCT;
static unsigned int merge_epochs = HRC_DEF_MERGE_EPOCHS;
static unsigned int max_ranges = HRC_DEF_MAX_RANGES;
static unsigned int scan_interval_ms = 500;
static unsigned int abit_min_window_ms = 5;
static unsigned int abit_young_lo_pct = 2;
static unsigned int abit_young_hi_pct = 15;
static unsigned int half_split = 1;
static unsigned int edge_split = 1;
static unsigned int fmem_capacity_mb;	/* 0 = auto */
static unsigned int auto_rss_mb;		/* 0 = no automatic targets */
static bool follow_children = true;
module_param(follow_children, bool, 0644);
MODULE_PARM_DESC(follow_children, "manage the children a target forks as targets of their own");
static bool abit_tlb_flush = true;
module_param(abit_tlb_flush, bool, 0644);
MODULE_PARM_DESC(abit_tlb_flush, "accessed-bit source: flush TLBs after a clear pass");
unsigned int tier_pebs_ldlat = 64;		/* ns */
unsigned int tier_pebs_load_period = 4093;
unsigned int tier_pebs_store_period = 65535;

#define TIER_UINT_PARAM(name, var, lo, hi, desc)			\
static int tier_set_##name(const char *val, const struct kernel_param *kp) \
{									\
	return param_set_uint_minmax(val, kp, lo, hi);			\
}									\
static const struct kernel_param_ops tier_ops_##name = {		\
	.set = tier_set_##name,						\
	.get = param_get_uint,						\
};									\
module_param_cb(name, &tier_ops_##name, &var, 0644);			\
MODULE_PARM_DESC(name, desc " [" __stringify(lo) ".." __stringify(hi) "]")

TIER_UINT_PARAM(split_period_ms, split_period_ms, HRC_MIN_SPLIT_PERIOD_MS,
		HRC_MAX_SPLIT_PERIOD_MS, "t_split: epoch length (ms)");
TIER_UINT_PARAM(split_thresh, split_thresh, 1, HRC_MAX_SPLIT_THRESH,
		"tau_split: samples per vCPU per epoch to split");
TIER_UINT_PARAM(significance_pct, significance_pct, HRC_MIN_SIGNIFICANCE_PCT,
		HRC_MAX_SIGNIFICANCE_PCT, "alpha x 100");
TIER_UINT_PARAM(merge_epochs, merge_epochs, 0, HRC_MAX_MERGE_EPOCHS,
		"tau_merge (0 = never merge)");
TIER_UINT_PARAM(max_ranges, max_ranges, HRC_MIN_RANGES, 65536,
		"range bound per target (applies to new targets)");
TIER_UINT_PARAM(half_split, half_split, 0, 1,
		"also split a range whose halves differ by alpha");
TIER_UINT_PARAM(edge_split, edge_split, 0, 1,
		"also split a range next to an alpha-times denser one");
TIER_UINT_PARAM(scan_interval_ms, scan_interval_ms, 20, 60000,
		"accessed-bit source: scan cycle (ms)");
TIER_UINT_PARAM(abit_min_window_ms, abit_min_window_ms, 1, 60000,
		"accessed-bit source: shortest clear-to-check window (ms)");
TIER_UINT_PARAM(abit_young_lo_pct, abit_young_lo_pct, 0, 100,
		"accessed-bit source: widen the window below this young %");
TIER_UINT_PARAM(abit_young_hi_pct, abit_young_hi_pct, 1, 100,
		"accessed-bit source: narrow the window above this young %");
TIER_UINT_PARAM(fmem_capacity_mb, fmem_capacity_mb, 0, 1U << 30,
		"FMem capacity for the hot set (MiB; 0 = 3/4 of the node)");
TIER_UINT_PARAM(auto_rss_mb, auto_rss_mb, 0, 1U << 30,
		"manage every process whose RSS reaches this (MiB; 0 = off)");
TIER_UINT_PARAM(pebs_ldlat_ns, tier_pebs_ldlat, 1, 100000,
		"PEBS load-latency threshold (ns)");
TIER_UINT_PARAM(pebs_load_period, tier_pebs_load_period, 1, 1U << 30,
		"PEBS load-latency sample period");
TIER_UINT_PARAM(pebs_store_period, tier_pebs_store_period, 1, 1U << 30,
		"PEBS retired-stores sample period");

/* sampler: "auto" (PEBS if usable, else accessed bits), "pebs", "abit" */
enum tier_sampler_req { TIER_REQ_AUTO, TIER_REQ_PEBS, TIER_REQ_ABIT };
static const char * const tier_req_names[] = { "auto", "pebs", "abit" };
static const char * const tier_src_names[] = { "none", "abit", "pebs" };
static int tier_sampler = TIER_REQ_AUTO;

static int tier_parse_sampler(const char *val)
{
	int i;

	for (i = 0; i < ARRAY_SIZE(tier_req_names); i++)
		if (sysfs_streq(val, tier_req_names[i]))
			return i;
	return -EINVAL;
}

static int tier_set_sampler(const char *val, const struct kernel_param *kp)
{
	int r = tier_parse_sampler(val);

	if (r < 0)
		return r;
	WRITE_ONCE(tier_sampler, r);
	return 0;
}

static int tier_get_sampler(char *buf, const struct kernel_param *kp)
{
	return sysfs_emit(buf, "%s\n", tier_req_names[READ_ONCE(tier_sampler)]);
}

static const struct kernel_param_ops tier_ops_sampler = {
	.set = tier_set_sampler,
	.get = tier_get_sampler,
};
module_param_cb(sampler, &tier_ops_sampler, NULL, 0644);
MODULE_PARM_DESC(sampler, "sampling source for new targets: auto|pebs|abit");

/* ---- global state ---- */

static struct kobject *tier_root, *tier_targets_kobj;
static struct tier_target *tier_targets[TIER_MAX_TARGETS];
static u32 tier_nr_targets;
static struct task_struct *tier_worker;
static bool tier_kick;
static bool tier_exiting;	/* module unload in progress */
static struct cgroup *tier_auto_cgrp;	/* auto targets: members of this */
static char tier_auto_cgrp_path[128];
static int tier_fmem_node = NUMA_NO_NODE, tier_smem_node = NUMA_NO_NODE;
static bool tier_pebs_ok;
static char tier_pebs_why[96];
static u64 tier_worker_busy_ns, tier_nr_epochs, tier_nr_scans;

static u64 tier_fmem_capacity_pages(void)
{
	u64 mb = READ_ONCE(fmem_capacity_mb);

	if (mb)
		return mb << (20 - PAGE_SHIFT);
	if (tier_fmem_node == NUMA_NO_NODE)
		return 0;
	return node_present_pages(tier_fmem_node) * 3 / 4;
}

static void tier_pick_nodes(void)
{
	int nid;

	/* FMem: the first memory node with CPUs; SMem: the last memory node. */
	for_each_node_state(nid, N_MEMORY) {
		if (tier_fmem_node == NUMA_NO_NODE && node_state(nid, N_CPU))
			tier_fmem_node = nid;
		tier_smem_node = nid;
	}
	if (tier_fmem_node == NUMA_NO_NODE)
		tier_fmem_node = first_node(node_states[N_MEMORY]);
	if (tier_smem_node == tier_fmem_node)
		tier_smem_node = NUMA_NO_NODE;
}

static void tier_params(struct hrc_params *p)
{
	hrc_default_params(p);
	p->split_thresh = READ_ONCE(split_thresh);
	p->significance_pct = READ_ONCE(significance_pct);
	p->merge_epochs = READ_ONCE(merge_epochs);
	p->split_period_ms = READ_ONCE(split_period_ms);
	p->half_split = READ_ONCE(half_split);
	p->edge_split = READ_ONCE(edge_split);
	p->nr_cpus = clamp_t(u32, num_online_cpus(), 1, HRC_MAX_CPUS);
}

/* ---- target life cycle (tier_lock held) ---- */

static void tier_target_stop(struct tier_target *t, enum tier_state st)
{
	if (t->source == TIER_SRC_PEBS)
		tier_pebs_stop(t);
	t->source = TIER_SRC_NONE;
	t->state = st;
	if (st == TIER_ST_EXITED)
		return;		/* keep ranges and stats for inspection */
	kvfree(t->ranges);
	kvfree(t->order);
	t->ranges = NULL;
	t->order = NULL;
	t->hrc.nr = 0;
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
	memset(&t->hrc.stats, 0, sizeof(t->hrc.stats));
}

static int tier_target_start(struct tier_target *t, pid_t nr)
{
	struct hrc_interval iv[2];
	struct task_struct *task;
	struct mm_struct *mm;
	struct hrc_params p;
	struct pid *pid;
	int n, ret, req, i;
	u32 cap = READ_ONCE(max_ranges);

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

	if (t->state != TIER_ST_IDLE)
		tier_target_stop(t, TIER_ST_IDLE);

	n = hrc_default_layout(mm->start_brk, mm->mmap_base,
			       (u64)totalram_pages() << PAGE_SHIFT, iv);
	ret = n < 0 ? n : -ENOMEM;
	if (n < 0)
		goto out_mm;
	t->ranges = kvcalloc(cap, sizeof(*t->ranges), GFP_KERNEL);
	t->order = kvcalloc(cap, sizeof(*t->order), GFP_KERNEL);
	if (!t->ranges || !t->order)
		goto out_free;
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
	if (req == TIER_REQ_PEBS && !tier_pebs_ok) {
		ret = -ENODEV;
		goto out_free;
	}
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
	t->next_epoch_ns = t->started_ns +
			   (u64)READ_ONCE(split_period_ms) * NSEC_PER_MSEC;
	t->next_scan_ns = t->started_ns;
	t->abit_armed = false;
	t->window_ms = min(50U, READ_ONCE(scan_interval_ms));
	mmput(mm);
	put_task_struct(task);
	WRITE_ONCE(tier_kick, true);
	if (tier_worker)
		wake_up_process(tier_worker);
	return 0;

out_free:
	kvfree(t->ranges);
	kvfree(t->order);
	t->ranges = NULL;
	t->order = NULL;
	t->source = TIER_SRC_NONE;
out_mm:
	mmput(mm);
out_task:
	put_task_struct(task);
	put_pid(pid);
	return ret;
}

/* ---- the worker ---- */

static void tier_abit_step(struct tier_target *t, struct mm_struct *mm,
			   u64 now)
{
	u32 ival = READ_ONCE(scan_interval_ms);
	u64 t0 = ktime_get_ns(), present = 0, young;

	if (!t->abit_armed && t->window_ms < ival) {
		/* Clear pass: opens a window of window_ms. */
		tier_abit_pass(t, mm, false, &present);
		if (READ_ONCE(abit_tlb_flush))
			tier_abit_flush();
		t->abit_armed = true;
		t->cycle_start_ns = now;
		t->next_scan_ns = now + (u64)t->window_ms * NSEC_PER_MSEC;
	} else {
		young = tier_abit_pass(t, mm, true, &present);
		if (!t->abit_armed && READ_ONCE(abit_tlb_flush))
			tier_abit_flush();	/* single-pass mode */
		t->nr_samples += young;
		t->epoch_samples += young;
		t->abit_present = present;
		t->abit_young = young;
		t->nr_scans++;
		tier_nr_scans++;
		t->next_scan_ns = (t->abit_armed ? t->cycle_start_ns : now) +
				  (u64)ival * NSEC_PER_MSEC;
		t->abit_armed = false;
		t->window_ms = tier_abit_next_window(t->window_ms, young,
						     present,
						     READ_ONCE(abit_young_lo_pct),
						     READ_ONCE(abit_young_hi_pct),
						     min(READ_ONCE(abit_min_window_ms), ival),
						     ival);
	}
	t->scan_ns += ktime_get_ns() - t0;
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

	period = (u64)READ_ONCE(split_period_ms) * NSEC_PER_MSEC;
	elapsed = now - (t->next_epoch_ns - period);
	if (elapsed)
		t->last_rate = div64_u64(t->epoch_samples * NSEC_PER_SEC,
					 elapsed);
	t->epoch_samples = 0;
	t->next_epoch_ns += period;
	if (t->next_epoch_ns <= now)
		t->next_epoch_ns = now + period;
	t->epoch_ns += ktime_get_ns() - t0;
	tier_nr_epochs++;
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
	put_task_struct(task);
	if (now >= t->next_epoch_ns)
		tier_epoch(t, now);
	if (t->source == TIER_SRC_ABIT)
		*next = min(*next, t->next_scan_ns);
	*next = min(*next, t->next_epoch_ns);
}

static void tier_auto_scan(void);
static u64 tier_next_auto_ns;

static int tier_worker_fn(void *unused)
{
	while (!kthread_should_stop()) {
		u64 now = ktime_get_ns(), next = now + NSEC_PER_SEC, end;
		u32 i;

		if ((READ_ONCE(auto_rss_mb) || READ_ONCE(tier_auto_cgrp) ||
		     READ_ONCE(follow_children)) &&
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

/* ---- sysfs: per target ---- */

#define to_target(k) container_of(k, struct tier_target, kobj)

static ssize_t pid_show(struct kobject *k, struct kobj_attribute *a,
			char *buf)
{
	struct tier_target *t = to_target(k);
	int nr;

	mutex_lock(&tier_lock);
	nr = t->state == TIER_ST_IDLE ? -1 : t->pid_nr;
	mutex_unlock(&tier_lock);
	return sysfs_emit(buf, "%d\n", nr);
}

static ssize_t pid_store(struct kobject *k, struct kobj_attribute *a,
			 const char *buf, size_t count)
{
	struct tier_target *t = to_target(k);
	int nr, ret;

	ret = kstrtoint(buf, 0, &nr);
	if (ret)
		return -EINVAL;
	if (nr == -1 || nr == 0) {
		mutex_lock(&tier_lock);
		if (t->state != TIER_ST_IDLE)
			tier_target_stop(t, TIER_ST_IDLE);
		mutex_unlock(&tier_lock);
		return count;
	}
	if (nr < 0)
		return -EINVAL;
	mutex_lock(&tier_lock);
	if (t->removed || tier_exiting)
		ret = -ENODEV;	/* the slot is going away */
	else
		ret = tier_target_start(t, nr);
	mutex_unlock(&tier_lock);
	return ret ? ret : count;
}

static ssize_t state_show(struct kobject *k, struct kobj_attribute *a,
			  char *buf)
{
	static const char * const names[] = { "idle", "running", "exited" };
	struct tier_target *t = to_target(k);

	return sysfs_emit(buf, "%s\n", names[READ_ONCE(t->state)]);
}

static ssize_t source_show(struct kobject *k, struct kobj_attribute *a,
			   char *buf)
{
	struct tier_target *t = to_target(k);

	return sysfs_emit(buf, "%s\n", tier_src_names[READ_ONCE(t->last_source)]);
}

static ssize_t sample_rate_show(struct kobject *k, struct kobj_attribute *a,
				char *buf)
{
	struct tier_target *t = to_target(k);

	return sysfs_emit(buf, "%llu\n", READ_ONCE(t->last_rate));
}

static ssize_t stats_show(struct kobject *k, struct kobj_attribute *a,
			  char *buf)
{
	static const char * const vnames[] = {
		"ok", "noaddr", "pid", "ignore", "latency", "event",
	};
	struct tier_target *t = to_target(k);
	int len = 0, i;

	mutex_lock(&tier_lock);
	len += sysfs_emit_at(buf, len,
		"state %d\npid %d\nsource %s\nsample_rate %llu\nsamples %llu\n"
		"scans %llu\nscan_ns %llu\nepoch_ns %llu\nwindow_ms %u\n"
		"abit_present %llu\nabit_young %llu\nepoch %llu\nranges %u\n"
		"splits %llu\nmerges %llu\nsplit_dropped %llu\noutside %llu\n"
		"nr_hot %u\nhot_bytes %llu\nnr_promo %u\nnr_demo %u\n"
		"promoted %llu\ndemoted %llu\nreloc_failed %llu\n"
		"reloc_rounds %llu\nauto %d\nparent %d\nfmem_share_pages %llu\n",
		t->state, t->state == TIER_ST_IDLE ? -1 : t->pid_nr,
		tier_src_names[t->last_source], t->last_rate, t->nr_samples,
		t->nr_scans, t->scan_ns, t->epoch_ns, t->window_ms,
		t->abit_present, t->abit_young, t->hrc.epoch, t->hrc.nr,
		t->hrc.stats.nr_splits, t->hrc.stats.nr_merges,
		t->hrc.stats.nr_split_dropped, t->hrc.stats.nr_outside,
		t->nr_hot, t->hot_bytes, t->nr_promo, t->nr_demo,
		t->reloc_promoted, t->reloc_demoted, t->reloc_failed,
		t->reloc_rounds, t->auto_added, t->parent_nr, t->fmem_share);
	for (i = 0; i < TIER_NR_VERDICTS; i++)
		len += sysfs_emit_at(buf, len, "pebs_%s %llu\n", vnames[i],
				     tier_counter_read(&t->verdicts[i]));
	len += sysfs_emit_at(buf, len, "pebs_ring_overwritten %llu\n",
			     t->ring_mem ?
			     tier_counter_read(&t->ring.overwritten) : 0);
	mutex_unlock(&tier_lock);
	return len;
}

static ssize_t ranges_show(struct kobject *k, struct kobj_attribute *a,
			   char *buf)
{
	struct tier_target *t = to_target(k);
	int len = 0;
	u32 i;

	mutex_lock(&tier_lock);
	for (i = 0; i < t->hrc.nr && len < PAGE_SIZE - 80; i++) {
		const struct hrc_range *r = &t->hrc.ranges[i];

		len += sysfs_emit_at(buf, len, "%llx %llx %llu %llu\n",
				     r->start, r->end, r->nr_access,
				     r->birth);
	}
	mutex_unlock(&tier_lock);
	return len;
}

/*
 * "epoch N" then one "start end nr_access" line per interval (hex, hex,
 * decimal): promote hottest first, demote coldest first.  The counts are
 * those of the ranges now; the lists were selected at the end of the same
 * epoch, and ranges only change at epoch ends, under tier_lock.
 */
static ssize_t tier_show_list(struct tier_target *t, char *buf, bool promo)
{
	const struct hrc_interval *iv = promo ? t->promo : t->demo;
	int len, k;
	u32 i, n;

	mutex_lock(&tier_lock);
	n = promo ? t->nr_promo : t->nr_demo;
	len = sysfs_emit(buf, "epoch %llu\n", t->sel_epoch);
	for (i = 0; i < n && len < PAGE_SIZE - 64; i++) {
		k = t->ranges ? hrc_find(&t->hrc, iv[i].start) : -1;
		len += sysfs_emit_at(buf, len, "%llx %llx %llu\n", iv[i].start,
				     iv[i].end,
				     k >= 0 ? t->hrc.ranges[k].nr_access : 0);
	}
	mutex_unlock(&tier_lock);
	return len;
}

static ssize_t promote_show(struct kobject *k, struct kobj_attribute *a,
			    char *buf)
{
	return tier_show_list(to_target(k), buf, true);
}

static ssize_t demote_show(struct kobject *k, struct kobj_attribute *a,
			   char *buf)
{
	return tier_show_list(to_target(k), buf, false);
}

static ssize_t relocated_show(struct kobject *k, struct kobj_attribute *a,
			      char *buf)
{
	struct tier_target *t = to_target(k);
	ssize_t len;

	mutex_lock(&tier_lock);
	len = sysfs_emit(buf, "%llu %llu %llu %llu\n", t->reloc_promoted,
			 t->reloc_demoted, t->reloc_failed, t->reloc_rounds);
	mutex_unlock(&tier_lock);
	return len;
}

/* The agent reports one relocation round: "PROMOTED DEMOTED FAILED". */
static ssize_t relocated_store(struct kobject *k, struct kobj_attribute *a,
			       const char *buf, size_t count)
{
	struct tier_target *t = to_target(k);
	unsigned long long p, d, f;
	char extra;
	int n;

	n = sscanf(buf, "%llu %llu %llu %c", &p, &d, &f, &extra);
	if (n != 3 || p > (1ULL << 40) || d > (1ULL << 40) ||
	    f > (1ULL << 40))
		return -EINVAL;
	mutex_lock(&tier_lock);
	if (t->state != TIER_ST_RUNNING) {
		mutex_unlock(&tier_lock);
		return -ESRCH;
	}
	t->reloc_promoted += p;
	t->reloc_demoted += d;
	t->reloc_failed += f;
	t->reloc_rounds++;
	mutex_unlock(&tier_lock);
	return count;
}

static struct kobj_attribute tier_attr_pid = __ATTR_RW_MODE(pid, 0600);
static struct kobj_attribute tier_attr_state = __ATTR_RO(state);
static struct kobj_attribute tier_attr_source = __ATTR_RO(source);
static struct kobj_attribute tier_attr_sample_rate = __ATTR_RO(sample_rate);
static struct kobj_attribute tier_attr_stats = __ATTR_RO(stats);
static struct kobj_attribute tier_attr_ranges = __ATTR_RO_MODE(ranges, 0400);
static struct kobj_attribute tier_attr_promote = __ATTR_RO_MODE(promote, 0400);
static struct kobj_attribute tier_attr_demote = __ATTR_RO_MODE(demote, 0400);
static struct kobj_attribute tier_attr_relocated =
	__ATTR_RW_MODE(relocated, 0600);

static struct attribute *tier_target_attrs[] = {
	&tier_attr_pid.attr, &tier_attr_state.attr, &tier_attr_source.attr,
	&tier_attr_sample_rate.attr, &tier_attr_stats.attr,
	&tier_attr_ranges.attr, &tier_attr_promote.attr,
	&tier_attr_demote.attr, &tier_attr_relocated.attr, NULL,
};
ATTRIBUTE_GROUPS(tier_target);

static void tier_target_release(struct kobject *k)
{
	kfree(to_target(k));
}

static const struct kobj_type tier_target_ktype = {
	.release = tier_target_release,
	.sysfs_ops = &kobj_sysfs_ops,
	.default_groups = tier_target_groups,
};

/* ---- sysfs: targets/nr_targets ---- */

static ssize_t nr_targets_show(struct kobject *k, struct kobj_attribute *a,
			       char *buf)
{
	return sysfs_emit(buf, "%u\n", READ_ONCE(tier_nr_targets));
}

/* A new idle slot targets/<nr_targets> (tier_lock held). */
static struct tier_target *tier_add_slot(void)
{
	struct tier_target *t;
	int ret;

	if (tier_nr_targets >= TIER_MAX_TARGETS)
		return ERR_PTR(-ENOSPC);
	t = kzalloc(sizeof(*t), GFP_KERNEL);
	if (!t)
		return ERR_PTR(-ENOMEM);
	t->idx = tier_nr_targets;
	t->pid_nr = -1;
	ret = kobject_init_and_add(&t->kobj, &tier_target_ktype,
				   tier_targets_kobj, "%u", t->idx);
	if (ret) {
		kobject_put(&t->kobj);
		return ERR_PTR(ret);
	}
	tier_targets[tier_nr_targets++] = t;
	return t;
}

#define TIER_AUTO_BATCH	16

/*
 * Automatic targets: every 2 s (worker context), processes whose RSS is at
 * least auto_rss_mb, or that belong to the cgroup (v2) auto_cgroup or one
 * below it, or (follow_children) that a running target forked and that
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
	unsigned long min_pages = (unsigned long)READ_ONCE(auto_rss_mb) <<
				  (20 - PAGE_SHIFT);
	static pid_t managed[TIER_MAX_TARGETS];	/* worker thread only */
	struct tier_cand cand[TIER_AUTO_BATCH];
	bool follow = READ_ONCE(follow_children);
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

static ssize_t nr_targets_store(struct kobject *k, struct kobj_attribute *a,
				const char *buf, size_t count)
{
	struct tier_target *gone[TIER_MAX_TARGETS];
	u32 n, i, nr_gone = 0;
	int ret = 0;

	if (kstrtou32(buf, 0, &n) || n > TIER_MAX_TARGETS)
		return -EINVAL;
	mutex_lock(&tier_lock);
	if (tier_exiting) {
		mutex_unlock(&tier_lock);
		return -ENODEV;
	}
	while (tier_nr_targets < n) {
		struct tier_target *t = tier_add_slot();

		if (IS_ERR(t)) {
			ret = PTR_ERR(t);
			break;
		}
	}
	while (tier_nr_targets > n) {
		struct tier_target *t = tier_targets[--tier_nr_targets];

		if (t->state != TIER_ST_IDLE)
			tier_target_stop(t, TIER_ST_IDLE);
		t->removed = true;
		tier_targets[tier_nr_targets] = NULL;
		gone[nr_gone++] = t;
	}
	mutex_unlock(&tier_lock);
	/* Outside the lock: removal waits for readers that take it. */
	for (i = 0; i < nr_gone; i++)
		kobject_put(&gone[i]->kobj);
	return ret ? ret : count;
}

static struct kobj_attribute tier_attr_nr_targets =
	__ATTR_RW_MODE(nr_targets, 0600);

static struct attribute *tier_targets_attrs[] = {
	&tier_attr_nr_targets.attr, NULL,
};

static const struct attribute_group tier_targets_group = {
	.attrs = tier_targets_attrs,
};

/* ---- sysfs: global ---- */

static ssize_t sampler_show(struct kobject *k, struct kobj_attribute *a,
			    char *buf)
{
	int req = READ_ONCE(tier_sampler);
	const char *eff = req == TIER_REQ_ABIT ? "abit" :
			  tier_pebs_ok ? "pebs" : "abit";

	return sysfs_emit(buf, "requested %s\nnew_targets %s\npebs %s\n",
			  tier_req_names[req],
			  req == TIER_REQ_PEBS && !tier_pebs_ok ? "refused" : eff,
			  tier_pebs_ok ? "available" : "unavailable");
}

static ssize_t sampler_store(struct kobject *k, struct kobj_attribute *a,
			     const char *buf, size_t count)
{
	int r = tier_parse_sampler(buf);

	if (r < 0)
		return r;
	if (r == TIER_REQ_PEBS && !tier_pebs_ok)
		return -ENODEV;
	WRITE_ONCE(tier_sampler, r);
	return count;
}

static ssize_t auto_cgroup_show(struct kobject *k, struct kobj_attribute *a,
				char *buf)
{
	ssize_t len;

	mutex_lock(&tier_lock);
	len = sysfs_emit(buf, "%s\n", tier_auto_cgrp_path);
	mutex_unlock(&tier_lock);
	return len;
}

/* A cgroup v2 path ("/a/b") whose processes become targets; "" clears. */
static ssize_t auto_cgroup_store(struct kobject *k, struct kobj_attribute *a,
				 const char *buf, size_t count)
{
	char path[sizeof(tier_auto_cgrp_path)];
	struct cgroup *cgrp = NULL, *old;
	size_t n = count;

	if (n && buf[n - 1] == '\n')
		n--;
	if (n >= sizeof(path) || memchr(buf, 0, n))
		return -EINVAL;
	memcpy(path, buf, n);
	path[n] = 0;
	if (n && path[0] != '/')
		return -EINVAL;
	if (n) {
		cgrp = cgroup_get_from_path(path);
		if (IS_ERR(cgrp))
			return PTR_ERR(cgrp);
	}
	mutex_lock(&tier_lock);
	if (tier_exiting) {
		mutex_unlock(&tier_lock);
		if (cgrp)
			cgroup_put(cgrp);
		return -ENODEV;
	}
	old = tier_auto_cgrp;
	tier_auto_cgrp = cgrp;
	strscpy(tier_auto_cgrp_path, path, sizeof(tier_auto_cgrp_path));
	mutex_unlock(&tier_lock);
	if (old)
		cgroup_put(old);
	if (cgrp && tier_worker)
		wake_up_process(tier_worker);
	return count;
}

static ssize_t pebs_show(struct kobject *k, struct kobj_attribute *a,
			 char *buf)
{
	return sysfs_emit(buf, "%s: %s\n",
			  tier_pebs_ok ? "available" : "unavailable",
			  tier_pebs_why);
}

static ssize_t fmem_node_show(struct kobject *k, struct kobj_attribute *a,
			      char *buf)
{
	return sysfs_emit(buf, "%d\n", tier_fmem_node);
}

static ssize_t smem_node_show(struct kobject *k, struct kobj_attribute *a,
			      char *buf)
{
	return sysfs_emit(buf, "%d\n", tier_smem_node);
}

static ssize_t fmem_capacity_pages_show(struct kobject *k,
					struct kobj_attribute *a, char *buf)
{
	return sysfs_emit(buf, "%llu\n", tier_fmem_capacity_pages());
}

static ssize_t global_stats_show(struct kobject *k, struct kobj_attribute *a,
				 char *buf)
{
	u64 cpu_ns = 0, samples = 0, rate = 0;
	u32 i, running = 0;
	pid_t wpid = 0;
	int len;

	mutex_lock(&tier_lock);
	if (tier_worker) {
		cpu_ns = tier_worker->se.sum_exec_runtime;
		wpid = tier_worker->pid;
	}
	for (i = 0; i < tier_nr_targets; i++) {
		struct tier_target *t = tier_targets[i];

		samples += t->nr_samples;
		if (t->state == TIER_ST_RUNNING) {
			running++;
			rate += t->last_rate;
		}
	}
	len = sysfs_emit(buf,
		"worker_pid %d\nworker_cpu_ns %llu\nworker_busy_ns %llu\n"
		"targets %u\nrunning %u\nsamples %llu\nsample_rate %llu\n"
		"epochs %llu\nscans %llu\nfmem_node %d\nsmem_node %d\n"
		"fmem_capacity_pages %llu\npebs %s\n",
		wpid, cpu_ns, tier_worker_busy_ns, tier_nr_targets, running,
		samples, rate, tier_nr_epochs, tier_nr_scans, tier_fmem_node,
		tier_smem_node, tier_fmem_capacity_pages(),
		tier_pebs_ok ? "available" : "unavailable");
	mutex_unlock(&tier_lock);
	return len;
}

static struct kobj_attribute tier_attr_sampler = __ATTR_RW_MODE(sampler, 0644);
static struct kobj_attribute tier_attr_pebs = __ATTR_RO(pebs);
static struct kobj_attribute tier_attr_auto_cgroup =
	__ATTR_RW_MODE(auto_cgroup, 0644);
static struct kobj_attribute tier_attr_fmem_node = __ATTR_RO(fmem_node);
static struct kobj_attribute tier_attr_smem_node = __ATTR_RO(smem_node);
static struct kobj_attribute tier_attr_fmem_capacity_pages =
	__ATTR_RO(fmem_capacity_pages);
static struct kobj_attribute tier_attr_gstats =
	__ATTR(stats, 0444, global_stats_show, NULL);

static struct attribute *tier_root_attrs[] = {
	&tier_attr_sampler.attr, &tier_attr_pebs.attr,
	&tier_attr_auto_cgroup.attr,
	&tier_attr_fmem_node.attr, &tier_attr_smem_node.attr,
	&tier_attr_fmem_capacity_pages.attr, &tier_attr_gstats.attr, NULL,
};

static const struct attribute_group tier_root_group = {
	.attrs = tier_root_attrs,
};

/* ---- module init / exit ---- */

static int __init tier_init(void)
{
	int ret;

	tier_pick_nodes();
	tier_pebs_ok = !tier_pebs_probe(tier_pebs_why, sizeof(tier_pebs_why));

	tier_root = kobject_create_and_add("tiering", kernel_kobj);
	if (!tier_root)
		return -ENOMEM;
	ret = sysfs_create_group(tier_root, &tier_root_group);
	if (ret)
		goto err_root;
	tier_targets_kobj = kobject_create_and_add("targets", tier_root);
	if (!tier_targets_kobj) {
		ret = -ENOMEM;
		goto err_root;
	}
	ret = sysfs_create_group(tier_targets_kobj, &tier_targets_group);
	if (ret)
		goto err_targets;
	tier_worker = kthread_run(tier_worker_fn, NULL, "ktieringd");
	if (IS_ERR(tier_worker)) {
		ret = PTR_ERR(tier_worker);
		tier_worker = NULL;
		goto err_targets;
	}
	/* pinned: stats readers may look at it until unload clears it */
	get_task_struct(tier_worker);
	pr_info("fmem node %d, smem node %d; PEBS %s (%s); sampler %s\n",
		tier_fmem_node, tier_smem_node,
		tier_pebs_ok ? "available" : "unavailable", tier_pebs_why,
		tier_req_names[tier_sampler]);
	return 0;

err_targets:
	kobject_put(tier_targets_kobj);
err_root:
	kobject_put(tier_root);
	return ret;
}

static void __exit tier_exit(void)
{
	u32 i;

	/* From here on no sysfs write can start a target or add a slot. */
	mutex_lock(&tier_lock);
	tier_exiting = true;
	mutex_unlock(&tier_lock);
	kthread_stop(tier_worker);
	mutex_lock(&tier_lock);
	put_task_struct(tier_worker);
	tier_worker = NULL;
	if (tier_auto_cgrp)
		cgroup_put(tier_auto_cgrp);
	tier_auto_cgrp = NULL;
	for (i = 0; i < tier_nr_targets; i++) {
		tier_targets[i]->removed = true;
		if (tier_targets[i]->state != TIER_ST_IDLE)
			tier_target_stop(tier_targets[i], TIER_ST_IDLE);
	}
	mutex_unlock(&tier_lock);
	kobject_put(tier_targets_kobj);
	for (i = 0; i < tier_nr_targets; i++)
		kobject_put(&tier_targets[i]->kobj);
	kobject_put(tier_root);
	pr_info("unloaded\n");
}

module_init(tier_init);
module_exit(tier_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("Guest tiered-memory manager: access sampling, "
		   "gVA range classification, relocation lists");
