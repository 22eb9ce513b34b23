/* tests/interpose/coll_ops.c: every interposed collective (MPI_*, shunt's when preloaded) against the library (PMPI_*), byte for byte.
 *
 * A plain MPI program that knows nothing of shunt. For MPI_Allreduce, MPI_Reduce,
 * MPI_Reduce_scatter_block, MPI_Reduce_scatter, MPI_Allgather, MPI_Allgatherv, MPI_Bcast and
 * MPI_Alltoall it runs each case twice, through MPI_* and through PMPI_*, on identically
 * prefilled buffers, and requires every byte of the receive buffers (untouched ones included)
 * to be equal. Floating-point data holds small integers, so every order of summation gives the
 * same bits and the comparison is exact. Cases: predefined types and ops, MINLOC/MAXLOC pairs,
 * user-defined commutative and non-commutative ops, MPI_IN_PLACE, zero and odd counts, derived
 * datatypes with gaps (different on different ranks where MPI allows it), uneven and reordered
 * allgatherv/reduce_scatter counts, roots, sub-communicators, a reordered communicator and an
 * inter-communicator. Prints one checksum line per rank (the runner compares runs). */
#include "common.h"

#include <stdint.h>

static test_tally tally;

/* Values every rank can reproduce: small integers (exact in float and double). */
static void fill_values(void* buf, MPI_Datatype type, int count, int rank, int salt) {
    for (int i = 0; i < count; ++i) {
        const int v = (i * 7 + rank * 13 + salt) % 23 - 11; /* -11 .. 11 */
        if (type == MPI_INT)
            ((int*)buf)[i] = v;
        else if (type == MPI_UNSIGNED)
            ((unsigned*)buf)[i] = (unsigned)(v + 11) * 2654435761u;
        else if (type == MPI_LONG_LONG)
            ((long long*)buf)[i] = (long long)v * (1LL << 40); /* v may be negative: no shift */
        else if (type == MPI_SHORT)
            ((short*)buf)[i] = (short)(v * 3001);
        else if (type == MPI_UNSIGNED_CHAR)
            ((unsigned char*)buf)[i] = (unsigned char)(v * 37);
        else if (type == MPI_FLOAT)
            ((float*)buf)[i] = (float)v;
        else if (type == MPI_DOUBLE)
            ((double*)buf)[i] = (double)v * 0.5;
        else if (type == MPI_C_BOOL)
            ((_Bool*)buf)[i] = (v & 1) != 0;
        else
            SHUNT_TEST_REQUIRE(0, "fill_values: unexpected type");
    }
}

static size_t type_bytes(MPI_Datatype t) {
    int s = 0;
    SHUNT_TEST_MPI(MPI_Type_size(t, &s));
    return (size_t)s;
}

/* User-defined operations. */
static void user_max(void* in, void* inout, int* len, MPI_Datatype* t) {
    (void)t;
    for (int i = 0; i < *len; ++i)
        if (((int*)in)[i] > ((int*)inout)[i]) ((int*)inout)[i] = ((int*)in)[i];
}
static void user_affine(void* in, void* inout, int* len, MPI_Datatype* t) { /* non-commutative */
    (void)t;
    for (int i = 0; i < *len; ++i) ((int*)inout)[i] = ((int*)in)[i] * 3 + ((int*)inout)[i];
}

typedef struct {
    MPI_Datatype type;
    MPI_Op op;
    const char* name;
} red_case;

/* thorough: every case; else a third of them (the other communicators, to bound the run time
 * where MPI ranks oversubscribe the cores). */
