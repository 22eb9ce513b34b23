// shunt/plan/nccl_tuner.hpp: what shunt's NCCL tuner plugin writes into NCCL's cost table: the measured
// times of NCCL's own algorithms and protocols, from the cost model's nccl.* tables, where they beat NCCL's pick.
#pragma once

#include <shunt/model/model.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>

namespace shunt {

/// The collectives NCCL asks its tuner about, in the order of NCCL's ncclFunc_t (NCCL 2.28,
/// src/include/nccl_common.h): the value NCCL passes is the enumerator's.
enum class nccl_coll : std::uint8_t { broadcast, reduce, allgather, reduce_scatter, allreduce };
inline constexpr std::array<std::string_view, 5> nccl_coll_names = {"broadcast", "reduce", "allgather",
                                                                    "reduce_scatter", "allreduce"};
inline constexpr std::size_t nccl_coll_count = nccl_coll_names.size();

/// NCCL's algorithms, in the order of its cost table's rows (NCCL_ALGO_* in NCCL 2.28,
/// src/include/plugin/nccl_tuner.h), with shunt's names for them and NCCL's own (what NCCL_ALGO takes).
enum class nccl_algo : std::uint8_t { tree, ring, collnet_direct, collnet_chain, nvls, nvls_tree, pat };
inline constexpr std::array<std::string_view, 7> nccl_algo_names = {
    "tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat"};
inline constexpr std::array<std::string_view, 7> nccl_algo_env_names = {
    "Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT"};
inline constexpr std::size_t nccl_algo_count = nccl_algo_names.size();

/// NCCL's protocols, in the order of its cost table's columns (NCCL_PROTO_*), shunt's and NCCL's names.
enum class nccl_proto : std::uint8_t { ll, ll128, simple };
inline constexpr std::array<std::string_view, 3> nccl_proto_names = {"ll", "ll128", "simple"};
inline constexpr std::array<std::string_view, 3> nccl_proto_env_names = {"LL", "LL128", "Simple"};
inline constexpr std::size_t nccl_proto_count = nccl_proto_names.size();

inline constexpr std::string_view to_string(nccl_coll c) { return nccl_coll_names[static_cast<std::size_t>(c)]; }
inline constexpr std::string_view to_string(nccl_algo a) { return nccl_algo_names[static_cast<std::size_t>(a)]; }
inline constexpr std::string_view to_string(nccl_proto p) { return nccl_proto_names[static_cast<std::size_t>(p)]; }

/// The collective named `name` (shunt's name, or "bcast" for broadcast), if any.
inline std::optional<nccl_coll> parse_nccl_coll(std::string_view name) {
    if (name == "bcast") return nccl_coll::broadcast;
    for (std::size_t i = 0; i < nccl_coll_count; ++i)
        if (name == nccl_coll_names[i]) return static_cast<nccl_coll>(i);
    return std::nullopt;
}

/// What NCCL tunes for: a communicator's ranks and nodes (the tuner's init arguments).
struct nccl_shape {
    std::int64_t ranks = 1;
    std::int64_t nodes = 1;
    /// "r8n2": how the model's nccl tables name the shape.
    std::string text() const {
        std::string out(1, 'r');
        out += std::to_string(ranks);
        out += 'n';
        return out += std::to_string(nodes);
    }
    auto operator<=>(const nccl_shape&) const = default;
};

namespace table_names {
/// nccl.<coll>.<algorithm>.<protocol>.r<ranks>n<nodes>, e.g. nccl.allreduce.ring.ll128.r8n2
/// (see model.hpp for what the table holds).
inline std::string nccl(nccl_coll c, nccl_algo a, nccl_proto p, const nccl_shape& s) {
    std::string name = "nccl.";
    name += to_string(c);
    name += '.';
    name += to_string(a);
    name += '.';
    name += to_string(p);
    name += '.';
    return name += s.text();
}
}  // namespace table_names

/// The shapes for which `m` holds nccl tables of collective `c` (for tools that list them).
inline std::set<nccl_shape> nccl_shapes_in(const cost_model& m, nccl_coll c) {
    std::set<nccl_shape> out;
    const std::string prefix = "nccl." + std::string(to_string(c)) + ".";
    for (const auto& [name, t] : m.tables()) {
        if (t.empty() || !name.starts_with(prefix)) continue;
        long long r = 0, n = 0;
        char tail = 0;
        const auto dot = name.rfind('.');
        if (std::sscanf(name.c_str() + dot + 1, "r%lldn%lld%c", &r, &n, &tail) == 2 && r > 0 && n > 0)
            out.insert({r, n});
    }
    return out;
}

/// The shape to explain for `c` when a tool is given `ranks` and `nodes` (0: not given): both
/// given, that shape; else the model's one shape for `c` that fits, if exactly one does.
inline std::optional<nccl_shape> nccl_shape_for(const cost_model& m, nccl_coll c, std::int64_t ranks,
                                                std::int64_t nodes) {
    if (ranks > 0 && nodes > 0) return nccl_shape{ranks, nodes};
    std::optional<nccl_shape> fit;
    for (const nccl_shape& s : nccl_shapes_in(m, c)) {
        if ((ranks > 0 && s.ranks != ranks) || (nodes > 0 && s.nodes != nodes)) continue;
        if (fit) return std::nullopt;
        fit = s;
    }
    return fit;
}

/// Why the tuner left NCCL's cost table as it was, or that it changed it.
enum class nccl_verdict : std::uint8_t {
    no_table,  ///< no measured table for a cell NCCL enables, at this size (or not a collective shunt knows)
    pipelined,  ///< NCCL aggregates several operations into this one (the tables time one alone)
    nccl_unmeasured,  ///< NCCL's own pick has no measured table: nothing to compare it with
    nccl_agrees,  ///< NCCL's own pick is the fastest measured cell
    within_margin,  ///< the fastest measured cell beats NCCL's pick by less than measured_win_margin
    changed,  ///< the cost table now holds the measured times, and NCCL runs the fastest
};
inline constexpr std::array<std::string_view, 6> nccl_verdict_names = {
    "no table", "pipelined", "NCCL's pick unmeasured", "NCCL agrees", "within margin", "changed"};
inline constexpr std::string_view to_string(nccl_verdict v) { return nccl_verdict_names[static_cast<std::size_t>(v)]; }

/// One cell of NCCL's cost table that NCCL enabled, as the tuner saw it.
struct nccl_cell {
    nccl_algo algo = nccl_algo::tree;
    nccl_proto proto = nccl_proto::ll;
    float nccl_us = 0;  ///< NCCL's own estimate, microseconds
    bool measured = false;  ///< a table of this cell covers the size
    float measured_us = 0;  ///< the table's prediction, microseconds (when measured)
};

/// One decision of the tuner: NCCL's pick from its own table, what runs after the tuner, and
/// every enabled cell with both times. Fixed-size: made on NCCL's enqueue path without allocating.
struct nccl_tuning {
    nccl_verdict verdict = nccl_verdict::no_table;
    int coll = -1;  ///< NCCL's ncclFunc_t value
    std::size_t bytes = 0;
    int nccl_algo_index = -1, nccl_proto_index = -1;  ///< NCCL's own pick (-1: none)
    int algo_index = -1, proto_index = -1;  ///< what NCCL runs after the tuner
    std::array<nccl_cell, nccl_algo_count * nccl_proto_count> cells{};
    std::size_t cell_count = 0;
    bool changed() const { return verdict == nccl_verdict::changed; }
};

/// The size class of a call for logging: floor(log2(bytes)), 0 for 0 bytes.
inline int nccl_size_class(std::size_t bytes) { return bytes ? static_cast<int>(std::bit_width(bytes)) - 1 : 0; }

/// "1 MiB", "48 KiB", "100 B": a byte count for messages (exact where it is a multiple of the unit).
inline std::string nccl_bytes_text(double bytes) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (u < 4 && bytes >= 1024 && std::fmod(bytes, 1024) == 0) bytes /= 1024, ++u;
    char text[48];
    std::snprintf(text, sizeof text, "%.0f %s", bytes, units[u]);
    return text;
}

