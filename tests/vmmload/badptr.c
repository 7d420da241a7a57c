/* System calls with bad guest pointers must fail with EFAULT (as natively),
 * never touch vmmload's memory. Prints each result; output must match native. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static void show(const char *what, long r)
{
	printf("%-28s %ld %s\n", what, r, r < 0 ? strerror(errno) : "");
}

int main(void)
{
	char buf[64];
	struct stat st;
	int fd = open("/etc/hostname", O_RDONLY);
	show("write(NULL)", syscall(SYS_write, 1, (void *)0, 5));
	show("write(0x1000)", syscall(SYS_write, 1, (void *)0x1000, 5));
	show("write(kernel half)", syscall(SYS_write, 1, (void *)0xffffff8000005000UL, 5));
	show("write(non-canonical)", syscall(SYS_write, 1, (void *)0x0000900000000000UL, 5));
	show("read(into text)", syscall(SYS_read, fd, (void *)main, 5));
	show("read(unmapped)", syscall(SYS_read, fd, (void *)0x7000000UL, 5));
	show("open(bad path)", syscall(SYS_open, (void *)0x1234, O_RDONLY));
	show("stat(bad buf)", syscall(SYS_stat, "/", (void *)0x10));
	show("stat(ok)", syscall(SYS_stat, "/", &st));
	show("read(ok)", syscall(SYS_read, fd, buf, 1) > 0 ? 1 : -1);
	show("writev(bad iov)", syscall(SYS_writev, 1, (void *)0x20, 1));
	show("getcwd(bad)", syscall(SYS_getcwd, (void *)0x30, 100));
	show("clock_gettime(bad)", syscall(SYS_clock_gettime, 0, (void *)0x40));
	show("huge length", syscall(SYS_write, 1, buf, (size_t)-1 / 2));
	return 0;
}
