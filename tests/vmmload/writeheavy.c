/* Write-heavy, two threads: each rewrites every page of its own 48 MiB
 * buffer PASSES times (12288 pages per pass), like a compressor's hash
 * tables. Prints a checksum that must equal a native run's. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define BUF (48UL << 20)
#define PAGE 4096UL
static long passes = 20;

static void *rewrite(void *arg)
{
	uint64_t seed = (uintptr_t)arg, sum = 0;
	volatile unsigned char *b = malloc(BUF);
	if (!b)
		return NULL;
	for (long p = 0; p < passes; p++) {
		for (unsigned long o = 0; o < BUF; o += PAGE) {
			b[o + (seed & 0xff)] = (unsigned char)(o / PAGE + p + seed);
			sum += b[o + (seed & 0xff)];
		}
	}
	/* Not freed: a buffer unmapped while the other thread maps its own
	 * could hand the same frames to both within one interval. */
	return (void *)(uintptr_t)sum;
}

int main(int argc, char **argv)
{
	pthread_t t[2];
	uint64_t total = 0;
	if (argc > 1)
		passes = atol(argv[1]);
	for (long i = 0; i < 2; i++)
		if (pthread_create(&t[i], NULL, rewrite, (void *)(i + 1)) != 0) {
			perror("pthread_create");
			return 1;
		}
	for (int i = 0; i < 2; i++) {
		void *r;
		pthread_join(t[i], &r);
		total += (uintptr_t)r;
	}
	printf("checksum %lu\n", (unsigned long)total);
	return 0;
}
