/* File-position semantics that vmmload's in-guest read cache must preserve:
 * sequential reads, lseek, a dup'ed descriptor sharing the position, pread,
 * a bad buffer (EFAULT), and EOF. Output must equal a native run. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static unsigned long sum(const unsigned char *b, long n)
{
	unsigned long s = 0;
	for (long i = 0; i < n; i++)
		s = s * 31 + b[i];
	return s;
}

int main(int argc, char **argv)
{
	static unsigned char buf[1 << 16];
	int fd = open(argc > 1 ? argv[1] : "/proc/self/exe", O_RDONLY);
	if (fd < 0) {
		perror("open");
		return 1;
	}
	long n = read(fd, buf, 5000);
	printf("read %ld sum %lu pos %ld\n", n, sum(buf, n), (long)lseek(fd, 0, SEEK_CUR));
	n = read(fd, buf, 8192);
	printf("read %ld sum %lu\n", n, sum(buf, n));
	n = read(fd, buf, 100);
	printf("small read %ld sum %lu\n", n, sum(buf, n));
	int d = dup(fd);
	n = read(d, buf, 300);
	printf("dup read %ld sum %lu pos %ld\n", n, sum(buf, n), (long)lseek(fd, 0, SEEK_CUR));
	n = read(fd, buf, 20000);
	printf("read %ld sum %lu\n", n, sum(buf, n));
	void *volatile bad = (void *)0x10;
	n = read(fd, bad, 8192);
	printf("bad buffer %ld %s\n", n, n < 0 ? strerror(errno) : "");
	n = read(fd, buf, 4096);
	printf("after bad buffer %ld sum %lu pos %ld\n", n, sum(buf, n), (long)lseek(d, 0, SEEK_CUR));
	n = pread(fd, buf, 4096, 1);
	printf("pread %ld sum %lu\n", n, sum(buf, n));
	unsigned long total = 0, chunks = 0;
	while ((n = read(fd, buf, 32768)) > 0) {
		total += n;
		chunks++;
	}
	printf("rest %lu bytes in %lu reads, last %ld, pos %ld\n", total, chunks, n, (long)lseek(fd, 0, SEEK_CUR));
	close(d);
	close(fd);
	/* tar's pattern: 10240-byte reads, which do not divide the cache's
	   1 MiB refills; a read of a regular file may be short only at EOF. */
	fd = open(argc > 1 ? argv[1] : "/proc/self/exe", O_RDONLY);
	if (fd < 0) {
		perror("reopen");
		return 1;
	}
	unsigned long shorts = 0;
	total = 0;
	while ((n = read(fd, buf, 10240)) > 0) {
		total += n;
		if (n < 10240 && read(fd, buf, 1) != 0)
			shorts++;
	}
	printf("10240-byte reads: %lu bytes, %lu short before EOF\n", total, shorts);
	close(fd);
	return 0;
}
