/* tests/interpose/pack_exchange.c: a 3-D periodic halo exchange of subarray faces packed with MPI_Pack,
 * sent as MPI_PACKED over a Cartesian communicator, unpacked with MPI_Unpack, and checked. */
#include "common.h"

enum { halo = 3, n = 6, quantities = 2 };
enum { ext = n + 2 * halo };

/* The value every rank computes for global cell (gz, gy, gx) of quantity q at step s. */
static double value(int q, int gz, int gy, int gx, int step) { return q * 1e6 + gz * 1e4 + gy * 1e2 + gx + step * 0.5; }

static int wrap(int i, int period) { return ((i % period) + period) % period; }

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int size = 0, world_rank = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    int dims[3] = {0, 0, 0}, periods[3] = {1, 1, 1}, coords[3];
    MPI_Dims_create(size, 3, dims);
    MPI_Comm cart;
    SHUNT_TEST_MPI(MPI_Cart_create(MPI_COMM_WORLD, 3, dims, periods, 0, &cart));
    int rank = 0;
    MPI_Comm_rank(cart, &rank);
    MPI_Cart_coords(cart, rank, 3, coords);

    /* One array of `quantities` fields, each ext^3 doubles in C order (z, y, x), x contiguous. */
    const size_t field = (size_t)ext * ext * ext;
    double* a = (double*)malloc(sizeof(double) * field * quantities);
    double* typed = (double*)malloc(sizeof(double) * field * quantities);
    SHUNT_TEST_REQUIRE(a && typed, "out of memory");

    /* Faces: for dimension d and side s (0 low, 1 high), the interior slab sent and the halo slab received. */
    MPI_Datatype send_face[3][2], recv_face[3][2];
    for (int d = 0; d < 3; ++d)
        for (int s = 0; s < 2; ++s) {
            int sizes[4] = {quantities, ext, ext, ext}, sub[4] = {quantities, n, n, n};
            int send_start[4] = {0, halo, halo, halo}, recv_start[4] = {0, halo, halo, halo};
            sub[1 + d] = halo;
            send_start[1 + d] = s == 0 ? halo : n; /* the interior cells next to side s */
            recv_start[1 + d] = s == 0 ? 0 : n + halo; /* the halo on side s */
            SHUNT_TEST_MPI(
                MPI_Type_create_subarray(4, sizes, sub, send_start, MPI_ORDER_C, MPI_DOUBLE, &send_face[d][s]));
            SHUNT_TEST_MPI(
                MPI_Type_create_subarray(4, sizes, sub, recv_start, MPI_ORDER_C, MPI_DOUBLE, &recv_face[d][s]));
            SHUNT_TEST_MPI(MPI_Type_commit(&send_face[d][s]));
            SHUNT_TEST_MPI(MPI_Type_commit(&recv_face[d][s]));
        }
    int face_bytes = 0;
    SHUNT_TEST_MPI(MPI_Pack_size(1, send_face[0][0], cart, &face_bytes));
    unsigned char* out = (unsigned char*)malloc((size_t)face_bytes);
    unsigned char* in = (unsigned char*)malloc((size_t)face_bytes);
    unsigned char* oracle = (unsigned char*)malloc((size_t)face_bytes);
    SHUNT_TEST_REQUIRE(out && in && oracle, "out of memory");

    uint64_t hash = 14695981039346656037ull;
    long checked = 0;
    for (int step = 0; step < 3; ++step) {
        for (size_t i = 0; i < field * quantities; ++i) a[i] = -1.0;
        for (int q = 0; q < quantities; ++q)
            for (int z = halo; z < n + halo; ++z)
                for (int y = halo; y < n + halo; ++y)
                    for (int x = halo; x < n + halo; ++x)
                        a[q * field + ((size_t)z * ext + y) * ext + x] = value(
                            q, coords[0] * n + z - halo, coords[1] * n + y - halo, coords[2] * n + x - halo, step);
        memcpy(typed, a, sizeof(double) * field * quantities);

        for (int d = 0; d < 3; ++d)
            for (int s = 0; s < 2; ++s) {
                int source, dest;
                SHUNT_TEST_MPI(MPI_Cart_shift(cart, d, s == 0 ? -1 : 1, &source, &dest));
                /* Send my side-s interior to the neighbour on side s; it lands in its opposite halo. */
                int pos = 0, opos = 0;
                SHUNT_TEST_MPI(MPI_Pack(a, 1, send_face[d][s], out, face_bytes, &pos, cart));
                SHUNT_TEST_MPI(PMPI_Pack(a, 1, send_face[d][s], oracle, face_bytes, &opos, cart));
                SHUNT_TEST_REQUIRE(pos == opos && memcmp(out, oracle, (size_t)pos) == 0, "face %d/%d packs differently",
                                   d, s);
                MPI_Status st;
                SHUNT_TEST_MPI(MPI_Sendrecv(out, pos, MPI_PACKED, dest, 10 * d + s, in, face_bytes, MPI_PACKED, source,
                                            10 * d + s, cart, &st));
                int got = 0;
                MPI_Get_count(&st, MPI_PACKED, &got);
                int upos = 0;
                SHUNT_TEST_MPI(MPI_Unpack(in, got, &upos, a, 1, recv_face[d][1 - s], d == 1 ? MPI_COMM_WORLD : cart));
                SHUNT_TEST_REQUIRE(upos == got, "unpacked %d of %d bytes", upos, got);
                /* The same exchange with the datatypes directly: the library's own path. */
                SHUNT_TEST_MPI(MPI_Sendrecv(typed, 1, send_face[d][s], dest, 100 + 10 * d + s, typed, 1,
                                            recv_face[d][1 - s], source, 100 + 10 * d + s, cart, MPI_STATUS_IGNORE));
            }
        SHUNT_TEST_REQUIRE(memcmp(a, typed, sizeof(double) * field * quantities) == 0,
                           "packed exchange differs from the typed exchange at step %d", step);
        /* Every face halo cell holds its periodic neighbour's value; edges and corners are untouched. */
        const int gn[3] = {dims[0] * n, dims[1] * n, dims[2] * n};
        for (int q = 0; q < quantities; ++q)
            for (int z = 0; z < ext; ++z)
                for (int y = 0; y < ext; ++y)
                    for (int x = 0; x < ext; ++x) {
                        const int c[3] = {z, y, x};
                        int outside = 0;
                        for (int k = 0; k < 3; ++k) outside += c[k] < halo || c[k] >= n + halo;
                        const double got = a[q * field + ((size_t)z * ext + y) * ext + x];
                        double want = -1.0;
                        if (outside <= 1)
                            want =
                                value(q, wrap(coords[0] * n + z - halo, gn[0]), wrap(coords[1] * n + y - halo, gn[1]),
                                      wrap(coords[2] * n + x - halo, gn[2]), step);
                        SHUNT_TEST_REQUIRE(got == want, "step %d q %d cell (%d,%d,%d): %g, expected %g", step, q, z, y,
                                           x, got, want);
                        ++checked;
                    }
        hash = test_hash(hash, a, sizeof(double) * field * quantities);
    }

    for (int d = 0; d < 3; ++d)
        for (int s = 0; s < 2; ++s) {
            MPI_Type_free(&send_face[d][s]);
            MPI_Type_free(&recv_face[d][s]);
        }
    char line[200];
    snprintf(line, sizeof line, "rank %d (coords %d,%d,%d of %dx%dx%d): %ld cells checked, checksum %016llx", rank,
             coords[0], coords[1], coords[2], dims[0], dims[1], dims[2], checked, (unsigned long long)hash);
    test_print_ranks(cart, line);
    MPI_Comm_free(&cart);
    free(a);
    free(typed);
    free(out);
    free(in);
    free(oracle);
    MPI_Finalize();
    return 0;
}
