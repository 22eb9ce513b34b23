// tests/mpi/test_decode.cpp: decode against the library on hand-built types: predefined and pair
// types, constructor trees, handle lifetime, MPI_BOTTOM, 64-bit bounds, large-count constructors, and
// the library quirks decode leaves to the library.
#include "../unit/layout_string.hpp"
#include "mpi_types.hpp"
#include "probe.hpp"
#include "random_types.hpp"

#include <shunt/datatype/decode.hpp>
#include <shunt/pack/host.hpp>

#include <doctest/doctest.h>
#include <mpi.h>

#include <array>
#include <cstdint>
#include <limits>
#include <vector>

using shunt::block;
using shunt::dim;
using shunt::layout;
using shunt_test::owned_type;

namespace {

constexpr std::int64_t gib = std::int64_t{1} << 30;

/// Checks decode's layout of `count` elements of committed `t` against MPI_Pack's byte positions
/// and bytes.
void check_against_library(MPI_Datatype t, int count) {
    const shunt::type_info info = shunt::decode(t);
    MPI_Count size = 0;
    REQUIRE(MPI_Type_size_x(t, &size) == MPI_SUCCESS);
    CHECK(info.form.size() == size);
    const std::int64_t total = size * count;
    std::int64_t lo = 0, hi = 0;
    if (total > 0) {
        lo = std::min(info.true_lb, info.true_lb + (count - 1) * info.extent);
        hi = std::max(info.true_lb + info.true_extent, info.true_lb + (count - 1) * info.extent + info.true_extent);
    }
    shunt_test::typed_buffer buf(lo, hi);
    const auto written = shunt_test::written_bytes(t, count, buf, total);
    const auto pos = shunt_test::probe_positions(t, count, buf, total);
    const auto mine = shunt_test::layout_positions(info.form, info.extent, count);
    REQUIRE(pos.size() == mine.size());
    for (std::size_t s = 0; s < pos.size(); ++s)
        if (written[s]) REQUIRE(pos[s] == mine[s]);
    buf.fill(42);
    std::vector<unsigned char> ref(static_cast<std::size_t>(total) + 1), out(ref.size());
    CHECK(shunt_test::mpi_pack(buf, t, count, ref.data(), static_cast<int>(ref.size())) == total);
    CHECK(shunt::pack_host(info.form, info.extent, count, buf.origin(), out.data()) == total);
    for (std::size_t s = 0; s < static_cast<std::size_t>(total); ++s)
        if (written[s]) REQUIRE(ref[s] == out[s]);
}

int deleted = 0;
int count_delete(MPI_Datatype, int, void*, void*) {
    ++deleted;
    return MPI_SUCCESS;
}

}  // namespace

TEST_CASE("predefined types decode to their bytes; pair types keep their holes") {
    for (const auto& list : {shunt_test::named_types(), shunt_test::f90_types()})
        for (const auto& n : list) {
            CAPTURE(n.name);
            const shunt::type_info info = shunt::decode(n.type);
            check_against_library(n.type, 3);
            CHECK(info.lb == 0);
            if (n.type != MPI_SHORT_INT) CHECK(info.form.is_contiguous());
        }
    // Holes inside the packed bytes only for {short; int}; the others differ in their padding.
    CHECK(shunt::decode(MPI_SHORT_INT).form == layout{{}, {{0, 2}, {4, 4}}});
    CHECK(shunt::decode(MPI_DOUBLE_INT).form == layout{{}, {{0, 12}}});
    CHECK(shunt::decode(MPI_DOUBLE_INT).extent == 16);
    CHECK(shunt::decode(MPI_LONG_DOUBLE_INT).form ==
          layout{{}, {{0, static_cast<std::int64_t>(sizeof(long double) + sizeof(int))}}});
    CHECK(shunt::decode(MPI_2INT).form == layout{{}, {{0, 8}}});
}

