// shunt/topology/topology.hpp: the levels of one communicator (discovered or described), their communicators, cached per communicator.
#pragma once

#include <shunt/errors.hpp>
#include <shunt/topology/gpu.hpp>
#include <shunt/topology/hierarchy.hpp>
#include <shunt/topology/locality.hpp>
#include <shunt/topology/spec.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shunt {

namespace detail {

/// Frees a communicator when destroyed, unless MPI is already finalized. Shunt's own handles only.
class owned_comm {
public:
    owned_comm() = default;
    explicit owned_comm(MPI_Comm c) : comm_(c) {}
    owned_comm(owned_comm&& o) noexcept : comm_(std::exchange(o.comm_, MPI_COMM_NULL)) {}
    owned_comm& operator=(owned_comm&& o) noexcept {
        if (this != &o) {
            reset();
            comm_ = std::exchange(o.comm_, MPI_COMM_NULL);
        }
        return *this;
    }
    ~owned_comm() { reset(); }
    MPI_Comm get() const { return comm_; }
    void reset() noexcept {
        if (comm_ == MPI_COMM_NULL) return;
        int finalized = 1;
        if (PMPI_Finalized(&finalized) == MPI_SUCCESS && !finalized) PMPI_Comm_free(&comm_);
        comm_ = MPI_COMM_NULL;
    }

private:
    MPI_Comm comm_ = MPI_COMM_NULL;
};

}  // namespace detail

/// One level of a communicator's topology, seen from the calling rank.
struct topology_level {
    std::string name;
    /// The members of my group at this level, in the rank order of the user communicator.
    MPI_Comm group = MPI_COMM_NULL;
    /// My peers: the ranks at my position (index in their group) in every group of my parent
    /// group (the group of the next level, or the whole communicator) that has such a position;
    /// the generalised "leaders" communicator, one per position, so every rank takes part.
    MPI_Comm peers = MPI_COMM_NULL;
};

