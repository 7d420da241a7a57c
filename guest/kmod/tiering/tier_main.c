// SPDX-License-Identifier: GPL-2.0
/*
 * Guest tiered-memory manager (Demeter, SOSP'25, section 3.2) for stock
 * kernels: module parameters, load and unload.  The parts:
 *
 *   tier_core.c    targets, FMem/SMem, the worker "ktieringd"
 *   tier_abit.c    accessed-bit sampling source (any x86 CPU)
 *   tier_pebs.c    PEBS sampling source (Intel, perf kernel counters)
 *   tier_sysfs.c   /sys/kernel/tiering; tier_lists.c its list files
 *   tier_sample.c, tier_policy.c, range_classifier.c, hrc_rank.c
 *                  pure C, tested in user space (tests/)
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/kthread.h>
#include <linux/sched/task.h>
#include <linux/kobject.h>
#include <linux/sysfs.h>
#include <linux/stringify.h>
#include <linux/cgroup.h>
#include "tier.h"

/* ---- module parameters (validated; also writable at run time) ---- */

unsigned int tier_split_period_ms = HRC_DEF_SPLIT_PERIOD_MS;
unsigned int tier_split_thresh = HRC_DEF_SPLIT_THRESH;
unsigned int tier_significance_pct = HRC_DEF_SIGNIFICANCE_PCT;
unsigned int tier_hot_pct = HRC_DEF_HOT_PCT;
unsigned int tier_merge_epochs = HRC_DEF_MERGE_EPOCHS;
unsigned int tier_max_ranges = HRC_DEF_MAX_RANGES;
unsigned int tier_scan_interval_ms = 500;
unsigned int tier_abit_min_window_ms = 5;
unsigned int tier_abit_young_lo_pct = 2;
unsigned int tier_abit_young_hi_pct = 15;
unsigned int tier_half_split = 1;
unsigned int tier_edge_split = 1;
unsigned int tier_fmem_capacity_mb;	/* 0 = auto */
unsigned int tier_auto_rss_mb;		/* 0 = no automatic targets */
bool tier_follow_children = true;
module_param_named(follow_children, tier_follow_children, bool, 0644);
MODULE_PARM_DESC(follow_children, "manage the children a target forks as targets of their own");
unsigned int tier_abit_tlb_flush = TIER_FLUSH_AUTO;
unsigned int tier_abit_samples = 32;	/* per range and cycle */
unsigned int tier_abit_max_level = 4;	/* back-off up to 16x */
unsigned int tier_abit_huge_subwindows;	/* 0 (default): time-to-young */
unsigned int tier_abit_huge_tty_us = 2000;	/* 0: huge as base entries */
unsigned int tier_abit_huge_budget_permille = 20;
unsigned int tier_resident_ms = 2000;	/* residency walk period */
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

TIER_UINT_PARAM(split_period_ms, tier_split_period_ms, HRC_MIN_SPLIT_PERIOD_MS,
		HRC_MAX_SPLIT_PERIOD_MS, "t_split: epoch length (ms)");
TIER_UINT_PARAM(split_thresh, tier_split_thresh, 1, HRC_MAX_SPLIT_THRESH,
		"tau_split: samples per vCPU per epoch to split");
TIER_UINT_PARAM(significance_pct, tier_significance_pct, HRC_MIN_SIGNIFICANCE_PCT,
		HRC_MAX_SIGNIFICANCE_PCT, "alpha x 100");
TIER_UINT_PARAM(hot_pct, tier_hot_pct, 0, HRC_MAX_HOT_PCT,
		"hot set floor: a range must be this % of the footprint's mean access density (0 = fill FMem with any range with accesses)");
TIER_UINT_PARAM(merge_epochs, tier_merge_epochs, 0, HRC_MAX_MERGE_EPOCHS,
		"tau_merge (0 = never merge)");
TIER_UINT_PARAM(max_ranges, tier_max_ranges, HRC_MIN_RANGES, 65536,
		"range bound per target (applies to new targets)");
TIER_UINT_PARAM(half_split, tier_half_split, 0, 1,
		"also split a range whose halves differ by alpha");
TIER_UINT_PARAM(edge_split, tier_edge_split, 0, 1,
		"also split a range next to an alpha-times denser one");
TIER_UINT_PARAM(scan_interval_ms, tier_scan_interval_ms, 20, 60000,
		"accessed-bit source: scan cycle (ms)");
TIER_UINT_PARAM(abit_min_window_ms, tier_abit_min_window_ms, 1, 60000,
		"accessed-bit source: shortest clear-to-check window (ms)");
TIER_UINT_PARAM(abit_young_lo_pct, tier_abit_young_lo_pct, 0, 100,
		"accessed-bit source: widen the window below this young %");
