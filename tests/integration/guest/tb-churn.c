// SPDX-License-Identifier: Apache-2.0
//
// tb-churn: a memory-hungry guest program for balloon tests.
//
//   tb-churn MIB
//       Forever: map MIB MiB of anonymous memory, write every page, check
//       a pattern, unmap. Prints one line when the first round is done and
//       one summary line on SIGTERM ("rounds=N bad=M"); exits 1 if a page
//       ever read back wrong, 0 otherwise.

#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
    (void)sig;
    stop = 1;
}

int main(int argc, char **argv)
{
    if (argc != 2 || atol(argv[1]) <= 0) {
        fprintf(stderr, "usage: tb-churn MIB\n");
        return 2;
    }
    size_t len = (size_t)atol(argv[1]) << 20;
    long page = sysconf(_SC_PAGESIZE);
    unsigned long rounds = 0, bad = 0;

    signal(SIGTERM, on_term);
    signal(SIGINT, on_term);
    while (!stop) {
        unsigned char *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            usleep(10000);
            continue;
        }
        for (size_t off = 0; off < len && !stop; off += page)
            *(uint64_t *)(p + off) = off ^ rounds;
        for (size_t off = 0; off < len && !stop; off += page)
            if (*(uint64_t *)(p + off) != (off ^ rounds))
                bad++;
        munmap(p, len);
        if (rounds++ == 0) {
            printf("tb-churn: first round of %s MiB done\n", argv[1]);
            fflush(stdout);
        }
    }
    printf("tb-churn: rounds=%lu bad=%lu\n", rounds, bad);
    return bad ? 1 : 0;
}
