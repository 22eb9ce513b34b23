/* examples/halo_pack.c: a plain-MPI 3-D halo exchange of subarray regions, packed with MPI_Pack or sent as derived datatypes, point to point or in one MPI_Neighbor_alltoallw (the program shunt is preloaded onto). */
#include <mpi.h>
#ifdef HALO_CUDA
#include <cuda_runtime_api.h>
#endif

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Usage: halo_pack [N [STEPS [QUANTITIES [pack|types|neighbor [host|device|staged]]]]]
 * Each rank of a periodic 3-D Cartesian grid owns N^3 cells of QUANTITIES double fields, stored
 * with a halo of RADIUS cells on every side. Every step the owner writes its interior, then the
 * halos are exchanged with all 26 neighbours (6 faces, 12 edges, 8 corners): each region is packed
 * with MPI_Pack of an MPI_Type_create_subarray type, all quantities into one buffer, sent with
 * MPI_Sendrecv, and unpacked with MPI_Unpack (mode `pack`, the default); or, in mode `types`,
 * every region of every quantity is its own MPI_Irecv / MPI_Isend of the subarray type itself,
 * all completed by one MPI_Waitall (the library packs, or shunt's point-to-point shims do); or, in
 * mode `neighbor`, the 26 neighbours form a distributed graph and one MPI_Neighbor_alltoallw per
 * step moves every region of every quantity (per neighbour a struct of the quantities' subarray
 * types; the library packs, or shunt's fused packing does).
 * MEMORY (halo_pack_cuda, built where CUDA is): `host` (the default) keeps the fields in host
 * memory; `device` keeps them in GPU memory and hands the device pointers to MPI as they are
 * (what a CUDA-aware MPI takes, and what shunt makes work on any MPI); `staged` keeps them in GPU
 * memory and stages by hand, as users of an MPI that is not CUDA-aware do today: every field is
 * copied to a host mirror before the exchange and back after it (inside the timed exchange).
 * The owner writes its interior on the host and copies it to the device, and the check copies
 * the fields back, both outside the timing.
 * Every halo cell is then checked against the value
 * its owner wrote. Prints the time per step (the exchange only, slowest rank) and a checksum of
 * all halo cells that is identical on every run with the same arguments and rank count.
 * Exit status 0 when every halo cell was right. */

#define RADIUS 3
#define NDIRS 26

static void die(const char* what) {
    fprintf(stderr, "halo_pack: %s\n", what);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

static long parse_arg(const char* text, const char* what, long min, long max) {
    char* end = NULL;
    errno = 0;
    const long v = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < min || v > max) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s must be an integer from %ld to %ld, got '%s'", what, min, max, text);
        die(msg);
    }
    return v;
}

/* The value the owner of global cell (x, y, z) writes into quantity q at `step`: an integer
 * below 2^32, so exactly representable and compared bit for bit. */
static double owner_value(long x, long y, long z, int q, int step) {
    uint64_t h = (uint64_t)x * 0x9E3779B97F4A7C15u ^ (uint64_t)y * 0xC2B2AE3D27D4EB4Fu ^
                 (uint64_t)z * 0x165667B19E3779F9u ^ (uint64_t)q * 0xD6E8FEB86659FD93u ^
                 (uint64_t)step * 0xFF51AFD7ED558CCDu;
    h ^= h >> 33;
    h *= 0xC4CEB9FE1A85EC53u;
    h ^= h >> 29;
    return (double)(h >> 32);
}

static long wrap(long i, long n) { return ((i % n) + n) % n; }

enum memory { on_host, on_device, staged_by_hand };

#ifdef HALO_CUDA
static void cuda_check(cudaError_t rc, const char* what) {
    if (rc != cudaSuccess) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s: %s", what, cudaGetErrorString(rc));
        die(msg);
    }
}
#endif

