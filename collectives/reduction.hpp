// shunt/collectives/reduction.hpp: local reduction of MPI data: shunt's kernels for predefined ops and types, PMPI_Reduce_local otherwise.
#pragma once

#include <shunt/errors.hpp>

#include <atomic>
#include <climits>
#include <complex>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

namespace shunt {

namespace detail {

// The predefined operations as functors; `a` is the incoming value, `b` the accumulated one.
// Integer SUM/PROD wrap around in two's complement like the libraries' C loops do, without
// the undefined behaviour of signed overflow.
template <class C>
using wrap_t = std::conditional_t<(sizeof(C) < sizeof(unsigned)), unsigned, std::make_unsigned_t<C>>;
struct op_sum {
    template <class C>
    C operator()(C a, C b) const {
        if constexpr (std::is_integral_v<C>)
            return static_cast<C>(static_cast<wrap_t<C>>(a) + static_cast<wrap_t<C>>(b));
        else
            return a + b;
    }
};
struct op_prod {
    template <class C>
    C operator()(C a, C b) const {
        if constexpr (std::is_integral_v<C>)
            return static_cast<C>(static_cast<wrap_t<C>>(a) * static_cast<wrap_t<C>>(b));
        else
            return a * b;
    }
};
struct op_min {
    template <class C>
    C operator()(C a, C b) const {
        return a < b ? a : b;
    }
};
struct op_max {
    template <class C>
    C operator()(C a, C b) const {
        return a > b ? a : b;
    }
};
struct op_land {
    template <class C>
    C operator()(C a, C b) const {
        return static_cast<C>(a && b);
    }
};
struct op_lor {
    template <class C>
    C operator()(C a, C b) const {
        return static_cast<C>(a || b);
    }
};
struct op_lxor {
    template <class C>
    C operator()(C a, C b) const {
        return static_cast<C>(!a != !b);
    }
};
struct op_band {
    template <class C>
    C operator()(C a, C b) const {
        return static_cast<C>(a & b);
    }
};
struct op_bor {
    template <class C>
    C operator()(C a, C b) const {
        return static_cast<C>(a | b);
    }
};
struct op_bxor {
    template <class C>
    C operator()(C a, C b) const {
        return static_cast<C>(a ^ b);
    }
};

using reduce_kernel = void (*)(const void*, void*, std::int64_t);

template <class C, class Op>
void reduce_loop(const void* in, void* inout, std::int64_t n) {
    const C* __restrict a = static_cast<const C*>(in);
    C* __restrict b = static_cast<C*>(inout);
    Op op;
    std::int64_t i = 0;
    // Fixed-length inner blocks vectorise at any optimisation level that vectorises at all.
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; ++j) b[i + j] = op(a[i + j], b[i + j]);
    for (; i < n; ++i) b[i] = op(a[i], b[i]);
}

enum class type_class { none, integer, floating, complex, logical, byte };

/// Calls f.template operator()<C>() with the C type of a predefined MPI type and returns its
/// class, or type_class::none (f not called) for any other type.
template <class F>
type_class with_c_type(MPI_Datatype t, F&& f) {
    auto as = [&]<class C>(type_class cls) {
        f.template operator()<C>();
        return cls;
    };
    using tc = type_class;
    if (t == MPI_SIGNED_CHAR || t == MPI_INT8_T) return as.template operator()<signed char>(tc::integer);
    if (t == MPI_UNSIGNED_CHAR || t == MPI_UINT8_T) return as.template operator()<unsigned char>(tc::integer);
    if (t == MPI_SHORT || t == MPI_INT16_T) return as.template operator()<short>(tc::integer);
    if (t == MPI_UNSIGNED_SHORT || t == MPI_UINT16_T) return as.template operator()<unsigned short>(tc::integer);
    if (t == MPI_INT || t == MPI_INT32_T) return as.template operator()<int>(tc::integer);
    if (t == MPI_UNSIGNED || t == MPI_UINT32_T) return as.template operator()<unsigned>(tc::integer);
    if (t == MPI_LONG) return as.template operator()<long>(tc::integer);
    if (t == MPI_UNSIGNED_LONG) return as.template operator()<unsigned long>(tc::integer);
    if (t == MPI_LONG_LONG_INT || t == MPI_INT64_T) return as.template operator()<long long>(tc::integer);
    if (t == MPI_UNSIGNED_LONG_LONG || t == MPI_UINT64_T)
        return as.template operator()<unsigned long long>(tc::integer);
    if (t == MPI_AINT) return as.template operator()<std::make_signed_t<MPI_Aint>>(tc::integer);
    if (t == MPI_OFFSET) return as.template operator()<std::make_signed_t<MPI_Offset>>(tc::integer);
    if (t == MPI_COUNT) return as.template operator()<std::make_signed_t<MPI_Count>>(tc::integer);
    if (t == MPI_FLOAT) return as.template operator()<float>(tc::floating);
    if (t == MPI_DOUBLE) return as.template operator()<double>(tc::floating);
    if (t == MPI_LONG_DOUBLE) return as.template operator()<long double>(tc::floating);
    if (t == MPI_C_FLOAT_COMPLEX) return as.template operator()<std::complex<float>>(tc::complex);
    if (t == MPI_C_DOUBLE_COMPLEX) return as.template operator()<std::complex<double>>(tc::complex);
    if (t == MPI_C_LONG_DOUBLE_COMPLEX) return as.template operator()<std::complex<long double>>(tc::complex);
    if (t == MPI_C_BOOL) return as.template operator()<bool>(tc::logical);
    if (t == MPI_BYTE) return as.template operator()<unsigned char>(tc::byte);
    return tc::none;
}

/// shunt's kernel for (type, op), or nullptr when it has none (the combination may still be
/// valid for the library: pair types with MINLOC, derived types, Fortran types).
inline reduce_kernel predefined_kernel(MPI_Datatype type, MPI_Op op) {
    reduce_kernel k = nullptr;
    type_class cls = type_class::none;
    auto pick = [&]<class C>() {
        auto arith = [&]<class Op>() { k = &reduce_loop<C, Op>; };
        if constexpr (std::is_integral_v<C> && !std::is_same_v<C, bool>) {
            if (op == MPI_SUM)
                arith.template operator()<op_sum>();
            else if (op == MPI_PROD)
                arith.template operator()<op_prod>();
            else if (op == MPI_MIN)
                arith.template operator()<op_min>();
            else if (op == MPI_MAX)
                arith.template operator()<op_max>();
            else if (op == MPI_LAND)
                arith.template operator()<op_land>();
            else if (op == MPI_LOR)
                arith.template operator()<op_lor>();
            else if (op == MPI_LXOR)
                arith.template operator()<op_lxor>();
            else if (op == MPI_BAND)
                arith.template operator()<op_band>();
            else if (op == MPI_BOR)
                arith.template operator()<op_bor>();
            else if (op == MPI_BXOR)
                arith.template operator()<op_bxor>();
        } else if constexpr (std::is_same_v<C, bool>) {
            if (op == MPI_LAND)
                arith.template operator()<op_land>();
            else if (op == MPI_LOR)
                arith.template operator()<op_lor>();
            else if (op == MPI_LXOR)
                arith.template operator()<op_lxor>();
        } else if constexpr (std::is_floating_point_v<C>) {
            if (op == MPI_SUM)
                arith.template operator()<op_sum>();
            else if (op == MPI_PROD)
                arith.template operator()<op_prod>();
            else if (op == MPI_MIN)
                arith.template operator()<op_min>();
            else if (op == MPI_MAX)
                arith.template operator()<op_max>();
        } else {  // complex
            if (op == MPI_SUM)
                arith.template operator()<op_sum>();
            else if (op == MPI_PROD)
                arith.template operator()<op_prod>();
        }
    };
    cls = with_c_type(type, pick);
    // MPI_BYTE takes the bitwise operations only.
    if (cls == type_class::byte && op != MPI_BAND && op != MPI_BOR && op != MPI_BXOR) return nullptr;
    return k;
}

inline bool is_predefined_op(MPI_Op op) {
    return op == MPI_SUM || op == MPI_PROD || op == MPI_MIN || op == MPI_MAX || op == MPI_LAND || op == MPI_LOR ||
           op == MPI_LXOR || op == MPI_BAND || op == MPI_BOR || op == MPI_BXOR || op == MPI_MINLOC ||
           op == MPI_MAXLOC || op == MPI_REPLACE || op == MPI_NO_OP;
}

/// True when combining `type` with `op` gives the same bits in any order and grouping: every
/// predefined operation but MPI_SUM and MPI_PROD, and those two on the integer types. Sums and
/// products of floating-point and complex numbers, and user-defined operations, are not: their
/// results depend on the algorithm (floating-point reassociation).
inline bool exact_reduction(MPI_Datatype type, MPI_Op op) {
    if (op == MPI_SUM || op == MPI_PROD) return with_c_type(type, []<class C>() {}) == type_class::integer;
    return is_predefined_op(op);
}

/// The predefined pair types of MINLOC and MAXLOC.
inline bool is_pair_type(MPI_Datatype t) {
    return t == MPI_FLOAT_INT || t == MPI_DOUBLE_INT || t == MPI_LONG_INT || t == MPI_2INT || t == MPI_SHORT_INT ||
           t == MPI_LONG_DOUBLE_INT;
}

/// The size of one element of `type` when its data fills its extent without gaps and starts
/// at the buffer (size == extent == true extent, lb == true lb == 0), else -1. Such data moves
/// as plain bytes.
inline std::int64_t dense_size(MPI_Datatype type) {
    if (type == MPI_DATATYPE_NULL) return -1;
    MPI_Count size = 0, lb = 0, extent = 0, tlb = 0, textent = 0;
    if (PMPI_Type_size_x(type, &size) != MPI_SUCCESS) return -1;
    if (PMPI_Type_get_extent_x(type, &lb, &extent) != MPI_SUCCESS) return -1;
    if (PMPI_Type_get_true_extent_x(type, &tlb, &textent) != MPI_SUCCESS) return -1;
    if (size <= 0 || size != extent || size != textent || lb != 0 || tlb != 0) return -1;
    return static_cast<std::int64_t>(size);
}

/// True unless the library's MPI_MIN / MPI_MAX orders `t`'s values otherwise than its C type
/// does. Some libraries do: MPICH 4.0.2 compares every unsigned integer type as signed, Open MPI
/// 4.1.4 MPI_UNSIGNED_LONG. There shunt combines through PMPI_Reduce_local, so that integer
/// results stay the library's bit for bit. Probed once per unsigned type and op (the largest
/// value against 1); any other type or op: true.
inline bool library_orders_as_c(MPI_Datatype t, MPI_Op op) {
    if (op != MPI_MIN && op != MPI_MAX) return true;
    const MPI_Datatype unsigned_types[] = {MPI_UNSIGNED_CHAR, MPI_UINT8_T,  MPI_UNSIGNED_SHORT, MPI_UINT16_T,
                                           MPI_UNSIGNED,      MPI_UINT32_T, MPI_UNSIGNED_LONG,  MPI_UNSIGNED_LONG_LONG,
                                           MPI_UINT64_T};
    constexpr std::size_t n = sizeof unsigned_types / sizeof unsigned_types[0];
    std::size_t k = 0;
    while (k < n && unsigned_types[k] != t) ++k;
    if (k == n) return true;
    // 0: not probed yet, 1: as C, 2: otherwise (probing twice at once is harmless).
    static std::atomic<unsigned char> known[2][n] = {};
    std::atomic<unsigned char>& slot = known[op == MPI_MAX ? 1 : 0][k];
    if (const unsigned char v = slot.load(std::memory_order_relaxed); v != 0) return v == 1;
    bool as_c = true;
    with_c_type(t, [&]<class C>() {
        if constexpr (std::is_unsigned_v<C>) {
            const C big = std::numeric_limits<C>::max();
            C io = 1;
            as_c = PMPI_Reduce_local(&big, &io, 1, t, op) == MPI_SUCCESS && io == (op == MPI_MAX ? big : C{1});
        }
    });
    slot.store(as_c ? 1 : 2, std::memory_order_relaxed);
    return as_c;
}

}  // namespace detail

