// tests/mpi/collectives/test_schedule.cpp: the collective algorithms on a simulated transport (threads, synchronous sends) over many random, irregular hierarchies.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <shunt/collectives/allgather.hpp>
#include <shunt/collectives/allreduce.hpp>
#include <shunt/collectives/alltoall.hpp>
#include <shunt/collectives/bcast.hpp>
#include <shunt/collectives/reduce_scatter_block.hpp>
#include <shunt/topology/hierarchy.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

// ---- A transport between threads. Every send is synchronous (it completes only once the
// receiver has taken it), the strictest behaviour MPI allows, so a schedule that could
// deadlock under rendezvous does deadlock here and is reported after a timeout.

struct message {
    std::vector<std::byte> data;
    bool taken = false;
};

struct sim_world {
    explicit sim_world(int n) : size(n), channels(static_cast<std::size_t>(n * n)) {}
    int size;
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::deque<std::shared_ptr<message>>> channels;  // [src * size + dst]
    std::atomic<long> messages{0}, bytes{0};
};

struct sim_reduction {
    bool floating = false;  // int64 sum or double sum
    std::int64_t element_size() const { return 8; }
};

class sim_transport {
public:
    using reduction_type = sim_reduction;
    sim_transport(sim_world& w, int rank) : w_(&w), rank_(rank) {}
    int size() const { return w_->size; }
    int rank() const { return rank_; }

    void send(int peer, const void* data, std::int64_t bytes) { wait_taken(post(peer, data, bytes)); }
    void recv(int peer, void* data, std::int64_t bytes) { take(peer, data, bytes); }
    void sendrecv(int dst, const void* s, std::int64_t sb, int src, void* r, std::int64_t rb) {
        auto m = post(dst, s, sb);
        take(src, r, rb);
        wait_taken(m);
    }
    void exchange(std::span<const shunt::send_message> sends, std::span<const shunt::recv_message> recvs) {
        std::vector<std::shared_ptr<message>> posted;
        for (const auto& m : sends) posted.push_back(post(m.peer, m.data, m.bytes));
        for (const auto& m : recvs) take(m.peer, m.data, m.bytes);
        for (auto& m : posted) wait_taken(m);
    }
    void reduce(const sim_reduction& red, const void* in, void* inout, std::int64_t n) {
        for (std::int64_t i = 0; i < n; ++i) {
            if (red.floating) {
                double a, b;
                std::memcpy(&a, static_cast<const std::byte*>(in) + i * 8, 8);
                std::memcpy(&b, static_cast<std::byte*>(inout) + i * 8, 8);
                b = a + b;
                std::memcpy(static_cast<std::byte*>(inout) + i * 8, &b, 8);
            } else {
                std::int64_t a, b;
                std::memcpy(&a, static_cast<const std::byte*>(in) + i * 8, 8);
                std::memcpy(&b, static_cast<std::byte*>(inout) + i * 8, 8);
                b = static_cast<std::int64_t>(static_cast<std::uint64_t>(a) + static_cast<std::uint64_t>(b));
                std::memcpy(static_cast<std::byte*>(inout) + i * 8, &b, 8);
            }
        }
    }
    void copy(void* dst, const void* src, std::int64_t bytes) {
        if (bytes > 0) std::memmove(dst, src, static_cast<std::size_t>(bytes));
    }
    shunt::host_buffer scratch(std::int64_t bytes) { return shunt::host_buffer(bytes); }

private:
    static constexpr auto timeout = std::chrono::seconds(20);
    std::shared_ptr<message> post(int peer, const void* data, std::int64_t bytes) {
        if (peer < 0 || peer >= w_->size || peer == rank_) throw std::logic_error("send to a bad peer");
        if (bytes <= 0) return nullptr;  // zero-byte messages are not sent (transport contract)
        auto m = std::make_shared<message>();
        m->data.assign(static_cast<const std::byte*>(data), static_cast<const std::byte*>(data) + bytes);
        std::lock_guard lock(w_->mu);
        w_->channels[static_cast<std::size_t>(rank_ * w_->size + peer)].push_back(m);
        w_->messages++;
        w_->bytes += bytes;
        w_->cv.notify_all();
        return m;
    }
    void take(int peer, void* data, std::int64_t bytes) {
        if (peer < 0 || peer >= w_->size || peer == rank_) throw std::logic_error("receive from a bad peer");
        if (bytes <= 0) return;
        std::unique_lock lock(w_->mu);
        auto& ch = w_->channels[static_cast<std::size_t>(peer * w_->size + rank_)];
        if (!w_->cv.wait_for(lock, timeout, [&] { return !ch.empty(); }))
            throw std::runtime_error("deadlock: rank " + std::to_string(rank_) + " waits for rank " +
                                     std::to_string(peer));
        auto m = ch.front();
        ch.pop_front();
        if (static_cast<std::int64_t>(m->data.size()) != bytes)
            throw std::runtime_error("size mismatch: rank " + std::to_string(rank_) + " expected " +
                                     std::to_string(bytes) + " bytes from " + std::to_string(peer) + ", got " +
                                     std::to_string(m->data.size()));
        std::memcpy(data, m->data.data(), static_cast<std::size_t>(bytes));
        m->taken = true;
        w_->cv.notify_all();
    }
    void wait_taken(const std::shared_ptr<message>& m) {
        if (!m) return;
        std::unique_lock lock(w_->mu);
        if (!w_->cv.wait_for(lock, timeout, [&] { return m->taken; }))
            throw std::runtime_error("deadlock: a send of rank " + std::to_string(rank_) + " is never received");
    }
    sim_world* w_;
    int rank_;
};

