// interpose/compress_nccl.cpp: ncclAllReduce under gradient compression: the pattern of calls per NCCL communicator, the plan agreed through NCCL itself, and the compressed forms exchanged with NCCL's own collectives on the caller's stream (flat, or hierarchical on the node and rail communicators): the host compressors (with the guard) for host buffers, as the CPU double of NCCL has them; the CUDA compressors, stream-ordered, for device buffers.
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
#include "device_stage.hpp"
#include "export.hpp"
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
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace shunt::detail {
namespace {

/// What the compression path keeps of one NCCL communicator.
struct nccl_state {
    std::mutex mutex;
    int nranks = 0, rank = 0;
    bool shaped = false;
    compress_shape shape;
    call_pattern pattern{1024};
    struct position {
        std::int64_t count = 0;
        compress::element type = compress::element::f32;
        compress_consent consent;
    };
    std::vector<position> seen;
    std::vector<compress_option> plan;
    bool device = false;  ///< the plan is for device buffers
    /// Device buffers' error feedback at one point: count floats, zeroed when the count changes.
    struct device_residual {
        device_buffer buffer;
        std::int64_t count = -1;
        /// The residual for n floats on `stream`, zeros where the count changed (the stream
        /// synchronised once, at that change).
        float* ready(std::int64_t n, gpu::stream_t stream);
    };
    struct site {
        std::uint64_t calls = 0;
        compression_point point;  ///< host buffers
        /// Device buffers: the residual of the whole tensor, and (alltoall+allgather) that of the
        /// re-compressed sum of this rank's slice, as compression_point's first and second.
        device_residual first, second;
        std::uint64_t step = 0;
        cudaStream_t stream = nullptr;  ///< the stream of the site's last compressed call
    };
    std::vector<site> sites;
    compressed_scratch scratch;
    std::vector<float> wide_in, wide_out, exact;  ///< half and bfloat16 data widened; shadow checks' exact sum
    std::uint64_t compressed = 0;  ///< compressed calls (shadow checks count them)
    device_buffer message, parts, corrected, mine, workspace, shadow, wide_in_dev, wide_out_dev, owned_dev, summed;
    /// The node and rail communicators of the hierarchical schemes (nccl_executor's), null where
    /// the plan offers none.
    const nccl_levels* levels = nullptr;
    // What the header API set on this communicator: its consent, error feedback to restore.
    std::optional<compress_consent> consent;
    std::vector<std::byte> restore;
    bool queried = false;  ///< nranks and rank asked of NCCL
};

float* nccl_state::device_residual::ready(std::int64_t n, gpu::stream_t stream) {
    auto* r = static_cast<float*>(buffer.get(static_cast<std::size_t>(n) * 4, stream));
    if (count != n) {  // a new shape: the residual starts from zeros
        const std::vector<float> zeros(static_cast<std::size_t>(n), 0.0f);
        gpu::copy(r, zeros.data(), static_cast<std::size_t>(n) * 4, stream);
        gpu::synchronize(stream);
        count = n;
    }
    return r;
}

std::mutex states_mutex;
std::map<ncclComm_t, std::shared_ptr<nccl_state>>& states() {
    static auto* m = new std::map<ncclComm_t, std::shared_ptr<nccl_state>>;  // never destroyed
    return *m;
}

std::uint64_t signature(std::int64_t count, compress::element type, const compress_consent& c) {
    std::uint64_t h = compress::detail::mix64(0x6e63636cull ^ static_cast<std::uint64_t>(count));
    h = compress::detail::mix64(h ^ (static_cast<std::uint64_t>(type) + 0x10));
    return compress::detail::mix64(h ^ (static_cast<std::uint64_t>(c.on) << 8 | c.methods));
}

/// The element type of an NCCL datatype that may be compressed (float32, float16, bfloat16).
std::optional<compress::element> element_of(ncclDataType_t t) {
    if (t == ncclFloat32) return compress::element::f32;
    if (t == ncclFloat16) return compress::element::f16;
    if (t == ncclBfloat16) return compress::element::bf16;
    return std::nullopt;
}

int element_bytes(compress::element e) { return e == compress::element::f32 ? 4 : 2; }

const char* element_name(compress::element e) {
    return e == compress::element::f32 ? "floats" : e == compress::element::f16 ? "halves" : "bfloat16s";
}

/// out[0..n) = the values of n elements of type `e` at `in`, as floats (exact).
void widen(const void* in, compress::element e, std::int64_t n, float* out) {
    if (e == compress::element::f32) {
        std::memcpy(out, in, static_cast<std::size_t>(n) * 4);
    } else if (e == compress::element::f16) {
        compress::from_f16(static_cast<const std::uint16_t*>(in), n, out);
    } else {
        compress::from_bf16(static_cast<const std::uint16_t*>(in), n, out);
    }
}

/// out[0..n) = n floats rounded to type `e` (to nearest even, as NCCL rounds its half sums).
void narrow(const float* in, compress::element e, std::int64_t n, void* out) {
    if (e == compress::element::f32) {
        std::memcpy(out, in, static_cast<std::size_t>(n) * 4);
    } else if (e == compress::element::f16) {
        compress::to_f16(in, n, static_cast<std::uint16_t*>(out));
    } else {
        compress::to_bf16(in, n, static_cast<std::uint16_t*>(out));
    }
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
        // The hierarchical schemes run on nccl_executor's node and rail communicators, made here
        // where no call has made them (collective: every rank plans alike).
        c.levels = nullptr;
        if (c.shape.hierarchical())
            if (nccl_executor* e = rt.nccl())
                if (const nccl_levels* lv = e->compression_levels(comm, stream);
                    lv != nullptr && lv->per_node == c.shape.per_node && lv->nodes == c.shape.nodes())
                    c.levels = lv;
        c.shaped = true;
    }
    // Every scheme, on the host for host buffers (the double) and on the device for device ones.
    const compress_places places{!device, device, c.levels != nullptr, true};
    std::vector<double> v(2 * P, 0.0);
    for (std::size_t i = 0; i < P; ++i) {
        std::int64_t t = rt.cfg().compress_min_bytes;
        const int eb = element_bytes(c.seen[i].type);
        if (t <= 0) t = compress_threshold(model, c.shape, compress_op::allreduce, eb, c.seen[i].consent, places);
        v[i] = i < gaps.size() ? gaps[i] : 0.0;
        v[P + i] = c.seen[i].count * eb >= t ? 0.0 : 1.0;
    }
    check(in_nccl_memory(device, v.data(), v.size() * 8, stream,
                         [&](void* p) { return real.all_reduce(p, p, v.size(), ncclFloat64, ncclMax, comm, stream); }),
          "agreeing on the gaps");
    std::vector<compress_tensor> tensors(P);
    std::vector<double> costs;
    for (std::size_t i = 0; i < P; ++i) {
        tensors[i].gap = v[i];
        const int eb = element_bytes(c.seen[i].type);
        tensors[i].bytes = c.seen[i].count * eb;
        const compress_consent consent = v[P + i] == 0 ? c.seen[i].consent : compress_consent{};
        tensors[i].options =
            predict_options(model, c.shape, compress_op::allreduce, c.seen[i].count, eb, consent, places);
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
        log_debug(log_category::decide, "  position %zu: ncclAllReduce of %" PRId64 " %s -> %s (%s)", i,
                  c.seen[i].count, element_name(c.seen[i].type), to_string(c.plan[i]).c_str(), why.c_str());
    }
}

ncclDataType_t sum_type(compress::sum_form f) {
    return f == compress::sum_form::f16 ? ncclFloat16 : f == compress::sum_form::bf16 ? ncclBfloat16 : ncclFloat32;
}

/// One scheme of option `o` (flat) over `comm` (`p` ranks, this one `me`) on the host, as
/// collectives/compressed.hpp's flat_allreduce through NCCL: the result into s.acc, the error
/// feedback staged (not committed). The guard's flag travels with every part, so every rank of
/// comm returns the same status.
compressed_status host_exchange(const nccl_real& real, ncclComm_t comm, int p, int me, cudaStream_t stream,
                                const float* in, std::int64_t n, const compress_option& o, compression_point& pt,
                                compressed_scratch& s) {
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
    if (o.scheme == compress_scheme::allreduce) {
        const std::int64_t words = message_words(prm, n);
        ensure(s.send, words);
        const compress::sum_form form = compress::summable(o.method);
        bad = !compress_message(o, src, n, s.send.data(), mine, step, bad) || bad;
        s.send[static_cast<std::size_t>(words - 1)] = bad ? nan_word(form) : 0u;
        const std::size_t elements = static_cast<std::size_t>(form == compress::sum_form::f32 ? words : 2 * words);
        check(real.all_reduce(s.send.data(), s.send.data(), elements, sum_type(form), ncclSum, comm, stream),
              "ncclAllReduce of the compressed form");
        if (s.send[static_cast<std::size_t>(words - 1)] != 0) return compressed_status::not_finite;
        compress::decompress(prm, reinterpret_cast<const std::byte*>(s.send.data()), n, s.acc.data(), step);
    } else if (o.scheme == compress_scheme::allgather) {
        const std::int64_t words = message_words(prm, n);
        ensure(s.send, words);
        ensure(s.recv, words * p);
        compress_message(o, src, n, s.send.data(), mine, step, bad);
        check(
            real.all_gather(s.send.data(), s.recv.data(), static_cast<std::size_t>(words) * 4, ncclUint8, comm, stream),
            "ncclAllGather of the compressed parts");
        for (int r = 0; r < p; ++r)
            if (flagged(prm, s.recv.data() + r * words, n)) return compressed_status::not_finite;
        for (int r = 0; r < p; ++r) {
            const auto* part = reinterpret_cast<const std::byte*>(s.recv.data() + r * words);
            if (r == 0)
                compress::decompress(prm, part, n, s.acc.data(), step);
            else
                compress::decompress_accumulate(prm, part, n, s.acc.data(), step);
        }
    } else {
        // alltoall+allgather: slice j of every rank compressed into cell j (cells of the largest
        // slice's words), the cells exchanged by grouped ncclSend/ncclRecv, the parts of my slice
        // added in rank order and compressed again (its own feedback), the sums gathered.
        const std::int64_t cell = message_words(prm, slice_len(n, p, 0));
        const std::int64_t mine_len = slice_len(n, p, me);
        ensure(s.send, cell * p);
        ensure(s.recv, cell * p);
        for (int j = 0; j < p; ++j) {
            const std::int64_t lo = slice_lo(n, p, j);
            compress_message(o, src + lo, slice_len(n, p, j), s.send.data() + j * cell, feedback ? mine + lo : nullptr,
                             step, bad);
        }
        const auto bytes = static_cast<std::size_t>(cell) * 4;
        std::memcpy(s.recv.data() + me * cell, s.send.data() + me * cell, bytes);
        check(real.group_start(), "ncclGroupStart");
        ncclResult_t r = ncclSuccess;
        for (int j = 0; j < p && r == ncclSuccess; ++j) {
            if (j == me) continue;
            r = real.send(s.send.data() + j * cell, bytes, ncclUint8, j, comm, stream);
            if (r == ncclSuccess) r = real.recv(s.recv.data() + j * cell, bytes, ncclUint8, j, comm, stream);
        }
        const ncclResult_t end = real.group_end();
        check(r != ncclSuccess ? r : end, "the alltoall of compressed slices (ncclSend/ncclRecv)");
        ensure(s.owned, std::max<std::int64_t>(mine_len, 1));
        const bool parts_bad = sum_parts(prm, s.recv.data(), cell, p, mine_len, s.owned.data(), step);
        const std::uint64_t step2 = 2 * step + 1;
        bool sum_finite = true;
        const float* src2 = corrected_input(o, s.owned.data(), mine_len, pt.second, s.work2, sum_finite);
        if (feedback) ensure(s.mine2, std::max<std::int64_t>(mine_len, 1));
        // The slices are sent: the send buffer holds my compressed sum now.
        compress_message(o, src2, mine_len, s.send.data(), feedback ? s.mine2.data() : nullptr, step2,
                         parts_bad || !sum_finite);
        check(real.all_gather(s.send.data(), s.recv.data(), bytes, ncclUint8, comm, stream),
              "ncclAllGather of the compressed sums");
        for (int j = 0; j < p; ++j)
            if (flagged(prm, s.recv.data() + j * cell, slice_len(n, p, j))) return compressed_status::not_finite;
        for (int j = 0; j < p; ++j)
            compress::decompress(prm, reinterpret_cast<const std::byte*>(s.recv.data() + j * cell), slice_len(n, p, j),
                                 s.acc.data() + slice_lo(n, p, j), step2);
        if (!compress::all_finite(s.acc.data(), n)) return compressed_status::not_finite;
        stage_feedback(s, pt, feedback ? n : -1, feedback ? mine_len : -1);
        return compressed_status::done;
    }
    if (!compress::all_finite(s.acc.data(), n)) return compressed_status::not_finite;
    stage_feedback(s, pt, feedback ? n : -1, -1);
    return compressed_status::done;
}

/// The host schemes (host buffers) through NCCL, flat on `comm` or hierarchical on `lv`: exact
/// ncclReduceScatter of the first q * (n / q) elements inside the node, the scheme between nodes
/// on the rail over the slice each rank owns, an ncclAllGather inside the node of every slice with
/// its rail's verdict (every node holds a member of every rail: every rank sees every verdict),
/// and the last n % q elements summed exactly by an ncclAllReduce over comm. `out` is written
/// only when every rank succeeds.
compressed_status host_all_reduce(const nccl_real& real, ncclComm_t comm, const nccl_levels* lv, cudaStream_t stream,
                                  const float* in, float* out, std::int64_t n, int nranks, int rank,
                                  const compress_option& o, compression_point& pt, compressed_scratch& s) {
    using namespace detail::ccoll;
    s.pending = nullptr;
    if (!o.hierarchical) {
        const compressed_status st = host_exchange(real, comm, nranks, rank, stream, in, n, o, pt, s);
        if (st != compressed_status::done) return st;
        commit_feedback(s);
        std::memcpy(out, s.acc.data(), static_cast<std::size_t>(n) * 4);
        return st;
    }
    if (lv == nullptr) throw error("a hierarchical option without node and rail communicators");
    const int q = lv->per_node;
    const std::int64_t slice = n / q, body = slice * q, tail = n - body;
    ensure(s.owned_out, slice + 1);
    check(real.reduce_scatter(in, s.owned_out.data(), static_cast<std::size_t>(slice), ncclFloat32, ncclSum, lv->node,
                              stream),
          "ncclReduceScatter inside the node");
    compress_option rail = o;
    rail.hierarchical = false;
    const compressed_status st =
        host_exchange(real, lv->rail, lv->nodes, lv->node_index, stream, s.owned_out.data(), slice, rail, pt, s);
    // My slice and my rail's verdict, gathered inside the node.
    if (st == compressed_status::done)
        std::memcpy(s.owned_out.data(), s.acc.data(), static_cast<std::size_t>(slice) * 4);
    s.owned_out[static_cast<std::size_t>(slice)] = st == compressed_status::done ? 0.0f : 1.0f;
    ensure(s.tmp, (slice + 1) * q + tail);
    float* gathered = s.tmp.data();
    check(real.all_gather(s.owned_out.data(), gathered, static_cast<std::size_t>(slice + 1), ncclFloat32, lv->node,
                          stream),
          "ncclAllGather inside the node");
    float* rest = gathered + (slice + 1) * q;
    if (tail > 0)
        check(real.all_reduce(in + body, rest, static_cast<std::size_t>(tail), ncclFloat32, ncclSum, comm, stream),
              "ncclAllReduce of the last elements");
    bool bad = !compress::all_finite(rest, tail);
    for (int k = 0; k < q; ++k) bad = bad || gathered[(slice + 1) * k + slice] != 0.0f;
    if (bad) {
        s.pending = nullptr;
        return compressed_status::not_finite;
    }
    commit_feedback(s);
    for (int k = 0; k < q; ++k)
        std::memcpy(out + slice * k, gathered + (slice + 1) * k, static_cast<std::size_t>(slice) * 4);
    if (tail > 0) std::memcpy(out + body, rest, static_cast<std::size_t>(tail) * 4);
    return compressed_status::done;
}

/// Compresses n floats at `in` into `msg` on the device, with the error feedback of `fb` where
/// the method keeps it (corrected and mine: n floats of scratch).
void device_compress(const compress::params& prm, bool feedback, const float* in, std::int64_t n, void* msg, void* ws,
                     float* corrected, float* mine, nccl_state::device_residual& fb, std::uint64_t step,
                     gpu::stream_t st) {
    namespace cg = compress::gpu;
    if (!feedback) {
        cg::compress(prm, in, n, msg, ws, st, step);
        return;
    }
    float* residual = fb.ready(n, st);
    cg::feedback_apply(in, residual, corrected, n, st);
    cg::compress(prm, corrected, n, msg, ws, st, step);
    cg::decompress(prm, msg, n, mine, st, step);
    cg::feedback_update(corrected, mine, residual, n, st);
}

/// Bytes of one compressed part on the device: the form, rounded up to keep every part aligned.
std::size_t device_part_bytes(const compress::params& prm, std::int64_t n) {
    return static_cast<std::size_t>((compress::compressed_bytes(prm, n) + 15) / 16 * 16);
}

/// The device's alltoall+allgather scheme over `comm` (`p` ranks, this one `me`), as
/// host_exchange's: slice j compressed into cell j (cells of the largest slice's form), the cells
/// exchanged by grouped ncclSend/ncclRecv, the parts of my slice added in rank order and compressed
/// again (with the site's second residual), the compressed sums gathered and decompressed into
/// `out`; all on `stream`.
ncclResult_t device_alltoall(const nccl_real& real, ncclComm_t comm, cudaStream_t stream, const float* in, float* out,
                             std::int64_t n, int p, int me, const compress_option& o, nccl_state& c,
                             nccl_state::site& site) {
    using detail::ccoll::slice_len;
    using detail::ccoll::slice_lo;
    namespace cg = compress::gpu;
    const compress::params prm = compress_params(o.method);
    const auto st = reinterpret_cast<gpu::stream_t>(stream);
    const bool feedback = uses_feedback(o.method);
    const std::size_t cell = device_part_bytes(prm, slice_len(n, p, 0));
    const std::int64_t mine_len = slice_len(n, p, me);
    auto* send = static_cast<std::byte*>(c.message.get(cell * static_cast<std::size_t>(p), st));
    auto* recv = static_cast<std::byte*>(c.parts.get(cell * static_cast<std::size_t>(p), st));
    const std::int64_t wsb = cg::workspace_bytes(prm, slice_len(n, p, 0));
    void* ws = wsb > 0 ? c.workspace.get(static_cast<std::size_t>(wsb), st) : nullptr;
    float* corrected = nullptr;
    float* mine = nullptr;
    const float* src = in;
    if (feedback) {  // the whole tensor corrected once, each slice's reconstruction beside it
        corrected = static_cast<float*>(c.corrected.get(static_cast<std::size_t>(n) * 4, st));
        mine = static_cast<float*>(c.mine.get(static_cast<std::size_t>(n) * 4, st));
        float* residual = site.first.ready(n, st);
        cg::feedback_apply(in, residual, corrected, n, st);
        src = corrected;
    }
    const std::uint64_t step = site.step;
    for (int j = 0; j < p; ++j) {
        const std::int64_t lo = slice_lo(n, p, j), len = slice_len(n, p, j);
        std::byte* part = send + cell * static_cast<std::size_t>(j);
        cg::compress(prm, src + lo, len, part, ws, st, step);
        if (feedback) cg::decompress(prm, part, len, mine + lo, st, step);
    }
    if (feedback) cg::feedback_update(corrected, mine, site.first.ready(n, st), n, st);
    gpu::copy(recv + cell * static_cast<std::size_t>(me), send + cell * static_cast<std::size_t>(me), cell, st);
    ncclResult_t r = real.group_start();
    if (r != ncclSuccess) return r;
    for (int j = 0; j < p && r == ncclSuccess; ++j) {
        if (j == me) continue;
        r = real.send(send + cell * static_cast<std::size_t>(j), cell, ncclUint8, j, comm, stream);
        if (r == ncclSuccess)
            r = real.recv(recv + cell * static_cast<std::size_t>(j), cell, ncclUint8, j, comm, stream);
    }
    const ncclResult_t end = real.group_end();
    if (r != ncclSuccess || end != ncclSuccess) return r != ncclSuccess ? r : end;
    // My slice's sum, in rank order as the host adds it, compressed again into cell 0 of `send`
    // (its slices are sent: stream order puts these kernels after the exchange).
    auto* summed =
        static_cast<float*>(c.summed.get(static_cast<std::size_t>(std::max<std::int64_t>(mine_len, 1)) * 4, st));
    for (int j = 0; j < p; ++j) {
        const std::byte* part = recv + cell * static_cast<std::size_t>(j);
        if (j == 0)
            cg::decompress(prm, part, mine_len, summed, st, step);
        else
            cg::decompress_accumulate(prm, part, mine_len, summed, st, step);
    }
    const std::uint64_t step2 = 2 * step + 1;
    device_compress(prm, feedback, summed, mine_len, send, ws, corrected, mine, site.second, step2, st);
    r = real.all_gather(send, recv, cell, ncclUint8, comm, stream);
    if (r != ncclSuccess) return r;
    for (int j = 0; j < p; ++j)
        cg::decompress(prm, recv + cell * static_cast<std::size_t>(j), slice_len(n, p, j), out + slice_lo(n, p, j), st,
                       step2);
    return ncclSuccess;
}

/// The device schemes: the CUDA compressors and NCCL on `stream`, no host synchronisation (and so
/// no guard: a NaN or Inf spreads over its block, or its element, as the exact sum spreads it).
/// `comm` has `nranks` ranks, this one `me`.
ncclResult_t device_all_reduce(const nccl_real& real, ncclComm_t comm, cudaStream_t stream, const float* in, float* out,
                               std::int64_t n, int nranks, int me, const compress_option& o, nccl_state& c,
                               nccl_state::site& site) {
    namespace cg = compress::gpu;
    ncclResult_t r = ncclSuccess;
    if (o.scheme == compress_scheme::alltoall_allgather) {
        r = device_alltoall(real, comm, stream, in, out, n, nranks, me, o, c, site);
        ++site.step;
        return r;
    }
    const compress::params prm = compress_params(o.method);
    const auto st = reinterpret_cast<gpu::stream_t>(stream);
    const std::size_t floats = static_cast<std::size_t>(n) * 4;
    const std::int64_t cb = compress::compressed_bytes(prm, n);
    const std::size_t stride = device_part_bytes(prm, n);
    const bool feedback = uses_feedback(o.method);
    void* msg = c.message.get(stride, st);
    void* ws = cg::workspace_bytes(prm, n) > 0
                   ? c.workspace.get(static_cast<std::size_t>(cg::workspace_bytes(prm, n)), st)
                   : nullptr;
    float* corrected = feedback ? static_cast<float*>(c.corrected.get(floats, st)) : nullptr;
    float* mine = feedback ? static_cast<float*>(c.mine.get(floats, st)) : nullptr;
    device_compress(prm, feedback, in, n, msg, ws, corrected, mine, site.first, site.step, st);
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

/// The device hierarchical schemes, as host_all_reduce's without the guard: ncclReduceScatter
/// inside the node, device_all_reduce on the rail over the owned slice, ncclAllGather inside the
/// node, the last n % q elements by an exact ncclAllReduce over comm; all on `stream`.
ncclResult_t device_hierarchical(const nccl_real& real, ncclComm_t comm, const nccl_levels& lv, cudaStream_t stream,
                                 const float* in, float* out, std::int64_t n, const compress_option& o, nccl_state& c,
                                 nccl_state::site& site) {
    const int q = lv.per_node;
    const std::int64_t slice = n / q, body = slice * q, tail = n - body;
    auto* owned = static_cast<float*>(
        c.owned_dev.get(static_cast<std::size_t>(2 * slice) * 4, reinterpret_cast<gpu::stream_t>(stream)));
    float* owned_out = owned + slice;
    ncclResult_t r =
        real.reduce_scatter(in, owned, static_cast<std::size_t>(slice), ncclFloat32, ncclSum, lv.node, stream);
    if (r == ncclSuccess && tail > 0)
        r = real.all_reduce(in + body, out + body, static_cast<std::size_t>(tail), ncclFloat32, ncclSum, comm, stream);
    compress_option rail = o;
    rail.hierarchical = false;
    if (r == ncclSuccess)
        r = device_all_reduce(real, lv.rail, stream, owned, owned_out, slice, lv.nodes, lv.node_index, rail, c, site);
    if (r == ncclSuccess)
        r = real.all_gather(owned_out, out, static_cast<std::size_t>(slice), ncclFloat32, lv.node, stream);
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

/// The state of `comm`, made when `make` (nullptr when there is none and not `make`). The ranks
/// are asked of NCCL at its first call (query_ranks).
std::shared_ptr<nccl_state> state_for(ncclComm_t comm, bool make) {
    const std::lock_guard lock(states_mutex);
    auto it = states().find(comm);
    if (it != states().end()) return it->second;
    if (!make) return nullptr;
    auto slot = std::make_shared<nccl_state>();
    states()[comm] = slot;
    return slot;
}

void query_ranks(const nccl_real& real, nccl_state& c, ncclComm_t comm) {
    if (c.queried) return;
    c.queried = true;
    if (real.comm_count == nullptr || real.comm_user_rank == nullptr ||
        real.comm_count(comm, &c.nranks) != ncclSuccess || real.comm_user_rank(comm, &c.rank) != ncclSuccess)
        c.nranks = 0;
}

/// A device residual's floats on the host (empty where it has none), copied on `stream` once the
/// work queued on it is done.
std::vector<float> residual_to_host(const nccl_state::device_residual& r, cudaStream_t stream) {
    if (r.count <= 0 || r.buffer.b.ptr == nullptr) return {};
    std::vector<float> host(static_cast<std::size_t>(r.count));
    const auto st = reinterpret_cast<gpu::stream_t>(stream);
    gpu::copy(host.data(), r.buffer.b.ptr, host.size() * 4, st);
    gpu::synchronize(st);
    return host;
}

/// Sets a device residual from a restored one (none where it has no floats: zeros at the next call).
void residual_from_host(nccl_state::device_residual& r, const compress::error_feedback& from) {
    r.count = -1;
    const std::int64_t n = from.count();
    if (n <= 0) return;
    const auto st = gpu::stream_t{};
    void* p = r.buffer.get(static_cast<std::size_t>(n) * 4, st);
    gpu::copy(p, from.residual().data(), static_cast<std::size_t>(n) * 4, st);
    gpu::synchronize(st);
    r.count = n;
}

/// The error feedback of a plan's sites as the header API saves it: host sites' points as they
/// are, device sites' residuals copied to the host on the stream of the site's last compressed
/// call (after the work queued on it).
std::vector<std::byte> save_sites(nccl_state& c) {
    std::vector<compression_point> copies(c.device ? c.sites.size() : 0);
    std::vector<const compression_point*> points;
    for (std::size_t i = 0; i < c.sites.size(); ++i) {
        nccl_state::site& site = c.sites[i];
        if (!c.device) {
            points.push_back(&site.point);
            continue;
        }
        compression_point& pt = copies[i];
        pt.step = site.step;
        const auto into = [&](const nccl_state::device_residual& r, compress::error_feedback& ef) {
            const std::vector<float> host = residual_to_host(r, site.stream);
            if (host.empty()) return;
            const std::vector<float> zeros(host.size(), 0.0f);
            ef.prepare(r.count, compress::element::f32);
            ef.update(host.data(), zeros.data(), r.count);
        };
        into(site.first, pt.first);
        into(site.second, pt.second);
        points.push_back(&pt);
    }
    return save_feedback_points(points);
}

/// Restores a checkpoint into the plan's sites, all or nothing (throws shunt::error for a
/// malformed one): host sites' points, device sites' residuals copied to the device.
void restore_sites(nccl_state& c, std::span<const std::byte> blob) {
    std::vector<compression_point> copies(c.sites.size());
    std::vector<compression_point*> points;
    for (auto& pt : copies) points.push_back(&pt);
    restore_feedback_points(blob, points);
    for (std::size_t i = 0; i < c.sites.size(); ++i) {
        nccl_state::site& site = c.sites[i];
        if (!c.device) {
            site.point = std::move(copies[i]);
            continue;
        }
        site.step = copies[i].step;
        residual_from_host(site.first, copies[i].first);
        residual_from_host(site.second, copies[i].second);
    }
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
    const std::optional<compress::element> elem = element_of(type);
    if (!elem || op != ncclSum || count == 0 || count > (std::size_t{1} << 40) || recvbuff == nullptr ||
        real.all_reduce == nullptr || real.all_gather == nullptr || real.broadcast == nullptr ||
        real.reduce_scatter == nullptr || real.send == nullptr || real.recv == nullptr || real.group_start == nullptr ||
        real.group_end == nullptr)
        return false;
    std::shared_ptr<nccl_state> c;
    try {
        // A communicator without a consent of its own needs no state while nothing else consents.
        const compress_consent outer = exec.consent_for(std::nullopt);
        c = state_for(comm, outer.on && outer.methods != 0);
    } catch (...) {
        return false;
    }
    if (c == nullptr) return false;
    const auto n = static_cast<std::int64_t>(count);
    bool device = false;
    if (!path_of(sendbuff, recvbuff, device)) return false;
    const std::lock_guard lock(c->mutex);
    const compress_consent consent = exec.consent_for(c->consent);
    if (!consent.on || consent.methods == 0) return false;
    query_ranks(real, *c, comm);
    if (c->nranks <= 1) return false;
    const call_pattern::step step = c->pattern.next(signature(n, *elem, consent), now_s());
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
        c->seen[step.position] = {n, *elem, consent};
        if (step.confirmed) {
            make_plan(rt, real, *c, comm, device, stream);
            if (!c->restore.empty()) {
                try {
                    restore_sites(*c, c->restore);
                } catch (const std::exception& e) {
                    log_warn(log_category::decide,
                             "compression: cannot restore error feedback (%s); starting from zero", e.what());
                }
                c->restore.clear();
            }
            exec.count_warmup();
            return false;
        }
        if (c->plan.empty() || c->device != device) {
            exec.count_unlocked();
            return false;
        }
        nccl_state::site& site = c->sites[step.position];
        const compress_option o = c->plan[step.position];
        // A hierarchical or alltoall option needs a slice for every rank (count alike everywhere).
        const bool sliced = o.hierarchical || o.scheme == compress_scheme::alltoall_allgather;
        if (o.exact() || (sliced && n < c->nranks) || (o.hierarchical && c->levels == nullptr)) {
            exec.count_planned_exact();
            return false;
        }
        if (++site.calls <= static_cast<std::uint64_t>(rt.cfg().compress_warmup)) {
            exec.count_warmup();
            return false;
        }
        const std::int64_t check_every = rt.cfg().compress_check;
        const bool shadow = check_every > 0 && ++c->compressed % static_cast<std::uint64_t>(check_every) == 0;
        const auto st = reinterpret_cast<gpu::stream_t>(stream);
        const std::size_t floats = static_cast<std::size_t>(n) * 4;
        if (device) {
            const auto* in = static_cast<const float*>(sendbuff);
            auto* out = static_cast<float*>(recvbuff);
            // Half and bfloat16 data: widened exactly by the cast's decompression, the result
            // narrowed by its compression (round to nearest even), stream-ordered as the rest.
            const bool wide = *elem != compress::element::f32;
            const compress::params cast =
                compress::defaults(*elem == compress::element::bf16 ? compress::method::bf16 : compress::method::fp16);
            if (wide) {
                auto* w = static_cast<float*>(c->wide_in_dev.get(floats, st));
                out = static_cast<float*>(c->wide_out_dev.get(floats, st));
                compress::gpu::decompress(cast, sendbuff, n, w, st);
                in = w;
            }
            void* exact = nullptr;
            if (shadow) {  // the exact sum first: an in-place call writes over its input
                exact = c->shadow.get(floats, st);
                check(real.all_reduce(in, exact, count, ncclFloat32, ncclSum, comm, stream), "the shadow check's sum");
            }
            site.stream = stream;
            result = o.hierarchical
                         ? device_hierarchical(real, comm, *c->levels, stream, in, out, n, o, *c, site)
                         : device_all_reduce(real, comm, stream, in, out, n, c->nranks, c->rank, o, *c, site);
            if (wide && result == ncclSuccess) compress::gpu::compress(cast, out, n, recvbuff, nullptr, st);
            if (shadow && result == ncclSuccess) {
                detail::ccoll::ensure(c->exact, n);
                detail::ccoll::ensure(c->wide_out, n);
                gpu::copy(c->exact.data(), exact, floats, st);
                gpu::copy(c->wide_out.data(), out, floats, st);
                gpu::synchronize(st);
                if (c->rank == 0)
                    compress_executor::log_check("ncclAllReduce", n, step.position, to_string(o), c->compressed,
                                                 c->wide_out.data(), c->exact.data(), n);
            }
        } else {
            const float* in = static_cast<const float*>(sendbuff);
            float* out = static_cast<float*>(recvbuff);
            if (*elem != compress::element::f32) {  // widened exactly; the residuals stay in float
                detail::ccoll::ensure(c->wide_in, n);
                detail::ccoll::ensure(c->wide_out, n);
                widen(sendbuff, *elem, n, c->wide_in.data());
                in = c->wide_in.data();
                out = c->wide_out.data();
            }
            if (shadow) {  // the exact sum in float first: an in-place call writes over its input
                detail::ccoll::ensure(c->exact, n);
                check(real.all_reduce(in, c->exact.data(), count, ncclFloat32, ncclSum, comm, stream),
                      "the shadow check's sum");
            }
            if (host_all_reduce(real, comm, c->levels, stream, in, out, n, c->nranks, c->rank, o, site.point,
                                c->scratch) != compressed_status::done) {
                exec.count_fallback();
                if (c->rank == 0 && exec.first_nonfinite())
                    log_warn(log_category::decide,
                             "ncclAllReduce: NaN or Inf in a compressed reduction's input or result on some rank; "
                             "that call ran exact (said once)");
                return false;
            }
            if (shadow && c->rank == 0)
                compress_executor::log_check("ncclAllReduce", n, step.position, to_string(o), c->compressed, out,
                                             c->exact.data(), n);
            if (*elem != compress::element::f32) narrow(out, *elem, n, recvbuff);
            result = ncclSuccess;
        }
        exec.count_compressed(static_cast<std::size_t>(o.method), static_cast<std::uint64_t>(n * element_bytes(*elem)),
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

int nccl_compression_control(runtime& rt, int what, ncclComm_t comm, const char* text, void* data,
                             std::size_t* bytes) noexcept {
    try {
        if (what == 0) return 1;
        if (comm == nullptr) return -1;
        switch (what) {
            case 1: {  // the communicator's consent ("default": the environment's again)
                std::optional<compress_consent> consent;
                if (!compress_executor::parse_consent(text, consent)) return -1;
                const std::shared_ptr<nccl_state> c = state_for(comm, true);
                const std::lock_guard lock(c->mutex);
                c->consent = consent;
                if (consent) rt.compression().note_override();
                return 0;
            }
            case 3: {  // save (*bytes: the room at data, then the size)
                if (bytes == nullptr) return -1;
                const std::shared_ptr<nccl_state> c = state_for(comm, false);
                std::vector<std::byte> out;
                if (c != nullptr) {
                    const std::lock_guard lock(c->mutex);
                    out = save_sites(*c);
                } else {
                    out = save_feedback_points({});
                }
                const std::size_t room = *bytes;
                *bytes = out.size();
                if (data == nullptr || room < out.size()) return 1;
                std::memcpy(data, out.data(), out.size());
                return 0;
            }
            case 4: {  // restore: into the current plan now, else at the next plan
                if (bytes == nullptr || (data == nullptr && *bytes > 0)) return -1;
                const std::span<const std::byte> blob(static_cast<const std::byte*>(data), *bytes);
                restore_feedback_points(blob, {});  // refuse a malformed checkpoint now
                const std::shared_ptr<nccl_state> c = state_for(comm, true);
                const std::lock_guard lock(c->mutex);
                if (!c->sites.empty())
                    restore_sites(*c, blob);
                else
                    c->restore.assign(blob.begin(), blob.end());
                return 0;
            }
            default: return -1;
        }
    } catch (const std::exception& e) {
        log_warn(log_category::decide, "shunt_compress_control_nccl: %s", e.what());
        return -1;
    }
}

}  // namespace shunt::detail

/// The header API's control entry for NCCL communicators (<shunt/compress/control_nccl.hpp> finds
/// it with dlsym): exported.
extern "C" SHUNT_EXPORT int shunt_compress_control_nccl(int what, ncclComm_t comm, const char* text, void* data,
                                                        std::size_t* bytes) noexcept {
    shunt::detail::runtime* rt = shunt::detail::runtime::instance();
    if (rt == nullptr) return -2;  // SHUNT_DISABLE, or shunt could not start
    return shunt::detail::nccl_compression_control(*rt, what, comm, text, data, bytes);
}
