// bench/gpu/pack.cpp: bench-gpu-pack, bandwidth of shunt's CUDA pack and unpack kernels for 2-D and 3-D
// strided objects against the sector-aware bound, cudaMemcpy2DAsync and one cudaMemcpyAsync per block.
#include "../harness.hpp"
#include "shapes.hpp"

#include <shunt/datatype/layout.hpp>
#include <shunt/gpu/pack.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace {

using namespace shunt::bench;

void need(cudaError_t rc, const char* call) {
    if (rc != cudaSuccess) throw shunt::error(std::string(call) + " failed: " + cudaGetErrorString(rc));
}

}  // namespace

int main(int argc, char** argv) {
    bool quick = false;
    std::vector<std::int64_t> blocks = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
    std::int64_t per_block_max = 4096;
    bool shapes = false;
    int l2_fetch = 0;
    cli line("bench-gpu-pack",
             "Times shunt's CUDA pack and unpack kernels on device memory for 2-D and 3-D strided objects, as\n"
             "GB/s and as a fraction of the sector-aware bound, side by side with cudaMemcpy2DAsync and with one\n"
             "cudaMemcpyAsync per block (the baselines MPI libraries use today).");
    line.flag("--quick", "a small set that runs in seconds: 1M objects, blocks 1,8,64,512, 5 trials",
              [&] { quick = true; });
    line.option("--blocks", "LIST", "block lengths in bytes (default 1:512, doubling)",
                [&](const std::string& v) { blocks = parse_size_list(v, "--blocks"); });
    line.flag("--shapes", "also time each fast-path kernel shape (16, 32, 64 bytes in flight per thread)",
              [&] { shapes = true; });
    line.option("--l2-fetch", "BYTES",
                "set cudaLimitMaxL2FetchGranularity (0-128) before timing, and report how long setting it took",
                [&](const std::string& v) { l2_fetch = static_cast<int>(parse_int(v, "--l2-fetch", 0, 128)); });
    line.option("--per-block-max", "N",
                "blocks (and 3d planes) timed in the per-block (and 2D) baseline\n"
                "(default 4096; per-block GB/s is of the timed blocks' bytes)",
                [&](const std::string& v) { per_block_max = parse_int(v, "--per-block-max", 1, 1 << 24); });
    line.epilog(
        "Rows are named OP/FAMILY/bB/SIZE (pack/2d/b8/16M): 2d = rows of B bytes 2B apart; 3d = planes of 16\n"
        "such rows, planes one plane apart. SIZE = payload (--sizes, default 16M,256M: where the L2 holds\n"
        "tens of MB, 16M rows run partly from L2, 256M rows from memory). Columns: shunt = the kernel\n"
        "(stream-ordered, one synchronisation per call) in GB/s of payload; before = the kernels before the\n"
        "fast path (one word per thread, the table's index math), x before = before time / shunt time;\n"
        "fast16, fast32, fast64 (--shapes) = the fast path with that many bytes in flight per thread;\n"
        "bound = payload / (strided bytes rounded to 32-byte sectors + contiguous bytes) at the device-to-\n"
        "device copy bandwidth measured in the same run, and shunt/bound its fraction; shunt/rmw = the\n"
        "fraction of the bound plus a read of every sector an unpack writes in part (memory written in\n"
        "whole ECC-protected sectors; packs: shunt/bound); staged (blocks of 1-4 B) = the staged kernels\n"
        "(a tile's typed span through shared memory), staged/bound its fraction of the bound;\n"
        "2D = cudaMemcpy2DAsync (3d: one call per plane, over\n"
        "the first --per-block-max planes); per-block = one cudaMemcpyAsync per block over the first\n"
        "--per-block-max blocks. Baselines timed on a part are scaled to the whole object for the ratios\n"
        "(x 2D, x per-block: baseline time / shunt time). Exits 77 without a CUDA device.");
    options o = line.parse(argc, argv);
    if (quick) {
        if (!o.was_given("--sizes")) o.sizes = {1 << 20};
        if (!o.was_given("--blocks")) blocks = {1, 8, 64, 512};
        if (!o.was_given("--trials")) o.trials = 5;
        if (!o.was_given("--time")) o.time_s = 0.2;
    }
    if (o.sizes.empty()) o.sizes = {16 << 20, 256 << 20};

    std::vector<std::pair<std::string, shape>> rows;
    for (const char* op : {"pack", "unpack"})
        for (const char* fam : {"2d", "3d"})
            for (const std::int64_t b : blocks)
                for (const std::int64_t size : o.sizes) {
                    const std::string name =
                        std::string(op) + "/" + fam + "/b" + std::to_string(b) + "/" + format_bytes(size);
                    if (o.selected(name)) rows.emplace_back(name, make_shape(fam, b, size));
                }
    if (o.list) {
        for (const auto& r : rows) std::printf("%s\n", r.first.c_str());
        return 0;
    }
    if (!shunt::gpu::device_available()) {
        std::fprintf(stderr, "bench-gpu-pack: no CUDA device (or shunt built without CUDA): nothing to measure\n");
        return 77;
    }
    try {
        cudaDeviceProp prop{};
        need(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
        cudaStream_t s = nullptr;
        need(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
        const auto stream = reinterpret_cast<shunt::gpu::stream_t>(s);
        auto sync = [&] { need(cudaStreamSynchronize(s), "cudaStreamSynchronize"); };
        table t({{"row", 22, "row", true},
                 {"payload", 7, "payload_bytes"},
                 {"shunt GB/s", 10, "shunt_gbs"},
                 {"bound GB/s", 10, "bound_gbs"},
                 {"shunt/bound", 11, "shunt_over_bound"},
                 {"shunt/rmw", 9, "shunt_over_rmw_bound"},
                 {"before GB/s", 11, "before_gbs"},
                 {"x before", 8, "speedup_vs_before"},
                 {"fast16", 7, "fast16_gbs"},
                 {"fast32", 7, "fast32_gbs"},
                 {"fast64", 7, "fast64_gbs"},
                 {"staged", 7, "staged_gbs"},
                 {"staged/bound", 12, "staged_over_bound"},
                 {"2D GB/s", 8, "memcpy2d_gbs"},
                 {"per-block GB/s", 14, "per_block_gbs"},
                 {"x 2D", 7, "speedup_vs_2d"},
                 {"x per-block", 11, "speedup_vs_per_block"},
                 {"d2d GB/s", 8, "d2d_copy_gbs"}},
                o);
        t.note(std::string("device: ") + prop.name + ", CUDA runtime " + std::to_string(CUDART_VERSION));
        if (o.was_given("--l2-fetch")) {
            const auto t0 = std::chrono::steady_clock::now();
            need(cudaDeviceSetLimit(cudaLimitMaxL2FetchGranularity, static_cast<std::size_t>(l2_fetch)),
                 "cudaDeviceSetLimit");
            need(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
            const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
            std::size_t now = 0;
            need(cudaDeviceGetLimit(&now, cudaLimitMaxL2FetchGranularity), "cudaDeviceGetLimit");
            t.note("cudaLimitMaxL2FetchGranularity set to " + std::to_string(l2_fetch) + " (now " +
                   std::to_string(now) + ") in " + std::to_string(ms) + " ms");
        }
        for (const auto& [name, sh] : rows) {
            const bool pack = name.rfind("pack", 0) == 0;
            const std::int64_t payload = sh.payload(), span = sh.span();
            void *typed = nullptr, *packed = nullptr, *copy = nullptr;
            need(cudaMalloc(&typed, static_cast<std::size_t>(span)), "cudaMalloc");
            need(cudaMalloc(&packed, static_cast<std::size_t>(payload)), "cudaMalloc");
            need(cudaMalloc(&copy, static_cast<std::size_t>(payload)), "cudaMalloc");
            need(cudaMemset(typed, 1, static_cast<std::size_t>(span)), "cudaMemset");
            need(cudaMemset(packed, 2, static_cast<std::size_t>(payload)), "cudaMemset");
            const shunt::gpu::flat_form f(sh.form(), span, 1);
            const shunt::gpu::device_form df(f);
            auto* tb = static_cast<char*>(typed);
            auto* pb = static_cast<char*>(packed);
            const std::int64_t nblocks = sh.rows * sh.planes, timed_blocks = std::min(nblocks, per_block_max);
            const std::int64_t timed_planes = std::min(sh.planes, per_block_max);
            auto copy_2d = [&](std::int64_t k) {
                char* t0 = tb + k * sh.plane;
                char* p0 = pb + k * sh.rows * sh.block;
                const auto w = static_cast<std::size_t>(sh.block), h = static_cast<std::size_t>(sh.rows);
                const auto pitch = static_cast<std::size_t>(sh.pitch);
                return pack ? cudaMemcpy2DAsync(p0, w, t0, pitch, w, h, cudaMemcpyDeviceToDevice, s)
                            : cudaMemcpy2DAsync(t0, pitch, p0, w, w, h, cudaMemcpyDeviceToDevice, s);
            };
            // cudaMemcpy2DAsync has limits of its own (height, pitch): where it refuses the shape,
            // its column shows n/a.
            const bool have_2d = copy_2d(0) == cudaSuccess;
            if (!have_2d) (void)cudaGetLastError();
            sync();
            using shunt::gpu::detail::kernel_shape;
            auto kernel = [&](kernel_shape k) {
                return [&, k] {
                    if (pack)
                        shunt::gpu::detail::pack_as(k, df, typed, packed, stream);
                    else
                        shunt::gpu::detail::unpack_as(k, df, packed, typed, stream);
                    sync();
                };
            };
            std::vector<std::function<void()>> v{
                kernel(kernel_shape::automatic),
                [&] {  // cudaMemcpy2DAsync, one call per plane, the first timed_planes planes
                    if (have_2d)
                        for (std::int64_t k = 0; k < timed_planes; ++k) need(copy_2d(k), "cudaMemcpy2DAsync");
                    sync();
                },
                [&] {  // one cudaMemcpyAsync per block, the first timed_blocks blocks
                    for (std::int64_t i = 0; i < timed_blocks; ++i) {
                        char* t0 = tb + (i / sh.rows) * sh.plane + (i % sh.rows) * sh.pitch;
                        char* p0 = pb + i * sh.block;
                        need(cudaMemcpyAsync(pack ? p0 : t0, pack ? t0 : p0, static_cast<std::size_t>(sh.block),
                                             cudaMemcpyDeviceToDevice, s),
                             "cudaMemcpyAsync");
                    }
                    sync();
                },
                [&] {  // device-to-device copy of the payload: the bandwidth the bound uses
                    need(cudaMemcpyAsync(copy, packed, static_cast<std::size_t>(payload), cudaMemcpyDeviceToDevice, s),
                         "cudaMemcpyAsync");
                    sync();
                },
                kernel(kernel_shape::legacy)};
            const std::size_t first_shape = v.size();
            if (shapes)
                for (const auto k : {kernel_shape::fast16, kernel_shape::fast32, kernel_shape::fast64})
                    v.push_back(kernel(k));
            // The staged kernels serve words of 4 bytes or fewer: blocks of 1-4 bytes here.
            const bool staged = sh.block <= 4;
            const std::size_t staged_at = v.size();
            if (staged) v.push_back(kernel(kernel_shape::staged));
            const auto times = measure(v, o);
            // The copy moves 2 * payload bytes of memory traffic in its time.
            const double traffic_per_s = 2.0 * static_cast<double>(payload) / times[3].best_s;
            const sector_counts sectors = sh.sectors();
            const double bound_s = static_cast<double>(sectors.touched + payload) / traffic_per_s;
            // Unpacks: the bound plus a read of every sector written in part.
            const double rmw_bound_s =
                pack ? bound_s : static_cast<double>(sectors.touched + sectors.partial + payload) / traffic_per_s;
            const double per_block_s =
                times[2].best_s * static_cast<double>(nblocks) / static_cast<double>(timed_blocks);
            const double two_d_s = times[1].best_s * static_cast<double>(sh.planes) / static_cast<double>(timed_planes);
            auto shape_cell = [&](std::size_t i) {
                return shapes ? gbs_cell(payload, times[first_shape + i].best_s) : text_cell("-");
            };
            t.row({text_cell(name), bytes_cell(payload), gbs_cell(payload, times[0].best_s), gbs_cell(payload, bound_s),
                   number_cell(bound_s / times[0].best_s, 2), number_cell(rmw_bound_s / times[0].best_s, 2),
                   gbs_cell(payload, times[4].best_s), number_cell(times[4].best_s / times[0].best_s, 2), shape_cell(0),
                   shape_cell(1), shape_cell(2), staged ? gbs_cell(payload, times[staged_at].best_s) : text_cell("-"),
                   staged ? number_cell(bound_s / times[staged_at].best_s, 2) : text_cell("-"),
                   have_2d ? gbs_cell(payload, two_d_s) : text_cell("n/a"),
                   gbs_cell(timed_blocks * sh.block, times[2].best_s),
                   have_2d ? number_cell(two_d_s / times[0].best_s, 1) : text_cell("n/a"),
                   number_cell(per_block_s / times[0].best_s, 0), gbs_cell(payload, times[3].best_s)});
            cudaFree(typed);
            cudaFree(packed);
            cudaFree(copy);
        }
        cudaStreamDestroy(s);
    } catch (const shunt::error& e) {
        std::fprintf(stderr, "bench-gpu-pack: %s\n", e.what());
        return 1;
    }
    return 0;
}
