// tests/gpu/gpu_compress.cpp: the CUDA compressors against the host ones: the compressed bytes, the
// decompressed and accumulated floats and the sums of summable forms bit for bit (NaN payloads
// aside), error feedback step by step; then each kernel's throughput against the device's copy of
// the same bytes (goal: half of it; reported, not failed). Exits 77 (skipped) without a device.
//
// usage: gpu_compress [--no-timing] [--elements N]   (N for the timing, default 2^26)
#include <shunt/compress/combine.hpp>
#include <shunt/compress/compress.hpp>
#include <shunt/compress/error_feedback.hpp>
#include <shunt/compress/gpu.hpp>
#include <shunt/gpu/pack.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace {

namespace sc = shunt::compress;

int failures = 0;

void expect(bool ok, const std::string& what) {
    if (!ok) {
        std::printf("FAIL: %s\n", what.c_str());
        ++failures;
    }
}

void need(cudaError_t rc, const char* call) {
    if (rc != cudaSuccess) {
        std::printf("FAIL: %s: %s\n", call, cudaGetErrorString(rc));
        std::exit(1);
    }
}

/// Device memory freed on scope exit.
struct device_buffer {
    void* p = nullptr;
    explicit device_buffer(std::size_t bytes) { need(cudaMalloc(&p, std::max<std::size_t>(bytes, 256)), "cudaMalloc"); }
    ~device_buffer() { cudaFree(p); }
    device_buffer(const device_buffer&) = delete;
    device_buffer& operator=(const device_buffer&) = delete;
    template <class T>
    T* as(std::size_t byte_offset = 0) const {
        return reinterpret_cast<T*>(static_cast<std::byte*>(p) + byte_offset);
    }
};

/// The same bits, or both NaN: a device's arithmetic on a NaN gives the canonical NaN where the
/// host's keeps the operand's payload.
bool same_floats(const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i) {
        std::uint32_t x, y;
        std::memcpy(&x, &a[i], 4);
        std::memcpy(&y, &b[i], 4);
        if (x != y && !(std::isnan(a[i]) && std::isnan(b[i]))) return false;
    }
    return true;
}

