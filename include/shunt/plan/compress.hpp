// shunt/plan/compress.hpp: gradient compression decisions (after Espresso, EuroSys'23): per tensor, exact or compressed, which compressor, on the host or the device, and which collective scheme, flat or hierarchical, from the cost model; and a greedy over the iteration's timeline.
#pragma once

#include <shunt/compress/common.hpp>
#include <shunt/config.hpp>
#include <shunt/model/compress.hpp>
#include <shunt/model/model.hpp>
#include <shunt/plan/collective.hpp>
#include <shunt/topology/hierarchy.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace shunt {

namespace detail {
constexpr bool compress_names_agree() {
    for (std::size_t i = 0; i < compress::all_methods.size(); ++i)
        if (static_cast<std::size_t>(compress::all_methods[i]) != i ||
            compress::to_string(compress::all_methods[i]) != compress_method_names[i])
            return false;
    return compress::all_methods.size() == compress_method_names.size();
}
}  // namespace detail
static_assert(detail::compress_names_agree(), "config.hpp's compress_method_names must follow compress::method");

/// True when `consent` allows method `m`.
constexpr bool allows(const compress_consent& consent, compress::method m) {
    return consent.on && ((consent.methods >> static_cast<unsigned>(m)) & 1u) != 0;
}

/// The collective a compression point serves: MPI_Allreduce and ncclAllReduce, or
/// MPI_Reduce_scatter(_block).
enum class compress_op : std::uint8_t { allreduce, reduce_scatter };

/// How a tensor is exchanged.
///   exact               not compressed: the exact collective (the library's or shunt's schedule)
///   allreduce           an allreduce of a summable compressed form (fp16, bf16: halves added in
///                       float; random_k: floats); for a reduce-scatter, a reduce-scatter of it
///   allgather           an allgather of every rank's compressed form, each part decompressed and
///                       added in rank order; for a reduce-scatter, an alltoall of compressed blocks
///   alltoall_allgather  an alltoall of compressed slices, each rank adds the parts of its slice and
///                       compresses the sum again, then an allgather of the compressed sums
enum class compress_scheme : std::uint8_t { exact, allreduce, allgather, alltoall_allgather };

constexpr std::string_view to_string(compress_scheme s) {
    switch (s) {
        case compress_scheme::exact: return "exact";
        case compress_scheme::allreduce: return "allreduce";
        case compress_scheme::allgather: return "allgather";
        case compress_scheme::alltoall_allgather: return "alltoall+allgather";
    }
    return "?";
}

/// One way to run a tensor's collective: Espresso's decision tree as a value. Must be the same on
/// every rank of a call.
struct compress_option {
    compress_scheme scheme = compress_scheme::exact;
    compress::method method = compress::method::fp16;  ///< unused when exact
    bool device = false;  ///< compress and decompress on the device (else on the host)
    /// Exact reduce-scatter inside each node, the scheme between nodes on the part each rank owns
    /// (one exchange per position in the node: a rail), exact allgather inside each node.
    bool hierarchical = false;

    constexpr bool exact() const { return scheme == compress_scheme::exact; }
    constexpr bool operator==(const compress_option& o) const {
        return exact()
                   ? o.exact()
                   : scheme == o.scheme && method == o.method && device == o.device && hierarchical == o.hierarchical;
    }
    /// One byte (for agreeing on decisions): scheme, method, device, hierarchical.
    constexpr std::uint8_t code() const {
        if (exact()) return 0;
        return static_cast<std::uint8_t>(static_cast<unsigned>(scheme) | static_cast<unsigned>(method) << 2 |
                                         (device ? 1u << 5 : 0u) | (hierarchical ? 1u << 6 : 0u));
    }
    static constexpr compress_option from_code(std::uint8_t c) {
        compress_option o;
        o.scheme = static_cast<compress_scheme>(c & 3u);
        if (o.exact()) return o;
        o.method = static_cast<compress::method>((c >> 2) & 7u);
        o.device = ((c >> 5) & 1u) != 0;
        o.hierarchical = ((c >> 6) & 1u) != 0;
        return o;
    }
};

