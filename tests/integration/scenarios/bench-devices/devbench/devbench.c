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
//   devbench tcp IP PORT BYTES STREAMS [LIMIT]
//       STREAMS connections, to PORT, PORT+1, ...; each (on CPU i) sends
//       BYTES, shuts its side down and waits for the receiver to close, so
//       the time covers the data arriving. Prints "bytes=N ms=N".
//
//   devbench tcprecv PORT BYTES STREAMS [LIMIT [READY]]
//       Listens on STREAMS ports, PORT, PORT+1, ...; each (on CPU i) takes
//       one connection and reads BYTES from it, then closes it. Once every
//       port listens, prints READY (when given) on stderr, for whoever
//       starts the senders. The time runs from the first connection
//       accepted to the last byte of the last stream. Prints
//       "bytes=N ms=N wait_ms=N" (wait_ms: from listening to the first
//       connection).
//
// Times are the guest's clock (CLOCK_MONOTONIC).
//
// Bounded: a disk run that has not finished STALL_S seconds after its
// SECONDS (a request the device never completes), a TCP stream that makes
// no progress for STALL_S seconds (connect, send, the wait for the
// receiver's close, the wait for a sender or a read) and a TCP run longer
// than LIMIT seconds (default 120)
// print what each thread was doing to stderr and exit with status 3.

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
#include <netinet/tcp.h>
#include <time.h>
#include <unistd.h>

#define BLOCK 4096
#define MAX_THREADS 64
#define NET_CHUNK (64 * 1024)
#define STALL_S 30
#define STR(x) #x
#define XSTR(x) STR(x)
#define TCP_LIMIT_S 120

enum phase { PH_START, PH_CONNECT, PH_SEND, PH_WAIT_CLOSE, PH_ACCEPT, PH_RECV, PH_DONE };
static const char *const phase_name[] = { "starting", "connecting", "sending",
					  "waiting for the receiver's close",
					  "waiting for the sender's connection", "receiving",
					  "done" };

struct worker {
	pthread_t thread;
	int index;
	/* disk */
	int fd;
	int random;
	int write;
	uint64_t first, blocks; /* slice (sequential) or whole device (random) */
	/* tcp */
	struct sockaddr_in addr; /* the receiver's (tcp) or ours (tcprecv) */
	uint64_t bytes;
	int receiving;
	int lsock; /* tcprecv: the listening socket */
	int sock;
	/* progress, read by the main thread when a run overstays (atomics) */
	int phase;
	uint64_t cur_block;
	uint64_t sent; /* bytes written (tcp) or read (tcprecv) so far */
	/* results */
	uint64_t ops;
	uint64_t first_ms; /* tcprecv: connection accepted */
	uint64_t done_ms;
	int err;
};

static uint64_t deadline_ms, start_ms;
static pthread_barrier_t start_line;
/* Workers that have returned, signalled to run() through finished_cv. */
static pthread_mutex_t finished_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t finished_cv;
static int finished;

static void worker_finished(void)
{
	pthread_mutex_lock(&finished_lock);
	finished++;
	pthread_cond_signal(&finished_cv);
	pthread_mutex_unlock(&finished_lock);
}

static uint64_t load64(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

static void store64(uint64_t *p, uint64_t v)
{
	__atomic_store_n(p, v, __ATOMIC_RELAXED);
}

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
		pthread_barrier_wait(&start_line);
		worker_finished();
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
		store64(&w->cur_block, block);
		if (w->write)
			n = pwrite(w->fd, buf, BLOCK, (off_t)(block * BLOCK));
		else
			n = pread(w->fd, buf, BLOCK, (off_t)(block * BLOCK));
		if (n != BLOCK) {
			w->err = n < 0 ? errno : EIO;
			break;
		}
		store64(&w->ops, w->ops + 1);
	}
	free(buf);
	worker_finished();
	return NULL;
}

static void set_phase(struct worker *w, int phase)
{
	__atomic_store_n(&w->phase, phase, __ATOMIC_RELAXED);
}

