/* tests/interpose/coll_threads.c: a stress test of MPI_THREAD_MULTIPLE: collectives, nonblocking collectives and point-to-point calls from several threads at once, each thread on its own communicator, checked against the library (PMPI_*).
 *
 * Each of `threads` threads runs `rounds` rounds on its own duplicate of MPI_COMM_WORLD: blocking
 * collectives of sizes that sweep the planner's size classes (so the planners decide and measure
 * on every communicator at once), a derived datatype committed, used and freed (the type cache
 * under contention), nonblocking collectives mixed with a ring of point-to-point messages in one
 * MPI_Waitall, and a nonblocking alltoall started by one thread and completed by its partner
 * thread (schedules resumed on another thread than the one that started them). Every result is
 * compared byte for byte with the library's (PMPI_*) call on the same data. A watchdog ends a hung
 * run. Prints per rank the counts and a hash (the runner compares runs). */
/* pthread barriers, alarm(): POSIX, beyond the C11 this builds as. */
#define _POSIX_C_SOURCE 200809L

#include "common.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

enum { threads = 4, rounds = 16, watchdog_s = 200 };

static int rank_ = 0, size_ = 1;
static MPI_Comm comms[threads];
static uint64_t hashes[threads];
static long checks[threads], calls[threads];
static pthread_barrier_t pairs;
static MPI_Request handoff[threads];
static MPI_Status* volatile statuses_ignore; /* see p2p_threads.c */

static void small_ints(int* buf, int n, int salt) {
    for (int i = 0; i < n; ++i) buf[i] = (i * 5 + rank_ * 11 + salt) % 19 - 9;
}

static void compare(int t, const void* a, const void* b, size_t n, const char* what, int round) {
    SHUNT_TEST_REQUIRE(memcmp(a, b, n) == 0, "thread %d round %d: %s differs from the library's (rank %d)", t, round,
                       what, rank_);
    hashes[t] = test_hash(hashes[t], a, n);
    checks[t] += 1;
}

static void* worker(void* arg) {
    const int t = (int)(intptr_t)arg;
    MPI_Comm comm = comms[t];
    const int right = (rank_ + 1) % size_, left = (rank_ + size_ - 1) % size_;
    hashes[t] = 14695981039346656037ull;
    for (int round = 0; round < rounds; ++round) {
        /* Sizes sweep 4 B .. 256 KiB over the rounds, differently per thread. */
        const int n = 1 << ((round * 3 + t) % 17);
        int* in = (int*)malloc(sizeof(int) * (size_t)n * (size_t)size_);
        int* a = (int*)malloc(sizeof(int) * (size_t)n * (size_t)size_);
        int* b = (int*)malloc(sizeof(int) * (size_t)n * (size_t)size_);
        SHUNT_TEST_REQUIRE(in && a && b, "out of memory");
        small_ints(in, n * size_, round + 100 * t);

        SHUNT_TEST_MPI(MPI_Allreduce(in, a, n, MPI_INT, MPI_SUM, comm));
        SHUNT_TEST_MPI(PMPI_Allreduce(in, b, n, MPI_INT, MPI_SUM, comm));
        compare(t, a, b, sizeof(int) * (size_t)n, "MPI_Allreduce", round);
        SHUNT_TEST_MPI(MPI_Allgather(in, n, MPI_INT, a, n, MPI_INT, comm));
        SHUNT_TEST_MPI(PMPI_Allgather(in, n, MPI_INT, b, n, MPI_INT, comm));
        compare(t, a, b, sizeof(int) * (size_t)n * (size_t)size_, "MPI_Allgather", round);
        calls[t] += 2;

        /* A derived datatype made, committed, used and freed in every round. */
        MPI_Datatype spaced;
        SHUNT_TEST_MPI(MPI_Type_vector(n > 1 ? n / 2 : 1, 1, 2, MPI_INT, &spaced));
        SHUNT_TEST_MPI(MPI_Type_commit(&spaced));
        memset(a, 0x33, sizeof(int) * (size_t)n * (size_t)size_);
        memset(b, 0x33, sizeof(int) * (size_t)n * (size_t)size_);
        if (rank_ == 0) {
            memcpy(a, in, sizeof(int) * (size_t)n);
            memcpy(b, in, sizeof(int) * (size_t)n);
        }
        SHUNT_TEST_MPI(MPI_Bcast(a, 1, spaced, 0, comm));
        SHUNT_TEST_MPI(PMPI_Bcast(b, 1, spaced, 0, comm));
        compare(t, a, b, sizeof(int) * (size_t)n, "MPI_Bcast of a vector type", round);
        SHUNT_TEST_MPI(MPI_Type_free(&spaced));
        calls[t] += 1;

        /* Nonblocking collectives and a point-to-point ring in one MPI_Waitall. */
        int* c = (int*)malloc(sizeof(int) * (size_t)n * (size_t)size_);
        SHUNT_TEST_REQUIRE(c != NULL, "out of memory");
        int token_out = 1000 * rank_ + round, token_in = -1;
        MPI_Request req[4];
        SHUNT_TEST_MPI(MPI_Irecv(&token_in, 1, MPI_INT, left, round, comm, &req[0]));
        SHUNT_TEST_MPI(MPI_Iallreduce(in, a, n, MPI_INT, MPI_MAX, comm, &req[1]));
        SHUNT_TEST_MPI(MPI_Ialltoall(in, n, MPI_INT, c, n, MPI_INT, comm, &req[2]));
        SHUNT_TEST_MPI(MPI_Isend(&token_out, 1, MPI_INT, right, round, comm, &req[3]));
        SHUNT_TEST_MPI(MPI_Waitall(4, req, statuses_ignore));
        SHUNT_TEST_REQUIRE(token_in == 1000 * left + round, "ring token %d (rank %d thread %d)", token_in, rank_, t);
        SHUNT_TEST_MPI(PMPI_Allreduce(in, b, n, MPI_INT, MPI_MAX, comm));
        compare(t, a, b, sizeof(int) * (size_t)n, "MPI_Iallreduce", round);
        SHUNT_TEST_MPI(PMPI_Alltoall(in, n, MPI_INT, b, n, MPI_INT, comm));
        compare(t, c, b, sizeof(int) * (size_t)n * (size_t)size_, "MPI_Ialltoall", round);
        calls[t] += 4;

        /* Started here, completed by the partner thread (and the partner's by this one). */
        SHUNT_TEST_MPI(MPI_Ialltoall(in, n, MPI_INT, c, n, MPI_INT, comm, &handoff[t]));
        pthread_barrier_wait(&pairs);
        MPI_Request theirs = handoff[t ^ 1];
        SHUNT_TEST_MPI(MPI_Wait(&theirs, MPI_STATUS_IGNORE));
        pthread_barrier_wait(&pairs);
        SHUNT_TEST_MPI(PMPI_Alltoall(in, n, MPI_INT, b, n, MPI_INT, comm));
        compare(t, c, b, sizeof(int) * (size_t)n * (size_t)size_, "MPI_Ialltoall completed by another thread", round);
        calls[t] += 1;
        free(c);
        free(in);
        free(a);
        free(b);
    }
    return NULL;
}

