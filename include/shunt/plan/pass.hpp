// shunt/plan/pass.hpp: why a call goes to the MPI library instead of shunt: the reasons every planner and executor gives.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace shunt {

/// Why a data-moving call went to the library instead of shunt (counted per reason by the
/// preload library's report).
enum class pass_reason : std::uint8_t {
    none,  ///< not passed: shunt handles the call
    not_running,  ///< MPI not initialised, or already finalised
    bad_argument,  ///< an argument the library must judge itself (null, negative, MPI_BOTTOM)
    forced,  ///< SHUNT_PACK=library (SHUNT_COLL=library for collectives)
    rejected,  ///< the library rejected the communicator or datatype: its error is returned
    unknown_type,  ///< not committed through shunt's shims, unsupported, or MPI_DATATYPE_NULL
    too_large,  ///< count * size overflows 64 bits, or the packer refused the size
    would_truncate,  ///< the data does not fit: the library raises its own error
    planned,  ///< the cost model chose the library
    internal,  ///< shunt failed internally (logged once)
    unsupported,  ///< a collective shunt does not run: op, datatype, communicator or buffers
    measuring,  ///< the library's run while the planner measures both methods
    empty,  ///< a collective that moves no data, or a communicator of one rank; a
    ///< point-to-point call of zero elements or with MPI_PROC_NULL
    contiguous,  ///< point-to-point data that is one contiguous run in host memory: nothing to pack
    grouped,  ///< an NCCL call inside ncclGroupStart/ncclGroupEnd: NCCL keeps the group's semantics
    /// a nonblocking or persistent collective on a communicator shunt has not set up yet (no
    /// blocking collective ran on it: setting up would block)
    not_set_up,
};
inline constexpr std::array<const char*, 16> pass_reason_names = {
    "none",         "mpi-not-running", "bad-argument",   "forced-library",  "rejected-by-library",
    "unknown-type", "too-large",       "would-truncate", "planned-library", "internal-error",
    "unsupported",  "measuring",       "nothing-to-do",  "contiguous",      "in-a-group",
    "not-set-up"};
inline constexpr std::size_t pass_reason_count = pass_reason_names.size();
static_assert(static_cast<std::size_t>(pass_reason::not_set_up) + 1 == pass_reason_count,
              "every pass_reason needs a name");

}  // namespace shunt
