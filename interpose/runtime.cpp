// interpose/runtime.cpp: what the MPI shims delegate to: init/finalize, type tracking, the pack fast path, the report.
#include "runtime.hpp"

#include <shunt/errors.hpp>
#include <shunt/gpu/memory.hpp>
#include <shunt/log.hpp>
#include <shunt/model/file.hpp>
#include <shunt/model/measure.hpp>
#include <shunt/model/model.hpp>
#include <shunt/pack/host.hpp>
#include <shunt/plan/planner.hpp>

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

/// A datatype handle for messages: a pointer (Open MPI) or an integer (MPICH).
template <class Handle>
std::string handle_text(Handle t) {
    char buf[32];
    if constexpr (std::is_pointer_v<Handle>)
        std::snprintf(buf, sizeof buf, "%p", static_cast<const void*>(t));
    else
        std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(static_cast<unsigned>(t)));
    return buf;
}

template <class... Args>
std::string format_text(const char* fmt, Args... args) {
    char buf[160];
    const int n = std::snprintf(buf, sizeof buf, fmt, args...);
    return std::string(buf, n < 0 ? 0 : std::min<std::size_t>(static_cast<std::size_t>(n), sizeof buf - 1));
}

const char* thread_level_name(int level) {
    switch (level) {
        case MPI_THREAD_SINGLE: return "single";
        case MPI_THREAD_FUNNELED: return "funneled";
        case MPI_THREAD_SERIALIZED: return "serialized";
        case MPI_THREAD_MULTIPLE: return "multiple";
        default: return "unknown";
    }
}

/// Communicators valid from MPI_Init to MPI_Finalize without asking the library.
bool always_valid(MPI_Comm comm) { return comm == MPI_COMM_WORLD || comm == MPI_COMM_SELF; }

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
    : cfg_(cfg), model_(load_runtime_model(cfg, model_note_)), planner_(model_, {pack_kind::name(cfg.pack)}) {}

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
    start_p2p();
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
    state_.compare_exchange_strong(expected, state::running);
    return state_.load(std::memory_order_acquire) == state::running;
}

int runtime::init(int* argc, char*** argv) noexcept {
    count(shim::init);
    const int rc = PMPI_Init(argc, argv);
    if (rc == MPI_SUCCESS) {
        int level = -1;
        PMPI_Query_thread(&level);
        state_.store(state::running, std::memory_order_release);
        started(level);
    }
    return rc;
}

int runtime::init_thread(int* argc, char*** argv, int required, int* provided) noexcept {
    count(shim::init_thread);
    const int rc = PMPI_Init_thread(argc, argv, required, provided);
    if (rc == MPI_SUCCESS) {
        state_.store(state::running, std::memory_order_release);
        started(provided != nullptr ? *provided : -1);
    }
    return rc;
}

int runtime::finalize() noexcept {
    count(shim::finalize);
    if (running()) {
        drain_p2p();  // requests freed while active complete before the pools go
        report();
    }
    // From here on every call goes to the library, which reports use after finalize itself.
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
    memo_.changed();
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
    memo_.changed();
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
        memo_.changed();
    }
    return PMPI_Type_free(type);
}

/// The sampling state of one direction on one thread.
struct runtime::sample_state {
    std::uint64_t rng = 0x9E3779B97F4A7C15ull;  // xorshift64; any nonzero seed
    std::uint32_t countdown = sample_period;  // calls to the next sampled one, this one included
    std::uint32_t burst_left = 0;
};

runtime::sample_state& runtime::sample_states(direction d) noexcept {
    thread_local sample_state states[2];
    return states[d == direction::unpack ? 1 : 0];
}

inline runtime::sampling runtime::next_sample(direction d) noexcept {
    sample_state& st = sample_states(d);
    if (st.countdown > 1) [[likely]] {
        --st.countdown;
        return sampling::none;
    }
    return sample_now(st);
}

/// The next number of the state's xorshift64 sequence.
std::uint64_t runtime::next_random(sample_state& st) noexcept {
    st.rng ^= st.rng << 13;
    st.rng ^= st.rng >> 7;
    st.rng ^= st.rng << 17;
    return st.rng;
}

