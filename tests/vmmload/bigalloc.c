// Allocates and touches (one byte per MiB) N GiB, as a program sizing a
// buffer from its input would: fits natively on a host with that much RAM
// plus swap, so it must fit under vmmload's default guest RAM too.
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	size_t gib = argc > 1 ? strtoull(argv[1], NULL, 10) : 5;
	size_t n = gib << 30;
	char *p = malloc(n);

	if (!p) {
		puts("malloc failed");
		return 1;
	}
	for (size_t i = 0; i < n; i += 1 << 20)
		p[i] = (char)i;
	p[n - 1] = 1;
	printf("%zu GiB allocated and touched\n", gib);
	return 0;
}
