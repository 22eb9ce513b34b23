// shunt-measure: measures this machine's cost model tables (packing, copies, the host compressors,
// point-to-point per locality level, collectives per algorithm on this job's topology, and with a
// CUDA device the device copies, kernel launch and device packing) and writes the model file; also
// validates predictions and decisions.
#include <shunt/collectives/allgather.hpp>
#include <shunt/collectives/allreduce.hpp>
#include <shunt/collectives/alltoall.hpp>
#include <shunt/collectives/bcast.hpp>
#include <shunt/collectives/reduce.hpp>
#include <shunt/collectives/reduce_scatter_block.hpp>
#include <shunt/config.hpp>
#include <shunt/gpu/memory.hpp>
#include <shunt/gpu/pack.hpp>
#include <shunt/model/file.hpp>
#include <shunt/model/measure.hpp>
#include <shunt/model/measure_compress.hpp>
#include <shunt/model/measure_device.hpp>
#include <shunt/model/stats.hpp>
#include <shunt/plan/collective.hpp>
#include <shunt/plan/pack.hpp>
#include <shunt/topology/topology.hpp>

#include "measure_nccl.hpp"

#include <mpi.h>

#include <unistd.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace shunt;

struct options {
    bool full = false;
    double budget_s = 0;  // 0: no limit
    std::string output;
    std::vector<std::string> only;  ///< name prefixes of the tables to measure (empty: all)
    bool force = false;
    bool validate = false;
    bool decisions = false;
    bool dry_run = false;
    bool nccl_tuner = false;  ///< --nccl-tuner: the NCCL tuner plugin's tables instead
    bool nccl = false;  ///< --nccl: the NCCL executor's tables (NCCL against shunt's schedules) instead
    bool nccl_host_memory = false;  ///< --nccl-host-memory: --nccl on NCCL's CPU double (tests)
    std::string nccl_library = "libnccl.so.2";
    bool selects(std::string_view table) const {
        return only.empty() ||
               std::any_of(only.begin(), only.end(), [&](const std::string& p) { return table.starts_with(p); });
    }
};

constexpr const char* usage_text =
    "usage: [mpirun -n N] shunt-measure [options]\n"
    "Measures this machine's cost model and writes it to the model file (SHUNT_MODEL, else\n"
    "$XDG_CACHE_HOME/shunt/model-HOST-MPI.json, else ~/.cache/shunt/model-HOST-MPI.json). Incremental:\n"
    "tables already in the file are kept and only missing ones are measured. One node: intra-node\n"
    "tables; run across two nodes for the inter-node tables. At the default location the first rank\n"
    "of every node writes its node's own file (its node's copy and pack tables, and the job's\n"
    "point-to-point and collective tables as rank 0 measured them); SHUNT_MODEL or --output name one\n"
    "file, which rank 0 writes. Where a CUDA device is present, the device tables (copy.h2d, copy.d2h,\n"
    "copy.d2d, launch, pack.device.b<L>, pack.mapped.b<L>) are measured too, on the current device.\n"
    "The host compressors' tables (compress.<method>.cpu.<encode|decode|combine>) are node tables.\n"
    "  --quick            few sizes and short trials (default; under a minute on 2 cores)\n"
    "  --full             all sizes and block lengths, longer trials\n"
    "  --budget SECONDS   stop starting new tables after this long (what is done is saved)\n"
    "  --output FILE      write the model here instead\n"
    "  --only PREFIX      measure only the tables whose names start with PREFIX (repeatable; e.g.\n"
    "                     copy. pack. pack.device p2p. coll.allreduce launch compress compress.int8;\n"
    "                     --dry-run lists the names)\n"
    "  --force            measure the tables again, replacing the file's: with --only, the selected\n"
    "                     ones (the file's other tables are kept); without, all (a new file)\n"
    "  --validate         measure held-out sizes and report each table's prediction error\n"
    "  --decisions        compare the planner's pack choice with the fastest measured method\n"
    "  --dry-run          list what would be measured, measure nothing\n"
    "  --nccl-tuner       measure the NCCL tuner plugin's tables instead (nccl.<coll>.<algo>.<proto>.r<R>n<N>):\n"
    "                     NCCL runs each collective with each of its algorithms and protocols forced\n"
    "                     (NCCL_ALGO, NCCL_PROTO), one CUDA device per rank, into --output, SHUNT_MODEL, else\n"
    "                     model-HOST-nccl.json beside the MPI model; exits 77, measuring nothing, where a rank\n"
    "                     has no device, NCCL cannot be loaded, or the job has one rank (--force measures\n"
    "                     the nccl tables again and keeps the file's others)\n"
    "  --nccl             measure the NCCL executor's tables instead (nccl.<op>.<library|hierarchical>.r<R>n<N>):\n"
    "                     NCCL's allreduce, reduce_scatter, allgather, broadcast and reduce against shunt's\n"
    "                     schedule over node and rail communicators (nodes by SHUNT_TOPOLOGY's node level, else\n"
    "                     the host), interleaved, from 1 MiB, one CUDA device per rank, into the same file as\n"
    "                     --nccl-tuner; exits 77, measuring nothing, where NCCL cannot be loaded, a rank has no\n"
    "                     device, or the job has one rank, one node or one rank per node\n"
    "  --nccl-host-memory with --nccl: host buffers and no device, for NCCL's CPU double in shunt's tests (its\n"
    "                     figures are the double's, never a GPU's)\n"
    "  --nccl-library L   the NCCL library --nccl-tuner and --nccl load (default libnccl.so.2)\n"
    "  --help             this text\n";

