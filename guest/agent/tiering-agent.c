// SPDX-License-Identifier: GPL-2.0
/*
 * tiering-agent: user-space half of the guest tiered-memory manager.
 *
 *   tiering-agent add PID            put PID under management (prints slot)
 *   tiering-agent del PID            stop managing PID
 *   tiering-agent run [-p MS] [-d S] [-b PAGES] [-m PAGES] [-r MB] [-a PCT] [-v]
 *                                    relocation daemon (see below)
 *   tiering-agent stats              one JSON line: manager + per target
 *
 * The module (/sys/kernel/tiering) samples accesses and ranks gVA ranges;
 * stock kernels do not let a module migrate pages, so this daemon does it
 * with move_pages(2): each round (once per classifier epoch) it reads a
 * target's promote list (hottest ranges that fit FMem) and demote list
 * (coldest ranges), finds the pages of those ranges that sit in the wrong
 * node, and swaps them in balanced batches: a batch of cold FMem pages is
 * demoted first, then as many hot SMem pages are promoted as left FMem,
 * plus what fits FMem's free headroom above a reserve.  FMem therefore
 * never grows beyond (free - reserve) and reclaim is never needed.
 *
 * After each round, and at least once a second, `run` also writes its
 * totals to the balloon driver's guest_report file (demeter_balloon.ko),
 * which forwards them to the host on the balloon's statistics queue
 * (vendor tags 0x8000.., see report_to_host()).  Without that file (no
 * balloon, another driver) nothing is reported.
 *
 * With --sampler pebs|pagefault (or auto on a CPU with PEBS) a thread of
 * `run` samples the targets from user space and feeds the module
 * (sampler_daemon.c, sampler.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "page_move.h"
#include "reloc.h"
#include "sysfs_io.h"
#include "sampler_daemon.h"

/* x86-64 numbers, for C libraries older than the syscalls */
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal	424
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open		434
#endif

#define SYSFS		"/sys/kernel/tiering"
#define GUEST_REPORT	"/sys/kernel/demeter_balloon/guest_report"
#define PAGE		4096UL
#define MAX_TARGETS	64
#define MAX_IV		256
#define MAX_VMAS	4096
#define QCHUNK		1024

struct iv {
	unsigned long start, end;
	double density;		/* accesses per page (decayed count) */
	int res_known;		/* the module measured the residency */
	unsigned long long resident, fast;	/* base pages, on FMem */
};

struct pagelist {
	void **v;
	double *dens;		/* density of the page's range */
	size_t n, cap;
};

static volatile int stop;

static unsigned long opt_period_ms = 500, opt_duration_s;
static size_t opt_batch = 512, opt_max_moves = 8192, opt_scan_cap = 262144;
static unsigned long opt_reserve_mb = 8;
static unsigned int opt_cpu_pct;	/* manager CPU budget; 0 = none */
static unsigned long opt_burst_ms = 1000;
static unsigned long opt_alpha_pct;	/* 0: the module's significance_pct */
static int opt_verbose;
static const char *opt_sampler = "auto";	/* sampler_choose() */

/* "key value" line in a stats file. */
static long long stat_get(const char *buf, const char *key)
{
	size_t kl = strlen(key);
	const char *p = buf;

	while (p && *p) {
		if (!strncmp(p, key, kl) && p[kl] == ' ')
			return strtoll(p + kl + 1, NULL, 0);
		p = strchr(p, '\n');
		if (p)
			p++;
	}
	return -1;
}

/* stat_get, 0 for a missing or negative value. */
static long long stat_nonneg(const char *buf, const char *key)
{
	long long v = stat_get(buf, key);

	return v > 0 ? v : 0;
}

static int nr_targets(void)
{
	return (int)sysfs_read_long(SYSFS "/targets/nr_targets", -1);
}

static long target_pid(int i)
{
	char path[128];

	snprintf(path, sizeof(path), SYSFS "/targets/%d/pid", i);
	return sysfs_read_long(path, -1);
}

static int target_running(int i)
{
	char path[128], b[32];

	snprintf(path, sizeof(path), SYSFS "/targets/%d/state", i);
	return sysfs_read(path, b, sizeof(b)) > 0 && !strncmp(b, "running", 7);
}

static int cmd_add(long pid)
{
	char path[128], val[32];
	int n = nr_targets(), i, ret;

	if (n < 0) {
		fprintf(stderr, "tiering-agent: %s missing (module not loaded?)\n",
			SYSFS);
		return 1;
	}
	/* the first slot that is idle or whose process exited */
	for (i = 0; i < n; i++)
		if (!target_running(i))
			break;
	if (i == n) {
		snprintf(val, sizeof(val), "%d", n + 1);
		ret = sysfs_write(SYSFS "/targets/nr_targets", val);
		if (ret) {
			fprintf(stderr, "tiering-agent: nr_targets: %s\n",
				strerror(-ret));
			return 1;
		}
	}
	snprintf(path, sizeof(path), SYSFS "/targets/%d/pid", i);
	snprintf(val, sizeof(val), "%ld", pid);
	ret = sysfs_write(path, val);
	if (ret) {
		fprintf(stderr, "tiering-agent: target %ld: %s\n", pid,
			strerror(-ret));
		return 1;
	}
	printf("%d\n", i);
	return 0;
}