/// "exact", "int8 host allgather", "fp16 host allreduce, hierarchical".
inline std::string to_string(const compress_option& o) {
    if (o.exact()) return "exact";
    std::string s(compress::to_string(o.method));
    s += o.device ? " device " : " host ";
    s += to_string(o.scheme);
    if (o.hierarchical) s += ", hierarchical";
    return s;
}

/// The compressor parameters every scheme uses for `m` (the cost model's tables are measured
/// with them).
constexpr compress::params compress_params(compress::method m) { return compress::defaults(m); }

/// True where a scheme keeps error feedback for `m`: the sparsifying and 1-bit forms
/// (compress::needs_error_feedback) and INT4. The FP16 and BF16 casts and INT8's block-wise
/// quantisation (ZeRO++ and CGX send 8 bits without feedback) drop too little to be worth the
/// three passes over the tensor that feedback costs.
constexpr bool uses_feedback(compress::method m) {
    return compress::needs_error_feedback(m) || m == compress::method::int4;
}

/// What the compression planner knows of a communicator: the collective planner's shape (for
/// the model's collective tables and links) and its outermost level's groups, the "nodes" of the
/// hierarchical schemes, which need them all of one size.
struct compress_shape {
    coll_shape coll;
    int per_node = 1;  ///< ranks in each group of the outermost level (1: no level)
    bool regular = true;  ///< every group of every level has the same size
    /// The exact path may run shunt's schedule (false under SHUNT_COLL=library: the library's).
    bool exact_schedules = true;

    int ranks() const { return coll.ranks; }
    int nodes() const { return per_node > 0 ? std::max(1, coll.ranks / per_node) : 1; }
    /// True when the hierarchical schemes apply: nodes of equal size, more than one of them, and
    /// more than one rank in each.
    bool hierarchical() const { return regular && per_node > 1 && nodes() > 1 && per_node * nodes() == coll.ranks; }

    static compress_shape of(const hierarchy& h) {
        compress_shape s;
        s.coll = coll_shape::of(h);
        s.regular = h.regular();
        s.per_node = s.coll.group_sizes.empty() ? 1 : s.coll.group_sizes.back();
        return s;
    }
    /// A shape of `ranks` ranks in nodes of `per_node` (the outermost level named "node").
    static compress_shape nodes_of(int ranks, int per_node) {
        compress_shape s;
        s.coll.ranks = ranks;
        if (per_node > 1 && per_node < ranks) {
            s.coll.level_names = {"node"};
            s.coll.group_sizes = {per_node};
            s.per_node = per_node;
            s.regular = ranks % per_node == 0;
        }
        return s;
    }
};

/// The predicted stages of one option for one call, in seconds: compressing (and the guards and
/// error feedback before the exchange), the exchange itself (with any reduction inside it), and
/// decompressing (with the re-compression of alltoall_allgather). Encode and decode run on the
/// device when option.device, else on the host.
struct option_cost {
    compress_option option;
    double encode = 0, comm = 0, decode = 0;
    double total() const { return encode + comm + decode; }
};

/// How much better a compressed option must be predicted than exact to be chosen: its stage
/// times are counted this much longer, so that noise and the model's error favour exact results.
inline constexpr double compress_margin = 0.10;

