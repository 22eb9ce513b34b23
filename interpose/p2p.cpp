// interpose/p2p.cpp: point-to-point calls with device buffers or non-contiguous host data: shunt packs
// into a pool block, the library moves MPI_PACKED bytes, completion calls unpack and release.
#include "runtime.hpp"

#include <shunt/errors.hpp>
#include <shunt/gpu/descriptor.hpp>
#include <shunt/gpu/memory.hpp>
#include <shunt/gpu/pack.hpp>
#include <shunt/log.hpp>
#include <shunt/model/device.hpp>
#include <shunt/pack/host.hpp>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // Open MPI: MPIX_Query_cuda_support
#endif

namespace shunt::detail {

// Why MPI_PACKED: MPI lets a message sent as MPI_PACKED be received with any datatype whose
// type signature matches, and a typed message be received as MPI_PACKED, so the peer may or
// may not run shunt. Both Open MPI and MPICH keep a byte count in the status, so
// MPI_Get_count(status, original type) and MPI_Get_elements answer as for a typed receive.

/// How a buffer's bytes reach the library.
enum class p2p_method : std::uint8_t {
    host,  ///< shunt's host packer into a host block
    staged,  ///< device kernel into device scratch, then a copy to a pinned block
    one_shot,  ///< device kernel straight into a mapped pinned block (a copy for contiguous data)
    device,  ///< device kernel into a device block handed to a CUDA-aware MPI
};

/// What shunt does with one buffer of a point-to-point call.
struct runtime::p2p_plan {
    const type_info* t = nullptr;  ///< valid for the call
    std::shared_ptr<const type_info> keep;  ///< for requests: keeps `t` alive after MPI_Type_free
    std::shared_ptr<const gpu::device_form> form;  ///< device methods
    std::int64_t bytes = 0;  ///< count * size
    int count = 0;
    p2p_method method = p2p_method::host;
};

/// One request of shunt's: the library's handle moves a pool block; this says what is owed.
struct runtime::p2p_request {
    std::uint64_t serial = 0;
    bool receive = false;
    bool persistent = false;
    bool active = false;  ///< persistent: started and not yet completed
    bool unpacked = false;  ///< a receive whose data MPI_Request_get_status already unpacked
    shim origin = shim::isend;
    void* buf = nullptr;  ///< the application's buffer (const for sends)
    MPI_Comm comm = MPI_COMM_NULL;  ///< the communicator (MPI_COMM_NULL for MPI_Imrecv)
    p2p_plan plan;
    gpu::pool_block block;
};

struct runtime::p2p_state {
    bool cuda_aware = false;  ///< the MPI library takes device pointers
    std::atomic<bool> fallback_warned{false};

    mutable std::mutex mutex;  ///< guards the tables below; never held across a PMPI call
    std::unordered_map<MPI_Request, p2p_request> requests;
    std::vector<std::pair<MPI_Request, p2p_request>> detached;  ///< freed by the application while active
    std::uint64_t next_serial = 1;
    std::atomic<std::size_t> live{0};  ///< requests.size() + detached.size()
    std::atomic<std::size_t> detached_n{0};

    /// Device methods the model chose, per (packed bytes, blocks, receiving), with the model
    /// generation they were chosen at (device_method).
    struct method_key {
        std::int64_t bytes = 0, blocks = 0;
        bool receive = false;
        bool operator==(const method_key&) const = default;
    };
    struct method_hash {
        std::size_t operator()(const method_key& k) const noexcept {
            const auto h = static_cast<std::uint64_t>(k.bytes) * 0x9E3779B97F4A7C15ull ^
                           (static_cast<std::uint64_t>(k.blocks) + 0x7F4A7C159E3779B9ull) ^ (k.receive ? 1u : 0u);
            return static_cast<std::size_t>(h);
        }
    };
    struct method_entry {
        std::uint64_t generation = 0;
        p2p_method method = p2p_method::staged;
    };
    std::mutex methods_mutex;
    std::unordered_map<method_key, method_entry, method_hash> methods;

    /// Device forms per (type, count), holding the type alive so its address is not reused.
    std::mutex forms_mutex;
    std::map<std::pair<const type_info*, int>,
             std::pair<std::shared_ptr<const type_info>, std::shared_ptr<const gpu::device_form>>>
        forms;