/// The decisions of shunt's NCCL tuner plugin for one communicator shape.
///
/// NCCL (2.28) asks its tuner, for each collective it enqueues, with a cost table of
/// [algorithm][protocol] floats in microseconds: NCCL's estimate for the cells it enables,
/// -1 (ignore) for the others; it then runs the cell of least time (the first on a tie). The
/// tuner reads the model's tables nccl.<coll>.<algo>.<proto>.r<ranks>n<nodes> for the shape, and
///  - leaves the table untouched unless a table covers the size (inside its measured sizes,
///    no extrapolation) for NCCL's own pick and for at least one other enabled cell, NCCL
///    aggregates nothing into the call (one pipelined operation), and the fastest measured
///    cell beats NCCL's pick by measured_win_margin (3%: noise favours NCCL);
///  - then writes every measured cell's predicted time, and marks the enabled cells without a
///    measurement ignored, so that NCCL runs the fastest measured cell.
/// It never sets the channel count (NCCL's own rule for it stays) and never enables a cell NCCL
/// left out (NCCL_ALGO, NCCL_PROTO and what the hardware supports stay NCCL's).
///
/// The model must outlive the tuner (it keeps pointers to its tables). decide() and tune() are
/// const, allocate nothing and never throw: safe from any thread, on NCCL's enqueue path.
class nccl_tuner {
public:
    nccl_tuner(const cost_model& m, nccl_shape shape, double margin = measured_win_margin)
        : shape_(shape), margin_(margin) {
        for (std::size_t c = 0; c < nccl_coll_count; ++c)
            for (std::size_t a = 0; a < nccl_algo_count; ++a)
                for (std::size_t p = 0; p < nccl_proto_count; ++p) {
                    const time_table* t = m.find(table_names::nccl(static_cast<nccl_coll>(c), static_cast<nccl_algo>(a),
                                                                   static_cast<nccl_proto>(p), shape_));
                    tables_[c][a][p] = t;
                    count_ += t != nullptr;
                }
    }

