// SPDX-License-Identifier: GPL-2.0
/*
 * The user source: access samples that the agent collects from user-space
 * perf events (guest/agent/sampler.c: per-thread events with an mmap'd
 * ring buffer, which keeps large PEBS and every record; or the software
 * page-fault event where there is no PMU) and writes to
 * targets/<i>/samples_in.  See README.md, "PEBS from user space".
 *
 *   targets/<i>/source      "user": the agent feeds this target (the kernel
 *                           sources stop); "kernel": back to the module's
 *                           own choice (sampler file)
 *   targets/<i>/samples_in  write-only, root: little-endian u64 user
 *                           virtual addresses, at most one page a write
 *
 * The writer is trusted with nothing: each address goes through the same
 * filter as a kernel PEBS sample (tier_filter_addr(): the target's span,
 * not its text, a user address) and into the classifier with the same
 * call (hrc_record()); the others are counted as dropped.  The writer is
 * in process context and may take tier_lock, so the samples go straight
 * into the classifier rather than through the lossy NMI ring.
 */
#include <linux/kobject.h>
#include <linux/sysfs.h>
#include <linux/string.h>
#include <linux/sched/task.h>
#include <linux/ktime.h>
#include "tier.h"

void tier_user_clear_stats(struct tier_target *t)
{
	t->user_batches = 0;
	t->user_accepted = 0;
	t->user_dropped = 0;
}

/* Back to the module's own source, as tier_target_start() picks it. */
static int tier_user_to_kernel(struct tier_target *t)
{
	int req = READ_ONCE(tier_sampler), ret = 0;
	struct task_struct *task;

	task = get_pid_task(t->pid, PIDTYPE_PID);
	if (!task)
		return -ESRCH;
	t->source = TIER_SRC_ABIT;
	if (req != TIER_REQ_ABIT && tier_pebs_ok) {
		ret = tier_pebs_start(t, task);
		if (!ret)
			t->source = TIER_SRC_PEBS;
		else if (req != TIER_REQ_PEBS)
			ret = 0;	/* auto: accessed bits then */
	}
	put_task_struct(task);
	t->abit_armed = false;
	t->scan_level = 0;
	t->next_scan_ns = ktime_get_ns();
	t->next_resident_ns = t->next_scan_ns;
	return ret;
}

/**
 * tier_user_set_source() - the store of targets/<i>/source.
 * @t:		the target.
 * @buf:	"user" or "kernel".
 *
 * Return: 0, -EINVAL for another word, -ESRCH if the target is not
 * running, or the error of the kernel source's start (it then samples
 * with accessed bits).
 */
int tier_user_set_source(struct tier_target *t, const char *buf)
{
	bool user;
	int ret = 0;

	if (sysfs_streq(buf, "user"))
		user = true;
	else if (sysfs_streq(buf, "kernel"))
		user = false;
	else
		return -EINVAL;
	mutex_lock(&tier_lock);
	if (t->state != TIER_ST_RUNNING) {
		ret = -ESRCH;
	} else if (user && t->source != TIER_SRC_USER) {
		if (t->source == TIER_SRC_PEBS)
			tier_pebs_stop(t);
		/* bits an armed cycle cleared stay clear: harmless */
		t->abit_armed = false;
		/* residency walk at its base period (tier_core.c) */
		t->scan_level = 0;
		t->next_resident_ns = ktime_get_ns();
		t->source = TIER_SRC_USER;
	} else if (!user && t->source == TIER_SRC_USER) {
		ret = tier_user_to_kernel(t);
	}
	if (t->state == TIER_ST_RUNNING)
		t->last_source = t->source;
	/* under the lock: unload drops the worker's reference under it */
	if (tier_worker)
		wake_up_process(tier_worker);
	mutex_unlock(&tier_lock);
	return ret;
}

static ssize_t samples_in_write(struct file *f, struct kobject *kobj,
				struct bin_attribute *a, char *buf, loff_t off,
				size_t count)
{
	struct tier_target *t = container_of(kobj, struct tier_target, kobj);
	size_t n = count / sizeof(u64), i, ok = 0;
	ssize_t ret = count;

	if (!count || count % sizeof(u64))
		return -EINVAL;
	if (n > TIER_USER_BATCH_MAX)
		return -E2BIG;
	mutex_lock(&tier_lock);
	if (t->state != TIER_ST_RUNNING || !t->ranges) {
		ret = -ESRCH;
		goto out;
	}
	if (t->source != TIER_SRC_USER) {
		ret = -EBUSY;	/* write "user" to source first */
		goto out;
	}
	for (i = 0; i < n; i++) {
		u64 addr;

		memcpy(&addr, buf + i * sizeof(u64), sizeof(addr));
		addr = le64_to_cpu((__force __le64)addr);
		/* inside the hull but in a gap between ranges: not recorded */
		if (tier_filter_addr(&t->filter, addr) == TIER_SAMPLE_OK &&
		    hrc_record(&t->hrc, addr))
			ok++;
	}
	t->user_batches++;
	t->user_accepted += ok;
	t->user_dropped += n - ok;
	t->nr_samples += ok;
	t->epoch_samples += ok;
out:
	mutex_unlock(&tier_lock);
	return ret;
}

static struct bin_attribute tier_bin_samples_in = {
	.attr = { .name = "samples_in", .mode = 0200 },
	.write = samples_in_write,
};

static struct bin_attribute *tier_user_bin_attrs[] = {
	&tier_bin_samples_in, NULL,
};

const struct attribute_group tier_user_group = {
	.bin_attrs = tier_user_bin_attrs,
};
