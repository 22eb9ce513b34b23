/* tests/interpose/coll_nbc.c: the nonblocking and persistent collectives (MPI_I*, MPI_*_init; shunt's when preloaded) against the library's blocking ones (PMPI_*), byte for byte, completed every way MPI allows.
 *
 * A plain MPI program that knows nothing of shunt. Each case runs the nonblocking call on one
 * buffer and the library's blocking call (PMPI_*) on an identically prefilled one, and requires
 * every byte equal (untouched ones included). Integer data, so every order of reduction gives the
 * same result. Covered: every nonblocking collective shunt runs, in place, zero and odd counts,
 * datatypes with gaps; completion by MPI_Wait, MPI_Test loops, MPI_Waitall / MPI_Waitany /
 * MPI_Waitsome / MPI_Testall / MPI_Testsome / MPI_Testany mixed with point-to-point requests;
 * several in flight on one communicator and on several; MPI_Request_free and MPI_Cancel of their
 * requests (refused alike, the class hashed) and of a point-to-point request completed by a later
 * barrier; ranks that wait in point-to-point calls while another waits for their progress; persistent collectives (MPI 4; Open MPI's MPIX_ extension, which goes to the library)
 * started many times. Prints one checksum line per rank (the runner compares runs). */
#include "common.h"

#if !defined(MPICH_VERSION) && defined(OPEN_MPI)
#include <mpi-ext.h>
#endif

static test_tally tally;

/* Small integers (exact in every type used). */
static void fill_ints(int* buf, int count, int rank, int salt) {
    for (int i = 0; i < count; ++i) buf[i] = (i * 7 + rank * 13 + salt) % 23 - 11;
}

/* How a case's request is completed: each case takes the next way. */
enum { by_wait, by_test, by_waitall, by_waitany, by_waitsome, by_testall, by_testsome, by_testany, ways };
static int next_way = 0;

/* Completes `req` (a collective's) the next way, together with a ring exchange of point-to-point
 * requests for the ways that take several (their data is checked too). */
static void complete(MPI_Request* req, MPI_Comm comm) {
    const int way = next_way++ % ways;
    int rank = 0, size = 0;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    if (way == by_wait) {
        MPI_Status st;
        SHUNT_TEST_MPI(MPI_Wait(req, &st));
        SHUNT_TEST_REQUIRE(*req == MPI_REQUEST_NULL, "MPI_Wait left the request");
        return;
    }
    if (way == by_test) {
        int flag = 0;
        while (!flag) SHUNT_TEST_MPI(MPI_Test(req, &flag, MPI_STATUS_IGNORE));
        SHUNT_TEST_REQUIRE(*req == MPI_REQUEST_NULL, "MPI_Test left the request");
        return;
    }
    /* Three requests: the collective between a receive from the left and a send to the right. */
    int out = 1000 * rank + way, in = -1;
    MPI_Request r[3];
    SHUNT_TEST_MPI(MPI_Irecv(&in, 1, MPI_INT, (rank + size - 1) % size, 70 + way, comm, &r[0]));
    r[1] = *req;
    SHUNT_TEST_MPI(MPI_Isend(&out, 1, MPI_INT, (rank + 1) % size, 70 + way, comm, &r[2]));
    MPI_Status st[3];
    int done = 0, idx[3], n = 0, flag = 0;
    switch (way) {
        case by_waitall: SHUNT_TEST_MPI(MPI_Waitall(3, r, st)); break;
        case by_testall:
            while (!flag) SHUNT_TEST_MPI(MPI_Testall(3, r, &flag, st));
            break;
        case by_waitany:
            for (done = 0; done < 3; ++done) SHUNT_TEST_MPI(MPI_Waitany(3, r, &idx[0], &st[0]));
            SHUNT_TEST_MPI(MPI_Waitany(3, r, &idx[0], &st[0]));
            SHUNT_TEST_REQUIRE(idx[0] == MPI_UNDEFINED, "MPI_Waitany of no active request: index %d", idx[0]);
            break;
        case by_testany:
            while (done < 3) {
                SHUNT_TEST_MPI(MPI_Testany(3, r, &idx[0], &flag, &st[0]));
                if (flag && idx[0] != MPI_UNDEFINED) ++done;
            }
            break;
        case by_waitsome:
            while (done < 3) {
                SHUNT_TEST_MPI(MPI_Waitsome(3, r, &n, idx, st));
                SHUNT_TEST_REQUIRE(n != MPI_UNDEFINED && n > 0, "MPI_Waitsome returned %d", n);
                done += n;
            }
            break;
        case by_testsome:
            while (done < 3) {
                SHUNT_TEST_MPI(MPI_Testsome(3, r, &n, idx, st));
                SHUNT_TEST_REQUIRE(n != MPI_UNDEFINED, "MPI_Testsome found no active request");
                done += n;
            }
            break;
    }
    for (int i = 0; i < 3; ++i) SHUNT_TEST_REQUIRE(r[i] == MPI_REQUEST_NULL, "request %d left after completion", i);
    SHUNT_TEST_REQUIRE(in == 1000 * ((rank + size - 1) % size) + way, "ring message %d, expected %d", in,
                       1000 * ((rank + size - 1) % size) + way);
    *req = MPI_REQUEST_NULL;
}

