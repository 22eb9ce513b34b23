// interpose/nccl.cpp: the NCCL executor: resolving the real functions, the communicators shunt knows and their levels, and NCCL or shunt's schedule per collective.
#include "nccl.hpp"

#include <shunt/log.hpp>
#include <shunt/model/file.hpp>
#include <shunt/model/nccl_file.hpp>
#include <shunt/topology/gpu_domain.hpp>
#include <shunt/topology/node_of.hpp>

#include "compress_nccl.hpp"
#include "flow.hpp"
#include "runtime.hpp"

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

namespace shunt::detail {

// ---- resolving the real functions ----

namespace {

/// The path of the object that holds `address` (libshunt.so itself, for its own functions).
std::string object_of(const void* address) {
    Dl_info info{};
    if (dladdr(address, &info) == 0 || info.dli_fname == nullptr) return {};
    return info.dli_fname;
}

/// A definition of `name` in a loaded object other than `self`: for a libnccl loaded into a local
/// scope (Python extension modules load theirs so), which dlsym(RTLD_NEXT) does not search.
void* find_elsewhere(const char* name, const std::string& self) {
    struct search {
        const char* name;
        const std::string* self;
        void* found = nullptr;
    } s{name, &self};
    dl_iterate_phdr(
        [](dl_phdr_info* info, std::size_t, void* data) -> int {
            auto* s = static_cast<search*>(data);
            if (info->dlpi_name == nullptr || info->dlpi_name[0] == '\0' || *s->self == info->dlpi_name) return 0;
            void* h = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
            if (h == nullptr) return 0;
            void* f = dlsym(h, s->name);
            if (f != nullptr && object_of(f) != *s->self) {
                s->found = f;  // the handle stays open: the object stays loaded while shunt calls it
                return 1;
            }
            dlclose(h);
            return 0;
        },
        &s);
    return s.found;
}

/// The real `name`: the next definition after libshunt.so, NCCL's p-prefixed twin, or one in any
/// loaded object.
void* resolve(const char* name, const std::string& self) {
    if (void* f = dlsym(RTLD_NEXT, name)) return f;
    const std::string twin = std::string("p") + name;
    if (void* f = dlsym(RTLD_NEXT, twin.c_str())) return f;
    if (void* f = find_elsewhere(name, self)) return f;
    return find_elsewhere(twin.c_str(), self);
}

/// CUDA's or the driver's capture query, where the process has CUDA.
void* resolve_plain(const char* name, const std::string& self) {
    if (void* f = dlsym(RTLD_DEFAULT, name)) return f;
    return find_elsewhere(name, self);
}

}  // namespace

const nccl_real& nccl_real::get() noexcept {
    static const nccl_real real = [] {
        nccl_real r;
        const std::string self = object_of(reinterpret_cast<const void*>(&nccl_real::get));
#define SHUNT_NCCL_RESOLVE_(name, Name, params, args) \
    r.name = reinterpret_cast<decltype(r.name)>(resolve("nccl" #Name, self));
        SHUNT_NCCL_CALLS(SHUNT_NCCL_RESOLVE_)
        SHUNT_NCCL_HELPERS(SHUNT_NCCL_RESOLVE_)
#undef SHUNT_NCCL_RESOLVE_
        if (void* f = resolve_plain("cudaStreamIsCapturing", self)) {
            r.stream_is_capturing = reinterpret_cast<int (*)(cudaStream_t, int*)>(f);
        } else if (void* g = resolve_plain("cuStreamIsCapturing", self)) {
            r.stream_is_capturing = reinterpret_cast<int (*)(cudaStream_t, int*)>(g);
            r.driver_capture_query = true;
        }
        log_debug(
            log_category::init, "NCCL: ncclAllReduce at %p (%s)", reinterpret_cast<void*>(r.all_reduce),
            r.all_reduce != nullptr ? object_of(reinterpret_cast<const void*>(r.all_reduce)).c_str() : "not found");
        return r;
    }();
    return real;
}

ncclResult_t nccl_missing(nccl_shim s) noexcept {
    static std::array<std::atomic<bool>, nccl_shim_count> warned{};
    const nccl_real& real = nccl_real::get();
    // An NCCL is there when any of its functions is (ncclGetErrorString is in every version).
    const bool any = real.get_error_string != nullptr || real.all_reduce != nullptr;
    const auto i = static_cast<std::size_t>(s);
    if (!warned[i].exchange(true, std::memory_order_relaxed))
        log_warn(
            log_category::init, "%s: %s; the call returns %s", nccl_shim_names[i],
            any ? "not in this process's NCCL (a version older than the function)" : "no NCCL library in this process",
            any ? "ncclInvalidUsage" : "ncclSystemError");
    return any ? ncclInvalidUsage : ncclSystemError;
}

// ---- the communicators shunt knows ----

/// What shunt keeps of one communicator. Calls on one communicator are serialised by the
/// application (NCCL's rule), so the setup needs no lock of its own.
struct nccl_executor::comm_state {
    bool blocking = true;  ///< made blocking (a non-blocking one goes to NCCL entirely)
    bool single_process = false;  ///< one of ncclCommInitAll's (driven in groups: NCCL entirely)
    /// `untabled`: none yet because no nccl.* table wants them (compression may still ask).
    enum class levels_state : std::uint8_t { unset, ready, none, untabled } levels = levels_state::unset;
    nccl_levels lv;
    nccl_shape shape;
    nccl_depths depths;  ///< the schedules lv allows
    /// Per (op, size class): 0 while undecided, else the method + 1.
    std::array<std::atomic<std::uint8_t>, nccl_op_names.size() * 65> decided{};
    void* scratch = nullptr;
    std::size_t scratch_bytes = 0;
};

namespace {

int size_class(std::int64_t bytes) {
    return bytes <= 0 ? 0 : static_cast<int>(std::bit_width(static_cast<std::uint64_t>(bytes)));
}

bool is_floating(ncclDataType_t t) {
    return t == ncclFloat16 || t == ncclFloat32 || t == ncclFloat64 || t == ncclBfloat16;
}

/// Where NCCL_COMM_BLOCKING (NCCL's own variable) makes communicators non-blocking by default.
bool nccl_default_blocking() {
    const char* v = environment_lookup(process_environment(), "NCCL_COMM_BLOCKING");
    return v == nullptr || std::strcmp(v, "0") != 0;
}

bool made_blocking(const ncclConfig_t* config, bool inherited) {
    if (config == nullptr || config->blocking == NCCL_CONFIG_UNDEF_INT) return inherited;
    return config->blocking != 0;
}

}  // namespace

namespace {

/// The NCCL tables' file where there is one, else the runtime's model.
std::shared_ptr<const cost_model> nccl_model_for(runtime& rt) {
    auto r = load_nccl_model(rt.cfg().model, process_environment());
    if (r.model) return std::make_shared<const cost_model>(std::move(*r.model));
    return std::shared_ptr<const cost_model>(std::shared_ptr<const cost_model>{}, &rt.model());
}

}  // namespace

nccl_executor::nccl_executor(runtime& rt) : rt_(rt), real_(nccl_real::get()), model_(nccl_model_for(rt)) {}

nccl_executor* runtime::nccl() noexcept {
    if (nccl_executor* e = nccl_.load(std::memory_order_acquire)) [[likely]]
        return e;
    static std::once_flag once;
    std::call_once(once, [this] {
        auto* e = new (std::nothrow) nccl_executor(*this);  // never deleted: calls may come during exit
        nccl_.store(e, std::memory_order_release);
        if (e != nullptr && cfg_.report != report_mode::off)
            std::atexit([] {
                if (runtime* rt = runtime::instance()) rt->nccl_.load()->report();
            });
    });
    return nccl_.load(std::memory_order_acquire);
}

std::shared_ptr<nccl_executor::comm_state> nccl_executor::state_of(ncclComm_t comm) const {
    const std::shared_lock lock(mutex_);
    auto it = comms_.find(comm);
    return it == comms_.end() ? nullptr : it->second;
}

void nccl_executor::keep(ncclComm_t comm, bool blocking, bool single_process) noexcept {
    if (comm == nullptr) return;
    try {
        auto c = std::make_shared<comm_state>();
        c->blocking = blocking;
        c->single_process = single_process;
        const std::unique_lock lock(mutex_);
        comms_.insert_or_assign(comm, std::move(c));
    } catch (...) {  // no memory: shunt does not know this communicator, and NCCL runs its calls
    }
}

bool nccl_executor::capturing(cudaStream_t stream) const noexcept {
    if (real_.stream_is_capturing == nullptr) return false;
    int status = 0;  // cudaStreamCaptureStatusNone, CU_STREAM_CAPTURE_STATUS_NONE
    const int rc = real_.stream_is_capturing(stream, &status);
    if (rc == 0) return status != 0;
    // No device, no driver or a stub library (the runtime's cudaErrorNoDevice 100,
    // cudaErrorInsufficientDriver 35, cudaErrorStubLibrary 34; the driver's CUDA_ERROR_NO_DEVICE 100,
    // CUDA_ERROR_NOT_INITIALIZED 3, CUDA_ERROR_STUB_LIBRARY 34): no stream can be capturing.
    const bool no_device = rc == 100 || rc == 34 || (real_.driver_capture_query ? rc == 3 : rc == 35);
    return !no_device;  // any other error: cannot tell, as if capturing
}

bool nccl_executor::ready(comm_state& c, ncclComm_t comm, cudaStream_t stream, bool untabled) noexcept {
    if (c.levels == comm_state::levels_state::ready) return true;
    if (c.levels == comm_state::levels_state::none || (c.levels == comm_state::levels_state::untabled && !untabled))
        return false;
    if (capturing(stream)) return false;  // making communicators is no stream work: later, uncaptured
    int nranks = 0, rank = 0;
    if (real_.comm_count == nullptr || real_.comm_user_rank == nullptr || real_.comm_split == nullptr ||
        real_.comm_destroy == nullptr || real_.comm_count(comm, &nranks) != ncclSuccess ||
        real_.comm_user_rank(comm, &rank) != ncclSuccess) {
        c.levels = comm_state::levels_state::none;
        return false;
    }
    const settings& cfg = rt_.cfg();
    // ncclCommSplit is collective over comm: every rank reaches this call alike. A split whose
    // colour is a digest of what the ranks must agree on makes one communicator of all of them
    // exactly when they all agree; it is destroyed at once.
    const auto agree = [&](std::uint64_t what) {
        ncclComm_t all = nullptr;
        if (real_.comm_split(comm, split_color(what), rank, &all, nullptr) != ncclSuccess || all == nullptr)
            return false;
        int n = 0;
        const bool same = real_.comm_count(all, &n) == ncclSuccess && n == nranks;
        real_.comm_destroy(all);
        return same;
    };
    const char* why = nullptr;
    const std::uint64_t digest = nccl_digest(*model_);
    if (!agree(digest * 4 + static_cast<std::uint64_t>(cfg.nccl))) {
        why = "the ranks' models hold different nccl.* tables (or SHUNT_NCCL differs)";
    } else if (cfg.nccl == nccl_choice::automatic && digest == 0 && !untabled) {
        why = nullptr;  // no tables anywhere: NCCL keeps every call, nothing to set up (said at debug)
        c.levels = comm_state::levels_state::untabled;
        log_debug(log_category::decide, "NCCL communicator of %d ranks: no nccl.* tables, NCCL keeps every call",
                  nranks);
        return false;
    } else {
        std::int64_t node = -1;
        try {
            node = node_of_rank(cfg.topology, rank, nranks);
        } catch (const std::exception& e) {
            log_warn(log_category::config, "NCCL: cannot use SHUNT_TOPOLOGY (%s); by host name", e.what());
            node = node_of_rank("", rank, nranks);
        }
        std::pair<domain_source, std::int64_t> domain{domain_source::none, -1};
        try {
            domain = domain_of_rank(cfg.topology, rank, nranks);
        } catch (const std::exception&) {  // said above for the node level
            domain = {domain_source::discovered, -1};
        }
        if (domain.first == domain_source::discovered) domain.second = local_gpu_domain();
        nccl_levels lv;
        int ok = node >= 0;
        if (ok && real_.comm_split(comm, split_color(static_cast<std::uint64_t>(node)), rank, &lv.node, nullptr) !=
                      ncclSuccess)
            ok = 0;
        if (ok && (real_.comm_count(lv.node, &lv.per_node) != ncclSuccess ||
                   real_.comm_user_rank(lv.node, &lv.local) != ncclSuccess))
            ok = 0;
        if (ok && real_.comm_split(comm, lv.local, rank, &lv.rail, nullptr) != ncclSuccess) ok = 0;
        if (ok && (real_.comm_count(lv.rail, &lv.nodes) != ncclSuccess ||
                   real_.comm_user_rank(lv.rail, &lv.node_index) != ncclSuccess))
            ok = 0;
        lv.block = ok && rank == lv.node_index * lv.per_node + lv.local;
        // Every rank's view must be the same: equal nodes, the same count of them, the placement,
        // and whether each knows its GPU domain (then the node communicators are split by domain).
        const bool want_domains = domain.second >= 0;
        const auto view_of = [&](bool domains) {
            return ok ? (static_cast<std::uint64_t>(lv.per_node) << 32 | static_cast<std::uint64_t>(lv.nodes) << 2 |
                         (lv.block ? 2u : 0u) | (domains ? 1u : 0u))
                      : ~std::uint64_t{0};
        };
        bool agreed = agree(view_of(want_domains)), domains_agreed = agreed && want_domains;
        // Some rank may know no domain: every rank agrees again without them (all must split alike).
        if (!agreed) agreed = agree(view_of(false));
        agreed = agreed && ok && lv.per_node * lv.nodes == nranks;
        bool three = false;
        if (agreed && domains_agreed && lv.per_node > 1) three = split_domains(comm, rank, lv, domain.second);
        const bool two = lv.per_node > 1 && lv.nodes > 1;
        if (agreed && (two || three)) {
            c.lv = lv;
            c.shape = {nranks, lv.nodes};
            c.depths = {two, three};
            c.levels = comm_state::levels_state::ready;
            if (rank == 0 && log_enabled(log_level::debug, log_category::decide))
                log_debug(log_category::decide, "NCCL communicator of %d ranks: %d nodes of %d ranks (%s placement)%s",
                          nranks, lv.nodes, lv.per_node, lv.block ? "block" : "other",
                          three ? (", each " + std::to_string(lv.domains) + " GPU domains of " +
                                   std::to_string(lv.per_domain) + " ranks (" +
                                   (domain.first == domain_source::described ? "SHUNT_TOPOLOGY" : "hwloc/NVML") + ")")
                                      .c_str()
                                : "");
            return true;
        }
        for (ncclComm_t l : {lv.node, lv.rail, lv.domain, lv.across})
            if (l != nullptr) real_.comm_destroy(l);
        if (!agreed) why = "its ranks do not form nodes of equal size alike";
    }
    c.levels = comm_state::levels_state::none;
    if (why != nullptr && rank == 0)
        log_info(log_category::decide, "NCCL communicator of %d ranks: %s; NCCL keeps every call", nranks, why);
    return false;
}

const nccl_levels* nccl_executor::compression_levels(ncclComm_t comm, cudaStream_t stream) noexcept {
    std::shared_ptr<comm_state> c;
    try {
        c = state_of(comm);
    } catch (...) {
        return nullptr;
    }
    // Every rank knows comm alike (made by the same calls), so every rank splits alike.
    if (c == nullptr || !c->blocking || c->single_process || !ready(*c, comm, stream, true) || !c->depths.two)
        return nullptr;
    return &c->lv;  // comms_ keeps c until the communicator is destroyed
}

bool nccl_executor::split_domains(ncclComm_t comm, int rank, nccl_levels& lv, std::int64_t label) noexcept {
    // Collective over each node communicator, whose ranks all reach it (they agreed to).
    int ok = real_.comm_split(lv.node, split_color(static_cast<std::uint64_t>(label)), lv.local, &lv.domain, nullptr) ==
                 ncclSuccess &&
             lv.domain != nullptr;
    if (ok && (real_.comm_count(lv.domain, &lv.per_domain) != ncclSuccess ||
               real_.comm_user_rank(lv.domain, &lv.in_domain) != ncclSuccess))
        ok = 0;
    if (ok &&
        (real_.comm_split(lv.node, lv.in_domain, lv.local, &lv.across, nullptr) != ncclSuccess || lv.across == nullptr))
        ok = 0;
    if (ok && (real_.comm_count(lv.across, &lv.domains) != ncclSuccess ||
               real_.comm_user_rank(lv.across, &lv.domain_index) != ncclSuccess))
        ok = 0;
    // Equal domains on every node, and each node's ranks ordered domain by domain, so that a rail
    // joins the ranks that own the same part of the vector (collectives/nccl.hpp).
    const bool placed = ok && lv.local == lv.domain_index * lv.per_domain + lv.in_domain;
    const std::uint64_t view =
        ok && placed ? static_cast<std::uint64_t>(lv.per_domain) << 32 | static_cast<std::uint64_t>(lv.domains)
                     : ~std::uint64_t{0};
    // Every rank of the communicator agrees (one split of it, destroyed at once).
    int n = 0, nranks = 0;
    ncclComm_t all = nullptr;
    bool good = real_.comm_count(comm, &nranks) == ncclSuccess &&
                real_.comm_split(comm, split_color(view), rank, &all, nullptr) == ncclSuccess && all != nullptr;
    if (all != nullptr) {
        good = good && real_.comm_count(all, &n) == ncclSuccess && n == nranks;
        real_.comm_destroy(all);
    }
    good = good && ok && placed && lv.per_domain > 1 && lv.domains > 1;
    if (good) return true;
    for (ncclComm_t* l : {&lv.domain, &lv.across})
        if (*l != nullptr) real_.comm_destroy(*l), *l = nullptr;
    lv.per_domain = lv.domains = 1;
    lv.in_domain = lv.domain_index = 0;
    return false;
}

nccl_method nccl_executor::method_of(comm_state& c, nccl_op op, std::int64_t bytes) noexcept {
    std::atomic<std::uint8_t>& slot = c.decided[static_cast<std::size_t>(op) * 65 + size_class(bytes)];
    if (const std::uint8_t v = slot.load(std::memory_order_acquire); v != 0) return static_cast<nccl_method>(v - 1);
    const nccl_decision d = decide_nccl(*model_, rt_.cfg().nccl, op, bytes, c.shape, c.depths);
    slot.store(static_cast<std::uint8_t>(static_cast<int>(d.method) + 1), std::memory_order_release);
    if (log_enabled(log_level::debug, log_category::decide) && c.lv.node_index == 0 && c.lv.local == 0) {
        // Names the tables the predictions come from (nan where the model has none).
        const std::string lib = table_names::nccl(op, nccl_method::library, c.shape);
        const std::string hier = table_names::nccl(op, nccl_method::hierarchical, c.shape);
        const std::string hier3 = table_names::nccl(op, nccl_method::hierarchical3, c.shape);
        // The third table only where three levels apply: the two-level line stays as it was.
        char third[160] = "";
        if (c.depths.three && op == nccl_op::allreduce)
            std::snprintf(third, sizeof third, ", %s %.3g us", hier3.c_str(), d.hierarchical3_s * 1e6);
        log_debug(log_category::decide, "nccl %s of %lld bytes on %s: %s%s (%s %.3g us, %s %.3g us%s)",
                  to_string(op).data(), static_cast<long long>(bytes), c.shape.text().c_str(),
                  d.method == nccl_method::library        ? "NCCL"
                  : d.method == nccl_method::hierarchical ? "shunt's schedule over node+rail"
                                                          : "shunt's schedule over domain+node+rail",
                  d.forced ? " (forced by SHUNT_NCCL)" : "", lib.c_str(), d.library_s * 1e6, hier.c_str(),
                  d.hierarchical_s * 1e6, third);
    }
    return d.method;
}

pass_reason nccl_executor::eligible(nccl_shim s, nccl_op op, ncclComm_t comm, ncclDataType_t type, ncclRedOp_t red,
                                    std::int64_t bytes, cudaStream_t stream, std::shared_ptr<comm_state>& c) noexcept {
    (void)s;
    if (rt_.cfg().nccl == nccl_choice::library) return pass_reason::forced;
    if (nccl_group_depth > 0) return pass_reason::grouped;
    if (nccl_type_size(type) == 0 || type == ncclFloat8e4m3 || type == ncclFloat8e5m2) return pass_reason::unsupported;
    const bool reduction = op == nccl_op::allreduce || op == nccl_op::reduce_scatter || op == nccl_op::reduce;
    if (reduction && (static_cast<int>(red) < 0 || red >= ncclNumOps || (red == ncclAvg && !is_floating(type))))
        return pass_reason::unsupported;
    if (bytes <= 0) return pass_reason::empty;
    try {
        c = state_of(comm);
    } catch (...) {
        return pass_reason::internal;
    }
    if (c == nullptr || !c->blocking || c->single_process) return pass_reason::unsupported;
    if (c->levels == comm_state::levels_state::unset && rt_.cfg().nccl != nccl_choice::shunt && bytes < nccl_min_bytes)
        return pass_reason::planned;  // the levels are set up by the first call that could use them
    if (!ready(*c, comm, stream)) return pass_reason::unsupported;
    if (op != nccl_op::allreduce && (!c->lv.block || !c->depths.two)) return pass_reason::unsupported;
    if (method_of(*c, op, bytes) == nccl_method::library) return pass_reason::planned;
    return pass_reason::none;
}

void* nccl_executor::scratch(comm_state& c, std::size_t bytes, cudaStream_t stream) noexcept {
    if (c.scratch_bytes >= bytes && c.scratch != nullptr) return c.scratch;
    if (real_.mem_alloc == nullptr || real_.mem_free == nullptr || capturing(stream)) return nullptr;
    // The old block may still be read by work queued before: freeing device memory waits for it.
    if (c.scratch != nullptr) real_.mem_free(c.scratch);
    c.scratch = nullptr;
    c.scratch_bytes = 0;
    void* p = nullptr;
    if (real_.mem_alloc(&p, bytes) != ncclSuccess || p == nullptr) return nullptr;
    c.scratch = p;
    c.scratch_bytes = bytes;
    return p;
}

nccl_functions nccl_executor::functions() const noexcept {
    return {real_.all_reduce, real_.reduce_scatter, real_.all_gather, real_.broadcast,
            real_.reduce,     real_.group_start,    real_.group_end};
}

ncclResult_t nccl_executor::pass(nccl_shim, pass_reason why) noexcept {
    passed_[static_cast<std::size_t>(why)].fetch_add(1, std::memory_order_relaxed);
    return ncclSuccess;
}

ncclResult_t nccl_executor::done(nccl_shim s, ncclResult_t r) noexcept {
    if (r == ncclSuccess) by_shunt_[static_cast<std::size_t>(s)].fetch_add(1, std::memory_order_relaxed);
    return r;
}

void nccl_executor::release_levels(comm_state& c, nccl_shim how) noexcept {
    if (c.levels != comm_state::levels_state::ready) {
        if (how != nccl_shim::comm_finalize && c.scratch != nullptr && real_.mem_free != nullptr)
            real_.mem_free(c.scratch), c.scratch = nullptr;
        return;
    }
    for (ncclComm_t l : {c.lv.node, c.lv.rail, c.lv.domain, c.lv.across}) {
        if (l == nullptr) continue;
        if (how == nccl_shim::comm_finalize && real_.comm_finalize != nullptr) real_.comm_finalize(l);
        if (how == nccl_shim::comm_destroy && real_.comm_destroy != nullptr) real_.comm_destroy(l);
        if (how == nccl_shim::comm_abort && real_.comm_abort != nullptr) real_.comm_abort(l);
    }
    if (how == nccl_shim::comm_finalize) return;  // destroyed with the user's communicator
    c.lv.node = c.lv.rail = c.lv.domain = c.lv.across = nullptr;
    c.levels = comm_state::levels_state::none;
    if (c.scratch != nullptr && real_.mem_free != nullptr) real_.mem_free(c.scratch);
    c.scratch = nullptr;
}

// ---- collectives ----

ncclResult_t nccl_executor::all_reduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                       ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) noexcept {
    tally(nccl_shim::all_reduce);
    std::shared_ptr<comm_state> c;
    // Gradient compression first, where consented (compress_nccl.cpp): outside groups and graph
    // capture, on blocking communicators of shunt's knowing; float, half and bfloat16 sums only.
    if (rt_.compression().wanted() && nccl_group_depth == 0 && op == ncclSum &&
        (datatype == ncclFloat32 || datatype == ncclFloat16 || datatype == ncclBfloat16)) {
        try {
            c = state_of(comm);
        } catch (...) {}
        ncclResult_t r = ncclSuccess;
        if (c != nullptr && c->blocking && !c->single_process && !capturing(stream) &&
            nccl_compressed_all_reduce(rt_, real_, sendbuff, recvbuff, count, datatype, op, comm, stream, r))
            return done(nccl_shim::all_reduce, r);
        c = nullptr;
    }
    const auto bytes = static_cast<std::int64_t>(count * nccl_type_size(datatype));
    if (const pass_reason why =
            eligible(nccl_shim::all_reduce, nccl_op::allreduce, comm, datatype, op, bytes, stream, c);
        why != pass_reason::none) {
        pass(nccl_shim::all_reduce, why);
        return real_.all_reduce(sendbuff, recvbuff, count, datatype, op, comm, stream);
    }
    if (method_of(*c, nccl_op::allreduce, bytes) == nccl_method::hierarchical3) {
        const ncclResult_t r =
            nccl_allreduce3(functions(), c->lv, comm, sendbuff, recvbuff, count, datatype, op, stream);
        if (r == ncclSuccess) three_level_.fetch_add(1, std::memory_order_relaxed);
        return done(nccl_shim::all_reduce, r);
    }
    return done(nccl_shim::all_reduce,
                nccl_allreduce(functions(), c->lv, comm, sendbuff, recvbuff, count, datatype, op, stream));
}

ncclResult_t nccl_executor::reduce_scatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                           cudaStream_t stream) noexcept {
    tally(nccl_shim::reduce_scatter);
    std::shared_ptr<comm_state> c;
    const std::size_t es = nccl_type_size(datatype);
    int nranks = 0;
    if (real_.comm_count != nullptr) real_.comm_count(comm, &nranks);
    const auto bytes = static_cast<std::int64_t>(recvcount * es * static_cast<std::size_t>(std::max(nranks, 0)));
    pass_reason why =
        eligible(nccl_shim::reduce_scatter, nccl_op::reduce_scatter, comm, datatype, op, bytes, stream, c);
    void* tmp = nullptr;
    if (why == pass_reason::none &&
        (tmp = scratch(*c, static_cast<std::size_t>(c->lv.nodes) * recvcount * es, stream)) == nullptr)
        why = pass_reason::unsupported;
    if (why != pass_reason::none) {
        pass(nccl_shim::reduce_scatter, why);
        return real_.reduce_scatter(sendbuff, recvbuff, recvcount, datatype, op, comm, stream);
    }
    return done(nccl_shim::reduce_scatter,
                nccl_reduce_scatter(functions(), c->lv, sendbuff, recvbuff, recvcount, datatype, op, tmp, stream));
}

ncclResult_t nccl_executor::all_gather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                                       ncclComm_t comm, cudaStream_t stream) noexcept {
    tally(nccl_shim::all_gather);
    std::shared_ptr<comm_state> c;
    int nranks = 0;
    if (real_.comm_count != nullptr) real_.comm_count(comm, &nranks);
    const auto bytes =
        static_cast<std::int64_t>(sendcount * nccl_type_size(datatype) * static_cast<std::size_t>(std::max(nranks, 0)));
    if (const pass_reason why =
            eligible(nccl_shim::all_gather, nccl_op::allgather, comm, datatype, ncclSum, bytes, stream, c);
        why != pass_reason::none) {
        pass(nccl_shim::all_gather, why);
        return real_.all_gather(sendbuff, recvbuff, sendcount, datatype, comm, stream);
    }
    return done(nccl_shim::all_gather,
                nccl_allgather(functions(), c->lv, sendbuff, recvbuff, sendcount, datatype, stream));
}

