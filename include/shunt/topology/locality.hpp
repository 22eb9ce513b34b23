// shunt/topology/locality.hpp: where in its node the calling process runs (package, NUMA node) and where a GPU hangs, via hwloc.
#pragma once

// Define SHUNT_HAVE_HWLOC=1 (and link hwloc) to discover packages and NUMA nodes; without it
// the in-node levels are reported unknown and `package=auto` / `numa=auto` levels are ignored.
#if defined(SHUNT_HAVE_HWLOC) && SHUNT_HAVE_HWLOC
#include <hwloc.h>
#endif

#include <string>
#include <string_view>

namespace shunt {

/// The kinds of in-node locality domain that can be discovered.
enum class domain_kind { package, numa };

/// The domain kind an `auto` level name stands for: "package" or "numa". False for other names.
inline bool domain_kind_of(std::string_view level_name, domain_kind& out) {
    if (level_name == "package") {
        out = domain_kind::package;
        return true;
    }
    if (level_name == "numa") {
        out = domain_kind::numa;
        return true;
    }
    return false;
}

namespace detail {
#if defined(SHUNT_HAVE_HWLOC) && SHUNT_HAVE_HWLOC
/// An hwloc topology of this machine, loaded by its constructor (with PCI devices and bridges,
/// the important ones, when `with_io`); `topo` is nullptr when loading failed.
struct hwloc_holder {
    hwloc_topology_t topo = nullptr;
    explicit hwloc_holder(bool with_io) {
        if (hwloc_topology_init(&topo) != 0) {
            topo = nullptr;
            return;
        }
        if ((with_io && hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT) != 0) ||
            hwloc_topology_load(topo) != 0) {
            hwloc_topology_destroy(topo);
            topo = nullptr;
        }
    }
    hwloc_holder(const hwloc_holder&) = delete;
    hwloc_holder& operator=(const hwloc_holder&) = delete;
    ~hwloc_holder() {
        if (topo) hwloc_topology_destroy(topo);
    }
};

/// The machine's hwloc topology, loaded once per process (thread-safe), or nullptr on failure.
inline hwloc_topology_t local_hwloc_topology() {
    static hwloc_holder h(false);
    return h.topo;
}

/// The machine's hwloc topology with its PCI devices and bridges (the important ones), loaded
/// once per process on first use (thread-safe), or nullptr on failure. Apart from
/// local_hwloc_topology, so that finding packages never pays for scanning the PCI bus.
inline hwloc_topology_t local_hwloc_io_topology() {
    static hwloc_holder h(true);
    return h.topo;
}
#endif
}  // namespace detail

/// The logical index (hwloc) of the package or NUMA node that contains the whole CPU binding of
/// the calling process, or -1 when unknown: the process is not bound inside one domain, the
/// machine has no such domain, or shunt was built without hwloc. Local; thread-safe.
inline int bound_domain(domain_kind kind) {
#if defined(SHUNT_HAVE_HWLOC) && SHUNT_HAVE_HWLOC
    hwloc_topology_t topo = detail::local_hwloc_topology();
    if (!topo) return -1;
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (!set) return -1;
    int found = -1;
    if (hwloc_get_cpubind(topo, set, HWLOC_CPUBIND_PROCESS) == 0 && !hwloc_bitmap_iszero(set)) {
        hwloc_obj_type_t type = kind == domain_kind::package ? HWLOC_OBJ_PACKAGE : HWLOC_OBJ_NUMANODE;
        for (hwloc_obj_t obj = hwloc_get_next_obj_by_type(topo, type, nullptr); obj;
             obj = hwloc_get_next_obj_by_type(topo, type, obj)) {
            if (obj->cpuset && hwloc_bitmap_isincluded(set, obj->cpuset)) {
                found = static_cast<int>(obj->logical_index);
                break;
            }
        }
    }
    hwloc_bitmap_free(set);
    return found;
#else
    (void)kind;
    return -1;
#endif
}

/// Where the PCI device `bus_id` ("0000:3b:00.0") hangs in this machine, as hwloc sees it: its
/// nearest non-I/O ancestor ("Package:0", "Group0:1", "Machine:0", by type and logical index),
/// followed by "/NUMANode:N" when that ancestor is local to exactly one NUMA node; "" when hwloc
/// does not know the device or shunt was built without hwloc. Local; thread-safe; never throws.
inline std::string pci_ancestor(std::string_view bus_id) noexcept {
#if defined(SHUNT_HAVE_HWLOC) && SHUNT_HAVE_HWLOC
    try {
        if (bus_id.empty()) return {};
        hwloc_topology_t topo = detail::local_hwloc_io_topology();
        if (!topo) return {};
        const std::string id(bus_id);
        hwloc_obj_t dev = hwloc_get_pcidev_by_busidstring(topo, id.c_str());
        if (!dev) return {};
        hwloc_obj_t up = hwloc_get_non_io_ancestor_obj(topo, dev);
        if (!up) return {};
        char type[64] = {0};
        hwloc_obj_type_snprintf(type, sizeof type, up, 0);
        std::string out = std::string(type) + ':' + std::to_string(up->logical_index);
        if (up->type != HWLOC_OBJ_NUMANODE && up->nodeset && hwloc_bitmap_weight(up->nodeset) == 1) {
            const auto os_index = static_cast<unsigned>(hwloc_bitmap_first(up->nodeset));
            hwloc_obj_t numa = hwloc_get_numanode_obj_by_os_index(topo, os_index);
            if (numa) out += "/NUMANode:" + std::to_string(numa->logical_index);
        }
        return out;
    } catch (...) {
        return {};
    }
#else
    (void)bus_id;
    return {};
#endif
}

/// True when shunt was built with hwloc.
inline constexpr bool have_hwloc() {
#if defined(SHUNT_HAVE_HWLOC) && SHUNT_HAVE_HWLOC
    return true;
#else
    return false;
#endif
}

}  // namespace shunt
