// interpose/alltoallw.cpp: MPI_Alltoallw and MPI_Neighbor_alltoallw: every block packed in one fused pass into one staging buffer, the bytes moved by the library's own call with byte types, every received block unpacked in one pass.
#include "runtime.hpp"

#include <shunt/errors.hpp>
#include <shunt/gpu/memory.hpp>
#include <shunt/gpu/pack.hpp>
#include <shunt/log.hpp>
#include <shunt/model/measure.hpp>
#include <shunt/pack/host.hpp>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <vector>

namespace shunt::detail {

// The decision. Every rank of a communicator must take the same path: shunt's exchange is the
// library's MPI_Alltoallw (MPI_Neighbor_alltoallw) of byte types, and one rank passing its typed
// blocks while another passes bytes breaks MPI's rule of matching type signatures. What a rank
// knows alone (its own datatypes and buffers) differs between ranks, and the byte counts differ
// per rank and per peer, so there is no size class to key on: one decision per communicator and
// operation, as for MPI_Alltoallv.
// The collective planner keys its decisions by coll_op, which has no entry for these two, so the
// decision is kept here, in the planner's manner: the first call agrees, with one
// PMPI_Allreduce, on whether any rank has data shunt's packing has work on (a block with gaps,
// or a device buffer) and whether any rank has a datatype shunt does not know (uncommitted, or
// unsupported by its decoder). No work, or an unknown type: the library's. A device buffer:
// shunt's, unmeasured (an MPI that is not CUDA-aware cannot take it). Else the next calls run
// both paths on the same data, timed (one warm-up, then `w_trials`); the best time of each is
// agreed (the slowest rank's) and shunt's path is kept only when faster by `w_margin`. Calls on
// a communicator come in the same order on every rank, so every rank measures the same calls.
// SHUNT_COLL=shunt takes shunt's path without agreeing, SHUNT_COLL=library (and SHUNT_DISABLE)
// the library's. The only rank-local pass-throughs after a decision for shunt are erroneous
// calls (negative counts, invalid types) and internal failures (no memory): sizes are no reason,
// since a block of more than INT_MAX bytes, or beyond INT_MAX bytes from the exchange's base,
// travels as one element of a byte type made for the call.

struct runtime::w_side {
    struct block {
        std::byte* at = nullptr;  ///< element 0: the buffer plus the byte displacement
        int count = 0;
        MPI_Datatype type = MPI_DATATYPE_NULL;
        const type_info* info = nullptr;  ///< nullptr: unknown to shunt, the library packs it
        std::int64_t bytes = 0;  ///< 0 for an empty block or an MPI_PROC_NULL peer
        bool dense = false;  ///< the bytes lie in place, in order, from `at`
        bool direct = false;  ///< moved in place (no staging)
        std::int64_t offset = 0;  ///< staged: offset in the staging block
        std::shared_ptr<const gpu::device_form> form;  ///< device buffers
    };

    w_side(void* buffer, bool copy_out) : buf(static_cast<std::byte*>(buffer)), copy(copy_out) {}
    ~w_side() {
        gpu::pool_release(staging);
        gpu::pool_release(scratch);
        for (MPI_Datatype& t : made) PMPI_Type_free(&t);
    }
    w_side(const w_side&) = delete;
    w_side& operator=(const w_side&) = delete;