    const nccl_shape& shape() const { return shape_; }
    /// Measured tables found for this shape (0: the tuner never changes anything).
    std::size_t tables() const { return count_; }
    /// The measured table of a cell, or nullptr.
    const time_table* table(nccl_coll c, nccl_algo a, nccl_proto p) const {
        return tables_[static_cast<std::size_t>(c)][static_cast<std::size_t>(a)][static_cast<std::size_t>(p)];
    }

    /// The decision for NCCL's call on `coll` (ncclFunc_t) of `bytes` with `pipe_ops` operations
    /// aggregated, given NCCL's cost table `cost` (row-major, `num_algo` x `num_proto`, as NCCL
    /// lays it out), without changing it.
    nccl_tuning decide(int coll, std::size_t bytes, int pipe_ops, const float* cost, int num_algo,
                       int num_proto) const noexcept {
        nccl_tuning d;
        d.coll = coll;
        d.bytes = bytes;
        if (cost == nullptr || num_algo <= 0 || num_proto <= 0) return d;
        // NCCL's own pick, as NCCL 2.28's topoGetAlgoInfo makes it from the table.
        float least = 3600000000.0f;
        for (int a = 0; a < num_algo; ++a)
            for (int p = 0; p < num_proto; ++p) {
                const float t = cost[a * num_proto + p];
                if (t >= 0 && t < least) least = t, d.nccl_algo_index = a, d.nccl_proto_index = p;
            }
        d.algo_index = d.nccl_algo_index, d.proto_index = d.nccl_proto_index;
        if (coll < 0 || static_cast<std::size_t>(coll) >= nccl_coll_count || d.nccl_algo_index < 0) return d;
        const double size = static_cast<double>(bytes);
        const nccl_cell* pick = nullptr;
        const nccl_cell* fastest = nullptr;
        std::size_t measured = 0;
        for (std::size_t a = 0; a < std::min<std::size_t>(nccl_algo_count, static_cast<std::size_t>(num_algo)); ++a)
            for (std::size_t p = 0; p < std::min<std::size_t>(nccl_proto_count, static_cast<std::size_t>(num_proto));
                 ++p) {
                const float t = cost[a * static_cast<std::size_t>(num_proto) + p];
                if (!(t >= 0)) continue;
                nccl_cell& cell = d.cells[d.cell_count++];
                cell.algo = static_cast<nccl_algo>(a);
                cell.proto = static_cast<nccl_proto>(p);
                cell.nccl_us = t;
                const time_table* tbl = tables_[static_cast<std::size_t>(coll)][a][p];
                if (tbl == nullptr || !tbl->covers(size)) continue;
                // Compared as NCCL will compare them: as floats, the first of equal times winning.
                const double us = tbl->predict(size) * 1e6;
                if (!std::isfinite(us) || !(us >= 0) || us >= 3600000000.0) continue;
                cell.measured = true;
                cell.measured_us = static_cast<float>(us);
                ++measured;
                if (fastest == nullptr || cell.measured_us < fastest->measured_us) fastest = &cell;
                if (static_cast<int>(a) == d.nccl_algo_index && static_cast<int>(p) == d.nccl_proto_index) pick = &cell;
            }
        if (measured == 0) return d;  // no_table
        if (pipe_ops > 1) return d.verdict = nccl_verdict::pipelined, d;
        if (pick == nullptr) return d.verdict = nccl_verdict::nccl_unmeasured, d;
        if (fastest == pick) return d.verdict = nccl_verdict::nccl_agrees, d;
        if (!(fastest->measured_us < pick->measured_us * (1 - margin_)))
            return d.verdict = nccl_verdict::within_margin, d;
        d.verdict = nccl_verdict::changed;
        d.algo_index = static_cast<int>(fastest->algo);
        d.proto_index = static_cast<int>(fastest->proto);
        return d;
    }

