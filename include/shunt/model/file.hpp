// shunt/model/file.hpp: the model file: JSON with a schema version, keyed by host, GPU and MPI
// library, read with a precise diagnosis and written atomically, readable by the user only.
#pragma once

#include <shunt/errors.hpp>
#include <shunt/model/model.hpp>

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <string_view>

namespace shunt {

/// Version of the model file layout; a file of another version is stale and ignored.
inline constexpr int model_schema_version = 1;

/// What reading a model file gave: the model, or why there is none. `missing` is kept apart
/// from the other problems because a missing default file is the normal, silent case.
struct model_load_result {
    std::optional<cost_model> model;
    bool missing = false;
    std::string problem;  ///< empty when the model was loaded
};

/// The model as JSON.
inline nlohmann::json model_to_json(const cost_model& m) {
    nlohmann::json j;
    j["schema"] = "shunt-model";
    j["version"] = model_schema_version;
    j["identity"] = {{"host", m.id.host}, {"gpu", m.id.gpu}, {"mpi", m.id.mpi}};
    nlohmann::json tables = nlohmann::json::object();
    for (const auto& [name, t] : m.tables()) {
        nlohmann::json pts = nlohmann::json::array();
        for (const auto& p : t.points()) pts.push_back({p.size, p.time, p.spread});
        tables[name] = pts;
    }
    j["tables"] = tables;
    return j;
}

/// Parses a model from JSON text, checking schema, version, identity (when `expected` is given)
/// and every table entry. Never throws.
inline model_load_result model_from_json(const std::string& text, const model_identity* expected) {
    model_load_result r;
    try {
        const auto j = nlohmann::json::parse(text);
        if (!j.is_object() || j.value("schema", std::string()) != "shunt-model") {
            r.problem = "not a shunt model file (no \"schema\": \"shunt-model\")";
            return r;
        }
        if (!j.contains("version") || !j["version"].is_number_integer() ||
            j["version"].get<int>() != model_schema_version) {
            r.problem = "stale model file: schema version " +
                        (j.contains("version") ? j["version"].dump() : std::string("missing")) +
                        ", this shunt reads version " + std::to_string(model_schema_version) +
                        "; run shunt-measure again";
            return r;
        }
        cost_model m;
        const auto& id = j.at("identity");
        m.id = {id.at("host").get<std::string>(), id.at("gpu").get<std::string>(), id.at("mpi").get<std::string>()};
        if (expected && !(m.id == *expected)) {
            r.problem = "foreign model file: measured on host '" + m.id.host + "', GPU '" + m.id.gpu + "', MPI '" +
                        m.id.mpi + "' but this is host '" + expected->host + "', GPU '" + expected->gpu + "', MPI '" +
                        expected->mpi + "'";
            return r;
        }
        for (const auto& [name, pts] : j.at("tables").items()) {
            if (!pts.is_array()) throw std::runtime_error("table '" + name + "' is not an array");
            std::vector<table_point> v;
            for (const auto& p : pts) {
                if (!p.is_array() || p.size() != 3 || !p[0].is_number() || !p[1].is_number() || !p[2].is_number())
                    throw std::runtime_error("table '" + name + "' has an entry that is not [size, seconds, spread]");
                const table_point tp{p[0].get<double>(), p[1].get<double>(), p[2].get<double>()};
                if (!(tp.size > 0) || !(tp.time >= 0) || !(tp.spread >= 0) || !std::isfinite(tp.time))
                    throw std::runtime_error("table '" + name + "' has an out-of-range entry " + p.dump());
                v.push_back(tp);
            }
            m.set(name, time_table(std::move(v)));
        }
        r.model = std::move(m);
    } catch (const std::exception& e) {
        r.problem = std::string("corrupt model file: ") + e.what();
    }
    return r;
}

/// Reads the model file at `path`. Never throws; see model_load_result.
inline model_load_result load_model(const std::string& path, const model_identity* expected) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        model_load_result r;
        r.missing = errno == ENOENT;
        r.problem = "cannot read model file '" + path + "': " + std::strerror(errno);
        return r;
    }
    std::ostringstream text;
    text << in.rdbuf();
    auto r = model_from_json(text.str(), expected);
    if (!r.problem.empty()) r.problem = path + ": " + r.problem;
    return r;
}

