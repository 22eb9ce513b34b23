// tests/gpu/gpu_pack.cpp: the CUDA pack, unpack, fused-pack and fused-unpack kernels (each kernel shape) on device
// memory against the host packer, byte for byte, over the random datatype pool and bench-gpu-pack's small-block
// objects. Exits 77 (skipped) without a device.
//
// usage: gpu_pack [N] [--seed S] [--only I] [--objects BYTES]
//   N random types (default 10000); BYTES of payload in each of bench-gpu-pack's small-block objects
//   (default 2 MiB, at most that; 0: none)
#include "../../bench/gpu/shapes.hpp"
#include "../mpi/probe.hpp"
#include "../mpi/random_types.hpp"

#include <shunt/datatype/decode.hpp>
#include <shunt/datatype/layout.hpp>
#include <shunt/gpu/descriptor.hpp>
#include <shunt/gpu/pack.hpp>
#include <shunt/pack/host.hpp>

#include <cuda_runtime.h>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using shunt_test::rng;
using shunt_test::typed_buffer;

constexpr std::int64_t max_span = 16 << 20;
constexpr std::int64_t guard = 64;
constexpr unsigned char sentinel = 0xc3;
/// The kernel shapes checked besides the automatic choice.
constexpr shunt::gpu::detail::kernel_shape shapes[] = {
    shunt::gpu::detail::kernel_shape::legacy, shunt::gpu::detail::kernel_shape::fast16,
    shunt::gpu::detail::kernel_shape::fast32, shunt::gpu::detail::kernel_shape::fast64,
    shunt::gpu::detail::kernel_shape::staged};

void need(cudaError_t rc, const char* call) {
    if (rc != cudaSuccess) {
        std::printf("FAIL: %s: %s\n", call, cudaGetErrorString(rc));
        std::exit(1);
    }
}

/// Device memory reused by every case: the typed buffer and two packed outputs.
struct arena {
    std::byte* typed = nullptr;
    unsigned char* out = nullptr;
    unsigned char* out2 = nullptr;
    static constexpr std::int64_t typed_bytes = max_span + 2 * guard + 256;
    static constexpr std::int64_t out_bytes = (8 << 20) + 256;
    arena() {
        need(cudaMalloc(&typed, typed_bytes), "cudaMalloc");
        need(cudaMalloc(&out, out_bytes), "cudaMalloc");
        need(cudaMalloc(&out2, out_bytes), "cudaMalloc");
    }
    ~arena() {
        cudaFree(typed);
        cudaFree(out);
        cudaFree(out2);
    }
};

struct stats {
    std::int64_t types = 0, unsupported = 0, bottom = 0, cases = 0, skipped = 0, windows = 0, unpacks = 0, fused = 0;
    std::int64_t fused_unpacks = 0, failed_types = 0;
};

class type_check {
public:
    type_check(const shunt_test::random_type& t, std::uint64_t seed, stats& st, arena& a, cudaStream_t s)
        : t_(t), r_(seed ^ 0xd0ULL), st_(st), a_(a), s_(s) {}

    std::vector<std::string> run() {
        if (t_.bottom) {  // absolute host addresses: not device memory
            ++st_.bottom;
            return failures_;
        }
        try {
            info_ = shunt::decode(t_.type);
        } catch (const shunt::unsupported&) {
            ++st_.unsupported;
            return failures_;
        }
        for (std::int64_t c : {std::int64_t{1}, r_.range(2, 4)})
            if (c <= t_.max_count) check_count(c);
        return failures_;
    }

private:
    void fail(std::string what) {
        if (failures_.size() < 8) failures_.push_back(std::move(what));
    }
    void sync() { need(cudaStreamSynchronize(s_), "cudaStreamSynchronize"); }
    // Copies to the device and fills go on the test's stream, ahead of the kernels they feed:
    // the stream is non-blocking, so nothing orders a cudaMemcpy or cudaMemset (legacy stream)
    // before its kernels, and a cudaMemcpy from pageable memory may return before its DMA lands
    // (one device unpack in 18,746 cases once compared against bytes the copy wrote after it).
    void put(void* dev, const void* src, std::int64_t n) {
        need(cudaMemcpyAsync(dev, src, static_cast<std::size_t>(n), cudaMemcpyHostToDevice, s_), "cudaMemcpyAsync");
        sync();
    }
    void set(void* dev, int value, std::size_t n) { need(cudaMemsetAsync(dev, value, n, s_), "cudaMemsetAsync"); }
    std::vector<unsigned char> read(const unsigned char* dev, std::int64_t n) {
        std::vector<unsigned char> v(static_cast<std::size_t>(n));
        need(cudaMemcpy(v.data(), dev, v.size(), cudaMemcpyDeviceToHost), "cudaMemcpy");
        return v;
    }