/* A datatype with gaps holding `n` ints: every other int of 2n, resized to 2n ints. */
static MPI_Datatype gappy_ints(int n) {
    MPI_Datatype v, r;
    SHUNT_TEST_MPI(MPI_Type_vector(n, 1, 2, MPI_INT, &v));
    SHUNT_TEST_MPI(MPI_Type_create_resized(v, 0, (MPI_Aint)(2 * n * (int)sizeof(int)), &r));
    SHUNT_TEST_MPI(MPI_Type_free(&v));
    SHUNT_TEST_MPI(MPI_Type_commit(&r));
    return r;
}

typedef struct {
    MPI_Datatype type;
    MPI_Op op;
    const char* name;
} red_case;

static void reductions(MPI_Comm comm, const char* cname) {
    int rank = 0, size = 0;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    const red_case cases[] = {
        {MPI_INT, MPI_SUM, "int sum"}, {MPI_INT, MPI_MAX, "int max"}, {MPI_INT, MPI_BXOR, "int bxor"}};
    const int counts[] = {0, 1, 5, 1000, 40001};
    char what[200];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
        for (size_t k = 0; k < sizeof counts / sizeof counts[0]; ++k) {
            const int n = counts[k];
            if (n > 1000 && c > 0) continue; /* the long vector for the first case */
            const size_t bytes = sizeof(int) * (size_t)n;
            int* in = (int*)malloc(bytes * (size_t)size + 4);
            SHUNT_TEST_REQUIRE(in != NULL, "out of memory");
            fill_ints(in, n * size, rank, (int)c);
            MPI_Request r;

            snprintf(what, sizeof what, "%s: MPI_Iallreduce %s x %d", cname, cases[c].name, n);
            test_pair p = test_pair_make(bytes + 16, 1u + (uint32_t)c);
            SHUNT_TEST_MPI(MPI_Iallreduce(in, p.a, n, cases[c].type, cases[c].op, comm, &r));
            complete(&r, comm);
            SHUNT_TEST_MPI(PMPI_Allreduce(in, p.b, n, cases[c].type, cases[c].op, comm));
            test_pair_check(&p, what, comm, &tally);

            snprintf(what, sizeof what, "%s: MPI_Iallreduce in place %s x %d", cname, cases[c].name, n);
            p = test_pair_make(bytes + 16, 2u + (uint32_t)c);
            memcpy(p.a, in, bytes);
            memcpy(p.b, in, bytes);
            SHUNT_TEST_MPI(MPI_Iallreduce(MPI_IN_PLACE, p.a, n, cases[c].type, cases[c].op, comm, &r));
            complete(&r, comm);
            SHUNT_TEST_MPI(PMPI_Allreduce(MPI_IN_PLACE, p.b, n, cases[c].type, cases[c].op, comm));
            test_pair_check(&p, what, comm, &tally);

            const int root = (int)(k + c) % size;
            snprintf(what, sizeof what, "%s: MPI_Ireduce %s x %d root %d", cname, cases[c].name, n, root);
            p = test_pair_make(bytes + 16, 3u + (uint32_t)c);
            SHUNT_TEST_MPI(MPI_Ireduce(in, p.a, n, cases[c].type, cases[c].op, root, comm, &r));
            complete(&r, comm);
            SHUNT_TEST_MPI(PMPI_Reduce(in, p.b, n, cases[c].type, cases[c].op, root, comm));
            test_pair_check(&p, what, comm, &tally);

            snprintf(what, sizeof what, "%s: MPI_Ireduce in place %s x %d root 0", cname, cases[c].name, n);
            p = test_pair_make(bytes + 16, 4u + (uint32_t)c);
            if (rank == 0) {
                memcpy(p.a, in, bytes);
                memcpy(p.b, in, bytes);
            }
            SHUNT_TEST_MPI(MPI_Ireduce(rank == 0 ? MPI_IN_PLACE : in, p.a, n, cases[c].type, cases[c].op, 0, comm, &r));
            complete(&r, comm);
            SHUNT_TEST_MPI(PMPI_Reduce(rank == 0 ? MPI_IN_PLACE : in, p.b, n, cases[c].type, cases[c].op, 0, comm));
            test_pair_check(&p, what, comm, &tally);

            snprintf(what, sizeof what, "%s: MPI_Ireduce_scatter_block %s x %d", cname, cases[c].name, n);
            p = test_pair_make(bytes + 16, 5u + (uint32_t)c);
            SHUNT_TEST_MPI(MPI_Ireduce_scatter_block(in, p.a, n, cases[c].type, cases[c].op, comm, &r));
            complete(&r, comm);
            SHUNT_TEST_MPI(PMPI_Reduce_scatter_block(in, p.b, n, cases[c].type, cases[c].op, comm));
            test_pair_check(&p, what, comm, &tally);

            snprintf(what, sizeof what, "%s: MPI_Ireduce_scatter_block in place %s x %d", cname, cases[c].name, n);
            p = test_pair_make(bytes * (size_t)size + 16, 6u + (uint32_t)c);
            memcpy(p.a, in, bytes * (size_t)size);
            memcpy(p.b, in, bytes * (size_t)size);
            unsigned char* before = (unsigned char*)malloc(p.n);
            SHUNT_TEST_REQUIRE(before != NULL, "out of memory");
            memcpy(before, p.a, p.n);
            SHUNT_TEST_MPI(MPI_Ireduce_scatter_block(MPI_IN_PLACE, p.a, n, cases[c].type, cases[c].op, comm, &r));
            complete(&r, comm);
            SHUNT_TEST_MPI(PMPI_Reduce_scatter_block(MPI_IN_PLACE, p.b, n, cases[c].type, cases[c].op, comm));
            test_pair_accept_tail(&p, before, bytes);
            test_pair_check(&p, what, comm, &tally);

            /* Uneven counts: rank r gets (r * n / 2 + r + 1) % (n + 1) elements, the last of 3 or more none. */
            int* rc = (int*)malloc(sizeof(int) * (size_t)size);
            int total = 0;
            for (int q = 0; q < size; ++q) {
                rc[q] = q == size - 1 && size > 2 ? 0 : (q * n / 2 + q + 1) % (n + 1);
                total += rc[q];
            }
            int* vin = (int*)malloc(sizeof(int) * (size_t)(total ? total : 1));
            fill_ints(vin, total, rank, (int)c + 1);
            snprintf(what, sizeof what, "%s: MPI_Ireduce_scatter %s total %d", cname, cases[c].name, total);
            p = test_pair_make(sizeof(int) * (size_t)rc[rank] + 16, 7u + (uint32_t)c);
            SHUNT_TEST_MPI(MPI_Ireduce_scatter(vin, p.a, rc, cases[c].type, cases[c].op, comm, &r));
            complete(&r, comm);
            SHUNT_TEST_MPI(PMPI_Reduce_scatter(vin, p.b, rc, cases[c].type, cases[c].op, comm));
            test_pair_check(&p, what, comm, &tally);

            snprintf(what, sizeof what, "%s: MPI_Ireduce_scatter in place %s total %d", cname, cases[c].name, total);
            p = test_pair_make(sizeof(int) * (size_t)total + 16, 8u + (uint32_t)c);
            memcpy(p.a, vin, sizeof(int) * (size_t)total);
            memcpy(p.b, vin, sizeof(int) * (size_t)total);
            before = (unsigned char*)realloc(before, p.n);
            SHUNT_TEST_REQUIRE(before != NULL, "out of memory");
            memcpy(before, p.a, p.n);
            SHUNT_TEST_MPI(MPI_Ireduce_scatter(MPI_IN_PLACE, p.a, rc, cases[c].type, cases[c].op, comm, &r));
            complete(&r, comm);
            SHUNT_TEST_MPI(PMPI_Reduce_scatter(MPI_IN_PLACE, p.b, rc, cases[c].type, cases[c].op, comm));
            test_pair_accept_tail(&p, before, sizeof(int) * (size_t)rc[rank]);
            test_pair_check(&p, what, comm, &tally);
            free(before);
            free(vin);
            free(rc);
            free(in);
        }
    }
}

