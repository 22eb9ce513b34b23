// tests/unit/datatype/test_layout.cpp: unit tests of the MPI-free canonical layout: simplifier,
// constructors, flattening, 64-bit arithmetic. Regressions are named after what they guard.
#include <doctest/doctest.h>

#include "layout_string.hpp"

#include <shunt/datatype/layout.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

using shunt::block;
using shunt::dim;
using shunt::layout;

namespace {

constexpr std::int64_t gib = std::int64_t{1} << 30;

const layout byte_form{{}, {{0, 1}}};
const layout int_form{{}, {{0, 4}}};
const layout double_form{{}, {{0, 8}}};

/// Every byte offset of `count` elements of extent `extent`, in pack order.
std::vector<std::int64_t> bytes_of(const layout& l, std::int64_t count = 1, std::int64_t extent = 0) {
    std::vector<std::int64_t> out;
    const auto flat = shunt::flatten(l);
    for (std::int64_t i = 0; i < count; ++i)
        for (const auto& b : flat)
            for (std::int64_t k = 0; k < b.length; ++k) out.push_back(i * extent + b.offset + k);
    return out;
}

}  // namespace

TEST_CASE("simplify: a dense run is one block") {
    CHECK(shunt::simplify({{}, {{0, 4}, {4, 4}, {8, 8}}}) == layout{{}, {{0, 16}}});
    CHECK(shunt::simplify({{{3, 4}}, {{0, 4}}}) == layout{{}, {{0, 12}}});
    CHECK(shunt::make_contiguous(10, double_form, 8) == layout{{}, {{0, 80}}});
    CHECK(shunt::make_contiguous(1, int_form, 4) == int_form);
    CHECK(shunt::make_contiguous(10, double_form, 8).is_contiguous());
}

TEST_CASE("simplify: touching blocks merge, empty blocks and count-1 dims go") {
    CHECK(shunt::simplify({{}, {{0, 2}, {2, 0}, {2, 2}, {10, 4}, {14, 0}}}) == layout{{{2, 10}}, {{0, 4}}});
    CHECK(shunt::simplify({{{1, 100}, {1, -7}}, {{5, 3}}}) == layout{{}, {{5, 3}}});
    // Blocks that touch in reverse order are not contiguous in pack order: no merge.
    CHECK(shunt::simplify({{}, {{4, 4}, {0, 4}}}) == layout{{{2, -4}}, {{4, 4}}});
    CHECK(shunt::flatten(layout{{}, {{4, 4}, {0, 4}}}) == std::vector<block>{{4, 4}, {0, 4}});
}

TEST_CASE("simplify: periodic block lists become strided dimensions") {
    CHECK(shunt::simplify({{}, {{0, 4}, {10, 4}, {20, 4}, {30, 4}}}) == layout{{{4, 10}}, {{0, 4}}});
    // Period of two blocks, repeated three times.
    CHECK(shunt::simplify({{}, {{0, 1}, {3, 2}, {10, 1}, {13, 2}, {20, 1}, {23, 2}}}) ==
          layout{{{3, 10}}, {{0, 1}, {3, 2}}});
    // Nested periods: a 2x3 grid of 4-byte blocks.
    CHECK(shunt::simplify({{}, {{0, 4}, {8, 4}, {16, 4}, {100, 4}, {108, 4}, {116, 4}}}) ==
          layout{{{2, 100}, {3, 8}}, {{0, 4}}});
    // Not periodic: lengths differ, or steps differ.
    CHECK(shunt::simplify({{}, {{0, 4}, {10, 2}, {20, 4}}}).dims.empty());
    CHECK(shunt::simplify({{}, {{0, 4}, {10, 4}, {21, 4}}}).dims.empty());
}

TEST_CASE("simplify: nested dimensions that tile merge") {
    CHECK(shunt::simplify({{{3, 8}, {2, 4}}, {{0, 1}}}) == layout{{{6, 4}}, {{0, 1}}});
    CHECK(shunt::simplify({{{2, 64}, {4, 16}, {2, 4}}, {{0, 2}}}) == layout{{{8, 16}, {2, 4}}, {{0, 2}}});
    // Idempotent.
    const layout l = shunt::simplify({{{2, 64}, {4, 16}, {2, 4}}, {{0, 2}, {3, 1}}});
    CHECK(shunt::simplify(l) == l);
}

