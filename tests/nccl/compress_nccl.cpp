// tests/nccl/compress_nccl.cpp: an NCCL training loop's float gradients summed with ncclAllReduce, each checked against the sum the program computes itself (run by run_compress_nccl.py, on the CPU double); with --device the same through device buffers on one GPU.
//
// Usage: compress-nccl [--device] exact|lossy [NAN_STEP [TYPE [BOUND]]]
//        compress-nccl [--device] control
//   exact  every ncclAllReduce result must equal the program's own sum bit for bit (no consent;
//          bfloat16 sums, which NCCL rounds at every step, within 1e-2 relative L2 error)
//   lossy  the consented sums within the compressors' bound (relative L2 error under BOUND,
//          default 5e-2), every other call bit for bit, and every result equal on every rank
//   NAN_STEP: at that step rank 1 (or 0) puts a NaN into the largest gradient: that call's result
//          must be NaN exactly there and exact elsewhere (the guard sends it to NCCL unchanged);
//          -1 for none.
//   TYPE: the gradients' type, f32 (default), f16 or bf16 (ncclFloat16, ncclBfloat16); half and
//          bfloat16 values are multiples of 2^-6 below 2 in magnitude, exact in either type.
//   control: the header API on NCCL communicators (<shunt/compress/control_nccl.hpp>), without
//          SHUNT_COMPRESS: a communicator consenting to random-k is compressed, another is not, a
//          scoped "off" keeps a call site exact, error feedback is saved, restored and refused when
//          corrupt.
//   --device: every buffer passed to NCCL is cudaMalloc'ed memory of device 0 (each rank's inputs
//          copied in, results copied out after cudaStreamSynchronize on a stream the program made);
//          in compress-nccl-device (SHUNT_COMPRESS_NCCL_DEVICE, linked with the CUDA runtime) where a
//          device is found, else exit 77. The device path has no NaN guard (a NaN spreads as in the
//          exact sum), so the runner gives no NAN_STEP there.
// Each step: three gradients (one in place) and a loss of one float summed with ncclAllReduce; a
// gradient summed inside ncclGroupStart/End, one reduced with ncclMax and one of int32: calls that
// are never compressed. The values are multiples of 2^-16 below 2 in magnitude, so that every
// float sum of up to 64 ranks is exact in any order: the program's reference is exact, and "bit
// for bit" does not depend on NCCL's order of additions; FP16 (11 bits) cannot hold them exactly,
// so a compressed sum shows an error. MPI only bootstraps and compares.
// Prints one line "compress_nccl: ..." on rank 0; exits 1 on any violation.
#include <shunt/compress/control.hpp>
#include <shunt/compress/control_nccl.hpp>

