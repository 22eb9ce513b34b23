// bench/compress.cpp: bench-compress, the host gradient compressors: each vectorised path (AVX2,
// AVX-512) against the plain scalar loop, and memcpy of the same bytes, with the compression ratio.
#include "harness.hpp"

#include <shunt/compress/combine.hpp>
#include <shunt/compress/compress.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace shunt::bench;
namespace sc = shunt::compress;

/// What a row does: compress, decompress, decompress-and-accumulate, or combine (the summable
/// forms' reduction of two compressed vectors).
enum class op { compress, decompress, accumulate, combine };
constexpr const char* op_names[] = {"compress", "decompress", "accumulate", "combine"};

/// Gradient-like values: normal draws whose scale changes every 64 elements.
std::vector<float> gradients(std::int64_t n) {
    std::mt19937_64 g(12345);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> decade(-3.0f, 3.0f);
    std::vector<float> v(static_cast<std::size_t>(n));
    float scale = 1;
    for (std::int64_t i = 0; i < n; ++i) {
        if (i % 64 == 0) scale = std::pow(10.0f, decade(g));
        v[static_cast<std::size_t>(i)] = normal(g) * scale;
    }
    return v;
}

/// The buffers of one row and a call of its operation on a given path.
struct row_data {
    sc::params p;
    std::int64_t n = 0;
    std::vector<float> in, out, acc;
    std::vector<std::byte> packed, packed2;
    row_data(sc::params params, std::int64_t count) : p(params), n(count) {
        in = gradients(n);
        out.assign(in.size(), 0.0f);
        acc.assign(in.size(), 0.0f);
        const auto bytes = static_cast<std::size_t>(sc::compressed_bytes(p, n));
        packed.assign(bytes, std::byte{0});
        sc::compress(p, in.data(), n, packed.data());
        packed2 = packed;
    }
    void run(op what, sc::isa path) {
        switch (what) {
            case op::compress: return sc::compress(p, in.data(), n, packed.data(), 0, path);
            case op::decompress: return sc::decompress(p, packed.data(), n, out.data(), 0, path);
            case op::accumulate: return sc::decompress_accumulate(p, packed.data(), n, acc.data(), 0, path);
            case op::combine:
                return sc::combine(sc::summable(p.kind), packed.data(), packed2.data(),
                                   sc::compressed_bytes(p, n) / sc::element_bytes(sc::summable(p.kind)), path);
        }
    }
    /// What the operation wrote, to compare paths.
    std::vector<std::byte> result(op what) const {
        auto bytes = [](const auto& v) {
            std::vector<std::byte> b(v.size() * sizeof(v[0]));
            std::memcpy(b.data(), v.data(), b.size());
            return b;
        };
        switch (what) {
            case op::compress: return packed;
            case op::decompress: return bytes(out);
            case op::accumulate: return bytes(acc);
            case op::combine: return packed2;
        }
        return {};
    }
};

