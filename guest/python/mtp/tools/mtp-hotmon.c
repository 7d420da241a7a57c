// SPDX-License-Identifier: Apache-2.0
/*
 * mtp-hotmon: ground truth for the mtp-python testbed scenario. Watches one
 * process with DAMON (virtual address operations: the page-table accessed
 * bits, sampled by the kernel) and prints, once per interval, how many of
 * the pages DAMON saw accessed are resident on the fast node, as a JSON
 * line:
 *
 *   {"t_ms":T,"regions":R,"hot_pages":H,"hot_fast":HF,"hot_fast_pct":P,
 *    "resident":N,"resident_fast":NF,"acc_fast_pct":A,
 *    "hot_by_kind":{"file":[H,HF],"heap":[H,HF],"stack":[H,HF],"anon":[H,HF]}}
 *
 * hot = pages of regions with nr_accesses >= 1 in the last aggregation
 * interval; acc_fast_pct weighs every resident page by its region's
 * nr_accesses (the share of sampled accesses served by the fast node).
 * Page locations come from move_pages(2) with nodes = NULL. hot_by_kind
 * splits the hot pages by the mapping they are in (/proc/PID/maps: a file,
 * [heap], a [stack], other anonymous memory), to tell which memory a
 * manager left in the slow tier.
 *
 *   mtp-hotmon -p PID [-i INTERVAL_MS] [-s SAMPLE_US] [-a AGGR_US] [-f NODE]
 *
 * Ends when the process exits or on SIGTERM/SIGINT, turning DAMON off.
 * DAMON's regions are adaptive (100..2000 here), so "hot" is per region,
 * not per page: a region's pages share its count.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define ADMIN "/sys/kernel/mm/damon/admin/kdamonds"
#define CTX ADMIN "/0/contexts/0"
#define SCHEME CTX "/schemes/0"
#define BATCH 4096
#define PAGE 4096UL

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static int put(const char *path, const char *value)
{
	int fd = open(path, O_WRONLY);
	ssize_t n;

	if (fd < 0) {
		fprintf(stderr, "mtp-hotmon: open %s: %s\n", path, strerror(errno));
		return -1;
	}
	n = write(fd, value, strlen(value));
	if (n < 0)
		fprintf(stderr, "mtp-hotmon: write '%s' to %s: %s\n", value, path, strerror(errno));
	close(fd);
	return n < 0 ? -1 : 0;
}

static int get_u64(const char *path, uint64_t *out)
{
	char buf[64];
	FILE *f = fopen(path, "r");
	int ok;

	if (!f)
		return -1;
	ok = fgets(buf, sizeof(buf), f) != NULL;
	fclose(f);
	if (!ok)
		return -1;
	errno = 0;
	*out = strtoull(buf, NULL, 10);
	return errno ? -1 : 0;
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int setup(pid_t pid, unsigned long sample_us, unsigned long aggr_us)
{
	char v[32];
	const char *max = "18446744073709551615";

	if (access(ADMIN, F_OK)) {
		fprintf(stderr, "mtp-hotmon: no DAMON sysfs interface (%s)\n", ADMIN);
		return -1;
	}
	snprintf(v, sizeof(v), "%d", (int)pid);
	if (put(ADMIN "/nr_kdamonds", "1") || put(ADMIN "/0/contexts/nr_contexts", "1") ||
	    put(CTX "/operations", "vaddr") || put(CTX "/targets/nr_targets", "1") ||
	    put(CTX "/targets/0/pid_target", v) || put(CTX "/schemes/nr_schemes", "1") ||
	    put(SCHEME "/action", "stat"))
		return -1;
	snprintf(v, sizeof(v), "%lu", sample_us);
	if (put(CTX "/monitoring_attrs/intervals/sample_us", v))
		return -1;
	snprintf(v, sizeof(v), "%lu", aggr_us);
	if (put(CTX "/monitoring_attrs/intervals/aggr_us", v) ||
	    put(CTX "/monitoring_attrs/intervals/update_us", "1000000") ||
	    put(CTX "/monitoring_attrs/nr_regions/min", "100") ||
	    put(CTX "/monitoring_attrs/nr_regions/max", "2000"))
		return -1;
	/* the stat scheme applies to every region: its tried regions are all */
	if (put(SCHEME "/access_pattern/sz/min", "0") || put(SCHEME "/access_pattern/sz/max", max) ||
	    put(SCHEME "/access_pattern/nr_accesses/min", "0") ||
	    put(SCHEME "/access_pattern/nr_accesses/max", max) ||
	    put(SCHEME "/access_pattern/age/min", "0") || put(SCHEME "/access_pattern/age/max", max))
		return -1;
	return put(ADMIN "/0/state", "on");
}

