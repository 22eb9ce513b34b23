/* tests/interpose/large_count.c: MPI 4's large-count forms (MPI_Pack_c, MPI_Send_c, MPI_Allreduce_c, ...; shunt's int paths when preloaded) against the library's int forms (PMPI_*), byte for byte.
 *
 * A plain MPI program that knows nothing of shunt. Counts that fit in int take the same paths as
 * the int forms under shunt (derived datatypes packed by shunt, collectives run by its schedules);
 * counts past INT_MAX (with MPI_PROC_NULL peers and MPI_Pack_size_c, which move nothing) go to the
 * library's _c forms. Exits 77 (skipped) where mpi.h has no large-count forms (MPI 3: Open MPI 4.1).
 * Prints one checksum line per rank (the runner compares runs). */
#include "common.h"

#if MPI_VERSION >= 4

static test_tally tally;

static void small_ints(int* buf, int n, int rank, int salt) {
    for (int i = 0; i < n; ++i) buf[i] = (i * 3 + rank * 17 + salt) % 29 - 14;
}

/* A vector type: 4 blocks of 3 ints, stride 5 (gaps shunt packs). */
static MPI_Datatype vector_type(void) {
    MPI_Datatype v;
    SHUNT_TEST_MPI(MPI_Type_vector(4, 3, 5, MPI_INT, &v));
    SHUNT_TEST_MPI(MPI_Type_commit(&v));
    return v;
}

static void packing(MPI_Comm comm) {
    MPI_Datatype v = vector_type();
    const int count = 33;
    test_typed in = test_typed_make(v, count, 5);
    MPI_Count size = 0;
    int isize = 0;
    SHUNT_TEST_MPI(MPI_Pack_size_c(count, v, comm, &size));
    SHUNT_TEST_MPI(PMPI_Pack_size(count, v, comm, &isize));
    SHUNT_TEST_REQUIRE(size == isize, "MPI_Pack_size_c %lld, library's int form %d", (long long)size, isize);
    test_pair p = test_pair_make((size_t)size + 16, 6);
    MPI_Count pos = 3; /* after a 3-byte header, unaligned */
    int ipos = 3;
    SHUNT_TEST_MPI(MPI_Pack_c(in.base, count, v, p.a, (MPI_Count)p.n, &pos, comm));
    SHUNT_TEST_MPI(PMPI_Pack(in.base, count, v, p.b, (int)p.n, &ipos, comm));
    SHUNT_TEST_REQUIRE(pos == ipos, "MPI_Pack_c position %lld, library %d", (long long)pos, ipos);
    test_typed ua = test_typed_make(v, count, 7), ub = test_typed_make(v, count, 7);
    MPI_Count upos = 3;
    int uipos = 3;
    SHUNT_TEST_MPI(MPI_Unpack_c(p.a, (MPI_Count)p.n, &upos, ua.base, count, v, comm));
    SHUNT_TEST_MPI(PMPI_Unpack(p.b, (int)p.n, &uipos, ub.base, count, v, comm));
    SHUNT_TEST_REQUIRE(upos == uipos, "MPI_Unpack_c position %lld, library %d", (long long)upos, uipos);
    test_pair_check(&p, "MPI_Pack_c of a vector type", comm, &tally);
    SHUNT_TEST_REQUIRE(memcmp(ua.alloc, ub.alloc, ua.alloc_bytes) == 0, "MPI_Unpack_c differs from the library's");
    tally.hash = test_hash(tally.hash, ua.alloc, ua.alloc_bytes);
    /* Sizes past INT_MAX: the library's _c form answers (the int form could not). */
    const MPI_Count huge = (MPI_Count)INT32_MAX + 5;
    MPI_Count a = 0, b = 0;
    SHUNT_TEST_MPI(MPI_Pack_size_c(huge, MPI_INT, comm, &a));
    SHUNT_TEST_MPI(PMPI_Pack_size_c(huge, MPI_INT, comm, &b));
    SHUNT_TEST_REQUIRE(a == b && a >= 4 * huge, "MPI_Pack_size_c of %lld ints: %lld, library %lld", (long long)huge,
                       (long long)a, (long long)b);
    tally.checks += 2;
    free(in.alloc);
    free(ua.alloc);
    free(ub.alloc);
    SHUNT_TEST_MPI(MPI_Type_free(&v));
}

