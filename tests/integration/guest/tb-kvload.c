// SPDX-License-Identifier: GPL-2.0
/*
 * tb-kvload: memcached load generator that measures request latency and
 * publishes the p99 of every window for the tier-policy daemon.
 *
 *   tb-kvload -a ADDR [-p PORT] -c CONTROL -o P99_FILE [-l LOG] [-w WINDOW_MS]
 *
 * CONTROL holds "CONNS RATE": CONNS closed-loop connections (1..64), each
 * with one "get" outstanding, and RATE the total requests/s (0 = as fast
 * as the server answers).  It is re-read at every window, so a load step
 * is one write of that file; "stop" ends the run.
 *
 * Every window, P99_FILE is replaced (write + rename) by
 * "<p99_ms> <unix_time>", the format of tier-policy's latency_file.  A
 * window in which nothing completed reports the age of the oldest
 * outstanding request: a hung server shows as high latency, never as
 * none.  LOG gets one line per window:
 * "<unix_ms> conns=N rate=R done=N p50_ms=X p99_ms=Y max_ms=Z".
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS	64
#define MAX_SAMPLES	(1 << 20)
#define VALUE_LEN	100

struct conn {
	int fd;
	int busy;		/* a request is outstanding */
	uint64_t sent_ns;
	char buf[512];
	size_t len;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000ull + (uint64_t)ts.tv_nsec / 1000000;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static int write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static int connect_to(const struct sockaddr_in *sa, int secs)
{
	uint64_t deadline = now_ns() + (uint64_t)secs * 1000000000ull;
	int one = 1;

	for (;;) {
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

		if (fd < 0)
			return -1;
		if (!connect(fd, (const struct sockaddr *)sa, sizeof(*sa))) {
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one,
				   sizeof(one));
			return fd;
		}
		close(fd);
		if (now_ns() >= deadline)
			return -1;
		usleep(200000);
	}
}

/* Store the key every request reads; returns 0 on "STORED". */
static int store_key(int fd)
{
	char req[64 + VALUE_LEN], resp[64];
	int n = snprintf(req, sizeof(req), "set tbkey 0 0 %d\r\n", VALUE_LEN);
	ssize_t r;

	memset(req + n, 'x', VALUE_LEN);
	memcpy(req + n + VALUE_LEN, "\r\n", 2);
	if (write_all(fd, req, (size_t)n + VALUE_LEN + 2))
		return -1;
	r = read(fd, resp, sizeof(resp) - 1);
	if (r <= 0)
		return -1;
	resp[r] = 0;
	return strncmp(resp, "STORED", 6) ? -1 : 0;
}

/* A complete "get" response ends with "END\r\n". */
static int response_done(const struct conn *c)
{
	return c->len >= 5 && !memcmp(c->buf + c->len - 5, "END\r\n", 5);
}

/* CONTROL: "CONNS RATE" or "stop"; keeps the old values if unreadable. */
static int read_control(const char *path, int *conns, double *rate)
{
	char line[128];
	FILE *f = fopen(path, "r");
	int n;
	double r;

	if (!f)
		return 0;
	if (!fgets(line, sizeof(line), f)) {
		fclose(f);
		return 0;
	}
	fclose(f);
	if (!strncmp(line, "stop", 4))
		return -1;
	if (sscanf(line, "%d %lf", &n, &r) == 2 && n >= 1 && n <= MAX_CONNS &&
	    r >= 0) {
		*conns = n;
		*rate = r;
	}
	return 0;
}

static int publish(const char *path, double p99_ms)
{
	char tmp[4096];
	FILE *f;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
		return -1;
	f = fopen(tmp, "w");
	if (!f)
		return -1;
	fprintf(f, "%.3f %llu\n", p99_ms,
		(unsigned long long)(wall_ms() / 1000));
	if (fclose(f))
		return -1;
	return rename(tmp, path);
}

