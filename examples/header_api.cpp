// examples/header_api.cpp: shunt's header API: decode MPI datatypes to the canonical form, pack with pack_host, compare with MPI_Pack.
#include <shunt/datatype/decode.hpp>
#include <shunt/pack/host.hpp>

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

std::string describe(const shunt::layout& l) {
    std::string s = "dims [";
    for (std::size_t i = 0; i < l.dims.size(); ++i)
        s += (i ? ", " : "") + std::to_string(l.dims[i].count) + " x " + std::to_string(l.dims[i].stride) + "B";
    s += "] blocks [";
    for (std::size_t i = 0; i < l.blocks.size(); ++i)
        s += (i ? ", " : "") + std::to_string(l.blocks[i].length) + "B at " + std::to_string(l.blocks[i].offset);
    return s + "]";
}

/// Decodes `t`, prints its canonical form, packs `count` elements at `buf` with shunt::pack_host
/// (whole, then in 100-byte pieces as a pipelined sender would) and with MPI_Pack, and reports
/// whether all three agree byte for byte.
bool show(const char* name, MPI_Datatype t, int count, const void* buf) {
    const shunt::type_info info = shunt::decode(t);
    std::printf("%s\n  canonical form: %s\n  size %lld B, extent %lld B, true extent %lld B at %lld\n", name,
                describe(info.form).c_str(), static_cast<long long>(info.size), static_cast<long long>(info.extent),
                static_cast<long long>(info.true_extent), static_cast<long long>(info.true_lb));

    int mpi_bytes = 0;
    SHUNT_CHECK_MPI(MPI_Pack_size(count, t, MPI_COMM_WORLD, &mpi_bytes));
    std::vector<unsigned char> by_mpi(static_cast<std::size_t>(mpi_bytes)), whole(by_mpi.size()), pieces(by_mpi.size());
    int pos = 0;
    SHUNT_CHECK_MPI(MPI_Pack(buf, count, t, by_mpi.data(), mpi_bytes, &pos, MPI_COMM_WORLD));
    const std::int64_t n = shunt::pack_host(info.form, info.extent, count, buf, whole.data());
    std::int64_t done = 0;
    while (done < n) done += shunt::pack_host(info.form, info.extent, count, buf, pieces.data() + done, done, 100);
    const bool same = n == pos && done == n &&
                      std::memcmp(by_mpi.data(), whole.data(), static_cast<std::size_t>(n)) == 0 &&
                      std::memcmp(by_mpi.data(), pieces.data(), static_cast<std::size_t>(n)) == 0;
    std::printf("  %d element(s): MPI_Pack %d B, pack_host %lld B: %s\n", count, pos, static_cast<long long>(n),
                same ? "identical" : "DIFFERENT");
    return same;
}

}  // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    bool ok = true;
    if (rank == 0) {
        try {
            // A 16^3 block of doubles inside a 20^3 array, all of it with a halo of 2.
            constexpr int full = 20, n = 16, r = 2;
            std::vector<double> grid(static_cast<std::size_t>(full) * full * full);
            for (std::size_t i = 0; i < grid.size(); ++i) grid[i] = static_cast<double>(i);

            // The x-face of radius 2 as a subarray, and the same bytes as a vector of vectors:
            // both reduce to the same canonical form.
            const int sizes[3] = {full, full, full}, sub[3] = {n, n, r}, starts[3] = {r, r, r};
            MPI_Datatype face, row, plane, moved, face_nested;
            SHUNT_CHECK_MPI(MPI_Type_create_subarray(3, sizes, sub, starts, MPI_ORDER_C, MPI_DOUBLE, &face));
            SHUNT_CHECK_MPI(MPI_Type_vector(n, r, full, MPI_DOUBLE, &row));
            SHUNT_CHECK_MPI(MPI_Type_create_hvector(n, 1, MPI_Aint{full} * full * 8, row, &plane));
            const MPI_Aint first = ((MPI_Aint{r} * full + r) * full + r) * 8;
            SHUNT_CHECK_MPI(MPI_Type_create_hindexed_block(1, 1, &first, plane, &moved));
            SHUNT_CHECK_MPI(MPI_Type_create_resized(moved, 0, MPI_Aint{full} * full * full * 8, &face_nested));
            SHUNT_CHECK_MPI(MPI_Type_commit(&face));
            SHUNT_CHECK_MPI(MPI_Type_commit(&face_nested));
            ok &= show("x-face as a subarray", face, 1, grid.data());
            ok &= show("x-face as a vector of vectors", face_nested, 1, grid.data());
            const bool same_form = shunt::decode(face).form == shunt::decode(face_nested).form;
            std::printf("same canonical form: %s\n", same_form ? "yes" : "no");
            ok &= same_form;

            // A struct with a hole (4 bytes of padding after id), three elements of it.
            struct particle {
                double pos[3];
                int id;
                double mass;
            };
            std::vector<particle> ps(3);
            for (int i = 0; i < 3; ++i) ps[static_cast<std::size_t>(i)] = {{1.0 * i, 2.0 * i, 3.0 * i}, i, 0.5 * i};
            const int lens[3] = {3, 1, 1};
            const MPI_Aint displs[3] = {offsetof(particle, pos), offsetof(particle, id), offsetof(particle, mass)};
            const MPI_Datatype types[3] = {MPI_DOUBLE, MPI_INT, MPI_DOUBLE};
            MPI_Datatype p, p_resized;
            SHUNT_CHECK_MPI(MPI_Type_create_struct(3, lens, displs, types, &p));
            SHUNT_CHECK_MPI(MPI_Type_create_resized(p, 0, sizeof(particle), &p_resized));
            SHUNT_CHECK_MPI(MPI_Type_commit(&p_resized));
            ok &= show("particle struct", p_resized, 3, ps.data());

            for (MPI_Datatype* t : {&face, &row, &plane, &moved, &face_nested, &p, &p_resized}) MPI_Type_free(t);
        } catch (const shunt::error& e) {
            std::fprintf(stderr, "header_api: %s\n", e.what());
            ok = false;
        }
        std::printf("%s\n", ok ? "OK" : "FAILED");
    }
    int status = ok ? 0 : 1;
    MPI_Bcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return status;
}
