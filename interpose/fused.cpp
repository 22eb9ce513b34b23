// interpose/fused.cpp: MPI_Alltoallw and MPI_Neighbor_alltoallw: every block packed in one fused pass into one staging buffer, the bytes moved by the library's own call with byte types, every received block unpacked in one pass.
#include "fused.hpp"

#include <shunt/collectives/mpi_call.hpp>

#include <shunt/errors.hpp>
#include <shunt/gpu/memory.hpp>
#include <shunt/gpu/pack.hpp>
#include <shunt/log.hpp>
#include <shunt/model/measure.hpp>
#include <shunt/pack/host.hpp>
#include <shunt/plan/collective.hpp>

#include "runtime.hpp"

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

// The decision is plan/collective.hpp's fused_tuner. SHUNT_COLL=shunt takes shunt's path without
// agreeing, SHUNT_COLL=library (and SHUNT_DISABLE) the library's. The only rank-local
// pass-throughs after a decision for shunt are erroneous calls (negative counts, invalid types)
// and internal failures (no memory): sizes are no reason, since a block of more than INT_MAX
// bytes, or beyond INT_MAX bytes from the exchange's base, travels as one element of a byte type
// made for the call.

fused_executor::side::~side() {
    gpu::pool_release(staging);
    gpu::pool_release(scratch);
    for (MPI_Datatype& t : made) PMPI_Type_free(&t);
}