namespace detail {

/// A link's latency and rate: the model's p2p.<level>.hh table where measured, else the
/// analytic level.
struct link_rate {
    double latency_s, bytes_per_s;
};

inline link_rate rate_of(const cost_model& m, const analytic_params::level& lv) {
    const analytic_params& p = m.params();
    const std::string_view name = &lv == &p.network ? "network" : &lv == &p.package ? "package" : "node";
    const std::string table = table_names::p2p(name, "hh");
    if (m.measured(table)) {
        const double small = m.predict(table, 64), large = m.predict(table, 16 << 20);
        if (small > 0 && large > small) return {small, (16 << 20) / (large - small)};
    }
    return {lv.latency_s, lv.bytes_per_s};
}

/// A flat bandwidth-optimal collective over q members on a link shared by `sharing` such
/// exchanges at once; `bytes` as coll_volume counts them (the whole vector, or an alltoall's
/// send buffer).
inline double flat_time(coll_op op, int q, double bytes, const link_rate& l, double sharing) {
    if (q <= 1) return 0;
    return coll_steps(op, q) * l.latency_s + coll_volume(op, q) * bytes * sharing / l.bytes_per_s;
}

/// The library's collective on the whole communicator: its measured table for this shape, else
/// the analytic model.
inline double library_time(const cost_model& m, const coll_shape& s, coll_op op, double bytes) {
    if (const time_table* t = m.find(table_names::collective(op, coll_method::library, s))) return t->predict(bytes);
    return analytic_collective(m.params(), op, coll_method::library, s, bytes);
}

/// The exact collective as the collective planner would run it: the faster of the library and
/// (where `s.exact_schedules`) shunt's schedule over every level: their measured tables, else
/// the analytic model; on a shape of equal nodes shunt's schedule is predicted as the compressed
/// hierarchical schemes are (the node's rails sharing its outer link), so that the two compare
/// on the same terms.
inline double exact_time(const cost_model& m, const compress_shape& s, coll_op op, double bytes);

}  // namespace detail

namespace detail {

/// The inner (inside a node) and outer (between nodes) links of a shape.
inline link_rate inner_link(const cost_model& m, const compress_shape& s) {
    const std::size_t top = s.coll.level_names.empty() ? 0 : s.coll.level_names.size() - 1;
    return rate_of(m, link_of(m.params(), s.coll, top));
}
inline link_rate outer_link(const cost_model& m, const compress_shape& s) {
    return rate_of(m, link_of(m.params(), s.coll, s.coll.level_names.size()));
}

inline double exact_time(const cost_model& m, const compress_shape& s, coll_op op, double bytes) {
    const double lib = library_time(m, s.coll, op, bytes);
    if (!s.exact_schedules || s.coll.level_names.empty()) return lib;
    if (const time_table* t = m.find(table_names::collective(op, coll_method::hierarchical, s.coll)))
        return std::min(lib, t->predict(bytes));
    if (!s.hierarchical() || (op != coll_op::allreduce && op != coll_op::reduce_scatter_block))
        return std::min(lib, analytic_collective(m.params(), op, coll_method::hierarchical, s.coll, bytes));
    const int q = s.per_node, n = s.nodes();
    const link_rate inner = inner_link(m, s), outer = outer_link(m, s);
    double t = flat_time(coll_op::reduce_scatter_block, q, bytes, inner, 1);
    if (op == coll_op::allreduce)
        t += flat_time(coll_op::allreduce, n, bytes / q, outer, q) + flat_time(coll_op::allgather, q, bytes, inner, 1);
    else
        t += flat_time(coll_op::reduce_scatter_block, n, bytes / q, outer, q);
    return std::min(lib, t);
}

}  // namespace detail

