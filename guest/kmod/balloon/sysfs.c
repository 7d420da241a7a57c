// SPDX-License-Identifier: GPL-2.0
/*
 * Demeter double balloon: sysfs view, one value per file.
 *
 *   /sys/kernel/demeter_balloon/{hetero_mem,deflate_on_oom,stats_vq,stats_sent,
 *        guest_reports}
 *   /sys/kernel/demeter_balloon/guest_report   (0200, write-only)
 *   /sys/kernel/demeter_balloon/{fmem,smem}/{node,active,size_pages,
 *        target_pages,requested_pages,alloc_failures,oom_freed_pages,
 *        migrated_pages}
 *
 * Page counts are in 4 KiB units, as on the wire.  The host owns the
 * targets, so nothing about the balloon is writable; the one writable file,
 * guest_report, takes "TAG VALUE" lines that the driver forwards to the
 * host in its stats buffers (stats.c).  Read-only files are 0400 (root
 * only, like DAMON's 0600 minus write).
 */
#include <linux/kobject.h>
#include <linux/sysfs.h>
#include <linux/slab.h>

#include "demeter_balloon.h"

struct dmb_tier_kobj {
	struct kobject kobj;
	struct dmb_tier *t;
};

struct dmb_top_kobj {
	struct kobject kobj;
	struct dmb_dev *dmb;
	struct dmb_tier_kobj *tier[DMB_NR_TIERS];
};

