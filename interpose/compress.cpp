// interpose/compress.cpp: the compression executor: consent, the call pattern per communicator, the agreed plan, the compressed schemes with error feedback and the NaN/Inf guard, shadow checks, the header API's control entry and the report line.
#include "compress.hpp"

#include <shunt/collectives/compressed.hpp>
#include <shunt/compress/gpu.hpp>
#include <shunt/errors.hpp>
#include <shunt/gpu/memory.hpp>
#include <shunt/gpu/pack.hpp>
#include <shunt/log.hpp>
#include <shunt/model/measure.hpp>
#include <shunt/plan/call_pattern.hpp>
#include <shunt/plan/compress.hpp>
#include <shunt/topology/topology.hpp>

#include "device_stage.hpp"
#include "export.hpp"
#include "runtime.hpp"

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <vector>

namespace shunt::detail {

/// What the executor keeps of one communicator: its topology's communicators and shape, the
/// pattern of its calls, the plan per position, and per position the call count and error
/// feedback (the compression point); freed with the communicator.
struct compress_executor::context {
    std::mutex mutex;
    bool usable = false;
    const topology* topo = nullptr;
    compress_shape shape;
    compressed_comms comms;
    call_pattern pattern{1024};
    struct position {
        coll_op op = coll_op::allreduce;
        std::int64_t count = 0;
        compress::element type = compress::element::f32;
        compress_consent consent;
        bool device = false;  ///< float device buffers for a library that takes none (this rank's)
    };
    std::vector<position> seen;  ///< per position of the locked pattern
    std::vector<compress_option> plan;  ///< per position; empty while there is none
    struct site {
        std::uint64_t calls = 0;
        compression_point point;
    };
    std::vector<site> sites;
    compressed_scratch scratch;
    std::uint64_t compressed = 0;  ///< compressed calls (shadow mode counts them)
    std::vector<float> wide_in, wide_out;  ///< half data widened to float, and the float result
    device_buffer device_message, device_parts;  ///< the device place's compressed forms
};

namespace {

/// What the header API set on one communicator: its consent, and error feedback to restore at
/// the next plan. Attached to the communicator (not collective), freed with it.
struct comm_settings {
    std::optional<compress_consent> consent;
    std::vector<std::byte> restore;
};

thread_local std::optional<compress_consent> thread_consent;

int delete_context(MPI_Comm, int, void* value, void*) {
    delete static_cast<compress_executor::context*>(value);
    return MPI_SUCCESS;
}
int delete_settings(MPI_Comm, int, void* value, void*) {
    delete static_cast<comm_settings*>(value);
    return MPI_SUCCESS;
}

int make_keyval(MPI_Comm_delete_attr_function* fn) {
    int k = MPI_KEYVAL_INVALID;
    if (PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, fn, &k, nullptr) != MPI_SUCCESS)
        return static_cast<int>(MPI_KEYVAL_INVALID);
    return k;
}
int context_keyval() {
    static const int k = make_keyval(&delete_context);
    return k;
}
int settings_keyval() {
    static const int k = make_keyval(&delete_settings);
    return k;
}

template <class T>
T* attribute(MPI_Comm comm, int keyval) {
    if (keyval == MPI_KEYVAL_INVALID) return nullptr;
    void* v = nullptr;
    int found = 0;
    if (PMPI_Comm_get_attr(comm, keyval, &v, &found) != MPI_SUCCESS || !found) return nullptr;
    return static_cast<T*>(v);
}

const char* op_name(coll_op op) {
    return op == coll_op::allreduce              ? "MPI_Allreduce"
           : op == coll_op::reduce_scatter_block ? "MPI_Reduce_scatter_block"
                                                 : "MPI_Reduce_scatter";
}

compress_op compress_op_of(coll_op op) {
    return op == coll_op::allreduce ? compress_op::allreduce : compress_op::reduce_scatter;
}

/// The signature of a call: what every rank of a valid call passes alike.
std::uint64_t signature(coll_op op, std::int64_t count, compress::element type, const compress_consent& c) {
    std::uint64_t h = compress::detail::mix64(static_cast<std::uint64_t>(op) + 0x51);
    h = compress::detail::mix64(h ^ static_cast<std::uint64_t>(count) ^ (static_cast<std::uint64_t>(type) << 56));
    return compress::detail::mix64(h ^ (static_cast<std::uint64_t>(c.on) << 8 | c.methods));
}

/// The element type of an MPI datatype that may be compressed: MPI_FLOAT, and where the library
/// has one, its binary16 type (MPICH's MPIX_C_FLOAT16; Open MPI 4.1 has none). MPI has no bfloat16.
std::optional<compress::element> element_of(MPI_Datatype t) {
    if (t == MPI_FLOAT) return compress::element::f32;
#if defined(MPIX_C_FLOAT16)
    if (t == MPIX_C_FLOAT16) return compress::element::f16;
#endif
    return std::nullopt;
}

int element_bytes(compress::element e) { return e == compress::element::f32 ? 4 : 2; }

const char* element_name(compress::element e) { return e == compress::element::f32 ? "floats" : "halves"; }

/// The save format of a communicator's feedback: "shuntcf1", then per site its position, step
/// and the two residuals as error_feedback::save() writes them, each with its length.
constexpr char save_magic[9] = "shuntcf1";

void put(std::vector<std::byte>& out, const void* p, std::size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    out.insert(out.end(), b, b + n);
}

template <class T>
bool get(std::span<const std::byte>& in, T& v) {
    if (in.size() < sizeof(T)) return false;
    std::memcpy(&v, in.data(), sizeof(T));
    in = in.subspan(sizeof(T));
    return true;
}

/// Restores the sites saved in `blob` into `sites` (positions beyond them are dropped); throws
/// shunt::error on a malformed blob.
void restore_sites(std::span<const std::byte> blob, std::vector<compress_executor::context::site>& sites) {
    std::vector<compression_point*> points;
    points.reserve(sites.size());
    for (auto& site : sites) points.push_back(&site.point);
    restore_feedback_points(blob, points);
}

}  // namespace