static int cmd_del(long pid)
{
	char path[128];
	int n = nr_targets(), i;

	for (i = 0; i < n; i++) {
		if (target_pid(i) != pid)
			continue;
		snprintf(path, sizeof(path), SYSFS "/targets/%d/pid", i);
		return sysfs_write(path, "-1") ? 1 : 0;
	}
	fprintf(stderr, "tiering-agent: pid %ld is not a target\n", pid);
	return 1;
}

/* The whole of a sysfs file that may exceed a page; malloc'd, or NULL. */
static char *read_all(const char *path, size_t *len)
{
	size_t cap = 16384, n = 0;
	char *buf = malloc(cap), *nb;
	int fd = open(path, O_RDONLY);
	ssize_t r;

	if (fd < 0 || !buf)
		goto fail;
	for (;;) {
		if (cap - n < 4096) {
			nb = realloc(buf, cap * 2);
			if (!nb)
				goto fail;
			buf = nb;
			cap *= 2;
		}
		r = read(fd, buf + n, cap - n - 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			goto fail;
		if (!r)
			break;
		n += (size_t)r;
	}
	close(fd);
	buf[n] = 0;
	*len = n;
	return buf;
fail:
	if (fd >= 0)
		close(fd);
	free(buf);
	return NULL;
}

/*
 * A list file: "epoch N", lines "start end count [resident fast]" (hex,
 * hex, decimal), "end N".  The module formats it whole on each read but
 * a reader needs several reads: if an epoch ended in between, N differs
 * and the file is read again.
 */
static int read_list(int i, const char *name, struct iv *iv, int max,
		     long long *epoch)
{
	char path[128], *buf, *p, *end;
	int n = 0, tries;
	size_t len;

	snprintf(path, sizeof(path), SYSFS "/targets/%d/%s", i, name);
	for (tries = 0; tries < 3; tries++) {
		buf = read_all(path, &len);
		if (!buf)
			return -1;
		end = strstr(buf, "\nend ");
		if (!strncmp(buf, "epoch ", 6) && end &&
		    strtoll(buf + 6, NULL, 10) == strtoll(end + 5, NULL, 10))
			break;
		free(buf);
		buf = NULL;
	}
	if (!buf)
		return -1;
	*end = 0;
	*epoch = strtoll(buf + 6, NULL, 10);
	p = strchr(buf, '\n');
	while (p && *++p && n < max) {
		char *nl = strchr(p, '\n'), *e, *f;

		if (nl)
			*nl = 0;	/* parse within this line only */
		iv[n].start = strtoul(p, &e, 16);
		iv[n].end = strtoul(e, &e, 16);
		iv[n].density = (double)strtoull(e, &e, 10) * PAGE /
				(double)(iv[n].end - iv[n].start + 1);
		iv[n].resident = strtoull(e, &f, 10);
		iv[n].res_known = f != e;
		iv[n].fast = iv[n].res_known ? strtoull(f, &e, 10) : 0;
		if (iv[n].end > iv[n].start)
			n++;
		p = nl;
	}
	free(buf);
	return n;
}

/* Writable private mappings (anon and file), sorted as in maps. */
static int read_vmas(long pid, struct iv *v, int max)
{
	char path[64], line[512];
	FILE *f;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%ld/maps", pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (n < max && fgets(line, sizeof(line), f)) {
		unsigned long s, e;
		char perm[8];

		if (sscanf(line, "%lx-%lx %7s", &s, &e, perm) != 3)
			continue;
		if (perm[1] != 'w' || perm[3] != 'p' || strstr(line, "[v"))
			continue;
		v[n].start = s;
		v[n].end = e;
		n++;
	}
	fclose(f);
	return n;
}

static int pl_push(struct pagelist *l, void *p, double dens)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 4096;
		void **nv = realloc(l->v, cap * sizeof(*nv));
		double *nd;

		if (!nv)
			return -1;
		l->v = nv;
		nd = realloc(l->dens, cap * sizeof(*nd));
		if (!nd)
			return -1;
		l->dens = nd;
		l->cap = cap;
	}
	l->v[l->n] = p;
	l->dens[l->n++] = dens;
	return 0;
}

/* The target is still the process @pidfd was opened on (not exited). */
static int pidfd_alive(int pidfd)
{
	return syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0) == 0;
}

/*
 * A resumable walk over the pages of a list of intervals (in list order)
 * intersected with the target's writable private mappings, returning the
 * pages that sit on @want_node, queried QCHUNK at a time with
 * move_pages(2) (status only).  Intervals found to hold no such page are
 * remembered (struct skipcache) and not re-queried for a few rounds.
 */
struct walker {
	long pid;
	int pidfd;		/* keeps @pid meaningful (pidfd_alive()) */
	const struct iv *iv;
	int niv, i;
	const struct iv *vma;
	int nvma, j;
	unsigned long pos;	/* next address inside iv[i] & vma[j] */
	int started;
	int want_node;
	int want_fast;		/* want_node is FMem (iv_may_hold) */
	size_t *budget;
	size_t found_in_iv;	/* want_node pages seen in iv[i] so far */
	struct skipcache *skip;
	/* current chunk */
	void *q[QCHUNK];
	int st[QCHUNK];
	unsigned long nq, k;
};

#define SKIP_SLOTS	512
#define SKIP_ROUNDS	16

struct skipcache {
	struct { unsigned long start, end; unsigned long long round; } e[SKIP_SLOTS];
	unsigned long long round;
};

