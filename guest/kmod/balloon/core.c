// SPDX-License-Identifier: GPL-2.0
/*
 * Demeter double balloon: the virtio driver.
 *
 * Each tier (FMem = the node with CPUs, SMem = the memory-only node) is a
 * balloon of its own: its own queue pair, config target, page list, lock
 * and work item.  Both run the same code.  Without HETERO_MEM only the
 * FMem tier has queues and the driver behaves like the stock balloon.
 *
 * The stock virtio_balloon driver binds to the same device id: only one
 * of the two may be loaded (see README.md).
 */
#include <linux/module.h>
#include <linux/virtio.h>
#include <linux/virtio_config.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>
#include <linux/mm.h>
#include <linux/mmzone.h>
#include <linux/nodemask.h>
#include <linux/gfp.h>
#include <linux/oom.h>
#include <linux/delay.h>
#include <linux/atomic.h>
#include <linux/pci.h>
#include <uapi/linux/virtio_pci.h>

#include "demeter_balloon.h"
#include "dmb_compat.h"
#include "dmb_export.h"

static unsigned int oom_pages = 256;
module_param(oom_pages, uint, 0600);
MODULE_PARM_DESC(oom_pages, "4 KiB pages to give back per OOM event (max 65536)");

static bool selftest;
module_param(selftest, bool, 0400);
MODULE_PARM_DESC(selftest, "Run the built-in self-check at load (results in dmesg)");

#define DMB_OOM_PAGES_MAX 65536

/* One device at a time: the sysfs directory is global. */
static atomic_t dmb_bound = ATOMIC_INIT(0);

/* Kernel pages held per node still in the managed count (dmb_export.h). */
static atomic_long_t dmb_held_managed[MAX_NUMNODES];

static void dmb_account(struct dmb_tier *t, long kernel_pages)
{
	if (t->nid < 0 || t->nid >= MAX_NUMNODES)
		return;
	if (t->dmb->deflate_on_oom)
		atomic_long_add(kernel_pages, &dmb_held_managed[t->nid]);
}

/**
 * dmb_node_ballooned_managed_pages() - balloon pages of @nid that are
 * still counted in the zones' managed pages, in kernel pages.
 * @nid:	node id.
 *
 * With deflate_on_oom the driver leaves the managed count alone (as
 * virtio_balloon does) so that OOM can give the pages back; without it
 * the managed count already excludes them and this returns 0.  Either
 * way, the node's managed pages minus this is what the guest can use.
 */
unsigned long dmb_node_ballooned_managed_pages(int nid)
{
	long n;

	if (nid < 0 || nid >= MAX_NUMNODES)
		return 0;
	n = atomic_long_read(&dmb_held_managed[nid]);
	return n > 0 ? n : 0;
}
EXPORT_SYMBOL_GPL(dmb_node_ballooned_managed_pages);

static const char * const dmb_tier_names[DMB_NR_TIERS] = {
	[DMB_FMEM] = "fmem",
	[DMB_SMEM] = "smem",
};

/* ---- tiers and pages ---------------------------------------------------- */

/* Detect the FMem and SMem nodes from the current node states. */
void dmb_detect_tiers(int *fmem_nid, int *smem_nid)
{
	struct dmb_node_info *nodes;
	int nid, nr = 0;

	*fmem_nid = NUMA_NO_NODE;
	*smem_nid = NUMA_NO_NODE;
	nodes = kcalloc(num_node_state(N_MEMORY), sizeof(*nodes), GFP_KERNEL);
	if (!nodes)
		return;
	for_each_node_state(nid, N_MEMORY) {
		if (nr >= num_node_state(N_MEMORY))
			break;
		nodes[nr].nid = nid;
		nodes[nr].has_mem = true;
		nodes[nr].has_cpu = node_state(nid, N_CPU);
		nr++;
	}
	dmb_pick_tiers(nodes, nr, fmem_nid, smem_nid);
	kfree(nodes);
}

static bool dmb_node_valid(int nid)
{
	return nid >= 0 && nid < MAX_NUMNODES && node_online(nid) &&
	       node_state(nid, N_MEMORY);
}

