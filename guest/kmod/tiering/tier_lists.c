// SPDX-License-Identifier: GPL-2.0
/*
 * The list files of a target: ranges, promote, demote.
 *
 * Each can hold thousands of lines, more than the one page a sysfs text
 * attribute may return (they were cut at PAGE_SIZE), so they are binary
 * attributes of unbounded size, formatted whole on each read.  A reader
 * needs several read() calls (kernfs hands out a page at a time) and an
 * epoch may end in between: the first line is "epoch N" and the last
 * "end N"; a reader that sees different numbers read across an epoch
 * and reads again.
 *
 * Lines (hex start, hex end, then decimal):
 *   ranges:          start end nr_access birth [resident fast]
 *   promote, demote: start end nr_access [resident fast]
 * resident / fast are the range's present base pages and those on the
 * FMem node, as of the last accessed-bit pass; absent while unknown
 * (PEBS source, or no pass yet).
 */
#include <linux/kobject.h>
#include <linux/sysfs.h>
#include <linux/mm.h>
#include <linux/slab.h>
#include "tier.h"

enum tier_list { TIER_LIST_RANGES, TIER_LIST_PROMOTE, TIER_LIST_DEMOTE };

#define TIER_LINE_MAX	112	/* 2 x 16 hex + 4 x 20 decimal + spaces */

static size_t tier_line(char *p, size_t room, const struct hrc *c,
			const struct hrc_range *r, u64 start, u64 end,
			bool birth)
{
	size_t n;

	n = scnprintf(p, room, "%llx %llx %llu", start, end,
		      r ? r->nr_access : 0);
	if (birth)
		n += scnprintf(p + n, room - n, " %llu", r ? r->birth : 0);
	if (r && c->resident_known)
		n += scnprintf(p + n, room - n, " %llu %llu", r->nr_resident,
			       r->nr_fast);
	n += scnprintf(p + n, room - n, "\n");
	return n;
}

/* The whole file into a new buffer (tier_lock held). */
static char *tier_format(struct tier_target *t, enum tier_list which,
			 size_t *len)
{
	const struct hrc *c = &t->hrc;
	const struct hrc_interval *iv = which == TIER_LIST_PROMOTE ?
					t->promo : t->demo;
	u32 n = which == TIER_LIST_RANGES ? c->nr :
		which == TIER_LIST_PROMOTE ? t->nr_promo : t->nr_demo;
	size_t size = (size_t)(n + 2) * TIER_LINE_MAX, pos;
	char *buf;
	u32 i;

	if (!t->ranges)
		n = 0;		/* stopped: nothing to list */
	buf = kvmalloc(size, GFP_KERNEL);
	if (!buf)
		return NULL;
	pos = scnprintf(buf, size, "epoch %llu\n", t->sel_epoch);
	for (i = 0; i < n; i++) {
		const struct hrc_range *r;
		int k;

		if (which == TIER_LIST_RANGES) {
			r = &c->ranges[i];
			pos += tier_line(buf + pos, size - pos, c, r, r->start,
					 r->end, true);
			continue;
		}
		k = hrc_find(c, iv[i].start);
		r = k >= 0 ? &c->ranges[k] : NULL;
		pos += tier_line(buf + pos, size - pos, c, r, iv[i].start,
				 iv[i].end, false);
	}
	pos += scnprintf(buf + pos, size - pos, "end %llu\n", t->sel_epoch);
	*len = pos;
	return buf;
}

static ssize_t tier_list_read(struct kobject *kobj, enum tier_list which,
			      char *out, loff_t off, size_t count)
{
	struct tier_target *t = container_of(kobj, struct tier_target, kobj);
	size_t len = 0;
	ssize_t ret;
	char *buf;

	mutex_lock(&tier_lock);
	buf = tier_format(t, which, &len);
	mutex_unlock(&tier_lock);
	if (!buf)
		return -ENOMEM;
	ret = memory_read_from_buffer(out, count, &off, buf, len);
	kvfree(buf);
	return ret;
}

#define TIER_LIST_ATTR(_f, which)					\
static ssize_t _f##_read(struct file *f, struct kobject *kobj,	\
			   struct bin_attribute *a, char *out,		\
			   loff_t off, size_t count)			\
{									\
	return tier_list_read(kobj, which, out, off, count);		\
}									\
static struct bin_attribute tier_bin_##_f = {				\
	.attr = { .name = #_f, .mode = 0400 },			\
	.read = _f##_read,						\
}

TIER_LIST_ATTR(ranges, TIER_LIST_RANGES);
TIER_LIST_ATTR(promote, TIER_LIST_PROMOTE);
TIER_LIST_ATTR(demote, TIER_LIST_DEMOTE);

static struct bin_attribute *tier_list_bin_attrs[] = {
	&tier_bin_ranges, &tier_bin_promote, &tier_bin_demote, NULL,
};

const struct attribute_group tier_list_group = {
	.bin_attrs = tier_list_bin_attrs,
};
