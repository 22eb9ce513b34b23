// tests/mpi/mpi_types.hpp: small RAII helpers for building MPI datatypes in the doctest MPI tests.
#pragma once

#include <doctest/doctest.h>

#include <mpi.h>

#include <utility>

namespace shunt_test {

/// An owned derived datatype handle, freed on scope exit (committed on request).
class owned_type {
public:
    owned_type() = default;
    explicit owned_type(MPI_Datatype t) : t_(t) {}
    owned_type(const owned_type&) = delete;
    owned_type& operator=(const owned_type&) = delete;
    owned_type(owned_type&& o) noexcept : t_(std::exchange(o.t_, MPI_DATATYPE_NULL)) {}
    owned_type& operator=(owned_type&& o) noexcept {
        reset();
        t_ = std::exchange(o.t_, MPI_DATATYPE_NULL);
        return *this;
    }
    ~owned_type() { reset(); }

    MPI_Datatype get() const { return t_; }
    operator MPI_Datatype() const { return t_; }
    /// The handle for a constructor's output argument.
    MPI_Datatype* out() {
        reset();
        return &t_;
    }
    owned_type& commit() {
        REQUIRE(MPI_Type_commit(&t_) == MPI_SUCCESS);
        return *this;
    }
    /// Gives the handle up (it is freed elsewhere); returns it.
    MPI_Datatype release() { return std::exchange(t_, MPI_DATATYPE_NULL); }
    void reset() {
        if (t_ != MPI_DATATYPE_NULL) MPI_Type_free(&t_);
    }

private:
    MPI_Datatype t_ = MPI_DATATYPE_NULL;
};

}  // namespace shunt_test
