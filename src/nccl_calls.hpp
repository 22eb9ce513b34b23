// src/nccl_calls.hpp: shunt-measure --nccl-tuner's calls into NCCL, through a table of NCCL's functions, so that the
// tool (NCCL opened with dlopen, device memory) and its test (NCCL's CPU double, host memory) run the same code.
#pragma once

#include <shunt/errors.hpp>
#include <shunt/model/measure_nccl.hpp>
#include <shunt/plan/nccl_tuner.hpp>

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

}  // namespace shunt::tools
