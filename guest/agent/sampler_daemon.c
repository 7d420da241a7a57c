// SPDX-License-Identifier: GPL-2.0
/*
 * The agent's sampling thread; see sampler_daemon.h.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include "sampler_daemon.h"
#include "sysfs_io.h"

#define SD_MAX_SLOTS	64
#define SD_SYNC_MS	250	/* follow targets and threads */
#define SD_SPAN_MS	1000	/* refresh the module's span */
#define SD_POLL_MS	100	/* read the rings at least this often */

struct sd_slot {
	bool active;
	int pid;
	int refused_pid;	/* claim failed or taken back: leave it */
	int fd;			/* samples_in */
	uint64_t next_span_ms;
	uint64_t write_errors;
	struct sampler_target t;
};

static struct {
	pthread_t thread;
	bool running;
	int stop;		/* atomic */
	int verbose;
	char sysfs[128];
	struct sampler_opts o;
	struct sd_slot slot[SD_MAX_SLOTS];
	struct pollfd *pfd;
	size_t pfd_cap;
	/* totals over detached targets (live ones are added at the end) */
	struct sampler_stats done;
	uint64_t sent, claimed, write_errors;
} sd;

static void sd_path(char *out, size_t len, int i, const char *name)
{
	snprintf(out, len, "%s/targets/%d/%s", sd.sysfs, i, name);
}

/* "key value" in a stats file; @dflt if missing. */
static unsigned long long sd_stat(const char *buf, const char *key,
				  unsigned long long dflt)
{
	size_t kl = strlen(key);
	const char *p = buf;

	while (p && *p) {
		if (!strncmp(p, key, kl) && p[kl] == ' ')
			return strtoull(p + kl + 1, NULL, 0);
		p = strchr(p, '\n');
		if (p)
			p++;
	}
	return dflt;
}

static void sd_add_stats(struct sampler_stats *to,
			 const struct sampler_stats *s)
{
	int v;

	to->threads_opened += s->threads_opened;
	to->threads_closed += s->threads_closed;
	to->open_failed += s->open_failed;
	if (s->threads_max > to->threads_max)
		to->threads_max = s->threads_max;
	for (v = 0; v < TIER_NR_VERDICTS; v++)
		to->verdicts[v] += s->verdicts[v];
	to->batches += s->batches;
	to->ring.samples += s->ring.samples;
	to->ring.lost += s->ring.lost;
	to->ring.other += s->ring.other;
	to->ring.bad += s->ring.bad;
}

static int sd_sink(void *ctx, const uint64_t *addr, size_t n)
{
	struct sd_slot *s = ctx;

	size_t len = n * sizeof(*addr);
	ssize_t w = write(s->fd, addr, len);

	/* one batch is at most a page: kernfs takes it whole or not at all */
	if (w != (ssize_t)len) {
		s->write_errors++;
		return w < 0 ? -errno : -EIO;
	}
	return 0;
}

/* @hand_back: give the target back to the module's own source. */
static void sd_detach(int i, bool hand_back)
{
	struct sd_slot *s = &sd.slot[i];
	char path[192];

	if (!s->active)
		return;
	if (hand_back) {
		sd_path(path, sizeof(path), i, "source");
		sysfs_write(path, "kernel");
	}
	sd_add_stats(&sd.done, &s->t.st);
	sd.sent += s->t.sent;
	sd.write_errors += s->write_errors;
	sampler_detach(&s->t);
	close(s->fd);
	s->fd = -1;
	s->active = false;
	s->write_errors = 0;
}

static void sd_span(int i)
{
	struct sd_slot *s = &sd.slot[i];
	char path[192], buf[4096];
	unsigned long long lo, hi;

	sd_path(path, sizeof(path), i, "stats");
	if (sysfs_read(path, buf, sizeof(buf)) <= 0)
		return;
	lo = sd_stat(buf, "span_lo", 0);
	hi = sd_stat(buf, "span_hi", 0);
	if (hi > lo) {
		s->t.filter.lo = lo;
		s->t.filter.hi = hi;
	}
}

