// interpose/collectives.cpp: the collective executor: the entry points of MPI_Allreduce .. MPI_Alltoallv, the one path they share, the per-communicator topology and planner.
#include "collectives.hpp"

#include <shunt/collectives/allgather.hpp>
#include <shunt/collectives/allgatherv.hpp>
#include <shunt/collectives/allreduce.hpp>
#include <shunt/collectives/alltoall.hpp>
#include <shunt/collectives/alltoallv.hpp>
#include <shunt/collectives/bcast.hpp>
#include <shunt/collectives/reduce.hpp>
#include <shunt/collectives/reduce_scatter.hpp>
#include <shunt/collectives/reduce_scatter_block.hpp>
#include <shunt/errors.hpp>
#include <shunt/log.hpp>
#include <shunt/model/measure.hpp>

#include "device_stage.hpp"
#include "runtime.hpp"

#include <atomic>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <exception>
#include <new>
#include <string>

namespace shunt::detail {
namespace {

/// Changes whenever a context is deleted, so that per-thread lookups cached by communicator
/// handle (which the library may reuse for a new communicator) are dropped.
std::atomic<std::uint64_t> context_epoch{0};

int context_delete_fn(MPI_Comm, int, void* value, void*) {
    context_epoch.fetch_add(1, std::memory_order_acq_rel);
    delete static_cast<coll_executor::context*>(value);
    return MPI_SUCCESS;
}

int context_keyval() {
    static const int keyval = [] {
        int k = MPI_KEYVAL_INVALID;
        if (PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, &context_delete_fn, &k, nullptr) != MPI_SUCCESS)
            return static_cast<int>(MPI_KEYVAL_INVALID);
        return k;
    }();
    return keyval;
}

const char* method_text(coll_method m) { return m == coll_method::library ? "the library" : "shunt's schedule"; }

/// A type_source over the preload library's type cache and per-thread memo.
class memo_source final : public type_source {
public:
    memo_source(type_memo& memo, const type_cache& types) : memo_(memo), types_(types) {}
    const type_info* find(MPI_Datatype t) override { return memo_.find(t); }
    bool known(MPI_Datatype t) const override { return types_.known(t); }

private:
    type_memo& memo_;
    const type_cache& types_;
};

/// Said once when a topology cannot be built.
std::atomic<bool> topology_warned{false};

}  // namespace

// ---- entry points: one descriptor each (the form's describe), one path for all ----

#define SHUNT_COLL_ENTRY_(name, Name, params, args)                           \
    int runtime::name params noexcept {                                       \
        this->count(shim::name);                                              \
        return colls_.run<mpi_##name>(shim::name, mpi_##name::describe args); \
    }
SHUNT_MPI_COLL_CALLS(SHUNT_COLL_ENTRY_)
#undef SHUNT_COLL_ENTRY_

// ---- the one path ----

template <class Form>
int coll_executor::run(shim s, mpi_coll_args a) noexcept {
    if constexpr (Form::op == coll_op::allreduce || Form::op == coll_op::reduce_scatter_block ||
                  Form::op == coll_op::reduce_scatter) {
        compress_executor& c = rt_.compression();
        if (c.wanted()) {
            struct call {
                coll_executor* self;
                shim s;
                mpi_coll_args* a;
            } x{this, s, &a};
            return c.run(
                s, Form::op, a,
                [](void* p) noexcept {
                    auto* x = static_cast<call*>(p);
                    return x->self->template run_exact<Form>(x->s, *x->a);
                },
                &x);
        }
    }
    return run_exact<Form>(s, a);
}

template <class Form>
int coll_executor::run_exact(shim s, mpi_coll_args a) noexcept {
    const auto library = [&] { return Form::library(a); };
    const auto pass = [&](pass_reason why) {
        rt_.count_pass(direction::collective, why);
        return library();
    };
    if (!enabled(a.comm)) return pass(rt_.running() ? pass_reason::forced : pass_reason::not_running);
    mpi_coll_facts f;
    device_stage dev(rt_.devices().in_use(), rt_.devices().library_takes_device());
    try {
        std::int64_t key = -1;
        pass_reason why = Form::early(a, rt_.cfg().coll == coll_choice::measure, f, key);
        if (why != pass_reason::none) return pass(why);
        if (key >= 0 && settled_on_library(a.comm, Form::op, key, f.live)) return pass(pass_reason::planned);
        memo_source types(rt_.memo(), rt_.types());
        why = Form::check(a, types, f);
        if (why != pass_reason::none) return pass(why);
        if (dev.enabled()) {
            mpi_coll_spans spans;
            Form::spans(a, f, spans);
            for (const mpi_coll_span& b : spans) {
                if (b.send)
                    dev.add(a.sendbuf, b.span, b.in, b.out);
                else
                    dev.add(a.recvbuf, b.span, b.in, b.out);
            }
        }
    } catch (const std::exception& e) {
        // Before the planner's choice: what fails here (no memory, a device query) fails alike
        // on every rank, or comes of an erroneous call the library then judges.
        rt_.internal_failure(s, e.what());
        return pass(pass_reason::internal);
    }
    return collective(s, Form::op, a.comm, f.bytes, f.live, dev, library,
                      [&](const topology& topo, const collective_options& opt) { Form::run(topo, a, f, opt); });
}

