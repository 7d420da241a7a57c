/* Programs that end badly, selected by argv[1]; under vmmload they must end
 * with the same status as natively. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

int main(int argc, char **argv)
{
	const char *m = argc > 1 ? argv[1] : "";
	volatile int zero = 0;
	if (!strcmp(m, "segv")) {
		int *volatile p = (int *)0x10;
		return *(volatile int *)p;
	}
	if (!strcmp(m, "abort"))
		abort();
	if (!strcmp(m, "fpe"))
		return 10 / zero;
	if (!strcmp(m, "ill"))
		__asm__ volatile("ud2");
	if (!strcmp(m, "wx")) {
		/* write to read-only text */
		*(volatile char *)(void *)main = 0;
	}
	if (!strcmp(m, "ro") || !strcmp(m, "unmapped")) {
		/* the page is touched (so translations are cached), then taken
		 * away: the next write must fault */
		volatile char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
					MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		p[0] = 1;
		if (!strcmp(m, "ro"))
			mprotect((void *)p, 4096, PROT_READ);
		else
			munmap((void *)p, 4096);
		p[0] = 2;
		return 0;
	}
	if (!strcmp(m, "mremap")) {
		/* grow a mapping until it moves; the old place must not alias it */
		size_t n = 64 << 10;
		char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		char *block = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		memset(p, 'a', n);
		char *q = mremap(p, n, 4 * n, MREMAP_MAYMOVE);
		char *r = mmap(p, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		memset(r, 'b', n);
		long bad = 0;
		for (size_t i = 0; i < n; i++)
			bad += q[i] != 'a';
		printf("moved=%d bad=%ld block=%d\n", q != p, bad, block != NULL);
		return bad != 0;
	}
	if (!strcmp(m, "spin"))
		for (;;)
			__asm__ volatile("" ::: "memory");
	if (!strcmp(m, "exit7"))
		exit(7);
	fprintf(stderr, "usage: faults segv|abort|fpe|ill|wx|ro|unmapped|mremap|spin|exit7\n");
	return 2;
}
