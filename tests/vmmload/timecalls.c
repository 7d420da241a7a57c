/* Time and identity calls (answered inside the guest by vmmload on PVM) must
 * agree with the host: compares the fast paths with calls that always go to
 * the host (gettimeofday with a timezone pointer, CLOCK_*_COARSE), checks
 * monotonicity and EFAULT for bad pointers. Prints only pass/fail lines. */
#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long ns_of(struct timespec t)
{
	return t.tv_sec * 1000000000L + t.tv_nsec;
}

static int fails;

static void check(const char *what, int ok)
{
	printf("%s %s\n", ok ? "ok  " : "FAIL", what);
	fails += !ok;
}

int main(void)
{
	struct timespec a, b, c;
	struct timeval tv;
	struct timezone tz;
	long prev = 0, back = 0;
	for (int i = 0; i < 100000; i++) {
		syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &a);
		if (ns_of(a) < prev)
			back++;
		prev = ns_of(a);
	}
	check("CLOCK_MONOTONIC never goes back", back == 0);
	syscall(SYS_clock_gettime, CLOCK_REALTIME, &a);
	syscall(SYS_gettimeofday, &tv, &tz); /* with tz: always the host */
	syscall(SYS_clock_gettime, CLOCK_REALTIME, &b);
	long host = tv.tv_sec * 1000000000L + tv.tv_usec * 1000L;
	check("CLOCK_REALTIME agrees with the host within 2 ms",
	      host >= ns_of(a) - 2000000 && host <= ns_of(b) + 2000000);
	syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &a);
	syscall(SYS_clock_gettime, CLOCK_MONOTONIC_COARSE, &c);
	check("CLOCK_MONOTONIC agrees with the host within 20 ms", labs(ns_of(a) - ns_of(c)) < 20000000);
	struct timeval t2;
	syscall(SYS_gettimeofday, &t2, NULL);
	time_t t3 = syscall(SYS_time, NULL);
	check("gettimeofday and time agree", labs((long)t3 - (long)t2.tv_sec) <= 1);
	struct timespec s1 = { 0, 50000000 };
	syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &a);
	nanosleep(&s1, NULL);
	syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &b);
	check("50 ms sleep measures 50..200 ms", ns_of(b) - ns_of(a) >= 50000000 && ns_of(b) - ns_of(a) < 200000000);
	long r = syscall(SYS_clock_gettime, CLOCK_REALTIME, (void *)0x20);
	check("clock_gettime(bad pointer) gives EFAULT", r == -1 && errno == EFAULT);
	r = syscall(SYS_gettimeofday, (void *)0x20, NULL);
	check("gettimeofday(bad pointer) gives EFAULT", r == -1 && errno == EFAULT);
	r = syscall(SYS_time, (void *)0x20);
	check("time(bad pointer) gives EFAULT", r == -1 && errno == EFAULT);
	check("getpid matches", syscall(SYS_getpid) == getpid());
	check("getuid/geteuid/getgid/getegid consistent",
	      syscall(SYS_getuid) == (long)getuid() && syscall(SYS_geteuid) == (long)geteuid() &&
		      syscall(SYS_getgid) == (long)getgid() && syscall(SYS_getegid) == (long)getegid());
	return fails != 0;
}
