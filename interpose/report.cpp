// interpose/report.cpp: SHUNT_REPORT at MPI_Finalize: one line per rank, or one table summed over ranks by rank 0.
#include "runtime.hpp"

#include <shunt/errors.hpp>
#include <shunt/log.hpp>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

namespace shunt::detail {
namespace {

using flat = counter_values;

std::uint64_t calls(const flat& f, shim s) { return f[counter_index::calls(s)]; }
std::uint64_t handled(const flat& f, direction d) { return f[counter_index::handled(d)]; }
std::uint64_t bytes(const flat& f, direction d) { return f[counter_index::bytes(d)]; }
std::uint64_t passed(const flat& f, direction d, std::size_t why) {
    return f[counter_index::passed(d, static_cast<pass_reason>(why))];
}

std::string format(const char* fmt, auto... args) {
    char buf[256];
    const int n = std::snprintf(buf, sizeof buf, fmt, args...);
    return std::string(buf, n < 0 ? 0 : std::min<std::size_t>(static_cast<std::size_t>(n), sizeof buf - 1));
}

/// "unknown-type 2, would-truncate 1", or "none".
std::string reasons(const flat& f, direction d) {
    std::string out;
    for (std::size_t why = 1; why < pass_reason_count; ++why)
        if (const std::uint64_t n = passed(f, d, why))
            out += format(out.empty() ? "%s %" PRIu64 : ", %s %" PRIu64, pass_reason_names[why], n);
    return out.empty() ? "none" : out;
}

std::string data_call(const flat& f, shim s, direction d) {
    return format("%s %" PRIu64 " (shunt %" PRIu64 ", %" PRIu64 " bytes; library %" PRIu64 ")",
                  shim_names[static_cast<std::size_t>(s)], calls(f, s), handled(f, d), bytes(f, d),
                  calls(f, s) - handled(f, d));
}

bool is_collective(std::size_t s) {
    return s >= static_cast<std::size_t>(first_collective) && s <= static_cast<std::size_t>(last_collective);
}
bool is_p2p(std::size_t s) {
    return s >= static_cast<std::size_t>(first_p2p) && s <= static_cast<std::size_t>(last_p2p);
}
/// Shims listed only when called: collectives and point-to-point calls, with shunt's share.
bool is_optional(std::size_t s) { return is_collective(s) || is_p2p(s); }
std::uint64_t coll_handled(const flat& f, std::size_t s) {
    return f[counter_index::shim_handled(static_cast<shim>(s))];
}

bool p2p_called(const flat& f) {
    for (std::size_t s = static_cast<std::size_t>(first_p2p); s < static_cast<std::size_t>(first_completion); ++s)
        if (calls(f, static_cast<shim>(s)) > 0) return true;
    return false;
}

std::string rank_line(const flat& f) {
    std::string out = data_call(f, shim::pack, direction::pack) + ", " + data_call(f, shim::unpack, direction::unpack);
    for (std::size_t s = static_cast<std::size_t>(shim::pack_size); s < shim_count; ++s) {
        if (is_optional(s) && calls(f, static_cast<shim>(s)) == 0) continue;
        out += format(", %s %" PRIu64, shim_names[s], calls(f, static_cast<shim>(s)));
        if (is_optional(s)) out += format(" (shunt %" PRIu64 ")", coll_handled(f, s));
    }
    out += "; MPI_Pack to the library: " + reasons(f, direction::pack);
    out += "; MPI_Unpack to the library: " + reasons(f, direction::unpack);
    out += format("; collectives by shunt: %" PRIu64 " bytes; to the library: ", bytes(f, direction::collective)) +
           reasons(f, direction::collective);
    if (p2p_called(f))
        out += format("; point-to-point by shunt: %" PRIu64 " sends (%" PRIu64 " bytes), %" PRIu64 " receives (%" PRIu64
                      " bytes); sends to the library: ",
                      handled(f, direction::send), bytes(f, direction::send), handled(f, direction::recv),
                      bytes(f, direction::recv)) +
               reasons(f, direction::send) + "; receives to the library: " + reasons(f, direction::recv);
    return out;
}

std::string summary_table(const flat& f, int ranks) {
    std::string out = format("summary of %d ranks\n", ranks);
    out += format("  %-26s %12s %12s %12s %16s\n", "call", "calls", "shunt", "library", "shunt bytes");
    for (direction d : {direction::pack, direction::unpack}) {
        const shim s = d == direction::pack ? shim::pack : shim::unpack;
        out += format("  %-26s %12" PRIu64 " %12" PRIu64 " %12" PRIu64 " %16" PRIu64 "\n",
                      shim_names[static_cast<std::size_t>(s)], calls(f, s), handled(f, d), calls(f, s) - handled(f, d),
                      bytes(f, d));
    }
    for (std::size_t s = static_cast<std::size_t>(shim::pack_size); s < shim_count; ++s) {
        const std::uint64_t n = calls(f, static_cast<shim>(s));
        if (!is_optional(s))
            out += format("  %-26s %12" PRIu64 " %12s %12s %16s\n", shim_names[s], n, "-", "-", "-");
        else if (n > 0)
            out += format("  %-26s %12" PRIu64 " %12" PRIu64 " %12" PRIu64 " %16s\n", shim_names[s], n,
                          coll_handled(f, s), n - coll_handled(f, s), "-");
    }
    out += format("  collectives: %" PRIu64 " bytes by shunt\n", bytes(f, direction::collective));
    out += "  MPI_Pack to the library: " + reasons(f, direction::pack) + "\n";
    out += "  MPI_Unpack to the library: " + reasons(f, direction::unpack) + "\n";
    out += "  collectives to the library: " + reasons(f, direction::collective);
    if (p2p_called(f)) {
        out += format("\n  point-to-point: %" PRIu64 " sends (%" PRIu64 " bytes) and %" PRIu64 " receives (%" PRIu64
                      " bytes) by shunt",
                      handled(f, direction::send), bytes(f, direction::send), handled(f, direction::recv),
                      bytes(f, direction::recv));
        out += "\n  sends to the library: " + reasons(f, direction::send);
        out += "\n  receives to the library: " + reasons(f, direction::recv);
    }
    return out;
}

}  // namespace

/// MPI_Alltoallw and MPI_Neighbor_alltoallw: one decision per communicator; communicators of
/// the same size that decided alike (and measured, or not, alike) are one line with summed calls.
std::string runtime::fused_decisions_text(bool one_line) const {
    struct line {
        shim op;
        int ranks;
        bool to_shunt, forced;
        std::string why;
        double best[2];  ///< the best measured times of the communicators on this line
        std::uint64_t taken, comms;
    };
    std::vector<line> lines;
    {
        const std::lock_guard lock(records_mutex_);
        for (const auto& r : w_records_) {
            const bool measured = r->measured[0] >= 0;
            const std::string why = measured ? "measured" : r->why;
            const std::uint64_t taken = r->taken.load(std::memory_order_relaxed);
            bool merged = false;
            for (line& l : lines)
                if (l.op == r->op && l.ranks == r->ranks && l.to_shunt == r->to_shunt && l.forced == r->forced &&
                    l.why == why) {
                    l.taken += taken;
                    ++l.comms;
                    for (int k = 0; k < 2; ++k) l.best[k] = std::min(l.best[k], r->measured[k]);
                    merged = true;
                    break;
                }
            if (!merged)
                lines.push_back(
                    {r->op, r->ranks, r->to_shunt, r->forced, why, {r->measured[0], r->measured[1]}, taken, 1});
        }
    }
    if (lines.empty()) return {};
    std::sort(lines.begin(), lines.end(), [](const line& a, const line& b) { return a.taken > b.taken; });
    std::string out =
        format(one_line ? "; fused collective decisions (%zu)"
                        : "\n  MPI_Alltoallw/MPI_Neighbor_alltoallw decisions (%zu distinct, most taken first)",
               lines.size());
    for (const line& l : lines) {
        const char* op = shim_names[static_cast<std::size_t>(l.op)];
        const char* method = l.to_shunt ? "shunt's fused packing" : "the library";
        if (one_line) {
            out += format("; %s %d ranks -> %s x %" PRIu64, op, l.ranks, l.to_shunt ? "shunt" : "library", l.taken);
            continue;
        }
        const std::string why =
            l.why == "measured" ? format("library measured %.3g us, shunt %.3g us", l.best[0] * 1e6, l.best[1] * 1e6)
                                : l.why;
        out += format("\n    %s on %" PRIu64 " communicator%s of %d ranks -> %s%s x %" PRIu64 " (%s)", op, l.comms,
                      l.comms == 1 ? "" : "s", l.ranks, method, l.forced ? " (forced)" : "", l.taken, why.c_str());
    }
    return out;
}

std::string runtime::decisions_text(bool one_line) const {
    std::vector<plan_decision> all;
    planner_.for_each([&](const plan_decision& d) { all.push_back(d); });
    std::sort(all.begin(), all.end(), [](const plan_decision& a, const plan_decision& b) { return a.taken > b.taken; });
    std::string out = format("decisions (%zu distinct, most taken first; model: %s)", all.size(),
                             model_->tables().empty() ? "built-in" : "measured");
    const std::size_t shown = std::min<std::size_t>(all.size(), 8);
    for (std::size_t i = 0; i < shown; ++i) {
        const plan_decision& d = all[i];
        std::string alts = d.measured ? "measured " : d.measuring ? "measuring; predicted " : "predicted ";
        for (std::uint8_t k = 0; k < d.count; ++k)
            alts +=
                format("%s%s %.3g us", k ? ", " : "", std::string(to_string(d.alternatives[k].method)).c_str(),
                       (d.measured && k < d.measured_s.size() ? d.measured_s[k] : d.alternatives[k].predicted_s) * 1e6);
        out += format(
            one_line ? "; %s %" PRId64 : "\n    %s %" PRId64 " bytes in %" PRId64 " blocks -> %s%s x %" PRIu64 " (%s)",
            std::string(to_string(d.op)).c_str(), d.bytes, d.blocks, std::string(to_string(d.method())).c_str(),
            d.forced ? " (forced)" : "", d.taken, alts.c_str());
    }
    if (all.size() > shown) out += format(one_line ? "; ... %zu more" : "\n    ... %zu more", all.size() - shown);
    if (const std::uint64_t n = planner_.uncached(); n > 0)
        out += format(one_line ? "; %" PRIu64 " calls of layouts past the planner's %zu cached, decided afresh"
                               : "\n    %" PRIu64 " calls of layouts past the planner's %zu cached, decided afresh",
                      n, planner::max_keys);
    // Communicators of the same shape that decided alike are one line.
    std::vector<std::pair<coll_shape, coll_decision>> colls;
    {
        std::lock_guard lock(records_mutex_);
        for (const auto& t : tuners_)
            t->for_each([&](const coll_decision& d) {
                const coll_shape& shape = t->shape();
                for (auto& [s, e] : colls)
                    if (s.signature() == shape.signature() && e.op == d.op && e.size_class == d.size_class &&
                        e.method == d.method && e.levels == d.levels) {
                        e.taken += d.taken;
                        return;
                    }
                colls.emplace_back(shape, d);
            });
    }
    out += fused_decisions_text(one_line);
    if (colls.empty()) return out;
    std::sort(colls.begin(), colls.end(), [](const auto& a, const auto& b) { return a.second.taken > b.second.taken; });
    out +=
        format(one_line ? "; collective decisions (%zu)" : "\n  collective decisions (%zu distinct, most taken first)",
               colls.size());
    const std::size_t shown_colls = std::min<std::size_t>(colls.size(), 16);
    for (std::size_t i = 0; i < shown_colls; ++i) {
        const auto& [shape, d] = colls[i];
        std::string how;
        for (std::size_t m = 0; m < coll_method_count; ++m) {
            const bool measured = d.measured[m] == d.measured[m];
            how += format("%s%s %s %.3g us", m ? ", " : "", coll_method_names[m].data(),
                          measured ? "measured" : "predicted", (measured ? d.measured[m] : d.predicted[m]) * 1e6);
        }
        std::string method(coll_method_names[static_cast<std::size_t>(d.method)]);
        if (d.method == coll_method::hierarchical && !shape.level_names.empty())
            method += " " + shape.schedule_text(d.levels);
        if (one_line)
            out += format("; %s %" PRId64 " B -> %s x %" PRIu64, std::string(to_string(d.op)).c_str(), d.bytes,
                          method.c_str(), d.taken);
        else
            out += format("\n    %s of %" PRId64 " bytes on %s -> %s%s%s x %" PRIu64 " (%s)",
                          std::string(to_string(d.op)).c_str(), d.bytes, shape.signature().c_str(), method.c_str(),
                          d.forced ? " (forced)" : "",
                          d.live            ? ""
                          : d.latency_bound ? " (floating-point, latency-bound: kept)"
                                            : " (floating-point: from the model)",
                          d.taken, how.c_str());
    }
    if (colls.size() > shown_colls)
        out += format(one_line ? "; ... %zu more" : "\n    ... %zu more", colls.size() - shown_colls);
    return out;
}

void runtime::report() noexcept {
    if (cfg_.report == report_mode::off) return;
    try {
        const flat mine = stats_.totals();
        const std::string compression = compress_.report_text();
        if (cfg_.report == report_mode::rank) {
            log_write(log_level::info, log_category::report, "%s; %s%s%s", rank_line(mine).c_str(),
                      decisions_text(true).c_str(), compression.empty() ? "" : "; ", compression.c_str());
            return;
        }
        // A private communicator keeps the reduction apart from any traffic of the application.
        MPI_Comm comm = MPI_COMM_NULL;
        SHUNT_CHECK_MPI(PMPI_Comm_dup(MPI_COMM_WORLD, &comm));
        flat total{};
        int rank = 0, size = 0;
        const int rc =
            PMPI_Reduce(mine.data(), total.data(), static_cast<int>(mine.size()), MPI_UINT64_T, MPI_SUM, 0, comm);
        PMPI_Comm_rank(comm, &rank);
        PMPI_Comm_size(comm, &size);
        PMPI_Comm_free(&comm);
        if (rc != MPI_SUCCESS) throw_mpi(rc, "PMPI_Reduce", __FILE__, __LINE__);
        if (rank == 0) {
            log_write(log_level::info, log_category::report, "%s", summary_table(total, size).c_str());
            log_write(log_level::info, log_category::report, "rank 0 %s", decisions_text(false).c_str());
            if (!compression.empty())
                log_write(log_level::info, log_category::report, "rank 0 %s", compression.c_str());
        }
    } catch (const std::exception& e) {
        internal_failure(shim::finalize, e.what());
    } catch (...) {
        internal_failure(shim::finalize, "unknown exception");
    }
}

}  // namespace shunt::detail
