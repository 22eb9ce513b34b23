// bench/cluster/link_check.cpp: sanity check of the emulated cluster: bandwidth between two nodes (must be the link rate), with every rank of a node sending at once, and inside a node (shared memory).
#include <shunt/errors.hpp>  // before <mpi.h>: keeps the C++ bindings out

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

// Exchanges `bytes` both ways between ranks a and b, `reps` times (bounded by 30 s of work);
// returns the best per-direction rate in Gbit/s, on every rank.
double exchange_rate(int a, int b, long bytes, int reps) {
    int me = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    std::vector<char> out(static_cast<std::size_t>(bytes), 1), in(static_cast<std::size_t>(bytes));
    double best = 0;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) {
        int go = std::chrono::steady_clock::now() - start < std::chrono::seconds(30);
        MPI_Bcast(&go, 1, MPI_INT, 0, MPI_COMM_WORLD);
        if (!go) break;
        MPI_Barrier(MPI_COMM_WORLD);
        double t = MPI_Wtime();
        const int chunk = 1 << 24;
        if (me == a || me == b) {
            for (long off = 0; off < bytes; off += chunk) {
                int n = static_cast<int>(bytes - off < chunk ? bytes - off : chunk);
                MPI_Sendrecv(out.data() + off, n, MPI_BYTE, me == a ? b : a, 7, in.data() + off, n, MPI_BYTE,
                             me == a ? b : a, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            }
        }
        t = MPI_Wtime() - t;
        double rate = t > 0 ? 8.0 * static_cast<double>(bytes) / t / 1e9 : 0;
        MPI_Bcast(&rate, 1, MPI_DOUBLE, a, MPI_COMM_WORLD);
        if (rate > best) best = rate;
    }
    return best;
}

// Every rank of the first node exchanges `bytes` both ways with the rank at the same index on the
// second node, all pairs at once (the outer step of a hierarchical collective); returns the best
// per-direction rate of the node link in Gbit/s (all pairs' bytes over the slowest pair's time).
double all_pairs_rate(const std::vector<int>& first, const std::vector<int>& second, long bytes, int reps) {
    int me = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    int partner = -1;
    const std::size_t pairs = std::min(first.size(), second.size());
    for (std::size_t i = 0; i < pairs; ++i) {
        if (first[i] == me) partner = second[i];
        if (second[i] == me) partner = first[i];
    }
    std::vector<char> out(static_cast<std::size_t>(bytes), 1), in(static_cast<std::size_t>(bytes));
    double best = 0;
    for (int i = 0; i < reps; ++i) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t = MPI_Wtime();
        if (partner >= 0)
            for (long off = 0; off < bytes; off += 1 << 24) {
                int n = static_cast<int>(bytes - off < (1 << 24) ? bytes - off : 1 << 24);
                MPI_Sendrecv(out.data() + off, n, MPI_BYTE, partner, 8, in.data() + off, n, MPI_BYTE, partner, 8,
                             MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            }
        t = MPI_Wtime() - t;
        double slowest = 0;
        MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        const double rate = slowest > 0 ? 8.0 * static_cast<double>(bytes) * pairs / slowest / 1e9 : 0;
        if (rate > best) best = rate;
    }
    return best;
}

}  // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    double expect = 0;
    long bytes = 64L << 20;
    int reps = 4;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--expect-gbit" && i + 1 < argc)
            expect = std::atof(argv[++i]);
        else if (a == "--bytes" && i + 1 < argc)
            bytes = std::atol(argv[++i]);
        else if (a == "--reps" && i + 1 < argc)
            reps = std::atoi(argv[++i]);
        else {
            std::fprintf(stderr, "usage: cluster_link_check [--expect-gbit G] [--bytes N] [--reps N]\n");
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    if (bytes < 1 || reps < 1 || reps > 100) MPI_Abort(MPI_COMM_WORLD, 2);
    int me = 0, n = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    char name[MPI_MAX_PROCESSOR_NAME] = {0};
    int len = 0;
    MPI_Get_processor_name(name, &len);
    std::vector<char> names(static_cast<std::size_t>(n) * MPI_MAX_PROCESSOR_NAME);
    MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR,
                  MPI_COMM_WORLD);
    auto host = [&](int r) { return std::string(names.data() + static_cast<std::size_t>(r) * MPI_MAX_PROCESSOR_NAME); };
    int other_node = -1, same_node = -1;
    for (int r = 1; r < n; ++r) {
        if (host(r) != host(0) && other_node < 0) other_node = r;
        if (host(r) == host(0) && same_node < 0) same_node = r;
    }
    int status = 0;
    if (other_node >= 0) {
        double g = exchange_rate(0, other_node, bytes, reps);
        if (me == 0)
            std::printf("inter-node %s <-> %s: %.3f Gbit/s per direction\n", host(0).c_str(), host(other_node).c_str(),
                        g);
        // Above the rate: traffic bypasses the shaped link. The lower bound is loose because a
        // loaded 2-core machine slows TCP processing, not the link.
        if (expect > 0 && (g < 0.3 * expect || g > 1.3 * expect)) {
            if (me == 0) std::printf("FAIL: expected about %.3f Gbit/s between nodes (0.3x .. 1.3x)\n", expect);
            status = 1;
        }
    } else if (me == 0) {
        std::printf("no second node among %d ranks\n", n);
        if (expect > 0) status = 1;
    }
    std::vector<int> first, second;  // the ranks of node 0's host and of other_node's
    for (int r = 0; r < n; ++r) {
        if (host(r) == host(0)) first.push_back(r);
        if (other_node >= 0 && host(r) == host(other_node)) second.push_back(r);
    }
    if (other_node >= 0 && first.size() > 1 && second.size() > 1) {
        double g =
            all_pairs_rate(first, second, bytes / static_cast<long>(std::min(first.size(), second.size())), reps);
        if (me == 0)
            std::printf("inter-node, %zu pairs at once: %.3f Gbit/s per direction\n",
                        std::min(first.size(), second.size()), g);
    }
    if (same_node >= 0) {
        double g = exchange_rate(0, same_node, bytes, reps);
        if (me == 0) std::printf("intra-node %s: %.3f Gbit/s per direction\n", host(0).c_str(), g);
    }
    MPI_Finalize();
    return status;
}