    void update_live() { live.store(requests.size() + detached.size(), std::memory_order_release); }
};

namespace {

constexpr std::int64_t one_shot_limit = 64 * 1024;  ///< the fixed rule's switch from ONE_SHOT to STAGED
constexpr double p2p_margin_s = 2e-6;  ///< see plan_p2p: what shunt's packing must save

bool on_device(gpu::memory_kind k) { return k == gpu::memory_kind::device || k == gpu::memory_kind::managed; }

/// Packed bytes of a status: what the library received (MPI_Get_count of MPI_BYTE), 0 when undefined.
std::int64_t received_bytes(const MPI_Status& st) {
    int n = 0;
    if (PMPI_Get_count(&st, MPI_BYTE, &n) != MPI_SUCCESS || n == MPI_UNDEFINED || n < 0) return 0;
    return n;
}

bool truncated(int rc) {
    int cls = MPI_SUCCESS;
    return rc != MPI_SUCCESS && PMPI_Error_class(rc, &cls) == MPI_SUCCESS && cls == MPI_ERR_TRUNCATE;
}

/// True when a receive that returned rc may have delivered data: success or truncation.
bool delivered(int rc) { return rc == MPI_SUCCESS || truncated(rc); }

/// The packed bytes the library wrote into a receive block of `capacity` bytes, for a receive
/// on `comm` (MPI_COMM_NULL when unknown) that ended with error code `rc` and status `st`:
/// what MPI_Recv would have written into a typed buffer is their unpacking.
std::int64_t written_bytes(int rc, const MPI_Status& st, std::int64_t capacity, MPI_Comm comm) {
    if (rc == MPI_SUCCESS) return std::min(received_bytes(st), capacity);
    if (!truncated(rc)) return 0;
#if defined(MPICH_VERSION)
    // MPICH 4.0 (ch4) drops a truncated message from another process (nothing written, the
    // status count unreliable) but copies the first bytes of one a process sent itself.
    // On an inter-communicator the source is a rank of the other group: never this process.
    int me = MPI_PROC_NULL, inter = 1;
    const bool self = comm != MPI_COMM_NULL && PMPI_Comm_test_inter(comm, &inter) == MPI_SUCCESS && !inter &&
                      PMPI_Comm_rank(comm, &me) == MPI_SUCCESS && st.MPI_SOURCE == me;
    return self ? capacity : 0;
#else
    // Open MPI 4.1 fills the receive buffer with the first bytes of the message (the status
    // counts the whole message).
    (void)st;
    (void)comm;
    return capacity;
#endif
}

/// `call()` (the library's test or wait of a request the application freed) without error
/// handlers: the error is the request's alone, which the application can no longer see, and
/// without shunt the library drops it (a fatal handler must not abort the job from an unrelated
/// call). On the request's communicator and on MPI_COMM_WORLD, where MPICH 4.0 raises errors of
/// MPI_Test and MPI_Wait.
template <class Call>
int without_errhandler(MPI_Comm comm, Call call) {
    const errors_returned world(MPI_COMM_WORLD);
    const errors_returned own(comm == MPI_COMM_WORLD ? MPI_COMM_NULL : comm);
    return call();
}

/// A data block for `plan`'s packed bytes: device memory for DEVICE, pinned (plain host memory
/// without a device) otherwise.
gpu::pool_block acquire(const runtime::p2p_plan& plan) {
    const auto kind = plan.method == p2p_method::device ? gpu::pool_kind::device : gpu::pool_kind::pinned;
    return gpu::pool_acquire(kind, static_cast<std::size_t>(std::max<std::int64_t>(plan.bytes, 1)));
}

using gpu::scoped_block;  // pool blocks released on every path

/// Records `r` under `handle` (the caller holds the table's mutex). An entry already under that
/// handle is done: the library reuses a handle only once its request is freed, and Open MPI 4.1
/// hands one shared handle (ompi_request_empty) to every send that completed at once (small
/// eager sends); replacing the entry without releasing its block leaked the block.
void record(runtime::p2p_state& p, MPI_Request handle, runtime::p2p_request&& r) {
    auto [it, fresh] = p.requests.try_emplace(handle);
    if (!fresh) gpu::pool_release(it->second.block);
    it->second = std::move(r);
}

/// Packs the application's buffer into `out` by plan's method; one stream synchronisation.
void pack_into(const runtime::p2p_plan& plan, const void* buf, void* out) {
    std::int64_t done = 0;
    switch (plan.method) {
        case p2p_method::host: done = pack_host(*plan.t, plan.count, buf, out); break;
        case p2p_method::one_shot:
        case p2p_method::device:
            done = gpu::pack(*plan.form, buf, out, nullptr);
            gpu::synchronize(nullptr);
            break;
        case p2p_method::staged: {
            const scoped_block scratch(gpu::pool_acquire(gpu::pool_kind::device, static_cast<std::size_t>(plan.bytes)));
            done = gpu::pack(*plan.form, buf, scratch.b.ptr, nullptr);
            gpu::copy(out, scratch.b.ptr, static_cast<std::size_t>(plan.bytes), nullptr);
            gpu::synchronize(nullptr);
            break;
        }
    }
    if (done != plan.bytes)
        throw error("packed " + std::to_string(done) + " of " + std::to_string(plan.bytes) + " bytes");
}

/// One send of several started together: its plan, the application's buffer, its block.
struct pack_job {
    const runtime::p2p_plan* plan;
    const void* buf;
    void* out;
};

/// Packs several sends at once (MPI_Startall): host plans on the host packer, device plans in
/// one fused kernel launch (a staged one into device scratch, copied to its block after) and
/// one stream synchronisation for all of them.
void pack_many(std::span<const pack_job> jobs) {
    std::vector<gpu::device_input> fused;
    std::deque<scoped_block> scratch;
    std::vector<const pack_job*> staged;
    for (const pack_job& j : jobs) {
        if (j.plan->method == p2p_method::host) {
            pack_into(*j.plan, j.buf, j.out);
            continue;
        }
        void* out = j.out;
        if (j.plan->method == p2p_method::staged) {
            out =
                scratch.emplace_back(gpu::pool_acquire(gpu::pool_kind::device, static_cast<std::size_t>(j.plan->bytes)))
                    .b.ptr;
            staged.push_back(&j);
        }
        fused.push_back({j.plan->form.get(), j.buf, out});
    }
    if (fused.empty()) return;
    gpu::pack_fused(fused, nullptr);
    for (std::size_t i = 0; i < staged.size(); ++i)
        gpu::copy(staged[i]->out, scratch[i].b.ptr, static_cast<std::size_t>(staged[i]->plan->bytes), nullptr);
    gpu::synchronize(nullptr);
}

/// Unpacks the first `n` received bytes from `in` into the application's buffer.
void unpack_from(const runtime::p2p_plan& plan, const void* in, std::int64_t n, void* buf) {
    if (n <= 0) return;
    switch (plan.method) {
        case p2p_method::host: unpack_host(*plan.t, plan.count, in, buf, 0, n); break;
        case p2p_method::one_shot:
        case p2p_method::device:
            gpu::unpack(*plan.form, in, buf, nullptr, 0, n);
            gpu::synchronize(nullptr);
            break;
        case p2p_method::staged: {
            const scoped_block scratch(gpu::pool_acquire(gpu::pool_kind::device, static_cast<std::size_t>(n)));
            gpu::copy(scratch.b.ptr, in, static_cast<std::size_t>(n), nullptr);
            gpu::unpack(*plan.form, scratch.b.ptr, buf, nullptr, 0, n);
            gpu::synchronize(nullptr);
            break;
        }
    }
}

/// Unpacks a receive the library completed with error `err` and status `st` into the
/// application's buffer. Returns the bytes unpacked, or -1 when nothing is due: not a receive,
/// already unpacked by MPI_Request_get_status, an error other than truncation, or cancelled.
std::int64_t deliver(const runtime::p2p_request& r, const MPI_Status& st, int err) {
    int cancelled = 0;
    if (!r.receive || r.unpacked || !delivered(err) || PMPI_Test_cancelled(&st, &cancelled) != MPI_SUCCESS || cancelled)
        return -1;
    const std::int64_t n = written_bytes(err, st, r.plan.bytes, r.comm);
    unpack_from(r.plan, r.block.ptr, n, r.buf);
    return n;
}

/// The rule that preceded the model, and what the model's choice keeps on a tie: handed to a
/// CUDA-aware MPI, else one-shot below one_shot_limit and staged above.
device_path fixed_device_path(bool cuda_aware, std::int64_t bytes) {
    return cuda_aware ? device_path::device : bytes < one_shot_limit ? device_path::one_shot : device_path::staged;
}

p2p_method method_of(device_path d) {
    return d == device_path::device     ? p2p_method::device
           : d == device_path::one_shot ? p2p_method::one_shot
                                        : p2p_method::staged;
}

/// The device method for `bytes` packed bytes in `blocks` contiguous blocks of a device buffer,
/// sent or received: the cheapest path by the cost model (shunt/model/device.hpp: one-shot, staged,
/// or for a CUDA-aware MPI the device, each priced from the device tables at the measured block
/// length nearest bytes / blocks), the fixed rule on a tie; SHUNT_PACK forces one. Decided once
/// per (bytes, blocks, direction) and model generation (a new decision is logged under
/// SHUNT_LOG=decide), so a warm call is one hash probe.
p2p_method device_method(runtime::p2p_state& p, const cost_model& model, pack_choice forced, std::int64_t bytes,
                         std::int64_t blocks, bool receive) {
    p2p_method m = p2p_method::staged;
    const bool fixed_by_user = forced == pack_choice::one_shot || forced == pack_choice::staged ||
                               (forced == pack_choice::device && p.cuda_aware);
    if (!fixed_by_user) {
        const runtime::p2p_state::method_key key{bytes, std::max<std::int64_t>(blocks, 1), receive};
        const std::uint64_t generation = model.generation();
        bool cached = false;
        {
            const std::lock_guard lock(p.methods_mutex);
            auto it = p.methods.find(key);
            if (it != p.methods.end() && it->second.generation == generation) m = it->second.method, cached = true;
        }
        if (!cached) {
            const double b = static_cast<double>(bytes);
            const device_path_costs costs =
                price_device_paths(model, b / static_cast<double>(key.blocks), b, receive, p.cuda_aware);
            const device_path fixed = fixed_device_path(p.cuda_aware, bytes);
            const device_path chosen = cheapest_device_path(costs, fixed, p.cuda_aware);
            m = method_of(chosen);
            bool is_new = false;
            {
                const std::lock_guard lock(p.methods_mutex);
                if (p.methods.size() >= 4096) p.methods.clear();
                auto [it, inserted] = p.methods.try_emplace(key);
                is_new = inserted;
                it->second = {generation, m};
            }
            if (is_new && log_enabled(log_level::debug, log_category::decide)) {
                char device[48] = "not available";
                if (std::isfinite(costs[device_path::device]))
                    std::snprintf(device, sizeof device, "%.3g us", costs[device_path::device] * 1e6);
                else if (p.cuda_aware)
                    std::snprintf(device, sizeof device, "not priced (no p2p.<level>.dd table)");
                log_debug(
                    log_category::decide,
                    "device buffer, %s %lld bytes in %lld blocks: %s (predicted one-shot %.3g us, staged %.3g us, "
                    "device %s%s%.*s; the fixed rule: %s)",
                    receive ? "receiving" : "sending", static_cast<long long>(bytes),
                    static_cast<long long>(key.blocks), to_string(chosen).data(), costs[device_path::one_shot] * 1e6,
                    costs[device_path::staged] * 1e6, device,
                    costs.level.empty() ? "" : "; each with the library's transfer at level ",
                    static_cast<int>(costs.level.size()), costs.level.data(), to_string(fixed).data());
            }
        }
    }
    switch (forced) {
        case pack_choice::one_shot: m = p2p_method::one_shot; break;
        case pack_choice::staged: m = p2p_method::staged; break;
        case pack_choice::device:
            if (p.cuda_aware)
                m = p2p_method::device;
            else if (!p.fallback_warned.exchange(true))
                log_warn(log_category::pack,
                         "SHUNT_PACK=device needs a CUDA-aware MPI library (set "
                         "SHUNT_CUDA_AWARE=1 if it is one); device buffers are staged instead (said once)");
            break;
        default: break;
    }
    return m;
}

/// The device form of `count` x `type` (decoded as `t`), built once and cached; the cache holds
/// the type's entry so that its address is not reused while the form is cached.
std::shared_ptr<const gpu::device_form> device_form_for(runtime::p2p_state& p, type_memo& memo, const type_info* t,
                                                        int count, MPI_Datatype type) {
    const std::lock_guard lock(p.forms_mutex);
    auto it = p.forms.find({t, count});
    if (it == p.forms.end()) {
        if (p.forms.size() >= 256) p.forms.clear();
        auto keep = memo.find_shared(type);
        if (keep.get() != t) throw error("the datatype changed while its device form was built");
        auto form = std::make_shared<const gpu::device_form>(gpu::flat_form(t->form, t->extent, count));
        it = p.forms.emplace(std::pair{t, count}, std::pair{std::move(keep), std::move(form)}).first;
    }
    return it->second.second;
}

int send_call(runtime::send_mode m, const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
    switch (m) {
        case runtime::send_mode::sync: return PMPI_Ssend(buf, count, type, dest, tag, comm);
        case runtime::send_mode::ready: return PMPI_Rsend(buf, count, type, dest, tag, comm);
        case runtime::send_mode::buffered: return PMPI_Bsend(buf, count, type, dest, tag, comm);
        case runtime::send_mode::standard: break;
    }
    return PMPI_Send(buf, count, type, dest, tag, comm);
}

int isend_call(runtime::send_mode m, const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
               MPI_Request* r) {
    switch (m) {
        case runtime::send_mode::sync: return PMPI_Issend(buf, count, type, dest, tag, comm, r);
        case runtime::send_mode::ready: return PMPI_Irsend(buf, count, type, dest, tag, comm, r);
        case runtime::send_mode::buffered: return PMPI_Ibsend(buf, count, type, dest, tag, comm, r);
        case runtime::send_mode::standard: break;
    }
    return PMPI_Isend(buf, count, type, dest, tag, comm, r);
}

int send_init_call(runtime::send_mode m, const void* buf, int count, MPI_Datatype type, int dest, int tag,
                   MPI_Comm comm, MPI_Request* r) {
    switch (m) {
        case runtime::send_mode::sync: return PMPI_Ssend_init(buf, count, type, dest, tag, comm, r);
        case runtime::send_mode::ready: return PMPI_Rsend_init(buf, count, type, dest, tag, comm, r);
        case runtime::send_mode::buffered: return PMPI_Bsend_init(buf, count, type, dest, tag, comm, r);
        case runtime::send_mode::standard: break;
    }
    return PMPI_Send_init(buf, count, type, dest, tag, comm, r);
}

}  // namespace

runtime::p2p_state* runtime::new_p2p_state() noexcept { return new (std::nothrow) p2p_state; }

void runtime::start_p2p() noexcept {
    if (p2p_ == nullptr) return;
    try {
        if (!gpu::device_available()) return;  // every buffer is host memory: nothing else to learn
        // SHUNT_CUDA_AWARE, when set, overrides what the library says of itself.
        const config_snapshot& snap = config_state();
        bool set = false;
        for (std::size_t i = 0; i < config_variable_count; ++i)
            if (config_variables[i].name == "SHUNT_CUDA_AWARE")
                set = snap.raw[i].has_value() && !snap.raw[i]->empty() && !snap.rejected[i];
        bool aware = false;
        if (set) {
            aware = cfg_.cuda_aware;
        } else {
#if defined(OMPI_HAVE_MPI_EXT_CUDA) && OMPI_HAVE_MPI_EXT_CUDA
            aware = MPIX_Query_cuda_support() == 1;
#elif defined(MPIX_GPU_SUPPORT_CUDA)
            int supported = 0;
            aware = MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, &supported) == MPI_SUCCESS && supported != 0;
#endif
        }
        p2p_->cuda_aware = aware;
        devices_.store(true, std::memory_order_release);
        log_info(log_category::init, "device buffers in point-to-point calls: %s",
                 aware ? "the MPI library is CUDA-aware" : "staged through host memory (MPI not CUDA-aware)");
    } catch (...) {
        devices_.store(false, std::memory_order_release);
    }
}

