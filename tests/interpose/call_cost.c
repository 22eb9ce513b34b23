/* tests/interpose/call_cost.c: repeated small calls of every interposed family, each family's steady state in a callgrind dump of its own, for run_call_cost.py to count shunt's instructions per call.
 *
 * A plain MPI program (it knows nothing of shunt) for 2 ranks. Each family runs `warm` untimed
 * calls, then callgrind's counters are zeroed, `reps` calls run, and the counters are dumped
 * under the family's name (CALLGRIND_DUMP_STATS_AT): outside valgrind these requests do nothing.
 * The runner reads the dumps and adds up what libshunt.so executes per call, the calls it makes
 * included, except the one call of the library that each intercepted call is passed on to.
 * Usage: call_cost [--list] [--reps N] [--warm N] [FAMILY...] (default: every family). */
#include <valgrind/callgrind.h>

#include "common.h"

static int rank = 0, size = 1, peer = 0;
enum { window = 64 };
static MPI_Request reqs[window];
static MPI_Status stats[window]; /* not MPI_STATUSES_IGNORE: GCC 12 warns about MPICH's (MPI_Status *)1 */
static double dsend[64], drecv[64];
static unsigned char bsend[4096], brecv[4096];
static MPI_Datatype vec16, vec256; /* vectors of 2 and 32 blocks of 8 bytes, 16 bytes apart */
static MPI_Comm fresh; /* a duplicate of MPI_COMM_WORLD that no blocking collective uses */

/* One family: its name, what each call is passed on as (the runner's --forward list, the
 * PMPI_ names without the prefix), and its loop of n calls. */
typedef struct {
    const char* name;
    const char* forwards;
    void (*run)(int n);
} family;

