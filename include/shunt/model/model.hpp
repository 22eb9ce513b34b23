// shunt/model/model.hpp: the cost model: named measured tables over analytic built-in defaults,
// with online refinement from the calls actually executed.
#pragma once

#include <shunt/model/table.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shunt {

/// Names of the model's tables. Every table maps a size in bytes to seconds.
///   pack.<shunt|library>.b<L>, unpack.<shunt|library>.b<L>  host (un)packing of L-byte blocks
///   copy.memcpy                                             host memory copy
///   copy.<h2d|d2h|d2d>                                      device copies (pinned host memory), with their
///                                                           stream synchronisation
///   launch                                                  an empty kernel over `size` threads, launch and
///                                                           synchronisation
///   pack.<device|mapped>.b<L>                               device kernel packing L-byte blocks into device
///                                                           memory, or into mapped pinned host memory, with
///                                                           its stream synchronisation (serves unpacking too)
///   p2p.<package|node|network>.<hh|hd|dh|dd>                point-to-point ping-pong half round trip
///   coll.<op>.<algorithm>.<level>                           one collective algorithm at one level
///   compress.<name>.<cpu|gpu>.<encode|decode|combine>       a compressor (model/compress.hpp): compress,
///                                                           decompress-and-accumulate, or the sum of two
///                                                           compressed forms, with its default parameters;
///                                                           `size` is the tensor's float32 bytes
///   nccl.<coll>.<algorithm>.<protocol>.r<R>n<N>             NCCL running one collective with that algorithm and
///                                                           protocol forced (NCCL_ALGO, NCCL_PROTO), R ranks on N
///                                                           nodes; size: the bytes NCCL gives its tuner (the whole
///                                                           gathered or scattered buffer for allgather and
///                                                           reduce_scatter); names in shunt/plan/nccl_tuner.hpp
///   nccl.<op>.<library|hierarchical>.r<R>n<N>               an NCCL collective run by NCCL or by shunt's
///                                                           schedule over node and rail communicators, R ranks
///                                                           on N nodes of equal size (shunt/plan/nccl.hpp)
namespace table_names {
inline std::string pack(bool library, bool unpack, std::int64_t block_len) {
    return std::string(unpack ? "unpack." : "pack.") + (library ? "library" : "shunt") + ".b" +
           std::to_string(block_len);
}
/// pack.device.b<L> (`mapped` false) or pack.mapped.b<L>.
inline std::string device_pack(bool mapped, std::int64_t block_len) {
    return std::string(mapped ? "pack.mapped" : "pack.device") + ".b" + std::to_string(block_len);
}
/// True for the host packers' tables, pack.<shunt|library>.b<L> and unpack.<shunt|library>.b<L>.
inline bool is_host_pack(std::string_view name) {
    const bool pack = name.starts_with("pack.") || name.starts_with("unpack.");
    return pack &&
           (name.find(".shunt.b") != std::string_view::npos || name.find(".library.b") != std::string_view::npos);
}
inline std::string p2p(std::string_view level, std::string_view buffers) {
    return "p2p." + std::string(level) + "." + std::string(buffers);
}
/// compress.<method>.<cpu|gpu>.<stage>, the method as compress::to_string names it.
inline std::string compress(std::string_view method, bool device, std::string_view stage) {
    return "compress." + std::string(method) + (device ? ".gpu." : ".cpu.") + std::string(stage);
}
}  // namespace table_names

/// How much faster shunt's method must measure than the library's to be chosen over it (a
/// fraction), so that noise favours the library: one rule for every measured decision (the pack
/// planner's layouts, the collective tuner, MPI_Alltoallw's per-communicator choice).
inline constexpr double measured_win_margin = 0.03;

