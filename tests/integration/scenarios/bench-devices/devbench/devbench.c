// SPDX-License-Identifier: Apache-2.0
//
// devbench: the guest side of `scripts/bench.sh devices` (built static
// through the scenario's l2-make file).
//
//   devbench disk DEV MODE SECONDS THREADS
//       MODE is seqread, seqwrite, randread or randwrite: 4 KiB O_DIRECT
//       requests, one outstanding per thread, for SECONDS. Thread i runs
//       on CPU i (blk-mq then submits on that CPU's hardware queue); a
//       sequential thread walks its own slice of the device. Prints
//       "ops=N bytes=N ms=N".
//
//   devbench tcp IP PORT BYTES STREAMS
//       STREAMS connections, to PORT, PORT+1, ...; each (on CPU i) sends
//       BYTES, shuts its side down and waits for the receiver to close, so
//       the time covers the data arriving. Prints "bytes=N ms=N".
//
// Times are the guest's clock (CLOCK_MONOTONIC).

#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <linux/fs.h>
#include <netinet/in.h>
#include <time.h>
#include <unistd.h>

#define BLOCK 4096
#define MAX_THREADS 64
#define NET_CHUNK (64 * 1024)

struct worker {
	pthread_t thread;
	int index;
	/* disk */
	int fd;
	int random;
	int write;
	uint64_t first, blocks; /* slice (sequential) or whole device (random) */
	/* tcp */
	struct sockaddr_in addr;
	uint64_t bytes;
	/* results */
	uint64_t ops;
	uint64_t done_ms;
	int err;
};

static uint64_t deadline_ms, start_ms;
static pthread_barrier_t start_line;

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void pin(int index)
{
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	cpu_set_t set;

	if (ncpu < 1)
		return;
	CPU_ZERO(&set);
	CPU_SET(index % ncpu, &set);
	/* Best effort: an unpinned thread still measures, on any queue. */
	sched_setaffinity(0, sizeof(set), &set);
}

