// tests/nccl/test_nccl_double.cpp: self-test of libnccl_double.so, the CPU double of NCCL, at 1 to 4 ranks: every
// function, type and operation, each result checked against a value the test computes itself from every rank's
// input (a pure function of rank and index). MPI only bootstraps the unique ids and gathers the verdict.
#include <doctest/doctest.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

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

uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

// Rank 0 makes the id, MPI_Bcast hands it to the others (as nccl-tests do).
ncclUniqueId shared_id() {
    ncclUniqueId id;
    std::memset(&id, 0, sizeof id);
    int ok = 1;
    if (world_rank() == 0) ok = ncclGetUniqueId(&id) == ncclSuccess;
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    REQUIRE(ok);
    return id;
}

ncclComm_t world_comm = nullptr;
ncclComm_t world() {
    if (world_comm == nullptr)
        REQUIRE(ncclCommInitRank(&world_comm, world_size(), shared_id(), world_rank()) == ncclSuccess);
    return world_comm;
}

int count_of(ncclComm_t c) {
    int n = -1;
    CHECK(ncclCommCount(c, &n) == ncclSuccess);
    return n;
}
int rank_of(ncclComm_t c) {
    int r = -1;
    CHECK(ncclCommUserRank(c, &r) == ncclSuccess);
    return r;
}

// Polls a non-blocking communicator until it leaves ncclInProgress (bounded).
ncclResult_t wait_ready(ncclComm_t c) {
    ncclResult_t s = ncclInProgress;
    const auto start = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - start < std::chrono::seconds(60)) {
        if (ncclCommGetAsyncError(c, &s) != ncclSuccess) return ncclInternalError;
        if (s != ncclInProgress) return s;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return s;
}

// ---- The test's own arithmetic, one traits type per NCCL type ----

template <typename T, ncclDataType_t D>
struct int_type {
    using S = T;
    static constexpr ncclDataType_t type = D;
    static constexpr bool floating = false;
    static S gen(uint64_t h) { return S(h); }  // every bit pattern
    static S add(S a, S b) { return S(uint64_t(a) + uint64_t(b)); }
    static S mul(S a, S b) { return S(uint64_t(a) * uint64_t(b)); }
    static bool less(S a, S b) { return a < b; }
    static S div(S a, int n) {
        if constexpr (std::is_signed_v<T>)
            return S(int64_t(a) / n);
        else
            return S(uint64_t(a) / uint64_t(n));
    }
    static S recip(int) { return S(1); }
};

// Inputs lie in [-2, 2): products of 4 stay finite even in half precision. 16-bit floats take multiples of 1/1024,
// float and double all 53 random bits (rounded to float), so that sums round and their order matters.
inline double small_value(uint64_t h) { return double(int64_t(h % 4097) - 2048) / 1024.0; }
inline double full_value(uint64_t h) { return double(int64_t(h >> 11) - (int64_t(1) << 52)) * 0x1p-51; }

template <typename T, ncclDataType_t D>
struct float_type {
    using S = T;
    static constexpr ncclDataType_t type = D;
    static constexpr bool floating = true;
    static S gen(uint64_t h) { return S(full_value(h)); }
    static S add(S a, S b) { return a + b; }
    static S mul(S a, S b) { return a * b; }
    static bool less(S a, S b) { return a < b; }
    static S recip(int n) { return S(1.0 / n); }
};

// 16-bit floats through CUDA's own host conversions (independent of the double's).
struct half_type {
    using S = __half;
    static constexpr ncclDataType_t type = ncclFloat16;
    static constexpr bool floating = true;
    static S gen(uint64_t h) { return __float2half_rn(float(small_value(h))); }
    static S add(S a, S b) { return __float2half_rn(__half2float(a) + __half2float(b)); }
    static S mul(S a, S b) { return __float2half_rn(__half2float(a) * __half2float(b)); }
    static bool less(S a, S b) { return __half2float(a) < __half2float(b); }
    static S recip(int n) { return __float2half_rn(float(1.0 / n)); }
};

struct bf16_type {
    using S = __nv_bfloat16;
    static constexpr ncclDataType_t type = ncclBfloat16;
    static constexpr bool floating = true;
    static S gen(uint64_t h) { return __float2bfloat16_rn(float(small_value(h))); }
    static S add(S a, S b) { return __float2bfloat16_rn(__bfloat162float(a) + __bfloat162float(b)); }
    static S mul(S a, S b) { return __float2bfloat16_rn(__bfloat162float(a) * __bfloat162float(b)); }
    static bool less(S a, S b) { return __bfloat162float(a) < __bfloat162float(b); }
    static S recip(int n) { return __float2bfloat16_rn(float(1.0 / n)); }
};

using i8 = int_type<int8_t, ncclInt8>;
using u8 = int_type<uint8_t, ncclUint8>;
using i32 = int_type<int32_t, ncclInt32>;
using u32 = int_type<uint32_t, ncclUint32>;
using i64 = int_type<int64_t, ncclInt64>;
using u64 = int_type<uint64_t, ncclUint64>;
using f32 = float_type<float, ncclFloat32>;
using f64 = float_type<double, ncclFloat64>;

template <typename F>
void each_type(F&& f) {
    f(i8{}), f(u8{}), f(i32{}), f(u32{}), f(i64{}), f(u64{}), f(half_type{}), f(bf16_type{}), f(f32{}), f(f64{});
}

const char* type_name(ncclDataType_t t) {
    static const char* names[] = {"int8",    "uint8",   "int32",   "uint32",   "int64",   "uint64",
                                  "float16", "float32", "float64", "bfloat16", "fp8e4m3", "fp8e5m2"};
    return int(t) >= 0 && int(t) < 12 ? names[int(t)] : "?";
}

template <typename Tr>
typename Tr::S input(int rank, size_t i, uint64_t salt) {
    return Tr::gen(mix(salt ^ mix(uint64_t(rank) * 0x100000001b3ULL + i)));
}

template <typename S>
bool same(const S& a, const S& b) {
    return std::memcmp(&a, &b, sizeof(S)) == 0;
}

// The reduction over ranks 0..n-1 in order, as the double defines it (NCCL's avg: integers sum then divide,
// floating types pre-multiply by 1/n in the type; PreMulSum pre-multiplies by the given scalar).
template <typename Tr, typename X>
typename Tr::S fold(ncclRedOp_t op, int n, X x, const typename Tr::S* scalar) {
    using S = typename Tr::S;
    if (op == ncclAvg && !Tr::floating) {
        S acc = x(0);
        for (int r = 1; r < n; ++r) acc = Tr::add(acc, x(r));
        if constexpr (!Tr::floating) return Tr::div(acc, n);
    }
    if (op == ncclAvg || scalar != nullptr) {
        const S s = scalar != nullptr ? *scalar : Tr::recip(n);
        S acc = Tr::mul(x(0), s);
        for (int r = 1; r < n; ++r) acc = Tr::add(acc, Tr::mul(x(r), s));
        return acc;
    }
    S acc = x(0);
    for (int r = 1; r < n; ++r) {
        const S v = x(r);
        if (op == ncclSum) acc = Tr::add(acc, v);
        if (op == ncclProd) acc = Tr::mul(acc, v);
        if (op == ncclMax) acc = Tr::less(acc, v) ? v : acc;
        if (op == ncclMin) acc = Tr::less(v, acc) ? v : acc;
    }
    return acc;
}

constexpr size_t none = size_t(-1);

// Index of the first element of got that differs from want(i), or none.
template <typename S, typename W>
size_t first_bad(const S* got, size_t count, W want) {
    for (size_t i = 0; i < count; ++i)
        if (!same(got[i], want(i))) return i;
    return none;
}