static void data_movers(MPI_Comm comm, const char* cname, int thorough) {
    int rank = 0, size = 0;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    const int counts[] = {0, 1, 3, 777, 20000};
    char what[200];
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; ++k) {
        const int n = counts[k];
        if (!thorough && n > 1000) continue;
        const size_t bytes = sizeof(int) * (size_t)n;
        int* in = (int*)malloc(bytes * (size_t)size + 4);
        test_fill(in, bytes * (size_t)size + 4, 11u + (uint32_t)rank * 31u + (uint32_t)k);
        MPI_Request r;

        snprintf(what, sizeof what, "%s: MPI_Iallgather %d ints", cname, n);
        test_pair p = test_pair_make(bytes * (size_t)size + 8, 21);
        SHUNT_TEST_MPI(MPI_Iallgather(in, n, MPI_INT, p.a, n, MPI_INT, comm, &r));
        complete(&r, comm);
        SHUNT_TEST_MPI(PMPI_Allgather(in, n, MPI_INT, p.b, n, MPI_INT, comm));
        test_pair_check(&p, what, comm, &tally);

        snprintf(what, sizeof what, "%s: MPI_Iallgather in place %d ints", cname, n);
        p = test_pair_make(bytes * (size_t)size + 8, 22);
        memcpy(p.a + bytes * (size_t)rank, in, bytes);
        memcpy(p.b + bytes * (size_t)rank, in, bytes);
        SHUNT_TEST_MPI(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, p.a, n, MPI_INT, comm, &r));
        complete(&r, comm);
        SHUNT_TEST_MPI(PMPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, p.b, n, MPI_INT, comm));
        test_pair_check(&p, what, comm, &tally);

        if (n > 0) {
            /* Types with gaps, freed by the application while the call is in flight (MPI allows it). */
            MPI_Datatype g = gappy_ints(n), block;
            SHUNT_TEST_MPI(MPI_Type_contiguous(n, MPI_INT, &block));
            SHUNT_TEST_MPI(MPI_Type_commit(&block));
            snprintf(what, sizeof what, "%s: MPI_Iallgather %d ints into a type with gaps", cname, n);
            p = test_pair_make(2 * bytes * (size_t)size + 8, 23);
            SHUNT_TEST_MPI(MPI_Iallgather(in, rank % 2 ? 1 : n, rank % 2 ? block : MPI_INT, p.a, 1, g, comm, &r));
            SHUNT_TEST_MPI(PMPI_Allgather(in, rank % 2 ? 1 : n, rank % 2 ? block : MPI_INT, p.b, 1, g, comm));
            complete(&r, comm);
            test_pair_check(&p, what, comm, &tally);

            const int root = (int)k % size;
            snprintf(what, sizeof what, "%s: MPI_Ibcast %d ints root %d, a type with gaps on odd ranks", cname, n,
                     root);
            p = test_pair_make(2 * bytes + 8, 24u + (uint32_t)rank);
            if (rank == root) memcpy(p.b, p.a, p.n);
            SHUNT_TEST_MPI(MPI_Ibcast(p.a, rank % 2 ? 1 : n, rank % 2 ? g : MPI_INT, root, comm, &r));
            complete(&r, comm);
            SHUNT_TEST_MPI(PMPI_Bcast(p.b, rank % 2 ? 1 : n, rank % 2 ? g : MPI_INT, root, comm));
            test_pair_check(&p, what, comm, &tally);

            snprintf(what, sizeof what, "%s: MPI_Ialltoall %d ints, a type with gaps on receive", cname, n);
            p = test_pair_make(2 * bytes * (size_t)size + 8, 25);
            SHUNT_TEST_MPI(MPI_Ialltoall(in, n, MPI_INT, p.a, 1, g, comm, &r));
            SHUNT_TEST_MPI(MPI_Type_free(&g));
            SHUNT_TEST_MPI(MPI_Type_free(&block));
            complete(&r, comm);
            g = gappy_ints(n);
            SHUNT_TEST_MPI(PMPI_Alltoall(in, n, MPI_INT, p.b, 1, g, comm));
            test_pair_check(&p, what, comm, &tally);
            SHUNT_TEST_MPI(MPI_Type_free(&g));
        }

        snprintf(what, sizeof what, "%s: MPI_Ibcast %d ints", cname, n);
        for (int root = 0; root < size; root += (size > 2 ? size - 1 : 1)) {
            p = test_pair_make(bytes + 8, 26u + (uint32_t)rank);
            memcpy(p.b, p.a, p.n);
            SHUNT_TEST_MPI(MPI_Ibcast(p.a, n, MPI_INT, root, comm, &r));
            complete(&r, comm);
            SHUNT_TEST_MPI(PMPI_Bcast(p.b, n, MPI_INT, root, comm));
            test_pair_check(&p, what, comm, &tally);
        }

        snprintf(what, sizeof what, "%s: MPI_Ialltoall %d ints", cname, n);
        p = test_pair_make(bytes * (size_t)size + 8, 27);
        SHUNT_TEST_MPI(MPI_Ialltoall(in, n, MPI_INT, p.a, n, MPI_INT, comm, &r));
        complete(&r, comm);
        SHUNT_TEST_MPI(PMPI_Alltoall(in, n, MPI_INT, p.b, n, MPI_INT, comm));
        test_pair_check(&p, what, comm, &tally);

        snprintf(what, sizeof what, "%s: MPI_Ialltoall in place %d ints", cname, n);
        p = test_pair_make(bytes * (size_t)size + 8, 28);
        memcpy(p.a, in, bytes * (size_t)size);
        memcpy(p.b, in, bytes * (size_t)size);
        SHUNT_TEST_MPI(MPI_Ialltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, p.a, n, MPI_INT, comm, &r));
        complete(&r, comm);
        SHUNT_TEST_MPI(PMPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, p.b, n, MPI_INT, comm));
        test_pair_check(&p, what, comm, &tally);

        /* Allgatherv: uneven counts, displacements in reverse rank order with gaps; in place too. */
        int* rcounts = (int*)malloc(sizeof(int) * (size_t)size);
        int* displs = (int*)malloc(sizeof(int) * (size_t)size);
        int span = 0;
        for (int q = 0; q < size; ++q) span += (rcounts[q] = (q + 1) * n / size + q % 2) + 3;
        for (int q = size - 1, pos = 0; q >= 0; --q) {
            displs[q] = pos;
            pos += rcounts[q] + 3;
        }
        snprintf(what, sizeof what, "%s: MPI_Iallgatherv around %d ints, reversed with gaps", cname, n);
        p = test_pair_make(sizeof(int) * (size_t)span + 8, 29);
        SHUNT_TEST_MPI(MPI_Iallgatherv(in, rcounts[rank], MPI_INT, p.a, rcounts, displs, MPI_INT, comm, &r));
        complete(&r, comm);
        SHUNT_TEST_MPI(PMPI_Allgatherv(in, rcounts[rank], MPI_INT, p.b, rcounts, displs, MPI_INT, comm));
        test_pair_check(&p, what, comm, &tally);

        snprintf(what, sizeof what, "%s: MPI_Iallgatherv in place around %d ints", cname, n);
        p = test_pair_make(sizeof(int) * (size_t)span + 8, 30);
        memcpy(p.a + sizeof(int) * (size_t)displs[rank], in, sizeof(int) * (size_t)rcounts[rank]);
        memcpy(p.b + sizeof(int) * (size_t)displs[rank], in, sizeof(int) * (size_t)rcounts[rank]);
        SHUNT_TEST_MPI(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, p.a, rcounts, displs, MPI_INT, comm, &r));
        complete(&r, comm);
        SHUNT_TEST_MPI(PMPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, p.b, rcounts, displs, MPI_INT, comm));
        test_pair_check(&p, what, comm, &tally);
        free(rcounts);
        free(displs);

        /* Alltoallv: uneven counts (some pairs empty), send blocks reversed, receive blocks with gaps;
         * odd ranks send with a type of one int per 8 bytes. */
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
#undef A2AV_COUNT
            int* src = (int*)malloc(sizeof(int) * 2 * (size_t)sspan + 8);
            SHUNT_TEST_REQUIRE(src != NULL, "out of memory");
            test_fill(src, sizeof(int) * 2 * (size_t)sspan + 8, 41u + (uint32_t)rank);
            snprintf(what, sizeof what, "%s: MPI_Ialltoallv around %d ints, uneven, reversed with gaps", cname, n);
            p = test_pair_make(sizeof(int) * (size_t)rspan + 8, 42);
            SHUNT_TEST_MPI(MPI_Ialltoallv(src, sc, sd, MPI_INT, p.a, rc, rd, MPI_INT, comm, &r));
            complete(&r, comm);
            SHUNT_TEST_MPI(PMPI_Alltoallv(src, sc, sd, MPI_INT, p.b, rc, rd, MPI_INT, comm));
            test_pair_check(&p, what, comm, &tally);

            MPI_Datatype spaced;
            SHUNT_TEST_MPI(MPI_Type_create_resized(MPI_INT, 0, 2 * (MPI_Aint)sizeof(int), &spaced));
            SHUNT_TEST_MPI(MPI_Type_commit(&spaced));
            snprintf(what, sizeof what, "%s: MPI_Ialltoallv around %d ints, odd ranks send one int per 8 bytes", cname,
                     n);
            p = test_pair_make(sizeof(int) * (size_t)rspan + 8, 43);
            SHUNT_TEST_MPI(MPI_Ialltoallv(src, sc, sd, rank % 2 ? spaced : MPI_INT, p.a, rc, rd, MPI_INT, comm, &r));
            complete(&r, comm);
            SHUNT_TEST_MPI(PMPI_Alltoallv(src, sc, sd, rank % 2 ? spaced : MPI_INT, p.b, rc, rd, MPI_INT, comm));
            test_pair_check(&p, what, comm, &tally);
            SHUNT_TEST_MPI(MPI_Type_free(&spaced));
            free(src);
            free(sc);
            free(sd);
            free(rc);
            free(rd);
        }
        free(in);
    }
}

