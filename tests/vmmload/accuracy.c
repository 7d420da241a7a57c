/*
 * Accuracy test for vmmload's page tracking.
 *
 * A 6 MiB arena at a fixed, 2 MiB-aligned address is split in three 2 MiB
 * regions:
 *   region 0: phase 1 writes exactly the pages in WRITE_PAGES;
 *   region 1: phases 2 and 3 only read the pages in READ_PAGES (twice, so
 *             each must be seen in two intervals: read tracking re-arms);
 *   region 2: phase 4 writes exactly one page (utilisation 1/512).
 * Phases are separated by sleeps longer than the sampling interval. The
 * program prints the expected sets; scripts/test-vmmload.sh compares them
 * with the JSON report.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdint.h>
#include <sys/mman.h>
#include <time.h>

#define ARENA 0x200000000UL
#define REGION (2UL << 20)
#define PG 4096UL

static const int WRITE_PAGES[] = { 0, 3, 7, 100, 255, 511 };
static const int READ_PAGES[] = { 1, 2, 50, 200, 300, 510 };
static const int ONE_PAGE = 17;

static void nap(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

int main(void)
{
	char *a = mmap((void *)ARENA, 3 * REGION, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (a != (char *)ARENA) {
		perror("mmap");
		return 1;
	}
	nap(400);
	for (unsigned i = 0; i < sizeof(WRITE_PAGES) / sizeof(int); i++)
		((volatile char *)a)[WRITE_PAGES[i] * PG + 8] = 1;
	nap(600);
	unsigned long sum = 0;
	for (int phase = 0; phase < 2; phase++) {
		for (int rep = 0; rep < 3; rep++)
			for (unsigned i = 0; i < sizeof(READ_PAGES) / sizeof(int); i++)
				sum += ((volatile char *)a)[REGION + READ_PAGES[i] * PG + 16];
		nap(600);
	}
	((volatile char *)a)[2 * REGION + ONE_PAGE * PG] = 5;
	nap(400);
	for (unsigned i = 0; i < sizeof(WRITE_PAGES) / sizeof(int); i++)
		printf("expect-write %#lx\n", ARENA + WRITE_PAGES[i] * PG);
	printf("expect-write %#lx\n", ARENA + 2 * REGION + ONE_PAGE * PG);
	for (unsigned i = 0; i < sizeof(READ_PAGES) / sizeof(int); i++)
		printf("expect-read %#lx\n", ARENA + REGION + READ_PAGES[i] * PG);
	printf("expect-huge %#lx 1\n", ARENA + 2 * REGION);
	printf("expect-read-intervals 2\n");
	printf("sum %lu\n", sum);
	return 0;
}
