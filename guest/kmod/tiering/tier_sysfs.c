// SPDX-License-Identifier: GPL-2.0
/*
 * Guest tiered-memory manager: sysfs (/sys/kernel/tiering, DAMON-style):
 *   sampler  pebs  auto_cgroup  fmem_node  smem_node  fmem_capacity_pages
 *   fmem_pfn_span
 *   stats
 *   targets/nr_targets
 *   targets/<i>/{pid,state,source,sample_rate,stats,relocated}
 *   targets/<i>/{ranges,promote,demote}   (tier_lists.c)
 *   targets/<i>/samples_in, source store  (tier_user.c)
 * Every store validates its input and answers with an errno.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/kobject.h>
#include <linux/sysfs.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/cgroup.h>
#include <linux/sched.h>
#include "tier.h"

struct kobject *tier_root, *tier_targets_kobj;

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

/* "user": the agent feeds samples_in; "kernel": the module's source. */
static ssize_t source_store(struct kobject *k, struct kobj_attribute *a,
			    const char *buf, size_t count)
{
	int ret = tier_user_set_source(to_target(k), buf);

	return ret ? ret : count;
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
	/* where the accessed-bit source's time goes (ns), and its back-off */
	len += sysfs_emit_at(buf, len,
		"arm_ns %llu\ncheck_ns %llu\nresident_ns %llu\nflush_ns %llu\n"
		"resident_walks %llu\nflushes %llu\nscan_level %u\n"
		"stable_epochs %llu\nepoch_period_ms %llu\n",
		t->arm_ns, t->check_ns, t->resident_ns, t->flush_ns,
		t->nr_resident_walks, t->nr_flushes, t->scan_level,
		t->nr_stable_epochs, t->epoch_period_ns / NSEC_PER_MSEC);
	/* huge (THP) entries: last check's sub-windows, and their cost */
	len += sysfs_emit_at(buf, len,
		"abit_huge %llu\nabit_huge_young %llu\nhuge_window_us %u\n"
		"huge_probe_ns %llu\nhuge_checks %llu\nhuge_ns %llu\n",
		t->abit_huge, t->abit_huge_young, t->huge_window_us,
		t->huge_probe_ns, t->nr_huge_checks, t->huge_ns);
	/* huge entries' time-to-young: last arming, and all so far (log2 us) */
	len += sysfs_emit_at(buf, len,
		"huge_slice_us %u\nhuge_in_slice %llu\nhuge_tty_floor_ns %llu\n"
		"huge_rate_ref_ns %llu\nhuge_flushes %llu\nhuge_flush_ns %llu\n"
		"huge_tty_hist",
		t->huge_slice_us, t->abit_huge_in_slice, t->huge_tty_floor_ns,
		t->huge_rate_ref_ns, t->nr_huge_flushes, t->huge_flush_ns);
	for (i = 0; i < TIER_ABIT_TTY_HIST; i++)
		len += sysfs_emit_at(buf, len, " %llu", t->huge_tty_hist[i]);
	/* what the rate estimate saw, and where the recorded weight came from */
	len += sysfs_emit_at(buf, len,
		"\nhuge_obs_early %llu\nhuge_obs_timed %llu\nhuge_obs_none %llu\n"
		"abit_base_recorded %llu\nabit_huge_recorded %llu\n"
		"huge_tau_q %llu %llu %llu %llu %llu\n",
		t->huge_obs[TIER_RATE_EARLY], t->huge_obs[TIER_RATE_TIMED],
		t->huge_obs[TIER_RATE_NONE], t->base_recorded,
		t->huge_recorded, t->huge_tau_q[0], t->huge_tau_q[1],
		t->huge_tau_q[2], t->huge_tau_q[3], t->huge_tau_q[4]);
	for (i = 0; i < TIER_NR_VERDICTS; i++)
		len += sysfs_emit_at(buf, len, "pebs_%s %llu\n", vnames[i],
				     tier_counter_read(&t->verdicts[i]));
	len += sysfs_emit_at(buf, len, "pebs_ring_overwritten %llu\n",
			     t->ring_mem ?
			     tier_counter_read(&t->ring.overwritten) : 0);
	/* the user source (tier_user.c) and the span its filter applies */
	len += sysfs_emit_at(buf, len,
		"user_batches %llu\nuser_accepted %llu\nuser_dropped %llu\n"
		"span_lo 0x%llx\nspan_hi 0x%llx\n",
		t->user_batches, t->user_accepted, t->user_dropped,
		t->filter.lo, t->filter.hi);
	mutex_unlock(&tier_lock);
	return len;
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
static struct kobj_attribute tier_attr_source = __ATTR_RW_MODE(source, 0644);
static struct kobj_attribute tier_attr_sample_rate = __ATTR_RO(sample_rate);
static struct kobj_attribute tier_attr_stats = __ATTR_RO(stats);
static struct kobj_attribute tier_attr_relocated =
	__ATTR_RW_MODE(relocated, 0600);

static struct attribute *tier_target_attrs[] = {
	&tier_attr_pid.attr, &tier_attr_state.attr, &tier_attr_source.attr,
	&tier_attr_sample_rate.attr, &tier_attr_stats.attr,
	&tier_attr_relocated.attr, NULL,
};

static const struct attribute_group tier_target_group = {
	.attrs = tier_target_attrs,
};

static const struct attribute_group *tier_target_groups[] = {
	&tier_target_group, &tier_list_group, &tier_user_group, NULL,
};

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
struct tier_target *tier_add_slot(void)
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

const struct attribute_group tier_targets_group = {
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
	int r = tier_sampler_check(buf);

	if (r < 0)
		return r;
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
	char path[TIER_CGRP_PATH_MAX];
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

/* "start end exact": the PFNs counted as FMem (follows memory hotplug) */
static ssize_t fmem_pfn_span_show(struct kobject *k, struct kobj_attribute *a,
				  char *buf)
{
	return sysfs_emit(buf, "%lu %lu %d\n", READ_ONCE(tier_fast_span.start),
			  READ_ONCE(tier_fast_span.end),
			  READ_ONCE(tier_fast_span.exact));
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
		"fmem_capacity_pages %llu\npebs %s\n"
		"fmem_samples %llu\nsmem_samples %llu\n",
		wpid, cpu_ns, tier_worker_busy_ns, tier_nr_targets, running,
		samples, rate, tier_nr_epochs, tier_nr_scans, tier_fmem_node,
		tier_smem_node, tier_fmem_capacity_pages(),
		tier_pebs_ok ? "available" : "unavailable",
		tier_fmem_samples, tier_smem_samples);
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
static struct kobj_attribute tier_attr_fmem_pfn_span = __ATTR_RO(fmem_pfn_span);
static struct kobj_attribute tier_attr_gstats =
	__ATTR(stats, 0444, global_stats_show, NULL);

static struct attribute *tier_root_attrs[] = {
	&tier_attr_sampler.attr, &tier_attr_pebs.attr,
	&tier_attr_auto_cgroup.attr,
	&tier_attr_fmem_node.attr, &tier_attr_smem_node.attr,
	&tier_attr_fmem_capacity_pages.attr, &tier_attr_fmem_pfn_span.attr,
	&tier_attr_gstats.attr, NULL,
};

const struct attribute_group tier_root_group = {
	.attrs = tier_root_attrs,
};

