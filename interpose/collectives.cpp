// interpose/collectives.cpp: the collective shims' runtime: eligibility, the per-communicator topology and planner, shunt's schedules or the library.
#include "runtime.hpp"

#include <shunt/collectives/allgather.hpp>
#include <shunt/collectives/allgatherv.hpp>
#include <shunt/collectives/allreduce.hpp>
#include <shunt/collectives/alltoall.hpp>
#include <shunt/collectives/alltoallv.hpp>
#include <shunt/collectives/bcast.hpp>
#include <shunt/collectives/mpi_transport.hpp>
#include <shunt/collectives/reduce.hpp>
#include <shunt/collectives/reduce_scatter.hpp>
#include <shunt/collectives/reduce_scatter_block.hpp>
#include <shunt/collectives/reduction.hpp>
#include <shunt/errors.hpp>
#include <shunt/gpu/memory.hpp>
#include <shunt/gpu/pack.hpp>
#include <shunt/log.hpp>
#include <shunt/model/measure.hpp>
#include <shunt/pack/host.hpp>
#include <shunt/topology/topology.hpp>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <climits>
#include <cmath>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

namespace shunt::detail {

// Every decision below must come out the same on every rank of a call, or ranks run different
// algorithms and hang. So a call goes to shunt or to the library only on what every rank
// knows alike: the communicator (inter or intra, size), the operation and the reduction's
// datatype (the same on every rank by MPI's rules), the byte count of the whole operation
// (the type signatures match), and the planner's agreed choice. What differs between ranks (a
// datatype with gaps on one rank, dense on another) is bridged locally by packing.

void library_move(bool pack, void* typed, std::int64_t count, MPI_Datatype type, std::byte* packed, MPI_Comm comm) {
    MPI_Count size = 0;
    SHUNT_CHECK_MPI(PMPI_Type_size_x(type, &size));
    MPI_Aint lb = 0, extent = 0;
    SHUNT_CHECK_MPI(PMPI_Type_get_extent(type, &lb, &extent));
    const std::int64_t per =
        std::max<std::int64_t>(1, std::min<std::int64_t>(INT_MAX, INT_MAX / std::max<MPI_Count>(size, 1)));
    std::int64_t done = 0;
    while (done < count) {
        const int n = static_cast<int>(std::min(per, count - done));
        auto* at = static_cast<char*>(typed) + done * static_cast<std::int64_t>(extent);
        std::byte* bytes = packed + done * size;
        const int room = static_cast<int>(n * size);
        int pos = 0;
        if (pack)
            SHUNT_CHECK_MPI(PMPI_Pack(at, n, type, bytes, room, &pos, comm));
        else
            SHUNT_CHECK_MPI(PMPI_Unpack(bytes, room, &pos, at, n, type, comm));
        if (pos != room) throw error("the library's packed form is not the raw data (heterogeneous build?)");
        done += n;
    }
}

/// A communicator's state for collectives: its topology and planner, or why it has none.
struct runtime::coll_context {
    bool usable = false;
    pass_reason why = pass_reason::unsupported;  ///< when not usable
    const topology* topo = nullptr;  ///< cached on the same communicator, freed with it
    std::shared_ptr<collective_tuner> tuner;
};

namespace {

/// Changes whenever a context is deleted, so that per-thread lookups cached by communicator
/// handle (which the library may reuse for a new communicator) are dropped.
std::atomic<std::uint64_t> context_epoch{0};

int context_delete_fn(MPI_Comm, int, void* value, void*) {
    context_epoch.fetch_add(1, std::memory_order_acq_rel);
    delete static_cast<runtime::coll_context*>(value);
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

/// Size and extent facts of a datatype used as a byte stream.
struct type_facts {
    bool ok = false;
    std::int64_t size = 0;  ///< bytes per element
    std::int64_t extent = 0;  ///< bytes between elements
    bool dense = false;  ///< data fills the extent from the buffer start: moves as plain bytes
    const type_info* info = nullptr;  ///< not dense: shunt's decoded form (nullptr: the library packs)
};

/// True when the library takes `t` for communication: predefined or committed through shunt's
/// shim (the cache knows it), or committed behind shunt's back (the library's MPI_Pack of no
/// element accepts it; its error, on MPI_COMM_SELF, is returned, not raised). An uncommitted
/// type goes to the library, which reports MPI_ERR_TYPE as it would without shunt.
bool committed(MPI_Datatype t, const type_cache& types) {
    if (types.known(t)) return true;
    const errors_returned quiet(MPI_COMM_SELF);
    char none = 0;
    int pos = 0;
    return PMPI_Pack(&none, 0, t, &none, 1, &pos, MPI_COMM_SELF) == MPI_SUCCESS;
}

/// The facts of `t`, and for a type with gaps its decoded form from `memo` (the answer stays
/// valid through one blocking call: the application cannot free a type it is passing); not ok
/// for a type that is not committed.
type_facts facts_of(MPI_Datatype t, type_memo& memo, const type_cache& types) {
    type_facts f;
    if (t == MPI_DATATYPE_NULL || !committed(t, types)) return f;
    MPI_Count size = 0, lb = 0, extent = 0;
    if (PMPI_Type_size_x(t, &size) != MPI_SUCCESS || PMPI_Type_get_extent_x(t, &lb, &extent) != MPI_SUCCESS) return f;
    if (size < 0 || size == MPI_UNDEFINED) return f;
    f.ok = true;
    f.size = size;
    f.extent = extent;
    f.dense = dense_size(t) > 0;
    if (!f.dense) f.info = memo.find(t);
    return f;
}

/// The element size of a reduction of `type` with `op` shunt can run (into `es`), else why the
/// library runs it: a type that is not committed, or a reduction shunt does not support.
pass_reason reduction_element(MPI_Datatype type, MPI_Op op, const type_cache& types, std::int64_t& es) {
    if (!committed(type, types)) return pass_reason::bad_argument;
    try {
        es = mpi_reduction(type, op).element_size();
    } catch (...) {
        return pass_reason::unsupported;
    }
    return pass_reason::none;
}

// Argument checks that pass a call to the library run on each rank alone, so they must be what
// every rank of a valid call answers alike, or what the library itself rejects (erroneous
// programs): pointers differ per rank. MPI_BOTTOM (a null buffer) is valid with a datatype of
// absolute addresses, which has gaps; with a dense type it is an error the library reports. The
// same non-null send and receive buffer is aliasing, which the library reports too.
bool null_buffer(const void* buf, const type_facts& f) { return buf == nullptr && f.dense; }
bool aliased(const void* sendbuf, const void* recvbuf) { return sendbuf == recvbuf && recvbuf != nullptr; }

/// `count` elements of `type` at `buf` as a contiguous byte image: the buffer itself for a
/// dense type, else a packed copy (shunt's host packer on the decoded form; PMPI_Pack for a type
/// shunt does not know), written back by unpack() where it receives.
class byte_image {
public:
    byte_image(void* buf, std::int64_t count, MPI_Datatype type, const type_facts& f)
        : buf_(buf), count_(count), type_(type), info_(f.info), bytes_(count * f.size) {
        if (f.dense || bytes_ == 0) {
            data_ = static_cast<std::byte*>(buf);
        } else {
            staging_ = host_buffer(bytes_);
            data_ = staging_.data();
        }
    }
    std::byte* data() const { return data_; }
    std::int64_t bytes() const { return bytes_; }
    bool staged() const { return data_ != buf_ && bytes_ > 0; }
    /// Fills the image from the typed buffer.
    void pack() {
        if (staged()) move(true);
    }
    /// Writes the image back into the typed buffer.
    void unpack() {
        if (staged()) move(false);
    }

private:
    void move(bool pack) {
        if (info_ != nullptr) {  // shunt's host packer, 64-bit throughout
            const std::int64_t moved =
                pack ? pack_host(*info_, count_, buf_, data_) : unpack_host(*info_, count_, data_, buf_);
            if (moved != bytes_)
                throw error("the host packer moved " + std::to_string(moved) + " of " + std::to_string(bytes_) +
                            " bytes");
            return;
        }
        library_move(pack, buf_, count_, type_, data_, MPI_COMM_SELF);
    }

    void* buf_;
    std::int64_t count_;
    MPI_Datatype type_;
    const type_info* info_;
    std::int64_t bytes_;
    std::byte* data_ = nullptr;
    host_buffer staging_{0};
};

const char* method_text(coll_method m) { return m == coll_method::library ? "the library" : "shunt's schedule"; }

/// The bytes [lo, hi) from a buffer's address that a call's elements occupy; `whole`: the
/// elements cover every byte of it (a receive then leaves nothing of the old contents).
struct byte_span {
    std::int64_t lo = 0, hi = 0;
    bool whole = true;
    bool empty() const { return hi <= lo; }
    /// Adds `count` elements of `t` starting `first` bytes from the buffer (false: t is invalid).
    bool add(MPI_Datatype t, std::int64_t count, std::int64_t first = 0) {
        if (count <= 0) return true;
        MPI_Count lb = 0, extent = 0, true_lb = 0, true_extent = 0, size = 0;
        if (PMPI_Type_get_extent_x(t, &lb, &extent) != MPI_SUCCESS ||
            PMPI_Type_get_true_extent_x(t, &true_lb, &true_extent) != MPI_SUCCESS ||
            PMPI_Type_size_x(t, &size) != MPI_SUCCESS || size == MPI_UNDEFINED)
            return false;
        const std::int64_t last = (count - 1) * extent;  // the last element's offset from the first
        const std::int64_t l = first + true_lb + std::min<std::int64_t>(0, last);
        const std::int64_t h = first + true_lb + true_extent + std::max<std::int64_t>(0, last);
        const bool tiles = size == true_extent && size == extent && h - l == count * size;
        if (empty()) {
            lo = l, hi = h, whole = tiles;
        } else {
            whole = whole && tiles && (h == lo || l == hi);  // adjacent runs still tile
            lo = std::min(lo, l), hi = std::max(hi, h);
        }
        return true;
    }
};

}  // namespace

/// The device buffers of one collective call, moved through host memory: shunt's schedules are
/// host code, and a library that is not CUDA-aware cannot take them either. The bytes a call
/// reads are copied from the device into pinned host memory before it runs, the bytes it writes
/// copied back after, and the shim's buffer pointers point at the host copies meanwhile (its
/// lambdas read them by reference). Where no device is in use nothing is classified. Which
/// method runs is decided alike on every rank before staging, so ranks whose buffers differ in
/// kind still run the same algorithm.
class runtime::device_stage {
public:
    /// `devices`: some buffer may be device memory; `library_takes_device`: the MPI is CUDA-aware.
    device_stage(bool devices, bool library_takes_device) : devices_(devices), aware_(library_takes_device) {}
    device_stage(const device_stage&) = delete;
    device_stage& operator=(const device_stage&) = delete;
    ~device_stage() { release(); }

