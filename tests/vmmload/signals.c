/* Signal delivery to the program's own handlers; run natively and under
 * vmmload, stdout and exit status must match. One scenario per argument. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t hits, hits2;
static sigjmp_buf jb;
static void *fault_addr;
static int fault_code;

static void on_sig(int sig) { (void)sig; hits++; }
static void on_sig2(int sig) { (void)sig; hits2++; }

static void set(int sig, void (*h)(int), int flags)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = h;
	sa.sa_flags = flags;
	sigemptyset(&sa.sa_mask);
	if (sigaction(sig, &sa, NULL)) {
		perror("sigaction");
		exit(99);
	}
}

static void on_fault(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	hits++;
	fault_addr = si->si_addr;
	fault_code = si->si_code;
	siglongjmp(jb, sig);
}

static void set_info(int sig, int flags)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_fault;
	sa.sa_flags = SA_SIGINFO | flags;
	sigemptyset(&sa.sa_mask);
	sigaction(sig, &sa, NULL);
}

static void alarm_spin(void)
{
	set(SIGALRM, on_sig, 0);
	alarm(1);
	while (!hits)
		;
	printf("spin interrupted by SIGALRM\n");
}

static void alarm_read(int restart)
{
	int p[2];
	char c = 0;
	ssize_t n;

	if (pipe(p))
		exit(98);
	set(SIGALRM, on_sig, restart ? SA_RESTART : 0);
	if (restart && fork() == 0) {
		/* The writer comes after the alarm: the read must be restarted. */
		sleep(2);
		write(p[1], "x", 1);
		_exit(0);
	}
	alarm(1);
	n = read(p[0], &c, 1);
	printf("read returned %zd (%s), handler ran %d time(s), byte %c\n", n,
	       n < 0 ? strerror(errno) : "ok", hits, c ? c : '-');
	if (restart)
		wait(NULL);
}

static void sigpipe_handled(int ignore)
{
	int p[2];
	ssize_t n;

	if (pipe(p))
		exit(98);
	close(p[0]);
	if (ignore)
		signal(SIGPIPE, SIG_IGN);
	else
		set(SIGPIPE, on_sig, 0);
	n = write(p[1], "x", 1);
	printf("write returned %zd (%s), handler ran %d time(s)\n", n, strerror(errno), hits);
}

static void sigchld(void)
{
	sigset_t block, old;
	int st;
	pid_t pid;

	set(SIGCHLD, on_sig, 0);
	sigemptyset(&block);
	sigaddset(&block, SIGCHLD);
	sigprocmask(SIG_BLOCK, &block, &old);
	pid = fork();
	if (pid == 0)
		_exit(3);
	while (!hits)
		sigsuspend(&old);
	waitpid(pid, &st, 0);
	printf("SIGCHLD handled, child exit status %d\n", WEXITSTATUS(st));
}

static void segv_longjmp(void)
{
	volatile int *volatile bad = (int *)16;
	int i;

	set_info(SIGSEGV, 0);
	for (i = 0; i < 3; i++) {
		if (sigsetjmp(jb, 1) == 0)
			*bad = 1;
		printf("recovered from SIGSEGV %d: addr %p code %s\n", i, fault_addr,
		       fault_code == SEGV_MAPERR ? "SEGV_MAPERR" : "other");
	}
	char *ro = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (sigsetjmp(jb, 1) == 0)
		ro[8] = 1;
	printf("write to read-only page: addr offset %ld code %s\n", (char *)fault_addr - ro,
	       fault_code == SEGV_ACCERR ? "SEGV_ACCERR" : "other");
	set_info(SIGFPE, 0);
	if (sigsetjmp(jb, 1) == 0) {
		volatile int z = 0, one = 1;
		printf("%d\n", one / z);
	}
	printf("SIGFPE code %s\n", fault_code == FPE_INTDIV ? "FPE_INTDIV" : "other");
	set_info(SIGILL, 0);
	if (sigsetjmp(jb, 1) == 0)
		__asm__ volatile("ud2");
	printf("SIGILL code %s\n", fault_code == ILL_ILLOPN ? "ILL_ILLOPN" : "other");
}