/* 4 KiB pages present on @nid (0 for an invalid node). */
unsigned long dmb_node_pages_4k(int nid)
{
	if (!dmb_node_valid(nid))
		return 0;
	return node_present_pages(nid) * DMB_PAGES_PER_PAGE;
}

/*
 * One page strictly from @nid: __GFP_THISNODE forbids the fallback to
 * another node, __GFP_NORETRY makes a full node fail fast (the caller
 * backs off and retries later).
 */
struct page *dmb_alloc_on_node(int nid)
{
	struct page *page;

	if (!dmb_node_valid(nid))
		return NULL;
	page = alloc_pages_node(nid, balloon_mapping_gfp_mask() |
				__GFP_THISNODE | __GFP_NORETRY |
				__GFP_NOWARN | __GFP_NOMEMALLOC, 0);
	if (page && WARN_ON_ONCE(page_to_nid(page) != nid)) {
		__free_page(page);
		return NULL;
	}
	return page;
}

static u32 dmb_page_to_pfn4k(struct page *page)
{
	BUILD_BUG_ON(PAGE_SHIFT < VIRTIO_BALLOON_PFN_SHIFT);
	return page_to_pfn(page) * DMB_PAGES_PER_PAGE;
}

static void dmb_set_pfns(struct dmb_tier *t, __virtio32 *pfns,
			 struct page *page)
{
	u32 pfn = dmb_page_to_pfn4k(page);
	unsigned int i;

	for (i = 0; i < DMB_PAGES_PER_PAGE; i++)
		pfns[i] = cpu_to_virtio32(t->dmb->vdev, pfn + i);
}

/* ---- queues --------------------------------------------------------------- */

static void dmb_ack(struct virtqueue *vq)
{
	struct dmb_dev *dmb = vq->vdev->priv;
	int i;

	for (i = 0; i < DMB_NR_TIERS; i++) {
		struct dmb_tier *t = &dmb->tier[i];

		if (vq == t->inflate_vq || vq == t->deflate_vq)
			wake_up(&t->acked);
	}
}

/*
 * Send t->pfns[0..num_pfns) on the tier's queue and wait until the host
 * has used the buffer.  Called with t->lock held.  Returns -EIO if the
 * queue broke (device gone): the buffer then belongs to nobody.
 */
static int dmb_virtio_tell(struct dmb_tier *t, bool inflate)
{
	struct virtqueue *vq = inflate ? t->inflate_vq : t->deflate_vq;
	struct scatterlist sg;
	unsigned int len;
	int err;

	sg_init_one(&sg, t->pfns, sizeof(t->pfns[0]) * t->num_pfns);
	/* A single-entry buffer always fits in an otherwise empty queue. */
	err = virtqueue_add_outbuf(vq, &sg, 1, t, GFP_KERNEL);
	if (err) {
		dev_warn_ratelimited(&t->dmb->vdev->dev,
				     "%s: cannot queue %u PFNs: %d\n",
				     t->name, t->num_pfns, err);
		return err;
	}
	virtqueue_kick(vq);

	for (;;) {
		if (wait_event_timeout(t->acked, virtqueue_get_buf(vq, &len),
				       msecs_to_jiffies(DMB_ACK_POLL_MS)))
			return 0;
		if (virtqueue_is_broken(vq))
			return -EIO;
	}
}

/* ---- inflate / deflate ---------------------------------------------------- */

/*
 * Inflate up to @num 4 KiB pages from the tier's node.  Returns the number
 * of 4 KiB pages added; less than @num means the node ran out.
 */
