/* tests/interpose/pack_threads.c: under MPI_THREAD_MULTIPLE, threads commit, dup, free and pack types
 * concurrently and exchange packed buffers; every result is checked against the library. */
#include "common.h"

#include <pthread.h>

enum { threads = 4, rounds = 40 };

static int rank_, size_;
static MPI_Datatype shared_type; /* committed by the main thread, used by all */
static test_tally tallies[threads];

static void* worker(void* arg) {
    const int id = (int)(intptr_t)arg;
    test_tally* tally = &tallies[id];
    tally->hash = 14695981039346656037ull;
    for (int r = 0; r < rounds; ++r) {
        const uint32_t seed = (uint32_t)(rank_ * 100000 + id * 1000 + r);
        /* A private type whose shape depends on the thread and the round. */
        MPI_Datatype t, d;
        if ((r + id) % 2 == 0) {
            SHUNT_TEST_MPI(MPI_Type_vector(r % 7 + 2, id % 3 + 1, id % 3 + 4, MPI_INT, &t));
        } else {
            int sizes[2] = {9, 11}, sub[2] = {r % 4 + 2, id + 3}, start[2] = {1, r % 5};
            SHUNT_TEST_MPI(MPI_Type_create_subarray(2, sizes, sub, start, MPI_ORDER_C, MPI_DOUBLE, &t));
        }
        SHUNT_TEST_MPI(MPI_Type_commit(&t));
        test_pack_roundtrip("private", t, r % 3 + 1, MPI_COMM_WORLD, seed, tally);
        SHUNT_TEST_MPI(MPI_Type_dup(shared_type, &d));
        test_pack_roundtrip("dup of shared", d, 2, MPI_COMM_WORLD, seed + 1, tally);
        test_pack_roundtrip("shared", shared_type, 1, MPI_COMM_WORLD, seed + 2, tally);
        SHUNT_TEST_MPI(MPI_Type_free(&d));

        /* Exchange a packed private element with the same thread on the next rank. */
        int bytes = 0;
        SHUNT_TEST_MPI(MPI_Pack_size(1, t, MPI_COMM_WORLD, &bytes));
        unsigned char* out = (unsigned char*)malloc((size_t)bytes);
        unsigned char* in = (unsigned char*)malloc((size_t)bytes);
        test_typed src = test_typed_make(t, 1, seed + 3);
        test_typed dst = test_typed_make(t, 1, 0);
        int pos = 0;
        SHUNT_TEST_MPI(MPI_Pack(src.base, 1, t, out, bytes, &pos, MPI_COMM_WORLD));
        const int next = (rank_ + 1) % size_, prev = (rank_ + size_ - 1) % size_;
        SHUNT_TEST_MPI(MPI_Sendrecv(out, pos, MPI_PACKED, next, id, in, bytes, MPI_PACKED, prev, id, MPI_COMM_WORLD,
                                    MPI_STATUS_IGNORE));
        int upos = 0;
        SHUNT_TEST_MPI(MPI_Unpack(in, pos, &upos, dst.base, 1, t, MPI_COMM_WORLD));
        SHUNT_TEST_REQUIRE(upos == pos, "thread %d: unpacked %d of %d", id, upos, pos);
        tally->hash = test_hash(tally->hash, dst.alloc, dst.alloc_bytes);
        free(out);
        free(in);
        free(src.alloc);
        free(dst.alloc);
        SHUNT_TEST_MPI(MPI_Type_free(&t));
    }
    return NULL;
}

int main(int argc, char** argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    if (provided < MPI_THREAD_MULTIPLE) {
        if (rank_ == 0) printf("MPI_THREAD_MULTIPLE not provided: skipped\n");
        MPI_Finalize();
        return 77;
    }
    int lens[3] = {2, 1, 3};
    MPI_Aint displs[3] = {0, 24, 40};
    MPI_Datatype types[3] = {MPI_FLOAT, MPI_DOUBLE, MPI_SHORT};
    SHUNT_TEST_MPI(MPI_Type_create_struct(3, lens, displs, types, &shared_type));
    SHUNT_TEST_MPI(MPI_Type_commit(&shared_type));

    pthread_t tid[threads];
    for (int i = 0; i < threads; ++i)
        SHUNT_TEST_REQUIRE(pthread_create(&tid[i], NULL, worker, (void*)(intptr_t)i) == 0, "pthread_create");
    for (int i = 0; i < threads; ++i) pthread_join(tid[i], NULL);

    uint64_t hash = 14695981039346656037ull;
    long checks = 0;
    long long bytes = 0;
    for (int i = 0; i < threads; ++i) {  // thread order: independent of scheduling
        hash = test_hash(hash, &tallies[i].hash, sizeof tallies[i].hash);
        checks += tallies[i].checks;
        bytes += tallies[i].bytes;
    }
    char line[200];
    snprintf(line, sizeof line, "rank %d: %d threads, %ld checks, %lld bytes packed, checksum %016llx", rank_, threads,
             checks, bytes, (unsigned long long)hash);
    test_print_ranks(MPI_COMM_WORLD, line);
    MPI_Type_free(&shared_type);
    MPI_Finalize();
    return 0;
}
