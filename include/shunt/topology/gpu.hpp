// shunt/topology/gpu.hpp: the GPU a rank uses (its PCI bus id, from a locator libshunt_gpu installs) and the groups of a `gpu=auto` level.
#pragma once

#include <shunt/errors.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace shunt {

/// A function that returns the PCI bus id of the GPU the calling process uses ("0000:3b:00.0"),
/// or "" for none. Must not throw.
using gpu_locator = std::string (*)();

namespace detail {
inline std::atomic<gpu_locator>& gpu_locator_slot() {
    static std::atomic<gpu_locator> slot{nullptr};
    return slot;
}
}  // namespace detail

/// Installs the locator topology discovery asks for the calling process's GPU (nullptr: none).
/// The header library cannot call CUDA itself; libshunt_gpu built with CUDA installs
/// shunt::gpu::current_device_pci_bus_id when it is loaded, so the preload library and the tools
/// that link it see GPUs, and programs without it see none. Process-wide; thread-safe.
inline void set_gpu_locator(gpu_locator f) noexcept { detail::gpu_locator_slot().store(f); }

/// The installed locator, or nullptr.
inline gpu_locator current_gpu_locator() noexcept { return detail::gpu_locator_slot().load(); }

/// The PCI address in `bus_id` ("dddd:bb:dd.f" or "bb:dd.f", hex, any case; the domain up to 8
/// digits, as CUDA, nvidia-smi and hwloc write it) as one non-negative number, domain, bus,
/// device and function from high to low bits; -1 for an empty or malformed id.
inline std::int64_t pci_key(std::string_view bus_id) {
    auto hex = [&](std::size_t& i, std::size_t max_digits, std::int64_t& out) {
        std::size_t n = 0;
        out = 0;
        for (; i < bus_id.size() && n < max_digits + 1; ++i, ++n) {
            const char c = bus_id[i];
            int d = -1;
            if (c >= '0' && c <= '9')
                d = c - '0';
            else if (c >= 'a' && c <= 'f')
                d = c - 'a' + 10;
            else if (c >= 'A' && c <= 'F')
                d = c - 'A' + 10;
            if (d < 0) break;
            out = out * 16 + d;
        }
        return n >= 1 && n <= max_digits;
    };
    std::int64_t domain = 0, bus = 0, dev = 0, fn = 0;
    std::size_t i = 0;
    const bool has_domain = std::count(bus_id.begin(), bus_id.end(), ':') == 2;
    if (has_domain) {
        if (!hex(i, 8, domain) || i >= bus_id.size() || bus_id[i++] != ':') return -1;
    }
    if (!hex(i, 2, bus) || i >= bus_id.size() || bus_id[i++] != ':') return -1;
    if (!hex(i, 2, dev) || dev > 31 || i >= bus_id.size() || bus_id[i++] != '.') return -1;
    if (!hex(i, 1, fn) || fn > 7 || i != bus_id.size()) return -1;
    return domain << 16 | bus << 8 | dev << 3 | fn;
}

/// The bus id of a pci_key, "dddd:bb:dd.f" in lower case; "" for a negative key.
inline std::string pci_bus_id(std::int64_t key) {
    if (key < 0) return {};
    char text[32];
    std::snprintf(text, sizeof text, "%04llx:%02x:%02x.%x", static_cast<unsigned long long>(key >> 16),
                  static_cast<unsigned>((key >> 8) & 0xff), static_cast<unsigned>((key >> 3) & 0x1f),
                  static_cast<unsigned>(key & 7));
    return text;
}

/// The pci_key of the GPU the calling process uses (the installed locator's answer), or -1
/// without a locator, without a GPU or for an id it cannot read. Local; never throws.
inline std::int64_t local_gpu_key() noexcept {
    const gpu_locator f = current_gpu_locator();
    if (!f) return -1;
    try {
        return pci_key(f());
    } catch (...) {
        return -1;
    }
}

/// The groups of a `gpu=auto` level, from every rank's node label (node[r]), GPU (gpu[r], a
/// pci_key, negative for none) and labels at the levels kept above it (outer[j][r]): ranks share
/// a group when they are on the same node, use the same GPU and share a group at every level
/// above, so the level always nests in them (two ranks bound to different packages that use one
/// GPU are two groups). Labels are dense and numbered in rank order (rank 0's group is 0); a
/// rank without a GPU gets -1. Pure: every rank given the same arrays gets the same labels.
/// Throws shunt::error when the arrays differ in length.
inline std::vector<std::int64_t> gpu_group_labels(std::span<const std::int64_t> node, std::span<const std::int64_t> gpu,
                                                  std::span<const std::vector<std::int64_t>> outer = {}) {
    if (node.size() != gpu.size())
        throw error("gpu_group_labels: " + std::to_string(node.size()) + " node labels for " +
                    std::to_string(gpu.size()) + " ranks");
    for (const auto& o : outer)
        if (o.size() != gpu.size())
            throw error("gpu_group_labels: " + std::to_string(o.size()) + " outer labels for " +
                        std::to_string(gpu.size()) + " ranks");
    std::map<std::vector<std::int64_t>, std::int64_t> dense;
    std::vector<std::int64_t> out(gpu.size(), -1);
    for (std::size_t r = 0; r < gpu.size(); ++r) {
        if (gpu[r] < 0) continue;
        std::vector<std::int64_t> key{node[r], gpu[r]};
        for (const auto& o : outer) key.push_back(o[r]);
        out[r] = dense.try_emplace(std::move(key), static_cast<std::int64_t>(dense.size())).first->second;
    }
    return out;
}

}  // namespace shunt