static void reductions(MPI_Comm comm, const char* cname, MPI_Op umax, MPI_Op uaffine, int thorough) {
    int rank = 0, size = 0;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    const red_case cases[] = {
        {MPI_INT, MPI_SUM, "int sum"},
        {MPI_INT, MPI_PROD, "int prod"},
        {MPI_INT, MPI_MIN, "int min"},
        {MPI_INT, MPI_BXOR, "int bxor"},
        {MPI_UNSIGNED, MPI_SUM, "unsigned sum"},
        {MPI_LONG_LONG, MPI_MAX, "long long max"},
        {MPI_LONG_LONG, MPI_SUM, "long long sum"},
        {MPI_SHORT, MPI_PROD, "short prod"},
        {MPI_UNSIGNED_CHAR, MPI_BOR, "uchar bor"},
        {MPI_FLOAT, MPI_SUM, "float sum"},
        {MPI_DOUBLE, MPI_SUM, "double sum"},
        {MPI_DOUBLE, MPI_MIN, "double min"},
        {MPI_C_BOOL, MPI_LOR, "bool lor"},
        {MPI_INT, umax, "int user max"},
        {MPI_INT, uaffine, "int user non-commutative"},
        /* Values with the top bit set: MPICH 4.0 orders unsigned types as signed in MIN/MAX, and
         * shunt's results must still equal the library's. */
        {MPI_UNSIGNED, MPI_MAX, "unsigned max"},
        {MPI_UNSIGNED_CHAR, MPI_MIN, "uchar min"},
    };
    const int counts[] = {0, 1, 5, 1000, 40001};
    char what[200];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
        if (!thorough && c % 3 != 1) continue;
        const size_t es = type_bytes(cases[c].type);
        for (size_t k = 0; k < sizeof counts / sizeof counts[0]; ++k) {
            const int n = counts[k];
            if (n > 1000 && c % 3 != 0) continue; /* the long vectors for a third of the cases */
            void* in = malloc(es * (size_t)(n ? n : 1) * (size_t)size);
            SHUNT_TEST_REQUIRE(in != NULL, "out of memory");
            fill_values(in, cases[c].type, n * size, rank, (int)c);

            snprintf(what, sizeof what, "%s: MPI_Allreduce %s x %d", cname, cases[c].name, n);
            test_pair p = test_pair_make(es * (size_t)n + 16, 1u + (uint32_t)c);
            SHUNT_TEST_MPI(MPI_Allreduce(in, p.a, n, cases[c].type, cases[c].op, comm));
            SHUNT_TEST_MPI(PMPI_Allreduce(in, p.b, n, cases[c].type, cases[c].op, comm));
            test_pair_check(&p, what, comm, &tally);

            snprintf(what, sizeof what, "%s: MPI_Allreduce in place %s x %d", cname, cases[c].name, n);
            p = test_pair_make(es * (size_t)n + 16, 2u + (uint32_t)c);
            memcpy(p.a, in, es * (size_t)n);
            memcpy(p.b, in, es * (size_t)n);
            SHUNT_TEST_MPI(MPI_Allreduce(MPI_IN_PLACE, p.a, n, cases[c].type, cases[c].op, comm));
            SHUNT_TEST_MPI(PMPI_Allreduce(MPI_IN_PLACE, p.b, n, cases[c].type, cases[c].op, comm));
            test_pair_check(&p, what, comm, &tally);

            for (int root = 0; root < size; root += (size > 2 ? size - 1 : 1)) {
                snprintf(what, sizeof what, "%s: MPI_Reduce %s x %d root %d", cname, cases[c].name, n, root);
                p = test_pair_make(es * (size_t)n + 16, 3u + (uint32_t)c);
                SHUNT_TEST_MPI(MPI_Reduce(in, p.a, n, cases[c].type, cases[c].op, root, comm));
                SHUNT_TEST_MPI(PMPI_Reduce(in, p.b, n, cases[c].type, cases[c].op, root, comm));
                test_pair_check(&p, what, comm, &tally);
#ifdef MPICH_VERSION
                /* MPICH 4.0.2 crashes (segfault in its own memcpy) on an in-place reduce of 1000
                 * or more elements at a root other than 0, with or without shunt. */
                if (root != 0 && n >= 1000) continue;
#endif
                snprintf(what, sizeof what, "%s: MPI_Reduce in place %s x %d root %d", cname, cases[c].name, n, root);
                p = test_pair_make(es * (size_t)n + 16, 4u + (uint32_t)c);
                if (rank == root) {
                    memcpy(p.a, in, es * (size_t)n);
                    memcpy(p.b, in, es * (size_t)n);
                }
                SHUNT_TEST_MPI(
                    MPI_Reduce(rank == root ? MPI_IN_PLACE : in, p.a, n, cases[c].type, cases[c].op, root, comm));
                SHUNT_TEST_MPI(
                    PMPI_Reduce(rank == root ? MPI_IN_PLACE : in, p.b, n, cases[c].type, cases[c].op, root, comm));
                test_pair_check(&p, what, comm, &tally);
            }

            snprintf(what, sizeof what, "%s: MPI_Reduce_scatter_block %s x %d", cname, cases[c].name, n);
            p = test_pair_make(es * (size_t)n + 16, 5u + (uint32_t)c);
            SHUNT_TEST_MPI(MPI_Reduce_scatter_block(in, p.a, n, cases[c].type, cases[c].op, comm));
            SHUNT_TEST_MPI(PMPI_Reduce_scatter_block(in, p.b, n, cases[c].type, cases[c].op, comm));
            test_pair_check(&p, what, comm, &tally);

            snprintf(what, sizeof what, "%s: MPI_Reduce_scatter_block in place %s x %d", cname, cases[c].name, n);
            p = test_pair_make(es * (size_t)n * (size_t)size + 16, 6u + (uint32_t)c);
            memcpy(p.a, in, es * (size_t)n * (size_t)size);
            memcpy(p.b, in, es * (size_t)n * (size_t)size);
            unsigned char* before = (unsigned char*)malloc(p.n);
            SHUNT_TEST_REQUIRE(before != NULL, "out of memory");
            memcpy(before, p.a, p.n);
            SHUNT_TEST_MPI(MPI_Reduce_scatter_block(MPI_IN_PLACE, p.a, n, cases[c].type, cases[c].op, comm));
            SHUNT_TEST_MPI(PMPI_Reduce_scatter_block(MPI_IN_PLACE, p.b, n, cases[c].type, cases[c].op, comm));
            test_pair_accept_tail(&p, before, es * (size_t)n);
            test_pair_check(&p, what, comm, &tally);

            /* Uneven counts: rank r gets (r * n / 2 + r + 1) % (n + 1) elements, the last of 3 or more none. */
            int* rc = (int*)malloc(sizeof(int) * (size_t)size);
            int total = 0;
            for (int r = 0; r < size; ++r) {
                rc[r] = r == size - 1 && size > 2 ? 0 : (r * n / 2 + r + 1) % (n + 1);
                total += rc[r];
            }
            void* vin = malloc(es * (size_t)(total ? total : 1));
            fill_values(vin, cases[c].type, total, rank, (int)c + 1);
            snprintf(what, sizeof what, "%s: MPI_Reduce_scatter %s total %d", cname, cases[c].name, total);
            p = test_pair_make(es * (size_t)rc[rank] + 16, 7u + (uint32_t)c);
            SHUNT_TEST_MPI(MPI_Reduce_scatter(vin, p.a, rc, cases[c].type, cases[c].op, comm));
            SHUNT_TEST_MPI(PMPI_Reduce_scatter(vin, p.b, rc, cases[c].type, cases[c].op, comm));
            test_pair_check(&p, what, comm, &tally);

            snprintf(what, sizeof what, "%s: MPI_Reduce_scatter in place %s total %d", cname, cases[c].name, total);
            p = test_pair_make(es * (size_t)total + 16, 8u + (uint32_t)c);
            memcpy(p.a, vin, es * (size_t)total);
            memcpy(p.b, vin, es * (size_t)total);
            before = (unsigned char*)realloc(before, p.n);
            SHUNT_TEST_REQUIRE(before != NULL, "out of memory");
            memcpy(before, p.a, p.n);
            SHUNT_TEST_MPI(MPI_Reduce_scatter(MPI_IN_PLACE, p.a, rc, cases[c].type, cases[c].op, comm));
            SHUNT_TEST_MPI(PMPI_Reduce_scatter(MPI_IN_PLACE, p.b, rc, cases[c].type, cases[c].op, comm));
            test_pair_accept_tail(&p, before, es * (size_t)rc[rank]);
            test_pair_check(&p, what, comm, &tally);
            free(before);
            free(vin);
            free(rc);
            free(in);
        }
    }

    /* MAXLOC on the pair type MPI_2INT (the library's own local reduction). */
    {
        const int n = 333;
        int* in = (int*)malloc(sizeof(int) * 2 * n);
        for (int i = 0; i < n; ++i) {
            in[2 * i] = (i * 5 + rank * 3) % 7;
            in[2 * i + 1] = rank;
        }
        snprintf(what, sizeof what, "%s: MPI_Allreduce MPI_2INT MAXLOC", cname);
        test_pair p = test_pair_make(sizeof(int) * 2 * n, 99);
        SHUNT_TEST_MPI(MPI_Allreduce(in, p.a, n, MPI_2INT, MPI_MAXLOC, comm));
        SHUNT_TEST_MPI(PMPI_Allreduce(in, p.b, n, MPI_2INT, MPI_MAXLOC, comm));
        test_pair_check(&p, what, comm, &tally);
        free(in);
    }
}