static unsigned int dmb_inflate(struct dmb_tier *t, unsigned int num)
{
	struct dmb_dev *dmb = t->dmb;
	LIST_HEAD(pages);
	struct page *page;
	unsigned int want, got = 0, done;

	num = min_t(unsigned int, num, DMB_PFNS_MAX);
	want = num / DMB_PAGES_PER_PAGE;

	/* Allocate outside the lock: reclaim may migrate our own pages. */
	while (got < want) {
		page = dmb_alloc_on_node(t->nid);
		if (!page)
			break;
		balloon_page_push(&pages, page);
		got++;
	}

	mutex_lock(&t->lock);
	t->num_pfns = 0;
	while ((page = balloon_page_pop(&pages))) {
		balloon_page_enqueue(&t->bdi, page);
		dmb_set_pfns(t, t->pfns + t->num_pfns, page);
		t->num_pfns += DMB_PAGES_PER_PAGE;
		if (!dmb->deflate_on_oom)
			adjust_managed_page_count(page, -1);
	}
	WRITE_ONCE(t->num_pages, t->num_pages + t->num_pfns);
	dmb_account(t, t->num_pfns / DMB_PAGES_PER_PAGE);
	done = t->num_pfns;
	if (done)
		t->dmb->ops->tell(t, true);
	if (got < want) {
		t->nr_alloc_fail++;
		dev_info_ratelimited(&dmb->vdev->dev,
				     "%s: node %d out of free pages, %u of %u; retrying in %d ms\n",
				     t->name, t->nid, got, want,
				     DMB_RETRY_DELAY_MS);
	}
	mutex_unlock(&t->lock);
	return done;
}

/*
 * Deflate up to @num 4 KiB pages of the tier: tell the host first, then
 * free them (the order MUST_TELL_HOST requires; we always use it).
 * Returns the number of 4 KiB pages given back; 0 with a non-empty balloon
 * means every page is momentarily isolated by compaction.
 */
static unsigned int dmb_deflate(struct dmb_tier *t, unsigned int num)
{
	struct dmb_dev *dmb = t->dmb;
	LIST_HEAD(pages);
	struct page *page, *next;
	unsigned int done;

	mutex_lock(&t->lock);
	num = min3(num, (unsigned int)DMB_PFNS_MAX, t->num_pages);
	balloon_page_list_dequeue(&t->bdi, &pages, num / DMB_PAGES_PER_PAGE);

	t->num_pfns = 0;
	list_for_each_entry(page, &pages, lru) {
		dmb_set_pfns(t, t->pfns + t->num_pfns, page);
		t->num_pfns += DMB_PAGES_PER_PAGE;
	}
	WRITE_ONCE(t->num_pages, t->num_pages - t->num_pfns);
	dmb_account(t, -(long)(t->num_pfns / DMB_PAGES_PER_PAGE));
	done = t->num_pfns;
	if (done)
		t->dmb->ops->tell(t, false);

	list_for_each_entry_safe(page, next, &pages, lru) {
		list_del(&page->lru);
		if (!dmb->deflate_on_oom)
			adjust_managed_page_count(page, 1);
		put_page(page);	/* the balloon's reference */
	}
	mutex_unlock(&t->lock);
	return done;
}

#ifdef CONFIG_BALLOON_COMPACTION
/*
 * Compaction moves a ballooned page: tell the host about the new page
 * (inflate) and the old one (deflate).  A move to another node is refused
 * so a tier's pages never leave its node.
 */
static int dmb_migratepage(struct balloon_dev_info *bdi, struct page *newpage,
			   struct page *page, enum migrate_mode mode)
{
	struct dmb_tier *t = container_of(bdi, struct dmb_tier, bdi);
	unsigned long flags;

	if (page_to_nid(newpage) != t->nid)
		return -EAGAIN;
	/* Never wait here: inflation may be what triggered compaction. */
	if (!mutex_trylock(&t->lock))
		return -EAGAIN;

	get_page(newpage);	/* the balloon's reference */
	if (!t->dmb->deflate_on_oom && page_zone(page) != page_zone(newpage)) {
		adjust_managed_page_count(page, 1);
		adjust_managed_page_count(newpage, -1);
	}

	spin_lock_irqsave(&bdi->pages_lock, flags);
	balloon_page_insert(bdi, newpage);
	bdi->isolated_pages--;
	__count_vm_event(BALLOON_MIGRATE);
	spin_unlock_irqrestore(&bdi->pages_lock, flags);