static void usage(void)
{
	fprintf(stderr, "usage: tb-kvload -a ADDR [-p PORT] -c CONTROL -o P99_FILE [-l LOG] [-w WINDOW_MS]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	static struct conn cs[MAX_CONNS];
	static uint64_t lat[MAX_SAMPLES];
	const char *addr = NULL, *control = NULL, *out = NULL, *logp = NULL;
	struct sockaddr_in sa = { .sin_family = AF_INET };
	int port = 11211, window_ms = 1000, conns = 1, opt, i, nlat = 0;
	double rate = 0;
	uint64_t win_start, next_send;
	FILE *log = NULL;

	while ((opt = getopt(argc, argv, "a:p:c:o:l:w:")) != -1) {
		switch (opt) {
		case 'a':
			addr = optarg;
			break;
		case 'p':
			port = atoi(optarg);
			break;
		case 'c':
			control = optarg;
			break;
		case 'o':
			out = optarg;
			break;
		case 'l':
			logp = optarg;
			break;
		case 'w':
			window_ms = atoi(optarg);
			break;
		default:
			usage();
		}
	}
	if (!addr || !control || !out || port <= 0 || port > 65535 ||
	    window_ms < 100 || inet_pton(AF_INET, addr, &sa.sin_addr) != 1)
		usage();
	sa.sin_port = htons((uint16_t)port);
	signal(SIGPIPE, SIG_IGN);
	if (logp) {
		log = fopen(logp, "a");
		if (!log) {
			perror(logp);
			return 1;
		}
		setvbuf(log, NULL, _IOLBF, 0);
	}
	if (read_control(control, &conns, &rate) < 0)
		return 0;
	for (i = 0; i < MAX_CONNS; i++)
		cs[i].fd = -1;
	cs[0].fd = connect_to(&sa, 30);
	if (cs[0].fd < 0 || store_key(cs[0].fd)) {
		fprintf(stderr, "tb-kvload: cannot reach memcached at %s:%d\n",
			addr, port);
		return 1;
	}
	win_start = next_send = now_ns();
	for (;;) {
		struct pollfd pf[MAX_CONNS];
		uint64_t t = now_ns();
		int timeout = 10;

		/* idle connections send when the rate allows */
		for (i = 0; i < conns; i++) {
			struct conn *c = &cs[i];
			static const char get[] = "get tbkey\r\n";

			if (c->fd < 0) {
				c->fd = connect_to(&sa, 5);
				if (c->fd < 0)
					continue;
			}
			if (c->busy || (rate > 0 && t < next_send))
				continue;
			if (write_all(c->fd, get, sizeof(get) - 1)) {
				close(c->fd);
				c->fd = -1;
				continue;
			}
			c->busy = 1;
			c->len = 0;
			c->sent_ns = t;
			if (rate > 0) {
				next_send += (uint64_t)(1e9 / rate);
				if (next_send < t)
					next_send = t;	/* no catch-up bursts */
			}
		}
		for (i = 0; i < conns; i++) {
			pf[i].fd = cs[i].busy ? cs[i].fd : -1;
			pf[i].events = POLLIN;
			pf[i].revents = 0;
		}
		if (rate > 0 && next_send > t)
			timeout = (int)((next_send - t) / 1000000) + 1;
		if (timeout > 10)
			timeout = 10;
		if (poll(pf, (nfds_t)conns, timeout) < 0 && errno != EINTR) {
			perror("poll");
			return 1;
		}
		t = now_ns();
		for (i = 0; i < conns; i++) {
			struct conn *c = &cs[i];
			ssize_t r;

			if (!(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			r = read(c->fd, c->buf + c->len,
				 sizeof(c->buf) - c->len);
			if (r <= 0 || c->len + (size_t)r >= sizeof(c->buf)) {
				close(c->fd);	/* reconnect next round */
				c->fd = -1;
				c->busy = 0;
				continue;
			}
			c->len += (size_t)r;
			if (!response_done(c))
				continue;
			c->busy = 0;
			if (nlat < MAX_SAMPLES)
				lat[nlat++] = t - c->sent_ns;
		}
		/* connections beyond a lowered CONNS are closed */
		for (i = conns; i < MAX_CONNS; i++) {
			if (cs[i].fd >= 0) {
				close(cs[i].fd);
				cs[i].fd = -1;
				cs[i].busy = 0;
			}
		}
		if (t - win_start < (uint64_t)window_ms * 1000000ull)
			continue;
		{
			double p50 = 0, p99, mx = 0;
			uint64_t oldest = 0;

			for (i = 0; i < conns; i++)
				if (cs[i].busy && t - cs[i].sent_ns > oldest)
					oldest = t - cs[i].sent_ns;
			if (nlat) {
				qsort(lat, (size_t)nlat, sizeof(lat[0]), cmp_u64);
				p50 = lat[nlat / 2] / 1e6;
				p99 = lat[(size_t)nlat * 99 / 100] / 1e6;
				mx = lat[nlat - 1] / 1e6;
			} else {
				p99 = oldest / 1e6;
			}
			if (publish(out, p99))
				perror(out);
			if (log)
				fprintf(log, "%llu conns=%d rate=%.0f done=%d p50_ms=%.3f p99_ms=%.3f max_ms=%.3f\n",
					(unsigned long long)wall_ms(), conns,
					rate, nlat, p50, p99, mx);
		}
		nlat = 0;
		win_start = t;
		if (read_control(control, &conns, &rate) < 0)
			break;
	}
	for (i = 0; i < MAX_CONNS; i++)
		if (cs[i].fd >= 0)
			close(cs[i].fd);
	return 0;
}