runtime::sampling runtime::sample_now(sample_state& st) noexcept {
    if (st.burst_left > 0) {
        st.countdown = --st.burst_left > 0 ? 1 : next_gap(st);
        return st.burst_left > 0 ? sampling::explore : sampling::explore_timed;
    }
    if (((next_random(st) >> 32) & (explore_period - 1)) != 0) {
        st.countdown = next_gap(st);
        return sampling::timed;
    }
    st.burst_left = explore_burst - 1;
    st.countdown = 1;
    return sampling::explore;
}

std::uint32_t runtime::next_gap(sample_state& st) noexcept {
    // Random gaps, not every n-th call: a program that alternates packing and unpacking, or
    // cycles through a few types, would otherwise have the same call sampled every time and the
    // others never. Uniform in [1, 2 sample_period - 1], sample_period on average.
    return 1 + static_cast<std::uint32_t>((next_random(st) >> 8) % (2 * sample_period - 1));
}

void runtime::observe(bool library, direction d, const pack_plan& plan, double seconds) noexcept {
    if (plan.blocks <= 0 || plan.bytes <= 0) return;
    try {
        const double block_len = static_cast<double>(plan.bytes) / static_cast<double>(plan.blocks);
        model_->observe(table_names::pack(library, d == direction::unpack, std::llround(block_len)),
                        static_cast<double>(plan.bytes), seconds);
    } catch (...) {}
}

void runtime::measured(direction d, MPI_Datatype type, int count, const pack_plan& plan, double seconds) noexcept {
    try {
        if (!planner_.record(plan.measure, seconds) || !cfg_.log.enabled(log_level::debug, log_category::decide))
            return;
        const plan_decision pd = planner_.decision(plan.measure.key);
        const shim s = d == direction::pack ? shim::pack : shim::unpack;
        log_debug(log_category::decide,
                  "%s of %d x %s (%" PRId64 " bytes in %" PRId64 " blocks over %" PRId64
                  " bytes): %s (measured library %.3g us, "
                  "shunt's host packer %.3g us%s)",
                  shim_names[static_cast<std::size_t>(s)], count, handle_text(type).c_str(), pd.bytes, pd.blocks,
                  plan.measure.key.span, pd.method() == "host" ? "shunt's host packer" : "the library",
                  pd.measured_s[0] * 1e6, pd.measured_s[1] * 1e6,
                  pd.measuring             ? "; a second look follows"
                  : plan.measure.look == 1 ? "; second look"
                                           : "");
    } catch (...) {}
}

int runtime::pack_size(int incount, MPI_Datatype type, MPI_Comm comm, int* size) noexcept {
    count(shim::pack_size);
    return PMPI_Pack_size(incount, type, comm, size);
}

/// What prepare keeps of the thread's last settled call in one direction, keyed by the datatype
/// handle and count and valid while no datatype was committed, duplicated or freed (the memo's
/// generation: a new type at a reused handle does not match) and the model is unchanged: the
/// decoded type (held, so that the program's block list outlives a free), the decision, and
/// where shunt packs a non-dense layout the built program. A repeated call (the common case: one
/// halo type packed step after step) then skips the type lookup, the planner's lock and hash,
/// and building the program. With the hit inlined into transfer and next_sample a countdown,
/// shunt's own instructions per repeated 4 KiB pack of 256-byte rows fell from about 590 to 315
/// (cachegrind; 290 with the counters inlined), and on a Zen 3 (Open MPI 4.1.4; best of 300
/// interleaved trials, four runs) such packs ran 0.94-1.11x the library's speed (before:
/// 0.82-0.85x), unpacks 1.05-1.11x (0.80-0.86x), and 4 KiB packs of 16-byte rows 5.6-6.1x
/// (4.8-5.0x).
struct runtime::repeat_call {
    MPI_Datatype type{};
    int count = -1;  ///< -1: nothing kept
    std::uint64_t types = 0, generation = 0;
    std::shared_ptr<const type_info> info;
    std::int64_t bytes = 0, blocks = 0;
    std::atomic<std::uint64_t>* taken = nullptr;  ///< the planner's use count (SHUNT_REPORT)
    pass_reason why = pass_reason::none;
    bool decided = false, measured = false;
    std::optional<pack_program> program;
};

struct runtime::repeat_calls {
    repeat_call calls[2];  ///< pack, unpack
};

runtime::repeat_call* runtime::kept_call(direction d) noexcept {
    repeat_calls* const repeats = repeats_.get();
    return repeats == nullptr ? nullptr : &repeats->calls[d == direction::unpack ? 1 : 0];
}