	t->num_pfns = DMB_PAGES_PER_PAGE;
	dmb_set_pfns(t, t->pfns, newpage);
	t->dmb->ops->tell(t, true);

	t->num_pfns = DMB_PAGES_PER_PAGE;
	dmb_set_pfns(t, t->pfns, page);
	t->dmb->ops->tell(t, false);
	t->nr_migrated++;
	mutex_unlock(&t->lock);

	balloon_page_finalize(page);
	put_page(page);		/* the balloon's reference */
	return MIGRATEPAGE_SUCCESS;
}
#endif

/* ---- config space --------------------------------------------------------- */

static u32 dmb_virtio_read_target(struct dmb_tier *t)
{
	u32 host = 0;

	if (t->id == DMB_FMEM)
		virtio_cread_le(t->dmb->vdev, struct dmb_config, num_pages,
				&host);
	else
		virtio_cread_le(t->dmb->vdev, struct dmb_config,
				num_hetero_pages, &host);
	return host;
}

static void dmb_virtio_write_actual(struct dmb_tier *t, u32 actual)
{
	if (t->id == DMB_FMEM)
		virtio_cwrite_le(t->dmb->vdev, struct dmb_config, actual,
				 &actual);
	else
		virtio_cwrite_le(t->dmb->vdev, struct dmb_config,
				 actual_hetero, &actual);
}

static const struct dmb_tier_ops dmb_virtio_ops = {
	.tell = dmb_virtio_tell,
	.read_target = dmb_virtio_read_target,
	.write_actual = dmb_virtio_write_actual,
};

/* Read the host's target for @t, clamp it to the node, store both. */
static u32 dmb_read_target(struct dmb_tier *t)
{
	u32 host, clamped;

	if (!t->active)
		return 0;
	host = t->dmb->ops->read_target(t);
	clamped = dmb_clamp_target(host, dmb_node_pages_4k(t->nid));
	if (clamped != host && host != READ_ONCE(t->host_target))
		dev_warn(&t->dmb->vdev->dev,
			 "%s: host target %u pages exceeds node %d (%lu pages); using %u\n",
			 t->name, host, t->nid, dmb_node_pages_4k(t->nid),
			 clamped);
	WRITE_ONCE(t->host_target, host);
	WRITE_ONCE(t->target, clamped);
	return clamped;
}

static void dmb_write_actual(struct dmb_tier *t)
{
	if (t->active)
		t->dmb->ops->write_actual(t, READ_ONCE(t->num_pages));
}

/* ---- work ----------------------------------------------------------------- */

static void dmb_queue_tier(struct dmb_tier *t, unsigned long delay)
{
	struct dmb_dev *dmb = t->dmb;
	unsigned long flags;

	spin_lock_irqsave(&dmb->stop_lock, flags);
	if (!dmb->stop && t->active)
		mod_delayed_work(system_freezable_wq, &t->work, delay);
	spin_unlock_irqrestore(&dmb->stop_lock, flags);
}

/**
 * dmb_tier_balance() - move one batch of @t towards the host's target.
 * @t: the tier
 * @delay: out: when to run again (a back-off after a failure)
 *
 * Return: true if the target is not reached yet (run again).
 */
bool dmb_tier_balance(struct dmb_tier *t, unsigned long *delay)
{
	u32 target = dmb_read_target(t);
	long step = dmb_step(target, READ_ONCE(t->num_pages), DMB_PFNS_MAX);

	*delay = 0;
	if (step > 0 && READ_ONCE(t->oom_hold))
		return false;	/* given back on OOM: wait for a new request */
	if (step > 0) {
		if (dmb_inflate(t, step) < step)
			*delay = msecs_to_jiffies(DMB_RETRY_DELAY_MS);
	} else if (step < 0) {
		if (!dmb_deflate(t, -step))	/* all isolated right now */
			*delay = msecs_to_jiffies(10);
	}
	dmb_write_actual(t);
	return step != 0;
}

static void dmb_size_work(struct work_struct *work)
{
	struct dmb_tier *t = container_of(to_delayed_work(work),
					  struct dmb_tier, work);
	unsigned long delay;

	if (dmb_tier_balance(t, &delay))
		dmb_queue_tier(t, delay);
}

