// interpose/nccl.hpp: the NCCL executor: the real NCCL functions behind shunt's nccl* shims, the communicators shunt knows, and NCCL's own algorithm or shunt's hierarchical schedule per call.
#pragma once

#include <shunt/collectives/nccl.hpp>
#include <shunt/plan/nccl.hpp>
#include <shunt/plan/pass.hpp>

#include "nccl_calls.hpp"

#include <nccl.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

namespace shunt::detail {

class runtime;

/// The intercepted NCCL functions, in report order (nccl_calls.hpp).
enum class nccl_shim : std::uint8_t {
#define SHUNT_NCCL_ENUM_(name, Name, params, args) name,
    SHUNT_NCCL_CALLS(SHUNT_NCCL_ENUM_)
#undef SHUNT_NCCL_ENUM_
};
inline constexpr const char* nccl_shim_names[] = {
#define SHUNT_NCCL_NAME_(name, Name, params, args) "nccl" #Name,
    SHUNT_NCCL_CALLS(SHUNT_NCCL_NAME_)
#undef SHUNT_NCCL_NAME_
};
inline constexpr std::size_t nccl_shim_count = std::size(nccl_shim_names);

/// The real NCCL functions, found once, lazily and thread-safely, on the first call that needs
/// them: dlsym(RTLD_NEXT) (the library after libshunt.so in the global scope), then NCCL's
/// `pnccl*` twin, then every loaded object that defines the name (a libnccl loaded into a local
/// scope, as Python extension modules load theirs). Null where not found.
struct nccl_real {
#define SHUNT_NCCL_POINTER_(name, Name, params, args) decltype(&nccl##Name) name = nullptr;
    SHUNT_NCCL_CALLS(SHUNT_NCCL_POINTER_)
    SHUNT_NCCL_HELPERS(SHUNT_NCCL_POINTER_)
#undef SHUNT_NCCL_POINTER_
    /// CUDA's cudaStreamIsCapturing or the driver's cuStreamIsCapturing, where the process has one.
    int (*stream_is_capturing)(cudaStream_t, int*) = nullptr;
    bool driver_capture_query = false;  ///< stream_is_capturing is cuStreamIsCapturing
    /// The table, resolved on first use.
    static const nccl_real& get() noexcept;
};

/// The answer of shim `s` whose real function the process lacks (an NCCL older than the function,
/// or none at all): ncclInvalidUsage, or ncclSystemError where no NCCL is found; one warning per
/// function, naming it. Called by the shims before anything else; thread-safe.
ncclResult_t nccl_missing(nccl_shim s) noexcept;

/// ncclAllReduce .. ncclCommAbort as the preload library runs them. A collective goes to shunt's
/// hierarchical schedule (collectives/nccl.hpp) only outside a group, on a blocking communicator
/// of shunt's knowing (made by ncclCommInitRank(Config|Scalable), ncclCommSplit or
/// ncclCommShrink, not ncclCommInitAll), with a built-in operation and at least nccl_min_bytes,
/// where SHUNT_NCCL and the model choose it (plan/nccl.hpp); everything else, ncclSend/ncclRecv
/// and grouped calls included, goes to NCCL unchanged, with NCCL's return codes. A
/// communicator's levels (node and rail communicators, made with ncclCommSplit) are set up at its
/// first eligible call, collectively: every rank reaches that call alike, since the conditions
/// before it are the same on every rank of a valid program. Thread-safe; everything shunt adds
/// runs on the caller's stream.
class nccl_executor {
public:
    explicit nccl_executor(runtime& rt);
    nccl_executor(const nccl_executor&) = delete;
    nccl_executor& operator=(const nccl_executor&) = delete;

#define SHUNT_NCCL_ENTRY_(name, Name, params, args) ncclResult_t name params noexcept;
    SHUNT_NCCL_CALLS(SHUNT_NCCL_ENTRY_)
#undef SHUNT_NCCL_ENTRY_

    /// The report of NCCL calls (one line), for SHUNT_REPORT at exit.
    void report() noexcept;

