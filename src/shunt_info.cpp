// src/shunt_info.cpp: the shunt-info tool: shunt's version, its SHUNT_* configuration, the cost
// model file, and what shunt would decide for a call (no mpirun needed).
#include <shunt/config.hpp>
#include <shunt/log.hpp>
#include <shunt/model/file.hpp>
#include <shunt/plan/planner.hpp>

#include <cstdlib>
#include <memory>

#include <cstdio>
#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>

#ifndef SHUNT_VERSION
#define SHUNT_VERSION "unknown"
#endif

namespace {

void usage(std::FILE* to) {
    std::fputs("usage: shunt-info OPTION [ARGS]\n"
               "\n"
               "Shows how shunt is configured and what it would do. Runs without mpirun.\n"
               "\n"
               "  --config                   every SHUNT_* variable: type, default, current value, documentation\n"
               "  --model [FILE]             validate a model file (default: the one shunt would load) and list its tables\n"
               "  --explain pack|unpack BYTES [BLOCK]\n"
               "                             the decision for (un)packing BYTES in blocks of BLOCK bytes (default 8),\n"
               "                             with every alternative's predicted time, from the model shunt would load\n"
               "  --help                     this help\n"
               "  --version                  the shunt version\n",
               to);
}

/// The current state of one variable, as text.
std::string current(const shunt::config_snapshot& c, std::size_t i) {
    const auto& v = shunt::config_variables[i];
    std::string value = v.format(c.values);
    if (value.empty()) value = "unset";
    if (!c.raw[i] || c.raw[i]->empty()) return value + " (default)";
    if (c.rejected[i]) return value + " (the value " + shunt::detail::quote(*c.raw[i]) + " is not valid: default used)";
    return value + " (set)";
}

int show_config() {
    const shunt::config_snapshot& c = shunt::config_state();
    for (std::size_t i = 0; i < shunt::config_variable_count; ++i) {
        const auto& v = shunt::config_variables[i];
        const std::string shown_default = v.default_text.empty() ? "unset" : std::string(v.default_text);
        std::printf("%.*s (%.*s, default %s)\n", static_cast<int>(v.name.size()), v.name.data(),
                    static_cast<int>(v.type.size()), v.type.data(), shown_default.c_str());
        std::printf("    current:  %s\n", current(c, i).c_str());
        std::printf("    %.*s\n", static_cast<int>(v.doc.size()), v.doc.data());
        std::printf("    accepted: %s\n", v.accepted().c_str());
    }
    // Bad values and unknown SHUNT_* names, on stderr as the library would report them.
    shunt::log_config_warnings();
    return 0;
}

/// The model shunt would load (SHUNT_MODEL, else the default location), or the built-in one;
/// `where` describes which.
std::shared_ptr<shunt::cost_model> effective_model(std::string& where) {
    const shunt::model_identity me = shunt::current_identity();
    const std::string path = shunt::resolve_model_path(shunt::config().model, shunt::process_environment(), me);
    if (!path.empty()) {
        auto r = shunt::load_model(path, &me);
        if (r.model) {
            where = "measured model " + path;
            return std::make_shared<shunt::cost_model>(std::move(*r.model));
        }
        where = r.missing ? "built-in model (no file at " + path + ")" : "built-in model (" + r.problem + ")";
    } else {
        where = "built-in model";
    }
    return std::make_shared<shunt::cost_model>();
}

int show_model(const char* file) {
    const shunt::model_identity me = shunt::current_identity();
    const std::string path = file ? file : shunt::resolve_model_path(shunt::config().model, shunt::process_environment(), me);
    if (path.empty()) {
        std::fprintf(stderr, "shunt-info: no model file location (set SHUNT_MODEL or HOME, or name a file)\n");
        return 1;
    }
    auto r = shunt::load_model(path, nullptr);
    if (!r.model) {
        std::fprintf(stderr, "shunt-info: %s\n", r.problem.c_str());
        return 1;
    }
    const auto& m = *r.model;
    std::printf("%s: valid shunt model, schema version %d\n", path.c_str(), shunt::model_schema_version);
    std::printf("  measured on host '%s', GPU '%s', MPI '%s'%s\n", m.id.host.c_str(), m.id.gpu.c_str(), m.id.mpi.c_str(),
                m.id == me ? "" : " -- FOREIGN: shunt on this machine would not use it");
    for (const auto& [name, t] : m.tables()) {
        const auto& p = t.points();
        if (p.empty()) continue;
        std::printf("  %-24s %3zu points, %10.0f .. %-10.0f bytes, %.3g .. %.3g s\n", name.c_str(), p.size(), p.front().size,
                    p.back().size, p.front().time, p.back().time);
    }
    return m.id == me ? 0 : 1;
}

bool parse_positive(const char* text, std::int64_t& out) {
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(text, &end, 10);
    if (end == text || *end != '\0' || errno != 0 || v <= 0) return false;
    out = v;
    return true;
}

int explain(int argc, char** argv) {
    if (argc < 4 || argc > 5 || (std::string_view(argv[2]) != "pack" && std::string_view(argv[2]) != "unpack")) {
        std::fprintf(stderr, "shunt-info: --explain takes pack|unpack BYTES [BLOCK] (try shunt-info --help)\n");
        return 2;
    }
    std::int64_t bytes = 0, block = 8;
    if (!parse_positive(argv[3], bytes) || (argc == 5 && !parse_positive(argv[4], block)) || block > bytes) {
        std::fprintf(stderr, "shunt-info: BYTES and BLOCK must be positive integers with BLOCK <= BYTES\n");
        return 2;
    }
    std::string where;
    auto model = effective_model(where);
    // SHUNT_PACK's words ("auto", "library", "host") are the planner's method names.
    shunt::planner pl(model, {shunt::detail::pack_kind::name(shunt::config().pack)});
    // A vector of BYTES / BLOCK blocks of BLOCK bytes, twice as far apart: the shape the pack
    // tables are measured on.
    shunt::type_info t;
    t.form.blocks = {{0, block}};
    if (bytes / block > 1) t.form.dims = {{bytes / block, 2 * block}};
    t.size = bytes / block * block;
    t.extent = (2 * (bytes / block) - 1) * block;
    const auto d = pl.pack(t, 1, std::string_view(argv[2]) == "unpack");
    std::printf("%s of %lld bytes in %lld blocks of %lld bytes, host memory (%s):\n", argv[2],
                static_cast<long long>(t.size), static_cast<long long>(d.blocks), static_cast<long long>(block),
                where.c_str());
    for (std::uint8_t i = 0; i < d.count; ++i)
        std::printf("  %-8.*s predicted %10.3f us%s\n", static_cast<int>(d.alternatives[i].method.size()),
                    d.alternatives[i].method.data(), d.alternatives[i].predicted_s * 1e6,
                    i == d.chosen ? (d.forced ? "   <- chosen (forced by SHUNT_PACK)" : "   <- chosen") : "");
    shunt::log_config_warnings();
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc == 1) {
        usage(stdout);
        return 0;
    }
    const std::string_view option = argv[1];
    if (option == "--explain") return explain(argc, argv);
    if (option == "--model" && argc <= 3) return show_model(argc == 3 ? argv[2] : nullptr);
    if (argc > 2) {
        std::fprintf(stderr, "shunt-info: one option at a time (try shunt-info --help)\n");
        return 2;
    }
    if (option == "--help" || option == "-h") {
        usage(stdout);
        return 0;
    }
    if (option == "--version") {
        std::printf("shunt-info (shunt) %s\n", SHUNT_VERSION);
        return 0;
    }
    if (option == "--config") return show_config();
    std::fprintf(stderr, "shunt-info: unknown option '%s' (try shunt-info --help)\n", argv[1]);
    return 2;
}
