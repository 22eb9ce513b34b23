// shunt/collectives/mpi_call.hpp: one MPI collective call as a descriptor, and the typed-buffer helpers every collective's MPI form shares (datatype facts, byte images, device spans).
#pragma once

#include <shunt/collectives/mpi_transport.hpp>
#include <shunt/collectives/reduction.hpp>
#include <shunt/datatype/decode.hpp>
#include <shunt/datatype/type_info.hpp>
#include <shunt/errors.hpp>
#include <shunt/pack/host.hpp>
#include <shunt/plan/collective.hpp>
#include <shunt/plan/pass.hpp>

#include <mpi.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace shunt {

/// The arguments of one intercepted MPI collective call: the union of what the collectives shunt
/// runs take (each uses its own; the rest stay at their defaults). Buffers are members so that an
/// executor can point them elsewhere (device buffers staged through host memory) and every
/// function that reads the descriptor afterwards sees the staged copies.
struct mpi_coll_args {
    const void* sendbuf = nullptr;
    void* recvbuf = nullptr;
    int sendcount = 0, recvcount = 0;  ///< recvcount: the count of MPI_Allreduce, MPI_Reduce, MPI_Bcast too
    const int* sendcounts = nullptr;
    const int* sdispls = nullptr;
    const int* recvcounts = nullptr;
    const int* rdispls = nullptr;
    MPI_Datatype sendtype = MPI_DATATYPE_NULL;
    MPI_Datatype recvtype = MPI_DATATYPE_NULL;  ///< the datatype of the single-type collectives too
    MPI_Op op = MPI_OP_NULL;
    int root = 0;
    MPI_Comm comm = MPI_COMM_NULL;
};

/// Where the datatypes of a call are decoded: the preload library's per-thread memo over its
/// type cache, or decode_source for header users. A decoded form stays valid through one call.
class type_source {
public:
    virtual ~type_source() = default;
    /// The decoded form of `t`, or nullptr where shunt does not support it (the library packs it).
    virtual const type_info* find(MPI_Datatype t) = 0;
    /// True when `t` is known to be committed (predefined, or committed through shunt's shim).
    virtual bool known(MPI_Datatype t) const = 0;
};

/// A type_source that decodes each datatype it is asked for with shunt::decode, keeping the
/// results for its own lifetime (one call, or a loop of calls on the same types).
class decode_source final : public type_source {
public:
    const type_info* find(MPI_Datatype t) override {
        auto it = decoded_.find(t);
        if (it == decoded_.end()) {
            std::unique_ptr<type_info> info;
            try {
                info = std::make_unique<type_info>(decode(t));
            } catch (const unsupported&) {}
            it = decoded_.emplace(t, std::move(info)).first;
        }
        return it->second.get();
    }
    bool known(MPI_Datatype) const override { return false; }

private:
    std::map<MPI_Datatype, std::unique_ptr<type_info>> decoded_;
};