static int skip_has(struct skipcache *c, const struct iv *v)
{
	unsigned int h = (unsigned int)((v->start >> 21) ^ (v->end >> 21)) % SKIP_SLOTS;

	return c->e[h].start == v->start && c->e[h].end == v->end &&
	       c->round - c->e[h].round < SKIP_ROUNDS;
}

static void skip_put(struct skipcache *c, const struct iv *v)
{
	unsigned int h = (unsigned int)((v->start >> 21) ^ (v->end >> 21)) % SKIP_SLOTS;

	c->e[h].start = v->start;
	c->e[h].end = v->end;
	c->e[h].round = c->round;
}

/*
 * Whether an interval may hold pages on the wanted tier: the module's
 * last walk counted them per range (resident, of which fast on FMem), so
 * the status queries skip ranges with nothing to move.  The counts are
 * at most one scan interval old; unknown counts (PEBS source) mean yes.
 */
static int iv_may_hold(const struct iv *v, int want_fast)
{
	if (!v->res_known)
		return 1;
	return want_fast ? v->fast > 0 : v->resident > v->fast;
}

/* Next page on want_node; returns 0 when exhausted. */
static int walk_next(struct walker *w, void **page, double *dens)
{
	for (;;) {
		while (w->k < w->nq) {
			unsigned long k = w->k++;

			if (w->st[k] == w->want_node) {
				w->found_in_iv++;
				*page = w->q[k];
				*dens = w->iv[w->i].density;
				return 1;
			}
		}
		/* refill from the current interval x vma */
		if (w->i >= w->niv || !*w->budget)
			return 0;
		if (!w->started) {
			w->started = 1;
			w->j = 0;
			w->pos = 0;
			w->found_in_iv = 0;
			if ((w->skip && skip_has(w->skip, &w->iv[w->i])) ||
			    !iv_may_hold(&w->iv[w->i], w->want_fast)) {
				w->i++;
				w->started = 0;
				continue;
			}
		}
		w->nq = 0;
		w->k = 0;
		while (w->j < w->nvma && w->nq < QCHUNK && *w->budget) {
			unsigned long s = w->iv[w->i].start > w->vma[w->j].start ?
					  w->iv[w->i].start : w->vma[w->j].start;
			unsigned long e = w->iv[w->i].end < w->vma[w->j].end ?
					  w->iv[w->i].end : w->vma[w->j].end;

			if (w->pos < s)
				w->pos = s;
			if (w->pos >= e) {
				w->j++;
				w->pos = 0;
				continue;
			}
			w->q[w->nq++] = (void *)w->pos;
			w->pos += PAGE;
			(*w->budget)--;
		}
		if (w->nq) {
			if (!pidfd_alive(w->pidfd) ||
			    syscall(SYS_move_pages, w->pid, w->nq, w->q, NULL,
				    w->st, 0)) {
				w->nq = 0;
				return 0;
			}
			continue;
		}
		/* interval done */
		if (w->skip && !w->found_in_iv)
			skip_put(w->skip, &w->iv[w->i]);
		w->i++;
		w->started = 0;
	}
}

/* Usable free pages of a node: per zone (not DMA) free minus high mark. */
static long node_free_pages(int node)
{
	char line[256], zone[32];
	long free = -1, total = 0;
	int in = 0, n;
	FILE *f = fopen("/proc/zoneinfo", "r");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		long v;

		if (sscanf(line, "Node %d, zone %31s", &n, zone) == 2) {
			in = n == node && strcmp(zone, "DMA");
			free = -1;
			continue;
		}
		if (!in)
			continue;
		if (sscanf(line, " pages free %ld", &v) == 1)
			free = v;
		else if (free >= 0 && sscanf(line, " high %ld", &v) == 1) {
			if (free > v)
				total += free - v;
			free = -1;
		}
	}
	fclose(f);
	return total;
}

static struct page_move_stats move_stats;

/*
 * Move pages (page_move.c).  The PID number is only used while @pidfd
 * shows the process alive: a live process keeps its number, so the pages
 * moved are the target's, never those of a process that got the number
 * after the target exited.  Returns how many ended on @node.
 */
static size_t move_to(long pid, int pidfd, void **pages, size_t n, int node,
		      size_t *failed)
{
	if (!n)
		return 0;
	if (!pidfd_alive(pidfd)) {
		*failed += n;
		move_stats.call += n;
		return 0;
	}
	return page_move(page_move_syscall, pid, pages, n, node, failed,
			 &move_stats);
}

struct agent_stats {
	unsigned long long rounds, promoted, demoted, failed, queried;
	unsigned long long throttled;	/* polls skipped by the CPU budget */
	unsigned long long balloon_holds; /* polls that only shed for the FMem balloon */
	unsigned long long balloon_shed;  /* pages demoted for the FMem balloon */
	unsigned long long short_batches; /* promotion batches that fell short */
};

#define FMEM_BALLOON	"/sys/kernel/demeter_balloon/fmem"

/*
 * Pages the FMem balloon (demeter_balloon.ko) still wants while it is
 * inflating and growing, else 0.  While it inflates, every FMem page a
 * demotion frees goes to the balloon, not to the promotion it was for
 * (seen: 35,499 pages demoted for 16,558 promoted, 18,941 promotions
 * failed, in a 28 s run whose balloon took 64 MiB of FMem), and when FMem
 * is full of the workload the balloon itself crawls (34 s for 64 MiB in
 * the shadow-paging testbed while the agent only waited).  So the agent
 * stops promoting and gives the balloon the coldest FMem pages instead:
 * the capacity shrinks, and what must leave FMem is what is least used.
 * No balloon driver: 0; a balloon that stopped growing for 5 s: 0
 * (reloc_balloon_holds()).
 */