enum kind { K_FILE, K_HEAP, K_STACK, K_ANON, NR_KINDS };
static const char *const kind_name[NR_KINDS] = { "file", "heap", "stack", "anon" };

struct tally {
	uint64_t regions, hot, hot_fast, resident, resident_fast;
	uint64_t kind_hot[NR_KINDS], kind_hot_fast[NR_KINDS];
	double acc, acc_fast;
};

/* The target's mappings, sorted by address as /proc/PID/maps lists them. */
struct mapping {
	uint64_t start, end;
	enum kind kind;
};
static struct mapping *maps;
static size_t nr_maps, cap_maps;

static void read_maps(pid_t pid)
{
	char path[64], line[512];
	FILE *f;

	nr_maps = 0;
	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long s, e;
		char name[256] = "";
		struct mapping *m;

		if (sscanf(line, "%llx-%llx %*s %*s %*s %*s %255s", &s, &e, name) < 2)
			continue;
		if (nr_maps == cap_maps) {
			size_t cap = cap_maps ? cap_maps * 2 : 256;
			struct mapping *n = realloc(maps, cap * sizeof(*n));

			if (!n)
				break;
			maps = n;
			cap_maps = cap;
		}
		m = &maps[nr_maps++];
		m->start = s;
		m->end = e;
		if (name[0] == '/')
			m->kind = K_FILE;
		else if (!strcmp(name, "[heap]"))
			m->kind = K_HEAP;
		else if (!strncmp(name, "[stack", 6))
			m->kind = K_STACK;
		else
			m->kind = K_ANON;
	}
	fclose(f);
}

static enum kind kind_of(uint64_t addr)
{
	size_t lo = 0, hi = nr_maps;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (addr < maps[mid].start)
			hi = mid;
		else if (addr >= maps[mid].end)
			lo = mid + 1;
		else
			return maps[mid].kind;
	}
	return K_ANON;
}

/* Locates the pages of [start, end) and adds them to @t. */
static void locate(pid_t pid, uint64_t start, uint64_t end, uint64_t nr_acc, int fast,
		   struct tally *t)
{
	static void *pages[BATCH];
	static int status[BATCH];
	uint64_t a = start & ~(PAGE - 1);

	while (a < end && !stop) {
		unsigned long n = 0, i;
		enum kind k;
		long rc;

		while (n < BATCH && a < end) {
			pages[n++] = (void *)(uintptr_t)a;
			a += PAGE;
		}
		rc = syscall(SYS_move_pages, pid, n, pages, NULL, status, 0);
		if (rc < 0)
			return; /* the process is gone, or no permission */
		for (i = 0; i < n; i++) {
			if (status[i] < 0)
				continue; /* not present (or not mapped) */
			t->resident++;
			t->acc += nr_acc;
			k = nr_acc ? kind_of((uint64_t)(uintptr_t)pages[i]) : K_ANON;
			if (nr_acc) {
				t->hot++;
				t->kind_hot[k]++;
			}
			if (status[i] == fast) {
				t->resident_fast++;
				t->acc_fast += nr_acc;
				if (nr_acc) {
					t->hot_fast++;
					t->kind_hot_fast[k]++;
				}
			}
		}
	}
}