TIER_UINT_PARAM(abit_young_hi_pct, tier_abit_young_hi_pct, 1, 100,
		"accessed-bit source: narrow the window above this young %");
TIER_UINT_PARAM(abit_tlb_flush, tier_abit_tlb_flush, 0, 2,
		"accessed-bit source: flush the target's CPUs' TLBs after arming: 0 never (as DAMON), 1 every cycle, 2 only after a cycle that saw no young sample; 1 and 2 also flush after each batch of huge (THP) clears");
TIER_UINT_PARAM(abit_samples, tier_abit_samples, 1, 4096,
		"accessed-bit source: sample pages per range and cycle");
TIER_UINT_PARAM(abit_huge_subwindows, tier_abit_huge_subwindows, 0, 64,
		"accessed-bit source: short sub-windows in which a huge (THP) entry is re-checked, its weight being the fraction found young (0 = one check, as a base page)");
TIER_UINT_PARAM(abit_huge_tty_us, tier_abit_huge_tty_us, 0, 100000,
		"accessed-bit source: a huge (THP) entry is cleared once and polled until young again, up to this long (us), and weighs by that time (0 = one check, as a base page; abit_huge_subwindows > 0 takes precedence)");
TIER_UINT_PARAM(abit_huge_budget_permille, tier_abit_huge_budget_permille, 1, 1000,
		"accessed-bit source: time spent polling huge entries per arming, in 1/1000 of the scan interval");
TIER_UINT_PARAM(abit_max_level, tier_abit_max_level, 0, 8,
		"accessed-bit source: back off up to 2^N x the scan interval while stable");
TIER_UINT_PARAM(resident_ms, tier_resident_ms, 100, 600000,
		"accessed-bit source: read-only residency walk period (ms, times the back-off)");
TIER_UINT_PARAM(fmem_capacity_mb, tier_fmem_capacity_mb, 0, 1U << 30,
		"FMem capacity for the hot sets (MiB; 0 = the node above its watermarks, minus the balloon)");
TIER_UINT_PARAM(auto_rss_mb, tier_auto_rss_mb, 0, 1U << 30,
		"manage every process whose RSS reaches this (MiB; 0 = off)");
TIER_UINT_PARAM(pebs_ldlat_ns, tier_pebs_ldlat, 1, 100000,
		"PEBS load-latency threshold (ns)");
TIER_UINT_PARAM(pebs_load_period, tier_pebs_load_period, 1, 1U << 30,
		"PEBS load-latency sample period");
TIER_UINT_PARAM(pebs_store_period, tier_pebs_store_period, 1, 1U << 30,
		"PEBS retired-stores sample period");

const char * const tier_req_names[] = { "auto", "pebs", "abit" };
const char * const tier_src_names[] = { "none", "abit", "pebs", "user" };
int tier_sampler = TIER_REQ_AUTO;

static int tier_parse_sampler(const char *val)
{
	int i;

	for (i = 0; i < ARRAY_SIZE(tier_req_names); i++)
		if (sysfs_streq(val, tier_req_names[i]))
			return i;
	return -EINVAL;
}

bool tier_pebs_ok;
bool tier_pebs_probed;	/* tier_pebs_ok is meaningful */

/*
 * The one validation of a sampler request, for the module parameter (at
 * load and at run time) and the sysfs file alike: "pebs" needs a PEBS
 * PMU.  At load the parameter is set before tier_init() probes, so the
 * check is repeated there (tier_init() fails with -ENODEV).
 */
int tier_sampler_check(const char *val)
{
	int r = tier_parse_sampler(val);

	if (r == TIER_REQ_PEBS && tier_pebs_probed && !tier_pebs_ok)
		return -ENODEV;
	return r;
}

static int tier_set_sampler(const char *val, const struct kernel_param *kp)
{
	int r = tier_sampler_check(val);

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

/* ---- module init / exit ---- */

static int __init tier_init(void)
{
	int ret;

	ret = tier_detect_nodes();
	if (ret)
		return ret;
	tier_pebs_ok = !tier_pebs_probe(tier_pebs_why, sizeof(tier_pebs_why));
	tier_pebs_probed = true;
	if (tier_sampler == TIER_REQ_PEBS && !tier_pebs_ok) {
		pr_err("sampler=pebs refused: PEBS %s\n", tier_pebs_why);
		return -ENODEV;
	}

	ret = tier_memory_watch();
	if (ret)
		return ret;
	tier_root = kobject_create_and_add("tiering", kernel_kobj);
	if (!tier_root) {
		ret = -ENOMEM;
		goto err_watch;
	}
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
err_watch:
	tier_memory_unwatch();
	return ret;
}

static void __exit tier_exit(void)
{
	u32 i;

	tier_memory_unwatch();
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
