// src/measure_nccl.cpp: shunt-measure's NCCL modes, NCCL opened with dlopen (shunt-measure links no NCCL), one CUDA
// device per rank: --nccl-tuner runs each collective with each of NCCL's algorithms and protocols forced; --nccl times
// NCCL's collectives against shunt's schedules. The nccl.* tables go to the NCCL tables' model file. Built without
// CUDA or NCCL's header, they say so and measure nothing.
#include "measure_nccl.hpp"

#include <shunt/config.hpp>
#include <shunt/errors.hpp>
#include <shunt/gpu/memory.hpp>
#include <shunt/gpu/pack.hpp>
#include <shunt/model/file.hpp>
#include <shunt/model/measure.hpp>
#include <shunt/model/measure_nccl.hpp>
#include <shunt/model/measure_nccl_methods.hpp>
#include <shunt/model/nccl_file.hpp>
#include <shunt/plan/nccl.hpp>
#include <shunt/topology/gpu_domain.hpp>
#include <shunt/topology/node_of.hpp>

#include <mpi.h>

#if SHUNT_MEASURE_NCCL
#include <cuda_runtime.h>
#include <dlfcn.h>
#include "nccl_calls.hpp"
#endif

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>
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

/// Rank 0 says why nothing is measured in `mode`; every rank returns 77.
int refuse(const std::string& why, const char* mode = "--nccl-tuner") {
    if (world_rank() == 0) std::fprintf(stderr, "shunt-measure: %s: %s; nothing measured\n", mode, why.c_str());
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

int measure_nccl_methods_main(const nccl_measure_request& q) {
    constexpr const char* mode = "--nccl";
    int size = 1;
    PMPI_Comm_size(MPI_COMM_WORLD, &size);
    if (!q.host_memory)
        if (const int without = count_ranks(!gpu::device_available()); without > 0)
            return refuse(gpu::built_with_cuda()
                              ? "it needs a CUDA device on every rank, and " + std::to_string(without) + " of " +
                                    std::to_string(size) + " ranks have none"
                              : "this shunt-measure was built without CUDA",
                          mode);
#if !SHUNT_MEASURE_NCCL
    (void)q;
    return refuse("this shunt-measure was built without NCCL's header (nccl.h)", mode);
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
                          "; --nccl-library names another)",
                      mode);
    }
    if (size < 2) return refuse("it needs 2 ranks or more, one CUDA device each, on 2 nodes or more", mode);

    // The nodes as the NCCL executor finds them (SHUNT_TOPOLOGY's node level, else the host name).
    const settings& cfg = config();
    std::int64_t node = -1;
    std::string bad_topology;
    try {
        node = node_of_rank(cfg.topology, rank, size);
    } catch (const std::exception& e) {
        bad_topology = e.what();
    }
    if (count_ranks(!bad_topology.empty()) > 0)
        throw error("SHUNT_TOPOLOGY cannot be used" + (bad_topology.empty() ? std::string() : ": " + bad_topology));
    std::vector<std::int64_t> nodes_of(static_cast<std::size_t>(size));
    SHUNT_CHECK_MPI(PMPI_Allgather(&node, 1, MPI_INT64_T, nodes_of.data(), 1, MPI_INT64_T, MPI_COMM_WORLD));
    if (std::count(nodes_of.begin(), nodes_of.end(), std::int64_t{-1}) > 0)
        return refuse("SHUNT_TOPOLOGY's node level does not cover the job's " + std::to_string(size) + " ranks", mode);
    const std::set<std::int64_t> distinct(nodes_of.begin(), nodes_of.end());
    const int nodes = static_cast<int>(distinct.size()), per_node = size / nodes;
    for (const std::int64_t n : distinct)
        if (std::count(nodes_of.begin(), nodes_of.end(), n) != per_node || per_node * nodes != size)
            return refuse("the job's nodes hold different numbers of ranks (the executor needs nodes of equal size)",
                          mode);
    if (per_node < 2)
        return refuse("every node holds one rank (shunt's schedule needs 2 ranks or more per node)", mode);
    // The GPU domains inside the nodes, as the executor finds them (SHUNT_TOPOLOGY's level inside the node level,
    // else hwloc/NVML): the three-level allreduce is measured where every node holds the same number (2 or more) of
    // domains of equal size (2 or more), each a block of the node's ranks.
    std::int64_t domain = -1;
    try {
        const auto [source, label] = domain_of_rank(cfg.topology, rank, size);
        domain = source == domain_source::discovered ? local_gpu_domain() : label;
    } catch (const std::exception&) {  // said above for the node level
    }
    std::vector<std::int64_t> domains_of(static_cast<std::size_t>(size));
    SHUNT_CHECK_MPI(PMPI_Allgather(&domain, 1, MPI_INT64_T, domains_of.data(), 1, MPI_INT64_T, MPI_COMM_WORLD));
    const int per_domain = domain_block_size(nodes_of, domains_of);
    if (per_domain == 0) domain = -1;
    if (nodes < 2 && per_domain == 0)
        return refuse(
            "the job's ranks are all on one node without GPU domains (shunt's schedules need 2 nodes or more, or "
            "2 domains of 2 ranks or more in a node; run across nodes, or name them with SHUNT_TOPOLOGY's node "
            "level and a level inside it)",
            mode);
    std::vector<nccl_method> methods{nccl_method::library};
    if (nodes > 1) methods.push_back(nccl_method::hierarchical);
    if (per_domain > 0) methods.push_back(nccl_method::hierarchical3);
    const nccl_shape shape{size, nodes};

    // One device per rank of a node (the ranks MPI finds sharing memory), as in --nccl-tuner.
    MPI_Comm shared = MPI_COMM_NULL;
    SHUNT_CHECK_MPI(PMPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &shared));
    int local = 0, local_size = 1;
    PMPI_Comm_rank(shared, &local);
    PMPI_Comm_size(shared, &local_size);
    PMPI_Comm_free(&shared);
    if (!q.host_memory) {
        int devices = 0;
        if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
        if (const int short_of = count_ranks(local_size > devices); short_of > 0)
            return refuse(std::to_string(short_of) +
                              " ranks share a node's devices with others (NCCL needs one device per rank: run as many "
                              "ranks per node as it has devices)",
                          mode);
        if (cudaSetDevice(local) != cudaSuccess) throw error("cudaSetDevice(" + std::to_string(local) + ") failed");
    }

    // The file: rank 0 writes one named by --output or SHUNT_MODEL, else each node's first rank its node's own.
    const bool one_file = !q.output.empty() || !cfg.model.empty();
    const bool writer = rank == 0 || (local == 0 && !one_file);
    const std::string path = !writer             ? std::string()
                             : !q.output.empty() ? q.output
                                                 : nccl_model_path(cfg.model, process_environment());
    if (count_ranks(writer && path.empty()) > 0)
        throw error("no model file location: set SHUNT_MODEL or HOME, or pass --output");
    cost_model model;
    model.id = nccl_model_identity(q.host_memory ? "none" : gpu::current_device_name());
    std::string unreadable;
    if (writer) {
        // A file named by --output or SHUNT_MODEL keeps its identity (it may be an MPI model too). One that
        // cannot be read is left alone: measuring would replace whatever it holds.
        auto r = one_file ? load_model(path, nullptr) : load_nccl_model("", process_environment());
        if (r.model)
            model = std::move(*r.model);
        else if (!r.missing)
            unreadable = r.problem;
    }
    if (!unreadable.empty())
        std::fprintf(stderr, "shunt-measure: error: %s; nothing measured (move the file away to start a new one)\n",
                     unreadable.c_str());
    if (count_ranks(!unreadable.empty()) > 0) return 1;

    const double start = detail::now_s();
    const auto wanted = [&](const std::string& name) {
        const bool selected = q.only.empty() || std::any_of(q.only.begin(), q.only.end(),
                                                            [&](const std::string& p) { return name.starts_with(p); });
        return writer && selected && (q.force || !model.measured(name)) &&
               (q.budget_s <= 0 || detail::now_s() - start < q.budget_s);
    };
    // Placement: nodes of consecutive ranks (block), which every schedule but allreduce's needs.
    bool block = true;
    for (int r = 0; r < size; ++r)
        block = block &&
                nodes_of[static_cast<std::size_t>(r)] == nodes_of[static_cast<std::size_t>(r / per_node * per_node)];
    std::vector<nccl_op> ops;
    for (std::size_t o = 0; o < nccl_op_names.size(); ++o)
        if ((block && nodes > 1) || static_cast<nccl_op>(o) == nccl_op::allreduce)
            ops.push_back(static_cast<nccl_op>(o));
    if (!block && rank == 0)
        std::fprintf(stderr,
                     "shunt-measure: note: the nodes are not blocks of consecutive ranks: only allreduce has a "
                     "schedule of shunt's for them\n");
    if (q.dry_run) {
        if (rank == 0)
            for (const nccl_op op : ops)
                for (const nccl_method m : methods)
                    if (const std::string name = table_names::nccl(op, m, shape);
                        (m != nccl_method::hierarchical3 || op == nccl_op::allreduce) && wanted(name))
                        std::printf("would measure %s\n", name.c_str());
        return 0;
    }

    bool any_wanted = false;
    for (const nccl_op op : ops)
        for (const nccl_method m : methods)
            any_wanted = any_wanted || ((m != nccl_method::hierarchical3 || op == nccl_op::allreduce) &&
                                        wanted(table_names::nccl(op, m, shape)));
    if (count_ranks(any_wanted) == 0) {  // nothing missing: no communicator is made
        if (writer)
            std::printf("shunt-measure: kept %zu tables in %s (0 nccl method tables measured for %s: none missing)\n",
                        model.tables().size(), path.c_str(), shape.text().c_str());
        return 0;
    }

    // nccl-tests' sizes from the size shunt's schedules are considered from (nccl_min_bytes). NCCL's CPU double moves
    // host memory over sockets: its sizes stop at 16 MiB, to keep its tests short.
    const double top = q.full ? double(1 << 30) : q.host_memory ? double(16 << 20) : double(256 << 20);
    const auto sizes = geometric_sizes(static_cast<double>(nccl_min_bytes), top, q.full ? 2 : 4);
    nccl_call_memory memory;
    cudaStream_t stream = nullptr;
    if (q.host_memory) {
        memory.allocate = [](std::size_t bytes) {
            void* p = std::calloc(bytes, 1);
            if (p == nullptr) throw error("no host memory for " + std::to_string(bytes) + " bytes");
            return p;
        };
        memory.release = [](void* p) { std::free(p); };
        memory.synchronize = [](std::string&) { return true; };  // the double returns when a call is done
    } else {
        if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess)
            throw error("cudaStreamCreate failed");
        memory.allocate = [](std::size_t bytes) {
            void* p = nullptr;
            if (cudaMalloc(&p, bytes) != cudaSuccess || cudaMemset(p, 0, bytes) != cudaSuccess)
                throw error("cudaMalloc of " + std::to_string(bytes) + " bytes failed");
            return p;
        };
        memory.release = [](void* p) { cudaFree(p); };
        memory.synchronize = [stream](std::string& why) {
            const cudaError_t e = cudaStreamSynchronize(stream);
            if (e != cudaSuccess) why = cudaGetErrorString(e);
            return e == cudaSuccess;
        };
    }
    memory.stream = stream;
    std::size_t skipped = 0;
    std::vector<std::pair<std::string, time_table>> tables;
    int status = 0;
    {
        auto session = std::make_shared<nccl_method_session>();
        std::string why;
        const bool opened = session->open(f, memory, nccl_measure_bytes(sizes.back(), size), node, domain, why);
        if (count_ranks(!opened) > 0) {
            if (rank == 0 || !opened)
                std::fprintf(stderr, "shunt-measure: error: NCCL made no communicators (%s)\n",
                             opened ? "on another rank" : why.c_str());
            status = 1;
        } else {
            tables =
                measure_nccl_method_tables([session](nccl_op op, nccl_method m, std::size_t bytes, int reps,
                                                     std::string& w) { return session->run(op, m, bytes, reps, w); },
                                           shape, ops, sizes, q.full ? full_timing() : quick_timing(), wanted,
                                           [&](const std::string& what) {
                                               ++skipped;
                                               std::fprintf(stderr, "shunt-measure: note: %s\n", what.c_str());
                                           },
                                           methods);
        }
    }  // the communicators and buffers go before the stream
    if (stream != nullptr) cudaStreamDestroy(stream);
    if (writer && status == 0) {
        for (auto& [name, t] : tables) model.set(name, std::move(t));
        try {
            if (!tables.empty()) save_model(model, path);
            std::printf("shunt-measure: %s %zu tables in %s (%zu nccl method tables measured for %s%s, %zu skipped)\n",
                        tables.empty() ? "kept" : "wrote", model.tables().size(), path.c_str(), tables.size(),
                        shape.text().c_str(),
                        q.host_memory ? " in host memory: NCCL's CPU double's figures, not a GPU's" : "", skipped);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "shunt-measure: error: %s\n", e.what());
            status = 1;
        }
    }
    int worst = status;
    SHUNT_CHECK_MPI(PMPI_Allreduce(&status, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    return worst;
#endif
}

}  // namespace shunt::tools
