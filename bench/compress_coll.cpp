// bench/compress_coll.cpp: bench-compress-coll, gradient compression in the preload library against the MPI library and shunt's exact path, in one job: a float MPI_Allreduce and a data-parallel training step (examples/mlp.hpp), each under the library, shunt without compression, shunt with int8, with fp16, and with the planner's choice.
#include "coll_timing.hpp"
#include "harness.hpp"

#include <shunt/compress/control.hpp>
#include <shunt/topology/topology.hpp>

#include "../examples/mlp.hpp"

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace shunt::bench;

/// The variants: the library (PMPI_*), then shunt's MPI_* on a communicator of each consent.
constexpr int variants = 5;
const char* const names[variants] = {"lib", "exact", "int8", "fp16", "auto"};
const char* const consents[variants] = {nullptr, "off", "int8", "fp16", "auto"};

/// The relative L2 difference of `got` from `want`.
double relative(const float* got, const float* want, std::size_t n) {
    double d = 0, w = 0;
    for (std::size_t i = 0; i < n; ++i) {
        const double e = static_cast<double>(got[i]) - want[i];
        d += e * e;
        w += static_cast<double>(want[i]) * want[i];
    }
    return w > 0 ? std::sqrt(d / w) : std::sqrt(d);
}

/// A gradient-like vector, different on every rank.
std::vector<float> gradient(std::int64_t n, int rank) {
    std::vector<float> v(static_cast<std::size_t>(n));
    std::uint32_t x = 2463534242u + 977u * static_cast<std::uint32_t>(rank);
    for (auto& f : v) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        f = (static_cast<float>(x >> 8) * 5.9604645e-8f - 0.5f) * (1 + static_cast<float>(x % 7));
    }
    return v;
}

}  // namespace