/* A datatype with gaps holding `n` ints: every other int of 2n (a vector), resized to 2n ints. */
static MPI_Datatype gappy_ints(int n) {
    MPI_Datatype v, r;
    SHUNT_TEST_MPI(MPI_Type_vector(n, 1, 2, MPI_INT, &v));
    SHUNT_TEST_MPI(MPI_Type_create_resized(v, 0, (MPI_Aint)(2 * n * (int)sizeof(int)), &r));
    SHUNT_TEST_MPI(MPI_Type_free(&v));
    SHUNT_TEST_MPI(MPI_Type_commit(&r));
    return r;
}

static void data_movers(MPI_Comm comm, const char* cname, int thorough) {
    int rank = 0, size = 0;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    const int counts[] = {0, 1, 3, 777, 20000};
    char what[200];
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; ++k) {
        const int n = counts[k];
        if (!thorough && k % 2 == 1) continue;
        const size_t bytes = sizeof(int) * (size_t)n;
        int* in = (int*)malloc(bytes * (size_t)size + 4);
        test_fill(in, bytes * (size_t)size + 4, 11u + (uint32_t)rank * 31u + (uint32_t)k);

        /* Allgather: plain, in place, and with a gappy receive type (n ints per element). */
        snprintf(what, sizeof what, "%s: MPI_Allgather %d ints", cname, n);
        test_pair p = test_pair_make(bytes * (size_t)size + 8, 21);
        SHUNT_TEST_MPI(MPI_Allgather(in, n, MPI_INT, p.a, n, MPI_INT, comm));
        SHUNT_TEST_MPI(PMPI_Allgather(in, n, MPI_INT, p.b, n, MPI_INT, comm));
        test_pair_check(&p, what, comm, &tally);

        snprintf(what, sizeof what, "%s: MPI_Allgather in place %d ints", cname, n);
        p = test_pair_make(bytes * (size_t)size + 8, 22);
        memcpy(p.a + bytes * (size_t)rank, in, bytes);
        memcpy(p.b + bytes * (size_t)rank, in, bytes);
        SHUNT_TEST_MPI(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, p.a, n, MPI_INT, comm));
        SHUNT_TEST_MPI(PMPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, p.b, n, MPI_INT, comm));
        test_pair_check(&p, what, comm, &tally);

        if (n > 0) {
            MPI_Datatype g = gappy_ints(n), block;
            SHUNT_TEST_MPI(MPI_Type_contiguous(n, MPI_INT, &block));
            SHUNT_TEST_MPI(MPI_Type_commit(&block));
            snprintf(what, sizeof what, "%s: MPI_Allgather %d ints into a type with gaps", cname, n);
            p = test_pair_make(2 * bytes * (size_t)size + 8, 23);
            /* Odd ranks send one element of a contiguous type, even ranks n ints. */
            SHUNT_TEST_MPI(MPI_Allgather(in, rank % 2 ? 1 : n, rank % 2 ? block : MPI_INT, p.a, 1, g, comm));
            SHUNT_TEST_MPI(PMPI_Allgather(in, rank % 2 ? 1 : n, rank % 2 ? block : MPI_INT, p.b, 1, g, comm));
            test_pair_check(&p, what, comm, &tally);

            snprintf(what, sizeof what, "%s: MPI_Bcast %d ints, a type with gaps on odd ranks", cname, n);
            for (int root = 0; root < size; root += (size > 2 ? size - 1 : 1)) {
                p = test_pair_make(2 * bytes + 8, 24u + (uint32_t)rank);
                if (rank == root) {
                    memcpy(p.a, in, 2 * bytes < bytes * (size_t)size ? 2 * bytes : bytes);
                    memcpy(p.b, p.a, p.n);
                }
                SHUNT_TEST_MPI(MPI_Bcast(p.a, rank % 2 ? 1 : n, rank % 2 ? g : MPI_INT, root, comm));
                SHUNT_TEST_MPI(PMPI_Bcast(p.b, rank % 2 ? 1 : n, rank % 2 ? g : MPI_INT, root, comm));
                test_pair_check(&p, what, comm, &tally);
            }

            snprintf(what, sizeof what, "%s: MPI_Alltoall %d ints, a type with gaps on receive", cname, n);
            p = test_pair_make(2 * bytes * (size_t)size + 8, 25);
            SHUNT_TEST_MPI(MPI_Alltoall(in, n, MPI_INT, p.a, 1, g, comm));
            SHUNT_TEST_MPI(PMPI_Alltoall(in, n, MPI_INT, p.b, 1, g, comm));
            test_pair_check(&p, what, comm, &tally);
            SHUNT_TEST_MPI(MPI_Type_free(&g));
            SHUNT_TEST_MPI(MPI_Type_free(&block));
        }

        snprintf(what, sizeof what, "%s: MPI_Bcast %d ints", cname, n);
        for (int root = 0; root < size; ++root) {
            p = test_pair_make(bytes + 8, 26u + (uint32_t)rank);
            memcpy(p.b, p.a, p.n);
            SHUNT_TEST_MPI(MPI_Bcast(p.a, n, MPI_INT, root, comm));
            SHUNT_TEST_MPI(PMPI_Bcast(p.b, n, MPI_INT, root, comm));
            test_pair_check(&p, what, comm, &tally);
        }

        snprintf(what, sizeof what, "%s: MPI_Alltoall %d ints", cname, n);
        p = test_pair_make(bytes * (size_t)size + 8, 27);
        SHUNT_TEST_MPI(MPI_Alltoall(in, n, MPI_INT, p.a, n, MPI_INT, comm));
        SHUNT_TEST_MPI(PMPI_Alltoall(in, n, MPI_INT, p.b, n, MPI_INT, comm));
        test_pair_check(&p, what, comm, &tally);

        snprintf(what, sizeof what, "%s: MPI_Alltoall in place %d ints", cname, n);
        p = test_pair_make(bytes * (size_t)size + 8, 28);
        memcpy(p.a, in, bytes * (size_t)size);
        memcpy(p.b, in, bytes * (size_t)size);
        SHUNT_TEST_MPI(MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, p.a, n, MPI_INT, comm));
        SHUNT_TEST_MPI(PMPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, p.b, n, MPI_INT, comm));
        test_pair_check(&p, what, comm, &tally);

        /* Allgatherv: uneven counts (rank r sends (r + 1) * n / size + r % 2 ints), displacements
         * in reverse rank order with gaps, and the same in place; then packed in rank order. */
        int* rcounts = (int*)malloc(sizeof(int) * (size_t)size);
        int* displs = (int*)malloc(sizeof(int) * (size_t)size);
        int* packed = (int*)malloc(sizeof(int) * (size_t)size);
        int span = 0, at = 0;
        for (int r = 0; r < size; ++r) span += (rcounts[r] = (r + 1) * n / size + r % 2) + 3;
        for (int r = size - 1, pos = 0; r >= 0; --r) {
            displs[r] = pos;
            pos += rcounts[r] + 3;
        }
        for (int r = 0; r < size; ++r) {
            packed[r] = at;
            at += rcounts[r];
        }
        snprintf(what, sizeof what, "%s: MPI_Allgatherv around %d ints, reversed with gaps", cname, n);
        p = test_pair_make(sizeof(int) * (size_t)span + 8, 29);
        SHUNT_TEST_MPI(MPI_Allgatherv(in, rcounts[rank], MPI_INT, p.a, rcounts, displs, MPI_INT, comm));
        SHUNT_TEST_MPI(PMPI_Allgatherv(in, rcounts[rank], MPI_INT, p.b, rcounts, displs, MPI_INT, comm));
        test_pair_check(&p, what, comm, &tally);

        snprintf(what, sizeof what, "%s: MPI_Allgatherv in place around %d ints", cname, n);
        p = test_pair_make(sizeof(int) * (size_t)span + 8, 30);
        memcpy(p.a + sizeof(int) * (size_t)displs[rank], in, sizeof(int) * (size_t)rcounts[rank]);
        memcpy(p.b + sizeof(int) * (size_t)displs[rank], in, sizeof(int) * (size_t)rcounts[rank]);
        SHUNT_TEST_MPI(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, p.a, rcounts, displs, MPI_INT, comm));
        SHUNT_TEST_MPI(PMPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, p.b, rcounts, displs, MPI_INT, comm));
        test_pair_check(&p, what, comm, &tally);

        snprintf(what, sizeof what, "%s: MPI_Allgatherv packed around %d ints", cname, n);
        p = test_pair_make(sizeof(int) * (size_t)at + 8, 31);
        SHUNT_TEST_MPI(MPI_Allgatherv(in, rcounts[rank], MPI_INT, p.a, rcounts, packed, MPI_INT, comm));
        SHUNT_TEST_MPI(PMPI_Allgatherv(in, rcounts[rank], MPI_INT, p.b, rcounts, packed, MPI_INT, comm));
        test_pair_check(&p, what, comm, &tally);
        free(rcounts);
        free(displs);
        free(packed);

        /* Alltoallv: count(i -> j) the same formula on every rank, some pairs empty; send blocks
         * in reverse rank order one element apart, receive blocks in rank order two apart; then
         * in place (symmetric counts); then odd ranks send with a type of one int per 8 bytes. */
        {
            int *sc = (int*)malloc(sizeof(int) * (size_t)size), *sd = (int*)malloc(sizeof(int) * (size_t)size);
            int *rc = (int*)malloc(sizeof(int) * (size_t)size), *rd = (int*)malloc(sizeof(int) * (size_t)size);
            SHUNT_TEST_REQUIRE(sc && sd && rc && rd, "out of memory");
#define A2AV_COUNT(i, j) ((((i)*7 + (j)*3 + n) % 5) * n / 4)
            int sspan = 0, rspan = 0;
            for (int j = size - 1; j >= 0; --j) {
                sc[j] = A2AV_COUNT(rank, j);
                sd[j] = sspan;
                sspan += sc[j] + 1;
            }
            for (int i = 0; i < size; ++i) {
                rc[i] = A2AV_COUNT(i, rank);
                rd[i] = rspan;
                rspan += rc[i] + 2;
            }
            int* src = (int*)malloc(sizeof(int) * 2 * (size_t)sspan + 8);
            SHUNT_TEST_REQUIRE(src != NULL, "out of memory");
            test_fill(src, sizeof(int) * 2 * (size_t)sspan + 8, 41u + (uint32_t)rank);
            snprintf(what, sizeof what, "%s: MPI_Alltoallv around %d ints, uneven, reversed with gaps", cname, n);
            p = test_pair_make(sizeof(int) * (size_t)rspan + 8, 42);
            SHUNT_TEST_MPI(MPI_Alltoallv(src, sc, sd, MPI_INT, p.a, rc, rd, MPI_INT, comm));
            SHUNT_TEST_MPI(PMPI_Alltoallv(src, sc, sd, MPI_INT, p.b, rc, rd, MPI_INT, comm));
            test_pair_check(&p, what, comm, &tally);

            MPI_Datatype spaced;
            SHUNT_TEST_MPI(MPI_Type_create_resized(MPI_INT, 0, 2 * (MPI_Aint)sizeof(int), &spaced));
            SHUNT_TEST_MPI(MPI_Type_commit(&spaced));
            snprintf(what, sizeof what, "%s: MPI_Alltoallv around %d ints, odd ranks send one int per 8 bytes", cname,
                     n);
            p = test_pair_make(sizeof(int) * (size_t)rspan + 8, 43);
            SHUNT_TEST_MPI(MPI_Alltoallv(src, sc, sd, rank % 2 ? spaced : MPI_INT, p.a, rc, rd, MPI_INT, comm));
            SHUNT_TEST_MPI(PMPI_Alltoallv(src, sc, sd, rank % 2 ? spaced : MPI_INT, p.b, rc, rd, MPI_INT, comm));
            test_pair_check(&p, what, comm, &tally);
            SHUNT_TEST_MPI(MPI_Type_free(&spaced));

            rspan = 0;
            for (int i = 0; i < size; ++i) {
                rc[i] = A2AV_COUNT(i < rank ? i : rank, i < rank ? rank : i);
                rd[i] = rspan;
                rspan += rc[i] + 1;
            }
#undef A2AV_COUNT
            snprintf(what, sizeof what, "%s: MPI_Alltoallv in place around %d ints", cname, n);
            p = test_pair_make(sizeof(int) * (size_t)rspan + 8, 44u + (uint32_t)rank);
            SHUNT_TEST_MPI(MPI_Alltoallv(MPI_IN_PLACE, NULL, NULL, MPI_DATATYPE_NULL, p.a, rc, rd, MPI_INT, comm));
            SHUNT_TEST_MPI(PMPI_Alltoallv(MPI_IN_PLACE, NULL, NULL, MPI_DATATYPE_NULL, p.b, rc, rd, MPI_INT, comm));
            test_pair_check(&p, what, comm, &tally);
            free(src);
            free(sc);
            free(sd);
            free(rc);
            free(rd);
        }
        free(in);
    }
}

