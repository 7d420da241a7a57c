/* Syscall round trip: times N getppid() calls (always relayed by vmmload),
 * or with argv[2] = "clock" N clock_gettime() system calls (answered inside
 * the guest by vmmload on PVM); prints nanoseconds per call. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 10000;
	int clock = argc > 2 && !strcmp(argv[2], "clock");
	struct timespec a, b, t;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long i = 0; i < n; i++)
		if (clock)
			syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &t);
		else
			syscall(SYS_getppid);
	clock_gettime(CLOCK_MONOTONIC, &b);
	double ns = (b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec);
	printf("%.1f\n", ns / n);
	return 0;
}