    std::byte* buf;
    bool copy;  ///< the data must be copied out first (MPI_IN_PLACE's send side)
    std::vector<block> blocks;
    std::int64_t total = 0;  ///< bytes of all blocks
    bool gaps = false;  ///< some block is not dense: packing has work to do
    bool unknown = false;  ///< some block's datatype is unknown to shunt
    device_way way = device_way::host;
    // What the library's byte exchange is given: base and, per peer, a count of a byte type at a
    // byte offset from base (MPI_BYTE, or for a block out of int range one element of a type made
    // for the call, its offset inside the type).
    std::byte* base = nullptr;
    std::vector<int> counts, displs;
    std::vector<MPI_Aint> aint_displs;
    std::vector<MPI_Datatype> types;
    std::vector<MPI_Datatype> made;  ///< the types made for this call, freed with the side
    gpu::pool_block staging{}, scratch{};  ///< host/pinned or device staging; device scratch (staged)
};

namespace {

constexpr int w_trials = 3;  ///< calls timed on both paths before deciding, after one warm-up
constexpr double w_margin = measured_win_margin;  ///< how much faster shunt's path must be

/// One operation's decision on one communicator. Collectives on one communicator do not run
/// concurrently: the measurements need no lock.
enum : std::uint8_t { undecided = 0, measuring = 1, to_library = 2, to_shunt = 3 };
struct w_decision {
    std::atomic<std::uint8_t> state{undecided};
    int runs = 0;  ///< calls run on both paths, the warm-up included
    double best[2] = {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()};
    std::shared_ptr<runtime::w_record> record;  ///< the report's copy, from the decision on
};
/// The decisions of MPI_Alltoallw and MPI_Neighbor_alltoallw, cached on the communicator.
struct w_decisions {
    w_decision op[2];
};

int w_keyval() {
    static const int keyval = [] {
        int k = MPI_KEYVAL_INVALID;
        const auto del = [](MPI_Comm, int, void* value, void*) -> int {
            delete static_cast<w_decisions*>(value);
            return MPI_SUCCESS;
        };
        if (PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, del, &k, nullptr) != MPI_SUCCESS)
            return static_cast<int>(MPI_KEYVAL_INVALID);
        return k;
    }();
    return keyval;
}

/// comm's decisions, created on first use; nullptr when the attribute cannot be kept.
w_decisions* decisions_of(MPI_Comm comm) {
    const int keyval = w_keyval();
    if (keyval == MPI_KEYVAL_INVALID) return nullptr;
    void* value = nullptr;
    int found = 0;
    if (PMPI_Comm_get_attr(comm, keyval, &value, &found) != MPI_SUCCESS) return nullptr;
    if (found) return static_cast<w_decisions*>(value);
    auto* d = new (std::nothrow) w_decisions;
    if (d == nullptr) return nullptr;
    if (PMPI_Comm_set_attr(comm, keyval, d) != MPI_SUCCESS) {
        delete d;
        return nullptr;
    }
    return d;
}

/// The blocks of one side of the call for p peers (`skip[j]`: peer j is MPI_PROC_NULL), their
/// types looked up by `find` (the runtime's type memo). Anything the library must judge itself
/// (a negative count, an invalid datatype) is bad_argument; a block of more bytes than 64 bits
/// count is too_large.
template <class Displ, class Find>
pass_reason describe(runtime::w_side& side, int p, const int counts[], const Displ displs[], const MPI_Datatype types[],
                     const std::vector<char>& skip, Find find) {
    side.blocks.resize(static_cast<std::size_t>(p));
    for (int j = 0; j < p; ++j) {
        auto& b = side.blocks[static_cast<std::size_t>(j)];
        const int c = counts[j];
        if (c < 0) return pass_reason::bad_argument;
        if (c == 0 || (!skip.empty() && skip[static_cast<std::size_t>(j)])) continue;  // its type is not looked at
        b.count = c;
        b.type = types[j];
        // Integer arithmetic: the buffer may be MPI_BOTTOM (a null pointer), the types absolute.
        b.at = reinterpret_cast<std::byte*>(reinterpret_cast<std::uintptr_t>(side.buf) +
                                            static_cast<std::uintptr_t>(displs[j]));
        if (b.type == MPI_DATATYPE_NULL) return pass_reason::bad_argument;
        std::int64_t size = 0;
        if ((b.info = find(b.type)) != nullptr) {
            const type_info& t = *b.info;
            size = t.size;
            b.dense = t.size > 0 && t.size == t.extent && t.size == t.true_extent && t.lb == 0 && t.true_lb == 0;
        } else {
            MPI_Count s = 0;
            if (PMPI_Type_size_x(b.type, &s) != MPI_SUCCESS || s < 0 || s == MPI_UNDEFINED)
                return pass_reason::bad_argument;
            size = static_cast<std::int64_t>(s);
        }
        if (__builtin_mul_overflow(std::int64_t{c}, size, &b.bytes) ||
            __builtin_add_overflow(side.total, b.bytes, &side.total))
            return pass_reason::too_large;
        if (b.bytes == 0) continue;
        side.gaps = side.gaps || !b.dense;
        side.unknown = side.unknown || b.info == nullptr;
    }
    return pass_reason::none;
}

/// `bytes` bytes at byte offset `offset` as one element of a type made for the call: pieces of at
/// most 1 GiB of MPI_BYTE at 64-bit displacements (freed with the side).
MPI_Datatype byte_run(runtime::w_side& s, std::int64_t offset, std::int64_t bytes) {
    constexpr std::int64_t piece = std::int64_t{1} << 30;
    const std::int64_t n = (bytes + piece - 1) / piece;
    std::vector<int> lengths(static_cast<std::size_t>(n));
    std::vector<MPI_Aint> displs(static_cast<std::size_t>(n));
    for (std::int64_t k = 0; k < n; ++k) {
        lengths[static_cast<std::size_t>(k)] = static_cast<int>(std::min(piece, bytes - k * piece));
        displs[static_cast<std::size_t>(k)] = static_cast<MPI_Aint>(offset + k * piece);
    }
    MPI_Datatype t = MPI_DATATYPE_NULL;
    SHUNT_CHECK_MPI(PMPI_Type_create_hindexed(static_cast<int>(n), lengths.data(), displs.data(), MPI_BYTE, &t));
    s.made.push_back(t);  // reserved by the caller: no throw between the creation and the push
    SHUNT_CHECK_MPI(PMPI_Type_commit(&s.made.back()));
    return t;
}

/// Places the blocks for the library: dense blocks of host memory in place (unless copied out),
/// the rest in a staging block, all addressed from the lowest address: MPI_BYTE at an int offset
/// where both the length and the offset fit in an int, else one element of a byte_run type.
/// Device buffers: in place only on a CUDA-aware MPI with every block dense, else all staged
/// (device memory for a CUDA-aware MPI, mapped pinned memory for one-shot, pinned memory and
/// device scratch for staged).
void place(runtime::w_side& s) {
    using way = runtime::device_way;
    const auto p = s.blocks.size();
    const bool device = s.way != way::host;
    const bool all_direct_device = s.way == way::device && !s.gaps && !s.copy;
    std::int64_t staged = 0;
    for (auto& b : s.blocks) {
        b.direct = b.bytes > 0 && (device ? all_direct_device : b.dense && !s.copy);
        if (b.bytes > 0 && !b.direct) {
            b.offset = staged;
            staged += b.bytes;
        }
    }
    if (staged > 0) {
        const auto n = static_cast<std::size_t>(staged);
        s.staging = gpu::pool_acquire(s.way == way::device ? gpu::pool_kind::device : gpu::pool_kind::pinned, n);
        if (s.way == way::staged) s.scratch = gpu::pool_acquire(gpu::pool_kind::device, n);
    }
    auto* stage = static_cast<std::byte*>(s.staging.ptr);
    auto where = [&](const runtime::w_side::block& b) { return b.direct ? b.at : stage + b.offset; };
    std::byte* lo = nullptr;
    std::size_t runs = 0;  // blocks out of int range
    for (const auto& b : s.blocks) {
        if (b.bytes == 0) continue;
        if (lo == nullptr || where(b) < lo) lo = where(b);
    }
    for (const auto& b : s.blocks)
        if (b.bytes > 0 && (b.bytes > INT_MAX || where(b) - lo > INT_MAX)) ++runs;
    // The base the library gets: the lowest block; when nothing moves, the application's buffer
    // (in place: an address of shunt's own, as the send side must not be the receive buffer).
    static std::byte nothing[1];
    s.base = lo != nullptr ? lo : s.copy ? nothing : s.buf;
    const std::size_t n = std::max<std::size_t>(p, 1);
    s.counts.assign(n, 0);
    s.displs.assign(n, 0);
    s.aint_displs.assign(n, 0);
    s.types.assign(n, MPI_BYTE);
    s.made.reserve(runs);
    for (std::size_t j = 0; j < p; ++j) {
        const auto& b = s.blocks[j];
        if (b.bytes == 0) continue;
        const std::int64_t offset = where(b) - lo;
        if (b.bytes <= INT_MAX && offset <= INT_MAX) {
            s.counts[j] = static_cast<int>(b.bytes);
            s.displs[j] = static_cast<int>(offset);
            s.aint_displs[j] = static_cast<MPI_Aint>(offset);
        } else {
            s.types[j] = byte_run(s, offset, b.bytes);
            s.counts[j] = 1;
        }
    }
}

/// Packs every staged block of a send side in one pass: shunt's host packer on each block's
/// canonical form (the library's MPI_Pack for a type shunt does not know), or one fused kernel
/// launch for a device buffer.
void pack_side(runtime::w_side& s, MPI_Comm comm) {
    using way = runtime::device_way;
    auto* stage = static_cast<std::byte*>(s.staging.ptr);
    if (s.way != way::host) {
        auto* out = s.way == way::staged ? static_cast<std::byte*>(s.scratch.ptr) : stage;
        std::vector<gpu::device_input> items;
        std::int64_t bytes = 0;
        for (const auto& b : s.blocks) {
            if (b.bytes == 0 || b.direct) continue;
            items.push_back({b.form.get(), b.at, out + b.offset});
            bytes = std::max(bytes, b.offset + b.bytes);
        }
        if (items.empty()) return;
        gpu::pack_fused(items, nullptr);
        if (s.way == way::staged) gpu::copy(stage, out, static_cast<std::size_t>(bytes), nullptr);
        gpu::synchronize(nullptr);
        return;
    }
    for (const auto& b : s.blocks) {
        if (b.bytes == 0 || b.direct) continue;
        std::byte* out = stage + b.offset;
        if (b.info != nullptr) {
            if (pack_host(*b.info, b.count, b.at, out) != b.bytes) throw error("the host packer packed a block short");
        } else {
            library_move(true, b.at, b.count, b.type, out, comm);
        }
    }
}

/// Unpacks every staged block of a receive side in one pass (device: one fused kernel launch,
/// one synchronisation).
void unpack_side(runtime::w_side& s, MPI_Comm comm) {
    using way = runtime::device_way;
    const auto* stage = static_cast<const std::byte*>(s.staging.ptr);
    if (s.way != way::host) {
        std::int64_t bytes = 0;
        for (const auto& b : s.blocks)
            if (b.bytes > 0 && !b.direct) bytes = std::max(bytes, b.offset + b.bytes);
        if (bytes == 0) return;
        const std::byte* in = stage;
        if (s.way == way::staged) {
            gpu::copy(s.scratch.ptr, stage, static_cast<std::size_t>(bytes), nullptr);
            in = static_cast<const std::byte*>(s.scratch.ptr);
        }
        std::vector<gpu::device_output> items;
        for (const auto& b : s.blocks)
            if (b.bytes > 0 && !b.direct) items.push_back({b.form.get(), in + b.offset, b.at});
        gpu::unpack_fused(items, nullptr);
        gpu::synchronize(nullptr);
        return;
    }
    for (const auto& b : s.blocks) {
        if (b.bytes == 0 || b.direct) continue;
        const std::byte* in = stage + b.offset;
        if (b.info != nullptr) {
            if (unpack_host(*b.info, b.count, in, b.at) != b.bytes)
                throw error("the host packer unpacked a block short");
        } else {
            library_move(false, b.at, b.count, b.type, const_cast<std::byte*>(in), comm);
        }
    }
}

}  // namespace