TEST_CASE("decode_tree reports the constructor, its arguments and MPI's bounds") {
    owned_type inner, outer;
    REQUIRE(MPI_Type_vector(3, 2, 5, MPI_INT, inner.out()) == MPI_SUCCESS);
    REQUIRE(MPI_Type_create_resized(inner, -8, 100, outer.out()) == MPI_SUCCESS);
    const shunt::type_node n = shunt::decode_tree(outer);
    CHECK(n.combiner == MPI_COMBINER_RESIZED);
    CHECK(n.addresses == std::vector<MPI_Aint>{-8, 100});
    CHECK(n.lb == -8);
    CHECK(n.extent == 100);
    CHECK(n.size == 24);
    CHECK(n.true_lb == 0);
    CHECK(n.true_extent == 48);
    REQUIRE(n.children.size() == 1);
    const shunt::type_node& v = n.children[0];
    CHECK(v.combiner == MPI_COMBINER_VECTOR);
    CHECK(v.ints == std::vector<int>{3, 2, 5});
    CHECK(v.named == MPI_DATATYPE_NULL);
    REQUIRE(v.children.size() == 1);
    CHECK(v.children[0].combiner == MPI_COMBINER_NAMED);
    CHECK(v.children[0].named == MPI_INT);
    CHECK(shunt::to_layout(n) == layout{{{3, 20}}, {{0, 8}}});
    CHECK_THROWS_AS(shunt::decode_tree(MPI_DATATYPE_NULL), shunt::error);
}

TEST_CASE("decode frees every derived handle MPI_Type_get_contents hands out") {
    // The child's delete callback runs when its last reference goes: after the parent is freed,
    // but never if decode kept a reference (MPICH hands out the original handle, Open MPI a
    // duplicate that holds the original; both keep it alive).
    int key = MPI_KEYVAL_INVALID;
    REQUIRE(MPI_Type_create_keyval(MPI_TYPE_NULL_COPY_FN, count_delete, &key, nullptr) == MPI_SUCCESS);
    deleted = 0;
    {
        owned_type child, mid, parent;
        REQUIRE(MPI_Type_vector(2, 1, 3, MPI_INT, child.out()) == MPI_SUCCESS);
        REQUIRE(MPI_Type_set_attr(child, key, nullptr) == MPI_SUCCESS);
        const int lens[2] = {1, 2};
        const MPI_Aint displs[2] = {0, 64};
        const MPI_Datatype kids[2] = {child, MPI_DOUBLE};
        REQUIRE(MPI_Type_create_struct(2, lens, displs, kids, mid.out()) == MPI_SUCCESS);
        REQUIRE(MPI_Type_contiguous(3, mid, parent.out()) == MPI_SUCCESS);
        child.reset();
        mid.reset();
        parent.commit();
        for (int i = 0; i < 20; ++i) (void)shunt::decode(parent);
        CHECK(deleted == 0);  // still in use by the parent
    }
    CHECK(deleted == 1);
    MPI_Type_free_keyval(&key);
}

/// A type source of one derived node whose envelope claims the given numbers of arguments, as a
/// library answering nonsense would: decode_tree must refuse it before reading the contents.
struct lying_source {
    using handle = int;
    std::int64_t ints = 0, addresses = 0, counts = 0;
    static handle null_handle() noexcept { return -1; }
    void bounds(handle, shunt::type_node& n) const { n.size = n.extent = n.true_extent = 4; }
    int envelope(handle, shunt::type_envelope& e) const noexcept {
        e = {ints, addresses, counts, 1, MPI_COMBINER_CONTIGUOUS};
        return MPI_SUCCESS;
    }
    void contents(handle, const shunt::type_envelope&, shunt::type_node&, handle*) const {
        FAIL("the contents of an impossible envelope must not be read");
    }
    void release(handle) const noexcept {}
    MPI_Datatype named(handle) const noexcept { return MPI_DATATYPE_NULL; }
};

TEST_CASE("decode_tree: envelope counts whose sum passes 64 bits are unsupported (found by fuzz_datatype)") {
    constexpr std::int64_t top = std::numeric_limits<std::int64_t>::max();
    const std::int64_t cap = 4 * static_cast<std::int64_t>(shunt::max_flat_blocks);
    for (const auto& v : std::vector<std::array<std::int64_t, 3>>{
             {top, 1, 0}, {1, top, 1}, {0, 2, top}, {top, top, top}, {cap, cap, 0}, {-1, 0, 0}}) {
        const std::int64_t i = v[0], a = v[1], c = v[2];  // named, not bound: clang 14's CAPTURE
        CAPTURE(i);
        CAPTURE(a);
        CAPTURE(c);
        lying_source src{i, a, c};
        CHECK_THROWS_AS(shunt::decode_tree(src, 0), shunt::unsupported);
    }
}

