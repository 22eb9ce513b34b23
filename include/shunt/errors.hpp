// shunt/errors.hpp: the exception types of the C++ API and the one check family for MPI return codes.
#pragma once

// shunt uses the C bindings only; keep Open MPI's and MPICH's deprecated C++ bindings out.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <cstdio>
#include <stdexcept>
#include <string>

namespace shunt {

/// Base of every exception the C++ API throws. Never crosses an extern "C" boundary: the
/// interposer catches it and passes the call through to the library.
class error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// Something shunt does not handle (a datatype, an op, a state): the caller must pass the call
/// through to the underlying library. Not a failure.
class unsupported : public error {
public:
    using error::error;
};

/// An MPI call made by shunt itself returned an error.
class mpi_error : public error {
public:
    mpi_error(int code, const std::string& what) : error(what), code_(code) {}
    /// The MPI error code returned by the failing call.
    int code() const noexcept { return code_; }

private:
    int code_;
};

namespace detail {

/// Builds and throws an mpi_error naming the call, its location and the library's message.
/// Uses PMPI_Error_string only, so it is safe inside the interposer.
[[noreturn]] inline void throw_mpi(int rc, const char* call, const char* file, int line) {
    char msg[MPI_MAX_ERROR_STRING] = {0};
    int len = 0;
    if (PMPI_Error_string(rc, msg, &len) != MPI_SUCCESS) std::snprintf(msg, sizeof msg, "unknown error");
    char text[MPI_MAX_ERROR_STRING + 512];
    std::snprintf(text, sizeof text, "%s failed at %s:%d: %s (code %d)", call, file, line, msg, rc);
    throw mpi_error(rc, text);
}

/// MPI_ERRORS_RETURN on a communicator (none for MPI_COMM_NULL) for this object's lifetime, its
/// handler restored after: for shunt's own calls whose errors the application must not see
/// through its handler. Other threads using the communicator meanwhile see it too.
class errors_returned {
public:
    explicit errors_returned(MPI_Comm comm) noexcept : comm_(comm) {
        swapped_ = comm != MPI_COMM_NULL && PMPI_Comm_get_errhandler(comm, &old_) == MPI_SUCCESS &&
                   PMPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN) == MPI_SUCCESS;
    }
    ~errors_returned() {
        if (swapped_) PMPI_Comm_set_errhandler(comm_, old_);
        if (old_ != MPI_ERRHANDLER_NULL) PMPI_Errhandler_free(&old_);
    }
    errors_returned(const errors_returned&) = delete;
    errors_returned& operator=(const errors_returned&) = delete;

private:
    MPI_Comm comm_;
    MPI_Errhandler old_ = MPI_ERRHANDLER_NULL;
    bool swapped_ = false;
};

}  // namespace detail
}  // namespace shunt

/// Checks the return code of an MPI call made by shunt; throws shunt::mpi_error on failure.
#define SHUNT_CHECK_MPI(call)                                                                           \
    do {                                                                                                \
        int shunt_rc_ = (call);                                                                         \
        if (shunt_rc_ != MPI_SUCCESS) ::shunt::detail::throw_mpi(shunt_rc_, #call, __FILE__, __LINE__); \
    } while (0)