inline pass_reason runtime::prepare(direction d, MPI_Datatype type, int count, std::int64_t room,
                                    const type_info*& info, std::int64_t& bytes, pack_plan& plan,
                                    const pack_program*& program) noexcept {
    program = nullptr;
    if (const repeat_call* const kept = kept_call(d); kept != nullptr) [[likely]] {
        const repeat_call& r = *kept;
        if (r.type == type && r.count == count && r.types == memo_.generation() &&
            r.generation == model_->generation()) {
            info = r.info.get();
            bytes = r.bytes;
            if (bytes > room) return pass_reason::would_truncate;
            // The use count only feeds SHUNT_REPORT: without a report, no shared line is written.
            if (r.taken != nullptr && cfg_.report != report_mode::off) r.taken->fetch_add(1, std::memory_order_relaxed);
            // Field by field: plan comes default-initialised (not measuring), and rewriting its
            // measure_call cost about six more instructions a call.
            plan.bytes = bytes;
            plan.blocks = r.blocks;
            plan.decided = r.decided;
            plan.measured = r.measured;
            if (r.program) program = &*r.program;
            return r.why;
        }
    }
    return decide(d, type, count, room, info, bytes, plan, program);
}

pass_reason runtime::decide(direction d, MPI_Datatype type, int count, std::int64_t room, const type_info*& info,
                            std::int64_t& bytes, pack_plan& plan, const pack_program*& program) noexcept {
    const shim s = d == direction::pack ? shim::pack : shim::unpack;
    try {
        // Both generations before the lookup: a commit or refinement meanwhile leaves the kept
        // call stale rather than current.
        const std::uint64_t types = memo_.generation();
        const std::uint64_t generation = model_->generation();
        repeat_call* const r = kept_call(d);
        std::shared_ptr<const type_info> held = memo_.find_shared(type);
        info = held.get();
        if (info == nullptr) return pass_reason::unknown_type;
        if (__builtin_mul_overflow(static_cast<std::int64_t>(count), info->size, &bytes)) return pass_reason::too_large;
        if (bytes > room) return pass_reason::would_truncate;
        if (bytes == 0) return pass_reason::none;
        pass_reason why = pass_reason::none;
        std::atomic<std::uint64_t>* taken = nullptr;
        bool keep = !cfg_.log.enabled(log_level::trace, log_category::decide);  // trace logs every call's decision
        // One contiguous run is one memcpy for shunt and for the library alike: nothing to decide
        // or measure, and shunt's copy skips the library's own per-call work. (With the planner's
        // lookups, 64 KiB contiguous packs ran 0.97-0.98x the library; without, 0.99-1.00x.)
        const bool dense = info->dense(count);
        if (cfg_.pack != pack_choice::host && !dense) {
            bool is_new = false;
            planner::measure_call measure;
            const plan_decision decision = planner_.pack(*info, count, d == direction::unpack, &is_new, &taken,
                                                         cfg_.pack == pack_choice::model ? nullptr : &measure);
            plan = {bytes, decision.blocks, true, decision.measured, measure};
            // While the planner measures the key, it names this call's method, and nothing is kept.
            const bool host = measure.measuring ? decision.alternatives[measure.method].method == "host"
                                                : decision.method() == "host";
            keep = keep && !measure.measuring && taken != nullptr;
            why = host ? pass_reason::none : pass_reason::planned;
            // Each distinct decision once at debug (SHUNT_LOG=decide), every call at trace.
            if (cfg_.log.enabled(is_new ? log_level::debug : log_level::trace, log_category::decide)) {
                std::string alternatives;
                for (std::uint8_t i = 0; i < decision.count; ++i)
                    alternatives += format_text(
                        "%s%.*s %.3g us", i == 0 ? "" : ", ", static_cast<int>(decision.alternatives[i].method.size()),
                        decision.alternatives[i].method.data(), decision.alternatives[i].predicted_s * 1e6);
                log_printf(is_new ? log_level::debug : log_level::trace, log_category::decide,
                           "%s of %d x %s (%" PRId64 " bytes in %" PRId64 " blocks): %s (predicted %s)",
                           shim_names[static_cast<std::size_t>(s)], count, handle_text(type).c_str(), bytes,
                           decision.blocks, host ? "shunt's host packer" : "the library", alternatives.c_str());
            }
        }
        if (r != nullptr) {
            r->count = -1;
            r->program.reset();
            if (keep) {
                r->type = type;
                r->types = types;
                r->generation = generation;
                r->info = std::move(held);
                r->bytes = bytes;
                r->blocks = plan.blocks;
                r->taken = taken;
                r->why = why;
                r->decided = plan.decided;
                r->measured = plan.measured;
                r->count = count;
                // A program that cannot be built (a size shunt refuses) is left to pack_host,
                // which fails the same way on this call and passes it to the library.
                if (why == pass_reason::none && !dense) try {
                        program = &r->program.emplace(info->form, info->extent, count, info->size);
                    } catch (...) {
                        r->count = -1;
                        program = nullptr;
                    }
            }
        }
        return why;
    } catch (...) {
        return plan_failure(s);
    }
}

