// interpose/fast_path.hpp: the shims' fast path: a repeat of a kept call, with nothing to count, goes to the library from the shim itself.
#pragma once

#include <shunt/collectives/allgather.hpp>
#include <shunt/collectives/allreduce.hpp>
#include <shunt/collectives/alltoall.hpp>
#include <shunt/collectives/bcast.hpp>
#include <shunt/collectives/reduce.hpp>
#include <shunt/collectives/reduce_scatter_block.hpp>

#include "coll_kept.hpp"
#include "p2p_kept.hpp"
#include "runtime.hpp"

#include <mpi.h>

#include <type_traits>

namespace shunt::detail {

/// The blocking collective form of shim S whose kept calls the shim checks, else void.
template <shim S>
struct kept_form {
    using type = void;
};
#define SHUNT_KEPT_FORM_(name)     \
    template <>                    \
    struct kept_form<shim::name> { \
        using type = mpi_##name;   \
    };
SHUNT_KEPT_FORM_(allreduce)
SHUNT_KEPT_FORM_(reduce)
SHUNT_KEPT_FORM_(reduce_scatter_block)
SHUNT_KEPT_FORM_(bcast)
SHUNT_KEPT_FORM_(allgather)
SHUNT_KEPT_FORM_(alltoall)
#undef SHUNT_KEPT_FORM_

/// `fast_path<S>::unguarded(args...)`: true where the call repeats a kept one and goes to the
/// library as it is, with nothing to count (no SHUNT_REPORT, no decision log), which the shim then
/// calls itself, as a tail call: no call into the runtime, no frame, no re-entry guard (the checks
/// only read: the thread's kept calls and the gate's word). A library that calls an intercepted
/// function from inside that call meets the shims as a user would. The most frequent calls have
/// one: MPI_Send, MPI_Recv, MPI_Isend, MPI_Irecv, MPI_Sendrecv (both halves kept), and the
/// blocking collectives kept by count, type and reduction, each of the blocking ones only while
/// none of shunt's nonblocking collectives is in flight; a point-to-point call of no data while
/// no blocker is set; and the completion calls (MPI_Wait, MPI_Test and their -all, -any and
/// -some forms) while nothing of shunt's is alive to complete. MPI_Isend and MPI_Irecv, the calls
/// of a window, read the runtime only for a planned call (p2p_kept.hpp: repeats_kept_p2p).
/// `fast_path<S>{rt}.guarded(args...)`, under the guard: a kept collective while some are in
/// flight, which it first progresses, as the runtime's path does (a blocking point-to-point call
/// then goes to the runtime, which makes it nonblocking and progresses them while it waits).
template <shim S>
struct fast_path {
    runtime& rt;

    /// Whether S completes requests: while none of shunt's point-to-point requests is alive and
    /// none of its collectives is in flight or released, the runtime hands such a call to the
    /// library as it is (p2p_executor::complete), so the shim does.
    static constexpr bool completes = S == shim::wait || S == shim::waitall || S == shim::waitany ||
                                      S == shim::waitsome || S == shim::test || S == shim::testall ||
                                      S == shim::testany || S == shim::testsome;
    /// Whether shim S has a fast path.
    static constexpr bool any = S == shim::send || S == shim::recv || S == shim::isend || S == shim::irecv ||
                                S == shim::sendrecv || completes || !std::is_void_v<typename kept_form<S>::type>;

    template <class... A>
    [[gnu::always_inline]] static bool unguarded([[maybe_unused]] A... a) noexcept {
        if constexpr (S == shim::isend || S == shim::irecv) {
            return nonblocking(a...);
        } else if constexpr (completes) {
            runtime* built = runtime::built();
            return fast_gate::none_of(fast_gate::requests | fast_gate::counting) && built != nullptr &&
                   built->nbc().idle();
        } else if constexpr (any) {
            runtime* built = runtime::built();
            return built != nullptr && fast_path{*built}.repeats(a...);
        } else {
            return false;
        }
    }

    template <class... A>
    [[gnu::always_inline]] bool guarded([[maybe_unused]] A... a) const noexcept {
        if constexpr (!std::is_void_v<typename kept_form<S>::type>) {
            if (!collective<typename kept_form<S>::type>(a...)) return false;
            rt.nbc().progress();
            return true;
        } else {
            return false;
        }
    }

private:
    static constexpr direction d = S == shim::send || S == shim::isend ? direction::send : direction::recv;

    template <class... A>
    [[gnu::always_inline]] bool repeats([[maybe_unused]] A... a) const noexcept {
        if constexpr (S == shim::send || S == shim::recv)
            return blocking(a...);
        else if constexpr (S == shim::sendrecv)
            return pair(a...);
        else
            return rt.nbc().idle() && collective<typename kept_form<S>::type>(a...);
    }
    template <class... Status>
    [[gnu::always_inline]] bool blocking(const void* buf, int count, MPI_Datatype type, int peer, int, MPI_Comm,
                                         Status...) const noexcept {
        return !rt.nbc().in_flight() && rt.p2p().quick(rt, d, buf, count, type, peer);
    }
    [[gnu::always_inline]] bool pair(const void* sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int,
                                     void* recvbuf, int recvcount, MPI_Datatype recvtype, int source, int, MPI_Comm,
                                     MPI_Status*) const noexcept {
        return !rt.nbc().in_flight() &&
               rt.p2p().quick_pair(rt, sendbuf, sendcount, sendtype, dest, recvbuf, recvcount, recvtype, source);
    }
    [[gnu::always_inline]] static bool nonblocking(const void* buf, int count, MPI_Datatype type, int peer, int,
                                                   MPI_Comm, MPI_Request*) noexcept {
        return repeats_kept_p2p(d, buf, count, type, peer);
    }
    template <class Form, class... A>
    [[gnu::always_inline]] bool collective(A... a) const noexcept {
        return !rt.cfg().log.enabled(log_level::debug, log_category::decide) &&
               kept_repeat<Form>(rt, Form::describe(a...), false, fast_gate::for_collective_shims()) != nullptr;
    }
};

}  // namespace shunt::detail
