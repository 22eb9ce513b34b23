// interpose/compress_nccl.cpp: ncclAllReduce under gradient compression: the pattern of calls per NCCL communicator, the plan agreed through NCCL itself, and the compressed forms exchanged with NCCL's ncclAllReduce or ncclAllGather on the caller's stream: the host compressors (with the guard) for host buffers, as the CPU double of NCCL has them; the CUDA compressors, stream-ordered, for device buffers.
#include "compress_nccl.hpp"

#include <shunt/collectives/compressed.hpp>
#include <shunt/compress/gpu.hpp>
#include <shunt/gpu/memory.hpp>
#include <shunt/gpu/pack.hpp>
#include <shunt/log.hpp>
#include <shunt/model/measure.hpp>
#include <shunt/plan/call_pattern.hpp>
#include <shunt/plan/compress.hpp>
#include <shunt/topology/spec.hpp>

#include "compress.hpp"
#include "nccl.hpp"
#include "runtime.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace shunt::detail {
namespace {

/// A block of device scratch that grows to the largest size asked for.
struct device_buffer {
    gpu::pool_block b;
    void* get(std::size_t bytes, gpu::stream_t stream) {
        if (b.ptr != nullptr && b.bytes >= bytes) return b.ptr;
        if (b.ptr != nullptr) {
            // The pool may hand the block to other streams: the work queued on it ends first.
            gpu::synchronize(stream);
            gpu::pool_release(b);
            b = {};
        }
        b = gpu::pool_acquire(gpu::pool_kind::device, std::max<std::size_t>(bytes, 256));
        return b.ptr;
    }
    device_buffer() = default;
    device_buffer(device_buffer&& o) noexcept : b(std::exchange(o.b, {})) {}
    device_buffer& operator=(device_buffer&& o) noexcept {
        std::swap(b, o.b);
        return *this;
    }
    /// With its communicator (ncclCommDestroy or ncclCommAbort: its work is done or abandoned).
    ~device_buffer() {
        if (b.ptr != nullptr) gpu::pool_release(b);
    }
};

/// What the compression path keeps of one NCCL communicator.
struct nccl_state {
    std::mutex mutex;
    int nranks = 0, rank = 0;
    bool shaped = false;
    compress_shape shape;
    call_pattern pattern{1024};
    struct position {
        std::int64_t count = 0;
        compress_consent consent;
    };
    std::vector<position> seen;
    std::vector<compress_option> plan;
    bool device = false;  ///< the plan is for device buffers
    struct site {
        std::uint64_t calls = 0;
        compression_point point;  ///< host buffers
        device_buffer residual;  ///< device buffers: the residual (count floats, zeroed when the shape changes)
        std::int64_t residual_count = -1;
        std::uint64_t step = 0;
    };
    std::vector<site> sites;
    compressed_scratch scratch;
    device_buffer message, parts, corrected, mine, workspace;
};

std::mutex states_mutex;
std::map<ncclComm_t, std::shared_ptr<nccl_state>>& states() {
    static auto* m = new std::map<ncclComm_t, std::shared_ptr<nccl_state>>;  // never destroyed
    return *m;
}

std::uint64_t signature(std::int64_t count, const compress_consent& c) {
    std::uint64_t h = compress::detail::mix64(0x6e63636cull ^ static_cast<std::uint64_t>(count));
    return compress::detail::mix64(h ^ (static_cast<std::uint64_t>(c.on) << 8 | c.methods));
}

/// This rank's node: by SHUNT_TOPOLOGY's node level (group sizes or labels by rank), else by host
/// name.
std::int64_t node_label(const std::string& topology, int rank, int nranks) {
    if (!topology.empty()) {
        const topology_spec spec = parse_topology_spec(topology);
        for (const level_spec& l : spec.levels) {
            if (l.name != "node") continue;
            if (l.kind == grouping_kind::labels && static_cast<int>(l.values.size()) == nranks)
                return l.values[static_cast<std::size_t>(rank)];
            if (l.kind == grouping_kind::sizes && !l.values.empty()) {
                std::int64_t start = 0;
                for (std::size_t i = 0;; ++i) {
                    const std::int64_t n = std::max<std::int64_t>(1, l.values[i % l.values.size()]);
                    if (rank < start + n) return static_cast<std::int64_t>(i);
                    start += n;
                }
            }
        }
    }
    char host[256] = {0};
    if (::gethostname(host, sizeof host - 1) != 0) return 0;
    std::uint64_t h = 1469598103934665603ull;
    for (const char* c = host; *c != '\0'; ++c) h = (h ^ static_cast<unsigned char>(*c)) * 1099511628211ull;
    return static_cast<std::int64_t>(h >> 1);
}

/// Runs `f(buffer)` on `bytes` bytes of host data where NCCL takes them: the host data itself for
/// host buffers (the double), else a device copy, copied back and the stream synchronised.
template <class F>
ncclResult_t in_nccl_memory(bool device, void* host, std::size_t bytes, cudaStream_t stream, F f) {
    if (!device) return f(host);
    const gpu::scoped_block b(gpu::pool_acquire(gpu::pool_kind::device, bytes));
    gpu::copy(b.b.ptr, host, bytes, reinterpret_cast<gpu::stream_t>(stream));
    const ncclResult_t r = f(b.b.ptr);
    gpu::copy(host, b.b.ptr, bytes, reinterpret_cast<gpu::stream_t>(stream));
    gpu::synchronize(reinterpret_cast<gpu::stream_t>(stream));
    return r;
}

void check(ncclResult_t r, const char* what) {
    if (r != ncclSuccess) throw error(std::string("compressed ncclAllReduce: ") + what + " failed");
}

/// The shape: the ranks' node labels gathered, the nodes' sizes (regular when all equal).
compress_shape shape_of(const nccl_real& real, ncclComm_t comm, int rank, int nranks, const std::string& topology,
                        bool device, cudaStream_t stream) {
    std::vector<std::int64_t> labels(static_cast<std::size_t>(nranks));
    labels[static_cast<std::size_t>(rank)] = node_label(topology, rank, nranks);
    check(in_nccl_memory(device, labels.data(), labels.size() * 8, stream,
                         [&](void* p) {
                             auto* l = static_cast<std::int64_t*>(p);
                             return real.all_gather(l + rank, l, 1, ncclInt64, comm, stream);
                         }),
          "gathering the nodes");
    std::map<std::int64_t, int> sizes;
    for (const std::int64_t l : labels) ++sizes[l];
    int most = 0;
    bool regular = true;
    for (const auto& [l, n] : sizes) {
        regular = regular && n == sizes.begin()->second;
        most = std::max(most, n);
    }
    compress_shape s = compress_shape::nodes_of(nranks, most);
    s.regular = s.regular && regular;
    return s;
}

/// The plan for the confirmed pattern of `c` (collective over comm, through NCCL).
void make_plan(runtime& rt, const nccl_real& real, nccl_state& c, ncclComm_t comm, bool device, cudaStream_t stream) {
    const std::size_t P = c.pattern.period();
    const cost_model& model = rt.model();
    const std::vector<double> gaps = c.pattern.gaps();
    if (!c.shaped) {
        c.shape = shape_of(real, comm, c.rank, c.nranks, rt.cfg().topology, device, stream);
        // The exact path is NCCL's own collective unless SHUNT_NCCL=shunt forces shunt's schedule
        // (SHUNT_NCCL=auto takes it only from measured nccl.* tables, which this model has not).
        c.shape.exact_schedules = rt.cfg().nccl == nccl_choice::shunt;
        c.shaped = true;
    }
    const compress_places places{!device, device, false, false};
    std::vector<double> v(2 * P, 0.0);
    for (std::size_t i = 0; i < P; ++i) {
        std::int64_t t = rt.cfg().compress_min_bytes;
        if (t <= 0) t = compress_threshold(model, c.shape, compress_op::allreduce, 4, c.seen[i].consent, places);
        v[i] = i < gaps.size() ? gaps[i] : 0.0;
        v[P + i] = c.seen[i].count * 4 >= t ? 0.0 : 1.0;
    }
    check(in_nccl_memory(device, v.data(), v.size() * 8, stream,
                         [&](void* p) { return real.all_reduce(p, p, v.size(), ncclFloat64, ncclMax, comm, stream); }),
          "agreeing on the gaps");
    std::vector<compress_tensor> tensors(P);
    std::vector<double> costs;
    for (std::size_t i = 0; i < P; ++i) {
        tensors[i].gap = v[i];
        tensors[i].bytes = c.seen[i].count * 4;
        const compress_consent consent = v[P + i] == 0 ? c.seen[i].consent : compress_consent{};
        tensors[i].options =
            predict_options(model, c.shape, compress_op::allreduce, c.seen[i].count, 4, consent, places);
        for (const option_cost& o : tensors[i].options) costs.insert(costs.end(), {o.encode, o.comm, o.decode});
    }
    check(in_nccl_memory(
              device, costs.data(), costs.size() * 8, stream,
              [&](void* p) { return real.all_reduce(p, p, costs.size(), ncclFloat64, ncclMax, comm, stream); }),
          "agreeing on the predictions");
    std::size_t k = 0;
    for (compress_tensor& t : tensors)
        for (option_cost& o : t.options) o.encode = costs[k++], o.comm = costs[k++], o.decode = costs[k++];
    // Device buffers: stream-ordered calls, whose communication overlaps the compute between
    // them; host buffers (the double): blocking calls.
    const compress_plan result = plan_compression(tensors, device);
    std::vector<std::uint8_t> codes(P);
    for (std::size_t i = 0; i < P; ++i) codes[i] = tensors[i].options[result.choice[i]].option.code();
    check(in_nccl_memory(device, codes.data(), codes.size(), stream,
                         [&](void* p) { return real.broadcast(p, p, codes.size(), ncclUint8, 0, comm, stream); }),
          "agreeing on the plan");
    c.plan.resize(P);
    for (std::size_t i = 0; i < P; ++i) c.plan[i] = compress_option::from_code(codes[i]);
    c.device = device;
    c.sites.clear();
    c.sites.resize(P);
    for (auto& s : c.sites) s.calls = 3;
    rt.compression().count_plan();
    if (c.rank != 0 || !log_enabled(log_level::debug, log_category::decide)) return;
    std::size_t compressed = 0;
    for (const compress_option& o : c.plan) compressed += o.exact() ? 0 : 1;
    log_debug(log_category::decide,
              "NCCL compression plan for a pattern of %zu ncclAllReduce calls on %d ranks in nodes of %d (%s "
              "buffers): %zu compressed; predicted iteration %.3g ms exact, %.3g ms planned; decided in %.3g ms",
              P, c.nranks, c.shape.per_node, device ? "device" : "host", compressed, result.exact_s * 1e3,
              result.planned_s * 1e3, result.decide_s * 1e3);
    for (std::size_t i = 0; i < P && i < 64; ++i) {
        const compress_tensor& t = tensors[i];
        const option_cost& chosen = t.options[result.choice[i]];
        std::size_t alt = 0;  // the best option other than the chosen one
        for (std::size_t j = 0; j < t.options.size(); ++j)
            if (j != result.choice[i] && (alt == result.choice[i] || t.options[j].total() < t.options[alt].total()))
                alt = j;
        std::string why = "below the size threshold, or no compressor allowed";
        if (t.options.size() > 1) {
            char buf[256];
            std::snprintf(buf, sizeof buf, "predicted %.3g ms (encode %.3g, exchange %.3g, decode %.3g); %s %.3g ms",
                          chosen.total() * 1e3, chosen.encode * 1e3, chosen.comm * 1e3, chosen.decode * 1e3,
                          to_string(t.options[alt].option).c_str(), t.options[alt].total() * 1e3);
            why = buf;
        }
        log_debug(log_category::decide, "  position %zu: ncclAllReduce of %" PRId64 " floats -> %s (%s)", i,
                  c.seen[i].count, to_string(c.plan[i]).c_str(), why.c_str());
    }
}

ncclDataType_t sum_type(compress::sum_form f) {
    return f == compress::sum_form::f16 ? ncclFloat16 : f == compress::sum_form::bf16 ? ncclBfloat16 : ncclFloat32;
}

/// The host schemes (host buffers): as collectives/compressed.hpp's flat ones, through NCCL; the
/// guard's flag travels with every part, so every rank sees the same verdict.
compressed_status host_all_reduce(const nccl_real& real, ncclComm_t comm, cudaStream_t stream, const float* in,
                                  float* out, std::int64_t n, int nranks, const compress_option& o,
                                  compression_point& pt, compressed_scratch& s) {
    using namespace detail::ccoll;
    const compress::params prm = compress_params(o.method);
    const bool feedback = uses_feedback(o.method);
    const std::uint64_t step = pt.step;
    bool finite = true;
    const float* src = corrected_input(o, in, n, pt.first, s.work, finite);
    bool bad = !finite;
    ensure(s.acc, n);
    if (feedback) ensure(s.mine, n);
    float* mine = feedback ? s.mine.data() : nullptr;
    const std::int64_t words = message_words(prm, n);
    ensure(s.send, words);
    if (o.scheme == compress_scheme::allreduce) {
        const compress::sum_form form = compress::summable(o.method);
        bad = !compress_message(o, src, n, s.send.data(), mine, step, bad) || bad;
        const std::uint32_t nan_word = form == compress::sum_form::f32   ? 0x7fc00000u
                                       : form == compress::sum_form::f16 ? 0x7e007e00u
                                                                         : 0x7fc07fc0u;
        s.send[static_cast<std::size_t>(words - 1)] = bad ? nan_word : 0u;
        const std::size_t elements = static_cast<std::size_t>(form == compress::sum_form::f32 ? words : 2 * words);
        check(real.all_reduce(s.send.data(), s.send.data(), elements, sum_type(form), ncclSum, comm, stream),
              "ncclAllReduce of the compressed form");
        if (s.send[static_cast<std::size_t>(words - 1)] != 0) return compressed_status::not_finite;
        compress::decompress(prm, reinterpret_cast<const std::byte*>(s.send.data()), n, s.acc.data(), step);
    } else {
        ensure(s.recv, words * nranks);
        compress_message(o, src, n, s.send.data(), mine, step, bad);
        check(
            real.all_gather(s.send.data(), s.recv.data(), static_cast<std::size_t>(words) * 4, ncclUint8, comm, stream),
            "ncclAllGather of the compressed parts");
        for (int r = 0; r < nranks; ++r)
            if (flagged(prm, s.recv.data() + r * words, n)) return compressed_status::not_finite;
        for (int r = 0; r < nranks; ++r) {
            const auto* part = reinterpret_cast<const std::byte*>(s.recv.data() + r * words);
            if (r == 0)
                compress::decompress(prm, part, n, s.acc.data(), step);
            else
                compress::decompress_accumulate(prm, part, n, s.acc.data(), step);
        }
    }
    if (!compress::all_finite(s.acc.data(), n)) return compressed_status::not_finite;
    stage_feedback(s, pt, feedback ? n : -1, -1);
    commit_feedback(s);
    std::memcpy(out, s.acc.data(), static_cast<std::size_t>(n) * 4);
    return compressed_status::done;
}

/// The device schemes: the CUDA compressors and NCCL on `stream`, no host synchronisation (and so
/// no guard: a NaN or Inf spreads over its block, or its element, as the exact sum spreads it).
ncclResult_t device_all_reduce(const nccl_real& real, ncclComm_t comm, cudaStream_t stream, const float* in, float* out,
                               std::int64_t n, int nranks, const compress_option& o, nccl_state& c,
                               nccl_state::site& site) {
    namespace cg = compress::gpu;
    const compress::params prm = compress_params(o.method);
    const auto st = reinterpret_cast<gpu::stream_t>(stream);
    const std::size_t floats = static_cast<std::size_t>(n) * 4;
    const std::int64_t cb = compress::compressed_bytes(prm, n);
    const std::size_t stride = static_cast<std::size_t>((cb + 3) / 4 * 4);
    const float* src = in;
    float* corrected = nullptr;
    float* mine = nullptr;
    float* residual = nullptr;
    if (uses_feedback(o.method)) {
        residual = static_cast<float*>(site.residual.get(floats, st));
        if (site.residual_count != n) {  // a new shape: the residual starts from zeros
            std::vector<float> zeros(static_cast<std::size_t>(n), 0.0f);
            gpu::copy(residual, zeros.data(), floats, st);
            gpu::synchronize(st);
            site.residual_count = n;
        }
        corrected = static_cast<float*>(c.corrected.get(floats, st));
        mine = static_cast<float*>(c.mine.get(floats, st));
        cg::feedback_apply(in, residual, corrected, n, st);
        src = corrected;
    }
    void* msg = c.message.get(stride, st);
    void* ws = cg::workspace_bytes(prm, n) > 0
                   ? c.workspace.get(static_cast<std::size_t>(cg::workspace_bytes(prm, n)), st)
                   : nullptr;
    cg::compress(prm, src, n, msg, ws, st, site.step);
    if (residual != nullptr) {
        cg::decompress(prm, msg, n, mine, st, site.step);
        cg::feedback_update(corrected, mine, residual, n, st);
    }
    ncclResult_t r = ncclSuccess;
    if (o.scheme == compress_scheme::allreduce) {
        const compress::sum_form form = compress::summable(o.method);
        const std::size_t elements = static_cast<std::size_t>(form == compress::sum_form::f32 ? cb / 4 : cb / 2);
        r = real.all_reduce(msg, msg, elements, sum_type(form), ncclSum, comm, stream);
        if (r == ncclSuccess) cg::decompress(prm, msg, n, out, st, site.step);
    } else {
        auto* parts = static_cast<std::byte*>(c.parts.get(stride * static_cast<std::size_t>(nranks), st));
        r = real.all_gather(msg, parts, stride, ncclUint8, comm, stream);
        if (r == ncclSuccess) {
            cg::decompress(prm, parts, n, out, st, site.step);
            for (int k = 1; k < nranks; ++k)
                cg::decompress_accumulate(prm, parts + stride * static_cast<std::size_t>(k), n, out, st, site.step);
        }
    }
    ++site.step;
    return r;
}

/// Which path the buffers take (false: none, the call goes to NCCL unchanged): device or managed
/// memory the CUDA compressors, stream-ordered; host memory the host compressors, only where no
/// device can run NCCL (the CPU double): with a device, NCCL's host-memory calls would be stream-
/// ordered after kernels the host path cannot wait for. Without CUDA in this build shunt cannot
/// tell device memory from host memory, so the host path needs the driver absent from the process.
/// Every rank's buffers are of the same kind in a valid NCCL program, so every rank decides alike.
bool path_of(const void* sendbuff, const void* recvbuff, bool& device) {
    const auto on_device = [](const void* p) {
        const gpu::memory_kind k = gpu::classify(p);
        return k == gpu::memory_kind::device || k == gpu::memory_kind::managed;
    };
    device = on_device(sendbuff) || on_device(recvbuff);
    if (device) return gpu::device_available();
    if (gpu::device_available()) return false;
    if (!gpu::built_with_cuda()) {
        static const bool driver_loaded = [] {
            void* h = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
            if (h != nullptr) ::dlclose(h);
            return h != nullptr;
        }();
        if (driver_loaded) return false;
    }
    return true;
}

}  // namespace

