// SPDX-License-Identifier: GPL-2.0
/*
 * Per-thread perf events with mmap'd rings for one target; see sampler.h.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "sampler.h"

#define SAMPLER_READ_CHUNK	256
#define SAMPLER_USER_TOP	(1ULL << 56)	/* as tier_sample.c */

void sampler_default_opts(struct sampler_opts *o, enum sampler_kind kind)
{
	memset(o, 0, sizeof(*o));
	o->kind = kind;
	/*
	 * 256 KiB (PEBS) or 128 KiB (faults) per event, the reader woken at
	 * a quarter.  Measured with page faults at 2 x 10^5/s from two
	 * threads: 8 pages lost 3-6 % of the records, 32 none.
	 */
	o->ring_pages = kind == SAMPLER_PEBS ? 64 : 32;
	o->watermark_pages = o->ring_pages / 4;
	/* the module's defaults (tier_main.c pebs_*) */
	o->load_period = 4093;
	o->store_period = 65535;
	o->ldlat_cycles = 128;	/* ~64 ns at 2 GHz */
	o->fault_period = 1;
}

const char *sampler_kind_name(enum sampler_kind kind)
{
	switch (kind) {
	case SAMPLER_PEBS:
		return "pebs";
	case SAMPLER_PAGEFAULT:
		return "pagefault";
	default:
		return "off";
	}
}

static uint64_t sampler_type(enum sampler_kind kind)
{
	return PERF_SAMPLE_TID | PERF_SAMPLE_ADDR |
	       (kind == SAMPLER_PEBS ? PERF_SAMPLE_WEIGHT : 0);
}

static void sampler_attr(const struct sampler_opts *o, bool store,
			 struct perf_event_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->size = sizeof(*a);
	a->sample_type = sampler_type(o->kind);
	a->exclude_kernel = 1;
	a->exclude_hv = 1;
	a->exclude_callchain_kernel = 1;
	/*
	 * Wake the reader by fill level, not per record: with a watermark
	 * the x86 PMU code keeps large PEBS on (intel_pmu_hw_config()), and
	 * every record of a DS-buffer drain lands in this ring.
	 */
	a->watermark = 1;
	a->wakeup_watermark = o->watermark_pages * (uint32_t)getpagesize();
	if (o->kind == SAMPLER_PAGEFAULT) {
		a->type = PERF_TYPE_SOFTWARE;
		a->config = PERF_COUNT_SW_PAGE_FAULTS;
		a->sample_period = o->fault_period;
		return;
	}
	a->type = PERF_TYPE_RAW;
	a->config = store ? TIER_EV_ALL_STORES : TIER_EV_LOAD_LATENCY;
	a->config1 = store ? 0 : o->ldlat_cycles;
	a->sample_period = store ? o->store_period : o->load_period;
	a->precise_ip = 3;
}

static int perf_open(struct perf_event_attr *a, int tid)
{
	return (int)syscall(SYS_perf_event_open, a, tid, -1, -1,
			    PERF_FLAG_FD_CLOEXEC);
}

static void cpu_vendor(char *out, size_t len)
{
	char line[256];
	FILE *f = fopen("/proc/cpuinfo", "r");

	snprintf(out, len, "unknown");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "vendor_id : %63s", out) == 1)
			break;
	}
	fclose(f);
}

int sampler_probe(const struct sampler_opts *o, char *why, size_t len)
{
	struct perf_event_attr a;
	char vendor[64], para[16] = "?";
	FILE *f;
	int fd, err;

	if (o->kind == SAMPLER_OFF) {
		snprintf(why, len, "off");
		return -EINVAL;
	}
	sampler_attr(o, false, &a);
	a.disabled = 1;
	fd = perf_open(&a, 0);
	if (fd >= 0) {
		close(fd);
		snprintf(why, len, "ok");
		return 0;
	}
	err = errno;
	f = fopen("/proc/sys/kernel/perf_event_paranoid", "r");
	if (f) {
		if (!fgets(para, sizeof(para), f))
			snprintf(para, sizeof(para), "?");
		para[strcspn(para, "\n")] = 0;
		fclose(f);
	}
	cpu_vendor(vendor, sizeof(vendor));
	if (err == EACCES || err == EPERM)
		snprintf(why, len, "perf_event_open refused: %s "
			 "(perf_event_paranoid %s; run as root)",
			 strerror(err), para);
	else if (o->kind == SAMPLER_PEBS)
		snprintf(why, len, "no PEBS load-latency event on this CPU "
			 "(vendor %s): %s", vendor, strerror(err));
	else
		snprintf(why, len, "software page-fault event refused: %s",
			 strerror(err));
	return -err;
}