ncclResult_t nccl_executor::broadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                      int root, ncclComm_t comm, cudaStream_t stream) noexcept {
    tally(nccl_shim::broadcast);
    std::shared_ptr<comm_state> c;
    const auto bytes = static_cast<std::int64_t>(count * nccl_type_size(datatype));
    pass_reason why = eligible(nccl_shim::broadcast, nccl_op::broadcast, comm, datatype, ncclSum, bytes, stream, c);
    if (why == pass_reason::none && (root < 0 || root >= static_cast<int>(c->shape.ranks)))
        why = pass_reason::bad_argument;
    if (why != pass_reason::none) {
        pass(nccl_shim::broadcast, why);
        return real_.broadcast(sendbuff, recvbuff, count, datatype, root, comm, stream);
    }
    return done(nccl_shim::broadcast,
                nccl_broadcast(functions(), c->lv, sendbuff, recvbuff, count, datatype, root, stream));
}

ncclResult_t nccl_executor::bcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                                  cudaStream_t stream) noexcept {
    tally(nccl_shim::bcast);
    std::shared_ptr<comm_state> c;
    const auto bytes = static_cast<std::int64_t>(count * nccl_type_size(datatype));
    pass_reason why = eligible(nccl_shim::bcast, nccl_op::broadcast, comm, datatype, ncclSum, bytes, stream, c);
    if (why == pass_reason::none && (root < 0 || root >= static_cast<int>(c->shape.ranks)))
        why = pass_reason::bad_argument;
    if (why != pass_reason::none) {
        pass(nccl_shim::bcast, why);
        return real_.bcast(buff, count, datatype, root, comm, stream);
    }
    return done(nccl_shim::bcast, nccl_broadcast(functions(), c->lv, buff, buff, count, datatype, root, stream));
}

