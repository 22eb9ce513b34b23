// shunt/collectives/pipeline.hpp: pipelined hierarchical schedules: the vector's chunks run their schedules overlapped, over a laned transport.
#pragma once

#include <shunt/collectives/schedule.hpp>
#include <shunt/collectives/transport.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <utility>
#include <vector>

namespace shunt::detail {

// How it works. A hierarchical schedule is a fixed sequence of transfers and local steps that
// depends only on the sizes, never on the data. The vector is cut into chunks by cutting every
// owner's range into `chunks` pieces (chunk c holds piece c of every range): each element keeps
// its owner, so it meets the same groups, receivers and flat algorithms in the same order as in
// the unpipelined schedule, and every result is the same bit for bit. Each chunk's schedule is
// first recorded (a transport that notes its messages and local steps instead of running them)
// and then replayed: the batches of messages of up to `depth` chunks are in flight together,
// each chunk on a lane of its own, so the inner (intra-node) steps of one chunk run while the
// outer link carries another's. The replay always waits on the oldest unfinished chunk and only
// tests the younger ones: the oldest chunk then runs exactly as its blocking schedule does, on
// every rank, so the pipeline cannot deadlock where the schedule does not.

/// Piece c of `chunks` of every owner's range.
inline std::vector<owned_range> chunk_ranges(std::span<const owned_range> own, int chunks, int c) {
    std::vector<owned_range> out(own.begin(), own.end());
    if (chunks <= 1) return out;
    for (auto& r : out) {
        const owned_range piece = balanced_part(r.count, chunks, c);
        r = {r.offset + piece.offset, piece.count};
    }
    return out;
}

/// Chunk c's pieces of the owners' ranges packed into one buffer, in the order of the ranges in
/// the vector: `local` are the ranges in the buffer, `from` the pieces in the vector. Ranges that
/// follow each other in the vector follow each other in the buffer, so every op that works in
/// place on the vector works in place on the buffer.
struct chunk_pack {
    std::vector<owned_range> local, from;
    std::int64_t total = 0;
};
inline chunk_pack pack_chunk(std::span<const owned_range> own, int chunks, int c) {
    chunk_pack pk;
    pk.from = chunk_ranges(own, chunks, c);
    pk.local.assign(own.size(), owned_range{});
    std::vector<std::size_t> order(own.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return own[a].offset < own[b].offset; });
    for (std::size_t i : order) {
        pk.local[i] = {pk.total, pk.from[i].count};
        pk.total += pk.from[i].count;
    }
    return pk;
}
/// Copies the pieces of the owners selected by `pick(owner)` from the vector at `vec` into the
/// packed chunk at `buf` (elements of `es` bytes).
template <transport T, class Pick>
void gather_chunk(T& t, std::byte* buf, const std::byte* vec, const chunk_pack& pk, std::int64_t es, Pick&& pick) {
    for (std::size_t r = 0; r < pk.from.size(); ++r)
        if (pk.from[r].count > 0 && pick(static_cast<int>(r)))
            t.copy(buf + pk.local[r].offset * es, vec + pk.from[r].offset * es, pk.from[r].count * es);
}
/// Copies the pieces of the selected owners from the packed chunk back to the vector.
template <transport T, class Pick>
void scatter_chunk(T& t, std::byte* vec, const std::byte* buf, const chunk_pack& pk, std::int64_t es, Pick&& pick) {
    for (std::size_t r = 0; r < pk.from.size(); ++r)
        if (pk.from[r].count > 0 && pick(static_cast<int>(r)))
            t.copy(vec + pk.from[r].offset * es, buf + pk.local[r].offset * es, pk.from[r].count * es);
}
/// pick for every owner.
inline constexpr auto every_owner = [](int) { return true; };

/// The number of chunks for a collective moving `bytes` (its whole vector) on t: 1 (not
/// pipelined) without lanes or below two chunks' worth, else bytes / opt.pipeline_bytes, at most
/// max_chunks. Depends only on what every rank passes alike.
inline constexpr int max_pipeline_chunks = 64;
template <transport T>
int pipeline_chunks(const T& t, std::int64_t bytes, const collective_options& opt) {
    if constexpr (laned_transport<T>) {
        if (t.lanes() <= 0 || opt.pipeline_bytes <= 0 || opt.pipeline_depth < 2 || bytes < 2 * opt.pipeline_bytes)
            return 1;
        return static_cast<int>(std::min<std::int64_t>(bytes / opt.pipeline_bytes, max_pipeline_chunks));
    } else {
        (void)t, (void)bytes, (void)opt;
        return 1;
    }
}