static void dmb_config_changed(struct virtio_device *vdev)
{
	struct dmb_dev *dmb = vdev->priv;
	int i;

	for (i = 0; i < DMB_NR_TIERS; i++) {
		WRITE_ONCE(dmb->tier[i].oom_hold, false);
		dmb_queue_tier(&dmb->tier[i], 0);
	}
}

/* ---- statistics ----------------------------------------------------------- */

static void dmb_stats_request(struct virtqueue *vq)
{
	struct dmb_dev *dmb = vq->vdev->priv;
	unsigned long flags;

	spin_lock_irqsave(&dmb->stop_lock, flags);
	if (!dmb->stop)
		queue_work(system_freezable_wq, &dmb->stats_work);
	spin_unlock_irqrestore(&dmb->stop_lock, flags);
}

static void dmb_stats_push(struct dmb_dev *dmb)
{
	struct scatterlist sg;
	unsigned int n = dmb_fill_stats(dmb);

	sg_init_one(&sg, dmb->stats, sizeof(dmb->stats[0]) * n);
	if (virtqueue_add_outbuf(dmb->stats_vq, &sg, 1, dmb, GFP_KERNEL)) {
		dev_warn_ratelimited(&dmb->vdev->dev,
				     "cannot queue the stats buffer\n");
		return;
	}
	virtqueue_kick(dmb->stats_vq);
	WRITE_ONCE(dmb->nr_stats_sent, dmb->nr_stats_sent + 1);
}

/* The host returned the stats buffer: refill it with fresh values. */
static void dmb_stats_work(struct work_struct *work)
{
	struct dmb_dev *dmb = container_of(work, struct dmb_dev, stats_work);
	unsigned int len;

	if (!virtqueue_get_buf(dmb->stats_vq, &len))
		return;
	dmb_stats_push(dmb);
}

/* ---- OOM ------------------------------------------------------------------ */

/**
 * dmb_oom_release() - give balloon pages back to the guest under OOM.
 * @dmb: the device
 * @pages: how many 4 KiB pages to give back at most
 *
 * SMem balloon first, then FMem (see dmb_oom_order() for why).  A tier
 * that gave pages back holds its size until the host sends a new target,
 * so the work item does not take them straight back.
 *
 * Return: 4 KiB pages given back.
 */
unsigned int dmb_oom_release(struct dmb_dev *dmb, unsigned int pages)
{
	enum dmb_tier_id order[DMB_NR_TIERS];
	unsigned int left = pages, total_all = 0;
	int i, n;

	n = dmb_oom_order(dmb->hetero, READ_ONCE(dmb->tier[DMB_FMEM].num_pages),
			  READ_ONCE(dmb->tier[DMB_SMEM].num_pages), order);
	for (i = 0; i < n && left; i++) {
		struct dmb_tier *t = &dmb->tier[order[i]];
		unsigned int got, total = 0;

		WRITE_ONCE(t->oom_hold, true);
		while (left) {
			got = dmb_deflate(t, left);
			if (!got)
				break;
			total += got;
			left -= min(got, left);
		}
		if (!total)
			continue;
		t->nr_oom_freed += total;
		total_all += total;
		dmb_write_actual(t);
		dev_info_ratelimited(&dmb->vdev->dev,
				     "OOM: gave back %u pages of %s (node %d)\n",
				     total, t->name, t->nid);
	}
	return total_all;
}

static int dmb_oom_notify(struct notifier_block *nb, unsigned long unused,
			  void *parm)
{
	struct dmb_dev *dmb = container_of(nb, struct dmb_dev, oom_nb);
	unsigned long *freed = parm;

	*freed += dmb_oom_release(dmb, min_t(unsigned int, READ_ONCE(oom_pages),
					     DMB_OOM_PAGES_MAX)) /
		  DMB_PAGES_PER_PAGE;
	return NOTIFY_OK;
}

/* ---- probe / remove ------------------------------------------------------- */