static void sd_claim(int i, int pid)
{
	struct sd_slot *s = &sd.slot[i];
	char path[192];
	int ret;

	sd_path(path, sizeof(path), i, "source");
	ret = sysfs_write(path, "user");
	if (ret) {
		fprintf(stderr, "tiering-agent: sampler: target %d (pid %d): "
			"source user refused: %s; left to the module\n", i,
			pid, strerror(-ret));
		s->refused_pid = pid;
		return;
	}
	sd_path(path, sizeof(path), i, "samples_in");
	s->fd = open(path, O_WRONLY | O_CLOEXEC);
	ret = s->fd < 0 ? -errno : sampler_attach(&s->t, &sd.o, pid);
	if (ret) {
		fprintf(stderr, "tiering-agent: sampler: target %d (pid %d): "
			"%s; left to the module\n", i, pid, strerror(-ret));
		if (s->fd >= 0) {
			sampler_detach(&s->t);
			close(s->fd);
		}
		s->fd = -1;
		sd_path(path, sizeof(path), i, "source");
		sysfs_write(path, "kernel");
		s->refused_pid = pid;
		return;
	}
	s->active = true;
	s->pid = pid;
	s->next_span_ms = 0;
	sd.claimed++;
	if (sd.verbose)
		fprintf(stderr, "tiering-agent: sampler %s: target %d pid %d: "
			"%llu threads\n", sampler_kind_name(sd.o.kind), i, pid,
			(unsigned long long)s->t.st.threads_opened);
}

/* Follow the module's targets and their threads. */
static void sd_sync(void)
{
	char path[192], b[32];
	long n;
	uint64_t now = mono_ms();
	int i;

	snprintf(path, sizeof(path), "%s/targets/nr_targets", sd.sysfs);
	n = sysfs_read_long(path, -1);
	for (i = 0; i < SD_MAX_SLOTS; i++) {
		struct sd_slot *s = &sd.slot[i];
		bool running = false;
		long pid = -1;

		if (i < n) {
			sd_path(path, sizeof(path), i, "state");
			running = sysfs_read(path, b, sizeof(b)) > 0 &&
				  !strncmp(b, "running", 7);
			sd_path(path, sizeof(path), i, "pid");
			pid = running ? sysfs_read_long(path, -1) : -1;
		}
		if (s->active && (!running || pid != s->pid))
			sd_detach(i, false);	/* stopped or another pid */
		if (!running || pid <= 0) {
			s->refused_pid = 0;
			continue;
		}
		if (!s->active && pid != s->refused_pid)
			sd_claim(i, (int)pid);
		if (!s->active)
			continue;
		if (sampler_rescan(&s->t) == -ESRCH) {
			sd_detach(i, false);
			continue;
		}
		if (now >= s->next_span_ms) {
			sd_span(i);
			s->next_span_ms = now + SD_SPAN_MS;
		}
	}
}

/* Wait for ring wake-ups (or the poll period), note exited threads. */
static void sd_poll(void)
{
	size_t total = 0, k, i, seg[SD_MAX_SLOTS + 1];

	for (i = 0; i < SD_MAX_SLOTS; i++)
		if (sd.slot[i].active)
			total += sd.slot[i].t.nev;
	if (total + 1 > sd.pfd_cap) {
		struct pollfd *p = realloc(sd.pfd, (total + 1) * sizeof(*p));

		if (!p) {
			poll(NULL, 0, SD_POLL_MS);
			return;
		}
		sd.pfd = p;
		sd.pfd_cap = total + 1;
	}
	for (i = 0, k = 0; i < SD_MAX_SLOTS; i++) {
		seg[i] = k;
		if (sd.slot[i].active)
			k += sampler_pollfds(&sd.slot[i].t, sd.pfd + k,
					     sd.pfd_cap - k);
	}
	seg[SD_MAX_SLOTS] = k;
	if (poll(sd.pfd, k, SD_POLL_MS) <= 0)
		return;
	for (i = 0; i < SD_MAX_SLOTS; i++)
		if (sd.slot[i].active)
			sampler_note_hup(&sd.slot[i].t, sd.pfd + seg[i],
					 seg[i + 1] - seg[i]);
}

static void sd_drain_all(void)
{
	int i;

	for (i = 0; i < SD_MAX_SLOTS; i++) {
		struct sd_slot *s = &sd.slot[i];
		long r;

		if (!s->active)
			continue;
		r = sampler_drain(&s->t, sd_sink, s);
		if (r == -EBUSY) {
			/* someone gave the target back to the module */
			s->refused_pid = s->pid;
			sd_detach(i, false);
		} else if (r == -ESRCH) {
			sd_detach(i, false);
		}
	}
}

static void *sd_main(void *unused)
{
	uint64_t next_sync = 0;
	sigset_t all;
	int i;

	(void)unused;
	/* SIGTERM/SIGINT are the main thread's (it stops this one) */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	while (!__atomic_load_n(&sd.stop, __ATOMIC_ACQUIRE)) {
		if (mono_ms() >= next_sync) {
			sd_sync();
			next_sync = mono_ms() + SD_SYNC_MS;
		}
		sd_poll();
		sd_drain_all();
	}
	sd_drain_all();
	for (i = 0; i < SD_MAX_SLOTS; i++)
		sd_detach(i, true);
	return NULL;
}