/// The topology of one intra-communicator: its non-trivial levels (see topology_spec for how
/// they are described or discovered), the group tables every algorithm plans with, a private
/// duplicate for shunt's own traffic, and per level the group and peer communicators.
///
/// Building one is collective over the communicator: every rank must pass the same
/// description. Errors in the description are detected identically on every rank, so all ranks
/// throw together. Use topology::of to build once per communicator and cache it.
class topology {
public:
    /// Collective over comm. Throws shunt::unsupported for an inter-communicator, shunt::error
    /// for a description that does not fit (labels for the wrong number of ranks, an unlisted
    /// host, groups that do not nest), shunt::mpi_error when an MPI call fails.
    topology(MPI_Comm comm, const topology_spec& spec) : spec_text_(to_string(spec)) {
        int inter = 0;
        SHUNT_CHECK_MPI(PMPI_Comm_test_inter(comm, &inter));
        if (inter) throw unsupported("topology: inter-communicators are left to the library");
        SHUNT_CHECK_MPI(PMPI_Comm_size(comm, &size_));
        SHUNT_CHECK_MPI(PMPI_Comm_rank(comm, &rank_));
        int world_rank = 0, world_size = 1;
        SHUNT_CHECK_MPI(PMPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
        SHUNT_CHECK_MPI(PMPI_Comm_size(MPI_COMM_WORLD, &world_size));

        // 1. My label at each described level (rank-independent checks throw here, on every rank).
        const std::size_t nl = spec.levels.size();
        std::vector<std::int64_t> mine(nl, 0);
        bool any_auto = std::any_of(spec.levels.begin(), spec.levels.end(),
                                    [](const level_spec& l) { return l.kind == grouping_kind::automatic; });
        const auto is_gpu = [&](std::size_t k) {
            return spec.levels[k].kind == grouping_kind::automatic && spec.levels[k].name == "gpu";
        };
        bool any_gpu = false;
        for (std::size_t k = 0; k < nl; ++k) any_gpu = any_gpu || is_gpu(k);
        // With a gpu level, one more column: the node label, which gpu groups never cross.
        const std::size_t nc = nl + (any_gpu ? 1 : 0);
        mine.resize(nc, 0);
        std::int64_t node_label = 0;
        if (any_auto) node_label = discover_node(comm);
        if (any_gpu) mine[nl] = node_label;
        std::string host;
        for (std::size_t k = 0; k < nl; ++k) {
            const level_spec& l = spec.levels[k];
            switch (l.kind) {
                case grouping_kind::automatic: {
                    domain_kind dk{};
                    if (is_gpu(k)) {
                        mine[k] = local_gpu_key();
                    } else if (!domain_kind_of(l.name, dk)) {
                        mine[k] = node_label;
                    } else {
                        int d = bound_domain(dk);
                        mine[k] = d < 0 ? -1 : node_label * (std::int64_t{1} << 24) + d;
                    }
                    break;
                }
                case grouping_kind::sizes:
                case grouping_kind::labels: mine[k] = rank_label(l, world_rank, world_size); break;
                case grouping_kind::hosts:
                    if (host.empty()) host = processor_name();
                    mine[k] = host_label(l, host);
                    break;
                case grouping_kind::slurm: {
                    const char* addr = std::getenv("SLURM_TOPOLOGY_ADDR");
                    const char* pattern = std::getenv("SLURM_TOPOLOGY_ADDR_PATTERN");
                    mine[k] = slurm_label(l, addr ? addr : "", pattern ? pattern : "");
                    break;
                }
            }
        }

        // 2. Everyone's labels, so the decisions below are identical on every rank.
        std::vector<std::int64_t> all(nc * static_cast<std::size_t>(size_), 0);
        if (nc > 0)
            SHUNT_CHECK_MPI(PMPI_Allgather(mine.data(), static_cast<int>(nc), MPI_INT64_T, all.data(),
                                           static_cast<int>(nc), MPI_INT64_T, comm));
        const auto column = [&](std::size_t k) {
            std::vector<std::int64_t> lab(static_cast<std::size_t>(size_));
            for (int r = 0; r < size_; ++r)
                lab[static_cast<std::size_t>(r)] = all[static_cast<std::size_t>(r) * nc + k];
            return lab;
        };
        for (std::size_t k = 0; k < nl; ++k) {
            if (!is_gpu(k)) continue;
            for (const std::int64_t key : column(k)) gpu_bus_ids_.push_back(pci_bus_id(key));
            break;  // level names are unique: one gpu level at most
        }
        std::vector<std::vector<std::int64_t>> labels;
        std::vector<std::string> names;
        std::vector<std::size_t> gpu_levels;  // indices into labels of the kept gpu levels
        for (std::size_t k = 0; k < nl; ++k) {
            const level_spec& l = spec.levels[k];
            std::vector<std::int64_t> lab = column(k);
            int unknown = -1;
            for (int r = 0; r < size_ && unknown < 0; ++r)
                if (lab[static_cast<std::size_t>(r)] < 0) unknown = r;
            if (unknown >= 0 && l.kind == grouping_kind::hosts) {
                throw error("topology level '" + l.name + "': the host of rank " + std::to_string(unknown) +
                            (unknown == rank_ ? " ('" + host + "')" : std::string()) +
                            " matches none of its host groups; every host must be listed");
            }
            if (unknown >= 0 && l.kind == grouping_kind::slurm) {
                notes_.push_back(l.name + ": ignored, rank " + std::to_string(unknown) +
                                 " has no Slurm switch address of tier " + std::to_string(l.values[0]) +
                                 " (SLURM_TOPOLOGY_ADDR, SLURM_TOPOLOGY_ADDR_PATTERN)");
                continue;
            }
            if (unknown >= 0 && is_gpu(k)) {
                notes_.push_back(l.name + ": ignored, rank " + std::to_string(unknown) + " uses no GPU" +
                                 (current_gpu_locator() ? "" : " (no GPU locator: libshunt_gpu with CUDA not linked)"));
                continue;
            }
            if (unknown >= 0) {
                notes_.push_back(l.name + ": ignored, rank " + std::to_string(unknown) + " is not bound inside one " +
                                 l.name + (have_hwloc() ? "" : " (built without hwloc)"));
                continue;
            }
            if (is_gpu(k)) gpu_levels.push_back(labels.size());
            labels.push_back(std::move(lab));
            names.push_back(l.name);
        }
        // A gpu level's groups: same node, same GPU, and the same group at each kept level above.
        for (const std::size_t g : gpu_levels)
            labels[g] = gpu_group_labels(column(nl), labels[g], std::span(labels).subspan(g + 1));
        shunt::hierarchy described(size_, std::move(labels), std::move(names));
        for (int k = 0; k < described.levels(); ++k)
            if (described.trivial(k))
                notes_.push_back(described.name(k) + ": ignored, " +
                                 (described.groups(k) == size_ ? "every group is a single rank"
                                                               : "its groups are those of the level above"));
        groups_ = described.without_trivial_levels();

        // 3. Communicators: a private duplicate, then per level my group and my peers.
        MPI_Comm dup = MPI_COMM_NULL;
        SHUNT_CHECK_MPI(PMPI_Comm_dup(comm, &dup));
        comm_ = detail::owned_comm(dup);
        const int L = groups_.levels();
        group_comms_.resize(static_cast<std::size_t>(L));
        peer_comms_.resize(static_cast<std::size_t>(L));
        levels_.resize(static_cast<std::size_t>(L));
        for (int k = L - 1; k >= 0; --k) {
            MPI_Comm g = MPI_COMM_NULL, p = MPI_COMM_NULL;
            SHUNT_CHECK_MPI(PMPI_Comm_split(comm_.get(), groups_.group_of(k, rank_), rank_, &g));
            group_comms_[static_cast<std::size_t>(k)] = detail::owned_comm(g);
            MPI_Comm parent = k + 1 < L ? group_comms_[static_cast<std::size_t>(k + 1)].get() : comm_.get();
            SHUNT_CHECK_MPI(PMPI_Comm_split(parent, groups_.position(k, rank_), rank_, &p));
            peer_comms_[static_cast<std::size_t>(k)] = detail::owned_comm(p);
            levels_[static_cast<std::size_t>(k)] = topology_level{groups_.name(k), g, p};
        }
        ++live_counter();
    }

    topology(const topology&) = delete;
    topology& operator=(const topology&) = delete;
    ~topology() { --live_counter(); }

    /// Number of topologies alive in this process (a leak check for tests and shunt-info).
    static int live() { return live_counter().load(); }

    /// The cached topology of comm for the description `spec_text` (see topology_spec),
    /// building it on first use (collective then) and again when the description changes.
    /// Valid until comm is freed; freed with it (attribute caching with a delete callback).
    /// Every rank of comm must call it with the same text. Not for MPI_COMM_NULL.
    static const topology& of(MPI_Comm comm, std::string_view spec_text) { return *shared_of(comm, spec_text); }
    /// of(), shared: the topology (its private communicators included) lives on after comm is
    /// freed, for as long as the pointer is held (a nonblocking collective still running on it).
    /// Release it before MPI_Finalize.
    static std::shared_ptr<const topology> shared_of(MPI_Comm comm, std::string_view spec_text);

    /// Number of ranks and the calling rank, as in the user communicator.
    int size() const { return size_; }
    int rank() const { return rank_; }
    /// A private duplicate of the user communicator, for shunt's own messages.
    MPI_Comm comm() const { return comm_.get(); }
    /// The group tables of the non-trivial levels (the whole communicator above them).
    const shunt::hierarchy& groups() const { return groups_; }
    /// groups() keeping only the levels whose bit is set in `mask` (hierarchy::keep_levels),
    /// built on first use and kept; groups() itself when every level is kept. Thread-safe.
    const shunt::hierarchy& groups(std::uint32_t mask) const {
        const std::uint32_t all = groups_.all_levels();
        if ((mask & all) == all) return groups_;
        std::lock_guard lock(selected_mutex_);
        auto& h = selected_[mask & all];
        if (!h) h = std::make_unique<shunt::hierarchy>(groups_.keep_levels(mask & all));
        return *h;
    }
    /// The non-trivial levels, innermost first; levels()[k] is level k of groups().
    std::span<const topology_level> levels() const { return levels_; }
    /// The canonical text of the description this topology was built from.
    const std::string& spec() const { return spec_text_; }
    /// The PCI bus id of the GPU each rank uses, in rank order ("" for none), as found for a
    /// `gpu=auto` level; empty when the description has none.
    std::span<const std::string> gpu_bus_ids() const { return gpu_bus_ids_; }
    /// Why described levels were left out (one line each).
    std::span<const std::string> notes() const { return notes_; }
    /// Human-readable summary: the description, each level, and the notes.
    std::string describe() const {
        std::string out = "topology '" + spec_text_ + "' of " + std::to_string(size_) + " rank" +
                          (size_ == 1 ? "" : "s") + (groups_.regular() ? "" : " (irregular)") + "\n";
        out += groups_.describe();
        for (const auto& n : notes_) out += "note: " + n + '\n';
        return out;
    }

private:
    static std::atomic<int>& live_counter() {
        static std::atomic<int> n{0};
        return n;
    }
    /// The lowest rank (in comm) of the ranks that share memory with me.
    static std::int64_t discover_node(MPI_Comm comm) {
        int me = 0;
        SHUNT_CHECK_MPI(PMPI_Comm_rank(comm, &me));
        MPI_Comm node = MPI_COMM_NULL;
        SHUNT_CHECK_MPI(PMPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, me, MPI_INFO_NULL, &node));
        detail::owned_comm guard(node);
        int lowest = me;
        SHUNT_CHECK_MPI(PMPI_Allreduce(&me, &lowest, 1, MPI_INT, MPI_MIN, node));
        return lowest;
    }
    static std::string processor_name() {
        char name[MPI_MAX_PROCESSOR_NAME + 1] = {0};
        int len = 0;
        SHUNT_CHECK_MPI(PMPI_Get_processor_name(name, &len));
        return std::string(name, static_cast<std::size_t>(std::max(len, 0)));
    }