std::vector<std::byte> save_feedback_points(std::span<const compression_point* const> points) {
    std::vector<std::byte> out;
    put(out, save_magic, 8);
    const auto n = static_cast<std::uint32_t>(points.size());
    put(out, &n, 4);
    const compression_point empty;
    for (std::uint32_t k = 0; k < n; ++k) {
        const compression_point& pt = points[k] != nullptr ? *points[k] : empty;
        const std::vector<std::byte> first = pt.first.save(), second = pt.second.save();
        const std::uint64_t len1 = first.size(), len2 = second.size();
        put(out, &k, 4);
        put(out, &pt.step, 8);
        put(out, &len1, 8);
        put(out, first.data(), first.size());
        put(out, &len2, 8);
        put(out, second.data(), second.size());
    }
    return out;
}

void restore_feedback_points(std::span<const std::byte> blob, std::span<compression_point* const> points) {
    if (blob.size() < 8 || std::memcmp(blob.data(), save_magic, 8) != 0)
        throw error("compression checkpoint: not a shunt compression checkpoint");
    blob = blob.subspan(8);
    std::uint32_t n = 0;
    if (!get(blob, n)) throw error("compression checkpoint: truncated");
    for (std::uint32_t k = 0; k < n; ++k) {
        std::uint32_t position = 0;
        std::uint64_t step = 0, len1 = 0, len2 = 0;
        if (!get(blob, position) || !get(blob, step) || !get(blob, len1) || blob.size() < len1)
            throw error("compression checkpoint: truncated");
        const auto first = blob.subspan(0, static_cast<std::size_t>(len1));
        blob = blob.subspan(static_cast<std::size_t>(len1));
        if (!get(blob, len2) || blob.size() < len2) throw error("compression checkpoint: truncated");
        const auto second = blob.subspan(0, static_cast<std::size_t>(len2));
        blob = blob.subspan(static_cast<std::size_t>(len2));
        compression_point scratch;  // positions not kept are still read, so a bad one is refused
        compression_point& pt = position < points.size() && points[position] != nullptr ? *points[position] : scratch;
        pt.first.restore(first);
        pt.second.restore(second);
        pt.step = step;
    }
}

compress_executor::compress_executor(runtime& rt) noexcept : rt_(rt), environment_on_(rt.cfg().compress.on) {}

void compress_executor::count_compressed(std::size_t m, std::uint64_t bytes, std::uint64_t sent) noexcept {
    if (m < by_method_.size()) by_method_[m].fetch_add(1, std::memory_order_relaxed);
    bytes_in_.fetch_add(bytes, std::memory_order_relaxed);
    bytes_sent_.fetch_add(sent, std::memory_order_relaxed);
}

compress_consent compress_executor::thread_or_environment() const noexcept {
    if (overridden_.load(std::memory_order_relaxed) && thread_consent) return *thread_consent;
    return rt_.cfg().compress;
}

compress_consent compress_executor::consent_for(const std::optional<compress_consent>& comm) const noexcept {
    if (!overridden_.load(std::memory_order_relaxed)) return rt_.cfg().compress;
    if (thread_consent) return *thread_consent;
    if (comm) return *comm;
    return rt_.cfg().compress;
}

