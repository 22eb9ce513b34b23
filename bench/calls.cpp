// bench/calls.cpp: bench-calls, small messages of every interposed call family: the MPI library's (PMPI_*) against the same calls through shunt (MPI_* in libshunt), in one job.
#include "coll_timing.hpp"
#include "harness.hpp"

#include <mpi.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace {

using namespace shunt::bench;

constexpr int window = 64;  ///< nonblocking sends per bandwidth step, as the usual microbenchmarks

/// One family of calls: its name, the calls one step makes on a rank (to report a cost per
/// call), the least size it takes, and whether its datatype is the vector of 8-byte blocks.
struct family {
    const char* name;
    const char* what;
    int calls;
    std::int64_t min_size;
    bool vector;
};

constexpr std::array<family, 14> families = {{
    {"latency", "ping-pong of MPI_Send/MPI_Recv (a round trip: a send and a receive on each rank)", 2, 1, false},
    {"latency_vec", "the same with a vector of 8-byte blocks 16 bytes apart", 2, 16, true},
    {"bandwidth", "64 MPI_Isend (MPI_Irecv on the peer), MPI_Waitall, a 0-byte reply", 66, 1, false},
    {"bandwidth_vec", "the same with the vector of 8-byte blocks", 66, 16, true},
    {"sendrecv", "MPI_Sendrecv between pairs", 1, 1, false},
    {"allreduce", "MPI_Allreduce of doubles, MPI_SUM", 1, 8, false},
    {"reduce", "MPI_Reduce of doubles to rank 0", 1, 8, false},
    {"bcast", "MPI_Bcast from rank 0", 1, 1, false},
    {"allgather", "MPI_Allgather, size per rank", 1, 1, false},
    {"alltoall", "MPI_Alltoall, size per rank", 1, 1, false},
    {"reduce_scatter", "MPI_Reduce_scatter_block of doubles, size per rank", 1, 8, false},
    {"iallreduce", "MPI_Iallreduce then MPI_Wait", 2, 8, false},
    {"ialltoall", "MPI_Ialltoall then MPI_Wait", 2, 1, false},
    {"pack", "MPI_Pack of the vector of 8-byte blocks", 1, 16, true},
}};

}  // namespace

