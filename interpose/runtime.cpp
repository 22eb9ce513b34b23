// interpose/runtime.cpp: the runtime's state and lifecycle: construction, MPI_Init/MPI_Finalize, datatype tracking, failure reporting.
#include "runtime.hpp"

#include <shunt/errors.hpp>
#include <shunt/gpu/memory.hpp>
#include <shunt/log.hpp>
#include <shunt/model/file.hpp>
#include <shunt/model/measure.hpp>
#include <shunt/model/model.hpp>
#include <shunt/pack/host.hpp>
#include <shunt/plan/planner.hpp>

#include "flow.hpp"
#include "text.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <type_traits>

#ifndef SHUNT_VERSION
#define SHUNT_VERSION "unknown"
#endif

namespace shunt::detail {
namespace {

const char* thread_level_name(int level) {
    switch (level) {
        case MPI_THREAD_SINGLE: return "single";
        case MPI_THREAD_FUNNELED: return "funneled";
        case MPI_THREAD_SERIALIZED: return "serialized";
        case MPI_THREAD_MULTIPLE: return "multiple";
        default: return "unknown";
    }
}

/// The measured model from SHUNT_MODEL or the default location, else the built-in one; `note`
/// says why the file was not used. A missing default file is the normal case and says nothing.
std::shared_ptr<cost_model> load_runtime_model(const settings& cfg, std::string& note) {
    const model_identity me = current_identity(gpu::current_device_name());
    const std::string path = resolve_model_path(cfg.model, process_environment(), me);
    if (!path.empty()) {
        auto r = load_model(path, &me);
        if (r.model) return std::make_shared<cost_model>(std::move(*r.model));
        if (!r.missing || !cfg.model.empty()) note = r.problem + "; using the built-in model";
    }
    auto m = std::make_shared<cost_model>();
    m->id = me;
    return m;
}

}  // namespace

runtime::runtime(const settings& cfg)
    : cfg_(cfg),
      model_(load_runtime_model(cfg, model_note_)),
      planner_(model_, overrides_of(cfg.pack)),
      counting_(cfg.report != report_mode::off) {
    if (counting_) fast_gate::block(fast_gate::counting);
}

runtime* runtime::create() noexcept {
    try {
        const settings& cfg = config();
        if (cfg.disable) return nullptr;
        return new runtime(cfg);  // never deleted: shims may run during static destruction
    } catch (const std::exception& e) {
        log_error(log_category::init, "cannot start (%s); every call goes to the MPI library", e.what());
    } catch (...) {
        log_error(log_category::init, "cannot start; every call goes to the MPI library");
    }
    return nullptr;
}

void runtime::internal_failure(shim s, const char* what) noexcept {
    if (failure_logged_[static_cast<std::size_t>(s)].exchange(true)) return;
    const log_category category = s == shim::pack || s == shim::unpack ? log_category::pack
                                  : s == shim::type_commit || s == shim::type_dup || s == shim::type_free
                                      ? log_category::type
                                      : log_category::init;
    log_warn(category, "internal failure in %s (%s); the call goes to the MPI library (reported once)",
             shim_names[static_cast<std::size_t>(s)], what);
}

pass_reason runtime::plan_failure(shim s) noexcept {
    try {
        throw;
    } catch (const unsupported& e) {
        log_debug(log_category::pack, "%s: %s; left to the library", shim_names[static_cast<std::size_t>(s)], e.what());
        return pass_reason::too_large;
    } catch (const std::exception& e) {
        internal_failure(s, e.what());
    } catch (...) {
        internal_failure(s, "unknown exception");
    }
    return pass_reason::internal;
}

void runtime::started(int thread_level) noexcept {
    if (started_.exchange(true)) return;
    int rank = -1;
    if (PMPI_Comm_rank(MPI_COMM_WORLD, &rank) == MPI_SUCCESS) set_log_rank(rank);
    log_config_warnings();
    log_config_echo();
    log_flow_lanes();
    devices_.start(cfg_);
    if (rank == 0 && !model_note_.empty()) log_warn(log_category::config, "%s", model_note_.c_str());
    if (rank == 0)
        log_info(log_category::config, "cost model: %zu measured tables (%s)", model_->tables().size(),
                 model_->tables().empty() ? "built-in analytic defaults" : model_->id.host.c_str());
    if (rank == 0 && log_enabled(log_level::info, log_category::init)) {
        int size = 0;
        PMPI_Comm_size(MPI_COMM_WORLD, &size);
        char version[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
        int len = 0;
        PMPI_Get_library_version(version, &len);
        std::string first_line(version, static_cast<std::size_t>(len > 0 ? len : 0));
        first_line = first_line.substr(0, first_line.find_first_of("\r\n,"));
        log_info(log_category::init, "shunt %s active on %d ranks, thread level %s, over %s", SHUNT_VERSION, size,
                 thread_level < 0 ? "unknown" : thread_level_name(thread_level), first_line.c_str());
    }
}

bool runtime::start_running() noexcept {
    const state s = state_.load(std::memory_order_acquire);
    if (s != state::before) return s == state::running;
    // MPI may have been started behind the shims (PMPI_Init, a Fortran binding).
    int initialized = 0, finalized = 0;
    if (PMPI_Initialized(&initialized) != MPI_SUCCESS || !initialized) return false;
    if (PMPI_Finalized(&finalized) != MPI_SUCCESS || finalized) return false;
    int level = -1;
    PMPI_Query_thread(&level);
    started(level);
    state expected = state::before;
    if (state_.compare_exchange_strong(expected, state::running)) fast_gate::unblock(fast_gate::not_running);
    return state_.load(std::memory_order_acquire) == state::running;
}

void runtime::keep_tuner(std::shared_ptr<collective_tuner> t) {
    std::lock_guard lock(records_mutex_);
    std::erase_if(tuners_, [](const std::shared_ptr<collective_tuner>& k) { return k.use_count() == 1 && k->empty(); });
    tuners_.push_back(std::move(t));
}

void runtime::keep_w_record(std::shared_ptr<w_record> r) noexcept {
    try {
        const std::lock_guard lock(records_mutex_);
        w_records_.push_back(std::move(r));
    } catch (...) {  // no memory: the report goes without this decision
    }
}

int runtime::init(int* argc, char*** argv) noexcept {
    count(shim::init);
    prepare_flow_lanes(cfg_);  // the library reads its knobs in PMPI_Init
    const int rc = PMPI_Init(argc, argv);
    if (rc == MPI_SUCCESS) {
        int level = -1;
        PMPI_Query_thread(&level);
        state_.store(state::running, std::memory_order_release);
        started(level);
        fast_gate::unblock(fast_gate::not_running);
        connect_flow_lanes();
    }
    return rc;
}

int runtime::init_thread(int* argc, char*** argv, int required, int* provided) noexcept {
    count(shim::init_thread);
    prepare_flow_lanes(cfg_);
    const int rc = PMPI_Init_thread(argc, argv, required, provided);
    if (rc == MPI_SUCCESS) {
        state_.store(state::running, std::memory_order_release);
        started(provided != nullptr ? *provided : -1);
        fast_gate::unblock(fast_gate::not_running);
        connect_flow_lanes();
    }
    return rc;
}

int runtime::finalize() noexcept {
    count(shim::finalize);
    if (running()) {
        nbc_.drain();  // every rank finishes shunt's schedules in flight before the library goes
        p2p_.drain();  // requests freed while active complete before the pools go
        report();
    }
    // From here on every call goes to the library, which reports use after finalize itself.
    fast_gate::block(fast_gate::not_running);
    state_.store(state::finalized, std::memory_order_release);
    return PMPI_Finalize();
}

void runtime::log_type(MPI_Datatype type, const char* event) noexcept {
    if (!log_enabled(log_level::debug, log_category::type)) return;
    try {
        const auto info = types_.find(type);
        if (info == nullptr) {
            log_debug(log_category::type, "%s %s: not supported by shunt, left to the library", event,
                      handle_text(type).c_str());
            return;
        }
        log_debug(log_category::type,
                  "%s %s: size %" PRId64 ", extent %" PRId64 " (lb %" PRId64 "), canonical form %zu dims x %zu blocks",
                  event, handle_text(type).c_str(), info->size, info->extent, info->lb, info->form.dims.size(),
                  info->form.blocks.size());
    } catch (...) {}
}

int runtime::type_commit(MPI_Datatype* type) noexcept {
    count(shim::type_commit);
    const int rc = PMPI_Type_commit(type);
    if (rc != MPI_SUCCESS || type == nullptr) return rc;
    try {
        types_.on_commit(*type);
        log_type(*type, "commit");
    } catch (const std::exception& e) {
        internal_failure(shim::type_commit, e.what());
    } catch (...) {
        internal_failure(shim::type_commit, "unknown exception");
    }
    types_changed();
    return rc;
}

int runtime::type_dup(MPI_Datatype oldtype, MPI_Datatype* newtype) noexcept {
    count(shim::type_dup);
    const int rc = PMPI_Type_dup(oldtype, newtype);
    if (rc != MPI_SUCCESS || newtype == nullptr) return rc;
    try {
        types_.on_dup(oldtype, *newtype);
        log_type(*newtype, "dup");
    } catch (const std::exception& e) {
        internal_failure(shim::type_dup, e.what());
    } catch (...) {
        internal_failure(shim::type_dup, "unknown exception");
    }
    types_changed();
    return rc;
}

int runtime::type_free(MPI_Datatype* type) noexcept {
    count(shim::type_free);
    if (type != nullptr && *type != MPI_DATATYPE_NULL) {
        // Forget the handle before the library may hand its value to a new type.
        try {
            types_.on_free(*type);
        } catch (const std::exception& e) {
            internal_failure(shim::type_free, e.what());
        } catch (...) {
            internal_failure(shim::type_free, "unknown exception");
        }
        types_changed();
    }
    return PMPI_Type_free(type);
}

}  // namespace shunt::detail