static int ev_push(struct sampler_target *t, struct sampler_ev *e)
{
	if (t->nev == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 16;
		struct sampler_ev *n = realloc(t->ev, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		t->ev = n;
		t->cap = cap;
	}
	t->ev[t->nev++] = *e;
	return 0;
}

int sampler_add_ring(struct sampler_target *t, uint32_t tid, bool store,
		     struct perf_event_mmap_page *meta)
{
	struct sampler_ev e = { .fd = -1, .meta = meta, .tid = tid,
				.store = store };

	return ev_push(t, &e);
}

static void ev_close(struct sampler_ev *e)
{
	if (e->map_len)
		munmap(e->meta, e->map_len);
	if (e->fd >= 0)
		close(e->fd);
	e->meta = NULL;
	e->fd = -1;
}

/* One event on @tid with its ring; -errno on failure. */
static int ev_open(struct sampler_target *t, uint32_t tid, bool store)
{
	size_t len = ((size_t)t->o.ring_pages + 1) * (size_t)getpagesize();
	struct perf_event_attr a;
	struct sampler_ev e = { .tid = tid, .store = store };
	int ret;

	sampler_attr(&t->o, store, &a);
	e.fd = perf_open(&a, (int)tid);
	if (e.fd < 0)
		return -errno;
	e.meta = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, e.fd, 0);
	if (e.meta == MAP_FAILED) {
		ret = -errno;
		close(e.fd);
		return ret;
	}
	e.map_len = len;
	ret = ev_push(t, &e);
	if (ret)
		ev_close(&e);
	return ret;
}

