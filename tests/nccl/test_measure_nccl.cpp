// tests/nccl/test_measure_nccl.cpp: shunt-measure --nccl-tuner's loop (shunt/model/measure_nccl.hpp) and its NCCL
// calls (src/nccl_calls.hpp) on NCCL's CPU double: the bytes each collective moves are NCCL's count for its tuner, the
// algorithm and protocol reach NCCL through its environment, refusals skip what NCCL refuses and nothing else, and
// every rank gets the same tables. No figure: the double ignores NCCL_ALGO and NCCL_PROTO.
#include <doctest/doctest.h>
#include <mpi.h>
#include <nccl.h>

#include "../../src/nccl_calls.hpp"

#include <dlfcn.h>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

using namespace shunt;

namespace {

int world_rank() {
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}
int world_size() {
    int n = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
}

/// Host buffers with a guard after each: the test sees what a call wrote, and that nothing beyond.
struct host_memory {
    std::vector<std::vector<float>> blocks;
    std::size_t bytes = 0;
    tools::nccl_call_memory memory() {
        tools::nccl_call_memory m;
        m.allocate = [this](std::size_t n) {
            bytes = n;
            blocks.emplace_back(n / sizeof(float) + 64, 0.0f);
            return static_cast<void*>(blocks.back().data());
        };
        m.release = [](void*) {};
        m.synchronize = [](std::string&) { return true; };
        return m;
    }
};

tools::nccl_functions double_functions() {
    tools::nccl_functions f;
    std::string missing;
    REQUIRE_MESSAGE(f.resolve(RTLD_DEFAULT, missing), missing);
    // The linked double's own functions (these references also keep it linked: the rest is dlsym).
    const bool same =
        f.get_unique_id == &ncclGetUniqueId && f.all_gather == &ncclAllGather && f.last_error == &ncclGetLastError;
    CHECK(same);
    return f;
}

constexpr nccl_coll all_colls[] = {nccl_coll::broadcast, nccl_coll::reduce, nccl_coll::allgather,
                                   nccl_coll::reduce_scatter, nccl_coll::allreduce};

}  // namespace

TEST_CASE("nccl measure: each collective moves the bytes NCCL counts for its tuner") {
    const int p = world_size(), me = world_rank();
    host_memory host;
    const std::size_t max_bytes = nccl_measure_bytes(1 << 16, p);
    const nccl_measure_ops ops = tools::make_nccl_ops(double_functions(), host.memory(), max_bytes);
    std::string why;
    ops.force(nccl_algo::ring, nccl_proto::simple);
    REQUIRE(ops.open(why));
    const std::size_t bytes = nccl_measure_bytes(4000, p);
    CHECK(bytes % (4 * p) == 0);
    CHECK(bytes <= 4000);
    CHECK(bytes > 4000 - 4 * p);
    const std::size_t n = bytes / sizeof(float);
    for (const nccl_coll c : all_colls) {
        CAPTURE(to_string(c));
        if (host.blocks.empty()) REQUIRE(ops.run(c, bytes, 1, why));  // allocates the two buffers
        REQUIRE(host.blocks.size() == 2);
        CHECK(host.bytes == max_bytes);
        auto& send = host.blocks[0];
        auto& recv = host.blocks[1];
        for (std::size_t i = 0; i < send.size(); ++i) send[i] = static_cast<float>(me + 1);
        std::fill(recv.begin(), recv.end(), -7.0f);
        REQUIRE(ops.run(c, bytes, 1, why));
        // What the call must have written, and the first element it must not touch.
        const float sum = static_cast<float>(p * (p + 1) / 2);
        std::size_t written = n;
        bool right = true;
        switch (c) {
            case nccl_coll::allreduce:
                for (std::size_t i = 0; i < n; ++i) right = right && recv[i] == sum;
                break;
            case nccl_coll::broadcast:
                for (std::size_t i = 0; i < n; ++i) right = right && recv[i] == 1.0f;
                break;
            case nccl_coll::reduce:
                written = me == 0 ? n : 0;
                for (std::size_t i = 0; i < written; ++i) right = right && recv[i] == sum;
                break;
            case nccl_coll::allgather:  // the whole gathered buffer: n / p from each rank
                for (std::size_t i = 0; i < n; ++i)
                    right = right && recv[i] == static_cast<float>(i / (n / static_cast<std::size_t>(p)) + 1);
                break;
            case nccl_coll::reduce_scatter:  // the whole scattered buffer: n / p to each rank
                written = n / static_cast<std::size_t>(p);
                for (std::size_t i = 0; i < written; ++i) right = right && recv[i] == sum;
                break;
        }
        CHECK(right);
        for (std::size_t i = written; i < recv.size(); ++i) {
            if (recv[i] == -7.0f) continue;
            FAIL_CHECK("written beyond the call's bytes at element " << i);
            break;
        }
    }
    CHECK_FALSE(ops.run(nccl_coll::allreduce, max_bytes + 4 * p, 1, why));
    ops.close();
    CHECK_FALSE(ops.run(nccl_coll::allreduce, bytes, 1, why));
    ops.close();  // twice: nothing
}

