/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Guest tiered-memory manager (Demeter section 3.2) for stock kernels:
 * internal interfaces between the module's parts.
 *
 *   tier_main.c   module parameters, targets, the worker thread, sysfs
 *   tier_abit.c   accessed-bit sampling source (any x86 CPU)
 *   tier_abit_plan.c  its sampling plan and scan back-off (pure C)
 *   tier_pebs.c   PEBS sampling source (Intel, perf kernel counters)
 *   tier_user.c   samples written by the agent (user-space perf events)
 *   tier_sample.c sample decoding / ring (pure C, user-space tested)
 */
#ifndef _TIERING_TIER_H
#define _TIERING_TIER_H

#include <linux/kobject.h>
#include <linux/mutex.h>
#include <linux/pid.h>
#include <linux/perf_event.h>
#include "range_classifier.h"
#include "tier_sample.h"
#include "tier_abit_plan.h"
#include "tier_abit_rate.h"

#define TIER_MAX_TARGETS	64
#define TIER_SEL_MAX		128	/* promote/demote intervals published */
#define TIER_RING_ENTRIES	16384
#define TIER_PEBS_MAX_THREADS	1024	/* threads of one target with a counter */

enum tier_source {
	TIER_SRC_NONE = 0,
	TIER_SRC_ABIT,
	TIER_SRC_PEBS,
	TIER_SRC_USER,		/* samples written by the agent (tier_user.c) */
};

enum tier_state {
	TIER_ST_IDLE = 0,	/* no pid */
	TIER_ST_RUNNING,
	TIER_ST_EXITED,		/* the process went away; pid kept for show */
};

struct tier_target {
	struct kobject kobj;
	u32 idx;

	/* Everything below is protected by tier_lock. */
	bool removed;		/* slot detached (nr_targets shrank / unload) */
	bool auto_added;	/* picked by auto_rss_mb, auto_cgroup or a fork */
	pid_t parent_nr;	/* forked by this target (follow_children) */
	u64 fmem_share;		/* FMem pages for its hot set (last epoch) */
	enum tier_state state;
	enum tier_source source;
	enum tier_source last_source;	/* kept after the target exits */
	struct pid *pid;
	pid_t pid_nr;
	u64 started_ns;

	struct hrc hrc;
	struct hrc_range *ranges;
	u32 *order;
	u64 span_lo, span_hi;

	/* accessed-bit source */
	u64 next_scan_ns;
	u64 cycle_start_ns;
	bool abit_armed;	/* bits cleared, waiting for the window */
	u32 window_ms;
	u64 abit_present, abit_young;	/* last check pass (samples) */
	bool abit_none_young;	/* the last check saw none: TLB-bound? */
	/* huge entries: sub-windows (tier_abit_plan.h, tier_abit.c) */
	u32 huge_window_us;	/* sleep per sub-window, adapted */
	u64 huge_probe_ns;	/* last cycle: per huge entry and pass */
	u64 abit_huge, abit_huge_young;	/* last check: entries, young sum */
	bool abit_huge_none_young;	/* the last sub-windows saw none */
	u64 huge_ns, nr_huge_checks;	/* cost of sub-windows / polls */
	/* huge entries: time-to-young (tier_abit_plan.h, tier_abit.c) */
	u32 huge_slice_us;	/* spin after a clear, adapted */
	u64 abit_huge_in_slice;	/* last arming: leads young within it */
	u64 huge_tty_floor_ns;	/* last arming: fastest time-to-young */
	u64 huge_rate_ref_ns;	/* last check: hottest entries' mean time */
	u64 nr_huge_flushes;	/* flushes after batches of clears */
	u64 huge_flush_ns;	/* cost of one, averaged */
	u64 huge_obs[3];	/* measurements: early, timed, none (cumulative) */
	u64 base_recorded, huge_recorded;	/* base pages the samples added */
	u64 huge_tau_q[5];	/* last check: mean times' 5/25/50/75/95th pct */
	u64 huge_tty_hist[TIER_ABIT_TTY_HIST];	/* cumulative, log2 us */
	u16 *abit_pend;		/* arming: huge leads being polled */
	u64 *abit_ttys;		/* arming: their times (percentile) */
	/* huge entries' rate history, by page (tier_abit_rate.h) */
	struct tier_rate_stats *abit_rprev, *abit_rcur;
	u32 abit_nrprev;
	struct tier_abit_sample *abit_samp;	/* armed sample pages */
	u32 abit_nsamp, abit_cap;
	u64 abit_rng;
	u32 scan_level;		/* back-off: intervals are << scan_level */
	u64 next_resident_ns;	/* next read-only residency walk */
	u64 prev_hot_bytes;	/* at the last epoch (stability) */
	u64 moved_seen;		/* reloc_promoted + reloc_demoted then */
	u64 reshaped_seen;	/* splits + merges then */
	/* per-phase cost (ns) and counts, for the stats file */
	u64 arm_ns, check_ns, resident_ns, flush_ns;
	u64 nr_resident_walks, nr_flushes, nr_stable_epochs;

