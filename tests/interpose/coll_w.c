/* tests/interpose/coll_w.c: MPI_Alltoallw and MPI_Neighbor_alltoallw (shunt's when preloaded) against the library (PMPI_*), byte for byte.
 *
 * A plain MPI program that knows nothing of shunt. Every case runs twice on identically
 * prefilled buffers, through MPI_* and through PMPI_*, and requires every byte of the receive
 * buffers (the untouched ones included) to be equal. The blocks are random derived datatypes
 * of ints (vector, indexed, struct, subarray, resized, hvector, and contiguous ones), a
 * different type on each side of each pair (the type signatures match: the same number of
 * ints), placed in the buffer in a shuffled order with gaps, with zero counts among them.
 * Cases: MPI_Alltoallw on MPI_COMM_WORLD and on a reordered communicator, in place, all
 * contiguous (a communicator of its own), all empty, a datatype committed behind the
 * interposer's back, erroneous calls under MPI_ERRORS_RETURN; MPI_Neighbor_alltoallw on a periodic and
 * a non-periodic 2-D cartesian communicator (MPI_PROC_NULL neighbours: their blocks untouched)
 * and on a distributed graph with uneven degrees and a self loop. Prints one checksum line per
 * rank (the runner compares runs). Communicators with 7 calls or more see shunt's decision made
 * (6 calls measured) and kept. */
#include "common.h"

#include <stdint.h>

static test_tally tally;

enum { pool_size = 9, unit = 12 }; /* every block holds a multiple of `unit` ints */
static MPI_Datatype pool[pool_size];
static int pool_ints[pool_size]; /* ints per element */
/* pool[2]'s twin committed with PMPI_Type_commit, behind the back of whatever intercepts
 * MPI_Type_commit (a type shunt does not know), used instead of pool[2] while `use_hidden`. */
static MPI_Datatype hidden;
static int use_hidden;

static void make_pool(void) {
    MPI_Datatype t;
    int n = 0;
    pool[n] = MPI_INT, pool_ints[n++] = 1;
    SHUNT_TEST_MPI(MPI_Type_contiguous(3, MPI_INT, &pool[n]));
    pool_ints[n++] = 3;
    SHUNT_TEST_MPI(MPI_Type_vector(2, 1, 3, MPI_INT, &pool[n]));
    pool_ints[n++] = 2;
    {
        int lens[3] = {1, 2, 1}, displs[3] = {0, 3, 7};
        SHUNT_TEST_MPI(MPI_Type_indexed(3, lens, displs, MPI_INT, &pool[n]));
        pool_ints[n++] = 4;
    }
    {
        int lens[2] = {1, 2};
        MPI_Aint displs[2] = {0, 12};
        MPI_Datatype types[2] = {MPI_INT, MPI_INT};
        SHUNT_TEST_MPI(MPI_Type_create_struct(2, lens, displs, types, &pool[n]));
        pool_ints[n++] = 3;
    }
    {
        int sizes[2] = {4, 5}, sub[2] = {2, 3}, starts[2] = {1, 1};
        SHUNT_TEST_MPI(MPI_Type_create_subarray(2, sizes, sub, starts, MPI_ORDER_C, MPI_INT, &pool[n]));
        pool_ints[n++] = 6;
    }
    SHUNT_TEST_MPI(MPI_Type_vector(3, 1, 2, MPI_INT, &t));
    SHUNT_TEST_MPI(MPI_Type_create_resized(t, -8, 32, &pool[n]));
    pool_ints[n++] = 3;
    SHUNT_TEST_MPI(MPI_Type_free(&t));
    SHUNT_TEST_MPI(MPI_Type_contiguous(2, MPI_INT, &t));
    SHUNT_TEST_MPI(MPI_Type_create_hvector(2, 1, 24, t, &pool[n]));
    pool_ints[n++] = 4;
    SHUNT_TEST_MPI(MPI_Type_free(&t));
    SHUNT_TEST_MPI(MPI_Type_contiguous(6, MPI_INT, &pool[n]));
    pool_ints[n++] = 6;
    for (int i = 1; i < n; ++i) SHUNT_TEST_MPI(MPI_Type_commit(&pool[i]));
    SHUNT_TEST_MPI(MPI_Type_vector(2, 1, 3, MPI_INT, &hidden));
    SHUNT_TEST_MPI(PMPI_Type_commit(&hidden));
}

static uint32_t mix(uint32_t a, uint32_t b, uint32_t c) {
    uint32_t x = a * 2654435761u ^ (b + 0x9e3779b9u) * 40503u ^ (c + 7u) * 2246822519u;
    x ^= x >> 15, x *= 2246822519u, x ^= x >> 13;
    return x;
}

