// interpose/device.hpp: device support shared by the executors: whether devices are in use, whether the MPI is CUDA-aware, the device method of a buffer, cached device forms.
#pragma once

#include <shunt/config.hpp>
#include <shunt/datatype/type_info.hpp>
#include <shunt/model/device.hpp>
#include <shunt/model/model.hpp>
#include <shunt/plan/p2p.hpp>

#include "type_memo.hpp"

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

namespace shunt::gpu {
class device_form;
}  // namespace shunt::gpu

namespace shunt::detail {

/// What every executor asks about device buffers. Nothing is classified until start() found a
/// usable device: until then (and always without one) every buffer is host memory. Thread-safe.
class device_support {
public:
    /// Looks for a device once MPI runs, and learns whether the MPI library is CUDA-aware
    /// (SHUNT_CUDA_AWARE, when set, overrides what the library says of itself).
    void start(const settings& cfg) noexcept;

    /// True once a device is in use, so that buffers may be device memory.
    bool in_use() const noexcept { return in_use_.load(std::memory_order_acquire); }
    /// in_use() with relaxed ordering, for the hot path of calls that check it first.
    bool in_use_relaxed() const noexcept { return in_use_.load(std::memory_order_relaxed); }
    /// True when the MPI library takes device pointers itself (CUDA-aware, or SHUNT_CUDA_AWARE=1).
    bool library_takes_device() const noexcept { return cuda_aware_; }

    /// True when `p` is device or managed memory (false whenever no device is in use).
    bool on_device(const void* p) const noexcept;

    /// The device method for `bytes` packed bytes in `blocks` contiguous blocks of a device
    /// buffer, sent or received (plan/p2p.hpp's device_planner; a new decision is logged under
    /// SHUNT_LOG=decide, SHUNT_PACK=device without a CUDA-aware MPI warned of once).
    device_path path_for(const cost_model& model, pack_choice forced, std::int64_t bytes, std::int64_t blocks,
                         bool receive);
    /// How the fused collectives move the packed bytes of `buf`: host when it is not device or
    /// managed memory, else the device rule for `bytes` packed bytes priced as one block.
    device_path way_of(const cost_model& model, pack_choice forced, const void* buf, std::int64_t bytes) noexcept;

    /// The device form of `count` x `type` (decoded as `t`), built once and cached; the cache
    /// holds the type's entry so that its address is not reused while the form is cached.
    /// Throws as gpu::device_form does.
    std::shared_ptr<const gpu::device_form> form_of(type_memo& memo, const type_info* t, int count, MPI_Datatype type);

private:
    std::atomic<bool> in_use_{false};
    bool cuda_aware_ = false;  ///< set once by start(), before in_use_
    std::atomic<bool> fallback_warned_{false};
    device_planner planner_;
    std::mutex forms_mutex_;
    std::map<std::pair<const type_info*, int>,
             std::pair<std::shared_ptr<const type_info>, std::shared_ptr<const gpu::device_form>>>
        forms_;
};

}  // namespace shunt::detail
