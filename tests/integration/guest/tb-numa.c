// SPDX-License-Identifier: Apache-2.0
//
// tb-numa: tiny NUMA helper for the testbed guests (built with gcc -static).
//
//   tb-numa movetest [PAGES] [NODE]
//       Fill PAGES pages (default 256) with a pattern, move them with
//       move_pages(2) to NODE (default 1), verify placement with a status
//       query, verify contents, move them back to node 0, verify again.
//       Prints one JSON line; exit status 0 when every step succeeded.
//
//   tb-numa hold NODE MIB
//       Allocate MIB MiB bound (mbind MPOL_BIND) to NODE, touch it, report
//       how many pages landed on NODE (one JSON line, flushed), then sleep
//       until killed. Used to make sure a guest has memory on a node while
//       the host side inspects the VMM's numa_maps.
//
// Raw syscalls are used so that no libnuma is needed in the guest image.

#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define TB_MPOL_BIND 2
#define TB_MPOL_MF_MOVE (1 << 1)

static long page_size;

static long sys_move_pages(unsigned long count, void **pages, const int *nodes,
                           int *status, int flags)
{
    return syscall(SYS_move_pages, 0, count, pages, nodes, status, flags);
}

static long sys_mbind(void *addr, unsigned long len, int mode,
                      const unsigned long *mask, unsigned long maxnode,
                      unsigned int flags)
{
    return syscall(SYS_mbind, addr, len, mode, mask, maxnode, flags);
}

static uint64_t pattern(size_t page, size_t word)
{
    return 0x5442504154544e52ULL ^ ((uint64_t)page << 20) ^ (uint64_t)word;
}

static void fill(unsigned char *buf, size_t npages)
{
    size_t words = (size_t)page_size / sizeof(uint64_t);
    for (size_t p = 0; p < npages; p++) {
        uint64_t *w = (uint64_t *)(buf + p * (size_t)page_size);
        for (size_t i = 0; i < words; i++)
            w[i] = pattern(p, i);
    }
}

static size_t count_bad(const unsigned char *buf, size_t npages)
{
    size_t words = (size_t)page_size / sizeof(uint64_t);
    size_t bad = 0;
    for (size_t p = 0; p < npages; p++) {
        const uint64_t *w = (const uint64_t *)(buf + p * (size_t)page_size);
        for (size_t i = 0; i < words; i++)
            if (w[i] != pattern(p, i))
                bad++;
    }
    return bad;
}

// Query the node of every page; returns how many are on `node`, -1 on error.
static long count_on(void **pages, int *status, size_t npages, int node)
{
    if (sys_move_pages(npages, pages, NULL, status, 0) < 0)
        return -1;
    long n = 0;
    for (size_t i = 0; i < npages; i++)
        if (status[i] == node)
            n++;
    return n;
}

// Move every page to `node`; returns number of pages whose status says
// `node` afterwards, -1 if the syscall failed.
static long move_to(void **pages, int *nodes, int *status, size_t npages,
                    int node, long *syscall_ret, int *err)
{
    for (size_t i = 0; i < npages; i++)
        nodes[i] = node;
    *syscall_ret = sys_move_pages(npages, pages, nodes, status, TB_MPOL_MF_MOVE);
    *err = *syscall_ret < 0 ? errno : 0;
    if (*syscall_ret < 0)
        return -1;
    long n = 0;
    for (size_t i = 0; i < npages; i++)
        if (status[i] == node)
            n++;
    return n;
}