/* Floating-point reductions repeated on the same data must give the same bits every time, as the
 * library's do (regression: while deciding, shunt alternated the library and its schedule on the
 * application's data, whose sums differ in the last bits). Data with no exact sum (mantissas and
 * magnitudes vary), so any change of algorithm shows. Only the count of calls is noted: shunt's
 * bits may differ from the library's (reassociation). */
static void repeatable(MPI_Comm comm) {
    int rank = 0, size = 0;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    for (int n = 1024; n <= 65536; n *= 64) {
        double* in = (double*)malloc((size_t)n * (size_t)size * sizeof(double));
        double* first = (double*)malloc((size_t)n * (size_t)size * sizeof(double));
        double* out = (double*)malloc((size_t)n * (size_t)size * sizeof(double));
        SHUNT_TEST_REQUIRE(in && first && out, "out of memory");
        uint32_t x = 2654435761u * (uint32_t)(rank + 1);
        for (int i = 0; i < n * size; ++i) {
            x ^= x << 13, x ^= x >> 17, x ^= x << 5;
            in[i] = (double)x / 4294967296.0 * (rank % 2 ? 1e-3 : 1e5) - 0.37;
        }
        for (int op = 0; op < 3; ++op) {
            for (int call = 0; call < 12; ++call) {
                double* got = call == 0 ? first : out;
                if (op == 0)
                    SHUNT_TEST_MPI(MPI_Allreduce(in, got, n, MPI_DOUBLE, MPI_SUM, comm));
                else if (op == 1)
                    SHUNT_TEST_MPI(MPI_Reduce_scatter_block(in, got, n, MPI_DOUBLE, MPI_SUM, comm));
                else
                    SHUNT_TEST_MPI(MPI_Reduce(in, got, n, MPI_DOUBLE, MPI_SUM, 0, comm));
                if (call > 0 && (op != 2 || rank == 0))
                    SHUNT_TEST_REQUIRE(memcmp(got, first, (size_t)n * sizeof(double)) == 0,
                                       "%s of %d doubles: call %d differs from call 0 (rank %d)",
                                       op == 0   ? "MPI_Allreduce"
                                       : op == 1 ? "MPI_Reduce_scatter_block"
                                                 : "MPI_Reduce",
                                       n, call, rank);
            }
            tally.checks += 11;
        }
        free(in);
        free(first);
        free(out);
    }
}