const ncclRedOp_t all_ops[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
const size_t small_counts[] = {0, 1, 1001};
constexpr size_t large_bytes = 3u << 20;

// ---- Collective checks ----

template <typename Tr>
void check_allreduce(ncclComm_t c, ncclRedOp_t op, size_t count, bool in_place, uint64_t salt,
                     const typename Tr::S* scalar = nullptr) {
    using S = typename Tr::S;
    const int n = count_of(c), me = rank_of(c);
    std::vector<S> send(count), recv(count);
    for (size_t i = 0; i < count; ++i) send[i] = input<Tr>(me, i, salt), recv[i] = input<Tr>(me, i, salt + 1);
    const std::vector<S> orig = send;
    S* rb = in_place ? send.data() : recv.data();
    CHECK(ncclAllReduce(send.data(), rb, count, Tr::type, op, c, nullptr) == ncclSuccess);
    const size_t bad = first_bad(rb, count, [&](size_t i) {
        return fold<Tr>(
            op, n, [&](int q) { return input<Tr>(q, i, salt); }, scalar);
    });
    CHECK_MESSAGE(bad == none, "allreduce ", type_name(Tr::type), " op ", int(op), " count ", count, " in place ",
                  in_place, " first bad element ", bad);
    if (!in_place) CHECK(first_bad(send.data(), count, [&](size_t i) { return orig[i]; }) == none);
}

template <typename Tr>
void check_reduce(ncclComm_t c, ncclRedOp_t op, size_t count, int root, bool in_place, uint64_t salt) {
    using S = typename Tr::S;
    const int n = count_of(c), me = rank_of(c);
    std::vector<S> send(count), recv(count);
    for (size_t i = 0; i < count; ++i) send[i] = input<Tr>(me, i, salt), recv[i] = input<Tr>(me, i, salt + 1);
    const std::vector<S> orig = send;
    // recvbuff may be NULL except at the root.
    S* rb = in_place ? send.data() : me == root ? recv.data() : nullptr;
    CHECK(ncclReduce(send.data(), rb, count, Tr::type, op, root, c, nullptr) == ncclSuccess);
    if (me == root) {
        const size_t bad = first_bad(rb, count, [&](size_t i) {
            return fold<Tr>(
                op, n, [&](int q) { return input<Tr>(q, i, salt); }, nullptr);
        });
        CHECK_MESSAGE(bad == none, "reduce ", type_name(Tr::type), " op ", int(op), " root ", root, " count ", count,
                      " first bad element ", bad);
    } else {
        CHECK(first_bad(send.data(), count, [&](size_t i) { return orig[i]; }) == none);
    }
}

template <typename Tr>
void check_broadcast(ncclComm_t c, size_t count, int root, int mode, uint64_t salt) {
    using S = typename Tr::S;
    const int me = rank_of(c);
    std::vector<S> send(count), recv(count);
    for (size_t i = 0; i < count; ++i) send[i] = input<Tr>(me, i, salt), recv[i] = input<Tr>(me, i, salt + 1);
    S* out = recv.data();
    if (mode == 0) {
        CHECK(ncclBroadcast(send.data(), recv.data(), count, Tr::type, root, c, nullptr) == ncclSuccess);
    } else if (mode == 1) {
        out = send.data();
        CHECK(ncclBroadcast(send.data(), send.data(), count, Tr::type, root, c, nullptr) == ncclSuccess);
    } else {
        out = send.data();
        CHECK(ncclBcast(send.data(), count, Tr::type, root, c, nullptr) == ncclSuccess);
    }
    const size_t bad = first_bad(out, count, [&](size_t i) { return input<Tr>(root, i, salt); });
    CHECK_MESSAGE(bad == none, "broadcast ", type_name(Tr::type), " mode ", mode, " root ", root, " count ", count,
                  " first bad element ", bad);
}

template <typename Tr>
void check_reduce_scatter(ncclComm_t c, ncclRedOp_t op, size_t count, bool in_place, uint64_t salt) {
    using S = typename Tr::S;
    const int n = count_of(c), me = rank_of(c);
    std::vector<S> send(size_t(n) * count), recv(count);
    for (size_t k = 0; k < send.size(); ++k) send[k] = input<Tr>(me, k, salt);
    for (size_t j = 0; j < count; ++j) recv[j] = input<Tr>(me, j, salt + 1);
    S* rb = in_place ? send.data() + size_t(me) * count : recv.data();
    CHECK(ncclReduceScatter(send.data(), rb, count, Tr::type, op, c, nullptr) == ncclSuccess);
    const size_t bad = first_bad(rb, count, [&](size_t j) {
        return fold<Tr>(
            op, n, [&](int q) { return input<Tr>(q, size_t(me) * count + j, salt); }, nullptr);
    });
    CHECK_MESSAGE(bad == none, "reduce_scatter ", type_name(Tr::type), " op ", int(op), " count ", count, " in place ",
                  in_place, " first bad element ", bad);
}

template <typename Tr>
void check_allgather(ncclComm_t c, size_t count, bool in_place, uint64_t salt) {
    using S = typename Tr::S;
    const int n = count_of(c), me = rank_of(c);
    std::vector<S> send(count), recv(size_t(n) * count);
    for (size_t j = 0; j < count; ++j) send[j] = input<Tr>(me, j, salt);
    for (size_t k = 0; k < recv.size(); ++k) recv[k] = input<Tr>(me, k, salt + 1);
    const S* sb = send.data();
    if (in_place) {
        std::copy_n(send.begin(), count, recv.begin() + ptrdiff_t(size_t(me) * count));
        sb = recv.data() + size_t(me) * count;
    }
    CHECK(ncclAllGather(sb, recv.data(), count, Tr::type, c, nullptr) == ncclSuccess);
    const size_t bad =
        first_bad(recv.data(), recv.size(), [&](size_t k) { return input<Tr>(int(k / count), k % count, salt); });
    CHECK_MESSAGE(bad == none, "allgather ", type_name(Tr::type), " count ", count, " in place ", in_place,
                  " first bad element ", bad);
}

template <typename Tr>
void check_alltoall(ncclComm_t c, size_t count, uint64_t salt) {
    using S = typename Tr::S;
    const int n = count_of(c), me = rank_of(c);
    std::vector<S> send(size_t(n) * count), recv(size_t(n) * count);
    for (size_t k = 0; k < send.size(); ++k) send[k] = input<Tr>(me, k, salt), recv[k] = input<Tr>(me, k, salt + 1);
    CHECK(ncclAlltoAll(send.data(), recv.data(), count, Tr::type, c, nullptr) == ncclSuccess);
    // Block q of the result is block `me` of rank q's input.
    const size_t bad = first_bad(recv.data(), recv.size(), [&](size_t k) {
        return input<Tr>(int(k / count), size_t(me) * count + k % count, salt);
    });
    CHECK_MESSAGE(bad == none, "alltoall ", type_name(Tr::type), " count ", count, " first bad element ", bad);
}

template <typename Tr>
void check_gather_scatter(ncclComm_t c, size_t count, int root, bool in_place, uint64_t salt) {
    using S = typename Tr::S;
    const int n = count_of(c), me = rank_of(c);
    {  // gather
        std::vector<S> send(count), recv(size_t(n) * count);
        for (size_t j = 0; j < count; ++j) send[j] = input<Tr>(me, j, salt);
        for (size_t k = 0; k < recv.size(); ++k) recv[k] = input<Tr>(me, k, salt + 1);
        const S* sb = send.data();
        if (in_place && me == root) {
            std::copy_n(send.begin(), count, recv.begin() + ptrdiff_t(size_t(me) * count));
            sb = recv.data() + size_t(me) * count;
        }
        CHECK(ncclGather(sb, recv.data(), count, Tr::type, root, c, nullptr) == ncclSuccess);
        if (me == root) {
            const size_t bad = first_bad(recv.data(), recv.size(),
                                         [&](size_t k) { return input<Tr>(int(k / count), k % count, salt); });
            CHECK_MESSAGE(bad == none, "gather root ", root, " count ", count, " first bad element ", bad);
        }
    }
    {  // scatter
        std::vector<S> send(size_t(n) * count), recv(count);
        for (size_t k = 0; k < send.size(); ++k) send[k] = input<Tr>(me, k, salt);
        for (size_t j = 0; j < count; ++j) recv[j] = input<Tr>(me, j, salt + 1);
        S* rb = in_place && me == root ? send.data() + size_t(me) * count : recv.data();
        CHECK(ncclScatter(send.data(), rb, count, Tr::type, root, c, nullptr) == ncclSuccess);
        const size_t bad =
            first_bad(rb, count, [&](size_t j) { return input<Tr>(root, size_t(me) * count + j, salt); });
        CHECK_MESSAGE(bad == none, "scatter root ", root, " count ", count, " first bad element ", bad);
    }
}

}  // namespace