/* A side of a call: per peer a count, a type and a byte displacement into one buffer. */
typedef struct {
    int n;
    int *counts, *idispls;
    MPI_Aint* adispls;
    MPI_Datatype* types;
    size_t bytes; /* buffer size */
} side;

/* Lays out n blocks of ints[k] ints each (a multiple of `unit`, 0 allowed) with types chosen by
 * `seed` (only contiguous ones when `dense`), in a shuffled order with gaps between them. */
static side make_side(int n, const int* ints, uint32_t seed, int dense) {
    side s;
    s.n = n;
    s.counts = (int*)calloc((size_t)n + 1, sizeof(int));
    s.idispls = (int*)calloc((size_t)n + 1, sizeof(int));
    s.adispls = (MPI_Aint*)calloc((size_t)n + 1, sizeof(MPI_Aint));
    s.types = (MPI_Datatype*)calloc((size_t)n + 1, sizeof(MPI_Datatype));
    int* order = (int*)calloc((size_t)n + 1, sizeof(int));
    SHUNT_TEST_REQUIRE(s.counts && s.idispls && s.adispls && s.types && order, "out of memory");
    for (int k = 0; k < n; ++k) order[k] = k;
    for (int k = n - 1; k > 0; --k) {
        const int j = (int)(mix(seed, (uint32_t)k, 99u) % (uint32_t)(k + 1));
        const int x = order[k];
        order[k] = order[j], order[j] = x;
    }
    MPI_Aint cursor = 16;
    for (int q = 0; q < n; ++q) {
        const int k = order[q];
        static const int dense_ones[3] = {0, 1, 8};
        int t = dense ? dense_ones[mix(seed, (uint32_t)k, 1u) % 3u] : (int)(mix(seed, (uint32_t)k, 1u) % pool_size);
        s.types[k] = use_hidden && t == 2 ? hidden : pool[t];
        s.counts[k] = ints[k] / pool_ints[t];
        MPI_Aint lb, extent, tlb, textent;
        SHUNT_TEST_MPI(MPI_Type_get_extent(pool[t], &lb, &extent));
        SHUNT_TEST_MPI(MPI_Type_get_true_extent(pool[t], &tlb, &textent));
        const MPI_Aint span = s.counts[k] > 0 ? (s.counts[k] - 1) * extent + textent : 0;
        s.adispls[k] = cursor - tlb;
        s.idispls[k] = (int)s.adispls[k];
        cursor += span + 4 * (MPI_Aint)(mix(seed, (uint32_t)k, 2u) % 5u);
    }
    s.bytes = (size_t)cursor + 16;
    free(order);
    return s;
}

static void free_side(side* s) {
    free(s->counts);
    free(s->idispls);
    free(s->adispls);
    free(s->types);
}

/* Ints rank i sends to rank j in call `call` (a multiple of unit, some 0); symmetric when `sym`. */
static int pair_ints(int i, int j, int call, int sym) {
    if (sym && i > j) {
        const int x = i;
        i = j, j = x;
    }
    const uint32_t m = mix((uint32_t)i, (uint32_t)j, (uint32_t)call) % 5u;
    return m == 0 ? 0 : (int)m * unit * (1 + call % 3);
}

static void alltoallw_case(MPI_Comm comm, const char* cname, int call, int in_place, int dense, int empty) {
    int rank = 0, size = 0;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    int* sints = (int*)calloc((size_t)size, sizeof(int));
    int* rints = (int*)calloc((size_t)size, sizeof(int));
    for (int j = 0; j < size; ++j) {
        sints[j] = empty ? 0 : pair_ints(rank, j, call, in_place);
        rints[j] = empty ? 0 : pair_ints(j, rank, call, in_place);
    }
    const uint32_t seed = mix((uint32_t)rank, (uint32_t)call, 7u);
    side s = make_side(size, sints, seed, dense);
    side r = make_side(size, rints, seed + 1u, dense);
    char what[160];
    snprintf(what, sizeof what, "%s: MPI_Alltoallw call %d%s%s%s", cname, call, in_place ? ", in place" : "",
             dense ? ", contiguous" : "", empty ? ", empty" : "");
    test_pair src = test_pair_make(s.bytes, seed + 2u);
    test_pair p = test_pair_make(r.bytes, seed + 3u);
    if (in_place) {
        SHUNT_TEST_MPI(MPI_Alltoallw(MPI_IN_PLACE, NULL, NULL, NULL, p.a, r.counts, r.idispls, r.types, comm));
        SHUNT_TEST_MPI(PMPI_Alltoallw(MPI_IN_PLACE, NULL, NULL, NULL, p.b, r.counts, r.idispls, r.types, comm));
    } else {
        SHUNT_TEST_MPI(MPI_Alltoallw(src.a, s.counts, s.idispls, s.types, p.a, r.counts, r.idispls, r.types, comm));
        SHUNT_TEST_MPI(PMPI_Alltoallw(src.a, s.counts, s.idispls, s.types, p.b, r.counts, r.idispls, r.types, comm));
    }
    test_pair_check(&p, what, comm, &tally);
    test_pair_check(&src, what, comm, &tally); /* the send buffer is left alone */
    free_side(&s);
    free_side(&r);
    free(sints);
    free(rints);
}