static char *alt_base;
static int depth;

static void on_overflow(int sig, siginfo_t *si, void *uc)
{
	char here;

	(void)si;
	(void)uc;
	hits = &here > alt_base && &here < alt_base + SIGSTKSZ * 4;
	siglongjmp(jb, sig);
}

static int recurse(int n)
{
	volatile char pad[1024];

	pad[0] = (char)n;
	depth++;
	if (n < 1 << 30)
		return recurse(n + 1) + pad[0];
	return pad[0];
}

static void altstack(void)
{
	stack_t ss = { 0 };
	struct sigaction sa;
	struct rlimit rl = { 8 << 20, 8 << 20 };

	setrlimit(RLIMIT_STACK, &rl);
	alt_base = malloc(SIGSTKSZ * 4);
	ss.ss_sp = alt_base;
	ss.ss_size = SIGSTKSZ * 4;
	sigaltstack(&ss, NULL);
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_overflow;
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
	sigaction(SIGSEGV, &sa, NULL);
	if (sigsetjmp(jb, 1) == 0)
		recurse(0);
	stack_t cur;
	sigaltstack(NULL, &cur);
	printf("stack overflow caught on the alternate stack: %s, depth > 1000: %d, flags %d\n",
	       hits ? "yes" : "no", depth > 1000, cur.ss_flags);
}

static void on_usr1_nested(int sig)
{
	sigset_t p;

	(void)sig;
	printf("usr1 start\n");
	raise(SIGUSR2);
	if (!hits)
		raise(SIGUSR1); /* blocked in its own handler: runs once this returns */
	sigpending(&p);
	printf("pending inside: usr1 %d usr2 %d, usr2 ran %d\n", sigismember(&p, SIGUSR1),
	       sigismember(&p, SIGUSR2), hits2);
	hits++;
	printf("usr1 end %d\n", hits);
}

static void on_usr2_print(int sig)
{
	(void)sig;
	hits2++;
	printf("usr2 ran\n");
}

static void nested(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_usr1_nested;
	sigemptyset(&sa.sa_mask);
	sigaddset(&sa.sa_mask, SIGUSR2);
	sigaction(SIGUSR1, &sa, NULL);
	set(SIGUSR2, on_usr2_print, 0);
	raise(SIGUSR1);
	printf("after: usr1 ran %d, usr2 ran %d\n", hits, hits2);
}

static void suspend(void)
{
	sigset_t b, empty, now;
	int r;

	set(SIGUSR1, on_sig, 0);
	sigemptyset(&b);
	sigaddset(&b, SIGUSR1);
	sigprocmask(SIG_BLOCK, &b, NULL);
	kill(getpid(), SIGUSR1);
	printf("blocked: ran %d\n", hits);
	sigemptyset(&empty);
	r = sigsuspend(&empty);
	sigprocmask(SIG_BLOCK, NULL, &now);
	printf("sigsuspend %d %s, ran %d, still blocked %d\n", r, strerror(errno), hits,
	       sigismember(&now, SIGUSR1));
}

static void timedwait(void)
{
	sigset_t b;
	siginfo_t si;
	struct timespec ts = { 0, 100 * 1000 * 1000 };
	int r;

	sigemptyset(&b);
	sigaddset(&b, SIGUSR2);
	sigaddset(&b, SIGRTMIN + 1);
	sigprocmask(SIG_BLOCK, &b, NULL);
	raise(SIGUSR2);
	r = sigwaitinfo(&b, &si);
	printf("sigwaitinfo %d code %d pid ok %d\n", r == SIGUSR2, si.si_code,
	       si.si_pid == getpid());
	union sigval v = { .sival_int = 42 };
	sigqueue(getpid(), SIGRTMIN + 1, v);
	sigqueue(getpid(), SIGRTMIN + 1, v);
	r = sigtimedwait(&b, &si, &ts);
	printf("queued rt: %d value %d code %s\n", r == SIGRTMIN + 1, si.si_value.sival_int,
	       si.si_code == SI_QUEUE ? "SI_QUEUE" : "other");
	r = sigtimedwait(&b, &si, &ts);
	printf("second rt instance: %d\n", r == SIGRTMIN + 1);
	r = sigtimedwait(&b, &si, &ts);
	printf("empty: %d %s\n", r, strerror(errno));
}