namespace detail {

/// Packs (`pack`) or unpacks `count` elements of `type` at `typed` to or from their raw bytes at
/// `packed` with the library's MPI_Pack / MPI_Unpack on `comm`, in pieces of at most INT_MAX
/// elements and bytes: how shunt moves a datatype it does not know. Throws mpi_error (the
/// library's error handler has run), or error where the packed form is not the raw data.
inline void library_move(bool pack, void* typed, std::int64_t count, MPI_Datatype type, std::byte* packed,
                         MPI_Comm comm) {
    MPI_Count size = 0;
    SHUNT_CHECK_MPI(PMPI_Type_size_x(type, &size));
    MPI_Aint lb = 0, extent = 0;
    SHUNT_CHECK_MPI(PMPI_Type_get_extent(type, &lb, &extent));
    const std::int64_t per =
        std::max<std::int64_t>(1, std::min<std::int64_t>(INT_MAX, INT_MAX / std::max<MPI_Count>(size, 1)));
    std::int64_t done = 0;
    while (done < count) {
        const int n = static_cast<int>(std::min(per, count - done));
        auto* at = static_cast<char*>(typed) + done * static_cast<std::int64_t>(extent);
        std::byte* bytes = packed + done * size;
        const int room = static_cast<int>(n * size);
        int pos = 0;
        if (pack)
            SHUNT_CHECK_MPI(PMPI_Pack(at, n, type, bytes, room, &pos, comm));
        else
            SHUNT_CHECK_MPI(PMPI_Unpack(bytes, room, &pos, at, n, type, comm));
        if (pos != room) throw error("the library's packed form is not the raw data (heterogeneous build?)");
        done += n;
    }
}

/// Size and extent facts of a datatype used as a byte stream.
struct type_facts {
    bool ok = false;
    std::int64_t size = 0;  ///< bytes per element
    std::int64_t extent = 0;  ///< bytes between elements
    bool dense = false;  ///< data fills the extent from the buffer start: moves as plain bytes
    const type_info* info = nullptr;  ///< not dense: shunt's decoded form (nullptr: the library packs)
};

/// True when the library takes `t` for communication: known to `types` (predefined or committed
/// through shunt's shim), or committed behind shunt's back (the library's MPI_Pack of no element
/// accepts it; its error, on MPI_COMM_SELF, is returned, not raised). An uncommitted type goes to
/// the library, which reports MPI_ERR_TYPE as it would without shunt.
inline bool committed(MPI_Datatype t, const type_source& types) {
    if (types.known(t)) return true;
    const errors_returned quiet(MPI_COMM_SELF);
    char none = 0;
    int pos = 0;
    return PMPI_Pack(&none, 0, t, &none, 1, &pos, MPI_COMM_SELF) == MPI_SUCCESS;
}

/// The facts of `t`, and for a type with gaps its decoded form (valid through one blocking call:
/// the application cannot free a type it is passing); not ok for a type that is not committed.
inline type_facts facts_of(MPI_Datatype t, type_source& types) {
    type_facts f;
    if (t == MPI_DATATYPE_NULL || !committed(t, types)) return f;
    MPI_Count size = 0, lb = 0, extent = 0;
    if (PMPI_Type_size_x(t, &size) != MPI_SUCCESS || PMPI_Type_get_extent_x(t, &lb, &extent) != MPI_SUCCESS) return f;
    if (size < 0 || size == MPI_UNDEFINED) return f;
    f.ok = true;
    f.size = size;
    f.extent = extent;
    f.dense = dense_size(t) > 0;
    if (!f.dense) f.info = types.find(t);
    return f;
}

/// The element size of a reduction of `type` with `op` shunt can run (into `es`), else why the
/// library runs it: a type that is not committed, or a reduction shunt does not support.
inline pass_reason reduction_element(MPI_Datatype type, MPI_Op op, const type_source& types, std::int64_t& es) {
    if (!committed(type, types)) return pass_reason::bad_argument;
    try {
        es = mpi_reduction(type, op).element_size();
    } catch (...) {
        return pass_reason::unsupported;
    }
    return pass_reason::none;
}

// Argument checks that pass a call to the library run on each rank alone, so they must be what
// every rank of a valid call answers alike, or what the library itself rejects (erroneous
// programs): pointers differ per rank. MPI_BOTTOM (a null buffer) is valid with a datatype of
// absolute addresses, which has gaps; with a dense type it is an error the library reports. The
// same non-null send and receive buffer is aliasing, which the library reports too.
inline bool null_buffer(const void* buf, const type_facts& f) { return buf == nullptr && f.dense; }
inline bool aliased(const void* sendbuf, const void* recvbuf) { return sendbuf == recvbuf && recvbuf != nullptr; }

/// `count` elements of `type` at `buf` as a contiguous byte image: the buffer itself for a
/// dense type, else a packed copy (shunt's host packer on the decoded form; PMPI_Pack for a type
/// shunt does not know), written back by unpack() where it receives.
class byte_image {
public:
    byte_image(void* buf, std::int64_t count, MPI_Datatype type, const type_facts& f)
        : buf_(buf), count_(count), type_(type), info_(f.info), bytes_(count * f.size) {
        if (f.dense || bytes_ == 0) {
            data_ = static_cast<std::byte*>(buf);
        } else {
            staging_ = host_buffer(bytes_);
            data_ = staging_.data();
        }
    }
    std::byte* data() const { return data_; }
    std::int64_t bytes() const { return bytes_; }
    bool staged() const { return data_ != buf_ && bytes_ > 0; }
    /// Fills the image from the typed buffer.
    void pack() {
        if (staged()) move(true);
    }
    /// Writes the image back into the typed buffer.
    void unpack() {
        if (staged()) move(false);
    }

private:
    void move(bool pack) {
        if (info_ != nullptr) {  // shunt's host packer, 64-bit throughout
            const std::int64_t moved =
                pack ? pack_host(*info_, count_, buf_, data_) : unpack_host(*info_, count_, data_, buf_);
            if (moved != bytes_)
                throw error("the host packer moved " + std::to_string(moved) + " of " + std::to_string(bytes_) +
                            " bytes");
            return;
        }
        library_move(pack, buf_, count_, type_, data_, MPI_COMM_SELF);
    }