template <class Pass, class Probe, class Move>
int runtime::transfer(direction d, MPI_Datatype type, int count, std::int64_t room, int* position, MPI_Comm comm,
                      Pass pass, Probe probe, Move move) noexcept {
    const shim s = d == direction::pack ? shim::pack : shim::unpack;
    const char* name = shim_names[static_cast<std::size_t>(s)];
    if (cfg_.pack == pack_choice::library) return pass(pass_reason::forced);
    if (!always_valid(comm)) {
        // The null communicator and types shunt does not know go to the library whole, which
        // raises any error through the application's handler once: MPICH 4.3 and later return
        // MPI_SUCCESS from a call whose error went to a handler of the application's that
        // returned, so the probe below cannot tell them and would raise the error twice.
        if (comm == MPI_COMM_NULL) return pass(pass_reason::rejected);
        const type_info* known = nullptr;
        try {
            known = memo_.find(type);
        } catch (...) {}
        if (known == nullptr) return pass(pass_reason::unknown_type);
        // Zero elements: the library checks the communicator and the datatype exactly as for the
        // real call (the count-dependent checks are done by the caller and below) and moves nothing.
        const int rc = probe();
        if (rc != MPI_SUCCESS) {
            count_pass(d, pass_reason::rejected);
            return rc;
        }
    }
    const type_info* info = nullptr;
    std::int64_t bytes = 0;
    pack_plan plan;  // small: a plan_decision here cost a 136-byte clear on every call
    const pack_program* program = nullptr;
    pass_reason why = prepare(d, type, count, room, info, bytes, plan, program);
    // One call in sample_period (at random) is timed to refine the model; one sample in explore_period
    // starts a burst of explore_burst calls that run the method the plan did not choose (the
    // bytes are the same), so that the estimate of the method not taken keeps learning too and
    // a wrong choice can turn back. Only the burst's last call is timed: a method that ran
    // hundreds of calls ago starts with cold caches and predictors, and one cold call would
    // overstate its cost several times over.
    // A call the planner is measuring the key with runs the method it names, and is not sampled.
    const bool measuring = plan.measure.measuring && (why == pass_reason::planned || why == pass_reason::none);
    sampling sample = plan.decided && !measuring && (why == pass_reason::planned || why == pass_reason::none)
                          ? next_sample(d)
                          : sampling::none;
    // A key decided from its own measured times keeps its method: a burst only times it.
    if (plan.measured && sample == sampling::explore) sample = sampling::none;
    if (plan.measured && sample == sampling::explore_timed) sample = sampling::timed;
    if (sample == sampling::explore || sample == sampling::explore_timed)
        why = why == pass_reason::planned ? pass_reason::none : pass_reason::planned;
    const bool timed = sample == sampling::timed || sample == sampling::explore_timed;
    const bool clocked = timed || (measuring && plan.measure.timed);
    if (why == pass_reason::planned && clocked) {  // the library's time refines the model too
        const double t0 = detail::now_s();
        const int rc = pass(measuring ? pass_reason::measuring : why);
        if (rc == MPI_SUCCESS) {
            const double took = detail::now_s() - t0;
            if (timed) observe(true, d, plan, took);
            if (measuring) measured(d, type, count, plan, took);
        }
        return rc;
    }
    if (why != pass_reason::none) return pass(measuring && why == pass_reason::planned ? pass_reason::measuring : why);
    if (bytes > 0) {
        try {
            const double t0 = clocked ? detail::now_s() : 0;
            const std::int64_t done = move(*info, program);
            if (clocked) {
                const double took = detail::now_s() - t0;
                if (timed) observe(false, d, plan, took);
                if (measuring && done == bytes) measured(d, type, count, plan, took);
            }
            if (done != bytes)
                throw error(std::string(name) + " moved " + std::to_string(done) + " of " + std::to_string(bytes) +
                            " bytes");
        } catch (const unsupported& e) {
            log_debug(log_category::pack, "%s: %s; left to the library", name, e.what());
            return pass(pass_reason::too_large);
        } catch (const std::exception& e) {
            internal_failure(s, e.what());
            return pass(pass_reason::internal);  // the library moves the same bytes again
        } catch (...) {
            internal_failure(s, "unknown exception");
            return pass(pass_reason::internal);
        }
    }
    *position += static_cast<int>(bytes);
    count_done(d, bytes);
    if (cfg_.log.enabled(log_level::trace, log_category::pack))  // not formatting the handle on every call
        log_trace(log_category::pack, "%s %d x %s: %" PRId64 " bytes by shunt", name, count, handle_text(type).c_str(),
                  bytes);
    return MPI_SUCCESS;
}