/// The predicted stages of option `o` for one call of `op` over `count` elements of
/// `element_bytes` bytes each (4 for float, 2 for half and bfloat16; the whole vector of a
/// reduce-scatter) on a communicator of shape `s`. Compressed options are counted
/// (1 + compress_margin) longer (see compress_margin). Thread-safe as the model is.
inline option_cost predict_option(const cost_model& m, const compress_shape& s, compress_op op, std::int64_t count,
                                  int element_bytes, const compress_option& o) {
    option_cost c;
    c.option = o;
    const double x = static_cast<double>(count) * element_bytes;  // the exact collective's bytes
    const coll_op whole = op == compress_op::allreduce ? coll_op::allreduce : coll_op::reduce_scatter_block;
    if (o.exact()) {
        c.comm = detail::exact_time(m, s, whole, x);
        return c;
    }
    const compress::method me = o.method;
    const compress::params prm = compress_params(me);
    auto enc = [&](double f) { return predict_compress(m, me, o.device, compress_stage::encode, f); };
    auto dec = [&](double f) { return predict_compress(m, me, o.device, compress_stage::decode, f); };
    auto comb = [&](double f) {
        return compress::summable(me) != compress::sum_form::none
                   ? predict_compress(m, me, false, compress_stage::combine, f)
                   : 0.0;
    };
    // A pass over the floats (the finiteness guards, error feedback's sums) at memory speed: the
    // host's, or on the device (its feedback kernels; the device schemes' guard reads only the
    // compressed forms) a device-to-device copy's.
    auto pass = [&](double f) { return o.device ? m.predict("copy.d2d", f) : f / m.params().memcpy_bytes_per_s; };
    auto compressed = [&](double f) { return compressed_size(prm, f) + 4; };  // with the guard's flag
    const bool feedback = uses_feedback(me);
    // Compress f float bytes: the guard, error feedback (apply, decompress own form, update), encode.
    auto encode_side = [&](double f) { return enc(f) + pass(f) + (feedback ? dec(f) + 2 * pass(f) : 0.0); };

    const double f = static_cast<double>(count) * 4;  // the compressors' tables count float32 bytes
    if (op == compress_op::reduce_scatter) {
        const int p = s.ranks();
        c.encode = encode_side(f);
        if (o.scheme == compress_scheme::allreduce) {
            c.comm = detail::library_time(m, s.coll, coll_op::reduce_scatter_block, compressed(f)) +
                     comb(f) * (p - 1) / std::max(1, p);
            c.decode = dec(f / p) + pass(f / p);
        } else {
            c.comm = detail::library_time(m, s.coll, coll_op::alltoall, compressed(f));
            c.decode = p * dec(f / p) + pass(f / p);
        }
    } else if (!o.hierarchical) {
        const int p = s.ranks();
        c.encode = encode_side(f);
        const double cb = compressed(f);
        switch (o.scheme) {
            case compress_scheme::allreduce:
                c.comm = detail::library_time(m, s.coll, coll_op::allreduce, cb) + comb(f) * (p - 1) / std::max(1, p);
                c.decode = dec(f) + pass(f);
                break;
            case compress_scheme::allgather:
                c.comm = detail::library_time(m, s.coll, coll_op::allgather, p * cb);
                c.decode = p * dec(f) + pass(f);
                break;
            default:  // alltoall_allgather
                c.comm = detail::library_time(m, s.coll, coll_op::alltoall, cb) +
                         detail::library_time(m, s.coll, coll_op::allgather, cb);
                c.decode = dec(f) + encode_side(f / p) + dec(f) + pass(f);
                break;
        }
    } else {
        // Inside the node on its link, between nodes on the outer link that the node's q rails share.
        const int q = s.per_node, n = s.nodes();
        const detail::link_rate inner = detail::inner_link(m, s), outer = detail::outer_link(m, s);
        const double inside = detail::flat_time(coll_op::reduce_scatter_block, q, x, inner, 1) +
                              detail::flat_time(coll_op::allgather, q, x, inner, 1);
        const double fo = f / q, cb = compressed(fo);
        c.encode = encode_side(fo);
        switch (o.scheme) {
            case compress_scheme::allreduce:
                c.comm = detail::flat_time(coll_op::allreduce, n, cb, outer, q) + comb(fo) * (n - 1) / n;
                c.decode = dec(fo) + pass(fo);
                break;
            case compress_scheme::allgather:
                c.comm = detail::flat_time(coll_op::allgather, n, n * cb, outer, q);
                c.decode = n * dec(fo) + pass(fo);
                break;
            default:
                c.comm = detail::flat_time(coll_op::alltoall, n, cb, outer, q) +
                         detail::flat_time(coll_op::allgather, n, cb, outer, q);
                c.decode = dec(fo) + encode_side(fo / n) + dec(fo) + pass(fo);
                break;
        }
        c.comm += inside;
    }
    if (element_bytes < 4) {  // half and bfloat16 data widened to float first, the result narrowed back
        c.encode += pass(f);
        c.decode += pass(f / (op == compress_op::reduce_scatter ? std::max(1, s.ranks()) : 1));
    }
    const double k = 1 + compress_margin;
    c.encode *= k;
    c.comm *= k;
    c.decode *= k;
    return c;
}

