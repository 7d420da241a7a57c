// SPDX-License-Identifier: GPL-2.0
/*
 * Demeter double balloon: built-in self-check (insmod ... selftest=1).
 *
 * Runs without a device and without user space: the pure policy in
 * tier.c on hand-built fixtures, then strict per-node allocation on each
 * real tier node (the allocator path both balloons use).  Results go to
 * the kernel log as "selftest: ok|not ok - <name>" and a closing
 * "selftest: N passed, M failed".  (Debian's 6.12 kernel has no KUnit,
 * hence a load-time check.)
 */
#include <linux/kernel.h>
#include <linux/delay.h>
#include <linux/mm.h>
#include <linux/numa.h>
#include <linux/gfp.h>
#include <linux/list.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/memory_hotplug.h>
#include <linux/virtio.h>
#include <linux/virtio_config.h>

#include "demeter_balloon.h"

struct dmb_st {
	int passed;
	int failed;
};

static void dmb_check(struct dmb_st *st, bool ok, const char *name)
{
	if (ok)
		st->passed++;
	else
		st->failed++;
	pr_info(DMB_NAME ": selftest: %s - %s\n", ok ? "ok" : "not ok", name);
}

struct dmb_pick_case {
	const char *name;
	struct dmb_node_info nodes[4];
	int nr;
	int fmem;
	int smem;
};

static const struct dmb_pick_case dmb_pick_cases[] = {
	/* The Demeter layout: CPUs + memory on 0, memory only on 1. */
	{ "pick: cpu node 0, memory-only node 1",
	  { { 0, true, true }, { 1, false, true } }, 2, 0, 1 },
	/* Memory-only node listed first: still FMem = the CPU node. */
	{ "pick: memory-only node before the cpu node",
	  { { 0, false, true }, { 1, true, true } }, 2, 1, 0 },
	/* One node: no SMem tier. */
	{ "pick: single node",
	  { { 0, true, true } }, 1, 0, NUMA_NO_NODE },
	/* Two CPU nodes: no memory-only node, no SMem tier. */
	{ "pick: two cpu nodes",
	  { { 0, true, true }, { 1, true, true } }, 2, 0, NUMA_NO_NODE },
	/* CPUs only on a memoryless node: FMem falls back to first memory. */
	{ "pick: cpus on a memoryless node",
	  { { 0, true, false }, { 1, false, true }, { 2, false, true } },
	  3, 1, 2 },
	/* The first memory-only node wins; sparse ids are kept. */
	{ "pick: two memory-only nodes",
	  { { 0, true, true }, { 3, false, true }, { 5, false, true } },
	  3, 0, 3 },
	{ "pick: no nodes", { }, 0, NUMA_NO_NODE, NUMA_NO_NODE },
};

static void dmb_test_pick(struct dmb_st *st)
{
	int i, f, s;

	for (i = 0; i < ARRAY_SIZE(dmb_pick_cases); i++) {
		const struct dmb_pick_case *c = &dmb_pick_cases[i];

		dmb_pick_tiers(c->nodes, c->nr, &f, &s);
		dmb_check(st, f == c->fmem && s == c->smem, c->name);
	}
}

static void dmb_test_policy(struct dmb_st *st)
{
	enum dmb_tier_id order[DMB_NR_TIERS];
	int n;

	dmb_check(st, dmb_clamp_target(100, 50) == 50,
		  "clamp: target above the node is cut to the node");
	dmb_check(st, dmb_clamp_target(10, 50) == 10,
		  "clamp: target below the node is kept");
	dmb_check(st, dmb_clamp_target(U32_MAX, 0) == 0,
		  "clamp: absent node means no balloon");

	dmb_check(st, dmb_step(1000, 0, 256) == 256,
		  "step: inflate in batches of 256");
	dmb_check(st, dmb_step(0, 1000, 256) == -256,
		  "step: deflate in batches of 256");
	dmb_check(st, dmb_step(300, 256, 256) == 44,
		  "step: last inflate batch is the remainder");
	dmb_check(st, dmb_step(U32_MAX, 0, 256) == 256,
		  "step: huge target does not overflow");
	dmb_check(st, dmb_step(7, 7, 256) == 0, "step: at target");

	n = dmb_oom_order(true, 10, 10, order);
	dmb_check(st, n == 2 && order[0] == DMB_SMEM && order[1] == DMB_FMEM,
		  "oom: SMem balloon first, then FMem");
	n = dmb_oom_order(true, 10, 0, order);
	dmb_check(st, n == 1 && order[0] == DMB_FMEM,
		  "oom: empty SMem balloon is skipped");
	n = dmb_oom_order(false, 10, 10, order);
	dmb_check(st, n == 1 && order[0] == DMB_FMEM,
		  "oom: without HETERO_MEM only FMem");
	n = dmb_oom_order(true, 0, 0, order);
	dmb_check(st, n == 0, "oom: nothing to give back");
}