static void storm(void)
{
	struct itimerval it = { { 0, 1000 }, { 0, 1000 } };
	struct timespec end, now;
	int i;

	sigset_t b;

	set(SIGUSR1, on_sig, 0);
	sigemptyset(&b);
	sigaddset(&b, SIGUSR1);
	sigprocmask(SIG_BLOCK, &b, NULL);
	for (i = 0; i < 20000; i++)
		kill(getpid(), SIGUSR1);
	for (i = 0; i < 20000; i++)
		syscall(SYS_tgkill, getpid(), gettid(), SIGUSR1);
	sigprocmask(SIG_UNBLOCK, &b, NULL);
	printf("40000 blocked kill/tgkill to self coalesce: handler ran %d time(s)\n", hits);
	hits = 0;
	for (i = 0; i < 2000; i++)
		syscall(SYS_tgkill, getpid(), gettid(), SIGUSR1);
	printf("2000 tgkill to self: handler ran %d times\n", hits);
	set(SIGALRM, on_sig2, SA_RESTART);
	setitimer(ITIMER_REAL, &it, NULL);
	clock_gettime(CLOCK_MONOTONIC, &end);
	end.tv_sec += 1;
	do {
		usleep(100);
		clock_gettime(CLOCK_MONOTONIC, &now);
	} while (now.tv_sec < end.tv_sec || (now.tv_sec == end.tv_sec && now.tv_nsec < end.tv_nsec));
	memset(&it, 0, sizeof(it));
	setitimer(ITIMER_REAL, &it, NULL);
	printf("1 kHz itimer for 1 s: handler ran > 100 times: %d\n", hits2 > 100);
}

static volatile sig_atomic_t rt_hits;
static volatile long rt_sum;

static void on_rt(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)uc;
	rt_hits++;
	rt_sum += si->si_value.sival_int;
}

/* A forked sibling floods the parent with signals while the parent keeps
 * making system calls: coalesced SIGUSR1s, queued real-time signals carrying
 * values (all must arrive, in full), then one SIGUSR2. The parent must keep
 * running and still get a later SIGALRM. */
static void sibling_storm(void)
{
	enum { N_USR1 = 5000, N_RT = 2000 };
	struct sigaction sa;
	struct timespec end, now;
	union sigval v;
	pid_t parent = getpid(), child;
	int fd, i, st;
	long writes = 0;

	set(SIGUSR1, on_sig, SA_RESTART);
	set(SIGUSR2, on_sig2, SA_RESTART);
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_rt;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGRTMIN, &sa, NULL);
	fd = open("/dev/null", O_WRONLY);
	child = fork();
	if (child == 0) {
		for (i = 0; i < N_USR1; i++)
			kill(parent, SIGUSR1);
		for (i = 0; i < N_RT; i++) {
			v.sival_int = i;
			while (sigqueue(parent, SIGRTMIN, v) && errno == EAGAIN)
				sched_yield();
		}
		kill(parent, SIGUSR2);
		_exit(7);
	}
	while (!hits2) {
		if (write(fd, "x", 1) == 1)
			writes++;
	}
	while (waitpid(child, &st, 0) < 0 && errno == EINTR)
		;
	/* Queued signals sent before SIGUSR2 are pending or delivered by now;
	 * a system call is a delivery point for the rest. */
	clock_gettime(CLOCK_MONOTONIC, &end);
	end.tv_sec += 10;
	do {
		if (write(fd, "x", 1) == 1)
			writes++;
		clock_gettime(CLOCK_MONOTONIC, &now);
	} while (rt_hits < N_RT && now.tv_sec < end.tv_sec);
	printf("sibling exit %d; SIGUSR1 handled at least once: %d, at most %d times: %d\n",
	       WEXITSTATUS(st), hits >= 1, N_USR1, hits <= N_USR1);
	printf("queued SIGRTMIN: %d of %d, values sum %ld\n", rt_hits, N_RT, rt_sum);
	set(SIGALRM, on_sig2, 0);
	hits2 = 0;
	alarm(1);
	while (!hits2)
		pause();
	printf("SIGALRM after the storm delivered; parent made system calls: %d\n", writes > 0);
}