template <class Library, class Exchange>
int runtime::fused_collective(shim s, MPI_Comm comm, w_side& send, w_side& recv, Library library,
                              Exchange exchange) noexcept {
    const auto pass = [&](pass_reason why) {
        count_pass(direction::collective, why);
        return library();
    };
    const char* name = shim_names[static_cast<std::size_t>(s)];
    send.way = device_way_of(send.buf, send.total);
    recv.way = device_way_of(recv.buf, recv.total);
    w_decisions* ds = decisions_of(comm);
    if (ds == nullptr) return pass(pass_reason::internal);
    w_decision& d = ds->op[s == shim::alltoallw ? 0 : 1];
    int me = 0, size = 0;
    // The decision is logged on the communicator's rank 0 and kept for the report.
    const auto log_choice = [&](std::uint8_t c, const char* why, const double* measured = nullptr) {
        if (PMPI_Comm_rank(comm, &me) != MPI_SUCCESS || PMPI_Comm_size(comm, &size) != MPI_SUCCESS) return;
        if (cfg_.log.enabled(log_level::debug, log_category::decide) && me == 0)
            log_debug(log_category::decide, "%s on a communicator of %d ranks: %s, kept for the communicator (%s)",
                      name, size, c == to_shunt ? "shunt's fused packing" : "the library", why);
        try {
            auto r = std::make_shared<w_record>();
            r->op = s;
            r->ranks = size;
            r->to_shunt = c == to_shunt;
            r->forced = cfg_.coll == coll_choice::shunt;
            r->why = measured != nullptr ? "" : why;
            if (measured != nullptr) r->measured[0] = measured[0], r->measured[1] = measured[1];
            d.record = r;
            keep_w_record(std::move(r));
        } catch (...) {  // no memory: the report goes without this decision
        }
    };
    std::uint8_t c = d.state.load(std::memory_order_acquire);
    if (c == undecided) {
        if (cfg_.coll == coll_choice::shunt) {
            c = to_shunt;
            log_choice(c, "forced by SHUNT_COLL");
        } else {
            const bool device = send.way != device_way::host || recv.way != device_way::host;
            int v[3] = {send.gaps || recv.gaps || device, send.unknown || recv.unknown, device};
            if (PMPI_Allreduce(MPI_IN_PLACE, v, 3, MPI_INT, MPI_MAX, comm) != MPI_SUCCESS)
                return pass(pass_reason::internal);  // the same failure on every rank
            c = v[1] || !v[0] ? to_library : v[2] ? to_shunt : measuring;
            if (c != measuring)
                log_choice(c, v[1]   ? "a datatype shunt does not know on some rank"
                              : v[2] ? "device buffers on some rank"
                                     : "contiguous host data on every rank");
        }
        d.state.store(c, std::memory_order_release);
    }
    if ((c == to_library || c == to_shunt) && d.record != nullptr)
        d.record->taken.fetch_add(1, std::memory_order_relaxed);
    if (c == to_library) return pass(pass_reason::planned);
    if (c == to_shunt) return fused_exchange(s, comm, send, recv, pass, exchange, true);
    // Measuring: each call runs both paths on the same data, in alternating order (the second
    // writes the same bytes again), timed; the first call warms both up (pools, first touch),
    // then after w_trials calls the agreed best time of each decides. An in-place call cannot
    // run twice: it takes shunt's path untimed (MPI_IN_PLACE is given on every rank or on none,
    // so every rank skips the same calls).
    if (send.copy) return fused_exchange(s, comm, send, recv, pass, exchange, true);
    const bool shunt_first = d.runs % 2 == 1;
    double took[2] = {0, 0};  // library, shunt
    int rc = MPI_SUCCESS;
    for (int k = 0; k < 2 && rc == MPI_SUCCESS; ++k) {
        const bool shunt_now = (k == 0) == shunt_first;
        const double t0 = now_s();
        rc = shunt_now ? fused_exchange(s, comm, send, recv, pass, exchange, false) : pass(pass_reason::measuring);
        took[shunt_now ? 1 : 0] = now_s() - t0;
    }
    if (rc != MPI_SUCCESS) return rc;
    if (d.runs++ > 0) {
        d.best[0] = std::min(d.best[0], took[0]);
        d.best[1] = std::min(d.best[1], took[1]);
    }
    if (d.runs <= w_trials) return rc;
    double agreed[2] = {d.best[0], d.best[1]};
    if (PMPI_Allreduce(MPI_IN_PLACE, agreed, 2, MPI_DOUBLE, MPI_MAX, comm) != MPI_SUCCESS) {
        agreed[0] = 0;  // the same failure on every rank: the library
        agreed[1] = 1;
    }
    const std::uint8_t now = agreed[1] < agreed[0] * (1 - w_margin) ? to_shunt : to_library;
    d.state.store(now, std::memory_order_release);
    char why[96];
    std::snprintf(why, sizeof why, "library measured %.3g us, shunt %.3g us", agreed[0] * 1e6, agreed[1] * 1e6);
    log_choice(now, why, agreed);
    return rc;
}

