// shunt/datatype/decode.hpp: reads an MPI datatype's constructor tree (envelope and contents) and
// turns it into shunt's canonical layout, with MPI's own bounds.
#pragma once

#include <shunt/datatype/layout.hpp>
#include <shunt/datatype/type_info.hpp>
#include <shunt/errors.hpp>

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace shunt {

/// One node of a datatype's constructor tree as MPI reports it: the combiner and its arguments
/// (MPI_Type_get_contents, or MPI_Type_get_contents_c with an MPI-4 library), the decoded child
/// types, and MPI's bounds of this node (MPI_Type_get_extent_x, _true_extent_x, _size_x).
struct type_node {
    int combiner = MPI_COMBINER_NAMED;
    /// The handle itself for NAMED and F90_* nodes (predefined, never freed); MPI_DATATYPE_NULL
    /// for derived nodes, whose handles are not kept.
    MPI_Datatype named = MPI_DATATYPE_NULL;
    std::vector<int> ints;
    std::vector<MPI_Aint> addresses;
    /// Only for types built by the MPI-4 large-count constructors (MPI_Type_vector_c, ...): the
    /// counts and displacements those store here instead of in `ints` / `addresses`.
    std::vector<MPI_Count> large_counts;
    std::vector<type_node> children;
    std::int64_t size = 0;
    std::int64_t lb = 0;
    std::int64_t extent = 0;
    std::int64_t true_lb = 0;
    std::int64_t true_extent = 0;
};

/// Limits on what decode_tree accepts; beyond them the type is left to the library.
inline constexpr int max_decode_depth = 256;
inline constexpr std::size_t max_decode_nodes = std::size_t{1} << 20;

/// A datatype's envelope (MPI_Type_get_envelope(_c)): its combiner and how many constructor
/// arguments of each kind its contents hold.
struct type_envelope {
    std::int64_t ints = 0;
    std::int64_t addresses = 0;
    std::int64_t large_counts = 0;
    std::int64_t types = 0;
    int combiner = MPI_COMBINER_NAMED;
};

namespace detail {

/// The combiners of the removed MPI-1 Fortran constructors (MPI_TYPE_HVECTOR, ...). Open MPI
/// 4.1 without --enable-mpi1-compatibility defines the MPI_ names as static-assert traps and
/// keeps the values under OMPI_WAS_* names; MPICH defines them plainly.
#if defined(OPEN_MPI) && !OMPI_ENABLE_MPI1_COMPAT
inline constexpr int combiner_hvector_integer = OMPI_WAS_MPI_COMBINER_HVECTOR_INTEGER;
inline constexpr int combiner_hindexed_integer = OMPI_WAS_MPI_COMBINER_HINDEXED_INTEGER;
inline constexpr int combiner_struct_integer = OMPI_WAS_MPI_COMBINER_STRUCT_INTEGER;
#else
inline constexpr int combiner_hvector_integer = MPI_COMBINER_HVECTOR_INTEGER;
inline constexpr int combiner_hindexed_integer = MPI_COMBINER_HINDEXED_INTEGER;
inline constexpr int combiner_struct_integer = MPI_COMBINER_STRUCT_INTEGER;
#endif

/// Predefined handles: never decoded further and never freed (F90 types are predefined too).
inline bool is_predefined_combiner(int combiner) {
    return combiner == MPI_COMBINER_NAMED || combiner == MPI_COMBINER_F90_REAL ||
           combiner == MPI_COMBINER_F90_COMPLEX || combiner == MPI_COMBINER_F90_INTEGER;
}

using envelope = type_envelope;

/// MPI_Type_get_envelope; with MPI-4 the _c form, the only one MPICH accepts for types built by
/// the large-count constructors. Returns the MPI error code instead of throwing.
inline int get_envelope(MPI_Datatype t, envelope& e) noexcept {
#if MPI_VERSION >= 4
    MPI_Count ni = 0, na = 0, nc = 0, nd = 0;
    const int rc = PMPI_Type_get_envelope_c(t, &ni, &na, &nc, &nd, &e.combiner);
    e = {static_cast<std::int64_t>(ni), static_cast<std::int64_t>(na), static_cast<std::int64_t>(nc),
         static_cast<std::int64_t>(nd), e.combiner};
#else
    int ni = 0, na = 0, nd = 0;
    const int rc = PMPI_Type_get_envelope(t, &ni, &na, &nd, &e.combiner);
    e = {ni, na, 0, nd, e.combiner};
#endif
    return rc;
}

/// The child handles a source's contents() hands out: derived ones are new references that the
/// caller must release, which this does on every path out, exceptions included.
template <class Source>
class contents_types {
public:
    using handle = typename Source::handle;
    contents_types(Source& src, std::size_t n) : src_(src), types_(n, src.null_handle()) {}
    contents_types(const contents_types&) = delete;
    contents_types& operator=(const contents_types&) = delete;
    ~contents_types() {
        for (handle t : types_) {
            envelope e;
            if (t != src_.null_handle() && src_.envelope(t, e) == MPI_SUCCESS && !is_predefined_combiner(e.combiner))
                src_.release(t);
        }
    }
    handle* data() { return types_.data(); }
    handle operator[](std::size_t i) const { return types_[i]; }

private:
    Source& src_;
    std::vector<handle> types_;
};

inline void read_bounds(MPI_Datatype t, type_node& n) {
    MPI_Count lb = 0, extent = 0, true_lb = 0, true_extent = 0, size = 0;
    SHUNT_CHECK_MPI(PMPI_Type_get_extent_x(t, &lb, &extent));
    SHUNT_CHECK_MPI(PMPI_Type_get_true_extent_x(t, &true_lb, &true_extent));
    SHUNT_CHECK_MPI(PMPI_Type_size_x(t, &size));
    // MPI reports MPI_UNDEFINED when a value does not fit in an MPI_Count.
    if (size < 0 || size == MPI_UNDEFINED || extent == MPI_UNDEFINED || true_extent == MPI_UNDEFINED)
        throw unsupported("datatype bounds do not fit in MPI_Count");
    n.size = size;
    n.lb = lb;
    n.extent = extent;
    n.true_lb = true_lb;
    n.true_extent = true_extent;
}

}  // namespace detail

/// Where decode_tree reads a constructor tree from: the MPI library (PMPI_Type_get_envelope,
/// PMPI_Type_get_contents, the bounds calls; the _c forms with an MPI-4 library). A type source
/// is any class with the same members; tests feed decode_tree trees without MPI through one.
struct pmpi_type_source {
    using handle = MPI_Datatype;
    static handle null_handle() noexcept { return MPI_DATATYPE_NULL; }
    /// MPI's size, lb, extent, true_lb and true_extent of `t` into `n`; throws as read_bounds.
    static void bounds(handle t, type_node& n) { detail::read_bounds(t, n); }
    /// The envelope of `t`; returns the MPI error code instead of throwing.
    static int envelope(handle t, type_envelope& e) noexcept { return detail::get_envelope(t, e); }
    /// The contents of derived `t` into n.ints, n.addresses and n.large_counts (already sized as
    /// `e` says) and `types` (e.types handles, each derived one a new reference to release).
    static void contents(handle t, const type_envelope& e, type_node& n, handle* types) {
        // Never hand MPI a null array, even for zero entries (some check the pointer first).
        int no_int = 0;
        MPI_Aint no_address = 0;
        MPI_Datatype no_type = MPI_DATATYPE_NULL;
        int* ints = n.ints.empty() ? &no_int : n.ints.data();
        MPI_Aint* addresses = n.addresses.empty() ? &no_address : n.addresses.data();
        if (e.types == 0) types = &no_type;
#if MPI_VERSION >= 4
        MPI_Count no_count = 0;
        MPI_Count* counts = n.large_counts.empty() ? &no_count : n.large_counts.data();
        SHUNT_CHECK_MPI(
            PMPI_Type_get_contents_c(t, e.ints, e.addresses, e.large_counts, e.types, ints, addresses, counts, types));
#else
        SHUNT_CHECK_MPI(PMPI_Type_get_contents(t, static_cast<int>(e.ints), static_cast<int>(e.addresses),
                                               static_cast<int>(e.types), ints, addresses, types));
#endif
    }
    /// Frees a derived handle that contents() handed out.
    static void release(handle t) noexcept { PMPI_Type_free(&t); }
    /// The handle of a predefined (NAMED or F90_*) node.
    static MPI_Datatype named(handle t) noexcept { return t; }
};

namespace detail {

template <class Source>
type_node decode_node(Source& src, typename Source::handle t, int depth, std::size_t& nodes) {
    type_node n;
    src.bounds(t, n);
    envelope e;
    if (const int rc = src.envelope(t, e); rc != MPI_SUCCESS)
        throw_mpi(rc, "PMPI_Type_get_envelope", __FILE__, __LINE__);
    n.combiner = e.combiner;
    if (is_predefined_combiner(e.combiner)) {
        n.named = src.named(t);
        return n;
    }
    if (depth >= max_decode_depth) throw unsupported("datatype nests deeper than shunt decodes");
    if (++nodes > max_decode_nodes) throw unsupported("datatype has too many nested types to decode");
    const std::int64_t cap = static_cast<std::int64_t>(4 * max_flat_blocks);
    if (e.ints < 0 || e.addresses < 0 || e.large_counts < 0 || e.types < 0 || e.ints > cap || e.addresses > cap ||
        e.large_counts > cap || e.ints + e.addresses + e.large_counts > cap || e.types > cap)
        throw unsupported("datatype has too many constructor arguments to decode");
    n.ints.resize(static_cast<std::size_t>(e.ints));
    n.addresses.resize(static_cast<std::size_t>(e.addresses));
    n.large_counts.resize(static_cast<std::size_t>(e.large_counts));
    contents_types<Source> kids(src, static_cast<std::size_t>(e.types));
    src.contents(t, e, n, kids.data());
    n.children.reserve(static_cast<std::size_t>(e.types));
    for (std::size_t k = 0; k < static_cast<std::size_t>(e.types); ++k)
        n.children.push_back(decode_node(src, kids[k], depth + 1, nodes));
    return n;
}

/// Bounds-checked access to a node's constructor arguments: a malformed contents answer makes
/// the type unsupported instead of reading past the arrays.
class args {
public:
    explicit args(const type_node& n) : n_(n) {}
    bool large() const { return !n_.large_counts.empty(); }
    std::int64_t i(std::size_t k) const { return get(n_.ints, k); }
    std::int64_t a(std::size_t k) const { return get(n_.addresses, k); }
    std::int64_t c(std::size_t k) const { return get(n_.large_counts, k); }
    /// entries [from, from + n) of ints, addresses or large counts, as 64-bit values.
    std::vector<std::int64_t> ints(std::size_t from, std::int64_t n) const { return range(n_.ints, from, n); }
    std::vector<std::int64_t> addresses(std::size_t from, std::int64_t n) const { return range(n_.addresses, from, n); }
    std::vector<std::int64_t> counts(std::size_t from, std::int64_t n) const { return range(n_.large_counts, from, n); }
    const type_node& child(std::size_t k) const {
        if (k >= n_.children.size()) throw unsupported("datatype contents lack a child type");
        return n_.children[k];
    }

private:
    template <class T>
    static std::int64_t get(const std::vector<T>& v, std::size_t k) {
        if (k >= v.size()) throw unsupported("datatype contents are shorter than their combiner needs");
        return static_cast<std::int64_t>(v[k]);
    }
    template <class T>
    static std::vector<std::int64_t> range(const std::vector<T>& v, std::size_t from, std::int64_t n) {
        if (n < 0 || from > v.size() || static_cast<std::size_t>(n) > v.size() - from)
            throw unsupported("datatype contents are shorter than their combiner needs");
        return {v.begin() + static_cast<std::ptrdiff_t>(from),
                v.begin() + static_cast<std::ptrdiff_t>(from + static_cast<std::size_t>(n))};
    }
    const type_node& n_;
};

inline std::int64_t nonnegative(std::int64_t v, const char* what) {
    if (v < 0) throw unsupported(std::string("datatype has a negative ") + what);
    return v;
}

inline std::vector<std::int64_t> scaled(std::vector<std::int64_t> v, std::int64_t factor) {
    for (auto& x : v) x = checked_mul(x, factor);
    return v;
}

/// The MPI pair types: two blocks laid out as the C struct {A a; int b;}.
template <class A>
inline layout pair_layout() {
    struct pair {
        A a;
        int b;
    };
    return simplify({{},
                     {{0, static_cast<std::int64_t>(sizeof(A))},
                      {static_cast<std::int64_t>(offsetof(pair, b)), static_cast<std::int64_t>(sizeof(int))}}});
}

inline layout predefined_layout(const type_node& n) {
    if (n.size == 0) throw unsupported("predefined datatype packs no bytes (a bound marker such as MPI_LB/MPI_UB)");
    if (n.combiner == MPI_COMBINER_NAMED) {
        const MPI_Datatype t = n.named;
        if (t == MPI_FLOAT_INT) return pair_layout<float>();
        if (t == MPI_DOUBLE_INT) return pair_layout<double>();
        if (t == MPI_LONG_INT) return pair_layout<long>();
        if (t == MPI_SHORT_INT) return pair_layout<short>();
        if (t == MPI_2INT) return pair_layout<int>();
        if (t == MPI_LONG_DOUBLE_INT) return pair_layout<long double>();
    }
    if (n.size == n.extent && n.lb == 0 && n.true_lb == 0 && n.true_extent == n.size) return {{}, {{0, n.size}}};
    throw unsupported("predefined datatype with holes");
}

/// Open MPI (opal_datatype_add, 4.1 and earlier) takes a repetition stride of exactly -1 byte to
/// mean "the default extent", so a vector or hvector with that byte stride packs forwards instead
/// of as its typemap says. Such types are left to the library, which then agrees with itself.
inline void check_library_stride([[maybe_unused]] std::int64_t count, [[maybe_unused]] std::int64_t block_bytes,
                                 [[maybe_unused]] std::int64_t stride_bytes) {
#if defined(OPEN_MPI)
    if (count >= 2 && block_bytes != 0 && stride_bytes == -1 && block_bytes != stride_bytes)
        throw unsupported("Open MPI packs a byte stride of -1 as the default extent");
#endif
}

/// Open MPI 4.1 packs count > 1 of a struct with a live entry of size 0 (an empty type that still
/// carries bounds) at a stride other than the extent it reports (struct {char at 0; contiguous(0)
/// at 28}: extent 28, element 1 packed from byte 1). Left to the library.
inline void check_library_struct([[maybe_unused]] std::span<const std::int64_t> lengths,
                                 [[maybe_unused]] const type_node& n) {
#if defined(OPEN_MPI)
    if (n.size == 0) return;
    for (std::size_t j = 0; j < lengths.size() && j < n.children.size(); ++j)
        if (lengths[j] > 0 && n.children[j].size == 0)
            throw unsupported("Open MPI packs a struct with an empty entry at a stride other than its extent");
#endif
}

/// A predefined complex type (C, C++ or Fortran): two reals, aligned to one.
inline bool is_complex(const type_node& n) {
    if (n.combiner == MPI_COMBINER_F90_COMPLEX) return true;
    if (n.combiner != MPI_COMBINER_NAMED) return false;
    const MPI_Datatype t = n.named;
    return t == MPI_C_FLOAT_COMPLEX || t == MPI_C_DOUBLE_COMPLEX || t == MPI_C_LONG_DOUBLE_COMPLEX ||
           t == MPI_C_COMPLEX || t == MPI_CXX_FLOAT_COMPLEX || t == MPI_CXX_DOUBLE_COMPLEX ||
           t == MPI_CXX_LONG_DOUBLE_COMPLEX || t == MPI_COMPLEX || t == MPI_DOUBLE_COMPLEX;
}

/// Where the complex elements of a type lie relative to its base, modulo their size (size 0: it
/// holds none).
struct complex_phase {
    std::int64_t size = 0;
    std::int64_t offset = 0;
};

inline std::int64_t modulo(std::int64_t v, std::int64_t m) { return (v % m + m) % m; }

/// Adds to `into` a copy, placed at byte `at`, of a part of phase `c`. Throws unsupported when
/// its complex elements do not lie a multiple of their size away from those already there.
inline void add_phase(complex_phase& into, complex_phase c, std::int64_t at) {
    if (c.size == 0) return;
    const std::int64_t offset = modulo(modulo(c.offset, c.size) + modulo(at, c.size), c.size);
    if (into.size == 0) {
        into = {c.size, offset};
        return;
    }
    if (into.size != c.size || into.offset != offset)
        throw unsupported("Open MPI 5 packs complex elements that are not a multiple of their size apart wrongly");
}

/// The complex phase of `n`, throwing unsupported where its complex elements do not all lie a
/// multiple of their size apart. Each constructor's copies of its child are checked through the
/// steps between them (a block's next element, the next block), not one by one.
inline complex_phase complex_phase_of(const type_node& n) {
    complex_phase out;
    if (is_predefined_combiner(n.combiner)) return is_complex(n) ? complex_phase{n.size, 0} : out;
    const args arg(n);
    const bool large = arg.large();
    switch (n.combiner) {
        case MPI_COMBINER_DUP:
        case MPI_COMBINER_RESIZED: return complex_phase_of(arg.child(0));
        case MPI_COMBINER_CONTIGUOUS: {
            const type_node& c = arg.child(0);
            const complex_phase p = complex_phase_of(c);
            const std::int64_t count = large ? arg.c(0) : arg.i(0);
            if (count >= 1) add_phase(out, p, 0);
            if (count >= 2) add_phase(out, p, c.extent);
            return out;
        }
        case MPI_COMBINER_VECTOR:
        case MPI_COMBINER_HVECTOR:
        case combiner_hvector_integer: {
            const type_node& c = arg.child(0);
            const complex_phase p = complex_phase_of(c);
            const std::int64_t count = large ? arg.c(0) : arg.i(0), blocklength = large ? arg.c(1) : arg.i(1);
            if (p.size == 0 || count < 1 || blocklength < 1) return out;
            const std::int64_t stride = large ? arg.c(2) : n.combiner == MPI_COMBINER_VECTOR ? arg.i(2) : arg.a(0);
            add_phase(out, p, 0);
            if (blocklength >= 2) add_phase(out, p, c.extent);
            if (count >= 2)  // a vector's stride counts extents
                add_phase(
                    out, p,
                    n.combiner == MPI_COMBINER_VECTOR ? modulo(stride, p.size) * modulo(c.extent, p.size) : stride);
            return out;
        }
        case MPI_COMBINER_INDEXED:
        case MPI_COMBINER_HINDEXED:
        case combiner_hindexed_integer:
        case MPI_COMBINER_INDEXED_BLOCK:
        case MPI_COMBINER_HINDEXED_BLOCK: {
            const type_node& c = arg.child(0);
            const complex_phase p = complex_phase_of(c);
            if (p.size == 0) return out;
            const bool block = n.combiner == MPI_COMBINER_INDEXED_BLOCK || n.combiner == MPI_COMBINER_HINDEXED_BLOCK;
            const bool scaled = n.combiner == MPI_COMBINER_INDEXED || n.combiner == MPI_COMBINER_INDEXED_BLOCK;
            const std::int64_t count = large ? arg.c(0) : arg.i(0);
            const std::size_t k = static_cast<std::size_t>(count < 0 ? 0 : count);
            const std::size_t first = block ? 2 : 1 + k;  // the displacements, in ints or large counts
            const auto displs = large    ? arg.counts(first, count)
                                : scaled ? arg.ints(first, count)
                                         : arg.addresses(0, count);
            for (std::size_t j = 0; j < k; ++j) {
                const std::int64_t length =
                    block ? (large ? arg.c(1) : arg.i(1)) : (large ? arg.c(1 + j) : arg.i(1 + j));
                if (length < 1) continue;
                const std::int64_t at = scaled ? modulo(displs[j], p.size) * modulo(c.extent, p.size) : displs[j];
                add_phase(out, p, at);
                if (length >= 2) add_phase(out, p, modulo(at, p.size) + modulo(c.extent, p.size));
            }
            return out;
        }
        case MPI_COMBINER_STRUCT:
        case combiner_struct_integer: {
            const std::int64_t count = large ? arg.c(0) : arg.i(0);
            const std::size_t k = static_cast<std::size_t>(count < 0 ? 0 : count);
            const auto lengths = large ? arg.counts(1, count) : arg.ints(1, count);
            const auto displs = large ? arg.counts(1 + k, count) : arg.addresses(0, count);
            for (std::size_t j = 0; j < k; ++j) {
                if (lengths[j] < 1) continue;
                const type_node& c = arg.child(j);
                const complex_phase p = complex_phase_of(c);
                if (p.size == 0) continue;
                add_phase(out, p, displs[j]);
                if (lengths[j] >= 2) add_phase(out, p, modulo(displs[j], p.size) + modulo(c.extent, p.size));
            }
            return out;
        }
        case MPI_COMBINER_SUBARRAY:
        case MPI_COMBINER_DARRAY: {  // copies of the child at multiples of its extent
            const type_node& c = arg.child(0);
            const complex_phase p = complex_phase_of(c);
            if (n.size == 0 || c.size == 0) return out;
            add_phase(out, p, 0);
            if (n.size > c.size) add_phase(out, p, c.extent);
            return out;
        }
        default: throw unsupported("datatype combiner " + std::to_string(n.combiner) + " is not known to shunt");
    }
}

/// Open MPI 5.0 (5.0.8 to 5.0.11 seen; 4.1 is right) packs a run of complex elements that lie a
/// multiple of their alignment but not of their size apart as if the distance were rounded down
/// to a multiple of their size: hvector(2, 1, 24 B, MPI_C_DOUBLE_COMPLEX) packs bytes 0-31 where
/// the typemap says 0-15 and 24-39. Types whose complex elements do not all lie a multiple of
/// their size apart are left to the library, which then agrees with itself.
inline void check_library_complex([[maybe_unused]] const type_node& n) {
#if defined(OPEN_MPI) && OMPI_MAJOR_VERSION >= 5
    (void)complex_phase_of(n);
#endif
}

inline bool order_is_c(std::int64_t order) {
    if (order == MPI_ORDER_C) return true;
    if (order == MPI_ORDER_FORTRAN) return false;
    throw unsupported("datatype has an unknown array order");
}

inline distribution to_distribution(std::int64_t d) {
    if (d == MPI_DISTRIBUTE_NONE) return distribution::none;
    if (d == MPI_DISTRIBUTE_BLOCK) return distribution::block;
    if (d == MPI_DISTRIBUTE_CYCLIC) return distribution::cyclic;
    throw unsupported("darray has an unknown distribution");
}

}  // namespace detail

/// Reads the constructor tree of `t` from `src` (see pmpi_type_source), with the limits and
/// handle releases of decode_tree(MPI_Datatype). Throws as that does.
template <class Source>
type_node decode_tree(Source& src, typename Source::handle t) {
    if (t == src.null_handle()) throw error("shunt::decode_tree: MPI_DATATYPE_NULL is not a datatype");
    std::size_t nodes = 0;
    return detail::decode_node(src, t, 0, nodes);
}

/// Reads the constructor tree of `t` with PMPI_Type_get_envelope / PMPI_Type_get_contents (the
/// _c forms with an MPI-4 library). `t` may be committed or not; it is not modified or freed, and
/// every derived child handle MPI hands out is freed before returning. Throws shunt::unsupported
/// beyond max_decode_depth levels or max_decode_nodes derived nodes, shunt::mpi_error when an
/// MPI call fails (only seen with an error handler that returns). Local: no communication, any
/// rank, any time between MPI_Init and MPI_Finalize. Thread-safe as far as the MPI library allows
/// concurrent datatype calls (MPI_THREAD_MULTIPLE).
inline type_node decode_tree(MPI_Datatype t) {
    pmpi_type_source src;
    return decode_tree(src, t);
}

/// The layout of the bytes of one element of `n`, offsets relative to the element's base (the
/// buffer pointer, or MPI_BOTTOM for absolute addresses). Covers every MPI-3.1 combiner and the
/// MPI-4 large-count forms; each child is placed with its own MPI extent. Throws
/// shunt::unsupported for an unknown combiner, a predefined type that is not a dense run of
/// bytes (other than the pair types), a bound marker (MPI_LB/MPI_UB), a layout too big to
/// flatten, 64-bit overflow, or a result whose size disagrees with MPI's. Pure; thread-safe.
inline layout to_layout(const type_node& n) {
    const detail::args arg(n);
    const bool large = arg.large();
    layout l;
    switch (n.combiner) {
        case MPI_COMBINER_NAMED:
        case MPI_COMBINER_F90_REAL:
        case MPI_COMBINER_F90_COMPLEX:
        case MPI_COMBINER_F90_INTEGER: l = detail::predefined_layout(n); break;
        case MPI_COMBINER_DUP:
        case MPI_COMBINER_RESIZED:  // bounds only; the bytes are the child's
            l = to_layout(arg.child(0));
            break;
        case MPI_COMBINER_CONTIGUOUS: {
            const type_node& c = arg.child(0);
            l = make_contiguous(detail::nonnegative(large ? arg.c(0) : arg.i(0), "count"), to_layout(c), c.extent);
            break;
        }
        case MPI_COMBINER_VECTOR: {
            const type_node& c = arg.child(0);
            const std::int64_t count = detail::nonnegative(large ? arg.c(0) : arg.i(0), "count");
            const std::int64_t blocklength = detail::nonnegative(large ? arg.c(1) : arg.i(1), "block length");
            const std::int64_t stride = large ? arg.c(2) : arg.i(2);
            detail::check_library_stride(count, detail::checked_mul(blocklength, c.extent),
                                         detail::checked_mul(stride, c.extent));
            l = make_hvector(count, blocklength, detail::checked_mul(stride, c.extent), to_layout(c), c.extent);
            break;
        }
        case MPI_COMBINER_HVECTOR:
        case detail::combiner_hvector_integer: {
            const type_node& c = arg.child(0);
            const std::int64_t count = detail::nonnegative(large ? arg.c(0) : arg.i(0), "count");
            const std::int64_t blocklength = detail::nonnegative(large ? arg.c(1) : arg.i(1), "block length");
            const std::int64_t stride = large ? arg.c(2) : arg.a(0);
            detail::check_library_stride(count, detail::checked_mul(blocklength, c.extent), stride);
            l = make_hvector(count, blocklength, stride, to_layout(c), c.extent);
            break;
        }
        case MPI_COMBINER_INDEXED:
        case MPI_COMBINER_HINDEXED:
        case detail::combiner_hindexed_integer: {
            const type_node& c = arg.child(0);
            const std::int64_t count = detail::nonnegative(large ? arg.c(0) : arg.i(0), "count");
            const std::size_t k = static_cast<std::size_t>(count);
            const auto lengths = large ? arg.counts(1, count) : arg.ints(1, count);
            auto displs = large                                ? arg.counts(1 + k, count)
                          : n.combiner == MPI_COMBINER_INDEXED ? arg.ints(1 + k, count)
                                                               : arg.addresses(0, count);
            if (n.combiner == MPI_COMBINER_INDEXED) displs = detail::scaled(std::move(displs), c.extent);
            for (auto b : lengths) detail::nonnegative(b, "block length");
            l = make_hindexed(lengths, displs, to_layout(c), c.extent);
            break;
        }
        case MPI_COMBINER_INDEXED_BLOCK:
        case MPI_COMBINER_HINDEXED_BLOCK: {
            const type_node& c = arg.child(0);
            const std::int64_t count = detail::nonnegative(large ? arg.c(0) : arg.i(0), "count");
            const std::int64_t blocklength = detail::nonnegative(large ? arg.c(1) : arg.i(1), "block length");
            auto displs = large                                      ? arg.counts(2, count)
                          : n.combiner == MPI_COMBINER_INDEXED_BLOCK ? arg.ints(2, count)
                                                                     : arg.addresses(0, count);
            if (n.combiner == MPI_COMBINER_INDEXED_BLOCK) displs = detail::scaled(std::move(displs), c.extent);
            const std::vector<std::int64_t> lengths(static_cast<std::size_t>(count), blocklength);
            l = make_hindexed(lengths, displs, to_layout(c), c.extent);
            break;
        }
        case MPI_COMBINER_STRUCT:
        case detail::combiner_struct_integer: {
            const std::int64_t count = detail::nonnegative(large ? arg.c(0) : arg.i(0), "count");
            const std::size_t k = static_cast<std::size_t>(count);
            const auto lengths = large ? arg.counts(1, count) : arg.ints(1, count);
            const auto displs = large ? arg.counts(1 + k, count) : arg.addresses(0, count);
            detail::check_library_struct(lengths, n);
            std::vector<layout> forms;
            std::vector<const layout*> children;
            std::vector<std::int64_t> extents;
            forms.reserve(k);
            for (std::size_t j = 0; j < k; ++j) {
                detail::nonnegative(lengths[j], "block length");
                forms.push_back(to_layout(arg.child(j)));
                extents.push_back(arg.child(j).extent);
            }
            for (const auto& f : forms) children.push_back(&f);
            l = make_struct(lengths, displs, children, extents);
            break;
        }
        case MPI_COMBINER_SUBARRAY: {
            const type_node& c = arg.child(0);
            const std::int64_t ndims = detail::nonnegative(arg.i(0), "dimension count");
            const std::size_t d = static_cast<std::size_t>(ndims);
            const auto sizes = large ? arg.counts(0, ndims) : arg.ints(1, ndims);
            const auto subsizes = large ? arg.counts(d, ndims) : arg.ints(1 + d, ndims);
            const auto starts = large ? arg.counts(2 * d, ndims) : arg.ints(1 + 2 * d, ndims);
            const bool order_c = detail::order_is_c(large ? arg.i(1) : arg.i(1 + 3 * d));
            for (std::size_t j = 0; j < d; ++j) {
                detail::nonnegative(subsizes[j], "subarray size");
                detail::nonnegative(starts[j], "subarray start");
            }
            l = make_subarray(sizes, subsizes, starts, order_c, to_layout(c), c.extent);
            break;
        }
        case MPI_COMBINER_DARRAY: {
            const type_node& c = arg.child(0);
            const std::int64_t size = arg.i(0), rank = arg.i(1);
            const std::int64_t ndims = detail::nonnegative(arg.i(2), "dimension count");
            const std::size_t d = static_cast<std::size_t>(ndims);
            const auto gsizes = large ? arg.counts(0, ndims) : arg.ints(3, ndims);
            const std::size_t first = large ? 3 : 3 + d;  // distribs, dargs, psizes follow
            const auto distribs = arg.ints(first, ndims);
            const auto dargs = arg.ints(first + d, ndims);
            const auto psizes = arg.ints(first + 2 * d, ndims);
            const bool order_c = detail::order_is_c(arg.i(first + 3 * d));
            std::int64_t grid = 1;
            std::vector<darray_dim> dims(d);
            for (std::size_t j = 0; j < d; ++j) {
                if (psizes[j] <= 0 || gsizes[j] < 0) throw unsupported("darray has an invalid grid");
                grid = detail::checked_mul(grid, psizes[j]);
                dims[j] = {gsizes[j], detail::to_distribution(distribs[j]),
                           dargs[j] == MPI_DISTRIBUTE_DFLT_DARG ? 0 : dargs[j], psizes[j]};
            }
            if (grid != size || rank < 0 || rank >= size) throw unsupported("darray rank is outside its grid");
            l = make_darray(rank, dims, order_c, to_layout(c), c.extent);
            break;
        }
        default: throw unsupported("datatype combiner " + std::to_string(n.combiner) + " is not known to shunt");
    }
    if (const std::int64_t size = detail::checked_size(l); size != n.size)
        throw unsupported("decoded datatype packs " + std::to_string(size) + " bytes where MPI says " +
                          std::to_string(n.size));
    return l;
}

/// decode(MPI_Datatype) of a tree read from `src` (see pmpi_type_source).
template <class Source>
type_info decode(Source& src, typename Source::handle t) {
    const type_node n = decode_tree(src, t);
    type_info info;
    info.form = simplify(to_layout(n));
    detail::check_library_complex(n);
    info.size = n.size;
    info.lb = n.lb;
    info.extent = n.extent;
    info.true_lb = n.true_lb;
    info.true_extent = n.true_extent;
    return info;
}

/// The canonical form and MPI bounds of `t` (decode_tree, to_layout, simplify). Not cached: see
/// shunt::type_cache. Throws as decode_tree and to_layout do; thread-safe as decode_tree.
inline type_info decode(MPI_Datatype t) {
    pmpi_type_source src;
    return decode(src, t);
}

}  // namespace shunt