/* The sibling storm's memory side without its signals: a forked child
 * keeps the parent's memory copy-on-write for a while (then exits, freeing
 * its copies) while the parent rewrites 8 MiB page by page and keeps making
 * system calls. Separates a signal-delivery race from one of copy-on-write
 * and freed pages under a running guest (the triple fault on standard KVM
 * in the nested testbed). */
static void cow_storm(void)
{
	enum { PAGES = 2048, PG = 4096 };
	struct timespec nap = { 1, 500 * 1000 * 1000 };
	unsigned char *buf = mmap(NULL, PAGES * PG, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	int i, st, round = 0, ok = 1;
	pid_t child;

	if (buf == MAP_FAILED) {
		perror("mmap");
		exit(1);
	}
	memset(buf, 1, PAGES * PG);
	child = fork();
	if (child == 0) {
		nanosleep(&nap, NULL);
		for (i = 0; i < PAGES; i++)
			if (buf[(size_t)i * PG] != 1)
				_exit(2);
		_exit(buf[7 * PG]);
	}
	do {
		round++;
		for (i = 0; i < PAGES; i++) {
			buf[(size_t)i * PG] = (unsigned char)round;
			if (i % 64 == 0)
				getppid();
		}
		for (i = 0; i < PAGES; i++)
			ok &= buf[(size_t)i * PG] == (unsigned char)round;
	} while (waitpid(child, &st, WNOHANG) == 0);
	printf("cow-storm: child exit %d, parent pages consistent %d, rounds > 0 %d\n",
	       WIFEXITED(st) ? WEXITSTATUS(st) : -1, ok, round > 0);
}

static void on_timer(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)uc;
	hits++;
	fault_code = si->si_code;
	fault_addr = si->si_value.sival_ptr;
}

static void posix_timer(void)
{
	struct sigaction sa;
	struct sigevent ev;
	struct itimerspec its = { { 0, 0 }, { 0, 100 * 1000 * 1000 } };
	timer_t id;
	static int cookie;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_timer;
	sa.sa_flags = SA_SIGINFO;
	sigaction(SIGRTMIN + 3, &sa, NULL);
	memset(&ev, 0, sizeof(ev));
	ev.sigev_notify = SIGEV_SIGNAL;
	ev.sigev_signo = SIGRTMIN + 3;
	ev.sigev_value.sival_ptr = &cookie;
	if (timer_create(CLOCK_MONOTONIC, &ev, &id)) {
		perror("timer_create");
		return;
	}
	timer_settime(id, 0, &its, NULL);
	while (!hits)
		pause();
	printf("timer signal: code %s, value ok %d\n", fault_code == SI_TIMER ? "SI_TIMER" : "other",
	       fault_addr == &cookie);
	timer_delete(id);
}

static void fpstate_handler(int sig)
{
	(void)sig;
	__asm__ volatile("pcmpeqd %%xmm8, %%xmm8\n\tpxor %%xmm0, %%xmm0" ::: "xmm0", "xmm8");
	hits++;
}

static void fpstate(void)
{
	uint64_t in = 0x1122334455667788ull, out = 0;

	set(SIGUSR1, fpstate_handler, 0);
	__asm__ volatile("movq %2, %%xmm8\n\t"
			 "mov $62, %%eax\n\t"
			 "syscall\n\t"
			 "movq %%xmm8, %0"
			 : "=r"(out)
			 : "D"((long)getpid()), "r"(in), "S"((long)SIGUSR1)
			 : "rax", "rcx", "r11", "xmm8", "memory");
	printf("xmm8 kept across the handler: %d (handler ran %d)\n", out == in, hits);
}

static void resethand(void)
{
	set(SIGUSR1, on_sig, SA_RESETHAND);
	raise(SIGUSR1);
	printf("first SIGUSR1 handled %d\n", hits);
	fflush(stdout);
	raise(SIGUSR1);
	printf("not reached\n");
}