static int snapshot(pid_t pid, int fast, struct tally *t)
{
	char path[160];
	uint64_t i, start, end, nr;

	memset(t, 0, sizeof(*t));
	read_maps(pid);
	if (put(ADMIN "/0/state", "update_schemes_tried_regions"))
		return -1;
	for (i = 0;; i++) {
		snprintf(path, sizeof(path), SCHEME "/tried_regions/%" PRIu64 "/start", i);
		if (get_u64(path, &start))
			break;
		snprintf(path, sizeof(path), SCHEME "/tried_regions/%" PRIu64 "/end", i);
		if (get_u64(path, &end))
			break;
		snprintf(path, sizeof(path), SCHEME "/tried_regions/%" PRIu64 "/nr_accesses", i);
		if (get_u64(path, &nr))
			break;
		t->regions++;
		locate(pid, start, end, nr, fast, t);
	}
	return 0;
}

static unsigned long arg_ul(const char *s, const char *what, int zero_ok)
{
	char *e;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &e, 10);
	if (errno || *e || e == s || (!v && !zero_ok)) {
		fprintf(stderr, "mtp-hotmon: bad %s '%s' (a %s integer)\n", what, s, zero_ok ? "non-negative" : "positive");
		exit(2);
	}
	return v;
}

int main(int argc, char **argv)
{
	unsigned long interval_ms = 2000, sample_us = 20000, aggr_us = 400000;
	int fast = 0, opt, rc = 0, k;
	pid_t pid = 0;
	uint64_t t0;
	struct sigaction sa = { .sa_handler = on_signal };

	while ((opt = getopt(argc, argv, "p:i:s:a:f:")) != -1) {
		switch (opt) {
		case 'p': pid = (pid_t)arg_ul(optarg, "pid", 0); break;
		case 'i': interval_ms = arg_ul(optarg, "interval", 0); break;
		case 's': sample_us = arg_ul(optarg, "sample_us", 0); break;
		case 'a': aggr_us = arg_ul(optarg, "aggr_us", 0); break;
		case 'f': fast = (int)arg_ul(optarg, "node", 1); break;
		default:
			fprintf(stderr, "usage: mtp-hotmon -p PID [-i MS] [-s SAMPLE_US] [-a AGGR_US] [-f NODE]\n");
			return 2;
		}
	}
	if (!pid) {
		fprintf(stderr, "mtp-hotmon: -p PID is required\n");
		return 2;
	}
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	if (setup(pid, sample_us, aggr_us))
		return 1;
	t0 = now_ms();
	while (!stop && kill(pid, 0) == 0) {
		struct timespec ts = { interval_ms / 1000, (interval_ms % 1000) * 1000000 };
		struct tally t;

		nanosleep(&ts, NULL);
		if (stop || kill(pid, 0))
			break;
		if (snapshot(pid, fast, &t)) {
			rc = 1;
			break;
		}
		if (!t.regions)
			continue; /* DAMON had no aggregation to report yet */
		printf("{\"t_ms\":%" PRIu64 ",\"regions\":%" PRIu64 ",\"hot_pages\":%" PRIu64
		       ",\"hot_fast\":%" PRIu64 ",\"hot_fast_pct\":%.1f,\"resident\":%" PRIu64
		       ",\"resident_fast\":%" PRIu64 ",\"acc_fast_pct\":%.1f,\"hot_by_kind\":{",
		       now_ms() - t0, t.regions, t.hot, t.hot_fast,
		       t.hot ? 100.0 * t.hot_fast / t.hot : 0.0, t.resident, t.resident_fast,
		       t.acc > 0 ? 100.0 * t.acc_fast / t.acc : 0.0);
		for (k = 0; k < NR_KINDS; k++)
			printf("%s\"%s\":[%" PRIu64 ",%" PRIu64 "]", k ? "," : "", kind_name[k],
			       t.kind_hot[k], t.kind_hot_fast[k]);
		printf("}}\n");
		fflush(stdout);
	}
	/* kdamond stops by itself once its target is gone (then EPERM) */
	if (kill(pid, 0) == 0)
		put(ADMIN "/0/state", "off");
	return rc;
}
