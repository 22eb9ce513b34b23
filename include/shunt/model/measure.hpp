// shunt/model/measure.hpp: how the cost model's tables are measured on a machine: robust timing
// of one point, and the pack, copy and point-to-point tables (used by shunt-measure and tests).
#pragma once

#include <shunt/datatype/decode.hpp>
#include <shunt/errors.hpp>
#include <shunt/model/model.hpp>
#include <shunt/model/stats.hpp>
#include <shunt/pack/host.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace shunt {

/// How hard to try for one point.
struct timing_policy {
    int warmup = 2;  ///< batches run and discarded first
    int min_samples = 9;  ///< at least this many batches are kept
    int max_samples = 60;  ///< and at most this many
    double batch_s = 50e-6;  ///< each batch repeats the call until it lasts about this long
    double point_s = 0.02;  ///< stop adding batches once the point has taken this long
};

/// A quick policy (shunt-measure --quick) and a thorough one (--full).
inline timing_policy quick_timing() { return {1, 9, 40, 50e-6, 0.015}; }
inline timing_policy full_timing() { return {3, 15, 120, 100e-6, 0.06}; }

namespace detail {
inline double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace detail

/// Times one call of `f` robustly: calibrates a batch size so a batch lasts about batch_s,
/// discards warm-up batches, and summarises per-call seconds of the kept batches.
template <class F>
robust_estimate time_call(F&& f, const timing_policy& p) {
    std::int64_t reps = 1;
    for (;;) {  // calibrate
        const double t0 = detail::now_s();
        for (std::int64_t i = 0; i < reps; ++i) f();
        const double dt = detail::now_s() - t0;
        if (dt >= p.batch_s || reps >= (std::int64_t{1} << 24)) break;
        reps = dt <= 0 ? reps * 16 : std::max(reps * 2, static_cast<std::int64_t>(reps * p.batch_s / dt * 1.2));
    }
    for (int w = 0; w < p.warmup; ++w)
        for (std::int64_t i = 0; i < reps; ++i) f();
    std::vector<double> samples;
    const double start = detail::now_s();
    while (static_cast<int>(samples.size()) < p.max_samples &&
           (static_cast<int>(samples.size()) < p.min_samples || detail::now_s() - start < p.point_s)) {
        const double t0 = detail::now_s();
        for (std::int64_t i = 0; i < reps; ++i) f();
        samples.push_back((detail::now_s() - t0) / static_cast<double>(reps));
    }
    return robust_summary(samples);
}

/// A committed MPI vector of `bytes` packed bytes in blocks of `block_len` bytes, stride twice
/// the block length: the family the pack tables are measured on. Freed by the destructor.
class vector_type {
public:
    vector_type(std::int64_t bytes, std::int64_t block_len) {
        const std::int64_t blocks = std::max<std::int64_t>(1, bytes / block_len);
        SHUNT_CHECK_MPI(PMPI_Type_vector(static_cast<int>(blocks), static_cast<int>(block_len),
                                         static_cast<int>(2 * block_len), MPI_BYTE, &type_));
        SHUNT_CHECK_MPI(PMPI_Type_commit(&type_));
        packed_ = blocks * block_len;
        span_ = (2 * blocks - 1) * block_len;
    }
    ~vector_type() { PMPI_Type_free(&type_); }
    vector_type(const vector_type&) = delete;
    vector_type& operator=(const vector_type&) = delete;
    MPI_Datatype get() const { return type_; }
    std::int64_t packed() const { return packed_; }
    std::int64_t span() const { return span_; }

private:
    MPI_Datatype type_ = MPI_DATATYPE_NULL;
    std::int64_t packed_ = 0, span_ = 0;
};

/// Measures pack.<who>.b<L> (or unpack) at each size: the library through PMPI_Pack/PMPI_Unpack,
/// shunt through its host packer on the decoded type. Sizes are packed bytes.
inline time_table measure_pack(bool library, bool unpack, std::int64_t block_len, std::span<const double> sizes,
                               const timing_policy& p) {
    time_table t;
    for (double size : sizes) {
        const vector_type vt(static_cast<std::int64_t>(size), block_len);
        std::vector<std::byte> typed(static_cast<std::size_t>(vt.span())),
            packed(static_cast<std::size_t>(vt.packed()));
        for (std::size_t i = 0; i < typed.size(); ++i) typed[i] = static_cast<std::byte>(i * 7);
        const type_info info = decode(vt.get());
        const int psize = static_cast<int>(vt.packed());
        robust_estimate e;
        if (library && !unpack)
            e = time_call(
                [&] {
                    int pos = 0;
                    PMPI_Pack(typed.data(), 1, vt.get(), packed.data(), psize, &pos, MPI_COMM_SELF);
                },
                p);
        else if (library)
            e = time_call(
                [&] {
                    int pos = 0;
                    PMPI_Unpack(packed.data(), psize, &pos, typed.data(), 1, vt.get(), MPI_COMM_SELF);
                },
                p);
        else if (!unpack)
            e = time_call([&] { pack_host(info, 1, typed.data(), packed.data()); }, p);
        else
            e = time_call([&] { unpack_host(info, 1, packed.data(), typed.data()); }, p);
        t.set({static_cast<double>(vt.packed()), e.value, e.spread});
    }
    return t;
}

/// Measures copy.memcpy at each size.
inline time_table measure_memcpy(std::span<const double> sizes, const timing_policy& p) {
    time_table t;
    for (double size : sizes) {
        std::vector<std::byte> a(static_cast<std::size_t>(size), std::byte{1}), b(a.size());
        const auto e = time_call([&] { std::memcpy(b.data(), a.data(), a.size()); }, p);
        t.set({size, e.value, e.spread});
    }
    return t;
}

/// Measures a point-to-point table by ping-pong between ranks `a` and `b` of `comm` (half the
/// round trip, host buffers). Collective over `comm`: every rank calls it; ranks other than a
/// and b only wait. The table is valid on every rank on return.
inline time_table measure_p2p(MPI_Comm comm, int a, int b, std::span<const double> sizes, const timing_policy& p) {
    int me = 0;
    SHUNT_CHECK_MPI(PMPI_Comm_rank(comm, &me));
    std::vector<double> times(sizes.size() * 2, 0.0);
    if (me == a || me == b) {
        const int peer = me == a ? b : a;
        for (std::size_t i = 0; i < sizes.size(); ++i) {
            std::vector<std::byte> buf(static_cast<std::size_t>(sizes[i]));
            const int n = static_cast<int>(buf.size());
            // Rank a decides how many round trips each batch makes and tells b, so the pair
            // stays in lock step; b just mirrors.
            auto round_trips = [&](std::int64_t reps) {
                for (std::int64_t r = 0; r < reps; ++r) {
                    if (me == a) {
                        PMPI_Send(buf.data(), n, MPI_BYTE, peer, 0, comm);
                        PMPI_Recv(buf.data(), n, MPI_BYTE, peer, 0, comm, MPI_STATUS_IGNORE);
                    } else {
                        PMPI_Recv(buf.data(), n, MPI_BYTE, peer, 0, comm, MPI_STATUS_IGNORE);
                        PMPI_Send(buf.data(), n, MPI_BYTE, peer, 0, comm);
                    }
                }
            };
            // Rank a calibrates the batch length with one round trip and tells b, then both run
            // the same fixed number of batches so the pair stays in lock step.
            const double t0 = detail::now_s();
            round_trips(1);
            std::int64_t reps = std::clamp<std::int64_t>(
                static_cast<std::int64_t>(p.batch_s / std::max(detail::now_s() - t0, 1e-9)), 1, 4096);
            if (me == a)
                SHUNT_CHECK_MPI(PMPI_Send(&reps, 1, MPI_INT64_T, peer, 1, comm));
            else
                SHUNT_CHECK_MPI(PMPI_Recv(&reps, 1, MPI_INT64_T, peer, 1, comm, MPI_STATUS_IGNORE));
            std::vector<double> samples;
            for (int k = 0; k < p.warmup + p.min_samples; ++k) {
                const double b0 = detail::now_s();
                round_trips(reps);
                if (k >= p.warmup) samples.push_back((detail::now_s() - b0) / static_cast<double>(reps) / 2);
            }
            const auto e = robust_summary(samples);
            times[2 * i] = e.value, times[2 * i + 1] = e.spread;
        }
    }
    SHUNT_CHECK_MPI(PMPI_Bcast(times.data(), static_cast<int>(times.size()), MPI_DOUBLE, a, comm));
    time_table t;
    for (std::size_t i = 0; i < sizes.size(); ++i) t.set({sizes[i], times[2 * i], times[2 * i + 1]});
    return t;
}

/// Geometric sizes from lo to hi (inclusive), `factor` apart.
inline std::vector<double> geometric_sizes(double lo, double hi, double factor) {
    std::vector<double> v;
    for (double s = lo; s <= hi * 1.0001; s *= factor) v.push_back(std::round(s));
    return v;
}

/// Sizes between the table's points (geometric midpoints): held out, for validation.
inline std::vector<double> held_out_sizes(const time_table& t) {
    std::vector<double> v;
    const auto& pts = t.points();
    for (std::size_t i = 1; i < pts.size(); ++i) v.push_back(std::round(std::sqrt(pts[i - 1].size * pts[i].size)));
    return v;
}

}  // namespace shunt