    /// Registers the buffer `*slot` (the shim's own pointer variable), whose bytes `span` the
    /// call reads (`in`) and/or writes (`out`); a no-op unless it is device memory.
    template <class Ptr>
    void add(Ptr& slot, const byte_span& span, bool in, bool out) {
        if (!devices_ || span.empty() || slot == nullptr || slot == MPI_IN_PLACE) return;
        const auto* first = static_cast<const std::byte*>(slot) + span.lo;
        // Managed memory is host-accessible: only device memory needs the copies.
        if (gpu::classify(first) != gpu::memory_kind::device) return;
        entry e{.span = span, .in = in || (out && !span.whole), .out = out};
        if constexpr (std::is_const_v<std::remove_pointer_t<Ptr>>)
            e.cslot = &slot;
        else
            e.mslot = &slot;
        entries_.push_back(e);
    }
    /// True when buffers may be device memory (a device is in use): worth describing to add().
    bool enabled() const { return devices_; }

    /// Runs `f` (returning an MPI code) with every device buffer staged, except for the library
    /// (`library`) on a CUDA-aware MPI, which gets the device pointers as they are. Exceptions
    /// from the copies and from `f` propagate, with the shim's pointers restored.
    template <class F>
    int run(bool library, F&& f) {
        if (entries_.empty() || (library && aware_)) return f();
        struct restore {
            device_stage& s;
            ~restore() { s.release(); }
        } guard{*this};
        for (auto& e : entries_) {
            e.host = gpu::pool_acquire(gpu::pool_kind::pinned, static_cast<std::size_t>(e.span.hi - e.span.lo));
            e.device = e.cslot != nullptr ? const_cast<void*>(*e.cslot) : *e.mslot;
            if (e.in)
                gpu::copy(e.host.ptr, at(e.device, e.span.lo), static_cast<std::size_t>(e.span.hi - e.span.lo),
                          nullptr);
        }
        gpu::synchronize(nullptr);
        for (auto& e : entries_) point(e, at(e.host.ptr, -e.span.lo));
        const int rc = f();
        for (auto& e : entries_) point(e, e.device);
        if (rc == MPI_SUCCESS) {
            bool copied = false;
            for (const auto& e : entries_)
                if (e.out) {
                    gpu::copy(at(e.device, e.span.lo), e.host.ptr, static_cast<std::size_t>(e.span.hi - e.span.lo),
                              nullptr);
                    copied = true;
                }
            if (copied) gpu::synchronize(nullptr);
        }
        return rc;
    }

private:
    struct entry {
        byte_span span;
        bool in = false, out = false;
        const void** cslot = nullptr;
        void** mslot = nullptr;
        void* device = nullptr;  ///< the application's pointer while staged
        gpu::pool_block host{};
    };
    static void* at(void* p, std::int64_t offset) {
        return reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(p) + static_cast<std::uintptr_t>(offset));
    }
    static void point(entry& e, void* p) {
        if (e.cslot != nullptr)
            *e.cslot = p;
        else
            *e.mslot = p;
    }
    /// Points the shim back at the device buffers and gives the host copies back.
    void release() noexcept {
        for (auto& e : entries_) {
            if (e.device != nullptr) point(e, e.device);
            gpu::pool_release(e.host);
            e.host = {};
        }
    }