/// Where compression may run and which schemes the executor offers: on the host (host
/// compressors, device buffers staged through host memory) and/or on the device (the CUDA
/// compressors); the hierarchical and the alltoall+allgather schemes (the NCCL path offers the
/// hierarchical ones where it has node and rail communicators).
struct compress_places {
    bool host = true, device = false;
    bool hierarchical = true, alltoall = true;
    /// The device offers only the flat allreduce and allgather schemes of the methods without
    /// error feedback, for allreduce calls (the MPI path's device place).
    bool device_flat = false;
    /// Device buffers moved through host memory for a library that takes none: every option pays
    /// the copies of what it hands to the library and gets back (the whole tensor exact or on
    /// the host; the compressed form on the device).
    bool staged = false;
};

/// True when method `m` can make the data of elements of `element_bytes` bytes smaller: the
/// casts to 16 bits cannot for half and bfloat16 data (fp16 of a half tensor is the tensor
/// itself, bf16 of it only loses precision); the quantisers and the sparsifiers can.
constexpr bool can_pay(compress::method m, int element_bytes) {
    return element_bytes > 2 || (m != compress::method::fp16 && m != compress::method::bf16);
}

/// Every option the decision tree has for `op` on shape `s` under `consent`, exact first:
/// each allowed method that can pay for elements of `element_bytes` bytes (4 for float, 2 for
/// half and bfloat16: see can_pay) with each scheme its form supports (the summable forms'
/// allreduce, the others' alltoall+allgather, every form's allgather; for a reduce-scatter, the
/// summable forms' reduce-scatter and every form's alltoall), on each allowed place, flat and
/// (for an allreduce on a shape of equal nodes) hierarchical.
inline std::vector<compress_option> compress_options(const compress_shape& s, compress_op op,
                                                     const compress_consent& consent, compress_places places = {},
                                                     int element_bytes = 4) {
    std::vector<compress_option> out(1);  // exact
    if (s.ranks() <= 1) return out;
    for (const compress::method me : compress::all_methods) {
        if (!allows(consent, me) || !can_pay(me, element_bytes)) continue;
        for (const bool device : {false, true}) {
            if (device ? !places.device : !places.host) continue;
            if (device && places.device_flat && (uses_feedback(me) || op != compress_op::allreduce)) continue;
            for (const compress_scheme sc :
                 {compress_scheme::allreduce, compress_scheme::allgather, compress_scheme::alltoall_allgather}) {
                const bool sums = compress::summable(me) != compress::sum_form::none;
                if (sc == compress_scheme::allreduce && !sums) continue;
                // A summable form's reduce-scatter is inside its allreduce already; compressing
                // its sums again (and random-k's twice) only loses.
                if (sc == compress_scheme::alltoall_allgather &&
                    (sums || op == compress_op::reduce_scatter || !places.alltoall))
                    continue;
                if (device && places.device_flat && sc == compress_scheme::alltoall_allgather) continue;
                for (const bool hier : {false, true}) {
                    if (hier && (op != compress_op::allreduce || !s.hierarchical() || !places.hierarchical)) continue;
                    if (hier && device && places.device_flat) continue;
                    out.push_back({sc, me, device, hier});
                }
            }
        }
    }
    return out;
}

