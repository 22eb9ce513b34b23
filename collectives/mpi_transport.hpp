// shunt/collectives/mpi_transport.hpp: the transport over an MPI communicator (PMPI point-to-point, host memory).
#pragma once

#include <shunt/collectives/reduction.hpp>
#include <shunt/collectives/transport.hpp>
#include <shunt/errors.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

namespace shunt {

/// An owning, uninitialised host buffer.
class host_buffer {
public:
    explicit host_buffer(std::int64_t bytes)
        : data_(bytes > 0 ? new std::byte[static_cast<std::size_t>(bytes)] : nullptr), size_(bytes > 0 ? bytes : 0) {}
    std::byte* data() const { return data_.get(); }
    std::int64_t size() const { return size_; }

private:
    std::unique_ptr<std::byte[]> data_;
    std::int64_t size_;
};

/// What an mpi_transport waits for its requests with, instead of PMPI_Waitall: the preload
/// library suspends a nonblocking collective's schedule there until they complete, and
/// progresses its nonblocking collectives while a blocking schedule waits.
class mpi_waiter {
public:
    virtual ~mpi_waiter() = default;
    /// Completes every request of `requests` (each becomes MPI_REQUEST_NULL) and returns what
    /// PMPI_Waitall would (statuses ignored). Called by one thread at a time per transport.
    virtual int wait_all(std::span<MPI_Request> requests) = 0;
};

/// The transport over all ranks of an MPI communicator, with shunt's own PMPI calls only. Use
/// a communicator private to shunt (topology::comm()) so its messages never meet the
/// application's. Messages larger than 1 GiB are sent in pieces; zero-byte messages are not
/// sent. MPI errors throw shunt::mpi_error. With a waiter every message is nonblocking and the
/// waiter completes them (so the schedule may be suspended there).
class mpi_transport {
public:
    using reduction_type = mpi_reduction;
    /// The tag of all messages; one blocking collective at a time runs on a communicator, and
    /// nonblocking ones in flight together take tags of their own (collective_options::mpi_tag).
    static constexpr int default_tag = 0x5a7;
    static constexpr std::int64_t max_piece = std::int64_t{1} << 30;

    explicit mpi_transport(MPI_Comm comm, int tag = default_tag, mpi_waiter* waiter = nullptr)
        : comm_(comm), tag_(tag), waiter_(waiter) {
        SHUNT_CHECK_MPI(PMPI_Comm_size(comm, &size_));
        SHUNT_CHECK_MPI(PMPI_Comm_rank(comm, &rank_));
    }
    /// The transport an MPI form runs on: the tag and waiter of `opt` (collective_options).
    mpi_transport(MPI_Comm comm, const collective_options& opt)
        : mpi_transport(comm, opt.mpi_tag >= 0 ? opt.mpi_tag : default_tag, opt.mpi_wait) {}

    int size() const { return size_; }
    int rank() const { return rank_; }
    MPI_Comm comm() const { return comm_; }

    void send(int peer, const void* data, std::int64_t bytes) {
        if (waiter_ != nullptr) {
            const send_message s{peer, data, bytes};
            exchange(std::span<const send_message>(&s, 1), {});
            return;
        }
        const auto* p = static_cast<const std::byte*>(data);
        for (std::int64_t off = 0; off < bytes; off += max_piece)
            SHUNT_CHECK_MPI(PMPI_Send(p + off, piece(bytes - off), MPI_BYTE, peer, tag_, comm_));
    }
    void recv(int peer, void* data, std::int64_t bytes) {
        if (waiter_ != nullptr) {
            const recv_message r{peer, data, bytes};
            exchange({}, std::span<const recv_message>(&r, 1));
            return;
        }
        auto* p = static_cast<std::byte*>(data);
        for (std::int64_t off = 0; off < bytes; off += max_piece)
            SHUNT_CHECK_MPI(PMPI_Recv(p + off, piece(bytes - off), MPI_BYTE, peer, tag_, comm_, MPI_STATUS_IGNORE));
    }
    void sendrecv(int dst, const void* sdata, std::int64_t sbytes, int src, void* rdata, std::int64_t rbytes) {
        if (waiter_ == nullptr && sbytes > 0 && rbytes > 0 && sbytes <= max_piece && rbytes <= max_piece) {
            SHUNT_CHECK_MPI(PMPI_Sendrecv(sdata, static_cast<int>(sbytes), MPI_BYTE, dst, tag_, rdata,
                                          static_cast<int>(rbytes), MPI_BYTE, src, tag_, comm_, MPI_STATUS_IGNORE));
            return;
        }
        send_message s{dst, sdata, sbytes};
        recv_message r{src, rdata, rbytes};
        exchange(std::span<const send_message>(&s, 1), std::span<const recv_message>(&r, 1));
    }
    void exchange(std::span<const send_message> sends, std::span<const recv_message> recvs) {
        batch b = post_tagged(tag_, sends, recvs);
        wait(b);
    }