/// Parameters of the analytic model used where no measurement exists: latency + size /
/// bandwidth per level, memory bandwidth, PCIe, per-block costs of the packers.
struct analytic_params {
    double memcpy_bytes_per_s = 8e9;
    double library_call_s = 150e-9;  // MPI_Pack entry, convertor set-up
    double library_block_s = 1.5e-9;  // per contiguous block (Open MPI 4.1's packer at 1-byte blocks)
    double shunt_call_s = 40e-9;
    double shunt_block_s = 0.6e-9;
    double pcie_bytes_per_s = 25e9, pcie_latency_s = 8e-6;
    double device_bytes_per_s = 2e12, launch_s = 5e-6;
    /// A kernel's stores into mapped pinned host memory: write-combined over PCIe, well below the
    /// copy engine's rate. With the values above this puts the analytic crossover of one-shot
    /// (pack into mapped memory) and staged (pack on the device, then copy) near 64 KiB, where
    /// the fixed rule that preceded the model switched.
    double mapped_bytes_per_s = 6e9;
    /// The device reads the typed buffer in sectors of this many bytes.
    double device_sector = 32;
    struct level {
        double latency_s, bytes_per_s;
    };
    level package{0.4e-6, 8e9}, node{0.8e-6, 5e9}, network{25e-6, 1.25e8};
    /// A compressor on the host: float32 bytes of the tensor per second when compressing,
    /// decompressing-and-accumulating and combining two compressed forms (the summable ones),
    /// with its default parameters, memory-bound (tensors beyond the caches), and its fixed cost.
    struct compressor {
        std::string_view name;
        double encode_bytes_per_s, decode_bytes_per_s, combine_bytes_per_s;
    };
    std::array<compressor, 7> compressors{{{"fp16", 8e9, 8e9, 8e9},
                                           {"bf16", 5e9, 8e9, 4e9},
                                           {"int8", 5e9, 8e9, 0},
                                           {"int4", 4e9, 6e9, 0},
                                           {"randomk", 20e9, 8e9, 100e9},
                                           {"topk", 1e9, 8e9, 0},
                                           {"sign", 5e9, 6e9, 0}}};
    double compress_call_s = 0.2e-6;
    /// On the device, as a fraction of device_bytes_per_s (top-k: a tenth; the others half).
    double device_compress_share = 0.5, device_top_k_share = 0.1;
};

/// Who a model belongs to: a model measured elsewhere is foreign and not used.
struct model_identity {
    std::string host, gpu, mpi;
    bool operator==(const model_identity&) const = default;
};

/// A cost model: measured tables where they exist, the analytic model elsewhere, times a
/// correction learned online. predict() is thread-safe; set() and load must happen before the
/// model is shared.
class cost_model {
public:
    cost_model() = default;
    explicit cost_model(analytic_params p) : params_(p) {}
    cost_model(const cost_model& o) : id(o.id), params_(o.params_), tables_(o.tables_) {}
    cost_model& operator=(const cost_model& o) {
        if (this != &o) id = o.id, params_ = o.params_, tables_ = o.tables_;
        return *this;
    }

    model_identity id;

    const analytic_params& params() const { return params_; }
    const std::map<std::string, time_table, std::less<>>& tables() const { return tables_; }
    const time_table* find(std::string_view name) const {
        auto it = tables_.find(name);
        return it == tables_.end() || it->second.empty() ? nullptr : &it->second;
    }
    void set(std::string name, time_table t) { tables_[std::move(name)] = std::move(t); }
    time_table& table(const std::string& name) { return tables_[name]; }

    /// True when `name` is measured rather than analytic.
    bool measured(std::string_view name) const { return find(name) != nullptr; }

    /// Seconds for `size` bytes in table `name`: measured if present, else analytic, times the
    /// online correction of that table and size decade.
    double predict(std::string_view name, double size) const { return raw(name, size) * correction(name, size); }

    /// Seconds to (un)pack `bytes` as blocks of `block_len` bytes. Measured block lengths are
    /// interpolated in log(block length) and log(time); outside the measured block lengths the
    /// nearest measured table is scaled by the analytic model's ratio between the two lengths;
    /// with no measurement at all the analytic model answers. The online correction applies to
    /// table_names::pack(library, unpack, round(block_len)).
    double predict_pack(bool library, bool unpack, double block_len, double bytes) const {
        block_len = std::max(1.0, block_len);
        const std::string name = table_names::pack(library, unpack, std::llround(block_len));
        return raw_pack(library, unpack, block_len, bytes) * correction(name, bytes);
    }

    /// Online refinement: a call of table `name` at `size` bytes took `seconds`. The correction
    /// for that table and size decade is the median of the last `correction_window` observed
    /// ratios (observed / predicted, each bounded to [1/8, 8]) once `correction_quorum` exist,
    /// so one preempted or cold call cannot swing a decision; a steady change moves it within a
    /// few observations. The generation changes only when the correction has moved by more than
    /// 10% since it last changed it, so a steady stream of observations does not invalidate
    /// decision caches on every call.
    void observe(std::string_view name, double size, double seconds) {
        const double predicted = raw_for_observe(name, size);
        if (!(predicted > 0) || !(seconds > 0) || !std::isfinite(seconds)) return;
        std::lock_guard lock(mutex_);
        auto [it, inserted] = corrections_.try_emplace(key(name, size));
        correction_state& c = it->second;
        c.ratios[c.next++ % correction_window] = std::clamp(seconds / predicted, 0.125, 8.0);
        const std::size_t n = std::min<std::size_t>(c.next, correction_window);
        if (n < correction_quorum) return;
        std::array<double, correction_window> sorted = c.ratios;
        std::sort(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(n));
        c.value = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
        if (std::fabs(c.value / c.published - 1) > 0.1) {
            c.published = c.value;
            generation_.fetch_add(1, std::memory_order_release);
        }
    }
    /// Observations a correction keeps, and how many it needs before it departs from 1.
    static constexpr std::size_t correction_window = 7, correction_quorum = 3;
    /// Changes whenever an observation moved a correction (decision caches compare it).
    std::uint64_t generation() const { return generation_.load(std::memory_order_acquire); }

