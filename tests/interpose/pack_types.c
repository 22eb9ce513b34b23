/* tests/interpose/pack_types.c: MPI_Pack/MPI_Unpack of many derived types (vector, subarray, indexed,
 * struct, resized, darray, dup'd, absolute addresses, freed and re-created handles) against the library. */
#include "common.h"

static test_tally tally;
static int rank_, size_;

/* Checks `type` at several counts; commits it first when asked. */
static void check(const char* name, MPI_Datatype type, int count_max) {
    const int counts[] = {0, 1, 2, 5};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; ++i)
        if (counts[i] <= count_max)
            test_pack_roundtrip(name, type, counts[i], MPI_COMM_WORLD, (uint32_t)(rank_ * 1000 + (int)i), &tally);
}

static MPI_Datatype commit(MPI_Datatype t) {
    SHUNT_TEST_MPI(MPI_Type_commit(&t));
    return t;
}

static void check_and_free(const char* name, MPI_Datatype t, int count_max) {
    check(name, t, count_max);
    SHUNT_TEST_MPI(MPI_Type_free(&t));
}

/* Element i packed one call at a time gives the same stream as all of them in one call. */
static void check_incremental(MPI_Datatype type, int n) {
    MPI_Aint lb, extent;
    SHUNT_TEST_MPI(MPI_Type_get_extent(type, &lb, &extent));
    test_typed in = test_typed_make(type, n, 99u + (uint32_t)rank_);
    int size = 0;
    SHUNT_TEST_MPI(MPI_Pack_size(n, type, MPI_COMM_WORLD, &size));
    unsigned char* one = (unsigned char*)calloc((size_t)size + 1, 1);
    unsigned char* inc = (unsigned char*)calloc((size_t)size + 1, 1);
    int p1 = 0, p2 = 0;
    SHUNT_TEST_MPI(PMPI_Pack(in.base, n, type, one, size, &p1, MPI_COMM_WORLD));
    for (int i = 0; i < n; ++i)
        SHUNT_TEST_MPI(MPI_Pack(in.base + (MPI_Aint)i * extent, 1, type, inc, size, &p2, MPI_COMM_WORLD));
    SHUNT_TEST_REQUIRE(p1 == p2 && memcmp(one, inc, (size_t)size) == 0, "incremental packing differs");
    tally.hash = test_hash(tally.hash, inc, (size_t)p2);
    free(one);
    free(inc);
    free(in.alloc);
}

/* A type of size 0: packs nothing at any count, leaves position alone. Unpacked with Open MPI
 * only: MPICH 4.0.2 divides by zero (SIGFPE) in MPI_Unpack of a size-0 type, at any count. */
static void check_empty(MPI_Datatype t) {
    unsigned char a[8], b[8];
    int in[4] = {1, 2, 3, 4};
    for (int count = 0; count < 6; count += 5) {
        memset(a, 0x5a, sizeof a);
        memset(b, 0x5a, sizeof b);
        int pa = 2, pb = 2;
        SHUNT_TEST_MPI(MPI_Pack(in, count, t, a, sizeof a, &pa, MPI_COMM_WORLD));
        SHUNT_TEST_MPI(PMPI_Pack(in, count, t, b, sizeof b, &pb, MPI_COMM_WORLD));
        SHUNT_TEST_REQUIRE(pa == 2 && pb == 2 && memcmp(a, b, sizeof a) == 0, "empty type x %d: packed something",
                           count);
    }
#if defined(OPEN_MPI)
    for (int count = 0; count < 6; count += 5) {
        int q = 1;
        SHUNT_TEST_MPI(MPI_Unpack(a, sizeof a, &q, in, count, t, MPI_COMM_WORLD));
        SHUNT_TEST_REQUIRE(q == 1 && in[0] == 1 && in[3] == 4, "empty type: unpack changed something");
    }
#endif
    tally.checks += 1;
}

/* A struct at absolute addresses, packed from and unpacked to MPI_BOTTOM. Open MPI only: MPICH
 * 4.0.2 rejects MPI_BOTTOM in MPI_Pack ("Null pointer in parameter inbuf"). */
