// interpose/nccl_tuner.cpp: libshunt-nccl-tuner.so, shunt's NCCL tuner plugin (NCCL_TUNER_PLUGIN=libshunt-nccl-tuner.so):
// the cost model's measured nccl.* tables choose NCCL's algorithm and protocol per collective and size.
// Links no NCCL, CUDA or MPI library; nothing it does can fail NCCL's call.
#include "nccl_tuner_abi.hpp"

#include <shunt/config.hpp>
#include <shunt/log.hpp>
#include <shunt/model/nccl_file.hpp>
#include <shunt/plan/nccl_tuner.hpp>

#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>

namespace shunt::detail {
namespace {

namespace abi = nccl_abi;

/// The process's NCCL tables, read once at the first communicator: no model where there is no
/// file (silently) or a bad one (one warning); `note` says which for NCCL's log.
struct loaded_model {
    std::unique_ptr<const cost_model> model;
    std::string note;
};

loaded_model load() noexcept {
    loaded_model out;
    try {
        const settings& cfg = config();
        const std::string path = nccl_model_path(cfg.model, process_environment());
        model_load_result r = load_nccl_model(cfg.model, process_environment());
        if (r.model) {
            out.model = std::make_unique<const cost_model>(std::move(*r.model));
            out.note = "model " + path;
            return out;
        }
        out.note = r.missing && cfg.model.empty() ? "no model file" + (path.empty() ? "" : " at " + path) : r.problem;
        if (!r.missing || !cfg.model.empty())
            log_warn(log_category::init, "NCCL tuner: %s; NCCL keeps its own choices", r.problem.c_str());
    } catch (const std::exception& e) {
        out.model.reset();
        log_warn(log_category::init, "NCCL tuner: cannot read the model (%s); NCCL keeps its own choices", e.what());
    } catch (...) {
        out.model.reset();
        log_warn(log_category::init, "NCCL tuner: cannot read the model; NCCL keeps its own choices");
    }
    return out;
}

const loaded_model& process_model() noexcept {
    static const loaded_model m = load();
    return m;
}

/// One communicator's tuner (the plugin's context).
struct context {
    nccl_tuner tuner;
};

/// The (collective, size class, shape) keys already explained under SHUNT_LOG=decide.
struct explained_keys {
    std::mutex mutex;
    std::set<std::tuple<int, int, std::int64_t, std::int64_t>> seen;
};

void explain(const nccl_tuning& d, const nccl_shape& shape) noexcept {
    if (d.verdict == nccl_verdict::no_table || d.verdict == nccl_verdict::pipelined) return;
    if (!log_enabled(log_level::debug, log_category::decide)) return;
    try {
        static explained_keys keys;
        {
            std::lock_guard lock(keys.mutex);
            if (!keys.seen.emplace(d.coll, nccl_size_class(d.bytes), shape.ranks, shape.nodes).second) return;
        }
        log_debug(log_category::decide, "%s", nccl_tuning_text(d, shape).c_str());
    } catch (...) {}
}

abi::result_t tuner_init(void** ctx, std::uint64_t, std::size_t n_ranks, std::size_t n_nodes, abi::logger_t log,
                         abi::nvl_domain_info_v5*, abi::tuner_constants_v5*) noexcept {
    if (ctx == nullptr) return abi::success;
    *ctx = nullptr;
    try {
        log_config_warnings();
        const nccl_shape shape{static_cast<std::int64_t>(n_ranks), static_cast<std::int64_t>(n_nodes)};
        std::string note;
        if (config().disable) {
            note = "SHUNT_DISABLE=1";
        } else if (const loaded_model& m = process_model(); !m.model) {
            note = m.note;
        } else {
            auto c = std::make_unique<context>(context{nccl_tuner(*m.model, shape)});
            note = std::to_string(c->tuner.tables()) + " measured tables for " + shape.text() + " (" + m.note + ")";
            if (c->tuner.tables() > 0) *ctx = c.release();
        }
        if (*ctx == nullptr) note += ": NCCL keeps its own choices";
        log_info(log_category::init, "NCCL tuner: %s", note.c_str());
        if (log != nullptr)
            log(abi::log_info, abi::log_init | abi::log_tuning, __FILE__, __LINE__, "TUNER/shunt: %s", note.c_str());
    } catch (...) {
        delete static_cast<context*>(*ctx);
        *ctx = nullptr;
    }
    return abi::success;  // an error here would fail NCCL's communicator
}

abi::result_t tuner_get_coll_info(void* ctx, int coll, std::size_t bytes, int pipe_ops, float** cost, int num_algo,
                                  int num_proto, int, int*) noexcept {
    if (ctx == nullptr || cost == nullptr) return abi::success;
    const auto* c = static_cast<const context*>(ctx);
    // NCCL passes its float[num_algo][num_proto] array cast to float**: the floats are contiguous.
    const nccl_tuning d = c->tuner.tune(coll, bytes, pipe_ops, reinterpret_cast<float*>(cost), num_algo, num_proto);
    explain(d, c->tuner.shape());
    return abi::success;  // an error here would fail NCCL's call; the channel count stays NCCL's
}

abi::result_t tuner_finalize(void* ctx) noexcept {
    delete static_cast<context*>(ctx);
    return abi::success;
}

}  // namespace
}  // namespace shunt::detail

// The one exported symbol: NCCL looks it up by name (dlsym) in the library NCCL_TUNER_PLUGIN names.
extern "C" {
__attribute__((visibility("default"))) extern const shunt::detail::nccl_abi::tuner_v5 ncclTunerPlugin_v5;
const shunt::detail::nccl_abi::tuner_v5 ncclTunerPlugin_v5 = {
    "shunt", &shunt::detail::tuner_init, &shunt::detail::tuner_get_coll_info, &shunt::detail::tuner_finalize};
}
