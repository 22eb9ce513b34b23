// tests/nccl/nccl_ops.cpp: every NCCL call shunt intercepts, in an unmodified NCCL program (MPI only bootstraps), each result checked against the value the program computes itself.
//
// Built twice: against the CPU double (host buffers), and with NCCL_OPS_DEVICE against the real
// NCCL (managed memory; the device check runs it at one rank on a GPU, under the preload).
// Run by run_nccl_preload.py without shunt, under the preload with SHUNT_NCCL=shunt on a virtual
// topology of nodes of 2 ranks (shunt's hierarchical schedules), with SHUNT_NCCL=auto and
// library, and with SHUNT_DISABLE=1; each run prints one line per rank with a hash of every exact
// result, which must be the same in every run. Cases: allreduce (sum, prod, min, max, avg) over
// int32, int64, uint8, float, double, half and bfloat16, in place and not, counts that the node
// size divides and that it does not, 0 and 1; reduce-scatter, allgather, broadcast, ncclBcast and
// reduce from every root, in place and not; send and receive in groups; a collective inside a
// group; a split communicator; two threads on two communicators at once; a non-blocking
// communicator; a communicator from ncclCommInitRankScalable and one shrunk from it with
// ncclCommShrink; finalize, destroy and abort. Integer results and sums of small integers are
// exact in every order and enter the hash; averages and sums of random floats are checked against
// a tolerance for reassociation and run twice to check they are the same bits both times.
// `nccl-ops --creators` runs only the scalable-made and the shrunk communicators (so that
// SHUNT_REPORT's counts of shunt's allreduces are theirs alone).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace {

#ifdef NCCL_OPS_DEVICE
/// Real NCCL on a GPU: every buffer NCCL sees is CUDA managed memory, read by the host after the
/// device is synchronised.
template <class T>
struct buffer_allocator {
    using value_type = T;
    buffer_allocator() = default;
    template <class U>
    buffer_allocator(const buffer_allocator<U>&) noexcept {}
    T* allocate(std::size_t n) {
        void* p = nullptr;
        if (cudaMallocManaged(&p, std::max<std::size_t>(n, 1) * sizeof(T)) != cudaSuccess) throw std::bad_alloc();
        return static_cast<T*>(p);
    }
    void deallocate(T* p, std::size_t) noexcept { cudaFree(p); }
    template <class U>
    bool operator==(const buffer_allocator<U>&) const noexcept {
        return true;
    }
};
void sync_device() { cudaDeviceSynchronize(); }
#else
/// The CPU double: host memory, every call complete when it returns.
template <class T>
using buffer_allocator = std::allocator<T>;
void sync_device() {}
#endif
template <class T>
using buf = std::vector<T, buffer_allocator<T>>;

int world_rank = 0, world_size = 1;
long long checks = 0;
std::uint64_t hash = 1469598103934665603ull;

[[noreturn]] void fail(const char* what, const std::string& detail) {
    std::fprintf(stderr, "nccl_ops rank %d: %s: %s\n", world_rank, what, detail.c_str());
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::abort();
}

void require(bool ok, const char* what, const std::string& detail = "") {
    if (!ok) fail(what, detail);
    ++checks;
}

void nccl_ok(ncclResult_t r, const char* what) {
    if (r != ncclSuccess) fail(what, ncclGetErrorString(r));
    sync_device();
}

void mix(const void* p, std::size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < n; ++i) hash = (hash ^ b[i]) * 1099511628211ull;
}

/// Element types: how the test makes a value, combines two, and compares.
template <class T>
double as_double(T v) {
    if constexpr (std::is_same_v<T, __half>)
        return __half2float(v);
    else if constexpr (std::is_same_v<T, __nv_bfloat16>)
        return __bfloat162float(v);
    else
        return static_cast<double>(v);
}
template <class T>
T from_double(double v) {
    if constexpr (std::is_same_v<T, __half>)
        return __float2half_rn(static_cast<float>(v));
    else if constexpr (std::is_same_v<T, __nv_bfloat16>)
        return __float2bfloat16_rn(static_cast<float>(v));
    else
        return static_cast<T>(v);
}
template <class T>
constexpr ncclDataType_t nccl_type() {
    if constexpr (std::is_same_v<T, std::int32_t>) return ncclInt32;
    if constexpr (std::is_same_v<T, std::int64_t>) return ncclInt64;
    if constexpr (std::is_same_v<T, std::uint8_t>) return ncclUint8;
    if constexpr (std::is_same_v<T, float>) return ncclFloat32;
    if constexpr (std::is_same_v<T, double>) return ncclFloat64;
    if constexpr (std::is_same_v<T, __half>) return ncclFloat16;
    return ncclBfloat16;
}
template <class T>
constexpr bool is_float() {
    return std::is_floating_point_v<T> || std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;
}

