// tests/mpi/random_types.hpp: a seeded, reproducible generator of random nested MPI datatypes that
// uses every constructor (and the MPI-4 large-count ones where the library has them).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace shunt_test {

/// splitmix64: tiny, fast, and the same sequence everywhere (std:: distributions are not).
class rng {
public:
    explicit rng(std::uint64_t seed) : s_(seed) {}
    std::uint64_t next() {
        std::uint64_t z = (s_ += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        return z ^ (z >> 31);
    }
    /// Uniform in [lo, hi], both included.
    std::int64_t range(std::int64_t lo, std::int64_t hi) {
        return lo + static_cast<std::int64_t>(next() % static_cast<std::uint64_t>(hi - lo + 1));
    }
    bool chance(int percent) { return range(0, 99) < percent; }

private:
    std::uint64_t s_;
};

/// A seed for item `index` of stream `stream`: independent of every other item, so one item can
/// be regenerated alone.
inline std::uint64_t item_seed(std::uint64_t base, std::uint64_t stream, std::uint64_t index) {
    rng r(base ^ (stream * 0xd1b54a32d192ed03ULL) ^ (index * 0x9e3779b97f4a7c15ULL));
    r.next();
    return r.next();
}

/// Aborts the test program with the failing call: the generator only builds valid types.
#define SHUNT_TEST_MPI(call)                                                                            \
    do {                                                                                                \
        if (int shunt_test_rc_ = (call); shunt_test_rc_ != MPI_SUCCESS) {                               \
            char shunt_test_msg_[MPI_MAX_ERROR_STRING] = "";                                            \
            int shunt_test_len_ = 0;                                                                    \
            MPI_Error_string(shunt_test_rc_, shunt_test_msg_, &shunt_test_len_);                        \
            std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, shunt_test_msg_); \
            MPI_Abort(MPI_COMM_WORLD, 2);                                                               \
        }                                                                                               \
    } while (0)

struct named_type {
    MPI_Datatype type;
    const char* name;
};

/// The predefined types the generator draws from: C scalars, the pair types, complex, Fortran.
inline const std::vector<named_type>& named_types() {
    static const std::vector<named_type> all = [] {
        std::vector<named_type> v{
            {MPI_BYTE, "MPI_BYTE"},
            {MPI_CHAR, "MPI_CHAR"},
            {MPI_SHORT, "MPI_SHORT"},
            {MPI_INT, "MPI_INT"},
            {MPI_LONG, "MPI_LONG"},
            {MPI_LONG_LONG, "MPI_LONG_LONG"},
            {MPI_UNSIGNED_CHAR, "MPI_UNSIGNED_CHAR"},
            {MPI_FLOAT, "MPI_FLOAT"},
            {MPI_DOUBLE, "MPI_DOUBLE"},
            {MPI_LONG_DOUBLE, "MPI_LONG_DOUBLE"},
            {MPI_C_BOOL, "MPI_C_BOOL"},
            {MPI_INT16_T, "MPI_INT16_T"},
            {MPI_UINT64_T, "MPI_UINT64_T"},
            {MPI_AINT, "MPI_AINT"},
            {MPI_C_FLOAT_COMPLEX, "MPI_C_FLOAT_COMPLEX"},
            {MPI_C_DOUBLE_COMPLEX, "MPI_C_DOUBLE_COMPLEX"},
            {MPI_PACKED, "MPI_PACKED"},
            {MPI_FLOAT_INT, "MPI_FLOAT_INT"},
            {MPI_DOUBLE_INT, "MPI_DOUBLE_INT"},
            {MPI_LONG_INT, "MPI_LONG_INT"},
            {MPI_SHORT_INT, "MPI_SHORT_INT"},
            {MPI_2INT, "MPI_2INT"},
            {MPI_LONG_DOUBLE_INT, "MPI_LONG_DOUBLE_INT"},
            {MPI_INTEGER, "MPI_INTEGER"},
            {MPI_DOUBLE_PRECISION, "MPI_DOUBLE_PRECISION"},
            {MPI_2REAL, "MPI_2REAL"},
        };
        // A library built without Fortran has null Fortran handles.
        std::erase_if(v, [](const named_type& t) { return t.type == MPI_DATATYPE_NULL; });
        return v;
    }();
    return all;
}