#if defined(OPEN_MPI)
static void check_bottom(void) {
    int ints[6];
    double dbl[3];
    test_fill(ints, sizeof ints, 5u + (uint32_t)rank_);
    test_fill(dbl, sizeof dbl, 6u + (uint32_t)rank_);
    MPI_Aint addr[2];
    SHUNT_TEST_MPI(MPI_Get_address(&ints[1], &addr[0]));
    SHUNT_TEST_MPI(MPI_Get_address(&dbl[0], &addr[1]));
    int lens[2] = {4, 3};
    MPI_Datatype types[2] = {MPI_INT, MPI_DOUBLE}, t;
    SHUNT_TEST_MPI(MPI_Type_create_struct(2, lens, addr, types, &t));
    t = commit(t);
    unsigned char a[128], b[128];
    memset(a, 0, sizeof a);
    memset(b, 0, sizeof b);
    int pa = 0, pb = 0;
    SHUNT_TEST_MPI(MPI_Pack(MPI_BOTTOM, 1, t, a, sizeof a, &pa, MPI_COMM_WORLD));
    SHUNT_TEST_MPI(PMPI_Pack(MPI_BOTTOM, 1, t, b, sizeof b, &pb, MPI_COMM_WORLD));
    SHUNT_TEST_REQUIRE(pa == pb && memcmp(a, b, sizeof a) == 0, "MPI_BOTTOM struct: pack differs");
    memset(ints, 0, sizeof ints);
    memset(dbl, 0, sizeof dbl);
    int q = 0;
    SHUNT_TEST_MPI(MPI_Unpack(a, pa, &q, MPI_BOTTOM, 1, t, MPI_COMM_WORLD));
    SHUNT_TEST_REQUIRE(q == pa, "MPI_BOTTOM struct: unpack position");
    int pc = 0;
    unsigned char c[128];
    memset(c, 0, sizeof c);
    SHUNT_TEST_MPI(PMPI_Pack(MPI_BOTTOM, 1, t, c, sizeof c, &pc, MPI_COMM_WORLD));
    SHUNT_TEST_REQUIRE(pc == pa && memcmp(a, c, sizeof a) == 0, "MPI_BOTTOM struct: unpack did not restore");
    SHUNT_TEST_REQUIRE(ints[0] == 0 && ints[5] == 0, "MPI_BOTTOM struct: unpack wrote outside the type");
    tally.hash = test_hash(tally.hash, a, (size_t)pa);
    SHUNT_TEST_MPI(MPI_Type_free(&t));
}
#endif

/* shunt keeps each thread's last MPI_Pack and MPI_Unpack (type handle and count) to answer a
 * repeat quickly: a type freed and a new one committed at the same handle value, then packed and
 * unpacked at the same count with no call between, must move as the new type. Retries, keeping
 * the types it got, until the library hands out the freed handle again (both do for a type of
 * the same shape). */