/* A ring of derived-type messages through every large-count point-to-point form. */
static void ring(MPI_Comm comm) {
    int rank = 0, size = 0;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    const int right = (rank + 1) % size, left = (rank + size - 1) % size;
    MPI_Datatype v = vector_type();
    const int count = 17;
    for (int form = 0; form < 6; ++form) {
        test_typed out = test_typed_make(v, count, 100u + (uint32_t)(rank * 10 + form));
        test_typed got = test_typed_make(v, count, 3);
        test_typed want = test_typed_make(v, count, 3);
        MPI_Request r[2];
        MPI_Status st;
        switch (form) {
            case 0:
                SHUNT_TEST_MPI(MPI_Irecv_c(got.base, count, v, left, form, comm, &r[0]));
                SHUNT_TEST_MPI(MPI_Send_c(out.base, count, v, right, form, comm));
                SHUNT_TEST_MPI(MPI_Wait(&r[0], &st));
                break;
            case 1:
                SHUNT_TEST_MPI(MPI_Isend_c(out.base, count, v, right, form, comm, &r[0]));
                SHUNT_TEST_MPI(MPI_Recv_c(got.base, count, v, left, form, comm, &st));
                SHUNT_TEST_MPI(MPI_Wait(&r[0], MPI_STATUS_IGNORE));
                break;
            case 2:
                SHUNT_TEST_MPI(
                    MPI_Sendrecv_c(out.base, count, v, right, form, got.base, count, v, left, form, comm, &st));
                break;
            case 3:
                SHUNT_TEST_MPI(MPI_Recv_init_c(got.base, count, v, left, form, comm, &r[0]));
                SHUNT_TEST_MPI(MPI_Send_init_c(out.base, count, v, right, form, comm, &r[1]));
                SHUNT_TEST_MPI(MPI_Startall(2, r));
                SHUNT_TEST_MPI(MPI_Wait(&r[0], &st));
                SHUNT_TEST_MPI(MPI_Wait(&r[1], MPI_STATUS_IGNORE));
                SHUNT_TEST_MPI(MPI_Request_free(&r[0]));
                SHUNT_TEST_MPI(MPI_Request_free(&r[1]));
                break;
            case 4:
                SHUNT_TEST_MPI(MPI_Irecv_c(got.base, count, v, left, form, comm, &r[0]));
                SHUNT_TEST_MPI(MPI_Issend_c(out.base, count, v, right, form, comm, &r[1]));
                SHUNT_TEST_MPI(MPI_Wait(&r[1], MPI_STATUS_IGNORE));
                SHUNT_TEST_MPI(MPI_Wait(&r[0], &st));
                break;
            default: {
                MPI_Message m;
                SHUNT_TEST_MPI(MPI_Isend_c(out.base, count, v, right, form, comm, &r[0]));
                SHUNT_TEST_MPI(MPI_Mprobe(left, form, comm, &m, &st));
                SHUNT_TEST_MPI(MPI_Mrecv_c(got.base, count, v, &m, &st));
                SHUNT_TEST_MPI(MPI_Wait(&r[0], MPI_STATUS_IGNORE));
            }
        }
        MPI_Count elems = -1;
        SHUNT_TEST_MPI(MPI_Get_count_c(&st, v, &elems));
        SHUNT_TEST_REQUIRE(elems == count, "form %d: MPI_Get_count_c says %lld elements", form, (long long)elems);
        /* What the left neighbour sent, unpacked by the library into an identically prefilled buffer. */
        test_typed src = test_typed_make(v, count, 100u + (uint32_t)(left * 10 + form));
        int bytes = 0, pos = 0, upos = 0;
        SHUNT_TEST_MPI(PMPI_Pack_size(count, v, MPI_COMM_SELF, &bytes));
        unsigned char* tmp = (unsigned char*)malloc((size_t)bytes);
        SHUNT_TEST_MPI(PMPI_Pack(src.base, count, v, tmp, bytes, &pos, MPI_COMM_SELF));
        SHUNT_TEST_MPI(PMPI_Unpack(tmp, pos, &upos, want.base, count, v, MPI_COMM_SELF));
        SHUNT_TEST_REQUIRE(memcmp(got.alloc, want.alloc, got.alloc_bytes) == 0, "form %d: received data differs", form);
        tally.checks += 1;
        tally.hash = test_hash(tally.hash, got.alloc, got.alloc_bytes);
        free(tmp);
        free(src.alloc);
        free(out.alloc);
        free(got.alloc);
        free(want.alloc);
    }
    /* Counts past INT_MAX to and from MPI_PROC_NULL: the library's _c forms, nothing moves. */
    MPI_Status st;
    const MPI_Count huge = (MPI_Count)INT32_MAX + 9;
    static char nowhere; /* not null (MPICH checks), never touched */
    SHUNT_TEST_MPI(MPI_Send_c(&nowhere, huge, MPI_BYTE, MPI_PROC_NULL, 0, comm));
    SHUNT_TEST_MPI(MPI_Recv_c(&nowhere, huge, MPI_BYTE, MPI_PROC_NULL, 0, comm, &st));
    SHUNT_TEST_REQUIRE(st.MPI_SOURCE == MPI_PROC_NULL, "receive from MPI_PROC_NULL: source %d", st.MPI_SOURCE);
    tally.checks += 1;
    SHUNT_TEST_MPI(MPI_Type_free(&v));
}

