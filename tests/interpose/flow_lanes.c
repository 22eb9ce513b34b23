/* tests/interpose/flow_lanes.c: two ranks over Open MPI's TCP component: large and small messages, tags, wildcards and status counts exact, and the number of TCP connections that carried the bulk (shunt's SHUNT_FLOW=hashed:K makes it K).
 *
 * Run by tests/interpose/meson.build with mpirun -n 2 --mca btl tcp,self --mca btl_tcp_if_include lo, once plain
 * (--expect 1) and once with libshunt.so preloaded, SHUNT_FLOW=hashed:4 and shunt's allreduce schedule (--expect 4).
 * Each rank sends the other 120 MiB in messages of 1 byte to 8 MiB on 3 tags, every other round on a duplicate
 * of MPI_COMM_WORLD, received partly with MPI_ANY_SOURCE / MPI_ANY_TAG; every byte, the order per tag and every
 * status count are checked; then a 32 MiB allreduce, checked against the sum. Each rank looks at its own TCP
 * sockets (/proc/self/fd, TCP_INFO) around each part and counts those that moved at least half an even share
 * (1/2K) of its bytes: ob1 cuts a large message across every TCP module to the peer, one connection each, and a
 * duplicated communicator alone adds none. */
#define _GNU_SOURCE 1 /* S_ISSOCK */
#include <mpi.h>

#include <dirent.h>
#include <linux/tcp.h> /* the kernel's tcp_info: glibc's lacks the byte counts */
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>

enum { ROUNDS = 5, TAGS = 3 };
static const int sizes[] = {1, 100, 65536, 300000, 8 << 20}; /* eager, rendezvous, pipelined */
#define NSIZES ((int)(sizeof sizes / sizeof sizes[0]))

static unsigned char byte_at(int from, int round, int tag, long i) {
    return (unsigned char)(from * 131 + round * 31 + tag * 7 + i * 13 + (i >> 9));
}

/* Bytes each TCP socket of this process has moved (acknowledged sent plus received), by descriptor. */
enum { MAX_FD = 4096 };
static void socket_bytes(uint64_t moved[MAX_FD]) {
    memset(moved, 0, sizeof(uint64_t) * MAX_FD);
    DIR* d = opendir("/proc/self/fd");
    if (d == NULL) return;
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        const int fd = atoi(e->d_name);
        struct stat st;
        if (e->d_name[0] == '.' || fd < 0 || fd >= MAX_FD || fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
        struct sockaddr_storage a;
        socklen_t alen = sizeof a;
        if (getsockname(fd, (struct sockaddr*)&a, &alen) != 0 || (a.ss_family != AF_INET && a.ss_family != AF_INET6))
            continue;
        struct tcp_info ti;
        socklen_t tlen = sizeof ti;
        memset(&ti, 0, sizeof ti);
        if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &tlen) != 0) continue;
        moved[fd] = ti.tcpi_bytes_acked + ti.tcpi_bytes_received;
    }
    closedir(d);
}

