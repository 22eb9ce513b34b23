// shunt/model/nccl_file.hpp: the model file of the NCCL tables, found and read without calling MPI (NCCL-only
// programs load shunt's tuner plugin): an identity of its own, "nccl" where an MPI model names its library.
#pragma once

#include <shunt/model/file.hpp>

#include <unistd.h>
#include <span>
#include <string>
#include <string_view>

namespace shunt {

/// The library part of the identity of a model file of NCCL tables.
inline constexpr std::string_view nccl_model_library = "nccl";

/// The identity of this host's NCCL tables: the host name, `gpu` (the tables' writer records its
/// device; readers do not check it: the plugin links no CUDA) and "nccl". Calls no MPI.
inline model_identity nccl_model_identity(const std::string& gpu = "none") {
    model_identity id;
    char host[256] = {0};
    if (::gethostname(host, sizeof host - 1) == 0) id.host = host;
    id.gpu = gpu;
    id.mpi = std::string(nccl_model_library);
    return id;
}

/// The file of the NCCL tables: `configured` (SHUNT_MODEL) if not empty, else model-HOST-nccl.json
/// at the default location ($XDG_CACHE_HOME/shunt, else $HOME/.cache/shunt; see `env`); empty
/// when neither is set.
inline std::string nccl_model_path(const std::string& configured, std::span<const char* const> env) {
    return resolve_model_path(configured, env, nccl_model_identity());
}

/// Reads the NCCL tables from nccl_model_path(). A file SHUNT_MODEL names is taken whatever its
/// identity (the user chose it; it may be an MPI model that holds nccl tables too); the default
/// file must be this host's NCCL tables (host and "nccl"; the GPU is not checked). Never throws;
/// calls no MPI.
inline model_load_result load_nccl_model(const std::string& configured, std::span<const char* const> env) {
    const std::string path = nccl_model_path(configured, env);
    if (path.empty()) {
        model_load_result r;
        r.missing = true;
        r.problem = "no model file location (neither SHUNT_MODEL, XDG_CACHE_HOME nor HOME is set)";
        return r;
    }
    model_load_result r = load_model(path, nullptr);
    if (r.model && configured.empty()) {
        const model_identity me = nccl_model_identity();
        if (r.model->id.host != me.host || r.model->id.mpi != nccl_model_library) {
            r.problem = path + ": foreign model file: measured on host '" + r.model->id.host + "' for library '" +
                        r.model->id.mpi + "', not this host's (" + me.host +
                        ") NCCL tables; set SHUNT_MODEL to use it anyway";
            r.model.reset();
        }
    }
    return r;
}

}  // namespace shunt