TEST_CASE("canonical: vector, hvector, subarray, uniform indexed and struct of equal blocks agree") {
    // 3 rows of 2 ints from a 3x5 int matrix: offsets 0, 20, 40, 8 bytes each.
    const layout expect{{{3, 20}}, {{0, 8}}};
    const layout vector = shunt::make_hvector(3, 2, 5 * 4, int_form, 4);
    const layout contig_of_resized = shunt::make_contiguous(3, shunt::make_contiguous(2, int_form, 4), 20);
    const std::vector<std::int64_t> lens{2, 2, 2}, displs{0, 20, 40};
    const layout hindexed = shunt::make_hindexed(lens, displs, int_form, 4);
    const std::vector<const layout*> kids{&int_form, &int_form, &int_form};
    const std::vector<std::int64_t> extents{4, 4, 4};
    const layout strct = shunt::make_struct(lens, displs, kids, extents);
    const std::vector<std::int64_t> sizes{3, 5}, subsizes{3, 2}, starts{0, 0};
    const layout sub_c = shunt::make_subarray(sizes, subsizes, starts, true, int_form, 4);
    const std::vector<std::int64_t> sizes_f{5, 3}, subsizes_f{2, 3};
    const layout sub_f = shunt::make_subarray(sizes_f, subsizes_f, starts, false, int_form, 4);
    CHECK(vector == expect);
    CHECK(contig_of_resized == expect);
    CHECK(hindexed == expect);
    CHECK(strct == expect);
    CHECK(sub_c == expect);
    CHECK(sub_f == expect);
}

TEST_CASE("canonical: a vector of vectors equals the 3-D subarray") {
    // A 2x3x2 block from a [2][6][5] int array: element (i, j, k) at i*120 + j*20 + k*4.
    const layout rows = shunt::make_hvector(3, 2, 20, int_form, 4);  // MPI extent 48
    const layout vv = shunt::make_hvector(2, 1, 120, rows, 48);
    const std::vector<std::int64_t> sizes{2, 6, 5}, subsizes{2, 3, 2}, starts{0, 0, 0};
    const layout sub = shunt::make_subarray(sizes, subsizes, starts, true, int_form, 4);
    CHECK(vv == sub);
    CHECK(vv == layout{{{2, 120}, {3, 20}}, {{0, 8}}});
    // With a start offset, the subarray shifts its single block.
    const std::vector<std::int64_t> starts2{0, 1, 3};
    CHECK(shunt::make_subarray(sizes, subsizes, starts2, true, int_form, 4) == layout{{{2, 120}, {3, 20}}, {{32, 8}}});
}

TEST_CASE("canonical: equal bytes in a different order are different layouts") {
    const std::vector<std::int64_t> lens{1, 1};
    const std::vector<std::int64_t> fwd{0, 8}, rev{8, 0};
    const layout a = shunt::make_hindexed(lens, fwd, double_form, 8);
    const layout b = shunt::make_hindexed(lens, rev, double_form, 8);
    CHECK(a != b);
    CHECK(bytes_of(a) != bytes_of(b));
    CHECK(shunt::make_hvector(3, 2, 20, int_form, 4) != shunt::make_hvector(3, 2, 24, int_form, 4));
}