ncclResult_t nccl_executor::reduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                   ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) noexcept {
    tally(nccl_shim::reduce);
    std::shared_ptr<comm_state> c;
    const std::size_t es = nccl_type_size(datatype);
    const auto bytes = static_cast<std::int64_t>(count * es);
    pass_reason why = eligible(nccl_shim::reduce, nccl_op::reduce, comm, datatype, op, bytes, stream, c);
    if (why == pass_reason::none && (root < 0 || root >= static_cast<int>(c->shape.ranks)))
        why = pass_reason::bad_argument;
    void* tmp = nullptr;
    if (why == pass_reason::none && (tmp = scratch(*c, count * es, stream)) == nullptr) why = pass_reason::unsupported;
    if (why != pass_reason::none) {
        pass(nccl_shim::reduce, why);
        return real_.reduce(sendbuff, recvbuff, count, datatype, op, root, comm, stream);
    }
    return done(nccl_shim::reduce,
                nccl_reduce(functions(), c->lv, sendbuff, recvbuff, count, datatype, op, root, tmp, stream));
}

// ---- passed through, counted ----

ncclResult_t nccl_executor::send(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                                 cudaStream_t stream) noexcept {
    tally(nccl_shim::send);
    return real_.send(sendbuff, count, datatype, peer, comm, stream);
}

