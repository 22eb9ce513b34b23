// src/nccl_calls.hpp: shunt-measure --nccl-tuner's and --nccl's calls into NCCL, through a table of NCCL's functions, so
// that the tool (NCCL opened with dlopen, device memory) and its tests (NCCL's CPU double, host memory) run the same code.
#pragma once

#include <shunt/collectives/nccl.hpp>
#include <shunt/errors.hpp>
#include <shunt/model/measure_nccl.hpp>
#include <shunt/plan/nccl.hpp>
#include <shunt/plan/nccl_tuner.hpp>
#include <shunt/topology/node_of.hpp>

#include <dlfcn.h>
#include <mpi.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>

namespace shunt::tools {

/// The NCCL functions the measurement calls (NCCL 2.28's signatures).
struct nccl_functions {
    decltype(&ncclGetUniqueId) get_unique_id = nullptr;
    decltype(&ncclCommInitRank) comm_init_rank = nullptr;
    decltype(&ncclCommDestroy) comm_destroy = nullptr;
    decltype(&ncclAllReduce) all_reduce = nullptr;
    decltype(&ncclAllGather) all_gather = nullptr;
    decltype(&ncclReduceScatter) reduce_scatter = nullptr;
    decltype(&ncclBroadcast) broadcast = nullptr;
    decltype(&ncclReduce) reduce = nullptr;
    decltype(&ncclGetErrorString) error_string = nullptr;
    decltype(&ncclGetLastError) last_error = nullptr;
    decltype(&ncclCommSplit) comm_split = nullptr;
    decltype(&ncclCommCount) comm_count = nullptr;
    decltype(&ncclCommUserRank) comm_user_rank = nullptr;
    decltype(&ncclGroupStart) group_start = nullptr;
    decltype(&ncclGroupEnd) group_end = nullptr;

    /// Looks each one up in `lib` (a dlopen handle, or RTLD_DEFAULT); false, naming the first
    /// missing one in `missing`, when one is absent.
    bool resolve(void* lib, std::string& missing) {
        const auto get = [&](auto& fn, const char* name) {
            fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(lib, name));
            if (fn == nullptr && missing.empty()) missing = name;
        };
        get(get_unique_id, "ncclGetUniqueId");
        get(comm_init_rank, "ncclCommInitRank");
        get(comm_destroy, "ncclCommDestroy");
        get(all_reduce, "ncclAllReduce");
        get(all_gather, "ncclAllGather");
        get(reduce_scatter, "ncclReduceScatter");
        get(broadcast, "ncclBroadcast");
        get(reduce, "ncclReduce");
        get(error_string, "ncclGetErrorString");
        get(last_error, "ncclGetLastError");
        get(comm_split, "ncclCommSplit");
        get(comm_count, "ncclCommCount");
        get(comm_user_rank, "ncclCommUserRank");
        get(group_start, "ncclGroupStart");
        get(group_end, "ncclGroupEnd");
        return missing.empty();
    }
};

/// Where the calls' buffers live and how their stream is waited for.
struct nccl_call_memory {
    std::function<void*(std::size_t bytes)> allocate;  ///< throws shunt::error when it cannot
    std::function<void(void*)> release;
    cudaStream_t stream = nullptr;
    std::function<bool(std::string& why)> synchronize;  ///< waits for `stream`
};

/// Sets NCCL_ALGO and NCCL_PROTO, which NCCL reads when it makes a communicator: the only way
/// NCCL 2.28 offers to force them.
inline void force_through_environment(nccl_algo a, nccl_proto p) {
    ::setenv("NCCL_ALGO", std::string(nccl_algo_env_names[static_cast<std::size_t>(a)]).c_str(), 1);
    ::setenv("NCCL_PROTO", std::string(nccl_proto_env_names[static_cast<std::size_t>(p)]).c_str(), 1);
}