/// F90 parameterised types (predefined, never freed); created on first use.
inline const std::vector<named_type>& f90_types() {
    static const std::vector<named_type> all = [] {
        std::vector<named_type> v(3);
        SHUNT_TEST_MPI(MPI_Type_create_f90_real(6, MPI_UNDEFINED, &v[0].type));
        v[0].name = "f90_real(6)";
        SHUNT_TEST_MPI(MPI_Type_create_f90_complex(15, MPI_UNDEFINED, &v[1].type));
        v[1].name = "f90_complex(15)";
        SHUNT_TEST_MPI(MPI_Type_create_f90_integer(4, &v[2].type));
        v[2].name = "f90_integer(4)";
        return v;
    }();
    return all;
}

/// A random datatype, committed unless predefined; frees itself.
struct random_type {
    MPI_Datatype type = MPI_DATATYPE_NULL;
    bool derived = false;  ///< owned: freed by the destructor
    std::string desc;  ///< constructor expression, enough to rebuild it by hand
    bool bottom = false;  ///< built on absolute addresses: use MPI_BOTTOM as the buffer
    /// Uses a construct Open MPI packs against its own typemap or extent (a vector/hvector byte
    /// stride of -1, a struct with an empty live entry): decode must leave it to the library (see
    /// shunt::detail::check_library_stride / check_library_struct).
    bool library_quirk = false;
    std::unique_ptr<std::byte[]> memory;  ///< what a bottom type's addresses point into
    std::int64_t memory_bytes = 0;
    std::int64_t max_count = 5;  ///< larger counts would need more memory than the test allows
    int large = 0;  ///< number of MPI-4 large-count constructors used

    random_type() = default;
    random_type(random_type&& o) noexcept { *this = std::move(o); }
    random_type& operator=(random_type&& o) noexcept {
        std::swap(type, o.type);
        std::swap(derived, o.derived);
        desc = std::move(o.desc);
        library_quirk = o.library_quirk;
        bottom = o.bottom;
        memory = std::move(o.memory);
        memory_bytes = o.memory_bytes;
        max_count = o.max_count;
        large = o.large;
        return *this;
    }
    ~random_type() {
        if (derived && type != MPI_DATATYPE_NULL) MPI_Type_free(&type);
    }
};

#if defined(OPEN_MPI)
inline constexpr bool open_mpi = true;
#else
inline constexpr bool open_mpi = false;
#endif

/// Bounds every generated type keeps within, so thousands of them pack quickly.
inline constexpr std::int64_t max_type_bytes = 64 * 1024;

/// Builds random nested types up to `max_depth` constructor levels. darray uses the real world
/// rank and size half of the time and a random grid otherwise.
class type_generator {
public:
    type_generator(int world_rank, int world_size, int max_depth = 4)
        : world_rank_(world_rank), world_size_(world_size), max_depth_(max_depth) {}

    /// The type for `seed`: the same seed, world rank and world size give the same type.
    random_type make(std::uint64_t seed) {
        rng r(seed);
        random_type out;
        const std::int64_t flavour = r.range(0, 99);
        part p;
        if (flavour < 5) {
            p = make_bottom(r, out);
        } else if (flavour < 8) {
            p = make_far(r, out);
        } else {
            p = gen(r, max_depth_, out);
        }
        out.type = p.type;
        out.derived = p.derived;
        out.library_quirk = p.quirk;
        out.desc = std::move(p.desc);
        if (out.derived) SHUNT_TEST_MPI(MPI_Type_commit(&out.type));
        return out;
    }

private:
    struct part {
        MPI_Datatype type = MPI_DATATYPE_NULL;
        bool derived = false;
        std::string desc;
        bool quirk = false;  ///< see random_type::library_quirk
    };
    struct bounds {
        MPI_Count lb = 0, extent = 0, true_lb = 0, true_extent = 0, size = 0;
    };