static_assert(shunt::transport<sim_transport>);

/// Runs body(transport) on `p` threads; returns the first error message, empty if none.
std::string run_ranks(int p, const std::function<void(sim_transport&)>& body) {
    sim_world w(p);
    std::vector<std::string> errors(static_cast<std::size_t>(p));
    std::vector<std::thread> threads;
    for (int r = 0; r < p; ++r) {
        threads.emplace_back([&, r] {
            sim_transport t(w, r);
            try {
                body(t);
            } catch (const std::exception& e) {
                errors[static_cast<std::size_t>(r)] = e.what();
            }
        });
    }
    for (auto& th : threads) th.join();
    for (const auto& e : errors)
        if (!e.empty()) return e;
    return {};
}

/// A random nested hierarchy of p ranks with up to `max_levels` levels, arbitrary placement.
shunt::hierarchy random_hierarchy(std::mt19937& rng, int p, int max_levels) {
    std::vector<std::vector<std::int64_t>> labels;
    std::vector<std::int64_t> current(static_cast<std::size_t>(p));
    int groups = std::uniform_int_distribution<int>(1, p)(rng);
    for (int r = 0; r < p; ++r)
        current[static_cast<std::size_t>(r)] = std::uniform_int_distribution<int>(0, groups - 1)(rng);
    int levels = std::uniform_int_distribution<int>(0, max_levels)(rng);
    for (int k = 0; k < levels; ++k) {
        labels.push_back(current);
        // Merge groups at random for the next level: map each label to a coarser one.
        int coarse = std::max(1, groups / 2);
        std::vector<std::int64_t> merge(static_cast<std::size_t>(groups));
        for (auto& m : merge) m = std::uniform_int_distribution<int>(0, coarse - 1)(rng);
        for (auto& c : current) c = merge[static_cast<std::size_t>(c)];
        groups = coarse;
    }
    return shunt::hierarchy(p, labels, {});
}

