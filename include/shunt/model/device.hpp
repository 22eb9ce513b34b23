// shunt/model/device.hpp: the predicted cost of each way a device buffer's packed bytes reach the MPI
// library (one-shot, staged, handed over on the device), and the cheapest of them.
#pragma once

#include <shunt/model/model.hpp>

#include <array>
#include <cstdint>
#include <limits>
#include <string_view>

namespace shunt {

/// How a buffer's packed bytes reach the library: the one enumeration of the methods of
/// point-to-point calls, MPI_Pack/MPI_Unpack of device buffers and the fused collectives.
enum class device_path : std::uint8_t {
    one_shot,  ///< the kernel packs straight into mapped pinned host memory (unpacks out of it)
    staged,  ///< the kernel packs into device scratch, then a copy to pinned host memory (and back)
    device,  ///< the kernel packs into device memory handed to a CUDA-aware MPI
    host,  ///< not a device buffer: shunt's host packer into host memory (never priced here)
};

inline constexpr std::string_view to_string(device_path p) {
    switch (p) {
        case device_path::one_shot: return "one-shot";
        case device_path::staged: return "staged";
        case device_path::device: return "device";
        case device_path::host: break;
    }
    return "host";
}

/// The predicted seconds of each path, indexed by device_path; infinity where a path is not
/// available (device without a CUDA-aware MPI; host, which is not a device path) or cannot be
/// priced (device without a measured p2p.<level>.dd table: the library's own device transfer is
/// unknown).
struct device_path_costs {
    std::array<double, 4> seconds{std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity(),
                                  std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()};
    /// The level whose point-to-point tables were added to every path ("" when none was: the
    /// paths then differ only in what happens before and after the library's transfer).
    std::string_view level;
    double operator[](device_path p) const { return seconds[static_cast<std::size_t>(p)]; }
};

/// Prices moving `bytes` packed bytes of a device buffer laid out in blocks of `block_len` bytes,
/// on the sending side (`receive` false) or the receiving side, from model `m`:
///   one-shot  pack.mapped.b<L>
///   staged    pack.device.b<L> + copy.d2h (receiving: copy.h2d + the unpack, priced as the pack)
///   device    pack.device.b<L> + p2p.<level>.dd, where `cuda_aware` and the model has measured
///             p2p.<level>.dd for a level (node, then network, then package); one-shot and staged
///             then add p2p.<level>.hh, which they hand to the library instead.
/// L is the model's measured block length nearest `block_len` (cost_model::predict_device_pack).
/// Pure and thread-safe; walks the model's tables, so callers cache the result per layout.
inline device_path_costs price_device_paths(const cost_model& m, double block_len, double bytes, bool receive,
                                            bool cuda_aware) {
    device_path_costs c;
    const double mapped = m.predict_device_pack(true, block_len, bytes);
    const double device = m.predict_device_pack(false, block_len, bytes);
    c.seconds[static_cast<std::size_t>(device_path::one_shot)] = mapped;
    c.seconds[static_cast<std::size_t>(device_path::staged)] =
        device + m.predict(receive ? "copy.h2d" : "copy.d2h", bytes);
    if (!cuda_aware) return c;
    for (const std::string_view level : {"node", "network", "package"})
        if (m.measured(table_names::p2p(level, "dd"))) {
            c.level = level;
            const double host_p2p = m.predict(table_names::p2p(level, "hh"), bytes);
            c.seconds[static_cast<std::size_t>(device_path::one_shot)] += host_p2p;
            c.seconds[static_cast<std::size_t>(device_path::staged)] += host_p2p;
            c.seconds[static_cast<std::size_t>(device_path::device)] =
                device + m.predict(table_names::p2p(level, "dd"), bytes);
            break;
        }
    return c;
}

/// The cheapest path of `c` that is available, or `fallback` (the fixed rule's choice) where it
/// is no dearer than the cheapest: ties and unpriced paths keep the old behaviour. Where the MPI
/// is CUDA-aware but the device path is unpriced (no p2p.<level>.dd measured), `fallback`
/// should be device_path::device, and stays.
inline device_path cheapest_device_path(const device_path_costs& c, device_path fallback, bool cuda_aware) {
    if (cuda_aware && !(c[device_path::device] < std::numeric_limits<double>::infinity()) &&
        fallback == device_path::device)
        return fallback;
    device_path best = fallback;
    for (const device_path p : {device_path::one_shot, device_path::staged, device_path::device}) {
        if (p == device_path::device && !cuda_aware) continue;
        if (c[p] < c[best]) best = p;
    }
    return best;
}

}  // namespace shunt