    static bounds bounds_of(MPI_Datatype t) {
        bounds b;
        SHUNT_TEST_MPI(MPI_Type_get_extent_x(t, &b.lb, &b.extent));
        SHUNT_TEST_MPI(MPI_Type_get_true_extent_x(t, &b.true_lb, &b.true_extent));
        SHUNT_TEST_MPI(MPI_Type_size_x(t, &b.size));
        return b;
    }
    static bool small(MPI_Datatype t) {
        const bounds b = bounds_of(t);
        auto in = [](MPI_Count v) { return v >= -max_type_bytes && v <= max_type_bytes; };
        return in(b.lb) && in(b.extent) && b.extent >= 0 && in(b.true_lb) && in(b.true_extent) &&
               b.size <= max_type_bytes;
    }
    static void release(part& p) {
        if (p.derived) MPI_Type_free(&p.type);
        p = {};
    }
    static std::string list(const std::vector<std::int64_t>& v) {
        std::string s = "[";
        for (std::size_t i = 0; i < v.size(); ++i) {
            if (i) s += ',';
            s += std::to_string(v[i]);
        }
        return s + ']';
    }
    static std::vector<int> ints(const std::vector<std::int64_t>& v) { return {v.begin(), v.end()}; }
    static std::vector<MPI_Aint> aints(const std::vector<std::int64_t>& v) { return {v.begin(), v.end()}; }
#if MPI_VERSION >= 4
    static std::vector<MPI_Count> counts(const std::vector<std::int64_t>& v) { return {v.begin(), v.end()}; }
#endif

    /// Smallest block length to draw for a vector/hvector of `c`. MPICH 4.0.2 (yaksa) divides by
    /// zero packing a struct with an entry that is a vector/hvector of block length 0 over a
    /// derived non-contiguous child, so there zero-length blocks only wrap predefined types.
    static std::int64_t min_block([[maybe_unused]] const part& c) {
#if defined(MPICH_VERSION)
        return c.derived ? 1 : 0;
#else
        return 0;
#endif
    }

    part named(rng& r) {
        if (r.chance(4)) {
            const auto& f = f90_types();
            const auto& t = f[static_cast<std::size_t>(r.range(0, static_cast<std::int64_t>(f.size()) - 1))];
            return {t.type, false, t.name};
        }
        const auto& n = named_types();
        const auto& t = n[static_cast<std::size_t>(r.range(0, static_cast<std::int64_t>(n.size()) - 1))];
        return {t.type, false, t.name};
    }

    /// A random type of at most `depth` constructor levels.
    part gen(rng& r, int depth, random_type& out) {
        if (depth == 0 || r.chance(20)) return named(r);
        const int kind = static_cast<int>(r.range(0, 12));
        std::vector<part> kids;
        const int nkids = kind == 7 ? static_cast<int>(r.range(1, 4)) : 1;
        for (int k = 0; k < nkids; ++k) kids.push_back(gen(r, depth - 1, out));
        for (int attempt = 0; attempt < 6; ++attempt) {
            part p = build(r, kind, kids, out);
            if (p.type != MPI_DATATYPE_NULL && small(p.type)) {
                for (std::size_t k = 0; k < (kind == 7 ? kids.size() : 1); ++k) p.quirk |= kids[k].quirk;
                for (auto& k : kids) release(k);
                return p;
            }
            release(p);
        }
        // Every attempt grew too big: use the first child as it is.
        for (std::size_t k = 1; k < kids.size(); ++k) release(kids[k]);
        return kids[0];
    }