/// A regular block hierarchy: sizes[k] subgroups per group at level k (innermost first).
shunt::hierarchy block_hierarchy(std::vector<int> sizes) {
    int p = 1;
    for (int s : sizes) p *= s;
    std::vector<std::vector<std::int64_t>> labels;
    int span = 1;
    for (std::size_t k = 0; k + 1 < sizes.size(); ++k) {
        span *= sizes[k];
        std::vector<std::int64_t> l(static_cast<std::size_t>(p));
        for (int r = 0; r < p; ++r) l[static_cast<std::size_t>(r)] = r / span;
        labels.push_back(l);
    }
    return shunt::hierarchy(p, labels, {});
}

std::int64_t input(int rank, std::int64_t i) { return (rank + 1) * 1000003LL + i * 7919 + (i % 13) * rank; }

void check_all(const shunt::hierarchy& h, const shunt::collective_options& opt, std::int64_t count) {
    const int p = h.size();
    CAPTURE(h.describe());
    CAPTURE(count);
    // allreduce, out of place and in place, integers exact
    for (bool in_place : {false, true}) {
        std::vector<std::vector<std::int64_t>> out(static_cast<std::size_t>(p));
        auto err = run_ranks(p, [&](sim_transport& t) {
            std::vector<std::int64_t> in(static_cast<std::size_t>(count)), res(static_cast<std::size_t>(count), -1);
            for (std::int64_t i = 0; i < count; ++i) in[static_cast<std::size_t>(i)] = input(t.rank(), i);
            if (in_place) {
                res = in;
                shunt::allreduce(t, h, res.data(), res.data(), count, sim_reduction{}, opt);
            } else {
                shunt::allreduce(t, h, in.data(), res.data(), count, sim_reduction{}, opt);
            }
            out[static_cast<std::size_t>(t.rank())] = res;
        });
        REQUIRE(err == "");
        for (std::int64_t i = 0; i < count; ++i) {
            std::int64_t want = 0;
            for (int r = 0; r < p; ++r) want += input(r, i);
            for (int r = 0; r < p; ++r) CHECK(out[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)] == want);
        }
    }
    // allreduce of doubles: identical bits on every rank and in a second run
    {
        std::vector<std::vector<double>> out(static_cast<std::size_t>(2 * p));
        for (int run = 0; run < 2; ++run) {
            auto err = run_ranks(p, [&](sim_transport& t) {
                std::vector<double> in(static_cast<std::size_t>(count)), res(static_cast<std::size_t>(count));
                for (std::int64_t i = 0; i < count; ++i)
                    in[static_cast<std::size_t>(i)] = 1.0 / static_cast<double>(input(t.rank(), i) % 97 + 1);
                shunt::allreduce(t, h, in.data(), res.data(), count, sim_reduction{true}, opt);
                out[static_cast<std::size_t>(run * p + t.rank())] = res;
            });
            REQUIRE(err == "");
        }
        for (int r = 1; r < 2 * p && count > 0; ++r)  // count 0: empty vectors, whose data() may be null
            CHECK(std::memcmp(out[0].data(), out[static_cast<std::size_t>(r)].data(),
                              static_cast<std::size_t>(count) * 8) == 0);
    }
    // reduce_scatter_block
    for (bool in_place : {false, true}) {
        const std::int64_t c = count / p + 1;
        std::vector<std::vector<std::int64_t>> out(static_cast<std::size_t>(p));
        auto err = run_ranks(p, [&](sim_transport& t) {
            std::vector<std::int64_t> in(static_cast<std::size_t>(c * p)), res(static_cast<std::size_t>(c));
            for (std::int64_t i = 0; i < c * p; ++i) in[static_cast<std::size_t>(i)] = input(t.rank(), i);
            if (in_place) {
                shunt::reduce_scatter_block(t, h, in.data(), in.data(), c, sim_reduction{}, opt);
                res.assign(in.begin(), in.begin() + c);
            } else {
                shunt::reduce_scatter_block(t, h, in.data(), res.data(), c, sim_reduction{}, opt);
            }
            out[static_cast<std::size_t>(t.rank())] = res;
        });
        REQUIRE(err == "");
        for (int r = 0; r < p; ++r)
            for (std::int64_t i = 0; i < c; ++i) {
                std::int64_t want = 0;
                for (int s = 0; s < p; ++s) want += input(s, r * c + i);
                CHECK(out[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)] == want);
            }
    }
    // allgather (bytes), in place and not
    for (bool in_place : {false, true}) {
        const std::int64_t b = count % 11 + 1;
        std::vector<std::vector<std::uint8_t>> out(static_cast<std::size_t>(p));
        auto err = run_ranks(p, [&](sim_transport& t) {
            std::vector<std::uint8_t> mine(static_cast<std::size_t>(b)), res(static_cast<std::size_t>(b * p), 0);
            for (std::int64_t i = 0; i < b; ++i)
                mine[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(t.rank() * 31 + i);
            if (in_place) {
                std::memcpy(res.data() + t.rank() * b, mine.data(), static_cast<std::size_t>(b));
                shunt::allgather(t, h, res.data() + t.rank() * b, res.data(), b, opt);
            } else {
                shunt::allgather(t, h, mine.data(), res.data(), b, opt);
            }
            out[static_cast<std::size_t>(t.rank())] = res;
        });
        REQUIRE(err == "");
        for (int r = 0; r < p; ++r)
            for (int s = 0; s < p; ++s)
                for (std::int64_t i = 0; i < b; ++i)
                    CHECK(out[static_cast<std::size_t>(r)][static_cast<std::size_t>(s * b + i)] ==
                          static_cast<std::uint8_t>(s * 31 + i));
    }
    // bcast from every root, both the tree and the scatter path
    for (int root = 0; root < p; ++root) {
        for (std::int64_t bytes : {count + 1, 3 * count + 5}) {
            shunt::collective_options o = opt;
            o.bcast_tree_bytes = 2 * count;
            std::vector<std::vector<std::uint8_t>> out(static_cast<std::size_t>(p));
            auto err = run_ranks(p, [&](sim_transport& t) {
                std::vector<std::uint8_t> buf(static_cast<std::size_t>(bytes), 0);
                if (t.rank() == root)
                    for (std::int64_t i = 0; i < bytes; ++i)
                        buf[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(i * 7 + root);
                shunt::bcast(t, h, buf.data(), bytes, root, o);
                out[static_cast<std::size_t>(t.rank())] = buf;
            });
            REQUIRE(err == "");
            for (int r = 0; r < p; ++r)
                for (std::int64_t i = 0; i < bytes; ++i)
                    CHECK(out[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)] ==
                          static_cast<std::uint8_t>(i * 7 + root));
        }
    }
    // alltoall at every aggregation level and flat, in place and not
    for (int level = -1; level <= h.levels(); ++level) {
        for (bool in_place : {false, true}) {
            shunt::collective_options o = opt;
            o.alltoall_level = level;
            const std::int64_t b = count % 5 + 1;
            std::vector<std::vector<std::uint8_t>> out(static_cast<std::size_t>(p));
            auto err = run_ranks(p, [&](sim_transport& t) {
                std::vector<std::uint8_t> in(static_cast<std::size_t>(b * p)), res(static_cast<std::size_t>(b * p), 0);
                for (int j = 0; j < p; ++j)
                    for (std::int64_t i = 0; i < b; ++i)
                        in[static_cast<std::size_t>(j * b + i)] =
                            static_cast<std::uint8_t>(t.rank() * 16 + j + i * 101);
                if (in_place) {
                    res = in;
                    shunt::alltoall(t, h, res.data(), res.data(), b, o);
                } else {
                    shunt::alltoall(t, h, in.data(), res.data(), b, o);
                }
                out[static_cast<std::size_t>(t.rank())] = res;
            });
            REQUIRE(err == "");
            for (int r = 0; r < p; ++r)
                for (int s = 0; s < p; ++s)
                    for (std::int64_t i = 0; i < b; ++i)
                        CHECK(out[static_cast<std::size_t>(r)][static_cast<std::size_t>(s * b + i)] ==
                              static_cast<std::uint8_t>(s * 16 + r + i * 101));
        }
    }
}

}  // namespace