/// Rank r's element i: small integers (exact sums and products in every type and order; uint8
/// wraps as C does, the same in every order).
template <class T>
T value(int r, std::size_t i, int salt) {
    const long v =
        static_cast<long>((i * 7 + static_cast<std::size_t>(r) * 13 + static_cast<std::size_t>(salt)) % 5) - 2;
    if constexpr (std::is_same_v<T, std::uint8_t>) return static_cast<std::uint8_t>(v + 3);
    return from_double<T>(static_cast<double>(v));
}

template <class T>
T combine(T a, T b, ncclRedOp_t op) {
    const double x = as_double(a), y = as_double(b);
    switch (op) {
        case ncclSum:
            if constexpr (std::is_same_v<T, std::uint8_t>) return static_cast<std::uint8_t>(a + b);
            return from_double<T>(x + y);
        case ncclProd:
            if constexpr (std::is_same_v<T, std::uint8_t>) return static_cast<std::uint8_t>(a * b);
            return from_double<T>(x * y);
        case ncclMin: return x < y ? a : b;
        case ncclMax: return x > y ? a : b;
        default: return a;
    }
}

/// The reduction over ranks [0, n) of element i (op not avg).
template <class T>
T reduced(int n, std::size_t i, ncclRedOp_t op, int salt) {
    T acc = value<T>(0, i, salt);
    for (int r = 1; r < n; ++r) acc = combine(acc, value<T>(r, i, salt), op);
    return acc;
}

ncclUniqueId shared_id(MPI_Comm comm) {
    ncclUniqueId id;
    std::memset(&id, 0, sizeof id);
    int me = 0;
    MPI_Comm_rank(comm, &me);
    if (me == 0) nccl_ok(ncclGetUniqueId(&id), "ncclGetUniqueId");
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, comm);
    return id;
}

const char* op_name(ncclRedOp_t op) {
    static const char* names[] = {"sum", "prod", "max", "min", "avg"};
    return names[op];
}

template <class T>
void allreduces(ncclComm_t comm, int n, int me, const char* tname) {
    const ncclRedOp_t ops[] = {ncclSum, ncclProd, ncclMin, ncclMax};
    const std::size_t counts[] = {0, 1, 7, 1001, 300000};
    for (std::size_t c : counts)
        for (ncclRedOp_t op : ops)
            for (int in_place = 0; in_place < 2; ++in_place) {
                if (c > 1001 && op != ncclSum && op != ncclMax) continue;
                const int salt = static_cast<int>(c % 13) + op;
                buf<T> in(c), out(c + 3, from_double<T>(9)), want(c + 3, from_double<T>(9));
                for (std::size_t i = 0; i < c; ++i) in[i] = value<T>(me, i, salt), want[i] = reduced<T>(n, i, op, salt);
                if (in_place) std::copy(in.begin(), in.end(), out.begin());
                nccl_ok(
                    ncclAllReduce(in_place ? out.data() : in.data(), out.data(), c, nccl_type<T>(), op, comm, nullptr),
                    "ncclAllReduce");
                require(
                    std::memcmp(out.data(), want.data(), sizeof(T) * out.size()) == 0, "ncclAllReduce",
                    std::string(tname) + " " + op_name(op) + " x " + std::to_string(c) + (in_place ? " in place" : ""));
                mix(out.data(), sizeof(T) * out.size());
            }
}