    bool devices_, aware_;
    std::vector<entry> entries_;
};

runtime::coll_context* runtime::existing_context(MPI_Comm comm) noexcept {
    struct last_lookup {
        MPI_Comm comm = MPI_COMM_NULL;
        coll_context* ctx = nullptr;
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
    last = {comm, static_cast<coll_context*>(value), epoch};
    return last.ctx;
}

bool runtime::settled_on_library(MPI_Comm comm, coll_op op, std::int64_t bytes, bool live) noexcept {
    // Device buffers must be staged for a library that is not CUDA-aware: the whole way, then.
    if (devices_in_use() && !library_takes_device()) return false;
    coll_context* ctx = existing_context(comm);
    if (ctx == nullptr || !ctx->usable || ctx->tuner->settled(op, bytes, live) != coll_method::library) return false;
    ctx->tuner->count_settled(op, bytes, live);
    return true;
}

bool runtime::settled_on_library(MPI_Comm comm, coll_op op, int count, MPI_Datatype type, bool per_rank,
                                 bool live) noexcept {
    int ts = 0, np = 1;
    if (count <= 0 || PMPI_Type_size(type, &ts) != MPI_SUCCESS) return false;
    if (per_rank && PMPI_Comm_size(comm, &np) != MPI_SUCCESS) return false;
    return settled_on_library(comm, op, std::int64_t{count} * ts * np, live);
}

bool runtime::measured_live(MPI_Datatype type, MPI_Op op) const noexcept {
    return cfg_.coll == coll_choice::measure || exact_reduction(type, op);
}

runtime::coll_context* runtime::context(MPI_Comm comm) noexcept {
    if (coll_context* known = existing_context(comm)) return known;
    const int keyval = context_keyval();
    if (keyval == MPI_KEYVAL_INVALID) return nullptr;
    void* value = nullptr;
    int found = 0;
    if (PMPI_Comm_get_attr(comm, keyval, &value, &found) != MPI_SUCCESS) return nullptr;  // the library will say why
    if (found) return static_cast<coll_context*>(value);
    auto* ctx = new (std::nothrow) coll_context;
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
            ctx->topo = &topology::of(comm, cfg_.topology);
            const bool measure = cfg_.coll == coll_choice::automatic || cfg_.coll == coll_choice::measure;
            ctx->tuner = std::make_shared<collective_tuner>(coll_shape::of(ctx->topo->groups()), measure ? 3 : 0);
            ctx->usable = true;
            std::lock_guard lock(tuners_mutex_);
            std::erase_if(tuners_,
                          [](const std::shared_ptr<collective_tuner>& t) { return t.use_count() == 1 && t->empty(); });
            tuners_.push_back(ctx->tuner);
            if (log_enabled(log_level::debug, log_category::decide) && ctx->topo->rank() == 0) {
                std::string text = ctx->topo->describe();
                while (!text.empty() && text.back() == '\n') text.pop_back();
                for (char& ch : text)
                    if (ch == '\n') ch = ';';
                log_debug(log_category::decide, "collectives on a communicator of %d ranks: %s", size, text.c_str());
            }
        } catch (const std::exception& e) {
            // Description errors are found alike on every rank, so all ranks fall back together.
            if (!topology_warned_.exchange(true))
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
int runtime::collective(shim s, coll_op op, MPI_Comm comm, std::int64_t bytes, bool live, device_stage& dev,
                        Library library, Shunt run) noexcept {
    const char* name = shim_names[static_cast<std::size_t>(s)];
    // The library, with device buffers staged where it cannot take them.
    const auto pass = [&](pass_reason why) {
        count_pass(direction::collective, why);
        try {
            return dev.run(true, library);
        } catch (const std::exception& e) {
            // Only the copies of device buffers can fail here: the other ranks are in the library's call.
            log_error(log_category::init, "%s: cannot stage device buffers for the library (%s)", name, e.what());
            PMPI_Comm_call_errhandler(comm, MPI_ERR_INTERN);
            return MPI_ERR_INTERN;
        }
    };
    coll_context* ctx = context(comm);
    if (ctx == nullptr) return pass(pass_reason::bad_argument);
    if (!ctx->usable) return pass(ctx->why);
    MPI_Comm own = ctx->topo->comm();
    const collective_tuner::agree_fn agree = [own](double* v, int n) {
        SHUNT_CHECK_MPI(PMPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_MAX, own));
    };
    collective_tuner::pick pick;
    try {
        std::optional<coll_method> forced;
        if (cfg_.coll == coll_choice::shunt) forced = coll_method::hierarchical;
        pick = ctx->tuner->choose(*model_, op, bytes, forced, agree, live);
    } catch (const std::exception& e) {
        // Only the agreement can fail here, and an MPI failure there is the same on every rank.
        internal_failure(s, e.what());
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
            stats_.add(counter_index::handled(direction::collective));
            stats_.add(counter_index::bytes(direction::collective), static_cast<std::uint64_t>(bytes));
            stats_.add(counter_index::collective_handled(s));
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
            internal_failure(s, e.what());
        }
    } else if (pick.fresh) {
        log_decision(*ctx, op, bytes, live, name);
    }
    return rc;
}

void runtime::log_decision(const coll_context& ctx, coll_op op, std::int64_t bytes, bool live,
                           const char* name) noexcept {
    // The decision is the same on every rank: rank 0 of the communicator says it.
    if (!cfg_.log.enabled(log_level::debug, log_category::decide) || ctx.topo->rank() != 0) return;
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

bool runtime::collectives_on(MPI_Comm comm) noexcept {
    return running() && cfg_.coll != coll_choice::library && comm != MPI_COMM_NULL;
}

int runtime::allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op,
                       MPI_Comm comm) noexcept {
    this->count(shim::allreduce);
    const auto library = [&] { return PMPI_Allreduce(sendbuf, recvbuf, count, type, op, comm); };
    const auto pass = [&](pass_reason why) {
        count_pass(direction::collective, why);
        return library();
    };
    if (!collectives_on(comm)) return pass(running() ? pass_reason::forced : pass_reason::not_running);
    if (count == 0) return pass(pass_reason::empty);
    const bool live = measured_live(type, op);
    if (settled_on_library(comm, coll_op::allreduce, count, type, false, live)) return pass(pass_reason::planned);
    if (count < 0 || recvbuf == nullptr || sendbuf == recvbuf) return pass(pass_reason::bad_argument);
    std::int64_t es = 0;
    if (const pass_reason why = reduction_element(type, op, types_, es); why != pass_reason::none) return pass(why);
    device_stage dev(devices_in_use(), library_takes_device());
    if (dev.enabled()) {
        byte_span span;
        span.add(type, count);
        dev.add(sendbuf, span, true, false);
        dev.add(recvbuf, span, sendbuf == MPI_IN_PLACE, true);
    }
    return collective(shim::allreduce, coll_op::allreduce, comm, es * count, live, dev, library,
                      [&](const topology& topo, const collective_options& opt) {
                          shunt::allreduce(topo, sendbuf, recvbuf, count, type, op, opt);
                      });
}

int runtime::reduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, int root,
                    MPI_Comm comm) noexcept {
    this->count(shim::reduce);
    const auto library = [&] { return PMPI_Reduce(sendbuf, recvbuf, count, type, op, root, comm); };
    const auto pass = [&](pass_reason why) {
        count_pass(direction::collective, why);
        return library();
    };
    if (!collectives_on(comm)) return pass(running() ? pass_reason::forced : pass_reason::not_running);
    int size = 0, me = 0;
    if (PMPI_Comm_size(comm, &size) != MPI_SUCCESS || PMPI_Comm_rank(comm, &me) != MPI_SUCCESS)
        return pass(pass_reason::bad_argument);
    if (count == 0) return pass(pass_reason::empty);
    const bool live = measured_live(type, op);
    if (settled_on_library(comm, coll_op::reduce, count, type, false, live)) return pass(pass_reason::planned);
    if (count < 0 || root < 0 || root >= size || sendbuf == nullptr ||
        (me == root && (recvbuf == nullptr || sendbuf == recvbuf)))
        return pass(pass_reason::bad_argument);
    std::int64_t es = 0;
    if (const pass_reason why = reduction_element(type, op, types_, es); why != pass_reason::none) return pass(why);
    device_stage dev(devices_in_use(), library_takes_device());
    if (dev.enabled()) {
        byte_span span;
        span.add(type, count);
        dev.add(sendbuf, span, true, false);
        if (me == root) dev.add(recvbuf, span, sendbuf == MPI_IN_PLACE, true);
    }
    return collective(shim::reduce, coll_op::reduce, comm, es * count, live, dev, library,
                      [&](const topology& topo, const collective_options& opt) {
                          shunt::reduce(topo, sendbuf, recvbuf, count, type, op, root, opt);
                      });
}