/* Several collectives in flight at once on each of `nc` communicators, started in one order and
 * completed in the reverse order (one MPI_Waitall, or MPI_Wait each), then checked. */
static void overlapping(MPI_Comm* comms, int nc, int n) {
    enum { kinds = 4, most = 8 };
    test_pair p[most * kinds];
    MPI_Request r[most * kinds];
    int* ins[most];
    int m = 0;
    for (int c = 0; c < nc; ++c) {
        int rank = 0, size = 0;
        MPI_Comm_rank(comms[c], &rank);
        MPI_Comm_size(comms[c], &size);
        /* The input of calls in flight stays untouched until they complete: one per communicator. */
        int* in = ins[c] = (int*)malloc(sizeof(int) * (size_t)n * (size_t)size);
        SHUNT_TEST_REQUIRE(in != NULL, "out of memory");
        fill_ints(in, n * size, rank, c);
        p[m] = test_pair_make(sizeof(int) * (size_t)n, 81u + (uint32_t)c);
        SHUNT_TEST_MPI(MPI_Iallreduce(in, p[m].a, n, MPI_INT, MPI_SUM, comms[c], &r[m]));
        ++m;
        p[m] = test_pair_make(sizeof(int) * (size_t)n * (size_t)size, 82u + (uint32_t)c);
        SHUNT_TEST_MPI(MPI_Iallgather(in, n, MPI_INT, p[m].a, n, MPI_INT, comms[c], &r[m]));
        ++m;
        p[m] = test_pair_make(sizeof(int) * (size_t)n, 83u + (uint32_t)c);
        SHUNT_TEST_MPI(MPI_Ireduce_scatter_block(in, p[m].a, n, MPI_INT, MPI_MAX, comms[c], &r[m]));
        ++m;
        p[m] = test_pair_make(sizeof(int) * (size_t)n * (size_t)size, 84u + (uint32_t)c);
        SHUNT_TEST_MPI(MPI_Ialltoall(in, n, MPI_INT, p[m].a, n, MPI_INT, comms[c], &r[m]));
        ++m;
    }
    /* Reversed: the last started completes first. */
    MPI_Request rev[most * kinds];
    MPI_Status st[most * kinds];
    for (int i = 0; i < m; ++i) rev[i] = r[m - 1 - i];
    if (n % 2)
        SHUNT_TEST_MPI(MPI_Waitall(m, rev, st));
    else
        for (int i = 0; i < m; ++i) SHUNT_TEST_MPI(MPI_Wait(&rev[i], MPI_STATUS_IGNORE));
    m = 0;
    char what[120];
    for (int c = 0; c < nc; ++c) {
        int size = 0;
        MPI_Comm_size(comms[c], &size);
        const int* in = ins[c];
        SHUNT_TEST_MPI(PMPI_Allreduce(in, p[m].b, n, MPI_INT, MPI_SUM, comms[c]));
        SHUNT_TEST_MPI(PMPI_Allgather(in, n, MPI_INT, p[m + 1].b, n, MPI_INT, comms[c]));
        SHUNT_TEST_MPI(PMPI_Reduce_scatter_block(in, p[m + 2].b, n, MPI_INT, MPI_MAX, comms[c]));
        SHUNT_TEST_MPI(PMPI_Alltoall(in, n, MPI_INT, p[m + 3].b, n, MPI_INT, comms[c]));
        for (int k = 0; k < kinds; ++k) {
            snprintf(what, sizeof what, "%d in flight on %d communicators: call %d of communicator %d (%d ints)",
                     kinds * nc, nc, k, c, n);
            test_pair_check(&p[m + k], what, comms[c], &tally);
        }
        m += kinds;
        free(ins[c]);
    }
}