TEST_CASE("library calls: version, error strings, argument errors without a communicator") {
    int v = 0;
    CHECK(ncclGetVersion(&v) == ncclSuccess);
    CHECK(v == NCCL_VERSION_CODE);
    CHECK(ncclGetVersion(nullptr) == ncclInvalidArgument);
    CHECK(std::string(ncclGetErrorString(ncclSuccess)) == "no error");
    CHECK(std::string(ncclGetErrorString(ncclInProgress)) == "NCCL operation in progress");
    CHECK(std::string(ncclGetErrorString(ncclNumResults)) == "unknown result code");
    CHECK(ncclGetUniqueId(nullptr) == ncclInvalidArgument);

    CHECK(ncclGroupEnd() == ncclInvalidUsage);
    CHECK(std::string(ncclGetLastError(nullptr)).find("not in a group") != std::string::npos);
    CHECK(ncclGroupStart() == ncclSuccess);
    CHECK(ncclGroupStart() == ncclSuccess);
    CHECK(ncclGroupEnd() == ncclSuccess);
    CHECK(ncclGroupEnd() == ncclSuccess);

    CHECK(ncclCommDestroy(nullptr) == ncclSuccess);
    CHECK(ncclCommAbort(nullptr) == ncclSuccess);
    CHECK(ncclCommFinalize(nullptr) == ncclSuccess);
    int n = 0;
    ncclResult_t s;
    CHECK(ncclCommCount(nullptr, &n) == ncclInvalidArgument);
    CHECK(ncclCommUserRank(nullptr, &n) == ncclInvalidArgument);
    CHECK(ncclCommCuDevice(nullptr, &n) == ncclInvalidArgument);
    CHECK(ncclCommGetAsyncError(nullptr, &s) == ncclInvalidArgument);
    float x = 0;
    CHECK(ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, nullptr, nullptr) == ncclInvalidArgument);
    CHECK(ncclSend(&x, 1, ncclFloat32, 0, nullptr, nullptr) == ncclInvalidArgument);
    CHECK(std::string(ncclGetLastError(nullptr)).find("comm argument is NULL") != std::string::npos);

    // Bad ranks and ids fail before any communication.
    ncclUniqueId garbage;
    std::memset(&garbage, 0x5a, sizeof garbage);
    ncclComm_t c = reinterpret_cast<ncclComm_t>(&garbage);
    CHECK(ncclCommInitRank(&c, 2, garbage, 2) == ncclInvalidArgument);
    CHECK(c == nullptr);
    CHECK(ncclCommInitRank(&c, 0, garbage, 0) == ncclInvalidArgument);
    CHECK(ncclCommInitRank(&c, 2, garbage, -1) == ncclInvalidArgument);
    CHECK(ncclCommInitRank(nullptr, 1, garbage, 0) == ncclInvalidArgument);
    CHECK(ncclCommInitRank(&c, 1, garbage, 0) == ncclInvalidArgument);  // not an id of this library
    CHECK(c == nullptr);
    ncclConfig_t bad_magic = NCCL_CONFIG_INITIALIZER;
    bad_magic.magic = 0;
    CHECK(ncclCommInitRankConfig(&c, 1, garbage, 0, &bad_magic) == ncclInvalidArgument);
    ncclConfig_t bad_blocking = NCCL_CONFIG_INITIALIZER;
    bad_blocking.blocking = 2;
    CHECK(ncclCommInitRankConfig(&c, 1, garbage, 0, &bad_blocking) == ncclInvalidArgument);

    ncclComm_t cs[2];
    const int dup[] = {1, 1}, negative[] = {0, -1};
    CHECK(ncclCommInitAll(nullptr, 2, nullptr) == ncclInvalidArgument);
    CHECK(ncclCommInitAll(cs, -1, nullptr) == ncclInvalidArgument);
    CHECK(ncclCommInitAll(cs, 2, dup) == ncclInvalidUsage);
    CHECK(ncclCommInitAll(cs, 2, negative) == ncclInvalidArgument);

    void* p = reinterpret_cast<void*>(1);
    CHECK(ncclMemAlloc(nullptr, 8) == ncclInvalidArgument);
    CHECK(ncclMemAlloc(&p, 0) == ncclSuccess);
    CHECK(p == nullptr);
    REQUIRE(ncclMemAlloc(&p, 1000) == ncclSuccess);
    CHECK(reinterpret_cast<uintptr_t>(p) % 4096 == 0);
    std::memset(p, 1, 1000);
    CHECK(ncclMemFree(p) == ncclSuccess);
    CHECK(ncclMemFree(nullptr) == ncclSuccess);
}

TEST_CASE("the world communicator") {
    ncclComm_t c = world();
    CHECK(count_of(c) == world_size());
    CHECK(rank_of(c) == world_rank());
    int dev = -1;
    CHECK(ncclCommCuDevice(c, &dev) == ncclSuccess);
    CHECK(dev == 0);
    ncclResult_t s = ncclInternalError;
    CHECK(ncclCommGetAsyncError(c, &s) == ncclSuccess);
    CHECK(s == ncclSuccess);
    void* handle = nullptr;
    char buf[64];
    CHECK(ncclCommRegister(c, buf, sizeof buf, &handle) == ncclSuccess);
    CHECK(ncclCommDeregister(c, handle) == ncclSuccess);
}

TEST_CASE("allreduce: every type and operation, counts 0, 1, 1001, in place or not") {
    ncclComm_t c = world();
    uint64_t salt = 100;
    each_type([&](auto tr) {
        using Tr = decltype(tr);
        for (ncclRedOp_t op : all_ops)
            for (size_t count : small_counts)
                for (bool in_place : {false, true}) check_allreduce<Tr>(c, op, count, in_place, ++salt);
    });
}

TEST_CASE("allreduce of a few MiB in every type") {
    ncclComm_t c = world();
    uint64_t salt = 200;
    each_type([&](auto tr) {
        using Tr = decltype(tr);
        check_allreduce<Tr>(c, ncclSum, large_bytes / sizeof(typename Tr::S) + 3, true, ++salt);
    });
    check_allreduce<f32>(c, ncclMax, large_bytes / 4 + 1, false, ++salt);
}

TEST_CASE("PreMulSum operators, with a host scalar or one read when the call runs") {
    ncclComm_t c = world();
    auto premul = [&](auto tr, auto value) {
        using Tr = decltype(tr);
        using S = typename Tr::S;
        S scalar = S(value);
        ncclRedOp_t op;
        REQUIRE(ncclRedOpCreatePreMulSum(&op, &scalar, Tr::type, ncclScalarHostImmediate, c) == ncclSuccess);
        const S used = scalar;
        scalar = S(0);  // copied at creation: changing it afterwards does not matter
        check_allreduce<Tr>(c, op, 1001, false, 300, &used);
        CHECK(ncclRedOpDestroy(op, c) == ncclSuccess);
        REQUIRE(ncclRedOpCreatePreMulSum(&op, &scalar, Tr::type, ncclScalarDevice, c) == ncclSuccess);
        scalar = used;  // read when the collective runs
        check_allreduce<Tr>(c, op, 1001, true, 301, &used);
        float x = 0;
        if (Tr::type != ncclFloat32)  // an operator is made for one type
            CHECK(ncclAllReduce(&x, &x, 1, ncclFloat32, op, c, nullptr) == ncclInvalidArgument);
        CHECK(ncclRedOpDestroy(op, c) == ncclSuccess);
        CHECK(ncclRedOpDestroy(op, c) == ncclInvalidArgument);
    };
    premul(f32{}, 0.375f);
    premul(f64{}, -1.25);
    premul(i32{}, 3);
    premul(u8{}, 5);
    {
        __half h = __float2half_rn(0.75f);
        ncclRedOp_t op;
        REQUIRE(ncclRedOpCreatePreMulSum(&op, &h, ncclFloat16, ncclScalarHostImmediate, c) == ncclSuccess);
        check_allreduce<half_type>(c, op, 1001, false, 302, &h);
        CHECK(ncclRedOpDestroy(op, c) == ncclSuccess);
    }
    CHECK(ncclRedOpDestroy(ncclSum, c) == ncclInvalidArgument);
    CHECK(ncclRedOpDestroy(ncclRedOp_t(ncclNumOps + 40), c) == ncclInvalidArgument);
}

TEST_CASE("reduce at every root") {
    ncclComm_t c = world();
    const int n = count_of(c);
    uint64_t salt = 400;
    for (int root = 0; root < n; ++root) {
        each_type([&](auto tr) {
            using Tr = decltype(tr);
            check_reduce<Tr>(c, ncclSum, 1001, root, false, ++salt);
        });
        for (ncclRedOp_t op : all_ops)
            for (size_t count : small_counts)
                for (bool in_place : {false, true}) {
                    check_reduce<f32>(c, op, count, root, in_place, ++salt);
                    check_reduce<half_type>(c, op, count, root, in_place, ++salt);
                    check_reduce<i64>(c, op, count, root, in_place, ++salt);
                }
    }
    check_reduce<f64>(c, ncclSum, large_bytes / 8, n - 1, false, ++salt);
}

TEST_CASE("broadcast and bcast at every root") {
    ncclComm_t c = world();
    const int n = count_of(c);
    uint64_t salt = 500;
    for (int root = 0; root < n; ++root)
        for (int mode = 0; mode < 3; ++mode) {
            for (size_t count : small_counts) {
                check_broadcast<u8>(c, count, root, mode, ++salt);
                check_broadcast<bf16_type>(c, count, root, mode, ++salt);
            }
            check_broadcast<i64>(c, 77, root, mode, ++salt);
        }
    check_broadcast<f32>(c, large_bytes / 4, n / 2, 0, ++salt);
}

TEST_CASE("reduce-scatter: every type, operations, in place or not") {
    ncclComm_t c = world();
    uint64_t salt = 600;
    each_type([&](auto tr) {
        using Tr = decltype(tr);
        for (size_t count : small_counts)
            for (bool in_place : {false, true}) check_reduce_scatter<Tr>(c, ncclSum, count, in_place, ++salt);
    });
    for (ncclRedOp_t op : all_ops)
        for (bool in_place : {false, true}) {
            check_reduce_scatter<f32>(c, op, 333, in_place, ++salt);
            check_reduce_scatter<u32>(c, op, 333, in_place, ++salt);
            check_reduce_scatter<half_type>(c, op, 333, in_place, ++salt);
        }
    check_reduce_scatter<f32>(c, ncclSum, large_bytes / 4 / size_t(count_of(c)), true, ++salt);
}