/* errno of a blocking call that timed out after SO_SNDTIMEO/SO_RCVTIMEO */
static int stalled(int err)
{
	return err == EAGAIN || err == EWOULDBLOCK || err == EINPROGRESS || err == ETIMEDOUT;
}

/* One line on a stream's TCP state, for a stream that stalls. */
static void tcp_state(const struct worker *w, const char *why)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);
	int s = __atomic_load_n(&w->sock, __ATOMIC_RELAXED);

	fprintf(stderr, "devbench: tcp stream %d (port %d): %s while %s, %llu of %llu bytes %s",
		w->index, ntohs(w->addr.sin_port), why,
		phase_name[__atomic_load_n(&w->phase, __ATOMIC_RELAXED)],
		(unsigned long long)load64(&w->sent), (unsigned long long)w->bytes,
		w->receiving ? "read" : "written");
	memset(&ti, 0, sizeof(ti));
	if (s >= 0 && !getsockopt(s, IPPROTO_TCP, TCP_INFO, &ti, &len))
		fprintf(stderr, "; tcp_info state=%u retransmits=%u backoff=%u unacked=%u lost=%u retrans=%u snd_cwnd=%u rtt_us=%u last_data_sent_ms=%u last_ack_recv_ms=%u total_retrans=%u",
			ti.tcpi_state, ti.tcpi_retransmits, ti.tcpi_backoff, ti.tcpi_unacked,
			ti.tcpi_lost, ti.tcpi_retrans, ti.tcpi_snd_cwnd, ti.tcpi_rtt,
			ti.tcpi_last_data_sent, ti.tcpi_last_ack_recv, ti.tcpi_total_retrans);
	fputc('\n', stderr);
}

/* tcp_state() for a worker that failed with w->err */
static void tcp_failed(const struct worker *w)
{
	if (stalled(w->err))
		tcp_state(w, "no progress for " XSTR(STALL_S) " s");
	else
		tcp_state(w, strerror(w->err));
}

/* Blocking calls on s give up after STALL_S seconds without progress:
 * reads always, writes (connect included) too when sending is set. */
static int set_stall(int s, int sending)
{
	struct timeval stall = { .tv_sec = STALL_S };

	return (sending && setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &stall, sizeof(stall))) ||
	       setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &stall, sizeof(stall));
}

/*
 * One stream, either direction (w->receiving): the sender connects to the
 * receiver, writes w->bytes, shuts its side down and waits for the
 * receiver's close; the receiver accepts on w->lsock, reads w->bytes and
 * closes.
 */
static void *tcp_worker(void *arg)
{
	struct worker *w = arg;
	/* Written from (zeros) or read into: one direction per run. */
	static char buf[NET_CHUNK];
	uint64_t left = w->bytes;
	ssize_t n;
	int s = -1;

	pin(w->index);
	if (!w->receiving) {
		s = socket(AF_INET, SOCK_STREAM, 0);
		if (s < 0 || set_stall(s, 1)) {
			w->err = errno;
			pthread_barrier_wait(&start_line);
			goto out;
		}
		__atomic_store_n(&w->sock, s, __ATOMIC_RELAXED);
	}
	pthread_barrier_wait(&start_line);
	if (w->receiving) {
		set_phase(w, PH_ACCEPT);
		/* accept() gives up after the listener's SO_RCVTIMEO (STALL_S). */
		s = accept(w->lsock, NULL, NULL);
		if (s < 0) {
			w->err = errno;
			goto fail;
		}
		w->first_ms = now_ms();
		__atomic_store_n(&w->sock, s, __ATOMIC_RELAXED);
		if (set_stall(s, 0)) {
			w->err = errno;
			goto fail;
		}
	} else {
		set_phase(w, PH_CONNECT);
		if (connect(s, (struct sockaddr *)&w->addr, sizeof(w->addr))) {
			w->err = errno;
			goto fail;
		}
	}
	set_phase(w, w->receiving ? PH_RECV : PH_SEND);
	while (left) {
		size_t len = left < NET_CHUNK ? left : NET_CHUNK;

		n = w->receiving ? read(s, buf, len) : write(s, buf, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n == 0 && w->receiving) {
			w->err = ECONNABORTED;
			tcp_state(w, "the sender closed the connection early");
			goto out;
		}
		if (n <= 0) {
			w->err = n < 0 ? errno : EIO;
			goto fail;
		}
		left -= n;
		store64(&w->sent, w->bytes - left);
	}
	if (!w->receiving) {
		char sink[512];

		shutdown(s, SHUT_WR);
		set_phase(w, PH_WAIT_CLOSE);
		/* The receiver closes once it has read everything. */
		while ((n = read(s, sink, sizeof(sink))) != 0) {
			if (n < 0 && errno != EINTR) {
				w->err = errno;
				goto fail;
			}
		}
	}
	w->done_ms = now_ms();
	set_phase(w, PH_DONE);
	w->ops = w->bytes;
	goto out;
fail:
	tcp_failed(w);
out:
	__atomic_store_n(&w->sock, -1, __ATOMIC_RELAXED);
	if (s >= 0)
		close(s);
	worker_finished();
	return NULL;
}

