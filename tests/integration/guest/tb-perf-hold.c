// SPDX-License-Identifier: Apache-2.0
//
// tb-perf-hold: keep the kernel's software page-fault perf event enabled
// (its static key raised) while an L2 scenario runs, so that opening and
// closing the tiering agent's page-fault sampler does not live-patch the
// page-fault path.
//
// Why: the first software page-fault event anywhere flips the static key
// perf_swevent_enabled[PERF_COUNT_SW_PAGE_FAULTS], and the last one's close
// flips it back; each flip rewrites do_user_addr_fault() with
// text_poke_bp() (a temporary int3). Under QEMU TCG that cross-modifying
// write races the other vCPU taking a page fault right there. Seen three
// times in tiering-gups' user-sampler step (27 Nov): "Oops: int3 ... RIP:
// do_user_addr_fault+0xcf", then a panic. The same race, for KVM's keys in
// L1, is why tb-kvm-hold exists. Held from before the workloads start,
// the count only moves between non-zero values: no patching while they
// fault. The event counts this idle process's own faults (nothing).
//
// Usage: tb-perf-hold  (prints one line, then sleeps until killed)

#include <linux/perf_event.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(void)
{
	struct perf_event_attr a;
	int fd;

	memset(&a, 0, sizeof(a));
	a.size = sizeof(a);
	a.type = PERF_TYPE_SOFTWARE;
	a.config = PERF_COUNT_SW_PAGE_FAULTS;
	a.exclude_kernel = 1;
	a.exclude_hv = 1;
	fd = (int)syscall(SYS_perf_event_open, &a, 0, -1, -1,
			  PERF_FLAG_FD_CLOEXEC);
	if (fd < 0) {
		perror("tb-perf-hold: perf_event_open(software page faults)");
		return 1;
	}
	printf("perf-hold: page-fault event %d open\n", fd);
	fflush(stdout);
	for (;;)
		pause();
}
