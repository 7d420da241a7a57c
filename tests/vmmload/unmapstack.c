// Unmaps the stack it runs on (issue 12): the next push faults and nothing
// can deliver a signal on that stack, so the program must die of SIGSEGV,
// as natively, with nothing left running.
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

int main(void)
{
	uintptr_t sp = (uintptr_t)__builtin_frame_address(0);
	uintptr_t page = sp & ~(uintptr_t)4095;

	printf("unmapping the stack\n");
	fflush(stdout);
	// From 64 KiB below the frame to the end of its page (which may be
	// the last user page: vmmload's stack sits at the top, without ASLR).
	// The wrapper's own return pops from the unmapped stack.
	munmap((void *)(page - (64 << 10)), (64 << 10) + 4096);
	printf("still alive?\n");
	return 0;
}