/*
 * Runs n workers and waits for them until limit_ms (CLOCK_MONOTONIC). A
 * worker still running then is stuck (a request the device never
 * completes, a stream without progress): report (one call per worker) and
 * exit with status 3, without waiting for the stuck threads.
 */
static int run(struct worker *w, int n, void *(*fn)(void *), uint64_t limit_ms,
	       void (*report)(const struct worker *))
{
	pthread_condattr_t attr;
	struct timespec until = { .tv_sec = limit_ms / 1000,
				  .tv_nsec = (limit_ms % 1000) * 1000000 };
	int i, err = 0, done;

	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&finished_cv, &attr);
	pthread_barrier_init(&start_line, NULL, n + 1);
	for (i = 0; i < n; i++) {
		w[i].sock = -1;
		if (pthread_create(&w[i].thread, NULL, fn, &w[i])) {
			fprintf(stderr, "devbench: pthread_create failed\n");
			exit(1);
		}
	}
	start_ms = now_ms();
	pthread_barrier_wait(&start_line);
	pthread_mutex_lock(&finished_lock);
	while (finished < n) {
		if (pthread_cond_timedwait(&finished_cv, &finished_lock, &until) == ETIMEDOUT)
			break;
	}
	done = finished;
	pthread_mutex_unlock(&finished_lock);
	if (done < n) {
		fprintf(stderr, "devbench: %d of %d threads still running %llu ms after the start\n",
			n - done, n, (unsigned long long)(now_ms() - start_ms));
		for (i = 0; i < n; i++)
			report(&w[i]);
		fflush(stderr);
		_exit(3);
	}
	for (i = 0; i < n; i++) {
		pthread_join(w[i].thread, NULL);
		if (w[i].err && !err)
			err = w[i].err;
	}
	return err;
}

static void disk_report(const struct worker *w)
{
	fprintf(stderr, "devbench: disk thread %d: %llu requests done, the last one issued at block %llu (byte %llu)\n",
		w->index, (unsigned long long)load64(&w->ops),
		(unsigned long long)load64(&w->cur_block),
		(unsigned long long)load64(&w->cur_block) * BLOCK);
}