int main(int argc, char** argv) {
    bool quick = false;
    std::string only;
    cli line("bench-calls",
             "Times small messages of every family of calls shunt intercepts: the MPI library's calls (PMPI_*)\n"
             "against the same calls through shunt (MPI_* in libshunt, with its defaults: kept calls pass\n"
             "through, derived types are packed where the planner says it pays), interleaved in one job on\n"
             "MPI_COMM_WORLD. Point-to-point rows pair rank 2i with 2i+1. Every row checks that the bytes\n"
             "received through shunt equal the library's.");
    line.flag("--quick", "a CI smoke test: 8 and 512 bytes, 3 trials", [&] { quick = true; });
    line.option("--families", "LIST", "comma-separated subset of the families (--help lists them)",
                [&](const std::string& v) { only = "," + v + ","; });
    std::string epilog =
        "Columns: lib us and shunt us: one step (see below), best of interleaved trials, the slowest\n"
        "rank's time; rate: lib / shunt (above 1: shunt faster); lib/lib: the library against a second\n"
        "run of itself interleaved the same way (how far this machine moves identical runs apart); added\n"
        "ns: (shunt - lib) per intercepted call of the step. Families and their step:\n";
    for (const family& f : families) {
        epilog.append("  ").append(f.name).append(": ").append(f.what).append("\n");
    }
    line.epilog(epilog);
    options o = line.parse(argc, argv);
    if (!o.was_given("--trials")) o.trials = quick ? 3 : 30;
    if (!o.was_given("--time")) o.time_s = quick ? 0.2 : 2;
    std::vector<std::int64_t> sizes = o.sizes;
    if (sizes.empty())
        sizes = quick ? std::vector<std::int64_t>{8, 512} : std::vector<std::int64_t>{1, 8, 64, 128, 512, 4096, 16384};
    auto wanted = [&](const family& f) {
        return only.empty() || only.find("," + std::string(f.name) + ",") != std::string::npos;
    };
    auto rows = [&](const family& f) {
        std::vector<std::int64_t> out;
        for (std::int64_t s : sizes) {
            const std::int64_t b = std::max(f.min_size, f.vector || f.min_size == 8 ? s / 8 * 8 : s);
            if (std::find(out.begin(), out.end(), b) == out.end()) out.push_back(b);
        }
        return out;
    };
    if (o.list) {
        for (const family& f : families)
            for (std::int64_t s : rows(f))
                if (wanted(f) && o.selected(std::string(f.name) + "/" + format_bytes(s)))
                    std::printf("%s/%s\n", f.name, format_bytes(s).c_str());
        return 0;
    }
    if (!calls_shunt("bench-calls", "MPI_Isend", reinterpret_cast<void*>(&MPI_Isend),
                     reinterpret_cast<void*>(&PMPI_Isend)))
        return 1;

    MPI_Init(&argc, &argv);
    int rank = 0, p = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    const int peer = (rank ^ 1) < p ? rank ^ 1 : MPI_PROC_NULL;
    std::optional<table> out;
    if (rank == 0) {
        out.emplace(std::vector<column>{{"family", 14, "family", true},
                                        {"size", 6, "bytes"},
                                        {"lib us", 9, "library_us"},
                                        {"shunt us", 9, "shunt_us"},
                                        {"rate", 5, "rate"},
                                        {"lib/lib", 7, "library_over_library"},
                                        {"added ns", 8, "added_ns_per_call"}},
                    o);
        char version[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
        int len = 0;
        MPI_Get_library_version(version, &len);
        std::string v(version, static_cast<std::size_t>(len));
        out->note("bench-calls: " + std::to_string(p) + " ranks; library = " + v.substr(0, v.find_first_of("\r\n")));
        out->note("best of up to " + std::to_string(o.trials) +
                  " interleaved trials (the slowest rank's time); rate = lib / shunt");
    }
    std::int64_t mismatches = 0;
    for (const family& f : families) {
        if (!wanted(f)) continue;
        const std::string name = f.name;
        for (const std::int64_t bytes : rows(f)) {
            if (!o.selected(name + "/" + format_bytes(bytes))) continue;
            // The vector: bytes / 8 blocks of 8 bytes, 16 bytes apart (every other double).
            MPI_Datatype type = MPI_BYTE;
            int count = static_cast<int>(bytes);
            std::int64_t span = bytes;
            if (f.vector) {
                SHUNT_CHECK_MPI(PMPI_Type_vector(static_cast<int>(bytes / 8), 1, 2, MPI_DOUBLE, &type));
                SHUNT_CHECK_MPI(MPI_Type_commit(&type));  // through shunt, which learns the type here
                count = 1;
                span = 2 * bytes;
            }
            const std::int64_t each = f.name == std::string("allgather") || f.name == std::string("alltoall") ||
                                              f.name == std::string("ialltoall") ||
                                              f.name == std::string("reduce_scatter")
                                          ? bytes * p
                                          : span;
            const int n = static_cast<int>(bytes / 8);  // doubles of a reduction
            std::vector<unsigned char> in(static_cast<std::size_t>(each * (f.calls == window + 2 ? window : 1) + 64));
            for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<unsigned char>((i * 7 + rank * 13) % 251);
            std::array<std::vector<unsigned char>, 2> res;
            for (auto& r : res) r.assign(in.size() + 64, 0);
            std::array<MPI_Request, window> reqs{};
            // One step through the library (shunt false) or through shunt's shims, receiving into `dst`.
            auto step = [&](bool shunt, unsigned char* dst) {
                const auto* d_in = reinterpret_cast<const double*>(in.data());
                auto* d_out = reinterpret_cast<double*>(dst);
                if (name == "latency" || name == "latency_vec") {
                    if (peer == MPI_PROC_NULL) return;
                    for (int k = 0; k < 2; ++k) {
                        const bool sends = (rank % 2 == 0) == (k == 0);
                        if (sends)
                            shunt ? MPI_Send(in.data(), count, type, peer, 1, MPI_COMM_WORLD)
                                  : PMPI_Send(in.data(), count, type, peer, 1, MPI_COMM_WORLD);
                        else
                            shunt ? MPI_Recv(dst, count, type, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE)
                                  : PMPI_Recv(dst, count, type, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    }
                } else if (name == "bandwidth" || name == "bandwidth_vec") {
                    if (peer == MPI_PROC_NULL) return;
                    const bool sends = rank % 2 == 0;
                    for (int w = 0; w < window; ++w) {
                        if (sends)
                            shunt ? MPI_Isend(in.data() + w * span, count, type, peer, 2, MPI_COMM_WORLD, &reqs[w])
                                  : PMPI_Isend(in.data() + w * span, count, type, peer, 2, MPI_COMM_WORLD, &reqs[w]);
                        else
                            shunt ? MPI_Irecv(dst + w * span, count, type, peer, 2, MPI_COMM_WORLD, &reqs[w])
                                  : PMPI_Irecv(dst + w * span, count, type, peer, 2, MPI_COMM_WORLD, &reqs[w]);
                    }
                    shunt ? MPI_Waitall(window, reqs.data(), MPI_STATUSES_IGNORE)
                          : PMPI_Waitall(window, reqs.data(), MPI_STATUSES_IGNORE);
                    if (sends)
                        shunt ? MPI_Recv(nullptr, 0, MPI_BYTE, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE)
                              : PMPI_Recv(nullptr, 0, MPI_BYTE, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    else
                        shunt ? MPI_Send(nullptr, 0, MPI_BYTE, peer, 3, MPI_COMM_WORLD)
                              : PMPI_Send(nullptr, 0, MPI_BYTE, peer, 3, MPI_COMM_WORLD);
                } else if (name == "sendrecv") {
                    if (peer == MPI_PROC_NULL) return;
                    shunt ? MPI_Sendrecv(in.data(), count, type, peer, 4, dst, count, type, peer, 4, MPI_COMM_WORLD,
                                         MPI_STATUS_IGNORE)
                          : PMPI_Sendrecv(in.data(), count, type, peer, 4, dst, count, type, peer, 4, MPI_COMM_WORLD,
                                          MPI_STATUS_IGNORE);
                } else if (name == "allreduce") {
                    shunt ? MPI_Allreduce(d_in, d_out, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD)
                          : PMPI_Allreduce(d_in, d_out, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
                } else if (name == "reduce") {
                    shunt ? MPI_Reduce(d_in, d_out, n, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD)
                          : PMPI_Reduce(d_in, d_out, n, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
                } else if (name == "bcast") {
                    if (rank == 0) std::memcpy(dst, in.data(), static_cast<std::size_t>(bytes));
                    shunt ? MPI_Bcast(dst, count, MPI_BYTE, 0, MPI_COMM_WORLD)
                          : PMPI_Bcast(dst, count, MPI_BYTE, 0, MPI_COMM_WORLD);
                } else if (name == "allgather") {
                    shunt ? MPI_Allgather(in.data(), count, MPI_BYTE, dst, count, MPI_BYTE, MPI_COMM_WORLD)
                          : PMPI_Allgather(in.data(), count, MPI_BYTE, dst, count, MPI_BYTE, MPI_COMM_WORLD);
                } else if (name == "alltoall") {
                    shunt ? MPI_Alltoall(in.data(), count, MPI_BYTE, dst, count, MPI_BYTE, MPI_COMM_WORLD)
                          : PMPI_Alltoall(in.data(), count, MPI_BYTE, dst, count, MPI_BYTE, MPI_COMM_WORLD);
                } else if (name == "reduce_scatter") {
                    shunt ? MPI_Reduce_scatter_block(d_in, d_out, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD)
                          : PMPI_Reduce_scatter_block(d_in, d_out, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
                } else if (name == "iallreduce") {
                    MPI_Request r;
                    if (shunt) {
                        MPI_Iallreduce(d_in, d_out, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &r);
                        MPI_Wait(&r, MPI_STATUS_IGNORE);
                    } else {
                        PMPI_Iallreduce(d_in, d_out, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &r);
                        PMPI_Wait(&r, MPI_STATUS_IGNORE);
                    }
                } else if (name == "ialltoall") {
                    MPI_Request r;
                    if (shunt) {
                        MPI_Ialltoall(in.data(), count, MPI_BYTE, dst, count, MPI_BYTE, MPI_COMM_WORLD, &r);
                        MPI_Wait(&r, MPI_STATUS_IGNORE);
                    } else {
                        PMPI_Ialltoall(in.data(), count, MPI_BYTE, dst, count, MPI_BYTE, MPI_COMM_WORLD, &r);
                        PMPI_Wait(&r, MPI_STATUS_IGNORE);
                    }
                } else if (name == "pack") {
                    int pos = 0;
                    shunt ? MPI_Pack(in.data(), count, type, dst, static_cast<int>(bytes), &pos, MPI_COMM_WORLD)
                          : PMPI_Pack(in.data(), count, type, dst, static_cast<int>(bytes), &pos, MPI_COMM_WORLD);
                }
            };
            // Every variant into the same buffer (which buffer a variant writes moves its time by more
            // than shunt's cost: cache sets, pages); a second run of the library: lib/lib is this
            // machine's noise. Then one untimed step of each into its own buffer, compared.
            unsigned char* timed = res[0].data();
            const auto t = measure_collective(
                {[&] { step(false, timed); }, [&] { step(true, timed); }, [&] { step(false, timed); }}, o, 3);
            for (auto& r : res) std::fill(r.begin(), r.end(), 0);
            step(false, res[0].data());
            step(true, res[1].data());
            if (res[0] != res[1]) ++mismatches;
            if (f.vector) MPI_Type_free(&type);
            if (rank == 0)
                out->row({text_cell(name), bytes_cell(bytes), number_cell(t[0] * 1e6, 3), number_cell(t[1] * 1e6, 3),
                          number_cell(t[0] / t[1], 2), number_cell(t[0] / t[2], 2),
                          number_cell((t[1] - t[0]) * 1e9 / f.calls, 1)});
        }
    }
    std::int64_t all = 0;
    PMPI_Allreduce(&mismatches, &all, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    int rc = 0;
    if (all != 0) {
        if (rank == 0)
            std::fprintf(stderr, "bench-calls: %lld rows where shunt's bytes differ from the library's\n",
                         static_cast<long long>(all));
        rc = 1;
    }
    MPI_Finalize();
    return rc;
}
