// SPDX-License-Identifier: GPL-2.0
/*
 * PEBS sampling source (Intel): two perf kernel counters per thread of
 * the target, MEM_TRANS_RETIRED.LOAD_LATENCY with a load-latency
 * threshold and MEM_INST_RETIRED.ALL_STORES, both precise (PEBS), user
 * space only, inherited by the threads each thread creates.
 *
 * The overflow handler runs in NMI context for every PEBS record the
 * perf core hands over: on the PMI and when the DS buffer is drained at a
 * context switch or when the event is disabled.  It only decodes the
 * record (tier_decode(), pure C, unit-tested in user space) and pushes
 * the address into the target's wait-free ring; there is no polling
 * thread: the manager's epoch worker drains the ring into the classifier
 * once per epoch.  Large (multi-record) PEBS is kept off so that every
 * record reaches the handler (tier_pebs_attr()).
 *
 * Not testable here (no PMU on the project machines; the testbed is an
 * emulated AMD CPU): tier_pebs_probe() reports that, and the manager uses
 * the accessed-bit source.
 */
#include <linux/perf_event.h>
#include <linux/sched.h>
#include <linux/sched/signal.h>
#include <linux/sched/task.h>
#include <linux/slab.h>
#include <linux/mm.h>
#include <asm/processor.h>
#include <asm/tsc.h>
#include "tier.h"

static u64 tier_ldlat_cycles(void)
{
	u64 khz = tsc_khz ? tsc_khz : 2000000;

	/* ns * cycles/ns, the threshold MSR holds core cycles (min 1). */
	return max_t(u64, 1, (u64)tier_pebs_ldlat * khz / 1000000);
}

static void tier_pebs_attr(struct perf_event_attr *a, bool store)
{
	memset(a, 0, sizeof(*a));
	a->type = PERF_TYPE_RAW;
	a->size = sizeof(*a);
	a->config = store ? TIER_EV_ALL_STORES : TIER_EV_LOAD_LATENCY;
	a->config1 = store ? 0 : tier_ldlat_cycles();
	a->sample_period = store ? tier_pebs_store_period :
				   tier_pebs_load_period;
	a->sample_type = PERF_SAMPLE_ADDR | PERF_SAMPLE_WEIGHT;
	a->precise_ip = 3;
	a->exclude_kernel = 1;
	a->exclude_hv = 1;
	a->exclude_callchain_kernel = 1;
	a->inherit = 1;
	/*
	 * One record per PMI.  With a fixed period and wakeup_events = 0 the
	 * x86 PMU code turns on large PEBS (many records per PMI); on drain
	 * it hands only the last record to the overflow handler and writes
	 * the others with perf_event_output() into the event's ring buffer,
	 * which a kernel counter does not have: they were lost.
	 * wakeup_events != 0 (without watermark) keeps large PEBS off
	 * (intel_pmu_hw_config()), so every record reaches the handler.
	 * Cost: one PMI per record (see README, "PEBS").
	 */
	a->wakeup_events = 1;
}

static void tier_pebs_overflow(struct perf_event *ev,
			       struct perf_sample_data *data,
			       struct pt_regs *regs)
{
	struct tier_target *t = ev->overflow_handler_context;
	struct tier_raw_record rec = {
		.config = ev->attr.config,
		.sample_flags = data->sample_flags,
		.addr = data->addr,
		.weight = data->weight.full,
		.pid = current->tgid,
		.tid = current->pid,
	};
	enum tier_verdict v;
	u64 addr = 0;

	v = tier_decode(&rec, &t->filter, &addr);
	tier_counter_inc(&t->verdicts[v]);
	if (v == TIER_SAMPLE_OK)
		tier_ring_push(&t->ring, addr);
}

/**
 * tier_pebs_probe() - can this CPU do what we need?
 * @why:	out: a one-line reason when it cannot.
 *
 * Return: 0 if a load-latency PEBS event can be created, else -errno.
 */
int tier_pebs_probe(char *why, size_t len)
{
	struct perf_event_attr a;
	struct perf_event *ev;

	if (boot_cpu_data.x86_vendor != X86_VENDOR_INTEL) {
		snprintf(why, len, "not an Intel CPU (vendor %s)",
			 boot_cpu_data.x86_vendor_id);
		return -ENODEV;
	}
	if (!boot_cpu_has(X86_FEATURE_ARCH_PERFMON)) {
		snprintf(why, len, "no architectural PMU (virtualised without PMU?)");
		return -ENODEV;
	}
	tier_pebs_attr(&a, false);
	a.disabled = 1;
	a.inherit = 0;
	ev = perf_event_create_kernel_counter(&a, 0, NULL, NULL, NULL);
	if (IS_ERR(ev)) {
		snprintf(why, len, "load-latency PEBS event refused (%ld)",
			 PTR_ERR(ev));
		return PTR_ERR(ev);
	}
	perf_event_release_kernel(ev);
	snprintf(why, len, "ok");
	return 0;
}