int runtime::reduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount, MPI_Datatype type, MPI_Op op,
                                  MPI_Comm comm) noexcept {
    this->count(shim::reduce_scatter_block);
    const auto library = [&] { return PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, type, op, comm); };
    const auto pass = [&](pass_reason why) {
        count_pass(direction::collective, why);
        return library();
    };
    if (!collectives_on(comm)) return pass(running() ? pass_reason::forced : pass_reason::not_running);
    int size = 0;
    if (PMPI_Comm_size(comm, &size) != MPI_SUCCESS) return pass(pass_reason::bad_argument);
    if (recvcount == 0) return pass(pass_reason::empty);
    const bool live = measured_live(type, op);
    if (settled_on_library(comm, coll_op::reduce_scatter_block, recvcount, type, true, live))
        return pass(pass_reason::planned);
    if (recvcount < 0 || recvbuf == nullptr || sendbuf == recvbuf) return pass(pass_reason::bad_argument);
    std::int64_t es = 0;
    if (const pass_reason why = reduction_element(type, op, types_, es); why != pass_reason::none) return pass(why);
    device_stage dev(devices_in_use(), library_takes_device());
    if (dev.enabled()) {
        byte_span all, mine;
        all.add(type, std::int64_t{recvcount} * size);
        mine.add(type, recvcount);
        const bool in_place = sendbuf == MPI_IN_PLACE;
        dev.add(sendbuf, all, true, false);
        dev.add(recvbuf, in_place ? all : mine, in_place, true);
    }
    return collective(shim::reduce_scatter_block, coll_op::reduce_scatter_block, comm, es * recvcount * size,
                      measured_live(type, op), dev, library, [&](const topology& topo, const collective_options& opt) {
                          shunt::reduce_scatter_block(topo, sendbuf, recvbuf, recvcount, type, op, opt);
                      });
}