template <class T>
std::vector<T> download(const void* d, std::size_t count) {
    std::vector<T> h(count);
    need(cudaMemcpy(h.data(), d, count * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy d2h");
    return h;
}

/// From pageable memory cudaMemcpy may return before its DMA lands, and nothing orders that DMA (on the legacy stream)
/// before kernels on the test's non-blocking stream: wait for it (the GPU once compressed stale input, 4 of 530 cases).
void upload(void* d, const void* h, std::size_t bytes) {
    need(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice), "cudaMemcpy h2d");
    need(cudaStreamSynchronize(cudaStreamLegacy), "cudaStreamSynchronize(legacy)");
}

/// Gradient-like values with a scale per 64 elements; `specials` puts NaN, Inf and subnormals in.
std::vector<float> gradients(std::int64_t n, std::uint64_t seed, bool specials) {
    std::mt19937_64 g(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> decade(-3.0f, 3.0f);
    std::vector<float> v(static_cast<std::size_t>(n));
    float scale = 1;
    for (std::int64_t i = 0; i < n; ++i) {
        if (i % 64 == 0) scale = std::pow(10.0f, decade(g));
        v[static_cast<std::size_t>(i)] = normal(g) * scale;
    }
    if (specials && n > 1000) {
        v[17] = std::numeric_limits<float>::quiet_NaN();
        v[300] = -std::numeric_limits<float>::infinity();
        v[301] = 1e30f;  // beyond binary16
        for (int i = 512; i < 560; ++i)
            v[static_cast<std::size_t>(i)] = std::numeric_limits<float>::denorm_min() * static_cast<float>(i);
        v[700] = -0.0f;
    }
    return v;
}

std::string name(const sc::params& p, std::int64_t n, const char* what) {
    return std::string(sc::to_string(p.kind)) + " n=" + std::to_string(n) + " block=" + std::to_string(p.block) +
           " stride=" + std::to_string(p.stride) + (p.round == sc::rounding::stochastic ? " stochastic" : "") + ": " +
           what;
}

/// One method and count: the device's compressed bytes, decompression and accumulation against
/// the host's. `offset` moves the device buffers off their alignment (the unvectorised paths).
void check_one(const sc::params& p, std::int64_t n, bool specials, std::size_t offset, cudaStream_t s) {
    const auto v = gradients(n, static_cast<std::uint64_t>(n) * 7 + static_cast<std::uint64_t>(p.kind), specials);
    const std::int64_t bytes = sc::compressed_bytes(p, n);
    std::vector<std::byte> want(static_cast<std::size_t>(bytes));
    sc::compress(p, v.data(), n, want.data(), 5);
    std::vector<float> want_dec(static_cast<std::size_t>(n)), want_acc(static_cast<std::size_t>(n), 0.75f);
    sc::decompress(p, want.data(), n, want_dec.data(), 5);
    sc::decompress_accumulate(p, want.data(), n, want_acc.data(), 5);

    device_buffer in(4 * static_cast<std::size_t>(n) + 64), out(static_cast<std::size_t>(bytes) + 64),
        dec(4 * static_cast<std::size_t>(n) + 64), ws(static_cast<std::size_t>(sc::gpu::workspace_bytes(p, n)));
    upload(in.as<std::byte>(offset), v.data(), 4 * static_cast<std::size_t>(n));
    // The casts' halves need 2-byte alignment; the other forms hold floats (4-byte aligned).
    const std::size_t out_offset = p.kind == sc::method::fp16 || p.kind == sc::method::bf16 ? offset / 2 : offset;
    sc::gpu::compress(p, in.as<float>(offset), n, out.as<std::byte>(out_offset), ws.p, s, 5);
    need(cudaStreamSynchronize(s), "compress");
    const auto got = download<std::byte>(out.as<std::byte>(out_offset), static_cast<std::size_t>(bytes));
    if (got != want) {
        std::size_t first = 0;
        while (first < got.size() && got[first] == want[first]) ++first;
        expect(false, name(p, n, "compressed bytes differ from the host's") + " (first at byte " +
                          std::to_string(first) + " of " + std::to_string(bytes) + ")");
        return;
    }
    sc::gpu::decompress(p, out.as<std::byte>(out_offset), n, dec.as<float>(offset), s, 5);
    need(cudaStreamSynchronize(s), "decompress");
    auto d = download<float>(dec.as<float>(offset), static_cast<std::size_t>(n));
    expect(same_floats(d, want_dec), name(p, n, "decompressed floats differ"));
    std::vector<float> acc(static_cast<std::size_t>(n), 0.75f);
    upload(dec.as<float>(offset), acc.data(), acc.size() * 4);
    sc::gpu::decompress_accumulate(p, out.as<std::byte>(out_offset), n, dec.as<float>(offset), s, 5);
    need(cudaStreamSynchronize(s), "decompress_accumulate");
    d = download<float>(dec.as<float>(offset), static_cast<std::size_t>(n));
    expect(same_floats(d, want_acc), name(p, n, "accumulated floats differ"));
}

/// Summable forms: the device's sum of two compressed vectors against the host's.
void check_combine(sc::sum_form f, std::int64_t count, cudaStream_t s) {
    const std::int64_t eb = sc::element_bytes(f);
    std::vector<std::byte> a(static_cast<std::size_t>(count * eb)), b(a.size());
    const auto va = gradients(count, 1, false), vb = gradients(count, 2, false);
    if (f == sc::sum_form::f32) {
        std::memcpy(a.data(), va.data(), a.size()), std::memcpy(b.data(), vb.data(), b.size());
    } else {
        auto* ha = reinterpret_cast<std::uint16_t*>(a.data());
        auto* hb = reinterpret_cast<std::uint16_t*>(b.data());
        (f == sc::sum_form::f16 ? sc::to_f16 : sc::to_bf16)(va.data(), count, ha, sc::active_isa());
        (f == sc::sum_form::f16 ? sc::to_f16 : sc::to_bf16)(vb.data(), count, hb, sc::active_isa());
    }
    device_buffer da(a.size()), db(b.size());
    upload(da.p, a.data(), a.size());
    upload(db.p, b.data(), b.size());
    sc::combine(f, a.data(), b.data(), count);
    sc::gpu::combine(f, da.p, db.p, count, s);
    need(cudaStreamSynchronize(s), "combine");
    expect(download<std::byte>(db.p, b.size()) == b, "combine of form " + std::to_string(static_cast<int>(f)) +
                                                         " differs from the host's (" + std::to_string(count) + ")");
}

/// Error feedback: apply, compress, decompress into the residual, update, for a few steps, against
/// the host's error_feedback.
void check_feedback(const sc::params& p, std::int64_t n, cudaStream_t s) {
    sc::error_feedback host;
    device_buffer in(4 * static_cast<std::size_t>(n)), residual(4 * static_cast<std::size_t>(n)),
        corrected(4 * static_cast<std::size_t>(n)), out(static_cast<std::size_t>(sc::compressed_bytes(p, n))),
        ws(static_cast<std::size_t>(sc::gpu::workspace_bytes(p, n)));
    need(cudaMemset(residual.p, 0, 4 * static_cast<std::size_t>(n)), "cudaMemset");
    need(cudaStreamSynchronize(cudaStreamLegacy), "cudaStreamSynchronize(legacy)");  // as upload
    std::vector<std::byte> want(static_cast<std::size_t>(sc::compressed_bytes(p, n)));
    for (std::uint64_t step = 0; step < 4; ++step) {
        const auto g = gradients(n, 100 + step, false);
        host.compress(p, g.data(), n, want.data(), step);
        upload(in.p, g.data(), g.size() * 4);
        sc::gpu::feedback_apply(in.as<float>(), residual.as<float>(), corrected.as<float>(), n, s);
        sc::gpu::compress(p, corrected.as<float>(), n, out.p, ws.p, s, step);
        sc::gpu::decompress(p, out.p, n, residual.as<float>(), s, step);
        sc::gpu::feedback_update(corrected.as<float>(), residual.as<float>(), residual.as<float>(), n, s);
        need(cudaStreamSynchronize(s), "feedback");
        expect(download<std::byte>(out.p, want.size()) == want, name(p, n, "error feedback: compressed bytes differ"));
        const auto r = download<float>(residual.p, static_cast<std::size_t>(n));
        expect(std::memcmp(r.data(), host.residual().data(), r.size() * 4) == 0,
               name(p, n, "error feedback: residuals differ"));
    }
}

/// Median of `reps` timed runs of f on stream s, in seconds (after one untimed run).
template <class F>
double time_on(cudaStream_t s, int reps, F&& f) {
    cudaEvent_t a, b;
    need(cudaEventCreate(&a), "cudaEventCreate");
    need(cudaEventCreate(&b), "cudaEventCreate");
    f();
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) {
        need(cudaEventRecord(a, s), "cudaEventRecord");
        f();
        need(cudaEventRecord(b, s), "cudaEventRecord");
        need(cudaEventSynchronize(b), "cudaEventSynchronize");
        float ms = 0;
        need(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
        t.push_back(ms * 1e-3);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

/// Each stage's throughput (the tensor's float bytes a second) against a device-to-device copy of
/// the same bytes: the goal is half of the copy's or more (a stage at most twice the copy's time).
void timing(std::int64_t n, cudaStream_t s) {
    const std::size_t fb = 4 * static_cast<std::size_t>(n);
    device_buffer in(fb), acc(fb), copy(fb), out(fb);
    const auto v = gradients(n, 3, false);
    upload(in.p, v.data(), fb);
    need(cudaMemset(acc.p, 0, fb), "cudaMemset");
    need(cudaStreamSynchronize(cudaStreamLegacy), "cudaStreamSynchronize(legacy)");  // as upload
    const double copy_s =
        time_on(s, 10, [&] { need(cudaMemcpyAsync(copy.p, in.p, fb, cudaMemcpyDeviceToDevice, s), "copy"); });
    cudaDeviceProp prop{};
    int dev = 0;
    need(cudaGetDevice(&dev), "cudaGetDevice");
    need(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
    std::printf("device %s: copy of %.0f MiB of floats %.3f ms, %.1f GB/s (read + write %.1f GB/s)\n", prop.name,
                static_cast<double>(fb) / (1 << 20), copy_s * 1e3, static_cast<double>(fb) / copy_s / 1e9,
                2.0 * static_cast<double>(fb) / copy_s / 1e9);
    std::printf("%-8s %-8s %10s %12s %9s %s\n", "method", "stage", "time_ms", "tensor_GB/s", "of_copy", "goal(0.5)");
    int met = 0, total = 0;
    for (const sc::method m : sc::all_methods) {
        const sc::params p = sc::defaults(m);
        const std::int64_t cb = sc::compressed_bytes(p, n);
        device_buffer ws(static_cast<std::size_t>(sc::gpu::workspace_bytes(p, n)));
        sc::gpu::compress(p, in.as<float>(), n, out.p, ws.p, s);
        struct stage {
            const char* what;
            std::function<void()> run;
        };
        std::vector<stage> stages = {
            {"encode", [&] { sc::gpu::compress(p, in.as<float>(), n, out.p, ws.p, s); }},
            {"decode", [&] { sc::gpu::decompress_accumulate(p, out.p, n, acc.as<float>(), s); }}};
        if (sc::summable(m) != sc::sum_form::none) {
            const sc::sum_form f = sc::summable(m);
            stages.push_back({"combine", [&, f] { sc::gpu::combine(f, out.p, copy.p, cb / sc::element_bytes(f), s); }});
        }
        for (const auto& st : stages) {
            const double t = time_on(s, 10, st.run);
            const double share = copy_s / t;
            ++total;
            met += share >= 0.5;
            std::printf("%-8s %-8s %10.3f %12.1f %9.2f %s\n", std::string(sc::to_string(m)).c_str(), st.what, t * 1e3,
                        static_cast<double>(fb) / t / 1e9, share, share >= 0.5 ? "met" : "MISSED");
        }
    }
    std::printf("throughput goal met by %d of %d stages\n", met, total);
}

}  // namespace

/// The NCCL path's widening and narrowing of half and bfloat16 device data (the casts'
/// decompress and compress): every 16-bit pattern, from a 2-byte aligned address, widened as the
/// host widens it and narrowed back to itself (NaN quieted, as the host quiets it).
void check_half_round_trip(sc::method m, cudaStream_t s) {
    const sc::params p = sc::defaults(m);
    const std::int64_t n = 65536;
    std::vector<std::uint16_t> bits(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) bits[static_cast<std::size_t>(i)] = static_cast<std::uint16_t>(i);
    std::vector<float> want(static_cast<std::size_t>(n));
    sc::decompress(p, reinterpret_cast<const std::byte*>(bits.data()), n, want.data());
    std::vector<std::uint16_t> back(static_cast<std::size_t>(n));
    sc::compress(p, want.data(), n, reinterpret_cast<std::byte*>(back.data()));
    void* d16 = nullptr;
    void* d32 = nullptr;
    need(cudaMalloc(&d16, 2 * n + 2), "cudaMalloc");
    need(cudaMalloc(&d32, 4 * n), "cudaMalloc");
    auto* h16 = static_cast<std::uint16_t*>(d16) + 1;  // 2-byte aligned only, as a half tensor may be
    upload(h16, bits.data(), 2 * n);
    sc::gpu::decompress(p, h16, n, static_cast<float*>(d32), s);
    need(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    expect(same_floats(download<float>(d32, static_cast<std::size_t>(n)), want),
           std::string(sc::to_string(m)) + " widening of every pattern differs from the host's");
    sc::gpu::compress(p, static_cast<const float*>(d32), n, h16, nullptr, s);
    need(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    const auto got = download<std::uint16_t>(h16, static_cast<std::size_t>(n));
    const std::uint16_t exp = m == sc::method::fp16 ? 0x7c00 : 0x7f80;
    std::int64_t wrong = 0;
    for (std::int64_t i = 0; i < n; ++i) {
        const std::uint16_t a = got[static_cast<std::size_t>(i)], b = back[static_cast<std::size_t>(i)];
        const bool nan = (b & exp) == exp && (b & ~exp & 0x7fff) != 0;
        if (a != b && !(nan && (a & exp) == exp && (a & ~exp & 0x7fff) != 0)) ++wrong;
        if (!nan && b != bits[static_cast<std::size_t>(i)]) ++wrong;  // the host's round trip itself
    }
    expect(wrong == 0, std::string(sc::to_string(m)) + " narrowing: " + std::to_string(wrong) + " patterns differ");
    cudaFree(d16);
    cudaFree(d32);
}

int main(int argc, char** argv) {
    bool timed = true;
    std::int64_t timing_n = std::int64_t{1} << 26;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--no-timing")
            timed = false;
        else if (a == "--elements" && i + 1 < argc)
            timing_n = std::max<std::int64_t>(1, std::atoll(argv[++i]));
        else {
            std::printf("usage: gpu_compress [--no-timing] [--elements N]\n");
            return 2;
        }
    }
    if (!shunt::gpu::device_available()) {
        std::printf("no CUDA device: skipped\n");
        return 77;
    }
    cudaStream_t s;
    need(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    std::int64_t cases = 0;
    try {
        for (const sc::method m : sc::all_methods)
            for (const std::int64_t n : {1, 7, 16, 33, 1000, 4097, 70001, 1 << 20})
                for (const bool specials : {false, true})
                    for (const std::int64_t block : {16, 256, 2048}) {
                        sc::params p = sc::defaults(m);
                        p.block = block;
                        p.stride = block == 16 ? 1 : block == 256 ? 100 : 7;
                        p.seed = 99;
                        if ((m == sc::method::random_k || m == sc::method::top_k) && specials && block != 256) continue;
                        check_one(p, n, specials, 0, s);
                        ++cases;
                        if (block == 256) {
                            check_one(p, n, specials, 4, s);  // off the 16-byte alignment
                            ++cases;
                        }
                        if (m == sc::method::int8 || m == sc::method::int4) {
                            p.round = sc::rounding::stochastic;
                            check_one(p, n, specials, 0, s);
                            ++cases;
                        }
                    }
        for (const auto f : {sc::sum_form::f16, sc::sum_form::bf16, sc::sum_form::f32})
            for (const std::int64_t count : {1, 5, 1000, 123457}) check_combine(f, count, s), ++cases;
        for (const sc::method m : {sc::method::sign, sc::method::top_k, sc::method::random_k, sc::method::int8})
            check_feedback(sc::defaults(m), 50001, s), ++cases;
        for (const sc::method m : {sc::method::fp16, sc::method::bf16}) check_half_round_trip(m, s), ++cases;
        std::printf("%lld cases checked against the host, %d failed\n", static_cast<long long>(cases), failures);
        if (timed && failures == 0) timing(timing_n, s);
    } catch (const std::exception& e) {
        std::printf("FAIL: %s\n", e.what());
        ++failures;
    }
    cudaStreamDestroy(s);
    return failures ? 1 : 0;
}