    /// The analytic prediction for a table name (used where no measurement exists).
    double analytic(std::string_view name, double size) const {
        const auto& p = params_;
        auto starts = [&](std::string_view s) { return name.substr(0, s.size()) == s; };
        if (starts("copy.memcpy")) return 50e-9 + size / p.memcpy_bytes_per_s;
        if (starts("copy.d2d")) return p.launch_s + size / p.device_bytes_per_s;
        if (starts("copy.")) return p.pcie_latency_s + size / p.pcie_bytes_per_s;
        if (starts("launch")) return p.launch_s;
        if (starts("compress.")) return analytic_compress(name, size);
        if (starts("pack.device.") || starts("pack.mapped."))
            return analytic_device_pack(starts("pack.mapped."), pack_block_len(name), size);
        if (starts("pack.") || starts("unpack.")) {
            const bool library = name.find(".library.") != std::string_view::npos;
            return analytic_pack(library, pack_block_len(name), size);
        }
        const analytic_params::level& lv = name.find(".network") != std::string_view::npos   ? p.network
                                           : name.find(".package") != std::string_view::npos ? p.package
                                                                                             : p.node;
        double t = lv.latency_s + size / lv.bytes_per_s;
        if (starts("p2p.")) {  // device buffers cross PCIe (staged) on each device end
            const auto dot = name.rfind('.');
            const std::string_view ends = dot == std::string_view::npos ? "" : name.substr(dot + 1);
            for (char c : ends)
                if (c == 'd') t += p.pcie_latency_s + size / p.pcie_bytes_per_s;
        }
        return t;
    }

    /// The analytic time of compress.<method>.<cpu|gpu>.<stage> over `size` float32 bytes: the
    /// fixed cost (a launch on the device) plus the bytes at the method's rate; an unknown
    /// method or stage (or combine of a form that does not sum) at the slowest host rate.
    double analytic_compress(std::string_view name, double size) const {
        const auto& p = params_;
        const std::string_view rest = name.substr(name.find('.') + 1);
        const std::string_view method = rest.substr(0, rest.find('.'));
        const bool device = rest.find(".gpu.") != std::string_view::npos;
        const std::string_view stage = rest.substr(rest.rfind('.') + 1);
        if (device) {
            const double share = method == "topk" ? p.device_top_k_share : p.device_compress_share;
            return p.launch_s + size / (share * p.device_bytes_per_s);
        }
        double rate = 1e9;
        for (const auto& c : p.compressors)
            if (c.name == method) {
                const double r = stage == "encode"   ? c.encode_bytes_per_s
                                 : stage == "decode" ? c.decode_bytes_per_s
                                                     : c.combine_bytes_per_s;
                if (r > 0) rate = r;
            }
        return p.compress_call_s + size / rate;
    }

    /// The analytic pack time: call + blocks * per_block + bytes / memory bandwidth.
    double analytic_pack(bool library, double block_len, double bytes) const {
        const auto& p = params_;
        const double blocks = bytes / std::max(1.0, block_len);
        return library ? p.library_call_s + blocks * p.library_block_s + bytes / p.memcpy_bytes_per_s
                       : p.shunt_call_s + blocks * p.shunt_block_s + bytes / p.memcpy_bytes_per_s;
    }

    /// The analytic device pack time: a launch and its synchronisation, the typed buffer read in
    /// whole sectors and the packed bytes written, at the device's copy rate (which counts each
    /// byte read and written once); into mapped memory the stores cross PCIe instead.
    double analytic_device_pack(bool mapped, double block_len, double bytes) const {
        const auto& p = params_;
        block_len = std::max(1.0, block_len);
        const double blocks = bytes / block_len;
        const double read = blocks * std::ceil(block_len / p.device_sector) * p.device_sector;
        const double on_device = 0.5 * (read + bytes) / p.device_bytes_per_s;
        return p.launch_s + (mapped ? std::max(on_device, bytes / p.mapped_bytes_per_s) : on_device);
    }