bool compress_executor::parse_consent(const char* text, std::optional<compress_consent>& out) noexcept {
    out.reset();
    if (text == nullptr || std::string_view(text) == "default") return true;
    compress_consent parsed;
    if (!compress_kind::parse(text, parsed)) return false;
    out = parsed;
    return true;
}

void compress_executor::log_check(const char* call, std::int64_t count, std::size_t position, const std::string& option,
                                  std::uint64_t compressed, const float* got, const float* exact,
                                  std::int64_t n) noexcept {
    double diff = 0, norm = 0, max_error = 0;
    for (std::int64_t i = 0; i < n; ++i) {
        const double d = static_cast<double>(got[i]) - exact[i];
        diff += d * d;
        norm += static_cast<double>(exact[i]) * exact[i];
        max_error = std::max(max_error, std::fabs(d));
    }
    const double error_norm = norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
    log_write(log_level::info, log_category::decide,
              "compression check: %s of %" PRId64 " elements at position %zu (%s), compressed call %" PRIu64
              ": relative error %.3g, largest error %.3g",
              call, count, position, option.c_str(), compressed, error_norm, max_error);
}

namespace {

/// True where the call's float buffers are device memory that the library cannot take: the device
/// place's flat schemes may run them (allreduce only).
bool device_buffers(const device_support& devices, coll_op op, compress::element type, const mpi_coll_args& a) {
    if (op != coll_op::allreduce || type != compress::element::f32 || !devices.in_use() ||
        devices.library_takes_device())
        return false;
    const void* in = a.sendbuf == MPI_IN_PLACE ? a.recvbuf : a.sendbuf;
    return gpu::classify(in) == gpu::memory_kind::device && gpu::classify(a.recvbuf) == gpu::memory_kind::device;
}

/// The device place's flat schemes (allreduce of a summable form, allgather of compressed parts) of
/// option `o` over `comm` for n floats of device buffers: the CUDA compressors encode and decode,
/// and the compressed forms (the host compressors' bits, with the guard's flag word) cross host
/// memory and the library as the host schemes' do, so that a rank whose buffers are host memory
/// runs the same option on the host and every rank gets the same result. The guard reads the
/// compressed forms on the host: a NaN or Inf in an input or in the sum of the forms gives
/// not_finite on every rank, with `out` untouched. Blocking, on the legacy default stream. Only
/// for methods without error feedback (no residual is kept on the device).
compressed_status device_flat_allreduce(MPI_Comm comm, const float* in, float* out, std::int64_t n,
                                        const compress_option& o, compression_point& pt, compressed_scratch& s,
                                        device_buffer& message, device_buffer& parts) {
    using namespace detail::ccoll;
    namespace cg = compress::gpu;
    if (uses_feedback(o.method) || o.hierarchical || o.scheme == compress_scheme::alltoall_allgather)
        throw error("compressed allreduce: the device place runs the flat schemes without feedback only");
    int p = 1;
    SHUNT_CHECK_MPI(PMPI_Comm_size(comm, &p));
    const compress::params prm = compress_params(o.method);
    const std::uint64_t step = pt.step;
    const std::int64_t words = message_words(prm, n), cb = compress::compressed_bytes(prm, n);
    const std::size_t message_bytes = static_cast<std::size_t>(words) * 4;
    const gpu::stream_t st{};
    void* msg = message.get(message_bytes, st);
    cg::compress(prm, in, n, msg, nullptr, st, step);
    ensure(s.send, words);
    if (words >= 2) s.send[static_cast<std::size_t>(words - 2)] = 0;  // the form's padding
    gpu::copy(s.send.data(), msg, static_cast<std::size_t>(cb), st);
    gpu::synchronize(st);
    const auto* form_bytes = reinterpret_cast<const std::byte*>(s.send.data());
    const bool bad = !compress::compressed_finite(prm, form_bytes, n);
    if (o.scheme == compress_scheme::allreduce) {
        const compress::sum_form form = compress::summable(o.method);
        if (form == compress::sum_form::none) throw error("compressed allreduce: this form does not sum");
        s.send[static_cast<std::size_t>(words - 1)] = bad ? nan_word(form) : 0u;
        const std::int64_t elements = form == compress::sum_form::f32 ? words : 2 * words;
        SHUNT_CHECK_MPI(PMPI_Allreduce(MPI_IN_PLACE, s.send.data(), mpi_count(elements), compress::mpi_datatype(form),
                                       form == compress::sum_form::f32 ? MPI_SUM : half_op(form), comm));
        // The same sum on every rank, and so the same verdict.
        if (s.send[static_cast<std::size_t>(words - 1)] != 0 || !compress::compressed_finite(prm, form_bytes, n))
            return compressed_status::not_finite;
        gpu::copy(msg, s.send.data(), static_cast<std::size_t>(cb), st);
        cg::decompress(prm, msg, n, out, st, step);
    } else {
        s.send[static_cast<std::size_t>(words - 1)] = bad ? 1u : 0u;
        ensure(s.recv, words * p);
        SHUNT_CHECK_MPI(PMPI_Allgather(s.send.data(), mpi_count(words), MPI_UINT32_T, s.recv.data(), mpi_count(words),
                                       MPI_UINT32_T, comm));
        for (int r = 0; r < p; ++r)
            if (flagged(prm, s.recv.data() + r * words, n)) return compressed_status::not_finite;
        auto* all = static_cast<std::byte*>(parts.get(message_bytes * static_cast<std::size_t>(p), st));
        gpu::copy(all, s.recv.data(), message_bytes * static_cast<std::size_t>(p), st);
        cg::decompress(prm, all, n, out, st, step);
        for (int r = 1; r < p; ++r)
            cg::decompress_accumulate(prm, all + message_bytes * static_cast<std::size_t>(r), n, out, st, step);
    }
    gpu::synchronize(st);
    ++pt.step;
    return compressed_status::done;
}

}  // namespace