template <class Pass, class Exchange>
int runtime::fused_exchange(shim s, MPI_Comm comm, w_side& send, w_side& recv, Pass pass, Exchange exchange,
                            bool counted) noexcept {
    const char* name = shim_names[static_cast<std::size_t>(s)];
    try {
        for (w_side* side : {&send, &recv}) {
            if (side->way == device_way::host) continue;
            // A device buffer needs shunt's decoding (agreed on above, unless forced or the
            // types changed since the communicator's first call).
            if (side->unknown) return pass(pass_reason::unknown_type);
            for (auto& b : side->blocks)
                if (b.bytes > 0) b.form = device_form_of(b.info, b.count, b.type);
        }
        place(send);
        place(recv);
        pack_side(send, comm);
    } catch (const mpi_error& e) {
        // The library's MPI_Pack on comm rejected a type shunt does not know (its error handler
        // has run): what its MPI_Alltoallw would have said.
        return e.code();
    } catch (const unsupported& e) {
        log_debug(log_category::pack, "%s: %s; left to the library", name, e.what());
        return pass(pass_reason::too_large);
    } catch (const std::exception& e) {
        internal_failure(s, e.what());
        return pass(pass_reason::internal);
    }
    const int rc = exchange(send, recv);
    if (rc != MPI_SUCCESS) return rc;  // the library's error, its handler already called
    try {
        unpack_side(recv, comm);
    } catch (const mpi_error& e) {
        return e.code();
    } catch (const std::exception& e) {
        // The other ranks have their data: report the failure on this rank.
        log_error(log_category::init, "%s: shunt failed to unpack what it received (%s)", name, e.what());
        PMPI_Comm_call_errhandler(comm, MPI_ERR_INTERN);
        return MPI_ERR_INTERN;
    }
    if (counted) {
        stats_.add(counter_index::handled(direction::collective));
        stats_.add(counter_index::bytes(direction::collective), static_cast<std::uint64_t>(send.total));
        stats_.add(counter_index::collective_handled(s));
    }
    return rc;
}