/*
 * Length of the device-specific config space as the host declares it, or
 * U32_MAX when the transport does not say.  virtio-pci (modern) BUG()s on
 * a config read past that length, and the length is host-controlled, so
 * check it before relying on the 24-byte layout.
 */
static u32 dmb_config_len(struct virtio_device *vdev)
{
	struct device *parent = vdev->dev.parent;
	struct pci_dev *pdev;
	u32 len, min_len = U32_MAX;
	u8 pos, type;

	if (!parent || !dev_is_pci(parent) ||
	    !virtio_has_feature(vdev, VIRTIO_F_VERSION_1))
		return U32_MAX;	/* MMIO / legacy PCI: no bounds BUG */
	pdev = to_pci_dev(parent);
	for (pos = pci_find_capability(pdev, PCI_CAP_ID_VNDR); pos;
	     pos = pci_find_next_capability(pdev, pos, PCI_CAP_ID_VNDR)) {
		pci_read_config_byte(pdev, pos +
				     offsetof(struct virtio_pci_cap, cfg_type),
				     &type);
		if (type != VIRTIO_PCI_CAP_DEVICE_CFG)
			continue;
		pci_read_config_dword(pdev, pos +
				      offsetof(struct virtio_pci_cap, length),
				      &len);
		min_len = min(min_len, len);
	}
	return min_len == U32_MAX ? 0 : min_len;
}

static int dmb_validate(struct virtio_device *vdev)
{
	int fmem, smem;
	u32 cfg_len;

	/* PFNs are guest-physical: never translate them through an IOMMU. */
	__virtio_clear_bit(vdev, VIRTIO_F_ACCESS_PLATFORM);

	if (!vdev->config->get) {
		dev_err(&vdev->dev, "config space access is required\n");
		return -EINVAL;
	}

	cfg_len = dmb_config_len(vdev);
	if (cfg_len < offsetof(struct dmb_config, free_page_hint_cmd_id)) {
		dev_err(&vdev->dev, "config space too small (%u bytes)\n",
			cfg_len);
		return -EINVAL;
	}
	if (virtio_has_feature(vdev, VIRTIO_BALLOON_F_HETERO_MEM) &&
	    cfg_len < sizeof(struct dmb_config)) {
		dev_warn(&vdev->dev,
			 "HETERO_MEM offered with a %u-byte config (need %zu): running as a single FMem balloon\n",
			 cfg_len, sizeof(struct dmb_config));
		__virtio_clear_bit(vdev, VIRTIO_BALLOON_F_HETERO_MEM);
	}

	dmb_detect_tiers(&fmem, &smem);
	if (virtio_has_feature(vdev, VIRTIO_BALLOON_F_HETERO_MEM) &&
	    smem == NUMA_NO_NODE) {
		dev_warn(&vdev->dev,
			 "HETERO_MEM offered but the guest has no memory-only node: running as a single FMem balloon\n");
		__virtio_clear_bit(vdev, VIRTIO_BALLOON_F_HETERO_MEM);
	}
	return 0;
}

void dmb_tier_init(struct dmb_dev *dmb, enum dmb_tier_id id, int nid)
{
	struct dmb_tier *t = &dmb->tier[id];

	t->dmb = dmb;
	t->id = id;
	t->name = dmb_tier_names[id];
	t->nid = nid;
	mutex_init(&t->lock);
	init_waitqueue_head(&t->acked);
	INIT_DELAYED_WORK(&t->work, dmb_size_work);
	balloon_devinfo_init(&t->bdi);
#ifdef CONFIG_BALLOON_COMPACTION
	t->bdi.migratepage = dmb_migratepage;
#endif
}

