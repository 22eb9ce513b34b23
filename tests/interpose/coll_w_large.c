/* tests/interpose/coll_w_large.c: MPI_Alltoallw where two ranks' sides hold more than INT_MAX bytes and the others'
 * are small, after the communicator's decision is made on small calls.
 *
 * A plain MPI program that knows nothing of shunt; run at 3 ranks (2 to 8). Four small calls of a
 * datatype with gaps come first (what a preloaded shunt measures to decide), then one call in
 * which rank 0 sends rank 1 2 GiB + 1 MiB of contiguous bytes beside small blocks with gaps,
 * while the other ranks' blocks stay small. All ranks must take the same path through such a
 * call: ranks passing their typed blocks to the library while the others move bytes hang or
 * mismatch. The large block's bytes are checked against their seeded values (MiB by MiB); every rank prints a
 * checksum of the rest of what it received (the runner compares runs). Needs about 2.2 GiB on
 * each of ranks 0 and 1: exits 77 (skipped) where /proc/meminfo shows less than 8 GiB available. */
#include "common.h"

#include <stdint.h>

enum { small_ints = 40 };
static const int big_count = 2049; /* elements of 1 MiB: 2 GiB + 1 MiB */

/* MiB k of the large block: a seeded MiB of bytes with k in its first 4 bytes. */
static void big_mib(unsigned char* out, int k) {
    static unsigned char pattern[1 << 20];
    static int made = 0;
    if (!made) test_fill(pattern, sizeof pattern, 99u), made = 1;
    memcpy(out, pattern, sizeof pattern);
    memcpy(out, &k, sizeof k);
}

static long long available_kib(void) {
    FILE* f = fopen("/proc/meminfo", "r");
    char line[256];
    long long kib = -1;
    if (f == NULL) return -1;
    while (fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "MemAvailable: %lld kB", &kib) == 1) break;
    fclose(f);
    return kib;
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    SHUNT_TEST_REQUIRE(size >= 2 && size <= 8, "run at 2 to 8 ranks, not %d", size);
    int enough = available_kib() >= 8ll << 20;
    SHUNT_TEST_MPI(MPI_Bcast(&enough, 1, MPI_INT, 0, MPI_COMM_WORLD));
    if (!enough) {
        if (rank == 0) printf("coll_w_large: less than 8 GiB of memory available: skipped\n");
        MPI_Finalize();
        return 77;
    }

    /* A block with gaps: small_ints ints every other int; and 1 MiB of contiguous bytes. */
    MPI_Datatype gapped, mib;
    SHUNT_TEST_MPI(MPI_Type_vector(small_ints, 1, 2, MPI_INT, &gapped));
    SHUNT_TEST_MPI(MPI_Type_commit(&gapped));
    SHUNT_TEST_MPI(MPI_Type_contiguous(1 << 20, MPI_BYTE, &mib));
    SHUNT_TEST_MPI(MPI_Type_commit(&mib));
    const size_t gap_span = (size_t)(2 * small_ints - 1) * sizeof(int);
    uint64_t hash = 1469598103934665603ull;

    /* Four small calls: one gapped block to each rank (what shunt decides on). */
    for (int call = 0; call < 4; ++call) {
        const size_t bytes = (size_t)size * (gap_span + 64);
        unsigned char* sbuf = (unsigned char*)malloc(bytes);
        unsigned char* rbuf = (unsigned char*)malloc(bytes);
        SHUNT_TEST_REQUIRE(sbuf && rbuf, "out of memory");
        test_fill(sbuf, bytes, (uint32_t)(100 * call + rank));
        test_fill(rbuf, bytes, 7u);
        int counts[8], displs[8];
        MPI_Datatype types[8];
        for (int j = 0; j < size; ++j) counts[j] = 1, displs[j] = j * (int)(gap_span + 64), types[j] = gapped;
        SHUNT_TEST_MPI(MPI_Alltoallw(sbuf, counts, displs, types, rbuf, counts, displs, types, MPI_COMM_WORLD));
        hash = test_hash(hash, rbuf, bytes);
        free(sbuf);
        free(rbuf);
    }

    /* The large call: rank 0 sends rank 1 big_count MiB (its block at offset 4096); every other
     * block is a gapped one, block j at offset j * (gap_span + 64). */
    const size_t big = (size_t)big_count << 20;
    const int slot = (int)(gap_span + 64);
    const int big_send = rank == 0, big_recv = rank == 1;
    const size_t sbytes = big_send ? 4096 + big : (size_t)size * (size_t)slot;
    const size_t rbytes = big_recv ? 4096 + big : (size_t)size * (size_t)slot;
    unsigned char* sbuf = (unsigned char*)malloc(sbytes);
    unsigned char* rbuf = (unsigned char*)malloc(rbytes);
    SHUNT_TEST_REQUIRE(sbuf && rbuf, "out of memory for %zu and %zu bytes", sbytes, rbytes);
    test_fill(sbuf, (size_t)size * (size_t)slot, 11u + (uint32_t)rank);
    if (big_send)
        for (int k = 0; k < big_count; ++k) big_mib(sbuf + 4096 + ((size_t)k << 20), k);
    memset(rbuf, 0x5a, rbytes);
    int scounts[8], sdispls[8], rcounts[8], rdispls[8];
    MPI_Datatype stypes[8], rtypes[8];
    for (int j = 0; j < size; ++j) {
        scounts[j] = rcounts[j] = 1, stypes[j] = rtypes[j] = gapped;
        sdispls[j] = rdispls[j] = j * slot;
    }
    if (big_send) scounts[1] = big_count, sdispls[1] = 4096, stypes[1] = mib;
    if (big_recv) rcounts[0] = big_count, rdispls[0] = 4096, rtypes[0] = mib;
    SHUNT_TEST_MPI(MPI_Alltoallw(sbuf, scounts, sdispls, stypes, rbuf, rcounts, rdispls, rtypes, MPI_COMM_WORLD));
    if (big_recv) {
        unsigned char* want = (unsigned char*)malloc((size_t)1 << 20);
        SHUNT_TEST_REQUIRE(want != NULL, "out of memory");
        for (int k = 0; k < big_count; ++k) {
            big_mib(want, k);
            SHUNT_TEST_REQUIRE(memcmp(rbuf + 4096 + ((size_t)k << 20), want, (size_t)1 << 20) == 0,
                               "large block: MiB %d differs from what rank 0 sent", k);
        }
        free(want);
    }
    hash = test_hash(hash, rbuf, (size_t)size * (size_t)slot);
    free(sbuf);
    free(rbuf);

    char line[128];
    snprintf(line, sizeof line, "rank %d: 5 calls, rank 0 to 1 %zu bytes: %016llx", rank, big,
             (unsigned long long)hash);
    test_print_ranks(MPI_COMM_WORLD, line);
    MPI_Type_free(&gapped);
    MPI_Type_free(&mib);
    MPI_Finalize();
    return 0;
}