/// A transport that records what a schedule would do on Base, to be replayed later: each
/// send, recv, sendrecv or exchange becomes one batch of messages (zero-byte messages dropped,
/// as the transport concept allows), each reduce and copy a local step after the batch before
/// it. Scratch memory comes from Base and lives as long as the recorder.
template <transport Base>
class recorder {
public:
    using reduction_type = typename Base::reduction_type;

    struct local_step {
        const reduction_type* red = nullptr;  ///< nullptr: a copy
        const void* in = nullptr;
        void* out = nullptr;
        std::int64_t n = 0;  ///< elements (reduce) or bytes (copy)
    };
    struct batch_step {
        std::vector<send_message> sends;
        std::vector<recv_message> recvs;
        std::vector<local_step> after;  ///< local steps once the batch has completed
    };
    /// A pointer into memory the recorder owns.
    struct buffer {
        std::byte* p = nullptr;
        std::byte* data() const { return p; }
    };

    explicit recorder(Base& base) : base_(&base) {}

    int size() const { return base_->size(); }
    int rank() const { return base_->rank(); }

    void send(int peer, const void* data, std::int64_t bytes) {
        const send_message s{peer, data, bytes};
        exchange(std::span<const send_message>(&s, 1), {});
    }
    void recv(int peer, void* data, std::int64_t bytes) {
        const recv_message r{peer, data, bytes};
        exchange({}, std::span<const recv_message>(&r, 1));
    }
    void sendrecv(int dst, const void* sdata, std::int64_t sbytes, int src, void* rdata, std::int64_t rbytes) {
        const send_message s{dst, sdata, sbytes};
        const recv_message r{src, rdata, rbytes};
        exchange(std::span<const send_message>(&s, 1), std::span<const recv_message>(&r, 1));
    }
    void exchange(std::span<const send_message> sends, std::span<const recv_message> recvs) {
        batch_step b;
        for (const auto& m : sends)
            if (m.bytes > 0) b.sends.push_back(m);
        for (const auto& m : recvs)
            if (m.bytes > 0) b.recvs.push_back(m);
        if (!b.sends.empty() || !b.recvs.empty()) steps_.push_back(std::move(b));
    }
    void reduce(const reduction_type& red, const void* in, void* inout, std::int64_t n) {
        if (n > 0) local().push_back({&red, in, inout, n});
    }
    void copy(void* dst, const void* src, std::int64_t bytes) {
        if (bytes > 0 && dst != src) local().push_back({nullptr, src, dst, bytes});
    }
    buffer scratch(std::int64_t bytes) {
        scratch_.push_back(base_->scratch(bytes));
        return {scratch_.back().data()};
    }

    /// The local steps before the first batch, and the batches.
    const std::vector<local_step>& prologue() const { return prologue_; }
    const std::vector<batch_step>& steps() const { return steps_; }

    /// Runs local steps on the base transport.
    void run(const std::vector<local_step>& locals) {
        for (const local_step& l : locals) {
            if (l.red != nullptr)
                base_->reduce(*l.red, l.in, l.out, l.n);
            else
                base_->copy(l.out, l.in, l.n);
        }
    }

private:
    std::vector<local_step>& local() { return steps_.empty() ? prologue_ : steps_.back().after; }

    Base* base_;
    std::vector<local_step> prologue_;
    std::vector<batch_step> steps_;
    std::deque<decltype(std::declval<Base&>().scratch(0))> scratch_;
};

