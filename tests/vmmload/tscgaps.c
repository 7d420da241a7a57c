/* Where a CPU-bound program's time goes when it makes no system calls:
 * spins on rdtsc for argv[1] seconds (default 2) and sums the gaps between
 * consecutive reads, i.e. time the CPU spent elsewhere (host interrupts,
 * and under vmmload every exit KVM handles without returning to vmmload).
 * Gaps of 1 us..1 ms are interruptions; longer ones are preemption (another
 * process ran) and are reported apart. Prints one line of key=value. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <x86intrin.h>

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 2.0, t0, t1, ghz;
	uint64_t a, b, c0, end, gap, lo, hi, n = 0, sum = 0, pre_n = 0, pre_sum = 0;
	uint64_t hist[5] = { 0 }; /* <5, <20, <50, <100, >=100 us */

	t0 = now();
	c0 = __rdtsc();
	while (now() - t0 < 0.1)
		;
	t1 = now();
	ghz = (__rdtsc() - c0) / ((t1 - t0) * 1e9);
	lo = (uint64_t)(ghz * 1000);	  /* 1 us */
	hi = (uint64_t)(ghz * 1000000); /* 1 ms */
	a = __rdtsc();
	end = a + (uint64_t)(secs * ghz * 1e9);
	while (a < end) {
		b = __rdtsc();
		gap = b - a;
		if (gap >= hi) {
			pre_n++;
			pre_sum += gap;
		} else if (gap >= lo) {
			double us = gap / (ghz * 1000);

			n++;
			sum += gap;
			hist[us < 5 ? 0 : us < 20 ? 1 : us < 50 ? 2 : us < 100 ? 3 : 4]++;
		}
		a = b;
	}
	printf("seconds=%.2f interruptions_per_s=%.1f lost_us_per_s=%.1f mean_us=%.2f "
	       "lt5us=%lu lt20us=%lu lt50us=%lu lt100us=%lu ge100us=%lu preempted=%lu preempted_ms=%.1f\n",
	       secs, n / secs, sum / (ghz * 1000) / secs, n ? sum / (ghz * 1000) / n : 0.0,
	       (unsigned long)hist[0], (unsigned long)hist[1], (unsigned long)hist[2],
	       (unsigned long)hist[3], (unsigned long)hist[4], (unsigned long)pre_n,
	       pre_sum / (ghz * 1e6));
	return 0;
}