TEST_CASE("types on absolute addresses (MPI_BOTTOM) decode to those addresses") {
    std::vector<double> a(16, 1.5), b(4, -2.0);
    MPI_Aint addr[2];
    REQUIRE(MPI_Get_address(&a[3], &addr[0]) == MPI_SUCCESS);
    REQUIRE(MPI_Get_address(&b[1], &addr[1]) == MPI_SUCCESS);
    const int lens[2] = {2, 1};
    owned_type t;
    REQUIRE(MPI_Type_create_hindexed(2, lens, addr, MPI_DOUBLE, t.out()) == MPI_SUCCESS);
    t.commit();
    const shunt::type_info info = shunt::decode(t);
    CHECK(shunt::flatten(info.form) == std::vector<block>{{addr[0], 16}, {addr[1], 8}});
    std::vector<double> out(3);
    CHECK(shunt::pack_host(info.form, info.extent, 1, MPI_BOTTOM, out.data()) == 24);
    CHECK(out == std::vector<double>{1.5, 1.5, -2.0});
}

TEST_CASE("64-bit bounds and strides beyond 4 GiB") {
    owned_type far, wide;
    REQUIRE(MPI_Type_create_resized(MPI_INT, -5 * gib, 11 * gib, far.out()) == MPI_SUCCESS);
    REQUIRE(MPI_Type_create_hvector(3, 1, 5 * gib, MPI_INT, wide.out()) == MPI_SUCCESS);
    far.commit();
    wide.commit();
    const shunt::type_info f = shunt::decode(far);
    CHECK(f.lb == -5 * gib);
    CHECK(f.extent == 11 * gib);
    CHECK(f.form == layout{{}, {{0, 4}}});
    check_against_library(far, 1);
    const shunt::type_info w = shunt::decode(wide);
    CHECK(w.form == layout{{{3, 5 * gib}}, {{0, 4}}});
    CHECK(w.extent == 10 * gib + 4);
    CHECK(w.size == 12);
}

TEST_CASE("negative displacements and count > 1 of resized types") {
    owned_type v, r;
    REQUIRE(MPI_Type_vector(3, 1, -2, MPI_SHORT, v.out()) == MPI_SUCCESS);  // bytes 0, -4, -8
    REQUIRE(MPI_Type_create_resized(v, -16, 7, r.out()) == MPI_SUCCESS);
    r.commit();
    const shunt::type_info info = shunt::decode(r);
    CHECK(info.form == layout{{{3, -4}}, {{0, 2}}});
    CHECK(info.lb == -16);
    CHECK(info.extent == 7);
    check_against_library(r, 5);
}

TEST_CASE("too deep a constructor tree is left to the library, without leaking") {
    owned_type t;
    REQUIRE(MPI_Type_contiguous(1, MPI_INT, t.out()) == MPI_SUCCESS);
    for (int level = 1; level < shunt::max_decode_depth + 8; ++level) {
        owned_type next;
        REQUIRE(MPI_Type_contiguous(1, t, next.out()) == MPI_SUCCESS);
        t = std::move(next);
        if (level == 100) CHECK(shunt::decode(t).form == layout{{}, {{0, 4}}});
    }
    CHECK_THROWS_AS(shunt::decode(t), shunt::unsupported);
}

#if defined(MPICH_VERSION)
TEST_CASE("MPI_LB / MPI_UB markers are left to the library") {
    CHECK_THROWS_AS(shunt::decode(MPI_LB), shunt::unsupported);
    const int lens[3] = {1, 1, 1};
    const MPI_Aint displs[3] = {-8, 0, 32};
    const MPI_Datatype kids[3] = {MPI_LB, MPI_INT, MPI_UB};
    owned_type t;
    REQUIRE(MPI_Type_create_struct(3, lens, displs, kids, t.out()) == MPI_SUCCESS);
    t.commit();
    CHECK_THROWS_AS(shunt::decode(t), shunt::unsupported);
}
#endif