TEST_CASE("negative strides and displacements") {
    const layout down = shunt::make_hvector(3, 1, -8, int_form, 4);
    CHECK(down == layout{{{3, -8}}, {{0, 4}}});
    CHECK(shunt::flatten(down) == std::vector<block>{{0, 4}, {-8, 4}, {-16, 4}});
    const std::vector<std::int64_t> lens{1, 1, 1}, displs{16, 8, 0};
    CHECK(shunt::make_hindexed(lens, displs, int_form, 4) == shunt::shift(down, 16));
    // Reverse-adjacent blocks (stride == -length) must not fold into one block.
    const layout rev = shunt::make_hvector(4, 1, -4, int_form, 4);
    CHECK(rev == layout{{{4, -4}}, {{0, 4}}});
    CHECK(bytes_of(rev).front() == 0);
    CHECK(bytes_of(rev).back() == -9);
    // A struct entry at a negative displacement.
    const std::vector<std::int64_t> sl{2, 1}, sd{-16, 0};
    const std::vector<const layout*> kids{&double_form, &int_form};
    const std::vector<std::int64_t> ext{8, 4};
    CHECK(shunt::make_struct(sl, sd, kids, ext) == layout{{}, {{-16, 20}}});
}

TEST_CASE("empty and zero counts pack nothing") {
    const layout empty{};
    CHECK(shunt::make_contiguous(0, int_form, 4) == empty);
    CHECK(shunt::make_hvector(0, 2, 8, int_form, 4) == empty);
    CHECK(shunt::make_hvector(3, 0, 8, int_form, 4) == empty);
    CHECK(shunt::make_contiguous(5, empty, 0) == empty);
    const std::vector<std::int64_t> none;
    CHECK(shunt::make_hindexed(none, none, int_form, 4) == empty);
    const std::vector<std::int64_t> zeros{0, 0}, displs{0, 8};
    CHECK(shunt::make_hindexed(zeros, displs, int_form, 4) == empty);
    const std::vector<const layout*> kids{&int_form, &empty};
    const std::vector<std::int64_t> lens{0, 3}, ext{4, 0};
    CHECK(shunt::make_struct(lens, displs, kids, ext) == empty);
    const std::vector<std::int64_t> sizes{4, 4}, subsizes{0, 2}, starts{0, 0};
    CHECK(shunt::make_subarray(sizes, subsizes, starts, true, int_form, 4) == empty);
    CHECK(empty.size() == 0);
    CHECK(empty.empty());
    CHECK(shunt::flatten(empty).empty());
    // A struct whose only live entry keeps its strided structure (no flattening).
    const std::vector<const layout*> one{&empty, &int_form};
    const std::vector<std::int64_t> l1{5, 1000000}, d1{0, 64}, e1{0, 8};
    CHECK(shunt::make_struct(l1, d1, one, e1) == layout{{{1000000, 8}}, {{64, 4}}});
}

TEST_CASE("overflow of 64-bit offsets throws unsupported") {
    const std::int64_t big = std::numeric_limits<std::int64_t>::max() / 2 + 1;
    CHECK_THROWS_AS(shunt::shift(layout{{}, {{8, 4}}}, std::numeric_limits<std::int64_t>::max()), shunt::unsupported);
    CHECK_THROWS_AS(shunt::shift(layout{{}, {{-8, 4}}}, std::numeric_limits<std::int64_t>::min()), shunt::unsupported);
    const std::vector<std::int64_t> sizes{4, big}, subsizes{2, 1}, starts{3, 0};
    CHECK_THROWS_AS(shunt::make_subarray(sizes, subsizes, starts, true, int_form, 4), shunt::unsupported);
    const std::vector<std::int64_t> lens{1, 3}, displs{0, big};
    const std::vector<const layout*> kids{&int_form, &int_form};
    const std::vector<std::int64_t> ext{4, big};
    CHECK_THROWS_AS(shunt::make_struct(lens, displs, kids, ext), shunt::unsupported);
    // Folding a dense dimension into one block multiplies lengths.
    CHECK_THROWS_AS(shunt::simplify({{{big, 1 << 20}}, {{0, 1 << 20}}}), shunt::unsupported);
    const std::vector<shunt::darray_dim> dd{{big, shunt::distribution::none, 0, 1}};
    CHECK_THROWS_AS(shunt::make_darray(0, dd, true, int_form, 1 << 20), shunt::unsupported);
}

