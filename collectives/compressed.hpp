// shunt/collectives/compressed.hpp: compressed allreduce (flat and hierarchical) and reduce-scatter of float tensors over MPI in host memory, in plan/compress.hpp's schemes, with error feedback per compression point and a guard that makes every rank fall back to exact alike when any rank meets NaN or Inf.
#pragma once

#include <shunt/collectives/flat_allgather.hpp>
#include <shunt/collectives/flat_reduce_scatter.hpp>
#include <shunt/collectives/mpi_transport.hpp>
#include <shunt/collectives/reduction.hpp>
#include <shunt/compress/compress.hpp>
#include <shunt/compress/error_feedback.hpp>
#include <shunt/compress/mpi_op.hpp>
#include <shunt/errors.hpp>
#include <shunt/plan/compress.hpp>

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace shunt {

/// The state of one compression point (a communicator, a position in the iteration's pattern, a
/// count and a datatype): the residual of the tensor's compression, that of the re-compressed
/// slice (alltoall+allgather), and the calls compressed so far, which random-k's draws follow.
/// Every rank keeps its own; the step advances alike on every rank. Not thread-safe.
struct compression_point {
    compress::error_feedback first, second;
    std::uint64_t step = 0;
};

/// Buffers a compressed collective reuses from call to call, and the error feedback updates of
/// the last call, which commit_feedback() applies once every rank has agreed the call succeeded.
/// One per communicator (or thread). Not thread-safe.
struct compressed_scratch {
    std::vector<float> work, mine, acc, work2, mine2, owned, owned_out, tmp;
    std::vector<std::uint32_t> send, recv;
    std::vector<int> counts, displs, counts2, displs2;
    compression_point* pending = nullptr;
    std::int64_t pending_first = -1, pending_second = -1;
};

/// How a compressed collective ended: `done` with the result written, or `not_finite` on every
/// rank alike (some rank's input, compressed form or result held NaN or Inf, or a compressed sum
/// overflowed): the output is untouched and the caller runs the exact collective.
enum class compressed_status : std::uint8_t { done, not_finite };

/// The communicators of the schemes: all ranks, and for the hierarchical ones each rank's node
/// (the ranks of its outermost group) and rail (the ranks at its position in every node).
struct compressed_comms {
    MPI_Comm all = MPI_COMM_NULL, node = MPI_COMM_NULL, rail = MPI_COMM_NULL;
};

namespace detail::ccoll {

inline void ensure(std::vector<float>& v, std::int64_t n) {
    if (static_cast<std::int64_t>(v.size()) < n) v.resize(static_cast<std::size_t>(n));
}
inline void ensure(std::vector<std::uint32_t>& v, std::int64_t words) {
    if (static_cast<std::int64_t>(v.size()) < words) v.resize(static_cast<std::size_t>(words));
}

/// An MPI count, or shunt::unsupported where it does not fit (the caller then runs exact).
inline int mpi_count(std::int64_t n) {
    if (n < 0 || n > INT_MAX)
        throw unsupported("compressed collective: a message of " + std::to_string(n) + " elements");
    return static_cast<int>(n);
}

/// The guard's flag word of a summable form's message, when raised: a NaN of the form, so that the
/// sum is NaN wherever some rank's flag is.
inline std::uint32_t nan_word(compress::sum_form form) {
    return form == compress::sum_form::f32 ? 0x7fc00000u : form == compress::sum_form::f16 ? 0x7e007e00u : 0x7fc07fc0u;
}

/// Words (4 bytes) of a message carrying the compressed form of n elements and a guard flag.
inline std::int64_t message_words(const compress::params& p, std::int64_t n) {
    return (compress::compressed_bytes(p, n) + 3) / 4 + 1;
}

/// The user operations that add FP16 and BF16 forms in float, made once (never freed).
inline MPI_Op half_op(compress::sum_form f) {
    static const MPI_Op f16 = compress::make_mpi_op(compress::sum_form::f16);
    static const MPI_Op bf16 = compress::make_mpi_op(compress::sum_form::bf16);
    return f == compress::sum_form::f16 ? f16 : bf16;
}

/// Element i's slice of n elements split into p near-equal parts: [lo, lo + len).
inline std::int64_t slice_lo(std::int64_t n, int p, int i) {
    const std::int64_t base = n / p, extra = n % p;
    return i * base + std::min<std::int64_t>(i, extra);
}
inline std::int64_t slice_len(std::int64_t n, int p, int i) { return n / p + (i < n % p ? 1 : 0); }

/// What to compress: `in` itself, or where the method keeps feedback work = in + the point's
/// residual (readied for n floats), in one pass that also finds whether it is finite (`finite`).
inline const float* corrected_input(const compress_option& o, const float* in, std::int64_t n,
                                    compress::error_feedback& ef, std::vector<float>& work, bool& finite) {
    if (!uses_feedback(o.method)) {
        // A form that keeps every element (the casts) or a scale per block (int8, int4, sign: NaN
        // for a block with NaN or Inf) shows a non-finite input itself: compressed_finite() finds it.
        const bool covered = o.method != compress::method::random_k && o.method != compress::method::top_k;
        finite = covered || compress::all_finite(in, n);
        return in;
    }
    ef.prepare(n, compress::element::f32);
    ensure(work, n);
    const float* r = ef.residual().data();
    float* w = work.data();
    std::uint32_t bad = 0;
    for (std::int64_t i = 0; i < n; ++i) {  // vectorised by the compiler: no branch
        const float x = in[i] + r[i];
        w[i] = x;
        bad |= static_cast<std::uint32_t>((compress::detail::bits_of(x) & 0x7fffffffu) >= compress::detail::inf_bits);
    }
    finite = bad == 0;
    return w;
}

/// Compresses n floats of `work` into `out` (message_words words: the form, then the flag word
/// last), its own reconstruction into `mine` where feedback is kept; returns false when the form
/// is not finite. `bad` forces the flag.
inline bool compress_message(const compress_option& o, const float* work, std::int64_t n, std::uint32_t* out,
                             float* mine, std::uint64_t step, bool bad) {
    const compress::params p = compress_params(o.method);
    const std::int64_t words = message_words(p, n);
    auto* bytes = reinterpret_cast<std::byte*>(out);
    out[words - 2 < 0 ? 0 : words - 2] = 0;  // the form's padding (the flag below overwrites a 1-word message)
    compress::compress(p, work, n, bytes, step);
    const bool finite = compress::compressed_finite(p, bytes, n);
    if (mine != nullptr && uses_feedback(o.method)) compress::decompress(p, bytes, n, mine, step);
    out[words - 1] = bad || !finite ? 1u : 0u;
    return finite;
}

inline bool flagged(const compress::params& p, const std::uint32_t* message, std::int64_t n) {
    return message[message_words(p, n) - 1] != 0;
}

/// Sums `p` compressed messages of `n` elements each, `stride` words apart from `parts`, into
/// `out` (the first decompressed, the others added); true when any carries the non-finite flag.
inline bool sum_parts(const compress::params& prm, const std::uint32_t* parts, std::int64_t stride, int p,
                      std::int64_t n, float* out, std::uint64_t step) {
    bool bad = false;
    for (int r = 0; r < p; ++r) {
        const std::uint32_t* part = parts + r * stride;
        bad = bad || flagged(prm, part, n);
        if (r == 0)
            compress::decompress(prm, reinterpret_cast<const std::byte*>(part), n, out, step);
        else
            compress::decompress_accumulate(prm, reinterpret_cast<const std::byte*>(part), n, out, step);
    }
    return bad;
}

inline void stage_feedback(compressed_scratch& s, compression_point& pt, std::int64_t first, std::int64_t second) {
    s.pending = &pt;
    s.pending_first = first;
    s.pending_second = second;
}

/// Reduce-scatter (sum) of n floats of `in` among the members of `t` by pairwise exchanges, into
/// `own` (member me's share of near-equal shares); `tmp` holds a share. Each share is summed by
/// its owner, its own part first, then the others from the nearest member back (the same order
/// in every run).
template <class Transport>
void pairwise_reduce_scatter(Transport& t, const float* in, std::int64_t n, float* own, std::vector<float>& tmp) {
    const int q = t.size(), me = t.rank();
    const std::int64_t lo = slice_lo(n, q, me), len = slice_len(n, q, me);
    if (len > 0) std::memcpy(own, in + lo, static_cast<std::size_t>(len) * 4);
    ensure(tmp, std::max<std::int64_t>(len, 1));
    for (int step = 1; step < q; ++step) {
        const int to = (me + step) % q, from = (me - step + q) % q;
        t.sendrecv(to, in + slice_lo(n, q, to), 4 * slice_len(n, q, to), from, tmp.data(), 4 * len);
        compress::combine(compress::sum_form::f32, tmp.data(), own, len);
    }
}

/// The flat schemes over `comm`, the result into s.acc; feedback staged, not committed.
inline compressed_status flat_allreduce(MPI_Comm comm, const float* in, std::int64_t n, const compress_option& o,
                                        compression_point& pt, compressed_scratch& s) {
    int p = 1, me = 0;
    SHUNT_CHECK_MPI(PMPI_Comm_size(comm, &p));
    SHUNT_CHECK_MPI(PMPI_Comm_rank(comm, &me));
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
        const compress::sum_form form = compress::summable(o.method);
        if (form == compress::sum_form::none) throw error("compressed allreduce: this form does not sum");
        const std::int64_t words = message_words(prm, n);
        ensure(s.send, words);
        bad = !compress_message(o, src, n, s.send.data(), mine, step, bad) || bad;
        s.send[static_cast<std::size_t>(words - 1)] = bad ? nan_word(form) : 0u;
        const std::int64_t elements = form == compress::sum_form::f32 ? words : 2 * words;
        SHUNT_CHECK_MPI(PMPI_Allreduce(MPI_IN_PLACE, s.send.data(), mpi_count(elements), compress::mpi_datatype(form),
                                       form == compress::sum_form::f32 ? MPI_SUM : half_op(form), comm));
        if (s.send[static_cast<std::size_t>(words - 1)] != 0) return compressed_status::not_finite;
        compress::decompress(prm, reinterpret_cast<const std::byte*>(s.send.data()), n, s.acc.data(), step);
    } else if (o.scheme == compress_scheme::allgather) {
        const std::int64_t words = message_words(prm, n);
        ensure(s.send, words);
        ensure(s.recv, words * p);
        compress_message(o, src, n, s.send.data(), mine, step, bad);
        SHUNT_CHECK_MPI(PMPI_Allgather(s.send.data(), mpi_count(words), MPI_UINT32_T, s.recv.data(), mpi_count(words),
                                       MPI_UINT32_T, comm));
        for (int r = 0; r < p; ++r)
            if (flagged(prm, s.recv.data() + r * words, n)) return compressed_status::not_finite;
        for (int r = 0; r < p; ++r) {
            const auto* part = reinterpret_cast<const std::byte*>(s.recv.data() + r * words);
            if (r == 0)
                compress::decompress(prm, part, n, s.acc.data(), step);
            else
                compress::decompress_accumulate(prm, part, n, s.acc.data(), step);
        }
    } else if (o.scheme == compress_scheme::alltoall_allgather) {
        // Slices: compress each, send slice j to rank j, add the parts of my slice in rank order,
        // compress the sum again (with its own feedback), gather every rank's compressed sum.
        s.counts.assign(static_cast<std::size_t>(p), 0);
        s.displs.assign(static_cast<std::size_t>(p), 0);
        s.counts2.assign(static_cast<std::size_t>(p), 0);
        s.displs2.assign(static_cast<std::size_t>(p), 0);
        std::int64_t total = 0;
        for (int j = 0; j < p; ++j) {
            const std::int64_t w = message_words(prm, slice_len(n, p, j));
            s.counts[static_cast<std::size_t>(j)] = mpi_count(w);
            s.displs[static_cast<std::size_t>(j)] = mpi_count(total);
            total += w;
        }
        const std::int64_t mine_len = slice_len(n, p, me), mine_words = message_words(prm, mine_len);
        ensure(s.send, total);
        ensure(s.recv, std::max(total, mine_words * p));
        for (int j = 0; j < p; ++j) {
            const std::int64_t lo = slice_lo(n, p, j), len = slice_len(n, p, j);
            compress_message(o, src + lo, len, s.send.data() + s.displs[static_cast<std::size_t>(j)],
                             feedback ? mine + lo : nullptr, step, bad);
            s.counts2[static_cast<std::size_t>(j)] = mpi_count(mine_words);
            s.displs2[static_cast<std::size_t>(j)] = mpi_count(j * mine_words);
        }
        SHUNT_CHECK_MPI(PMPI_Alltoallv(s.send.data(), s.counts.data(), s.displs.data(), MPI_UINT32_T, s.recv.data(),
                                       s.counts2.data(), s.displs2.data(), MPI_UINT32_T, comm));
        ensure(s.owned, mine_len);
        const bool parts_bad = sum_parts(prm, s.recv.data(), mine_words, p, mine_len, s.owned.data(), step);
        // The sum of my slice, compressed again.
        const std::uint64_t step2 = 2 * step + 1;
        bool sum_finite = true;
        const float* src2 = corrected_input(o, s.owned.data(), mine_len, pt.second, s.work2, sum_finite);
        const bool bad2 = parts_bad || !sum_finite;
        if (feedback) ensure(s.mine2, mine_len);
        std::vector<std::uint32_t>& out = s.send;  // the slices are sent: reuse the buffer
        compress_message(o, src2, mine_len, out.data(), feedback ? s.mine2.data() : nullptr, step2, bad2);
        SHUNT_CHECK_MPI(PMPI_Allgatherv(out.data(), mpi_count(mine_words), MPI_UINT32_T, s.recv.data(), s.counts.data(),
                                        s.displs.data(), MPI_UINT32_T, comm));
        for (int j = 0; j < p; ++j)
            if (flagged(prm, s.recv.data() + s.displs[static_cast<std::size_t>(j)], slice_len(n, p, j)))
                return compressed_status::not_finite;
        for (int j = 0; j < p; ++j)
            compress::decompress(
                prm, reinterpret_cast<const std::byte*>(s.recv.data() + s.displs[static_cast<std::size_t>(j)]),
                slice_len(n, p, j), s.acc.data() + slice_lo(n, p, j), step2);
        if (!compress::all_finite(s.acc.data(), n)) return compressed_status::not_finite;
        stage_feedback(s, pt, feedback ? n : -1, feedback ? mine_len : -1);
        return compressed_status::done;
    } else {
        throw error("compressed allreduce: an exact option");
    }
    if (!compress::all_finite(s.acc.data(), n)) return compressed_status::not_finite;
    stage_feedback(s, pt, feedback ? n : -1, -1);
    return compressed_status::done;
}

}  // namespace detail::ccoll