#if MPI_VERSION >= 4
TEST_CASE("MPI-4 large-count constructors decode like the classic ones") {
    owned_type classic, large;
    REQUIRE(MPI_Type_vector(3, 2, 5, MPI_INT, classic.out()) == MPI_SUCCESS);
    REQUIRE(MPI_Type_vector_c(3, 2, 5, MPI_INT, large.out()) == MPI_SUCCESS);
    const shunt::type_node n = shunt::decode_tree(large);
    CHECK(n.ints.empty());
    CHECK(n.large_counts == std::vector<MPI_Count>{3, 2, 5});
    CHECK(shunt::decode(large).form == shunt::decode(classic).form);

    const MPI_Count sizes[2] = {4, 6}, subs[2] = {2, 3}, starts[2] = {1, 2};
    const int isizes[2] = {4, 6}, isubs[2] = {2, 3}, istarts[2] = {1, 2};
    owned_type sub_c, sub;
    REQUIRE(MPI_Type_create_subarray_c(2, sizes, subs, starts, MPI_ORDER_FORTRAN, MPI_DOUBLE, sub_c.out()) ==
            MPI_SUCCESS);
    REQUIRE(MPI_Type_create_subarray(2, isizes, isubs, istarts, MPI_ORDER_FORTRAN, MPI_DOUBLE, sub.out()) ==
            MPI_SUCCESS);
    CHECK(shunt::decode(sub_c).form == shunt::decode(sub).form);

    const MPI_Count g[2] = {8, 6};
    const int gi[2] = {8, 6}, dist[2] = {MPI_DISTRIBUTE_CYCLIC, MPI_DISTRIBUTE_BLOCK};
    const int darg[2] = {2, MPI_DISTRIBUTE_DFLT_DARG}, ps[2] = {2, 3};
    owned_type da_c, da;
    REQUIRE(MPI_Type_create_darray_c(6, 4, 2, g, dist, darg, ps, MPI_ORDER_C, MPI_INT, da_c.out()) == MPI_SUCCESS);
    REQUIRE(MPI_Type_create_darray(6, 4, 2, gi, dist, darg, ps, MPI_ORDER_C, MPI_INT, da.out()) == MPI_SUCCESS);
    CHECK(shunt::decode(da_c).form == shunt::decode(da).form);
    da_c.commit();
    check_against_library(da_c, 2);

    const MPI_Count lens[2] = {2, 1}, displs[2] = {-16, 40};
    const MPI_Datatype kids[2] = {MPI_DOUBLE, MPI_SHORT_INT};
    owned_type st;
    REQUIRE(MPI_Type_create_struct_c(2, lens, displs, kids, st.out()) == MPI_SUCCESS);
    CHECK(shunt::decode(st).form == layout{{}, {{-16, 16}, {40, 2}, {44, 4}}});
}
#endif

// Open MPI (opal_datatype_add) reads a stride of -1 byte as "the default extent" and packs
// hvector(3, 1, -1 B, MPI_BYTE) as bytes 0, 1, 2 where the typemap says 0, -1, -2.
TEST_CASE("a byte stride of -1: Open MPI's is left to the library, MPICH's decodes") {
    owned_type t, v;
    REQUIRE(MPI_Type_create_hvector(3, 1, -1, MPI_BYTE, t.out()) == MPI_SUCCESS);
    REQUIRE(MPI_Type_vector(4, 1, -1, MPI_CHAR, v.out()) == MPI_SUCCESS);
    t.commit();
    v.commit();
#if defined(OPEN_MPI)
    CHECK_THROWS_AS(shunt::decode(t), shunt::unsupported);
    CHECK_THROWS_AS(shunt::decode(v), shunt::unsupported);
#else
    CHECK(shunt::decode(t).form == layout{{{3, -1}}, {{0, 1}}});
    check_against_library(t, 2);
    check_against_library(v, 3);
#endif
    // Other negative strides are fine everywhere.
    owned_type w;
    REQUIRE(MPI_Type_create_hvector(3, 1, -2, MPI_BYTE, w.out()) == MPI_SUCCESS);
    w.commit();
    check_against_library(w, 2);
}