    /// One constructor over `kids` with random arguments; null when the arguments cannot work.
    part build(rng& r, int kind, const std::vector<part>& kids, random_type& out) {
        const part& c = kids[0];
        const bounds cb = bounds_of(c.type);
        const std::int64_t e = cb.extent;
        [[maybe_unused]] const bool large = MPI_VERSION >= 4 && r.chance(30);
        part p;
        p.derived = true;
        auto name = [&](const char* n) { return std::string(n) + (large ? "_c(" : "("); };
        switch (kind) {
            case 0: {  // contiguous
                const std::int64_t count = r.chance(5) ? 0 : r.range(1, 4);
                p.desc = name("contiguous") + std::to_string(count) + "; " + c.desc + ")";
#if MPI_VERSION >= 4
                if (large) {
                    SHUNT_TEST_MPI(MPI_Type_contiguous_c(count, c.type, &p.type));
                    break;
                }
#endif
                SHUNT_TEST_MPI(MPI_Type_contiguous(static_cast<int>(count), c.type, &p.type));
                break;
            }
            case 1: {  // vector
                const std::int64_t count = r.range(1, 4), bl = r.range(min_block(c), 3), stride = r.range(-4, 4);
                p.desc = name("vector") + std::to_string(count) + "," + std::to_string(bl) + "," +
                         std::to_string(stride) + "; " + c.desc + ")";
                p.quirk = open_mpi && count >= 2 && bl > 0 && bl != stride && stride * e == -1;
#if MPI_VERSION >= 4
                if (large) {
                    SHUNT_TEST_MPI(MPI_Type_vector_c(count, bl, stride, c.type, &p.type));
                    break;
                }
#endif
                SHUNT_TEST_MPI(MPI_Type_vector(static_cast<int>(count), static_cast<int>(bl), static_cast<int>(stride),
                                               c.type, &p.type));
                break;
            }
            case 2: {  // hvector, byte stride
                const std::int64_t count = r.range(1, 4), bl = r.range(min_block(c), 3);
                const std::int64_t stride = r.chance(50) ? r.range(-3, 3) * e : r.range(-3 * e - 16, 3 * e + 16);
                p.desc = name("hvector") + std::to_string(count) + "," + std::to_string(bl) + "," +
                         std::to_string(stride) + "B; " + c.desc + ")";
                p.quirk = open_mpi && count >= 2 && bl > 0 && bl * e != stride && stride == -1;
#if MPI_VERSION >= 4
                if (large) {
                    SHUNT_TEST_MPI(MPI_Type_create_hvector_c(count, bl, stride, c.type, &p.type));
                    break;
                }
#endif
                SHUNT_TEST_MPI(
                    MPI_Type_create_hvector(static_cast<int>(count), static_cast<int>(bl), stride, c.type, &p.type));
                break;
            }
            case 3:  // indexed, element displacements
            case 4: {  // hindexed, byte displacements
                const std::int64_t n = r.range(1, 5);
                std::vector<std::int64_t> bl(static_cast<std::size_t>(n)), d(bl.size());
                const bool uniform = r.chance(25);
                const std::int64_t step = r.range(-4, 4), len = r.range(1, 3);
                for (std::size_t i = 0; i < bl.size(); ++i) {
                    bl[i] = uniform ? len : r.range(0, 3);
                    d[i] = uniform ? static_cast<std::int64_t>(i) * step : r.range(-6, 6);
                    if (kind == 4) d[i] = uniform ? d[i] * e : r.range(-6 * e - 8, 6 * e + 8);
                }
                p.desc = name(kind == 3 ? "indexed" : "hindexed") + list(bl) + "," + list(d) + (kind == 4 ? "B" : "") +
                         "; " + c.desc + ")";
#if MPI_VERSION >= 4
                if (large) {
                    const auto lc = counts(bl), dc = counts(d);
                    if (kind == 3)
                        SHUNT_TEST_MPI(MPI_Type_indexed_c(n, lc.data(), dc.data(), c.type, &p.type));
                    else
                        SHUNT_TEST_MPI(MPI_Type_create_hindexed_c(n, lc.data(), dc.data(), c.type, &p.type));
                    break;
                }
#endif
                const auto li = ints(bl);
                if (kind == 3) {
                    const auto di = ints(d);
                    SHUNT_TEST_MPI(MPI_Type_indexed(static_cast<int>(n), li.data(), di.data(), c.type, &p.type));
                } else {
                    const auto da = aints(d);
                    SHUNT_TEST_MPI(
                        MPI_Type_create_hindexed(static_cast<int>(n), li.data(), da.data(), c.type, &p.type));
                }
                break;
            }
            case 5:  // indexed_block
            case 6: {  // hindexed_block
                const std::int64_t n = r.range(1, 5), bl = r.range(1, 3);
                std::vector<std::int64_t> d(static_cast<std::size_t>(n));
                for (auto& x : d) x = kind == 5 ? r.range(-6, 6) : r.range(-6 * e - 8, 6 * e + 8);
                p.desc = name(kind == 5 ? "indexed_block" : "hindexed_block") + std::to_string(bl) + "," + list(d) +
                         (kind == 6 ? "B" : "") + "; " + c.desc + ")";
#if MPI_VERSION >= 4
                if (large) {
                    const auto dc = counts(d);
                    if (kind == 5)
                        SHUNT_TEST_MPI(MPI_Type_create_indexed_block_c(n, bl, dc.data(), c.type, &p.type));
                    else
                        SHUNT_TEST_MPI(MPI_Type_create_hindexed_block_c(n, bl, dc.data(), c.type, &p.type));
                    break;
                }
#endif
                if (kind == 5) {
                    const auto di = ints(d);
                    SHUNT_TEST_MPI(MPI_Type_create_indexed_block(static_cast<int>(n), static_cast<int>(bl), di.data(),
                                                                 c.type, &p.type));
                } else {
                    const auto da = aints(d);
                    SHUNT_TEST_MPI(MPI_Type_create_hindexed_block(static_cast<int>(n), static_cast<int>(bl), da.data(),
                                                                  c.type, &p.type));
                }
                break;
            }
            case 7: {  // struct of different children
                const std::size_t n = kids.size();
                std::vector<std::int64_t> bl(n), d(n);
                std::vector<MPI_Datatype> ts(n);
                std::string parts;
                std::int64_t at = r.range(-32, 8);
                for (std::size_t i = 0; i < n; ++i) {
                    const bounds kb = bounds_of(kids[i].type);
                    bl[i] = r.range(0, 3);
                    // Mostly in increasing order without overlap, sometimes anywhere.
                    d[i] = r.chance(70) ? at - kb.true_lb : r.range(-64, 64);
                    at += bl[i] * kb.extent + r.range(0, 8);
                    ts[i] = kids[i].type;
                    parts += (i ? "; " : "") + kids[i].desc;
                }
                p.desc = name("struct") + list(bl) + "," + list(d) + "B; " + parts + ")";
                if (open_mpi) {  // see shunt::detail::check_library_struct
                    bool data = false, empty_entry = false;
                    for (std::size_t i = 0; i < n; ++i) {
                        const MPI_Count ks = bounds_of(kids[i].type).size;
                        data |= bl[i] > 0 && ks > 0;
                        empty_entry |= bl[i] > 0 && ks == 0;
                    }
                    p.quirk = data && empty_entry;
                }
#if MPI_VERSION >= 4
                if (large) {
                    const auto lc = counts(bl), dc = counts(d);
                    SHUNT_TEST_MPI(
                        MPI_Type_create_struct_c(static_cast<MPI_Count>(n), lc.data(), dc.data(), ts.data(), &p.type));
                    break;
                }
#endif
                const auto li = ints(bl);
                const auto da = aints(d);
                SHUNT_TEST_MPI(MPI_Type_create_struct(static_cast<int>(n), li.data(), da.data(), ts.data(), &p.type));
                break;
            }
            case 8: {  // subarray
                const std::int64_t nd = r.range(1, 3);
                std::vector<std::int64_t> sizes(static_cast<std::size_t>(nd)), subs(sizes.size()), starts(sizes.size());
                for (std::size_t i = 0; i < sizes.size(); ++i) {
                    sizes[i] = r.range(1, 6);
                    subs[i] = r.range(1, sizes[i]);
                    starts[i] = r.range(0, sizes[i] - subs[i]);
                }
                const int order = r.chance(50) ? MPI_ORDER_C : MPI_ORDER_FORTRAN;
                p.desc = name("subarray") + list(sizes) + "," + list(subs) + "," + list(starts) +
                         (order == MPI_ORDER_C ? ",C; " : ",F; ") + c.desc + ")";
#if MPI_VERSION >= 4
                if (large) {
                    const auto a = counts(sizes), b = counts(subs), s = counts(starts);
                    SHUNT_TEST_MPI(MPI_Type_create_subarray_c(static_cast<int>(nd), a.data(), b.data(), s.data(), order,
                                                              c.type, &p.type));
                    break;
                }
#endif
                const auto a = ints(sizes), b = ints(subs), s = ints(starts);
                SHUNT_TEST_MPI(MPI_Type_create_subarray(static_cast<int>(nd), a.data(), b.data(), s.data(), order,
                                                        c.type, &p.type));
                break;
            }
            case 9: {  // darray
                // Open MPI 4.1 rejects darray of an old type of size or extent 0 (MPI_ERR_TYPE);
                // MPICH accepts it. Not a shunt question: build something else.
                if (e == 0 || cb.size == 0) return {};
                const std::int64_t nd = r.range(1, 3);
                const std::size_t n = static_cast<std::size_t>(nd);
                std::vector<std::int64_t> gs(n), dist(n), darg(n), ps(n, 1);
                for (std::size_t i = 0; i < n; ++i) {
                    const std::int64_t k = r.range(0, 2);
                    dist[i] = k == 0 ? MPI_DISTRIBUTE_NONE : k == 1 ? MPI_DISTRIBUTE_BLOCK : MPI_DISTRIBUTE_CYCLIC;
                }
                int size = 1, rank = 0;
                if (r.chance(50)) {  // the real grid: spread the world size over distributed dimensions
                    size = world_size_;
                    rank = world_rank_;
                    std::vector<std::size_t> dist_dims;
                    for (std::size_t i = 0; i < n; ++i)
                        if (dist[i] != MPI_DISTRIBUTE_NONE) dist_dims.push_back(i);
                    if (dist_dims.empty() && size > 1) {
                        dist[0] = MPI_DISTRIBUTE_BLOCK;
                        dist_dims.push_back(0);
                    }
                    for (int left = size, f = 2; left > 1;) {
                        while (left % f != 0) ++f;
                        ps[dist_dims[static_cast<std::size_t>(
                            r.range(0, static_cast<std::int64_t>(dist_dims.size()) - 1))]] *= f;
                        left /= f;
                    }
                } else {  // a made-up grid and rank
                    for (std::size_t i = 0; i < n; ++i)
                        if (dist[i] != MPI_DISTRIBUTE_NONE) ps[i] = r.range(1, 3);
                    for (auto v : ps) size *= static_cast<int>(v);
                    rank = static_cast<int>(r.range(0, size - 1));
                }
                for (std::size_t i = 0; i < n; ++i) {
                    gs[i] = r.range(1, 7);
                    darg[i] = MPI_DISTRIBUTE_DFLT_DARG;
                    if (dist[i] == MPI_DISTRIBUTE_CYCLIC && r.chance(60)) darg[i] = r.range(1, 3);
                    // A block size must cover the dimension: darg * psize >= gsize.
                    if (dist[i] == MPI_DISTRIBUTE_BLOCK && r.chance(50)) {
                        const std::int64_t need = (gs[i] + ps[i] - 1) / ps[i];
                        darg[i] = need + r.range(0, 2);
                    }
                }
                const int order = r.chance(50) ? MPI_ORDER_C : MPI_ORDER_FORTRAN;
                p.desc = name("darray") + std::to_string(size) + "," + std::to_string(rank) + "," + list(gs) + "," +
                         list(dist) + "," + list(darg) + "," + list(ps) + (order == MPI_ORDER_C ? ",C; " : ",F; ") +
                         c.desc + ")";
                const auto di = ints(dist), ai = ints(darg), pi = ints(ps);
#if MPI_VERSION >= 4
                if (large) {
                    const auto gc = counts(gs);
                    SHUNT_TEST_MPI(MPI_Type_create_darray_c(size, rank, static_cast<int>(nd), gc.data(), di.data(),
                                                            ai.data(), pi.data(), order, c.type, &p.type));
                    break;
                }
#endif
                const auto gi = ints(gs);
                SHUNT_TEST_MPI(MPI_Type_create_darray(size, rank, static_cast<int>(nd), gi.data(), di.data(), ai.data(),
                                                      pi.data(), order, c.type, &p.type));
                break;
            }
            case 10:
            case 11: {  // resized, lb anywhere (negative too), extent smaller or larger than the data
                const std::int64_t lb = r.chance(30) ? cb.lb : r.range(-48, 48);
                const std::int64_t ext = r.chance(20) ? cb.true_extent : r.range(1, 2 * cb.true_extent + 32);
                p.desc = name("resized") + std::to_string(lb) + "," + std::to_string(ext) + "; " + c.desc + ")";
#if MPI_VERSION >= 4
                if (large) {
                    SHUNT_TEST_MPI(MPI_Type_create_resized_c(c.type, lb, ext, &p.type));
                    break;
                }
#endif
                SHUNT_TEST_MPI(MPI_Type_create_resized(c.type, lb, ext, &p.type));
                break;
            }
            default: {  // dup
                p.desc = "dup(" + c.desc + ")";
                SHUNT_TEST_MPI(MPI_Type_dup(c.type, &p.type));
                return p;
            }
        }
#if MPI_VERSION >= 4
        if (large) ++out.large;
#else
        (void)out;
#endif
        return p;
    }