/// The share of the library's predicted time that data volume must make up for a call to be a
/// candidate: compression saves volume, not latency, and the latency terms of the analytic model
/// (which assume the library's algorithm) would otherwise favour whichever scheme has fewer steps.
inline constexpr double compress_volume_share = 0.5;

/// The predicted stages of every option of compress_options() for one call, exact first; only
/// exact where the call is latency-bound (see compress_volume_share).
inline std::vector<option_cost> predict_options(const cost_model& m, const compress_shape& s, compress_op op,
                                                std::int64_t count, int element_bytes, const compress_consent& consent,
                                                compress_places places = {}) {
    std::vector<option_cost> out;
    const coll_op whole = op == compress_op::allreduce ? coll_op::allreduce : coll_op::reduce_scatter_block;
    const double x = static_cast<double>(count) * element_bytes;
    const double full = detail::library_time(m, s.coll, whole, x), latency = detail::library_time(m, s.coll, whole, 0);
    const bool volume_bound = full > 0 && latency <= (1 - compress_volume_share) * full;
    const double result = op == compress_op::allreduce ? x : x / std::max(1, s.ranks());
    for (const compress_option& o : compress_options(s, op, consent, places, element_bytes)) {
        if (!o.exact() && !volume_bound) break;
        option_cost c = predict_option(m, s, op, count, element_bytes, o);
        if (places.staged) {
            if (!o.device) {
                c.comm += m.predict("copy.d2h", x) + m.predict("copy.h2d", result);
            } else {
                // The device's flat schemes: the compressed form out, the sum's form (allreduce)
                // or every rank's (allgather) back.
                const double cb = compressed_size(compress_params(o.method), static_cast<double>(count) * 4) + 4;
                c.encode += m.predict("copy.d2h", cb);
                c.decode += m.predict("copy.h2d", o.scheme == compress_scheme::allgather ? s.ranks() * cb : cb);
            }
        }
        out.push_back(c);
    }
    return out;
}

/// The smallest byte count, a power of two from 4 KiB to 2^40, at which some compressed option
/// is predicted faster than exact for a call alone (margin included): the size threshold's
/// default. 2^62 (never) when there is none.
inline std::int64_t compress_threshold(const cost_model& m, const compress_shape& s, compress_op op, int element_bytes,
                                       const compress_consent& consent, compress_places places = {}) {
    if (compress_options(s, op, consent, places, element_bytes).size() <= 1) return std::int64_t{1} << 62;
    for (std::int64_t bytes = 4096; bytes <= (std::int64_t{1} << 40); bytes *= 2) {
        const std::vector<option_cost> costs =
            predict_options(m, s, op, bytes / element_bytes, element_bytes, consent, places);
        for (std::size_t i = 1; i < costs.size(); ++i)
            if (costs[i].total() < costs[0].total()) return bytes;
    }
    return std::int64_t{1} << 62;
}

/// One tensor of an iteration as the planner sees it: the compute between the previous call's
/// return and this call (`gap`), its size, and the predicted stages of its options (exact first;
/// only exact for a tensor that is no candidate).
struct compress_tensor {
    double gap = 0;
    std::int64_t bytes = 0;
    std::vector<option_cost> options;
};