static int movetest(size_t npages, int target)
{
    size_t len = npages * (size_t)page_size;
    unsigned char *buf = mmap(NULL, len, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) {
        printf("{\"tool\":\"movetest\",\"ok\":false,\"error\":\"mmap: %s\"}\n",
               strerror(errno));
        return 1;
    }
    void **pages = calloc(npages, sizeof(*pages));
    int *nodes = calloc(npages, sizeof(*nodes));
    int *status = calloc(npages, sizeof(*status));
    if (!pages || !nodes || !status)
        return 1;
    for (size_t i = 0; i < npages; i++)
        pages[i] = buf + i * (size_t)page_size;

    fill(buf, npages);
    long init_on0 = count_on(pages, status, npages, 0);
    int init_node = status[0];

    long ret1, ret2;
    int err1, err2;
    long moved = move_to(pages, nodes, status, npages, target, &ret1, &err1);
    long query_on_target = count_on(pages, status, npages, target);
    size_t bad1 = count_bad(buf, npages);

    long back = move_to(pages, nodes, status, npages, 0, &ret2, &err2);
    long query_on0 = count_on(pages, status, npages, 0);
    size_t bad2 = count_bad(buf, npages);

    int ok = moved == (long)npages && query_on_target == (long)npages &&
             bad1 == 0 && back == (long)npages && query_on0 == (long)npages &&
             bad2 == 0;
    printf("{\"tool\":\"movetest\",\"pages\":%zu,\"page_size\":%ld,"
           "\"target\":%d,\"initial_node\":%d,\"initial_on_node0\":%ld,"
           "\"move_ret\":%ld,\"move_errno\":%d,\"moved_status_on_target\":%ld,"
           "\"query_on_target\":%ld,\"bad_words_after_move\":%zu,"
           "\"back_ret\":%ld,\"back_errno\":%d,\"back_status_on_node0\":%ld,"
           "\"query_on_node0\":%ld,\"bad_words_after_back\":%zu,\"ok\":%s}\n",
           npages, page_size, target, init_node, init_on0, ret1, err1, moved,
           query_on_target, bad1, ret2, err2, back, query_on0, bad2,
           ok ? "true" : "false");
    fflush(stdout);
    return ok ? 0 : 1;
}

static int hold(int node, size_t mib)
{
    size_t len = mib << 20;
    size_t npages = len / (size_t)page_size;
    unsigned char *buf = mmap(NULL, len, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) {
        printf("{\"tool\":\"hold\",\"ok\":false,\"error\":\"mmap: %s\"}\n",
               strerror(errno));
        return 1;
    }
    unsigned long mask[4] = {0};
    if (node < 0 || node >= (int)(8 * sizeof(mask))) {
        printf("{\"tool\":\"hold\",\"ok\":false,\"error\":\"bad node\"}\n");
        return 1;
    }
    mask[node / (8 * sizeof(long))] = 1UL << (node % (8 * sizeof(long)));
    if (sys_mbind(buf, len, TB_MPOL_BIND, mask, 8 * sizeof(mask) + 1, 0) < 0) {
        printf("{\"tool\":\"hold\",\"ok\":false,\"error\":\"mbind: %s\"}\n",
               strerror(errno));
        return 1;
    }
    fill(buf, npages);
    void **pages = calloc(npages, sizeof(*pages));
    int *status = calloc(npages, sizeof(*status));
    if (!pages || !status)
        return 1;
    for (size_t i = 0; i < npages; i++)
        pages[i] = buf + i * (size_t)page_size;
    long on = count_on(pages, status, npages, node);
    int ok = on == (long)npages;
    printf("{\"tool\":\"hold\",\"node\":%d,\"mib\":%zu,\"pages\":%zu,"
           "\"pages_on_node\":%ld,\"ok\":%s}\n",
           node, mib, npages, on, ok ? "true" : "false");
    fflush(stdout);
    if (!ok)
        return 1;
    for (;;)
        pause();
}

static void usage(void)
{
    fprintf(stderr, "usage: tb-numa movetest [PAGES] [NODE]\n"
                    "       tb-numa hold NODE MIB\n");
}

int main(int argc, char **argv)
{
    page_size = sysconf(_SC_PAGESIZE);
    if (argc >= 2 && strcmp(argv[1], "movetest") == 0) {
        size_t npages = argc >= 3 ? strtoul(argv[2], NULL, 0) : 256;
        int node = argc >= 4 ? atoi(argv[3]) : 1;
        if (npages == 0) {
            usage();
            return 2;
        }
        return movetest(npages, node);
    }
    if (argc == 4 && strcmp(argv[1], "hold") == 0)
        return hold(atoi(argv[2]), strtoul(argv[3], NULL, 0));
    usage();
    return 2;
}