    void check_count(std::int64_t count) {
        const std::int64_t extent = info_.extent, total = info_.size * count;
        std::int64_t lo = 0, hi = 0;
        if (total > 0) {
            lo = std::min(info_.true_lb, info_.true_lb + (count - 1) * extent);
            hi = std::max(info_.true_lb + info_.true_extent, info_.true_lb + (count - 1) * extent + info_.true_extent);
        }
        if (hi - lo > max_span || total + 32 > arena::out_bytes / 2) {
            ++st_.skipped;
            return;
        }
        ++st_.cases;
        const std::string at = " (count " + std::to_string(count) + ")";
        // Host copy and device copy of the same typed bytes, origins at the same offset from
        // their memory (shifted at random so that every alignment occurs).
        const std::int64_t shift = r_.range(0, 16);
        typed_buffer host(lo, hi, guard);
        host.fill(r_.next());
        const std::int64_t bytes = host.bytes();
        std::byte* dev_mem = a_.typed + shift;
        put(dev_mem, host.data(), bytes);
        const std::uintptr_t dev_origin =
            reinterpret_cast<std::uintptr_t>(dev_mem) + static_cast<std::uintptr_t>(host.index_of(0));
        const void* origin = reinterpret_cast<const void*>(dev_origin);

        const shunt::gpu::flat_form f(info_.form, extent, count);
        const shunt::gpu::device_form df(f);
        std::vector<unsigned char> ref(static_cast<std::size_t>(total) + 16, sentinel);
        shunt::pack_host(info_.form, extent, count, host.origin(), ref.data());

        // Whole pack, output at a random alignment, sentinels after it.
        const std::int64_t oshift = r_.range(0, 16);
        unsigned char* out = a_.out + oshift;
        set(out, sentinel, static_cast<std::size_t>(total) + 16);
        const std::int64_t wrote = shunt::gpu::pack(df, origin, out, s_, 0, total + r_.range(0, 9));
        sync();
        if (wrote != total || read(out, total + 16) != ref) fail("device pack differs from pack_host" + at);
        // Every kernel shape, whole stream (automatic above is one of them).
        for (const auto k : shapes) {
            set(out, sentinel, static_cast<std::size_t>(total) + 16);
            const std::int64_t n = shunt::gpu::detail::pack_as(k, df, origin, out, s_);
            sync();
            if (n != total || read(out, total + 16) != ref)
                fail("device pack with kernel shape " + std::to_string(static_cast<int>(k)) + " differs" + at);
        }

        // Windows.
        for (int w = 0; w < 3; ++w) {
            ++st_.windows;
            const std::int64_t first = r_.range(0, total), len = r_.range(0, total - first + 4);
            std::vector<unsigned char> want(static_cast<std::size_t>(total) + 16, sentinel);
            const std::int64_t n_want =
                shunt::pack_host(info_.form, extent, count, host.origin(), want.data(), first, len);
            set(out, sentinel, static_cast<std::size_t>(total) + 16);
            const std::int64_t n = shunt::gpu::pack(df, origin, out, s_, first, len);
            sync();
            if (n != n_want || read(out, total + 16) != want)
                fail("device pack window [" + std::to_string(first) + ",+" + std::to_string(len) + ") differs" + at);
        }

        // Fused: whole stream and the first element back to back in one output, whole stream
        // again into a second output.
        if (total > 0) {
            ++st_.fused;
            const shunt::gpu::flat_form f1(info_.form, extent, 1);
            const shunt::gpu::device_form df1(f1);
            const std::int64_t size1 = info_.size;
            std::vector<unsigned char> want(static_cast<std::size_t>(total + size1) + 8, sentinel);
            shunt::pack_host(info_.form, extent, count, host.origin(), want.data());
            shunt::pack_host(info_.form, extent, 1, host.origin(), want.data() + total);
            set(a_.out, sentinel, want.size());
            set(a_.out2, sentinel, static_cast<std::size_t>(total) + 16);
            const shunt::gpu::device_input in[3] = {
                {&df, origin, a_.out}, {&df1, origin, a_.out + total}, {&df, origin, a_.out2 + 3}};
            shunt::gpu::pack_fused(in, s_);
            sync();
            auto second = read(a_.out2, total + 16);
            if (read(a_.out, static_cast<std::int64_t>(want.size())) != want ||
                std::memcmp(second.data() + 3, ref.data(), static_cast<std::size_t>(total)) != 0 ||
                second[0] != sentinel || second[static_cast<std::size_t>(total) + 3] != sentinel)
                fail("fused pack differs from pack_host" + at);
            // Now and then more items than travel in the kernel's parameters: the copied table.
            const std::int64_t many = 30;
            if (r_.chance(10) && many * total <= arena::out_bytes) {
                std::vector<shunt::gpu::device_input> lots;
                for (std::int64_t i = 0; i < many; ++i) lots.push_back({&df, origin, a_.out2 + i * total});
                shunt::gpu::pack_fused(lots, s_);
                sync();
                const auto all = read(a_.out2, many * total);
                for (std::int64_t i = 0; i < many; ++i)
                    if (std::memcmp(all.data() + i * total, ref.data(), static_cast<std::size_t>(total)) != 0) {
                        fail("fused pack of " + std::to_string(many) + " items differs at item " + std::to_string(i) +
                             at);
                        break;
                    }
            }
        }

        // Unpack, whole and windows, into the device copy; the whole buffer must match.
        if (!shunt_test::distinct(shunt_test::layout_positions(info_.form, extent, count))) return;
        ++st_.unpacks;
        put(out, ref.data(), total);
        for (int w = 0; w < 2; ++w) {
            const std::int64_t first = w == 0 ? 0 : r_.range(0, total);
            const std::int64_t len = w == 0 ? total : r_.range(0, total - first + 4);
            const std::uint64_t before = r_.next();
            host.fill(before);
            put(dev_mem, host.data(), bytes);
            const std::int64_t n_want =
                shunt::unpack_host(info_.form, extent, count, ref.data() + first, host.origin(), first, len);
            const std::int64_t n = shunt::gpu::unpack(df, out + first, const_cast<void*>(origin), s_, first, len);
            sync();
            std::vector<std::byte> got(static_cast<std::size_t>(bytes));
            need(cudaMemcpy(got.data(), dev_mem, got.size(), cudaMemcpyDeviceToHost), "cudaMemcpy");
            if (n != n_want || got != host.snapshot())
                fail("device unpack [" + std::to_string(first) + ",+" + std::to_string(len) + ") differs" + at);
        }
        // Every kernel shape, whole stream, into a fresh fill of the device copy.
        for (const auto k : shapes) {
            host.fill(r_.next());
            put(dev_mem, host.data(), bytes);
            shunt::unpack_host(info_.form, extent, count, ref.data(), host.origin());
            const std::int64_t n = shunt::gpu::detail::unpack_as(k, df, out, const_cast<void*>(origin), s_);
            sync();
            std::vector<std::byte> got(static_cast<std::size_t>(bytes));
            need(cudaMemcpy(got.data(), dev_mem, got.size(), cudaMemcpyDeviceToHost), "cudaMemcpy");
            if (n != total || got != host.snapshot())
                fail("device unpack with kernel shape " + std::to_string(static_cast<int>(k)) + " differs" + at);
        }
        // Fused unpack (the launch several items share is the fused pack's, tested above; the
        // emulation in tests/mpi/test_gpu_index.cpp checks several items against the host).
        if (total > 0) {
            ++st_.fused_unpacks;
            const std::uint64_t before = r_.next();
            host.fill(before);
            put(dev_mem, host.data(), bytes);
            shunt::unpack_host(info_.form, extent, count, ref.data(), host.origin());
            const shunt::gpu::device_output items[1] = {{&df, out, const_cast<void*>(origin)}};
            shunt::gpu::unpack_fused(items, s_);
            sync();
            std::vector<std::byte> got(static_cast<std::size_t>(bytes));
            need(cudaMemcpy(got.data(), dev_mem, got.size(), cudaMemcpyDeviceToHost), "cudaMemcpy");
            if (got != host.snapshot()) fail("fused unpack differs from unpack_host" + at);
        }
    }