int runtime::reduce_scatter(const void* sendbuf, void* recvbuf, const int recvcounts[], MPI_Datatype type, MPI_Op op,
                            MPI_Comm comm) noexcept {
    this->count(shim::reduce_scatter);
    const auto library = [&] { return PMPI_Reduce_scatter(sendbuf, recvbuf, recvcounts, type, op, comm); };
    const auto pass = [&](pass_reason why) {
        count_pass(direction::collective, why);
        return library();
    };
    if (!collectives_on(comm)) return pass(running() ? pass_reason::forced : pass_reason::not_running);
    int size = 0, inter = 0;
    if (recvcounts == nullptr || sendbuf == recvbuf || PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter ||
        PMPI_Comm_size(comm, &size) != MPI_SUCCESS)
        return pass(pass_reason::bad_argument);
    std::int64_t total = 0;
    for (int r = 0; r < size; ++r) {
        if (recvcounts[r] < 0) return pass(pass_reason::bad_argument);
        total += recvcounts[r];
    }
    if (total == 0) return pass(pass_reason::empty);
    std::int64_t es = 0;
    if (const pass_reason why = reduction_element(type, op, types_, es); why != pass_reason::none) return pass(why);
    device_stage dev(devices_in_use(), library_takes_device());
    if (int me = 0; dev.enabled() && PMPI_Comm_rank(comm, &me) == MPI_SUCCESS) {
        byte_span all, mine;
        all.add(type, total);
        mine.add(type, recvcounts[me]);
        const bool in_place = sendbuf == MPI_IN_PLACE;
        dev.add(sendbuf, all, true, false);
        dev.add(recvbuf, in_place ? all : mine, in_place, true);
    }
    return collective(shim::reduce_scatter, coll_op::reduce_scatter, comm, es * total, measured_live(type, op), dev,
                      library, [&](const topology& topo, const collective_options& opt) {
                          shunt::reduce_scatter(topo, sendbuf, recvbuf, recvcounts, type, op, opt);
                      });
}