/// The predicted time of one iteration with option `choice[i]` for tensor i, the calls in order.
/// Blocking calls (`overlap` false: MPI's): each call's stages and the compute before it follow
/// one another. Stream-ordered calls (`overlap` true: NCCL's): the compute runs on the device one
/// gap after another; a tensor's exchange starts once it is compressed, on a network that carries
/// one exchange at a time, in call order; host compressors run on a host that does one at a
/// time; device compressors take their time from the device's compute (decompression after the
/// exchange). The iteration ends when everything has.
inline double iteration_time(std::span<const compress_tensor> tensors, std::span<const std::uint16_t> choice,
                             bool overlap) {
    if (!overlap) {
        double t = 0;
        for (std::size_t i = 0; i < tensors.size(); ++i) t += tensors[i].gap + tensors[i].options[choice[i]].total();
        return t;
    }
    double dev = 0, cpu = 0, net = 0, end = 0;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        const compress_tensor& t = tensors[i];
        const option_cost& o = t.options[choice[i]];
        dev += t.gap;
        double ready = dev;
        if (o.encode > 0) {
            if (o.option.device) {
                dev += o.encode;
                ready = dev;
            } else {
                cpu = std::max(ready, cpu) + o.encode;
                ready = cpu;
            }
        }
        net = std::max(ready, net) + o.comm;
        double done = net;
        if (o.decode > 0) {
            if (o.option.device) {
                done = net + o.decode;
                dev += o.decode;
            } else {
                cpu = std::max(net, cpu) + o.decode;
                done = cpu;
            }
        }
        end = std::max(end, done);
    }
    return std::max({end, dev, cpu, net});
}

/// The planner's answer for one iteration: an option per tensor (an index into its options),
/// the predicted iteration exact and as planned, and how long deciding took.
struct compress_plan {
    std::vector<std::uint16_t> choice;
    double exact_s = 0, planned_s = 0;
    double decide_s = 0;
};

namespace detail {

/// The state of the overlapped timeline before a tensor (see iteration_time).
struct timeline_state {
    double dev = 0, cpu = 0, net = 0, end = 0;
};

inline void timeline_step(timeline_state& s, const compress_tensor& t, const option_cost& o) {
    s.dev += t.gap;
    double ready = s.dev;
    if (o.encode > 0) {
        if (o.option.device) {
            s.dev += o.encode;
            ready = s.dev;
        } else {
            s.cpu = std::max(ready, s.cpu) + o.encode;
            ready = s.cpu;
        }
    }
    s.net = std::max(ready, s.net) + o.comm;
    double done = s.net;
    if (o.decode > 0) {
        if (o.option.device) {
            done = s.net + o.decode;
            s.dev += o.decode;
        } else {
            s.cpu = std::max(s.net, s.cpu) + o.decode;
            done = s.cpu;
        }
    }
    s.end = std::max(s.end, done);
}

inline double timeline_end(const timeline_state& s) { return std::max({s.end, s.dev, s.cpu, s.net}); }

/// True when every cursor of `a` is at or past `b`'s: the rest of the timeline from `a` ends no
/// earlier than from `b` (every step only grows with its cursors).
inline bool no_earlier(const timeline_state& a, const timeline_state& b) {
    return a.dev >= b.dev && a.cpu >= b.cpu && a.net >= b.net && a.end >= b.end;
}

/// Coordinate descent from `choice`: largest tensors first, each takes the option of the
/// shortest iteration with the others fixed, in passes until none changes (at most four).
/// Returns the iteration's time.
inline double descend(std::span<const compress_tensor> tensors,
                      const std::vector<std::vector<std::uint16_t>>& candidates, std::span<const std::size_t> order,
                      std::vector<std::uint16_t>& choice) {
    const std::size_t n = tensors.size();
    // prefix[i]: the timeline before tensor i under the current choices.
    std::vector<timeline_state> prefix(n + 1);
    auto rebuild = [&](std::size_t from) {
        for (std::size_t i = from; i < n; ++i) {
            prefix[i + 1] = prefix[i];
            timeline_step(prefix[i + 1], tensors[i], tensors[i].options[choice[i]]);
        }
    };
    rebuild(0);
    double best_t = timeline_end(prefix[n]);
    for (int pass = 0; pass < 4; ++pass) {
        bool changed = false;
        for (const std::size_t i : order) {
            std::uint16_t best = choice[i];
            for (const std::uint16_t k : candidates[i]) {
                if (k == choice[i]) continue;
                timeline_state s = prefix[i];
                timeline_step(s, tensors[i], tensors[i].options[k]);
                std::size_t j = i + 1;
                for (; j < n; ++j) {
                    if (no_earlier(s, prefix[j])) break;  // cannot beat the current plan, nor the best so far
                    timeline_step(s, tensors[j], tensors[j].options[choice[j]]);
                }
                if (j < n) continue;
                const double t = timeline_end(s);
                if (t < best_t * (1 - 1e-12)) best_t = t, best = k;
            }
            if (best != choice[i]) {
                choice[i] = best;
                rebuild(i);
                best_t = timeline_end(prefix[n]);
                changed = true;
            }
        }
        if (!changed) break;
    }
    return best_t;
}

/// The options of a tensor worth trying in the overlapped timeline: exact, and those no other
/// option on the same place beats in every stage (the timeline only grows with any stage).
inline std::vector<std::uint16_t> undominated(const compress_tensor& t) {
    std::vector<std::uint16_t> keep{0};
    for (std::size_t i = 1; i < t.options.size(); ++i) {
        const option_cost& a = t.options[i];
        bool dominated = false;
        for (std::size_t j = 1; j < t.options.size() && !dominated; ++j) {
            if (j == i) continue;
            const option_cost& b = t.options[j];
            if (b.option.device != a.option.device) continue;
            const bool no_worse = b.encode <= a.encode && b.comm <= a.comm && b.decode <= a.decode;
            const bool better = b.encode < a.encode || b.comm < a.comm || b.decode < a.decode;
            dominated = no_worse && (better || j < i);  // of two equal options the first stays
        }
        if (!dominated) keep.push_back(static_cast<std::uint16_t>(i));
    }
    return keep;
}

}  // namespace detail