static void check_reused_handle(void) {
    int typed[64], back_a[64], back_b[64];
    unsigned char a[256], b[256];
    for (int i = 0; i < 64; ++i) typed[i] = i * 7 + 1;
    MPI_Datatype spare[8];
    int spares = 0, reused = 0;
    while (!reused && spares < 8) {
        MPI_Datatype old_t, new_t;
        SHUNT_TEST_MPI(MPI_Type_vector(8, 1, 3, MPI_INT, &old_t));
        SHUNT_TEST_MPI(MPI_Type_commit(&old_t));
        for (int k = 0; k < 3; ++k) {
            int pa = 0, qa = 0;
            SHUNT_TEST_MPI(MPI_Pack(typed, 2, old_t, a, sizeof a, &pa, MPI_COMM_WORLD));
            SHUNT_TEST_MPI(MPI_Unpack(a, pa, &qa, back_a, 2, old_t, MPI_COMM_WORLD));
        }
        const MPI_Datatype was = old_t;
        SHUNT_TEST_MPI(MPI_Type_free(&old_t));
        SHUNT_TEST_MPI(MPI_Type_vector(8, 1, 2, MPI_INT, &new_t)); /* the same size, another layout */
        SHUNT_TEST_MPI(MPI_Type_commit(&new_t));
        reused = new_t == was;
        memset(a, 0xa5, sizeof a);
        memset(b, 0xa5, sizeof b);
        int pa = 0, pb = 0;
        SHUNT_TEST_MPI(MPI_Pack(typed, 2, new_t, a, sizeof a, &pa, MPI_COMM_WORLD));
        SHUNT_TEST_MPI(PMPI_Pack(typed, 2, new_t, b, sizeof b, &pb, MPI_COMM_WORLD));
        SHUNT_TEST_REQUIRE(pa == pb && memcmp(a, b, sizeof a) == 0,
                           "a type re-created at a freed handle: MPI_Pack differs from the library's");
        memset(back_a, 0x5a, sizeof back_a);
        memset(back_b, 0x5a, sizeof back_b);
        int qa = 0, qb = 0;
        SHUNT_TEST_MPI(MPI_Unpack(a, pa, &qa, back_a, 2, new_t, MPI_COMM_WORLD));
        SHUNT_TEST_MPI(PMPI_Unpack(b, pb, &qb, back_b, 2, new_t, MPI_COMM_WORLD));
        SHUNT_TEST_REQUIRE(qa == qb && memcmp(back_a, back_b, sizeof back_a) == 0,
                           "a type re-created at a freed handle: MPI_Unpack differs from the library's");
        tally.checks += 1;
        tally.bytes += pa;
        tally.hash = test_hash(tally.hash, a, (size_t)pa);
        spare[spares++] = new_t;
    }
    while (spares > 0) SHUNT_TEST_MPI(MPI_Type_free(&spare[--spares]));
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    tally.hash = 14695981039346656037ull;
    MPI_Datatype t, u, v;

    /* A type looked up by MPI_Pack before its commit (an error the library reports) must be packed
     * by shunt once committed. */
    SHUNT_TEST_MPI(MPI_Type_vector(3, 2, 4, MPI_INT, &t));
    {
        int in[16] = {0}, at = 0;
        unsigned char out[64];
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        const int rc = MPI_Pack(in, 1, t, out, sizeof out, &at, MPI_COMM_WORLD);
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
        int cls = MPI_SUCCESS;
        MPI_Error_class(rc, &cls);
        SHUNT_TEST_REQUIRE(cls == MPI_ERR_TYPE, "packing an uncommitted type gave class %d", cls);
    }
    check_and_free("vector committed after a failed pack", commit(t), 5);

    check("MPI_INT", MPI_INT, 5);
    check("MPI_DOUBLE_INT", MPI_DOUBLE_INT, 5);

    SHUNT_TEST_MPI(MPI_Type_contiguous(5, MPI_DOUBLE, &t));
    check_and_free("contiguous", commit(t), 5);

    SHUNT_TEST_MPI(MPI_Type_vector(16, 3, 8, MPI_DOUBLE, &t));
    t = commit(t);
    check("vector", t, 5);
    check_incremental(t, 7);
    SHUNT_TEST_MPI(MPI_Type_dup(t, &u));  // the dup outlives the original
    SHUNT_TEST_MPI(MPI_Type_free(&t));
    check_and_free("dup of vector", u, 5);

    SHUNT_TEST_MPI(MPI_Type_dup(MPI_INT, &u));
    check_and_free("dup of MPI_INT", u, 5);

    SHUNT_TEST_MPI(MPI_Type_create_hvector(5, 2, -40, MPI_INT, &t));
    check_and_free("hvector negative stride", commit(t), 5);

    {
        int lens[3] = {3, 1, 4}, displs[3] = {0, 5, 9};
        SHUNT_TEST_MPI(MPI_Type_indexed(3, lens, displs, MPI_FLOAT, &t));
        check_and_free("indexed", commit(t), 5);
        int bdispls[4] = {7, 0, 3, 12};
        SHUNT_TEST_MPI(MPI_Type_create_indexed_block(4, 2, bdispls, MPI_SHORT, &t));
        check_and_free("indexed_block unordered", commit(t), 5);
        MPI_Aint hdispls[2] = {-24, 16};
        int hlens[2] = {2, 3};
        SHUNT_TEST_MPI(MPI_Type_create_hindexed(2, hlens, hdispls, MPI_INT, &t));
        check_and_free("hindexed negative displacement", commit(t), 5);
    }
    {
        int lens[3] = {1, 1, 3};
        MPI_Aint displs[3] = {0, 8, 16};
        MPI_Datatype types[3] = {MPI_INT, MPI_DOUBLE, MPI_CHAR};
        SHUNT_TEST_MPI(MPI_Type_create_struct(3, lens, displs, types, &t));
        SHUNT_TEST_MPI(MPI_Type_create_resized(t, 0, 24, &u));
        SHUNT_TEST_MPI(MPI_Type_free(&t));
        u = commit(u);
        check("struct resized", u, 5);
        SHUNT_TEST_MPI(MPI_Type_vector(4, 2, 3, u, &v));  // a vector of the resized struct
        check_and_free("vector of resized struct", commit(v), 5);
        SHUNT_TEST_MPI(MPI_Type_free(&u));
        MPI_Datatype pairs[2] = {MPI_DOUBLE_INT, MPI_2INT};
        int plens[2] = {2, 1};
        MPI_Aint pdispls[2] = {0, 40};
        SHUNT_TEST_MPI(MPI_Type_create_struct(2, plens, pdispls, pairs, &t));
        check_and_free("struct of pair types", commit(t), 5);
    }
    {
        int sizes[3] = {10, 9, 8}, sub_x[3] = {10, 9, 3}, start_x[3] = {0, 0, 5};
        SHUNT_TEST_MPI(MPI_Type_create_subarray(3, sizes, sub_x, start_x, MPI_ORDER_C, MPI_DOUBLE, &t));
        check_and_free("subarray C x-face", commit(t), 2);
        int sub_z[3] = {3, 9, 8}, start_z[3] = {7, 0, 0};
        SHUNT_TEST_MPI(MPI_Type_create_subarray(3, sizes, sub_z, start_z, MPI_ORDER_C, MPI_DOUBLE, &t));
        check_and_free("subarray C z-face", commit(t), 2);
        int sub_f[3] = {4, 2, 5}, start_f[3] = {1, 3, 2};
        SHUNT_TEST_MPI(MPI_Type_create_subarray(3, sizes, sub_f, start_f, MPI_ORDER_FORTRAN, MPI_FLOAT, &t));
        check_and_free("subarray Fortran", commit(t), 2);
    }
    {
        int dims[2] = {0, 0};
        MPI_Dims_create(size_, 2, dims);
        int gsizes[2] = {8, 6}, distribs[2] = {MPI_DISTRIBUTE_CYCLIC, MPI_DISTRIBUTE_BLOCK};
        int dargs[2] = {2, MPI_DISTRIBUTE_DFLT_DARG};
        SHUNT_TEST_MPI(
            MPI_Type_create_darray(size_, rank_, 2, gsizes, distribs, dargs, dims, MPI_ORDER_C, MPI_INT, &t));
        check_and_free("darray", commit(t), 2);
    }
    SHUNT_TEST_MPI(MPI_Type_vector(3, 2, 5, MPI_INT, &t));
    SHUNT_TEST_MPI(MPI_Type_create_resized(t, -16, 200, &u));
    SHUNT_TEST_MPI(MPI_Type_free(&t));
    check_and_free("resized lb -16 extent 200", commit(u), 5);

    SHUNT_TEST_MPI(MPI_Type_create_hvector(300, 1, 24, MPI_DOUBLE, &t));
    SHUNT_TEST_MPI(MPI_Type_create_hvector(40, 1, 300 * 24 + 8, t, &u));
    SHUNT_TEST_MPI(MPI_Type_free(&t));
    check_and_free("hvector of hvector", commit(u), 2);

    SHUNT_TEST_MPI(MPI_Type_contiguous(0, MPI_INT, &t));
    check_empty(commit(t));
    SHUNT_TEST_MPI(MPI_Type_free(&t));

#if defined(OPEN_MPI)
    check_bottom();
#endif

    check_reused_handle();

    /* Types freed and re-created: the library reuses handle values, and a stale entry for an old
     * type at a reused handle would pack the wrong bytes. */
    for (int i = 0; i < 24; ++i) {
        if (i % 3 == 0)
            SHUNT_TEST_MPI(MPI_Type_vector(i % 5 + 1, i % 3 + 1, 4, MPI_INT, &t));
        else if (i % 3 == 1)
            SHUNT_TEST_MPI(MPI_Type_contiguous(i + 1, MPI_SHORT, &t));
        else {
            int lens[2] = {1, i % 4 + 1}, displs[2] = {i % 7, 9};
            SHUNT_TEST_MPI(MPI_Type_indexed(2, lens, displs, MPI_DOUBLE, &t));
        }
        check_and_free("re-created", commit(t), 2);
    }

    char line[200];
    snprintf(line, sizeof line, "rank %d: %ld checks, %lld bytes packed, checksum %016llx", rank_, tally.checks,
             tally.bytes, (unsigned long long)tally.hash);
    test_print_ranks(MPI_COMM_WORLD, line);
    MPI_Finalize();
    return 0;
}