coll_executor::context* coll_executor::existing_context(MPI_Comm comm) noexcept {
    struct last_lookup {
        MPI_Comm comm = MPI_COMM_NULL;
        context* ctx = nullptr;
        std::uint64_t epoch = 0;
    };
    static thread_local last_lookup last;
    const std::uint64_t epoch = context_epoch.load(std::memory_order_acquire);
    if (last.ctx != nullptr && last.comm == comm && last.epoch == epoch) return last.ctx;
    const int keyval = context_keyval();
    if (keyval == MPI_KEYVAL_INVALID) return nullptr;
    void* value = nullptr;
    int found = 0;
    if (PMPI_Comm_get_attr(comm, keyval, &value, &found) != MPI_SUCCESS || !found) return nullptr;
    last = {comm, static_cast<context*>(value), epoch};
    return last.ctx;
}

bool coll_executor::settled_on_library(MPI_Comm comm, coll_op op, std::int64_t bytes, bool live) noexcept {
    // Device buffers must be staged for a library that is not CUDA-aware: the whole way, then.
    if (rt_.devices().in_use() && !rt_.devices().library_takes_device()) return false;
    context* ctx = existing_context(comm);
    if (ctx == nullptr || !ctx->usable || ctx->tuner->settled(op, bytes, live) != coll_method::library) return false;
    ctx->tuner->count_settled(op, bytes, live);
    return true;
}

coll_executor::context* coll_executor::context_of(MPI_Comm comm) noexcept {
    if (context* known = existing_context(comm)) return known;
    const int keyval = context_keyval();
    if (keyval == MPI_KEYVAL_INVALID) return nullptr;
    void* value = nullptr;
    int found = 0;
    if (PMPI_Comm_get_attr(comm, keyval, &value, &found) != MPI_SUCCESS) return nullptr;  // the library will say why
    if (found) return static_cast<context*>(value);
    auto* ctx = new (std::nothrow) context;
    if (ctx == nullptr) return nullptr;
    int inter = 0, size = 0;
    if (PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || PMPI_Comm_size(comm, &size) != MPI_SUCCESS) {
        delete ctx;
        return nullptr;
    }
    if (size <= 1) ctx->why = pass_reason::empty;
    if (!inter && size > 1) {
        // Collective over comm: every rank gets here in the same call.
        try {
            ctx->topo = &topology::of(comm, rt_.cfg().topology);
            const bool measure = rt_.cfg().coll == coll_choice::automatic || rt_.cfg().coll == coll_choice::measure;
            ctx->tuner = std::make_shared<collective_tuner>(coll_shape::of(ctx->topo->groups()), measure ? 3 : 0);
            ctx->usable = true;
            rt_.keep_tuner(ctx->tuner);
            if (log_enabled(log_level::debug, log_category::decide) && ctx->topo->rank() == 0) {
                std::string text = ctx->topo->describe();
                while (!text.empty() && text.back() == '\n') text.pop_back();
                for (char& ch : text)
                    if (ch == '\n') ch = ';';
                log_debug(log_category::decide, "collectives on a communicator of %d ranks: %s", size, text.c_str());
            }
        } catch (const std::exception& e) {
            // Description errors are found alike on every rank, so all ranks fall back together.
            if (!topology_warned.exchange(true))
                log_warn(log_category::config, "cannot build the topology (%s); collectives go to the MPI library",
                         e.what());
            ctx->usable = false;
        }
    }
    if (PMPI_Comm_set_attr(comm, keyval, ctx) != MPI_SUCCESS) {
        delete ctx;
        return nullptr;
    }
    return ctx;
}