#define DMB_ST_PAGES 64

/* Allocate from @nid the way a balloon does; every page must be on @nid. */
static void dmb_test_alloc_node(struct dmb_st *st, const char *tier, int nid)
{
	LIST_HEAD(pages);
	struct page *page, *next;
	int got = 0, wrong = 0;
	char name[96];

	for (got = 0; got < DMB_ST_PAGES; got++) {
		page = dmb_alloc_on_node(nid);
		if (!page)
			break;
		if (page_to_nid(page) != nid)
			wrong++;
		list_add(&page->lru, &pages);
	}
	list_for_each_entry_safe(page, next, &pages, lru) {
		list_del(&page->lru);
		__free_page(page);
	}
	snprintf(name, sizeof(name),
		 "alloc: %d %s pages all from node %d (got %d, wrong %d)",
		 DMB_ST_PAGES, tier, nid, got, wrong);
	dmb_check(st, got == DMB_ST_PAGES && !wrong, name);
}

static void dmb_test_alloc(struct dmb_st *st)
{
	struct dmb_node_info *nodes;
	int nid, nr = 0, fmem, smem;

	dmb_check(st, !dmb_alloc_on_node(NUMA_NO_NODE),
		  "alloc: NUMA_NO_NODE is refused");
	dmb_check(st, !dmb_alloc_on_node(MAX_NUMNODES),
		  "alloc: out-of-range node is refused");
	dmb_check(st, dmb_node_pages_4k(-5) == 0,
		  "node pages: invalid node has none");

	nodes = kcalloc(num_node_state(N_MEMORY), sizeof(*nodes), GFP_KERNEL);
	if (!nodes) {
		dmb_check(st, false, "alloc: node table");
		return;
	}
	for_each_node_state(nid, N_MEMORY) {
		if (nr >= num_node_state(N_MEMORY))
			break;
		nodes[nr].nid = nid;
		nodes[nr].has_mem = true;
		nodes[nr].has_cpu = node_state(nid, N_CPU);
		nr++;
	}
	dmb_pick_tiers(nodes, nr, &fmem, &smem);
	kfree(nodes);

	pr_info(DMB_NAME ": selftest: this guest: FMem node %d, SMem node %d\n",
		fmem, smem);
	dmb_check(st, fmem != NUMA_NO_NODE, "tiers: an FMem node exists");
	if (fmem != NUMA_NO_NODE)
		dmb_test_alloc_node(st, "FMem", fmem);
	if (smem != NUMA_NO_NODE)
		dmb_test_alloc_node(st, "SMem", smem);
}

/*
 * A fake host behind struct dmb_tier_ops: it checks every PFN it gets
 * (valid, on the tier's node, batch size) and keeps its own count, so the
 * real inflate/deflate/OOM code can run on both tiers without a device,
 * including the SMem tier that QEMU's balloon cannot drive.
 */
struct dmb_fake {
	struct dmb_dev dmb;
	struct virtio_device vdev;
	u32 target[DMB_NR_TIERS];
	u32 actual[DMB_NR_TIERS];
	long held[DMB_NR_TIERS];
	unsigned long bad[DMB_NR_TIERS];
	unsigned long msgs[DMB_NR_TIERS];
};

static struct dmb_fake *to_fake(struct dmb_tier *t)
{
	return container_of(t->dmb, struct dmb_fake, dmb);
}

static int dmb_fake_tell(struct dmb_tier *t, bool inflate)
{
	struct dmb_fake *f = to_fake(t);
	unsigned int i;

	f->msgs[t->id]++;
	if (!t->num_pfns || t->num_pfns > DMB_PFNS_MAX)
		f->bad[t->id]++;
	for (i = 0; i < t->num_pfns; i++) {
		/* VERSION_1: the wire is little endian. */
		u32 pfn4k = le32_to_cpu((__force __le32)t->pfns[i]);
		struct page *page = pfn_to_online_page(pfn4k / DMB_PAGES_PER_PAGE);

		if (!page || page_to_nid(page) != t->nid)
			f->bad[t->id]++;
	}
	f->held[t->id] += inflate ? t->num_pfns : -(long)t->num_pfns;
	return 0;
}

