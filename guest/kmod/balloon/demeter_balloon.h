/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Demeter double balloon: one virtio-balloon device (virtio id 5) with a
 * second inflate/deflate queue pair for the slow-memory tier.
 *
 * Wire protocol (compatible with the Demeter authors' Cloud Hypervisor
 * fork and with our devices/demeter_balloon):
 *
 *  - feature VIRTIO_BALLOON_F_HETERO_MEM (bit 6) adds the queue pair;
 *  - queue order: inflate, deflate, [stats], [reporting],
 *    [hetero-inflate, hetero-deflate] (absent queues are compacted away;
 *    this driver never negotiates REPORTING);
 *  - config space, 24 bytes, little endian (struct dmb_config below);
 *  - PFNs are u32 in 4 KiB units, at most 256 per buffer.
 */
#ifndef _DEMETER_BALLOON_H
#define _DEMETER_BALLOON_H

#include <linux/types.h>
#include <linux/mutex.h>
#include <linux/spinlock.h>
#include <linux/wait.h>
#include <linux/workqueue.h>
#include <linux/notifier.h>
#include <linux/balloon_compaction.h>
#include <linux/virtio_balloon.h>

#define DMB_NAME "demeter_balloon"

#define VIRTIO_BALLOON_F_HETERO_MEM	6

/* 4 KiB balloon pages per kernel page (1 on x86). */
#define DMB_PAGES_PER_PAGE	((unsigned int)(PAGE_SIZE >> VIRTIO_BALLOON_PFN_SHIFT))
#define DMB_PFNS_MAX		256
/* Back-off after an allocation failure on a tier's node. */
#define DMB_RETRY_DELAY_MS	200
/* How long to wait for one host ack before checking for a broken queue. */
#define DMB_ACK_POLL_MS		1000

struct dmb_config {
	__le32 num_pages;		/* host: FMem target */
	__le32 actual;			/* guest: FMem balloon size */
	__le32 free_page_hint_cmd_id;	/* unused */
	__le32 poison_val;		/* unused */
	__le32 num_hetero_pages;	/* host: SMem target (HETERO_MEM only) */
	__le32 actual_hetero;		/* guest: SMem balloon size */
};

/*
 * Statistics tags.  0..9 are the same for every driver.  10..15 are
 * ambiguous on the wire: Linux's stock driver (6.10+) uses them for
 * oom-kills..direct-reclaims, the Demeter driver for per-tier values.
 * We follow the negotiated features, as devices/demeter_balloon does:
 * with HETERO_MEM we send the Demeter per-tier tags, without it the
 * stock 6.12 set.  The access-count tags (10, 13) are not sent: a stock
 * kernel has no per-tier access counter (Demeter sent constant zeros).
 */
#define DMB_S_FMEM_ACCESS	10	/* reserved, not sent */
#define DMB_S_FMEM_FREE		11	/* bytes free on the FMem node */
#define DMB_S_FMEM_TOTAL	12	/* bytes managed on the FMem node */
#define DMB_S_SMEM_ACCESS	13	/* reserved, not sent */
#define DMB_S_SMEM_FREE		14	/* bytes free on the SMem node */
#define DMB_S_SMEM_TOTAL	15	/* bytes managed on the SMem node */

/*
 * Guest-reported tags: a vendor range that user space (the tiering agent)
 * fills through /sys/kernel/demeter_balloon/guest_report.  The driver keeps
 * the latest value per tag and appends every tag ever written to each
 * stats buffer.  The host names them (devices/demeter_balloon/src/stats.rs);
 * the driver does not interpret them.
 */
#define DMB_S_GUEST_BASE	0x8000
#define DMB_S_GUEST_NR		32	/* tags 0x8000..0x801f */

/* Standard + per-tier (at most 16) plus every guest-reported tag. */
#define DMB_STATS_MAX		(16 + DMB_S_GUEST_NR)

enum dmb_tier_id {
	DMB_FMEM,
	DMB_SMEM,
	DMB_NR_TIERS,
};

struct dmb_dev;
struct dmb_tier;

/**
 * struct dmb_tier_ops - how a tier talks to its host.
 * @tell: send t->pfns[0..t->num_pfns) on the tier's inflate (@inflate
 *        true) or deflate queue and wait until the host has used them.
 *        Called with t->lock held.  Returns 0, or a negative errno if the
 *        queue is broken (the buffer is then free to reuse).
 * @read_target: the host's requested tier size in 4 KiB pages, unchecked.
 * @write_actual: publish the tier's balloon size in 4 KiB pages.
 *
 * The virtio transport (core.c) is the only real implementation; the
 * self-check (selftest.c) plugs in a fake host to drive the same tier
 * code on both nodes without a device.
 */
