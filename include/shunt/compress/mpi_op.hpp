// shunt/compress/mpi_op.hpp: the MPI reduction operations and datatypes of the summable compressed
// forms: an allreduce of FP16 or BF16 compressed vectors needs a user operation that adds in float
// (MPI has no half types); random_k's floats take MPI_SUM on MPI_FLOAT. With NCCL the library's
// own ncclSum on ncclFloat16, ncclBfloat16 or ncclFloat32 does the same.
#pragma once

#include <shunt/compress/combine.hpp>
#include <shunt/compress/common.hpp>
#include <shunt/errors.hpp>

#include <mpi.h>

#include <cstdint>

namespace shunt::compress {
namespace detail {

/// The MPI_User_function of form F: `len` elements of `type`, whose size is a multiple of the
/// form's element. Never throws (it runs inside the MPI library).
template <sum_form F>
void mpi_combine(void* in, void* inout, int* len, MPI_Datatype* type) {
    int size = 0;
    if (PMPI_Type_size(*type, &size) != MPI_SUCCESS || size <= 0) return;
    combine(F, in, inout, static_cast<std::int64_t>(*len) * size / element_bytes(F));
}

}  // namespace detail

/// The datatype an allreduce of form `f` sends: MPI_UINT16_T for f16 and bf16, MPI_FLOAT for f32.
/// Throws shunt::error for sum_form::none.
inline MPI_Datatype mpi_datatype(sum_form f) {
    if (f == sum_form::f32) return MPI_FLOAT;
    if (f == sum_form::f16 || f == sum_form::bf16) return MPI_UINT16_T;
    throw error("compress: this compressed form does not sum");
}

/// The reduction of form `f`: MPI_SUM for f32; for f16 and bf16 a new commutative user operation
/// (combine() in float), which the caller releases with PMPI_Op_free (make it once, at set-up: it
/// is collective in nothing, but MPI must be initialised). Throws shunt::mpi_error when the
/// library refuses, shunt::error for sum_form::none.
inline MPI_Op make_mpi_op(sum_form f) {
    if (f == sum_form::f32) return MPI_SUM;
    MPI_Op op = MPI_OP_NULL;
    if (f == sum_form::f16)
        SHUNT_CHECK_MPI(PMPI_Op_create(&detail::mpi_combine<sum_form::f16>, 1, &op));
    else if (f == sum_form::bf16)
        SHUNT_CHECK_MPI(PMPI_Op_create(&detail::mpi_combine<sum_form::bf16>, 1, &op));
    else
        throw error("compress: this compressed form does not sum");
    return op;
}

}  // namespace shunt::compress
