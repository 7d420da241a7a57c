// SPDX-License-Identifier: GPL-2.0
/*
 * The agent's sampler (guest/agent/sampler.c) with real perf events on
 * this machine: the software page-fault event (PERF_COUNT_SW_PAGE_FAULTS
 * with PERF_SAMPLE_ADDR), which needs no PMU.  A child process starts
 * worker threads BEFORE the sampler attaches; each touches fresh pages
 * of its own region.  Checked: every thread that existed at attach is
 * sampled (its region's faults arrive through the mmap'd rings, the
 * reader and tier_decode()); a thread created after attach is picked up
 * by a rescan; an exited thread's events are closed after their last
 * records; the process's exit ends the target.  Then the agent's sampling
 * thread (sampler_daemon.c) against a directory laid out as the module's
 * sysfs: it claims the target (source = user), writes the addresses to
 * samples_in in batches, and hands the target back (source = kernel).
 *
 * Skipped (exit 0, "SKIP") only where the kernel refuses the software
 * event itself (perf_event_paranoid for a non-root user, seccomp).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <sys/stat.h>
#include "../../../agent/sampler_daemon.h"

#define NT	4		/* workers started before attach */
#define NMAX	(NT + 1)	/* plus one started after */
#define NPAGES	256		/* pages each worker touches */

static int failed;

#define EXPECT(cond, ...)						\
	do {								\
		if (!(cond)) {						\
			fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__,	\
				__LINE__, #cond);			\
			fprintf(stderr, __VA_ARGS__);			\
			fprintf(stderr, "\n");				\
			failed++;					\
		}							\
	} while (0)

struct hello {
	uint32_t tid;
	uint32_t done;		/* 0: ready, 1: touched a fresh region */
	uint64_t start;		/* that region */
};

static int info_pipe[2], go_pipe[NMAX][2], cmd_pipe[2];
static long page;

/* ---- the child: a multi-threaded program ---- */

static void say(const struct hello *h)
{
	if (write(info_pipe[1], h, sizeof(*h)) != (ssize_t)sizeof(*h))
		_exit(3);
}

/* On each 'g': touch every page of a fresh region, report it. */
static void *worker(void *arg)
{
	long k = (long)arg, i;
	struct hello h = { .tid = (uint32_t)syscall(SYS_gettid) };
	char *r = NULL, c;

	say(&h);
	while (read(go_pipe[k][0], &c, 1) == 1 && c == 'g') {
		if (r)
			munmap(r, NPAGES * page);
		r = mmap(NULL, NPAGES * page, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (r == MAP_FAILED)
			_exit(4);
		/* one fault per base page, not per huge page */
		madvise(r, NPAGES * page, MADV_NOHUGEPAGE);
		for (i = 0; i < NPAGES; i++)
			r[i * page] = 1;
		h.done = 1;
		h.start = (uint64_t)(uintptr_t)r;
		say(&h);
	}
	return NULL;	/* 'x': the thread exits */
}

static void child(void)
{
	pthread_t th[NMAX];
	long k = 0;
	char c;

	for (; k < NT; k++)
		if (pthread_create(&th[k], NULL, worker, (void *)k))
			_exit(5);
	while (read(cmd_pipe[0], &c, 1) == 1) {
		if (c == 'n' && k < NMAX) {
			if (pthread_create(&th[k], NULL, worker, (void *)k))
				_exit(5);
			k++;
		} else if (c == 'q') {
			break;
		}
	}
	_exit(0);
}

/* ---- the parent: the agent's side ---- */

struct capture {
	uint64_t *a;
	size_t n, cap;
};

static int cap_sink(void *ctx, const uint64_t *addr, size_t n)
{
	struct capture *c = ctx;

	if (c->n + n > c->cap) {
		c->cap = (c->n + n) * 2;
		c->a = realloc(c->a, c->cap * sizeof(*c->a));
		if (!c->a)
			return -ENOMEM;
	}
	memcpy(c->a + c->n, addr, n * sizeof(*addr));
	c->n += n;
	return 0;
}

/* Distinct pages of [start, start + NPAGES pages) among the samples. */
static size_t in_region(const struct capture *c, uint64_t start)
{
	bool seen[NPAGES] = { false };
	size_t i, n = 0;

	for (i = 0; i < c->n; i++) {
		uint64_t p = (c->a[i] - start) / (uint64_t)page;

		if (c->a[i] >= start && p < NPAGES && !seen[p]) {
			seen[p] = true;
			n++;
		}
	}
	return n;
}

static void get_hello(struct hello *h)
{
	if (read(info_pipe[0], h, sizeof(*h)) != (ssize_t)sizeof(*h)) {
		fprintf(stderr, "FAIL: the child went away\n");
		exit(1);
	}
}

/*
 * Release workers [from, to) and wait for each to report its touches;
 * @h[k] gets worker k's region (workers are matched by TID).
 */
static void touch(struct hello *h, int from, int to)
{
	struct hello r;
	int k, j;

	for (k = from; k < to; k++)
		if (write(go_pipe[k][1], "g", 1) != 1)
			exit(1);
	for (k = from; k < to; k++) {
		get_hello(&r);
		EXPECT(r.done == 1, "worker %u did not report done", r.tid);
		for (j = from; j < to; j++)
			if (h[j].tid == r.tid)
				h[j] = r;
	}
}

static void start_child(pid_t *pid)
{
	int k;

	if (pipe(info_pipe) || pipe(cmd_pipe))
		exit(1);
	for (k = 0; k < NMAX; k++)
		if (pipe(go_pipe[k]))
			exit(1);
	*pid = fork();
	if (*pid < 0)
		exit(1);
	if (!*pid)
		child();
}

static void end_child(pid_t pid)
{
	int status, k;

	if (write(cmd_pipe[1], "q", 1) != 1)
		exit(1);
	waitpid(pid, &status, 0);
	EXPECT(WIFEXITED(status) && !WEXITSTATUS(status), "child status %d",
	       status);
	close(info_pipe[0]);
	close(info_pipe[1]);
	close(cmd_pipe[0]);
	close(cmd_pipe[1]);
	for (k = 0; k < NMAX; k++) {
		close(go_pipe[k][0]);
		close(go_pipe[k][1]);
	}
}

static void put_file(const char *dir, const char *name, const char *s)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	if (!f || fputs(s, f) < 0 || fclose(f))
		exit(1);
}