/// Applies the error feedback of the last compressed call through `s` (the residuals become what
/// its compression dropped) and advances its point's step. Call it once every rank has agreed
/// the call succeeded; the compressed collectives below call it themselves.
inline void commit_feedback(compressed_scratch& s) {
    if (s.pending == nullptr) return;
    compression_point& pt = *s.pending;
    if (s.pending_first >= 0) pt.first.update(s.work.data(), s.mine.data(), s.pending_first);
    if (s.pending_second >= 0) pt.second.update(s.work2.data(), s.mine2.data(), s.pending_second);
    ++pt.step;
    s.pending = nullptr;
}

/// Allreduce (sum) of `count` floats, compressed as option `o` (not exact): `in` to `out` (the
/// same pointer for in place). Flat schemes run on c.all; hierarchical ones reduce-scatter
/// exactly on c.node, run the scheme on c.rail over the part each rank owns, and allgather exactly
/// on c.node. Contract across ranks: every rank of the communicators calls it, in the same order
/// relative to other collectives on them, with the same count and option, and its own point for
/// this call site; blocking. Results are the same on every rank (the parts are added in rank
/// order). On compressed_status::not_finite (every rank alike) `out` is untouched. Throws
/// shunt::unsupported where a message exceeds MPI's int counts (before any communication, alike
/// on every rank), shunt::mpi_error when MPI fails.
inline compressed_status compressed_allreduce(const compressed_comms& c, const float* in, float* out,
                                              std::int64_t count, const compress_option& o, compression_point& pt,
                                              compressed_scratch& s) {
    s.pending = nullptr;
    if (count <= 0) return compressed_status::done;
    if (!o.hierarchical) {
        const compressed_status st = detail::ccoll::flat_allreduce(c.all, in, count, o, pt, s);
        if (st != compressed_status::done) return st;
        commit_feedback(s);
        std::memcpy(out, s.acc.data(), static_cast<std::size_t>(count) * 4);
        return st;
    }
    // Inside the node shunt's own reduce-scatter and allgather over point-to-point messages (the
    // libraries' MPI_Reduce_scatter can be several times slower on shared memory); `in` is only
    // read, so it stays as it was until every rank knows the call succeeded.
    mpi_transport node(c.node);
    const int q = node.size(), local = node.rank();
    std::vector<std::int64_t> share_bytes(static_cast<std::size_t>(q));
    for (int k = 0; k < q; ++k) share_bytes[static_cast<std::size_t>(k)] = 4 * detail::ccoll::slice_len(count, q, k);
    const std::int64_t own = detail::ccoll::slice_len(count, q, local), lo = detail::ccoll::slice_lo(count, q, local);
    detail::ccoll::ensure(s.owned_out, std::max<std::int64_t>(own, 1));
    detail::ccoll::pairwise_reduce_scatter(node, in, count, s.owned_out.data(), s.tmp);
    compress_option rail = o;
    rail.hierarchical = false;
    compressed_status st =
        own > 0 ? detail::ccoll::flat_allreduce(c.rail, s.owned_out.data(), own, rail, pt, s) : compressed_status::done;
    // Every node holds one member of every rail: the node's verdict is everyone's.
    int bad = st == compressed_status::done ? 0 : 1;
    SHUNT_CHECK_MPI(PMPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, c.node));
    if (bad != 0) {
        s.pending = nullptr;
        return compressed_status::not_finite;
    }
    if (own > 0) {
        commit_feedback(s);
        std::memcpy(out + lo, s.acc.data(), static_cast<std::size_t>(own) * 4);
    }
    flat_allgather(node, reinterpret_cast<std::byte*>(out), share_bytes);
    return compressed_status::done;
}