/* Copies `bytes` between a host mirror and a field on the device (to_device: mirror -> field). */
static void move_field(double* field, double* mirror, size_t bytes, int to_device) {
#ifdef HALO_CUDA
    cuda_check(cudaMemcpy(to_device ? field : mirror, to_device ? mirror : field, bytes,
                          to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost),
               "cudaMemcpy");
#else
    (void)field, (void)mirror, (void)bytes, (void)to_device;
    die("built without CUDA: the fields cannot live on a device");
#endif
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc > 6) die("usage: halo_pack [N [STEPS [QUANTITIES [pack|types|neighbor [host|device|staged]]]]]");
    const int n = argc > 1 ? (int)parse_arg(argv[1], "N", RADIUS, 1024) : 64;
    const int steps = argc > 2 ? (int)parse_arg(argv[2], "STEPS", 1, 1000000) : 20;
    const int nq = argc > 3 ? (int)parse_arg(argv[3], "QUANTITIES", 1, 64) : 4;
    if (argc > 4 && strcmp(argv[4], "pack") != 0 && strcmp(argv[4], "types") != 0 && strcmp(argv[4], "neighbor") != 0)
        die("the mode must be pack, types or neighbor");
    const int by_types = argc > 4 && strcmp(argv[4], "types") == 0;
    const int by_neighbor = argc > 4 && strcmp(argv[4], "neighbor") == 0;
    enum memory mem = on_host;
    if (argc > 5 && strcmp(argv[5], "device") == 0)
        mem = on_device;
    else if (argc > 5 && strcmp(argv[5], "staged") == 0)
        mem = staged_by_hand;
    else if (argc > 5 && strcmp(argv[5], "host") != 0)
        die("the memory must be host, device or staged");
#ifndef HALO_CUDA
    if (mem != on_host) die("built without CUDA: the memory must be host (halo_pack_cuda has device and staged)");
#else
    if (mem != on_host) {
        int devices = 0;
        if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
            if (rank == 0) printf("halo_pack: no CUDA device: skipped\n");
            MPI_Finalize();
            return 77;
        }
        int local = 0;
        MPI_Comm node;
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
        MPI_Comm_rank(node, &local);
        MPI_Comm_free(&node);
        cuda_check(cudaSetDevice(local % devices), "cudaSetDevice");
    }