    /// Writes a changed decision into NCCL's cost table (the layout decide() read): the measured
    /// cells' times, the other enabled cells ignored (-1). Nothing for any other verdict.
    static void apply(const nccl_tuning& d, float* cost, int num_algo, int num_proto) noexcept {
        if (!d.changed() || cost == nullptr) return;
        for (int a = 0; a < num_algo; ++a)
            for (int p = 0; p < num_proto; ++p) {
                float& t = cost[a * num_proto + p];
                if (t >= 0) t = -1.0f;  // NCCL's NCCL_ALGO_PROTO_IGNORE; measured cells are written below
            }
        for (std::size_t i = 0; i < d.cell_count; ++i) {
            const nccl_cell& c = d.cells[i];
            if (c.measured)
                cost[static_cast<std::size_t>(c.algo) * static_cast<std::size_t>(num_proto) +
                     static_cast<std::size_t>(c.proto)] = c.measured_us;
        }
    }

    /// decide(), then apply(): what the plugin does with NCCL's table.
    nccl_tuning tune(int coll, std::size_t bytes, int pipe_ops, float* cost, int num_algo,
                     int num_proto) const noexcept {
        const nccl_tuning d = decide(coll, bytes, pipe_ops, cost, num_algo, num_proto);
        apply(d, cost, num_algo, num_proto);
        return d;
    }

private:
    nccl_shape shape_;
    double margin_;
    std::array<std::array<std::array<const time_table*, nccl_proto_count>, nccl_algo_count>, nccl_coll_count> tables_{};
    std::size_t count_ = 0;
};

/// "ring/ll128", or "none" for an index outside NCCL's known cells.
inline std::string nccl_cell_text(int algo, int proto) {
    if (algo < 0 || proto < 0 || static_cast<std::size_t>(algo) >= nccl_algo_count ||
        static_cast<std::size_t>(proto) >= nccl_proto_count)
        return algo < 0 ? "none" : "algorithm " + std::to_string(algo) + "/protocol " + std::to_string(proto);
    return std::string(nccl_algo_names[static_cast<std::size_t>(algo)]) + "/" +
           std::string(nccl_proto_names[static_cast<std::size_t>(proto)]);
}