/// measure_nccl_tables' operations over NCCL's functions `f`: communicators over MPI_COMM_WORLD
/// (rank 0's unique id broadcast), float sums, send and receive buffers of `max_bytes` each
/// (allocated at the first call, released with the last copy of the returned ops).
inline nccl_measure_ops make_nccl_ops(const nccl_functions& f, nccl_call_memory memory, std::size_t max_bytes) {
    struct state {
        nccl_functions f;
        nccl_call_memory memory;
        std::size_t max_bytes = 0;
        ncclComm_t comm = nullptr;
        void* send = nullptr;
        void* recv = nullptr;
        ~state() {
            if (comm != nullptr) f.comm_destroy(comm);
            if (send != nullptr) memory.release(send);
            if (recv != nullptr) memory.release(recv);
        }
        std::string failure(ncclResult_t rc) const {
            std::string why = f.error_string(rc);
            const char* last = comm != nullptr ? f.last_error(comm) : nullptr;
            if (last != nullptr && *last != '\0') why += std::string(": ") + last;
            return why;
        }
    };
    auto s = std::make_shared<state>();
    s->f = f;
    s->memory = std::move(memory);
    s->max_bytes = max_bytes;
    nccl_measure_ops ops;
    ops.force = &force_through_environment;
    ops.open = [s](std::string& why) {
        int rank = 0, size = 1;
        PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
        PMPI_Comm_size(MPI_COMM_WORLD, &size);
        ncclUniqueId id;
        std::memset(&id, 0, sizeof id);
        int ok = rank != 0 || s->f.get_unique_id(&id) == ncclSuccess;
        SHUNT_CHECK_MPI(PMPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD));
        SHUNT_CHECK_MPI(PMPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD));
        if (!ok) return why = "ncclGetUniqueId failed on rank 0", false;
        const ncclResult_t rc = s->f.comm_init_rank(&s->comm, size, id, rank);
        if (rc != ncclSuccess) {
            s->comm = nullptr;
            return why = "ncclCommInitRank: " + std::string(s->f.error_string(rc)), false;
        }
        return true;
    };
    ops.close = [s] {
        if (s->comm != nullptr) s->f.comm_destroy(s->comm);
        s->comm = nullptr;
    };
    ops.run = [s](nccl_coll c, std::size_t bytes, int reps, std::string& why) {
        if (s->comm == nullptr) return why = "no communicator", false;
        if (bytes > s->max_bytes) return why = "more bytes than the buffers hold", false;
        if (s->send == nullptr) {
            s->send = s->memory.allocate(s->max_bytes);
            s->recv = s->memory.allocate(s->max_bytes);
        }
        int size = 1;
        PMPI_Comm_size(MPI_COMM_WORLD, &size);
        const std::size_t count = bytes / sizeof(float), per_rank = count / static_cast<std::size_t>(size);
        ncclComm_t comm = s->comm;
        const cudaStream_t st = s->memory.stream;
        for (int r = 0; r < reps; ++r) {
            ncclResult_t rc = ncclSuccess;
            switch (c) {
                case nccl_coll::allreduce:
                    rc = s->f.all_reduce(s->send, s->recv, count, ncclFloat32, ncclSum, comm, st);
                    break;
                case nccl_coll::allgather:
                    rc = s->f.all_gather(s->send, s->recv, per_rank, ncclFloat32, comm, st);
                    break;
                case nccl_coll::reduce_scatter:
                    rc = s->f.reduce_scatter(s->send, s->recv, per_rank, ncclFloat32, ncclSum, comm, st);
                    break;
                case nccl_coll::broadcast:
                    rc = s->f.broadcast(s->send, s->recv, count, ncclFloat32, 0, comm, st);
                    break;
                case nccl_coll::reduce:
                    rc = s->f.reduce(s->send, s->recv, count, ncclFloat32, ncclSum, 0, comm, st);
                    break;
            }
            if (rc != ncclSuccess) return why = s->failure(rc), false;
        }
        return s->memory.synchronize(why);
    };
    return ops;
}

/// The job's communicator over MPI_COMM_WORLD with its node, rail (and GPU domain) communicators, made as the NCCL executor makes
/// them (interpose/nccl.cpp: ncclCommSplit by the node's colour, then by the index in the node, keyed by rank), and the
/// calls shunt-measure --nccl times on them: NCCL's collective or shunt's schedule (collectives/nccl.hpp) on float sums,
/// root 0. Not thread-safe; every rank calls open and run alike.
class nccl_method_session {
public:
    nccl_method_session() = default;
    nccl_method_session(const nccl_method_session&) = delete;
    nccl_method_session& operator=(const nccl_method_session&) = delete;
    ~nccl_method_session() { close(); }