static u32 dmb_fake_read_target(struct dmb_tier *t)
{
	return to_fake(t)->target[t->id];
}

static void dmb_fake_write_actual(struct dmb_tier *t, u32 actual)
{
	to_fake(t)->actual[t->id] = actual;
}

static const struct dmb_tier_ops dmb_fake_ops = {
	.tell = dmb_fake_tell,
	.read_target = dmb_fake_read_target,
	.write_actual = dmb_fake_write_actual,
};

/* Run the tier's work function synchronously until it is done. */
static void dmb_fake_settle(struct dmb_tier *t)
{
	unsigned long delay;
	int i;

	for (i = 0; i < 1000 && dmb_tier_balance(t, &delay); i++)
		if (delay)
			msleep(jiffies_to_msecs(delay));
}

static bool dmb_fake_all_on_node(struct dmb_tier *t)
{
	struct page *page;
	unsigned long flags;
	bool ok = true;

	spin_lock_irqsave(&t->bdi.pages_lock, flags);
	list_for_each_entry(page, &t->bdi.pages, lru)
		if (page_to_nid(page) != t->nid)
			ok = false;
	spin_unlock_irqrestore(&t->bdi.pages_lock, flags);
	return ok;
}

static bool dmb_fake_in_sync(struct dmb_fake *f, struct dmb_tier *t, u32 n)
{
	return t->num_pages == n && f->held[t->id] == n &&
	       f->actual[t->id] == n && !f->bad[t->id];
}

