// src/measure_nccl.cpp: shunt-measure --nccl-tuner: NCCL (opened with dlopen: shunt-measure links no NCCL) runs each
// collective with each of its algorithms and protocols forced, one CUDA device per rank; the nccl.* tables go to the
// NCCL tables' model file. Built without CUDA or NCCL's header, it says so and measures nothing.
#include "measure_nccl.hpp"

#include <shunt/config.hpp>
#include <shunt/errors.hpp>
#include <shunt/gpu/memory.hpp>
#include <shunt/gpu/pack.hpp>
#include <shunt/model/file.hpp>
#include <shunt/model/measure.hpp>
#include <shunt/model/measure_nccl.hpp>
#include <shunt/model/nccl_file.hpp>

#include <mpi.h>

#if SHUNT_MEASURE_NCCL
#include <cuda_runtime.h>
#include <dlfcn.h>
#include "nccl_calls.hpp"
#endif

#include <algorithm>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace shunt::tools {
namespace {

int world_rank() {
    int r = 0;
    PMPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

/// Rank 0 says why nothing is measured; every rank returns 77.
int refuse(const std::string& why) {
    if (world_rank() == 0) std::fprintf(stderr, "shunt-measure: --nccl-tuner: %s; nothing measured\n", why.c_str());
    return 77;
}

/// How many ranks of MPI_COMM_WORLD have `yes` true.
int count_ranks(bool yes) {
    int mine = yes ? 1 : 0, n = 0;
    SHUNT_CHECK_MPI(PMPI_Allreduce(&mine, &n, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    return n;
}

}  // namespace

int measure_nccl_main(const nccl_measure_request& q) {
    int size = 1;
    PMPI_Comm_size(MPI_COMM_WORLD, &size);
    if (const int without = count_ranks(!gpu::device_available()); without > 0)
        return refuse(gpu::built_with_cuda() ? "it needs a CUDA device on every rank, and " + std::to_string(without) +
                                                   " of " + std::to_string(size) + " ranks have none"
                                             : "this shunt-measure was built without CUDA");
#if !SHUNT_MEASURE_NCCL
    (void)q;
    return refuse("this shunt-measure was built without NCCL's header (nccl.h)");
#else
    const int rank = world_rank();
    void* lib = ::dlopen(q.library.c_str(), RTLD_NOW | RTLD_LOCAL);
    nccl_functions f;
    std::string missing;
    const bool usable = lib != nullptr && f.resolve(lib, missing);
    if (count_ranks(!usable) > 0) {
        const char* e = lib == nullptr ? ::dlerror() : nullptr;
        return refuse("cannot use NCCL from " + q.library + " (" +
                      (lib == nullptr ? std::string(e ? e : "dlopen failed") : "it has no " + missing) +
                      "; --nccl-library names another)");
    }
    if (size < 2)
        return refuse(
            "it needs 2 ranks or more, one CUDA device each (NCCL asks its tuner only about communicators of 2 "
            "ranks or more)");

    // One device per rank of a node; the node's first rank writes its node's file at the default location.
    MPI_Comm node = MPI_COMM_NULL;
    SHUNT_CHECK_MPI(PMPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
    int local = 0, local_size = 1;
    PMPI_Comm_rank(node, &local);
    PMPI_Comm_size(node, &local_size);
    PMPI_Comm_free(&node);
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
    if (const int short_of = count_ranks(local_size > devices); short_of > 0)
        return refuse(std::to_string(short_of) +
                      " ranks share a node's devices with others (NCCL needs one device per rank: run as many "
                      "ranks per node as it has devices)");
    if (cudaSetDevice(local) != cudaSuccess) throw error("cudaSetDevice(" + std::to_string(local) + ") failed");
    const nccl_shape shape{size, count_ranks(local == 0)};

    const settings& cfg = config();
    const bool one_file = !q.output.empty() || !cfg.model.empty();
    const bool writer = rank == 0 || (local == 0 && !one_file);
    const std::string path = !writer             ? std::string()
                             : !q.output.empty() ? q.output
                                                 : nccl_model_path(cfg.model, process_environment());
    if (count_ranks(writer && path.empty()) > 0)
        throw error("no model file location: set SHUNT_MODEL or HOME, or pass --output");
    cost_model model;
    model.id = nccl_model_identity(gpu::current_device_name());
    if (writer) {
        // A file named by --output or SHUNT_MODEL keeps its identity (it may be an MPI model too).
        auto r = one_file ? load_model(path, nullptr) : load_nccl_model("", process_environment());
        if (r.model)
            model = std::move(*r.model);
        else if (!r.missing)
            std::fprintf(stderr, "shunt-measure: warning: %s; starting a new model\n", r.problem.c_str());
    }

    const double start = detail::now_s();
    const auto wanted = [&](const std::string& name) {
        const bool selected = q.only.empty() || std::any_of(q.only.begin(), q.only.end(),
                                                            [&](const std::string& p) { return name.starts_with(p); });
        return writer && selected && (q.force || !model.measured(name)) &&
               (q.budget_s <= 0 || detail::now_s() - start < q.budget_s);
    };
    constexpr nccl_coll colls[] = {nccl_coll::broadcast, nccl_coll::reduce, nccl_coll::allgather,
                                   nccl_coll::reduce_scatter, nccl_coll::allreduce};
    if (q.dry_run) {
        if (rank == 0)
            for (std::size_t a = 0; a < nccl_algo_count; ++a)
                for (std::size_t p = 0; p < nccl_proto_count; ++p)
                    for (const nccl_coll c : colls) {
                        const std::string name =
                            table_names::nccl(c, static_cast<nccl_algo>(a), static_cast<nccl_proto>(p), shape);
                        if (wanted(name)) std::printf("would measure %s\n", name.c_str());
                    }
        return 0;
    }

    const auto sizes = q.full ? geometric_sizes(1024, 256 << 20, 2) : geometric_sizes(1024, 16 << 20, 4);
    cudaStream_t stream = nullptr;
    if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess)
        throw error("cudaStreamCreate failed");
    nccl_call_memory memory;
    memory.allocate = [](std::size_t bytes) {
        void* p = nullptr;
        if (cudaMalloc(&p, bytes) != cudaSuccess || cudaMemset(p, 0, bytes) != cudaSuccess)
            throw error("cudaMalloc of " + std::to_string(bytes) + " bytes failed");
        return p;
    };
    memory.release = [](void* p) { cudaFree(p); };
    memory.stream = stream;
    memory.synchronize = [stream](std::string& why) {
        const cudaError_t e = cudaStreamSynchronize(stream);
        if (e != cudaSuccess) why = cudaGetErrorString(e);
        return e == cudaSuccess;
    };
    std::size_t skipped = 0;
    std::vector<std::pair<std::string, time_table>> tables;
    {
        const nccl_measure_ops ops = make_nccl_ops(f, memory, nccl_measure_bytes(sizes.back(), size));
        tables = measure_nccl_tables(ops, shape, colls, sizes, q.full ? full_timing() : quick_timing(), wanted,
                                     [&](const std::string& what) {
                                         ++skipped;
                                         std::fprintf(stderr, "shunt-measure: note: %s\n", what.c_str());
                                     });
    }  // the communicator and buffers go before the stream
    cudaStreamDestroy(stream);
    int status = 0;
    if (writer) {
        for (auto& [name, t] : tables) model.set(name, std::move(t));
        try {
            save_model(model, path);
            std::printf("shunt-measure: wrote %zu tables to %s (%zu nccl tables measured for %s, %zu skipped)\n",
                        model.tables().size(), path.c_str(), tables.size(), shape.text().c_str(), skipped);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "shunt-measure: error: %s\n", e.what());
            status = 1;
        }
    }
    return status;
#endif
}

}  // namespace shunt::tools