void nccl_compression_forget(ncclComm_t comm) noexcept {
    try {
        const std::lock_guard lock(states_mutex);
        states().erase(comm);
    } catch (...) {}
}

bool nccl_compressed_all_reduce(runtime& rt, const nccl_real& real, const void* sendbuff, void* recvbuff,
                                std::size_t count, ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
                                cudaStream_t stream, ncclResult_t& result) noexcept {
    compress_executor& exec = rt.compression();
    const compress_consent consent = exec.thread_or_environment();
    if (!consent.on || consent.methods == 0 || type != ncclFloat32 || op != ncclSum || count == 0 ||
        count > (std::size_t{1} << 40) || recvbuff == nullptr || real.all_reduce == nullptr ||
        real.all_gather == nullptr || real.broadcast == nullptr || real.comm_count == nullptr ||
        real.comm_user_rank == nullptr)
        return false;
    std::shared_ptr<nccl_state> c;
    try {
        const std::lock_guard lock(states_mutex);
        auto& slot = states()[comm];
        if (slot == nullptr) {
            slot = std::make_shared<nccl_state>();
            if (real.comm_count(comm, &slot->nranks) != ncclSuccess ||
                real.comm_user_rank(comm, &slot->rank) != ncclSuccess)
                slot->nranks = 0;
        }
        c = slot;
    } catch (...) {
        return false;
    }
    if (c->nranks <= 1) return false;
    const auto n = static_cast<std::int64_t>(count);
    bool device = false;
    if (!path_of(sendbuff, recvbuff, device)) return false;
    const std::lock_guard lock(c->mutex);
    const call_pattern::step step = c->pattern.next(signature(n, consent), now_s());
    struct end_mark {  // the call's return, for the gaps (whichever way it returns)
        call_pattern& p;
        ~end_mark() { p.ended(now_s()); }
    } mark{c->pattern};
    try {
        if (!step.locked) {
            c->plan.clear();
            exec.count_unlocked();
            return false;
        }
        if (step.fresh) {
            c->plan.clear();
            c->seen.assign(c->pattern.period(), {});
        }
        c->seen[step.position] = {n, consent};
        if (step.confirmed) {
            make_plan(rt, real, *c, comm, device, stream);
            exec.count_warmup();
            return false;
        }
        if (c->plan.empty() || c->device != device) {
            exec.count_unlocked();
            return false;
        }
        nccl_state::site& site = c->sites[step.position];
        const compress_option o = c->plan[step.position];
        if (o.exact()) {
            exec.count_planned_exact();
            return false;
        }
        if (++site.calls <= static_cast<std::uint64_t>(rt.cfg().compress_warmup)) {
            exec.count_warmup();
            return false;
        }
        const auto* in = static_cast<const float*>(sendbuff);
        auto* out = static_cast<float*>(recvbuff);
        if (device) {
            result = device_all_reduce(real, comm, stream, in, out, n, c->nranks, o, *c, site);
        } else if (host_all_reduce(real, comm, stream, in, out, n, c->nranks, o, site.point, c->scratch) !=
                   compressed_status::done) {
            exec.count_fallback();
            if (c->rank == 0 && exec.first_nonfinite())
                log_warn(log_category::decide,
                         "ncclAllReduce: NaN or Inf in a compressed reduction's input or result on some rank; that "
                         "call ran exact (said once)");
            return false;
        } else {
            result = ncclSuccess;
        }
        exec.count_compressed(static_cast<std::size_t>(o.method), static_cast<std::uint64_t>(n),
                              static_cast<std::uint64_t>(compress::compressed_bytes(compress_params(o.method), n)));
        return true;
    } catch (const std::exception& e) {
        // A plan or a compressor that cannot run here (no device for the CUDA compressors): the
        // same on every rank, before any exchange of the call.
        log_warn(log_category::decide, "ncclAllReduce: compression failed (%s); this communicator stays exact",
                 e.what());
        c->plan.clear();
        c->sites.clear();
        return false;
    }
}

}  // namespace shunt::detail