TEST_CASE("allgather, alltoall, gather and scatter") {
    ncclComm_t c = world();
    const int n = count_of(c);
    uint64_t salt = 700;
    each_type([&](auto tr) {
        using Tr = decltype(tr);
        for (size_t count : small_counts) {
            for (bool in_place : {false, true}) check_allgather<Tr>(c, count, in_place, ++salt);
            check_alltoall<Tr>(c, count, ++salt);
        }
    });
    check_allgather<f64>(c, large_bytes / 8 / size_t(n), false, ++salt);
    check_alltoall<u8>(c, large_bytes / size_t(n), ++salt);
    for (int root = 0; root < n; ++root)
        for (size_t count : small_counts)
            for (bool in_place : {false, true}) check_gather_scatter<i32>(c, count, root, in_place, ++salt);

    // fp8 has no reduction here (as NCCL before sm90) but moves like any byte.
    std::vector<uint8_t> send(5, uint8_t(world_rank() + 1)), recv(5 * size_t(n));
    CHECK(ncclAllGather(send.data(), recv.data(), 5, ncclFloat8e4m3, c, nullptr) == ncclSuccess);
    for (size_t k = 0; k < recv.size(); ++k) CHECK(recv[k] == uint8_t(k / 5 + 1));
    CHECK(ncclAllReduce(send.data(), send.data(), 5, ncclFloat8e5m2, ncclSum, c, nullptr) == ncclInvalidArgument);
    CHECK(ncclAllReduce(send.data(), send.data(), 0, ncclFloat8e5m2, ncclSum, c, nullptr) == ncclSuccess);
}

TEST_CASE("send and receive: rings, all pairs, self, several messages per peer, large") {
    ncclComm_t c = world();
    const int n = count_of(c), me = rank_of(c);
    const int next = (me + 1) % n, prev = (me + n - 1) % n;
    for (size_t count : {size_t(0), size_t(1), size_t(1001), large_bytes / 8}) {
        std::vector<double> send(count), recv(count, -1);
        for (size_t i = 0; i < count; ++i) send[i] = input<f64>(me, i, 800 + count);
        CHECK(ncclGroupStart() == ncclSuccess);
        CHECK(ncclSend(send.data(), count, ncclFloat64, next, c, nullptr) == ncclSuccess);
        CHECK(ncclRecv(recv.data(), count, ncclFloat64, prev, c, nullptr) == ncclSuccess);
        CHECK(ncclGroupEnd() == ncclSuccess);
        CHECK(first_bad(recv.data(), count, [&](size_t i) { return input<f64>(prev, i, 800 + count); }) == none);
    }
    {  // all pairs, the rank itself included; what q sends to r is keyed by both
        const size_t count = 257;
        const std::vector<std::vector<int32_t>> blocks(static_cast<size_t>(n), std::vector<int32_t>(count));
        std::vector<std::vector<int32_t>> send = blocks, recv = blocks;
        for (int p = 0; p < n; ++p)
            for (size_t i = 0; i < count; ++i) send[p][i] = input<i32>(me, i, 900 + uint64_t(p));
        CHECK(ncclGroupStart() == ncclSuccess);
        for (int p = 0; p < n; ++p) {
            CHECK(ncclRecv(recv[p].data(), count, ncclInt32, p, c, nullptr) == ncclSuccess);
            CHECK(ncclSend(send[p].data(), count, ncclInt32, p, c, nullptr) == ncclSuccess);
        }
        CHECK(ncclGroupEnd() == ncclSuccess);
        for (int p = 0; p < n; ++p)
            CHECK(first_bad(recv[p].data(), count, [&](size_t i) { return input<i32>(p, i, 900 + uint64_t(me)); }) ==
                  none);
    }
    {  // self only, outside any other traffic
        std::vector<uint8_t> a(100, 7), b(100, 0);
        CHECK(ncclGroupStart() == ncclSuccess);
        CHECK(ncclSend(a.data(), 100, ncclUint8, me, c, nullptr) == ncclSuccess);
        CHECK(ncclRecv(b.data(), 100, ncclUint8, me, c, nullptr) == ncclSuccess);
        CHECK(ncclGroupEnd() == ncclSuccess);
        CHECK(a == b);
    }
    {  // two messages to the same peer in one group arrive in order
        std::vector<float> a(10), b(3000), ra(10, -1), rb(3000, -1);
        for (size_t i = 0; i < a.size(); ++i) a[i] = input<f32>(me, i, 1000);
        for (size_t i = 0; i < b.size(); ++i) b[i] = input<f32>(me, i, 1001);
        CHECK(ncclGroupStart() == ncclSuccess);
        CHECK(ncclSend(a.data(), a.size(), ncclFloat32, next, c, nullptr) == ncclSuccess);
        CHECK(ncclSend(b.data(), b.size(), ncclFloat32, next, c, nullptr) == ncclSuccess);
        CHECK(ncclRecv(ra.data(), ra.size(), ncclFloat32, prev, c, nullptr) == ncclSuccess);
        CHECK(ncclRecv(rb.data(), rb.size(), ncclFloat32, prev, c, nullptr) == ncclSuccess);
        CHECK(ncclGroupEnd() == ncclSuccess);
        CHECK(first_bad(ra.data(), ra.size(), [&](size_t i) { return input<f32>(prev, i, 1000); }) == none);
        CHECK(first_bad(rb.data(), rb.size(), [&](size_t i) { return input<f32>(prev, i, 1001); }) == none);
    }
    if (n >= 2) {  // outside a group: even ranks send first, odd ranks receive first (pairs 0-1, 2-3)
        const int partner = me ^ 1;
        if (partner < n) {
            std::vector<int64_t> s(large_bytes / 8), r(large_bytes / 8);
            for (size_t i = 0; i < s.size(); ++i) s[i] = input<i64>(me, i, 1100);
            if (me % 2 == 0) {
                CHECK(ncclSend(s.data(), s.size(), ncclInt64, partner, c, nullptr) == ncclSuccess);
                CHECK(ncclRecv(r.data(), r.size(), ncclInt64, partner, c, nullptr) == ncclSuccess);
            } else {
                CHECK(ncclRecv(r.data(), r.size(), ncclInt64, partner, c, nullptr) == ncclSuccess);
                CHECK(ncclSend(s.data(), s.size(), ncclInt64, partner, c, nullptr) == ncclSuccess);
            }
            CHECK(first_bad(r.data(), r.size(), [&](size_t i) { return input<i64>(partner, i, 1100); }) == none);
        }
    }
}

TEST_CASE("groups: calls run at the outermost end, mixed calls, an error discards the group") {
    ncclComm_t c = world();
    const int n = count_of(c), me = rank_of(c);
    const size_t count = 501;
    std::vector<float> a(count), ra(count, -7.f);
    for (size_t i = 0; i < count; ++i) a[i] = input<f32>(me, i, 1200);
    CHECK(ncclGroupStart() == ncclSuccess);
    CHECK(ncclGroupStart() == ncclSuccess);
    CHECK(ncclAllReduce(a.data(), ra.data(), count, ncclFloat32, ncclSum, c, nullptr) == ncclSuccess);
    CHECK(ncclGroupEnd() == ncclSuccess);
    CHECK(ra[0] == -7.f);  // still queued: the outer group is open
    CHECK(ncclGroupEnd() == ncclSuccess);
    CHECK(first_bad(ra.data(), count, [&](size_t i) {
              return fold<f32>(
                  ncclSum, n, [&](int q) { return input<f32>(q, i, 1200); }, nullptr);
          }) == none);

    // Collectives of several kinds and a ring of sends in one group.
    std::vector<uint32_t> g(count), rg(count * size_t(n));
    std::vector<uint8_t> rs(count * size_t(n)), rrs(count);
    std::vector<double> s(count), rr(count);
    for (size_t i = 0; i < count; ++i) g[i] = input<u32>(me, i, 1201), s[i] = input<f64>(me, i, 1203);
    for (size_t k = 0; k < rs.size(); ++k) rs[k] = input<u8>(me, k, 1202);
    CHECK(ncclGroupStart() == ncclSuccess);
    CHECK(ncclAllReduce(a.data(), ra.data(), count, ncclFloat32, ncclMax, c, nullptr) == ncclSuccess);
    CHECK(ncclSend(s.data(), count, ncclFloat64, (me + 1) % n, c, nullptr) == ncclSuccess);
    CHECK(ncclAllGather(g.data(), rg.data(), count, ncclUint32, c, nullptr) == ncclSuccess);
    CHECK(ncclReduceScatter(rs.data(), rrs.data(), count, ncclUint8, ncclProd, c, nullptr) == ncclSuccess);
    CHECK(ncclRecv(rr.data(), count, ncclFloat64, (me + n - 1) % n, c, nullptr) == ncclSuccess);
    CHECK(ncclGroupEnd() == ncclSuccess);
    CHECK(first_bad(ra.data(), count, [&](size_t i) {
              return fold<f32>(
                  ncclMax, n, [&](int q) { return input<f32>(q, i, 1200); }, nullptr);
          }) == none);
    CHECK(first_bad(rg.data(), rg.size(), [&](size_t k) { return input<u32>(int(k / count), k % count, 1201); }) ==
          none);
    CHECK(first_bad(rrs.data(), count, [&](size_t j) {
              return fold<u8>(
                  ncclProd, n, [&](int q) { return input<u8>(q, size_t(me) * count + j, 1202); }, nullptr);
          }) == none);
    CHECK(first_bad(rr.data(), count, [&](size_t i) { return input<f64>((me + n - 1) % n, i, 1203); }) == none);

    // A bad call inside a group: returned at once and by ncclGroupEnd; nothing in the group runs.
    std::fill(ra.begin(), ra.end(), -7.f);
    CHECK(ncclGroupStart() == ncclSuccess);
    CHECK(ncclAllReduce(a.data(), ra.data(), count, ncclFloat32, ncclSum, c, nullptr) == ncclSuccess);
    CHECK(ncclAllReduce(a.data(), ra.data(), count, ncclDataType_t(ncclNumTypes), ncclSum, c, nullptr) ==
          ncclInvalidArgument);
    CHECK(ncclGroupEnd() == ncclInvalidArgument);
    CHECK(ra[0] == -7.f);
    ncclResult_t st = ncclInternalError;
    CHECK(ncclCommGetAsyncError(c, &st) == ncclSuccess);
    CHECK(st == ncclSuccess);  // a blocking communicator stays usable
    check_allreduce<i32>(c, ncclSum, 11, false, 1204);
}