/* The requests of nonblocking collectives cannot be freed or cancelled (both libraries refuse,
 * raising the error on MPI_COMM_WORLD): the classes are hashed, and the request still completes.
 * A freed point-to-point request completes on its own, before a later barrier. */
static void freeing(MPI_Comm comm) {
    int rank = 0, size = 0;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    enum { n = 5000 };
    int* in = (int*)malloc(sizeof(int) * n);
    fill_ints(in, n, rank, 9);
    test_pair p = test_pair_make(sizeof(int) * n, 91);
    MPI_Request r;
    SHUNT_TEST_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    SHUNT_TEST_MPI(MPI_Iallreduce(in, p.a, n, MPI_INT, MPI_SUM, comm, &r));
    const MPI_Request held = r;
    int rc = MPI_Request_free(&r), cls = -1;
    MPI_Error_class(rc, &cls);
    tally.hash = test_hash_int(tally.hash, 1000 + cls);
    /* Open MPI frees the request of a call on one rank, already complete. */
    SHUNT_TEST_REQUIRE(rc == MPI_SUCCESS ? r == MPI_REQUEST_NULL && size == 1 : r == held,
                       "MPI_Request_free of a nonblocking collective's request: %d", rc);
    if (r != MPI_REQUEST_NULL) {
        rc = MPI_Cancel(&r);
        MPI_Error_class(rc, &cls);
        SHUNT_TEST_REQUIRE(rc != MPI_SUCCESS && r == held, "MPI_Cancel of a nonblocking collective's request: %d", rc);
        tally.hash = test_hash_int(tally.hash, 2000 + cls);
    }
    SHUNT_TEST_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
    /* A send freed at once, received after a barrier, while the collective is in flight. */
    int token = 500 + rank, got = -1;
    MPI_Request s;
    SHUNT_TEST_MPI(MPI_Isend(&token, 1, MPI_INT, (rank + 1) % size, 91, comm, &s));
    SHUNT_TEST_MPI(MPI_Request_free(&s));
    SHUNT_TEST_MPI(MPI_Barrier(comm));
    SHUNT_TEST_MPI(MPI_Recv(&got, 1, MPI_INT, (rank + size - 1) % size, 91, comm, MPI_STATUS_IGNORE));
    SHUNT_TEST_REQUIRE(got == 500 + (rank + size - 1) % size, "freed send delivered %d", got);
    SHUNT_TEST_MPI(MPI_Wait(&r, MPI_STATUS_IGNORE));
    SHUNT_TEST_MPI(PMPI_Allreduce(in, p.b, n, MPI_INT, MPI_SUM, comm));
    test_pair_check(&p, "MPI_Iallreduce after refused MPI_Request_free and MPI_Cancel", comm, &tally);
    tally.checks += 3;
    free(in);
}

