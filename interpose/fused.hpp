// interpose/fused.hpp: the fused collectives' executor: MPI_Alltoallw and MPI_Neighbor_alltoallw, every block packed in one pass, the bytes moved by the library's own call with byte types.
#pragma once

#include <shunt/datatype/type_info.hpp>
#include <shunt/gpu/memory.hpp>
#include <shunt/model/device.hpp>
#include <shunt/plan/pass.hpp>

#include "counters.hpp"

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace shunt::gpu {
class device_form;
}  // namespace shunt::gpu

namespace shunt::detail {

class runtime;

/// MPI_Alltoallw and MPI_Neighbor_alltoallw: every block packed in one fused pass into one
/// staging buffer, the bytes moved by the library's own call with byte types, every received
/// block unpacked in one pass; one decision per communicator (plan/collective.hpp's fused_tuner),
/// agreed by all ranks on its first call. Thread-safe across communicators.
class fused_executor {
public:
    explicit fused_executor(runtime& rt) noexcept : rt_(rt) {}
    fused_executor(const fused_executor&) = delete;
    fused_executor& operator=(const fused_executor&) = delete;

    int alltoallw(const void* sendbuf, const int sendcounts[], const int sdispls[], const MPI_Datatype sendtypes[],
                  void* recvbuf, const int recvcounts[], const int rdispls[], const MPI_Datatype recvtypes[],
                  MPI_Comm comm) noexcept;
    int neighbor_alltoallw(const void* sendbuf, const int sendcounts[], const MPI_Aint sdispls[],
                           const MPI_Datatype sendtypes[], void* recvbuf, const int recvcounts[],
                           const MPI_Aint rdispls[], const MPI_Datatype recvtypes[], MPI_Comm comm) noexcept;

    /// One side (send or receive) of such a call as the library's byte exchange sees it, and
    /// how its packed bytes travel: host memory, or a device buffer by one of the device methods.
    struct side {
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

        side(void* buffer, bool copy_out) : buf(static_cast<std::byte*>(buffer)), copy(copy_out) {}
        ~side();
        side(const side&) = delete;
        side& operator=(const side&) = delete;

        std::byte* buf;
        bool copy;  ///< the data must be copied out first (MPI_IN_PLACE's send side)
        std::vector<block> blocks;
        std::int64_t total = 0;  ///< bytes of all blocks
        bool gaps = false;  ///< some block is not dense: packing has work to do
        bool unknown = false;  ///< some block's datatype is unknown to shunt
        device_path way = device_path::host;
        // What the library's byte exchange is given: base and, per peer, a count of a byte type
        // at a byte offset from base (MPI_BYTE, or for a block out of int range one element of a
        // type made for the call, its offset inside the type).
        std::byte* base = nullptr;
        std::vector<int> counts, displs;
        std::vector<MPI_Aint> aint_displs;
        std::vector<MPI_Datatype> types;
        std::vector<MPI_Datatype> made;  ///< the types made for this call, freed with the side
        gpu::pool_block staging{}, scratch{};  ///< host/pinned or device staging; device scratch (staged)
    };

private:
    /// True where this thread's last call of operation `which` (0 MPI_Alltoallw, 1 the
    /// neighbourhood form) on `comm` went to the library by the communicator's final decision:
    /// the call passes without describing its blocks (the use counted for the report).
    bool repeat(int which, MPI_Comm comm) noexcept;
    /// After the argument checks: the communicator's decision, then exchange() or `library()`,
    /// or both, timed, while it measures.
    template <class Library, class Exchange>
    int decided(shim s, MPI_Comm comm, side& send, side& recv, Library library, Exchange exchange) noexcept;
    /// shunt's path: pack every send block in one pass, `exchange(send, recv)` (the library's call
    /// with byte types), unpack every received block in one pass; `pass(why)` where it cannot.
    /// Counted as handled unless `counted` is false.
    template <class Pass, class Exchange>
    int exchange(shim s, MPI_Comm comm, side& send, side& recv, Pass pass, Exchange exchange, bool counted) noexcept;

    runtime& rt_;
};

}  // namespace shunt::detail