static void collectives(MPI_Comm comm) {
    int rank = 0, size = 0;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    char what[120];
    for (int n = 1; n <= 50000; n *= 37) {
        int* in = (int*)malloc(sizeof(int) * (size_t)n * (size_t)size);
        SHUNT_TEST_REQUIRE(in != NULL, "out of memory");
        small_ints(in, n * size, rank, n);
        const size_t one = sizeof(int) * (size_t)n, all = one * (size_t)size;
        MPI_Request r;

        snprintf(what, sizeof what, "MPI_Allreduce_c of %d ints", n);
        test_pair p = test_pair_make(one + 8, 1);
        SHUNT_TEST_MPI(MPI_Allreduce_c(in, p.a, n, MPI_INT, MPI_SUM, comm));
        SHUNT_TEST_MPI(PMPI_Allreduce(in, p.b, n, MPI_INT, MPI_SUM, comm));
        test_pair_check(&p, what, comm, &tally);

        snprintf(what, sizeof what, "MPI_Reduce_c of %d ints", n);
        p = test_pair_make(one + 8, 2);
        SHUNT_TEST_MPI(MPI_Reduce_c(in, p.a, n, MPI_INT, MPI_MAX, size - 1, comm));
        SHUNT_TEST_MPI(PMPI_Reduce(in, p.b, n, MPI_INT, MPI_MAX, size - 1, comm));
        test_pair_check(&p, what, comm, &tally);

        snprintf(what, sizeof what, "MPI_Reduce_scatter_block_c of %d ints", n);
        p = test_pair_make(one + 8, 3);
        SHUNT_TEST_MPI(MPI_Reduce_scatter_block_c(in, p.a, n, MPI_INT, MPI_SUM, comm));
        SHUNT_TEST_MPI(PMPI_Reduce_scatter_block(in, p.b, n, MPI_INT, MPI_SUM, comm));
        test_pair_check(&p, what, comm, &tally);

        MPI_Count* counts = (MPI_Count*)malloc(sizeof(MPI_Count) * (size_t)size);
        MPI_Aint* displs = (MPI_Aint*)malloc(sizeof(MPI_Aint) * (size_t)size);
        int* icounts = (int*)malloc(sizeof(int) * (size_t)size);
        int* idispls = (int*)malloc(sizeof(int) * (size_t)size);
        int total = 0;
        for (int q = 0; q < size; ++q) {
            icounts[q] = n / (q + 1);
            counts[q] = icounts[q];
            idispls[q] = total + q; /* a gap of q ints before each block */
            displs[q] = idispls[q];
            total += icounts[q] + q;
        }
        snprintf(what, sizeof what, "MPI_Reduce_scatter_c around %d ints", n);
        p = test_pair_make(one + 8, 4);
        SHUNT_TEST_MPI(MPI_Reduce_scatter_c(in, p.a, counts, MPI_INT, MPI_SUM, comm));
        SHUNT_TEST_MPI(PMPI_Reduce_scatter(in, p.b, icounts, MPI_INT, MPI_SUM, comm));
        test_pair_check(&p, what, comm, &tally);

        snprintf(what, sizeof what, "MPI_Allgatherv_c around %d ints, with gaps", n);
        p = test_pair_make(sizeof(int) * (size_t)total + 8, 5);
        SHUNT_TEST_MPI(MPI_Allgatherv_c(in, counts[rank], MPI_INT, p.a, counts, displs, MPI_INT, comm));
        SHUNT_TEST_MPI(PMPI_Allgatherv(in, icounts[rank], MPI_INT, p.b, icounts, idispls, MPI_INT, comm));
        test_pair_check(&p, what, comm, &tally);

        snprintf(what, sizeof what, "MPI_Allgather_c of %d ints", n);
        p = test_pair_make(all + 8, 6);
        SHUNT_TEST_MPI(MPI_Allgather_c(in, n, MPI_INT, p.a, n, MPI_INT, comm));
        SHUNT_TEST_MPI(PMPI_Allgather(in, n, MPI_INT, p.b, n, MPI_INT, comm));
        test_pair_check(&p, what, comm, &tally);

        snprintf(what, sizeof what, "MPI_Alltoall_c of %d ints", n);
        p = test_pair_make(all + 8, 7);
        SHUNT_TEST_MPI(MPI_Alltoall_c(in, n, MPI_INT, p.a, n, MPI_INT, comm));
        SHUNT_TEST_MPI(PMPI_Alltoall(in, n, MPI_INT, p.b, n, MPI_INT, comm));
        test_pair_check(&p, what, comm, &tally);

        /* Alltoallv: every pair n / size ints, blocks in order with a one-int gap. */
        for (int q = 0; q < size; ++q) {
            icounts[q] = n / size;
            counts[q] = icounts[q];
            idispls[q] = q * (n / size + 1);
            displs[q] = idispls[q];
        }
        snprintf(what, sizeof what, "MPI_Alltoallv_c around %d ints", n);
        p = test_pair_make(sizeof(int) * (size_t)size * (size_t)(n / size + 1) + 8, 8);
        SHUNT_TEST_MPI(MPI_Alltoallv_c(in, counts, displs, MPI_INT, p.a, counts, displs, MPI_INT, comm));
        SHUNT_TEST_MPI(PMPI_Alltoallv(in, icounts, idispls, MPI_INT, p.b, icounts, idispls, MPI_INT, comm));
        test_pair_check(&p, what, comm, &tally);

        snprintf(what, sizeof what, "MPI_Bcast_c of %d ints", n);
        p = test_pair_make(one + 8, 9u + (uint32_t)rank);
        memcpy(p.b, p.a, p.n);
        SHUNT_TEST_MPI(MPI_Bcast_c(p.a, n, MPI_INT, 0, comm));
        SHUNT_TEST_MPI(PMPI_Bcast(p.b, n, MPI_INT, 0, comm));
        test_pair_check(&p, what, comm, &tally);

        snprintf(what, sizeof what, "MPI_Iallreduce_c of %d ints", n);
        p = test_pair_make(one + 8, 10);
        SHUNT_TEST_MPI(MPI_Iallreduce_c(in, p.a, n, MPI_INT, MPI_SUM, comm, &r));
        SHUNT_TEST_MPI(MPI_Wait(&r, MPI_STATUS_IGNORE));
        SHUNT_TEST_MPI(PMPI_Allreduce(in, p.b, n, MPI_INT, MPI_SUM, comm));
        test_pair_check(&p, what, comm, &tally);

        snprintf(what, sizeof what, "MPI_Ialltoall_c of %d ints", n);
        p = test_pair_make(all + 8, 11);
        SHUNT_TEST_MPI(MPI_Ialltoall_c(in, n, MPI_INT, p.a, n, MPI_INT, comm, &r));
        SHUNT_TEST_MPI(MPI_Wait(&r, MPI_STATUS_IGNORE));
        SHUNT_TEST_MPI(PMPI_Alltoall(in, n, MPI_INT, p.b, n, MPI_INT, comm));
        test_pair_check(&p, what, comm, &tally);

        snprintf(what, sizeof what, "MPI_Allreduce_init_c of %d ints, started twice", n);
        p = test_pair_make(one + 8, 12);
        SHUNT_TEST_MPI(MPI_Allreduce_init_c(in, p.a, n, MPI_INT, MPI_BXOR, comm, MPI_INFO_NULL, &r));
        for (int k = 0; k < 2; ++k) {
            SHUNT_TEST_MPI(MPI_Start(&r));
            SHUNT_TEST_MPI(MPI_Wait(&r, MPI_STATUS_IGNORE));
        }
        SHUNT_TEST_MPI(MPI_Request_free(&r));
        SHUNT_TEST_MPI(PMPI_Allreduce(in, p.b, n, MPI_INT, MPI_BXOR, comm));
        test_pair_check(&p, what, comm, &tally);

        free(counts);
        free(displs);
        free(icounts);
        free(idispls);
        free(in);
    }
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    tally.hash = 1469598103934665603ull;
    packing(MPI_COMM_WORLD);
    ring(MPI_COMM_WORLD);
    collectives(MPI_COMM_WORLD);
    char line[160];
    snprintf(line, sizeof line, "rank %d: %ld large-count results equal to the library's, %lld bytes, hash %016llx",
             rank, tally.checks, tally.bytes, (unsigned long long)tally.hash);
    test_print_ranks(MPI_COMM_WORLD, line);
    MPI_Finalize();
    return 0;
}

#else

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) printf("no large-count forms in this MPI (MPI %d.%d): skipped\n", MPI_VERSION, MPI_SUBVERSION);
    MPI_Finalize();
    return 77;
}

#endif