/* Queue order: inflate, deflate, [stats], [hetero-inflate, hetero-deflate]. */
static int dmb_init_vqs(struct dmb_dev *dmb)
{
	struct dmb_vq_info info[5] = {};
	struct virtqueue *vqs[5];
	unsigned int n = 0, stats = 0, hetero = 0;
	int err;

	info[n++] = (struct dmb_vq_info){ "inflate", dmb_ack };
	info[n++] = (struct dmb_vq_info){ "deflate", dmb_ack };
	if (virtio_has_feature(dmb->vdev, VIRTIO_BALLOON_F_STATS_VQ)) {
		stats = n;
		info[n++] = (struct dmb_vq_info){ "stats", dmb_stats_request };
	}
	if (dmb->hetero) {
		hetero = n;
		info[n++] = (struct dmb_vq_info){ "hetero-inflate", dmb_ack };
		info[n++] = (struct dmb_vq_info){ "hetero-deflate", dmb_ack };
	}

	err = dmb_find_vqs(dmb->vdev, n, vqs, info);
	if (err)
		return err;

	dmb->tier[DMB_FMEM].inflate_vq = vqs[0];
	dmb->tier[DMB_FMEM].deflate_vq = vqs[1];
	dmb->tier[DMB_FMEM].active = true;
	if (stats)
		dmb->stats_vq = vqs[stats];
	if (hetero) {
		dmb->tier[DMB_SMEM].inflate_vq = vqs[hetero];
		dmb->tier[DMB_SMEM].deflate_vq = vqs[hetero + 1];
		dmb->tier[DMB_SMEM].active = true;
	}
	return 0;
}

static void dmb_stop(struct dmb_dev *dmb)
{
	unsigned long flags;
	int i;

	spin_lock_irqsave(&dmb->stop_lock, flags);
	dmb->stop = true;
	spin_unlock_irqrestore(&dmb->stop_lock, flags);
	for (i = 0; i < DMB_NR_TIERS; i++)
		cancel_delayed_work_sync(&dmb->tier[i].work);
	cancel_work_sync(&dmb->stats_work);
}

/* Give every page of @t back (pages isolated by compaction come back soon). */
void dmb_deflate_all(struct dmb_tier *t)
{
	unsigned int waited = 0;

	while (READ_ONCE(t->num_pages)) {
		if (dmb_deflate(t, DMB_PFNS_MAX))
			continue;
		if (!(++waited % 500))
			dev_warn(&t->dmb->vdev->dev,
				 "%s: waiting for %u isolated pages\n",
				 t->name, READ_ONCE(t->num_pages));
		msleep(10);
	}
	dmb_write_actual(t);
}

static int dmb_probe(struct virtio_device *vdev)
{
	struct dmb_dev *dmb;
	int fmem, smem, err, i;

	if (atomic_cmpxchg(&dmb_bound, 0, 1)) {
		dev_err(&vdev->dev, "only one Demeter balloon is supported\n");
		return -EBUSY;
	}

	dmb = kzalloc(sizeof(*dmb), GFP_KERNEL);
	if (!dmb) {
		err = -ENOMEM;
		goto out_unbind;
	}
	vdev->priv = dmb;
	dmb->vdev = vdev;
	dmb->ops = &dmb_virtio_ops;
	spin_lock_init(&dmb->stop_lock);
	spin_lock_init(&dmb->guest_lock);
	INIT_WORK(&dmb->stats_work, dmb_stats_work);
	dmb->hetero = virtio_has_feature(vdev, VIRTIO_BALLOON_F_HETERO_MEM);
	dmb->deflate_on_oom = virtio_has_feature(vdev,
						 VIRTIO_BALLOON_F_DEFLATE_ON_OOM);

	dmb_detect_tiers(&fmem, &smem);
	if (fmem == NUMA_NO_NODE) {
		dev_err(&vdev->dev, "no node with memory\n");
		err = -ENODEV;
		goto out_free;
	}
	if (dmb->hetero && smem == NUMA_NO_NODE) {
		/* A node went away between validate and probe. */
		dev_err(&vdev->dev, "HETERO_MEM negotiated but no SMem node\n");
		err = -ENODEV;
		goto out_free;
	}
	dmb_tier_init(dmb, DMB_FMEM, fmem);
	dmb_tier_init(dmb, DMB_SMEM, smem);

	err = dmb_init_vqs(dmb);
	if (err)
		goto out_free;

	dev_info(&vdev->dev,
		 "FMem node %d (%lu pages), SMem node %d (%lu pages), hetero_mem=%d stats=%d deflate_on_oom=%d config=%u bytes\n",
		 fmem, dmb_node_pages_4k(fmem), smem, dmb_node_pages_4k(smem),
		 dmb->hetero, !!dmb->stats_vq, dmb->deflate_on_oom,
		 dmb_config_len(vdev));

	err = dmb_sysfs_init(dmb);
	if (err)
		goto out_del_vqs;

	if (dmb->deflate_on_oom) {
		dmb->oom_nb.notifier_call = dmb_oom_notify;
		dmb->oom_nb.priority = 80;	/* as the stock driver */
		err = register_oom_notifier(&dmb->oom_nb);
		if (err)
			goto out_sysfs;
	}

	virtio_device_ready(vdev);

	/* Give the host a stats buffer it can return when it wants fresh values. */
	if (dmb->stats_vq)
		dmb_stats_push(dmb);

	for (i = 0; i < DMB_NR_TIERS; i++)
		dmb_queue_tier(&dmb->tier[i], 0);
	return 0;

out_sysfs:
	dmb_sysfs_exit(dmb);
out_del_vqs:
	virtio_reset_device(vdev);
	vdev->config->del_vqs(vdev);
out_free:
	kfree(dmb);
out_unbind:
	atomic_set(&dmb_bound, 0);
	return err;
}