template <class Library, class Shunt>
int coll_executor::collective(shim s, coll_op op, MPI_Comm comm, std::int64_t bytes, bool live, device_stage& dev,
                              Library library, Shunt run) noexcept {
    const char* name = shim_names[static_cast<std::size_t>(s)];
    // The library, with device buffers staged where it cannot take them.
    const auto pass = [&](pass_reason why) {
        rt_.count_pass(direction::collective, why);
        try {
            return dev.run(true, library);
        } catch (const std::exception& e) {
            // Only the copies of device buffers can fail here: the other ranks are in the library's call.
            log_error(log_category::init, "%s: cannot stage device buffers for the library (%s)", name, e.what());
            PMPI_Comm_call_errhandler(comm, MPI_ERR_INTERN);
            return MPI_ERR_INTERN;
        }
    };
    context* ctx = context_of(comm);
    if (ctx == nullptr) return pass(pass_reason::bad_argument);
    if (!ctx->usable) return pass(ctx->why);
    MPI_Comm own = ctx->topo->comm();
    const collective_tuner::agree_fn agree = [own](double* v, int n) {
        SHUNT_CHECK_MPI(PMPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_MAX, own));
    };
    collective_tuner::pick pick;
    try {
        std::optional<coll_method> forced;
        if (rt_.cfg().coll == coll_choice::shunt) forced = coll_method::hierarchical;
        pick = ctx->tuner->choose(rt_.model(), op, bytes, forced, agree, live);
    } catch (const std::exception& e) {
        // Only the agreement can fail here, and an MPI failure there is the same on every rank.
        rt_.internal_failure(s, e.what());
        return pass(pass_reason::internal);
    }
    const double t0 = pick.timed ? now_s() : 0;
    int rc = MPI_SUCCESS;
    if (pick.method == coll_method::library) {
        rc = pass(pick.timed ? pass_reason::measuring : pass_reason::planned);
    } else {
        try {
            collective_options opt;
            opt.levels = pick.levels;
            dev.run(false, [&] {
                run(*ctx->topo, opt);
                return MPI_SUCCESS;
            });
            rt_.count_collective(s, bytes);
        } catch (const mpi_error& e) {
            // The other ranks are inside the same schedule: no way back to the library.
            log_error(log_category::init, "%s: %s", name, e.what());
            PMPI_Comm_call_errhandler(comm, e.code());
            return e.code();
        } catch (const std::exception& e) {
            log_error(log_category::init, "%s: shunt failed inside its schedule (%s)", name, e.what());
            PMPI_Comm_call_errhandler(comm, MPI_ERR_INTERN);
            return MPI_ERR_INTERN;
        }
    }
    if (pick.timed && rc == MPI_SUCCESS) {
        try {
            if (ctx->tuner->record(op, bytes, pick.method, now_s() - t0, agree))
                log_decision(*ctx, op, bytes, live, name);
        } catch (const std::exception& e) {
            rt_.internal_failure(s, e.what());
        }
    } else if (pick.fresh) {
        log_decision(*ctx, op, bytes, live, name);
    }
    return rc;
}

void coll_executor::log_decision(const context& ctx, coll_op op, std::int64_t bytes, bool live,
                                 const char* name) noexcept {
    // The decision is the same on every rank: rank 0 of the communicator says it.
    if (!rt_.cfg().log.enabled(log_level::debug, log_category::decide) || ctx.topo->rank() != 0) return;
    const int size_class = collective_tuner::size_class(bytes);
    ctx.tuner->for_each([&](const coll_decision& d) {
        if (d.op != op || d.size_class != size_class || d.live != live) return;
        std::string how;
        for (std::size_t m = 0; m < coll_method_count; ++m) {
            char buf[96];
            if (std::isnan(d.measured[m]))
                std::snprintf(buf, sizeof buf, "%s%s predicted %.3g us", m ? ", " : "", coll_method_names[m].data(),
                              d.predicted[m] * 1e6);
            else
                std::snprintf(buf, sizeof buf, "%s%s measured %.3g us", m ? ", " : "", coll_method_names[m].data(),
                              d.measured[m] * 1e6);
            how += buf;
        }
        const coll_shape& shape = ctx.tuner->shape();
        const std::string over = d.method == coll_method::hierarchical && !shape.level_names.empty()
                                     ? " " + shape.schedule_text(d.levels)
                                     : "";
        if (d.level_predictions.size() > 1) {
            how += "; shunt's levels predicted:";
            for (const auto& [set, t] : d.level_predictions) {
                char buf[96];
                std::snprintf(buf, sizeof buf, " %s %.3g us", shape.levels_text(set).c_str(), t * 1e6);
                how += buf;
            }
        }
        log_debug(log_category::decide, "%s of %" PRId64 " bytes on %s: %s%s%s%s (%s)", name, bytes,
                  shape.signature().c_str(), method_text(d.method), over.c_str(), d.forced ? " (forced)" : "",
                  d.live            ? ""
                  : d.latency_bound ? " (floating-point, latency-bound: kept)"
                                    : " (floating-point: from the model)",
                  how.c_str());
    });
}

bool coll_executor::enabled(MPI_Comm comm) noexcept {
    return rt_.running() && rt_.cfg().coll != coll_choice::library && comm != MPI_COMM_NULL;
}

}  // namespace shunt::detail