/* One MPI_Neighbor_alltoallw on a topology communicator: send to dst[k] sints[k] ints, receive
 * from src[k] rints[k] ints. */
static void neighbor_case(MPI_Comm comm, const char* what, int indeg, const int* rints, int outdeg, const int* sints,
                          uint32_t seed) {
    side s = make_side(outdeg, sints, seed, 0);
    side r = make_side(indeg, rints, seed + 1u, 0);
    test_pair src = test_pair_make(s.bytes, seed + 2u);
    test_pair p = test_pair_make(r.bytes, seed + 3u);
    SHUNT_TEST_MPI(
        MPI_Neighbor_alltoallw(src.a, s.counts, s.adispls, s.types, p.a, r.counts, r.adispls, r.types, comm));
    SHUNT_TEST_MPI(
        PMPI_Neighbor_alltoallw(src.a, s.counts, s.adispls, s.types, p.b, r.counts, r.adispls, r.types, comm));
    test_pair_check(&p, what, comm, &tally);
    test_pair_check(&src, what, comm, &tally);
    free_side(&s);
    free_side(&r);
}

static void cart_cases(int periodic) {
    int size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int dims[2] = {0, 0}, periods[2] = {periodic, periodic};
    SHUNT_TEST_MPI(MPI_Dims_create(size, 2, dims));
    MPI_Comm cart;
    SHUNT_TEST_MPI(MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &cart));
    int rank = 0;
    MPI_Comm_rank(cart, &rank);
    for (int call = 0; call < (periodic ? 7 : 3); ++call) { /* 7: shunt's decision measures 6 */
        /* What goes down dimension d equals what comes up it: one size per dimension. */
        int ints[4];
        for (int d = 0; d < 2; ++d)
            ints[2 * d] = ints[2 * d + 1] = unit * (int)(1 + mix((uint32_t)d, (uint32_t)call, 5u) % 4u);
        if (call % 3 == 2) ints[2] = ints[3] = 0;
        char what[128];
        snprintf(what, sizeof what, "MPI_Neighbor_alltoallw on a %s %dx%d cart, call %d",
                 periodic ? "periodic" : "non-periodic", dims[0], dims[1], call);
        neighbor_case(cart, what, 4, ints, 4, ints, mix((uint32_t)rank, (uint32_t)call, periodic ? 11u : 13u));
    }
    SHUNT_TEST_MPI(MPI_Comm_free(&cart));
}

/* Edge i -> j of the distributed graph, and its size in ints. */
static int edge(int i, int j) { return i == j ? i == 1 : (i * 3 + j * 5 + i * j) % 4 != 0; }
static int edge_ints(int i, int j, int call) {
    return unit * (int)(mix((uint32_t)i, (uint32_t)j, (uint32_t)call) % 4u);
}