    std::string spec_text_;
    std::string source_;  // the text topology::of was given, to find it again without parsing
    int size_ = 0, rank_ = 0;
    detail::owned_comm comm_;
    shunt::hierarchy groups_;
    std::vector<detail::owned_comm> group_comms_, peer_comms_;
    std::vector<topology_level> levels_;
    std::vector<std::string> notes_;
    std::vector<std::string> gpu_bus_ids_;
    mutable std::mutex selected_mutex_;
    mutable std::map<std::uint32_t, std::unique_ptr<shunt::hierarchy>> selected_;
};

namespace detail {

/// The attribute value: the cached topology, shared with whoever still holds it.
using topology_box = std::shared_ptr<topology>;

inline int topology_delete_fn(MPI_Comm, int, void* value, void*) {
    delete static_cast<topology_box*>(value);
    return MPI_SUCCESS;
}

/// The keyval under which each communicator caches its topology (created once, thread-safe).
inline int topology_keyval() {
    static const int keyval = [] {
        int k = MPI_KEYVAL_INVALID;
        SHUNT_CHECK_MPI(PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, &topology_delete_fn, &k, nullptr));
        return k;
    }();
    return keyval;
}

// MPI frees MPI_COMM_SELF's attributes first thing in MPI_Finalize, while MPI still works, but
// promises nothing for MPI_COMM_WORLD's; so world's cached topology is released from there.
inline int release_world_topology_fn(MPI_Comm, int, void*, void*) {
    PMPI_Comm_delete_attr(MPI_COMM_WORLD, topology_keyval());
    return MPI_SUCCESS;
}

