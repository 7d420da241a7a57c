/* Futex semantics and cost. Output must equal a native run.
 *   futex            semantic checks (EAGAIN, timeouts, wake counts,
 *                    requeue, bad addresses) and a mutex/condvar workload
 *   futex pingpong N two threads hand a token back and forth N times
 *                    through a mutex and two condition variables; prints
 *                    nanoseconds per round trip (not deterministic) */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static long futex(void *addr, int op, uint32_t val, const void *ts_or_n,
		  void *addr2, uint32_t val3)
{
	return syscall(SYS_futex, addr, op, val, ts_or_n, addr2, val3);
}

/* "ok" or the errno name, so native and vmmload output can be compared. */
static const char *res(long r)
{
	static char buf[32];
	if (r >= 0) {
		snprintf(buf, sizeof(buf), "%ld", r);
		return buf;
	}
	switch (errno) {
	case EAGAIN: return "EAGAIN";
	case ETIMEDOUT: return "ETIMEDOUT";
	case EFAULT: return "EFAULT";
	case EINVAL: return "EINVAL";
	case ENOSYS: return "ENOSYS";
	default:
		snprintf(buf, sizeof(buf), "errno %d", errno);
		return buf;
	}
}

static double now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static uint32_t word, word2;

static void *waiter(void *arg)
{
	(void)arg;
	/* Returns 0 when woken (possibly after a requeue to word2). */
	long r = futex(&word, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
	return (void *)(intptr_t)(r == 0 ? 0 : errno);
}

static void wake_counts(void)
{
	pthread_t t[3];
	long queued = 0;
	word = 0;
	for (int i = 0; i < 3; i++)
		pthread_create(&t[i], NULL, waiter, NULL);
	/* Move waiters to word2 as they arrive: CMP_REQUEUE with nr_wake 0
	 * wakes nobody and returns how many it moved, so this counts the
	 * threads that are really blocked without waking them. */
	while (queued < 3) {
		long r = futex(&word, FUTEX_CMP_REQUEUE_PRIVATE, 0,
			       (void *)(uintptr_t)INT_MAX, &word2, 0);
		if (r < 0) {
			printf("cmp_requeue: %s\n", res(r));
			exit(1);
		}
		queued += r;
		sched_yield();
	}
	printf("requeued waiters: %ld\n", queued);
	printf("wake 2 of 3: %s\n", res(futex(&word2, FUTEX_WAKE_PRIVATE, 2, NULL, NULL, 0)));
	printf("wake rest: %s\n", res(futex(&word2, FUTEX_WAKE_PRIVATE, 5, NULL, NULL, 0)));
	for (int i = 0; i < 3; i++) {
		void *rv;
		pthread_join(t[i], &rv);
		printf("waiter %d: %s\n", i, rv ? strerror((int)(intptr_t)rv) : "woken");
	}
}

static void timeouts(void)
{
	struct timespec rel = { 0, 30 * 1000 * 1000 }, abs;
	uint32_t w = 7;
	double a = now_ms();
	long r = futex(&w, FUTEX_WAIT_PRIVATE, 7, &rel, NULL, 0);
	double took = now_ms() - a;
	printf("wait 30 ms relative: %s, waited >= 30 ms: %s\n", res(r),
	       took >= 29.5 ? "yes" : "no");
	clock_gettime(CLOCK_MONOTONIC, &abs);
	abs.tv_nsec += 30 * 1000 * 1000;
	if (abs.tv_nsec >= 1000000000) {
		abs.tv_sec++;
		abs.tv_nsec -= 1000000000;
	}
	a = now_ms();
	r = futex(&w, FUTEX_WAIT_BITSET_PRIVATE, 7, &abs, NULL, FUTEX_BITSET_MATCH_ANY);
	took = now_ms() - a;
	printf("wait_bitset absolute: %s, waited >= 30 ms: %s\n", res(r),
	       took >= 29.5 ? "yes" : "no");
	printf("wait value mismatch: %s\n", res(futex(&w, FUTEX_WAIT_PRIVATE, 8, &rel, NULL, 0)));
	printf("wake without waiters: %s\n", res(futex(&w, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0)));
	struct timespec bad = { 0, 2000000000L };
	printf("wait bad timespec: %s\n", res(futex(&w, FUTEX_WAIT_PRIVATE, 7, &bad, NULL, 0)));
}

static void bad_addresses(void)
{
	long pg = sysconf(_SC_PAGESIZE);
	char *m = mmap(NULL, pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint32_t w = 1;
	munmap(m, pg);
	printf("wait NULL: %s\n", res(futex(NULL, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0)));
	printf("wait unmapped: %s\n", res(futex(m, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0)));
	printf("wait kernel address: %s\n",
	       res(futex((void *)0xffffffffff600000UL, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0)));
	printf("wait misaligned: %s\n", res(futex((char *)&w + 1, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0)));
	printf("wait bad timeout pointer: %s\n", res(futex(&w, FUTEX_WAIT_PRIVATE, 1, m, NULL, 0)));
	printf("shared wake unmapped: %s\n", res(futex(m, FUTEX_WAKE, 1, NULL, NULL, 0)));
	printf("private wake unmapped: %s\n", res(futex(m, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0)));
	printf("wake kernel address: %s\n",
	       res(futex((void *)0xffffffffff600000UL, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0)));
	printf("unknown op: %s\n", res(futex(&w, 127, 0, NULL, NULL, 0)));
}

/* Producer/consumer through a bounded queue: exercises contended
 * pthread mutexes and condition variables (futex wait/wake/requeue). */
#define QN 8
#define ITEMS 20000
#define CONSUMERS 3
static pthread_mutex_t qlock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t not_empty = PTHREAD_COND_INITIALIZER;
static pthread_cond_t not_full = PTHREAD_COND_INITIALIZER;
static int queue[QN], qhead, qlen, produced_done;

static void *consumer(void *arg)
{
	uint64_t sum = 0, n = 0;
	(void)arg;
	for (;;) {
		pthread_mutex_lock(&qlock);
		while (qlen == 0 && !produced_done)
			pthread_cond_wait(&not_empty, &qlock);
		if (qlen == 0) {
			pthread_mutex_unlock(&qlock);
			break;
		}
		int v = queue[qhead];
		qhead = (qhead + 1) % QN;
		qlen--;
		pthread_cond_signal(&not_full);
		pthread_mutex_unlock(&qlock);
		sum += v;
		n++;
	}
	return (void *)(uintptr_t)((sum << 20) | n);
}

static void producer_consumer(void)
{
	pthread_t t[CONSUMERS];
	uint64_t sum = 0, n = 0;
	for (int i = 0; i < CONSUMERS; i++)
		pthread_create(&t[i], NULL, consumer, NULL);
	for (int i = 1; i <= ITEMS; i++) {
		pthread_mutex_lock(&qlock);
		while (qlen == QN)
			pthread_cond_wait(&not_full, &qlock);
		queue[(qhead + qlen) % QN] = i;
		qlen++;
		pthread_cond_signal(&not_empty);
		pthread_mutex_unlock(&qlock);
	}
	pthread_mutex_lock(&qlock);
	produced_done = 1;
	pthread_cond_broadcast(&not_empty);
	pthread_mutex_unlock(&qlock);
	for (int i = 0; i < CONSUMERS; i++) {
		void *r;
		pthread_join(t[i], &r);
		sum += (uintptr_t)r >> 20;
		n += (uintptr_t)r & 0xfffff;
	}
	printf("producer/consumer: %lu items, sum %lu (expected %lu)\n",
	       (unsigned long)n, (unsigned long)sum,
	       (unsigned long)ITEMS * (ITEMS + 1) / 2);
}

static pthread_mutex_t pm = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pc[2] = { PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER };
static long turn, rounds;

static void *pong(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&pm);
	for (long i = 0; i < rounds; i++) {
		while (turn != 1)
			pthread_cond_wait(&pc[1], &pm);
		turn = 0;
		pthread_cond_signal(&pc[0]);
	}
	pthread_mutex_unlock(&pm);
	return NULL;
}

static void pingpong(long n)
{
	pthread_t t;
	rounds = n;
	pthread_create(&t, NULL, pong, NULL);
	double a = now_ms();
	pthread_mutex_lock(&pm);
	for (long i = 0; i < n; i++) {
		turn = 1;
		pthread_cond_signal(&pc[1]);
		while (turn != 0)
			pthread_cond_wait(&pc[0], &pm);
	}
	pthread_mutex_unlock(&pm);
	double b = now_ms();
	pthread_join(t, NULL);
	printf("%.1f\n", (b - a) * 1e6 / n);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc > 1 && !strcmp(argv[1], "pingpong")) {
		pingpong(argc > 2 ? atol(argv[2]) : 10000);
		return 0;
	}
	timeouts();
	bad_addresses();
	wake_counts();
	producer_consumer();
	return 0;
}