	/* PEBS source */
	struct perf_event **pebs_ev;	/* 2 per thread: load, store */
	u32 nr_pebs_ev;
	struct tier_ring ring;
	u64 *ring_mem;
	struct tier_filter filter;
	tier_counter_t verdicts[TIER_NR_VERDICTS];

	/* user source (tier_user.c): batches written to samples_in */
	u64 user_batches, user_accepted, user_dropped;

	u64 next_epoch_ns;
	u64 epoch_period_ns;	/* the running epoch's length */
	u64 epoch_samples;	/* samples recorded in the running epoch */
	u64 last_rate;		/* samples/s over the last epoch */

	/* published selection (after each epoch) */
	struct hrc_interval promo[TIER_SEL_MAX], demo[TIER_SEL_MAX];
	u32 nr_promo, nr_demo, nr_hot;
	u64 hot_bytes;
	u64 sel_epoch;

	/* statistics */
	u64 nr_samples;
	u64 nr_scans;
	u64 scan_ns;
	u64 epoch_ns;
	u64 reloc_promoted, reloc_demoted, reloc_failed, reloc_rounds;
};

extern struct mutex tier_lock;

/* ---- shared between tier_main.c, tier_core.c, tier_sysfs.c ---- */

enum tier_sampler_req { TIER_REQ_AUTO, TIER_REQ_PEBS, TIER_REQ_ABIT };
#define TIER_CGRP_PATH_MAX	128
#define TIER_PEBS_WHY_MAX	96

/* module parameters (tier_main.c), read with READ_ONCE() */
extern unsigned int tier_split_period_ms, tier_split_thresh;
extern unsigned int tier_significance_pct, tier_merge_epochs, tier_hot_pct;
extern unsigned int tier_max_ranges, tier_scan_interval_ms;
extern unsigned int tier_abit_min_window_ms, tier_abit_young_lo_pct;
extern unsigned int tier_abit_young_hi_pct, tier_half_split;
extern unsigned int tier_edge_split, tier_fmem_capacity_mb;
extern unsigned int tier_auto_rss_mb;
extern bool tier_follow_children;
enum { TIER_FLUSH_NEVER, TIER_FLUSH_ALWAYS, TIER_FLUSH_AUTO };
extern unsigned int tier_abit_tlb_flush;
extern int tier_sampler;
extern bool tier_pebs_ok, tier_pebs_probed;
extern const char * const tier_req_names[];
extern const char * const tier_src_names[];
int tier_sampler_check(const char *val);

/* core state (tier_core.c); tier_lock protects all but the worker */
extern struct tier_target *tier_targets[TIER_MAX_TARGETS];
extern u32 tier_nr_targets;
extern struct task_struct *tier_worker;
extern bool tier_kick;
extern bool tier_exiting;	/* module unload in progress */
extern struct cgroup *tier_auto_cgrp;
extern char tier_auto_cgrp_path[TIER_CGRP_PATH_MAX];
extern int tier_fmem_node, tier_smem_node;
extern char tier_pebs_why[TIER_PEBS_WHY_MAX];
extern u64 tier_worker_busy_ns, tier_nr_epochs, tier_nr_scans;
/*
 * Young accessed-bit samples, weighted like nr_samples, by the node of the
 * page (FMem node / any other); cumulative from module load.
 */
extern u64 tier_fmem_samples, tier_smem_samples;

u64 tier_fmem_capacity_pages(void);
int tier_detect_nodes(void);
int tier_target_start(struct tier_target *t, pid_t nr);
void tier_target_stop(struct tier_target *t, enum tier_state st);
int tier_worker_fn(void *unused);