inline void release_world_topology_at_finalize() {
    static const bool done = [] {
        int k = MPI_KEYVAL_INVALID;
        SHUNT_CHECK_MPI(PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, &release_world_topology_fn, &k, nullptr));
        SHUNT_CHECK_MPI(PMPI_Comm_set_attr(MPI_COMM_SELF, k, nullptr));
        return true;
    }();
    (void)done;
}

}  // namespace detail

inline std::shared_ptr<const topology> topology::shared_of(MPI_Comm comm, std::string_view spec_text) {
    const int keyval = detail::topology_keyval();
    void* value = nullptr;
    int found = 0;
    SHUNT_CHECK_MPI(PMPI_Comm_get_attr(comm, keyval, &value, &found));
    if (found && value) {
        const auto& held = *static_cast<detail::topology_box*>(value);
        if (held && held->source_ == spec_text) return held;
    }
    topology_spec spec = parse_topology_spec(spec_text);
    int world_cmp = MPI_UNEQUAL;
    SHUNT_CHECK_MPI(PMPI_Comm_compare(comm, MPI_COMM_WORLD, &world_cmp));
    if (world_cmp == MPI_IDENT) detail::release_world_topology_at_finalize();
    auto box = std::make_unique<detail::topology_box>(std::make_shared<topology>(comm, spec));
    (*box)->source_ = std::string(spec_text);
    std::shared_ptr<const topology> out = *box;
    SHUNT_CHECK_MPI(PMPI_Comm_set_attr(comm, keyval, box.get()));  // deletes a previous one
    box.release();
    return out;
}

}  // namespace shunt
