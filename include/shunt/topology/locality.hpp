// shunt/topology/locality.hpp: where inside its node the calling process runs (package, NUMA node), via hwloc when built with it.
#pragma once

// Define SHUNT_HAVE_HWLOC=1 (and link hwloc) to discover packages and NUMA nodes; without it
// the in-node levels are reported unknown and `package=auto` / `numa=auto` levels are ignored.
#if defined(SHUNT_HAVE_HWLOC) && SHUNT_HAVE_HWLOC
#include <hwloc.h>
#endif

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
/// The machine's hwloc topology, loaded once per process (thread-safe), or nullptr on failure.
inline hwloc_topology_t local_hwloc_topology() {
    struct holder {
        hwloc_topology_t topo = nullptr;
        holder() {
            if (hwloc_topology_init(&topo) != 0) {
                topo = nullptr;
                return;
            }
            if (hwloc_topology_load(topo) != 0) {
                hwloc_topology_destroy(topo);
                topo = nullptr;
            }
        }
        ~holder() {
            if (topo) hwloc_topology_destroy(topo);
        }
    };
    static holder h;
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

/// True when shunt was built with hwloc.
inline constexpr bool have_hwloc() {
#if defined(SHUNT_HAVE_HWLOC) && SHUNT_HAVE_HWLOC
    return true;
#else
    return false;
#endif
}

}  // namespace shunt