/* Ranks wait in different calls while another needs their progress: rank 0 sends synchronously
 * to rank 1 before completing its collective, while rank 1 completes its own before it receives;
 * then rank 1 receives from rank 0 before completing, while rank 0 completes before it sends. The
 * collective must move on inside the send and the receive. (A blocking collective the library
 * runs cannot do this under shunt: see docs/known-differences.md.) */
static void waiting_elsewhere(MPI_Comm comm) {
    int rank = 0, size = 0;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    enum { n = 30000 };
    int* in = (int*)malloc(sizeof(int) * n * (size_t)size);
    fill_ints(in, n * size, rank, 17);
    for (int pattern = 0; pattern < 2; ++pattern) {
        test_pair p = test_pair_make(sizeof(int) * n * (size_t)size, 95u + (uint32_t)pattern);
        MPI_Request r;
        SHUNT_TEST_MPI(MPI_Ialltoall(in, n, MPI_INT, p.a, n, MPI_INT, comm, &r));
        int token = 7;
        const int waiter = pattern == 0 ? 0 : 1; /* the rank that blocks in point-to-point first */
        if (size > 1 && rank == waiter) {
            if (pattern == 0)
                SHUNT_TEST_MPI(MPI_Ssend(&token, 1, MPI_INT, 1, 96, comm));
            else
                SHUNT_TEST_MPI(MPI_Recv(&token, 1, MPI_INT, 0, 96, comm, MPI_STATUS_IGNORE));
            SHUNT_TEST_MPI(MPI_Wait(&r, MPI_STATUS_IGNORE));
        } else {
            SHUNT_TEST_MPI(MPI_Wait(&r, MPI_STATUS_IGNORE));
            if (size > 1 && pattern == 0 && rank == 1)
                SHUNT_TEST_MPI(MPI_Recv(&token, 1, MPI_INT, 0, 96, comm, MPI_STATUS_IGNORE));
            if (size > 1 && pattern == 1 && rank == 0) SHUNT_TEST_MPI(MPI_Send(&token, 1, MPI_INT, 1, 96, comm));
        }
        SHUNT_TEST_MPI(PMPI_Alltoall(in, n, MPI_INT, p.b, n, MPI_INT, comm));
        test_pair_check(&p,
                        pattern ? "MPI_Ialltoall completed after a receive on rank 1"
                                : "MPI_Ialltoall completed after a synchronous send on rank 0",
                        comm, &tally);
    }
    free(in);
}

