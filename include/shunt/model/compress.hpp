// shunt/model/compress.hpp: the cost model of the gradient compressors: the time of each stage of a
// compressor over a tensor (tables compress.<method>.<cpu|gpu>.<stage>, measured by shunt-measure,
// analytic defaults otherwise) and the size of its compressed form, exact from the format.
#pragma once

#include <shunt/compress/common.hpp>
#include <shunt/model/model.hpp>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shunt {

/// A stage of a compressor: compress, decompress-and-accumulate (the receiver of an allgather of
/// compressed parts, per part), or the sum of two compressed forms (summable forms only).
enum class compress_stage : std::uint8_t { encode, decode, combine };

constexpr std::string_view to_string(compress_stage s) {
    return s == compress_stage::encode ? "encode" : s == compress_stage::decode ? "decode" : "combine";
}

/// The stages of method `m` that have tables: combine only where its form sums.
inline std::vector<compress_stage> compress_stages(compress::method m) {
    std::vector<compress_stage> v{compress_stage::encode, compress_stage::decode};
    if (compress::summable(m) != compress::sum_form::none) v.push_back(compress_stage::combine);
    return v;
}

/// The table of stage `s` of method `m` on the host or the device.
inline std::string compress_table(compress::method m, bool device, compress_stage s) {
    return table_names::compress(compress::to_string(m), device, to_string(s));
}

/// The method, place and stage a table name stands for, or nothing when it is not a compressor
/// table (or names an unknown method or stage).
struct compress_table_key {
    compress::method method;
    bool device;
    compress_stage stage;
};
inline std::optional<compress_table_key> parse_compress_table(std::string_view name) {
    for (const compress::method m : compress::all_methods)
        for (const bool device : {false, true})
            for (const compress_stage s : compress_stages(m))
                if (name == compress_table(m, device, s)) return compress_table_key{m, device, s};
    return std::nullopt;
}

/// Seconds for stage `s` of method `m` (with compress::defaults(m)) over a tensor of `float_bytes`
/// float32 bytes: the measured table if there is one, else the analytic default, with the
/// model's online correction. Thread-safe as cost_model::predict is.
inline double predict_compress(const cost_model& model, compress::method m, bool device, compress_stage s,
                               double float_bytes) {
    return model.predict(compress_table(m, device, s), float_bytes);
}

/// Bytes of the compressed form of a tensor of `float_bytes` float32 bytes with parameters `p`:
/// exact from the format (compress::compressed_bytes), so the model keeps no table of it.
inline double compressed_size(const compress::params& p, double float_bytes) {
    return static_cast<double>(compress::compressed_bytes(p, static_cast<std::int64_t>(std::ceil(float_bytes / 4))));
}

}  // namespace shunt
