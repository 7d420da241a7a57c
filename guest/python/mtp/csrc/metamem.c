// SPDX-License-Identifier: Apache-2.0
/* Metadata mappings on the slow tier; see metamem.h. */
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "metamem.h"

#define MPOL_PREFERRED_MODE 1	/* <linux/mempolicy.h>, without libnuma */
#define NODEMASK_LONGS 2

static int meta_node = -1;
static unsigned long bind_failures;

void mtp_meta_set_node(int node)
{
	meta_node = node >= 0 && node < NODEMASK_LONGS * 64 - 1 ? node : -1;
}

int mtp_meta_node(void)
{
	return meta_node;
}

unsigned long mtp_meta_bind_failures(void)
{
	return bind_failures;
}

void mtp_meta_reset_failures(void)
{
	bind_failures = 0;
}

void *mtp_meta_alloc(size_t bytes)
{
	void *p;

	if (!bytes)
		return NULL;
	p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	if (meta_node >= 0) {
		unsigned long mask[NODEMASK_LONGS] = { 0 };

		mask[meta_node / 64] = 1ul << (meta_node % 64);
		/* before the first touch: pages are placed when they fault in */
		if (syscall(SYS_mbind, p, bytes, MPOL_PREFERRED_MODE, mask,
			    (unsigned long)NODEMASK_LONGS * 64, 0))
			bind_failures++;
	}
	return p;
}

void mtp_meta_free(void *p, size_t bytes)
{
	if (p)
		munmap(p, bytes);
}