struct dmb_tier_ops {
	int (*tell)(struct dmb_tier *t, bool inflate);
	u32 (*read_target)(struct dmb_tier *t);
	void (*write_actual)(struct dmb_tier *t, u32 actual);
};

/*
 * One tier's balloon.  Both tiers run the same code; they differ only in
 * node, queues and config offsets.
 */
struct dmb_tier {
	struct dmb_dev *dmb;
	enum dmb_tier_id id;
	const char *name;
	int nid;			/* NUMA_NO_NODE if the tier is absent */
	bool active;			/* has a queue pair on this device */
	struct virtqueue *inflate_vq;
	struct virtqueue *deflate_vq;

	struct delayed_work work;
	wait_queue_head_t acked;

	/* lock serialises the fields below, the page list and the queues. */
	struct mutex lock;
	struct balloon_dev_info bdi;
	unsigned int num_pages;		/* 4 KiB pages in the balloon */
	u32 host_target;		/* last target read from config */
	u32 target;			/* host_target clamped to the node */
	unsigned long nr_alloc_fail;	/* allocation failures (back-offs) */
	unsigned long nr_oom_freed;	/* 4 KiB pages given back on OOM */
	unsigned long nr_migrated;	/* pages moved by compaction */
	bool oom_hold;			/* shrunk on OOM: no re-inflation
					 * until the next config change */
	unsigned int num_pfns;
	__virtio32 pfns[DMB_PFNS_MAX];
};

struct dmb_dev {
	struct virtio_device *vdev;
	const struct dmb_tier_ops *ops;
	struct dmb_tier tier[DMB_NR_TIERS];
	struct virtqueue *stats_vq;
	struct work_struct stats_work;

	/* Stop queueing work (remove). */
	spinlock_t stop_lock;
	bool stop;

	bool hetero;			/* HETERO_MEM negotiated */
	bool deflate_on_oom;
	struct notifier_block oom_nb;

	unsigned int nr_stats;
	struct virtio_balloon_stat stats[DMB_STATS_MAX];
	unsigned long nr_stats_sent;

	/*
	 * Guest-reported values (guest_report): guest_lock guards
	 * guest_val/guest_mask against the sysfs writer; the stats work
	 * copies them under it.
	 */
	spinlock_t guest_lock;
	u32 guest_mask;			/* bit i: tag DMB_S_GUEST_BASE + i set */
	u64 guest_val[DMB_S_GUEST_NR];
	unsigned long nr_guest_reports;	/* accepted writes */

	struct kobject *kobj;		/* /sys/kernel/demeter_balloon */
};

/* tier.c: pure policy, no device access (tested by selftest.c). */
struct dmb_node_info {
	int nid;
	bool has_cpu;
	bool has_mem;
};

void dmb_pick_tiers(const struct dmb_node_info *nodes, int nr,
		    int *fmem_nid, int *smem_nid);
u32 dmb_clamp_target(u32 host_target, unsigned long node_pages_4k);
long dmb_step(u32 target, unsigned int balloon_pages, unsigned int max_batch);
int dmb_oom_order(bool hetero, unsigned int fmem_pages,
		  unsigned int smem_pages, enum dmb_tier_id order[DMB_NR_TIERS]);

/* stats.c */
unsigned int dmb_fill_stats(struct dmb_dev *dmb);
int dmb_parse_guest_report(const char *buf, size_t len,
			   u64 val[DMB_S_GUEST_NR], u32 *mask);
int dmb_guest_report(struct dmb_dev *dmb, const char *buf, size_t len);
void dmb_node_mem(int nid, unsigned long *free_pages,
		  unsigned long *managed_pages);

/* sysfs.c */
int dmb_sysfs_init(struct dmb_dev *dmb);
void dmb_sysfs_exit(struct dmb_dev *dmb);

/* core.c, shared with selftest.c */
struct page *dmb_alloc_on_node(int nid);
unsigned long dmb_node_pages_4k(int nid);
void dmb_detect_tiers(int *fmem_nid, int *smem_nid);
void dmb_tier_init(struct dmb_dev *dmb, enum dmb_tier_id id, int nid);
bool dmb_tier_balance(struct dmb_tier *t, unsigned long *delay);
void dmb_deflate_all(struct dmb_tier *t);
unsigned int dmb_oom_release(struct dmb_dev *dmb, unsigned int pages);

/* selftest.c */
int dmb_selftest(void);

#endif /* _DEMETER_BALLOON_H */
