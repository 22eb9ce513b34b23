/* tests/interpose/common.h: helpers of the plain C MPI programs run with and without libshunt preloaded.
 *
 * The programs know nothing of shunt. They check MPI_Pack / MPI_Unpack (shunt's shims when
 * preloaded) against PMPI_Pack / PMPI_Unpack (always the library) byte for byte, and print a
 * deterministic checksum per rank from rank 0 so that the runner can compare whole outputs. */
#ifndef SHUNT_TEST_INTERPOSE_COMMON_H
#define SHUNT_TEST_INTERPOSE_COMMON_H

#include <mpi.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Aborts the job with a message on stderr (the runner requires an empty stderr). */
#define SHUNT_TEST_REQUIRE(cond, ...)                                                \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                            \
            fprintf(stderr, "\n");                                                   \
            fflush(stderr);                                                          \
            MPI_Abort(MPI_COMM_WORLD, 1);                                            \
        }                                                                            \
    } while (0)

#define SHUNT_TEST_MPI(call)                                                  \
    do {                                                                      \
        int rc_ = (call);                                                     \
        SHUNT_TEST_REQUIRE(rc_ == MPI_SUCCESS, "%s returned %d", #call, rc_); \
    } while (0)

static inline uint64_t test_hash(uint64_t h, const void* data, size_t n) {
    const unsigned char* p = (const unsigned char*)data;
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static inline uint64_t test_hash_int(uint64_t h, long long v) { return test_hash(h, &v, sizeof v); }

/* Deterministic bytes that depend on the seed and the position. */
static inline void test_fill(void* buf, size_t n, uint32_t seed) {
    unsigned char* p = (unsigned char*)buf;
    uint32_t x = seed * 2654435761u + 12345u;
    for (size_t i = 0; i < n; ++i) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        p[i] = (unsigned char)(x >> 7);
    }
}

/* Prints one line per rank, in rank order, from rank 0. */
static inline void test_print_ranks(MPI_Comm comm, const char* line) {
    enum { width = 256 };
    int rank = 0, size = 0;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    char mine[width];
    memset(mine, 0, sizeof mine);
    snprintf(mine, sizeof mine, "%s", line);
    char* all = rank == 0 ? (char*)malloc((size_t)size * width) : NULL;
    SHUNT_TEST_MPI(MPI_Gather(mine, width, MPI_CHAR, all, width, MPI_CHAR, 0, comm));
    if (rank == 0) {
        for (int r = 0; r < size; ++r) printf("%s\n", all + (size_t)r * width);
        fflush(stdout);
        free(all);
    }
}

/* A typed buffer holding `count` elements of `type` with a guard zone around the footprint. */
typedef struct {
    unsigned char* alloc;
    size_t alloc_bytes;
    unsigned char* base; /* element 0 */
} test_typed;

static inline test_typed test_typed_make(MPI_Datatype type, int count, uint32_t seed) {
    MPI_Aint lb = 0, extent = 0, tlb = 0, textent = 0;
    SHUNT_TEST_MPI(MPI_Type_get_extent(type, &lb, &extent));
    SHUNT_TEST_MPI(MPI_Type_get_true_extent(type, &tlb, &textent));
    MPI_Aint span = count > 0 ? (MPI_Aint)(count - 1) * extent : 0;
    MPI_Aint lo = tlb + (span < 0 ? span : 0);
    MPI_Aint hi = tlb + textent + (span > 0 ? span : 0);
    test_typed t;
    t.alloc_bytes = (size_t)(hi - lo) + 64;
    t.alloc = (unsigned char*)malloc(t.alloc_bytes);
    SHUNT_TEST_REQUIRE(t.alloc != NULL, "out of memory");
    test_fill(t.alloc, t.alloc_bytes, seed);
    t.base = t.alloc + 32 - lo;
    return t;
}

typedef struct {
    long checks;
    long long bytes;
    uint64_t hash;
} test_tally;

/* Packs `count` x `type` from `typed` after a 3-byte header (so the data starts unaligned) with
 * MPI_Pack and with PMPI_Pack, requires identical buffers and positions; then unpacks the
 * result with MPI_Unpack and PMPI_Unpack into two identically prefilled typed buffers and
 * requires them identical (every byte, the untouched ones included). Adds to `tally`. */
static inline void test_pack_roundtrip(const char* name, MPI_Datatype type, int count, MPI_Comm comm, uint32_t seed,
                                       test_tally* tally) {
    int size = 0;
    SHUNT_TEST_MPI(MPI_Pack_size(count, type, comm, &size));
    int hsize = 0;
    SHUNT_TEST_MPI(MPI_Pack_size(3, MPI_CHAR, comm, &hsize));
    const int outsize = size + hsize + 16;
    unsigned char* a = (unsigned char*)malloc((size_t)outsize);
    unsigned char* b = (unsigned char*)malloc((size_t)outsize);
    SHUNT_TEST_REQUIRE(a && b, "out of memory");
    memset(a, 0xa5, (size_t)outsize);
    memset(b, 0xa5, (size_t)outsize);
    test_typed in = test_typed_make(type, count, seed);
    const char header[3] = {'h', 'd', 'r'};
    int pa = 0, pb = 0;
    SHUNT_TEST_MPI(MPI_Pack(header, 3, MPI_CHAR, a, outsize, &pa, comm));
    SHUNT_TEST_MPI(PMPI_Pack(header, 3, MPI_CHAR, b, outsize, &pb, comm));
    SHUNT_TEST_MPI(MPI_Pack(in.base, count, type, a, outsize, &pa, comm));
    SHUNT_TEST_MPI(PMPI_Pack(in.base, count, type, b, outsize, &pb, comm));
    SHUNT_TEST_REQUIRE(pa == pb, "%s x %d: MPI_Pack position %d, library %d", name, count, pa, pb);
    SHUNT_TEST_REQUIRE(memcmp(a, b, (size_t)outsize) == 0, "%s x %d: MPI_Pack bytes differ from the library's", name,
                       count);

    test_typed ua = test_typed_make(type, count, seed + 7777u);
    test_typed ub = test_typed_make(type, count, seed + 7777u);
    char hdr_a[3], hdr_b[3];
    int qa = 0, qb = 0;
    SHUNT_TEST_MPI(MPI_Unpack(a, pa, &qa, hdr_a, 3, MPI_CHAR, comm));
    SHUNT_TEST_MPI(PMPI_Unpack(a, pa, &qb, hdr_b, 3, MPI_CHAR, comm));
    SHUNT_TEST_MPI(MPI_Unpack(a, pa, &qa, ua.base, count, type, comm));
    SHUNT_TEST_MPI(PMPI_Unpack(a, pa, &qb, ub.base, count, type, comm));
    SHUNT_TEST_REQUIRE(qa == qb && qa == pa, "%s x %d: MPI_Unpack position %d, library %d, packed %d", name, count, qa,
                       qb, pa);
    SHUNT_TEST_REQUIRE(memcmp(hdr_a, header, 3) == 0 && memcmp(hdr_b, header, 3) == 0, "%s: header", name);
    SHUNT_TEST_REQUIRE(memcmp(ua.alloc, ub.alloc, ua.alloc_bytes) == 0,
                       "%s x %d: MPI_Unpack result differs from the library's", name, count);

    tally->checks += 1;
    tally->bytes += pa - hsize;
    tally->hash = test_hash(tally->hash, name, strlen(name));
    tally->hash = test_hash_int(tally->hash, count);
    tally->hash = test_hash(tally->hash, a, (size_t)pa);
    tally->hash = test_hash(tally->hash, ua.alloc, ua.alloc_bytes);
    free(a);
    free(b);
    free(in.alloc);
    free(ua.alloc);
    free(ub.alloc);
}

/* Two identically prefilled buffers of n bytes: `a` for the call through shunt, `b` for the
 * library's (PMPI_*) on the same data. */
typedef struct {
    unsigned char *a, *b;
    size_t n;
} test_pair;

static inline test_pair test_pair_make(size_t n, uint32_t seed) {
    test_pair p;
    p.n = n ? n : 1;
    p.a = (unsigned char*)malloc(p.n);
    p.b = (unsigned char*)malloc(p.n);
    SHUNT_TEST_REQUIRE(p.a && p.b, "out of memory");
    test_fill(p.a, p.n, seed);
    memcpy(p.b, p.a, p.n);
    return p;
}

/* For in-place reduce-scatters: MPI defines the first `from` bytes of the buffer; the rest may be
 * left as it was before the call (`before`, p->n bytes: what shunt's schedules do) or as the
 * library leaves it (it may use it as scratch, and does with some algorithms and rank counts), but
 * nothing else. An acceptable rest is cleared in both buffers, so that test_pair_check compares
 * and hashes the defined bytes alike in runs with and without shunt; any other rest fails there. */
static inline void test_pair_accept_tail(test_pair* p, const unsigned char* before, size_t from) {
    if (from >= p->n) return;
    const size_t k = p->n - from;
    if (memcmp(p->a + from, before + from, k) == 0 || memcmp(p->a + from, p->b + from, k) == 0) {
        memset(p->a + from, 0, k);
        memset(p->b + from, 0, k);
    }
}

/* Requires the two buffers identical (naming the first differing byte), adds them to `tally`
 * and frees them. */
static inline void test_pair_check(test_pair* p, const char* what, MPI_Comm comm, test_tally* tally) {
    int rank = 0;
    MPI_Comm_rank(comm, &rank);
    if (memcmp(p->a, p->b, p->n) != 0) {
        size_t i = 0;
        while (i < p->n && p->a[i] == p->b[i]) ++i;
        SHUNT_TEST_REQUIRE(0, "%s: rank %d: byte %zu of %zu differs: shunt 0x%02x, library 0x%02x", what, rank, i, p->n,
                           p->a[i], p->b[i]);
    }
    tally->checks += 1;
    tally->bytes += (long long)p->n;
    tally->hash = test_hash(tally->hash, p->a, p->n);
    free(p->a);
    free(p->b);
}

#endif