/// Averages and sums of random floats: within reassociation error of the exact value, and the
/// same bits twice.
void inexact(ncclComm_t comm, int n, int me) {
    for (ncclRedOp_t op : {ncclSum, ncclAvg}) {
        const std::size_t c = 300001;
        buf<double> in(c), a(c), b(c);
        std::uint64_t x = 0x9E3779B97F4A7C15ull * static_cast<std::uint64_t>(me + 1);
        for (auto& v : in) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            v = static_cast<double>(x >> 11) * 0x1p-53 * (me % 2 ? 1e-3 : 1e3) - 0.37;
        }
        nccl_ok(ncclAllReduce(in.data(), a.data(), c, ncclFloat64, op, comm, nullptr), "ncclAllReduce inexact");
        nccl_ok(ncclAllReduce(in.data(), b.data(), c, ncclFloat64, op, comm, nullptr), "ncclAllReduce inexact");
        require(std::memcmp(a.data(), b.data(), sizeof(double) * c) == 0, "ncclAllReduce inexact: run to run",
                op_name(op));
        // The exact value from every rank's input, regenerated here.
        buf<double> want(c, 0.0);
        for (int r = 0; r < n; ++r) {
            std::uint64_t y = 0x9E3779B97F4A7C15ull * static_cast<std::uint64_t>(r + 1);
            for (std::size_t i = 0; i < c; ++i) {
                y ^= y << 13, y ^= y >> 7, y ^= y << 17;
                want[i] += static_cast<double>(y >> 11) * 0x1p-53 * (r % 2 ? 1e-3 : 1e3) - 0.37;
            }
        }
        for (std::size_t i = 0; i < c; ++i) {
            const double w = op == ncclAvg ? want[i] / n : want[i];
            if (std::fabs(a[i] - w) > 1e-12 * (std::fabs(w) + 1e3 * n))
                fail("ncclAllReduce inexact", std::string(op_name(op)) + " element " + std::to_string(i));
        }
        ++checks;
        // half precision average (floating): within half's precision of the exact value
        buf<__half> h(1001), hout(1001);
        for (std::size_t i = 0; i < h.size(); ++i) h[i] = value<__half>(me, i, 3);
        nccl_ok(ncclAllReduce(h.data(), hout.data(), h.size(), ncclFloat16, ncclAvg, comm, nullptr), "avg half");
        for (std::size_t i = 0; i < h.size(); ++i) {
            double s = 0;
            for (int r = 0; r < n; ++r) s += as_double(value<__half>(r, i, 3));
            require(std::fabs(as_double(hout[i]) - s / n) <= 4e-3, "ncclAllReduce avg half", std::to_string(i));
        }
    }
}

void gathers(ncclComm_t comm, int n, int me) {
    for (std::size_t c : {std::size_t{0}, std::size_t{1}, std::size_t{5}, std::size_t{70001}})
        for (int in_place = 0; in_place < 2; ++in_place) {
            // reduce-scatter: rank r gets block r of the sum
            buf<std::int32_t> in(c * static_cast<std::size_t>(n)), out(c + 2, -7), want(c + 2, -7);
            for (std::size_t i = 0; i < in.size(); ++i) in[i] = value<std::int32_t>(me, i, 5);
            for (std::size_t i = 0; i < c; ++i)
                want[i] = reduced<std::int32_t>(n, static_cast<std::size_t>(me) * c + i, ncclSum, 5);
            if (in_place) {
                buf<std::int32_t> io = in;
                nccl_ok(ncclReduceScatter(io.data(), io.data() + static_cast<std::size_t>(me) * c, c, ncclInt32,
                                          ncclSum, comm, nullptr),
                        "ncclReduceScatter");
                require(std::equal(want.begin(), want.begin() + static_cast<std::ptrdiff_t>(c),
                                   io.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(me) * c)),
                        "ncclReduceScatter in place", std::to_string(c));
                mix(io.data() + static_cast<std::size_t>(me) * c, sizeof(std::int32_t) * c);
            } else {
                nccl_ok(ncclReduceScatter(in.data(), out.data(), c, ncclInt32, ncclSum, comm, nullptr),
                        "ncclReduceScatter");
                require(out == want, "ncclReduceScatter", std::to_string(c));
                mix(out.data(), sizeof(std::int32_t) * out.size());
            }
            // allgather: rank r's block at r
            buf<float> mine(c), all(c * static_cast<std::size_t>(n) + 2, -3.0f), wall(all.size(), -3.0f);
            for (std::size_t i = 0; i < c; ++i) mine[i] = value<float>(me, i, 9);
            for (int r = 0; r < n; ++r)
                for (std::size_t i = 0; i < c; ++i) wall[static_cast<std::size_t>(r) * c + i] = value<float>(r, i, 9);
            if (in_place)
                std::copy(mine.begin(), mine.end(),
                          all.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(me) * c));
            nccl_ok(ncclAllGather(in_place ? all.data() + static_cast<std::size_t>(me) * c : mine.data(), all.data(), c,
                                  ncclFloat32, comm, nullptr),
                    "ncclAllGather");
            require(all == wall, "ncclAllGather", std::to_string(c) + (in_place ? " in place" : ""));
            mix(all.data(), sizeof(float) * all.size());
        }
}