bool parse_args(int argc, char** argv, options& o, std::string& error) {
    for (int i = 1; i < argc; ++i) {
        const std::string_view a = argv[i];
        auto value = [&](const char* what) -> const char* {
            if (i + 1 >= argc) {
                error = std::string(a) + " needs " + what;
                return nullptr;
            }
            return argv[++i];
        };
        if (a == "--quick")
            o.full = false;
        else if (a == "--full")
            o.full = true;
        else if (a == "--force")
            o.force = true;
        else if (a == "--validate")
            o.validate = true;
        else if (a == "--decisions")
            o.decisions = true;
        else if (a == "--dry-run")
            o.dry_run = true;
        else if (a == "--nccl-tuner")
            o.nccl_tuner = true;
        else if (a == "--nccl")
            o.nccl = true;
        else if (a == "--nccl-host-memory")
            o.nccl_host_memory = true;
        else if (a == "--nccl-library") {
            const char* v = value("a library name or path");
            if (!v) return false;
            o.nccl_library = v;
        } else if (a == "--output") {
            const char* v = value("a file name");
            if (!v) return false;
            o.output = v;
        } else if (a == "--only") {
            const char* v = value("a table name prefix");
            if (!v) return false;
            o.only.emplace_back(v);
        } else if (a == "--budget") {
            const char* v = value("a number of seconds");
            if (!v) return false;
            char* end = nullptr;
            o.budget_s = std::strtod(v, &end);
            if (end == v || *end != '\0' || !(o.budget_s > 0)) {
                error = std::string("--budget needs a positive number of seconds, not '") + v + "'";
                return false;
            }
        } else {
            error = "unknown option '" + std::string(a) + "'";
            return false;
        }
    }
    if ((o.nccl_tuner || o.nccl) && (o.validate || o.decisions)) {
        error = "--nccl-tuner and --nccl measure and write tables; --validate and --decisions are for the MPI tables";
        return false;
    }
    if (o.nccl_tuner && o.nccl) {
        error = "--nccl-tuner and --nccl are two runs: one at a time";
        return false;
    }
    if (o.nccl_host_memory && !o.nccl) {
        error = "--nccl-host-memory goes with --nccl";
        return false;
    }
    return true;
}

/// One table to measure: its name and how. `collective` ones run on every rank.
struct task {
    std::string name;
    bool collective;  ///< every rank takes part (else rank 0 alone)
    std::function<time_table()> run;
    /// For a collective table: what it times, to time it again for validation.
    struct coll_key {
        coll_op op;
        coll_method method;
        std::uint32_t levels;
    };
    std::optional<coll_key> coll;
    /// Needs a CUDA device: measured only by writers that have one, and a failure there skips the
    /// table with a warning instead of failing the run.
    bool device = false;
};

/// Measures device table `name` at `sizes` (what validate and the device tasks share).
time_table measure_device_table(const std::string& name, std::span<const double> sizes, const timing_policy& pol) {
    if (name == "launch") return measure_launch(sizes, pol);
    if (name == "copy.h2d") return measure_device_copy(device_copy::h2d, sizes, pol);
    if (name == "copy.d2h") return measure_device_copy(device_copy::d2h, sizes, pol);
    if (name == "copy.d2d") return measure_device_copy(device_copy::d2d, sizes, pol);
    const bool mapped = name.starts_with("pack.mapped.");
    return measure_device_pack(mapped, std::atoll(name.c_str() + name.rfind(".b") + 2), sizes, pol);
}