// Open MPI 4.1 reports extent 28 for struct {char at 0; contiguous(0) at 28} but packs element 1
// of two from byte 1.
TEST_CASE("a struct with an empty live entry: Open MPI's is left to the library") {
    owned_type empty, t;
    REQUIRE(MPI_Type_contiguous(0, MPI_INT, empty.out()) == MPI_SUCCESS);
    const int lens[2] = {1, 1};
    const MPI_Aint displs[2] = {0, 28};
    const MPI_Datatype kids[2] = {MPI_CHAR, empty};
    REQUIRE(MPI_Type_create_struct(2, lens, displs, kids, t.out()) == MPI_SUCCESS);
    t.commit();
#if defined(OPEN_MPI)
    CHECK_THROWS_AS(shunt::decode(t), shunt::unsupported);
#else
    CHECK(shunt::decode(t).form == layout{{}, {{0, 1}}});
    check_against_library(t, 3);
#endif
    // An empty type alone packs nothing in both.
    empty.commit();
    CHECK(shunt::decode(empty).form.empty());
}

// Open MPI 5.0 packs hvector(2, 1, 24 B, MPI_C_DOUBLE_COMPLEX) as bytes 0-31 where the typemap
// says 0-15 and 24-39 (Open MPI 4.1 and MPICH as the typemap says). There, types whose complex
// elements lie at distances other than multiples of their size are left to the library; the
// others decode everywhere.
TEST_CASE("complex elements apart by other than their size: Open MPI 5's are left to the library") {
    auto make = [](auto build) {
        owned_type t;
        REQUIRE(build(t.out()) == MPI_SUCCESS);
        t.commit();
        return t;
    };
    owned_type fres = make([](MPI_Datatype* o) { return MPI_Type_create_resized(MPI_C_FLOAT_COMPLEX, 0, 4, o); });
    owned_type fres16 = make([](MPI_Datatype* o) { return MPI_Type_create_resized(MPI_C_FLOAT_COMPLEX, 0, 16, o); });
    owned_type sub = make([](MPI_Datatype* o) {
        const int sizes[2] = {4, 3}, subsizes[2] = {1, 2}, starts[2] = {1, 0};
        return MPI_Type_create_subarray(2, sizes, subsizes, starts, MPI_ORDER_C, MPI_C_FLOAT_COMPLEX, o);
    });
    std::vector<owned_type> odd, even;
    // the three kinds pack_diff found: an hvector, a contiguous of a resized type, block displacements
    odd.push_back(make([](MPI_Datatype* o) { return MPI_Type_create_hvector(2, 1, 24, MPI_C_DOUBLE_COMPLEX, o); }));
    odd.push_back(make([&](MPI_Datatype* o) { return MPI_Type_contiguous(2, fres, o); }));
    odd.push_back(make([](MPI_Datatype* o) {
        const MPI_Aint displs[3] = {166, 158, 519};
        return MPI_Type_create_hindexed_block(3, 1, displs, MPI_C_DOUBLE_COMPLEX, o);
    }));
    odd.push_back(make([](MPI_Datatype* o) {  // two entries of a struct
        const int lens[2] = {1, 1};
        const MPI_Aint displs[2] = {0, 12};
        const MPI_Datatype kids[2] = {MPI_C_FLOAT_COMPLEX, MPI_C_FLOAT_COMPLEX};
        return MPI_Type_create_struct(2, lens, displs, kids, o);
    }));
    even.push_back(make([](MPI_Datatype* o) { return MPI_Type_create_hvector(2, 1, 32, MPI_C_DOUBLE_COMPLEX, o); }));
    even.push_back(make([](MPI_Datatype* o) { return MPI_Type_vector(3, 2, 5, MPI_C_FLOAT_COMPLEX, o); }));
    even.push_back(make([&](MPI_Datatype* o) { return MPI_Type_contiguous(3, fres16, o); }));
    even.push_back(make([&](MPI_Datatype* o) { return MPI_Type_contiguous(2, sub, o); }));
    even.push_back(make([](MPI_Datatype* o) {  // complex at 0 and 24 with a double between
        const int lens[3] = {1, 1, 2};
        const MPI_Aint displs[3] = {0, 8, 24};
        const MPI_Datatype kids[3] = {MPI_C_FLOAT_COMPLEX, MPI_DOUBLE, MPI_C_FLOAT_COMPLEX};
        return MPI_Type_create_struct(3, lens, displs, kids, o);
    }));
    for (const owned_type& t : odd) {
#if defined(OPEN_MPI) && OMPI_MAJOR_VERSION >= 5
        CHECK_THROWS_AS(shunt::decode(t), shunt::unsupported);
#else
        check_against_library(t, 2);
#endif
    }
    for (const owned_type& t : even) check_against_library(t, 3);
}