/// A reduction of MPI data (datatype and op) as the collective algorithms use it: whole
/// elements of `element_size()` contiguous bytes, combined in place. Uses shunt's kernels for
/// the predefined operations on the predefined C types (integer results bit-identical to the
/// library, including wrap-around), and PMPI_Reduce_local for the rest: user-defined
/// commutative operations on any dense type, MINLOC/MAXLOC on the dense pair types.
class mpi_reduction {
public:
    /// Throws shunt::unsupported (the call should go to the library) for a non-commutative
    /// operation, MPI_REPLACE/MPI_NO_OP, a type whose elements are not dense (gaps, padding,
    /// a lower bound), and predefined operations on types shunt has no kernel for.
    mpi_reduction(MPI_Datatype type, MPI_Op op) : type_(type), op_(op) {
        size_ = detail::dense_size(type);
        if (size_ <= 0) throw unsupported("reduction: datatype is not a dense element type");
        if (op == MPI_OP_NULL) throw unsupported("reduction: MPI_OP_NULL");
        if (detail::is_predefined_op(op)) {
            kernel_ = detail::predefined_kernel(type, op);
            if (kernel_ && !detail::library_orders_as_c(type, op)) {
                kernel_ = nullptr;  // PMPI_Reduce_local combines, as the library would
                return;
            }
            if (!kernel_ && !((op == MPI_MINLOC || op == MPI_MAXLOC) && detail::is_pair_type(type)))
                throw unsupported("reduction: no kernel for this predefined operation and type");
        } else {
            int commute = 0;
            SHUNT_CHECK_MPI(PMPI_Op_commutative(op, &commute));
            if (!commute) throw unsupported("reduction: non-commutative user operation");
        }
    }

    /// Bytes per element.
    std::int64_t element_size() const { return size_; }
    /// True when shunt's own kernel runs (false: PMPI_Reduce_local).
    bool native() const { return kernel_ != nullptr; }
    MPI_Datatype type() const { return type_; }
    MPI_Op op() const { return op_; }

    /// inout[i] = in[i] op inout[i] for `count` elements. Buffers must not overlap.
    void apply(const void* in, void* inout, std::int64_t count) const {
        if (count <= 0) return;
        if (kernel_) {
            kernel_(in, inout, count);
            return;
        }
        const auto* a = static_cast<const unsigned char*>(in);
        auto* b = static_cast<unsigned char*>(inout);
        while (count > 0) {
            int n = count > INT_MAX ? INT_MAX : static_cast<int>(count);
            SHUNT_CHECK_MPI(PMPI_Reduce_local(a, b, n, type_, op_));
            a += static_cast<std::int64_t>(n) * size_;
            b += static_cast<std::int64_t>(n) * size_;
            count -= n;
        }
    }

private:
    MPI_Datatype type_;
    MPI_Op op_;
    std::int64_t size_ = 0;
    detail::reduce_kernel kernel_ = nullptr;
};

}  // namespace shunt