/* Persistent collectives: each started five times on new data (and once more with MPI_Startall
 * together), checked against the library's blocking call every time, then freed. */
static void persistent(MPI_Comm comm, const char* cname) {
#if MPI_VERSION >= 4 || defined(OMPI_HAVE_MPI_EXT_PCOLLREQ)
#if MPI_VERSION >= 4
#define PERSISTENT(name) MPI_##name##_init
#else
#define PERSISTENT(name) MPIX_##name##_init
#endif
    int rank = 0, size = 0;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    enum { n = 3000, kinds = 5 };
    int* in = (int*)malloc(sizeof(int) * n * (size_t)size);
    int* out[kinds];
    int* want = (int*)malloc(sizeof(int) * n * (size_t)size);
    int* counts = (int*)malloc(sizeof(int) * (size_t)size);
    int* displs = (int*)malloc(sizeof(int) * (size_t)size);
    SHUNT_TEST_REQUIRE(in && want && counts && displs, "out of memory");
    for (int q = 0, at = 0; q < size; ++q) {
        counts[q] = n / (q + 1);
        displs[q] = at;
        at += counts[q];
    }
    MPI_Request r[kinds];
    for (int k = 0; k < kinds; ++k) {
        out[k] = (int*)malloc(sizeof(int) * n * (size_t)size);
        SHUNT_TEST_REQUIRE(out[k] != NULL, "out of memory");
        memset(out[k], 0x5a, sizeof(int) * n * (size_t)size);
    }
    SHUNT_TEST_MPI(PERSISTENT(Allreduce)(in, out[0], n, MPI_INT, MPI_SUM, comm, MPI_INFO_NULL, &r[0]));
    SHUNT_TEST_MPI(PERSISTENT(Bcast)(out[1], n, MPI_INT, size - 1, comm, MPI_INFO_NULL, &r[1]));
    SHUNT_TEST_MPI(
        PERSISTENT(Allgatherv)(in, counts[rank], MPI_INT, out[2], counts, displs, MPI_INT, comm, MPI_INFO_NULL, &r[2]));
    SHUNT_TEST_MPI(PERSISTENT(Reduce_scatter_block)(in, out[3], n, MPI_INT, MPI_MIN, comm, MPI_INFO_NULL, &r[3]));
    SHUNT_TEST_MPI(PERSISTENT(Alltoall)(in, n, MPI_INT, out[4], n, MPI_INT, comm, MPI_INFO_NULL, &r[4]));
    char what[160];
    for (int round = 0; round < 6; ++round) {
        fill_ints(in, n * size, rank, 100 + round);
        if (rank == size - 1) memcpy(out[1], in, sizeof(int) * n);
        if (round < 5) {
            for (int k = 0; k < kinds; ++k) {
                SHUNT_TEST_MPI(MPI_Start(&r[k]));
                if (k % 2) {
                    int flag = 0;
                    while (!flag) SHUNT_TEST_MPI(MPI_Test(&r[k], &flag, MPI_STATUS_IGNORE));
                } else {
                    SHUNT_TEST_MPI(MPI_Wait(&r[k], MPI_STATUS_IGNORE));
                }
                SHUNT_TEST_REQUIRE(r[k] != MPI_REQUEST_NULL, "a persistent request was freed by its completion");
            }
        } else {
            SHUNT_TEST_MPI(MPI_Startall(kinds, r));
            MPI_Status st[kinds];
            SHUNT_TEST_MPI(MPI_Waitall(kinds, r, st));
        }
        for (int k = 0; k < kinds; ++k) {
            memset(want, 0x5a, sizeof(int) * n * (size_t)size);
            size_t bytes = sizeof(int) * n;
            if (k == 0) SHUNT_TEST_MPI(PMPI_Allreduce(in, want, n, MPI_INT, MPI_SUM, comm));
            if (k == 1) {
                if (rank == size - 1) memcpy(want, in, sizeof(int) * n);
                SHUNT_TEST_MPI(PMPI_Bcast(want, n, MPI_INT, size - 1, comm));
            }
            if (k == 2) {
                SHUNT_TEST_MPI(PMPI_Allgatherv(in, counts[rank], MPI_INT, want, counts, displs, MPI_INT, comm));
                bytes = sizeof(int) * (size_t)(displs[size - 1] + counts[size - 1]);
            }
            if (k == 3) SHUNT_TEST_MPI(PMPI_Reduce_scatter_block(in, want, n, MPI_INT, MPI_MIN, comm));
            if (k == 4) {
                SHUNT_TEST_MPI(PMPI_Alltoall(in, n, MPI_INT, want, n, MPI_INT, comm));
                bytes *= (size_t)size;
            }
            snprintf(what, sizeof what, "%s: persistent collective %d, round %d", cname, k, round);
            test_pair pr;
            pr.n = sizeof(int) * n * (size_t)size;
            pr.a = (unsigned char*)malloc(pr.n);
            pr.b = (unsigned char*)malloc(pr.n);
            memcpy(pr.a, out[k], pr.n);
            memcpy(pr.b, want, pr.n);
            (void)bytes;
            test_pair_check(&pr, what, comm, &tally);
        }
    }
    for (int k = 0; k < kinds; ++k) {
        SHUNT_TEST_MPI(MPI_Request_free(&r[k]));
        SHUNT_TEST_REQUIRE(r[k] == MPI_REQUEST_NULL, "MPI_Request_free left the request");
        free(out[k]);
    }
    free(in);
    free(want);
    free(counts);
    free(displs);
#undef PERSISTENT
#else
    (void)comm;
    (void)cname;
#endif
}