    void* buf_;
    std::int64_t count_;
    MPI_Datatype type_;
    const type_info* info_;
    std::int64_t bytes_;
    std::byte* data_ = nullptr;
    host_buffer staging_{0};
};

/// The blocks of an alltoallv side as byte ranges: the buffer itself for a dense type (unless
/// `copy`: the data must be copied out first, as for MPI_IN_PLACE), else a staging copy, which a
/// send side fills at construction (one byte_image per block) and a receive side writes back in
/// scatter().
class block_images {
public:
    block_images(void* buf, const int counts[], const int displs[], MPI_Datatype type, const type_facts& f, int p,
                 bool send, bool copy)
        : buf_(static_cast<std::byte*>(buf)),
          counts_(counts),
          displs_(displs),
          type_(type),
          facts_(f),
          bytes_(static_cast<std::size_t>(p)),
          offsets_(static_cast<std::size_t>(p)),
          direct_(f.dense && !copy) {
        std::int64_t total = 0;
        for (int j = 0; j < p; ++j) {
            const auto js = static_cast<std::size_t>(j);
            bytes_[js] = std::int64_t{counts[j]} * f.size;
            offsets_[js] = direct_ ? std::int64_t{displs[j]} * f.extent : total;
            total += bytes_[js];
        }
        if (direct_) {
            base_ = buf_;
            return;
        }
        staging_ = host_buffer(std::max<std::int64_t>(total, 1));
        base_ = staging_.data();
        if (send)
            for (int j = 0; j < p; ++j) move(j, true);
    }
    /// Writes received staging bytes back into the buffer (a no-op when received in place).
    void scatter(int p) {
        if (direct_) return;
        for (int j = 0; j < p; ++j) move(j, false);
    }
    const std::byte* base() const { return base_; }
    std::byte* base() { return base_; }
    const std::vector<std::int64_t>& bytes() const { return bytes_; }
    const std::vector<std::int64_t>& offsets() const { return offsets_; }

private:
    void move(int j, bool gather) {
        const auto js = static_cast<std::size_t>(j);
        if (bytes_[js] == 0) return;
        void* at = buf_ + static_cast<std::ptrdiff_t>(std::int64_t{displs_[j]} * facts_.extent);
        byte_image img(at, counts_[j], type_, facts_);
        if (gather) {
            img.pack();
            std::memcpy(base_ + offsets_[js], img.data(), static_cast<std::size_t>(bytes_[js]));
        } else {
            std::memcpy(img.data(), base_ + offsets_[js], static_cast<std::size_t>(bytes_[js]));
            img.unpack();
        }
    }

    std::byte* buf_;
    const int* counts_;
    const int* displs_;
    MPI_Datatype type_;
    type_facts facts_;
    std::vector<std::int64_t> bytes_, offsets_;
    bool direct_;
    host_buffer staging_{0};
    std::byte* base_ = nullptr;
};

}  // namespace detail

/// The bytes [lo, hi) from a buffer's address that a call's elements occupy; `whole`: the
/// elements cover every byte of it (a receive then leaves nothing of the old contents).
struct byte_span {
    std::int64_t lo = 0, hi = 0;
    bool whole = true;
    bool empty() const { return hi <= lo; }
    /// Adds `count` elements of `t` starting `first` bytes from the buffer (false: t is invalid).
    bool add(MPI_Datatype t, std::int64_t count, std::int64_t first = 0) {
        if (count <= 0) return true;
        MPI_Count lb = 0, extent = 0, true_lb = 0, true_extent = 0, size = 0;
        if (PMPI_Type_get_extent_x(t, &lb, &extent) != MPI_SUCCESS ||
            PMPI_Type_get_true_extent_x(t, &true_lb, &true_extent) != MPI_SUCCESS ||
            PMPI_Type_size_x(t, &size) != MPI_SUCCESS || size == MPI_UNDEFINED)
            return false;
        const std::int64_t last = (count - 1) * extent;  // the last element's offset from the first
        const std::int64_t l = first + true_lb + std::min<std::int64_t>(0, last);
        const std::int64_t h = first + true_lb + true_extent + std::max<std::int64_t>(0, last);
        const bool tiles = size == true_extent && size == extent && h - l == count * size;
        if (empty()) {
            lo = l, hi = h, whole = tiles;
        } else {
            whole = whole && tiles && (h == lo || l == hi);  // adjacent runs still tile
            lo = std::min(lo, l), hi = std::max(hi, h);
        }
        return true;
    }
};