int runtime::alltoallw(const void* sendbuf, const int sendcounts[], const int sdispls[], const MPI_Datatype sendtypes[],
                       void* recvbuf, const int recvcounts[], const int rdispls[], const MPI_Datatype recvtypes[],
                       MPI_Comm comm) noexcept {
    this->count(shim::alltoallw);
    const auto library = [&] {
        return PMPI_Alltoallw(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm);
    };
    const auto pass = [&](pass_reason why) {
        count_pass(direction::collective, why);
        return library();
    };
    if (!collectives_on(comm)) return pass(running() ? pass_reason::forced : pass_reason::not_running);
    const bool in_place = sendbuf == MPI_IN_PLACE;
    int size = 0, inter = 0;
    if (recvcounts == nullptr || rdispls == nullptr || recvtypes == nullptr ||
        (!in_place && (sendcounts == nullptr || sdispls == nullptr || sendtypes == nullptr)) ||
        PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || PMPI_Comm_size(comm, &size) != MPI_SUCCESS)
        return pass(pass_reason::bad_argument);
    if (inter) return pass(pass_reason::unsupported);
    try {
        // In place: the data to send are in recvbuf under the receive arguments, copied out first.
        w_side send(in_place ? recvbuf : const_cast<void*>(sendbuf), in_place);
        w_side recv(recvbuf, false);
        const auto find = [this](MPI_Datatype t) { return memo_.find(t); };
        const std::vector<char> none;
        pass_reason why = describe(send, size, in_place ? recvcounts : sendcounts, in_place ? rdispls : sdispls,
                                   in_place ? recvtypes : sendtypes, none, find);
        if (why == pass_reason::none) why = describe(recv, size, recvcounts, rdispls, recvtypes, none, find);
        if (why != pass_reason::none) return pass(why);
        return fused_collective(shim::alltoallw, comm, send, recv, library, [&](w_side& out, w_side& in) {
            return PMPI_Alltoallw(out.base, out.counts.data(), out.displs.data(), out.types.data(), in.base,
                                  in.counts.data(), in.displs.data(), in.types.data(), comm);
        });
    } catch (const std::exception& e) {
        internal_failure(shim::alltoallw, e.what());
        return pass(pass_reason::internal);
    }
}

