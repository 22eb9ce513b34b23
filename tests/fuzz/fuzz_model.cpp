// tests/fuzz/fuzz_model.cpp: fuzz target of the model file loader: model_from_json on random text
// and on byte mutations of a valid model file must never throw or crash, and a model it loads
// must save to text that loads back to the same model, with finite, non-negative predictions.
#include "fuzz_input.hpp"

#include <shunt/model/file.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

[[noreturn]] void fail(const char* what, const std::string& text) {
    std::fprintf(stderr, "fuzz_model: check failed: %s\n--- text ---\n%s\n------------\n", what, text.c_str());
    std::abort();
}
#define SHUNT_FUZZ_CHECK(cond, text)    \
    do {                                \
        if (!(cond)) fail(#cond, text); \
    } while (0)

/// A double from the input: mostly an ordinary measured value, now and then an edge.
double some_double(shunt_fuzz::input& in) {
    static constexpr double edges[] = {0.0, -0.0, 1e-300, 5e-324, 1e300, 1.7976931348623157e308, -1.0, 1.0, 0.5};
    if (in.range(0, 7) == 0) return edges[in.range(0, std::size(edges) - 1)];
    const std::uint64_t bits = in.u64();
    double d = 0;
    std::memcpy(&d, &bits, sizeof d);
    return in.flag() ? d : static_cast<double>(in.range(0, 1 << 30)) * 1e-9;
}

/// Text for a name: JSON strings are UTF-8, so bytes past ASCII become '?'.
std::string name(shunt_fuzz::input& in) {
    std::string s = in.text(8);
    for (char& c : s)
        if (static_cast<unsigned char>(c) >= 0x80) c = '?';
    return s;
}

/// A valid model file (what shunt-measure writes) from the input.
std::string valid_file(shunt_fuzz::input& in) {
    nlohmann::json tables = nlohmann::json::object();
    const int n = static_cast<int>(in.range(0, 4));
    for (int t = 0; t < n; ++t) {
        nlohmann::json pts = nlohmann::json::array();
        const int m = static_cast<int>(in.range(0, 5));
        for (int i = 0; i < m; ++i) {
            const double size = std::abs(some_double(in)), time = std::abs(some_double(in)),
                         spread = std::abs(some_double(in));
            if (std::isfinite(size) && size > 0 && std::isfinite(time) && std::isfinite(spread))
                pts.push_back({size, time, spread});
        }
        tables[in.flag() ? "pack.shunt.b" + std::to_string(t) : name(in)] = pts;
    }
    nlohmann::json j = {{"schema", "shunt-model"},
                        {"version", shunt::model_schema_version},
                        {"identity", {{"host", name(in)}, {"gpu", "none"}, {"mpi", name(in)}}},
                        {"tables", tables}};
    return j.dump(in.flag() ? -1 : 1);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    shunt_fuzz::input in(data, size);
    std::string text;
    if (in.flag()) {  // a valid file, then a few byte edits
        text = valid_file(in);
        const int edits = static_cast<int>(in.range(0, 4));
        for (int e = 0; e < edits && !text.empty(); ++e) {
            const auto at = static_cast<std::size_t>(in.range(0, static_cast<std::int64_t>(text.size()) - 1));
            switch (in.range(0, 2)) {
                case 0: text[at] = static_cast<char>(in.byte()); break;
                case 1: text.erase(at, static_cast<std::size_t>(in.range(1, 8))); break;
                default: text.insert(at, in.text(8)); break;
            }
        }
    } else {
        text = in.rest();
    }

    const shunt::model_identity expected{"h", "none", "m"};
    shunt::model_load_result r;
    try {
        r = shunt::model_from_json(text, in.flag() ? &expected : nullptr);
    } catch (...) {
        fail("model_from_json threw", text);
    }
    SHUNT_FUZZ_CHECK(r.model.has_value() == r.problem.empty(), text);
    if (!r.model) return 0;

    // What save_model would write loads back to the same model.
    const std::string saved = shunt::model_to_json(*r.model).dump(1);
    const shunt::model_load_result back = shunt::model_from_json(saved, nullptr);
    if (!back.model) fail(("the saved model does not load: " + back.problem).c_str(), text);
    SHUNT_FUZZ_CHECK(back.model->id == r.model->id, text);
    SHUNT_FUZZ_CHECK(back.model->tables() == r.model->tables(), text);
    for (const auto& [name, table] : r.model->tables())
        for (const double s : {1.0, 64.0, 65536.0, 1e12, 1e300}) {
            const double t = table.predict(s);
            SHUNT_FUZZ_CHECK(!std::isnan(t) && t >= 0, text);
        }
    return 0;
}
