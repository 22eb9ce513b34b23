// interpose/flow.hpp: flow splitting's set-up in the preload library: before MPI (or NCCL) starts, the transport's lane knobs from SHUNT_FLOW, SHUNT_FABRIC and the planner.
#pragma once

#include <shunt/config.hpp>

namespace shunt::detail {

/// Called by the MPI_Init and MPI_Init_thread shims before PMPI_Init (once per process; later
/// calls do nothing). With SHUNT_FLOW set, plans the job's lanes (shunt/flow/lanes.hpp: the
/// fabric of SHUNT_FABRIC, this host's place in it, the launcher's rank counts) and sets, in
/// this process's environment, the settings that give the MPI library k lanes per peer
/// (shunt/flow/knobs.hpp: Open MPI's TCP component, or UCX under MPICH). Settings the user
/// made are kept, except the pinned mode's interface list. SHUNT_FLOW=auto pins lanes where
/// the fabric's plane interfaces exist and otherwise sets nothing (one connection per peer,
/// said at SHUNT_LOG=info). What a request could not do is said once (a warning) and leaves
/// the library as it was. Not thread-safe (MPI is not running yet).
void prepare_flow_lanes(const settings& cfg) noexcept;

/// Right after PMPI_Init succeeded, before the application's first message: where shunt gave
/// Open MPI several TCP links per peer, opens every link of every pair of world ranks from the
/// lower rank's side (k one-byte synchronous sends to each higher rank, which ob1's round-robin
/// over the eager modules puts one on each link; on a private communicator). Open MPI 4.1's TCP component
/// matches an incoming connection to an endpoint by address alone, and with several links on
/// one address two processes connecting to each other at once can close and reopen each
/// other's connections without end; connections opened from one side never race. Collective
/// over MPI_COMM_WORLD; does nothing in every other case. Never throws.
void connect_flow_lanes() noexcept;

/// After MPI has started and the log knows the rank: rank 0 logs the plan (info, category
/// decide: k, the kind of lanes, each phase's loads), every rank its settings (debug).
void log_flow_lanes() noexcept;

/// Called by the shims of ncclCommInitRank, ncclCommInitRankConfig, ncclCommInitRankScalable,
/// ncclCommInitAll, ncclCommSplit and ncclCommShrink before the real call: with
/// SHUNT_FLOW=hashed[:K] (off, auto and pinned set nothing for NCCL), sets NCCL's queue pairs per
/// connection and data splitting across them (NCCL_IB_QPS_PER_CONNECTION,
/// NCCL_IB_SPLIT_DATA_ON_QPS) to the planner's k, unless the user set them. NCCL reads them when the process's first communicator is created, so only the first
/// call does anything. Hashed lanes (RoCE v2: one UDP source port per queue pair). Says what it
/// set at SHUNT_LOG=debug, and why it set nothing as a warning where the MPI_Init shim has not
/// said it already. Never throws; thread-safe (one set-up per process).
void prepare_nccl_lanes(const settings& cfg) noexcept;

}  // namespace shunt::detail