/* Arguments that differ per rank in valid calls (regression: a null buffer sent one rank to the
 * library while the others ran shunt's schedule, and the job hung): rank 0 receives at MPI_BOTTOM
 * through a datatype of absolute addresses, the others into plain buffers, in MPI_Bcast,
 * MPI_Allgather and MPI_Alltoall, each checked against the same call through PMPI_*. */
static void bottom(MPI_Comm comm) {
    int rank = 0, size = 0;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    enum { n = 6 };
    int* send = (int*)malloc((size_t)(n * size) * sizeof(int));
    SHUNT_TEST_REQUIRE(send != NULL, "out of memory");
    for (int i = 0; i < n * size; ++i) send[i] = 1000 * rank + i;
    for (int which = 0; which < 3; ++which) {
        const int elems = which == 0 ? n : n * size;
        test_pair p = test_pair_make((size_t)elems * sizeof(int), 51u + (uint32_t)which);
        MPI_Datatype abs_a = MPI_DATATYPE_NULL, abs_b = MPI_DATATYPE_NULL; /* n ints at p.a / p.b, extent n ints */
        if (rank == 0) {
            for (int k = 0; k < 2; ++k) {
                MPI_Aint at = 0;
                SHUNT_TEST_MPI(MPI_Get_address(k == 0 ? p.a : p.b, &at));
                MPI_Datatype one, blocks;
                int len = n;
                SHUNT_TEST_MPI(MPI_Type_create_hindexed(1, &len, &at, MPI_INT, &one));
                SHUNT_TEST_MPI(MPI_Type_create_resized(one, 0, (MPI_Aint)(n * sizeof(int)), &blocks));
                SHUNT_TEST_MPI(MPI_Type_free(&one));
                SHUNT_TEST_MPI(MPI_Type_commit(&blocks));
                *(k == 0 ? &abs_a : &abs_b) = blocks;
            }
        }
        /* Through MPI_* into p.a, then through PMPI_* into p.b. */
        for (int k = 0; k < 2; ++k) {
            void* buf = rank == 0 ? MPI_BOTTOM : (k == 0 ? p.a : p.b);
            const MPI_Datatype t = rank == 0 ? (k == 0 ? abs_a : abs_b) : MPI_INT;
            const int per = rank == 0 ? 1 : n; /* elements of t per rank */
            if (which == 0) {
                if (rank == 1 % size) memcpy(k == 0 ? p.a : p.b, send, n * sizeof(int)); /* where buf's data lies */
                SHUNT_TEST_MPI(k == 0 ? MPI_Bcast(buf, per, t, 1 % size, comm)
                                      : PMPI_Bcast(buf, per, t, 1 % size, comm));
            } else if (which == 1) {
                SHUNT_TEST_MPI(k == 0 ? MPI_Allgather(send, n, MPI_INT, buf, per, t, comm)
                                      : PMPI_Allgather(send, n, MPI_INT, buf, per, t, comm));
            } else {
                SHUNT_TEST_MPI(k == 0 ? MPI_Alltoall(send, n, MPI_INT, buf, per, t, comm)
                                      : PMPI_Alltoall(send, n, MPI_INT, buf, per, t, comm));
            }
        }
        test_pair_check(&p,
                        which == 0   ? "MPI_Bcast at MPI_BOTTOM on rank 0"
                        : which == 1 ? "MPI_Allgather at MPI_BOTTOM on rank 0"
                                     : "MPI_Alltoall at MPI_BOTTOM on rank 0",
                        comm, &tally);
        if (rank == 0) {
            SHUNT_TEST_MPI(MPI_Type_free(&abs_a));
            SHUNT_TEST_MPI(MPI_Type_free(&abs_b));
        }
    }
    free(send);
}