ncclResult_t nccl_executor::recv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                                 cudaStream_t stream) noexcept {
    tally(nccl_shim::recv);
    return real_.recv(recvbuff, count, datatype, peer, comm, stream);
}

ncclResult_t nccl_executor::group_start() noexcept {
    tally(nccl_shim::group_start);
    const ncclResult_t r = real_.group_start();
    if (r == ncclSuccess) ++nccl_group_depth;
    return r;
}

ncclResult_t nccl_executor::group_end() noexcept {
    tally(nccl_shim::group_end);
    if (nccl_group_depth > 0) --nccl_group_depth;
    return real_.group_end();
}

// ---- communicators ----

ncclResult_t nccl_executor::comm_init_rank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) noexcept {
    tally(nccl_shim::comm_init_rank);
    prepare_nccl_lanes(rt_.cfg());  // NCCL reads its lane knobs at its first communicator
    const ncclResult_t r = real_.comm_init_rank(comm, nranks, commId, rank);
    if ((r == ncclSuccess || r == ncclInProgress) && comm != nullptr) {
        keep(*comm, r == ncclSuccess && nccl_default_blocking(), false);
        if (log_rank() < 0) set_log_rank(rank);
    }
    return r;
}

ncclResult_t nccl_executor::comm_init_rank_config(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                                  ncclConfig_t* config) noexcept {
    tally(nccl_shim::comm_init_rank_config);
    prepare_nccl_lanes(rt_.cfg());
    const ncclResult_t r = real_.comm_init_rank_config(comm, nranks, commId, rank, config);
    if ((r == ncclSuccess || r == ncclInProgress) && comm != nullptr) {
        keep(*comm, r == ncclSuccess && made_blocking(config, nccl_default_blocking()), false);
        if (log_rank() < 0) set_log_rank(rank);
    }
    return r;
}