bool compress_executor::consent_of(MPI_Comm comm, compress_consent& out) const noexcept {
    std::optional<compress_consent> own;
    if (overridden_.load(std::memory_order_relaxed))
        if (const auto* s = attribute<comm_settings>(comm, settings_keyval()); s != nullptr) own = s->consent;
    out = consent_for(own);
    return out.on && out.methods != 0;
}

compress_executor::context* compress_executor::context_of(MPI_Comm comm) noexcept {
    const int keyval = context_keyval();
    if (keyval == MPI_KEYVAL_INVALID) return nullptr;
    if (auto* c = attribute<context>(comm, keyval)) return c;
    int inter = 0, size = 0;
    if (PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || PMPI_Comm_size(comm, &size) != MPI_SUCCESS) return nullptr;
    auto* c = new (std::nothrow) context;
    if (c == nullptr) return nullptr;
    if (!inter && size > 1) {
        // Collective over comm: every rank reaches its first eligible call alike.
        try {
            c->topo = &topology::of(comm, rt_.cfg().topology);
            c->shape = compress_shape::of(c->topo->groups());
            c->shape.exact_schedules = rt_.cfg().coll != coll_choice::library;
            c->comms.all = c->topo->comm();
            if (c->shape.hierarchical()) {
                const topology_level& top = c->topo->levels().back();
                c->comms.node = top.group;
                c->comms.rail = top.peers;
            }
            c->usable = true;
        } catch (const std::exception& e) {
            log_debug(log_category::decide, "compression: no topology (%s); calls stay exact", e.what());
        }
    }
    if (PMPI_Comm_set_attr(comm, keyval, c) != MPI_SUCCESS) {
        delete c;
        return nullptr;
    }
    return c;
}