/* Sockets that moved at least `bytes` between two snapshots. */
static int busy_between(const uint64_t* before, const uint64_t* after, uint64_t bytes) {
    int n = 0;
    for (int fd = 0; fd < MAX_FD; ++fd)
        if (after[fd] >= before[fd] + bytes) ++n;
    return n;
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 0, expect = 0, failures = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int i = 1; i + 1 < argc; ++i)
        if (strcmp(argv[i], "--expect") == 0) expect = atoi(argv[i + 1]);
    if (size != 2) {
        if (rank == 0) fprintf(stderr, "flow_lanes: needs 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const int peer = 1 - rank;
    /* Half the messages go on a duplicate of MPI_COMM_WORLD: the same connections carry them. */
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    static uint64_t at_start[MAX_FD], after_p2p[MAX_FD], after_coll[MAX_FD];
    MPI_Barrier(MPI_COMM_WORLD);
    socket_bytes(at_start);
    unsigned char* out = malloc((size_t)sizes[NSIZES - 1] + 16);
    unsigned char* in = malloc((size_t)sizes[NSIZES - 1] + 16);
    uint64_t bulk = 0;
    for (int round = 0; round < ROUNDS; ++round) {
        for (int s = 0; s < NSIZES; ++s) {
            /* Every tag's message posted before any is received: the receiver takes them by tag in
             * reverse order, then (last round) with wildcards, which must still see each tag's
             * messages in the order sent. */
            MPI_Request reqs[TAGS];
            unsigned char* bufs[TAGS];
            for (int t = 0; t < TAGS; ++t) {
                bufs[t] = malloc((size_t)sizes[s]);
                for (long i = 0; i < sizes[s]; ++i) bufs[t][i] = byte_at(rank, round, t, i);
                MPI_Isend(bufs[t], sizes[s], MPI_BYTE, peer, t, round % 2 ? dup : MPI_COMM_WORLD, &reqs[t]);
            }
            for (int k = 0; k < TAGS; ++k) {
                const int wild = round == ROUNDS - 1;
                const int want_tag = TAGS - 1 - k;
                MPI_Status st;
                memset(in, 0, (size_t)sizes[s] + 16);
                MPI_Recv(in, sizes[s] + 16, MPI_BYTE, wild ? MPI_ANY_SOURCE : peer, wild ? MPI_ANY_TAG : want_tag,
                         round % 2 ? dup : MPI_COMM_WORLD, &st);
                int count = -1;
                MPI_Get_count(&st, MPI_BYTE, &count);
                const int tag = st.MPI_TAG;
                if (st.MPI_SOURCE != peer || count != sizes[s] || tag < 0 || tag >= TAGS ||
                    (!wild && tag != want_tag)) {
                    fprintf(stderr, "rank %d: round %d size %d: status source %d tag %d count %d\n", rank, round,
                            sizes[s], st.MPI_SOURCE, tag, count);
                    ++failures;
                    continue;
                }
                for (long i = 0; i < sizes[s]; ++i)
                    if (in[i] != byte_at(peer, round, tag, i)) {
                        fprintf(stderr, "rank %d: round %d size %d tag %d: byte %ld differs\n", rank, round, sizes[s],
                                tag, i);
                        ++failures;
                        break;
                    }
                if (in[sizes[s]] != 0) ++failures; /* nothing written past the message */
            }
            MPI_Waitall(TAGS, reqs, MPI_STATUSES_IGNORE);
            for (int t = 0; t < TAGS; ++t) free(bufs[t]);
            if (sizes[s] >= (8 << 20)) bulk += (uint64_t)TAGS * (uint64_t)sizes[s];
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    socket_bytes(after_p2p);
    /* An allreduce of 32 MiB of doubles (shunt's schedule under SHUNT_COLL=shunt with one rank per
     * virtual node), checked against the sum computed here. */
    const int n = 4 << 20;
    double* x = malloc(sizeof(double) * (size_t)n);
    double* y = malloc(sizeof(double) * (size_t)n);
    for (int i = 0; i < n; ++i) x[i] = (double)(i % 1000) * (rank + 1);
    MPI_Allreduce(x, y, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < n; ++i)
        if (y[i] != (double)(i % 1000) * 3) {
            fprintf(stderr, "rank %d: allreduce element %d is %g, not %g\n", rank, i, y[i], (double)(i % 1000) * 3);
            ++failures;
            break;
        }
    MPI_Barrier(MPI_COMM_WORLD);
    socket_bytes(after_coll);
    /* Each connection of K carries about 1/K; count those with at least half of that. */
    const uint64_t k = (uint64_t)(expect > 0 ? expect : 1);
    const int busy = busy_between(at_start, after_p2p, bulk / (2 * k));
    const int busy_coll = busy_between(after_p2p, after_coll, (uint64_t)n * sizeof(double) / 2 / (2 * k));
    if (expect > 0 && (busy != expect || busy_coll != expect)) {
        fprintf(
            stderr,
            "rank %d: %d TCP connections carried half an even share of the %llu point-to-point bulk bytes and %d of "
            "the allreduce's, expected %d\n",
            rank, busy, (unsigned long long)bulk, busy_coll, expect);
        ++failures;
    }
    free(x);
    free(y);
    MPI_Comm_free(&dup);
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("flow_lanes: %s (%d connection%s carried the point-to-point bulk, %d the allreduce)\n",
               all ? "FAILED" : "ok", busy, busy == 1 ? "" : "s", busy_coll);
    free(out);
    free(in);
    MPI_Finalize();
    return all ? 1 : 0;
}