namespace {

/// The decisions of MPI_Alltoallw and MPI_Neighbor_alltoallw on one communicator, cached on it,
/// with the report's record of each from its decision on.
struct w_decisions {
    fused_tuner op[2];
    std::shared_ptr<runtime::w_record> record[2];
};

/// Changes whenever a communicator's decisions are deleted (the handle may come back for another).
std::atomic<std::uint64_t> w_epoch{0};

/// The thread's last communicator per operation whose decision is the library's (final): a
/// repeat passes without describing its blocks.
struct kept_w {
    MPI_Comm comm{};
    std::uint64_t epoch = ~std::uint64_t{0};
    w_decisions* ds = nullptr;
};
thread_local kept_w kept_ws[2];

int w_keyval() {
    static const int keyval = [] {
        int k = MPI_KEYVAL_INVALID;
        const auto del = [](MPI_Comm, int, void* value, void*) -> int {
            w_epoch.fetch_add(1, std::memory_order_acq_rel);
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
pass_reason describe(fused_executor::side& side, int p, const int counts[], const Displ displs[],
                     const MPI_Datatype types[], const std::vector<char>& skip, Find find) {
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
MPI_Datatype byte_run(fused_executor::side& s, std::int64_t offset, std::int64_t bytes) {
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
void place(fused_executor::side& s) {
    const auto p = s.blocks.size();
    const bool device = s.way != device_path::host;
    const bool all_direct_device = s.way == device_path::device && !s.gaps && !s.copy;
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
        s.staging =
            gpu::pool_acquire(s.way == device_path::device ? gpu::pool_kind::device : gpu::pool_kind::pinned, n);
        if (s.way == device_path::staged) s.scratch = gpu::pool_acquire(gpu::pool_kind::device, n);
    }
    auto* stage = static_cast<std::byte*>(s.staging.ptr);
    auto where = [&](const fused_executor::side::block& b) { return b.direct ? b.at : stage + b.offset; };
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
void pack_side(fused_executor::side& s, MPI_Comm comm) {
    auto* stage = static_cast<std::byte*>(s.staging.ptr);
    if (s.way != device_path::host) {
        auto* out = s.way == device_path::staged ? static_cast<std::byte*>(s.scratch.ptr) : stage;
        std::vector<gpu::device_input> items;
        std::int64_t bytes = 0;
        for (const auto& b : s.blocks) {
            if (b.bytes == 0 || b.direct) continue;
            items.push_back({b.form.get(), b.at, out + b.offset});
            bytes = std::max(bytes, b.offset + b.bytes);
        }
        if (items.empty()) return;
        gpu::pack_fused(items, nullptr);
        if (s.way == device_path::staged) gpu::copy(stage, out, static_cast<std::size_t>(bytes), nullptr);
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
void unpack_side(fused_executor::side& s, MPI_Comm comm) {
    const auto* stage = static_cast<const std::byte*>(s.staging.ptr);
    if (s.way != device_path::host) {
        std::int64_t bytes = 0;
        for (const auto& b : s.blocks)
            if (b.bytes > 0 && !b.direct) bytes = std::max(bytes, b.offset + b.bytes);
        if (bytes == 0) return;
        const std::byte* in = stage;
        if (s.way == device_path::staged) {
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
int fused_executor::decided(shim s, MPI_Comm comm, side& send, side& recv, Library library,
                            Exchange exchange_bytes) noexcept {
    const auto pass = [&](pass_reason why) {
        rt_.count_pass(direction::collective, why);
        return library();
    };
    const char* name = shim_names[static_cast<std::size_t>(s)];
    const settings& cfg = rt_.cfg();
    const std::uint64_t epoch = w_epoch.load(std::memory_order_acquire);  // before the lookup
    send.way = rt_.devices().way_of(rt_.model(), cfg.pack, send.buf, send.total);
    recv.way = rt_.devices().way_of(rt_.model(), cfg.pack, recv.buf, recv.total);
    w_decisions* ds = decisions_of(comm);
    if (ds == nullptr) return pass(pass_reason::internal);
    const int which = s == shim::alltoallw ? 0 : 1;
    fused_tuner& d = ds->op[which];
    using state = fused_tuner::state;
    int me = 0, size = 0;
    // The decision is logged on the communicator's rank 0 and kept for the report.
    const auto log_choice = [&](state c, const char* why, const double* measured = nullptr) {
        if (PMPI_Comm_rank(comm, &me) != MPI_SUCCESS || PMPI_Comm_size(comm, &size) != MPI_SUCCESS) return;
        if (cfg.log.enabled(log_level::debug, log_category::decide) && me == 0)
            log_debug(log_category::decide, "%s on a communicator of %d ranks: %s, kept for the communicator (%s)",
                      name, size, c == state::shunt ? "shunt's fused packing" : "the library", why);
        try {
            auto r = std::make_shared<runtime::w_record>();
            r->op = s;
            r->ranks = size;
            r->to_shunt = c == state::shunt;
            r->forced = cfg.coll == coll_choice::shunt;
            r->why = measured != nullptr ? "" : why;
            if (measured != nullptr) r->measured[0] = measured[0], r->measured[1] = measured[1];
            ds->record[which] = r;
            rt_.keep_w_record(std::move(r));
        } catch (...) {  // no memory: the report goes without this decision
        }
    };
    state c = d.current();
    if (c == state::undecided) {
        if (cfg.coll == coll_choice::shunt) {
            d.force_shunt();
            log_choice(state::shunt, "forced by SHUNT_COLL");
        } else {
            const bool device = send.way != device_path::host || recv.way != device_path::host;
            fused_tuner::facts v = fused_tuner::local(send.gaps || recv.gaps, send.unknown || recv.unknown, device);
            if (PMPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_INT, MPI_MAX, comm) !=
                MPI_SUCCESS)
                return pass(pass_reason::internal);  // the same failure on every rank
            if (const char* why = d.first(v)) log_choice(d.current(), why);
        }
        c = d.current();
    }
    if ((c == state::library || c == state::shunt) && ds->record[which] != nullptr)
        ds->record[which]->taken.fetch_add(1, std::memory_order_relaxed);
    if (c == state::library) {
        kept_ws[which] = {comm, epoch, ds};
        return pass(pass_reason::planned);
    }
    if (c == state::shunt) return exchange(s, comm, send, recv, pass, exchange_bytes, true);
    // Measuring: each call runs both paths on the same data, in alternating order (the second
    // writes the same bytes again), timed; the first call warms both up (pools, first touch).
    // An in-place call cannot run twice: it takes shunt's path untimed (MPI_IN_PLACE is given on
    // every rank or on none, so every rank skips the same calls).
    if (send.copy) return exchange(s, comm, send, recv, pass, exchange_bytes, true);
    const bool shunt_first = d.shunt_first();
    double took[2] = {0, 0};  // library, shunt
    int rc = MPI_SUCCESS;
    for (int k = 0; k < 2 && rc == MPI_SUCCESS; ++k) {
        const bool shunt_now = (k == 0) == shunt_first;
        const double t0 = now_s();
        rc = shunt_now ? exchange(s, comm, send, recv, pass, exchange_bytes, false) : pass(pass_reason::measuring);
        took[shunt_now ? 1 : 0] = now_s() - t0;
    }
    if (rc != MPI_SUCCESS) return rc;
    if (!d.record(took)) return rc;
    double agreed[2] = {d.best()[0], d.best()[1]};
    if (PMPI_Allreduce(MPI_IN_PLACE, agreed, 2, MPI_DOUBLE, MPI_MAX, comm) != MPI_SUCCESS) {
        agreed[0] = 0;  // the same failure on every rank: the library
        agreed[1] = 1;
    }
    const state now = d.decide(agreed);
    char why[96];
    std::snprintf(why, sizeof why, "library measured %.3g us, shunt %.3g us", agreed[0] * 1e6, agreed[1] * 1e6);
    log_choice(now, why, agreed);
    return rc;
}

template <class Pass, class Exchange>
int fused_executor::exchange(shim s, MPI_Comm comm, side& send, side& recv, Pass pass, Exchange exchange_bytes,
                             bool counted) noexcept {
    const char* name = shim_names[static_cast<std::size_t>(s)];
    try {
        for (side* sd : {&send, &recv}) {
            if (sd->way == device_path::host) continue;
            // A device buffer needs shunt's decoding (agreed on above, unless forced or the
            // types changed since the communicator's first call).
            if (sd->unknown) return pass(pass_reason::unknown_type);
            for (auto& b : sd->blocks)
                if (b.bytes > 0) b.form = rt_.devices().form_of(rt_.memo(), b.info, b.count, b.type);
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
        rt_.internal_failure(s, e.what());
        return pass(pass_reason::internal);
    }
    const int rc = exchange_bytes(send, recv);
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
    if (counted) rt_.count_collective(s, send.total);
    return rc;
}

// ---- entry points ----

int runtime::alltoallw(const void* sendbuf, const int sendcounts[], const int sdispls[], const MPI_Datatype sendtypes[],
                       void* recvbuf, const int recvcounts[], const int rdispls[], const MPI_Datatype recvtypes[],
                       MPI_Comm comm) noexcept {
    count(shim::alltoallw);
    return fused_.alltoallw(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm);
}

int runtime::neighbor_alltoallw(const void* sendbuf, const int sendcounts[], const MPI_Aint sdispls[],
                                const MPI_Datatype sendtypes[], void* recvbuf, const int recvcounts[],
                                const MPI_Aint rdispls[], const MPI_Datatype recvtypes[], MPI_Comm comm) noexcept {
    count(shim::neighbor_alltoallw);
    return fused_.neighbor_alltoallw(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes,
                                     comm);
}

bool fused_executor::repeat(int which, MPI_Comm comm) noexcept {
    const kept_w& k = kept_ws[which];
    if (k.comm != comm || k.epoch != w_epoch.load(std::memory_order_acquire)) return false;
    // Host buffers only: a device buffer the library cannot take is staged whatever was decided.
    if (rt_.devices().in_use_relaxed()) return false;
    if (rt_.counting() && k.ds->record[which] != nullptr)
        k.ds->record[which]->taken.fetch_add(1, std::memory_order_relaxed);
    return true;
}

int fused_executor::alltoallw(const void* sendbuf, const int sendcounts[], const int sdispls[],
                              const MPI_Datatype sendtypes[], void* recvbuf, const int recvcounts[],
                              const int rdispls[], const MPI_Datatype recvtypes[], MPI_Comm comm) noexcept {
    const auto library = [&] {
        return PMPI_Alltoallw(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm);
    };
    const auto pass = [&](pass_reason why) {
        rt_.count_pass(direction::collective, why);
        return library();
    };
    if (!rt_.collectives().enabled(comm)) return pass(rt_.running() ? pass_reason::forced : pass_reason::not_running);
    if (repeat(0, comm)) return pass(pass_reason::planned);
    const bool in_place = sendbuf == MPI_IN_PLACE;
    int size = 0, inter = 0;
    if (recvcounts == nullptr || rdispls == nullptr || recvtypes == nullptr ||
        (!in_place && (sendcounts == nullptr || sdispls == nullptr || sendtypes == nullptr)) ||
        PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || PMPI_Comm_size(comm, &size) != MPI_SUCCESS)
        return pass(pass_reason::bad_argument);
    if (inter) return pass(pass_reason::unsupported);
    try {
        // In place: the data to send are in recvbuf under the receive arguments, copied out first.
        side send(in_place ? recvbuf : const_cast<void*>(sendbuf), in_place);
        side recv(recvbuf, false);
        const auto find = [this](MPI_Datatype t) { return rt_.memo().find(t); };
        const std::vector<char> none;
        pass_reason why = describe(send, size, in_place ? recvcounts : sendcounts, in_place ? rdispls : sdispls,
                                   in_place ? recvtypes : sendtypes, none, find);
        if (why == pass_reason::none) why = describe(recv, size, recvcounts, rdispls, recvtypes, none, find);
        if (why != pass_reason::none) return pass(why);
        return decided(shim::alltoallw, comm, send, recv, library, [&](side& out, side& in) {
            return PMPI_Alltoallw(out.base, out.counts.data(), out.displs.data(), out.types.data(), in.base,
                                  in.counts.data(), in.displs.data(), in.types.data(), comm);
        });
    } catch (const std::exception& e) {
        rt_.internal_failure(shim::alltoallw, e.what());
        return pass(pass_reason::internal);
    }
}

int fused_executor::neighbor_alltoallw(const void* sendbuf, const int sendcounts[], const MPI_Aint sdispls[],
                                       const MPI_Datatype sendtypes[], void* recvbuf, const int recvcounts[],
                                       const MPI_Aint rdispls[], const MPI_Datatype recvtypes[],
                                       MPI_Comm comm) noexcept {
    const auto library = [&] {
        return PMPI_Neighbor_alltoallw(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes,
                                       comm);
    };
    const auto pass = [&](pass_reason why) {
        rt_.count_pass(direction::collective, why);
        return library();
    };
    if (!rt_.collectives().enabled(comm)) return pass(rt_.running() ? pass_reason::forced : pass_reason::not_running);
    if (repeat(1, comm)) return pass(pass_reason::planned);
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
        side send(const_cast<void*>(sendbuf), false);
        side recv(recvbuf, false);
        const auto find = [this](MPI_Datatype t) { return rt_.memo().find(t); };
        pass_reason why = describe(send, out, sendcounts, sdispls, sendtypes, null_out, find);
        if (why == pass_reason::none) why = describe(recv, in, recvcounts, rdispls, recvtypes, null_in, find);
        if (why != pass_reason::none) return pass(why);
        return decided(shim::neighbor_alltoallw, comm, send, recv, library, [&](side& o, side& i) {
            return PMPI_Neighbor_alltoallw(o.base, o.counts.data(), o.aint_displs.data(), o.types.data(), i.base,
                                           i.counts.data(), i.aint_displs.data(), i.types.data(), comm);
        });
    } catch (const std::exception& e) {
        rt_.internal_failure(shim::neighbor_alltoallw, e.what());
        return pass(pass_reason::internal);
    }
}

}  // namespace shunt::detail