/*
 * The threads of @task's process, referenced; at most @max.  Returns how
 * many, or -E2BIG if there are more.
 */
static int tier_pebs_threads(struct task_struct *task,
			     struct task_struct **out, int max)
{
	struct task_struct *th;
	int n = 0, i;

	rcu_read_lock();
	for_each_thread(task, th) {
		if (n == max) {
			rcu_read_unlock();
			for (i = 0; i < n; i++)
				put_task_struct(out[i]);
			return -E2BIG;
		}
		get_task_struct(th);
		out[n++] = th;
	}
	rcu_read_unlock();
	return n;
}

/**
 * tier_pebs_start() - sample every thread of @task's process.
 *
 * A task-bound counter only counts its own task, and with inherit=1 the
 * threads that task creates later: one counter on the leader misses
 * every thread that existed before.  So each existing thread gets its
 * own pair (load, store), each inherited by the threads it creates.
 * Not covered: a thread cloned while this runs, by a thread whose
 * counter is not created yet (microseconds at target start).
 */
int tier_pebs_start(struct tier_target *t, struct task_struct *task)
{
	struct task_struct **th;
	struct perf_event_attr a;
	struct perf_event *ev;
	int nth, i, ret = 0;
	u32 nload = 0;

	th = kvcalloc(TIER_PEBS_MAX_THREADS, sizeof(*th), GFP_KERNEL);
	t->pebs_ev = kvcalloc(2 * TIER_PEBS_MAX_THREADS, sizeof(*t->pebs_ev),
			      GFP_KERNEL);
	t->ring_mem = kvcalloc(TIER_RING_ENTRIES, sizeof(u64), GFP_KERNEL);
	if (!th || !t->pebs_ev || !t->ring_mem) {
		ret = -ENOMEM;
		goto out;
	}
	tier_ring_init(&t->ring, t->ring_mem, TIER_RING_ENTRIES);
	for (i = 0; i < TIER_NR_VERDICTS; i++)
		tier_counter_set(&t->verdicts[i], 0);

	nth = tier_pebs_threads(task, th, TIER_PEBS_MAX_THREADS);
	if (nth < 0) {
		ret = nth;
		goto out;
	}
	for (i = 0; i < nth; i++) {
		tier_pebs_attr(&a, false);
		ev = perf_event_create_kernel_counter(&a, -1, th[i],
						      tier_pebs_overflow, t);
		if (IS_ERR(ev)) {
			/* a thread that is exiting has no context any more */
			if (PTR_ERR(ev) != -ESRCH && !ret)
				ret = PTR_ERR(ev);
			continue;
		}
		t->pebs_ev[t->nr_pebs_ev++] = ev;
		nload++;
		/* Stores are optional: loads alone still classify. */
		tier_pebs_attr(&a, true);
		ev = perf_event_create_kernel_counter(&a, -1, th[i],
						      tier_pebs_overflow, t);
		if (!IS_ERR(ev))
			t->pebs_ev[t->nr_pebs_ev++] = ev;
	}
	for (i = 0; i < nth; i++)
		put_task_struct(th[i]);
	if (nload)
		ret = 0;	/* some thread refused: the others sample */
	else if (!ret)
		ret = -ESRCH;
out:
	kvfree(th);
	if (ret)
		tier_pebs_stop(t);
	return ret;
}

void tier_pebs_stop(struct tier_target *t)
{
	u32 i;

	for (i = 0; i < t->nr_pebs_ev; i++)
		perf_event_release_kernel(t->pebs_ev[i]);
	kvfree(t->pebs_ev);
	t->pebs_ev = NULL;
	t->nr_pebs_ev = 0;
	/* An overflow handler still running in NMI is an RCU reader. */
	synchronize_rcu();
	kvfree(t->ring_mem);
	t->ring_mem = NULL;
}

u64 tier_pebs_drain(struct tier_target *t)
{
	if (!t->ring_mem)
		return 0;
	return tier_ring_drain(&t->ring, &t->hrc);
}