int runtime::allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                       MPI_Datatype recvtype, MPI_Comm comm) noexcept {
    this->count(shim::allgather);
    const auto library = [&] {
        return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
    };
    const auto pass = [&](pass_reason why) {
        count_pass(direction::collective, why);
        return library();
    };
    if (!collectives_on(comm)) return pass(running() ? pass_reason::forced : pass_reason::not_running);
    const bool in_place = sendbuf == MPI_IN_PLACE;
    int size = 0, me = 0;
    if (recvcount == 0) return pass(pass_reason::empty);
    if (settled_on_library(comm, coll_op::allgather, recvcount, recvtype, true)) return pass(pass_reason::planned);
    if (recvcount < 0 || aliased(sendbuf, recvbuf) || PMPI_Comm_size(comm, &size) != MPI_SUCCESS ||
        PMPI_Comm_rank(comm, &me) != MPI_SUCCESS)
        return pass(pass_reason::bad_argument);
    const type_facts rt = facts_of(recvtype, memo_, types_);
    const type_facts st = in_place ? rt : facts_of(sendtype, memo_, types_);
    if (!rt.ok || !st.ok || rt.size == 0 || null_buffer(recvbuf, rt)) return pass(pass_reason::bad_argument);
    const std::int64_t block = recvcount * rt.size;
    if (!in_place && (sendcount < 0 || sendcount * st.size != block)) return pass(pass_reason::bad_argument);
    device_stage dev(devices_in_use(), library_takes_device());
    if (dev.enabled()) {
        byte_span send, recv;
        if (!in_place) send.add(sendtype, sendcount);  // ignored, maybe invalid, in place
        recv.add(recvtype, std::int64_t{recvcount} * size);
        dev.add(sendbuf, send, true, false);
        dev.add(recvbuf, recv, in_place, true);
    }
    return collective(shim::allgather, coll_op::allgather, comm, block * size, true, dev, library,
                      [&](const topology& topo, const collective_options& opt) {
                          mpi_transport t(topo.comm());
                          byte_image all(recvbuf, std::int64_t{recvcount} * size, recvtype, rt);
                          std::byte* mine = all.data() + me * block;
                          if (in_place) {
                              if (all.staged()) {
                                  byte_image own(static_cast<char*>(recvbuf) + me * recvcount * rt.extent, recvcount,
                                                 recvtype, rt);
                                  own.pack();
                                  std::memcpy(mine, own.data(), static_cast<std::size_t>(block));
                              }
                          } else {
                              byte_image send(const_cast<void*>(sendbuf), sendcount, sendtype, st);
                              send.pack();
                              std::memcpy(mine, send.data(), static_cast<std::size_t>(block));
                          }
                          shunt::allgather(t, topo.groups(opt.levels), mine, all.data(), block);
                          all.unpack();
                      });
}

int runtime::allgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                        const int recvcounts[], const int displs[], MPI_Datatype recvtype, MPI_Comm comm) noexcept {
    this->count(shim::allgatherv);
    const auto library = [&] {
        return PMPI_Allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm);
    };
    const auto pass = [&](pass_reason why) {
        count_pass(direction::collective, why);
        return library();
    };
    if (!collectives_on(comm)) return pass(running() ? pass_reason::forced : pass_reason::not_running);
    const bool in_place = sendbuf == MPI_IN_PLACE;
    int size = 0, me = 0, inter = 0;
    if (recvcounts == nullptr || displs == nullptr || aliased(sendbuf, recvbuf) ||
        PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter || PMPI_Comm_size(comm, &size) != MPI_SUCCESS ||
        PMPI_Comm_rank(comm, &me) != MPI_SUCCESS)
        return pass(pass_reason::bad_argument);
    const type_facts rt = facts_of(recvtype, memo_, types_);
    const type_facts st = in_place ? rt : facts_of(sendtype, memo_, types_);
    if (!rt.ok || !st.ok || rt.size == 0 || null_buffer(recvbuf, rt)) return pass(pass_reason::bad_argument);
    std::vector<std::int64_t> parts(static_cast<std::size_t>(size));
    std::int64_t total = 0;
    bool packed_order = rt.dense;  // the parts already lie in rank order without gaps in recvbuf
    for (int r = 0; r < size; ++r) {
        if (recvcounts[r] < 0) return pass(pass_reason::bad_argument);
        if (displs[r] * rt.size != total) packed_order = false;
        parts[static_cast<std::size_t>(r)] = recvcounts[r] * rt.size;
        total += parts[static_cast<std::size_t>(r)];
    }
    if (total == 0) return pass(pass_reason::empty);
    if (!in_place && (sendcount < 0 || sendcount * st.size != parts[static_cast<std::size_t>(me)]))
        return pass(pass_reason::bad_argument);
    device_stage dev(devices_in_use(), library_takes_device());
    if (dev.enabled()) {
        byte_span send, recv;
        if (!in_place) send.add(sendtype, sendcount);
        for (int r = 0; r < size; ++r) recv.add(recvtype, recvcounts[r], std::int64_t{displs[r]} * rt.extent);
        dev.add(sendbuf, send, true, false);
        dev.add(recvbuf, recv, in_place, true);
    }
    return collective(
        shim::allgatherv, coll_op::allgatherv, comm, total, true, dev, library,
        [&](const topology& topo, const collective_options& opt) {
            mpi_transport t(topo.comm());
            host_buffer staging(packed_order ? 0 : total);
            std::byte* work = packed_order ? static_cast<std::byte*>(recvbuf) : staging.data();
            std::int64_t offset = 0;
            for (int r = 0; r < me; ++r) offset += parts[static_cast<std::size_t>(r)];
            auto typed = [&](int r) { return static_cast<char*>(recvbuf) + std::int64_t{displs[r]} * rt.extent; };
            if (in_place) {
                if (!packed_order) {
                    byte_image own(typed(me), recvcounts[me], recvtype, rt);
                    own.pack();
                    std::memcpy(work + offset, own.data(),
                                static_cast<std::size_t>(parts[static_cast<std::size_t>(me)]));
                }
            } else {
                byte_image send(const_cast<void*>(sendbuf), sendcount, sendtype, st);
                send.pack();
                std::memcpy(work + offset, send.data(), static_cast<std::size_t>(parts[static_cast<std::size_t>(me)]));
            }
            shunt::allgatherv(t, topo.groups(opt.levels), work, parts);
            if (packed_order) return;
            offset = 0;
            for (int r = 0; r < size; ++r) {
                const std::int64_t n = parts[static_cast<std::size_t>(r)];
                if (n > 0 && !(in_place && r == me)) {
                    byte_image part(typed(r), recvcounts[r], recvtype, rt);
                    if (part.staged()) {
                        std::memcpy(part.data(), work + offset, static_cast<std::size_t>(n));
                        part.unpack();
                    } else {
                        std::memcpy(part.data(), work + offset, static_cast<std::size_t>(n));
                    }
                }
                offset += n;
            }
        });
}