/// Writes the model to `path` atomically (a temporary file in the same directory, flushed,
/// then renamed over the old one), mode 0600, creating the directory (0700) if needed.
/// Throws shunt::error on failure; the old file is untouched then.
inline void save_model(const cost_model& m, const std::string& path) {
    const auto slash = path.rfind('/');
    if (slash != std::string::npos && slash > 0) {
        const std::string dir = path.substr(0, slash);
        for (std::size_t i = 1; i <= dir.size(); ++i)
            if (i == dir.size() || dir[i] == '/') ::mkdir(dir.substr(0, i).c_str(), 0700);
    }
    std::string tmp = path + ".tmp.XXXXXX";
    const int fd = ::mkstemp(tmp.data());
    if (fd < 0) throw error("cannot create a temporary file beside '" + path + "': " + std::strerror(errno));
    const std::string text = model_to_json(m).dump(1) + "\n";
    bool ok = ::fchmod(fd, 0600) == 0;
    for (std::size_t off = 0; ok && off < text.size();) {
        const ssize_t n = ::write(fd, text.data() + off, text.size() - off);
        if (n < 0 && errno == EINTR) continue;
        ok = n > 0;
        if (ok) off += static_cast<std::size_t>(n);
    }
    ok = ok && ::fsync(fd) == 0;
    const int saved = errno;
    ::close(fd);
    if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
        const int e = ok ? errno : saved;
        ::unlink(tmp.c_str());
        throw error("cannot write model file '" + path + "': " + std::strerror(e));
    }
}

/// The file name of a model for `id`: model-<host>-<MPI library>.json, with anything but
/// letters, digits, '.', '_' and '-' replaced, so nodes sharing a home directory keep their own.
inline std::string model_file_name(const model_identity& id) {
    auto clean = [](const std::string& s) {
        std::string out;
        for (char c : s)
            out += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-') ? c : '_';
        return out.empty() ? std::string("unknown") : out.substr(0, 80);
    };
    return "model-" + clean(id.host) + "-" + clean(id.mpi) + ".json";
}

/// Where the model of `id` lives when SHUNT_MODEL does not say: $XDG_CACHE_HOME/shunt/NAME,
/// else $HOME/.cache/shunt/NAME (NAME from model_file_name). The caller passes the environment
/// values (the library never reads the environment). Empty when neither is set.
inline std::string default_model_path(const char* xdg_cache_home, const char* home, const model_identity& id) {
    if (xdg_cache_home && *xdg_cache_home == '/') return std::string(xdg_cache_home) + "/shunt/" + model_file_name(id);
    if (home && *home) return std::string(home) + "/.cache/shunt/" + model_file_name(id);
    return {};
}

/// The value of NAME in an environment given as "NAME=value" strings, or nullptr.
inline const char* environment_lookup(std::span<const char* const> env, std::string_view name) {
    for (const char* e : env) {
        const std::string_view s = e;
        if (s.size() > name.size() && s.substr(0, name.size()) == name && s[name.size()] == '=')
            return e + name.size() + 1;
    }
    return nullptr;
}

/// The model file to use: `configured` (SHUNT_MODEL) if not empty, else the default location
/// for `id` from XDG_CACHE_HOME / HOME in `env`.
inline std::string resolve_model_path(const std::string& configured, std::span<const char* const> env,
                                      const model_identity& id) {
    if (!configured.empty()) return configured;
    return default_model_path(environment_lookup(env, "XDG_CACHE_HOME"), environment_lookup(env, "HOME"), id);
}

/// This process's identity: host name, the given GPU name ("none" without one), and the MPI
/// library's version string (first line). Callable before MPI_Init.
inline model_identity current_identity(const std::string& gpu = "none") {
    model_identity id;
    char host[256] = {0};
    if (::gethostname(host, sizeof host - 1) == 0) id.host = host;
    char lib[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
    int len = 0;
    if (PMPI_Get_library_version(lib, &len) == MPI_SUCCESS) {
        std::string s(lib, static_cast<std::size_t>(std::max(0, len)));
        const auto nl = s.find_first_of("\n,");
        id.mpi = s.substr(0, nl);
        while (!id.mpi.empty() && (id.mpi.back() == ' ' || id.mpi.back() == '\0')) id.mpi.pop_back();
    }
    id.gpu = gpu;
    return id;
}

}  // namespace shunt
