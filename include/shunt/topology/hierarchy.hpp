// shunt/topology/hierarchy.hpp: the nested groups of a communicator's ranks, level by level (MPI-free, same on every rank).
#pragma once

#include <shunt/errors.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace shunt {

/// The ranks 0..size()-1 of one communicator put into nested groups: level 0 is the innermost
/// (e.g. package), level levels()-1 the outermost described one (e.g. switch group), and level
/// levels() the whole communicator (one group). Every group of level k lies inside one group of
/// level k+1. Groups of a level are numbered by their lowest rank; members are listed in rank
/// order, and a rank's position is its index among the members of its group. Value type;
/// identical on every rank of the communicator, so algorithms can plan without communicating.
class hierarchy {
public:
    /// A flat communicator of `size` ranks (no levels).
    explicit hierarchy(int size = 1) : hierarchy(size, {}, {}) {}

    /// Builds the groups from labels: labels[k][r] names the level-k group of rank r (any
    /// integers; equal labels, same group). Throws shunt::error when a level does not nest
    /// inside the next one, naming the two ranks that show it.
    hierarchy(int size, std::vector<std::vector<std::int64_t>> labels, std::vector<std::string> names) : size_(size) {
        if (size < 1) throw error("hierarchy: a communicator has at least one rank");
        names.resize(labels.size());
        for (std::size_t k = 0; k < labels.size(); ++k) {
            if (labels[k].size() != static_cast<std::size_t>(size))
                throw error("hierarchy: level " + std::to_string(k) + " labels " + std::to_string(labels[k].size()) +
                            " ranks, expected " + std::to_string(size));
            if (names[k].empty()) names[k] = "level" + std::to_string(k);
        }
        labels.emplace_back(static_cast<std::size_t>(size), 0);  // the whole communicator
        names.emplace_back("all");
        names_ = std::move(names);
        const std::size_t nl = labels.size();
        group_of_.assign(nl, std::vector<int>(static_cast<std::size_t>(size)));
        position_.assign(nl, std::vector<int>(static_cast<std::size_t>(size)));
        member_start_.assign(nl, {});
        members_.assign(nl, {});
        for (std::size_t k = 0; k < nl; ++k) {
            std::map<std::int64_t, int> dense;
            std::vector<int> counts;
            for (int r = 0; r < size; ++r) {
                auto [it, fresh] =
                    dense.try_emplace(labels[k][static_cast<std::size_t>(r)], static_cast<int>(counts.size()));
                if (fresh) counts.push_back(0);
                group_of_[k][static_cast<std::size_t>(r)] = it->second;
                position_[k][static_cast<std::size_t>(r)] = counts[static_cast<std::size_t>(it->second)]++;
            }
            auto& start = member_start_[k];
            start.assign(counts.size() + 1, 0);
            for (std::size_t g = 0; g < counts.size(); ++g) start[g + 1] = start[g] + counts[g];
            members_[k].resize(static_cast<std::size_t>(size));
            for (int r = 0; r < size; ++r) {
                auto g = static_cast<std::size_t>(group_of_[k][static_cast<std::size_t>(r)]);
                members_[k][static_cast<std::size_t>(start[g] + position_[k][static_cast<std::size_t>(r)])] = r;
            }
        }
        // Nesting: all members of a level-k group share one level-(k+1) group.
        for (std::size_t k = 0; k + 1 < nl; ++k) {
            for (int g = 0; g < groups(static_cast<int>(k)); ++g) {
                auto m = members(static_cast<int>(k), g);
                for (int r : m) {
                    if (group_of_[k + 1][static_cast<std::size_t>(r)] !=
                        group_of_[k + 1][static_cast<std::size_t>(m[0])])
                        throw error("topology level '" + names_[k] + "' does not nest in level '" + names_[k + 1] +
                                    "': ranks " + std::to_string(m[0]) + " and " + std::to_string(r) + " share a " +
                                    names_[k] + " group but not a " + names_[k + 1] + " group");
                }
            }
        }
        // Subgroups: the level-(k-1) groups inside each level-k group, by lowest rank.
        sub_start_.assign(nl, {});
        subs_.assign(nl, {});
        for (std::size_t k = 1; k < nl; ++k) {
            std::vector<std::vector<int>> per(static_cast<std::size_t>(groups(static_cast<int>(k))));
            for (int g = 0; g < groups(static_cast<int>(k - 1)); ++g) {
                int parent = group_of_[k][static_cast<std::size_t>(members(static_cast<int>(k - 1), g)[0])];
                per[static_cast<std::size_t>(parent)].push_back(g);
            }
            sub_start_[k].assign(per.size() + 1, 0);
            for (std::size_t g = 0; g < per.size(); ++g) {
                sub_start_[k][g + 1] = sub_start_[k][g] + static_cast<int>(per[g].size());
                subs_[k].insert(subs_[k].end(), per[g].begin(), per[g].end());
            }
        }
    }