static size_t fmem_balloon_shortfall(void)
{
	static struct balloon_watch w = { .last_size = -1 };
	long size = sysfs_read_long(FMEM_BALLOON "/size_pages", -1);
	long target = sysfs_read_long(FMEM_BALLOON "/target_pages", -1);

	if (!reloc_balloon_holds(&w, size, target, mono_ms(), 5000))
		return 0;
	return (size_t)(target - size);
}

struct target_state {
	long long last_epoch;
	unsigned int backoff;	/* epochs between rounds (1..8) */
	struct skipcache promo_skip, demo_skip;
	/* promote intervals that qualified last round (reloc_persists) */
	unsigned long q_start[MAX_IV], q_end[MAX_IV];
	size_t nq;
};

/*
 * Keep the promote intervals (in their order, hottest first) that are
 * alpha times denser than the demote list's mean and qualified in the
 * previous round too; remember this round's qualifiers.  Returns how many
 * are kept.  Hysteresis against sampling noise (reloc.h).
 */
static int filter_promo(struct iv *p, int n, double floor,
			unsigned long alpha_pct, struct target_state *ts)
{
	unsigned long qs[MAX_IV], qe[MAX_IV];
	size_t nq = 0;
	int i, keep = 0;

	for (i = 0; i < n; i++) {
		if (!reloc_pair_worthwhile(p[i].density, floor, alpha_pct))
			continue;
		qs[nq] = p[i].start;
		qe[nq++] = p[i].end;
		if (reloc_persists(p[i].start, p[i].end, ts->q_start,
				   ts->q_end, ts->nq))
			p[keep++] = p[i];
	}
	memcpy(ts->q_start, qs, nq * sizeof(qs[0]));
	memcpy(ts->q_end, qe, nq * sizeof(qe[0]));
	ts->nq = nq;
	return keep;
}

/*
 * One relocation round for target slot @ti:
 *  1. walk the promote intervals hottest first for pages in SMem; the
 *     first @headroom of them need no partner; every further one needs a
 *     demotion partner, pulled on demand from the demote intervals
 *     (coldest first, pages in FMem), and is taken only if its range is
 *     alpha times denser than the partner's (reloc_worthwhile rule) and
 *     than the demote list's mean, and only if its range qualified the
 *     round before too (filter_promo(): hysteresis against sampling
 *     noise); the first failure ends the walk, so only worthwhile pages
 *     are queried;
 *  2. move in batches: demote a batch first, then promote as many as
 *     left FMem plus what the headroom allows (reloc_batch).
 */
static unsigned long long self_cpu_ns(void);

static void round_one(int ti, int fmem, int smem, struct target_state *ts,
		      struct agent_stats *as, size_t max_moves,
		      struct cpu_budget *cb, size_t shed)
{
	static struct iv promo_iv[MAX_IV], demo_iv[MAX_IV], vma[MAX_VMAS];
	static double dsz[MAX_IV], dden[MAX_IV];
	double floor_d;
	struct pagelist pro = { 0 }, dem = { 0 };
	size_t budget = opt_scan_cap, np, nd, i, hl, hl0, failed = 0;
	size_t promoted = 0, demoted = 0, moved;
	long long ep, ep2;
	long pid = target_pid(ti), freep, reserve;
	int npi, ndi, nv, pidfd;
	char path[128], val[96];
	unsigned long alpha_pct = opt_alpha_pct ? opt_alpha_pct :
		(unsigned long)sysfs_read_long("/sys/module/tiering/parameters/significance_pct", 200);
	struct walker *pw = NULL, *dw = NULL;
	unsigned long long c0;
	void *pg;
	double d;

	if (pid <= 0)
		return;
	/*
	 * Pin the process by a pidfd, then make sure the slot still names
	 * it: from here on move_to() uses the PID number only while the
	 * pidfd shows the process alive.
	 */
	pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (pidfd < 0)
		return;
	if (target_pid(ti) != pid || !target_running(ti)) {
		close(pidfd);
		return;
	}
	npi = read_list(ti, "promote", promo_iv, MAX_IV, &ep);
	ndi = read_list(ti, "demote", demo_iv, MAX_IV, &ep2);
	if ((npi <= 0 && !shed) || ndi < 0 || (shed && !ndi) ||
	    ep == ts->last_epoch)
		goto out;
	/* after a round that moved nothing, wait longer (up to 8 epochs) */
	if (ts->last_epoch >= 0 && ep < ts->last_epoch + (long long)ts->backoff)
		goto out;
	ts->last_epoch = ep;
	for (i = 0; i < (size_t)ndi; i++) {
		dsz[i] = (double)(demo_iv[i].end - demo_iv[i].start + 1);
		dden[i] = demo_iv[i].density;
	}
	floor_d = reloc_density_floor(dden, dsz, (size_t)ndi);
	npi = filter_promo(promo_iv, npi, floor_d, alpha_pct, ts);
	nv = read_vmas(pid, vma, MAX_VMAS);
	if (nv <= 0)
		goto out;
	pw = calloc(1, sizeof(*pw));
	dw = calloc(1, sizeof(*dw));
	if (!pw || !dw)
		goto out;
	ts->promo_skip.round++;
	ts->demo_skip.round++;
	*pw = (struct walker) { .pid = pid, .pidfd = pidfd, .iv = promo_iv,
		.niv = npi,
		.vma = vma, .nvma = nv, .want_node = smem, .want_fast = 0,
		.budget = &budget, .skip = &ts->promo_skip };
	*dw = (struct walker) { .pid = pid, .pidfd = pidfd, .iv = demo_iv,
		.niv = ndi,
		.vma = vma, .nvma = nv, .want_node = fmem, .want_fast = 1,
		.budget = &budget, .skip = &ts->demo_skip };