/// Runs `what` once on every path from the same state and checks that each writes the scalar
/// path's bytes; throws shunt::error naming the first path that does not.
void check_paths(row_data& d, op what, const std::vector<sc::isa>& paths) {
    const auto packed = d.packed, packed2 = d.packed2;
    const auto acc = d.acc;
    std::vector<std::byte> want;
    for (const sc::isa path : paths) {
        d.packed = packed, d.packed2 = packed2, d.acc = acc;
        d.run(what, path);
        auto got = d.result(what);
        if (path == sc::isa::scalar)
            want = std::move(got);
        else if (got != want)
            throw shunt::error(std::string(op_names[static_cast<int>(what)]) + " of " +
                               std::string(sc::to_string(d.p.kind)) + " on " + std::string(sc::to_string(path)) +
                               " differs from the scalar path");
    }
    d.packed = packed, d.packed2 = packed2, d.acc = acc;
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> methods;
    for (const sc::method m : sc::all_methods) methods.emplace_back(sc::to_string(m));
    bool quick = false;
    std::int64_t block = 256, stride = 100;
    cli line("bench-compress",
             "Times shunt's host gradient compressors on float32 gradients: compress, decompress, decompress-\n"
             "and-accumulate and (for the summable forms) combine, on each vectorised path this CPU has\n"
             "(AVX2, AVX-512) against the plain scalar loop, with memcpy of the same bytes as a bound. Every\n"
             "row first checks that each path writes the scalar path's bytes.");
    line.flag("--quick", "a small set that runs in seconds (CI smoke test): 256K, 5 trials", [&] { quick = true; });
    line.option("--methods", "LIST", "compressors (default all: fp16,bf16,int8,int4,randomk,topk,sign)",
                [&](const std::string& v) {
                    methods.clear();
                    std::size_t start = 0;
                    while (start <= v.size()) {
                        const std::size_t comma = std::min(v.find(',', start), v.size());
                        const std::string name = v.substr(start, comma - start);
                        if (!sc::method_from_string(name))
                            throw usage_error("--methods: unknown compressor '" + name + "'");
                        methods.push_back(name);
                        start = comma + 1;
                    }
                });
    line.option("--block", "N", "elements per scale of int8, int4 and sign (a multiple of 16; default 256)",
                [&](const std::string& v) { block = parse_int(v, "--block", 16, std::int64_t{1} << 24); });
    line.option("--stride", "N", "randomk and topk keep one element in N (default 100)",
                [&](const std::string& v) { stride = parse_int(v, "--stride", 1, std::int64_t{1} << 31); });
    line.epilog(
        "Rows are named OP/METHOD/SIZE, e.g. compress/int8/16M; SIZE is the float32 bytes of the gradient\n"
        "(default 64K,1M,16M). Columns: ratio = compressed bytes / float bytes; GB/s of float bytes for\n"
        "the plain loop (scalar), AVX2 and AVX-512 (- where the CPU lacks it); best/scalar = scalar time /\n"
        "the best vectorised path's time; memcpy = a copy of the float bytes; best/memcpy = memcpy time /\n"
        "best time (1 = as fast as copying the gradient).");
    line.trial_defaults(20, 2.0);
    options o = line.parse(argc, argv);
    if (quick) {
        if (!o.was_given("--sizes")) o.sizes = {256 << 10};
        if (!o.was_given("--trials")) o.trials = 5;
        if (!o.was_given("--time")) o.time_s = 0.2;
    }
    if (o.sizes.empty()) o.sizes = {64 << 10, 1 << 20, 16 << 20};
    if (block % 16 != 0) {
        std::fprintf(stderr, "bench-compress: --block: %lld is not a multiple of 16\n", static_cast<long long>(block));
        return 2;
    }
    struct row_spec {
        std::string name;
        sc::method m;
        op what;
        std::int64_t bytes;
    };
    std::vector<row_spec> rows;
    for (const std::int64_t bytes : o.sizes)
        for (const auto& name : methods) {
            const sc::method m = *sc::method_from_string(name);
            for (const op what : {op::compress, op::decompress, op::accumulate, op::combine}) {
                if (what == op::combine && sc::summable(m) == sc::sum_form::none) continue;
                const std::string row =
                    std::string(op_names[static_cast<int>(what)]) + "/" + name + "/" + format_bytes(bytes);
                if (o.selected(row)) rows.push_back({row, m, what, bytes});
            }
        }
    if (o.list) {
        for (const auto& r : rows) std::printf("%s\n", r.name.c_str());
        return 0;
    }
    std::vector<sc::isa> paths{sc::isa::scalar};
    if (sc::cpu_isa() >= sc::isa::avx2) paths.push_back(sc::isa::avx2);
    if (sc::cpu_isa() >= sc::isa::avx512) paths.push_back(sc::isa::avx512);
    try {
        table out({{"op", 10, "op", true},
                   {"method", 7, "method", true},
                   {"size", 5, "float_bytes"},
                   {"ratio", 6, "ratio"},
                   {"scalar GB/s", 11, "scalar_gbs"},
                   {"AVX2 GB/s", 9, "avx2_gbs"},
                   {"AVX-512 GB/s", 12, "avx512_gbs"},
                   {"best/scalar", 11, "best_over_scalar"},
                   {"memcpy GB/s", 11, "memcpy_gbs"},
                   {"best/memcpy", 11, "best_over_memcpy"}},
                  o);
        out.note("bench-compress: CPU paths " + std::string(sc::to_string(sc::cpu_isa())) + " and below; block " +
                 std::to_string(block) + ", stride " + std::to_string(stride) + "; best of up to " +
                 std::to_string(o.trials) + " interleaved trials per variant");
        for (const auto& r : rows) {
            sc::params p = sc::defaults(r.m);
            p.block = block;
            p.stride = stride;
            const std::int64_t n = r.bytes / 4;
            row_data d(p, n);
            check_paths(d, r.what, paths);
            std::vector<float> copy(d.in.size());
            std::vector<std::function<void()>> variants;
            for (const sc::isa path : paths) variants.push_back([&d, what = r.what, path] { d.run(what, path); });
            variants.push_back([&] { std::memcpy(copy.data(), d.in.data(), d.in.size() * 4); });
            const auto t = measure(variants, o);
            const double scalar_s = t[0].best_s, memcpy_s = t.back().best_s;
            double best_s = scalar_s;
            for (std::size_t i = 1; i + 1 < t.size(); ++i) best_s = std::min(best_s, t[i].best_s);
            auto path_cell = [&](sc::isa path) {
                for (std::size_t i = 0; i < paths.size(); ++i)
                    if (paths[i] == path) return gbs_cell(r.bytes, t[i].best_s);
                return cell{"-", ""};
            };
            out.row({text_cell(op_names[static_cast<int>(r.what)]), text_cell(std::string(sc::to_string(r.m))),
                     bytes_cell(r.bytes), number_cell(sc::ratio(p, n), 4), gbs_cell(r.bytes, scalar_s),
                     path_cell(sc::isa::avx2), path_cell(sc::isa::avx512), number_cell(scalar_s / best_s, 2),
                     gbs_cell(r.bytes, memcpy_s), number_cell(memcpy_s / best_s, 2)});
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench-compress: %s\n", e.what());
        return 1;
    }
    return 0;
}