    /// Number of ranks.
    int size() const { return size_; }
    /// Number of described levels; level levels() is the whole communicator.
    int levels() const { return static_cast<int>(names_.size()) - 1; }
    /// Name of level k ("all" for k == levels()).
    const std::string& name(int k) const { return names_[static_cast<std::size_t>(k)]; }
    /// Number of groups at level k.
    int groups(int k) const { return static_cast<int>(member_start_[static_cast<std::size_t>(k)].size()) - 1; }
    /// Group of rank r at level k.
    int group_of(int k, int r) const { return group_of_[static_cast<std::size_t>(k)][static_cast<std::size_t>(r)]; }
    /// Index of rank r among the members of its level-k group.
    int position(int k, int r) const { return position_[static_cast<std::size_t>(k)][static_cast<std::size_t>(r)]; }
    /// Members of group g at level k, in rank order.
    std::span<const int> members(int k, int g) const {
        const auto& s = member_start_[static_cast<std::size_t>(k)];
        return std::span<const int>(members_[static_cast<std::size_t>(k)])
            .subspan(static_cast<std::size_t>(s[static_cast<std::size_t>(g)]),
                     static_cast<std::size_t>(s[static_cast<std::size_t>(g) + 1] - s[static_cast<std::size_t>(g)]));
    }
    /// The level-(k-1) groups inside group g of level k (k >= 1), by lowest rank.
    std::span<const int> subgroups(int k, int g) const {
        const auto& s = sub_start_[static_cast<std::size_t>(k)];
        return std::span<const int>(subs_[static_cast<std::size_t>(k)])
            .subspan(static_cast<std::size_t>(s[static_cast<std::size_t>(g)]),
                     static_cast<std::size_t>(s[static_cast<std::size_t>(g) + 1] - s[static_cast<std::size_t>(g)]));
    }
    /// Index of rank r's level-(k-1) group among the subgroups of its level-k group (k >= 1).
    int subgroup_index(int k, int r) const {
        auto subs = subgroups(k, group_of(k, r));
        int mine = group_of(k - 1, r);
        return static_cast<int>(std::find(subs.begin(), subs.end(), mine) - subs.begin());
    }

    /// True when level k does nothing: every group is one rank, or every group is its whole parent.
    bool trivial(int k) const {
        if (groups(k) == size_) return true;
        return groups(k) == groups(k + 1);
    }
    /// True when every group of each level holds the same number of subgroups (ranks at level 0).
    bool regular() const {
        for (int k = 0; k <= levels(); ++k) {
            std::size_t n = k == 0 ? members(0, 0).size() : subgroups(k, 0).size();
            for (int g = 1; g < groups(k); ++g)
                if ((k == 0 ? members(0, g).size() : subgroups(k, g).size()) != n) return false;
        }
        return true;
    }

    /// The same groups without the trivial levels.
    hierarchy without_trivial_levels() const {
        return select([this](int k) { return !trivial(k); });
    }

    /// The mask of every described level (bit k for level k).
    std::uint32_t all_levels() const { return level_mask(levels()); }
    /// The mask of `n` levels (bits 0 to n-1).
    static std::uint32_t level_mask(std::size_t n) { return n >= 32 ? ~std::uint32_t{0} : (std::uint32_t{1} << n) - 1; }

    /// The same groups keeping only the levels whose bit is set in `mask` (bit k for level k):
    /// the groups of a dropped level merge into those of the next kept one, so a schedule over
    /// the result runs one level fewer; mask 0 leaves one flat group of everything.
    hierarchy keep_levels(std::uint32_t mask) const {
        return select([mask](int k) { return k < 32 && ((mask >> k) & 1u) != 0; });
    }

    /// The same groups keeping only the levels k for which keep(k) is true.
    template <class Pred>
    hierarchy select(Pred keep) const {
        std::vector<std::vector<std::int64_t>> labels;
        std::vector<std::string> names;
        for (int k = 0; k < levels(); ++k) {
            if (!keep(k)) continue;
            labels.emplace_back(group_of_[static_cast<std::size_t>(k)].begin(),
                                group_of_[static_cast<std::size_t>(k)].end());
            names.push_back(names_[static_cast<std::size_t>(k)]);
        }
        return hierarchy(size_, std::move(labels), std::move(names));
    }

    /// The representative of rank `owner` in group g of level k: the rank of g that, in the
    /// hierarchical schedules, holds owner's share of the data for that group. It is owner
    /// itself inside owner's own groups; elsewhere the member at the same position as the
    /// representative in the parent group, modulo the group size (so every rank works).
    int representative(int k, int g, int owner) const {
        if (k >= levels()) return owner;
        int parent = group_of(k + 1, members(k, g)[0]);
        int x = representative(k + 1, parent, owner);
        if (group_of(k, x) == g) return x;
        auto m = members(k, g);
        return m[static_cast<std::size_t>(position(k, x)) % m.size()];
    }

    /// One line per level: name, group count and sizes.
    std::string describe() const {
        std::string out;
        for (int k = 0; k < levels(); ++k) {
            out += names_[static_cast<std::size_t>(k)] + ": " + std::to_string(groups(k)) + " group" +
                   (groups(k) == 1 ? "" : "s") + " of ";
            bool equal = true;
            for (int g = 1; g < groups(k); ++g) equal = equal && members(k, g).size() == members(k, 0).size();
            if (equal) {
                out += std::to_string(members(k, 0).size());
            } else {
                for (int g = 0; g < groups(k) && g < 16; ++g) {
                    if (g) out += '+';
                    out += std::to_string(members(k, g).size());
                }
                if (groups(k) > 16) out += "+...";
            }
            out += equal && members(k, 0).size() == 1 ? " rank:" : " ranks:";
            for (int g = 0; g < groups(k) && g < 16; ++g) {
                out += " {";
                auto m = members(k, g);
                for (std::size_t i = 0; i < m.size() && i < 8; ++i) {
                    if (i) out += ',';
                    out += std::to_string(m[i]);
                }
                if (m.size() > 8) out += ",...";
                out += "}";
            }
            if (groups(k) > 16) out += " ...";
            out += '\n';
        }
        out += "all: " + std::to_string(size_) + " rank" + (size_ == 1 ? "" : "s") + '\n';
        return out;
    }

private:
    int size_ = 1;
    std::vector<std::string> names_;
    std::vector<std::vector<int>> group_of_, position_, member_start_, members_, sub_start_, subs_;
};

}  // namespace shunt