    /// Makes the communicators (collective over MPI_COMM_WORLD; rank 0's unique id broadcast), this rank
    /// being on node `node` (node_of_rank's answer) and, where `domain` is not -1 (on every rank alike),
    /// in GPU domain `domain` of it, split as the executor splits them (domain, then across the domains);
    /// the buffers (send, receive and scratch of
    /// `max_bytes` each) come from `memory` at the first run. False, with `why`, where NCCL fails.
    bool open(const nccl_functions& f, nccl_call_memory memory, std::size_t max_bytes, std::int64_t node,
              std::int64_t domain, std::string& why) {
        f_ = f;
        memory_ = std::move(memory);
        max_bytes_ = max_bytes;
        int rank = 0, size = 1;
        PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
        PMPI_Comm_size(MPI_COMM_WORLD, &size);
        ncclUniqueId id;
        std::memset(&id, 0, sizeof id);
        int ok = rank != 0 || f_.get_unique_id(&id) == ncclSuccess;
        SHUNT_CHECK_MPI(PMPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD));
        SHUNT_CHECK_MPI(PMPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD));
        if (!ok) return why = "ncclGetUniqueId failed on rank 0", false;
        const auto failed = [&](const char* call, ncclResult_t rc) {
            why = std::string(call) + ": " + failure(rc);
            return false;
        };
        if (const ncclResult_t rc = f_.comm_init_rank(&comm_, size, id, rank); rc != ncclSuccess) {
            comm_ = nullptr;
            return failed("ncclCommInitRank", rc);
        }
        if (const ncclResult_t rc =
                f_.comm_split(comm_, split_color(static_cast<std::uint64_t>(node)), rank, &lv_.node, nullptr);
            rc != ncclSuccess)
            return failed("ncclCommSplit (node)", rc);
        if (const ncclResult_t rc = f_.comm_count(lv_.node, &lv_.per_node); rc != ncclSuccess)
            return failed("ncclCommCount", rc);
        if (const ncclResult_t rc = f_.comm_user_rank(lv_.node, &lv_.local); rc != ncclSuccess)
            return failed("ncclCommUserRank", rc);
        if (const ncclResult_t rc = f_.comm_split(comm_, lv_.local, rank, &lv_.rail, nullptr); rc != ncclSuccess)
            return failed("ncclCommSplit (rail)", rc);
        if (const ncclResult_t rc = f_.comm_count(lv_.rail, &lv_.nodes); rc != ncclSuccess)
            return failed("ncclCommCount", rc);
        if (const ncclResult_t rc = f_.comm_user_rank(lv_.rail, &lv_.node_index); rc != ncclSuccess)
            return failed("ncclCommUserRank", rc);
        lv_.block = rank == lv_.node_index * lv_.per_node + lv_.local;
        if (domain < 0) return true;
        if (const ncclResult_t rc = f_.comm_split(lv_.node, split_color(static_cast<std::uint64_t>(domain)), lv_.local,
                                                  &lv_.domain, nullptr);
            rc != ncclSuccess)
            return failed("ncclCommSplit (domain)", rc);
        if (const ncclResult_t rc = f_.comm_count(lv_.domain, &lv_.per_domain); rc != ncclSuccess)
            return failed("ncclCommCount", rc);
        if (const ncclResult_t rc = f_.comm_user_rank(lv_.domain, &lv_.in_domain); rc != ncclSuccess)
            return failed("ncclCommUserRank", rc);
        if (const ncclResult_t rc = f_.comm_split(lv_.node, lv_.in_domain, lv_.local, &lv_.across, nullptr);
            rc != ncclSuccess)
            return failed("ncclCommSplit (across domains)", rc);
        if (const ncclResult_t rc = f_.comm_count(lv_.across, &lv_.domains); rc != ncclSuccess)
            return failed("ncclCommCount", rc);
        if (const ncclResult_t rc = f_.comm_user_rank(lv_.across, &lv_.domain_index); rc != ncclSuccess)
            return failed("ncclCommUserRank", rc);
        return true;
    }

    /// The levels open() made.
    const shunt::nccl_levels& levels() const { return lv_; }

    /// nccl_method_run over these communicators (see measure_nccl_method_tables).
    bool run(nccl_op op, nccl_method method, std::size_t bytes, int reps, std::string& why) {
        if (comm_ == nullptr || lv_.node == nullptr || lv_.rail == nullptr) return why = "no communicator", false;
        if (bytes > max_bytes_) return why = "more bytes than the buffers hold", false;
        if (send_ == nullptr) {
            send_ = memory_.allocate(max_bytes_);
            recv_ = memory_.allocate(max_bytes_);
            scratch_ = memory_.allocate(max_bytes_);
        }
        int size = 1;
        f_.comm_count(comm_, &size);
        const std::size_t count = bytes / sizeof(float), per_rank = count / static_cast<std::size_t>(size);
        const shunt::nccl_functions sf{f_.all_reduce, f_.reduce_scatter, f_.all_gather, f_.broadcast,
                                       f_.reduce,     f_.group_start,    f_.group_end};
        const bool lib = method == nccl_method::library;
        if (method == nccl_method::hierarchical3 && (op != nccl_op::allreduce || !lv_.has_domains()))
            return why = "no three-level schedule here", false;
        const cudaStream_t st = memory_.stream;
        for (int r = 0; r < reps; ++r) {
            ncclResult_t rc = ncclSuccess;
            switch (op) {
                case nccl_op::allreduce:
                    rc = lib ? f_.all_reduce(send_, recv_, count, ncclFloat32, ncclSum, comm_, st)
                         : method == nccl_method::hierarchical3
                             ? nccl_allreduce3(sf, lv_, comm_, send_, recv_, count, ncclFloat32, ncclSum, st)
                             : nccl_allreduce(sf, lv_, comm_, send_, recv_, count, ncclFloat32, ncclSum, st);
                    break;
                case nccl_op::reduce_scatter:
                    rc = lib ? f_.reduce_scatter(send_, recv_, per_rank, ncclFloat32, ncclSum, comm_, st)
                             : nccl_reduce_scatter(sf, lv_, send_, recv_, per_rank, ncclFloat32, ncclSum, scratch_, st);
                    break;
                case nccl_op::allgather:
                    rc = lib ? f_.all_gather(send_, recv_, per_rank, ncclFloat32, comm_, st)
                             : nccl_allgather(sf, lv_, send_, recv_, per_rank, ncclFloat32, st);
                    break;
                case nccl_op::broadcast:
                    rc = lib ? f_.broadcast(send_, recv_, count, ncclFloat32, 0, comm_, st)
                             : nccl_broadcast(sf, lv_, send_, recv_, count, ncclFloat32, 0, st);
                    break;
                case nccl_op::reduce:
                    rc = lib ? f_.reduce(send_, recv_, count, ncclFloat32, ncclSum, 0, comm_, st)
                             : nccl_reduce(sf, lv_, send_, recv_, count, ncclFloat32, ncclSum, 0, scratch_, st);
                    break;
            }
            if (rc != ncclSuccess) return why = failure(rc), false;
        }
        return memory_.synchronize(why);
    }

    /// Frees the communicators and buffers (the levels before the communicator they came from).
    void close() {
        for (ncclComm_t* c : {&lv_.domain, &lv_.across, &lv_.node, &lv_.rail, &comm_})
            if (*c != nullptr) f_.comm_destroy(*c), *c = nullptr;
        for (void** p : {&send_, &recv_, &scratch_})
            if (*p != nullptr) memory_.release(*p), *p = nullptr;
    }

private:
    std::string failure(ncclResult_t rc) const {
        std::string why = f_.error_string != nullptr ? f_.error_string(rc) : "error";
        const char* last = comm_ != nullptr && f_.last_error != nullptr ? f_.last_error(comm_) : nullptr;
        if (last != nullptr && *last != '\0') why += std::string(": ") + last;
        return why;
    }

    nccl_functions f_;
    nccl_call_memory memory_;
    std::size_t max_bytes_ = 0;
    ncclComm_t comm_ = nullptr;
    shunt::nccl_levels lv_;
    void* send_ = nullptr;
    void* recv_ = nullptr;
    void* scratch_ = nullptr;
};

}  // namespace shunt::tools