// Regression: repeat()/make_hvector once accepted dimensions whose span overflows int64
// (make_hvector(4, 1, 2^62, byte, 1): the last element sits at 3 * 2^62).
TEST_CASE("overflow: a strided span past 2^63 throws unsupported") {
    CHECK_THROWS_AS(shunt::make_hvector(4, 1, std::int64_t{1} << 62, byte_form, 1), shunt::unsupported);
}

TEST_CASE("flatten caps the number of blocks") {
    const layout l{{{1000, 16}, {1000, 4}}, {{0, 1}}};
    CHECK(shunt::flatten(l, 1000000).size() == 1000000);
    CHECK_THROWS_AS(shunt::flatten(l, 999999), shunt::unsupported);
    const layout huge{{{1 << 20, 64}, {1 << 20, 2}}, {{0, 1}}};
    CHECK_THROWS_AS(shunt::flatten(huge), shunt::unsupported);
    // A struct that would have to flatten too much is left to the library.
    // Two children of just over half the cap each.
    const auto half = static_cast<std::int64_t>(shunt::max_flat_blocks / 2 + 1);
    const layout strided{{{half, 2}}, {{0, 1}}};
    const std::vector<std::int64_t> lens{1, 1}, displs{0, 4 * half};
    const std::vector<const layout*> kids{&strided, &strided};
    const std::vector<std::int64_t> ext{2 * half, 2 * half};
    CHECK_THROWS_AS(shunt::make_struct(lens, displs, kids, ext), shunt::unsupported);
    // ...but a uniform hindexed of the same child stays strided.
    CHECK_NOTHROW(shunt::make_hindexed(lens, displs, strided, std::int64_t{1} << 22));
}

TEST_CASE("64-bit offsets and sizes beyond 4 GiB, without allocating") {
    const layout far = shunt::make_hvector(2, 1, 5 * gib, byte_form, 1);
    CHECK(far == layout{{{2, 5 * gib}}, {{0, 1}}});
    CHECK(shunt::flatten(far).back() == block{5 * gib, 1});
    // A 3 x 2^31 int array: row stride 8 GiB.
    const std::vector<std::int64_t> sizes{3, std::int64_t{1} << 31}, subsizes{2, 2},
        starts{1, (std::int64_t{1} << 31) - 2};
    const layout sub = shunt::make_subarray(sizes, subsizes, starts, true, int_form, 4);
    CHECK(sub == layout{{{2, 8 * gib}}, {{16 * gib - 8, 8}}});
    // Struct displacements beyond 4 GiB, and a size beyond 4 GiB.
    const std::vector<std::int64_t> lens{1, 1}, displs{0, 6 * gib};
    const std::vector<const layout*> kids{&int_form, &double_form};
    const std::vector<std::int64_t> ext{4, 8};
    CHECK(shunt::make_struct(lens, displs, kids, ext) == layout{{}, {{0, 4}, {6 * gib, 8}}});
    const layout big = shunt::make_contiguous(3 * gib, double_form, 8);
    CHECK(big == layout{{}, {{0, 24 * gib}}});
    CHECK(big.size() == 24 * gib);
    CHECK(shunt::shift(int_form, -7 * gib).blocks[0].offset == -7 * gib);
}

TEST_CASE("darray: block, cyclic and none distributions") {
    using shunt::distribution;
    // One dimension of 10 over 3 processes.
    auto one = [](std::int64_t rank, distribution d, std::int64_t darg) {
        const std::vector<shunt::darray_dim> dims{{10, d, darg, 3}};
        return bytes_of(shunt::make_darray(rank, dims, true, byte_form, 1));
    };
    CHECK(one(0, distribution::block, 0) == std::vector<std::int64_t>{0, 1, 2, 3});
    CHECK(one(2, distribution::block, 0) == std::vector<std::int64_t>{8, 9});
    CHECK(one(1, distribution::block, 5) == std::vector<std::int64_t>{5, 6, 7, 8, 9});
    CHECK(one(2, distribution::block, 5).empty());
    CHECK(one(1, distribution::cyclic, 0) == std::vector<std::int64_t>{1, 4, 7});
    CHECK(one(1, distribution::cyclic, 2) == std::vector<std::int64_t>{2, 3, 8, 9});
    CHECK(one(2, distribution::cyclic, 2) == std::vector<std::int64_t>{4, 5});
    // 2-D: rows none, columns block over 2 processes (row-major grid {1, 2}), C order.
    const std::vector<shunt::darray_dim> dims{{2, distribution::none, 0, 1}, {4, distribution::block, 0, 2}};
    CHECK(bytes_of(shunt::make_darray(1, dims, true, byte_form, 1)) == std::vector<std::int64_t>{2, 3, 6, 7});
    // Fortran order: dimension 0 is contiguous.
    CHECK(bytes_of(shunt::make_darray(1, dims, false, byte_form, 1)) == std::vector<std::int64_t>{4, 5, 6, 7});
}