/// Runs body(transport, c) for c = 0 .. chunks-1, each the schedule of chunk c. With one chunk
/// (or a transport without lanes) body runs once on t itself, as an unpipelined schedule;
/// otherwise the chunks' schedules are recorded and replayed overlapped, at most `depth` at a
/// time. Collective: every rank passes the same chunks and depth, and its body does what the
/// unpipelined schedule of that chunk would.
template <transport T, class Body>
void pipelined(T& t, int chunks, int depth, Body&& body) {
    if constexpr (!laned_transport<T>) {
        for (int c = 0; c < chunks; ++c) body(t, c);
        return;
    } else {
        if (chunks <= 1 || t.lanes() <= 0) {
            for (int c = 0; c < std::max(chunks, 1); ++c) body(t, c);
            return;
        }
        depth = std::clamp(depth, 1, t.lanes());
        struct flight {
            explicit flight(T& base) : rec(base) {}
            recorder<T> rec;
            std::size_t next = 0;  // the step posted (or to post) next
            typename T::batch pending;
            bool waiting = false;  // `pending` holds step next-1
            bool done = false;
        };
        std::deque<std::unique_ptr<flight>> live;  // chunks lo .. lo+live.size()-1
        int lo = 0, started = 0;
        // Posts the next batch of f (chunk c), or marks it done.
        auto advance = [&](flight& f, int c) {
            const auto& steps = f.rec.steps();
            if (f.next >= steps.size()) {
                f.done = true;
                return;
            }
            const auto& s = steps[f.next++];
            f.pending = t.post(c % t.lanes(), s.sends, s.recvs);
            f.waiting = true;
        };
        // After f's pending batch completed: its local steps, then the next batch.
        auto complete = [&](flight& f, int c) {
            f.waiting = false;
            f.rec.run(f.rec.steps()[f.next - 1].after);
            advance(f, c);
        };
        while (lo < chunks) {
            while (started < chunks && started < lo + depth) {
                auto f = std::make_unique<flight>(t);
                body(f->rec, started);
                f->rec.run(f->rec.prologue());
                advance(*f, started);
                live.push_back(std::move(f));
                ++started;
            }
            flight& oldest = *live.front();
            if (oldest.done) {
                live.pop_front();
                ++lo;
                continue;
            }
            t.wait(oldest.pending);
            complete(oldest, lo);
            for (std::size_t i = 1; i < live.size(); ++i) {
                flight& f = *live[i];
                while (f.waiting && t.test(f.pending)) complete(f, lo + static_cast<int>(i));
            }
        }
    }
}

/// The body both reduce-scatter forms share: the vector of sum(own) elements at sendbuf (in
/// place when sendbuf == recvbuf) reduced over the owners' ranges `own`, this rank's range left
/// at recvbuf, pipelined in chunks where `opt` allows. In place too, the vector is reduced in
/// scratch memory: the input past this rank's range stays as it was, as the libraries leave it.
/// Collective as the callers' contracts say.
template <transport T>
void reduce_scatter_owned(T& t, const hierarchy& h, const void* sendbuf, void* recvbuf,
                          std::span<const owned_range> own, const typename T::reduction_type& red,
                          const collective_options& opt) {
    const int me = t.rank();
    const std::int64_t es = red.element_size();
    std::int64_t n = 0;
    for (const owned_range& r : own) n += r.count;
    auto* out = static_cast<std::byte*>(recvbuf);
    const owned_range mine = own[static_cast<std::size_t>(me)];
    const int chunks = pipeline_chunks(t, n * es, opt);
    if (chunks == 1) {
        auto work = t.scratch(n * es);
        t.copy(work.data(), sendbuf, n * es);
        hierarchical_reduce_scatter(t, h, work.data(), own, red, opt.flat);
        t.copy(out, work.data() + mine.offset * es, mine.count * es);
        return;
    }
    // Pipelined: each chunk packed into scratch memory from the input (a copy of it in place, as
    // the result overwrites the input's start), reduced there, and this rank's piece copied out.
    const std::byte* in = static_cast<const std::byte*>(sendbuf);
    decltype(t.scratch(0)) copy = t.scratch(sendbuf == recvbuf ? n * es : 0);
    if (sendbuf == recvbuf) {
        t.copy(copy.data(), sendbuf, n * es);
        in = copy.data();
    }
    pipelined(t, chunks, opt.pipeline_depth, [&](auto& tc, int c) {
        const auto pk = pack_chunk(own, chunks, c);
        auto buf = tc.scratch(pk.total * es);
        gather_chunk(tc, buf.data(), in, pk, es, every_owner);
        hierarchical_reduce_scatter(tc, h, buf.data(), pk.local, red, opt.flat);
        const auto& piece = pk.from[static_cast<std::size_t>(me)];
        tc.copy(out + (piece.offset - mine.offset) * es,
                buf.data() + pk.local[static_cast<std::size_t>(me)].offset * es, piece.count * es);
    });
}

}  // namespace shunt::detail