/* One show function and attribute per field, generated from one line. */
#define DMB_TIER_ATTR(_name, _fmt, _expr)				\
static ssize_t tier_##_name##_show(struct kobject *kobj,		\
				   struct kobj_attribute *attr, char *buf) \
{									\
	struct dmb_tier *t =						\
		container_of(kobj, struct dmb_tier_kobj, kobj)->t;	\
	return sysfs_emit(buf, _fmt "\n", _expr);			\
}									\
static struct kobj_attribute tier_##_name##_attr =			\
	__ATTR(_name, 0400, tier_##_name##_show, NULL)

DMB_TIER_ATTR(node, "%d", t->nid);
DMB_TIER_ATTR(active, "%d", t->active ? 1 : 0);
DMB_TIER_ATTR(size_pages, "%u", READ_ONCE(t->num_pages));
DMB_TIER_ATTR(target_pages, "%u", READ_ONCE(t->target));
DMB_TIER_ATTR(requested_pages, "%u", READ_ONCE(t->host_target));
DMB_TIER_ATTR(alloc_failures, "%lu", READ_ONCE(t->nr_alloc_fail));
DMB_TIER_ATTR(oom_freed_pages, "%lu", READ_ONCE(t->nr_oom_freed));
DMB_TIER_ATTR(migrated_pages, "%lu", READ_ONCE(t->nr_migrated));

static struct attribute *dmb_tier_attrs[] = {
	&tier_node_attr.attr,
	&tier_active_attr.attr,
	&tier_size_pages_attr.attr,
	&tier_target_pages_attr.attr,
	&tier_requested_pages_attr.attr,
	&tier_alloc_failures_attr.attr,
	&tier_oom_freed_pages_attr.attr,
	&tier_migrated_pages_attr.attr,
	NULL,
};
ATTRIBUTE_GROUPS(dmb_tier);

#define DMB_TOP_ATTR(_name, _fmt, _expr)				\
static ssize_t top_##_name##_show(struct kobject *kobj,		\
				  struct kobj_attribute *attr, char *buf) \
{									\
	struct dmb_dev *dmb =						\
		container_of(kobj, struct dmb_top_kobj, kobj)->dmb;	\
	return sysfs_emit(buf, _fmt "\n", _expr);			\
}									\
static struct kobj_attribute top_##_name##_attr =			\
	__ATTR(_name, 0400, top_##_name##_show, NULL)

DMB_TOP_ATTR(hetero_mem, "%d", dmb->hetero ? 1 : 0);
DMB_TOP_ATTR(deflate_on_oom, "%d", dmb->deflate_on_oom ? 1 : 0);
DMB_TOP_ATTR(stats_vq, "%d", dmb->stats_vq ? 1 : 0);
DMB_TOP_ATTR(stats_sent, "%lu", READ_ONCE(dmb->nr_stats_sent));
DMB_TOP_ATTR(guest_reports, "%lu", READ_ONCE(dmb->nr_guest_reports));

static ssize_t top_guest_report_store(struct kobject *kobj,
				      struct kobj_attribute *attr,
				      const char *buf, size_t count)
{
	struct dmb_dev *dmb =
		container_of(kobj, struct dmb_top_kobj, kobj)->dmb;
	int err = dmb_guest_report(dmb, buf, count);

	return err ? err : count;
}
static struct kobj_attribute top_guest_report_attr =
	__ATTR(guest_report, 0200, NULL, top_guest_report_store);

static struct attribute *dmb_top_attrs[] = {
	&top_hetero_mem_attr.attr,
	&top_deflate_on_oom_attr.attr,
	&top_stats_vq_attr.attr,
	&top_stats_sent_attr.attr,
	&top_guest_reports_attr.attr,
	&top_guest_report_attr.attr,
	NULL,
};
ATTRIBUTE_GROUPS(dmb_top);

static void dmb_tier_release(struct kobject *kobj)
{
	kfree(container_of(kobj, struct dmb_tier_kobj, kobj));
}

static const struct kobj_type dmb_tier_ktype = {
	.release = dmb_tier_release,
	.sysfs_ops = &kobj_sysfs_ops,
	.default_groups = dmb_tier_groups,
};

static void dmb_top_release(struct kobject *kobj)
{
	kfree(container_of(kobj, struct dmb_top_kobj, kobj));
}

static const struct kobj_type dmb_top_ktype = {
	.release = dmb_top_release,
	.sysfs_ops = &kobj_sysfs_ops,
	.default_groups = dmb_top_groups,
};

static void dmb_top_put(struct dmb_top_kobj *top)
{
	int i;

	for (i = 0; i < DMB_NR_TIERS; i++) {
		if (top->tier[i]) {
			kobject_del(&top->tier[i]->kobj);
			kobject_put(&top->tier[i]->kobj);
		}
	}
	kobject_del(&top->kobj);
	kobject_put(&top->kobj);
}

int dmb_sysfs_init(struct dmb_dev *dmb)
{
	struct dmb_top_kobj *top;
	int i, err;

	top = kzalloc(sizeof(*top), GFP_KERNEL);
	if (!top)
		return -ENOMEM;
	top->dmb = dmb;
	err = kobject_init_and_add(&top->kobj, &dmb_top_ktype, kernel_kobj,
				   DMB_NAME);
	if (err) {
		kobject_put(&top->kobj);
		return err;
	}

	for (i = 0; i < DMB_NR_TIERS; i++) {
		struct dmb_tier_kobj *tk = kzalloc(sizeof(*tk), GFP_KERNEL);

		if (!tk) {
			err = -ENOMEM;
			goto fail;
		}
		tk->t = &dmb->tier[i];
		err = kobject_init_and_add(&tk->kobj, &dmb_tier_ktype,
					   &top->kobj, "%s", dmb->tier[i].name);
		if (err) {
			kobject_put(&tk->kobj);
			goto fail;
		}
		top->tier[i] = tk;
	}
	dmb->kobj = &top->kobj;
	return 0;

fail:
	dmb_top_put(top);
	return err;
}

/*
 * Remove the files; kernfs waits for readers in progress, so no show
 * function runs on @dmb after this returns.
 */
void dmb_sysfs_exit(struct dmb_dev *dmb)
{
	if (!dmb->kobj)
		return;
	dmb_top_put(container_of(dmb->kobj, struct dmb_top_kobj, kobj));
	dmb->kobj = NULL;
}