/// Chooses an option for every tensor of an iteration (Espresso's greedy): every tensor starts
/// exact; then, largest tensors first, each takes the option that gives the shortest predicted
/// iteration with the others' choices fixed, in passes until a pass changes nothing (at most
/// four). A second descent starts from each tensor's cheapest option alone, and the shorter
/// iteration of the two is kept. Blocking calls make the iteration a sum, so each tensor's
/// cheapest option is optimal and is taken directly. Deterministic: the same tensors give the
/// same plan on every rank.
inline compress_plan plan_compression(std::span<const compress_tensor> tensors, bool overlap) {
    const auto t0 = std::chrono::steady_clock::now();
    compress_plan plan;
    const std::size_t n = tensors.size();
    plan.choice.assign(n, 0);
    plan.exact_s = iteration_time(tensors, plan.choice, overlap);
    std::vector<std::uint16_t> cheapest(n, 0);
    for (std::size_t i = 0; i < n; ++i) {
        const auto& opts = tensors[i].options;
        for (std::size_t k = 1; k < opts.size(); ++k)
            if (opts[k].total() < opts[cheapest[i]].total()) cheapest[i] = static_cast<std::uint16_t>(k);
    }
    if (!overlap) {
        plan.choice = cheapest;
    } else {
        std::vector<std::vector<std::uint16_t>> candidates(n);
        for (std::size_t i = 0; i < n; ++i) candidates[i] = detail::undominated(tensors[i]);
        std::vector<std::size_t> order(n);
        std::iota(order.begin(), order.end(), std::size_t{0});
        std::stable_sort(order.begin(), order.end(),
                         [&](std::size_t a, std::size_t b) { return tensors[a].bytes > tensors[b].bytes; });
        const double from_exact = detail::descend(tensors, candidates, order, plan.choice);
        std::vector<std::uint16_t> other = cheapest;
        if (other != plan.choice && detail::descend(tensors, candidates, order, other) < from_exact)
            plan.choice = std::move(other);
    }
    plan.planned_s = iteration_time(tensors, plan.choice, overlap);
    plan.decide_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return plan;
}

}  // namespace shunt