void roots(ncclComm_t comm, int n, int me) {
    for (int root = 0; root < n; ++root)
        for (std::size_t c : {std::size_t{1}, std::size_t{300000}})
            for (int in_place = 0; in_place < 2; ++in_place) {
                buf<std::int64_t> bb(c, me), src(c), want(c);
                for (std::size_t i = 0; i < c; ++i)
                    src[i] = value<std::int64_t>(root, i, 11) * 1000 + root, want[i] = src[i];
                if (me == root && in_place) bb = src;
                nccl_ok(ncclBroadcast(in_place || me != root ? bb.data() : src.data(), bb.data(), c, ncclInt64, root,
                                      comm, nullptr),
                        "ncclBroadcast");
                require(bb == want, "ncclBroadcast", "root " + std::to_string(root));
                mix(bb.data(), sizeof(std::int64_t) * c);
                buf<std::int64_t> b2(c, -1);
                if (me == root) b2 = src;
                nccl_ok(ncclBcast(b2.data(), c, ncclInt64, root, comm, nullptr), "ncclBcast");
                require(b2 == want, "ncclBcast", "root " + std::to_string(root));
                // reduce: only the root's buffer is defined
                buf<std::int32_t> in(c), out(c, -5), rw(c, -5);
                for (std::size_t i = 0; i < c; ++i) in[i] = value<std::int32_t>(me, i, 13);
                if (me == root)
                    for (std::size_t i = 0; i < c; ++i) rw[i] = reduced<std::int32_t>(n, i, ncclMax, 13);
                if (in_place && me == root) out = in;
                nccl_ok(ncclReduce(in_place && me == root ? out.data() : in.data(), out.data(), c, ncclInt32, ncclMax,
                                   root, comm, nullptr),
                        "ncclReduce");
                if (me == root) {
                    require(out == rw, "ncclReduce", "root " + std::to_string(root));
                    mix(out.data(), sizeof(std::int32_t) * c);
                }
            }
}

/// Point-to-point in groups, and a collective inside a group (NCCL keeps the group).
void grouped(ncclComm_t comm, int n, int me) {
    const std::size_t c = 4097;
    buf<std::int32_t> send(c), recv(c, -1);
    for (std::size_t i = 0; i < c; ++i) send[i] = me * 100000 + static_cast<std::int32_t>(i);
    const int next = (me + 1) % n, prev = (me + n - 1) % n;
    nccl_ok(ncclGroupStart(), "ncclGroupStart");
    nccl_ok(ncclSend(send.data(), c, ncclInt32, next, comm, nullptr), "ncclSend");
    nccl_ok(ncclRecv(recv.data(), c, ncclInt32, prev, comm, nullptr), "ncclRecv");
    nccl_ok(ncclGroupEnd(), "ncclGroupEnd");
    for (std::size_t i = 0; i < c; ++i) require(recv[i] == prev * 100000 + static_cast<std::int32_t>(i), "ncclRecv");
    mix(recv.data(), sizeof(std::int32_t) * c);
    buf<float> a(300000), b(300000);
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = value<float>(me, i, 17);
    nccl_ok(ncclGroupStart(), "ncclGroupStart");
    nccl_ok(ncclGroupStart(), "ncclGroupStart (nested)");
    nccl_ok(ncclAllReduce(a.data(), b.data(), a.size(), ncclFloat32, ncclSum, comm, nullptr), "ncclAllReduce grouped");
    nccl_ok(ncclGroupEnd(), "ncclGroupEnd (nested)");
    nccl_ok(ncclGroupEnd(), "ncclGroupEnd");
    for (std::size_t i = 0; i < a.size(); ++i) require(b[i] == reduced<float>(n, i, ncclSum, 17), "grouped allreduce");
    mix(b.data(), sizeof(float) * b.size());
}

