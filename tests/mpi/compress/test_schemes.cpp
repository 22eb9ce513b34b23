// tests/mpi/compress/test_schemes.cpp: the compressed allreduce and reduce-scatter schemes (collectives/compressed.hpp) on real ranks, the library's exact MPI_Allreduce and MPI_Reduce_scatter as oracle: each method's error bound, error feedback's cumulative sums, results equal on every rank, the hierarchical form, and the NaN/Inf guard that every rank obeys alike.
#include <doctest/doctest.h>

#include <shunt/collectives/compressed.hpp>

#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace sc = shunt::compress;
using shunt::compress_option;
using shunt::compress_scheme;
using shunt::compressed_status;

namespace {

int rank_of(MPI_Comm c = MPI_COMM_WORLD) {
    int r = 0;
    MPI_Comm_rank(c, &r);
    return r;
}
int size_of(MPI_Comm c = MPI_COMM_WORLD) {
    int r = 0;
    MPI_Comm_size(c, &r);
    return r;
}

/// Gradient-like data, different on every rank and step.
std::vector<float> gaussian(std::int64_t n, int rank, int step = 0) {
    std::mt19937 g(static_cast<unsigned>(1000 * rank + 7 * step + 1));
    std::normal_distribution<float> d(0, 1);
    std::vector<float> v(static_cast<std::size_t>(n));
    for (auto& x : v) x = d(g);
    return v;
}

double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
    double d = 0, w = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
        d += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
        w += static_cast<double>(want[i]) * want[i];
    }
    return std::sqrt(d / w);
}

/// True when every rank holds the same bytes.
bool same_everywhere(const std::vector<float>& v) {
    std::uint64_t h = 1469598103934665603ull;
    for (float x : v) {
        std::uint32_t u;
        std::memcpy(&u, &x, 4);
        h = (h ^ u) * 1099511628211ull;
    }
    std::uint64_t lo = h, hi = h;
    MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    return lo == hi;
}

