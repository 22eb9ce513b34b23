// interpose/device.cpp: device support: the device and CUDA-awareness found at start, device methods per buffer, cached device forms.
#include "device.hpp"
#include "gate.hpp"

#include <shunt/errors.hpp>
#include <shunt/gpu/descriptor.hpp>
#include <shunt/gpu/memory.hpp>
#include <shunt/gpu/pack.hpp>
#include <shunt/log.hpp>

#include <cmath>
#include <cstdio>

#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // Open MPI: MPIX_Query_cuda_support
#endif

namespace shunt::detail {

void device_support::start(const settings& cfg) noexcept {
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
            aware = cfg.cuda_aware;
        } else {
#if defined(OMPI_HAVE_MPI_EXT_CUDA) && OMPI_HAVE_MPI_EXT_CUDA
            aware = MPIX_Query_cuda_support() == 1;
#elif defined(MPIX_GPU_SUPPORT_CUDA)
            int supported = 0;
            aware = MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, &supported) == MPI_SUCCESS && supported != 0;
#endif
        }
        cuda_aware_ = aware;
        in_use_.store(true, std::memory_order_release);
        fast_gate::block(fast_gate::device);
        log_info(log_category::init, "device buffers in point-to-point calls: %s",
                 aware ? "the MPI library is CUDA-aware" : "staged through host memory (MPI not CUDA-aware)");
    } catch (...) {
        in_use_.store(false, std::memory_order_release);
        fast_gate::unblock(fast_gate::device);
    }
}

bool device_support::on_device(const void* p) const noexcept {
    if (!in_use()) return false;
    const gpu::memory_kind k = gpu::classify(p);
    return k == gpu::memory_kind::device || k == gpu::memory_kind::managed;
}

device_path device_support::path_for(const cost_model& model, pack_choice forced, std::int64_t bytes,
                                     std::int64_t blocks, bool receive) {
    const device_planner::choice c = planner_.choose(model, forced, cuda_aware_, bytes, blocks, receive);
    if (c.is_new && log_enabled(log_level::debug, log_category::decide)) {
        char device[48] = "not available";
        if (std::isfinite(c.costs[device_path::device]))
            std::snprintf(device, sizeof device, "%.3g us", c.costs[device_path::device] * 1e6);
        else if (cuda_aware_)
            std::snprintf(device, sizeof device, "not priced (no p2p.<level>.dd table)");
        log_debug(log_category::decide,
                  "device buffer, %s %lld bytes in %lld blocks: %s (predicted one-shot %.3g us, staged %.3g us, "
                  "device %s%s%.*s; the fixed rule: %s)",
                  receive ? "receiving" : "sending", static_cast<long long>(bytes), static_cast<long long>(c.blocks),
                  to_string(c.path).data(), c.costs[device_path::one_shot] * 1e6, c.costs[device_path::staged] * 1e6,
                  device, c.costs.level.empty() ? "" : "; each with the library's transfer at level ",
                  static_cast<int>(c.costs.level.size()), c.costs.level.data(), to_string(c.fixed).data());
    }
    if (c.fallback && !fallback_warned_.exchange(true))
        log_warn(log_category::pack,
                 "SHUNT_PACK=device needs a CUDA-aware MPI library (set "
                 "SHUNT_CUDA_AWARE=1 if it is one); device buffers are staged instead (said once)");
    return c.path;
}

device_path device_support::way_of(const cost_model& model, pack_choice forced, const void* buf,
                                   std::int64_t bytes) noexcept {
    if (!on_device(buf)) return device_path::host;
    try {
        // The buffer's layout is unknown here: priced as one contiguous block.
        return path_for(model, forced, bytes, 1, false);
    } catch (...) {
        return device_path::staged;
    }
}

std::shared_ptr<const gpu::device_form> device_support::form_of(type_memo& memo, const type_info* t, int count,
                                                                MPI_Datatype type) {
    const std::lock_guard lock(forms_mutex_);
    auto it = forms_.find({t, count});
    if (it == forms_.end()) {
        if (forms_.size() >= 256) forms_.clear();
        auto keep = memo.find_shared(type);
        if (keep.get() != t) throw error("the datatype changed while its device form was built");
        auto form = std::make_shared<const gpu::device_form>(gpu::flat_form(t->form, t->extent, count));
        it = forms_.emplace(std::pair{t, count}, std::pair{std::move(keep), std::move(form)}).first;
    }
    return it->second.second;
}

}  // namespace shunt::detail