runtime::device_way runtime::device_way_of(const void* buf, std::int64_t bytes) noexcept {
    if (!devices_.load(std::memory_order_acquire) || !on_device(gpu::classify(buf))) return device_way::host;
    // The buffer's layout is unknown here: priced as one contiguous block.
    switch (device_method(*p2p_, *model_, cfg_.pack, bytes, 1, false)) {
        case p2p_method::device: return device_way::device;
        case p2p_method::one_shot: return device_way::one_shot;
        default: return device_way::staged;
    }
}

std::shared_ptr<const gpu::device_form> runtime::device_form_of(const type_info* t, int count, MPI_Datatype type) {
    if (p2p_ == nullptr) throw unsupported("no point-to-point state");
    return device_form_for(*p2p_, memo_, t, count, type);
}

bool runtime::library_takes_device() const noexcept { return p2p_ != nullptr && p2p_->cuda_aware; }

bool runtime::p2p_live() const noexcept { return p2p_ != nullptr && p2p_->live.load(std::memory_order_acquire) != 0; }

bool runtime::host_run(const void* buf, int count, MPI_Datatype type, int peer) noexcept {
    if (devices_.load(std::memory_order_relaxed) || cfg_.pack == pack_choice::library || count <= 0 ||
        peer == MPI_PROC_NULL || buf == nullptr || p2p_ == nullptr ||
        state_.load(std::memory_order_acquire) != state::running)
        return false;
    try {
        const type_info* t = memo_.find(type);
        std::int64_t bytes = 0;
        return t != nullptr && !__builtin_mul_overflow(static_cast<std::int64_t>(count), t->size, &bytes) &&
               bytes > 0 && bytes <= INT_MAX && t->dense(count);
    } catch (...) {
        return false;  // plan_p2p decides, and reports
    }
}

pass_reason runtime::plan_p2p(shim s, direction d, const void* buf, int count, MPI_Datatype type, int peer,
                              bool keep_type, p2p_plan& plan) noexcept {
    if (p2p_ == nullptr || !running()) return pass_reason::not_running;
    if (count < 0) return pass_reason::bad_argument;
    if (count == 0 || peer == MPI_PROC_NULL) return pass_reason::empty;
    const bool device_on = devices_.load(std::memory_order_acquire);
    if (cfg_.pack == pack_choice::library && !device_on) return pass_reason::forced;
    if (buf == nullptr) return pass_reason::bad_argument;  // MPI_BOTTOM: absolute addresses, the library's
    try {
        const bool device = device_on && on_device(gpu::classify(buf));
        const type_info* t = memo_.find(type);
        if (t == nullptr) return pass_reason::unknown_type;
        std::int64_t bytes = 0;
        if (__builtin_mul_overflow(static_cast<std::int64_t>(count), t->size, &bytes) || bytes > INT_MAX)
            return pass_reason::too_large;
        if (bytes == 0) return pass_reason::empty;
        const bool dense = t->dense(count);
        if (!device) {
            if (dense) return pass_reason::contiguous;
            if (cfg_.pack == pack_choice::library) return pass_reason::forced;
            if (cfg_.pack != pack_choice::host) {
                // Shunt's pack plus one copy of the packed bytes (the library then moves them
                // contiguously) against the library's own packing inside the send.
                bool is_new = false;
                const plan_decision pd = planner_.pack(*t, count, d == direction::recv, &is_new);
                const double shunt_s = pd.alternatives[1].predicted_s + model_->predict("copy.memcpy", double(bytes));
                // The model knows neither the pool block, side table and completion work of a
                // message shunt carries nor its second trip through the cache, and no
                // point-to-point observation corrects it: shunt's packing only where it is
                // predicted at least twice as fast with 2 us to spare (a 3-D halo exchange of
                // subarray types ran 10-25% slower with the plain comparison).
                const bool shunt = 2 * shunt_s + p2p_margin_s < pd.alternatives[0].predicted_s;
                if (is_new && cfg_.log.enabled(log_level::debug, log_category::decide))
                    log_debug(log_category::decide,
                              "%s of %d elements (%lld bytes in %lld blocks): %s (predicted library %.3g us, "
                              "shunt's host packer and a copy %.3g us)",
                              shim_names[static_cast<std::size_t>(s)], count, static_cast<long long>(bytes),
                              static_cast<long long>(pd.blocks), shunt ? "shunt's host packer" : "the library",
                              pd.alternatives[0].predicted_s * 1e6, shunt_s * 1e6);
                if (!shunt) return pass_reason::planned;
            }
            plan.method = p2p_method::host;
        } else {
            if (dense && p2p_->cuda_aware) return pass_reason::contiguous;
            p2p_method m =
                device_method(*p2p_, *model_, cfg_.pack, bytes, planner::pack_blocks(*t, count), d == direction::recv);
            if (dense && !p2p_->cuda_aware) m = p2p_method::one_shot;  // a plain copy to pinned memory
            plan.method = m;
            plan.form = device_form_for(*p2p_, memo_, t, count, type);
        }
        plan.t = t;
        plan.bytes = bytes;
        plan.count = count;
        if (keep_type) {
            plan.keep = memo_.find_shared(type);
            if (plan.keep.get() != t) return pass_reason::internal;
        }
        return pass_reason::none;
    } catch (...) {
        return plan_failure(s);
    }
}