    /// The measured block length nearest `block_len` (in log scale; the smaller on a tie) among
    /// the non-empty tables named `prefix` + L, or 0 when there is none. Walks the tables: for
    /// callers that cache what they decide from it.
    double nearest_block_len(std::string_view prefix, double block_len) const {
        block_len = std::max(1.0, block_len);
        double best = 0, best_d = 0;
        for (auto it = tables_.lower_bound(prefix);
             it != tables_.end() && std::string_view(it->first).starts_with(prefix); ++it) {
            if (it->second.empty()) continue;
            const double l = std::strtod(it->first.c_str() + prefix.size(), nullptr);
            if (!(l > 0)) continue;
            const double d = std::fabs(std::log(l / block_len));
            if (best == 0 || d < best_d || (d == best_d && l < best)) best = l, best_d = d;
        }
        return best;
    }

    /// Seconds to pack `bytes` as blocks of `block_len` bytes with the device kernel into device
    /// memory (`mapped` false) or mapped pinned host memory, including the stream synchronisation:
    /// the table of the nearest measured block length (pack.<device|mapped>.b<L>), else the
    /// analytic model at `block_len`. Unpacking runs the same kernels the other way and is
    /// predicted by the same tables.
    double predict_device_pack(bool mapped, double block_len, double bytes) const {
        const std::string prefix = mapped ? "pack.mapped.b" : "pack.device.b";
        const double l = nearest_block_len(prefix, block_len);
        if (l > 0) return predict(table_names::device_pack(mapped, std::llround(l)), bytes);
        return analytic_device_pack(mapped, block_len, bytes) *
               correction(table_names::device_pack(mapped, std::llround(std::max(1.0, block_len))), bytes);
    }

private:
    /// The block length L of a pack table name (pack.<who>.b<L>), 1 when it names none.
    static double pack_block_len(std::string_view name) {
        const auto b = name.rfind(".b");
        return b == std::string_view::npos ? 1 : std::strtod(std::string(name.substr(b + 2)).c_str(), nullptr);
    }
    // The uncorrected prediction an observation is compared with; pack tables interpolate.
    double raw_for_observe(std::string_view name, double size) const {
        if (!table_names::is_host_pack(name) || find(name)) return raw(name, size);
        const bool library = name.find(".library.") != std::string_view::npos;
        return raw_pack(library, name.substr(0, 7) == "unpack.", pack_block_len(name), size);
    }
    double raw(std::string_view name, double size) const {
        const time_table* t = find(name);
        return t ? t->predict(size) : analytic(name, size);
    }
    double raw_pack(bool library, bool unpack, double block_len, double bytes) const {
        const std::string prefix = std::string(unpack ? "unpack." : "pack.") + (library ? "library" : "shunt") + ".b";
        double below = 0, above = 0;
        for (const auto& [name, tbl] : tables_) {
            if (tbl.empty() || name.compare(0, prefix.size(), prefix) != 0) continue;
            const double l = std::strtod(name.c_str() + prefix.size(), nullptr);
            if (l <= 0) continue;
            if (l <= block_len && l > below) below = l;
            if (l >= block_len && (above == 0 || l < above)) above = l;
        }
        auto at = [&](double l) { return raw(prefix + std::to_string(std::llround(l)), bytes); };
        auto scaled = [&](double l) {
            return at(l) * analytic_pack(library, block_len, bytes) / analytic_pack(library, l, bytes);
        };
        if (below == 0 && above == 0) return analytic_pack(library, block_len, bytes);
        if (below == 0) return scaled(above);
        if (above == 0) return scaled(below);
        if (above == below) return at(below);
        const double tb = at(below), ta = at(above);
        const double f = (std::log(block_len) - std::log(below)) / (std::log(above) - std::log(below));
        return tb > 0 && ta > 0 ? std::exp(std::log(tb) + f * (std::log(ta) - std::log(tb))) : tb + f * (ta - tb);
    }
    static std::string key(std::string_view name, double size) {
        const int decade = size > 0 ? static_cast<int>(std::floor(std::log10(size))) : 0;
        return std::string(name) + "@" + std::to_string(decade);
    }
    double correction(std::string_view name, double size) const {
        std::lock_guard lock(mutex_);
        if (corrections_.empty()) return 1;
        auto it = corrections_.find(key(name, size));
        return it == corrections_.end() ? 1 : it->second.value;
    }

    analytic_params params_;
    std::map<std::string, time_table, std::less<>> tables_;
    mutable std::mutex mutex_;
    struct correction_state {
        double value = 1, published = 1;
        std::array<double, correction_window> ratios{};
        std::size_t next = 0;
    };
    std::map<std::string, correction_state> corrections_;
    std::atomic<std::uint64_t> generation_{0};
};

}  // namespace shunt
