// shunt/collectives/transport.hpp: the transport concept every collective algorithm is written against, and the subgroup view.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <vector>

namespace shunt {

class mpi_waiter;

/// One message of a batched exchange: `bytes` bytes to or from group member `peer`.
struct send_message {
    int peer = 0;
    const void* data = nullptr;
    std::int64_t bytes = 0;
};
struct recv_message {
    int peer = 0;
    void* data = nullptr;
    std::int64_t bytes = 0;
};

/// What the collective algorithms need from a communication library, for one group of ranks
/// (members 0..size()-1; the caller is member rank()):
/// - send/recv/sendrecv: blocking point-to-point of raw bytes with a member. Messages between
///   two members are matched in the order they were posted. Every schedule knows the size of
///   every message on both sides, so a zero-byte message may be skipped entirely.
/// - exchange: post every send and receive of a batch, return when all have completed
///   (MPI Isend/Irecv + Waitall; NCCL group calls).
/// - reduce(red, in, inout, n): inout[i] = in[i] op inout[i] for n elements of the reduction's
///   type, locally; red.element_size() is the bytes per element.
/// - copy(dst, src, bytes): local copy in the transport's memory (may overlap);
///   scratch(bytes): an owning temporary buffer with data() in that memory.
/// A transport is used by one thread at a time; calls that match across members must be made
/// by every member in the same order.
template <class T>
concept transport = requires(T& t, const T& ct, int peer, const void* in, void* out, std::int64_t n,
                             std::span<const send_message> sends, std::span<const recv_message> recvs,
                             const typename T::reduction_type& red) {
    { ct.size() } -> std::convertible_to<int>;
    { ct.rank() } -> std::convertible_to<int>;
    t.send(peer, in, n);
    t.recv(peer, out, n);
    t.sendrecv(peer, in, n, peer, out, n);
    t.exchange(sends, recvs);
    t.reduce(red, in, out, n);
    { red.element_size() } -> std::convertible_to<std::int64_t>;
    t.copy(out, in, n);
    { t.scratch(n).data() } -> std::convertible_to<std::byte*>;
};

/// The subgroup `members` (ranks of the base transport's group, in the subgroup's member
/// order; must include the caller) of a transport, itself a transport. Holds a reference to
/// the base, which must outlive it.
template <transport Base>
class group_view {
public:
    using reduction_type = typename Base::reduction_type;

    group_view(Base& base, std::span<const int> members) : base_(&base), members_(members.begin(), members.end()) {
        auto it = std::find(members_.begin(), members_.end(), base.rank());
        if (it == members_.end()) throw std::logic_error("group_view: the caller is not a member");
        rank_ = static_cast<int>(it - members_.begin());
    }

    int size() const { return static_cast<int>(members_.size()); }
    int rank() const { return rank_; }
    /// The base rank of member i.
    int base_rank(int i) const { return members_[static_cast<std::size_t>(i)]; }

    void send(int peer, const void* data, std::int64_t bytes) { base_->send(base_rank(peer), data, bytes); }
    void recv(int peer, void* data, std::int64_t bytes) { base_->recv(base_rank(peer), data, bytes); }
    void sendrecv(int dst, const void* sdata, std::int64_t sbytes, int src, void* rdata, std::int64_t rbytes) {
        base_->sendrecv(base_rank(dst), sdata, sbytes, base_rank(src), rdata, rbytes);
    }
    void exchange(std::span<const send_message> sends, std::span<const recv_message> recvs) {
        std::vector<send_message> s(sends.begin(), sends.end());
        std::vector<recv_message> r(recvs.begin(), recvs.end());
        for (auto& m : s) m.peer = base_rank(m.peer);
        for (auto& m : r) m.peer = base_rank(m.peer);
        base_->exchange(s, r);
    }
    void reduce(const reduction_type& red, const void* in, void* inout, std::int64_t n) {
        base_->reduce(red, in, inout, n);
    }
    void copy(void* dst, const void* src, std::int64_t bytes) { base_->copy(dst, src, bytes); }
    auto scratch(std::int64_t bytes) { return base_->scratch(bytes); }

private:
    Base* base_;
    std::vector<int> members_;
    int rank_ = 0;
};

/// How a group exchanges data inside one level of a hierarchical schedule.
enum class flat_algorithm {
    automatic,  ///< recursive halving/doubling for power-of-two groups, ring otherwise
    ring,  ///< ring: size-1 steps to the neighbours, bandwidth-optimal for any size
    halving,  ///< recursive halving (reduce-scatter) / doubling (allgather); ring if not a power of two
};

/// Tuning of the collective algorithms. Must be equal on every rank of a call.
struct collective_options {
    flat_algorithm flat = flat_algorithm::automatic;
    /// bcast: a binomial tree up to this many bytes, scatter + allgather above.
    std::int64_t bcast_tree_bytes = 128 * 1024;
    /// alltoall: aggregate messages per group of this level of the hierarchy; -1 is the
    /// outermost described level (the node, usually). Flat pairwise exchange without levels.
    int alltoall_level = -1;
    /// The levels of the communicator's hierarchy the schedule runs over (bit k for level k of
    /// topology::groups()); a dropped level's groups merge into the next kept level's, and no
    /// level at all is one flat exchange. The MPI forms on a topology read it; the template
    /// forms take the hierarchy itself.
    std::uint32_t levels = ~std::uint32_t{0};
    /// The MPI forms on a topology (mpi_transport): the tag of the schedule's messages (-1: the
    /// transport's default; equal on every rank) and what waits for its requests (nullptr:
    /// PMPI_Waitall; local to each rank). The preload library sets them to run a schedule as a
    /// nonblocking collective, or to progress those while a blocking one waits.
    int mpi_tag = -1;
    mpi_waiter* mpi_wait = nullptr;
    /// Pipelining (collectives/pipeline.hpp): the vector is cut into chunks of about this many
    /// bytes (0: no pipelining), whose schedules overlap, at most `pipeline_depth` at a time, so
    /// that an outer level's transfer of one chunk runs while an inner level works on the next.
    /// Only on transports with message lanes (laned_transport); results equal the unpipelined
    /// schedule's bit for bit.
    std::int64_t pipeline_bytes = std::int64_t{2} << 20;
    int pipeline_depth = 4;
};

/// A transport that can also post a batch of messages on one of lanes() independent lanes
/// (messages of different lanes never match each other) and complete it later:
/// - post(lane, sends, recvs): posts every message, returns a batch that owns the requests;
/// - wait(batch): returns once all of the batch's messages have completed;
/// - test(batch): true once they have (then the batch is done), without blocking.
/// lanes() must be equal on every member; 0 means none (no pipelining). A batch not completed
/// when destroyed is cancelled and completed first.
template <class T>
concept laned_transport = transport<T> &&
    requires(T& t, const T& ct, int lane, typename T::batch& b, std::span<const send_message> sends,
             std::span<const recv_message> recvs) {
    { ct.lanes() } -> std::convertible_to<int>;
    { t.post(lane, sends, recvs) } -> std::same_as<typename T::batch>;
    t.wait(b);
    { t.test(b) } -> std::convertible_to<bool>;
};

}  // namespace shunt