/// What a collective's MPI form learns of a call before it runs: filled by the form's check(),
/// read by its spans() and run(), and by the executor (bytes and live key the planner).
struct mpi_coll_facts {
    std::int64_t bytes = 0;  ///< the operation's bytes: the planner's key
    bool live = true;  ///< may be measured (false: a floating-point reduction, decided from the model)
    int size = 0, me = 0;  ///< the communicator's size and this rank
    std::int64_t es = 0;  ///< a reduction's element size
    std::int64_t block = 0;  ///< bytes per rank of the fixed-size gathers and exchanges
    detail::type_facts st, rt;  ///< the send and receive datatypes
    std::vector<std::int64_t> parts;  ///< bytes per rank (allgatherv)
    std::int64_t total = 0;  ///< elements of a reduce-scatter's vector
    bool packed_order = false;  ///< allgatherv: the parts lie in rank order without gaps in recvbuf
};

/// One buffer of a call as device staging sees it: the send (`send`) or receive buffer, the bytes
/// its elements occupy, and whether the call reads (`in`) or writes (`out`) them.
struct mpi_coll_span {
    bool send = false;
    byte_span span;
    bool in = false, out = false;
};
using mpi_coll_spans = std::vector<mpi_coll_span>;

/// The descriptor of MPI_Allgather's and MPI_Alltoall's arguments (one block per rank each way).
inline mpi_coll_args mpi_block_args(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                    int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
    return {.sendbuf = sendbuf,
            .recvbuf = recvbuf,
            .sendcount = sendcount,
            .recvcount = recvcount,
            .sendtype = sendtype,
            .recvtype = recvtype,
            .comm = comm};
}

namespace detail {

/// The facts of a call's receive datatype and of its send datatype (the receive one in place);
/// false where the library must judge them (not committed, no bytes, a null buffer of a dense type).
inline bool two_types(const mpi_coll_args& a, type_source& types, mpi_coll_facts& f) {
    f.rt = facts_of(a.recvtype, types);
    f.st = a.sendbuf == MPI_IN_PLACE ? f.rt : facts_of(a.sendtype, types);
    return f.rt.ok && f.st.ok;
}

/// The checks of a call of one block per rank each way (MPI_Allgather, MPI_Alltoall) after the
/// communicator's: the datatypes, and the send block as long as the receive block; sets
/// f.block and f.bytes (f.size set).
inline pass_reason block_types(const mpi_coll_args& a, type_source& types, mpi_coll_facts& f) {
    if (!two_types(a, types, f) || f.rt.size == 0 || null_buffer(a.recvbuf, f.rt)) return pass_reason::bad_argument;
    f.block = a.recvcount * f.rt.size;
    if (a.sendbuf != MPI_IN_PLACE && (a.sendcount < 0 || a.sendcount * f.st.size != f.block))
        return pass_reason::bad_argument;
    f.bytes = f.block * f.size;
    return pass_reason::none;
}

}  // namespace detail

/// The settled-decision key of a call before its checks: `count` elements of `type` (times the
/// communicator's size when `per_rank`) in bytes; -1 where the library must judge the arguments.
inline std::int64_t mpi_key_bytes(int count, MPI_Datatype type, bool per_rank, MPI_Comm comm) {
    int ts = 0, np = 1;
    if (count <= 0 || PMPI_Type_size(type, &ts) != MPI_SUCCESS) return -1;
    if (per_rank && PMPI_Comm_size(comm, &np) != MPI_SUCCESS) return -1;
    return std::int64_t{count} * ts * np;
}

}  // namespace shunt