/* The events of thread @tid; a thread that already exited is no error. */
static int thread_open(struct sampler_target *t, uint32_t tid)
{
	int ret = ev_open(t, tid, false);

	if (ret == -ESRCH)
		return 0;
	if (ret) {
		t->st.open_failed++;
		return ret;
	}
	/* PEBS stores are optional: loads alone still classify */
	if (t->o.kind == SAMPLER_PEBS)
		ev_open(t, tid, true);
	t->st.threads_opened++;
	return 0;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* Sorted TIDs of /proc/@pid/task (malloc'd), or NULL with errno set. */
static uint32_t *list_tids(int pid, size_t *n)
{
	char path[64];
	struct dirent *d;
	uint32_t *v = NULL, *nv;
	size_t cap = 0;
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	dir = opendir(path);
	if (!dir)
		return NULL;
	*n = 0;
	while ((d = readdir(dir))) {
		char *end;
		unsigned long tid = strtoul(d->d_name, &end, 10);

		if (*end || !tid || tid > UINT32_MAX)
			continue;
		if (*n == cap) {
			cap = cap ? cap * 2 : 64;
			nv = realloc(v, cap * sizeof(*v));
			if (!nv) {
				free(v);
				closedir(dir);
				errno = ENOMEM;
				return NULL;
			}
			v = nv;
		}
		v[(*n)++] = (uint32_t)tid;
	}
	closedir(dir);
	if (!v)
		v = malloc(sizeof(*v));	/* empty list, not an error */
	if (v)
		qsort(v, *n, sizeof(*v), cmp_u32);
	return v;
}

void sampler_tid_diff(const uint32_t *have, size_t nhave,
		      const uint32_t *now, size_t nnow,
		      uint32_t *add, size_t *nadd,
		      uint32_t *gone, size_t *ngone)
{
	size_t i = 0, j = 0;

	*nadd = 0;
	*ngone = 0;
	while (i < nhave || j < nnow) {
		if (j == nnow || (i < nhave && have[i] < now[j])) {
			gone[(*ngone)++] = have[i++];
		} else if (i == nhave || now[j] < have[i]) {
			add[(*nadd)++] = now[j++];
		} else {
			i++;
			j++;
		}
	}
}

/* Program text [start, end) from /proc/@pid/stat (fields 26, 27). */
static void read_text(int pid, uint64_t *start, uint64_t *end)
{
	char path[64], buf[1024], *p;
	unsigned long long v[2];
	FILE *f;
	int k;

	*start = *end = 0;
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	f = fopen(path, "r");
	if (!f)
		return;
	p = fgets(buf, sizeof(buf), f);
	fclose(f);
	if (!p || !(p = strrchr(buf, ')')))
		return;
	/* after ")": field 3 (state) ... field 26 is the 24th token */
	for (k = 0; k < 23 && p; k++)
		p = strchr(p + 1, ' ');
	if (p && sscanf(p, " %llu %llu", &v[0], &v[1]) == 2) {
		*start = v[0];
		*end = v[1];
	}
}

int sampler_attach(struct sampler_target *t, const struct sampler_opts *o,
		   int pid)
{
	memset(t, 0, sizeof(*t));
	t->pid = pid;
	t->o = *o;
	t->filter.tgid = (u32)pid;
	t->filter.lo = 0;
	t->filter.hi = SAMPLER_USER_TOP;	/* the module narrows it */
	read_text(pid, &t->filter.text_start, &t->filter.text_end);
	return sampler_rescan(t);
}

/* Sorted, distinct TIDs of the events still open (not hung up). */
static uint32_t *live_tids(const struct sampler_target *t, size_t *n)
{
	uint32_t *v = malloc((t->nev + 1) * sizeof(*v));
	size_t i, k = 0;

	*n = 0;
	if (!v)
		return NULL;
	for (i = 0; i < t->nev; i++)
		if (!t->ev[i].hup)
			v[k++] = t->ev[i].tid;
	qsort(v, k, sizeof(*v), cmp_u32);
	for (i = 0; i < k; i++)
		if (!*n || v[*n - 1] != v[i])
			v[(*n)++] = v[i];
	return v;
}

static size_t threads_open(const struct sampler_target *t)
{
	size_t n = 0;
	uint32_t *v = live_tids(t, &n);

	free(v);
	return n;
}

int sampler_rescan(struct sampler_target *t)
{
	uint32_t *now, *have = NULL, *add = NULL, *gone = NULL;
	size_t nnow = 0, nhave = 0, nadd, ngone, i, k;
	int ret = 0, opened = 0;

	now = list_tids(t->pid, &nnow);
	if (!now)
		return errno == ENOENT ? -ESRCH : -errno;
	have = live_tids(t, &nhave);
	add = malloc((nnow + 1) * sizeof(*add));
	gone = malloc((nhave + 1) * sizeof(*gone));
	if (!have || !add || !gone) {
		ret = -ENOMEM;
		goto out;
	}
	sampler_tid_diff(have, nhave, now, nnow, add, &nadd, gone, &ngone);
	/* exited threads: closed by the next drain, after their last records */
	for (i = 0; i < ngone; i++)
		for (k = 0; k < t->nev; k++)
			if (t->ev[k].tid == gone[i])
				t->ev[k].hup = true;
	for (i = 0; i < nadd; i++) {
		int r = thread_open(t, add[i]);

		if (!r)
			opened++;
		else if (!ret)
			ret = r;
	}
	k = threads_open(t);
	if (k > t->st.threads_max)
		t->st.threads_max = k;
	/* some threads refused is not fatal while others are sampled */
	if (k)
		ret = 0;
	else if (!ret)
		ret = nnow ? 0 : -ESRCH;
out:
	free(now);
	free(have);
	free(add);
	free(gone);
	return ret;
}

struct tier_raw_record sampler_raw(enum sampler_kind kind, bool store,
				   const struct perf_ring_sample *s)
{
	struct tier_raw_record r = {
		.config = store ? TIER_EV_ALL_STORES : TIER_EV_LOAD_LATENCY,
		.page_fault = kind == SAMPLER_PAGEFAULT,
		.sample_flags = TIER_SAMPLE_FLAG_ADDR,	/* always sampled */
		.addr = s->addr,
		.weight = s->weight,
		.pid = s->pid,
		.tid = s->tid,
	};

	return r;
}

static int flush_batch(struct sampler_target *t, sampler_sink_fn sink,
		       void *ctx)
{
	int ret;

	if (!t->nbatch)
		return 0;
	ret = sink(ctx, t->batch, t->nbatch);
	t->st.batches++;
	if (!ret)
		t->sent += t->nbatch;
	t->nbatch = 0;
	return ret;
}

long sampler_drain(struct sampler_target *t, sampler_sink_fn sink,
		   void *ctx)
{
	struct perf_ring_sample s[SAMPLER_READ_CHUNK];
	uint64_t type = sampler_type(t->o.kind), sent0 = t->sent;
	size_t i, j, w;
	int err = 0;

	for (i = 0; i < t->nev; i++) {
		struct sampler_ev *e = &t->ev[i];
		const uint8_t *data = (const uint8_t *)e->meta +
				      (e->meta->data_offset ?
				       e->meta->data_offset :
				       (uint64_t)getpagesize());
		size_t n;
		int rounds = 0;

		/* a ring written while we read: a bounded number of chunks */
		do {
			n = perf_ring_read(e->meta, data, type, s,
					   SAMPLER_READ_CHUNK, &t->st.ring);
			for (j = 0; j < n; j++) {
				struct tier_raw_record r =
					sampler_raw(t->o.kind, e->store, &s[j]);
				enum tier_verdict v;
				u64 addr = 0;

				v = tier_decode(&r, &t->filter, &addr);
				t->st.verdicts[v]++;
				if (v != TIER_SAMPLE_OK || err)
					continue;
				t->batch[t->nbatch++] = addr;
				if (t->nbatch == SAMPLER_BATCH)
					err = flush_batch(t, sink, ctx);
			}
		} while (n == SAMPLER_READ_CHUNK && ++rounds < 64);
	}
	if (!err)
		err = flush_batch(t, sink, ctx);
	t->nbatch = 0;
	/* the hung-up events are read to the end: close them */
	for (i = 0, w = 0; i < t->nev; i++) {
		if (t->ev[i].hup) {
			ev_close(&t->ev[i]);
			t->st.threads_closed += !t->ev[i].store;
			continue;
		}
		t->ev[w++] = t->ev[i];
	}
	t->nev = w;
	return err ? err : (long)(t->sent - sent0);
}

size_t sampler_pollfds(const struct sampler_target *t, struct pollfd *pfd,
		       size_t max)
{
	size_t i, n = 0;

	for (i = 0; i < t->nev && n < max; i++) {
		if (t->ev[i].fd < 0)
			continue;
		pfd[n].fd = t->ev[i].fd;
		pfd[n].events = POLLIN;
		pfd[n].revents = 0;
		n++;
	}
	return n;
}

void sampler_note_hup(struct sampler_target *t, const struct pollfd *pfd,
		      size_t n)
{
	size_t i, k;

	for (i = 0; i < n; i++) {
		if (!(pfd[i].revents & (POLLHUP | POLLERR | POLLNVAL)))
			continue;
		for (k = 0; k < t->nev; k++)
			if (t->ev[k].fd == pfd[i].fd)
				t->ev[k].hup = true;
	}
}

void sampler_detach(struct sampler_target *t)
{
	size_t i;

	for (i = 0; i < t->nev; i++)
		ev_close(&t->ev[i]);
	free(t->ev);
	t->ev = NULL;
	t->nev = 0;
	t->cap = 0;
}