TEST_CASE("shift, repeat and the size helpers") {
    const layout l{{{3, 16}}, {{0, 2}, {4, 2}}};
    CHECK(l.block_bytes() == 4);
    CHECK(l.size() == 12);
    CHECK_FALSE(l.is_contiguous());
    CHECK(shunt::shift(l, 5) == layout{{{3, 16}}, {{5, 2}, {9, 2}}});
    // repeat() simplifies: the two blocks 4 bytes apart become an inner dimension.
    CHECK(shunt::repeat(l, 2, 48) == layout{{{6, 16}, {2, 4}}, {{0, 2}}});
    CHECK(shunt::repeat(l, 2, 100) == layout{{{2, 100}, {3, 16}, {2, 4}}, {{0, 2}}});
    CHECK(bytes_of(l, 2, 100).size() == 24);
}

// Regression: the form was not canonical when blocks touch across iterations of a dimension.
// hvector(2, 1, 12) of T = blocks {0,4},{8,4} (extent 12) packs bytes 0-4, 8-16, 20-24, exactly as
// hindexed(byte, lengths {4,8,4}, displs {0,8,20}); they once gave dims[{2,12},{2,8}] blocks[{0,4}]
// and dims[] blocks[{0,4},{8,8},{20,4}].
TEST_CASE("canonical: blocks touching across iterations") {
    const layout t{{}, {{0, 4}, {8, 4}}};
    const layout a = shunt::make_hvector(2, 1, 12, t, 12);
    const std::vector<std::int64_t> lens{4, 8, 4}, displs{0, 8, 20};
    const layout b = shunt::make_hindexed(lens, displs, byte_form, 1);
    REQUIRE(bytes_of(a) == bytes_of(b));
    CHECK(a == b);
}

// Regression: flatten() of a layout that is not simplified and has a count-0 dimension never
// ended (the index wrapped past 0 and it pushed blocks until bad_alloc).
TEST_CASE("flatten of an unsimplified layout with a count-0 dimension is empty") {
    CHECK(shunt::flatten(layout{{{0, 8}, {3, 2}}, {{0, 1}}}).empty());
    CHECK(shunt::flatten(layout{{{3, 8}, {-1, 2}}, {{0, 1}}}).empty());
}

TEST_CASE("hindexed of a dense child: each entry is one block, so more bytes than max_flat_blocks decode") {
    // Irregular entries of 4 bytes each: 4 bytes per block, more bytes than the cap on blocks.
    const layout byte_form{{}, {{0, 1}}};
    const std::size_t n = shunt::max_flat_blocks / 4 + 100000;
    std::vector<std::int64_t> lens(n, 4), displs(n);
    std::int64_t at = 0;
    for (std::size_t i = 0; i < n; ++i) {
        displs[i] = at;
        at += 4 + 1 + static_cast<std::int64_t>(i % 3);  // gaps of 1 to 3 bytes: nothing merges
    }
    REQUIRE(n * 4 > shunt::max_flat_blocks);
    const layout l = shunt::make_hindexed(lens, displs, byte_form, 1);
    CHECK(l.blocks.size() + l.dims.size() > 0);
    CHECK(l.size() == static_cast<std::int64_t>(n * 4));
    CHECK(shunt::flatten(l).size() == n);
}