static void graph_cases(void) {
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int *srcs = (int*)calloc((size_t)size + 1, sizeof(int)), *dsts = (int*)calloc((size_t)size + 1, sizeof(int));
    int indeg = 0, outdeg = 0;
    for (int i = 0; i < size; ++i)
        if (edge(i, rank)) srcs[indeg++] = i;
    for (int j = size - 1; j >= 0; --j) /* descending: the order is the caller's */
        if (edge(rank, j)) dsts[outdeg++] = j;
    /* Weights of 1 rather than MPI_UNWEIGHTED: Open MPI 4.1 defines it as a zero-size array and GCC 12
     * warns of reading past it. */
    int* weights = (int*)calloc((size_t)size + 1, sizeof(int));
    for (int k = 0; k <= size; ++k) weights[k] = 1;
    MPI_Comm graph;
    SHUNT_TEST_MPI(MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, indeg, srcs, weights, outdeg, dsts, weights,
                                                  MPI_INFO_NULL, 0, &graph));
    int *rints = (int*)calloc((size_t)size + 1, sizeof(int)), *sints = (int*)calloc((size_t)size + 1, sizeof(int));
    for (int call = 0; call < 7; ++call) {
        for (int k = 0; k < indeg; ++k) rints[k] = edge_ints(srcs[k], rank, call);
        for (int k = 0; k < outdeg; ++k) sints[k] = edge_ints(rank, dsts[k], call);
        char what[128];
        snprintf(what, sizeof what, "MPI_Neighbor_alltoallw on a dist graph (in %d, out %d), call %d", indeg, outdeg,
                 call);
        neighbor_case(graph, what, indeg, rints, outdeg, sints, mix((uint32_t)rank, (uint32_t)call, 17u));
    }
    SHUNT_TEST_MPI(MPI_Comm_free(&graph));
    free(srcs), free(dsts), free(rints), free(sints), free(weights);
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    make_pool();

    for (int call = 0; call < 4; ++call) alltoallw_case(MPI_COMM_WORLD, "world", call, 0, 0, 0);
    alltoallw_case(MPI_COMM_WORLD, "world", 4, 0, 0, 1);
    for (int call = 5; call < 7; ++call) alltoallw_case(MPI_COMM_WORLD, "world", call, 1, 0, 0);
    alltoallw_case(MPI_COMM_WORLD, "world", 7, 0, 1, 0); /* contiguous blocks on shunt's path */

    MPI_Comm reversed;
    SHUNT_TEST_MPI(MPI_Comm_split(MPI_COMM_WORLD, 0, size - rank, &reversed));
    for (int call = 0; call < 2; ++call) alltoallw_case(reversed, "reversed", call, 0, 0, 0);
    SHUNT_TEST_MPI(MPI_Comm_free(&reversed));

    /* Only contiguous blocks on its first call: the communicator stays with the library. */
    MPI_Comm dense;
    SHUNT_TEST_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &dense));
    alltoallw_case(dense, "dense", 0, 0, 1, 0);
    alltoallw_case(dense, "dense", 1, 0, 0, 0);
    SHUNT_TEST_MPI(MPI_Comm_free(&dense));

    /* A type shunt does not know on its first call: that communicator stays with the library
     * (with SHUNT_COLL=shunt the library packs that type inside shunt's exchange). */
    MPI_Comm unknown;
    SHUNT_TEST_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &unknown));
    use_hidden = 1;
    for (int call = 0; call < 2; ++call) alltoallw_case(unknown, "unknown type", call, 0, 0, 0);
    use_hidden = 0;
    SHUNT_TEST_MPI(MPI_Comm_free(&unknown));

    /* Erroneous calls under MPI_ERRORS_RETURN (a negative count, MPI_DATATYPE_NULL with data)
     * fail as the library's do. */
    MPI_Comm errs;
    SHUNT_TEST_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &errs));
    SHUNT_TEST_MPI(MPI_Comm_set_errhandler(errs, MPI_ERRORS_RETURN));
    for (int bad = 0; bad < 2; ++bad) {
        int* counts = (int*)calloc((size_t)size, sizeof(int));
        int* displs = (int*)calloc((size_t)size, sizeof(int));
        MPI_Datatype* types = (MPI_Datatype*)calloc((size_t)size, sizeof(MPI_Datatype));
        int sbuf[64], rbuf_a[64], rbuf_b[64];
        memset(sbuf, 1, sizeof sbuf), memset(rbuf_a, 2, sizeof rbuf_a), memset(rbuf_b, 2, sizeof rbuf_b);
        for (int j = 0; j < size; ++j) counts[j] = 1, types[j] = MPI_INT, displs[j] = 4 * j;
        if (bad == 0)
            counts[size - 1] = -1;
        else
            types[0] = MPI_DATATYPE_NULL;
        const int ra = MPI_Alltoallw(sbuf, counts, displs, types, rbuf_a, counts, displs, types, errs);
        const int rb = PMPI_Alltoallw(sbuf, counts, displs, types, rbuf_b, counts, displs, types, errs);
        int ca = 0, cb = 0;
        MPI_Error_class(ra, &ca), MPI_Error_class(rb, &cb);
        SHUNT_TEST_REQUIRE(ra != MPI_SUCCESS && ca == cb, "erroneous MPI_Alltoallw %d: error class %d, library %d", bad,
                           ca, cb);
        tally.checks += 1;
        free(counts), free(displs), free(types);
    }
    SHUNT_TEST_MPI(MPI_Comm_free(&errs));

    cart_cases(1);
    cart_cases(0);
    graph_cases();

    for (int i = 1; i < pool_size; ++i) SHUNT_TEST_MPI(MPI_Type_free(&pool[i]));
    SHUNT_TEST_MPI(PMPI_Type_free(&hidden));
    char line[128];
    snprintf(line, sizeof line, "rank %d: %ld checks, %lld bytes, hash %016llx", rank, tally.checks, tally.bytes,
             (unsigned long long)tally.hash);
    test_print_ranks(MPI_COMM_WORLD, line);
    MPI_Finalize();
    return 0;
}
