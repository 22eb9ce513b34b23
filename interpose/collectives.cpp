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

#include "coll_kept.hpp"
#include "device_stage.hpp"
#include "runtime.hpp"

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace shunt::detail {
namespace {

int context_delete_fn(MPI_Comm, int, void* value, void*) {
    context_epoch.fetch_add(1, std::memory_order_acq_rel);
    fast_gate::advance();  // kept collectives on the communicator go stale
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

/// True for the datatypes MPI predefines (their handles are valid for the whole run).
bool predefined(MPI_Datatype t) {
    int ints = 0, addrs = 0, types = 0, combiner = MPI_COMBINER_NAMED;
    return t == MPI_DATATYPE_NULL || (PMPI_Type_get_envelope(t, &ints, &addrs, &types, &combiner) == MPI_SUCCESS &&
                                      combiner == MPI_COMBINER_NAMED);
}

/// What a nonblocking or persistent schedule holds on to after its call returns: duplicates of
/// the application's derived datatypes (it may free its own handles meanwhile, as MPI allows)
/// and shunt's decoded forms of them.
struct call_hold {
    std::vector<MPI_Datatype> dups;
    std::shared_ptr<const type_info> send_info, recv_info;
    call_hold() = default;
    call_hold(const call_hold&) = delete;
    call_hold& operator=(const call_hold&) = delete;
    ~call_hold() {
        int finalized = 1;
        if (PMPI_Finalized(&finalized) != MPI_SUCCESS || finalized) return;
        for (MPI_Datatype& t : dups) PMPI_Type_free(&t);
    }
    /// Points `a` at duplicates of its derived datatypes and `f` at held decoded forms.
    void take(mpi_coll_args& a, mpi_coll_facts& f, type_memo& memo) {
        const auto dup = [&](MPI_Datatype& t) {
            if (predefined(t)) return;
            MPI_Datatype d = MPI_DATATYPE_NULL;
            SHUNT_CHECK_MPI(PMPI_Type_dup(t, &d));
            dups.push_back(d);
            t = d;
        };
        const auto hold = [&](MPI_Datatype t, detail::type_facts& facts, std::shared_ptr<const type_info>& info) {
            if (facts.info == nullptr) return;
            info = memo.find_shared(t);
            if (info.get() != facts.info) throw error("a datatype's decoded form changed during the call");
            facts.info = info.get();
        };
        hold(a.recvtype, f.rt, recv_info);
        if (a.sendbuf == MPI_IN_PLACE)
            f.st.info = f.rt.info;
        else
            hold(a.sendtype, f.st, send_info);
        dups.reserve(2);
        const MPI_Datatype recv = a.recvtype;
        dup(a.recvtype);
        if (a.sendbuf == MPI_IN_PLACE) return;  // the send type is ignored, maybe not even valid
        if (a.sendtype == recv)
            a.sendtype = a.recvtype;
        else
            dup(a.sendtype);
    }
};

/// A nonblocking call's arguments: all but the last (the request).
template <class Form, class... A, std::size_t... I>
mpi_coll_args describe_first(std::tuple<A...> args, std::index_sequence<I...>) {
    return Form::describe(std::get<I>(args)...);
}

}  // namespace

template <class Form>
[[gnu::always_inline]] inline pass_reason coll_executor::kept(const mpi_coll_args& a, bool nonblocking) noexcept {
    if constexpr (kept_by_recv<Form>) {
        const kept_collective* k = kept_repeat<Form>(rt_, a, nonblocking, fast_gate::for_executor());
        if (k == nullptr) return pass_reason::none;
        // The use count only feeds SHUNT_REPORT and the decide log.
        if (k->tuner != nullptr && (rt_.counting() || rt_.cfg().log.enabled(log_level::debug, log_category::decide)))
            k->tuner->count_settled(Form::op, k->bytes, k->live);
        return k->why;
    }
    return pass_reason::none;
}

// ---- entry points: one descriptor each (the form's describe), one path for all ----

#define SHUNT_COLL_ENTRY_(name, Name, params, args)                                                           \
    int runtime::name params noexcept {                                                                       \
        const mpi_coll_args a = mpi_##name::describe args;                                                    \
        if (const pass_reason why = colls_.kept<mpi_##name>(a, false); why != pass_reason::none) [[likely]] { \
            count_passed(shim::name, direction::collective, why);                                             \
            nbc_.progress();                                                                                  \
            return mpi_##name::library(a);                                                                    \
        }                                                                                                     \
        this->count(shim::name);                                                                              \
        return colls_.run<mpi_##name>(shim::name, a);                                                         \
    }
SHUNT_MPI_COLL_CALLS(SHUNT_COLL_ENTRY_)
#undef SHUNT_COLL_ENTRY_

// The nonblocking and persistent forms run the blocking form's checks and schedule: each names
// its blocking form.
using mpi_iallreduce = mpi_allreduce;
using mpi_ireduce = mpi_reduce;
using mpi_ireduce_scatter_block = mpi_reduce_scatter_block;
using mpi_ireduce_scatter = mpi_reduce_scatter;
using mpi_iallgather = mpi_allgather;
using mpi_iallgatherv = mpi_allgatherv;
using mpi_ibcast = mpi_bcast;
using mpi_ialltoall = mpi_alltoall;
using mpi_ialltoallv = mpi_alltoallv;

#define SHUNT_NBC_ENTRY_(name, Name, params, args)                                                         \
    int runtime::name params noexcept {                                                                    \
        auto all = std::make_tuple args;                                                                   \
        constexpr std::size_t n = std::tuple_size_v<decltype(all)> - 1;                                    \
        const mpi_coll_args a = describe_first<mpi_##name>(all, std::make_index_sequence<n>{});            \
        MPI_Request* const req = std::get<n>(all);                                                         \
        if (const pass_reason why = req != nullptr ? colls_.kept<mpi_##name>(a, true) : pass_reason::none; \
            why != pass_reason::none) [[likely]] {                                                         \
            count_passed(shim::name, direction::collective, why);                                          \
            return mpi_##name::ilibrary(a, req);                                                           \
        }                                                                                                  \
        this->count(shim::name);                                                                           \
        return colls_.start<mpi_##name>(shim::name, a, req);                                               \
    }
SHUNT_MPI_NBC_CALLS(SHUNT_NBC_ENTRY_)
#undef SHUNT_NBC_ENTRY_

#if SHUNT_HAVE_PERSISTENT_COLLECTIVES
using mpi_allreduce_init = mpi_allreduce;
using mpi_reduce_init = mpi_reduce;
using mpi_reduce_scatter_block_init = mpi_reduce_scatter_block;
using mpi_reduce_scatter_init = mpi_reduce_scatter;
using mpi_allgather_init = mpi_allgather;
using mpi_allgatherv_init = mpi_allgatherv;
using mpi_bcast_init = mpi_bcast;
using mpi_alltoall_init = mpi_alltoall;
using mpi_alltoallv_init = mpi_alltoallv;

#define SHUNT_INIT_ENTRY_(name, Name, params, args)                                                                \
    int runtime::name params noexcept {                                                                            \
        this->count(shim::name);                                                                                   \
        auto all = std::make_tuple args;                                                                           \
        constexpr std::size_t n = std::tuple_size_v<decltype(all)> - 2;                                            \
        return colls_.init<mpi_##name>(shim::name, describe_first<mpi_##name>(all, std::make_index_sequence<n>{}), \
                                       std::get<n>(all), std::get<n + 1>(all));                                    \
    }
SHUNT_MPI_PERSISTENT_CALLS(SHUNT_INIT_ENTRY_)
#undef SHUNT_INIT_ENTRY_
#endif

// ---- the one path ----

template <class Form>
int coll_executor::run(shim s, mpi_coll_args a) noexcept {
    if constexpr (compressible<Form>) {
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
    // The library's blocking call stays blocking: a nonblocking collective never matches a blocking
    // one, and the other ranks may have no schedule of shunt's in flight. It cannot progress
    // shunt's schedules while it waits (see nbc_executor); they move first.
    const auto library = [&] {
        rt_.nbc().progress();
        return Form::library(a);
    };
    const auto pass = [&](pass_reason why) {
        rt_.count_pass(direction::collective, why);
        return library();
    };
    if (!enabled(a.comm)) return pass(rt_.running() ? pass_reason::forced : pass_reason::not_running);
    // The gate's word before the lookup: a change meanwhile leaves the kept call stale.
    const std::uint64_t gate = fast_gate::kept();
    mpi_coll_facts f;
    device_stage dev(rt_.devices().in_use(), rt_.devices().library_takes_device());
    try {
        std::int64_t key = -1;
        pass_reason why = Form::early(a, rt_.cfg().coll == coll_choice::measure, f, key);
        if (why != pass_reason::none) return pass(why);
        if (key >= 0 && settled_on_library(a.comm, Form::op, key, f.live)) {
            if constexpr (kept_by_recv<Form>) {
                if (!rt_.devices().in_use())
                    if (context* ctx = existing_context(a.comm))
                        kept_collectives[static_cast<std::size_t>(Form::op)] = {
                            a.comm, a.recvtype, a.op, a.recvcount, gate, ctx->tuner.get(), key, f.live};
            }
            return pass(pass_reason::planned);
        }
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

// ---- nonblocking and persistent calls ----

template <class Form>
pass_reason coll_executor::screen_nonblocking(shim s, const mpi_coll_args& a, bool settled, mpi_coll_facts& f,
                                              context*& ctx, nonblocking_plan::pick& pick) noexcept {
    // Device buffers: the library's own nonblocking call, as before shunt ran these.
    if (rt_.devices().in_use()) return pass_reason::unsupported;
    try {
        std::int64_t key = -1;
        pass_reason why = Form::early(a, rt_.cfg().coll == coll_choice::measure, f, key);
        if (why != pass_reason::none) return why;
        ctx = existing_context(a.comm);
        if (ctx == nullptr) return pass_reason::not_set_up;
        if (!ctx->usable) return ctx->why;
        if (settled && key >= 0 && settled_on_library(a.comm, Form::op, key, f.live)) return pass_reason::planned;
        memo_source types(rt_.memo(), rt_.types());
        why = Form::check(a, types, f);
        if (why != pass_reason::none) return why;
        // User-defined reductions stay with the library: the application may free its MPI_Op
        // while the call is in flight, and MPI gives shunt no way to keep it.
        if (a.op != MPI_OP_NULL && !detail::is_predefined_op(a.op)) return pass_reason::unsupported;
        pick = nonblocking_pick(s, *ctx, Form::op, f, why);
        return why;
    } catch (const std::exception& e) {
        // Before the decision: what fails here fails alike on every rank, or comes of an
        // erroneous call the library then judges.
        rt_.internal_failure(s, e.what());
        return pass_reason::internal;
    }
}

namespace {

/// The schedule a nonblocking or persistent call of `Form` runs on its fiber, with tag `tag`.
template <class Form>
auto nonblocking_schedule(const mpi_coll_args& a, const mpi_coll_facts& f, const coll_executor::context& ctx,
                          const nonblocking_plan::pick& pick, int tag) {
    return [a, f, topo = ctx.topo_owner, levels = pick.levels, tag](mpi_waiter& w) {
        collective_options opt;
        opt.levels = levels;
        opt.mpi_tag = tag;
        opt.mpi_wait = &w;
        Form::run(*topo, a, f, opt);
    };
}

}  // namespace

template <class Form>
void coll_executor::keep_nonblocking(const mpi_coll_args& a, std::uint64_t gate, pass_reason why) noexcept {
    if (rt_.devices().in_use() || rt_.cfg().coll == coll_choice::shunt) return;
    context* ctx = existing_context(a.comm);
    if (why == pass_reason::not_set_up ? ctx != nullptr : ctx == nullptr || !ctx->usable) return;
    try {
        mpi_coll_facts f;
        std::int64_t key = -1;
        if (Form::early(a, rt_.cfg().coll == coll_choice::measure, f, key) != pass_reason::none || key < 0) return;
        // Without a context every such call goes to the library until a blocking collective makes one.
        collective_tuner* tuner = ctx != nullptr ? ctx->tuner.get() : nullptr;
        const bool settled = tuner == nullptr || tuner->settled(Form::op, key, f.live).has_value();
        kept_collective& k = kept_nonblocking[static_cast<std::size_t>(Form::op)];
        k = {a.comm, a.recvtype, a.op, a.recvcount, gate, tuner, key, f.live, settled, why};
    } catch (...) {
        // Nothing kept: the next call decides again.
    }
}

template <class Form>
int coll_executor::start(shim s, mpi_coll_args a, MPI_Request* request) noexcept {
    const auto pass = [&](pass_reason why) {
        rt_.count_pass(direction::collective, why);
        return Form::ilibrary(a, request);
    };
    if (!enabled(a.comm)) return pass(rt_.running() ? pass_reason::forced : pass_reason::not_running);
    if (request == nullptr) return pass(pass_reason::bad_argument);
    mpi_coll_facts f;
    context* ctx = nullptr;
    nonblocking_plan::pick pick;
    const std::uint64_t gate = fast_gate::kept();
    if (const pass_reason why = screen_nonblocking<Form>(s, a, true, f, ctx, pick); why != pass_reason::none) {
        if constexpr (kept_by_recv<Form>) {
            if (why == pass_reason::planned || why == pass_reason::not_set_up) keep_nonblocking<Form>(a, gate, why);
        }
        return pass(why);
    }
    try {
        auto hold = std::make_shared<call_hold>();
        hold->take(a, f, rt_.memo());
        const int tag = ctx->tag_first + static_cast<int>(ctx->nbc_calls.fetch_add(1) % ctx->tag_span);
        rt_.nbc().launch(s, f.bytes, nonblocking_schedule<Form>(a, f, *ctx, pick, tag), std::move(hold), request);
        rt_.count_collective(s, f.bytes);
        return MPI_SUCCESS;
    } catch (const std::exception& e) {
        // The other ranks run shunt's schedule: no way back to the library.
        log_error(log_category::init, "%s: cannot start shunt's schedule (%s)", shim_names[static_cast<std::size_t>(s)],
                  e.what());
        PMPI_Comm_call_errhandler(a.comm, MPI_ERR_INTERN);
        return MPI_ERR_INTERN;
    }
}

#if SHUNT_HAVE_PERSISTENT_COLLECTIVES
template <class Form>
int coll_executor::init(shim s, mpi_coll_args a, MPI_Info info, MPI_Request* request) noexcept {
    const auto pass = [&](pass_reason why) {
        rt_.count_pass(direction::collective, why);
        return Form::library_init(a, info, request);
    };
    if (!enabled(a.comm)) return pass(rt_.running() ? pass_reason::forced : pass_reason::not_running);
    if (request == nullptr) return pass(pass_reason::bad_argument);
    mpi_coll_facts f;
    context* ctx = nullptr;
    nonblocking_plan::pick pick;
    if (const pass_reason why = screen_nonblocking<Form>(s, a, false, f, ctx, pick); why != pass_reason::none)
        return pass(why);
    try {
        auto hold = std::make_shared<call_hold>();
        hold->take(a, f, rt_.memo());
        const int tag =
            ctx->tag_first + ctx->tag_span + static_cast<int>(ctx->persistent_calls.fetch_add(1) % ctx->tag_span);
        rt_.nbc().make_persistent(s, f.bytes, nonblocking_schedule<Form>(a, f, *ctx, pick, tag), std::move(hold),
                                  request);
        rt_.count_collective(s, f.bytes);
        return MPI_SUCCESS;
    } catch (const std::exception& e) {
        log_error(log_category::init, "%s: cannot set up shunt's schedule (%s)",
                  shim_names[static_cast<std::size_t>(s)], e.what());
        PMPI_Comm_call_errhandler(a.comm, MPI_ERR_INTERN);
        return MPI_ERR_INTERN;
    }
}
#endif

nonblocking_plan::pick coll_executor::nonblocking_pick(shim s, context& ctx, coll_op op, const mpi_coll_facts& f,
                                                       pass_reason& why) noexcept {
    why = pass_reason::none;
    nonblocking_plan::pick pick;
    if (!ctx.nbc) {
        why = pass_reason::not_set_up;
        return pick;
    }
    std::optional<coll_method> forced;
    if (rt_.cfg().coll == coll_choice::shunt) forced = coll_method::hierarchical;
    pick = ctx.nbc->choose(*ctx.tuner, op, f.bytes, f.live, forced);
    const int cls = std::clamp(collective_tuner::size_class(f.bytes), 1, nonblocking_plan::max_class) - 1;
    auto& logged = ctx.nbc_logged[(static_cast<std::size_t>(s) - static_cast<std::size_t>(first_collective)) *
                                      nonblocking_plan::max_class +
                                  static_cast<std::size_t>(cls)];
    if (rt_.cfg().log.enabled(log_level::debug, log_category::decide) && ctx.topo->rank() == 0 &&
        !logged.exchange(true)) {
        const coll_shape& shape = ctx.tuner->shape();
        const std::string over = pick.method == coll_method::hierarchical && !shape.level_names.empty()
                                     ? " " + shape.schedule_text(pick.levels)
                                     : "";
        log_debug(log_category::decide, "%s of %" PRId64 " bytes on %s: %s%s (nonblocking: %s)",
                  shim_names[static_cast<std::size_t>(s)], f.bytes, shape.signature().c_str(), method_text(pick.method),
                  over.c_str(),
                  forced         ? "forced"
                  : pick.settled ? "the blocking calls' decision"
                                 : "the model's plan, agreed when the communicator was set up");
    }
    if (pick.method == coll_method::library) why = pass_reason::planned;
    return pick;
}

collective_tuner::agree_fn coll_executor::agree_on(MPI_Comm own) noexcept {
    // Always the nonblocking form (it never matches a blocking one, and every rank agrees at the
    // same call), waited for polling, so that shunt's schedules in flight move on meanwhile.
    return [this, own](double* v, int n) {
        MPI_Request r = MPI_REQUEST_NULL;
        SHUNT_CHECK_MPI(PMPI_Iallreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_MAX, own, &r));
        nbc_executor& x = rt_.nbc();
        SHUNT_CHECK_MPI(x.in_flight() ? x.wait(&r, MPI_STATUS_IGNORE) : PMPI_Wait(&r, MPI_STATUS_IGNORE));
    };
}

coll_executor::context* coll_executor::existing_context(MPI_Comm comm) noexcept {
    // The thread's last answer, a communicator without a context included (a program whose
    // collectives on it are all nonblocking asks on every call): valid while no context has been
    // made or deleted since.
    struct last_lookup {
        MPI_Comm comm = MPI_COMM_NULL;
        context* ctx = nullptr;
        std::uint64_t epoch = 0;
        bool valid = false;
    };
    static thread_local last_lookup last;
    const std::uint64_t epoch = context_epoch.load(std::memory_order_acquire);
    if (last.valid && last.comm == comm && last.epoch == epoch) return last.ctx;
    const int keyval = context_keyval();
    if (keyval == MPI_KEYVAL_INVALID) return nullptr;
    void* value = nullptr;
    int found = 0;
    if (PMPI_Comm_get_attr(comm, keyval, &value, &found) != MPI_SUCCESS) return nullptr;
    last = {comm, found ? static_cast<context*>(value) : nullptr, epoch, true};
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
            ctx->topo_owner = topology::shared_of(comm, rt_.cfg().topology);
            ctx->topo = ctx->topo_owner.get();
            const bool measure = rt_.cfg().coll == coll_choice::automatic || rt_.cfg().coll == coll_choice::measure;
            ctx->tuner = std::make_shared<collective_tuner>(coll_shape::of(ctx->topo->groups()), measure ? 3 : 0);
            // Nonblocking calls decide without communicating: their plan is agreed here, where
            // every rank takes part (see nonblocking_plan); their schedules take tags of their own.
            void* ub = nullptr;
            int found = 0;
            SHUNT_CHECK_MPI(PMPI_Comm_get_attr(ctx->topo->comm(), MPI_TAG_UB, &ub, &found));
            const int tag_ub = found && ub != nullptr ? *static_cast<int*>(ub) : 32767;
            ctx->tag_first = 0x1000;
            ctx->tag_span = std::max(0, (tag_ub - ctx->tag_first + 1) / 2);
            if (ctx->tag_span >= 64)
                ctx->nbc = std::make_unique<nonblocking_plan>(*ctx->tuner, rt_.model(), agree_on(ctx->topo->comm()));
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
    context_epoch.fetch_add(1, std::memory_order_acq_rel);  // lookups that found no context go stale
    fast_gate::advance();  // and nonblocking calls kept for want of one
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
    const collective_tuner::agree_fn agree = agree_on(ctx->topo->comm());
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
    // A measured call runs between two barriers on shunt's own communicator and its time runs to the
    // second one, so that every rank times the call until its last rank is done: a rank that starts
    // late finds the others' data waiting and would time a fraction of the call, which favours
    // whichever method lets it leave first (latency-bound calls were decided for shunt's schedule
    // that then ran slower). Both methods pay the same barrier, which narrows their difference: the
    // library keeps the close calls. Only the measured calls pay it.
    if (pick.timed) {
        const int b = PMPI_Barrier(ctx->topo->comm());
        if (b != MPI_SUCCESS) return b;
    }
    const double t0 = pick.timed ? now_s() : 0;
    int rc = MPI_SUCCESS;
    if (pick.method == coll_method::library) {
        rc = pass(pick.timed ? pass_reason::measuring : pass_reason::planned);
    } else {
        try {
            collective_options opt;
            opt.levels = pick.levels;
            if (rt_.nbc().in_flight()) opt.mpi_wait = &rt_.nbc().blocking_waiter();
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
        rc = PMPI_Barrier(ctx->topo->comm());
        if (rc != MPI_SUCCESS) return rc;
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