static void get_file(const char *dir, const char *name, char *buf,
		     size_t len)
{
	char path[256];
	FILE *f;
	size_t n = 0;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "r");
	if (f) {
		n = fread(buf, 1, len - 1, f);
		fclose(f);
	}
	buf[n] = 0;
}

/*
 * The agent's sampling thread against a fake module directory: targets/0
 * names the child; regular files stand for source, samples_in, stats.
 */
static void daemon_test(const struct sampler_opts *o)
{
	char root[] = "/tmp/sampler-native-XXXXXX", t0[300], buf[400];
	struct hello h[NT];
	struct capture c = { 0 };
	size_t n;
	FILE *f;
	pid_t pid;
	int k, round, after = 0;

	if (!mkdtemp(root))
		exit(1);
	snprintf(t0, sizeof(t0), "%s/targets", root);
	mkdir(t0, 0700);
	put_file(t0, "nr_targets", "1\n");
	snprintf(t0, sizeof(t0), "%s/targets/0", root);
	mkdir(t0, 0700);
	start_child(&pid);
	for (k = 0; k < NT; k++)
		get_hello(&h[k]);
	snprintf(buf, sizeof(buf), "%d\n", (int)pid);
	put_file(t0, "pid", buf);
	put_file(t0, "state", "running\n");
	put_file(t0, "source", "abit\n");
	put_file(t0, "samples_in", "");
	put_file(t0, "stats", "span_lo 0x1000\nspan_hi 0x800000000000\n");
	EXPECT(sampler_daemon_start(o, root, 1) == 0, "daemon start");
	/*
	 * Touch fresh regions until the daemon has claimed the target (no
	 * event tells when its attach is done), then three more rounds.
	 */
	for (round = 0; round < 500 && after < 3; round++) {
		touch(h, 0, NT);
		get_file(t0, "source", buf, sizeof(buf));
		after += !strncmp(buf, "user", 4);
	}
	EXPECT(after == 3, "not claimed after %d rounds: source '%s'", round,
	       buf);
	sampler_daemon_stop();
	get_file(t0, "source", buf, sizeof(buf));
	EXPECT(!strncmp(buf, "kernel", 6), "source '%s' after stop", buf);
	snprintf(buf, sizeof(buf), "%s/samples_in", t0);
	f = fopen(buf, "r");
	EXPECT(f != NULL, "samples_in");
	if (f) {
		uint64_t a;

		while (fread(&a, sizeof(a), 1, f) == 1)
			cap_sink(&c, &a, 1);
		fclose(f);
	}
	/* the last round's regions: sampled through the daemon */
	for (k = 0; k < NT; k++) {
		n = in_region(&c, h[k].start);
		printf("daemon: thread %u: %zu of %d pages in samples_in\n",
		       h[k].tid, n, NPAGES);
		EXPECT(n >= NPAGES * 9 / 10, "thread %u: %zu", h[k].tid, n);
	}
	/* the span from the stats file applies: nothing below 0x1000 */
	for (n = 0; n < c.n; n++)
		if (c.a[n] < 0x1000)
			break;
	EXPECT(n == c.n, "address %#llx below the span",
	       (unsigned long long)c.a[n]);
	end_child(pid);
	free(c.a);
	snprintf(buf, sizeof(buf), "rm -rf %s", root);
	if (system(buf))
		fprintf(stderr, "could not remove %s\n", root);
}