static void dmb_remove(struct virtio_device *vdev)
{
	struct dmb_dev *dmb = vdev->priv;
	int i;

	dmb_stop(dmb);
	if (dmb->deflate_on_oom)
		unregister_oom_notifier(&dmb->oom_nb);
	dmb_sysfs_exit(dmb);

	for (i = 0; i < DMB_NR_TIERS; i++) {
		struct dmb_tier *t = &dmb->tier[i];
		unsigned int had = READ_ONCE(t->num_pages);

		dmb_deflate_all(t);
		if (had)
			dev_info(&vdev->dev, "%s: returned %u pages\n",
				 t->name, had);
	}

	virtio_reset_device(vdev);
	vdev->config->del_vqs(vdev);
	kfree(dmb);
	atomic_set(&dmb_bound, 0);
}

#ifdef CONFIG_PM_SLEEP
/* Suspend would need the queues rebuilt around a live balloon: refuse. */
static int dmb_freeze(struct virtio_device *vdev)
{
	return -EOPNOTSUPP;
}

static int dmb_restore(struct virtio_device *vdev)
{
	return -EOPNOTSUPP;
}
#endif

static unsigned int dmb_features[] = {
	VIRTIO_BALLOON_F_MUST_TELL_HOST,	/* honoured: we always tell first */
	VIRTIO_BALLOON_F_STATS_VQ,
	VIRTIO_BALLOON_F_DEFLATE_ON_OOM,
	VIRTIO_BALLOON_F_HETERO_MEM,
};

static const struct virtio_device_id dmb_id_table[] = {
	{ VIRTIO_ID_BALLOON, VIRTIO_DEV_ANY_ID },
	{ 0 },
};
MODULE_DEVICE_TABLE(virtio, dmb_id_table);

static struct virtio_driver dmb_driver = {
	.feature_table = dmb_features,
	.feature_table_size = ARRAY_SIZE(dmb_features),
	.driver.name = KBUILD_MODNAME,
	.id_table = dmb_id_table,
	.validate = dmb_validate,
	.probe = dmb_probe,
	.remove = dmb_remove,
	.config_changed = dmb_config_changed,
#ifdef CONFIG_PM_SLEEP
	.freeze = dmb_freeze,
	.restore = dmb_restore,
#endif
};

static int __init dmb_init(void)
{
	if (selftest)
		dmb_selftest();
	return register_virtio_driver(&dmb_driver);
}

static void __exit dmb_exit(void)
{
	unregister_virtio_driver(&dmb_driver);
}

module_init(dmb_init);
module_exit(dmb_exit);

MODULE_DESCRIPTION("Demeter double balloon: per-NUMA-tier virtio balloon");
MODULE_LICENSE("GPL");