static uint64_t xorshift(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void *disk_worker(void *arg)
{
	struct worker *w = arg;
	uint64_t seed = 0x9e3779b97f4a7c15ULL * (w->index + 1);
	uint64_t next = 0;
	void *buf;

	pin(w->index);
	if (posix_memalign(&buf, BLOCK, BLOCK)) {
		w->err = ENOMEM;
		return NULL;
	}
	memset(buf, 0x5a ^ w->index, BLOCK);
	pthread_barrier_wait(&start_line);
	while (now_ms() < deadline_ms) {
		uint64_t block;
		ssize_t n;

		if (w->random) {
			block = xorshift(&seed) % w->blocks;
		} else {
			block = w->first + next;
			next = (next + 1) % w->blocks;
		}
		if (w->write)
			n = pwrite(w->fd, buf, BLOCK, (off_t)(block * BLOCK));
		else
			n = pread(w->fd, buf, BLOCK, (off_t)(block * BLOCK));
		if (n != BLOCK) {
			w->err = n < 0 ? errno : EIO;
			break;
		}
		w->ops++;
	}
	free(buf);
	return NULL;
}

static void *tcp_worker(void *arg)
{
	struct worker *w = arg;
	static char chunk[NET_CHUNK];
	uint64_t left = w->bytes;
	char sink[512];
	int s;

	pin(w->index);
	s = socket(AF_INET, SOCK_STREAM, 0);
	if (s < 0) {
		w->err = errno;
		pthread_barrier_wait(&start_line);
		return NULL;
	}
	pthread_barrier_wait(&start_line);
	if (connect(s, (struct sockaddr *)&w->addr, sizeof(w->addr))) {
		w->err = errno;
		goto out;
	}
	while (left) {
		size_t len = left < NET_CHUNK ? left : NET_CHUNK;
		ssize_t n = write(s, chunk, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			w->err = n < 0 ? errno : EIO;
			goto out;
		}
		left -= n;
	}
	shutdown(s, SHUT_WR);
	/* The receiver closes once it has read everything. */
	while (read(s, sink, sizeof(sink)) > 0)
		;
	w->ops = w->bytes;
	w->done_ms = now_ms();
out:
	close(s);
	return NULL;
}

static int run(struct worker *w, int n, void *(*fn)(void *))
{
	int i, err = 0;

	pthread_barrier_init(&start_line, NULL, n + 1);
	for (i = 0; i < n; i++) {
		if (pthread_create(&w[i].thread, NULL, fn, &w[i])) {
			fprintf(stderr, "devbench: pthread_create failed\n");
			exit(1);
		}
	}
	start_ms = now_ms();
	pthread_barrier_wait(&start_line);
	for (i = 0; i < n; i++) {
		pthread_join(w[i].thread, NULL);
		if (w[i].err && !err)
			err = w[i].err;
	}
	return err;
}

static int threads_arg(const char *s)
{
	int n = atoi(s);

	if (n < 1 || n > MAX_THREADS) {
		fprintf(stderr, "devbench: threads/streams must be 1..%d\n", MAX_THREADS);
		exit(2);
	}
	return n;
}

static int disk(int argc, char **argv)
{
	static struct worker w[MAX_THREADS];
	const char *mode;
	uint64_t size = 0, blocks, ops = 0;
	struct stat st;
	int fd, n, i, err, seconds;

	if (argc != 6) {
		fprintf(stderr, "usage: devbench disk DEV MODE SECONDS THREADS\n");
		return 2;
	}
	mode = argv[3];
	seconds = atoi(argv[4]);
	n = threads_arg(argv[5]);
	if (seconds < 1 || (strcmp(mode, "seqread") && strcmp(mode, "seqwrite") &&
			     strcmp(mode, "randread") && strcmp(mode, "randwrite"))) {
		fprintf(stderr, "devbench: bad mode or duration\n");
		return 2;
	}
	fd = open(argv[2], (strstr(mode, "write") ? O_RDWR : O_RDONLY) | O_DIRECT);
	if (fd < 0 || fstat(fd, &st)) {
		perror(argv[2]);
		return 1;
	}
	/* A regular file (for trying it out) or a block device. */
	size = st.st_size;
	if (S_ISBLK(st.st_mode) && ioctl(fd, BLKGETSIZE64, &size)) {
		perror(argv[2]);
		return 1;
	}
	blocks = size / BLOCK;
	if (blocks < (uint64_t)n) {
		fprintf(stderr, "devbench: device too small\n");
		return 1;
	}
	for (i = 0; i < n; i++) {
		w[i].index = i;
		w[i].fd = fd;
		w[i].random = !strncmp(mode, "rand", 4);
		w[i].write = !!strstr(mode, "write");
		w[i].first = w[i].random ? 0 : blocks / n * i;
		w[i].blocks = w[i].random ? blocks : blocks / n;
	}
	deadline_ms = now_ms() + (uint64_t)seconds * 1000;
	err = run(w, n, disk_worker);
	if (err) {
		fprintf(stderr, "devbench: %s: %s\n", mode, strerror(err));
		return 1;
	}
	for (i = 0; i < n; i++)
		ops += w[i].ops;
	printf("ops=%llu bytes=%llu ms=%llu\n", (unsigned long long)ops,
	       (unsigned long long)(ops * BLOCK), (unsigned long long)(now_ms() - start_ms));
	close(fd);
	return 0;
}

static int tcp(int argc, char **argv)
{
	static struct worker w[MAX_THREADS];
	uint64_t bytes, end = 0, total = 0;
	int port, n, i, err;

	if (argc != 6) {
		fprintf(stderr, "usage: devbench tcp IP PORT BYTES STREAMS\n");
		return 2;
	}
	port = atoi(argv[3]);
	bytes = strtoull(argv[4], NULL, 0);
	n = threads_arg(argv[5]);
	if (port < 1 || port + n > 65536 || !bytes) {
		fprintf(stderr, "devbench: bad port or byte count\n");
		return 2;
	}
	for (i = 0; i < n; i++) {
		w[i].index = i;
		w[i].bytes = bytes;
		w[i].addr.sin_family = AF_INET;
		w[i].addr.sin_port = htons(port + i);
		if (inet_pton(AF_INET, argv[2], &w[i].addr.sin_addr) != 1) {
			fprintf(stderr, "devbench: bad address %s\n", argv[2]);
			return 2;
		}
	}
	err = run(w, n, tcp_worker);
	if (err) {
		fprintf(stderr, "devbench: tcp: %s\n", strerror(err));
		return 1;
	}
	for (i = 0; i < n; i++) {
		total += w[i].ops;
		if (w[i].done_ms > end)
			end = w[i].done_ms;
	}
	printf("bytes=%llu ms=%llu\n", (unsigned long long)total,
	       (unsigned long long)(end - start_ms));
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "disk"))
		return disk(argc, argv);
	if (argc > 1 && !strcmp(argv[1], "tcp"))
		return tcp(argc, argv);
	fprintf(stderr, "usage: devbench disk DEV MODE SECONDS THREADS | "
			"devbench tcp IP PORT BYTES STREAMS\n");
	return 2;
}