/* A datatype that was never committed, under MPI_ERRORS_RETURN: an error, of the same class as the
 * library's (the runner compares the hash of the classes), on every rank (regression: shunt moved
 * a dense one as bytes and succeeded, and aborted the job packing one with gaps). */
static void uncommitted(MPI_Comm comm) {
    MPI_Comm errs;
    SHUNT_TEST_MPI(MPI_Comm_dup(comm, &errs));
    SHUNT_TEST_MPI(MPI_Comm_set_errhandler(errs, MPI_ERRORS_RETURN));
    int size = 0;
    MPI_Comm_size(errs, &size);
    MPI_Datatype dense, gappy;
    SHUNT_TEST_MPI(MPI_Type_contiguous(3, MPI_INT, &dense));
    SHUNT_TEST_MPI(MPI_Type_vector(3, 1, 2, MPI_INT, &gappy));
    int* a = (int*)calloc((size_t)(64 * size), sizeof(int));
    int* b = (int*)calloc((size_t)(64 * size), sizeof(int));
    SHUNT_TEST_REQUIRE(a && b, "out of memory");
    for (int which = 0; which < 5; ++which) {
        int rc = MPI_SUCCESS, cls = -1;
        if (which == 0)
            rc = MPI_Bcast(a, 4, dense, 0, errs);
        else if (which == 1)
            rc = MPI_Bcast(a, 4, gappy, 0, errs);
        else if (which == 2)
            rc = MPI_Allgather(a, 2, dense, b, 2, dense, errs);
        else if (which == 3)
            rc = MPI_Alltoall(a, 2, dense, b, 2, dense, errs);
        else
            rc = MPI_Allreduce(a, b, 2, dense, MPI_SUM, errs);
        MPI_Error_class(rc, &cls);
        tally.hash = test_hash_int(tally.hash, 100 * which + cls);
        tally.checks += 1;
        SHUNT_TEST_REQUIRE(rc != MPI_SUCCESS, "uncommitted datatype, call %d: no error", which);
    }
    free(a);
    free(b);
    SHUNT_TEST_MPI(MPI_Type_free(&dense));
    SHUNT_TEST_MPI(MPI_Type_free(&gappy));
    SHUNT_TEST_MPI(MPI_Comm_free(&errs));
}