int runtime::neighbor_alltoallw(const void* sendbuf, const int sendcounts[], const MPI_Aint sdispls[],
                                const MPI_Datatype sendtypes[], void* recvbuf, const int recvcounts[],
                                const MPI_Aint rdispls[], const MPI_Datatype recvtypes[], MPI_Comm comm) noexcept {
    this->count(shim::neighbor_alltoallw);
    const auto library = [&] {
        return PMPI_Neighbor_alltoallw(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes,
                                       comm);
    };
    const auto pass = [&](pass_reason why) {
        count_pass(direction::collective, why);
        return library();
    };
    if (!collectives_on(comm)) return pass(running() ? pass_reason::forced : pass_reason::not_running);
    int kind = MPI_UNDEFINED;
    if (sendbuf == MPI_IN_PLACE || PMPI_Topo_test(comm, &kind) != MPI_SUCCESS) return pass(pass_reason::bad_argument);
    if (kind != MPI_CART && kind != MPI_DIST_GRAPH) return pass(pass_reason::unsupported);  // graph, or none
    try {
        // The neighbours in MPI's order: per dimension the one below, then the one above, for a
        // cartesian communicator (MPI_PROC_NULL past a non-periodic edge: its blocks are not
        // touched); the adjacency lists of a distributed graph.
        int in = 0, out = 0;
        std::vector<char> null_in, null_out;
        if (kind == MPI_CART) {
            int dims = 0;
            if (PMPI_Cartdim_get(comm, &dims) != MPI_SUCCESS) return pass(pass_reason::bad_argument);
            in = out = 2 * dims;
            null_in.resize(static_cast<std::size_t>(in));
            for (int d = 0; d < dims; ++d) {
                int below = MPI_PROC_NULL, above = MPI_PROC_NULL;
                if (PMPI_Cart_shift(comm, d, 1, &below, &above) != MPI_SUCCESS) return pass(pass_reason::bad_argument);
                null_in[static_cast<std::size_t>(2 * d)] = below == MPI_PROC_NULL;
                null_in[static_cast<std::size_t>(2 * d + 1)] = above == MPI_PROC_NULL;
            }
            null_out = null_in;
        } else {
            int weighted = 0;
            if (PMPI_Dist_graph_neighbors_count(comm, &in, &out, &weighted) != MPI_SUCCESS)
                return pass(pass_reason::bad_argument);
        }
        if ((in > 0 && (recvcounts == nullptr || rdispls == nullptr || recvtypes == nullptr)) ||
            (out > 0 && (sendcounts == nullptr || sdispls == nullptr || sendtypes == nullptr)))
            return pass(pass_reason::bad_argument);
        w_side send(const_cast<void*>(sendbuf), false);
        w_side recv(recvbuf, false);
        const auto find = [this](MPI_Datatype t) { return memo_.find(t); };
        pass_reason why = describe(send, out, sendcounts, sdispls, sendtypes, null_out, find);
        if (why == pass_reason::none) why = describe(recv, in, recvcounts, rdispls, recvtypes, null_in, find);
        if (why != pass_reason::none) return pass(why);
        return fused_collective(shim::neighbor_alltoallw, comm, send, recv, library, [&](w_side& o, w_side& i) {
            return PMPI_Neighbor_alltoallw(o.base, o.counts.data(), o.aint_displs.data(), o.types.data(), i.base,
                                           i.counts.data(), i.aint_displs.data(), i.types.data(), comm);
        });
    } catch (const std::exception& e) {
        internal_failure(shim::neighbor_alltoallw, e.what());
        return pass(pass_reason::internal);
    }
}

}  // namespace shunt::detail