	if (shed) {
		/* no promotion: the coldest FMem pages go, up to the shortfall */
		size_t want = shed < max_moves ? shed : max_moves;
		void *dp;
		double dd;

		while (dem.n < want && walk_next(dw, &dp, &dd))
			pl_push(&dem, dp, dd);
		as->queried += opt_scan_cap - budget;
		c0 = self_cpu_ns();
		demoted = move_to(pid, pidfd, dem.v, dem.n, smem, &failed);
		cpu_budget_learn(cb, self_cpu_ns() - c0, dem.n);
		as->balloon_shed += demoted;
		np = 0;
		nd = dem.n;
		hl0 = 0;
		goto account;
	}
	freep = node_free_pages(fmem);
	reserve = (long)(opt_reserve_mb << 20) / (long)PAGE;
	hl0 = hl = freep > reserve ? (size_t)(freep - reserve) : 0;
	while (pro.n < max_moves && walk_next(pw, &pg, &d)) {
		if (pro.n >= hl) {
			size_t j = pro.n - hl;
			void *dp;
			double dd;

			while (dem.n <= j && walk_next(dw, &dp, &dd))
				pl_push(&dem, dp, dd);
			if (dem.n <= j)
				break;
			/* a partner is at least as dense as the cold mean */
			if (!reloc_pair_worthwhile(d, dem.dens[j] > floor_d ?
						   dem.dens[j] : floor_d,
						   alpha_pct))
				break;
		}
		pl_push(&pro, pg, d);
	}
	as->queried += opt_scan_cap - budget;
	reloc_plan(pro.n, dem.n, hl, max_moves, &np, &nd);

	c0 = self_cpu_ns();
	for (i = 0; i < np;) {
		size_t want = np - i < opt_batch ? np - i : opt_batch;
		size_t dn = 0, got = 0, p;

		if (demoted < nd) {
			dn = nd - demoted < want ? nd - demoted : want;
			got = move_to(pid, pidfd, dem.v + demoted, dn, smem,
				      &failed);
			demoted += dn;
		}
		p = reloc_batch(want, got, &hl);
		if (!p)
			break;
		moved = move_to(pid, pidfd, pro.v + i, p, fmem, &failed);
		promoted += moved;
		i += p;
		/*
		 * Short: FMem is below its high watermark (the page allocator
		 * refuses a promotion there even after a demotion freed a
		 * page).  Keep going: the next demotions lift it above the
		 * mark, and ending the round here left the agent demoting one
		 * batch per round and promoting nothing (seen after the
		 * balloon had taken FMem down to the mark).
		 */
		if (moved < p)
			as->short_batches++;
		if (stop)
			break;
	}
	cpu_budget_learn(cb, self_cpu_ns() - c0, i + demoted);
account:
	if (promoted || demoted)
		ts->backoff = 1;
	else if (ts->backoff < 8)
		ts->backoff *= 2;
	as->rounds++;
	as->promoted += promoted;
	as->demoted += demoted;
	as->failed += failed;
	snprintf(path, sizeof(path), SYSFS "/targets/%d/relocated", ti);
	snprintf(val, sizeof(val), "%zu %zu %zu", promoted, demoted, failed);
	sysfs_write(path, val);
	if (opt_verbose && (np || nd))
		fprintf(stderr, "agent: target %d pid %ld epoch %lld: "
			"promo %zu (partners %zu, headroom %zu) -> "
			"promoted %zu demoted %zu failed %zu, queried %zu\n",
			ti, pid, ep, pro.n, dem.n, hl0, promoted, demoted,
			failed, opt_scan_cap - budget);
out:
	close(pidfd);
	free(pw);
	free(dw);
	free(pro.v);
	free(pro.dens);
	free(dem.v);
	free(dem.dens);
}

static unsigned long long self_cpu_ns(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000ULL +
	       (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000ULL;
}

/* The manager's CPU: this agent plus the module's worker thread. */
static unsigned long long manager_cpu_ns(void)
{
	char g[4096];

	if (sysfs_read(SYSFS "/stats", g, sizeof(g)) < 0)
		return self_cpu_ns();
	return self_cpu_ns() + (unsigned long long)stat_nonneg(g, "worker_cpu_ns");
}

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

/* Sum of N<node>=pages over /proc/PID/numa_maps. */
static void numa_pages(long pid, long long *per_node, int max)
{
	char path[64], line[1024];
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%ld/numa_maps", pid);
	f = fopen(path, "r");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		char *p = line;

		while ((p = strstr(p, " N"))) {
			char *e;
			long nid = strtol(p + 2, &e, 10);

			if (*e == '=' && nid >= 0 && nid < max)
				per_node[nid] += strtoll(e + 1, &e, 10);
			p = e;
		}
	}
	fclose(f);
}

/*
 * Statistics tags of the balloon's vendor range (guest/kmod/balloon
 * guest_report; named by devices/demeter_balloon/src/stats.rs).
 */
