/* Static/dynamic smoke test: argv, env, stdio, malloc, files, exit status. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <fcntl.h>

int main(int argc, char **argv)
{
	printf("hello from %s, argc=%d\n", argc > 0 ? "guest" : "?", argc);
	for (int i = 1; i < argc; i++)
		printf("argv[%d]=%s\n", i, argv[i]);
	const char *h = getenv("VMMLOAD_TEST");
	printf("env VMMLOAD_TEST=%s\n", h ? h : "(unset)");
	size_t n = 10 << 20;
	char *big = malloc(n);
	if (!big)
		return 3;
	memset(big, 7, n);
	unsigned long sum = 0;
	for (size_t i = 0; i < n; i += 4096)
		sum += big[i];
	printf("sum=%lu\n", sum);
	free(big);
	int fd = open("/etc/hostname", O_RDONLY);
	printf("open /etc/hostname: %s\n", fd >= 0 ? "ok" : "failed");
	if (fd >= 0)
		close(fd);
	return argc > 2 ? 42 : 0;
}