#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 23, 0)
ncclResult_t nccl_executor::comm_init_rank_scalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                                    ncclUniqueId* commIds, ncclConfig_t* config) noexcept {
    tally(nccl_shim::comm_init_rank_scalable);
    prepare_nccl_lanes(rt_.cfg());  // as ncclCommInitRank: it may make the process's first communicator
    const ncclResult_t r = real_.comm_init_rank_scalable(newcomm, nranks, myrank, nId, commIds, config);
    if ((r == ncclSuccess || r == ncclInProgress) && newcomm != nullptr) {
        keep(*newcomm, r == ncclSuccess && made_blocking(config, nccl_default_blocking()), false);
        if (log_rank() < 0) set_log_rank(myrank);
    }
    return r;
}
#endif

ncclResult_t nccl_executor::comm_init_all(ncclComm_t* comm, int ndev, const int* devlist) noexcept {
    tally(nccl_shim::comm_init_all);
    prepare_nccl_lanes(rt_.cfg());
    const ncclResult_t r = real_.comm_init_all(comm, ndev, devlist);
    if (r == ncclSuccess && comm != nullptr)
        for (int i = 0; i < ndev; ++i) keep(comm[i], nccl_default_blocking(), true);
    return r;
}

ncclResult_t nccl_executor::comm_split(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                       ncclConfig_t* config) noexcept {
    tally(nccl_shim::comm_split);
    prepare_nccl_lanes(rt_.cfg());
    const ncclResult_t r = real_.comm_split(comm, color, key, newcomm, config);
    keep_derived(comm, r, newcomm, config);
    return r;
}