    /// A type on absolute addresses (MPI_Get_address) into memory it owns: pack with MPI_BOTTOM.
    /// Offsets are then real addresses, far beyond 4 GiB.
    part make_bottom(rng& r, random_type& out) {
        part inner = gen(r, max_depth_ - 1, out);
        const bounds b = bounds_of(inner.type);
        const bool pair = r.chance(50);
        out.max_count = r.range(1, 3);
        const std::int64_t per = (pair ? 2 : 1) * (b.extent > b.true_extent ? b.extent : b.true_extent) + 64;
        out.memory_bytes = out.max_count * per + 256;
        out.memory = std::make_unique<std::byte[]>(static_cast<std::size_t>(out.memory_bytes));
        MPI_Aint base = 0;
        SHUNT_TEST_MPI(MPI_Get_address(out.memory.get() + 64, &base));
        const MPI_Aint at = base - b.true_lb;  // element 0's data starts at memory + 64
        part p;
        p.derived = true;
        if (pair) {  // two copies on absolute addresses, the second first
            const MPI_Aint displs[2] = {at + static_cast<MPI_Aint>(b.extent), at};
            p.desc = "hindexed_block(1,[&mem+64+" + std::to_string(b.extent) + ",&mem+64]B; " + inner.desc + ")";
            SHUNT_TEST_MPI(MPI_Type_create_hindexed_block(2, 1, displs, inner.type, &p.type));
        } else {
            const int one = 1;
            p.desc = "struct([1],[&mem+64]B; " + inner.desc + ")";
            SHUNT_TEST_MPI(MPI_Type_create_struct(1, &one, &at, &inner.type, &p.type));
        }
        out.bottom = true;
        p.quirk = inner.quirk;
        release(inner);
        return p;
    }

    /// Bounds beyond 4 GiB around small data (resized): only count 1 fits in memory.
    part make_far(rng& r, random_type& out) {
        part inner = gen(r, max_depth_ - 1, out);
        const bounds b = bounds_of(inner.type);
        const std::int64_t gib = std::int64_t{1} << 30;
        const std::int64_t lb = r.chance(50) ? b.lb : b.lb - 5 * gib - r.range(0, 99);
        const std::int64_t ext = 6 * gib + r.range(0, 99);
        part p;
        p.derived = true;
        p.desc = "resized(" + std::to_string(lb) + "," + std::to_string(ext) + "; " + inner.desc + ")";
        SHUNT_TEST_MPI(MPI_Type_create_resized(inner.type, lb, ext, &p.type));
        out.max_count = 1;
        p.quirk = inner.quirk;
        release(inner);
        return p;
    }

    int world_rank_;
    int world_size_;
    int max_depth_;
};

}  // namespace shunt_test