// ---- MPI_Pack / MPI_Unpack with a device buffer ----

bool runtime::device_pack(direction d, const void* in, void* out, int count, MPI_Datatype type, std::int64_t room,
                          int* position, MPI_Comm comm, int& rc) noexcept {
    if (!devices_.load(std::memory_order_acquire)) return false;
    const gpu::memory_kind in_kind = gpu::classify(in), out_kind = gpu::classify(out);
    if (!on_device(in_kind) && !on_device(out_kind)) return false;
    const bool packing = d == direction::pack;
    const shim s = packing ? shim::pack : shim::unpack;
    const int size = static_cast<int>(std::min<std::int64_t>(room + *position, INT_MAX));
    const auto pass = [&](pass_reason why) {
        count_pass(d, why);
        return packing ? PMPI_Pack(in, count, type, out, size, position, comm)
                       : PMPI_Unpack(in, size, position, out, count, type, comm);
    };
    try {
        if (cfg_.pack == pack_choice::library && p2p_->cuda_aware) return rc = pass(pass_reason::forced), true;
        // Zero elements: the library judges the communicator and the datatype, touching no memory.
        int probe = *position;
        const int checked = packing ? PMPI_Pack(in, 0, type, out, size, &probe, comm)
                                    : PMPI_Unpack(in, size, &probe, out, 0, type, comm);
        if (checked != MPI_SUCCESS) return count_pass(d, pass_reason::rejected), rc = checked, true;
        const type_info* t = memo_.find(type);
        if (t == nullptr) return rc = pass(pass_reason::unknown_type), true;
        std::int64_t bytes = 0;
        if (__builtin_mul_overflow(static_cast<std::int64_t>(count), t->size, &bytes))
            return rc = pass(pass_reason::too_large), true;
        if (bytes > room) return rc = pass(pass_reason::would_truncate), true;
        if (bytes > 0) {
            const void* typed = packing ? in : out;
            char* packed = static_cast<char*>(packing ? out : const_cast<void*>(in)) + *position;
            const gpu::memory_kind packed_kind = packing ? out_kind : in_kind;
            if (on_device(packing ? in_kind : out_kind)) {
                const auto form = device_form_for(*p2p_, memo_, t, count, type);
                // Kernels reach device, managed and mapped pinned memory; pageable memory goes
                // through device scratch and a copy.
                const bool direct = packed_kind != gpu::memory_kind::host;
                const scoped_block scratch(
                    direct ? gpu::pool_block{}
                           : gpu::pool_acquire(gpu::pool_kind::device, static_cast<std::size_t>(bytes)));
                void* stream_buf = direct ? packed : scratch.b.ptr;
                if (packing) {
                    gpu::pack(*form, typed, stream_buf, nullptr);
                    if (!direct) gpu::copy(packed, stream_buf, static_cast<std::size_t>(bytes), nullptr);
                } else {
                    if (!direct) gpu::copy(stream_buf, packed, static_cast<std::size_t>(bytes), nullptr);
                    gpu::unpack(*form, stream_buf, const_cast<void*>(typed), nullptr);
                }
                gpu::synchronize(nullptr);
            } else {  // host typed buffer, packed bytes on the device: host packer and a copy
                const scoped_block staging(gpu::pool_acquire(gpu::pool_kind::pinned, static_cast<std::size_t>(bytes)));
                if (packing) {
                    pack_host(*t, count, typed, staging.b.ptr);
                    gpu::copy(packed, staging.b.ptr, static_cast<std::size_t>(bytes), nullptr);
                    gpu::synchronize(nullptr);
                } else {
                    gpu::copy(staging.b.ptr, packed, static_cast<std::size_t>(bytes), nullptr);
                    gpu::synchronize(nullptr);
                    unpack_host(*t, count, staging.b.ptr, const_cast<void*>(typed));
                }
            }
        }
        *position += static_cast<int>(bytes);
        count_done(d, bytes);
        rc = MPI_SUCCESS;
        return true;
    } catch (const unsupported& e) {
        log_debug(log_category::pack, "%s: %s; left to the library", shim_names[static_cast<std::size_t>(s)], e.what());
        rc = pass(pass_reason::too_large);
    } catch (const std::exception& e) {
        internal_failure(s, e.what());
        rc = pass(pass_reason::internal);
    } catch (...) {
        internal_failure(s, "unknown exception");
        rc = pass(pass_reason::internal);
    }
    return true;
}

// ---- sends ----

int runtime::send(shim s, send_mode m, const void* buf, int count, MPI_Datatype type, int dest, int tag,
                  MPI_Comm comm) noexcept {
    this->count(s);
    if (p2p_live()) progress_detached();
    if (host_run(buf, count, type, dest)) {
        count_pass(direction::send, pass_reason::contiguous);
        return send_call(m, buf, count, type, dest, tag, comm);
    }
    p2p_plan plan;
    const pass_reason why = plan_p2p(s, direction::send, buf, count, type, dest, false, plan);
    if (why != pass_reason::none) {
        count_pass(direction::send, why);
        return send_call(m, buf, count, type, dest, tag, comm);
    }
    gpu::pool_block block;
    try {
        block = acquire(plan);
        pack_into(plan, buf, block.ptr);
    } catch (const std::exception& e) {
        gpu::pool_release(block);
        internal_failure(s, e.what());
        count_pass(direction::send, pass_reason::internal);
        return send_call(m, buf, count, type, dest, tag, comm);
    }
    // Buffered mode copies into the attached buffer before returning: the block is free after.
    const int rc = send_call(m, block.ptr, static_cast<int>(plan.bytes), MPI_PACKED, dest, tag, comm);
    gpu::pool_release(block);
    count_done(direction::send, plan.bytes);
    stats_.add(counter_index::shim_handled(s));
    return rc;
}

int runtime::isend(shim s, send_mode m, const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                   MPI_Request* request) noexcept {
    this->count(s);
    if (p2p_live()) progress_detached();
    if (request != nullptr && host_run(buf, count, type, dest)) {
        count_pass(direction::send, pass_reason::contiguous);
        return isend_call(m, buf, count, type, dest, tag, comm, request);
    }
    p2p_plan plan;
    const pass_reason why = request == nullptr ? pass_reason::bad_argument
                                               : plan_p2p(s, direction::send, buf, count, type, dest, false, plan);
    if (why != pass_reason::none) {
        count_pass(direction::send, why);
        return isend_call(m, buf, count, type, dest, tag, comm, request);
    }
    p2p_request r;
    try {
        r.block = acquire(plan);
        pack_into(plan, buf, r.block.ptr);
        r.plan = std::move(plan);
        r.plan.t = nullptr;  // not needed at completion: nothing to unpack
    } catch (const std::exception& e) {
        gpu::pool_release(r.block);
        internal_failure(s, e.what());
        count_pass(direction::send, pass_reason::internal);
        return isend_call(m, buf, count, type, dest, tag, comm, request);
    }
    const int rc = isend_call(m, r.block.ptr, static_cast<int>(r.plan.bytes), MPI_PACKED, dest, tag, comm, request);
    if (rc != MPI_SUCCESS || *request == MPI_REQUEST_NULL) {
        gpu::pool_release(r.block);
        return rc;
    }
    r.origin = s;
    r.buf = const_cast<void*>(buf);
    r.comm = comm;
    count_done(direction::send, r.plan.bytes);
    stats_.add(counter_index::shim_handled(s));
    try {
        const std::lock_guard lock(p2p_->mutex);
        r.serial = p2p_->next_serial++;
        record(*p2p_, *request, std::move(r));
        p2p_->update_live();
    } catch (...) {
        internal_failure(s, "cannot record the request");  // the block is never reused: no harm but a leak
    }
    return rc;
}

