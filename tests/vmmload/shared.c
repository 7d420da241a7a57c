// Shared mappings (issue 12): MAP_SHARED memory is shared with forked
// children (concurrently, not copied at exit), writes to a shared file
// mapping are what read(2) of the file returns, freed shared frames never
// carry later private data into the file, and a read-only descriptor
// refuses a writable shared mapping. Prints results; a native run is the
// reference.
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define ROUNDS 200000

static void bump_both(atomic_long *c, const char *what)
{
	pid_t pid = fork();

	if (pid == 0) {
		for (int i = 0; i < ROUNDS; i++)
			atomic_fetch_add(c, 1);
		_exit(0);
	}
	for (int i = 0; i < ROUNDS; i++)
		atomic_fetch_add(c, 1);
	waitpid(pid, NULL, 0);
	printf("%s: counter %ld\n", what, atomic_load(c));
}

int main(int argc, char **argv)
{
	const char *path = argc > 1 ? argv[1] : "shared.dat";
	char buf[32] = { 0 };
	atomic_long *c;
	int fd, zero;
	char *m, *big;

	c = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	bump_both(c, "anonymous shared");
	zero = open("/dev/zero", O_RDWR);
	c = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, zero, 0);
	bump_both(c + 600, "/dev/zero shared");
	close(zero);

	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || ftruncate(fd, 3 * 4096))
		return 2;
	m = mmap(NULL, 3 * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	memcpy(m + 4096, "written via the map", 19);
	pread(fd, buf, 19, 4096);
	printf("read(2) sees: %s\n", buf);
	if (fork() == 0) {
		memcpy(m + 8192, "by the child", 12);
		_exit(0);
	}
	wait(NULL);
	memset(buf, 0, sizeof(buf));
	pread(fd, buf, 12, 8192);
	printf("child's write: %s / %.12s\n", buf, m + 8192);
	munmap(m, 3 * 4096);
	// The freed frames are reused for private memory: the file must not
	// change.
	big = mmap(NULL, 64 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	memset(big, 'Z', 64 << 20);
	memset(buf, 0, sizeof(buf));
	pread(fd, buf, 19, 4096);
	printf("after munmap and private reuse: %s\n", buf);
	close(fd);

	fd = open(path, O_RDONLY);
	m = mmap(NULL, 4096 * 2, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	printf("writable shared map of a read-only fd: %s\n",
	       m == MAP_FAILED ? strerror(errno) : "mapped");
	m = mmap(NULL, 4096 * 2, PROT_READ, MAP_SHARED, fd, 0);
	printf("read-only shared map: %.19s\n", m + 4096);
	return 0;
}