void compress_executor::plan(context& c, MPI_Comm comm) {
    const std::size_t P = c.pattern.period();
    const cost_model& model = rt_.model();
    const settings& cfg = rt_.cfg();
    const MPI_Comm own = c.topo->comm();
    // 1. Gaps and candidacy (a call at least the size threshold), agreed: the longest gap, and a
    // candidate only where every rank's threshold says so.
    const std::vector<double> gaps = c.pattern.gaps();
    std::vector<double> v(3 * P, 0.0);
    // This rank's places for a call site: its buffers' (the device place only where they are
    // device memory; the agreement below offers it only where every rank's are).
    const auto places_for = [](bool device) {
        compress_places p;
        p.device = p.device_flat = p.staged = device;
        return p;
    };
    std::vector<std::pair<std::pair<std::pair<coll_op, int>, int>, std::int64_t>> thresholds;
    std::vector<std::int64_t> threshold(P, 0);
    for (std::size_t i = 0; i < P; ++i) {
        const context::position& at = c.seen[i];
        const int eb = element_bytes(at.type);
        std::int64_t t = cfg.compress_min_bytes;
        if (t <= 0) {
            const auto key = std::make_pair(std::make_pair(at.op, eb), at.consent.methods << 1 | (at.device ? 1 : 0));
            auto it = std::find_if(thresholds.begin(), thresholds.end(), [&](const auto& e) { return e.first == key; });
            if (it == thresholds.end()) {
                thresholds.emplace_back(key, compress_threshold(model, c.shape, compress_op_of(at.op), eb, at.consent,
                                                                places_for(at.device)));
                it = thresholds.end() - 1;
            }
            t = it->second;
        }
        threshold[i] = t;
        v[i] = i < gaps.size() ? gaps[i] : 0.0;
        v[P + i] = at.count * eb >= t ? 0.0 : 1.0;
        v[2 * P + i] = at.device ? 0.0 : 1.0;
    }
    SHUNT_CHECK_MPI(PMPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_DOUBLE, MPI_MAX, own));

    // 2. Every candidate's options and their predicted stages, agreed (the slowest rank's).
    std::vector<compress_tensor> tensors(P);
    std::vector<double> costs;
    for (std::size_t i = 0; i < P; ++i) {
        const context::position& at = c.seen[i];
        compress_tensor& t = tensors[i];
        t.gap = v[i];
        t.bytes = at.count * element_bytes(at.type);
        const compress_consent consent = v[P + i] == 0 ? at.consent : compress_consent{};
        // Device buffers on every rank: the device place too (its flat schemes), every option
        // priced with its copies through host memory.
        t.options = predict_options(model, c.shape, compress_op_of(at.op), at.count, element_bytes(at.type), consent,
                                    places_for(v[2 * P + i] == 0));
        for (const option_cost& o : t.options) costs.insert(costs.end(), {o.encode, o.comm, o.decode});
    }
    SHUNT_CHECK_MPI(
        PMPI_Allreduce(MPI_IN_PLACE, costs.data(), static_cast<int>(costs.size()), MPI_DOUBLE, MPI_MAX, own));
    std::size_t k = 0;
    for (compress_tensor& t : tensors)
        for (option_cost& o : t.options) o.encode = costs[k++], o.comm = costs[k++], o.decode = costs[k++];
    // 3. The greedy (blocking calls), then rank 0's choices for everyone.
    const compress_plan result = plan_compression(tensors, false);
    std::vector<std::uint8_t> codes(P);
    for (std::size_t i = 0; i < P; ++i) codes[i] = tensors[i].options[result.choice[i]].option.code();
    SHUNT_CHECK_MPI(PMPI_Bcast(codes.data(), static_cast<int>(P), MPI_UINT8_T, 0, own));
    c.plan.resize(P);
    for (std::size_t i = 0; i < P; ++i) c.plan[i] = compress_option::from_code(codes[i]);
    c.sites.clear();
    c.sites.resize(P);
    for (auto& s : c.sites) s.calls = 3;  // two copies and the confirming iteration, all exact
    plans_.fetch_add(1, std::memory_order_relaxed);
    if (auto* s = attribute<comm_settings>(comm, settings_keyval()); s != nullptr && !s->restore.empty()) {
        try {
            restore_sites(s->restore, c.sites);
        } catch (const std::exception& e) {
            log_warn(log_category::decide, "compression: cannot restore error feedback (%s); starting from zero",
                     e.what());
        }
        s->restore.clear();
    }
    if (c.topo->rank() != 0 || !log_enabled(log_level::debug, log_category::decide)) return;
    std::size_t compressed = 0;
    for (const compress_option& o : c.plan) compressed += o.exact() ? 0 : 1;
    log_debug(log_category::decide,
              "compression plan for a pattern of %zu calls on %s: %zu compressed; predicted iteration %.3g ms "
              "exact, %.3g ms planned (communication and compression only, gaps %.3g ms); decided in %.3g ms",
              P, c.shape.coll.signature().c_str(), compressed, result.exact_s * 1e3, result.planned_s * 1e3,
              std::accumulate(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(P), 0.0) * 1e3, result.decide_s * 1e3);
    const std::size_t shown = std::min<std::size_t>(P, 64);
    for (std::size_t i = 0; i < shown; ++i) {
        const compress_tensor& t = tensors[i];
        const option_cost& chosen = t.options[result.choice[i]];
        std::size_t alt = 0;  // the best option other than the chosen one
        for (std::size_t j = 0; j < t.options.size(); ++j)
            if (j != result.choice[i] && (alt == result.choice[i] || t.options[j].total() < t.options[alt].total()))
                alt = j;
        std::string why;
        if (t.options.size() == 1)
            why = "below the threshold of " + std::to_string(threshold[i]) + " bytes, or no compressor allowed";
        else {
            char buf[256];
            std::snprintf(buf, sizeof buf, "predicted %.3g ms (encode %.3g, exchange %.3g, decode %.3g); %s %.3g ms",
                          chosen.total() * 1e3, chosen.encode * 1e3, chosen.comm * 1e3, chosen.decode * 1e3,
                          to_string(t.options[alt].option).c_str(), t.options[alt].total() * 1e3);
            why = buf;
        }
        log_debug(log_category::decide, "  position %zu: %s of %" PRId64 " %s -> %s (%s)", i, op_name(c.seen[i].op),
                  c.seen[i].count, element_name(c.seen[i].type), to_string(c.plan[i]).c_str(), why.c_str());
    }
    if (P > shown) log_debug(log_category::decide, "  ... %zu more positions", P - shown);
}