enum {
	TAG_TARGETS = 0x8000,	/* running targets */
	TAG_FMEM_PAGES,		/* their pages on FMem (numa_maps) */
	TAG_SMEM_PAGES,		/* their pages on SMem */
	TAG_PROMOTED,		/* pages promoted by this agent */
	TAG_DEMOTED,		/* pages demoted */
	TAG_FAILED,		/* pages whose move failed */
	TAG_ROUNDS,		/* relocation rounds */
	TAG_SAMPLES,		/* module: access samples */
	TAG_SAMPLES_PER_S,	/* module: samples/s, running targets */
	TAG_SOURCE,		/* 0 none, 1 abit, 2 pebs (best running target) */
	TAG_EPOCHS,		/* module: classifier epochs */
	TAG_AGENT_CPU_NS,	/* this agent's CPU time */
	TAG_KERNEL_CPU_NS,	/* module worker's CPU time */
	TAG_FMEM_ACCESSES,	/* module: sampled accesses to FMem pages */
	TAG_SMEM_ACCESSES,	/* module: sampled accesses to SMem pages */
};

/*
 * numa_maps walks every PTE of the target, like the module's residency
 * walk, which measured ~0.1 s of CPU per 640 MiB under nested TCG
 * (tiering-gups, resident_ns / resident_walks): once a second that would
 * be ~10 % of a vCPU on its own.
 */
#define NUMA_REFRESH_MS	10000	/* numa_maps walks at most every 10 s */

struct report_state {
	int disabled;		/* the driver refused a report: stop trying */
	uint64_t numa_ms;	/* last numa_maps walk */
	unsigned long long fmem_pages, smem_pages;
};

/*
 * Write the current totals to GUEST_REPORT in one write ("TAG VALUE"
 * lines, all or nothing on the driver's side).  A missing file is normal.
 */
static void report_to_host(const struct agent_stats *as, int fmem, int smem,
			   struct report_state *rs)
{
	char g[4096], path[128], src[32], buf[1024];
	unsigned long long running = 0, source = 0;
	int n = nr_targets(), i, fd, len;
	uint64_t now = mono_ms();
	int numa = !rs->numa_ms || now - rs->numa_ms >= NUMA_REFRESH_MS;
	ssize_t w;

	if (rs->disabled || access(GUEST_REPORT, W_OK))
		return;
	if (sysfs_read(SYSFS "/stats", g, sizeof(g)) < 0)
		g[0] = 0;
	if (numa) {
		rs->fmem_pages = rs->smem_pages = 0;
		rs->numa_ms = now;
	}
	for (i = 0; i < n && i < MAX_TARGETS; i++) {
		long long pages[64] = { 0 };
		long pid;

		if (!target_running(i))
			continue;
		running++;
		snprintf(path, sizeof(path), SYSFS "/targets/%d/source", i);
		if (sysfs_read(path, src, sizeof(src)) > 0) {
			if (!strncmp(src, "pebs", 4))
				source = 2;
			else if (!strncmp(src, "abit", 4) && source < 1)
				source = 1;
		}
		pid = target_pid(i);
		if (!numa || pid <= 0)
			continue;
		numa_pages(pid, pages, 64);
		if (fmem < 64)
			rs->fmem_pages += (unsigned long long)pages[fmem];
		if (smem < 64)
			rs->smem_pages += (unsigned long long)pages[smem];
	}
	len = snprintf(buf, sizeof(buf),
		       "%d %llu\n%d %llu\n%d %llu\n%d %llu\n%d %llu\n"
		       "%d %llu\n%d %llu\n%d %llu\n%d %llu\n%d %llu\n"
		       "%d %llu\n%d %llu\n%d %llu\n%d %llu\n%d %llu\n",
		       TAG_TARGETS, running,
		       TAG_FMEM_PAGES, rs->fmem_pages,
		       TAG_SMEM_PAGES, rs->smem_pages,
		       TAG_PROMOTED, as->promoted,
		       TAG_DEMOTED, as->demoted,
		       TAG_FAILED, as->failed,
		       TAG_ROUNDS, as->rounds,
		       TAG_SAMPLES, (unsigned long long)stat_nonneg(g, "samples"),
		       TAG_SAMPLES_PER_S,
		       (unsigned long long)stat_nonneg(g, "sample_rate"),
		       TAG_SOURCE, source,
		       TAG_EPOCHS, (unsigned long long)stat_nonneg(g, "epochs"),
		       TAG_AGENT_CPU_NS, self_cpu_ns(),
		       TAG_KERNEL_CPU_NS,
		       (unsigned long long)stat_nonneg(g, "worker_cpu_ns"),
		       TAG_FMEM_ACCESSES,
		       (unsigned long long)stat_nonneg(g, "fmem_samples"),
		       TAG_SMEM_ACCESSES,
		       (unsigned long long)stat_nonneg(g, "smem_samples"));
	if (len <= 0 || (size_t)len >= sizeof(buf))
		return;
	fd = open(GUEST_REPORT, O_WRONLY);
	if (fd < 0)
		return;		/* the driver went away */
	w = write(fd, buf, (size_t)len);
	if (w < 0 && errno == EINVAL) {
		/* an older driver or a tag it does not take: do not retry */
		fprintf(stderr, "tiering-agent: %s refused the report: %s; "
			"not reporting to the host\n", GUEST_REPORT,
			strerror(errno));
		rs->disabled = 1;
	}
	close(fd);
}

