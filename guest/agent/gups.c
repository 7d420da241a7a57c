// SPDX-License-Identifier: GPL-2.0
/*
 * gups-hotset: GUPS-style random read-modify-write over a region whose
 * hot part receives RATIO times the accesses per byte of the rest.
 *
 *   gups-hotset [-s REGION_MB] [-H HOT_MB] [-r RATIO] [-t SECONDS]
 *               [-i REPORT_MS] [-f FMEM_NODE] [-w READY_FILE] [-k] [-u]
 *               [-T] [-P] [-X]
 *
 * Robustness options (for the manager's tests): -k forks a child that
 * shares the region copy-on-write and sleeps until the end; -u unmaps the
 * first half of the cold part half-way through the run (accesses then go
 * to the rest).
 *
 * The region is one anonymous mapping (THP off, so residency is counted
 * per 4 KiB page); the hot set is its last HOT_MB.  It is first-touched
 * cold part first, so on a guest whose FMem cannot hold the region the
 * hot set starts out in SMem; -P touches the hot set first instead, so it
 * starts out in FMem (the static placement an oracle would choose, with
 * no manager: the control that separates what placement does to the rate
 * from what the manager's work costs).  A reporter thread queries the node of the
 * hot pages (all) and of the cold pages (every 8th) with move_pages(2)
 * and prints one JSON line per interval:
 *   {"gups":"tick","t_ms":..,"mups":..,"hot_fmem_pct":..,
 *    "cold_fmem_pct":..,"fmem_access_pct":..}
 * fmem_access_pct is the expected share of accesses served from FMem:
 * the hot and cold residencies weighted by their access shares.
 * At the end: {"gups":"done",...} with the times at which the hot-set
 * residency first reached 60 % and 90 %.
 *
 * Every 10 ms at most (checked every 65,536 updates) the loop executes
 * one CPUID, which every hypervisor intercepts: a guarantee that the CPU
 * leaves the guest now and then.  Without it the loop never exits, and under nested SVM
 * emulated by QEMU TCG (the testbed) an L1 CPU was seen to stay in such a
 * loop for minutes with its own timer and IPIs ignored (docs/testbed.md,
 * "Frozen L1: a CPU stuck in exit-less L2 code").  Costs about a
 * microsecond per 10 ms in a VM; -X leaves it out.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#define PAGE		4096UL
#define COLD_STRIDE	8

static uint64_t *volatile region;
static volatile size_t region_bytes;
static size_t hot_bytes;
static unsigned int ratio = 10;
static int fmem_node;
static volatile int stop;
static volatile uint64_t updates;

/* one intercepted instruction: the CPU leaves the guest (see the top) */
static void exit_to_hypervisor(void)
{
#if defined(__x86_64__) || defined(__i386__)
	unsigned int a, b, c, d;

	__cpuid(0, a, b, c, d);
	__asm__ volatile("" : : "r"(a), "r"(b), "r"(c), "r"(d));
#endif
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static long move_pages_query(unsigned long n, void **pages, int *status)
{
	return syscall(SYS_move_pages, 0, n, pages, NULL, status, 0);
}

/* Percent (x100) of the given pages that are on fmem_node. */
static long pct_on_fmem(char *start, size_t bytes, size_t stride)
{
	enum { CHUNK = 1024 };
	void *pages[CHUNK];
	int status[CHUNK];
	size_t off, on = 0, all = 0;

	for (off = 0; off < bytes;) {
		unsigned long n = 0, i;

		while (n < CHUNK && off < bytes) {
			pages[n++] = start + off;
			off += stride * PAGE;
		}
		if (move_pages_query(n, pages, status))
			return -1;
		for (i = 0; i < n; i++) {
			all++;
			if (status[i] == fmem_node)
				on++;
		}
	}
	return all ? (long)(on * 10000 / all) : 0;
}

struct report_args {
	unsigned int interval_ms;
	uint64_t t0;
	long t60, t90, last_hot, last_cold, last_acc;
	double last_mups;
};

static void *reporter(void *arg)
{
	struct report_args *r = arg;
	uint64_t last_u = 0, last_t = r->t0;

	while (!stop) {
		/* the region may shrink (-u): read its bounds every time */
		size_t cold = region_bytes - hot_bytes;
		/* access shares: hot gets ratio x density */
		double hot_w = (double)ratio * hot_bytes /
			       ((double)ratio * hot_bytes + cold);
		struct timespec ts = {
			.tv_sec = r->interval_ms / 1000,
			.tv_nsec = (r->interval_ms % 1000) * 1000000L,
		};
		uint64_t t, u;
		long hot, cpct;
		double acc;

		nanosleep(&ts, NULL);
		/*
		 * The run ended during this interval: its updates stopped
		 * before the interval did, so its rate would read low.  The
		 * done line has the whole run.
		 */
		if (stop)
			break;
		t = now_ms();
		u = updates;
		hot = pct_on_fmem((char *)region + cold, hot_bytes, 1);
		cpct = pct_on_fmem((char *)region, cold, COLD_STRIDE);
		acc = hot_w * hot + (1 - hot_w) * cpct;
		r->last_mups = (double)(u - last_u) / 1000.0 /
			       (double)(t - last_t ? t - last_t : 1);
		r->last_hot = hot;
		r->last_cold = cpct;
		r->last_acc = (long)acc;
		if (hot >= 6000 && r->t60 < 0)
			r->t60 = (long)(t - r->t0);
		if (hot >= 9000 && r->t90 < 0)
			r->t90 = (long)(t - r->t0);
		printf("{\"gups\":\"tick\",\"t_ms\":%llu,\"mups\":%.3f,"
		       "\"hot_fmem_pct\":%.2f,\"cold_fmem_pct\":%.2f,"
		       "\"fmem_access_pct\":%.2f}\n",
		       (unsigned long long)(t - r->t0), r->last_mups,
		       hot / 100.0, cpct / 100.0, acc / 100.0);
		fflush(stdout);
		last_u = u;
		last_t = t;
	}
	return NULL;
}

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

/* First-touches the region's pages in [from, to) bytes, in address order. */
static void touch_pages(size_t from, size_t to)
{
	size_t off;

	for (off = from; off < to; off += PAGE)
		region[off / 8] = off;
}

static void usage(void)
{
	fprintf(stderr, "usage: gups-hotset [-s REGION_MB] [-H HOT_MB] [-r RATIO] "
		"[-t SECONDS] [-i REPORT_MS] [-f FMEM_NODE] [-w READY_FILE] [-k] [-u] [-T] [-P] [-X]\n");
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

int main(int argc, char **argv)
{
	unsigned long region_mb = 640, hot_mb = 64, seconds = 30;
	struct report_args rep = { .interval_ms = 1000, .t60 = -1, .t90 = -1 };
	const char *ready_file = NULL;
	uint64_t x = 0x9e3779b97f4a7c15ULL, u = 0, n_hot, n_cold, thresh;
	uint64_t t_start, t_end;
	pthread_t th;
	int c, fork_child = 0, unmap_half = 0, unmapped = 0, thp = 0, hot_first = 0;
	int exits = 1;
	uint64_t last_exit = 0;
	pid_t child = -1;

	while ((c = getopt(argc, argv, "s:H:r:t:i:f:w:kuTPX")) != -1) {
		switch (c) {
		case 's': region_mb = arg_ul(optarg, 2, 1UL << 20); break;
		case 'H': hot_mb = arg_ul(optarg, 1, 1UL << 20); break;
		case 'r': ratio = arg_ul(optarg, 1, 1000); break;
		case 't': seconds = arg_ul(optarg, 1, 86400); break;
		case 'i': rep.interval_ms = arg_ul(optarg, 50, 60000); break;
		case 'f': fmem_node = arg_ul(optarg, 0, 1023); break;
		case 'w': ready_file = optarg; break;
		case 'k': fork_child = 1; break;
		case 'u': unmap_half = 1; break;
		case 'T': thp = 1; break;
		case 'P': hot_first = 1; break;
		case 'X': exits = 0; break;
		default: usage();
		}
	}
	if (hot_mb >= region_mb)
		usage();
	region_bytes = region_mb << 20;
	hot_bytes = hot_mb << 20;
	region = mmap(NULL, region_bytes, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (region == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	/* 4 KiB pages unless asked (-T: THP wherever the kernel allows it) */
	if (madvise(region, region_bytes, thp ? MADV_HUGEPAGE : MADV_NOHUGEPAGE) && thp)
		perror("madvise(MADV_HUGEPAGE)");
	/*
	 * First touch: cold part first, the hot set last (-P: the hot set
	 * first, then the cold part).
	 */
	if (hot_first) {
		touch_pages(region_bytes - hot_bytes, region_bytes);
		touch_pages(0, region_bytes - hot_bytes);
	} else {
		touch_pages(0, region_bytes);
	}
	signal(SIGTERM, on_term);
	signal(SIGINT, on_term);
	if (fork_child) {
		child = fork();
		if (child == 0) {
			/* shares the region copy-on-write until the parent ends */
			signal(SIGTERM, SIG_DFL);
			signal(SIGINT, SIG_DFL);
			while (getppid() != 1)
				sleep(1);
			_exit(0);
		}
	}

	n_hot = hot_bytes / 8;
	n_cold = (region_bytes - hot_bytes) / 8;
	/* P(hot) = ratio*hot / (ratio*hot + cold), as a 32-bit threshold */
	thresh = (uint64_t)((double)ratio * hot_bytes /
			    ((double)ratio * hot_bytes +
			     (region_bytes - hot_bytes)) * 4294967296.0);
	printf("{\"gups\":\"start\",\"pid\":%d,\"child\":%d,\"region\":\"%p\","
	       "\"region_mb\":%lu,\"hot_mb\":%lu,\"ratio\":%u,"
	       "\"hot_access_share\":%.3f}\n",
	       getpid(), (int)child, (void *)region, region_mb, hot_mb, ratio,
	       thresh / 4294967296.0);
	fflush(stdout);
	if (ready_file) {
		FILE *f = fopen(ready_file, "w");

		if (f) {
			fprintf(f, "%d\n", getpid());
			fclose(f);
		}
	}

	t_start = now_ms();
	rep.t0 = t_start;
	t_end = t_start + seconds * 1000;
	if (pthread_create(&th, NULL, reporter, &rep)) {
		perror("pthread_create");
		return 1;
	}
	while (!stop) {
		int i;

		for (i = 0; i < 4096; i++) {
			uint64_t idx;

			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			if ((x >> 32) < thresh)
				idx = n_cold + (x & 0xffffffffULL) % n_hot;
			else
				idx = (x & 0xffffffffULL) % n_cold;
			region[idx] ^= x;
		}
		u += 4096;
		updates = u;
		if ((u & ((1 << 16) - 1)) == 0) {
			uint64_t t = now_ms();

			if (exits && t >= last_exit + 10) {
				exit_to_hypervisor();
				last_exit = t;
			}
			if (t >= t_end)
				break;
			if (unmap_half && !unmapped &&
			    t >= t_start + seconds * 500) {
				/* drop the first half of the cold part */
				size_t half = ((region_bytes - hot_bytes) / 2) &
					      ~(PAGE - 1);

				munmap(region, half);
				region += half / 8;
				region_bytes -= half;
				n_cold = (region_bytes - hot_bytes) / 8;
				unmapped = 1;
				printf("{\"gups\":\"unmapped\",\"bytes\":%zu}\n",
				       half);
				fflush(stdout);
			}
		}
	}
	/* the end of the accesses, not of the reporter's last sleep */
	t_end = now_ms();
	stop = 1;
	pthread_join(th, NULL);
	if (child > 0) {
		kill(child, SIGTERM);
		waitpid(child, NULL, 0);
	}
	printf("{\"gups\":\"done\",\"seconds\":%.1f,\"updates\":%llu,\"mups\":%.3f,"
	       "\"hot_fmem_pct\":%.2f,\"cold_fmem_pct\":%.2f,"
	       "\"fmem_access_pct\":%.2f,\"t60_ms\":%ld,\"t90_ms\":%ld}\n",
	       (t_end - t_start) / 1000.0, (unsigned long long)u,
	       u / 1000.0 / (double)(t_end - t_start),
	       rep.last_hot / 100.0, rep.last_cold / 100.0,
	       rep.last_acc / 100.0, rep.t60, rep.t90);
	return 0;
}