int compress_executor::run(shim s, coll_op op, const mpi_coll_args& a, exact_fn exact, void* ctx) noexcept {
    const std::optional<compress::element> type = element_of(a.recvtype);
    if (!rt_.running() || a.comm == MPI_COMM_NULL || a.op != MPI_SUM || !type) return exact(ctx);
    compress_consent consent;
    if (!consent_of(a.comm, consent)) return exact(ctx);
    // The call's vector: the count (MPI_Allreduce), or every rank's block (the reduce-scatters).
    int size = 0, me = 0;
    if (PMPI_Comm_size(a.comm, &size) != MPI_SUCCESS || size <= 1 || PMPI_Comm_rank(a.comm, &me) != MPI_SUCCESS)
        return exact(ctx);
    std::vector<std::int64_t> counts;
    std::int64_t count = 0;
    if (op == coll_op::allreduce) {
        count = a.recvcount;
    } else {
        if (op == coll_op::reduce_scatter && a.recvcounts == nullptr) return exact(ctx);
        counts.resize(static_cast<std::size_t>(size));
        for (int j = 0; j < size; ++j) {
            const int n = op == coll_op::reduce_scatter ? a.recvcounts[j] : a.recvcount;
            if (n < 0) return exact(ctx);
            counts[static_cast<std::size_t>(j)] = n;
            count += n;
        }
    }
    if (count <= 0 || a.recvbuf == nullptr || a.sendbuf == a.recvbuf) return exact(ctx);
    context* c = context_of(a.comm);
    if (c == nullptr || !c->usable) return exact(ctx);

    std::unique_lock lock(c->mutex);
    const double t0 = now_s();
    const call_pattern::step step = c->pattern.next(signature(op, count, *type, consent), t0);
    struct end_mark {  // the call's end, for the gaps (whichever way it returns)
        context& c;
        ~end_mark() { c.pattern.ended(now_s()); }
    } mark{*c};
    if (!step.locked) {
        c->plan.clear();
        c->sites.clear();
        unlocked_.fetch_add(1, std::memory_order_relaxed);
        return exact(ctx);
    }
    if (step.fresh) {
        c->plan.clear();
        c->sites.clear();
        c->seen.assign(c->pattern.period(), {});
    }
    const bool on_device = device_buffers(rt_.devices(), op, *type, a);
    c->seen[step.position] = {op, count, *type, consent, on_device};
    if (step.confirmed) {
        try {
            plan(*c, a.comm);
        } catch (const std::exception& e) {
            // Only the agreement can fail here, alike on every rank (or MPI is broken).
            rt_.internal_failure(s, e.what());
            c->plan.clear();
        }
        warmup_.fetch_add(1, std::memory_order_relaxed);
        return exact(ctx);
    }
    if (c->plan.empty()) {
        unlocked_.fetch_add(1, std::memory_order_relaxed);
        return exact(ctx);
    }
    context::site& site = c->sites[step.position];
    const compress_option o = c->plan[step.position];
    if (o.exact()) {
        planned_exact_.fetch_add(1, std::memory_order_relaxed);
        return exact(ctx);
    }
    if (++site.calls <= static_cast<std::uint64_t>(rt_.cfg().compress_warmup)) {
        warmup_.fetch_add(1, std::memory_order_relaxed);
        return exact(ctx);
    }

    const char* name = shim_names[static_cast<std::size_t>(s)];
    const std::int64_t check_every = rt_.cfg().compress_check;
    const bool shadow = check_every > 0 && ++c->compressed % static_cast<std::uint64_t>(check_every) == 0;
    const bool in_place = a.sendbuf == MPI_IN_PLACE;
    const bool wide = *type != compress::element::f32;  // half data: the schemes run on floats
    mpi_coll_args args = a;
    device_stage dev(rt_.devices().in_use(), rt_.devices().library_takes_device());
    constexpr int not_finite = -1;
    std::vector<float> ref;
    const std::int64_t result_count = op == coll_op::allreduce ? count : counts[static_cast<std::size_t>(me)];
    // The device place (float device buffers, the CUDA compressors, only the forms staged).
    const auto on_gpu = [&] {
        const auto* in = static_cast<const float*>(in_place ? a.recvbuf : a.sendbuf);
        auto* out = static_cast<float*>(a.recvbuf);
        const auto floats = static_cast<std::size_t>(count) * 4;
        if (shadow) {  // the exact sum first, of the input copied to the host (in place: it is overwritten)
            ref.resize(static_cast<std::size_t>(count));
            gpu::copy(ref.data(), in, floats, gpu::stream_t{});
            gpu::synchronize(gpu::stream_t{});
            SHUNT_CHECK_MPI(PMPI_Allreduce(MPI_IN_PLACE, ref.data(), detail::ccoll::mpi_count(count), MPI_FLOAT,
                                           MPI_SUM, c->comms.all));
        }
        if (device_flat_allreduce(c->comms.all, in, out, count, o, site.point, c->scratch, c->device_message,
                                  c->device_parts) != compressed_status::done)
            return not_finite;
        if (shadow && c->topo->rank() == 0) {
            std::vector<float> got(static_cast<std::size_t>(count));
            gpu::copy(got.data(), out, floats, gpu::stream_t{});
            gpu::synchronize(gpu::stream_t{});
            log_check(name, count, step.position, to_string(o), c->compressed, got.data(), ref.data(), count);
        }
        return MPI_SUCCESS;
    };
    try {
        if (dev.enabled() && !(o.device && on_device)) {
            byte_span all, mine;
            all.add(a.recvtype, count);
            mine.add(a.recvtype, result_count);
            dev.add(args.sendbuf, all, true, false);
            dev.add(args.recvbuf, in_place ? all : mine, in_place, true);
        }
        const int rc = o.device && on_device ? on_gpu() : dev.run(false, [&] {
            const void* user_in = in_place ? args.recvbuf : args.sendbuf;
            const float* in = static_cast<const float*>(user_in);
            float* out = static_cast<float*>(args.recvbuf);
            if (wide) {  // widened (exactly); error feedback stays in float, the result is narrowed at the end
                detail::ccoll::ensure(c->wide_in, count);
                detail::ccoll::ensure(c->wide_out, result_count);
                compress::from_f16(static_cast<const std::uint16_t*>(user_in), count, c->wide_in.data());
                in = c->wide_in.data();
                out = c->wide_out.data();
            }
            if (shadow) {  // the exact sum in float first: the compressed call may write over `in`
                ref.resize(static_cast<std::size_t>(std::max<std::int64_t>(result_count, 1)));
                if (op == coll_op::allreduce) {
                    SHUNT_CHECK_MPI(
                        PMPI_Allreduce(in, ref.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, c->comms.all));
                } else {
                    std::vector<int> rc(counts.begin(), counts.end());
                    SHUNT_CHECK_MPI(PMPI_Reduce_scatter(in, ref.data(), rc.data(), MPI_FLOAT, MPI_SUM, c->comms.all));
                }
            }
            const compressed_status st =
                op == coll_op::allreduce
                    ? compressed_allreduce(c->comms, in, out, count, o, site.point, c->scratch)
                    : compressed_reduce_scatter(c->comms.all, in, out, counts, o, site.point, c->scratch);
            if (st != compressed_status::done) return not_finite;
            if (shadow && c->topo->rank() == 0)
                log_check(name, count, step.position, to_string(o), c->compressed, out, ref.data(), result_count);
            if (wide) compress::to_f16(out, result_count, static_cast<std::uint16_t*>(args.recvbuf));
            return MPI_SUCCESS;
        });
        if (rc == not_finite) {
            fallbacks_.fetch_add(1, std::memory_order_relaxed);
            if (c->topo->rank() == 0 && !nonfinite_warned_.exchange(true))
                log_warn(log_category::decide,
                         "%s: NaN or Inf in a compressed reduction's input or result on some rank; that call ran "
                         "exact (said once)",
                         name);
            return exact(ctx);
        }
    } catch (const unsupported& e) {
        // Sizes MPI cannot count: found before any message, alike on every rank.
        log_debug(log_category::decide, "%s: %s; exact", name, e.what());
        return exact(ctx);
    } catch (const mpi_error& e) {
        // The other ranks are inside the same exchange: no way back to the library.
        log_error(log_category::init, "%s: %s", name, e.what());
        PMPI_Comm_call_errhandler(a.comm, e.code());
        return e.code();
    } catch (const std::exception& e) {
        log_error(log_category::init, "%s: shunt failed inside a compressed exchange (%s)", name, e.what());
        PMPI_Comm_call_errhandler(a.comm, MPI_ERR_INTERN);
        return MPI_ERR_INTERN;
    }
    const std::int64_t bytes = count * element_bytes(*type);
    count_compressed(static_cast<std::size_t>(o.method), static_cast<std::uint64_t>(bytes),
                     static_cast<std::uint64_t>(compress::compressed_bytes(compress_params(o.method), count)));
    rt_.count_collective(s, bytes);
    return MPI_SUCCESS;
}