    /// The node and rail communicators of `comm` for the compressed hierarchical schemes
    /// (compress_nccl.cpp), set up now where no call has yet, even where NCCL's own calls need no
    /// levels (no nccl.* tables): null where shunt does not know `comm` or its ranks do not form
    /// several equal nodes of several ranks. Collective over comm (ncclCommSplit): call it where
    /// every rank of comm reaches it alike, outside groups and graph capture. The levels live
    /// until the communicator is destroyed.
    const nccl_levels* compression_levels(ncclComm_t comm, cudaStream_t stream) noexcept;

    /// What shunt keeps of one communicator.
    struct comm_state;

private:
    /// The state of `comm`, or null where shunt does not know it.
    std::shared_ptr<comm_state> state_of(ncclComm_t comm) const;
    void keep(ncclComm_t comm, bool blocking, bool single_process) noexcept;
    /// keep() for `*made`, made from `parent` (ncclCommSplit, ncclCommShrink) with result `r`:
    /// blocking from `config`, else the parent's; one process where the parent is.
    void keep_derived(ncclComm_t parent, ncclResult_t r, ncclComm_t* made, ncclConfig_t* config) noexcept;
    /// The levels of `c`, set up at the first call that needs them (false: the call goes to NCCL);
    /// `untabled`: also where no nccl.* table asks for them (for compression_levels).
    bool ready(comm_state& c, ncclComm_t comm, cudaStream_t stream, bool untabled = false) noexcept;
    /// The domain level of `lv` (rank `rank` of `comm`, whose node communicator has several
    /// ranks), from this rank's domain `label`: splits the node communicator by domain and across
    /// the domains; true where every rank of comm sees several equal domains of several ranks,
    /// placed domain by domain in its node; else frees what it made. Collective over comm.
    bool split_domains(ncclComm_t comm, int rank, nccl_levels& lv, std::int64_t label) noexcept;
    /// The method for `op` of `bytes` on `c` (cached per size class), logged when new.
    nccl_method method_of(comm_state& c, nccl_op op, std::int64_t bytes) noexcept;
    /// The common part of every collective: eligibility, levels, decision; pass_reason::none when
    /// shunt's schedule runs.
    pass_reason eligible(nccl_shim s, nccl_op op, ncclComm_t comm, ncclDataType_t type, ncclRedOp_t red,
                         std::int64_t bytes, cudaStream_t stream, std::shared_ptr<comm_state>& c) noexcept;
    /// Scratch of at least `bytes` in `c`'s memory (grown on a call of a larger shape); null
    /// where it cannot be had without allocating while `stream` is being captured.
    void* scratch(comm_state& c, std::size_t bytes, cudaStream_t stream) noexcept;
    bool capturing(cudaStream_t stream) const noexcept;
    /// Levels of `c` torn down with the user's communicator (by `how`: finalize, destroy, abort).
    void release_levels(comm_state& c, nccl_shim how) noexcept;
    /// Drops comm's state (its levels released by `how`) and its compression state: ncclCommDestroy
    /// and ncclCommAbort, before the real call.
    void forget(ncclComm_t comm, nccl_shim how) noexcept;
    void tally(nccl_shim s) noexcept { calls_[static_cast<std::size_t>(s)].fetch_add(1, std::memory_order_relaxed); }
    ncclResult_t pass(nccl_shim s, pass_reason why) noexcept;
    ncclResult_t done(nccl_shim s, ncclResult_t r) noexcept;
    nccl_functions functions() const noexcept;

    runtime& rt_;
    const nccl_real& real_;
    /// The model NCCL decisions read: the NCCL tables' file (model/nccl_file.hpp: SHUNT_MODEL,
    /// else this host's model-HOST-nccl.json), else the runtime's model.
    std::shared_ptr<const cost_model> model_;
    mutable std::shared_mutex mutex_;  ///< guards comms_
    std::unordered_map<ncclComm_t, std::shared_ptr<comm_state>> comms_;
    std::array<std::atomic<std::uint64_t>, nccl_shim_count> calls_{}, by_shunt_{};
    std::array<std::atomic<std::uint64_t>, pass_reason_count> passed_{};
    std::atomic<std::uint64_t> three_level_{0};  ///< allreduces run over domain, node and rail
};

/// This thread's depth of ncclGroupStart/ncclGroupEnd nesting as the shims saw it.
inline thread_local int nccl_group_depth = 0;

}  // namespace shunt::detail