int runtime::send_init(shim s, send_mode m, const void* buf, int count, MPI_Datatype type, int dest, int tag,
                       MPI_Comm comm, MPI_Request* request) noexcept {
    this->count(s);
    p2p_plan plan;
    const pass_reason why = request == nullptr ? pass_reason::bad_argument
                                               : plan_p2p(s, direction::send, buf, count, type, dest, true, plan);
    if (why != pass_reason::none) {
        count_pass(direction::send, why);
        return send_init_call(m, buf, count, type, dest, tag, comm, request);
    }
    p2p_request r;
    try {
        r.block = acquire(plan);
        r.plan = std::move(plan);
        r.persistent = true;
        r.origin = s;
        r.buf = const_cast<void*>(buf);
        r.comm = comm;
        const int rc =
            send_init_call(m, r.block.ptr, static_cast<int>(r.plan.bytes), MPI_PACKED, dest, tag, comm, request);
        if (rc != MPI_SUCCESS) {
            gpu::pool_release(r.block);
            return rc;
        }
        stats_.add(counter_index::shim_handled(s));
        const std::lock_guard lock(p2p_->mutex);
        r.serial = p2p_->next_serial++;
        record(*p2p_, *request, std::move(r));
        p2p_->update_live();
        return rc;
    } catch (const std::exception& e) {
        gpu::pool_release(r.block);
        internal_failure(s, e.what());
    }
    count_pass(direction::send, pass_reason::internal);
    return send_init_call(m, buf, count, type, dest, tag, comm, request);
}

// ---- receives ----

int runtime::recv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
                  MPI_Status* status) noexcept {
    this->count(shim::recv);
    if (p2p_live()) progress_detached();
    if (host_run(buf, count, type, source)) {
        count_pass(direction::recv, pass_reason::contiguous);
        return PMPI_Recv(buf, count, type, source, tag, comm, status);
    }
    p2p_plan plan;
    const pass_reason why = plan_p2p(shim::recv, direction::recv, buf, count, type, source, false, plan);
    if (why != pass_reason::none) {
        count_pass(direction::recv, why);
        return PMPI_Recv(buf, count, type, source, tag, comm, status);
    }
    gpu::pool_block block;
    try {
        block = acquire(plan);
    } catch (const std::exception& e) {
        internal_failure(shim::recv, e.what());
        count_pass(direction::recv, pass_reason::internal);
        return PMPI_Recv(buf, count, type, source, tag, comm, status);
    }
    MPI_Status local;
    MPI_Status* st = status == MPI_STATUS_IGNORE ? &local : status;
    const int rc = PMPI_Recv(block.ptr, static_cast<int>(plan.bytes), MPI_PACKED, source, tag, comm, st);
    if (delivered(rc)) {
        try {
            const std::int64_t n = written_bytes(rc, *st, plan.bytes, comm);
            unpack_from(plan, block.ptr, n, buf);
            count_done(direction::recv, n);
            stats_.add(counter_index::shim_handled(shim::recv));
        } catch (const std::exception& e) {
            internal_failure(shim::recv, e.what());
        }
    }
    gpu::pool_release(block);
    return rc;
}

int runtime::irecv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
                   MPI_Request* request) noexcept {
    this->count(shim::irecv);
    if (p2p_live()) progress_detached();
    if (request != nullptr && host_run(buf, count, type, source)) {
        count_pass(direction::recv, pass_reason::contiguous);
        return PMPI_Irecv(buf, count, type, source, tag, comm, request);
    }
    p2p_plan plan;
    const pass_reason why = request == nullptr
                                ? pass_reason::bad_argument
                                : plan_p2p(shim::irecv, direction::recv, buf, count, type, source, true, plan);
    if (why != pass_reason::none) {
        count_pass(direction::recv, why);
        return PMPI_Irecv(buf, count, type, source, tag, comm, request);
    }
    p2p_request r;
    try {
        r.block = acquire(plan);
        r.plan = std::move(plan);
        r.receive = true;
        r.origin = shim::irecv;
        r.buf = buf;
        r.comm = comm;
        const std::lock_guard lock(p2p_->mutex);  // reserve the entry before the library owns the block
        r.serial = p2p_->next_serial++;
    } catch (const std::exception& e) {
        gpu::pool_release(r.block);
        internal_failure(shim::irecv, e.what());
        count_pass(direction::recv, pass_reason::internal);
        return PMPI_Irecv(buf, count, type, source, tag, comm, request);
    }
    const int rc = PMPI_Irecv(r.block.ptr, static_cast<int>(r.plan.bytes), MPI_PACKED, source, tag, comm, request);
    if (rc != MPI_SUCCESS) {
        gpu::pool_release(r.block);
        return rc;
    }
    stats_.add(counter_index::shim_handled(shim::irecv));
    try {
        const std::lock_guard lock(p2p_->mutex);
        record(*p2p_, *request, std::move(r));
        p2p_->update_live();
    } catch (...) {
        internal_failure(shim::irecv, "cannot record the request");
    }
    return rc;
}

int runtime::recv_init(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
                       MPI_Request* request) noexcept {
    this->count(shim::recv_init);
    p2p_plan plan;
    const pass_reason why = request == nullptr
                                ? pass_reason::bad_argument
                                : plan_p2p(shim::recv_init, direction::recv, buf, count, type, source, true, plan);
    if (why != pass_reason::none) {
        count_pass(direction::recv, why);
        return PMPI_Recv_init(buf, count, type, source, tag, comm, request);
    }
    p2p_request r;
    try {
        r.block = acquire(plan);
        r.plan = std::move(plan);
        r.receive = true;
        r.persistent = true;
        r.origin = shim::recv_init;
        r.buf = buf;
        r.comm = comm;
        const int rc =
            PMPI_Recv_init(r.block.ptr, static_cast<int>(r.plan.bytes), MPI_PACKED, source, tag, comm, request);
        if (rc != MPI_SUCCESS) {
            gpu::pool_release(r.block);
            return rc;
        }
        stats_.add(counter_index::shim_handled(shim::recv_init));
        const std::lock_guard lock(p2p_->mutex);
        r.serial = p2p_->next_serial++;
        record(*p2p_, *request, std::move(r));
        p2p_->update_live();
        return rc;
    } catch (const std::exception& e) {
        gpu::pool_release(r.block);
        internal_failure(shim::recv_init, e.what());
    }
    count_pass(direction::recv, pass_reason::internal);
    return PMPI_Recv_init(buf, count, type, source, tag, comm, request);
}

