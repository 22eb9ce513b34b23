// shunt/topology/gpu_domain.hpp: the GPU domain of a GPU inside its node (its NVLink clique from NVML, loaded lazily and never linked, else the package its PCI host bridge hangs from, from hwloc), for shunt's NCCL levels.
#pragma once

#include <shunt/topology/gpu.hpp>

#include <algorithm>
#include <cstdint>
#include <string>

#include <dlfcn.h>

#ifdef SHUNT_HAVE_HWLOC
#include <hwloc.h>
#endif

namespace shunt {

namespace detail {

// The few NVML declarations used here (nvml.h is not needed to build): stable ABI since NVML 10.
using nvml_device = struct nvml_device_st*;
struct nvml_pci_info {
    char bus_id_legacy[16];
    unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
};
inline constexpr unsigned nvml_max_links = 18;  // NVML_NVLINK_MAX_LINKS
inline constexpr int nvml_device_type_switch = 2;  // NVML_NVLINK_DEVICE_TYPE_SWITCH

/// The NVLink clique of the GPU at `key`: the smallest PCI key among it and the GPUs its active
/// links reach (pairs and fully connected groups, as NVLink bridges make them), 0 (one domain for
/// the node) where a link reaches an NVSwitch; -1 without NVML, the device or an active link.
inline std::int64_t nvlink_domain(std::int64_t key) {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (lib == nullptr) return -1;
    const auto sym = [&](const char* name) { return dlsym(lib, name); };
    auto init = reinterpret_cast<int (*)()>(sym("nvmlInit_v2"));
    auto by_bus = reinterpret_cast<int (*)(const char*, nvml_device*)>(sym("nvmlDeviceGetHandleByPciBusId_v2"));
    auto state = reinterpret_cast<int (*)(nvml_device, unsigned, int*)>(sym("nvmlDeviceGetNvLinkState"));
    auto remote =
        reinterpret_cast<int (*)(nvml_device, unsigned, nvml_pci_info*)>(sym("nvmlDeviceGetNvLinkRemotePciInfo_v2"));
    auto remote_type =
        reinterpret_cast<int (*)(nvml_device, unsigned, int*)>(sym("nvmlDeviceGetNvLinkRemoteDeviceType"));
    std::int64_t out = -1;
    nvml_device dev = nullptr;
    const std::string bus_id = pci_bus_id(key);
    if (init != nullptr && by_bus != nullptr && state != nullptr && remote != nullptr && init() == 0 &&
        by_bus(bus_id.c_str(), &dev) == 0) {
        for (unsigned link = 0; link < nvml_max_links; ++link) {
            int active = 0;
            if (state(dev, link, &active) != 0 || active == 0) continue;
            int type = 0;
            if (remote_type != nullptr && remote_type(dev, link, &type) == 0 && type == nvml_device_type_switch)
                return 0;  // behind an NVSwitch: the handle stays open, NVML stays loaded
            nvml_pci_info info{};
            if (remote(dev, link, &info) != 0) continue;
            info.bus_id[sizeof info.bus_id - 1] = '\0';
            const std::int64_t peer = pci_key(info.bus_id);
            if (peer >= 0) out = std::min(out < 0 ? key : out, peer);
        }
    }
    return out;  // the library stays loaded: NVML dislikes being unloaded after init
}

/// The package (else NUMA node, else machine) that the PCI host bridge above the GPU at `key`
/// hangs from, as 1 + its type and logical index; -1 without hwloc or where hwloc does not list
/// the device.
inline std::int64_t pci_domain(std::int64_t key) {
#ifdef SHUNT_HAVE_HWLOC
    hwloc_topology_t topo = nullptr;
    if (hwloc_topology_init(&topo) != 0) return -1;
    std::int64_t out = -1;
    if (hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT) == 0 &&
        hwloc_topology_load(topo) == 0) {
        hwloc_obj_t obj =
            hwloc_get_pcidev_by_busid(topo, static_cast<unsigned>(key >> 16), static_cast<unsigned>((key >> 8) & 0xff),
                                      static_cast<unsigned>((key >> 3) & 0x1f), static_cast<unsigned>(key & 7));
        hwloc_obj_t above = obj != nullptr ? hwloc_get_non_io_ancestor_obj(topo, obj) : nullptr;
        while (above != nullptr && above->type != HWLOC_OBJ_PACKAGE && above->type != HWLOC_OBJ_NUMANODE &&
               above->type != HWLOC_OBJ_MACHINE)
            above = above->parent;
        if (above != nullptr)
            out = 1 + (static_cast<std::int64_t>(above->type) << 32 | static_cast<std::int64_t>(above->logical_index));
    }
    hwloc_topology_destroy(topo);
    return out;
#else
    (void)key;
    return -1;
#endif
}

}  // namespace detail

/// The GPU domain of the GPU at PCI key `key` (pci_key), the same number for the GPUs of a node
/// that share one: its NVLink clique (NVML; one domain for GPUs behind an NVSwitch), else the
/// package its PCI host bridge hangs from (hwloc). -1 where neither says (no NVML, no hwloc, a
/// device they do not list, a negative key). Local: reads this machine only; loads NVML on the
/// first call and keeps it loaded. Never throws; call it once and keep the answer (hwloc loads a
/// whole topology).
inline std::int64_t gpu_domain_of(std::int64_t key) noexcept {
    if (key < 0) return -1;
    try {
        if (const std::int64_t l = detail::nvlink_domain(key); l >= 0) return l << 1;  // even: NVLink
        if (const std::int64_t l = detail::pci_domain(key); l >= 0) return l << 1 | 1;  // odd: PCI
    } catch (...) {}
    return -1;
}

/// gpu_domain_of for the GPU this process uses (local_gpu_key), found once per process;
/// thread-safe.
inline std::int64_t local_gpu_domain() noexcept {
    static const std::int64_t label = gpu_domain_of(local_gpu_key());
    return label;
}

}  // namespace shunt