#endif

    int dims[3] = {0, 0, 0}, periods[3] = {1, 1, 1}, coords[3];
    MPI_Dims_create(size, 3, dims);
    MPI_Comm cart;
    MPI_Cart_create(MPI_COMM_WORLD, 3, dims, periods, 0, &cart);
    MPI_Comm_rank(cart, &rank);
    MPI_Cart_coords(cart, rank, 3, coords);

    const int full = n + 2 * RADIUS;
    const size_t cells = (size_t)full * full * full;
    /* field[q]: what MPI is given (host memory, or device memory); host[q]: where the owner
     * writes and the check reads (field[q] itself in host mode, else a host mirror). */
    double** field = malloc(sizeof(double*) * (size_t)nq);
    double** host = malloc(sizeof(double*) * (size_t)nq);
    if (!field || !host) die("out of memory");
    for (int q = 0; q < nq; ++q) {
        host[q] = malloc(sizeof(double) * cells);
        if (!host[q]) die("out of memory");
        for (size_t i = 0; i < cells; ++i) host[q][i] = -1.0;
        field[q] = host[q];
#ifdef HALO_CUDA
        if (mem != on_host) {
            cuda_check(cudaMalloc((void**)&field[q], sizeof(double) * cells), "cudaMalloc");
            move_field(field[q], host[q], sizeof(double) * cells, 1);
        }
#endif
    }
    /* The buffers the exchange hands to MPI: the fields, or (staged) their host mirrors. */
    double** mpi_field = mem == staged_by_hand ? host : field;

    /* One send and one receive subarray per direction d = (dz, dy, dx) in {-1,0,1}^3 \ {0}: the
     * interior layers next to side d go to the neighbour at coords + d, and what the neighbour at
     * coords - d sends in direction d fills the halo on side -d. Along an axis, -1 means the low
     * side, +1 the high side, 0 the whole interior. */
    MPI_Datatype send_type[NDIRS], recv_type[NDIRS];
    int send_to[NDIRS], recv_from[NDIRS], dir[NDIRS][3];
    int buf_bytes = 0;
    for (int k = 0, idx = 0; k < 27; ++k) {
        const int d[3] = {k / 9 - 1, (k / 3) % 3 - 1, k % 3 - 1};
        if (d[0] == 0 && d[1] == 0 && d[2] == 0) continue;
        const int sizes[3] = {full, full, full};
        int sub[3], send_start[3], recv_start[3], to[3], from[3];
        for (int a = 0; a < 3; ++a) {
            sub[a] = d[a] == 0 ? n : RADIUS;
            send_start[a] = d[a] == 1 ? n : RADIUS;
            recv_start[a] = d[a] == 1 ? 0 : d[a] == -1 ? n + RADIUS : RADIUS;
            to[a] = coords[a] + d[a];
            from[a] = coords[a] - d[a];
        }
        MPI_Type_create_subarray(3, sizes, sub, send_start, MPI_ORDER_C, MPI_DOUBLE, &send_type[idx]);
        MPI_Type_create_subarray(3, sizes, sub, recv_start, MPI_ORDER_C, MPI_DOUBLE, &recv_type[idx]);
        MPI_Type_commit(&send_type[idx]);
        MPI_Type_commit(&recv_type[idx]);
        MPI_Cart_rank(cart, to, &send_to[idx]);
        MPI_Cart_rank(cart, from, &recv_from[idx]);
        memcpy(dir[idx], d, sizeof d);
        int one = 0;
        MPI_Pack_size(1, send_type[idx], cart, &one);
        if (one > INT_MAX / nq) die("halo region too large for an int-sized pack buffer");
        if (one * nq > buf_bytes) buf_bytes = one * nq;
        ++idx;
    }
    char* sendbuf = malloc((size_t)buf_bytes);
    char* recvbuf = malloc((size_t)buf_bytes);
    MPI_Request* reqs = malloc(sizeof(MPI_Request) * 2 * NDIRS * (size_t)nq);
    MPI_Status* stats = malloc(sizeof(MPI_Status) * 2 * NDIRS * (size_t)nq);
    if (!sendbuf || !recvbuf || !reqs || !stats) die("out of memory");

    /* Mode neighbor: a distributed graph whose edges are the 26 directions in order (an edge to the
     * same rank twice, on small grids, matches in that order on both ends), and per direction one
     * struct of the quantities' subarray types, displaced from field[0]. The receive buffer
     * argument is field[0] plus one element (its displacements one element back) so that it is not
     * the send buffer argument: the types touch disjoint cells, but MPI forbids the same pointer. */
    MPI_Comm graph = MPI_COMM_NULL;
    MPI_Datatype wsend[NDIRS], wrecv[NDIRS];
    int wcounts[NDIRS];
    MPI_Aint wsdispls[NDIRS], wrdispls[NDIRS];
    if (by_neighbor) {
        int weights[NDIRS], *ones = malloc(sizeof(int) * (size_t)nq);
        MPI_Aint base = 0, *disp = malloc(sizeof(MPI_Aint) * (size_t)nq);
        MPI_Datatype* parts = malloc(sizeof(MPI_Datatype) * (size_t)nq);
        if (!ones || !disp || !parts) die("out of memory");
        for (int i = 0; i < NDIRS; ++i) weights[i] = 1;
        MPI_Dist_graph_create_adjacent(cart, NDIRS, recv_from, weights, NDIRS, send_to, weights, MPI_INFO_NULL, 0,
                                       &graph);
        MPI_Get_address(mpi_field[0], &base);
        for (int q = 0; q < nq; ++q) {
            MPI_Aint at = 0;
            MPI_Get_address(mpi_field[q], &at);
            disp[q] = MPI_Aint_diff(at, base);
            ones[q] = 1;
        }
        for (int i = 0; i < NDIRS; ++i) {
            for (int q = 0; q < nq; ++q) parts[q] = send_type[i];
            MPI_Type_create_struct(nq, ones, disp, parts, &wsend[i]);
            for (int q = 0; q < nq; ++q) parts[q] = recv_type[i];
            MPI_Type_create_struct(nq, ones, disp, parts, &wrecv[i]);
            MPI_Type_commit(&wsend[i]);
            MPI_Type_commit(&wrecv[i]);
            wcounts[i] = 1;
            wsdispls[i] = 0;
            wrdispls[i] = -(MPI_Aint)sizeof(double);
        }
        free(ones);
        free(disp);
        free(parts);
    }

    const long gn[3] = {(long)dims[0] * n, (long)dims[1] * n, (long)dims[2] * n};
    const long origin[3] = {(long)coords[0] * n, (long)coords[1] * n, (long)coords[2] * n};
    double exchange_s = 0, checksum = 0;
    long wrong = 0;
    for (int step = 0; step < steps; ++step) {
        /* The owner writes its interior. */
        for (int q = 0; q < nq; ++q)
            for (int z = RADIUS; z < n + RADIUS; ++z)
                for (int y = RADIUS; y < n + RADIUS; ++y)
                    for (int x = RADIUS; x < n + RADIUS; ++x)
                        host[q][((size_t)z * full + y) * full + x] = owner_value(
                            origin[2] + x - RADIUS, origin[1] + y - RADIUS, origin[0] + z - RADIUS, q, step);
        if (mem != on_host)
            for (int q = 0; q < nq; ++q) move_field(field[q], host[q], sizeof(double) * cells, 1);

        MPI_Barrier(cart);
        const double t0 = MPI_Wtime();
        if (mem == staged_by_hand)
            for (int q = 0; q < nq; ++q) move_field(field[q], host[q], sizeof(double) * cells, 0);
        if (by_types) {
            int r = 0;
            for (int i = 0; i < NDIRS; ++i)
                for (int q = 0; q < nq; ++q)
                    MPI_Irecv(mpi_field[q], 1, recv_type[i], recv_from[i], i * nq + q, cart, &reqs[r++]);
            for (int i = 0; i < NDIRS; ++i)
                for (int q = 0; q < nq; ++q)
                    MPI_Isend(mpi_field[q], 1, send_type[i], send_to[i], i * nq + q, cart, &reqs[r++]);
            MPI_Waitall(r, reqs, stats);
        }
        if (by_neighbor)
            MPI_Neighbor_alltoallw(mpi_field[0], wcounts, wsdispls, wsend, mpi_field[0] + 1, wcounts, wrdispls, wrecv,
                                   graph);
        for (int i = 0; i < NDIRS && !by_types && !by_neighbor; ++i) {
            int pos = 0;
            for (int q = 0; q < nq; ++q) MPI_Pack(mpi_field[q], 1, send_type[i], sendbuf, buf_bytes, &pos, cart);
            MPI_Status st;
            MPI_Sendrecv(sendbuf, pos, MPI_PACKED, send_to[i], i, recvbuf, buf_bytes, MPI_PACKED, recv_from[i], i, cart,
                         &st);
            int got = 0;
            MPI_Get_count(&st, MPI_PACKED, &got);
            if (got != pos) die("received a halo message of the wrong size");
            pos = 0;
            for (int q = 0; q < nq; ++q) MPI_Unpack(recvbuf, got, &pos, mpi_field[q], 1, recv_type[i], cart);
        }
        if (mem == staged_by_hand)
            for (int q = 0; q < nq; ++q) move_field(field[q], host[q], sizeof(double) * cells, 1);
        exchange_s += MPI_Wtime() - t0;
        if (mem != on_host)
            for (int q = 0; q < nq; ++q) move_field(field[q], host[q], sizeof(double) * cells, 0);

        /* Every halo cell must hold what its owner (periodically wrapped) wrote this step. */
        for (int q = 0; q < nq; ++q)
            for (int z = 0; z < full; ++z)
                for (int y = 0; y < full; ++y)
                    for (int x = 0; x < full; ++x) {
                        const int interior = z >= RADIUS && z < n + RADIUS && y >= RADIUS && y < n + RADIUS &&
                                             x >= RADIUS && x < n + RADIUS;
                        if (interior) continue;
                        const double v = host[q][((size_t)z * full + y) * full + x];
                        const double want =
                            owner_value(wrap(origin[2] + x - RADIUS, gn[2]), wrap(origin[1] + y - RADIUS, gn[1]),
                                        wrap(origin[0] + z - RADIUS, gn[0]), q, step);
                        if (v != want) {
                            if (wrong < 5)
                                fprintf(
                                    stderr,
                                    "halo_pack: rank %d step %d quantity %d cell (%d,%d,%d): %.17g, expected %.17g\n",
                                    rank, step, q, x, y, z, v, want);
                            ++wrong;
                        }
                        checksum += v * (double)(q + 1);
                    }
    }

    double slowest = 0, total = 0;
    long wrong_all = 0;
    MPI_Reduce(&exchange_s, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, cart);
    /* Summed in rank order on rank 0 so that the checksum does not depend on the reduction's order. */
    double* sums = rank == 0 ? malloc(sizeof(double) * (size_t)size) : NULL;
    if (rank == 0 && !sums) die("out of memory");
    MPI_Gather(&checksum, 1, MPI_DOUBLE, sums, 1, MPI_DOUBLE, 0, cart);
    MPI_Reduce(&wrong, &wrong_all, 1, MPI_LONG, MPI_SUM, 0, cart);
    if (rank == 0) {
        for (int r = 0; r < size; ++r) total += sums[r];
        printf(
            "halo_pack: %d ranks (%dx%dx%d periodic), %d^3 cells per rank, radius %d, %d quantities, "
            "%d neighbours, %d steps\n",
            size, dims[0], dims[1], dims[2], n, RADIUS, nq, NDIRS, steps);
        printf("time per step: %.3f ms (halo exchange: %s; %s; slowest rank)\n", 1e3 * slowest / steps,
               by_types      ? "isend/irecv of subarray types, waitall"
               : by_neighbor ? "one neighbor_alltoallw of subarray types on a dist graph"
                             : "pack, sendrecv, unpack",
               mem == on_host     ? "host memory"
               : mem == on_device ? "device memory handed to MPI"
                                  : "device memory staged through host copies by hand");
        printf("checksum: %.17g\n", total);
        printf("%s: %ld wrong halo cells\n", wrong_all == 0 ? "OK" : "FAILED", wrong_all);
        free(sums);
    }
    for (int i = 0; i < NDIRS; ++i) {
        MPI_Type_free(&send_type[i]);
        MPI_Type_free(&recv_type[i]);
    }
    if (by_neighbor) {
        for (int i = 0; i < NDIRS; ++i) {
            MPI_Type_free(&wsend[i]);
            MPI_Type_free(&wrecv[i]);
        }
        MPI_Comm_free(&graph);
    }
    for (int q = 0; q < nq; ++q) {
#ifdef HALO_CUDA
        if (field[q] != host[q]) cudaFree(field[q]);
#endif
        free(host[q]);
    }
    free(field);
    free(host);
    free(sendbuf);
    free(recvbuf);
    free(reqs);
    free(stats);
    MPI_Comm_free(&cart);
    int ok = 0;
    if (rank == 0) ok = wrong_all == 0;
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return ok ? 0 : 1;
}