int runtime::sendrecv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag, void* recvbuf,
                      int recvcount, MPI_Datatype recvtype, int source, int recvtag, MPI_Comm comm,
                      MPI_Status* status) noexcept {
    this->count(shim::sendrecv);
    if (p2p_live()) progress_detached();
    p2p_plan sp, rp;
    // The send plan's type stays valid through the second lookup: the type cache holds it, and
    // the application may not free a type during a call that uses it.
    const pass_reason swhy = plan_p2p(shim::sendrecv, direction::send, sendbuf, sendcount, sendtype, dest, false, sp);
    const pass_reason rwhy = plan_p2p(shim::sendrecv, direction::recv, recvbuf, recvcount, recvtype, source, false, rp);
    if (swhy != pass_reason::none) count_pass(direction::send, swhy);
    if (rwhy != pass_reason::none) count_pass(direction::recv, rwhy);
    if (swhy != pass_reason::none && rwhy != pass_reason::none)
        return PMPI_Sendrecv(sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source, recvtag,
                             comm, status);
    gpu::pool_block sblock, rblock;
    try {
        if (swhy == pass_reason::none) {
            sblock = acquire(sp);
            pack_into(sp, sendbuf, sblock.ptr);
        }
        if (rwhy == pass_reason::none) rblock = acquire(rp);
    } catch (const std::exception& e) {
        gpu::pool_release(sblock);
        gpu::pool_release(rblock);
        internal_failure(shim::sendrecv, e.what());
        return PMPI_Sendrecv(sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source, recvtag,
                             comm, status);
    }
    MPI_Status local;
    MPI_Status* st = status == MPI_STATUS_IGNORE ? &local : status;
    const bool ss = swhy == pass_reason::none, rs = rwhy == pass_reason::none;
    const int rc = PMPI_Sendrecv(ss ? sblock.ptr : sendbuf, ss ? static_cast<int>(sp.bytes) : sendcount,
                                 ss ? MPI_PACKED : sendtype, dest, sendtag, rs ? rblock.ptr : recvbuf,
                                 rs ? static_cast<int>(rp.bytes) : recvcount, rs ? MPI_PACKED : recvtype, source,
                                 recvtag, comm, st);
    if (ss) count_done(direction::send, sp.bytes);
    if (rs && delivered(rc)) {
        try {
            const std::int64_t n = written_bytes(rc, *st, rp.bytes, comm);
            unpack_from(rp, rblock.ptr, n, recvbuf);
            count_done(direction::recv, n);
        } catch (const std::exception& e) {
            internal_failure(shim::sendrecv, e.what());
        }
    }
    stats_.add(counter_index::shim_handled(shim::sendrecv));
    gpu::pool_release(sblock);
    gpu::pool_release(rblock);
    return rc;
}

int runtime::sendrecv_replace(void* buf, int count, MPI_Datatype type, int dest, int sendtag, int source, int recvtag,
                              MPI_Comm comm, MPI_Status* status) noexcept {
    this->count(shim::sendrecv_replace);
    if (p2p_live()) progress_detached();
    p2p_plan plan;
    // Both directions use the same buffer and type: shunt's when either peer is real.
    const int peer = dest != MPI_PROC_NULL ? dest : source;
    const pass_reason why = plan_p2p(shim::sendrecv_replace, direction::send, buf, count, type, peer, false, plan);
    if (why != pass_reason::none) {
        count_pass(direction::send, why);
        count_pass(direction::recv, why);
        return PMPI_Sendrecv_replace(buf, count, type, dest, sendtag, source, recvtag, comm, status);
    }
    gpu::pool_block block;
    try {
        block = acquire(plan);
        pack_into(plan, buf, block.ptr);
    } catch (const std::exception& e) {
        gpu::pool_release(block);
        internal_failure(shim::sendrecv_replace, e.what());
        return PMPI_Sendrecv_replace(buf, count, type, dest, sendtag, source, recvtag, comm, status);
    }
    MPI_Status local;
    MPI_Status* st = status == MPI_STATUS_IGNORE ? &local : status;
    const int rc = PMPI_Sendrecv_replace(block.ptr, static_cast<int>(plan.bytes), MPI_PACKED, dest, sendtag, source,
                                         recvtag, comm, st);
    if (dest != MPI_PROC_NULL) count_done(direction::send, plan.bytes);
    if (source != MPI_PROC_NULL && delivered(rc)) {
        try {
            const std::int64_t n = written_bytes(rc, *st, plan.bytes, comm);
            unpack_from(plan, block.ptr, n, buf);
            count_done(direction::recv, n);
        } catch (const std::exception& e) {
            internal_failure(shim::sendrecv_replace, e.what());
        }
    }
    stats_.add(counter_index::shim_handled(shim::sendrecv_replace));
    gpu::pool_release(block);
    return rc;
}

int runtime::mrecv(void* buf, int count, MPI_Datatype type, MPI_Message* message, MPI_Status* status) noexcept {
    this->count(shim::mrecv);
    if (p2p_live()) progress_detached();
    p2p_plan plan;
    const pass_reason why = message == nullptr || *message == MPI_MESSAGE_NO_PROC || *message == MPI_MESSAGE_NULL
                                ? pass_reason::empty
                                : plan_p2p(shim::mrecv, direction::recv, buf, count, type, 0, false, plan);
    if (why != pass_reason::none) {
        count_pass(direction::recv, why);
        return PMPI_Mrecv(buf, count, type, message, status);
    }
    gpu::pool_block block;
    try {
        block = acquire(plan);
    } catch (const std::exception& e) {
        internal_failure(shim::mrecv, e.what());
        count_pass(direction::recv, pass_reason::internal);
        return PMPI_Mrecv(buf, count, type, message, status);
    }
    MPI_Status local;
    MPI_Status* st = status == MPI_STATUS_IGNORE ? &local : status;
    const int rc = PMPI_Mrecv(block.ptr, static_cast<int>(plan.bytes), MPI_PACKED, message, st);
    if (delivered(rc)) {
        try {
            const std::int64_t n = written_bytes(rc, *st, plan.bytes, MPI_COMM_NULL);
            unpack_from(plan, block.ptr, n, buf);
            count_done(direction::recv, n);
            stats_.add(counter_index::shim_handled(shim::mrecv));
        } catch (const std::exception& e) {
            internal_failure(shim::mrecv, e.what());
        }
    }
    gpu::pool_release(block);
    return rc;
}

int runtime::imrecv(void* buf, int count, MPI_Datatype type, MPI_Message* message, MPI_Request* request) noexcept {
    this->count(shim::imrecv);
    if (p2p_live()) progress_detached();
    p2p_plan plan;
    const pass_reason why =
        request == nullptr || message == nullptr || *message == MPI_MESSAGE_NO_PROC || *message == MPI_MESSAGE_NULL
            ? pass_reason::empty
            : plan_p2p(shim::imrecv, direction::recv, buf, count, type, 0, true, plan);
    if (why != pass_reason::none) {
        count_pass(direction::recv, why);
        return PMPI_Imrecv(buf, count, type, message, request);
    }
    p2p_request r;
    try {
        r.block = acquire(plan);
        r.plan = std::move(plan);
        r.receive = true;
        r.origin = shim::imrecv;
        r.buf = buf;
    } catch (const std::exception& e) {
        gpu::pool_release(r.block);
        internal_failure(shim::imrecv, e.what());
        count_pass(direction::recv, pass_reason::internal);
        return PMPI_Imrecv(buf, count, type, message, request);
    }
    const int rc = PMPI_Imrecv(r.block.ptr, static_cast<int>(r.plan.bytes), MPI_PACKED, message, request);
    if (rc != MPI_SUCCESS) {
        gpu::pool_release(r.block);
        return rc;
    }
    stats_.add(counter_index::shim_handled(shim::imrecv));
    try {
        const std::lock_guard lock(p2p_->mutex);
        r.serial = p2p_->next_serial++;
        record(*p2p_, *request, std::move(r));
        p2p_->update_live();
    } catch (...) {
        internal_failure(shim::imrecv, "cannot record the request");
    }
    return rc;
}

// ---- persistent requests ----

int runtime::start(MPI_Request* request) noexcept {
    this->count(shim::start);
    return start_requests(shim::start, 1, request);
}

int runtime::startall(int n, MPI_Request requests[]) noexcept {
    this->count(shim::startall);
    return start_requests(shim::startall, n, requests);
}

int runtime::start_requests(shim s, int n, MPI_Request requests[]) noexcept {
    if (!p2p_live() || requests == nullptr || n <= 0)
        return s == shim::start ? PMPI_Start(requests) : PMPI_Startall(n, requests);
    // Pack every shunt send before the library starts it, all together (one fused launch for
    // device buffers); mark shunt's requests active.
    std::vector<std::size_t> started;
    try {
        std::vector<p2p_request> sends;
        for (int i = 0; i < n; ++i) {
            p2p_request copy;
            {
                const std::lock_guard lock(p2p_->mutex);
                auto it = p2p_->requests.find(requests[i]);
                if (it == p2p_->requests.end() || !it->second.persistent) continue;
                it->second.active = true;
                it->second.unpacked = false;
                copy.receive = it->second.receive;
                copy.buf = it->second.buf;
                copy.block = it->second.block;
                copy.plan = it->second.plan;
            }
            started.push_back(static_cast<std::size_t>(i));
            if (!copy.receive) sends.push_back(std::move(copy));
        }
        std::vector<pack_job> jobs;
        for (const auto& r : sends) jobs.push_back({&r.plan, r.buf, r.block.ptr});
        pack_many(jobs);
        for (const auto& r : sends) count_done(direction::send, r.plan.bytes);
    } catch (const std::exception& e) {
        internal_failure(s, e.what());  // the message goes out unpacked: logged once
    }
    const int rc = s == shim::start ? PMPI_Start(requests) : PMPI_Startall(n, requests);
    if (rc != MPI_SUCCESS) {
        const std::lock_guard lock(p2p_->mutex);
        for (std::size_t i : started)
            if (auto it = p2p_->requests.find(requests[i]); it != p2p_->requests.end()) it->second.active = false;
    }
    if (!started.empty()) stats_.add(counter_index::shim_handled(s));
    return rc;
}

