/* tests/interpose/p2p_threads.c: point-to-point calls with derived datatypes from several threads at once
 * (MPI_THREAD_MULTIPLE) on a ring, each thread on its own communicator: nonblocking sends and receives
 * completed by MPI_Waitall, MPI_Waitany and MPI_Test loops, checked byte for byte against the library's
 * PMPI_Pack/PMPI_Unpack of the sender's data. */
#include "common.h"

#include <pthread.h>

enum { threads = 4, rounds = 40 };

static int rank_ = 0, size_ = 1;
static MPI_Comm comms[threads];
static MPI_Datatype vec, idx;
static uint64_t hashes[threads];
/* MPI_STATUSES_IGNORE through a volatile pointer: GCC 12 warns (-Wstringop-overflow) that MPICH's
 * (MPI_Status *)1 is a region of size 0 when passed for an array parameter. */
static MPI_Status* volatile statuses_ignore;

static uint32_t seed_of(int sender, int t, int round, int k) {
    return (uint32_t)(100000 * sender + 1000 * t + 10 * round + k + 1);
}

/* Requires got (made with recv seed) to equal the library's unpacking of the sender's data. */
static void check(MPI_Datatype type, int count, const test_typed* got, uint32_t rseed, uint32_t sseed) {
    test_typed src = test_typed_make(type, count, sseed);
    test_typed exp = test_typed_make(type, count, rseed);
    int bytes = 0, pos = 0, upos = 0;
    SHUNT_TEST_MPI(PMPI_Pack_size(count, type, MPI_COMM_SELF, &bytes));
    unsigned char* tmp = (unsigned char*)malloc((size_t)bytes);
    SHUNT_TEST_MPI(PMPI_Pack(src.base, count, type, tmp, bytes, &pos, MPI_COMM_SELF));
    SHUNT_TEST_MPI(PMPI_Unpack(tmp, pos, &upos, exp.base, count, type, MPI_COMM_SELF));
    SHUNT_TEST_REQUIRE(memcmp(got->alloc, exp.alloc, exp.alloc_bytes) == 0, "received data differs (rank %d)", rank_);
    free(tmp);
    free(src.alloc);
    free(exp.alloc);
}

static void* worker(void* arg) {
    const int t = (int)(intptr_t)arg;
    const int right = (rank_ + 1) % size_, left = (rank_ + size_ - 1) % size_;
    MPI_Comm comm = comms[t];
    uint64_t h = 14695981039346656037ull;
    for (int round = 0; round < rounds; ++round) {
        const MPI_Datatype types[3] = {vec, idx, MPI_INT};
        const int counts[3] = {3, 2, 7};
        test_typed r[3], s[3];
        MPI_Request req[6];
        for (int k = 0; k < 3; ++k) {
            r[k] = test_typed_make(types[k], counts[k], 3u);
            s[k] = test_typed_make(types[k], counts[k], seed_of(rank_, t, round, k));
            SHUNT_TEST_MPI(MPI_Irecv(r[k].base, counts[k], types[k], left, k, comm, &req[k]));
        }
        for (int k = 0; k < 3; ++k)
            SHUNT_TEST_MPI(MPI_Isend(s[k].base, counts[k], types[k], right, k, comm, &req[3 + k]));
        if (round % 3 == 0) {
            SHUNT_TEST_MPI(MPI_Waitall(6, req, statuses_ignore));
        } else if (round % 3 == 1) {
            for (int done = 0; done < 6; ++done) {
                int index = -1;
                MPI_Status st;
                SHUNT_TEST_MPI(MPI_Waitany(6, req, &index, &st));
                SHUNT_TEST_REQUIRE(index >= 0 && index < 6, "Waitany index %d", index);
            }
        } else {
            for (int k = 0; k < 6; ++k) {
                int flag = 0;
                while (!flag) SHUNT_TEST_MPI(MPI_Test(&req[k], &flag, MPI_STATUS_IGNORE));
            }
        }
        for (int k = 0; k < 3; ++k) {
            check(types[k], counts[k], &r[k], 3u, seed_of(left, t, round, k));
            h = test_hash(h, r[k].alloc, r[k].alloc_bytes);
            free(r[k].alloc);
            free(s[k].alloc);
        }
    }
    hashes[t] = h;
    return NULL;
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
    SHUNT_TEST_MPI(MPI_Type_vector(5, 2, 3, MPI_INT, &vec));
    SHUNT_TEST_MPI(MPI_Type_commit(&vec));
    const int bl[3] = {1, 3, 2}, dp[3] = {0, 4, 9};
    SHUNT_TEST_MPI(MPI_Type_indexed(3, bl, dp, MPI_DOUBLE, &idx));
    SHUNT_TEST_MPI(MPI_Type_commit(&idx));
    for (int i = 0; i < threads; ++i) SHUNT_TEST_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &comms[i]));
    pthread_t tid[threads];
    for (int i = 0; i < threads; ++i)
        SHUNT_TEST_REQUIRE(pthread_create(&tid[i], NULL, worker, (void*)(intptr_t)i) == 0, "pthread_create");
    for (int i = 0; i < threads; ++i) pthread_join(tid[i], NULL);
    uint64_t h = 14695981039346656037ull;
    for (int i = 0; i < threads; ++i) h = test_hash_int(h, (long long)hashes[i]);
    char line[96];
    snprintf(line, sizeof line, "rank %d: %d threads x %d rounds, hash %016llx", rank_, threads, rounds,
             (unsigned long long)h);
    test_print_ranks(MPI_COMM_WORLD, line);
    for (int i = 0; i < threads; ++i) MPI_Comm_free(&comms[i]);
    MPI_Type_free(&vec);
    MPI_Type_free(&idx);
    MPI_Finalize();
    return 0;
}