void nccl_executor::keep_derived(ncclComm_t comm, ncclResult_t r, ncclComm_t* made, ncclConfig_t* config) noexcept {
    if ((r != ncclSuccess && r != ncclInProgress) || made == nullptr || *made == nullptr) return;
    std::shared_ptr<comm_state> parent;
    try {
        parent = state_of(comm);
    } catch (...) {}
    // A NULL config inherits the parent's (nccl.h).
    const bool blocking = parent != nullptr ? parent->blocking : nccl_default_blocking();
    keep(*made, r == ncclSuccess && made_blocking(config, blocking), parent != nullptr && parent->single_process);
}

#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
ncclResult_t nccl_executor::comm_shrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                                        ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) noexcept {
    tally(nccl_shim::comm_shrink);
    prepare_nccl_lanes(rt_.cfg());
    const ncclResult_t r = real_.comm_shrink(comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags);
    keep_derived(comm, r, newcomm, config);
    return r;
}
#endif

ncclResult_t nccl_executor::comm_finalize(ncclComm_t comm) noexcept {
    tally(nccl_shim::comm_finalize);
    if (std::shared_ptr<comm_state> c = state_of(comm)) release_levels(*c, nccl_shim::comm_finalize);
    return real_.comm_finalize(comm);
}

void nccl_executor::forget(ncclComm_t comm, nccl_shim how) noexcept {
    std::shared_ptr<comm_state> c;
    try {
        const std::unique_lock lock(mutex_);
        if (auto it = comms_.find(comm); it != comms_.end()) {
            c = std::move(it->second);
            comms_.erase(it);
        }
    } catch (...) {}
    if (c != nullptr) release_levels(*c, how);
    nccl_compression_forget(comm);
}

