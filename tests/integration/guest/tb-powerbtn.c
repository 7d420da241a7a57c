// SPDX-License-Identifier: GPL-2.0
/*
 * tb-powerbtn: the guest's reaction to an ACPI power button, as
 * systemd-logind or acpid would do it on a distribution: wait for KEY_POWER
 * on any evdev device, then sync and power off.
 *
 *   tb-powerbtn [--no-poweroff] [TIMEOUT_S]
 *
 * Prints "@@TB-POWERBTN LISTENING n=<devices>" once all devices are open
 * (the L1 side presses the button only after seeing it), then
 * "@@TB-POWERBTN PRESSED" when the key arrives. Exit 1 if no input device
 * exists, 2 on timeout (default 120 s).
 */
#include <dirent.h>
#include <fcntl.h>
#include <linux/input.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/reboot.h>
#include <time.h>
#include <unistd.h>

#define MAX_DEVS 32

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

int main(int argc, char **argv)
{
	struct pollfd fds[MAX_DEVS];
	int nfds = 0, poweroff = 1, i;
	long timeout_ms = 120000, deadline;
	struct dirent *de;
	DIR *dir;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--no-poweroff"))
			poweroff = 0;
		else
			timeout_ms = strtol(argv[i], NULL, 10) * 1000L;
	}

	dir = opendir("/dev/input");
	if (!dir) {
		perror("tb-powerbtn: /dev/input");
		return 1;
	}
	while ((de = readdir(dir)) && nfds < MAX_DEVS) {
		char path[300];
		int fd;

		if (strncmp(de->d_name, "event", 5))
			continue;
		snprintf(path, sizeof(path), "/dev/input/%s", de->d_name);
		fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
		if (fd < 0)
			continue;
		fds[nfds].fd = fd;
		fds[nfds].events = POLLIN;
		nfds++;
	}
	closedir(dir);
	if (!nfds) {
		fprintf(stderr, "tb-powerbtn: no evdev devices (evdev/button modules loaded?)\n");
		return 1;
	}
	printf("@@TB-POWERBTN LISTENING n=%d\n", nfds);
	fflush(stdout);

	deadline = now_ms() + timeout_ms;
	for (;;) {
		long left = deadline - now_ms();
		int n;

		if (left <= 0) {
			fprintf(stderr, "tb-powerbtn: no KEY_POWER within %ld s\n",
				timeout_ms / 1000);
			return 2;
		}
		n = poll(fds, nfds, (int)left);
		if (n < 0)
			continue;
		for (i = 0; i < nfds; i++) {
			struct input_event ev;

			if (!(fds[i].revents & POLLIN))
				continue;
			while (read(fds[i].fd, &ev, sizeof(ev)) == sizeof(ev)) {
				if (ev.type != EV_KEY || ev.code != KEY_POWER ||
				    ev.value != 1)
					continue;
				printf("@@TB-POWERBTN PRESSED\n");
				fflush(stdout);
				if (!poweroff)
					return 0;
				sync();
				reboot(RB_POWER_OFF);
				perror("tb-powerbtn: reboot");
				return 3;
			}
		}
	}
}