static void watchdog(int sig) {
    (void)sig;
    static const char msg[] = "coll_threads: still running after the watchdog's limit: hung\n";
    ssize_t ignored = write(2, msg, sizeof msg - 1);
    (void)ignored;
    _exit(3);
}

int main(int argc, char** argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    statuses_ignore = MPI_STATUSES_IGNORE;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    if (provided < MPI_THREAD_MULTIPLE) {
        if (rank_ == 0) printf("MPI_THREAD_MULTIPLE not provided: skipped\n");
        MPI_Finalize();
        return 77;
    }
    signal(SIGALRM, watchdog);
    alarm(watchdog_s);
    SHUNT_TEST_REQUIRE(pthread_barrier_init(&pairs, NULL, threads) == 0, "pthread_barrier_init");
    for (int i = 0; i < threads; ++i) SHUNT_TEST_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &comms[i]));
    /* A blocking collective on each communicator first: where shunt sets up its collectives. */
    for (int i = 0; i < threads; ++i) SHUNT_TEST_MPI(MPI_Barrier(comms[i]));
    pthread_t tid[threads];
    for (int i = 0; i < threads; ++i)
        SHUNT_TEST_REQUIRE(pthread_create(&tid[i], NULL, worker, (void*)(intptr_t)i) == 0, "pthread_create");
    for (int i = 0; i < threads; ++i) pthread_join(tid[i], NULL);
    alarm(0);
    uint64_t h = 14695981039346656037ull;
    long total_checks = 0, total_calls = 0;
    for (int i = 0; i < threads; ++i) {
        h = test_hash_int(h, (long long)hashes[i]);
        total_checks += checks[i];
        total_calls += calls[i];
    }
    char line[160];
    snprintf(line, sizeof line,
             "rank %d: %d threads x %d rounds, %ld collective calls, %ld results checked, hash %016llx", rank_, threads,
             rounds, total_calls, total_checks, (unsigned long long)h);
    test_print_ranks(MPI_COMM_WORLD, line);
    for (int i = 0; i < threads; ++i) MPI_Comm_free(&comms[i]);
    pthread_barrier_destroy(&pairs);
    MPI_Finalize();
    return 0;
}
