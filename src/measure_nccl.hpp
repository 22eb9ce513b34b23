// src/measure_nccl.hpp: shunt-measure's NCCL modes: --nccl-tuner (the tuner plugin's tables) and --nccl (the executor's).
#pragma once

#include <string>
#include <vector>

namespace shunt::tools {

/// What shunt-measure's command line says to the --nccl-tuner and --nccl modes.
struct nccl_measure_request {
    bool full = false;  ///< --full: more sizes, longer trials
    bool force = false;  ///< --force: measure again what the file has
    bool dry_run = false;  ///< --dry-run: list, measure nothing
    double budget_s = 0;  ///< --budget: start no new algorithm/protocol after this long (0: none)
    std::string output;  ///< --output FILE, else SHUNT_MODEL, else model-HOST-nccl.json
    std::string library = "libnccl.so.2";  ///< --nccl-library: the NCCL that runs the calls
    std::vector<std::string> only;  ///< --only: table name prefixes
    /// --nccl-host-memory (--nccl only): buffers in host memory and no CUDA device, for NCCL's CPU double in the
    /// tests; its figures are the double's, never a GPU's.
    bool host_memory = false;
};

/// Runs the mode on every rank of MPI_COMM_WORLD (between MPI_Init and MPI_Finalize, collective)
/// and returns the process exit status: 0 when measured (or nothing was missing), 77 when nothing
/// can be measured here (a rank without a CUDA device, no NCCL library, a single rank, or a build
/// without CUDA and NCCL's header), with a message from rank 0 saying why; 1 on errors.
int measure_nccl_main(const nccl_measure_request& request);

/// Runs the --nccl mode on every rank of MPI_COMM_WORLD (collective, one rank per GPU): the tables
/// nccl.<op>.<library|hierarchical>.r<R>n<N> of the NCCL executor, NCCL's collective against
/// shunt's schedule over node and rail communicators (nodes by SHUNT_TOPOLOGY's node level, else
/// the host name, as the executor groups them), into the NCCL model file. Returns 0 when measured
/// (or nothing was missing), 77 when nothing can be measured here (no NCCL, a single rank, a
/// single node or nodes of one rank, a rank without a CUDA device unless host_memory, a build
/// without NCCL's header), with a message from rank 0 saying why; 1 on errors (an unreadable
/// model file among them, which is left as it is).
int measure_nccl_methods_main(const nccl_measure_request& request);

}  // namespace shunt::tools