TEST_CASE("collectives on regular block hierarchies, every flat algorithm") {
    for (auto sizes :
         std::vector<std::vector<int>>{{1}, {2}, {3}, {4}, {2, 2}, {4, 2}, {2, 4}, {3, 2}, {2, 2, 2}, {2, 3, 2}}) {
        auto h = block_hierarchy(sizes);
        for (auto algo :
             {shunt::flat_algorithm::automatic, shunt::flat_algorithm::ring, shunt::flat_algorithm::halving}) {
            shunt::collective_options opt;
            opt.flat = algo;
            for (std::int64_t count : {0, 1, 5, 37}) check_all(h, opt, count);
        }
    }
}

TEST_CASE("collectives on random irregular hierarchies") {
    std::mt19937 rng(20240611);
    for (int trial = 0; trial < 60; ++trial) {
        int p = std::uniform_int_distribution<int>(1, 11)(rng);
        auto h = random_hierarchy(rng, p, 3);
        shunt::collective_options opt;
        opt.flat = trial % 2 ? shunt::flat_algorithm::ring : shunt::flat_algorithm::automatic;
        check_all(h, opt, std::uniform_int_distribution<int>(0, 40)(rng));
    }
}

TEST_CASE("allreduce on a regular hierarchy works in place: no op needs a packing copy") {
    for (auto sizes : std::vector<std::vector<int>>{{4}, {2, 2}, {4, 2}, {2, 3, 2}}) {
        auto h = block_hierarchy(sizes);
        CAPTURE(h.describe());
        auto own = shunt::detail::free_ranges(h, 1000);
        for (int me = 0; me < h.size(); ++me)
            for (int k = 0; k <= h.levels(); ++k)
                for (const auto& op : shunt::detail::step_ops(h, k, me, own))
                    CHECK(shunt::detail::layout_of(op, own).contiguous);
    }
}