int main(int argc, char** argv) {
    bool quick = false, step_given = false;
    std::string rows = "allreduce,step";
    mlp::config step_config;
    step_config.input = 1024, step_config.hidden1 = 1024, step_config.hidden2 = 512, step_config.batch = 4;
    step_config.train = 2048, step_config.test = 16;
    cli line("bench-compress-coll",
             "Times float sums under gradient compression in one job on MPI_COMM_WORLD: the MPI library\n"
             "(PMPI_*), and shunt's MPI_* (libshunt's shims) on communicators whose consent the header API sets\n"
             "(<shunt/compress/control.hpp>): off (shunt's exact path), int8, fp16 and auto (the planner's\n"
             "choice among fp16, bf16 and int8). Rows: allreduce/SIZE, an MPI_Allreduce of SIZE bytes of\n"
             "floats; step, one step of the data-parallel MLP of examples/mlp.hpp (its layers' gradients\n"
             "summed with MPI_Allreduce), each variant training its own replica.");
    line.flag("--quick", "a CI smoke test: allreduce of 1M, a small step, 3 trials", [&] { quick = true; });
    line.option("--rows", "LIST", "allreduce, step or both (default allreduce,step)",
                [&](const std::string& v) { rows = v; });
    line.option("--step", "IN,H1,H2,BATCH", "the step's layers and samples per rank (default 1024,1024,512,4)",
                [&](const std::string& v) {
                    step_given = true;
                    std::istringstream in(v);
                    char c1 = 0, c2 = 0, c3 = 0;
                    if (!(in >> step_config.input >> c1 >> step_config.hidden1 >> c2 >> step_config.hidden2 >> c3 >>
                          step_config.batch) ||
                        c1 != ',' || c2 != ',' || c3 != ',' || step_config.input < 1 || step_config.hidden1 < 1 ||
                        step_config.hidden2 < 1 || step_config.batch < 1)
                        throw usage_error("--step takes IN,H1,H2,BATCH (positive integers), not '" + v + "'");
                });
    line.epilog(
        "Sizes (allreduce rows): default 64M. Times are the slowest rank's best of interleaved trials after a\n"
        "warm-up of 6 calls (shunt compresses a call site from its 4th call: the pattern of calls is\n"
        "confirmed on the 3rd; SHUNT_COMPRESS_WARMUP must stay at 3 or less). lib/exact is the gain of\n"
        "shunt's exact path (its hierarchical schedule, where the model takes it); lib/X and exact/X are\n"
        "the library's and the exact path's time over X's (above 1: X is faster). err: X's relative L2\n"
        "difference from the library's sum (allreduce rows), or of X's replica's weights from the exact\n"
        "replica's after the same steps (step row: 0 when the plan kept every sum exact). Run it on the\n"
        "emulated cluster: bench/cluster/cluster.sh -- mpirun -n 4 --map-by node bench-compress-coll.");
    options o = line.parse(argc, argv);
    if (!o.was_given("--trials")) o.trials = quick ? 3 : 8;
    if (!o.was_given("--time")) o.time_s = quick ? 0.5 : 20;
    if (quick && !step_given) step_config.input = 256, step_config.hidden1 = 256, step_config.hidden2 = 128;
    if (quick) step_config.train = 512;
    std::vector<std::int64_t> sizes = o.sizes;
    if (sizes.empty()) sizes.push_back(quick ? std::int64_t{1} << 20 : std::int64_t{64} << 20);
    const bool do_allreduce = rows.find("allreduce") != std::string::npos;
    const bool do_step = rows.find("step") != std::string::npos;
    if (!do_allreduce && !do_step) {
        std::fprintf(stderr, "bench-compress-coll: --rows takes allreduce, step or both\n");
        return 2;
    }
    if (o.list) {
        if (do_allreduce)
            for (auto s : sizes) std::printf("allreduce/%s\n", format_bytes(s).c_str());
        if (do_step) std::printf("step\n");
        return 0;
    }
    if (!calls_shunt("bench-compress-coll", "MPI_Allreduce", reinterpret_cast<void*>(&MPI_Allreduce),
                     reinterpret_cast<void*>(&PMPI_Allreduce)))
        return 1;

    MPI_Init(&argc, &argv);
    int rank = 0, p = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    int rc = 0;
    try {
        if (!shunt::compress::preloaded()) throw shunt::error("libshunt.so's control entry is not in the process");
        // One communicator per variant, each with its consent (the library's is MPI_COMM_WORLD).
        MPI_Comm comms[variants] = {MPI_COMM_WORLD};
        for (int v = 1; v < variants; ++v) {
            MPI_Comm_dup(MPI_COMM_WORLD, &comms[v]);
            shunt::compress::set_consent(comms[v], consents[v]);
        }
        std::optional<table> out;
        if (rank == 0) {
            std::vector<column> cols = {{"row", 14, "row", true}};
            for (int v = 0; v < variants; ++v)
                cols.push_back({std::string(names[v]) + " ms", 9, std::string(names[v]) + "_ms"});
            for (int v = 1; v < variants; ++v)
                cols.push_back({std::string("lib/") + names[v], 8, std::string("library_over_") + names[v]});
            for (int v = 2; v < variants; ++v)
                cols.push_back({std::string("exact/") + names[v], 10, std::string("exact_over_") + names[v]});
            for (int v = 2; v < variants; ++v)
                cols.push_back({std::string(names[v]) + " err", 9, std::string(names[v]) + "_error"});
            out.emplace(cols, o);
            char version[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
            int len = 0;
            MPI_Get_library_version(version, &len);
            const std::string v(version, static_cast<std::size_t>(len));
            out->note("bench-compress-coll: " + std::to_string(p) +
                      " ranks; library = " + v.substr(0, v.find_first_of("\r\n")));
            const char* spec = std::getenv("SHUNT_TOPOLOGY");
            std::string d = shunt::topology::of(MPI_COMM_WORLD, spec ? spec : "").describe();
            for (std::size_t at = 0; (at = d.find('\n', at)) != std::string::npos && at + 1 < d.size();)
                d.replace(at, 1, "; ");
            if (!d.empty() && d.back() == '\n') d.pop_back();
            out->note(d);
            out->note("best of up to " + std::to_string(o.trials) + " interleaved trials (the slowest rank's time)");
        } else {
            const char* spec = std::getenv("SHUNT_TOPOLOGY");
            shunt::topology::of(MPI_COMM_WORLD, spec ? spec : "");  // collective
        }
        auto emit = [&](const std::string& row, const std::vector<double>& best, const std::vector<double>& err) {
            if (rank != 0) return;
            std::vector<cell> cells = {text_cell(row)};
            for (int v = 0; v < variants; ++v) cells.push_back(number_cell(best[static_cast<std::size_t>(v)] * 1e3, 2));
            for (int v = 1; v < variants; ++v)
                cells.push_back(number_cell(best[0] / best[static_cast<std::size_t>(v)], 2));
            for (int v = 2; v < variants; ++v)
                cells.push_back(number_cell(best[1] / best[static_cast<std::size_t>(v)], 2));
            for (int v = 2; v < variants; ++v) {
                char t[32];
                std::snprintf(t, sizeof t, "%.2g", err[static_cast<std::size_t>(v)]);
                cells.push_back({t, t});
            }
            out->row(cells);
        };
        const double bounds[variants] = {0, 1e-5, 5e-2, 5e-3, 5e-2};  // the sums' error bounds
        if (do_allreduce)
            for (const std::int64_t size : sizes) {
                const std::string row = "allreduce/" + format_bytes(size);
                if (!o.selected(row)) continue;
                const std::int64_t n = std::max<std::int64_t>(1, size / 4);
                const std::vector<float> in = gradient(n, rank);
                std::vector<std::vector<float>> res(variants, std::vector<float>(static_cast<std::size_t>(n)));
                std::vector<std::function<void()>> calls;
                for (int v = 0; v < variants; ++v)
                    calls.push_back([&, v] {
                        (v == 0 ? PMPI_Allreduce : MPI_Allreduce)(in.data(), res[static_cast<std::size_t>(v)].data(),
                                                                  static_cast<int>(n), MPI_FLOAT, MPI_SUM, comms[v]);
                    });
                const std::vector<double> best = measure_collective(calls, o, 6);
                std::vector<double> err(variants, 0.0);
                for (int v = 1; v < variants; ++v) {
                    err[static_cast<std::size_t>(v)] =
                        relative(res[static_cast<std::size_t>(v)].data(), res[0].data(), static_cast<std::size_t>(n));
                    if (err[static_cast<std::size_t>(v)] > bounds[v]) {
                        std::fprintf(stderr, "bench-compress-coll: %s %s: relative error %g on rank %d\n", row.c_str(),
                                     names[v], err[static_cast<std::size_t>(v)], rank);
                        rc = 1;
                    }
                }
                PMPI_Allreduce(MPI_IN_PLACE, err.data(), variants, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
                emit(row, best, err);
            }
        if (do_step && o.selected("step")) {
            const mlp::dataset data = mlp::dataset::make(step_config, step_config.train, 1);
            std::vector<std::unique_ptr<mlp::network>> nets;
            std::vector<int> steps(variants, 0);
            for (int v = 0; v < variants; ++v) {
                nets.push_back(std::make_unique<mlp::network>(step_config));
                if (v == 0) nets.back()->set_allreduce(&PMPI_Allreduce);
            }
            std::vector<std::function<void()>> calls;
            const int global = step_config.batch * p;
            for (int v = 0; v < variants; ++v)
                calls.push_back([&, v] {
                    int& t = steps[static_cast<std::size_t>(v)];
                    const int first = (t++ * global) % (step_config.train - global + 1) + rank * step_config.batch;
                    nets[static_cast<std::size_t>(v)]->step(data, first, step_config.batch, comms[v]);
                });
            const std::vector<double> best = measure_collective(calls, o, 6);
            // How far each replica's weights moved from the exact one's over the same steps.
            std::vector<double> err(variants, 0.0);
            const auto& exact_w = nets[1]->layers()[0].w;
            for (int v = 2; v < variants; ++v)
                err[static_cast<std::size_t>(v)] =
                    relative(nets[static_cast<std::size_t>(v)]->layers()[0].w.data(), exact_w.data(), exact_w.size());
            PMPI_Allreduce(MPI_IN_PLACE, err.data(), variants, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            if (rank == 0)
                out->note("step: layers " + std::to_string(step_config.input) + "-" +
                          std::to_string(step_config.hidden1) + "-" + std::to_string(step_config.hidden2) + "-10, " +
                          std::to_string(step_config.batch) + " samples per rank, " + std::to_string(steps[1]) +
                          " steps per variant");
            emit("step", best, err);
        }
        for (int v = 1; v < variants; ++v) MPI_Comm_free(&comms[v]);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench-compress-coll: %s\n", e.what());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    int any = 0;
    PMPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any;
}