int compress_executor::control(int what, MPI_Comm comm, const char* text, void* data, std::size_t* bytes) noexcept {
    try {
        switch (what) {
            case 0: return 1;  // the interface's version
            case 1:  // a communicator's consent ("default": the environment's again)
            case 2: {  // this thread's consent (null or "default": none)
                std::optional<compress_consent> consent;
                if (!parse_consent(text, consent)) return -1;
                if (what == 2) {
                    thread_consent = consent;
                } else {
                    if (comm == MPI_COMM_NULL) return -1;
                    auto* s = attribute<comm_settings>(comm, settings_keyval());
                    if (s == nullptr) {
                        s = new comm_settings;
                        if (PMPI_Comm_set_attr(comm, settings_keyval(), s) != MPI_SUCCESS) {
                            delete s;
                            return -1;
                        }
                    }
                    s->consent = consent;
                }
                if (consent) overridden_.store(true, std::memory_order_relaxed);
                return 0;
            }
            case 3: {  // save this rank's feedback on comm into data (*bytes: its room, then the size)
                if (comm == MPI_COMM_NULL || bytes == nullptr) return -1;
                context* c = attribute<context>(comm, context_keyval());
                std::unique_lock<std::mutex> lock;
                if (c != nullptr) lock = std::unique_lock(c->mutex);
                std::vector<const compression_point*> points;
                if (c != nullptr)
                    for (const context::site& site : c->sites) points.push_back(&site.point);
                const std::vector<std::byte> out = save_feedback_points(points);
                const std::size_t room = *bytes;
                *bytes = out.size();
                if (data == nullptr || room < out.size()) return 1;
                std::memcpy(data, out.data(), out.size());
                return 0;
            }
            case 4: {  // restore: now into the current plan's sites, else at the next plan
                if (comm == MPI_COMM_NULL || bytes == nullptr || (data == nullptr && *bytes > 0)) return -1;
                const std::span<const std::byte> blob(static_cast<const std::byte*>(data), *bytes);
                if (context* c = attribute<context>(comm, context_keyval()); c != nullptr) {
                    const std::lock_guard lock(c->mutex);
                    if (!c->sites.empty()) {
                        std::vector<context::site> copy(c->sites.size());
                        for (std::size_t i = 0; i < copy.size(); ++i) copy[i].calls = c->sites[i].calls;
                        restore_sites(blob, copy);  // all or nothing
                        c->sites = std::move(copy);
                        return 0;
                    }
                }
                restore_feedback_points(blob, {});  // refuse a malformed blob now
                auto* s = attribute<comm_settings>(comm, settings_keyval());
                if (s == nullptr) {
                    s = new comm_settings;
                    if (PMPI_Comm_set_attr(comm, settings_keyval(), s) != MPI_SUCCESS) {
                        delete s;
                        return -1;
                    }
                }
                s->restore.assign(blob.begin(), blob.end());
                return 0;
            }
            default: return -1;
        }
    } catch (const std::exception& e) {
        log_warn(log_category::decide, "shunt_compress_control: %s", e.what());
        return -1;
    }
}