/* In-place reduce-scatters leave the buffer past this rank's block as it was (regression: shunt
 * reduced the whole vector inside the user's buffer once its schedule ran, and overwrote the tail;
 * found by mpi4py's testReduceScatter). Each rank fills the buffer with its rank and makes ten
 * in-place MPI_MIN calls, the first ones while shunt decides; the block must be the library's
 * result and the rest still the rank's number, or as the library leaves it (it may use it as
 * scratch). */
static void in_place_tail(MPI_Comm comm) {
    int rank = 0, size = 0;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    enum { n = 4096 };
    int* counts = (int*)malloc(sizeof(int) * (size_t)size);
    SHUNT_TEST_REQUIRE(counts != NULL, "out of memory");
    for (int r = 0; r < size; ++r) counts[r] = n / 2 + r;
    int total = 0;
    for (int r = 0; r < size; ++r) total += counts[r];
    unsigned char* before = (unsigned char*)malloc(sizeof(int) * (size_t)(total > n * size ? total : n * size));
    SHUNT_TEST_REQUIRE(before != NULL, "out of memory");
    char what[160];
    for (int call = 0; call < 10; ++call) {
        for (int block = 0; block < 2; ++block) {
            const int elems = block ? n * size : total;
            test_pair p = test_pair_make(sizeof(int) * (size_t)elems, 61u + (uint32_t)call);
            for (int i = 0; i < elems; ++i) ((int*)p.a)[i] = ((int*)p.b)[i] = rank;
            memcpy(before, p.a, p.n);
            if (block) {
                SHUNT_TEST_MPI(MPI_Reduce_scatter_block(MPI_IN_PLACE, p.a, n, MPI_INT, MPI_MIN, comm));
                SHUNT_TEST_MPI(PMPI_Reduce_scatter_block(MPI_IN_PLACE, p.b, n, MPI_INT, MPI_MIN, comm));
            } else {
                SHUNT_TEST_MPI(MPI_Reduce_scatter(MPI_IN_PLACE, p.a, counts, MPI_INT, MPI_MIN, comm));
                SHUNT_TEST_MPI(PMPI_Reduce_scatter(MPI_IN_PLACE, p.b, counts, MPI_INT, MPI_MIN, comm));
            }
            test_pair_accept_tail(&p, before, sizeof(int) * (size_t)(block ? n : counts[rank]));
            snprintf(what, sizeof what, "%s in place, MPI_MIN of ranks, call %d: the tail past the block",
                     block ? "MPI_Reduce_scatter_block" : "MPI_Reduce_scatter", call);
            test_pair_check(&p, what, comm, &tally);
        }
    }
    free(before);
    free(counts);
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    tally.hash = 1469598103934665603ull;
    MPI_Op umax, uaffine;
    SHUNT_TEST_MPI(MPI_Op_create(user_max, 1, &umax));
    SHUNT_TEST_MPI(MPI_Op_create(user_affine, 0, &uaffine));

    reductions(MPI_COMM_WORLD, "world", umax, uaffine, 1);
    data_movers(MPI_COMM_WORLD, "world", 1);
    repeatable(MPI_COMM_WORLD);
    in_place_tail(MPI_COMM_WORLD);
    bottom(MPI_COMM_WORLD);
    uncommitted(MPI_COMM_WORLD);

    /* A reordered communicator (ranks reversed) and the halves of the world. */
    MPI_Comm reversed, half;
    SHUNT_TEST_MPI(MPI_Comm_split(MPI_COMM_WORLD, 0, size - rank, &reversed));
    reductions(reversed, "reversed", umax, uaffine, 0);
    data_movers(reversed, "reversed", 0);
    SHUNT_TEST_MPI(MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half));
    reductions(half, "half", umax, uaffine, 0);
    data_movers(half, "half", 0);

    /* An inter-communicator between the halves: left to the library, results equal. */
    if (size >= 2) {
        MPI_Comm inter;
        SHUNT_TEST_MPI(MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, rank % 2 ? 0 : 1, 77, &inter));
        int in[4] = {rank, rank * 2, -rank, 5};
        test_pair p = test_pair_make(sizeof in, 41);
        SHUNT_TEST_MPI(MPI_Allreduce(in, p.a, 4, MPI_INT, MPI_SUM, inter));
        SHUNT_TEST_MPI(PMPI_Allreduce(in, p.b, 4, MPI_INT, MPI_SUM, inter));
        test_pair_check(&p, "inter-communicator MPI_Allreduce", MPI_COMM_WORLD, &tally);
        SHUNT_TEST_MPI(MPI_Comm_free(&inter));
    }
    SHUNT_TEST_MPI(MPI_Comm_free(&half));
    SHUNT_TEST_MPI(MPI_Comm_free(&reversed));
    SHUNT_TEST_MPI(MPI_Op_free(&umax));
    SHUNT_TEST_MPI(MPI_Op_free(&uaffine));

    char line[160];
    snprintf(line, sizeof line, "rank %d: %ld collective results equal to the library's, %lld bytes, hash %016llx",
             rank, tally.checks, tally.bytes, (unsigned long long)tally.hash);
    test_print_ranks(MPI_COMM_WORLD, line);
    MPI_Finalize();
    return 0;
}