    /// The requests of one posted batch (laned_transport); completes them when destroyed early.
    class batch {
    public:
        batch() = default;
        batch(batch&& o) noexcept : reqs_(std::move(o.reqs_)) { o.reqs_.clear(); }
        batch& operator=(batch&& o) noexcept {
            if (this != &o) {
                cancel();
                reqs_ = std::move(o.reqs_);
                o.reqs_.clear();
            }
            return *this;
        }
        ~batch() { cancel(); }

    private:
        friend class mpi_transport;
        // Cancels and completes whatever is still pending, so no request outlives its buffer.
        void cancel() noexcept {
            for (auto& q : reqs_) {
                if (q == MPI_REQUEST_NULL) continue;
                PMPI_Cancel(&q);
                PMPI_Wait(&q, MPI_STATUS_IGNORE);
            }
            reqs_.clear();
        }
        std::vector<MPI_Request> reqs_;
    };

    /// Lanes for pipelined schedules: tags default_tag + 1 .. + lane_count, so only where this
    /// transport runs on the default tag (a blocking collective; nonblocking ones take tags of
    /// their own and get none, which every rank sees alike).
    static constexpr int lane_count = 16;
    int lanes() const { return tag_ == default_tag ? lane_count : 0; }
    /// Posts a batch on `lane` (0 .. lanes()-1).
    batch post(int lane, std::span<const send_message> sends, std::span<const recv_message> recvs) {
        return post_tagged(default_tag + 1 + lane, sends, recvs);
    }
    /// Completes a batch (through the waiter, if any); throws shunt::mpi_error on failure.
    void wait(batch& b) {
        if (b.reqs_.empty()) return;
        const int rc = waiter_ != nullptr
                           ? waiter_->wait_all(b.reqs_)
                           : PMPI_Waitall(static_cast<int>(b.reqs_.size()), b.reqs_.data(), MPI_STATUSES_IGNORE);
        fail(b, rc, waiter_ != nullptr ? "PMPI_Testall" : "PMPI_Waitall");
        b.reqs_.clear();
    }
    /// True once every message of the batch has completed; never blocks.
    bool test(batch& b) {
        if (b.reqs_.empty()) return true;
        int done = 0;
        fail(b, PMPI_Testall(static_cast<int>(b.reqs_.size()), b.reqs_.data(), &done, MPI_STATUSES_IGNORE),
             "PMPI_Testall");
        if (done) b.reqs_.clear();
        return done != 0;
    }

    void reduce(const mpi_reduction& red, const void* in, void* inout, std::int64_t count) {
        red.apply(in, inout, count);
    }
    void copy(void* dst, const void* src, std::int64_t bytes) {
        if (bytes > 0 && dst != src) std::memmove(dst, src, static_cast<std::size_t>(bytes));
    }
    host_buffer scratch(std::int64_t bytes) { return host_buffer(bytes); }

private:
    // Throws after completing what is left of the batch, when rc is an error.
    static void fail(batch& b, int rc, const char* call) {
        if (rc == MPI_SUCCESS) return;
        b.cancel();
        detail::throw_mpi(rc, call, __FILE__, __LINE__);
    }
    batch post_tagged(int tag, std::span<const send_message> sends, std::span<const recv_message> recvs) {
        batch b;
        b.reqs_.reserve(sends.size() + recvs.size());
        for (const auto& m : recvs) {
            auto* p = static_cast<std::byte*>(m.data);
            for (std::int64_t off = 0; off < m.bytes; off += max_piece) {
                b.reqs_.push_back(MPI_REQUEST_NULL);
                fail(b, PMPI_Irecv(p + off, piece(m.bytes - off), MPI_BYTE, m.peer, tag, comm_, &b.reqs_.back()),
                     "PMPI_Irecv");
            }
        }
        for (const auto& m : sends) {
            const auto* p = static_cast<const std::byte*>(m.data);
            for (std::int64_t off = 0; off < m.bytes; off += max_piece) {
                b.reqs_.push_back(MPI_REQUEST_NULL);
                fail(b, PMPI_Isend(p + off, piece(m.bytes - off), MPI_BYTE, m.peer, tag, comm_, &b.reqs_.back()),
                     "PMPI_Isend");
            }
        }
        return b;
    }

    static int piece(std::int64_t left) { return static_cast<int>(left < max_piece ? left : max_piece); }

    MPI_Comm comm_;
    int tag_;
    mpi_waiter* waiter_;
    int size_ = 0, rank_ = 0;
};

static_assert(transport<mpi_transport>);
static_assert(transport<group_view<mpi_transport>>);
static_assert(laned_transport<mpi_transport>);

}  // namespace shunt