TEST_CASE("nccl measure: every combination NCCL accepts is measured, the ones it refuses skipped") {
    const int p = world_size();
    const nccl_shape shape{p, 1};
    host_memory host;
    const std::vector<double> sizes = {1024, 8192, 65536};
    nccl_measure_ops ops = tools::make_nccl_ops(double_functions(), host.memory(), nccl_measure_bytes(65536, p));
    // NCCL's refusals, played by the test from what NCCL itself reads: no CollNet communicator,
    // and PAT only for allgather and reduce_scatter.
    const auto forced = [](const char* var) {
        const char* v = std::getenv(var);
        return std::string(v ? v : "");
    };
    const auto open = ops.open;
    ops.open = [&, open](std::string& why) {
        if (forced("NCCL_ALGO").starts_with("CollNet")) return why = "no CollNet here", false;
        return open(why);
    };
    const auto run = ops.run;
    std::set<std::string> seen_forced;
    ops.run = [&, run](nccl_coll c, std::size_t bytes, int reps, std::string& why) {
        seen_forced.insert(forced("NCCL_ALGO") + "/" + forced("NCCL_PROTO"));
        if (forced("NCCL_ALGO") == "PAT" && c != nccl_coll::allgather && c != nccl_coll::reduce_scatter)
            return why = "no algorithm/protocol available", false;
        return run(c, bytes, reps, why);
    };
    timing_policy quick{0, 2, 2, 1e-6, 0};
    std::vector<std::string> notes;
    const auto tables = measure_nccl_tables(
        ops, shape, all_colls, sizes, quick, [](const std::string&) { return true; },
        [&](const std::string& n) { notes.push_back(n); });

    // Expected: every collective for tree, ring, nvls and nvls_tree, allgather and reduce_scatter for PAT, each
    // with the three protocols; nothing for CollNet.
    std::set<std::string> expected;
    for (std::size_t a = 0; a < nccl_algo_count; ++a)
        for (std::size_t q = 0; q < nccl_proto_count; ++q)
            for (const nccl_coll c : all_colls) {
                const auto algo = static_cast<nccl_algo>(a);
                if (algo == nccl_algo::collnet_direct || algo == nccl_algo::collnet_chain) continue;
                if (algo == nccl_algo::pat && c != nccl_coll::allgather && c != nccl_coll::reduce_scatter) continue;
                expected.insert(table_names::nccl(c, algo, static_cast<nccl_proto>(q), shape));
            }
    std::set<std::string> got;
    for (const auto& [name, t] : tables) {
        got.insert(name);
        CAPTURE(name);
        REQUIRE(t.points().size() == sizes.size());
        for (std::size_t i = 0; i < sizes.size(); ++i) {
            CHECK(t.points()[i].size == static_cast<double>(nccl_measure_bytes(sizes[i], p)));
            CHECK(t.points()[i].time > 0);
            CHECK(std::isfinite(t.points()[i].time));
        }
    }
    CHECK(got == expected);
    CHECK(tables.size() == 4 * 3 * 5 + 2 * 3);
    // Every combination reached NCCL's environment with NCCL's own names, CollNet's never got a call.
    CHECK(seen_forced.count("PAT/LL128") == 1);
    CHECK(seen_forced.count("NVLSTree/Simple") == 1);
    CHECK(seen_forced.count("Tree/LL") == 1);
    CHECK(seen_forced.size() == 5 * 3);
    // Rank 0 notes each refusal: 6 CollNet communicators, PAT for 3 collectives x 3 protocols.
    if (world_rank() == 0) {
        CHECK(notes.size() == 6 + 9);
        CHECK(std::count_if(notes.begin(), notes.end(),
                            [](const std::string& n) { return n.find("no CollNet here") != std::string::npos; }) == 6);
    } else {
        CHECK(notes.empty());
    }
    // The same tables on every rank.
    std::string text;
    for (const auto& [name, t] : tables)
        for (const auto& pt : t.points())
            text += name + ":" + std::to_string(pt.size) + "=" + std::to_string(pt.time) + ";";
    unsigned long long len = text.size(), len0 = len;
    MPI_Bcast(&len0, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
    std::string text0 = text;
    text0.resize(len0);
    MPI_Bcast(text0.data(), static_cast<int>(len0), MPI_CHAR, 0, MPI_COMM_WORLD);
    CHECK(text0 == text);

    // Only what some rank wants: here rank 0 alone wants ring's allreduce tables.
    const auto some = measure_nccl_tables(
        ops, shape, all_colls, sizes, quick,
        [](const std::string& n) { return world_rank() == 0 && n.starts_with("nccl.allreduce.ring."); }, nullptr);
    std::set<std::string> some_names;
    for (const auto& [name, t] : some) some_names.insert(name);
    CHECK(some_names ==
          std::set<std::string>{table_names::nccl(nccl_coll::allreduce, nccl_algo::ring, nccl_proto::ll, shape),
                                table_names::nccl(nccl_coll::allreduce, nccl_algo::ring, nccl_proto::ll128, shape),
                                table_names::nccl(nccl_coll::allreduce, nccl_algo::ring, nccl_proto::simple, shape)});
    ::unsetenv("NCCL_ALGO");
    ::unsetenv("NCCL_PROTO");
}