/// Progress on stderr: a redrawn bar on a terminal, plain lines otherwise.
class progress {
public:
    progress(std::size_t total, bool enabled) : total_(total), enabled_(enabled), tty_(::isatty(2) == 1) {}
    void step(std::size_t done, const std::string& what, double elapsed) {
        if (!enabled_) return;
        if (tty_) {
            const int width = 30;
            const int filled = total_ ? static_cast<int>(width * done / total_) : width;
            std::fprintf(stderr, "\r[%.*s%*s] %zu/%zu %-28.28s %6.1f s", filled, "##############################",
                         width - filled, "", done, total_, what.c_str(), elapsed);
            if (done == total_) std::fputc('\n', stderr);
        } else {
            std::fprintf(stderr, "shunt-measure: %zu/%zu %s (%.1f s)\n", done, total_, what.c_str(), elapsed);
        }
        std::fflush(stderr);
    }

private:
    std::size_t total_;
    bool enabled_, tty_;
};

/// How the job lies over its nodes, as shunt-measure needs it.
struct job_layout {
    int node_peer = -1;  ///< a rank on rank 0's node other than rank 0 (-1 if none)
    int network_peer = -1;  ///< a rank on another node (-1 if none)
    bool node_leader = false;  ///< this rank is the lowest world rank of its node
    int nodes = 1;
};

/// The job's layout, from MPI_COMM_TYPE_SHARED (collective over MPI_COMM_WORLD).
job_layout find_layout() {
    int rank = 0, size = 1;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm node = MPI_COMM_NULL;
    SHUNT_CHECK_MPI(PMPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
    int leader = rank;  // lowest world rank of my node
    SHUNT_CHECK_MPI(PMPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, node));
    PMPI_Comm_free(&node);
    std::vector<int> leaders(static_cast<std::size_t>(size));
    SHUNT_CHECK_MPI(PMPI_Allgather(&leader, 1, MPI_INT, leaders.data(), 1, MPI_INT, MPI_COMM_WORLD));
    job_layout j;
    j.node_leader = leader == rank;
    j.nodes = 0;
    for (int r = 0; r < size; ++r) {
        const int l = leaders[static_cast<std::size_t>(r)];
        j.nodes += l == r;
        if (r == 0) continue;
        if (l == leaders[0] && j.node_peer < 0) j.node_peer = r;
        if (l != leaders[0] && j.network_peer < 0) j.network_peer = r;
    }
    return j;
}