int runtime::bcast(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm) noexcept {
    this->count(shim::bcast);
    const auto library = [&] { return PMPI_Bcast(buffer, count, type, root, comm); };
    const auto pass = [&](pass_reason why) {
        count_pass(direction::collective, why);
        return library();
    };
    if (!collectives_on(comm)) return pass(running() ? pass_reason::forced : pass_reason::not_running);
    int size = 0, me = 0, inter = 0;
    if (count == 0) return pass(pass_reason::empty);
    if (settled_on_library(comm, coll_op::bcast, count, type, false)) return pass(pass_reason::planned);
    if (count < 0 || PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter ||
        PMPI_Comm_size(comm, &size) != MPI_SUCCESS || PMPI_Comm_rank(comm, &me) != MPI_SUCCESS || root < 0 ||
        root >= size)
        return pass(pass_reason::bad_argument);
    const type_facts f = facts_of(type, memo_, types_);
    if (!f.ok || f.size == 0 || null_buffer(buffer, f)) return pass(pass_reason::bad_argument);
    device_stage dev(devices_in_use(), library_takes_device());
    if (dev.enabled()) {
        byte_span span;
        span.add(type, count);
        dev.add(buffer, span, me == root, me != root);
    }
    return collective(shim::bcast, coll_op::bcast, comm, count * f.size, true, dev, library,
                      [&](const topology& topo, const collective_options& opt) {
                          mpi_transport t(topo.comm());
                          byte_image image(buffer, count, type, f);
                          if (me == root) image.pack();
                          shunt::bcast(t, topo.groups(opt.levels), image.data(), image.bytes(), root);
                          if (me != root) image.unpack();
                      });
}

int runtime::alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                      MPI_Datatype recvtype, MPI_Comm comm) noexcept {
    this->count(shim::alltoall);
    const auto library = [&] {
        return PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
    };
    const auto pass = [&](pass_reason why) {
        count_pass(direction::collective, why);
        return library();
    };
    if (!collectives_on(comm)) return pass(running() ? pass_reason::forced : pass_reason::not_running);
    const bool in_place = sendbuf == MPI_IN_PLACE;
    int size = 0, inter = 0;
    if (recvcount == 0) return pass(pass_reason::empty);
    if (settled_on_library(comm, coll_op::alltoall, recvcount, recvtype, true)) return pass(pass_reason::planned);
    if (recvcount < 0 || aliased(sendbuf, recvbuf) || PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter ||
        PMPI_Comm_size(comm, &size) != MPI_SUCCESS)
        return pass(pass_reason::bad_argument);
    const type_facts rt = facts_of(recvtype, memo_, types_);
    const type_facts st = in_place ? rt : facts_of(sendtype, memo_, types_);
    if (!rt.ok || !st.ok || rt.size == 0 || null_buffer(recvbuf, rt)) return pass(pass_reason::bad_argument);
    const std::int64_t block = recvcount * rt.size;
    if (!in_place && (sendcount < 0 || sendcount * st.size != block)) return pass(pass_reason::bad_argument);
    device_stage dev(devices_in_use(), library_takes_device());
    if (dev.enabled()) {
        byte_span send, recv;
        if (!in_place) send.add(sendtype, std::int64_t{sendcount} * size);
        recv.add(recvtype, std::int64_t{recvcount} * size);
        dev.add(sendbuf, send, true, false);
        dev.add(recvbuf, recv, in_place, true);
    }
    return collective(shim::alltoall, coll_op::alltoall, comm, block * size, true, dev, library,
                      [&](const topology& topo, const collective_options& opt) {
                          mpi_transport t(topo.comm());
                          byte_image out(recvbuf, std::int64_t{recvcount} * size, recvtype, rt);
                          if (in_place) {
                              out.pack();
                              shunt::alltoall(t, topo.groups(opt.levels), out.data(), out.data(), block);
                          } else {
                              byte_image in(const_cast<void*>(sendbuf), std::int64_t{sendcount} * size, sendtype, st);
                              in.pack();
                              shunt::alltoall(t, topo.groups(opt.levels), in.data(), out.data(), block);
                          }
                          out.unpack();
                      });
}

