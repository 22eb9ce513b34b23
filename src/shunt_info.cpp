// src/shunt_info.cpp: the shunt-info tool: shunt's version, its SHUNT_* configuration, the cost
// model file, what shunt would decide for a call, and the topology it sees (that one under mpirun).
#include <shunt/config.hpp>
#include <shunt/gpu/memory.hpp>
#include <shunt/log.hpp>
#include <shunt/model/file.hpp>
#include <shunt/model/nccl_file.hpp>
#include <shunt/pack/host.hpp>
#include <shunt/plan/collective.hpp>
#include <shunt/plan/compress.hpp>
#include <shunt/plan/nccl.hpp>
#include <shunt/plan/nccl_tuner.hpp>
#include <shunt/plan/planner.hpp>
#include <shunt/topology/gpu.hpp>
#include <shunt/topology/locality.hpp>
#include <shunt/topology/topology.hpp>

#include <mpi.h>

#include <exception>
#include <vector>

#include <cstdlib>
#include <memory>

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#ifndef SHUNT_VERSION
#define SHUNT_VERSION "unknown"
#endif

namespace {

void usage(std::FILE* to) {
    std::fputs(
        "usage: shunt-info OPTION [ARGS]\n"
        "\n"
        "Shows how shunt is configured and what it would do. Runs without mpirun.\n"
        "\n"
        "  --config                   every SHUNT_* variable: type, default, current value, documentation\n"
        "  --model [FILE]             validate a model file (default: the one shunt would load) and list its tables\n"
        "  --explain pack|unpack BYTES [BLOCK]\n"
        "                             the decision for (un)packing BYTES in blocks of BLOCK bytes (default 8),\n"
        "                             with every alternative's predicted time, from the model shunt would load\n"
        "  --explain COLLECTIVE BYTES the decision's alternatives for a collective of BYTES on MPI_COMM_WORLD\n"
        "                             (allreduce, reduce_scatter_block, reduce_scatter, allgather, allgatherv,\n"
        "                             bcast, reduce, alltoall, alltoallv), from the model alone; run it under\n"
        "                             mpirun\n"
        "  --explain nccl-tuner COLLECTIVE BYTES [--ranks N] [--nodes M]\n"
        "                             what the NCCL tuner plugin (libshunt-nccl-tuner.so) writes into NCCL's cost\n"
        "                             table for that call (broadcast, reduce, allgather, reduce_scatter, allreduce;\n"
        "                             BYTES as NCCL counts them) on N ranks over M nodes (default: the model's one\n"
        "                             shape for it), from the NCCL tables the plugin would load\n"
        "  --explain nccl-OP BYTES [RANKS PER_NODE]\n"
        "                             shunt's choice for an NCCL collective (allreduce, reduce_scatter, allgather,\n"
        "                             broadcast, reduce) of BYTES on RANKS ranks in nodes of PER_NODE (default 8 4)\n"
        "  --explain compress BYTES RANKS PER_NODE [COMPRESSORS] [device]\n"
        "                             the compression planner's options for a float MPI_Allreduce of BYTES on\n"
        "                             RANKS ranks in nodes of PER_NODE, each with its predicted compression,\n"
        "                             exchange and decompression times, and the size threshold; COMPRESSORS as\n"
        "                             SHUNT_COMPRESS takes them (default: SHUNT_COMPRESS, else auto); device:\n"
        "                             the buffers are device memory on an MPI that is not CUDA-aware (the host\n"
        "                             and the device places, each with its copies)\n"
        "  --topology                 the levels shunt sees on MPI_COMM_WORLD (SHUNT_TOPOLOGY, else discovered)\n"
        "                             and every rank's place in them, with the GPU it uses (PCI bus id) and\n"
        "                             where hwloc sees that GPU attached; run it under mpirun like the application\n"
        "  --help                     this help\n"
        "  --version                  the shunt version\n",
        to);
}

/// The current state of one variable, as text.
std::string current(const shunt::config_snapshot& c, std::size_t i) {
    const auto& v = shunt::config_variables[i];
    std::string value = v.format(c.values);
    if (value.empty()) value = "unset";
    if (!c.raw[i] || c.raw[i]->empty()) return value + " (default)";
    if (c.rejected[i]) return value + " (the value " + shunt::detail::quote(*c.raw[i]) + " is not valid: default used)";
    return value + " (set)";
}

int show_config() {
    const shunt::config_snapshot& c = shunt::config_state();
    for (std::size_t i = 0; i < shunt::config_variable_count; ++i) {
        const auto& v = shunt::config_variables[i];
        const std::string shown_default = v.default_text.empty() ? "unset" : std::string(v.default_text);
        std::printf("%.*s (%.*s, default %s)\n", static_cast<int>(v.name.size()), v.name.data(),
                    static_cast<int>(v.type.size()), v.type.data(), shown_default.c_str());
        std::printf("    current:  %s\n", current(c, i).c_str());
        std::printf("    %.*s\n", static_cast<int>(v.doc.size()), v.doc.data());
        std::printf("    accepted: %s\n", v.accepted().c_str());
    }
    // Bad values and unknown SHUNT_* names, on stderr as the library would report them.
    shunt::log_config_warnings();
    return 0;
}

/// The model shunt would load (SHUNT_MODEL, else the default location), or the built-in one;
/// `where` describes which.
std::shared_ptr<shunt::cost_model> effective_model(std::string& where) {
    const shunt::model_identity me = shunt::current_identity(shunt::gpu::current_device_name());
    const std::string path = shunt::resolve_model_path(shunt::config().model, shunt::process_environment(), me);
    if (!path.empty()) {
        auto r = shunt::load_model(path, &me);
        if (r.model) {
            where = "measured model " + path;
            return std::make_shared<shunt::cost_model>(std::move(*r.model));
        }
        where = r.missing ? "built-in model (no file at " + path + ")" : "built-in model (" + r.problem + ")";
    } else {
        where = "built-in model";
    }
    return std::make_shared<shunt::cost_model>();
}

int show_model(const char* file) {
    const shunt::model_identity me = shunt::current_identity(shunt::gpu::current_device_name());
    const std::string path =
        file ? file : shunt::resolve_model_path(shunt::config().model, shunt::process_environment(), me);
    if (path.empty()) {
        std::fprintf(stderr, "shunt-info: no model file location (set SHUNT_MODEL or HOME, or name a file)\n");
        return 1;
    }
    auto r = shunt::load_model(path, nullptr);
    if (!r.model) {
        std::fprintf(stderr, "shunt-info: %s\n", r.problem.c_str());
        return 1;
    }
    const auto& m = *r.model;
    std::printf("%s: valid shunt model, schema version %d\n", path.c_str(), shunt::model_schema_version);
    std::printf("  measured on host '%s', GPU '%s', MPI '%s'%s\n", m.id.host.c_str(), m.id.gpu.c_str(),
                m.id.mpi.c_str(), m.id == me ? "" : " -- FOREIGN: shunt on this machine would not use it");
    if (!(m.id == me))
        std::printf("  this machine is host '%s', GPU '%s', MPI '%s'\n", me.host.c_str(), me.gpu.c_str(),
                    me.mpi.c_str());
    for (const auto& [name, t] : m.tables()) {
        const auto& p = t.points();
        if (p.empty()) continue;
        std::printf("  %-24s %3zu points, %10.0f .. %-10.0f bytes, %.3g .. %.3g s\n", name.c_str(), p.size(),
                    p.front().size, p.back().size, p.front().time, p.back().time);
    }
    return m.id == me ? 0 : 1;
}

bool parse_positive(const char* text, std::int64_t& out) {
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(text, &end, 10);
    if (end == text || *end != '\0' || errno != 0 || v <= 0) return false;
    out = v;
    return true;
}

/// Runs f(topology) on MPI_COMM_WORLD between MPI_Init and MPI_Finalize; a description error
/// is reported by rank 0 and fails every rank.
template <class F>
int with_world_topology(int argc, char** argv, F f) {
    // Where libshunt_gpu has CUDA, the topology's gpu level and the table below see the device.
    shunt::set_gpu_locator(&shunt::gpu::current_device_pci_bus_id);
    MPI_Init(&argc, &argv);
    int rank = 0, rc = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    try {
        const shunt::topology& topo = shunt::topology::of(MPI_COMM_WORLD, shunt::config().topology);
        rc = f(topo);
    } catch (const std::exception& e) {
        if (rank == 0) std::fprintf(stderr, "shunt-info: %s\n", e.what());
        rc = 1;
    }
    if (rank == 0) shunt::log_config_warnings();
    MPI_Finalize();
    return rc;
}

int show_topology(int argc, char** argv) {
    return with_world_topology(argc, argv, [](const shunt::topology& topo) {
        const int me = topo.rank(), p = topo.size();
        const shunt::hierarchy& h = topo.groups();
        char name[MPI_MAX_PROCESSOR_NAME + 1] = {0};
        int len = 0;
        MPI_Get_processor_name(name, &len);
        std::vector<char> names(static_cast<std::size_t>(p) * (MPI_MAX_PROCESSOR_NAME + 1));
        MPI_Gather(name, MPI_MAX_PROCESSOR_NAME + 1, MPI_CHAR, names.data(), MPI_MAX_PROCESSOR_NAME + 1, MPI_CHAR, 0,
                   MPI_COMM_WORLD);
        // The GPU each rank uses and where hwloc sees it attached (both "" without one).
        constexpr int gpu_chars = 96;
        const std::string bus = shunt::pci_bus_id(shunt::local_gpu_key());
        const std::string gpu = bus.empty() ? std::string() : bus + ' ' + shunt::pci_ancestor(bus);
        char gpu_text[gpu_chars] = {0};
        std::snprintf(gpu_text, sizeof gpu_text, "%s", gpu.c_str());
        std::vector<char> gpus(static_cast<std::size_t>(p) * gpu_chars);
        MPI_Gather(gpu_text, gpu_chars, MPI_CHAR, gpus.data(), gpu_chars, MPI_CHAR, 0, MPI_COMM_WORLD);
        if (me != 0) return 0;
        const auto gpu_of = [&](int r) {
            return std::string_view(gpus.data() + static_cast<std::size_t>(r) * gpu_chars);
        };
        bool any_gpu = false;
        for (int r = 0; r < p; ++r) any_gpu = any_gpu || !gpu_of(r).empty();
        std::printf("%s", topo.describe().c_str());
        std::printf("cost model shape: %s\n", shunt::coll_shape::of(h).signature().c_str());
        std::printf("%-6s %-24s", "rank", "host");
        for (int k = 0; k < h.levels(); ++k) std::printf(" %12s", h.name(k).c_str());
        if (any_gpu) std::printf(" %-12s %s", "gpu (PCI)", "attached to (hwloc)");
        std::printf("\n");
        for (int r = 0; r < p; ++r) {
            std::printf("%-6d %-24s", r, names.data() + static_cast<std::size_t>(r) * (MPI_MAX_PROCESSOR_NAME + 1));
            for (int k = 0; k < h.levels(); ++k)
                std::printf(" %12s", ("group " + std::to_string(h.group_of(k, r))).c_str());
            if (any_gpu) {
                const std::string_view g = gpu_of(r);
                const std::size_t space = g.find(' ');
                const std::string id(g.substr(0, space));
                std::string where = space == std::string_view::npos ? std::string() : std::string(g.substr(space + 1));
                std::printf(" %-12s %s", id.empty() ? "-" : id.c_str(), where.empty() ? "-" : where.c_str());
            }
            std::printf("\n");
        }
        return 0;
    });
}

int explain_collective(int argc, char** argv, shunt::coll_op op, std::int64_t bytes) {
    std::string where;
    auto model = effective_model(where);
    return with_world_topology(argc, argv, [&](const shunt::topology& topo) {
        if (topo.rank() != 0) return 0;
        const shunt::coll_shape shape = shunt::coll_shape::of(topo.groups());
        shunt::collective_tuner tuner(shape);
        std::printf("%s of %lld bytes on MPI_COMM_WORLD, shape %s (%s):\n", std::string(shunt::to_string(op)).c_str(),
                    static_cast<long long>(bytes), shape.signature().c_str(), where.c_str());
        // The library, then shunt's schedule over each set of levels that competes.
        const auto line = [&](shunt::coll_method method, std::uint32_t levels, const std::string& what) {
            const std::string table = shunt::table_names::collective(op, method, shape, levels);
            std::printf("  %-28s predicted %12.3f us (%s)\n", what.c_str(),
                        tuner.predict(*model, op, method, static_cast<double>(bytes), levels) * 1e6,
                        model->find(table) ? ("measured table " + table).c_str() : "analytic model");
        };
        line(shunt::coll_method::library, shape.all_levels(), "library");
        for (const std::uint32_t set : tuner.candidate_sets(*model, op))
            line(shunt::coll_method::hierarchical, set,
                 shape.level_names.empty() ? "hierarchical" : "hierarchical " + shape.schedule_text(set));
        const auto c = shunt::config().coll;
        if (c == shunt::coll_choice::library || c == shunt::coll_choice::shunt) {
            std::printf("  SHUNT_COLL=%s forces the choice\n", c == shunt::coll_choice::library ? "library" : "shunt");
            return 0;
        }
        std::printf(
            "  in a run, shunt's schedule runs over the levels predicted fastest; shunt measures it and\n"
            "  the library on the first calls of this size class and keeps the faster (its schedule\n"
            "  must win by 3%%); with a measured table for both on every rank it decides from the tables\n");
        if (c == shunt::coll_choice::automatic &&
            (op == shunt::coll_op::allreduce || op == shunt::coll_op::reduce || op == shunt::coll_op::reduce_scatter ||
             op == shunt::coll_op::reduce_scatter_block)) {
            // This rank's model alone: a run agrees with every rank's first.
            const auto pick = tuner.choose(
                *model, op, bytes, std::nullopt, [](double*, int) {}, false);
            bool latency_bound = false;
            tuner.for_each([&](const shunt::coll_decision& d) { latency_bound = d.latency_bound; });
            std::printf(
                "  floating-point sums and products are decided from the model alone (the same bits in every\n"
                "  run): %s%s\n",
                pick.method == shunt::coll_method::library
                    ? "the library"
                    : ("shunt's schedule " + shape.schedule_text(pick.levels)).c_str(),
                latency_bound ? " (the analytic prediction is mostly latency, which it cannot judge)" : "");
        }
        return 0;
    });
}

/// --explain nccl-tuner COLL BYTES [--ranks N] [--nodes M]: the measured cells the plugin would
/// compare for such a call, from the NCCL tables it would load (no NCCL needed).
int explain_nccl_tuner(int argc, char** argv) {
    const auto coll = argc >= 5 ? shunt::parse_nccl_coll(argv[3]) : std::nullopt;
    std::int64_t bytes = 0, ranks = 0, nodes = 0;
    bool ok = coll && parse_positive(argv[4], bytes);
    for (int i = 5; ok && i < argc; i += 2) {
        const std::string_view o = argv[i];
        ok = i + 1 < argc && ((o == "--ranks" && parse_positive(argv[i + 1], ranks)) ||
                              (o == "--nodes" && parse_positive(argv[i + 1], nodes)));
    }
    if (!ok) {
        std::fprintf(stderr,
                     "shunt-info: --explain nccl-tuner takes COLLECTIVE (broadcast, reduce, allgather, reduce_scatter, "
                     "allreduce), BYTES (a positive integer), then --ranks N and --nodes M\n");
        return 2;
    }
    const std::string path = shunt::nccl_model_path(shunt::config().model, shunt::process_environment());
    const auto r = shunt::load_nccl_model(shunt::config().model, shunt::process_environment());
    if (!r.model) {
        std::printf("no NCCL tables (%s): the plugin leaves NCCL's choices alone\n",
                    r.missing && shunt::config().model.empty() ? ("no file at " + path).c_str() : r.problem.c_str());
        return 0;
    }
    const auto shape = shunt::nccl_shape_for(*r.model, *coll, ranks, nodes);
    if (!shape) {
        std::string list;
        for (const auto& s : shunt::nccl_shapes_in(*r.model, *coll)) list += " " + s.text();
        std::fprintf(stderr, "shunt-info: name the shape with --ranks and --nodes; %s has %s tables for:%s\n",
                     path.c_str(), argv[3], list.empty() ? " none" : list.c_str());
        return 2;
    }
    const std::string name(shunt::to_string(*coll));
    std::printf(
        "NCCL tuner plugin: %s of %lld bytes on %lld ranks over %lld nodes (tables nccl.%s.*.%s, %s):\n%s",
        name.c_str(), static_cast<long long>(bytes), static_cast<long long>(shape->ranks),
        static_cast<long long>(shape->nodes), name.c_str(), shape->text().c_str(), path.c_str(),
        shunt::nccl_tuner_explain(shunt::nccl_tuner(*r.model, *shape), *coll, static_cast<std::size_t>(bytes)).c_str());
    if (shunt::config().disable) std::printf("  SHUNT_DISABLE=1: the plugin changes nothing\n");
    shunt::log_config_warnings();
    return 0;
}

/// --explain nccl-OP BYTES [RANKS PER_NODE [PER_DOMAIN]]: shunt's choice for an NCCL collective on
/// a communicator of RANKS ranks in nodes of PER_NODE (default 8 and 4), each node in GPU domains
/// of PER_DOMAIN ranks (default: one domain).
int explain_nccl(int argc, char** argv) {
    const std::string_view name = std::string_view(argv[2]).substr(5);
    std::size_t op = 0;
    while (op < shunt::nccl_op_names.size() && shunt::nccl_op_names[op] != name) ++op;
    std::int64_t bytes = 0, ranks = 8, per_node = 4, per_domain = 0;
    if (op == shunt::nccl_op_names.size() || (argc != 4 && argc != 6 && argc != 7) || !parse_positive(argv[3], bytes) ||
        (argc >= 6 && (!parse_positive(argv[4], ranks) || !parse_positive(argv[5], per_node) || ranks % per_node != 0 ||
                       ranks > INT_MAX)) ||
        (argc == 7 && (!parse_positive(argv[6], per_domain) || per_node % per_domain != 0))) {
        std::fprintf(stderr,
                     "shunt-info: --explain takes nccl-OP BYTES [RANKS PER_NODE [PER_DOMAIN]], OP one of allreduce, "
                     "reduce_scatter, allgather, broadcast, reduce, PER_NODE dividing RANKS, PER_DOMAIN dividing "
                     "PER_NODE\n");
        return 2;
    }
    // The model the NCCL executor reads: the NCCL tables' file where there is one, else shunt's model.
    std::string where;
    std::shared_ptr<const shunt::cost_model> model;
    if (auto r = shunt::load_nccl_model(shunt::config().model, shunt::process_environment()); r.model) {
        model = std::make_shared<const shunt::cost_model>(std::move(*r.model));
        where = shunt::nccl_model_path(shunt::config().model, shunt::process_environment());
    } else {
        model = effective_model(where);
    }
    const shunt::nccl_shape shape{ranks, ranks / per_node};
    const auto o = static_cast<shunt::nccl_op>(op);
    const shunt::nccl_choice choice = shunt::config().nccl;
    // The schedules these levels allow, as the executor finds them (interpose/nccl.cpp).
    const shunt::nccl_depths depths{ranks > per_node && per_node > 1,
                                    per_domain > 1 && per_node / per_domain > 1 && o == shunt::nccl_op::allreduce};
    const shunt::nccl_decision d = shunt::decide_nccl(*model, choice, o, bytes, shape, depths);
    std::printf("nccl %s of %lld bytes on %lld ranks in nodes of %lld (%s):\n", std::string(name).c_str(),
                static_cast<long long>(bytes), static_cast<long long>(ranks), static_cast<long long>(per_node),
                where.c_str());
    for (const shunt::nccl_method m :
         {shunt::nccl_method::library, shunt::nccl_method::hierarchical, shunt::nccl_method::hierarchical3}) {
        if ((m == shunt::nccl_method::hierarchical && !depths.two) ||
            (m == shunt::nccl_method::hierarchical3 && !depths.three))
            continue;
        const std::string table = shunt::table_names::nccl(o, m, shape);
        const double t = d.seconds(m);
        if (std::isnan(t))
            std::printf("  %-13s no table %s\n", std::string(shunt::to_string(m)).c_str(), table.c_str());
        else
            std::printf("  %-13s predicted %12.3f us (measured table %s)\n", std::string(shunt::to_string(m)).c_str(),
                        t * 1e6, table.c_str());
    }
    std::printf("  -> %s%s\n",
                d.method == shunt::nccl_method::library        ? "NCCL"
                : d.method == shunt::nccl_method::hierarchical ? "shunt's schedule over node+rail"
                                                               : "shunt's schedule over domain+node+rail",
                d.forced                                  ? " (forced by SHUNT_NCCL)"
                : d.method != shunt::nccl_method::library ? ""
                : bytes < shunt::nccl_min_bytes           ? " (below the size shunt's schedules are considered from)"
                : std::isnan(d.library_s) || std::isnan(d.hierarchical_s)
                    ? " (without measured tables of both, NCCL keeps every call)"
                    : " (shunt's schedule is not measured faster by the margin)");
    return 0;
}

/// --explain compress BYTES RANKS PER_NODE [COMPRESSORS] [device]: the compression planner's options.
int explain_compress(int argc, char** argv) {
    std::int64_t bytes = 0, ranks = 0, per_node = 0;
    const bool device = argc >= 7 && std::string_view(argv[argc - 1]) == "device";
    if (device) --argc;
    if (argc < 6 || argc > 7 || !parse_positive(argv[3], bytes) || !parse_positive(argv[4], ranks) ||
        !parse_positive(argv[5], per_node) || ranks > 1 << 20 || per_node > ranks) {
        std::fprintf(stderr,
                     "shunt-info: --explain compress takes BYTES RANKS PER_NODE [COMPRESSORS] [device] (positive "
                     "integers, PER_NODE <= RANKS)\n");
        return 2;
    }
    shunt::compress_places places;
    places.device = places.device_flat = places.staged = device;
    shunt::compress_consent consent = shunt::config().compress;
    if (argc == 7 && !shunt::detail::compress_kind::parse(argv[6], consent)) {
        std::fprintf(stderr, "shunt-info: COMPRESSORS takes %s\n", shunt::detail::compress_kind::accepted().c_str());
        return 2;
    }
    if (argc == 6 && !consent.on) consent = {true, shunt::compress_auto_methods};
    std::string where;
    auto model = effective_model(where);
    auto shape = shunt::compress_shape::nodes_of(static_cast<int>(ranks), static_cast<int>(per_node));
    shape.exact_schedules = shunt::config().coll != shunt::coll_choice::library;
    const std::int64_t count = std::max<std::int64_t>(1, bytes / 4);
    const auto costs = shunt::predict_options(*model, shape, shunt::compress_op::allreduce, count, 4, consent, places);
    std::printf("MPI_Allreduce of %lld floats%s on %lld ranks in nodes of %lld (%s), compressors %s:\n",
                static_cast<long long>(count), device ? " in device memory (staged)" : "",
                static_cast<long long>(ranks), static_cast<long long>(per_node), where.c_str(),
                shunt::detail::compress_kind::format(consent).c_str());
    std::size_t best = 0;
    for (std::size_t i = 1; i < costs.size(); ++i)
        if (costs[i].total() < costs[best].total()) best = i;
    for (std::size_t i = 0; i < costs.size(); ++i)
        std::printf("  %-42s %10.3f ms (compress %.3f, exchange %.3f, decompress %.3f)%s\n",
                    shunt::to_string(costs[i].option).c_str(), costs[i].total() * 1e3, costs[i].encode * 1e3,
                    costs[i].comm * 1e3, costs[i].decode * 1e3, i == best ? "  <- chosen" : "");
    if (costs.size() == 1)
        std::printf(
            "  (no compressed option: %s)\n",
            shape.coll.ranks <= 1 ? "one rank" : "the call is latency-bound (compression saves volume, not latency)");
    const std::int64_t t = shunt::compress_threshold(*model, shape, shunt::compress_op::allreduce, 4, consent, places);
    if (shunt::config().compress_min_bytes > 0)
        std::printf("  size threshold: %lld bytes (SHUNT_COMPRESS_MIN_BYTES)\n",
                    static_cast<long long>(shunt::config().compress_min_bytes));
    else if (t >= std::int64_t{1} << 62)
        std::printf("  size threshold: none (no size up to 1 TiB is predicted to gain)\n");
    else
        std::printf("  size threshold from the model: %lld bytes\n", static_cast<long long>(t));
    std::printf(
        "  compressed times include a %.0f%% margin, so that noise and the model's error favour exact results; in a\n"
        "  run the planner agrees these figures with every rank (the slowest's) and plans the iteration's calls\n"
        "  together (SHUNT_LOG=decide shows the plan)\n",
        shunt::compress_margin * 100);
    return 0;
}

int explain(int argc, char** argv) {
    if (argc >= 3 && std::string_view(argv[2]) == "nccl-tuner") return explain_nccl_tuner(argc, argv);
    if (argc >= 3 && std::string_view(argv[2]).starts_with("nccl-")) return explain_nccl(argc, argv);
    if (argc >= 3 && std::string_view(argv[2]) == "compress") return explain_compress(argc, argv);
    if (argc == 4) {
        for (std::size_t i = 0; i < shunt::coll_op_names.size(); ++i) {
            if (std::string_view(argv[2]) != shunt::coll_op_names[i]) continue;
            std::int64_t bytes = 0;
            if (!parse_positive(argv[3], bytes)) {
                std::fprintf(stderr, "shunt-info: BYTES must be a positive integer\n");
                return 2;
            }
            return explain_collective(argc, argv, static_cast<shunt::coll_op>(i), bytes);
        }
    }
    if (argc < 4 || argc > 5 || (std::string_view(argv[2]) != "pack" && std::string_view(argv[2]) != "unpack")) {
        std::fprintf(
            stderr,
            "shunt-info: --explain takes pack|unpack BYTES [BLOCK], COLLECTIVE BYTES or compress BYTES RANKS PER_NODE "
            "(try shunt-info --help)\n");
        return 2;
    }
    std::int64_t bytes = 0, block = 8;
    if (!parse_positive(argv[3], bytes) || (argc == 5 && !parse_positive(argv[4], block)) || block > bytes) {
        std::fprintf(stderr, "shunt-info: BYTES and BLOCK must be positive integers with BLOCK <= BYTES\n");
        return 2;
    }
    std::string where;
    auto model = effective_model(where);
    shunt::planner pl(model, shunt::overrides_of(shunt::config().pack));
    // A vector of BYTES / BLOCK blocks of BLOCK bytes, twice as far apart: the shape the pack
    // tables are measured on.
    shunt::type_info t;
    t.form.blocks = {{0, block}};
    if (bytes / block > 1) t.form.dims = {{bytes / block, 2 * block}};
    t.size = bytes / block * block;
    t.extent = (2 * (bytes / block) - 1) * block;
    const auto d = pl.pack(t, 1, std::string_view(argv[2]) == "unpack");
    std::printf("%s of %lld bytes in %lld blocks of %lld bytes, host memory (%s):\n", argv[2],
                static_cast<long long>(t.size), static_cast<long long>(d.blocks), static_cast<long long>(block),
                where.c_str());
    for (std::uint8_t i = 0; i < d.count; ++i)
        std::printf("  %-8s predicted %10.3f us%s\n", std::string(shunt::to_string(d.alternatives[i].method)).c_str(),
                    d.alternatives[i].predicted_s * 1e6,
                    i == d.chosen ? (d.forced ? "   <- chosen (forced by SHUNT_PACK)" : "   <- chosen") : "");
    if (block >= 64 && !t.dense(1))
        std::printf(
            "  shunt's packer %s rows non-temporally here (streaming stores: from %lld MiB written in\n"
            "  a call on this machine, 3/4 of a CPU's share of the L3, at least 16 MiB)\n",
            shunt::detail::pack_program(t.form, t.extent, 1).stream_stores() ? "stores" : "does not store",
            static_cast<long long>(shunt::detail::stream_store_bytes() >> 20));
    const bool dense = t.dense(1) && shunt::config().pack != shunt::pack_choice::library;
    if (dense)  // as runtime::prepare: one run of bytes is one memcpy, with nothing to decide
        std::printf(
            "  one contiguous run: preloaded, MPI_%s makes it one memcpy (as the library does), without\n"
            "  a decision or measuring\n",
            std::string_view(argv[2]) == "unpack" ? "Unpack" : "Pack");
    else if (d.measuring && shunt::config().pack != shunt::pack_choice::model)
        std::printf(
            "  preloaded, MPI_%s measures both on the first calls of each such layout (one class with\n"
            "  the counts whose bytes are within 19%%) and keeps the faster\n"
            "  (the library unless shunt's packer beats it by %.0f%%; SHUNT_PACK=model keeps the model's choice)\n",
            std::string_view(argv[2]) == "unpack" ? "Unpack" : "Pack", shunt::planner::measure_margin * 100);
    shunt::log_config_warnings();
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc == 1) {
        usage(stdout);
        return 0;
    }
    const std::string_view option = argv[1];
    if (option == "--explain") return explain(argc, argv);
    if (option == "--model" && argc <= 3) return show_model(argc == 3 ? argv[2] : nullptr);
    if (argc > 2) {
        std::fprintf(stderr, "shunt-info: one option at a time (try shunt-info --help)\n");
        return 2;
    }
    if (option == "--help" || option == "-h") {
        usage(stdout);
        return 0;
    }
    if (option == "--version") {
        std::printf("shunt-info (shunt) %s\n", SHUNT_VERSION);
        return 0;
    }
    if (option == "--config") return show_config();
    if (option == "--topology") return show_topology(argc, argv);
    std::fprintf(stderr, "shunt-info: unknown option '%s' (try shunt-info --help)\n", argv[1]);
    return 2;
}