/* --sampler: user-space sampling that feeds the module (sampler_daemon.c) */
static int start_sampler(void)
{
	struct sampler_opts o;
	char msg[256];
	int ret = sampler_choose(opt_sampler, &o, msg, sizeof(msg));

	if (ret) {
		fprintf(stderr, "tiering-agent: %s\n", msg);
		return ret;
	}
	if (opt_verbose || strcmp(opt_sampler, "auto"))
		fprintf(stderr, "tiering-agent: sampler %s\n", msg);
	if (o.kind == SAMPLER_OFF)
		return 0;
	ret = sampler_daemon_start(&o, SYSFS, opt_verbose);
	if (ret)
		fprintf(stderr, "tiering-agent: sampler thread: %s\n",
			strerror(-ret));
	return ret;
}

static int cmd_run(void)
{
	static struct target_state tstate[MAX_TARGETS];
	struct agent_stats as = { 0 };
	struct report_state rs = { 0 };
	unsigned long long reported_rounds = 0;
	uint64_t t0 = mono_ms(), next, last_report = 0;
	int fmem = (int)sysfs_read_long(SYSFS "/fmem_node", -1);
	int smem = (int)sysfs_read_long(SYSFS "/smem_node", -1);
	struct cpu_budget cb;
	int i;

	if (fmem < 0 || smem < 0) {
		fprintf(stderr, "tiering-agent: need an FMem and an SMem node "
			"(module says %d/%d)\n", fmem, smem);
		return 1;
	}
	for (i = 0; i < MAX_TARGETS; i++) {
		tstate[i].last_epoch = -1;
		tstate[i].backoff = 1;
	}
	signal(SIGTERM, on_term);
	signal(SIGINT, on_term);
	if (start_sampler())
		return 1;
	cpu_budget_init(&cb, opt_cpu_pct, opt_burst_ms, t0 * 1000000ULL,
			manager_cpu_ns());
	next = t0;
	while (!stop) {
		int n = nr_targets();
		struct timespec ts;
		uint64_t now;
		size_t shed;

		if (n < 0)
			break;	/* module unloaded */
		/* one look at the FMem balloon per poll, for all targets */
		shed = fmem_balloon_shortfall();
		if (shed)
			as.balloon_holds++;
		for (i = 0; i < n && i < MAX_TARGETS && !stop; i++) {
			size_t allowed;

			cpu_budget_update(&cb, mono_ms() * 1000000ULL,
					  manager_cpu_ns());
			/* a swap moves two pages: budget / 2 promotions */
			allowed = cpu_budget_pages(&cb, 2 * opt_max_moves) / 2;
			if (!allowed) {
				as.throttled++;
				break;	/* over the CPU budget: wait */
			}
			if (target_running(i))
				round_one(i, fmem, smem, &tstate[i], &as,
					  allowed, &cb, shed);
		}
		now = mono_ms();
		/* after a round, and at least once a second */
		if (as.rounds != reported_rounds || now - last_report >= 1000) {
			report_to_host(&as, fmem, smem, &rs);
			reported_rounds = as.rounds;
			last_report = now;
		}
		if (opt_duration_s && now - t0 >= opt_duration_s * 1000)
			break;
		next += opt_period_ms / 2;	/* poll twice per epoch */
		if (next < now)
			next = now;
		ts.tv_sec = (next - now) / 1000;
		ts.tv_nsec = (long)((next - now) % 1000) * 1000000L;
		nanosleep(&ts, NULL);
	}
	sampler_daemon_stop();
	printf("{\"agent\":\"done\",\"rounds\":%llu,\"promoted\":%llu,"
	       "\"demoted\":%llu,\"failed\":%llu,\"queried\":%llu,"
	       "\"agent_cpu_ns\":%llu,\"wall_ms\":%llu,\"cpu_pct_budget\":%u,"
	       "\"throttled_polls\":%llu,\"page_move_ns\":%.0f,"
	       "\"balloon_holds\":%llu,\"balloon_shed\":%llu,"
	       "\"short_batches\":%llu,\"failed_why\":{\"nomem\":%llu,"
	       "\"busy\":%llu,\"gone\":%llu,\"stayed\":%llu,\"other\":%llu,"
	       "\"call\":%llu},\"retried\":%llu,\"partial_calls\":%llu}\n",
	       as.rounds,
	       as.promoted, as.demoted, as.failed, as.queried, self_cpu_ns(),
	       (unsigned long long)(mono_ms() - t0), opt_cpu_pct, as.throttled,
	       cb.page_ns, as.balloon_holds, as.balloon_shed, as.short_batches,
	       move_stats.nomem, move_stats.busy, move_stats.gone,
	       move_stats.stayed, move_stats.other, move_stats.call,
	       move_stats.retried, move_stats.partial);
	return 0;
}