static void dmb_test_tier_path(struct dmb_st *st, struct dmb_fake *f,
			       enum dmb_tier_id id)
{
	struct dmb_tier *t = &f->dmb.tier[id];
	unsigned int freed;
	char name[128];

#define TIER_CHECK(cond, fmt, ...)					\
	do {								\
		snprintf(name, sizeof(name), "%s path (node %d): " fmt,	\
			 t->name, t->nid, ##__VA_ARGS__);		\
		dmb_check(st, cond, name);				\
	} while (0)

	f->target[id] = 1000;
	dmb_fake_settle(t);
	TIER_CHECK(dmb_fake_in_sync(f, t, 1000) && f->msgs[id] == 4,
		   "inflate 1000 pages in 4 batches (size %u, host %ld, actual %u, msgs %lu, bad %lu)",
		   t->num_pages, f->held[id], f->actual[id], f->msgs[id],
		   f->bad[id]);
	TIER_CHECK(dmb_fake_all_on_node(t), "every ballooned page is on the node");

	f->target[id] = 100;
	dmb_fake_settle(t);
	TIER_CHECK(dmb_fake_in_sync(f, t, 100), "deflate to 100 (size %u, host %ld)",
		   t->num_pages, f->held[id]);

	/* OOM asks for more than the 100 held. */
	freed = dmb_oom_release(&f->dmb, 256);
	TIER_CHECK(dmb_fake_in_sync(f, t, 0) && freed == 100 &&
		   t->nr_oom_freed == 100,
		   "OOM gives the balloon back (freed %u)", freed);
	dmb_fake_settle(t);
	TIER_CHECK(t->num_pages == 0, "no re-inflation after OOM (size %u)",
		   t->num_pages);

	WRITE_ONCE(t->oom_hold, false);	/* what a config change does */
	f->target[id] = 300;
	dmb_fake_settle(t);
	TIER_CHECK(dmb_fake_in_sync(f, t, 300), "re-inflate after a new target");
	dmb_deflate_all(t);
	TIER_CHECK(dmb_fake_in_sync(f, t, 0), "deflate-all empties it (host %ld)",
		   f->held[id]);
	f->target[id] = 0;
#undef TIER_CHECK
}

static void dmb_test_fake_host(struct dmb_st *st)
{
	struct dmb_fake *f;
	struct dmb_tier *fm, *sm;
	int fmem, smem;

	dmb_detect_tiers(&fmem, &smem);
	if (fmem == NUMA_NO_NODE)
		return;
	f = kzalloc(sizeof(*f), GFP_KERNEL);
	if (!f) {
		dmb_check(st, false, "fake host: allocation");
		return;
	}
	f->vdev.dev.init_name = "selftest";
	f->vdev.features = BIT_ULL(VIRTIO_F_VERSION_1);
	f->dmb.vdev = &f->vdev;
	f->dmb.ops = &dmb_fake_ops;
	f->dmb.stop = true;		/* never queue real work */
	f->dmb.hetero = smem != NUMA_NO_NODE;
	f->dmb.deflate_on_oom = false;	/* exercise managed-page accounting */
	spin_lock_init(&f->dmb.stop_lock);
	dmb_tier_init(&f->dmb, DMB_FMEM, fmem);
	dmb_tier_init(&f->dmb, DMB_SMEM, smem);
	fm = &f->dmb.tier[DMB_FMEM];
	sm = &f->dmb.tier[DMB_SMEM];
	fm->active = true;
	sm->active = f->dmb.hetero;

	dmb_test_tier_path(st, f, DMB_FMEM);
	if (sm->active) {
		dmb_test_tier_path(st, f, DMB_SMEM);

		/* Both inflated: OOM takes SMem first. */
		f->target[DMB_FMEM] = 100;
		f->target[DMB_SMEM] = 300;
		dmb_fake_settle(fm);
		dmb_fake_settle(sm);
		dmb_check(st, dmb_oom_release(&f->dmb, 256) == 256 &&
			  fm->num_pages == 100 && sm->num_pages == 44,
			  "OOM with both tiers inflated takes SMem first");
		dmb_deflate_all(fm);
		dmb_deflate_all(sm);
	}
	dmb_check(st, !f->held[DMB_FMEM] && !f->held[DMB_SMEM] &&
		  !fm->num_pages && !sm->num_pages,
		  "fake host: nothing left ballooned");
	kfree(f);
}

struct dmb_report_case {
	const char *in;
	int err;
	u32 mask;		/* expected on success */
	unsigned int idx;	/* ... and val[idx] == v */
	u64 v;
};

static const struct dmb_report_case dmb_report_cases[] = {
	{ "32768 5\n", 0, BIT(0), 0, 5 },
	{ "32799 18446744073709551615", 0, BIT(31), 31, U64_MAX },
	{ "32770 1\n32771 2\n32770 3\n", 0, BIT(2) | BIT(3), 2, 3 },
	{ "32768 1\n\n32769 0\n", 0, BIT(0) | BIT(1), 1, 0 },
	{ "", -EINVAL },
	{ "\n", -EINVAL },
	{ "32767 1\n", -EINVAL },			/* below the range */
	{ "32800 1\n", -EINVAL },			/* above the range */
	{ "65536 1\n", -EINVAL },			/* not a u16 */
	{ "0 1\n", -EINVAL },				/* a standard tag */
	{ "0x8000 1\n", -EINVAL },			/* decimal only */
	{ "32768 18446744073709551616\n", -EINVAL },	/* not a u64 */
	{ "32768 -1\n", -EINVAL },
	{ "32768 +1\n", -EINVAL },
	{ "32768  1\n", -EINVAL },			/* two spaces */
	{ "32768 1 2\n", -EINVAL },
	{ "32768\n", -EINVAL },
	{ "32768 \n", -EINVAL },
	{ " 32768 1\n", -EINVAL },
	{ "32768 1\r\n", -EINVAL },
	{ "32768 1\nbad\n", -EINVAL },		/* all or nothing */
};

static void dmb_test_guest_report(struct dmb_st *st)
{
	int i;

	for (i = 0; i < ARRAY_SIZE(dmb_report_cases); i++) {
		const struct dmb_report_case *c = &dmb_report_cases[i];
		u64 val[DMB_S_GUEST_NR] = { };
		u32 mask = 0;
		int err = dmb_parse_guest_report(c->in, strlen(c->in), val,
						 &mask);
		bool ok = err == c->err &&
			  (err || (mask == c->mask && val[c->idx] == c->v));

		if (!ok)
			pr_info(DMB_NAME ": selftest: guest_report case %d: err %d mask %#x\n",
				i, err, mask);
		dmb_check(st, ok, "guest_report parser");
	}
	/* An embedded NUL is not a terminator. */
	{
		static const char nul[] = { '3', '2', '7', '6', '8', ' ', '1',
					    '\0', '2' };
		u64 val[DMB_S_GUEST_NR];
		u32 mask;

		dmb_check(st, dmb_parse_guest_report(nul, sizeof(nul), val,
						     &mask) == -EINVAL,
			  "guest_report parser: embedded NUL");
	}
}

int dmb_selftest(void)
{
	struct dmb_st st = { };

	dmb_test_pick(&st);
	dmb_test_policy(&st);
	dmb_test_guest_report(&st);
	dmb_test_alloc(&st);
	dmb_test_fake_host(&st);
	pr_info(DMB_NAME ": selftest: %d passed, %d failed\n",
		st.passed, st.failed);
	return st.failed ? -EINVAL : 0;
}
