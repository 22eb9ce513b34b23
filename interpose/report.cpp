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

std::string rank_line(const flat& f) {
    std::string out = data_call(f, shim::pack, direction::pack) + ", " + data_call(f, shim::unpack, direction::unpack);
    for (std::size_t s = static_cast<std::size_t>(shim::pack_size); s < shim_count; ++s)
        out += format(", %s %" PRIu64, shim_names[s], calls(f, static_cast<shim>(s)));
    out += "; MPI_Pack to the library: " + reasons(f, direction::pack);
    out += "; MPI_Unpack to the library: " + reasons(f, direction::unpack);
    return out;
}

std::string summary_table(const flat& f, int ranks) {
    std::string out = format("summary of %d ranks\n", ranks);
    out += format("  %-16s %12s %12s %12s %16s\n", "call", "calls", "shunt", "library", "shunt bytes");
    for (direction d : {direction::pack, direction::unpack}) {
        const shim s = d == direction::pack ? shim::pack : shim::unpack;
        out += format("  %-16s %12" PRIu64 " %12" PRIu64 " %12" PRIu64 " %16" PRIu64 "\n", shim_names[static_cast<std::size_t>(s)],
                      calls(f, s), handled(f, d), calls(f, s) - handled(f, d), bytes(f, d));
    }
    for (std::size_t s = static_cast<std::size_t>(shim::pack_size); s < shim_count; ++s)
        out += format("  %-16s %12" PRIu64 " %12s %12s %16s\n", shim_names[s], calls(f, static_cast<shim>(s)), "-", "-", "-");
    out += "  MPI_Pack to the library: " + reasons(f, direction::pack) + "\n";
    out += "  MPI_Unpack to the library: " + reasons(f, direction::unpack);
    return out;
}

}  // namespace

std::string runtime::decisions_text(bool one_line) const {
    std::vector<plan_decision> all;
    planner_.for_each([&](const plan_decision& d) { all.push_back(d); });
    std::sort(all.begin(), all.end(), [](const plan_decision& a, const plan_decision& b) { return a.taken > b.taken; });
    std::string out = format("decisions (%zu distinct, most taken first; model: %s)", all.size(),
                             model_->tables().empty() ? "built-in" : "measured");
    const std::size_t shown = std::min<std::size_t>(all.size(), 8);
    for (std::size_t i = 0; i < shown; ++i) {
        const plan_decision& d = all[i];
        std::string alts;
        for (std::uint8_t k = 0; k < d.count; ++k)
            alts += format("%s%.*s %.3g us", k ? ", " : "", static_cast<int>(d.alternatives[k].method.size()),
                           d.alternatives[k].method.data(), d.alternatives[k].predicted_s * 1e6);
        out += format(one_line ? "; %s %" PRId64 : "\n    %s %" PRId64 " bytes in %" PRId64 " blocks -> %.*s%s x %" PRIu64 " (%s)",
                      std::string(to_string(d.op)).c_str(), d.bytes, d.blocks, static_cast<int>(d.method().size()),
                      d.method().data(), d.forced ? " (forced)" : "", d.taken, alts.c_str());
    }
    if (all.size() > shown) out += format(one_line ? "; ... %zu more" : "\n    ... %zu more", all.size() - shown);
    return out;
}

void runtime::report() noexcept {
    if (cfg_.report == report_mode::off) return;
    try {
        const flat mine = stats_.totals();
        if (cfg_.report == report_mode::rank) {
            log_write(log_level::info, log_category::report, "%s; %s", rank_line(mine).c_str(),
                      decisions_text(true).c_str());
            return;
        }
        // A private communicator keeps the reduction apart from any traffic of the application.
        MPI_Comm comm = MPI_COMM_NULL;
        SHUNT_CHECK_MPI(PMPI_Comm_dup(MPI_COMM_WORLD, &comm));
        flat total{};
        int rank = 0, size = 0;
        const int rc = PMPI_Reduce(mine.data(), total.data(), static_cast<int>(mine.size()), MPI_UINT64_T, MPI_SUM, 0, comm);
        PMPI_Comm_rank(comm, &rank);
        PMPI_Comm_size(comm, &size);
        PMPI_Comm_free(&comm);
        if (rc != MPI_SUCCESS) throw_mpi(rc, "PMPI_Reduce", __FILE__, __LINE__);
        if (rank == 0) {
            log_write(log_level::info, log_category::report, "%s", summary_table(total, size).c_str());
            log_write(log_level::info, log_category::report, "rank 0 %s", decisions_text(false).c_str());
        }
    } catch (const std::exception& e) {
        internal_failure(shim::finalize, e.what());
    } catch (...) {
        internal_failure(shim::finalize, "unknown exception");
    }
}

}  // namespace shunt::detail
