// shunt/model/measure_compress.hpp: measuring the host compressor tables of the cost model
// (compress.<method>.cpu.<stage>) with the robust timing of the other host tables; used by
// shunt-measure.
#pragma once

#include <shunt/compress/combine.hpp>
#include <shunt/compress/compress.hpp>
#include <shunt/errors.hpp>
#include <shunt/model/compress.hpp>
#include <shunt/model/measure.hpp>
#include <shunt/model/table.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace shunt {

/// Measures stage `s` of method `m` (compress::defaults(m), the CPU's best path) at each size
/// (float32 bytes of the tensor, rounded down to whole elements) on gradient-like data: normal
/// draws whose scale changes every 64 elements. Blocking; rank-local.
inline time_table measure_compress(compress::method m, compress_stage s, std::span<const double> sizes,
                                   const timing_policy& pol) {
    const compress::params p = compress::defaults(m);
    time_table t;
    for (const double size : sizes) {
        const std::int64_t n = std::max<std::int64_t>(1, static_cast<std::int64_t>(size) / 4);
        std::vector<float> in(static_cast<std::size_t>(n)), acc(in.size(), 0.0f);
        std::uint64_t x = 0x9e3779b97f4a7c15ull;
        float scale = 1;
        for (std::int64_t i = 0; i < n; ++i) {  // a deterministic sum of uniforms: near normal
            if (i % 64 == 0) scale = std::pow(10.0f, static_cast<float>(i / 64 % 7) - 3.0f);
            double u = 0;
            for (int k = 0; k < 4; ++k) {
                x = x * 6364136223846793005ull + 1442695040888963407ull;
                u += static_cast<double>(x >> 11) * 0x1p-53;
            }
            in[static_cast<std::size_t>(i)] = static_cast<float>(u - 2.0) * scale;
        }
        std::vector<std::byte> packed(static_cast<std::size_t>(compress::compressed_bytes(p, n)));
        compress::compress(p, in.data(), n, packed.data());
        std::vector<std::byte> other = packed;
        const compress::sum_form form = compress::summable(m);
        robust_estimate e;
        if (s == compress_stage::encode)
            e = time_call([&] { compress::compress(p, in.data(), n, packed.data()); }, pol);
        else if (s == compress_stage::decode)
            e = time_call([&] { compress::decompress_accumulate(p, packed.data(), n, acc.data()); }, pol);
        else if (form != compress::sum_form::none)
            e = time_call(
                [&] {
                    compress::combine(form, packed.data(), other.data(),
                                      compress::compressed_bytes(p, n) / compress::element_bytes(form));
                },
                pol);
        else
            throw error("compress: " + std::string(compress::to_string(m)) + " has no combine stage");
        t.set({static_cast<double>(4 * n), e.value, e.spread});
    }
    return t;
}

/// Measures the host table `name` (compress.<method>.cpu.<stage>) at `sizes`. Throws
/// shunt::error for any other name.
inline time_table measure_compress_table(const std::string& name, std::span<const double> sizes,
                                         const timing_policy& pol) {
    const auto key = parse_compress_table(name);
    if (!key || key->device) throw error("not a host compressor table: '" + name + "'");
    return measure_compress(key->method, key->stage, sizes, pol);
}

}  // namespace shunt
