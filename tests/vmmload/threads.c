/* Multi-threaded CPU-bound test: deterministic per-thread work, mutex-protected
 * shared total, pthread_join. Output must equal a native run. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>

#define NTHREADS 4

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t total;
static long iters = 20000000;

static void *work(void *arg)
{
	uint64_t x = (uintptr_t)arg + 1, acc = 0;
	for (long i = 0; i < iters; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		acc += x & 0xff;
	}
	pthread_mutex_lock(&lock);
	total += acc;
	pthread_mutex_unlock(&lock);
	return (void *)(uintptr_t)(acc & 0xffff);
}

int main(int argc, char **argv)
{
	pthread_t t[NTHREADS];
	if (argc > 1)
		iters = atol(argv[1]);
	for (long i = 0; i < NTHREADS; i++)
		if (pthread_create(&t[i], NULL, work, (void *)i) != 0) {
			perror("pthread_create");
			return 1;
		}
	for (int i = 0; i < NTHREADS; i++) {
		void *r;
		pthread_join(t[i], &r);
		printf("thread %d -> %lu\n", i, (unsigned long)(uintptr_t)r);
	}
	printf("total %lu\n", (unsigned long)total);
	return 0;
}