// ---- completion ----

void runtime::finish(shim s, p2p_request& r, const MPI_Status& status, int err, MPI_Request handle) noexcept {
    try {
        if (const std::int64_t n = deliver(r, status, err); n >= 0) count_done(direction::recv, n);
    } catch (const std::exception& e) {
        internal_failure(s, e.what());
    }
    if (r.persistent) {  // the block stays with the request until MPI_Request_free
        const std::lock_guard lock(p2p_->mutex);
        if (auto it = p2p_->requests.find(handle); it != p2p_->requests.end() && it->second.serial == r.serial)
            it->second.active = false;
        return;
    }
    gpu::pool_release(r.block);
    r.block = {};
}

namespace {

/// A request of shunt's taken out of the table for a completion call: its index in the
/// caller's array, its handle before the call (the library nulls completed ones) and the entry.
struct claimed {
    int index;
    MPI_Request handle;
    runtime::p2p_request r;
};

/// Claims shunt's active requests among requests[0..n): non-persistent entries leave the
/// table (so a handle value the library reuses after completion never meets a stale entry),
/// persistent ones are copied (their handles stay valid).
std::vector<claimed> claim(runtime::p2p_state& p, int n, const MPI_Request* requests) {
    std::vector<claimed> mine;
    if (requests == nullptr || n <= 0) return mine;
    const std::lock_guard lock(p.mutex);
    for (int i = 0; i < n; ++i) {
        if (requests[i] == MPI_REQUEST_NULL) continue;
        auto it = p.requests.find(requests[i]);
        if (it == p.requests.end()) continue;
        if (it->second.persistent) {
            if (!it->second.active) continue;  // the library answers an inactive request itself
            mine.push_back({i, requests[i], it->second});
        } else {
            mine.push_back({i, requests[i], std::move(it->second)});
            p.requests.erase(it);
        }
    }
    p.update_live();
    return mine;
}

/// Puts back a claimed request the call did not complete.
void unclaim(runtime::p2p_state& p, claimed& c) {
    if (c.r.persistent) return;
    const std::lock_guard lock(p.mutex);
    p.requests.insert_or_assign(c.handle, std::move(c.r));
    p.update_live();
}

/// The status array a multiple completion call writes: the application's, or a local one when
/// it passes MPI_STATUSES_IGNORE and shunt needs them.
MPI_Status* statuses_for(MPI_Status* given, std::vector<MPI_Status>& local, int n) {
    if (given != MPI_STATUSES_IGNORE) return given;
    local.resize(static_cast<std::size_t>(std::max(n, 1)));
    return local.data();
}

/// For Waitall/Testall and the *some calls: whether an entry completed and delivered data,
/// from the call's return code and the entry's status.
bool entry_completed(int rc, const MPI_Status& st) {
    if (rc == MPI_SUCCESS) return true;
    return rc == MPI_ERR_IN_STATUS && st.MPI_ERROR != MPI_ERR_PENDING;
}
/// The error code of one entry: its status's when the call reports MPI_ERR_IN_STATUS.
int entry_error(int rc, const MPI_Status& st) { return rc == MPI_ERR_IN_STATUS ? st.MPI_ERROR : rc; }

}  // namespace

void runtime::settle_freed(shim s, MPI_Request& h, p2p_request& r, const MPI_Status& st, int rc) noexcept {
    finish(s, r, st, rc, MPI_REQUEST_NULL);
    if (r.persistent) {
        PMPI_Request_free(&h);
        gpu::pool_release(r.block);
    }
}

bool runtime::finish_freed(MPI_Request& h, p2p_request& r) noexcept {
    int flag = 0;
    MPI_Status st;
    const int rc = without_errhandler(r.comm, [&] { return PMPI_Test(&h, &flag, &st); });
    if (!flag && rc == MPI_SUCCESS) return false;
    settle_freed(shim::request_free, h, r, st, rc);
    return true;
}

void runtime::progress_detached() noexcept {
    if (p2p_ == nullptr || p2p_->detached_n.load(std::memory_order_acquire) == 0) return;
    std::vector<std::pair<MPI_Request, p2p_request>> mine;
    {
        const std::lock_guard lock(p2p_->mutex);
        mine.swap(p2p_->detached);
        p2p_->detached_n.store(0, std::memory_order_release);
        p2p_->update_live();
    }
    std::vector<std::pair<MPI_Request, p2p_request>> left;
    for (auto& [h, r] : mine) {
        if (finish_freed(h, r)) continue;
        try {
            left.emplace_back(h, std::move(r));
        } catch (...) {
            internal_failure(shim::request_free, "cannot keep a freed request");
        }
    }
    if (left.empty()) return;
    try {
        const std::lock_guard lock(p2p_->mutex);
        for (auto& e : left) p2p_->detached.push_back(std::move(e));
        p2p_->detached_n.store(p2p_->detached.size(), std::memory_order_release);
        p2p_->update_live();
    } catch (...) {
        internal_failure(shim::request_free, "cannot keep a freed request");
    }
}

void runtime::drain_p2p() noexcept {
    if (p2p_ == nullptr) return;
    std::vector<std::pair<MPI_Request, p2p_request>> mine;
    {
        const std::lock_guard lock(p2p_->mutex);
        mine.swap(p2p_->detached);
        p2p_->detached_n.store(0, std::memory_order_release);
        p2p_->update_live();
    }
    for (auto& entry : mine) {
        // Named, not a structured binding: clang before 16 cannot capture those in a lambda.
        MPI_Request& h = entry.first;
        p2p_request& r = entry.second;
        MPI_Status st;
        int flag = 0;
        // A freed receive that never matched would hold MPI_Finalize forever: cancel it (a
        // matched one completes anyway, and its data is unpacked).
        int rc = MPI_SUCCESS;
        if (r.receive) {
            rc = without_errhandler(r.comm, [&] { return PMPI_Test(&h, &flag, &st); });
            if (rc == MPI_SUCCESS && !flag) PMPI_Cancel(&h);
        }
        if (!flag) rc = without_errhandler(r.comm, [&] { return PMPI_Wait(&h, &st); });
        settle_freed(shim::finalize, h, r, st, rc);
    }
    gpu::release_pools();
}

template <class Library, class Settle>
int runtime::complete(shim s, int n, const MPI_Request* requests, MPI_Status* given, bool array, Library library,
                      Settle settle) noexcept {
    this->count(s);
    if (!p2p_live()) return library(given);
    const bool waits = s == shim::wait || s == shim::waitall || s == shim::waitany || s == shim::waitsome;
    progress_detached();
    std::vector<claimed> mine;
    try {
        mine = claim(*p2p_, n, requests);
    } catch (...) {
        internal_failure(s, "cannot read the request table");
    }
    int rc = MPI_SUCCESS;
    if (mine.empty()) {
        rc = library(given);
    } else {
        MPI_Status one;
        std::vector<MPI_Status> local;
        MPI_Status* st = array ? statuses_for(given, local, n) : given == MPI_STATUS_IGNORE ? &one : given;
        rc = library(st);
        if (settle(mine, rc, st)) stats_.add(counter_index::shim_handled(s));
    }
    if (waits) progress_detached();  // a test returns at once, as the library's does
    return rc;
}

template <class Claimed>
bool runtime::settle_some(shim s, std::vector<Claimed>& mine, int rc, const MPI_Status* st, const int* outcount,
                          const int* indices) noexcept {
    bool any = false;
    for (auto& c : mine) {
        int j = -1;
        if (outcount != nullptr && *outcount != MPI_UNDEFINED && indices != nullptr)
            for (int k = 0; k < *outcount && j < 0; ++k)
                if (indices[k] == c.index) j = k;
        if (j >= 0 && entry_completed(rc, st[j])) {
            finish(s, c.r, st[j], entry_error(rc, st[j]), c.handle);
            any = true;
        } else {
            unclaim(*p2p_, c);
        }
    }
    return any;
}