TEST_CASE("argument errors on a communicator") {
    ncclComm_t c = world();
    const int n = count_of(c);
    std::vector<float> buf(16);
    float* b = buf.data();
    CHECK(ncclAllReduce(b, b, 4, ncclDataType_t(ncclNumTypes), ncclSum, c, nullptr) == ncclInvalidArgument);
    CHECK(ncclAllReduce(b, b, 4, ncclFloat32, ncclRedOp_t(ncclNumOps), c, nullptr) == ncclInvalidArgument);
    CHECK(ncclAllReduce(b, b, 4, ncclFloat32, ncclMaxRedOp, c, nullptr) == ncclInvalidArgument);
    CHECK(ncclReduce(b, b, 4, ncclFloat32, ncclSum, -1, c, nullptr) == ncclInvalidArgument);
    CHECK(ncclReduce(b, b, 4, ncclFloat32, ncclSum, n, c, nullptr) == ncclInvalidArgument);
    CHECK(std::string(ncclGetLastError(c)).find("invalid root") != std::string::npos);
    CHECK(ncclBroadcast(b, b, 4, ncclFloat32, n, c, nullptr) == ncclInvalidArgument);
    CHECK(ncclBcast(b, 4, ncclFloat32, -2, c, nullptr) == ncclInvalidArgument);
    CHECK(ncclGather(b, b, 1, ncclFloat32, n, c, nullptr) == ncclInvalidArgument);
    CHECK(ncclScatter(b, b, 1, ncclFloat32, -1, c, nullptr) == ncclInvalidArgument);
    CHECK(ncclSend(b, 4, ncclFloat32, n, c, nullptr) == ncclInvalidArgument);
    CHECK(ncclRecv(b, 4, ncclFloat32, -1, c, nullptr) == ncclInvalidArgument);
    CHECK(ncclAllReduce(b, b, SIZE_MAX / 2, ncclInt32, ncclSum, c, nullptr) == ncclInvalidArgument);
    CHECK(ncclAllGather(b, b, SIZE_MAX / 8, ncclInt64, c, nullptr) == ncclInvalidArgument);
    CHECK(ncclAlltoAll(b, b, SIZE_MAX / 2 + 1, ncclUint8, c, nullptr) == ncclInvalidArgument);
    CHECK(ncclAllReduce(nullptr, b, 4, ncclFloat32, ncclSum, c, nullptr) == ncclInvalidArgument);
    CHECK(ncclAllReduce(b, nullptr, 4, ncclFloat32, ncclSum, c, nullptr) == ncclInvalidArgument);
    CHECK(ncclSend(nullptr, 4, ncclFloat32, 0, c, nullptr) == ncclInvalidArgument);
    CHECK(ncclRecv(nullptr, 4, ncclFloat32, 0, c, nullptr) == ncclInvalidArgument);
    CHECK(ncclCommCount(c, nullptr) == ncclInvalidArgument);
    CHECK(ncclCommGetAsyncError(c, nullptr) == ncclInvalidArgument);
    // Empty collectives are discarded: null buffers are fine.
    CHECK(ncclAllReduce(nullptr, nullptr, 0, ncclFloat32, ncclSum, c, nullptr) == ncclSuccess);
    CHECK(ncclAllGather(nullptr, nullptr, 0, ncclFloat32, c, nullptr) == ncclSuccess);
    // None of these communicated: the communicator still works.
    check_allreduce<f32>(c, ncclSum, 5, false, 1300);
}

TEST_CASE("split: colors order ranks by key, NOCOLOR gets no communicator, splits of splits") {
    ncclComm_t w = world();
    const int n = count_of(w), me = rank_of(w);
    auto members_of = [&](ncclComm_t c) {  // world ranks of the child's ranks, through the child itself
        const int cn = count_of(c);
        std::vector<int32_t> mine(1, me), all(size_t(cn), -1);
        CHECK(ncclAllGather(mine.data(), all.data(), 1, ncclInt32, c, nullptr) == ncclSuccess);
        return all;
    };
    {  // parity classes, reversed by key
        ncclComm_t c = nullptr;
        CHECK(ncclCommSplit(w, me % 2, -me, &c, nullptr) == ncclSuccess);
        REQUIRE(c != nullptr);
        std::vector<int32_t> want;
        for (int q = n - 1; q >= 0; --q)
            if (q % 2 == me % 2) want.push_back(q);
        CHECK(count_of(c) == int(want.size()));
        CHECK(members_of(c) == want);
        CHECK(rank_of(c) == int(std::find(want.begin(), want.end(), me) - want.begin()));
        check_allreduce<f32>(c, ncclSum, 1001, false, 1400);
        check_reduce_scatter<i64>(c, ncclMin, 17, true, 1401);
        {  // a split of the split: every rank alone
            ncclComm_t solo = nullptr;
            CHECK(ncclCommSplit(c, rank_of(c), 0, &solo, nullptr) == ncclSuccess);
            REQUIRE(solo != nullptr);
            CHECK(count_of(solo) == 1);
            check_allreduce<half_type>(solo, ncclAvg, 33, true, 1402);
            CHECK(ncclCommDestroy(solo) == ncclSuccess);
        }
        CHECK(ncclCommDestroy(c) == ncclSuccess);
    }
    {  // the last rank takes no part; equal keys keep the parent's order
        ncclComm_t c = reinterpret_cast<ncclComm_t>(&w);
        const bool out = n > 1 && me == n - 1;
        CHECK(ncclCommSplit(w, out ? NCCL_SPLIT_NOCOLOR : 7, 0, &c, nullptr) == ncclSuccess);
        if (out) {
            CHECK(c == nullptr);
        } else {
            REQUIRE(c != nullptr);
            std::vector<int32_t> want;
            for (int q = 0; q < (n > 1 ? n - 1 : 1); ++q) want.push_back(q);
            CHECK(members_of(c) == want);
            check_allreduce<u64>(c, ncclProd, 99, false, 1403);
            CHECK(ncclCommDestroy(c) == ncclSuccess);
        }
    }
    CHECK(ncclCommSplit(nullptr, 0, 0, nullptr, nullptr) == ncclInvalidArgument);
    CHECK(ncclCommSplit(w, 0, 0, nullptr, nullptr) == ncclInvalidArgument);
    check_allreduce<f32>(w, ncclSum, 5, true, 1404);  // the parent is still in step
}