int runtime::pack(const void* inbuf, int incount, MPI_Datatype type, void* outbuf, int outsize, int* position,
                  MPI_Comm comm) noexcept {
    count(shim::pack);
    const auto pass = [&](pass_reason why) {
        count_pass(direction::pack, why);
        return PMPI_Pack(inbuf, incount, type, outbuf, outsize, position, comm);
    };
    if (!running()) return pass(pass_reason::not_running);
    // A null inbuf (MPI_BOTTOM) always goes to the library: Open MPI accepts it for types at
    // absolute addresses, MPICH 4.0 rejects it for any type.
    if (position == nullptr || inbuf == nullptr || outbuf == nullptr || incount < 0 || outsize < 0 || *position < 0)
        return pass(pass_reason::bad_argument);
    if (int rc = 0;
        devices_.load(std::memory_order_relaxed) && device_pack(direction::pack, inbuf, outbuf, incount, type,
                                                                std::int64_t{outsize} - *position, position, comm, rc))
        return rc;
    return transfer(
        direction::pack, type, incount, std::int64_t{outsize} - *position, position, comm, pass,
        [&] {
            int probe = *position;
            return PMPI_Pack(inbuf, 0, type, outbuf, outsize, &probe, comm);
        },
        [&](const type_info& t, const pack_program* program) {
            std::byte* const out = static_cast<std::byte*>(outbuf) + *position;
            return program != nullptr ? run_program<true>(*program, reinterpret_cast<std::uintptr_t>(inbuf), out)
                                      : pack_host(t, incount, inbuf, out);
        });
}

int runtime::unpack(const void* inbuf, int insize, int* position, void* outbuf, int outcount, MPI_Datatype type,
                    MPI_Comm comm) noexcept {
    count(shim::unpack);
    const auto pass = [&](pass_reason why) {
        count_pass(direction::unpack, why);
        return PMPI_Unpack(inbuf, insize, position, outbuf, outcount, type, comm);
    };
    if (!running()) return pass(pass_reason::not_running);
    if (position == nullptr || inbuf == nullptr || outbuf == nullptr || insize < 0 || outcount < 0 || *position < 0)
        return pass(pass_reason::bad_argument);  // MPI_BOTTOM as outbuf too: see pack()
    if (int rc = 0;
        devices_.load(std::memory_order_relaxed) && device_pack(direction::unpack, inbuf, outbuf, outcount, type,
                                                                std::int64_t{insize} - *position, position, comm, rc))
        return rc;
    return transfer(
        direction::unpack, type, outcount, std::int64_t{insize} - *position, position, comm, pass,
        [&] {
            int probe = *position;
            return PMPI_Unpack(inbuf, insize, &probe, outbuf, 0, type, comm);
        },
        [&](const type_info& t, const pack_program* program) {
            const std::byte* const in = static_cast<const std::byte*>(inbuf) + *position;
            return program != nullptr ? run_program<false>(*program, reinterpret_cast<std::uintptr_t>(outbuf),
                                                           const_cast<std::byte*>(in))
                                      : unpack_host(t, outcount, in, outbuf);
        });
}

}  // namespace shunt::detail