int runtime::wait(MPI_Request* request, MPI_Status* status) noexcept {
    return complete(
        shim::wait, 1, request, status, false, [&](MPI_Status* st) { return PMPI_Wait(request, st); },
        [&](std::vector<claimed>& mine, int rc, MPI_Status* st) {
            // MPI_Wait completes the request, with an error of its own or not.
            finish(shim::wait, mine[0].r, *st, rc, mine[0].handle);
            return true;
        });
}

int runtime::test(MPI_Request* request, int* flag, MPI_Status* status) noexcept {
    return complete(
        shim::test, 1, request, status, false, [&](MPI_Status* st) { return PMPI_Test(request, flag, st); },
        [&](std::vector<claimed>& mine, int rc, MPI_Status* st) {
            if (flag == nullptr || !*flag) {
                unclaim(*p2p_, mine[0]);
                return false;
            }
            finish(shim::test, mine[0].r, *st, rc, mine[0].handle);
            return true;
        });
}

int runtime::waitall(int n, MPI_Request requests[], MPI_Status statuses[]) noexcept {
    return complete(
        shim::waitall, n, requests, statuses, true, [&](MPI_Status* st) { return PMPI_Waitall(n, requests, st); },
        [&](std::vector<claimed>& mine, int rc, MPI_Status* st) {
            for (auto& c : mine) {
                const MPI_Status& e = st[c.index];
                if (entry_completed(rc, e))
                    finish(shim::waitall, c.r, e, entry_error(rc, e), c.handle);
                else
                    unclaim(*p2p_, c);
            }
            return true;
        });
}

int runtime::testall(int n, MPI_Request requests[], int* flag, MPI_Status statuses[]) noexcept {
    return complete(
        shim::testall, n, requests, statuses, true, [&](MPI_Status* st) { return PMPI_Testall(n, requests, flag, st); },
        [&](std::vector<claimed>& mine, int rc, MPI_Status* st) {
            const bool all = (flag != nullptr && *flag) || rc == MPI_ERR_IN_STATUS;
            bool any = false;
            for (auto& c : mine) {
                const MPI_Status& e = st[c.index];
                if (all && entry_completed(rc, e)) {
                    finish(shim::testall, c.r, e, entry_error(rc, e), c.handle);
                    any = true;
                } else {
                    unclaim(*p2p_, c);
                }
            }
            return any;
        });
}

int runtime::waitany(int n, MPI_Request requests[], int* index, MPI_Status* status) noexcept {
    return complete(
        shim::waitany, n, requests, status, false, [&](MPI_Status* st) { return PMPI_Waitany(n, requests, index, st); },
        [&](std::vector<claimed>& mine, int rc, MPI_Status* st) {
            bool any = false;
            for (auto& c : mine) {
                if (index != nullptr && *index == c.index) {
                    finish(shim::waitany, c.r, *st, rc, c.handle);
                    any = true;
                } else {
                    unclaim(*p2p_, c);
                }
            }
            return any;
        });
}

int runtime::testany(int n, MPI_Request requests[], int* index, int* flag, MPI_Status* status) noexcept {
    return complete(
        shim::testany, n, requests, status, false,
        [&](MPI_Status* st) { return PMPI_Testany(n, requests, index, flag, st); },
        [&](std::vector<claimed>& mine, int rc, MPI_Status* st) {
            bool any = false;
            for (auto& c : mine) {
                if (flag != nullptr && *flag && index != nullptr && *index == c.index) {
                    finish(shim::testany, c.r, *st, rc, c.handle);
                    any = true;
                } else {
                    unclaim(*p2p_, c);
                }
            }
            return any;
        });
}

int runtime::waitsome(int n, MPI_Request requests[], int* outcount, int indices[], MPI_Status statuses[]) noexcept {
    return complete(
        shim::waitsome, n, requests, statuses, true,
        [&](MPI_Status* st) { return PMPI_Waitsome(n, requests, outcount, indices, st); },
        [&](std::vector<claimed>& mine, int rc, MPI_Status* st) {
            return settle_some(shim::waitsome, mine, rc, st, outcount, indices);
        });
}

int runtime::testsome(int n, MPI_Request requests[], int* outcount, int indices[], MPI_Status statuses[]) noexcept {
    return complete(
        shim::testsome, n, requests, statuses, true,
        [&](MPI_Status* st) { return PMPI_Testsome(n, requests, outcount, indices, st); },
        [&](std::vector<claimed>& mine, int rc, MPI_Status* st) {
            return settle_some(shim::testsome, mine, rc, st, outcount, indices);
        });
}

int runtime::request_free(MPI_Request* request) noexcept {
    this->count(shim::request_free);
    if (!p2p_live() || request == nullptr || *request == MPI_REQUEST_NULL) return PMPI_Request_free(request);
    p2p_request r;
    bool ours = false, inactive = false;
    try {
        const std::lock_guard lock(p2p_->mutex);
        auto it = p2p_->requests.find(*request);
        if (it != p2p_->requests.end()) {
            ours = true;
            inactive = it->second.persistent && !it->second.active;
            r = std::move(it->second);
            p2p_->requests.erase(it);
            p2p_->update_live();
        }
    } catch (...) {
        internal_failure(shim::request_free, "cannot keep a freed request");
        return PMPI_Request_free(request);
    }
    if (!ours) return PMPI_Request_free(request);
    stats_.add(counter_index::shim_handled(shim::request_free));
    if (inactive) {
        const int rc = PMPI_Request_free(request);
        gpu::pool_release(r.block);
        return rc;
    }
    // Active. Finished already: finish it now (a receive's data belongs in the application's
    // buffer as soon as it has arrived). Else the transfer goes on in the library: keep the
    // handle, test it in later calls and finish it (unpack, release) when it completes;
    // MPI_Finalize waits for it.
    MPI_Request h = *request;
    *request = MPI_REQUEST_NULL;
    if (finish_freed(h, r)) return MPI_SUCCESS;
    try {
        const std::lock_guard lock(p2p_->mutex);
        p2p_->detached.emplace_back(h, std::move(r));
        p2p_->detached_n.store(p2p_->detached.size(), std::memory_order_release);
        p2p_->update_live();
    } catch (...) {
        internal_failure(shim::request_free, "cannot keep a freed request");
        PMPI_Request_free(&h);  // the library finishes the transfer; its block is never reused
    }
    return MPI_SUCCESS;
}

int runtime::cancel(MPI_Request* request) noexcept {
    this->count(shim::cancel);
    return PMPI_Cancel(request);  // a cancelled receive is not unpacked at its completion
}

int runtime::request_get_status(MPI_Request request, int* flag, MPI_Status* status) noexcept {
    this->count(shim::request_get_status);
    if (!p2p_live() || request == MPI_REQUEST_NULL) return PMPI_Request_get_status(request, flag, status);
    // The request stays alive (the Wait or Test that frees it still comes), but a receive that
    // is complete must show its data now: the application may read the buffer before freeing
    // the request. Its data is unpacked here, once, and not again at the Wait.
    p2p_request r;
    {
        const std::lock_guard lock(p2p_->mutex);
        auto it = p2p_->requests.find(request);
        if (it == p2p_->requests.end() || !it->second.receive || it->second.unpacked ||
            (it->second.persistent && !it->second.active))
            return PMPI_Request_get_status(request, flag, status);
        r = it->second;
    }
    MPI_Status one;
    MPI_Status* st = status == MPI_STATUS_IGNORE ? &one : status;
    const int rc = PMPI_Request_get_status(request, flag, st);
    if (!delivered(rc) || !*flag) return rc;
    try {
        if (const std::int64_t n = deliver(r, *st, rc); n >= 0) count_done(direction::recv, n);
        const std::lock_guard lock(p2p_->mutex);
        if (auto it = p2p_->requests.find(request); it != p2p_->requests.end() && it->second.serial == r.serial)
            it->second.unpacked = true;
        stats_.add(counter_index::shim_handled(shim::request_get_status));
    } catch (const std::exception& e) {
        internal_failure(shim::request_get_status, e.what());
    }
    return rc;
}

}  // namespace shunt::detail
