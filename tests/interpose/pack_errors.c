/* tests/interpose/pack_errors.c: erroneous MPI_Pack/MPI_Unpack calls under a returning error handler:
 * error class, position, handler invocations and every byte around the buffers, for the runner to compare. */
#include "common.h"

enum { guard = 64 };

/* MPICH 5.0.2 and Open MPI 5.0.11 crash (SIGSEGV) packing from or unpacking to MPI_BOTTOM with a
 * type at offset 0, where MPICH 4.0 and Open MPI 4.1 return an error: those cases are left out. */
#if (defined(MPICH_NUMVERSION) && MPICH_NUMVERSION >= 50000000) || \
    (defined(OMPI_MAJOR_VERSION) && OMPI_MAJOR_VERSION >= 5)
#define SHUNT_TEST_BOTTOM_CRASHES 1
#else
#define SHUNT_TEST_BOTTOM_CRASHES 0
#endif

static int rank_;
static int handler_calls;
static uint64_t results = 14695981039346656037ull;

static void count_error(MPI_Comm* comm, int* code, ...) {
    (void)comm;
    (void)code;
    ++handler_calls;
}

/* One outcome as text: the same on every rank, printed by rank 0 and hashed by all. */
static void record(const char* what, int rc, int calls, int position, const unsigned char* area, size_t area_bytes,
                   size_t inner_begin, size_t inner_end) {
    int cls = MPI_SUCCESS;
    if (rc != MPI_SUCCESS) MPI_Error_class(rc, &cls);
    int before_ok = 1, after_ok = 1;
    for (size_t i = 0; i < inner_begin; ++i) before_ok &= area[i] == 0xee;
    for (size_t i = inner_end; i < area_bytes; ++i) after_ok &= area[i] == 0xee;
    char line[256];
    snprintf(line, sizeof line,
             "%-46s %s class %2d, handler calls %d, position %d, guard before %s, after %s, data %016llx", what,
             rc == MPI_SUCCESS ? "ok   " : "error", cls, calls, position, before_ok ? "intact" : "WRITTEN",
             after_ok ? "intact" : "WRITTEN",
             (unsigned long long)test_hash(14695981039346656037ull, area + inner_begin, inner_end - inner_begin));
    results = test_hash(results, line, strlen(line));
    if (rank_ == 0) printf("%s\n", line);
}

/* MPI_Pack into an outsize-byte area with guard bytes on both sides; position starts at `start`. */
static void pack_case(const char* what, const void* inbuf, int count, MPI_Datatype type, int outsize, int start,
                      int null_position, int null_outbuf, MPI_Comm comm) {
    const size_t area_bytes = (size_t)(outsize > 0 ? outsize : 0) + 2 * guard;
    unsigned char* area = (unsigned char*)malloc(area_bytes);
    memset(area, 0xee, area_bytes);
    memset(area + guard, 0x11, area_bytes - 2 * guard);
    int position = start;
    const int calls = handler_calls;
    const int rc = MPI_Pack(inbuf, count, type, null_outbuf ? NULL : area + guard, outsize,
                            null_position ? NULL : &position, comm);
    record(what, rc, handler_calls - calls, position, area, area_bytes, guard, area_bytes - guard);
    free(area);
}

