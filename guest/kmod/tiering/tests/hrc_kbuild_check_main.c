// SPDX-License-Identifier: GPL-2.0
/*
 * BUILD CHECK ONLY - not a feature.  Lets kbuild compile and link the
 * range classifier core with the kernel's flags and -Werror (see
 * ../Kbuild, HRC_KBUILD_CHECK).  Loading it just runs a tiny smoke test.
 */
#include <linux/module.h>
#include <linux/mm.h>
#include <linux/slab.h>
#include "../range_classifier.h"

static int __init hrc_kbuild_check_init(void)
{
	struct hrc_interval iv[2], pro[4], dem[4];
	struct hrc_selection sel = {
		.promo = pro, .promo_max = 4, .demo = dem, .demo_max = 4,
	};
	struct hrc_params p;
	struct hrc *c;
	int n, ret = -ENOMEM;

	hrc_default_params(&p);
	p.nr_cpus = num_online_cpus();
	n = hrc_default_layout(0x555555556000ULL, 0x7ffff7fff000ULL,
			       (u64)totalram_pages() << PAGE_SHIFT, iv);
	if (n < 0)
		return n;
	c = kzalloc(sizeof(*c), GFP_KERNEL);
	if (!c)
		return -ENOMEM;
	c->ranges = kvcalloc(p.max_ranges, sizeof(*c->ranges), GFP_KERNEL);
	c->order = kvcalloc(p.max_ranges, sizeof(*c->order), GFP_KERNEL);
	if (!c->ranges || !c->order)
		goto out;
	ret = hrc_init(c, c->ranges, c->order, p.max_ranges, &p, iv, n);
	if (ret)
		goto out;
	hrc_record(c, iv[0].start);
	hrc_epoch(c);
	hrc_select(c, 512, &sel);
	ret = hrc_validate(c) ?: hrc_set_params(c, &p);
	pr_info("hrc_kbuild_check: ret %d ranges %u find %d\n", ret, c->nr,
		hrc_find(c, iv[0].start));
out:
	kvfree(c->ranges);
	kvfree(c->order);
	kfree(c);
	return ret;
}

static void __exit hrc_kbuild_check_exit(void)
{
}

module_init(hrc_kbuild_check_init);
module_exit(hrc_kbuild_check_exit);
MODULE_DESCRIPTION("Build check of the range classifier core (not a feature)");
MODULE_LICENSE("GPL");