#include <mpi.h>
#include <nccl.h>
#if SHUNT_COMPRESS_NCCL_DEVICE
#include <cuda_runtime.h>
#endif

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace {

constexpr int steps = 12;
constexpr int tensors = 3;
constexpr int sizes[tensors] = {1 << 20, 65536 + 17, 300000};

int world_rank = 0, world_size = 1;
enum class elem { f32, f16, bf16 } type = elem::f32;
int failures = 0;
double worst = 0;

/// The values of one (rank, t) at one step, computed on demand a block at a time.
struct wave {
    int step = -1;
    std::vector<float> v;
};
std::vector<wave> waves;  // [rank * 8 + t]
constexpr int wave_block = 256;

/// Appends the next block of value(rank, step, t, .): sin(a) + 0.3 cos(b) + 0.01 ((i mod 13) - 6) with
/// a = x (1 + rank) + step, b = 7 x + rank / 2, x = i / 1000 + t, rounded to 2^-16. Each block starts
/// from std::sin and std::cos and rotates (a, b) by their per-element steps. Every rank evaluates
/// every rank's gradients for its reference sums: with a sine and a cosine an element, that took most
/// of the test's time.
void extend(wave& w, int rank, int step, int t) {
    const int i0 = static_cast<int>(w.v.size());
    const double x0 = static_cast<double>(i0) * 0.001 + t, a = x0 * (1 + rank) + step, b = 7 * x0 + rank * 0.5;
    const double da = 0.001 * (1 + rank), db = 0.007;
    const double cda = std::cos(da), sda = std::sin(da), cdb = std::cos(db), sdb = std::sin(db);
    double sa = std::sin(a), ca = std::cos(a), sb = std::sin(b), cb = std::cos(b);
    for (int i = i0; i < i0 + wave_block; ++i) {
        const double v = sa + 0.3 * cb + 0.01 * (i % 13 - 6);
        w.v.push_back(static_cast<float>(std::round(v * 65536) / 65536));
        const double sa1 = sa * cda + ca * sda, sb1 = sb * cdb + cb * sdb;
        ca = ca * cda - sa * sda, cb = cb * cdb - sb * sdb;
        sa = sa1, sb = sb1;
    }
}

/// A gradient-like value, a multiple of 2^-16 in (-2, 2): waves different per rank and step
/// (t < 8: the gradients and the other calls' buffers).
float value(int rank, int step, int t, int i) {
    const auto slot = static_cast<std::size_t>(rank) * 8 + static_cast<std::size_t>(t);
    if (waves.size() <= slot) waves.resize(slot + 1);
    wave& w = waves[slot];
    if (w.step != step) w.step = step, w.v.clear();
    while (static_cast<int>(w.v.size()) <= i) extend(w, rank, step, t);
    return w.v[static_cast<std::size_t>(i)];
}

/// value() at 2^-6 steps: exact in binary16 and bfloat16 (at most 8 significant bits).
float coarse(int rank, int step, int t, int i) { return std::round(value(rank, step, t, i) * 64.0f) / 64.0f; }

/// The value of gradient t (t < tensors: in the run's type; the other calls' are floats).
float element_value(int rank, int step, int t, int i) {
    return type == elem::f32 || t >= tensors ? value(rank, step, t, i) : coarse(rank, step, t, i);
}

/// The 16 bits of a float that binary16 (half) or bfloat16 holds exactly (zero or normal).
std::uint16_t bits16(float f) {
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    if (type == elem::bf16) return static_cast<std::uint16_t>(u >> 16);
    const std::uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a == 0) return static_cast<std::uint16_t>(sign);
    if (a >= 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);  // NaN
    const std::uint32_t e = (a >> 23) - 127 + 15;
    return static_cast<std::uint16_t>(sign | (e << 10) | ((a & 0x7fffffu) >> 13));
}