/* Nominal core clock (MHz) for the ns -> cycles threshold; 2000 if unknown. */
static unsigned long sd_cpu_mhz(void)
{
	char line[256];
	double mhz = 0;
	FILE *f = fopen("/proc/cpuinfo", "r");

	if (f) {
		while (fgets(line, sizeof(line), f))
			if (sscanf(line, "cpu MHz : %lf", &mhz) == 1)
				break;
		fclose(f);
	}
	return mhz >= 100 && mhz < 100000 ? (unsigned long)mhz : 2000;
}

#define SD_PARAMS	"/sys/module/tiering/parameters/"

/* A module parameter (>= 1), or @dflt without the module or on nonsense. */
static uint64_t sd_param(const char *name, uint64_t dflt)
{
	char path[128];
	long v;

	snprintf(path, sizeof(path), SD_PARAMS "%s", name);
	v = sysfs_read_long(path, -1);
	return v >= 1 ? (uint64_t)v : dflt;
}

int sampler_choose(const char *name, struct sampler_opts *o, char *msg,
		   size_t len)
{
	char why[160];
	bool is_auto = !strcmp(name, "auto");
	uint64_t ldlat_ns;
	int ret;

	if (!strcmp(name, "off")) {
		sampler_default_opts(o, SAMPLER_OFF);
		snprintf(msg, len, "off: the module's own source");
		return 0;
	}
	if (is_auto || !strcmp(name, "pebs")) {
		sampler_default_opts(o, SAMPLER_PEBS);
		o->load_period = sd_param("pebs_load_period", o->load_period);
		o->store_period = sd_param("pebs_store_period",
					   o->store_period);
		ldlat_ns = sd_param("pebs_ldlat_ns", 64);
		o->ldlat_cycles = ldlat_ns * sd_cpu_mhz() / 1000;
		if (!o->ldlat_cycles)
			o->ldlat_cycles = 1;
	} else if (!strcmp(name, "pagefault")) {
		sampler_default_opts(o, SAMPLER_PAGEFAULT);
	} else {
		snprintf(msg, len, "unknown sampler '%s' (auto, pebs, "
			 "pagefault, off)", name);
		return -EINVAL;
	}
	ret = sampler_probe(o, why, sizeof(why));
	if (!ret) {
		snprintf(msg, len, "%s", sampler_kind_name(o->kind));
		return 0;
	}
	if (is_auto) {
		sampler_default_opts(o, SAMPLER_OFF);
		snprintf(msg, len, "auto: %s; the module's own source", why);
		return 0;
	}
	snprintf(msg, len, "sampler %s unavailable: %s", name, why);
	return ret;
}

int sampler_daemon_start(const struct sampler_opts *o, const char *sysfs,
			 int verbose)
{
	struct rlimit rl;
	int i, ret;

	memset(&sd, 0, sizeof(sd));
	sd.o = *o;
	sd.verbose = verbose;
	snprintf(sd.sysfs, sizeof(sd.sysfs), "%s", sysfs);
	for (i = 0; i < SD_MAX_SLOTS; i++)
		sd.slot[i].fd = -1;
	/* one or two descriptors per thread of every target */
	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	ret = pthread_create(&sd.thread, NULL, sd_main, NULL);
	if (ret)
		return -ret;
	sd.running = true;
	return 0;
}

void sampler_daemon_stop(void)
{
	struct sampler_stats *s = &sd.done;

	if (!sd.running)
		return;
	__atomic_store_n(&sd.stop, 1, __ATOMIC_RELEASE);
	pthread_join(sd.thread, NULL);
	sd.running = false;
	free(sd.pfd);
	sd.pfd = NULL;
	printf("{\"sampler\":\"done\",\"kind\":\"%s\",\"targets\":%llu,"
	       "\"threads_opened\":%llu,\"threads_closed\":%llu,"
	       "\"threads_max\":%llu,\"open_failed\":%llu,\"records\":%llu,"
	       "\"lost\":%llu,\"bad\":%llu,\"ok\":%llu,\"ignored\":%llu,"
	       "\"other_pid\":%llu,\"sent\":%llu,\"batches\":%llu,"
	       "\"write_errors\":%llu}\n", sampler_kind_name(sd.o.kind),
	       (unsigned long long)sd.claimed,
	       (unsigned long long)s->threads_opened,
	       (unsigned long long)s->threads_closed,
	       (unsigned long long)s->threads_max,
	       (unsigned long long)s->open_failed,
	       (unsigned long long)s->ring.samples,
	       (unsigned long long)s->ring.lost,
	       (unsigned long long)s->ring.bad,
	       (unsigned long long)s->verdicts[TIER_SAMPLE_OK],
	       (unsigned long long)s->verdicts[TIER_SAMPLE_IGNORE],
	       (unsigned long long)s->verdicts[TIER_SAMPLE_PID],
	       (unsigned long long)sd.sent, (unsigned long long)s->batches,
	       (unsigned long long)sd.write_errors);
	fflush(stdout);
}