    const shunt_test::random_type& t_;
    rng r_;
    stats& st_;
    arena& a_;
    cudaStream_t s_;
    shunt::type_info info_;
    std::vector<std::string> failures_;
};

/// bench-gpu-pack's small-block objects (2-D rows of B bytes 2B apart; 3-D planes of 16 such rows
/// a plane apart), `payload` bytes each (the default 2 MiB: many tiles of the staged kernels),
/// packed and unpacked by every kernel shape on the device against the host packer. Returns the
/// number of failures, each printed.
std::int64_t check_bench_shapes(arena& a, cudaStream_t s, std::int64_t payload) {
    std::int64_t failures = 0;
    rng r(0xbe9c);
    for (const std::int64_t block : {1, 2, 4})
        for (const bool planes : {false, true}) {
            const shunt::bench::shape sh = shunt::bench::make_shape(planes ? "3d" : "2d", block, payload);
            const shunt::layout l = sh.form();
            const std::int64_t span = sh.span(), total = sh.payload();
            const std::string at = sh.family + "/b" + std::to_string(block);
            std::vector<std::byte> typed(static_cast<std::size_t>(span)), back(typed.size());
            for (auto& b : typed) b = static_cast<std::byte>(r.next());
            std::vector<unsigned char> ref(static_cast<std::size_t>(total)), got(ref.size());
            shunt::pack_host(l, span, 1, typed.data(), ref.data());
            std::vector<std::byte> expect = typed;  // unpack of the packed stream, gaps kept
            std::vector<unsigned char> other(ref.size());
            for (auto& b : other) b = static_cast<unsigned char>(r.next());
            shunt::unpack_host(l, span, 1, other.data(), expect.data());
            const shunt::gpu::flat_form f(l, span, 1);
            const shunt::gpu::device_form df(f);
            auto report = [&](const char* what, shunt::gpu::detail::kernel_shape k) {
                ++failures;
                std::printf("FAIL %s with kernel shape %d differs from the host packer (%s)\n", what,
                            static_cast<int>(k), at.c_str());
            };
            for (const auto k : shapes) {
                need(cudaMemcpyAsync(a.typed, typed.data(), typed.size(), cudaMemcpyHostToDevice, s),
                     "cudaMemcpyAsync");
                need(cudaMemsetAsync(a.out, 0, got.size(), s), "cudaMemsetAsync");
                shunt::gpu::detail::pack_as(k, df, a.typed, a.out, reinterpret_cast<shunt::gpu::stream_t>(s));
                need(cudaMemcpyAsync(got.data(), a.out, got.size(), cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync");
                need(cudaStreamSynchronize(s), "cudaStreamSynchronize");
                if (got != ref) report("pack", k);
                need(cudaMemcpyAsync(a.out2, other.data(), other.size(), cudaMemcpyHostToDevice, s), "cudaMemcpyAsync");
                shunt::gpu::detail::unpack_as(k, df, a.out2, a.typed, reinterpret_cast<shunt::gpu::stream_t>(s));
                need(cudaMemcpyAsync(back.data(), a.typed, back.size(), cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync");
                need(cudaStreamSynchronize(s), "cudaStreamSynchronize");
                if (back != expect) report("unpack", k);
            }
        }
    return failures;
}

}  // namespace

int main(int argc, char** argv) {
    if (!shunt::gpu::device_available()) {
        std::printf("no CUDA device: skipped\n");
        return 77;
    }
    MPI_Init(&argc, &argv);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    std::int64_t types = 10000, only = -1, objects = std::int64_t{2} << 20;
    std::uint64_t seed = 20261122;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--seed" && i + 1 < argc)
            seed = std::strtoull(argv[++i], nullptr, 0);
        else if (a == "--objects" && i + 1 < argc)
            objects = std::clamp<std::int64_t>(std::strtoll(argv[++i], nullptr, 0), 0, std::int64_t{2} << 20);
        else if (a == "--only" && i + 1 < argc)
            only = std::strtoll(argv[++i], nullptr, 0);
        else if (!a.empty() && a[0] != '-' && std::strtoll(a.c_str(), nullptr, 0) > 0)
            types = std::strtoll(a.c_str(), nullptr, 0);
        else {
            std::fprintf(stderr, "usage: %s [N] [--seed S] [--only I] [--objects BYTES]\n", argv[0]);
            MPI_Finalize();
            return 2;
        }
    }
    cudaDeviceProp prop{};
    need(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    cudaStream_t s = nullptr;
    need(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    stats st;
    std::int64_t shape_failures = 0;
    {
        arena a;
        if (objects > 0) shape_failures = check_bench_shapes(a, s, objects);
        shunt_test::type_generator gen(0, 1);
        const std::int64_t begin = only >= 0 ? only : 0, end = only >= 0 ? only + 1 : types;
        for (std::int64_t i = begin; i < end; ++i) {
            const std::uint64_t item = shunt_test::item_seed(seed, 0, static_cast<std::uint64_t>(i));
            const shunt_test::random_type t = gen.make(item);
            ++st.types;
            type_check check(t, item, st, a, s);
            std::vector<std::string> failures;
            try {
                failures = check.run();
            } catch (const shunt::error& e) {
                failures.push_back(std::string("threw: ") + e.what());
            }
            if (!failures.empty()) {
                ++st.failed_types;
                std::printf("FAIL type %lld: %s\n", static_cast<long long>(i), t.desc.c_str());
                for (const auto& f : failures) std::printf("  %s\n", f.c_str());
                std::printf("  reproduce: %s --seed %llu --only %lld\n", argv[0], static_cast<unsigned long long>(seed),
                            static_cast<long long>(i));
            }
        }
    }
    cudaStreamDestroy(s);
    std::printf(
        "gpu_pack on %s, seed %llu: %lld types (%lld MPI_BOTTOM, %lld left to the library), %lld cases "
        "(%lld skipped), %lld windows, %lld fused launches, %lld unpacks, %lld fused unpacks: %lld failed; "
        "bench-gpu-pack's small-block objects: %lld failed\n",
        prop.name, static_cast<unsigned long long>(seed), static_cast<long long>(st.types),
        static_cast<long long>(st.bottom), static_cast<long long>(st.unsupported), static_cast<long long>(st.cases),
        static_cast<long long>(st.skipped), static_cast<long long>(st.windows), static_cast<long long>(st.fused),
        static_cast<long long>(st.unpacks), static_cast<long long>(st.fused_unpacks),
        static_cast<long long>(st.failed_types), static_cast<long long>(shape_failures));
    MPI_Finalize();
    return st.failed_types == 0 && shape_failures == 0 ? 0 : 1;
}