/* MPI_Unpack of `insize` bytes into a guarded typed buffer. */
static void unpack_case(const char* what, const unsigned char* inbuf, int insize, int start, int count,
                        MPI_Datatype type, int null_outbuf, MPI_Comm comm) {
    const size_t data_bytes = 4096;
    const size_t area_bytes = data_bytes + 2 * guard;
    unsigned char* area = (unsigned char*)malloc(area_bytes);
    memset(area, 0xee, area_bytes);
    memset(area + guard, 0x22, data_bytes);
    int position = start;
    const int calls = handler_calls;
    const int rc = MPI_Unpack(inbuf, insize, &position, null_outbuf ? NULL : area + guard, count, type, comm);
    record(what, rc, handler_calls - calls, position, area, area_bytes, guard, area_bytes - guard);
    free(area);
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Errhandler counting;
    SHUNT_TEST_MPI(MPI_Comm_create_errhandler(count_error, &counting));
    SHUNT_TEST_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, counting));
    SHUNT_TEST_MPI(MPI_Comm_set_errhandler(MPI_COMM_SELF, counting));
    MPI_Comm dup;
    SHUNT_TEST_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &dup));  // inherits the counting handler

    double data[512];
    test_fill(data, sizeof data, 3u);
    MPI_Datatype vec, loose, gone, fresh;
    SHUNT_TEST_MPI(MPI_Type_vector(8, 3, 7, MPI_DOUBLE, &vec));
    SHUNT_TEST_MPI(MPI_Type_commit(&vec));
    SHUNT_TEST_MPI(MPI_Type_vector(5, 1, 3, MPI_INT, &loose));  // never committed
    int S = 0;
    SHUNT_TEST_MPI(MPI_Type_size(vec, &S));

    /* A committed type, packed, freed, then a new uncommitted one at the same handle value (both
     * libraries reuse the handle of a freed type for the next one of the same shape; a few tries make
     * sure). Anything shunt still remembered of the old type would let the new one be packed. */
    MPI_Datatype spare[8];
    int spares = 0;
    for (;;) {
        SHUNT_TEST_MPI(MPI_Type_contiguous(24, MPI_DOUBLE, &gone));
        SHUNT_TEST_MPI(MPI_Type_commit(&gone));
        unsigned char scratch[24 * sizeof(double)];
        int at = 0;
        SHUNT_TEST_MPI(MPI_Pack(data, 1, gone, scratch, sizeof scratch, &at, MPI_COMM_WORLD));
        SHUNT_TEST_MPI(MPI_Unpack(scratch, sizeof scratch, &(int){0}, data, 1, gone, MPI_COMM_WORLD));
        const MPI_Datatype old = gone;
        SHUNT_TEST_MPI(MPI_Type_free(&gone));
        SHUNT_TEST_MPI(MPI_Type_contiguous(8, MPI_DOUBLE, &fresh));
        if (fresh == old || spares == 8) break;
        spare[spares++] = fresh;
    }
    while (spares > 0) SHUNT_TEST_MPI(MPI_Type_free(&spare[--spares]));

    for (int c = 0; c < 2; ++c) {
        MPI_Comm comm = c == 0 ? MPI_COMM_WORLD : dup;
        const char* on = c == 0 ? "world" : "dup";
        char name[64];
#define NAME(text) (snprintf(name, sizeof name, "%s: %s", on, text), name)
        pack_case(NAME("pack fits exactly"), data, 1, vec, S, 0, 0, 0, comm);
        pack_case(NAME("pack fits exactly at position 5"), data, 1, vec, S + 5, 5, 0, 0, comm);
        pack_case(NAME("pack outsize one byte short"), data, 1, vec, S - 1, 0, 0, 0, comm);
        pack_case(NAME("pack position pushes past outsize"), data, 1, vec, S + 4, 5, 0, 0, comm);
        pack_case(NAME("pack two elements, room for one"), data, 2, vec, S + 8, 0, 0, 0, comm);
        pack_case(NAME("pack negative position"), data, 1, MPI_INT, 64, -4, 0, 0, comm);
        pack_case(NAME("pack negative count"), data, -1, vec, S, 0, 0, 0, comm);
        pack_case(NAME("pack negative outsize"), data, 1, vec, -8, 0, 0, 0, comm);
        pack_case(NAME("pack null position"), data, 1, vec, S, 0, 1, 0, comm);
#if defined(OPEN_MPI)  // MPICH 4.0.2 does not check outbuf: it crashes (SIGSEGV) on a null one
        pack_case(NAME("pack null outbuf"), data, 1, vec, S, 0, 0, 1, comm);
#endif
        pack_case(NAME("pack uncommitted type"), data, 1, loose, 256, 0, 0, 0, comm);
        pack_case(NAME("pack zero of uncommitted type"), data, 0, loose, 256, 0, 0, 0, comm);
        pack_case(NAME("pack re-created uncommitted handle"), data, 1, fresh, 512, 0, 0, 0, comm);
        pack_case(NAME("pack MPI_DATATYPE_NULL"), data, 1, MPI_DATATYPE_NULL, 256, 0, 0, 0, comm);
#if !SHUNT_TEST_BOTTOM_CRASHES
        pack_case(NAME("pack MPI_BOTTOM with offset-0 type"), MPI_BOTTOM, 1, vec, S, 0, 0, 0, comm);
#endif
        pack_case(NAME("pack zero elements"), data, 0, vec, 16, 3, 0, 0, comm);
        pack_case(NAME("pack zero elements, position == outsize"), data, 0, vec, 16, 16, 0, 0, comm);
        pack_case(NAME("pack zero elements, position > outsize"), data, 0, vec, 16, 20, 0, 0, comm);
#undef NAME
    }
    pack_case("pack MPI_COMM_NULL", data, 1, vec, S, 0, 0, 0, MPI_COMM_NULL);

    /* A valid packed stream of two vectors to unpack from, inside deterministic bytes: MPICH 4.0.2
     * reads outside [inbuf, inbuf + insize) for a negative or too large position. */
    unsigned char store[2048];
    test_fill(store, sizeof store, 4u);
    unsigned char* packed = store + 64;
    int psize = 0;
    SHUNT_TEST_MPI(PMPI_Pack(data, 2, vec, packed, 1024, &psize, MPI_COMM_WORLD));
    for (int c = 0; c < 2; ++c) {
        MPI_Comm comm = c == 0 ? MPI_COMM_WORLD : dup;
        const char* on = c == 0 ? "world" : "dup";
        char name[64];
#define NAME(text) (snprintf(name, sizeof name, "%s: %s", on, text), name)
        unpack_case(NAME("unpack exact"), packed, psize, 0, 2, vec, 0, comm);
        unpack_case(NAME("unpack second element"), packed, psize, S, 1, vec, 0, comm);
        unpack_case(NAME("unpack insize one byte short"), packed, psize - 1, 0, 2, vec, 0, comm);
        unpack_case(NAME("unpack insize 0, one element"), packed, 0, 0, 1, vec, 0, comm);
        unpack_case(NAME("unpack position past insize"), packed, S, S + 1, 1, vec, 0, comm);
        unpack_case(NAME("unpack negative position"), packed, psize, -8, 1, MPI_INT, 0, comm);
        unpack_case(NAME("unpack negative count"), packed, psize, 0, -1, vec, 0, comm);
        unpack_case(NAME("unpack negative insize"), packed, -1, 0, 1, vec, 0, comm);
        unpack_case(NAME("unpack uncommitted type"), packed, psize, 0, 1, loose, 0, comm);
        unpack_case(NAME("unpack re-created uncommitted handle"), packed, psize, 0, 1, fresh, 0, comm);
        unpack_case(NAME("unpack MPI_DATATYPE_NULL"), packed, psize, 0, 1, MPI_DATATYPE_NULL, 0, comm);
#if !SHUNT_TEST_BOTTOM_CRASHES
        unpack_case(NAME("unpack to MPI_BOTTOM with offset-0 type"), packed, psize, 0, 1, vec, 1, comm);
#endif
#if defined(OPEN_MPI)  // MPICH 4.0.2 does not check inbuf: it crashes (SIGSEGV) on a null one
        unpack_case(NAME("unpack null inbuf"), NULL, psize, 0, 1, vec, 0, comm);
#endif
        unpack_case(NAME("unpack zero elements"), packed, psize, 4, 0, vec, 0, comm);
#undef NAME
    }
    unpack_case("unpack MPI_COMM_NULL", packed, psize, 0, 1, vec, 0, MPI_COMM_NULL);

    char line[128];
    snprintf(line, sizeof line, "rank %d: outcomes %016llx", rank_, (unsigned long long)results);
    fflush(stdout);
    test_print_ranks(MPI_COMM_WORLD, line);

    MPI_Type_free(&vec);
    MPI_Type_free(&loose);
    MPI_Type_free(&fresh);
    MPI_Comm_free(&dup);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_ARE_FATAL);
    MPI_Errhandler_free(&counting);
    MPI_Finalize();
    return 0;
}