TEST_CASE("hierarchical allreduce moves less data across the top level than a flat one") {
    // 2 groups of 4: the top level carries each rank's 1/4 part once, not the whole vector.
    auto h = block_hierarchy({4, 2});
    const std::int64_t count = 4000;
    auto own = shunt::detail::free_ranges(h, count);
    std::int64_t top_elements = 0;
    for (int me = 0; me < h.size(); ++me)
        for (const auto& op : shunt::detail::step_ops(h, h.levels(), me, own)) {
            CHECK(op.holders.size() == 2u);
            auto l = shunt::detail::layout_of(op, own);
            top_elements += l.total - l.shares[static_cast<std::size_t>(
                                          std::find(op.holders.begin(), op.holders.end(), me) - op.holders.begin())];
        }
    CHECK(top_elements == count);  // summed over the 8 ranks: each sends 1/8 of the vector across
}

TEST_CASE("a hierarchy rejects groups that do not nest and drops trivial levels") {
    CHECK_THROWS_AS(shunt::hierarchy(4, {{0, 0, 1, 1}, {0, 1, 1, 0}}, {"node", "switch"}), shunt::error);
    shunt::hierarchy h(4, {{0, 1, 2, 3}, {5, 5, 9, 9}, {1, 1, 1, 1}}, {"package", "node", "switch"});
    CHECK(h.trivial(0));
    CHECK_FALSE(h.trivial(1));
    CHECK(h.trivial(2));
    auto e = h.without_trivial_levels();
    CHECK(e.levels() == 1);
    CHECK(e.name(0) == "node");
    CHECK(e.regular());
    shunt::hierarchy u(4, {{0, 0, 1, 0}}, {"node"});
    CHECK_FALSE(u.regular());
    CHECK(u.members(0, 0).size() == 3u);
    CHECK(u.members(0, 1)[0] == 2);
    CHECK(u.position(0, 3) == 2);
    CHECK(u.representative(0, 1, 3) == 2);
    CHECK(u.representative(0, 0, 2) == 0);
}
