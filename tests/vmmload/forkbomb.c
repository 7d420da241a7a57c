/* Fork bombs, run under a process limit (RLIMIT_NPROC of a non-root user):
 *   bounded  fork until fork fails, then release and reap every child;
 *            must see EAGAIN and end with status 0 as natively.
 *   bomb     every process forks forever, ignoring failures; only an
 *            outside limit (--timeout / timeout(1)) ends it. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int bounded(void)
{
	int p[2], n = 0, reaped = 0, clean = 0, err = 0, st;
	pid_t pid;
	char c;

	if (pipe(p))
		return 98;
	for (;;) {
		pid = fork();
		if (pid < 0) {
			err = errno;
			break;
		}
		if (pid == 0) {
			/* Wait for the parent to give up, then leave. */
			close(p[1]);
			while (read(p[0], &c, 1) < 0 && errno == EINTR)
				;
			_exit(0);
		}
		if (++n > 100000)
			break;
	}
	close(p[1]);
	while (wait(&st) > 0) {
		reaped++;
		clean += WIFEXITED(st) && WEXITSTATUS(st) == 0;
	}
	printf("fork failed with %s after at least one child: %d\n",
	       err ? strerror(err) : "nothing", n > 0);
	printf("every child reaped: %d, all with status 0: %d\n", reaped == n, clean == n);
	return err == EAGAIN ? 0 : 1;
}

static void bomb(void)
{
	printf("bombing\n");
	fflush(stdout);
	for (;;)
		fork();
}

int main(int argc, char **argv)
{
	if (argc == 2 && !strcmp(argv[1], "bounded"))
		return bounded();
	if (argc == 2 && !strcmp(argv[1], "bomb"))
		bomb();
	fprintf(stderr, "usage: forkbomb bounded|bomb\n");
	return 2;
}