/// Reduce-scatter (sum) of floats, compressed as option `o` (allreduce: a reduce-scatter of the
/// summable form; allgather: an alltoall of compressed blocks): rank j receives the sum of every
/// rank's block j, `counts[j]` elements, blocks in rank order in `in` (out may be in itself: in
/// place, the result in its first counts[me] elements). Contract as compressed_allreduce, with
/// the same counts on every rank; results are the same as every rank would compute them (parts
/// added in rank order); one more small allreduce agrees on the guard.
inline compressed_status compressed_reduce_scatter(MPI_Comm comm, const float* in, float* out,
                                                   std::span<const std::int64_t> counts, const compress_option& o,
                                                   compression_point& pt, compressed_scratch& s) {
    s.pending = nullptr;
    int p = 1, me = 0;
    SHUNT_CHECK_MPI(PMPI_Comm_size(comm, &p));
    SHUNT_CHECK_MPI(PMPI_Comm_rank(comm, &me));
    if (static_cast<int>(counts.size()) != p) throw error("compressed reduce-scatter: one count per rank");
    std::vector<std::int64_t> lo(static_cast<std::size_t>(p) + 1, 0);
    for (int j = 0; j < p; ++j) lo[static_cast<std::size_t>(j) + 1] = lo[static_cast<std::size_t>(j)] + counts[j];
    const std::int64_t n = lo.back(), mine_len = counts[static_cast<std::size_t>(me)];
    if (n <= 0) return compressed_status::done;
    const compress::params prm = compress_params(o.method);
    const bool feedback = uses_feedback(o.method);
    const std::uint64_t step = pt.step;
    bool finite = true;
    const float* src = detail::ccoll::corrected_input(o, in, n, pt.first, s.work, finite);
    const bool bad = !finite;
    if (feedback) detail::ccoll::ensure(s.mine, n);
    detail::ccoll::ensure(s.acc, std::max<std::int64_t>(mine_len, 1));
    s.counts.assign(static_cast<std::size_t>(p), 0);
    s.displs.assign(static_cast<std::size_t>(p), 0);
    std::int64_t total = 0;
    for (int j = 0; j < p; ++j) {
        const std::int64_t w = detail::ccoll::message_words(prm, counts[static_cast<std::size_t>(j)]);
        s.counts[static_cast<std::size_t>(j)] = detail::ccoll::mpi_count(w);
        s.displs[static_cast<std::size_t>(j)] = detail::ccoll::mpi_count(total);
        total += w;
    }
    detail::ccoll::ensure(s.send, total);
    for (int j = 0; j < p; ++j)
        detail::ccoll::compress_message(o, src + lo[static_cast<std::size_t>(j)], counts[static_cast<std::size_t>(j)],
                                        s.send.data() + s.displs[static_cast<std::size_t>(j)],
                                        feedback ? s.mine.data() + lo[static_cast<std::size_t>(j)] : nullptr, step,
                                        bad);
    const std::int64_t mine_words = detail::ccoll::message_words(prm, mine_len);
    bool mine_bad = false;
    if (o.scheme == compress_scheme::allreduce) {
        const compress::sum_form form = compress::summable(o.method);
        if (form == compress::sum_form::none) throw error("compressed reduce-scatter: this form does not sum");
        const std::uint32_t raised = detail::ccoll::nan_word(form);
        for (int j = 0; j < p; ++j) {
            std::uint32_t& flag = s.send[static_cast<std::size_t>(s.displs[static_cast<std::size_t>(j)] +
                                                                  s.counts[static_cast<std::size_t>(j)] - 1)];
            flag = flag != 0 ? raised : 0u;
        }
        const int per_word = form == compress::sum_form::f32 ? 1 : 2;
        std::vector<int> elements(static_cast<std::size_t>(p));
        for (int j = 0; j < p; ++j)
            elements[static_cast<std::size_t>(j)] =
                detail::ccoll::mpi_count(std::int64_t{s.counts[static_cast<std::size_t>(j)]} * per_word);
        detail::ccoll::ensure(s.recv, mine_words);
        SHUNT_CHECK_MPI(PMPI_Reduce_scatter(s.send.data(), s.recv.data(), elements.data(), compress::mpi_datatype(form),
                                            form == compress::sum_form::f32 ? MPI_SUM : detail::ccoll::half_op(form),
                                            comm));
        mine_bad = s.recv[static_cast<std::size_t>(mine_words - 1)] != 0;
        if (!mine_bad)
            compress::decompress(prm, reinterpret_cast<const std::byte*>(s.recv.data()), mine_len, s.acc.data(), step);
    } else {
        detail::ccoll::ensure(s.recv, mine_words * p);
        std::vector<int> rc(static_cast<std::size_t>(p), detail::ccoll::mpi_count(mine_words)),
            rd(static_cast<std::size_t>(p));
        for (int r = 0; r < p; ++r) rd[static_cast<std::size_t>(r)] = detail::ccoll::mpi_count(r * mine_words);
        SHUNT_CHECK_MPI(PMPI_Alltoallv(s.send.data(), s.counts.data(), s.displs.data(), MPI_UINT32_T, s.recv.data(),
                                       rc.data(), rd.data(), MPI_UINT32_T, comm));
        for (int r = 0; r < p && !mine_bad; ++r)
            mine_bad = detail::ccoll::flagged(prm, s.recv.data() + r * mine_words, mine_len);
        for (int r = 0; r < p && !mine_bad; ++r) {
            const auto* part = reinterpret_cast<const std::byte*>(s.recv.data() + r * mine_words);
            if (r == 0)
                compress::decompress(prm, part, mine_len, s.acc.data(), step);
            else
                compress::decompress_accumulate(prm, part, mine_len, s.acc.data(), step);
        }
    }
    int any = mine_bad || !compress::all_finite(s.acc.data(), mine_len) ? 1 : 0;
    SHUNT_CHECK_MPI(PMPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, comm));
    if (any != 0) return compressed_status::not_finite;
    detail::ccoll::stage_feedback(s, pt, feedback ? n : -1, -1);
    commit_feedback(s);
    if (mine_len > 0) std::memcpy(out, s.acc.data(), static_cast<std::size_t>(mine_len) * 4);
    return compressed_status::done;
}

}  // namespace shunt