void threads(ncclComm_t comm, int n, int me) {
    ncclComm_t two[2] = {nullptr, nullptr};
    for (auto& t : two) nccl_ok(ncclCommSplit(comm, 0, me, &t, nullptr), "ncclCommSplit");
    buf<std::int32_t> out[2];
    std::thread workers[2];
    for (int k = 0; k < 2; ++k)
        workers[k] = std::thread([&, k] {
            buf<std::int32_t> in(300000 + static_cast<std::size_t>(k));
            for (std::size_t i = 0; i < in.size(); ++i) in[i] = value<std::int32_t>(me, i, 20 + k);
            out[k].resize(in.size());
            for (int round = 0; round < 3; ++round)
                if (ncclAllReduce(in.data(), out[k].data(), in.size(), ncclInt32, ncclSum, two[k], nullptr) !=
                    ncclSuccess)
                    out[k].clear();
            sync_device();
        });
    for (auto& w : workers) w.join();
    for (int k = 0; k < 2; ++k) {
        require(out[k].size() == 300000u + static_cast<std::size_t>(k), "threads: a call failed");
        for (std::size_t i = 0; i < out[k].size(); ++i)
            if (out[k][i] != reduced<std::int32_t>(n, i, ncclSum, 20 + k)) fail("threads", std::to_string(i));
        mix(out[k].data(), sizeof(std::int32_t) * out[k].size());
        nccl_ok(ncclCommDestroy(two[k]), "ncclCommDestroy");
    }
}