static void badhandler(void)
{
	printf("handler at an unmapped address\n");
	fflush(stdout);
	set(SIGUSR1, (void (*)(int))0x10, 0);
	raise(SIGUSR1);
	printf("not reached\n");
}

static void badstack(void)
{
	stack_t ss = { 0 };
	struct sigaction sa;

	printf("alternate stack not writable\n");
	fflush(stdout);
	ss.ss_sp = mmap(NULL, 65536, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ss.ss_size = 65536;
	sigaltstack(&ss, NULL);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_sig;
	sa.sa_flags = SA_ONSTACK;
	sigaction(SIGUSR1, &sa, NULL);
	raise(SIGUSR1);
	printf("not reached\n");
}

static void ppoll_mask(void)
{
	sigset_t b, empty, now;
	struct timespec ts = { 5, 0 };
	int r;

	set(SIGUSR1, on_sig, 0);
	set(SIGALRM, on_sig2, 0);
	sigemptyset(&b);
	sigaddset(&b, SIGUSR1);
	sigaddset(&b, SIGALRM);
	sigprocmask(SIG_BLOCK, &b, NULL);
	sigemptyset(&empty);
	raise(SIGUSR1);
	r = ppoll(NULL, 0, &ts, &empty);
	printf("ppoll with a pending signal: %d %s, usr1 ran %d\n", r, strerror(errno), hits);
	alarm(1);
	r = ppoll(NULL, 0, &ts, &empty);
	sigprocmask(SIG_BLOCK, NULL, &now);
	printf("ppoll interrupted by SIGALRM: %d %s, alarm ran %d, mask back %d\n", r, strerror(errno),
	       hits2, sigismember(&now, SIGALRM));
	alarm(1);
	r = pselect(0, NULL, NULL, NULL, &ts, &empty);
	sigprocmask(SIG_BLOCK, NULL, &now);
	printf("pselect interrupted by SIGALRM: %d %s, alarm ran %d, mask back %d\n", r, strerror(errno),
	       hits2, sigismember(&now, SIGALRM));
	raise(SIGUSR1);
	ts.tv_sec = 0;
	ts.tv_nsec = 100 * 1000 * 1000;
	r = pselect(0, NULL, NULL, NULL, &ts, NULL);
	printf("pselect without a mask keeps SIGUSR1 blocked: %d, usr1 ran %d\n", r, hits);
}

/* rt_sigreturn on a stack of garbage, or with an unmapped stack: SIGSEGV. */
static void badsigreturn(int unmapped)
{
	static unsigned char junk[4096] __attribute__((aligned(16)));

	printf("rt_sigreturn with a %s frame\n", unmapped ? "unmapped" : "garbage");
	fflush(stdout);
	memset(junk, 0xa5, sizeof(junk));
	if (unmapped)
		__asm__ volatile("mov $0x10, %%rsp\n\tmov $15, %%eax\n\tsyscall" ::: "memory");
	else
		__asm__ volatile("mov %0, %%rsp\n\tmov $15, %%eax\n\tsyscall" ::"r"(junk + 64) : "memory");
	printf("not reached\n");
}

static volatile pid_t handler_tid;
static int worker_pipe[2];

static void on_usr_tid(int sig)
{
	(void)sig;
	handler_tid = gettid();
	hits++;
}

/* Waits on the pipe with only `sig` unblocked (atomically, so the outcome
 * does not depend on when the signal comes). */
static void worker_wait(int sig, const char *what)
{
	struct pollfd pfd = { worker_pipe[0], POLLIN, 0 };
	sigset_t m;
	int n;

	sigfillset(&m);
	sigdelset(&m, sig);
	n = ppoll(&pfd, 1, NULL, &m);
	printf("worker: ppoll %d (%s), %s: %d\n", n, n < 0 ? strerror(errno) : "ok", what,
	       handler_tid == gettid());
}

static void *worker(void *arg)
{
	*(volatile pid_t *)arg = gettid();
	worker_wait(SIGUSR1, "pthread_kill ran the handler on this thread");
	handler_tid = 0;
	worker_wait(SIGUSR2, "kill() went to the thread that does not block it");
	return NULL;
}

static void threads(void)
{
	pthread_t th;
	volatile pid_t wtid = 0;
	sigset_t b;

	if (pipe(worker_pipe))
		exit(98);
	set(SIGUSR1, on_usr_tid, 0);
	set(SIGUSR2, on_usr_tid, 0);
	sigemptyset(&b);
	sigaddset(&b, SIGUSR1);
	sigaddset(&b, SIGUSR2);
	pthread_sigmask(SIG_BLOCK, &b, NULL); /* the worker inherits this mask */
	pthread_create(&th, NULL, worker, (void *)&wtid);
	while (!wtid)
		sched_yield();
	pthread_kill(th, SIGUSR1);
	while (hits < 1)
		sched_yield();
	kill(getpid(), SIGUSR2);
	pthread_join(th, NULL);
	printf("main: handler ran %d times\n", hits);
}

/* Run through `sh -c 'trap "" USR1; exec signals inherit'`: SIG_IGN survives
 * execve. */
static void inherit(void)
{
	struct sigaction old;

	sigaction(SIGUSR1, NULL, &old);
	printf("SIGUSR1 ignored at start: %d\n", old.sa_handler == SIG_IGN);
	raise(SIGUSR1);
	printf("survived SIGUSR1\n");
}

/*
 * Async-signal-safe on purpose: SIGTERM may arrive before main's printf
 * has returned (delivery happens at the exit of the write), and stdio
 * re-entered from a handler would flush "ready" a second time.
 */
static void on_term(int sig)
{
	static const char msg[] = "got SIGTERM, exiting cleanly\n";

	(void)sig;
	if (write(1, msg, sizeof(msg) - 1) < 0)
		_exit(1);
	_exit(0);
}

static void ignore_term(void)
{
	signal(SIGTERM, SIG_IGN);
	printf("ready\n");
	fflush(stdout);
	for (;;)
		;
}

static void term(void)
{
	set(SIGTERM, on_term, 0);
	printf("ready\n");
	fflush(stdout);
	for (;;)
		pause();
}

int main(int argc, char **argv)
{
	const char *m = argc > 1 ? argv[1] : "";

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(m, "alarm-spin"))
		alarm_spin();
	else if (!strcmp(m, "alarm-read"))
		alarm_read(0);
	else if (!strcmp(m, "alarm-read-restart"))
		alarm_read(1);
	else if (!strcmp(m, "sigpipe"))
		sigpipe_handled(0);
	else if (!strcmp(m, "sigpipe-ignored"))
		sigpipe_handled(1);
	else if (!strcmp(m, "sigchld"))
		sigchld();
	else if (!strcmp(m, "faults"))
		segv_longjmp();
	else if (!strcmp(m, "altstack"))
		altstack();
	else if (!strcmp(m, "nested"))
		nested();
	else if (!strcmp(m, "sigsuspend"))
		suspend();
	else if (!strcmp(m, "sigtimedwait"))
		timedwait();
	else if (!strcmp(m, "storm"))
		storm();
	else if (!strcmp(m, "sibling-storm"))
		sibling_storm();
	else if (!strcmp(m, "cow-storm"))
		cow_storm();
	else if (!strcmp(m, "fpstate"))
		fpstate();
	else if (!strcmp(m, "resethand"))
		resethand();
	else if (!strcmp(m, "badhandler"))
		badhandler();
	else if (!strcmp(m, "badstack"))
		badstack();
	else if (!strcmp(m, "badsigreturn"))
		badsigreturn(0);
	else if (!strcmp(m, "sigreturn-unmapped"))
		badsigreturn(1);
	else if (!strcmp(m, "inherit"))
		inherit();
	else if (!strcmp(m, "threads"))
		threads();
	else if (!strcmp(m, "timer"))
		posix_timer();
	else if (!strcmp(m, "ppoll"))
		ppoll_mask();
	else if (!strcmp(m, "ignore-term"))
		ignore_term();
	else if (!strcmp(m, "term"))
		term();
	else {
		fprintf(stderr, "unknown scenario %s\n", m);
		return 2;
	}
	return 0;
}