/// The float of 16 bits (half: normal, zero, Inf or NaN; subnormals do not occur here).
float from16(std::uint16_t h) {
    std::uint32_t u;
    if (type == elem::bf16) {
        u = static_cast<std::uint32_t>(h) << 16;
    } else {
        const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
        u = e == 0 ? sign : e == 0x1f ? sign | 0x7f800000u | (m << 13) : sign | ((e - 15 + 127) << 23) | (m << 13);
    }
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

/// The sum over every rank of element_value(), in double, rounded to float (exact for float and
/// half: see the file's comment).
void reference(int step, int t, int n, std::vector<float>& want) {
    std::vector<double> sum(static_cast<std::size_t>(n), -0.0);  // -0 + x is x, zeros' signs included
    for (int r = 0; r < world_size; ++r)
        for (int i = 0; i < n; ++i) sum[static_cast<std::size_t>(i)] += element_value(r, step, t, i);
    want.assign(sum.begin(), sum.end());
}

double bound = 5e-2;

void nccl_ok(ncclResult_t r, const char* what) {
    if (r == ncclSuccess) return;
    std::fprintf(stderr, "compress_nccl rank %d: %s: %s\n", world_rank, what, ncclGetErrorString(r));
    MPI_Abort(MPI_COMM_WORLD, 1);
}

bool on_device = false;  // --device
// The program's stream with --device; else none (the double's calls on host memory complete before they return).
cudaStream_t stream = nullptr;

#if SHUNT_COMPRESS_NCCL_DEVICE
void cuda_ok(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return;
    std::fprintf(stderr, "compress_nccl rank %d: %s: %s\n", world_rank, what, cudaGetErrorString(e));
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/// The device buffers of one call site, grown to the largest call; `result` is the one NCCL wrote.
struct device_slot {
    void* send = nullptr;
    void* recv = nullptr;
    void* result = nullptr;
    std::size_t bytes = 0;
};
constexpr int slot_count = 8;
device_slot slots[slot_count];
#endif

/// Whether --device can run: a build with CUDA and a device on every rank (device 0 made current).
bool device_ready() {
    int ok = 0;
#if SHUNT_COMPRESS_NCCL_DEVICE
    int n = 0;
    ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0 ? 1 : 0;
    if (ok == 0) (void)cudaGetLastError();
#endif
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
#if SHUNT_COMPRESS_NCCL_DEVICE
    if (ok != 0) {
        cuda_ok(cudaSetDevice(0), "cudaSetDevice(0)");
        cuda_ok(cudaStreamCreate(&stream), "cudaStreamCreate");
    }
#endif
    return ok != 0;
}

void device_release() {
#if SHUNT_COMPRESS_NCCL_DEVICE
    if (!on_device) return;
    for (device_slot& d : slots) {
        cuda_ok(cudaFree(d.send), "cudaFree");
        cuda_ok(cudaFree(d.recv), "cudaFree");
        d = {};
    }
    cuda_ok(cudaStreamDestroy(stream), "cudaStreamDestroy");
    stream = nullptr;
#endif
}

std::size_t bytes_of(std::size_t count, ncclDataType_t t) {
    return count * (t == ncclFloat16 || t == ncclBfloat16 ? 2 : 4);
}

/// The buffers NCCL gets for host data `send` -> `recv` (the same pointer: in place) at call site
/// `slot`: without --device the host buffers themselves (the double takes host memory); with it,
/// the site's device buffers, the input copied in on the program's stream and an output out of
/// place first filled with all bits set (NaN in float and half: a result left unwritten shows).
std::pair<const void*, void*> to_nccl(int slot, const void* send, void* recv, std::size_t bytes) {
#if SHUNT_COMPRESS_NCCL_DEVICE
    if (on_device) {
        device_slot& d = slots[slot];
        if (d.bytes < bytes) {
            cuda_ok(cudaFree(d.send), "cudaFree");
            cuda_ok(cudaFree(d.recv), "cudaFree");
            d = {};
            cuda_ok(cudaMalloc(&d.send, bytes), "cudaMalloc");
            cuda_ok(cudaMalloc(&d.recv, bytes), "cudaMalloc");
            d.bytes = bytes;
        }
        cuda_ok(cudaMemcpyAsync(d.send, send, bytes, cudaMemcpyHostToDevice, stream), "copying an input in");
        d.result = send == recv ? d.send : d.recv;
        if (d.result != d.send) cuda_ok(cudaMemsetAsync(d.result, 0xff, bytes, stream), "filling an output");
        return {d.send, d.result};
    }
#else
    (void)slot, (void)bytes;
#endif
    return {send, recv};
}

/// With --device: waits for the program's stream, as a program does before it reads NCCL's results.
void synchronize() {
#if SHUNT_COMPRESS_NCCL_DEVICE
    if (on_device) cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
#endif
}

/// With --device, once synchronize() returned: the result of call site `slot` copied out to `recv`.
void from_nccl(int slot, void* recv, std::size_t bytes) {
#if SHUNT_COMPRESS_NCCL_DEVICE
    if (on_device) cuda_ok(cudaMemcpy(recv, slots[slot].result, bytes, cudaMemcpyDeviceToHost), "copying a result out");
#else
    (void)slot, (void)recv, (void)bytes;
#endif
}

/// One ncclAllReduce of `count` elements of host data at `send` into `recv` through call site
/// `slot` (see to_nccl), its result in `recv` when it returns; `grouped`: inside
/// ncclGroupStart/End.
void all_reduce(int slot, const void* send, void* recv, std::size_t count, ncclDataType_t t, ncclRedOp_t op,
                ncclComm_t comm, const char* what, bool grouped = false) {
    const std::size_t bytes = bytes_of(count, t);
    const auto [s, r] = to_nccl(slot, send, recv, bytes);
    if (grouped) nccl_ok(ncclGroupStart(), "ncclGroupStart");
    nccl_ok(ncclAllReduce(s, r, count, t, op, comm, stream), what);
    if (grouped) nccl_ok(ncclGroupEnd(), "ncclGroupEnd");
    synchronize();
    from_nccl(slot, recv, bytes);
}

void check(const char* what, int step, const float* got, const std::vector<float>& want, bool exact, int nan_at) {
    if (exact && type == elem::bf16 && std::strcmp(what, "ncclAllReduce") == 0) {
        // NCCL rounds bfloat16 sums at every step, in its order: within a bound, not bit for bit.
        const double keep = bound;
        bound = 1e-2;
        check("bfloat16 ncclAllReduce", step, got, want, false, nan_at);
        bound = keep;
        return;
    }
    double d = 0, w = 0;
    const int n = static_cast<int>(want.size());
    for (int i = 0; i < n; ++i) {
        if (i == nan_at) {
            if (!std::isnan(got[i])) {
                std::fprintf(stderr, "%s step %d: element %d should be NaN, is %g\n", what, step, i, got[i]);
                ++failures;
            }
            continue;
        }
        if (exact && std::memcmp(&got[i], &want[static_cast<std::size_t>(i)], 4) != 0) {
            std::fprintf(stderr, "%s step %d: element %d is %.9g, the sum %.9g\n", what, step, i, got[i],
                         want[static_cast<std::size_t>(i)]);
            ++failures;
            return;
        }
        const double e = static_cast<double>(got[i]) - want[static_cast<std::size_t>(i)];
        d += e * e;
        w += static_cast<double>(want[static_cast<std::size_t>(i)]) * want[static_cast<std::size_t>(i)];
    }
    const double rel = w > 0 ? std::sqrt(d / w) : std::sqrt(d);
    if (rel > worst) worst = rel;
    if (rel > bound) {
        std::fprintf(stderr, "%s step %d: relative error %g\n", what, step, rel);
        ++failures;
    }
}

/// True when every rank holds the same bytes.
bool same_everywhere(const void* v, std::size_t bytes) {
    std::uint64_t h = 1469598103934665603ull;
    const auto* b = static_cast<const unsigned char*>(v);
    for (std::size_t i = 0; i < bytes; ++i) h = (h ^ b[i]) * 1099511628211ull;
    std::uint64_t lo = h, hi = h;
    MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    return lo == hi;
}

/// The relative L2 error of one float ncclAllReduce of value(.., step, which, ..) on `comm`
/// against the program's own sum (exact: see the file's comment), the largest over the ranks.
double sum_error(ncclComm_t comm, int n, int step, int which) {
    std::vector<float> in(static_cast<std::size_t>(n)), out(in.size()), want;
    for (int i = 0; i < n; ++i) in[static_cast<std::size_t>(i)] = value(world_rank, step, which, i);
    all_reduce(7, in.data(), out.data(), in.size(), ncclFloat32, ncclSum, comm, "ncclAllReduce");
    reference(step, which, n, want);
    double d = 0, w = 0;
    for (std::size_t i = 0; i < in.size(); ++i)
        d += (double(out[i]) - want[i]) * (double(out[i]) - want[i]), w += double(want[i]) * want[i];
    double e = std::sqrt(d / w);
    MPI_Allreduce(MPI_IN_PLACE, &e, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return e;
}

void expect(bool ok, const char* what) {
    if (!ok) {
        std::fprintf(stderr, "compress_nccl control rank %d: %s\n", world_rank, what);
        ++failures;
    }
}

ncclComm_t new_comm() {
    ncclUniqueId id{};
    if (world_rank == 0) nccl_ok(ncclGetUniqueId(&id), "ncclGetUniqueId");
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclComm_t comm = nullptr;
    nccl_ok(ncclCommInitRank(&comm, world_size, id, world_rank), "ncclCommInitRank");
    return comm;
}

/// The header API on NCCL communicators (no SHUNT_COMPRESS): random-k consented on `a` only (the
/// compressor that pays on the NCCL path's flat schemes under the built-in model; its error
/// feedback gives a checkpoint to save), an "off" call site inside it, another communicator.
int control_main() {
    namespace sc = shunt::compress;
    expect(sc::preloaded(), "libshunt.so is not found in the process");
    ncclComm_t a = new_comm(), b = new_comm();
    expect(sc::set_consent(a, "randomk"), "set_consent refused randomk");
    bool threw = false;
    try {
        sc::set_consent(a, "zip");
    } catch (const shunt::error&) {
        threw = true;
    }
    expect(threw, "set_consent accepted zip");
    const int n = 1 << 20, rounds = 8;
    double exact_site = 0, lossy_site = 0, other_comm = 0;
    for (int step = 0; step < rounds; ++step) {
        {
            const sc::scoped_consent off("off");  // this call site stays exact on `a`
            exact_site = std::max(exact_site, sum_error(a, n, step, 0));
        }
        lossy_site = sum_error(a, n, step, 1);
        other_comm = std::max(other_comm, sum_error(b, n, step, 1));
    }
    // Exact sums are the program's bit for bit; random-k's keep one element in 100. Nodes of 2
    // ranks (SHUNT_TOPOLOGY=node=2): 4 ranks make 2 nodes, fewer one node, kept exact.
    expect(exact_site == 0, "the call site in an \"off\" scope was not exact");
    expect(other_comm == 0, "a communicator without consent was not exact");
    if (world_size >= 4) expect(lossy_site > 0.1, "the consenting communicator was not compressed");
    if (world_size < 4) expect(lossy_site == 0, "one node's sums were compressed");
    const std::vector<std::byte> saved = sc::save_feedback(a);
    expect(saved.size() > 8, "nothing saved");
    // A residual of at least the slice each rank owns in its node of 2 (the hierarchical schemes).
    if (world_size >= 4) expect(saved.size() > std::size_t{4} * n / 2, "the saved state has no residual");
    expect(sc::restore_feedback(a, saved), "the saved state was refused");
    expect(sc::save_feedback(a) == saved, "restoring changed the state");
    std::vector<std::byte> garbage = saved;
    garbage[garbage.size() / 2] ^= std::byte{0x5a};
    expect(garbage.size() <= 12 || !sc::restore_feedback(a, garbage), "a corrupt state was accepted");
    expect(sc::save_feedback(a) == saved, "a refused restore changed the state");
    // A new communicator takes the state at its first plan (the "off" site stays outside the
    // pattern): after 5 steps the plan exists and holds the restored state's shape.
    ncclComm_t c = new_comm();
    expect(sc::set_consent(c, "randomk"), "set_consent refused randomk on a new communicator");
    expect(sc::restore_feedback(c, saved), "a state for a later plan was refused");
    for (int step = 0; step < 5; ++step) {
        {
            const sc::scoped_consent off("off");
            sum_error(c, n, step, 0);
        }
        sum_error(c, n, step, 1);
    }
    expect(sc::save_feedback(c).size() == saved.size(), "the new communicator's state differs in shape");
    for (ncclComm_t x : {a, b, c}) nccl_ok(ncclCommDestroy(x), "ncclCommDestroy");
    device_release();
    int any = 0;
    MPI_Allreduce(&failures, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (world_rank == 0)
        std::printf(
            "compress_nccl control: %d ranks%s, exact site %.3g, other communicator %.3g, random-k site %.3g, %d "
            "failures\n",
            world_size, on_device ? " (device buffers)" : "", exact_site, other_comm, lossy_site, any);
    MPI_Finalize();
    return any != 0;
}

}  // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    if (argc > 1 && std::strcmp(argv[1], "--device") == 0) {
        on_device = true;
        --argc, ++argv;
        if (!device_ready()) {
            if (world_rank == 0) std::printf("compress_nccl: skipped: no CUDA device (or a build without CUDA)\n");
            MPI_Finalize();
            return 77;
        }
    }
    if (argc > 1 && std::strcmp(argv[1], "control") == 0) return control_main();
    const bool exact = argc > 1 && std::strcmp(argv[1], "exact") == 0;
    const int nan_step = argc > 2 ? std::atoi(argv[2]) : -1;
    const int nan_rank = world_size > 1 ? 1 : 0;
    if (argc > 3)
        type = std::strcmp(argv[3], "f16") == 0    ? elem::f16
               : std::strcmp(argv[3], "bf16") == 0 ? elem::bf16
                                                   : elem::f32;
    if (argc > 4) bound = std::atof(argv[4]);
    const ncclDataType_t nccl_type = type == elem::f32 ? ncclFloat32 : type == elem::f16 ? ncclFloat16 : ncclBfloat16;
    const char* type_name = type == elem::f32 ? "float" : type == elem::f16 ? "half" : "bfloat16";

    ncclUniqueId id{};
    if (world_rank == 0) nccl_ok(ncclGetUniqueId(&id), "ncclGetUniqueId");
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclComm_t comm = nullptr;
    nccl_ok(ncclCommInitRank(&comm, world_size, id, world_rank), "ncclCommInitRank");

    std::vector<float> in[tensors], out[tensors], want;
    std::vector<std::uint16_t> in16[tensors], out16[tensors];  // half and bfloat16 gradients
    for (int t = 0; t < tensors; ++t) {
        in[t].resize(static_cast<std::size_t>(sizes[t]));
        out[t].resize(static_cast<std::size_t>(sizes[t]));
    }
    constexpr int other = 200000;  // the grouped, the max and the int32 calls
    std::vector<float> g(other), gmax(other);
    std::vector<std::int32_t> gi(other);
    bool identical = true;
    long long calls = 0;
    for (int step = 0; step < steps; ++step) {
        // The step's gradients are all there before their sums, which go one call after another as
        // a training step issues them (the plan weighs the compute between stream-ordered calls),
        // the loss last; the checks follow.
        const void* send[tensors + 1];
        void* recv[tensors + 1];
        std::size_t count[tensors + 1];
        for (int t = 0; t < tensors; ++t) {
            const auto n = static_cast<std::size_t>(sizes[t]);
            for (std::size_t i = 0; i < n; ++i) in[t][i] = element_value(world_rank, step, t, static_cast<int>(i));
            if (step == nan_step && t == 0 && world_rank == nan_rank) in[t][n / 3] = NAN;
            send[t] = in[t].data();
            recv[t] = out[t].data();
            if (type != elem::f32) {
                in16[t].resize(n);
                out16[t].resize(n);
                for (std::size_t i = 0; i < n; ++i) in16[t][i] = bits16(in[t][i]);
                send[t] = in16[t].data();
                recv[t] = out16[t].data();
                if (t == 1) out16[t] = in16[t];
            } else if (t == 1) {
                out[t] = in[t];
            }
            if (t == 1) send[t] = recv[t];  // in place
            count[t] = n;
        }
        float loss = static_cast<float>(world_rank) + 0.5f * static_cast<float>(step), total = 0;
        send[tensors] = &loss;
        recv[tensors] = &total;
        count[tensors] = 1;
        const void* nccl_send[tensors + 1];
        void* nccl_recv[tensors + 1];
        for (int k = 0; k <= tensors; ++k)
            std::tie(nccl_send[k], nccl_recv[k]) =
                to_nccl(k, send[k], recv[k], bytes_of(count[k], k < tensors ? nccl_type : ncclFloat32));
        for (int t = 0; t < tensors; ++t)
            nccl_ok(ncclAllReduce(nccl_send[t], nccl_recv[t], count[t], nccl_type, ncclSum, comm, stream),
                    t == 1 ? "ncclAllReduce in place" : "ncclAllReduce");
        nccl_ok(ncclAllReduce(nccl_send[tensors], nccl_recv[tensors], 1, ncclFloat32, ncclSum, comm, stream),
                "ncclAllReduce of the loss");
        synchronize();
        for (int k = 0; k <= tensors; ++k)
            from_nccl(k, recv[k], bytes_of(count[k], k < tensors ? nccl_type : ncclFloat32));
        for (int t = 0; t < tensors; ++t) {
            const int n = sizes[t];
            const int nan_at = step == nan_step && t == 0 ? n / 3 : -1;
            if (type != elem::f32)
                for (std::size_t i = 0; i < count[t]; ++i) out[t][i] = from16(out16[t][i]);
            ++calls;
            reference(step, t, n, want);
            check("ncclAllReduce", step, out[t].data(), want, exact || nan_at >= 0, nan_at);
            identical = identical && same_everywhere(out[t].data(), out[t].size() * 4);
        }
        float total_want = 0;
        for (int r = 0; r < world_size; ++r) total_want += static_cast<float>(r) + 0.5f * static_cast<float>(step);
        if (total != total_want) {
            std::fprintf(stderr, "loss step %d: %g, the sum %g\n", step, total, total_want);
            ++failures;
        }
        // Never compressed: a grouped sum, a maximum, an int32 sum; each exact.
        for (int i = 0; i < other; ++i) {
            g[static_cast<std::size_t>(i)] = value(world_rank, step, 5, i);
            gi[static_cast<std::size_t>(i)] = (i % 1000 - 500) * (world_rank + 1) + step;
        }
        all_reduce(4, g.data(), g.data(), other, ncclFloat32, ncclSum, comm, "grouped ncclAllReduce", true);
        reference(step, 5, other, want);
        check("grouped ncclAllReduce", step, g.data(), want, true, -1);
        for (int i = 0; i < other; ++i) g[static_cast<std::size_t>(i)] = value(world_rank, step, 6, i);
        all_reduce(5, g.data(), gmax.data(), other, ncclFloat32, ncclMax, comm, "ncclAllReduce max");
        for (int i = 0; i < other; ++i) {
            float m = value(0, step, 6, i);
            for (int r = 1; r < world_size; ++r) m = std::fmax(m, value(r, step, 6, i));
            if (gmax[static_cast<std::size_t>(i)] != m) {
                std::fprintf(stderr, "ncclMax step %d: element %d is %g, the maximum %g\n", step, i,
                             gmax[static_cast<std::size_t>(i)], m);
                ++failures;
                break;
            }
        }
        all_reduce(6, gi.data(), gi.data(), other, ncclInt32, ncclSum, comm, "ncclAllReduce int32");
        for (int i = 0; i < other; ++i) {
            std::int32_t s = 0;
            for (int r = 0; r < world_size; ++r) s += (i % 1000 - 500) * (r + 1) + step;
            if (gi[static_cast<std::size_t>(i)] != s) {
                std::fprintf(stderr, "int32 sum step %d: element %d is %d, the sum %d\n", step, i,
                             gi[static_cast<std::size_t>(i)], s);
                ++failures;
                break;
            }
        }
    }
    if (!identical) {
        std::fprintf(stderr, "results differ between ranks\n");
        ++failures;
    }
    nccl_ok(ncclCommDestroy(comm), "ncclCommDestroy");
    device_release();
    int any = 0;
    MPI_Allreduce(&failures, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (world_rank == 0)
        std::printf(
            "compress_nccl: %d ranks, %d steps, %lld %s gradient sums%s, %s, largest relative error %.3g, %d "
            "failures\n",
            world_size, steps, calls, type_name, on_device ? " in device buffers" : "", exact ? "exact" : "lossy",
            worst, any);
    MPI_Finalize();
    return any != 0;
}