std::vector<float> exact_sum(const std::vector<float>& in) {
    std::vector<float> out(in.size());
    MPI_Allreduce(in.data(), out.data(), static_cast<int>(in.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    return out;
}

/// The communicators of the hierarchical form: nodes of 2 consecutive ranks (when the size is even).
struct two_level {
    shunt::compressed_comms c;
    two_level() {
        c.all = MPI_COMM_WORLD;
        const int r = rank_of();
        MPI_Comm_split(MPI_COMM_WORLD, r / 2, r, &c.node);
        MPI_Comm_split(MPI_COMM_WORLD, r % 2, r, &c.rail);
    }
    ~two_level() {
        MPI_Comm_free(&c.node);
        MPI_Comm_free(&c.rail);
    }
};

/// The L2 error bound of one call of each method on Gaussian data (theory with room: FP16 and
/// BF16 round to 11 and 8 bits; INT8 and INT4 quantise each block of 256 to 255 and 15 levels).
double bound(sc::method m, bool twice) {
    const double k = twice ? 2 : 1;
    switch (m) {
        case sc::method::fp16: return 2e-3 * k;
        case sc::method::bf16: return 1.5e-2 * k;
        case sc::method::int8: return 2e-2 * k;
        case sc::method::int4: return 0.3 * k;
        default: return 100;  // sparsifying and 1-bit forms: see the feedback case
    }
}

}  // namespace

TEST_CASE("compressed allreduce: every method and flat scheme within its bound, equal on every rank") {
    const int rank = rank_of();
    shunt::compressed_comms comms;
    comms.all = MPI_COMM_WORLD;
    shunt::compressed_scratch scratch;
    for (const std::int64_t n : {std::int64_t{1}, std::int64_t{1000}, std::int64_t{100003}}) {
        const std::vector<float> in = gaussian(n, rank);
        const std::vector<float> want = exact_sum(in);
        for (const sc::method m : sc::all_methods) {
            for (const compress_scheme s :
                 {compress_scheme::allreduce, compress_scheme::allgather, compress_scheme::alltoall_allgather}) {
                if (s == compress_scheme::allreduce && sc::summable(m) == sc::sum_form::none) continue;
                CAPTURE(n);
                CAPTURE(sc::to_string(m));
                CAPTURE(shunt::to_string(s));
                shunt::compression_point pt;
                std::vector<float> out(static_cast<std::size_t>(n), -1.0f);
                const compress_option o{s, m, false, false};
                REQUIRE(shunt::compressed_allreduce(comms, in.data(), out.data(), n, o, pt, scratch) ==
                        compressed_status::done);
                CHECK(same_everywhere(out));
                CHECK(pt.step == 1);
                if (n >= 1000 && size_of() > 1)
                    CHECK(relative_error(out, want) < bound(m, s == compress_scheme::alltoall_allgather));
                if (size_of() == 1 && (m == sc::method::fp16 || m == sc::method::int8)) {
                    // One rank: the result is the decompressed form of the input itself.
                    const sc::params p = shunt::compress_params(m);
                    std::vector<std::byte> form(static_cast<std::size_t>(sc::compressed_bytes(p, n)));
                    std::vector<float> back(static_cast<std::size_t>(n));
                    sc::compress(p, in.data(), n, form.data());
                    sc::decompress(p, form.data(), n, back.data());
                    if (s != compress_scheme::alltoall_allgather) CHECK(out == back);
                }
            }
        }
    }
}

TEST_CASE("compressed allreduce: error feedback keeps the sum over steps close for the lossiest forms") {
    const int rank = rank_of();
    shunt::compressed_comms comms;
    comms.all = MPI_COMM_WORLD;
    shunt::compressed_scratch scratch;
    const std::int64_t n = 2000;
    const int steps = 400;  // random-k and top-k keep one element in 100: feedback needs some hundred steps
    for (const sc::method m : {sc::method::sign, sc::method::top_k, sc::method::random_k, sc::method::int4}) {
        for (const compress_scheme s : {compress_scheme::allgather, compress_scheme::alltoall_allgather}) {
            // (The planner never compresses a summable form's sums again.)
            if (s == compress_scheme::alltoall_allgather && sc::summable(m) != sc::sum_form::none) continue;
            CAPTURE(sc::to_string(m));
            CAPTURE(shunt::to_string(s));
            shunt::compression_point pt;
            const compress_option o{s, m, false, false};
            std::vector<double> sum_out(static_cast<std::size_t>(n)), sum_want(static_cast<std::size_t>(n));
            double first = 0;
            for (int t = 0; t < steps; ++t) {
                const std::vector<float> in = gaussian(n, rank, t % 3);  // a few gradients, recurring
                const std::vector<float> want = exact_sum(in);
                std::vector<float> out(static_cast<std::size_t>(n));
                REQUIRE(shunt::compressed_allreduce(comms, in.data(), out.data(), n, o, pt, scratch) ==
                        compressed_status::done);
                if (t == 0) first = relative_error(out, want);
                for (std::int64_t i = 0; i < n; ++i)
                    sum_out[static_cast<std::size_t>(i)] += out[static_cast<std::size_t>(i)],
                        sum_want[static_cast<std::size_t>(i)] += want[static_cast<std::size_t>(i)];
            }
            double d = 0, w = 0;
            for (std::int64_t i = 0; i < n; ++i) {
                const double e = sum_out[static_cast<std::size_t>(i)] - sum_want[static_cast<std::size_t>(i)];
                d += e * e;
                w += sum_want[static_cast<std::size_t>(i)] * sum_want[static_cast<std::size_t>(i)];
            }
            const double cumulative = std::sqrt(d / w);
            CAPTURE(first);
            CAPTURE(cumulative);
            // Without feedback the sum's error stays that of one call (each call drops as much);
            // with it the dropped part is carried to the next call, so the sum's error shrinks.
            if (size_of() > 1 || m != sc::method::int4) CHECK(cumulative < 0.35 * first);
            CHECK(pt.step == static_cast<std::uint64_t>(steps));
        }
    }
}

TEST_CASE("compressed allreduce: the hierarchical form, in place, against the library") {
    if (size_of() % 2 != 0 || size_of() < 4) return;
    const int rank = rank_of();
    two_level h;
    shunt::compressed_scratch scratch;
    const std::int64_t n = 65537;
    const std::vector<float> in = gaussian(n, rank);
    const std::vector<float> want = exact_sum(in);
    for (const sc::method m : {sc::method::fp16, sc::method::int8, sc::method::bf16}) {
        for (const compress_scheme s :
             {compress_scheme::allreduce, compress_scheme::allgather, compress_scheme::alltoall_allgather}) {
            if (s == compress_scheme::allreduce && sc::summable(m) == sc::sum_form::none) continue;
            CAPTURE(sc::to_string(m));
            CAPTURE(shunt::to_string(s));
            shunt::compression_point pt;
            std::vector<float> buf = in;  // in place
            REQUIRE(shunt::compressed_allreduce(h.c, buf.data(), buf.data(), n, compress_option{s, m, false, true}, pt,
                                                scratch) == compressed_status::done);
            CHECK(same_everywhere(buf));
            CHECK(relative_error(buf, want) < bound(m, s == compress_scheme::alltoall_allgather));
        }
    }
}

TEST_CASE("compressed allreduce: NaN, Inf or an overflowing form on one rank sends every rank to exact") {
    const int rank = rank_of(), size = size_of();
    two_level* h = size % 2 == 0 && size >= 4 ? new two_level : nullptr;
    shunt::compressed_comms flat;
    flat.all = MPI_COMM_WORLD;
    shunt::compressed_scratch scratch;
    const std::int64_t n = 4099;
    for (const int kind : {0, 1, 2}) {  // NaN, Inf, 1e6 (finite: FP16 overflows to Inf)
        for (const sc::method m : {sc::method::fp16, sc::method::int8, sc::method::random_k, sc::method::top_k}) {
            for (const compress_scheme s :
                 {compress_scheme::allreduce, compress_scheme::allgather, compress_scheme::alltoall_allgather}) {
                if (s == compress_scheme::allreduce && sc::summable(m) == sc::sum_form::none) continue;
                if (kind == 2 && m != sc::method::fp16) continue;
                for (const bool hier : {false, true}) {
                    if (hier && h == nullptr) continue;
                    CAPTURE(kind);
                    CAPTURE(sc::to_string(m));
                    CAPTURE(shunt::to_string(s));
                    CAPTURE(hier);
                    std::vector<float> buf = gaussian(n, rank);
                    // The last rank only; an element random-k keeps no matter (its guard looks at all).
                    if (rank == size - 1) buf[n / 2 + 1] = kind == 0 ? NAN : kind == 1 ? INFINITY : 1e6f;
                    const std::vector<float> before = buf;
                    shunt::compression_point pt;
                    const compressed_status st = shunt::compressed_allreduce(
                        hier ? h->c : flat, buf.data(), buf.data(), n, compress_option{s, m, false, hier}, pt, scratch);
                    CHECK(st == compressed_status::not_finite);
                    CHECK(std::memcmp(buf.data(), before.data(), before.size() * 4) == 0);  // untouched
                    CHECK(pt.step == 0);  // nothing committed
                    CHECK(pt.first.count() <= n);
                }
            }
        }
    }
    delete h;
}

TEST_CASE("compressed reduce-scatter: summable and alltoall forms against the library, uneven blocks") {
    const int rank = rank_of(), size = size_of();
    shunt::compressed_scratch scratch;
    std::vector<std::int64_t> counts(static_cast<std::size_t>(size));
    std::vector<int> icounts(static_cast<std::size_t>(size));
    std::int64_t n = 0;
    for (int j = 0; j < size; ++j)
        n += counts[static_cast<std::size_t>(j)] = icounts[static_cast<std::size_t>(j)] = 3000 + 17 * j;
    const std::vector<float> in = gaussian(n, rank);
    std::vector<float> want(static_cast<std::size_t>(icounts[static_cast<std::size_t>(rank)]));
    MPI_Reduce_scatter(in.data(), want.data(), icounts.data(), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    for (const sc::method m : {sc::method::fp16, sc::method::bf16, sc::method::int8, sc::method::random_k}) {
        for (const compress_scheme s : {compress_scheme::allreduce, compress_scheme::allgather}) {
            if (s == compress_scheme::allreduce && sc::summable(m) == sc::sum_form::none) continue;
            CAPTURE(sc::to_string(m));
            CAPTURE(shunt::to_string(s));
            shunt::compression_point pt;
            std::vector<float> out(want.size(), -1.0f);
            REQUIRE(shunt::compressed_reduce_scatter(MPI_COMM_WORLD, in.data(), out.data(), counts,
                                                     compress_option{s, m, false, false}, pt,
                                                     scratch) == compressed_status::done);
            if (m != sc::method::random_k && size > 1) CHECK(relative_error(out, want) < bound(m, false));
            // NaN on rank 0's last block: every rank falls back.
            std::vector<float> bad = in;
            if (rank == 0) bad.back() = NAN;
            std::vector<float> untouched(want.size(), 7.0f);
            shunt::compression_point pt2;
            CHECK(shunt::compressed_reduce_scatter(MPI_COMM_WORLD, bad.data(), untouched.data(), counts,
                                                   compress_option{s, m, false, false}, pt2,
                                                   scratch) == compressed_status::not_finite);
            for (float x : untouched) REQUIRE(x == 7.0f);
        }
    }
}
