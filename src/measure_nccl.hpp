// src/measure_nccl.hpp: shunt-measure --nccl-tuner, the mode that measures the NCCL tuner plugin's nccl.* tables.
#pragma once

#include <string>
#include <vector>

namespace shunt::tools {

/// What shunt-measure's command line says to the --nccl-tuner mode.
struct nccl_measure_request {
    bool full = false;  ///< --full: more sizes, longer trials
    bool force = false;  ///< --force: measure again what the file has
    bool dry_run = false;  ///< --dry-run: list, measure nothing
    double budget_s = 0;  ///< --budget: start no new algorithm/protocol after this long (0: none)
    std::string output;  ///< --output FILE, else SHUNT_MODEL, else model-HOST-nccl.json
    std::string library = "libnccl.so.2";  ///< --nccl-library: the NCCL that runs the calls
    std::vector<std::string> only;  ///< --only: table name prefixes
};

/// Runs the mode on every rank of MPI_COMM_WORLD (between MPI_Init and MPI_Finalize, collective)
/// and returns the process exit status: 0 when measured (or nothing was missing), 77 when nothing
/// can be measured here (a rank without a CUDA device, no NCCL library, a single rank, or a build
/// without CUDA and NCCL's header), with a message from rank 0 saying why; 1 on errors.
int measure_nccl_main(const nccl_measure_request& request);

}  // namespace shunt::tools