static int cmd_stats(void)
{
	char g[4096], t[4096], path[128], src[32];
	int n = nr_targets(), i, fmem, smem;

	if (n < 0 || sysfs_read(SYSFS "/stats", g, sizeof(g)) < 0) {
		fprintf(stderr, "tiering-agent: %s missing\n", SYSFS);
		return 1;
	}
	fmem = (int)stat_get(g, "fmem_node");
	smem = (int)stat_get(g, "smem_node");
	printf("{\"manager\":{\"worker_cpu_ns\":%lld,\"samples\":%lld,"
	       "\"sample_rate\":%lld,\"epochs\":%lld,\"fmem_node\":%d,"
	       "\"smem_node\":%d,\"fmem_capacity_pages\":%lld,"
	       "\"fmem_free_pages\":%ld,\"smem_free_pages\":%ld},\"targets\":[",
	       stat_get(g, "worker_cpu_ns"), stat_get(g, "samples"),
	       stat_get(g, "sample_rate"), stat_get(g, "epochs"), fmem, smem,
	       stat_get(g, "fmem_capacity_pages"), node_free_pages(fmem),
	       smem >= 0 ? node_free_pages(smem) : 0);
	for (i = 0; i < n; i++) {
		long long pages[64] = { 0 };
		long pid = target_pid(i);
		char *nl;

		snprintf(path, sizeof(path), SYSFS "/targets/%d/stats", i);
		if (sysfs_read(path, t, sizeof(t)) < 0)
			continue;
		snprintf(path, sizeof(path), SYSFS "/targets/%d/source", i);
		if (sysfs_read(path, src, sizeof(src)) < 0)
			strcpy(src, "?");
		nl = strchr(src, '\n');
		if (nl)
			*nl = 0;
		if (pid > 0)
			numa_pages(pid, pages, 64);
		printf("%s{\"slot\":%d,\"pid\":%ld,\"state\":%lld,"
		       "\"source\":\"%s\",\"sample_rate\":%lld,\"samples\":%lld,"
		       "\"ranges\":%lld,\"splits\":%lld,\"merges\":%lld,"
		       "\"scan_ns\":%lld,\"window_ms\":%lld,\"nr_hot\":%lld,"
		       "\"hot_bytes\":%lld,\"promoted\":%lld,\"demoted\":%lld,"
		       "\"reloc_failed\":%lld,\"fmem_pages\":%lld,"
		       "\"smem_pages\":%lld}",
		       i ? "," : "", i, pid, stat_get(t, "state"), src,
		       stat_get(t, "sample_rate"), stat_get(t, "samples"),
		       stat_get(t, "ranges"), stat_get(t, "splits"),
		       stat_get(t, "merges"), stat_get(t, "scan_ns"),
		       stat_get(t, "window_ms"), stat_get(t, "nr_hot"),
		       stat_get(t, "hot_bytes"), stat_get(t, "promoted"),
		       stat_get(t, "demoted"), stat_get(t, "reloc_failed"),
		       fmem >= 0 && fmem < 64 ? pages[fmem] : 0,
		       smem >= 0 && smem < 64 ? pages[smem] : 0);
	}
	printf("]}\n");
	return 0;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: tiering-agent add PID | del PID | stats |\n"
		"       run [-p EPOCH_MS] [-d SECONDS] [-b BATCH_PAGES] "
		"[-m MAX_PAGES_PER_ROUND] [-r RESERVE_MB] [-a ALPHA_PCT]\n"
		"           [-c CPU_PCT [-B BURST_MS]] [-S|--sampler auto|pebs|pagefault|off] [-v]\n"
		"  -c: cap the manager's CPU (agent + kernel worker) at CPU_PCT %%\n"
		"      of one CPU on average (0 = no cap); -B: the burst allowed\n"
		"  -S: sample from user space and feed the module (default auto:\n"
		"      PEBS where the CPU has it, else the module's own source);\n"
		"      pagefault works anywhere but is a weak hotness signal\n");
	exit(2);
}

static unsigned long arg_ul(const char *s, unsigned long lo, unsigned long hi)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 0);
	if (errno || *end || v < lo || v > hi)
		usage();
	return v;
}

static const struct option run_opts[] = {
	{ "sampler", required_argument, NULL, 'S' },
	{ NULL, 0, NULL, 0 },
};

int main(int argc, char **argv)
{
	int c;

	if (argc < 2)
		usage();
	if (!strcmp(argv[1], "add") && argc == 3)
		return cmd_add((long)arg_ul(argv[2], 1, 0x7fffffff));
	if (!strcmp(argv[1], "del") && argc == 3)
		return cmd_del((long)arg_ul(argv[2], 1, 0x7fffffff));
	if (!strcmp(argv[1], "stats") && argc == 2)
		return cmd_stats();
	if (strcmp(argv[1], "run"))
		usage();
	optind = 2;
	while ((c = getopt_long(argc, argv, "p:d:b:m:r:a:c:B:S:v", run_opts,
				NULL)) != -1) {
		switch (c) {
		case 'p': opt_period_ms = arg_ul(optarg, 10, 600000); break;
		case 'd': opt_duration_s = arg_ul(optarg, 1, 86400 * 365); break;
		case 'b': opt_batch = arg_ul(optarg, 1, 1 << 20); break;
		case 'm': opt_max_moves = arg_ul(optarg, 1, 1 << 24); break;
		case 'r': opt_reserve_mb = arg_ul(optarg, 0, 1 << 20); break;
		case 'a': opt_alpha_pct = arg_ul(optarg, 100, 100000); break;
		case 'c': opt_cpu_pct = (unsigned int)arg_ul(optarg, 0, 100); break;
		case 'B': opt_burst_ms = arg_ul(optarg, 0, 600000); break;
		case 'S':
			if (strcmp(optarg, "auto") && strcmp(optarg, "pebs") &&
			    strcmp(optarg, "pagefault") && strcmp(optarg, "off"))
				usage();
			opt_sampler = optarg;
			break;
		case 'v': opt_verbose = 1; break;
		default: usage();
		}
	}
	return cmd_run();
}