ncclResult_t nccl_executor::comm_destroy(ncclComm_t comm) noexcept {
    tally(nccl_shim::comm_destroy);
    forget(comm, nccl_shim::comm_destroy);
    return real_.comm_destroy(comm);
}

ncclResult_t nccl_executor::comm_abort(ncclComm_t comm) noexcept {
    tally(nccl_shim::comm_abort);
    forget(comm, nccl_shim::comm_abort);
    return real_.comm_abort(comm);
}

// ---- the report ----

void nccl_executor::report() noexcept {
    try {
        std::string line = "NCCL:";
        bool any = false;
        for (std::size_t s = 0; s < nccl_shim_count; ++s) {
            const std::uint64_t n = calls_[s].load(std::memory_order_relaxed);
            if (n == 0) continue;
            char buf[96];
            std::snprintf(buf, sizeof buf, "%s %s %llu (shunt %llu)", any ? "," : "", nccl_shim_names[s],
                          static_cast<unsigned long long>(n),
                          static_cast<unsigned long long>(by_shunt_[s].load(std::memory_order_relaxed)));
            line += buf;
            any = true;
        }
        if (!any) return;
        std::string reasons;
        for (std::size_t w = 1; w < pass_reason_count; ++w)
            if (const std::uint64_t n = passed_[w].load(std::memory_order_relaxed)) {
                char buf[64];
                std::snprintf(buf, sizeof buf, "%s%s %llu", reasons.empty() ? "" : ", ", pass_reason_names[w],
                              static_cast<unsigned long long>(n));
                reasons += buf;
            }
        const std::uint64_t three = three_level_.load(std::memory_order_relaxed);
        char levels[80] = "";
        if (three != 0)
            std::snprintf(levels, sizeof levels, "; allreduce over domain+node+rail %llu",
                          static_cast<unsigned long long>(three));
        log_write(log_level::info, log_category::report, "%s%s; collectives to NCCL: %s", line.c_str(), levels,
                  reasons.empty() ? "none" : reasons.c_str());
    } catch (...) {}
}

}  // namespace shunt::detail