TEST_CASE("ncclCommInitRankScalable: several unique ids, the same on every rank; bad arguments") {
    const int n = world_size(), me = world_rank();
    // Up to two ids, made by rank 0 and the last rank, handed to every rank in the same order.
    const int nid = std::min(n, 2);
    std::vector<ncclUniqueId> ids(static_cast<size_t>(nid));
    for (int k = 0; k < nid; ++k) {
        const int maker = k == 0 ? 0 : n - 1;
        int ok = 1;
        if (me == maker) ok = ncclGetUniqueId(&ids[size_t(k)]) == ncclSuccess;
        MPI_Bcast(&ids[size_t(k)], sizeof(ncclUniqueId), MPI_BYTE, maker, MPI_COMM_WORLD);
        MPI_Bcast(&ok, 1, MPI_INT, maker, MPI_COMM_WORLD);
        REQUIRE(ok);
    }
    ncclComm_t c = nullptr;
    REQUIRE(ncclCommInitRankScalable(&c, n, me, nid, ids.data(), nullptr) == ncclSuccess);
    REQUIRE(c != nullptr);
    CHECK(count_of(c) == n);
    CHECK(rank_of(c) == me);
    check_allreduce<f32>(c, ncclSum, 1001, false, 2000);
    check_allgather<i64>(c, 17, false, 2001);
    CHECK(ncclCommDestroy(c) == ncclSuccess);

    // With a config: non-blocking, then used as any communicator.
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclUniqueId one = shared_id();
    ncclComm_t nb = nullptr;
    const ncclResult_t init = ncclCommInitRankScalable(&nb, n, me, 1, &one, &config);
    CHECK((init == ncclInProgress || init == ncclSuccess));
    REQUIRE(nb != nullptr);
    CHECK(wait_ready(nb) == ncclSuccess);
    std::vector<int32_t> a(33), r(33);
    for (size_t i = 0; i < a.size(); ++i) a[i] = input<i32>(me, i, 2002);
    const ncclResult_t ar = ncclAllReduce(a.data(), r.data(), a.size(), ncclInt32, ncclMax, nb, nullptr);
    CHECK((ar == ncclInProgress || ar == ncclSuccess));
    CHECK(wait_ready(nb) == ncclSuccess);
    CHECK(first_bad(r.data(), r.size(), [&](size_t i) {
              return fold<i32>(
                  ncclMax, n, [&](int q) { return input<i32>(q, i, 2002); }, nullptr);
          }) == none);
    CHECK(ncclCommDestroy(nb) == ncclSuccess);

    // As NCCL: nId in 1..nranks, ids not NULL; nothing is communicated.
    ncclComm_t bad = nullptr;
    CHECK(ncclCommInitRankScalable(&bad, n, me, 0, ids.data(), nullptr) == ncclInvalidArgument);
    CHECK(std::string(ncclGetLastError(nullptr)).find("nId = 0") != std::string::npos);
    CHECK(ncclCommInitRankScalable(&bad, n, me, n + 1, ids.data(), nullptr) == ncclInvalidArgument);
    CHECK(ncclCommInitRankScalable(&bad, n, me, -1, ids.data(), nullptr) == ncclInvalidArgument);
    CHECK(ncclCommInitRankScalable(&bad, n, me, 1, nullptr, nullptr) == ncclInvalidArgument);
    CHECK(ncclCommInitRankScalable(nullptr, n, me, 1, ids.data(), nullptr) == ncclInvalidArgument);
    CHECK(ncclCommInitRankScalable(&bad, n, n, 1, ids.data(), nullptr) == ncclInvalidArgument);
    CHECK(bad == nullptr);
    // In the user's group the error also fails the group.
    CHECK(ncclGroupStart() == ncclSuccess);
    CHECK(ncclCommInitRankScalable(&bad, n, me, 0, ids.data(), nullptr) == ncclInvalidArgument);
    CHECK(ncclGroupEnd() == ncclInvalidArgument);
    CHECK(bad == nullptr);
}