/* Nonblocking calls on a communicator no blocking collective has used: shunt sets a communicator
 * up in a blocking call (setting up communicates), so these go to the library, and the repeats
 * pass at a kept call's cost; once a blocking collective has set the communicator up they follow
 * shunt's plan again. before_setup_calls of them per rank come before that blocking call (the
 * runner's --not-set-up counts them in SHUNT_REPORT's summary). */
enum { before_setup_calls = 8 };
static void before_setup(void) {
    MPI_Comm fresh;
    SHUNT_TEST_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &fresh));
    int rank = 0, size = 0;
    MPI_Comm_rank(fresh, &rank);
    MPI_Comm_size(fresh, &size);
    const int n = 1000;
    int* in = (int*)malloc(sizeof(int) * (size_t)n * (size_t)size);
    SHUNT_TEST_REQUIRE(in != NULL, "out of memory");
    char what[160];
    for (int round = 0; round < 2; ++round) {
        if (round == 1) {
            int one = 1, sum = 0;
            SHUNT_TEST_MPI(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, fresh));
            SHUNT_TEST_REQUIRE(sum == size, "MPI_Allreduce of ones: %d, expected %d", sum, size);
        }
        for (int i = 0; i < before_setup_calls / 2; ++i) {
            fill_ints(in, n * size, rank, 40 + i);
            MPI_Request r;
            snprintf(what, sizeof what, "fresh, %s setup: MPI_Iallreduce int sum x %d, call %d",
                     round == 0 ? "before" : "after", n, i);
            test_pair p = test_pair_make(sizeof(int) * (size_t)n + 16, 50u + (uint32_t)i);
            SHUNT_TEST_MPI(MPI_Iallreduce(in, p.a, n, MPI_INT, MPI_SUM, fresh, &r));
            SHUNT_TEST_MPI(MPI_Wait(&r, MPI_STATUS_IGNORE));
            SHUNT_TEST_MPI(PMPI_Allreduce(in, p.b, n, MPI_INT, MPI_SUM, fresh));
            test_pair_check(&p, what, fresh, &tally);

            snprintf(what, sizeof what, "fresh, %s setup: MPI_Ialltoall of 4 ints, call %d",
                     round == 0 ? "before" : "after", i);
            p = test_pair_make(sizeof(int) * 4 * (size_t)size + 16, 60u + (uint32_t)i);
            SHUNT_TEST_MPI(MPI_Ialltoall(in, 4, MPI_INT, p.a, 4, MPI_INT, fresh, &r));
            SHUNT_TEST_MPI(MPI_Wait(&r, MPI_STATUS_IGNORE));
            SHUNT_TEST_MPI(PMPI_Alltoall(in, 4, MPI_INT, p.b, 4, MPI_INT, fresh));
            test_pair_check(&p, what, fresh, &tally);
        }
    }
    free(in);
    SHUNT_TEST_MPI(MPI_Comm_free(&fresh));
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    tally.hash = 1469598103934665603ull;

    MPI_Comm reversed, half;
    SHUNT_TEST_MPI(MPI_Comm_split(MPI_COMM_WORLD, 0, size - rank, &reversed));
    SHUNT_TEST_MPI(MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half));
    MPI_Comm comms[3] = {MPI_COMM_WORLD, reversed, half};
    before_setup();
    /* A blocking collective on each communicator first: it is where shunt sets up a communicator's
     * collectives (nonblocking calls on a communicator that had none go to the library). */
    for (int c = 0; c < 3; ++c) {
        int one = 1, sum = 0;
        SHUNT_TEST_MPI(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, comms[c]));
    }

    reductions(MPI_COMM_WORLD, "world");
    data_movers(MPI_COMM_WORLD, "world", 1);
    reductions(reversed, "reversed");
    data_movers(half, "half", 0);
    overlapping(comms, 1, 1001);
    overlapping(comms, 3, 2000);
    overlapping(comms, 2, 7);
    freeing(MPI_COMM_WORLD);
    waiting_elsewhere(MPI_COMM_WORLD);
    persistent(MPI_COMM_WORLD, "world");
    persistent(reversed, "reversed");

    SHUNT_TEST_MPI(MPI_Comm_free(&half));
    SHUNT_TEST_MPI(MPI_Comm_free(&reversed));

    char line[160];
    snprintf(line, sizeof line, "rank %d: %ld collective results equal to the library's, %lld bytes, hash %016llx",
             rank, tally.checks, tally.bytes, (unsigned long long)tally.hash);
    test_print_ranks(MPI_COMM_WORLD, line);
    MPI_Finalize();
    return 0;
}