static void ping_pong(int n, MPI_Datatype type, int count, void* buf) {
    for (int i = 0; i < n; ++i) {
        if (rank == 0) {
            SHUNT_TEST_MPI(MPI_Send(buf, count, type, peer, 1, MPI_COMM_WORLD));
            SHUNT_TEST_MPI(MPI_Recv(buf, count, type, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        } else {
            SHUNT_TEST_MPI(MPI_Recv(buf, count, type, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            SHUNT_TEST_MPI(MPI_Send(buf, count, type, peer, 1, MPI_COMM_WORLD));
        }
    }
}

/* A window of nonblocking sends (rank 0) or receives (rank 1), then MPI_Waitall; n windows. */
static void window_of(int n, MPI_Datatype type, int count, int extent) {
    for (int i = 0; i < n; ++i) {
        for (int w = 0; w < window; ++w) {
            void* at = bsend + (size_t)w % 8 * (size_t)extent;
            if (rank == 0)
                SHUNT_TEST_MPI(MPI_Isend(at, count, type, peer, 2, MPI_COMM_WORLD, &reqs[w]));
            else
                SHUNT_TEST_MPI(
                    MPI_Irecv(brecv + (size_t)w % 8 * (size_t)extent, count, type, peer, 2, MPI_COMM_WORLD, &reqs[w]));
        }
        SHUNT_TEST_MPI(MPI_Waitall(window, reqs, stats));
        if (rank == 0)
            SHUNT_TEST_MPI(MPI_Recv(NULL, 0, MPI_BYTE, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        else
            SHUNT_TEST_MPI(MPI_Send(NULL, 0, MPI_BYTE, peer, 3, MPI_COMM_WORLD));
    }
}

static void run_send_recv(int n) { ping_pong(n, MPI_BYTE, 8, bsend); }
static void run_send_recv_vector(int n) { ping_pong(n, vec16, 1, bsend); }
static void run_isend_window(int n) { window_of(n, MPI_BYTE, 8, 8); }
static void run_isend_window_vector(int n) { window_of(n, vec256, 1, 512); }

static void run_isend_wait(int n) {
    for (int i = 0; i < n; ++i) {
        MPI_Request r;
        if (rank == 0) {
            SHUNT_TEST_MPI(MPI_Isend(bsend, 8, MPI_BYTE, peer, 4, MPI_COMM_WORLD, &r));
            SHUNT_TEST_MPI(MPI_Wait(&r, MPI_STATUS_IGNORE));
            SHUNT_TEST_MPI(MPI_Irecv(brecv, 8, MPI_BYTE, peer, 4, MPI_COMM_WORLD, &r));
            int flag = 0;
            while (!flag) SHUNT_TEST_MPI(MPI_Test(&r, &flag, MPI_STATUS_IGNORE));
        } else {
            SHUNT_TEST_MPI(MPI_Irecv(brecv, 8, MPI_BYTE, peer, 4, MPI_COMM_WORLD, &r));
            int flag = 0;
            while (!flag) SHUNT_TEST_MPI(MPI_Test(&r, &flag, MPI_STATUS_IGNORE));
            SHUNT_TEST_MPI(MPI_Isend(bsend, 8, MPI_BYTE, peer, 4, MPI_COMM_WORLD, &r));
            SHUNT_TEST_MPI(MPI_Wait(&r, MPI_STATUS_IGNORE));
        }
    }
}

static void run_sendrecv(int n) {
    for (int i = 0; i < n; ++i)
        SHUNT_TEST_MPI(
            MPI_Sendrecv(bsend, 8, MPI_BYTE, peer, 5, brecv, 8, MPI_BYTE, peer, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
}

static void run_persistent(int n) {
    MPI_Request r[2];
    SHUNT_TEST_MPI(MPI_Send_init(bsend, 8, MPI_BYTE, peer, 6, MPI_COMM_WORLD, &r[0]));
    SHUNT_TEST_MPI(MPI_Recv_init(brecv, 8, MPI_BYTE, peer, 6, MPI_COMM_WORLD, &r[1]));
    for (int i = 0; i < n; ++i) {
        SHUNT_TEST_MPI(MPI_Startall(2, r));
        SHUNT_TEST_MPI(MPI_Waitall(2, r, stats));
    }
    SHUNT_TEST_MPI(PMPI_Request_free(&r[0]));
    SHUNT_TEST_MPI(PMPI_Request_free(&r[1]));
}

static void run_allreduce(int n) {
    for (int i = 0; i < n; ++i) SHUNT_TEST_MPI(MPI_Allreduce(dsend, drecv, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
}

static void run_allreduce_int(int n) {
    for (int i = 0; i < n; ++i) SHUNT_TEST_MPI(MPI_Allreduce(bsend, brecv, 4, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
}

static void run_reduce(int n) {
    for (int i = 0; i < n; ++i) SHUNT_TEST_MPI(MPI_Reduce(dsend, drecv, 2, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD));
}

static void run_bcast(int n) {
    for (int i = 0; i < n; ++i) SHUNT_TEST_MPI(MPI_Bcast(bsend, 16, MPI_BYTE, 0, MPI_COMM_WORLD));
}

static void run_allgather(int n) {
    for (int i = 0; i < n; ++i) SHUNT_TEST_MPI(MPI_Allgather(bsend, 8, MPI_BYTE, brecv, 8, MPI_BYTE, MPI_COMM_WORLD));
}

static void run_alltoall(int n) {
    for (int i = 0; i < n; ++i) SHUNT_TEST_MPI(MPI_Alltoall(bsend, 1, MPI_BYTE, brecv, 1, MPI_BYTE, MPI_COMM_WORLD));
}

static void run_reduce_scatter_block(int n) {
    for (int i = 0; i < n; ++i)
        SHUNT_TEST_MPI(MPI_Reduce_scatter_block(dsend, drecv, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
}

static void run_alltoallw(int n) {
    int counts[2] = {8, 8}, displs[2] = {0, 8};
    MPI_Datatype types[2] = {MPI_BYTE, MPI_BYTE};
    for (int i = 0; i < n; ++i)
        SHUNT_TEST_MPI(MPI_Alltoallw(bsend, counts, displs, types, brecv, counts, displs, types, MPI_COMM_WORLD));
}

static void run_iallreduce(int n) {
    for (int i = 0; i < n; ++i) {
        MPI_Request r;
        SHUNT_TEST_MPI(MPI_Iallreduce(dsend, drecv, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &r));
        SHUNT_TEST_MPI(MPI_Wait(&r, MPI_STATUS_IGNORE));
    }
}

/* A program whose collectives on a communicator are all nonblocking (overlapped gradient
 * reductions): shunt never sets the communicator up for its own schedules, and the calls must
 * still pass at the cost of a kept one. */
static void run_iallreduce_fresh(int n) {
    for (int i = 0; i < n; ++i) {
        MPI_Request r;
        SHUNT_TEST_MPI(MPI_Iallreduce(dsend, drecv, 2, MPI_DOUBLE, MPI_SUM, fresh, &r));
        SHUNT_TEST_MPI(MPI_Wait(&r, MPI_STATUS_IGNORE));
    }
}

static void run_ialltoall(int n) {
    for (int i = 0; i < n; ++i) {
        MPI_Request r;
        SHUNT_TEST_MPI(MPI_Ialltoall(bsend, 1, MPI_BYTE, brecv, 1, MPI_BYTE, MPI_COMM_WORLD, &r));
        SHUNT_TEST_MPI(MPI_Wait(&r, MPI_STATUS_IGNORE));
    }
}

static void run_pack_size(int n) {
    int s = 0;
    for (int i = 0; i < n; ++i) SHUNT_TEST_MPI(MPI_Pack_size(i % 7 + 1, vec16, MPI_COMM_WORLD, &s));
}

static const family families[] = {
    {"send_recv", "Send,Recv", run_send_recv},
    {"send_recv_vector", "Send,Recv", run_send_recv_vector},
    {"isend_window", "Isend,Irecv,Waitall,Send,Recv", run_isend_window},
    {"isend_window_vector", "Isend,Irecv,Waitall,Send,Recv", run_isend_window_vector},
    {"isend_wait", "Isend,Irecv,Wait,Test", run_isend_wait},
    {"sendrecv", "Sendrecv", run_sendrecv},
    {"persistent", "Startall,Waitall,Send_init,Recv_init", run_persistent},
    {"allreduce", "Allreduce", run_allreduce},
    {"allreduce_int", "Allreduce", run_allreduce_int},
    {"reduce", "Reduce", run_reduce},
    {"bcast", "Bcast", run_bcast},
    {"allgather", "Allgather", run_allgather},
    {"alltoall", "Alltoall", run_alltoall},
    {"reduce_scatter_block", "Reduce_scatter_block", run_reduce_scatter_block},
    {"alltoallw", "Alltoallw", run_alltoallw},
    {"iallreduce", "Iallreduce,Wait", run_iallreduce},
    {"iallreduce_fresh", "Iallreduce,Wait", run_iallreduce_fresh},
    {"ialltoall", "Ialltoall,Wait", run_ialltoall},
    {"pack_size", "Pack_size", run_pack_size},
};
enum { family_count = sizeof families / sizeof families[0] };

static int wanted(const family* f, int argc, char** argv, int first) {
    if (first >= argc) return 1;
    for (int i = first; i < argc; ++i)
        if (strcmp(argv[i], f->name) == 0) return 1;
    return 0;
}

int main(int argc, char** argv) {
    int reps = 200, warm = 100, first = 1;
    for (; first < argc && strncmp(argv[first], "--", 2) == 0; ++first) {
        if (strcmp(argv[first], "--list") == 0) {
            for (int i = 0; i < family_count; ++i) printf("%s %s\n", families[i].name, families[i].forwards);
            return 0;
        }
        if (first + 1 < argc && strcmp(argv[first], "--reps") == 0)
            reps = atoi(argv[++first]);
        else if (first + 1 < argc && strcmp(argv[first], "--warm") == 0)
            warm = atoi(argv[++first]);
        else {
            fprintf(stderr, "call_cost: unknown option '%s'\n", argv[first]);
            return 2;
        }
    }
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    SHUNT_TEST_REQUIRE(size == 2, "run with 2 ranks, not %d", size);
    peer = 1 - rank;
    SHUNT_TEST_MPI(MPI_Type_vector(2, 1, 2, MPI_DOUBLE, &vec16));
    SHUNT_TEST_MPI(MPI_Type_commit(&vec16));
    SHUNT_TEST_MPI(MPI_Type_vector(32, 1, 2, MPI_DOUBLE, &vec256));
    SHUNT_TEST_MPI(MPI_Type_commit(&vec256));
    SHUNT_TEST_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &fresh));
    for (int i = 0; i < 64; ++i) dsend[i] = i + rank;
    test_fill(bsend, sizeof bsend, (uint32_t)rank + 1);
    for (int i = 0; i < family_count; ++i) {
        const family* f = &families[i];
        if (!wanted(f, argc, argv, first)) continue;
        f->run(warm);
        SHUNT_TEST_MPI(MPI_Barrier(MPI_COMM_WORLD));
        CALLGRIND_ZERO_STATS;
        f->run(reps);
        CALLGRIND_DUMP_STATS_AT(f->name);
        SHUNT_TEST_MPI(MPI_Barrier(MPI_COMM_WORLD));
    }
    MPI_Type_free(&vec16);
    MPI_Type_free(&vec256);
    MPI_Comm_free(&fresh);
    if (rank == 0) printf("call_cost: %d calls of each family after %d\n", reps, warm);
    MPI_Finalize();
    return 0;
}