/// One line explaining a decision (SHUNT_LOG=decide): the call, the verdict, and every enabled
/// cell with its measured and NCCL-estimated times in microseconds.
inline std::string nccl_tuning_text(const nccl_tuning& d, const nccl_shape& s) {
    std::string out = "nccl ";
    out += d.coll >= 0 && static_cast<std::size_t>(d.coll) < nccl_coll_count
               ? std::string(nccl_coll_names[static_cast<std::size_t>(d.coll)])
               : "function " + std::to_string(d.coll);
    out += " of " + std::to_string(d.bytes) + " B (class " +
           nccl_bytes_text(std::ldexp(1.0, nccl_size_class(d.bytes))) + "), " + s.text() + ": ";
    const std::string nccl_pick = nccl_cell_text(d.nccl_algo_index, d.nccl_proto_index);
    switch (d.verdict) {
        case nccl_verdict::changed:
            out += nccl_cell_text(d.algo_index, d.proto_index) + " instead of NCCL's " + nccl_pick;
            break;
        case nccl_verdict::nccl_agrees: out += "NCCL's " + nccl_pick + " kept, the fastest measured"; break;
        case nccl_verdict::within_margin:
            out += "NCCL's " + nccl_pick + " kept, within " + std::to_string(std::lround(measured_win_margin * 100)) +
                   "% of the fastest measured";
            break;
        default: out += "NCCL's " + nccl_pick + " kept (" + std::string(to_string(d.verdict)) + ")"; break;
    }
    out += "; us measured/NCCL's:";
    char item[96];
    for (std::size_t i = 0; i < d.cell_count; ++i) {
        const nccl_cell& c = d.cells[i];
        const std::string name = nccl_cell_text(static_cast<int>(c.algo), static_cast<int>(c.proto));
        if (c.measured)
            std::snprintf(item, sizeof item, " %s %.3g/%.3g", name.c_str(), c.measured_us, c.nccl_us);
        else
            std::snprintf(item, sizeof item, " %s -/%.3g", name.c_str(), c.nccl_us);
        out += item;
    }
    return out;
}

/// What the plugin compares for a call of `c` of `bytes` bytes (shunt-info --explain nccl-tuner):
/// each cell with a table, its measured time or that the size is outside it, the fastest, and
/// the rule that decides against NCCL's own pick (which only NCCL knows).
inline std::string nccl_tuner_explain(const nccl_tuner& tuner, nccl_coll c, std::size_t bytes) {
    std::string out, fastest;
    double least = 0;
    std::size_t untabled = 0;
    char line[160];
    const double size = static_cast<double>(bytes);
    for (std::size_t a = 0; a < nccl_algo_count; ++a)
        for (std::size_t p = 0; p < nccl_proto_count; ++p) {
            const std::string cell = nccl_cell_text(static_cast<int>(a), static_cast<int>(p));
            const time_table* t = tuner.table(c, static_cast<nccl_algo>(a), static_cast<nccl_proto>(p));
            if (t == nullptr) {
                ++untabled;
                continue;
            }
            if (!t->covers(size)) {
                std::snprintf(line, sizeof line, "  %-20s outside its table's %.0f .. %.0f bytes\n", cell.c_str(),
                              t->points().front().size, t->points().back().size);
            } else {
                const double us = t->predict(size) * 1e6;
                std::snprintf(line, sizeof line, "  %-20s measured %12.3f us\n", cell.c_str(), us);
                if (fastest.empty() || us < least) fastest = cell, least = us;
            }
            out += line;
        }
    std::snprintf(line, sizeof line, "  no table for the other %zu of NCCL's %zu algorithm/protocol pairs\n", untabled,
                  nccl_algo_count * nccl_proto_count);
    out += line;
    if (fastest.empty()) return out + "  nothing measured at this size: the plugin leaves NCCL's choice alone\n";
    std::snprintf(line, sizeof line, "%.0f%%", measured_win_margin * 100);
    return out + "  fastest measured: " + fastest + ". Where NCCL's own pick is measured here and over " + line +
           " slower,\n  the plugin writes these times and ignores the cells without one, so NCCL runs " + fastest +
           ";\n  else it leaves NCCL's choice alone\n";
}

}  // namespace shunt