TEST_CASE("shrink: the ranks kept renumbered in order, configs, NCCL_SHRINK_ABORT, bad arguments") {
    ncclComm_t w = world();
    const int n = count_of(w), me = rank_of(w);
    auto members_of = [&](ncclComm_t c) {  // world ranks of the child's ranks, through the child itself
        std::vector<int32_t> mine(1, me), all(size_t(count_of(c)), -1);
        CHECK(ncclAllGather(mine.data(), all.data(), 1, ncclInt32, c, nullptr) == ncclSuccess);
        return all;
    };
    // Bad arguments fail before any communication, on every rank alike.
    {
        ncclComm_t c = nullptr;
        int self[] = {me}, outside[] = {n}, negative[] = {-1}, twice[] = {(me + 1) % n, (me + 1) % n};
        std::vector<int> everyone(static_cast<size_t>(n));
        for (int q = 0; q < n; ++q) everyone[size_t(q)] = q;
        CHECK(ncclCommShrink(w, nullptr, 1, &c, nullptr, NCCL_SHRINK_DEFAULT) == ncclInvalidArgument);
        CHECK(ncclCommShrink(w, everyone.data(), 0, &c, nullptr, NCCL_SHRINK_DEFAULT) == ncclInvalidArgument);
        CHECK(ncclCommShrink(w, everyone.data(), n, &c, nullptr, NCCL_SHRINK_DEFAULT) == ncclInvalidArgument);
        CHECK(ncclCommShrink(w, self, 1, &c, nullptr, NCCL_SHRINK_DEFAULT) == ncclInvalidArgument);
        if (n > 1) CHECK(std::string(ncclGetLastError(nullptr)).find("must not call") != std::string::npos);
        CHECK(ncclCommShrink(w, outside, 1, &c, nullptr, NCCL_SHRINK_DEFAULT) == ncclInvalidArgument);
        CHECK(ncclCommShrink(w, negative, 1, &c, nullptr, NCCL_SHRINK_ABORT) == ncclInvalidArgument);
        if (n > 2) CHECK(ncclCommShrink(w, twice, 2, &c, nullptr, NCCL_SHRINK_DEFAULT) == ncclInvalidArgument);
        CHECK(ncclCommShrink(nullptr, outside, 1, &c, nullptr, NCCL_SHRINK_DEFAULT) == ncclInvalidArgument);
        CHECK(ncclCommShrink(w, outside, 1, nullptr, nullptr, NCCL_SHRINK_DEFAULT) == ncclInvalidArgument);
        ncclConfig_t bad_magic = NCCL_CONFIG_INITIALIZER;
        bad_magic.magic = 0;
        if (n > 1) {
            int last[] = {n - 1};
            if (me != n - 1) CHECK(ncclCommShrink(w, last, 1, &c, &bad_magic, 0) == ncclInvalidArgument);
        }
        CHECK(c == nullptr);
        check_allreduce<f32>(w, ncclSum, 5, true, 2100);  // nothing was communicated
    }
    if (n == 1) return;

    {  // the odd ranks excluded (listed in reverse): the even ones renumbered in order, the odd ones do not call
        std::vector<int> odd;
        for (int q = n - 1; q >= 0; --q)
            if (q % 2 == 1) odd.push_back(q);
        if (me % 2 == 0) {
            ncclComm_t c = reinterpret_cast<ncclComm_t>(&w);
            CHECK(ncclCommShrink(w, odd.data(), int(odd.size()), &c, nullptr, NCCL_SHRINK_DEFAULT) == ncclSuccess);
            REQUIRE(c != nullptr);
            std::vector<int32_t> want;
            for (int q = 0; q < n; q += 2) want.push_back(q);
            CHECK(count_of(c) == int(want.size()));
            CHECK(rank_of(c) == me / 2);
            CHECK(members_of(c) == want);
            check_allreduce<f64>(c, ncclSum, 1001, false, 2101);
            check_reduce<i32>(c, ncclProd, 77, 0, true, 2102);
            CHECK(ncclCommDestroy(c) == ncclSuccess);
        }
        check_allreduce<u8>(w, ncclMax, 9, false, 2103);  // the parent is still in step on every rank
    }
    {  // rank 0 excluded, a non-blocking child by its config
        int first[] = {0};
        ncclComm_t c = nullptr;
        std::vector<float> a(100), s(100);
        if (me != 0) {
            ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
            config.blocking = 0;
            const ncclResult_t r = ncclCommShrink(w, first, 1, &c, &config, NCCL_SHRINK_DEFAULT);
            CHECK((r == ncclSuccess || r == ncclInProgress));
            REQUIRE(c != nullptr);
            CHECK(wait_ready(c) == ncclSuccess);
            CHECK(count_of(c) == n - 1);
            CHECK(rank_of(c) == me - 1);
            for (size_t i = 0; i < a.size(); ++i) a[i] = input<f32>(me - 1, i, 2104);
        }
        // The child's rank 0 calls first: the others join only after the barrier, so a non-blocking call
        // (as the config asked) cannot have completed.
        const bool first_caller = me == 1 && n > 2;
        if (first_caller)
            CHECK(ncclAllReduce(a.data(), s.data(), a.size(), ncclFloat32, ncclSum, c, nullptr) == ncclInProgress);
        MPI_Barrier(MPI_COMM_WORLD);
        if (me != 0) {
            if (!first_caller) {
                const ncclResult_t ar = ncclAllReduce(a.data(), s.data(), a.size(), ncclFloat32, ncclSum, c, nullptr);
                CHECK((ar == ncclInProgress || ar == ncclSuccess));
            }
            CHECK(wait_ready(c) == ncclSuccess);
            CHECK(first_bad(s.data(), s.size(), [&](size_t i) {
                      return fold<f32>(
                          ncclSum, n - 1, [&](int q) { return input<f32>(q, i, 2104); }, nullptr);
                  }) == none);
            CHECK(ncclCommDestroy(c) == ncclSuccess);
        }
        check_allreduce<i64>(w, ncclMin, 3, true, 2105);
    }
    {  // NCCL_SHRINK_ABORT: rank 0's allreduce on a non-blocking parent hangs (no other rank joins it); the last
        // rank is excluded, the others shrink with the abort flag, which ends rank 0's allreduce (its messages,
        // already sent, must not disturb the others' shrink)
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = 0;
        ncclComm_t p = nullptr;
        const ncclResult_t init = ncclCommInitRankConfig(&p, n, shared_id(), me, &config);
        CHECK((init == ncclInProgress || init == ncclSuccess));
        REQUIRE(p != nullptr);
        CHECK(wait_ready(p) == ncclSuccess);
        std::vector<double> a(1001), s(1001);
        for (size_t i = 0; i < a.size(); ++i) a[i] = input<f64>(me, i, 2106);
        int last[] = {n - 1};
        ncclComm_t c = nullptr;
        if (me == 0) {
            CHECK(ncclAllReduce(a.data(), s.data(), a.size(), ncclFloat64, ncclSum, p, nullptr) == ncclInProgress);
            std::this_thread::sleep_for(std::chrono::milliseconds(200));  // its messages are on their way
            ncclResult_t st = ncclSuccess;
            CHECK(ncclCommGetAsyncError(p, &st) == ncclSuccess);
            CHECK(st == ncclInProgress);
            // Without the flag a parent in progress cannot be shrunk.
            CHECK(ncclCommShrink(p, last, 1, &c, nullptr, NCCL_SHRINK_DEFAULT) == ncclInvalidArgument);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        if (me != n - 1) {
            ncclConfig_t blocking = NCCL_CONFIG_INITIALIZER;
            blocking.blocking = 1;
            const ncclResult_t r = ncclCommShrink(p, last, 1, &c, &blocking, NCCL_SHRINK_ABORT);
            CHECK((r == ncclSuccess || r == ncclInProgress));
            CHECK(wait_ready(p) == ncclSuccess);
            REQUIRE(c != nullptr);
            CHECK(count_of(c) == n - 1);
            CHECK(rank_of(c) == me);
            check_allreduce<f64>(c, ncclSum, 1001, false, 2107);
            CHECK(ncclCommDestroy(c) == ncclSuccess);
        }
        MPI_Barrier(MPI_COMM_WORLD);  // the excluded rank leaves only now (its closing would end rank 0's call)
        CHECK(ncclCommAbort(p) == ncclSuccess);
    }
}

TEST_CASE("a non-blocking communicator: init, calls, groups, split and finalize report ncclInProgress") {
    const int n = world_size(), me = world_rank();
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t c = nullptr;
    const ncclResult_t init = ncclCommInitRankConfig(&c, n, shared_id(), me, &config);
    CHECK((init == ncclInProgress || init == ncclSuccess));
    REQUIRE(c != nullptr);
    CHECK(wait_ready(c) == ncclSuccess);
    CHECK(count_of(c) == n);

    const size_t count = 1001;
    std::vector<float> a(count), ra(count);
    for (size_t i = 0; i < count; ++i) a[i] = input<f32>(me, i, 1500);
    auto check_sum = [&] {
        CHECK(first_bad(ra.data(), count, [&](size_t i) {
                  return fold<f32>(
                      ncclSum, n, [&](int q) { return input<f32>(q, i, 1500); }, nullptr);
              }) == none);
    };
    if (n > 1) {
        // Rank 0 calls first: the others only join after the barrier, so its call cannot have completed.
        if (me == 0) {
            CHECK(ncclAllReduce(a.data(), ra.data(), count, ncclFloat32, ncclSum, c, nullptr) == ncclInProgress);
            int k = 0;
            CHECK(ncclCommCount(c, &k) == ncclInvalidArgument);  // used before it returned to ncclSuccess
        }
        MPI_Barrier(MPI_COMM_WORLD);
        if (me != 0) {
            const ncclResult_t r = ncclAllReduce(a.data(), ra.data(), count, ncclFloat32, ncclSum, c, nullptr);
            CHECK((r == ncclInProgress || r == ncclSuccess));
        }
    } else {
        const ncclResult_t r = ncclAllReduce(a.data(), ra.data(), count, ncclFloat32, ncclSum, c, nullptr);
        CHECK((r == ncclInProgress || r == ncclSuccess));
    }
    CHECK(wait_ready(c) == ncclSuccess);
    check_sum();

    std::vector<int32_t> g(count), rg(count * size_t(n));
    for (size_t i = 0; i < count; ++i) g[i] = input<i32>(me, i, 1501);
    std::fill(ra.begin(), ra.end(), 0.f);
    CHECK(ncclGroupStart() == ncclSuccess);
    CHECK(ncclAllReduce(a.data(), ra.data(), count, ncclFloat32, ncclSum, c, nullptr) == ncclSuccess);
    CHECK(ncclAllGather(g.data(), rg.data(), count, ncclInt32, c, nullptr) == ncclSuccess);
    const ncclResult_t end = ncclGroupEnd();
    CHECK((end == ncclInProgress || end == ncclSuccess));
    CHECK(wait_ready(c) == ncclSuccess);
    check_sum();
    CHECK(first_bad(rg.data(), rg.size(), [&](size_t k) { return input<i32>(int(k / count), k % count, 1501); }) ==
          none);

    // Split: NCCL returns ncclSuccess, the parent shows ncclInProgress and the child appears when done.
    ncclComm_t child = nullptr;
    CHECK(ncclCommSplit(c, 0, -me, &child, nullptr) == ncclSuccess);
    CHECK(wait_ready(c) == ncclSuccess);
    REQUIRE(child != nullptr);
    CHECK(count_of(child) == n);
    CHECK(rank_of(child) == n - 1 - me);
    const ncclResult_t r = ncclAllReduce(a.data(), ra.data(), count, ncclFloat32, ncclSum, child, nullptr);
    CHECK((r == ncclInProgress || r == ncclSuccess));
    CHECK(wait_ready(child) == ncclSuccess);
    // The child's ranks are reversed: its sum runs over the world ranks n-1, ..., 0.
    CHECK(first_bad(ra.data(), count, [&](size_t i) {
              return fold<f32>(
                  ncclSum, n, [&](int q) { return input<f32>(n - 1 - q, i, 1500); }, nullptr);
          }) == none);

    for (ncclComm_t x : {child, c}) {
        const ncclResult_t f = ncclCommFinalize(x);
        CHECK((f == ncclInProgress || f == ncclSuccess));
        CHECK(wait_ready(x) == ncclSuccess);
        CHECK(ncclCommDestroy(x) == ncclSuccess);
    }

    // Creating a blocking and a non-blocking communicator in one group is refused (nothing is created).
    ncclUniqueId id;
    REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
    ncclComm_t b1 = nullptr, b2 = nullptr;
    CHECK(ncclGroupStart() == ncclSuccess);
    CHECK(ncclCommInitRank(&b1, 2, id, 0) == ncclSuccess);
    CHECK(ncclCommInitRankConfig(&b2, 2, id, 1, &config) == ncclInvalidArgument);
    CHECK(ncclGroupEnd() == ncclInvalidArgument);
    CHECK(ncclCommAbort(b1) == ncclSuccess);
}

TEST_CASE("two threads on two communicators at once") {
    ncclComm_t w = world();
    const int n = count_of(w), me = rank_of(w);
    ncclComm_t c1 = nullptr, c2 = nullptr;
    CHECK(ncclCommSplit(w, 0, me, &c1, nullptr) == ncclSuccess);
    CHECK(ncclCommSplit(w, 0, me, &c2, nullptr) == ncclSuccess);
    REQUIRE(c1 != nullptr);
    REQUIRE(c2 != nullptr);
    std::atomic<int> bad1{0}, bad2{0}, calls{0};
    std::thread t1([&] {
        for (int k = 0; k < 30; ++k) {
            const size_t count = 100 + size_t(k) * 37;
            std::vector<float> a(count), r(count);
            for (size_t i = 0; i < count; ++i) a[i] = input<f32>(me, i, 1600 + uint64_t(k));
            if (ncclAllReduce(a.data(), r.data(), count, ncclFloat32, ncclSum, c1, nullptr) != ncclSuccess) ++bad1;
            ++calls;
            if (first_bad(r.data(), count, [&](size_t i) {
                    return fold<f32>(
                        ncclSum, n, [&](int q) { return input<f32>(q, i, 1600 + uint64_t(k)); }, nullptr);
                }) != none)
                ++bad1;
        }
    });
    std::thread t2([&] {
        for (int k = 0; k < 30; ++k) {
            const size_t count = 50 + size_t(k) * 11;
            std::vector<int64_t> a(count), r(count * size_t(n));
            for (size_t i = 0; i < count; ++i) a[i] = input<i64>(me, i, 1700 + uint64_t(k));
            if (ncclAllGather(a.data(), r.data(), count, ncclInt64, c2, nullptr) != ncclSuccess) ++bad2;
            ++calls;
            if (first_bad(r.data(), r.size(),
                          [&](size_t i) { return input<i64>(int(i / count), i % count, 1700 + uint64_t(k)); }) != none)
                ++bad2;
        }
    });
    t1.join();
    t2.join();
    CHECK(calls.load() == 60);
    CHECK(bad1.load() == 0);
    CHECK(bad2.load() == 0);
    CHECK(ncclCommDestroy(c1) == ncclSuccess);
    CHECK(ncclCommDestroy(c2) == ncclSuccess);
}

TEST_CASE("ncclCommInitAll: one thread drives three communicators of one process through groups") {
    constexpr int k = 3;
    ncclComm_t cs[k] = {};
    const int devs[k] = {2, 0, 1};
    REQUIRE(ncclCommInitAll(cs, k, devs) == ncclSuccess);
    for (int i = 0; i < k; ++i) {
        CHECK(count_of(cs[i]) == k);
        CHECK(rank_of(cs[i]) == i);
        int dev = -1;
        CHECK(ncclCommCuDevice(cs[i], &dev) == ncclSuccess);
        CHECK(dev == devs[i]);
    }
    const uint64_t salt = 1800 + uint64_t(world_rank());  // each process's clique is its own
    const size_t count = 1001;
    std::vector<std::vector<double>> a(k, std::vector<double>(count)), r = a;
    for (int i = 0; i < k; ++i)
        for (size_t j = 0; j < count; ++j) a[i][j] = input<f64>(i, j, salt);
    CHECK(ncclGroupStart() == ncclSuccess);
    for (int i = 0; i < k; ++i)
        CHECK(ncclAllReduce(a[i].data(), r[i].data(), count, ncclFloat64, ncclSum, cs[i], nullptr) == ncclSuccess);
    CHECK(ncclGroupEnd() == ncclSuccess);
    for (int i = 0; i < k; ++i)
        CHECK(first_bad(r[i].data(), count, [&](size_t j) {
                  return fold<f64>(
                      ncclSum, k, [&](int q) { return input<f64>(q, j, salt); }, nullptr);
              }) == none);
    CHECK(ncclGroupStart() == ncclSuccess);
    for (int i = 0; i < k; ++i) {
        CHECK(ncclSend(a[i].data(), count, ncclFloat64, (i + 1) % k, cs[i], nullptr) == ncclSuccess);
        CHECK(ncclRecv(r[i].data(), count, ncclFloat64, (i + k - 1) % k, cs[i], nullptr) == ncclSuccess);
    }
    CHECK(ncclGroupEnd() == ncclSuccess);
    for (int i = 0; i < k; ++i)
        CHECK(first_bad(r[i].data(), count, [&](size_t j) { return input<f64>((i + k - 1) % k, j, salt); }) == none);
    // Splits of the three in one group: 0 and 1 together, 2 left out.
    ncclComm_t sub[k] = {};
    CHECK(ncclGroupStart() == ncclSuccess);
    for (int i = 0; i < k; ++i)
        CHECK(ncclCommSplit(cs[i], i == 2 ? NCCL_SPLIT_NOCOLOR : 0, i, &sub[i], nullptr) == ncclSuccess);
    CHECK(ncclGroupEnd() == ncclSuccess);
    CHECK(sub[2] == nullptr);
    REQUIRE(sub[0] != nullptr);
    REQUIRE(sub[1] != nullptr);
    CHECK(ncclGroupStart() == ncclSuccess);
    for (int i = 0; i < 2; ++i)
        CHECK(ncclAllReduce(a[i].data(), r[i].data(), count, ncclFloat64, ncclMin, sub[i], nullptr) == ncclSuccess);
    CHECK(ncclGroupEnd() == ncclSuccess);
    for (int i = 0; i < 2; ++i)
        CHECK(first_bad(r[i].data(), count, [&](size_t j) {
                  return fold<f64>(
                      ncclMin, 2, [&](int q) { return input<f64>(q, j, salt); }, nullptr);
              }) == none);
    for (int i = 0; i < 2; ++i) CHECK(ncclCommDestroy(sub[i]) == ncclSuccess);
    for (int i = 0; i < k; ++i) CHECK(ncclCommDestroy(cs[i]) == ncclSuccess);
    ncclComm_t one = nullptr;
    REQUIRE(ncclCommInitAll(&one, 1, nullptr) == ncclSuccess);
    check_allreduce<bf16_type>(one, ncclProd, 100, true, salt);
    CHECK(ncclCommDestroy(one) == ncclSuccess);
}

TEST_CASE("failures: timeouts, mismatched calls, lost peers and abort end calls with errors") {
    using clock = std::chrono::steady_clock;
    auto seconds = [](clock::time_point t) { return std::chrono::duration<double>(clock::now() - t).count(); };
    const char* saved = getenv("NCCL_DOUBLE_TIMEOUT");
    const std::string saved_value = saved != nullptr ? saved : "";
    setenv("NCCL_DOUBLE_TIMEOUT", "1", 1);  // read when a communicator is created
    ncclComm_t cs[2] = {};
    REQUIRE(ncclCommInitAll(cs, 2, nullptr) == ncclSuccess);
    if (saved != nullptr)
        setenv("NCCL_DOUBLE_TIMEOUT", saved_value.c_str(), 1);
    else
        unsetenv("NCCL_DOUBLE_TIMEOUT");
    float x[4] = {};
    {  // a receive nobody answers
        const auto t = clock::now();
        CHECK(ncclRecv(x, 4, ncclFloat32, 1, cs[0], nullptr) == ncclSystemError);
        CHECK(seconds(t) < 20);
        CHECK(std::string(ncclGetLastError(nullptr)).find("timed out") != std::string::npos);
        ncclResult_t s = ncclSuccess;
        CHECK(ncclCommGetAsyncError(cs[0], &s) == ncclSuccess);
        CHECK(s == ncclSystemError);
        CHECK(ncclCommDestroy(cs[0]) == ncclSystemError);  // NCCL keeps a failed communicator: abort it
        CHECK(ncclCommAbort(cs[0]) == ncclSuccess);
    }
    {  // the peer is gone: the wait ends at once with ncclRemoteError
        const auto t = clock::now();
        CHECK(ncclRecv(x, 4, ncclFloat32, 0, cs[1], nullptr) == ncclRemoteError);
        CHECK(seconds(t) < 0.9);
        CHECK(ncclCommAbort(cs[1]) == ncclSuccess);
    }
    REQUIRE(ncclCommInitAll(cs, 2, nullptr) == ncclSuccess);
    {  // sizes that do not match
        std::vector<float> s(10, 1.f), r(5);
        CHECK(ncclGroupStart() == ncclSuccess);
        CHECK(ncclSend(s.data(), 10, ncclFloat32, 1, cs[0], nullptr) == ncclSuccess);
        CHECK(ncclRecv(r.data(), 5, ncclFloat32, 0, cs[1], nullptr) == ncclSuccess);
        CHECK(ncclGroupEnd() == ncclInvalidUsage);
    }
    for (ncclComm_t c : cs) CHECK(ncclCommAbort(c) == ncclSuccess);
    REQUIRE(ncclCommInitAll(cs, 2, nullptr) == ncclSuccess);
    {  // abort from another thread ends a blocked call long before any timeout
        ncclResult_t got = ncclSuccess;
        double took = 0;
        std::atomic<bool> calling{false};
        std::thread t([&] {
            const auto start = clock::now();
            calling = true;
            got = ncclRecv(x, 4, ncclFloat32, 1, cs[0], nullptr);
            took = seconds(start);
        });
        while (!calling.load()) std::this_thread::yield();
        std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the call is waiting by now
        CHECK(ncclCommAbort(cs[0]) == ncclSuccess);
        t.join();
        CHECK(got == ncclSystemError);
        CHECK(took < 5);
        CHECK(ncclCommAbort(cs[1]) == ncclSuccess);
    }
    ncclComm_t one = nullptr;
    REQUIRE(ncclCommInitAll(&one, 1, nullptr) == ncclSuccess);
    {  // a send to oneself needs its receive in the same group
        CHECK(ncclGroupStart() == ncclSuccess);
        CHECK(ncclSend(x, 4, ncclFloat32, 0, one, nullptr) == ncclSuccess);
        CHECK(ncclGroupEnd() == ncclInvalidUsage);
        CHECK(ncclCommAbort(one) == ncclSuccess);
    }
}

TEST_CASE("NCCL_SOCKET_IFNAME picks the address communicators listen on") {
    const char* saved = getenv("NCCL_SOCKET_IFNAME");
    const std::string saved_value = saved != nullptr ? saved : "";
    setenv("NCCL_SOCKET_IFNAME", "=lo", 1);  // loopback by its exact name
    ncclComm_t cs[2] = {};
    REQUIRE(ncclCommInitAll(cs, 2, nullptr) == ncclSuccess);
    std::vector<int32_t> a = {1, 2}, b = {3, 4}, ra(2), rb(2);
    CHECK(ncclGroupStart() == ncclSuccess);
    CHECK(ncclAllReduce(a.data(), ra.data(), 2, ncclInt32, ncclSum, cs[0], nullptr) == ncclSuccess);
    CHECK(ncclAllReduce(b.data(), rb.data(), 2, ncclInt32, ncclSum, cs[1], nullptr) == ncclSuccess);
    CHECK(ncclGroupEnd() == ncclSuccess);
    CHECK(ra == std::vector<int32_t>{4, 6});
    CHECK(rb == ra);
    for (ncclComm_t c : cs) CHECK(ncclCommDestroy(c) == ncclSuccess);
    setenv("NCCL_SOCKET_IFNAME", "no_such_interface", 1);
    ncclUniqueId id;
    CHECK(ncclGetUniqueId(&id) == ncclSystemError);
    CHECK(std::string(ncclGetLastError(nullptr)).find("no_such_interface") != std::string::npos);
    if (saved != nullptr)
        setenv("NCCL_SOCKET_IFNAME", saved_value.c_str(), 1);
    else
        unsetenv("NCCL_SOCKET_IFNAME");
}

TEST_CASE("finalize and destroy the world communicator") {
    ncclComm_t c = world();
    check_allreduce<f32>(c, ncclSum, 3, false, 1900);
    CHECK(ncclCommFinalize(c) == ncclSuccess);
    float x = 0;
    CHECK(ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, c, nullptr) == ncclInvalidUsage);
    CHECK(ncclCommFinalize(c) == ncclInvalidArgument);
    CHECK(ncclCommDestroy(c) == ncclSuccess);
    world_comm = nullptr;
}