/* sysfs (tier_sysfs.c) */
extern struct kobject *tier_root, *tier_targets_kobj;
extern const struct attribute_group tier_root_group, tier_targets_group;
struct tier_target *tier_add_slot(void);

/* tier_lists.c: the ranges, promote and demote files of a target */
extern const struct attribute_group tier_list_group;

/*
 * Exported by demeter_balloon.ko (balloon/dmb_export.h, which holds the
 * same prototype; the modules build apart): looked up with symbol_get().
 */
unsigned long dmb_node_ballooned_managed_pages(int nid);

/* accessed-bit source */
#define TIER_ABIT_MAX_SAMPLES	2048	/* per target and cycle: PTE writes */
/* huge entries whose rates are kept: a cycle's leads, as many aged */
#define TIER_ABIT_RATE_CAP	(2 * TIER_ABIT_MAX_SAMPLES)
#define TIER_ABIT_TRIES		2	/* draws per stratum for a present page */
#define TIER_ABIT_MAX_STRATA_MULT	16	/* sparse ranges: at most 16k strata */
struct tier_abit_sample {
	u64 addr;
	u64 weight;	/* base pages it stands for */
	bool huge;	/* at the check: a PMD-mapped huge page */
	bool lead;	/* huge, and the first sample in its entry */
	bool on_fast;	/* at the check: on the fast node */
	bool tty;	/* huge at arming, time-to-young measured */
	bool tty_done;	/* lead: its time-to-young is known */
	u16 lead_idx;	/* tty: the sample that measured its entry */
	u32 sub_young;	/* huge: sub-windows in which it was young */
	bool polled;	/* tty lead: read since its clock started */
	bool early;	/* tty lead: young at its first read */
	u64 t_clear;	/* tty lead: clock start (0: not started) */
	u64 flush_ns;	/* tty lead: its batch's TLB flush */
	u64 tty_ns;	/* tty lead: time-to-young, or TIER_ABIT_TTY_NONE */
	u64 tau_ns;	/* tty lead: its entry's mean time between touches */
	u32 rate_n;	/* tty lead: its entry's measurements (decayed) */
};
/* huge entries' sub-window (us): start and bounds of its controller */
#define TIER_ABIT_HUGE_START_US	200
#define TIER_ABIT_HUGE_MIN_US	20
#define TIER_ABIT_HUGE_MAX_US	2000
#define TIER_ABIT_HUGE_PROBE_NS	2000	/* first guess of a probe's cost */
/* huge entries assumed before the first cycle */
#define TIER_ABIT_TTY_LEADS_GUESS	256
extern unsigned int tier_abit_samples, tier_abit_max_level;
extern unsigned int tier_abit_huge_subwindows;
extern unsigned int tier_abit_huge_tty_us, tier_abit_huge_budget_permille;
extern unsigned int tier_resident_ms;
void tier_abit_arm(struct tier_target *t, struct mm_struct *mm, u32 per_range,
		   u64 interval_ms);
u64 tier_abit_check(struct tier_target *t, struct mm_struct *mm,
		    u64 *present, u64 *young);
void tier_abit_flush(struct mm_struct *mm);
/* A node's PFN span; @exact: no other memory node's span overlaps it. */
struct tier_pfn_span {
	int nid;
	bool exact;
	unsigned long start, end;
};
extern struct tier_pfn_span tier_fast_span;
/* keeps tier_fast_span right across memory hotplug (virtio-mem) */
int tier_memory_watch(void);
void tier_memory_unwatch(void);

u64 tier_abit_pass(struct tier_target *t, struct mm_struct *mm, bool record,
		   bool clear, const struct tier_pfn_span *fast, u64 *present);

/* PEBS source */
int tier_pebs_probe(char *why, size_t len);
int tier_pebs_start(struct tier_target *t, struct task_struct *task);
void tier_pebs_stop(struct tier_target *t);
u64 tier_pebs_drain(struct tier_target *t);

/* user source: samples from the agent (tier_user.c) */
#define TIER_USER_BATCH_MAX	512	/* addresses per write (one page) */
extern const struct attribute_group tier_user_group;
int tier_user_set_source(struct tier_target *t, const char *buf);
void tier_user_clear_stats(struct tier_target *t);

extern unsigned int tier_pebs_ldlat;
extern unsigned int tier_pebs_load_period;
extern unsigned int tier_pebs_store_period;

#endif /* _TIERING_TIER_H */