/// Rank 0's table, on every rank.
time_table share_from_rank0(const time_table& t) {
    std::vector<double> flat;
    for (const auto& p : t.points()) flat.insert(flat.end(), {p.size, p.time, p.spread});
    int n = static_cast<int>(flat.size());
    PMPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
    flat.resize(static_cast<std::size_t>(n));
    PMPI_Bcast(flat.data(), n, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    std::vector<table_point> points;
    for (std::size_t i = 0; i + 2 < flat.size(); i += 3) points.push_back({flat[i], flat[i + 1], flat[i + 2]});
    return time_table(std::move(points));
}

/// The collectives with tables, as the planner names them.
constexpr coll_op measured_collectives[] = {coll_op::allreduce, coll_op::reduce_scatter_block,
                                            coll_op::allgather, coll_op::alltoall,
                                            coll_op::bcast,     coll_op::reduce};

/// One call of `op` by `m` on MPI_COMM_WORLD moving `bytes` (nccl-tests' sizes: the reduced
/// vector, the whole send buffer of reduce-scatter and alltoall, the gathered buffer, the
/// message), on doubles, shunt's schedule over the levels of `levels`; the buffers live in
/// the returned callable.
std::function<void()> collective_call(coll_op op, coll_method m, const topology& topo, std::int64_t bytes,
                                      std::uint32_t levels) {
    collective_options opt;
    opt.levels = levels;
    const int p = topo.size();
    const std::int64_t n = std::max<std::int64_t>(p, bytes / 8 / p * p), per = n / p;
    auto in = std::make_shared<std::vector<double>>(static_cast<std::size_t>(n), 1.0);
    auto out = std::make_shared<std::vector<double>>(static_cast<std::size_t>(n), 0.0);
    const bool lib = m == coll_method::library;
    const MPI_Comm w = MPI_COMM_WORLD;
    const int cn = static_cast<int>(n), cp = static_cast<int>(per);
    switch (op) {
        case coll_op::allreduce:
            return [=, &topo] {
                lib ? (void)PMPI_Allreduce(in->data(), out->data(), cn, MPI_DOUBLE, MPI_SUM, w)
                    : allreduce(topo, in->data(), out->data(), n, MPI_DOUBLE, MPI_SUM, opt);
            };
        case coll_op::reduce_scatter_block:
            return [=, &topo] {
                lib ? (void)PMPI_Reduce_scatter_block(in->data(), out->data(), cp, MPI_DOUBLE, MPI_SUM, w)
                    : reduce_scatter_block(topo, in->data(), out->data(), per, MPI_DOUBLE, MPI_SUM, opt);
            };
        case coll_op::allgather:
            return [=, &topo] {
                lib ? (void)PMPI_Allgather(in->data(), cp, MPI_DOUBLE, out->data(), cp, MPI_DOUBLE, w)
                    : allgather(topo, in->data(), out->data(), per, MPI_DOUBLE, opt);
            };
        case coll_op::alltoall:
            return [=, &topo] {
                lib ? (void)PMPI_Alltoall(in->data(), cp, MPI_DOUBLE, out->data(), cp, MPI_DOUBLE, w)
                    : alltoall(topo, in->data(), out->data(), per, MPI_DOUBLE, opt);
            };
        case coll_op::bcast:
            return [=, &topo] {
                lib ? (void)PMPI_Bcast(out->data(), cn, MPI_DOUBLE, 0, w)
                    : bcast(topo, out->data(), n, MPI_DOUBLE, 0, opt);
            };
        default:
            return [=, &topo] {
                lib ? (void)PMPI_Reduce(in->data(), out->data(), cn, MPI_DOUBLE, MPI_SUM, 0, w)
                    : reduce(topo, in->data(), out->data(), n, MPI_DOUBLE, MPI_SUM, 0, opt);
            };
    }
}

/// The table of one collective method on every rank: per size, batches of calls after a
/// barrier, each batch's time the slowest rank's; batch length and count set by rank 0 so all
/// ranks make the same calls. Returned on every rank (rank 0's is saved).
time_table measure_collective(coll_op op, coll_method m, const topology& topo, std::span<const double> sizes,
                              const timing_policy& pol, std::uint32_t levels = ~std::uint32_t{0}) {
    std::vector<table_point> points;
    for (const double size : sizes) {
        const auto call = collective_call(op, m, topo, static_cast<std::int64_t>(size), levels);
        auto batch = [&](std::int64_t reps) {
            PMPI_Barrier(MPI_COMM_WORLD);
            const double t0 = detail::now_s();
            for (std::int64_t r = 0; r < reps; ++r) call();
            double t = (detail::now_s() - t0) / static_cast<double>(reps), slowest = 0;
            SHUNT_CHECK_MPI(PMPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
            return slowest;
        };
        const double once = batch(1);
        std::int64_t reps =
            std::clamp<std::int64_t>(static_cast<std::int64_t>(pol.batch_s * 20 / std::max(once, 1e-9)), 1, 1000);
        SHUNT_CHECK_MPI(PMPI_Bcast(&reps, 1, MPI_INT64_T, 0, MPI_COMM_WORLD));
        std::vector<double> samples;
        for (int k = 0; k < pol.warmup + pol.min_samples; ++k) {
            const double t = batch(reps);
            if (k >= pol.warmup) samples.push_back(t);
        }
        const auto e = robust_summary(samples);
        points.push_back({size, e.value, e.spread});
    }
    return time_table(std::move(points));
}

/// The tables to measure. `device`: some writer of the job has a CUDA device (the same on every
/// rank, so every rank plans the same tasks).
std::vector<task> plan_tasks(const options& o, int node_peer, int network_peer, bool device) {
    const timing_policy pol = o.full ? full_timing() : quick_timing();
    const std::vector<std::int64_t> block_lens =
        o.full ? std::vector<std::int64_t>{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096}
               : std::vector<std::int64_t>{1, 4, 16, 64, 256, 1024};
    const auto pack_sizes = o.full ? geometric_sizes(256, 16 << 20, 4) : geometric_sizes(1024, 4 << 20, 4);
    const auto copy_sizes = o.full ? geometric_sizes(64, 64 << 20, 4) : geometric_sizes(256, 16 << 20, 4);
    const auto p2p_sizes = o.full ? geometric_sizes(8, 64 << 20, 4) : geometric_sizes(8, 4 << 20, 4);
    std::vector<task> tasks;
    tasks.push_back({"copy.memcpy", false, [=] { return measure_memcpy(copy_sizes, pol); }, std::nullopt});
    for (const bool unpack : {false, true})
        for (const bool library : {true, false})
            for (const std::int64_t l : block_lens) {
                const auto sizes = pack_sizes;
                tasks.push_back({table_names::pack(library, unpack, l), false,
                                 [=] { return measure_pack(library, unpack, l, sizes, pol); }, std::nullopt});
            }
    // The host compressors (compress.<method>.cpu.<stage>), with their default parameters; sizes
    // are the tensor's float32 bytes.
    const auto compress_sizes = o.full ? geometric_sizes(4 << 10, 64 << 20, 4) : geometric_sizes(4 << 10, 4 << 20, 4);
    for (const compress::method m : compress::all_methods)
        for (const compress_stage s : compress_stages(m))
            tasks.push_back({compress_table(m, false, s), false,
                             [=] { return measure_compress(m, s, compress_sizes, pol); }, std::nullopt});
    if (device) {
        // The device's node tables: copies through pinned memory, the bare launch (over as many
        // threads as `size`), and the pack kernels on the host pack tables' layouts and sizes.
        const auto launch_sizes = geometric_sizes(1, 1 << 20, o.full ? 4 : 16);
        for (const char* name : {"copy.h2d", "copy.d2h", "copy.d2d"})
            tasks.push_back({name, false,
                             [=, n = std::string(name)] { return measure_device_table(n, copy_sizes, pol); },
                             std::nullopt, true});
        tasks.push_back(
            {"launch", false, [=] { return measure_device_table("launch", launch_sizes, pol); }, std::nullopt, true});
        for (const bool mapped : {false, true})
            for (const std::int64_t l : block_lens) {
                const std::string name = table_names::device_pack(mapped, l);
                tasks.push_back(
                    {name, false, [=] { return measure_device_table(name, pack_sizes, pol); }, std::nullopt, true});
            }
    }
    if (node_peer > 0)
        tasks.push_back({table_names::p2p("node", "hh"), true,
                         [=] { return measure_p2p(MPI_COMM_WORLD, 0, node_peer, p2p_sizes, pol); }, std::nullopt});
    if (network_peer > 0)
        tasks.push_back({table_names::p2p("network", "hh"), true,
                         [=] { return measure_p2p(MPI_COMM_WORLD, 0, network_peer, p2p_sizes, pol); }, std::nullopt});
    // Collectives on this job's topology (SHUNT_TOPOLOGY, else discovered): the library and
    // shunt's schedule over each candidate set of levels; the planner uses them for
    // communicators of the same shape instead of measuring in the run.
    int size = 1;
    PMPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size > 1) {
        const topology& topo = topology::of(MPI_COMM_WORLD, config().topology);
        const coll_shape shape = coll_shape::of(topo.groups());
        const auto coll_sizes = o.full ? geometric_sizes(4 << 10, 64 << 20, 4) : geometric_sizes(4 << 10, 4 << 20, 4);
        for (const coll_op op : measured_collectives) {
            std::vector<task::coll_key> keys{{op, coll_method::library, shape.all_levels()}};
            for (const std::uint32_t set : collective_tuner::level_sets(shape))
                keys.push_back({op, coll_method::hierarchical, set});
            for (const auto k : keys)
                tasks.push_back(
                    {table_names::collective(op, k.method, shape, k.levels), true,
                     [=, &topo] { return measure_collective(k.op, k.method, topo, coll_sizes, pol, k.levels); }, k});
        }
    }
    return tasks;
}

/// Absolute percentage errors of `predicted`'s interpolation against each point of `measured`.
std::vector<double> errors_against(const time_table& predicted, const std::vector<table_point>& measured) {
    std::vector<double> e;
    for (const auto& p : measured)
        if (p.time > 0) e.push_back(100.0 * std::fabs(predicted.predict(p.size) - p.time) / p.time);
    return e;
}

/// Re-measures each table at held-out sizes and prints its prediction error. The table's own
/// sizes (anchors) are re-measured in the same pass, interleaved with the held-out ones: their
/// error against the stored table is the drift of the machine since the table was measured, and
/// the held-out error against a table of the anchors (same pass, same machine state) tells a
/// wrong interpolation apart from a machine that changed under a long run.
void validate(const cost_model& m, const std::vector<task>& tasks, const options& o, const job_layout& job, int rank) {
    const timing_policy pol = o.full ? full_timing() : quick_timing();
    if (rank == 0)
        std::printf("%-40s %8s %10s %10s %10s %10s\n", "table", "points", "median%", "max%", "drift%", "same-pass%");
    struct group {
        std::vector<double> held, drift, same_pass;
    };
    group pack, p2p, coll, device, compressors;
    for (const auto& t : tasks) {
        const time_table* tbl = m.find(t.name);
        int have = tbl != nullptr;
        PMPI_Bcast(&have, 1, MPI_INT, 0, MPI_COMM_WORLD);
        if (!have) continue;
        std::vector<double> held = rank == 0 ? held_out_sizes(*tbl) : std::vector<double>{};
        std::vector<double> sizes = held;
        if (rank == 0)
            for (const auto& p : tbl->points()) sizes.push_back(p.size);
        std::sort(sizes.begin(), sizes.end());
        int n = static_cast<int>(sizes.size());
        PMPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
        sizes.resize(static_cast<std::size_t>(n));
        PMPI_Bcast(sizes.data(), n, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        time_table measured;
        if (t.name.rfind("p2p.", 0) == 0) {
            const int peer = t.name.find(".network.") != std::string::npos ? job.network_peer : job.node_peer;
            measured = measure_p2p(MPI_COMM_WORLD, 0, peer, sizes, pol);
        } else if (t.coll) {
            measured = measure_collective(t.coll->op, t.coll->method, topology::of(MPI_COMM_WORLD, config().topology),
                                          sizes, pol, t.coll->levels);
        } else if (rank == 0 && t.device) {
            try {
                measured = measure_device_table(t.name, sizes, pol);
            } catch (const std::exception& e) {
                std::fprintf(stderr, "shunt-measure: warning: %s not validated: %s\n", t.name.c_str(), e.what());
            }
        } else if (rank == 0 && t.name.starts_with("compress.")) {
            measured = measure_compress_table(t.name, sizes, pol);
        } else if (rank == 0) {
            if (t.name == "copy.memcpy") {
                measured = measure_memcpy(sizes, pol);
            } else {
                const bool unpack = t.name.rfind("unpack.", 0) == 0;
                const bool library = t.name.find(".library.") != std::string::npos;
                const std::int64_t l = std::atoll(t.name.c_str() + t.name.rfind(".b") + 2);
                measured = measure_pack(library, unpack, l, sizes, pol);
            }
        }
        if (rank != 0) continue;
        // Pack tables are keyed by packed bytes, which can round a requested size down: a point
        // is an anchor when the stored table has a point at its size, else it is held out.
        std::vector<table_point> held_points, anchor_points;
        for (const auto& p : measured.points()) {
            const bool anchor = std::any_of(tbl->points().begin(), tbl->points().end(),
                                            [&](const table_point& q) { return q.size == p.size; });
            (anchor ? anchor_points : held_points).push_back(p);
        }
        const auto errs = errors_against(*tbl, held_points);
        if (errs.empty()) continue;
        const auto drift = errors_against(*tbl, anchor_points);
        const auto same = errors_against(time_table(anchor_points), held_points);
        auto& g = t.device                            ? device
                  : t.name.rfind("p2p.", 0) == 0      ? p2p
                  : t.name.rfind("coll.", 0) == 0     ? coll
                  : t.name.rfind("compress.", 0) == 0 ? compressors
                                                      : pack;
        g.held.insert(g.held.end(), errs.begin(), errs.end());
        g.drift.insert(g.drift.end(), drift.begin(), drift.end());
        g.same_pass.insert(g.same_pass.end(), same.begin(), same.end());
        std::printf("%-40s %8zu %9.1f%% %9.1f%% %9.1f%% %9.1f%%\n", t.name.c_str(), errs.size(), median(errs),
                    *std::max_element(errs.begin(), errs.end()), drift.empty() ? 0.0 : median(drift),
                    same.empty() ? 0.0 : median(same));
    }
    if (rank != 0) return;
    const auto summary = [](const char* what, const group& g) {
        if (g.held.empty()) return;
        std::printf("validate %s median_ape=%.1f%% points=%zu drift=%.1f%% same_pass_ape=%.1f%%\n", what,
                    median(g.held), g.held.size(), g.drift.empty() ? 0.0 : median(g.drift),
                    g.same_pass.empty() ? 0.0 : median(g.same_pass));
    };
    summary("pack+copy", pack);
    summary("device", device);
    summary("compress", compressors);
    summary("p2p", p2p);
    summary("collectives", coll);
}

/// For a grid of sizes and block lengths: the planner's pick against the measured fastest.
void check_decisions(const cost_model& m, const options& o, int rank) {
    if (rank != 0) return;
    const timing_policy pol = o.full ? full_timing() : quick_timing();
    const std::vector<std::int64_t> lens = {1, 2, 3, 8, 24, 48, 100, 256, 700, 2048};
    const std::vector<double> sizes = {512, 6000, 100000, 1500000};
    int fastest = 0, total = 0;
    double worst = 1;
    std::printf("%-8s %-10s %12s %12s %-8s %-8s %8s\n", "block", "bytes", "library_s", "shunt_s", "picked", "fastest",
                "slowdown");
    for (const auto l : lens)
        for (const double s : sizes) {
            const double lib = measure_pack(true, false, l, std::vector<double>{s}, pol).points().front().time;
            const double sh = measure_pack(false, false, l, std::vector<double>{s}, pol).points().front().time;
            const vector_type vt(static_cast<std::int64_t>(s), l);
            const pack_decision d = plan_pack(decode(vt.get()), 1, m);
            const bool picked_host = d.method == pack_method::host;
            const double picked = picked_host ? sh : lib, best = std::min(sh, lib);
            const double slowdown = best > 0 ? picked / best : 1;
            worst = std::max(worst, slowdown);
            fastest += picked == best;
            ++total;
            std::printf("%-8lld %-10.0f %12.3g %12.3g %-8s %-8s %8.2f\n", static_cast<long long>(l), s, lib, sh,
                        picked_host ? "shunt" : "library", sh <= lib ? "shunt" : "library", slowdown);
        }
    std::printf("decisions fastest=%d/%d worst_slowdown=%.2f\n", fastest, total, worst);
}

/// For each collective and a grid of sizes between the table's points: the planner's pick
/// from the model (as a run with these tables decides: the library or shunt's schedule over
/// some set of levels) against every alternative measured now.
void check_collective_decisions(const cost_model& m, const options& o, int rank) {
    int size = 1;
    PMPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2) return;
    const timing_policy pol = o.full ? full_timing() : quick_timing();
    const topology& topo = topology::of(MPI_COMM_WORLD, config().topology);
    const coll_shape shape = coll_shape::of(topo.groups());
    collective_tuner tuner(shape, 0);
    const auto agree = [](double* v, int n) {
        SHUNT_CHECK_MPI(PMPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    };
    const std::vector<double> sizes = {8192, 131072, 2097152};
    const auto sets = collective_tuner::level_sets(shape);
    const auto text = [&](coll_method method, std::uint32_t levels) {
        return method == coll_method::library ? std::string("library") : "shunt " + shape.schedule_text(levels);
    };
    int fastest = 0, total = 0;
    double worst = 1;
    if (rank == 0)
        std::printf("%-22s %-10s %12s %12s %-24s %-24s %8s\n", "collective", "bytes", "library_s", "best_shunt_s",
                    "picked", "fastest", "slowdown");
    for (const coll_op op : measured_collectives)
        for (const double s : sizes) {
            const auto pick = tuner.choose(m, op, static_cast<std::int64_t>(s), std::nullopt, agree);
            const std::vector<double> one{s};
            const double lib = measure_collective(op, coll_method::library, topo, one, pol).points().front().time;
            double best = lib, picked = lib, best_shunt = std::numeric_limits<double>::infinity();
            std::string best_text = "library";
            for (const std::uint32_t set : sets) {
                const double t =
                    measure_collective(op, coll_method::hierarchical, topo, one, pol, set).points().front().time;
                best_shunt = std::min(best_shunt, t);
                if (pick.method == coll_method::hierarchical && set == pick.levels) picked = t;
                if (t < best) best = t, best_text = text(coll_method::hierarchical, set);
            }
            const double slowdown = best > 0 ? picked / best : 1;
            worst = std::max(worst, slowdown);
            fastest += picked == best;
            ++total;
            if (rank == 0)
                std::printf("%-22s %-10.0f %12.3g %12.3g %-24s %-24s %8.2f\n", std::string(to_string(op)).c_str(), s,
                            lib, best_shunt, text(pick.method, pick.levels).c_str(), best_text.c_str(), slowdown);
        }
    if (rank == 0) std::printf("collective decisions fastest=%d/%d worst_slowdown=%.2f\n", fastest, total, worst);
}

}  // namespace

int main(int argc, char** argv) {
    options o;
    std::string message;
    if (argc > 1 && (std::string_view(argv[1]) == "--help" || std::string_view(argv[1]) == "-h")) {
        std::fputs(usage_text, stdout);
        return 0;
    }
    if (!parse_args(argc, argv, o, message)) {
        std::fprintf(stderr, "shunt-measure: %s\n%s", message.c_str(), usage_text);
        return 2;
    }
    MPI_Init(&argc, &argv);
    int rank = 0;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int status = 0;
    if (o.nccl_tuner || o.nccl) {
        try {
            const tools::nccl_measure_request q{o.full,   o.force,        o.dry_run, o.budget_s,
                                                o.output, o.nccl_library, o.only,    o.nccl_host_memory};
            status = o.nccl ? tools::measure_nccl_methods_main(q) : tools::measure_nccl_main(q);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "shunt-measure: error: %s\n", e.what());
            status = 1;
        }
        MPI_Finalize();
        return status;
    }
    try {
        const model_identity me = current_identity(gpu::current_device_name());
        const job_layout job = find_layout();
        // The default location names the host, so each node keeps a file of its own: every node's
        // first rank measures its node's tables (copies, packing) and writes its node's file, with
        // the job's shared tables (point-to-point, collectives) as rank 0 measured them, so that
        // every rank of a later job finds the same shared tables. A location given by --output or
        // SHUNT_MODEL is one file, which rank 0 writes.
        const bool one_file = !o.output.empty() || !config().model.empty();
        const bool writer = rank == 0 || (job.node_leader && !one_file);
        const std::string path = !writer            ? std::string()
                                 : o.output.empty() ? resolve_model_path(config().model, process_environment(), me)
                                                    : o.output;
        const int no_path = writer && path.empty();
        int any_no_path = 0;
        PMPI_Allreduce(&no_path, &any_no_path, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (any_no_path)
            throw shunt::error(std::string("no model file location on ") +
                               (no_path ? "host " + me.host : "another node") +
                               ": set SHUNT_MODEL or HOME, or pass --output");
        if (rank == 0 && one_file && job.nodes > 1)
            std::fprintf(stderr,
                         "shunt-measure: note: %s is one file, written by rank 0 with the tables of its node (%s); the "
                         "other %d node(s) will find it foreign. Leave SHUNT_MODEL unset and drop --output to write "
                         "each node's own file\n",
                         path.c_str(), me.host.c_str(), job.nodes - 1);
        cost_model model;
        model.id = me;
        // --force with --only measures the selected tables again and keeps the file's others.
        if (writer && (!o.force || !o.only.empty())) {
            auto r = load_model(path, &me);
            if (r.model)
                model = *r.model;
            else if (!r.missing)
                std::fprintf(stderr, "shunt-measure: warning: %s; starting a new model\n", r.problem.c_str());
        }
        // Device tables where a writer has a device (device_available prints nothing and never
        // fails: without CUDA, a driver or a device it is false and they are not planned).
        const int my_device = writer && gpu::device_available();
        int any_device = 0;
        PMPI_Allreduce(&my_device, &any_device, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        const auto tasks = plan_tasks(o, job.node_peer, job.network_peer, any_device != 0);
        struct todo_item {
            const task* t;
            bool mine;  ///< this rank's file lacks the table (or --force selects it)
        };
        std::vector<todo_item> todo;
        for (const auto& t : tasks) {
            const int mine =
                writer && o.selects(t.name) && (o.force || !model.measured(t.name)) && (!t.device || my_device);
            int need = 0;
            PMPI_Allreduce(&mine, &need, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
            if (need) todo.push_back({&t, mine != 0});
        }
        if (o.dry_run) {
            if (rank == 0)
                for (const auto& item : todo) std::printf("would measure %s\n", item.t->name.c_str());
        } else {
            progress bar(todo.size(), rank == 0);
            const double start = detail::now_s();
            std::size_t done = 0;
            for (const auto& [t, mine] : todo) {
                int go = o.budget_s <= 0 || detail::now_s() - start < o.budget_s;
                PMPI_Bcast(&go, 1, MPI_INT, 0, MPI_COMM_WORLD);
                if (!go) break;
                if (t->collective) {
                    time_table tbl = share_from_rank0(t->run());
                    if (writer) model.set(t->name, std::move(tbl));
                } else if (mine && t->device) {
                    // A device that fails one table (out of memory, a driver error) costs that
                    // table, not the run: the model falls back to the analytic default for it.
                    try {
                        time_table tbl = t->run();
                        if (!tbl.empty()) model.set(t->name, std::move(tbl));
                    } catch (const std::exception& e) {
                        std::fprintf(stderr, "shunt-measure: warning: %s not measured: %s\n", t->name.c_str(),
                                     e.what());
                    }
                } else if (mine) {
                    model.set(t->name, t->run());
                }
                bar.step(++done, t->name, detail::now_s() - start);
            }
            if (rank == 0 && done < todo.size())
                std::fprintf(stderr,
                             "shunt-measure: budget reached, %zu of %zu tables measured; run again to continue\n", done,
                             todo.size());
            if (writer) {
                // A file that cannot be written fails the run, after the steps every rank takes part in.
                try {
                    save_model(model, path);
                    std::printf("shunt-measure: wrote %zu tables to %s\n", model.tables().size(), path.c_str());
                } catch (const std::exception& e) {
                    std::fprintf(stderr, "shunt-measure: error: %s\n", e.what());
                    status = 1;
                }
            }
        }
        if (o.validate) validate(model, tasks, o, job, rank);
        if (o.decisions) {
            check_decisions(model, o, rank);
            // Every rank needs the model's collective tables to predict alike: rank 0's go out.
            std::string text = rank == 0 ? model_to_json(model).dump() : std::string();
            std::int64_t len = static_cast<std::int64_t>(text.size());
            PMPI_Bcast(&len, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
            text.resize(static_cast<std::size_t>(len));
            PMPI_Bcast(text.data(), static_cast<int>(len), MPI_CHAR, 0, MPI_COMM_WORLD);
            auto copy = model_from_json(text, nullptr);
            if (!copy.model) throw shunt::error("the model does not survive its own JSON: " + copy.problem);
            check_collective_decisions(*copy.model, o, rank);
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "shunt-measure: error: %s\n", e.what());
        status = 1;
    }
    gpu::release_pools();  // the device tables' blocks, while CUDA is still up
    int worst = status;
    PMPI_Allreduce(&status, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return worst;
}