std::string compress_executor::report_text() const {
    const std::uint64_t plans = plans_.load(std::memory_order_relaxed);
    std::uint64_t compressed = 0;
    std::string methods;
    for (std::size_t m = 0; m < by_method_.size(); ++m)
        if (const std::uint64_t n = by_method_[m].load(std::memory_order_relaxed)) {
            compressed += n;
            char buf[48];
            std::snprintf(buf, sizeof buf, "%s%s %" PRIu64, methods.empty() ? "" : ", ",
                          compress_method_names[m].data(), n);
            methods += buf;
        }
    if (plans == 0 && compressed == 0 && fallbacks_.load() == 0) return {};
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "compression: %" PRIu64 " calls compressed (%s), %" PRIu64 " kept exact by the plan, %" PRIu64
                  " warm-up, %" PRIu64 " outside a confirmed pattern, %" PRIu64 " non-finite fallbacks; %" PRIu64
                  " plans; %" PRIu64 " bytes of floats sent as %" PRIu64,
                  compressed, methods.empty() ? "none" : methods.c_str(), planned_exact_.load(), warmup_.load(),
                  unlocked_.load(), fallbacks_.load(), plans, bytes_in_.load(), bytes_sent_.load());
    return buf;
}

}  // namespace shunt::detail

/// The header API's control entry (<shunt/compress/control.hpp> finds it with dlsym): exported.
extern "C" SHUNT_EXPORT int shunt_compress_control(int what, MPI_Comm comm, const char* text, void* data,
                                                   std::size_t* bytes) noexcept {
    shunt::detail::runtime* rt = shunt::detail::runtime::instance();
    if (rt == nullptr) return -2;  // SHUNT_DISABLE, or shunt could not start
    return rt->compression().control(what, comm, text, data, bytes);
}