namespace {

/// The blocks of an alltoallv side as byte ranges: the buffer itself for a dense type (unless
/// `copy`: the data must be copied out first, as for MPI_IN_PLACE), else a staging copy, which a
/// send side fills at construction (one byte_image per block) and a receive side writes back in
/// scatter().
class block_images {
public:
    block_images(void* buf, const int counts[], const int displs[], MPI_Datatype type, const type_facts& f, int p,
                 bool send, bool copy)
        : buf_(static_cast<std::byte*>(buf)),
          counts_(counts),
          displs_(displs),
          type_(type),
          facts_(f),
          bytes_(static_cast<std::size_t>(p)),
          offsets_(static_cast<std::size_t>(p)),
          direct_(f.dense && !copy) {
        std::int64_t total = 0;
        for (int j = 0; j < p; ++j) {
            const auto js = static_cast<std::size_t>(j);
            bytes_[js] = std::int64_t{counts[j]} * f.size;
            offsets_[js] = direct_ ? std::int64_t{displs[j]} * f.extent : total;
            total += bytes_[js];
        }
        if (direct_) {
            base_ = buf_;
            return;
        }
        staging_ = host_buffer(std::max<std::int64_t>(total, 1));
        base_ = staging_.data();
        if (send)
            for (int j = 0; j < p; ++j) move(j, true);
    }
    /// Writes received staging bytes back into the buffer (a no-op when received in place).
    void scatter(int p) {
        if (direct_) return;
        for (int j = 0; j < p; ++j) move(j, false);
    }
    const std::byte* base() const { return base_; }
    std::byte* base() { return base_; }
    const std::vector<std::int64_t>& bytes() const { return bytes_; }
    const std::vector<std::int64_t>& offsets() const { return offsets_; }

private:
    void move(int j, bool gather) {
        const auto js = static_cast<std::size_t>(j);
        if (bytes_[js] == 0) return;
        void* at = buf_ + static_cast<std::ptrdiff_t>(std::int64_t{displs_[j]} * facts_.extent);
        byte_image img(at, counts_[j], type_, facts_);
        if (gather) {
            img.pack();
            std::memcpy(base_ + offsets_[js], img.data(), static_cast<std::size_t>(bytes_[js]));
        } else {
            std::memcpy(img.data(), base_ + offsets_[js], static_cast<std::size_t>(bytes_[js]));
            img.unpack();
        }
    }

    std::byte* buf_;
    const int* counts_;
    const int* displs_;
    MPI_Datatype type_;
    type_facts facts_;
    std::vector<std::int64_t> bytes_, offsets_;
    bool direct_;
    host_buffer staging_{0};
    std::byte* base_ = nullptr;
};

}  // namespace

int runtime::alltoallv(const void* sendbuf, const int sendcounts[], const int sdispls[], MPI_Datatype sendtype,
                       void* recvbuf, const int recvcounts[], const int rdispls[], MPI_Datatype recvtype,
                       MPI_Comm comm) noexcept {
    this->count(shim::alltoallv);
    const auto library = [&] {
        return PMPI_Alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm);
    };
    const auto pass = [&](pass_reason why) {
        count_pass(direction::collective, why);
        return library();
    };
    if (!collectives_on(comm)) return pass(running() ? pass_reason::forced : pass_reason::not_running);
    // One decision per communicator (size key 0): every rank must take the same path, and the
    // sizes differ per rank. Every check below that passes to the library is one an MPI-correct
    // program answers alike on all ranks.
    if (settled_on_library(comm, coll_op::alltoallv, 0)) return pass(pass_reason::planned);
    const bool in_place = sendbuf == MPI_IN_PLACE;
    int size = 0, inter = 0;
    if (recvcounts == nullptr || rdispls == nullptr || (!in_place && (sendcounts == nullptr || sdispls == nullptr)) ||
        PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter || PMPI_Comm_size(comm, &size) != MPI_SUCCESS)
        return pass(pass_reason::bad_argument);
    const type_facts rt = facts_of(recvtype, memo_, types_);
    const type_facts st = in_place ? rt : facts_of(sendtype, memo_, types_);
    if (!rt.ok || !st.ok) return pass(pass_reason::bad_argument);
    for (int j = 0; j < size; ++j)
        if (recvcounts[j] < 0 || (!in_place && sendcounts[j] < 0)) return pass(pass_reason::bad_argument);
    device_stage dev(devices_in_use(), library_takes_device());
    if (dev.enabled()) {
        byte_span send, recv;
        for (int j = 0; j < size; ++j) {
            if (!in_place) send.add(sendtype, sendcounts[j], std::int64_t{sdispls[j]} * st.extent);
            recv.add(recvtype, recvcounts[j], std::int64_t{rdispls[j]} * rt.extent);
        }
        dev.add(sendbuf, send, true, false);
        dev.add(recvbuf, recv, in_place, true);
    }
    return collective(shim::alltoallv, coll_op::alltoallv, comm, 0, true, dev, library,
                      [&](const topology& topo, const collective_options& opt) {
                          mpi_transport t(topo.comm());
                          // In place: the data to send are in recvbuf under the receive counts, copied out first.
                          block_images in(in_place ? recvbuf : const_cast<void*>(sendbuf),
                                          in_place ? recvcounts : sendcounts, in_place ? rdispls : sdispls,
                                          in_place ? recvtype : sendtype, st, size, true, in_place);
                          block_images out(recvbuf, recvcounts, rdispls, recvtype, rt, size, false, false);
                          shunt::alltoallv(t, topo.groups(opt.levels), in.base(), in.bytes(), in.offsets(), out.base(),
                                           out.bytes(), out.offsets());
                          out.scatter(size);
                      });
}

}  // namespace shunt::detail