int main(void)
{
	struct sampler_opts o;
	struct sampler_target t;
	struct capture c = { 0 };
	struct hello h[NMAX];
	struct pollfd pfd[4 * NMAX];
	char why[256];
	pid_t pid;
	size_t n;
	int k, ret;

	page = sysconf(_SC_PAGESIZE);
	sampler_default_opts(&o, SAMPLER_PAGEFAULT);
	ret = sampler_probe(&o, why, sizeof(why));
	if (ret) {
		printf("SKIP sampler_native_test: %s\n", why);
		return 0;
	}
	start_child(&pid);

	/* every worker exists before the sampler attaches */
	for (k = 0; k < NT; k++)
		get_hello(&h[k]);
	ret = sampler_attach(&t, &o, pid);
	EXPECT(!ret, "attach: %s", strerror(-ret));
	/* the main thread and the NT workers */
	EXPECT(t.st.threads_opened == NT + 1, "%llu threads opened",
	       (unsigned long long)t.st.threads_opened);
	touch(h, 0, NT);
	EXPECT(sampler_drain(&t, cap_sink, &c) >= NT * NPAGES * 9 / 10,
	       "%zu samples", c.n);
	for (k = 0; k < NT; k++) {
		n = in_region(&c, h[k].start);
		printf("thread %u (existed before attach): %zu of %d page "
		       "faults sampled\n", h[k].tid, n, NPAGES);
		EXPECT(n >= NPAGES * 9 / 10, "thread %u: %zu samples",
		       h[k].tid, n);
	}
	EXPECT(t.st.ring.lost == 0, "%llu lost",
	       (unsigned long long)t.st.ring.lost);

	/* a thread created after attach: sampled from the next rescan */
	if (write(cmd_pipe[1], "n", 1) != 1)
		return 1;
	get_hello(&h[NT]);
	EXPECT(sampler_rescan(&t) == 0, "rescan");
	EXPECT(t.st.threads_opened == NT + 2, "%llu threads opened",
	       (unsigned long long)t.st.threads_opened);
	c.n = 0;
	touch(h, NT, NT + 1);
	sampler_drain(&t, cap_sink, &c);
	n = in_region(&c, h[NT].start);
	printf("thread %u (created after attach): %zu of %d page faults "
	       "sampled\n", h[NT].tid, n, NPAGES);
	EXPECT(n >= NPAGES * 9 / 10, "new thread: %zu samples", n);

	/* a thread exits: its event hangs up, the drain closes it */
	if (write(go_pipe[0][1], "x", 1) != 1)
		return 1;
	for (;;) {
		size_t np = sampler_pollfds(&t, pfd, 4 * NMAX), i;
		int hup = 0;

		EXPECT(poll(pfd, np, 10000) > 0, "no POLLHUP within 10 s");
		for (i = 0; i < np; i++)
			hup |= !!(pfd[i].revents & POLLHUP);
		sampler_note_hup(&t, pfd, np);
		sampler_drain(&t, cap_sink, &c);
		if (hup || failed)
			break;
	}
	EXPECT(t.st.threads_closed == 1, "%llu threads closed",
	       (unsigned long long)t.st.threads_closed);
	EXPECT(sampler_rescan(&t) == 0, "rescan after a thread exit");
	EXPECT(t.st.threads_opened == NT + 2, "reopened an exited thread");

	/* the process exits: the target ends */
	end_child(pid);
	EXPECT(sampler_rescan(&t) == -ESRCH, "rescan after exit");
	sampler_detach(&t);
	free(c.a);
	printf("%s sampler_native_test: %llu threads opened, %llu closed, "
	       "%llu records, %llu sent in %llu batches\n",
	       failed ? "FAIL" : "ok", (unsigned long long)t.st.threads_opened,
	       (unsigned long long)t.st.threads_closed,
	       (unsigned long long)t.st.ring.samples,
	       (unsigned long long)t.sent, (unsigned long long)t.st.batches);
	daemon_test(&o);
	printf("%s sampler_native_test (daemon)\n", failed ? "FAIL" : "ok");
	return failed ? 1 : 0;
}