static void tcp_report(const struct worker *w)
{
	tcp_state(w, "overall limit reached");
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
	err = run(w, n, disk_worker, deadline_ms + STALL_S * 1000, disk_report);
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

/*
 * Sets up the streams of either direction from PORT BYTES STREAMS [LIMIT]
 * (args, nargs of them, 3 or more): stream i gets PORT + i, BYTES and the
 * direction. Returns the number of streams, with the limit in *limit, or
 * -1 (said on stderr) for a bad port, byte count or limit.
 */
static int tcp_streams(struct worker *w, char **args, int nargs, int receiving, int *limit)
{
	int port = atoi(args[0]), n, i;
	uint64_t bytes = strtoull(args[1], NULL, 0);

	n = threads_arg(args[2]);
	*limit = nargs >= 4 ? atoi(args[3]) : TCP_LIMIT_S;
	if (port < 1 || port + n > 65536 || !bytes || *limit < 1) {
		fprintf(stderr, "devbench: bad port, byte count or limit\n");
		return -1;
	}
	for (i = 0; i < n; i++) {
		w[i].index = i;
		w[i].bytes = bytes;
		w[i].receiving = receiving;
		w[i].addr.sin_family = AF_INET;
		w[i].addr.sin_port = htons(port + i);
	}
	return n;
}

static int tcp(int argc, char **argv)
{
	static struct worker w[MAX_THREADS];
	uint64_t end = 0, total = 0;
	int n, i, err, limit;

	if (argc != 6 && argc != 7) {
		fprintf(stderr, "usage: devbench tcp IP PORT BYTES STREAMS [LIMIT]\n");
		return 2;
	}
	n = tcp_streams(w, argv + 3, argc - 3, 0, &limit);
	if (n < 0)
		return 2;
	for (i = 0; i < n; i++) {
		if (inet_pton(AF_INET, argv[2], &w[i].addr.sin_addr) != 1) {
			fprintf(stderr, "devbench: bad address %s\n", argv[2]);
			return 2;
		}
	}
	err = run(w, n, tcp_worker, now_ms() + (uint64_t)limit * 1000, tcp_report);
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

static int tcprecv(int argc, char **argv)
{
	static struct worker w[MAX_THREADS];
	uint64_t begin = UINT64_MAX, end = 0, total = 0, listen_ms;
	int n, i, err, limit, one = 1;

	if (argc < 5 || argc > 7) {
		fprintf(stderr, "usage: devbench tcprecv PORT BYTES STREAMS [LIMIT [READY]]\n");
		return 2;
	}
	n = tcp_streams(w, argv + 2, argc - 2, 1, &limit);
	if (n < 0)
		return 2;
	for (i = 0; i < n; i++) {
		w[i].addr.sin_addr.s_addr = htonl(INADDR_ANY);
		w[i].lsock = socket(AF_INET, SOCK_STREAM, 0);
		if (w[i].lsock < 0 ||
		    setsockopt(w[i].lsock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
		    set_stall(w[i].lsock, 0) ||
		    bind(w[i].lsock, (struct sockaddr *)&w[i].addr, sizeof(w[i].addr)) ||
		    listen(w[i].lsock, 1)) {
			fprintf(stderr, "devbench: listening on port %d: %s\n",
				ntohs(w[i].addr.sin_port), strerror(errno));
			return 1;
		}
	}
	listen_ms = now_ms();
	if (argc == 7)
		fprintf(stderr, "%s\n", argv[6]);
	err = run(w, n, tcp_worker, now_ms() + (uint64_t)limit * 1000, tcp_report);
	if (err) {
		fprintf(stderr, "devbench: tcprecv: %s\n", strerror(err));
		return 1;
	}
	for (i = 0; i < n; i++) {
		close(w[i].lsock);
		total += w[i].ops;
		if (w[i].first_ms < begin)
			begin = w[i].first_ms;
		if (w[i].done_ms > end)
			end = w[i].done_ms;
	}
	printf("bytes=%llu ms=%llu wait_ms=%llu\n", (unsigned long long)total,
	       (unsigned long long)(end - begin), (unsigned long long)(begin - listen_ms));
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "disk"))
		return disk(argc, argv);
	if (argc > 1 && !strcmp(argv[1], "tcp"))
		return tcp(argc, argv);
	if (argc > 1 && !strcmp(argv[1], "tcprecv"))
		return tcprecv(argc, argv);
	fprintf(stderr, "usage: devbench disk DEV MODE SECONDS THREADS | "
			"devbench tcp IP PORT BYTES STREAMS [LIMIT] | "
			"devbench tcprecv PORT BYTES STREAMS [LIMIT [READY]]\n");
	return 2;
}
