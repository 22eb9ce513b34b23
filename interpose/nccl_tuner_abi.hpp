// interpose/nccl_tuner_abi.hpp: NCCL's tuner plugin interface, version 5 (what NCCL 2.28.9 looks up first, as
// ncclTunerPlugin_v5, then v4, v3, v2), in shunt's names, so that the plugin builds without NCCL's plugin headers.
// Written from NCCL v2.28.9-1's src/include/plugin/tuner/tuner_v5.h, src/include/plugin/nccl_tuner.h and
// src/include/nccl_common.h; the static_asserts pin the layout those headers give.
#pragma once

#include <cstddef>
#include <cstdint>

namespace shunt::detail::nccl_abi {

/// ncclResult_t (an enum: int-sized): the plugin only ever returns success.
using result_t = int;
inline constexpr result_t success = 0;

/// ncclDebugLogLevel's INFO and ncclDebugLogSubSys's INIT and TUNING bits.
inline constexpr int log_info = 3;
inline constexpr unsigned long log_init = 0x1, log_tuning = 0x40;

/// ncclDebugLogger_t: NCCL's logger, printing only what NCCL_DEBUG and NCCL_DEBUG_SUBSYS select.
using logger_t = void (*)(int level, unsigned long flags, const char* file, int line, const char* format, ...);

inline constexpr int num_algorithms_v5 = 7;  // NCCL_NUM_ALGORITHMS_V5
inline constexpr int num_protocols_v5 = 3;  // NCCL_NUM_PROTOCOLS_V5
inline constexpr int num_hw_links_v5 = 3, num_compcaps_v5 = 4, num_tuning_scales_v5 = 3;

/// ncclNvlDomainInfo_v5_t.
struct nvl_domain_info_v5 {
    int domains;
    int min_ranks_per_domain;
    int max_ranks_per_domain;
};

/// ncclTunerConstants_v5_t: NCCL's latency and bandwidth constants, which a tuner may change at init.
struct tuner_constants_v5 {
    double base_latencies[num_algorithms_v5][num_protocols_v5];
    double hw_latencies[num_hw_links_v5][num_algorithms_v5][num_protocols_v5];
    double ll_max_bws[num_compcaps_v5][num_tuning_scales_v5];
    double per_channel_max_ring_ll128_bws[num_compcaps_v5][num_tuning_scales_v5];
    double per_channel_max_tree_ll128_bws[num_compcaps_v5][num_tuning_scales_v5];
    double per_channel_max_tree_bws[num_compcaps_v5][num_tuning_scales_v5];
    double per_channel_max_nvls_tree_bws[num_compcaps_v5][num_tuning_scales_v5];
};

/// ncclTuner_v5_t. NCCL calls init once per communicator (after its own tuning constants are set; an
/// error fails the communicator's creation), get_coll_info for each collective it enqueues on one
/// (an error fails the call), finalize when the communicator goes. The cost table NCCL passes as
/// `float**` is one row-major block of num_algo x num_proto floats (microseconds, -1: ignored).
struct tuner_v5 {
    const char* name;
    result_t (*init)(void** context, std::uint64_t comm_id, std::size_t n_ranks, std::size_t n_nodes, logger_t log,
                     nvl_domain_info_v5* nvl_domain_info, tuner_constants_v5* constants);
    result_t (*get_coll_info)(void* context, int coll_type, std::size_t n_bytes, int num_pipe_ops,
                              float** coll_cost_table, int num_algo, int num_proto, int reg_buff, int* n_channels);
    result_t (*finalize)(void* context);
};

static_assert(sizeof(nvl_domain_info_v5) == 12);
static_assert(sizeof(tuner_constants_v5) == (7 * 3 + 3 * 7 * 3 + 5 * 4 * 3) * sizeof(double));
static_assert(offsetof(tuner_constants_v5, ll_max_bws) == (7 * 3 + 3 * 7 * 3) * sizeof(double));
static_assert(sizeof(tuner_v5) == 4 * sizeof(void*));
static_assert(offsetof(tuner_v5, init) == sizeof(void*) && offsetof(tuner_v5, get_coll_info) == 2 * sizeof(void*) &&
              offsetof(tuner_v5, finalize) == 3 * sizeof(void*));

}  // namespace shunt::detail::nccl_abi