/// A split communicator (even and odd ranks) and a non-blocking one: results right.
void others(ncclComm_t comm, int n, int me) {
    ncclComm_t half = nullptr;
    nccl_ok(ncclCommSplit(comm, me % 2, me, &half, nullptr), "ncclCommSplit");
    int hn = 0, hme = 0;
    nccl_ok(ncclCommCount(half, &hn), "ncclCommCount");
    nccl_ok(ncclCommUserRank(half, &hme), "ncclCommUserRank");
    buf<std::int32_t> in(300000), out(in.size());
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = value<std::int32_t>(hme, i, 30);
    nccl_ok(ncclAllReduce(in.data(), out.data(), in.size(), ncclInt32, ncclSum, half, nullptr), "split allreduce");
    for (std::size_t i = 0; i < in.size(); ++i) require(out[i] == reduced<std::int32_t>(hn, i, ncclSum, 30), "split");
    nccl_ok(ncclCommFinalize(half), "ncclCommFinalize");
    nccl_ok(ncclCommDestroy(half), "ncclCommDestroy");

    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t nb = nullptr;
    const ncclUniqueId id = shared_id(MPI_COMM_WORLD);
    ncclResult_t r = ncclCommInitRankConfig(&nb, n, id, me, &config);
    require(r == ncclSuccess || r == ncclInProgress, "ncclCommInitRankConfig non-blocking");
    const auto wait = [&] {
        ncclResult_t s = ncclInProgress;
        const auto start = std::chrono::steady_clock::now();
        while (s == ncclInProgress && std::chrono::steady_clock::now() - start < std::chrono::seconds(60)) {
            nccl_ok(ncclCommGetAsyncError(nb, &s), "ncclCommGetAsyncError");
            if (s == ncclInProgress) std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
        nccl_ok(s, "non-blocking communicator");
    };
    wait();
    r = ncclAllReduce(in.data(), out.data(), in.size(), ncclInt32, ncclSum, nb, nullptr);
    require(r == ncclSuccess || r == ncclInProgress, "non-blocking allreduce");
    wait();
    sync_device();
    // Every rank's input is its rank in the even or odd half (world rank / 2).
    for (std::size_t i = 0; i < in.size(); ++i) {
        std::int32_t w = 0;
        for (int q = 0; q < n; ++q) w += value<std::int32_t>(q / 2, i, 30);
        if (out[i] != w) fail("non-blocking allreduce", std::to_string(i));
    }
    ++checks;
    mix(out.data(), sizeof(std::int32_t) * out.size());
    nccl_ok(ncclCommAbort(nb), "ncclCommAbort");
}

/// A communicator from ncclCommInitRankScalable (ids made by the first and the last rank) and one
/// shrunk from it without the odd ranks (ncclCommShrink; the odd ranks do not call it, the even
/// ones are renumbered in order): an allreduce of 1.2 MB on each, checked.
void creators(int n, int me) {
    const int nid = std::min(n, 2);
    std::vector<ncclUniqueId> ids(static_cast<std::size_t>(nid));
    for (int k = 0; k < nid; ++k) {
        const int maker = k == 0 ? 0 : n - 1;
        std::memset(&ids[static_cast<std::size_t>(k)], 0, sizeof(ncclUniqueId));
        if (me == maker) nccl_ok(ncclGetUniqueId(&ids[static_cast<std::size_t>(k)]), "ncclGetUniqueId");
        MPI_Bcast(&ids[static_cast<std::size_t>(k)], sizeof(ncclUniqueId), MPI_BYTE, maker, MPI_COMM_WORLD);
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    ncclComm_t scalable = nullptr;
    nccl_ok(ncclCommInitRankScalable(&scalable, n, me, nid, ids.data(), &config), "ncclCommInitRankScalable");
    buf<std::int32_t> in(300000), out(in.size());
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = value<std::int32_t>(me, i, 40);
    nccl_ok(ncclAllReduce(in.data(), out.data(), in.size(), ncclInt32, ncclSum, scalable, nullptr),
            "ncclAllReduce on a scalable-made communicator");
    for (std::size_t i = 0; i < in.size(); ++i)
        if (out[i] != reduced<std::int32_t>(n, i, ncclSum, 40)) fail("scalable allreduce", std::to_string(i));
    ++checks;
    mix(out.data(), sizeof(std::int32_t) * out.size());
    if (n > 1 && me % 2 == 0) {
        std::vector<int> odd;
        for (int q = 1; q < n; q += 2) odd.push_back(q);
        ncclComm_t shrunk = nullptr;
        nccl_ok(
            ncclCommShrink(scalable, odd.data(), static_cast<int>(odd.size()), &shrunk, nullptr, NCCL_SHRINK_DEFAULT),
            "ncclCommShrink");
        int sn = 0, sme = -1;
        nccl_ok(ncclCommCount(shrunk, &sn), "ncclCommCount");
        nccl_ok(ncclCommUserRank(shrunk, &sme), "ncclCommUserRank");
        require(sn == (n + 1) / 2 && sme == me / 2, "ncclCommShrink: the even ranks, renumbered in order");
        for (std::size_t i = 0; i < in.size(); ++i) in[i] = value<std::int32_t>(sme, i, 41);
        nccl_ok(ncclAllReduce(in.data(), out.data(), in.size(), ncclInt32, ncclSum, shrunk, nullptr),
                "ncclAllReduce on a shrunk communicator");
        for (std::size_t i = 0; i < in.size(); ++i)
            if (out[i] != reduced<std::int32_t>(sn, i, ncclSum, 41)) fail("shrunk allreduce", std::to_string(i));
        ++checks;
        mix(out.data(), sizeof(std::int32_t) * out.size());
        nccl_ok(ncclCommDestroy(shrunk), "ncclCommDestroy");
    }
    MPI_Barrier(MPI_COMM_WORLD);  // the odd ranks keep the parent until the shrink is done
    nccl_ok(ncclCommDestroy(scalable), "ncclCommDestroy");
}

}  // namespace

int main(int argc, char** argv) {
#ifdef NCCL_OPS_DEVICE
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::printf("nccl-ops-device: no CUDA device: skipped\n");
        return 77;
    }
#endif
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    if (argc == 2 && std::strcmp(argv[1], "--creators") == 0) {
        creators(world_size, world_rank);
        std::printf("rank %d: %lld NCCL results checked, hash %016llx\n", world_rank, checks,
                    static_cast<unsigned long long>(hash));
        MPI_Finalize();
        return 0;
    }
    ncclComm_t comm = nullptr;
    nccl_ok(ncclCommInitRank(&comm, world_size, shared_id(MPI_COMM_WORLD), world_rank), "ncclCommInitRank");
    const int n = world_size, me = world_rank;
    allreduces<std::int32_t>(comm, n, me, "int32");
    allreduces<std::int64_t>(comm, n, me, "int64");
    allreduces<std::uint8_t>(comm, n, me, "uint8");
    allreduces<float>(comm, n, me, "float");
    allreduces<double>(comm, n, me, "double");
    allreduces<__half>(comm, n, me, "half");
    allreduces<__nv_bfloat16>(comm, n, me, "bfloat16");
    inexact(comm, n, me);
    gathers(comm, n, me);
    roots(comm, n, me);
    grouped(comm, n, me);
    threads(comm, n, me);
    others(comm, n, me);
    creators(n, me);
    nccl_ok(ncclCommFinalize(comm), "ncclCommFinalize");
    nccl_ok(ncclCommDestroy(comm), "ncclCommDestroy");
    std::printf("rank %d: %lld NCCL results checked, hash %016llx\n", me, checks,
                static_cast<unsigned long long>(hash));
    MPI_Finalize();
    return 0;
}
