// tests/mpi/test_equivalence.cpp: datatypes built differently through MPI but moving the same bytes
// in the same order decode to equal canonical layouts; types that differ decode differently.
#include "../unit/layout_string.hpp"
#include "mpi_types.hpp"

#include <shunt/datatype/decode.hpp>

#include <doctest/doctest.h>
#include <mpi.h>

#include <vector>

using shunt::layout;
using shunt_test::owned_type;

namespace {

layout form_of(MPI_Datatype t) { return shunt::decode(t).form; }

/// The row-major process grid darray uses for `size` processes in 2-D.
void grid_2d(int size, int rank, int ps[2], int coords[2]) {
    ps[0] = ps[1] = 0;
    REQUIRE(MPI_Dims_create(size, 2, ps) == MPI_SUCCESS);
    coords[0] = rank / ps[1];
    coords[1] = rank % ps[1];
}

}  // namespace

TEST_CASE("3 rows of 2 ints from a 3x5 matrix, built thirteen ways") {
    const layout expect{{{3, 20}}, {{0, 8}}};
    std::vector<owned_type> ts(13);
    REQUIRE(MPI_Type_vector(3, 2, 5, MPI_INT, ts[0].out()) == MPI_SUCCESS);
    REQUIRE(MPI_Type_create_hvector(3, 2, 20, MPI_INT, ts[1].out()) == MPI_SUCCESS);
    const int sizes[2] = {3, 5}, subs[2] = {3, 2}, starts[2] = {0, 0};
    REQUIRE(MPI_Type_create_subarray(2, sizes, subs, starts, MPI_ORDER_C, MPI_INT, ts[2].out()) == MPI_SUCCESS);
    const int sizes_f[2] = {5, 3}, subs_f[2] = {2, 3};
    REQUIRE(MPI_Type_create_subarray(2, sizes_f, subs_f, starts, MPI_ORDER_FORTRAN, MPI_INT, ts[3].out()) ==
            MPI_SUCCESS);
    owned_type pair, row;
    REQUIRE(MPI_Type_contiguous(2, MPI_INT, pair.out()) == MPI_SUCCESS);
    REQUIRE(MPI_Type_create_resized(pair, 0, 20, row.out()) == MPI_SUCCESS);
    REQUIRE(MPI_Type_contiguous(3, row, ts[4].out()) == MPI_SUCCESS);
    const int lens[3] = {2, 2, 2}, idx[3] = {0, 5, 10};
    const MPI_Aint bytes[3] = {0, 20, 40};
    REQUIRE(MPI_Type_indexed(3, lens, idx, MPI_INT, ts[5].out()) == MPI_SUCCESS);
    REQUIRE(MPI_Type_create_hindexed(3, lens, bytes, MPI_INT, ts[6].out()) == MPI_SUCCESS);
    REQUIRE(MPI_Type_create_indexed_block(3, 2, idx, MPI_INT, ts[7].out()) == MPI_SUCCESS);
    REQUIRE(MPI_Type_create_hindexed_block(3, 2, bytes, MPI_INT, ts[8].out()) == MPI_SUCCESS);
    const MPI_Datatype ints[3] = {MPI_INT, MPI_INT, MPI_INT};
    REQUIRE(MPI_Type_create_struct(3, lens, bytes, ints, ts[9].out()) == MPI_SUCCESS);
    const int ones[3] = {1, 1, 1};
    const MPI_Datatype pairs[3] = {pair, MPI_2INT, pair};
    REQUIRE(MPI_Type_create_struct(3, ones, bytes, pairs, ts[10].out()) == MPI_SUCCESS);
    REQUIRE(MPI_Type_dup(ts[0], ts[11].out()) == MPI_SUCCESS);
    REQUIRE(MPI_Type_create_hvector(3, 1, 20, MPI_2INT, ts[12].out()) == MPI_SUCCESS);
    for (std::size_t i = 0; i < ts.size(); ++i) {
        CAPTURE(i);
        CHECK(form_of(ts[i]) == expect);
    }
}

TEST_CASE("a vector of vectors equals the 3-D subarray, with and without an offset") {
    owned_type rows, block, sub;
    REQUIRE(MPI_Type_vector(3, 2, 5, MPI_INT, rows.out()) == MPI_SUCCESS);
    REQUIRE(MPI_Type_create_hvector(2, 1, 120, rows, block.out()) == MPI_SUCCESS);
    const int sizes[3] = {2, 6, 5}, subs[3] = {2, 3, 2}, zero[3] = {0, 0, 0}, starts[3] = {0, 1, 3};
    REQUIRE(MPI_Type_create_subarray(3, sizes, subs, zero, MPI_ORDER_C, MPI_INT, sub.out()) == MPI_SUCCESS);
    CHECK(form_of(block) == form_of(sub));
    CHECK(form_of(sub) == layout{{{2, 120}, {3, 20}}, {{0, 8}}});
    // The offset start (0, 1, 3) is a displacement of 32 bytes on the same block.
    owned_type moved, sub_moved;
    const int one = 1;
    const MPI_Aint at = 32;
    REQUIRE(MPI_Type_create_hindexed(1, &one, &at, block, moved.out()) == MPI_SUCCESS);
    REQUIRE(MPI_Type_create_subarray(3, sizes, subs, starts, MPI_ORDER_C, MPI_INT, sub_moved.out()) == MPI_SUCCESS);
    CHECK(form_of(moved) == form_of(sub_moved));
    CHECK(form_of(moved) != form_of(block));
}

TEST_CASE("this rank's darray block equals the subarray it owns") {
    int size = 1, rank = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int ps[2], c[2];
    grid_2d(size, rank, ps, c);
    for (int order : {MPI_ORDER_C, MPI_ORDER_FORTRAN}) {
        CAPTURE(order);
        // A 2x3 block per process of a (2 ps0) x (3 ps1) array: block distribution with the
        // default block size, and cyclic with block size equal to it.
        const int gsizes[2] = {2 * ps[0], 3 * ps[1]}, subs[2] = {2, 3}, starts[2] = {2 * c[0], 3 * c[1]};
        const int block[2] = {MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_BLOCK};
        const int cyclic[2] = {MPI_DISTRIBUTE_CYCLIC, MPI_DISTRIBUTE_CYCLIC};
        const int dflt[2] = {MPI_DISTRIBUTE_DFLT_DARG, MPI_DISTRIBUTE_DFLT_DARG}, dargs[2] = {2, 3};
        owned_type d_block, d_cyclic, sub;
        REQUIRE(MPI_Type_create_darray(size, rank, 2, gsizes, block, dflt, ps, order, MPI_DOUBLE, d_block.out()) ==
                MPI_SUCCESS);
        REQUIRE(MPI_Type_create_darray(size, rank, 2, gsizes, cyclic, dargs, ps, order, MPI_DOUBLE, d_cyclic.out()) ==
                MPI_SUCCESS);
        REQUIRE(MPI_Type_create_subarray(2, gsizes, subs, starts, order, MPI_DOUBLE, sub.out()) == MPI_SUCCESS);
        CHECK(form_of(d_block) == form_of(sub));
        CHECK(form_of(d_cyclic) == form_of(sub));
        // An undistributed dimension is the whole dimension.
        const int none_block[2] = {MPI_DISTRIBUTE_NONE, MPI_DISTRIBUTE_BLOCK};
        const int ps_1d[2] = {1, size}, g2[2] = {3, 2 * size}, s2[2] = {3, 2}, st2[2] = {0, 2 * rank};
        owned_type d_none, sub_none;
        REQUIRE(MPI_Type_create_darray(size, rank, 2, g2, none_block, dflt, ps_1d, order, MPI_INT, d_none.out()) ==
                MPI_SUCCESS);
        REQUIRE(MPI_Type_create_subarray(2, g2, s2, st2, order, MPI_INT, sub_none.out()) == MPI_SUCCESS);
        CHECK(form_of(d_none) == form_of(sub_none));
    }
    if (size > 1) {  // another rank's block is a different layout
        const int gsizes[2] = {2 * ps[0], 3 * ps[1]};
        const int block[2] = {MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_BLOCK};
        const int dflt[2] = {MPI_DISTRIBUTE_DFLT_DARG, MPI_DISTRIBUTE_DFLT_DARG};
        owned_type mine, other;
        REQUIRE(MPI_Type_create_darray(size, rank, 2, gsizes, block, dflt, ps, MPI_ORDER_C, MPI_DOUBLE, mine.out()) ==
                MPI_SUCCESS);
        REQUIRE(MPI_Type_create_darray(size, (rank + 1) % size, 2, gsizes, block, dflt, ps, MPI_ORDER_C, MPI_DOUBLE,
                                       other.out()) == MPI_SUCCESS);
        CHECK(form_of(mine) != form_of(other));
    }
}

TEST_CASE("dense data is one block whatever the element type") {
    owned_type four_ints, two_doubles, bytes;
    REQUIRE(MPI_Type_contiguous(4, MPI_INT, four_ints.out()) == MPI_SUCCESS);
    REQUIRE(MPI_Type_contiguous(2, MPI_DOUBLE, two_doubles.out()) == MPI_SUCCESS);
    REQUIRE(MPI_Type_contiguous(16, MPI_BYTE, bytes.out()) == MPI_SUCCESS);
    const layout dense{{}, {{0, 16}}};
    CHECK(form_of(four_ints) == dense);
    CHECK(form_of(two_doubles) == dense);
    CHECK(form_of(bytes) == dense);
    CHECK(form_of(MPI_2INT) == form_of(MPI_DOUBLE));
    CHECK(form_of(MPI_FLOAT_INT) == form_of(MPI_2INT));
}

TEST_CASE("resizing changes the bounds, not the layout; dup changes neither") {
    owned_type v, r, d;
    REQUIRE(MPI_Type_vector(2, 1, 4, MPI_FLOAT, v.out()) == MPI_SUCCESS);
    REQUIRE(MPI_Type_create_resized(v, -4, 64, r.out()) == MPI_SUCCESS);
    REQUIRE(MPI_Type_dup(r, d.out()) == MPI_SUCCESS);
    const shunt::type_info a = shunt::decode(v), b = shunt::decode(r), c = shunt::decode(d);
    CHECK(a.form == b.form);
    CHECK(a.extent != b.extent);
    CHECK(b.lb == -4);
    CHECK(b.extent == 64);
    CHECK(c.form == b.form);
    CHECK(c.lb == b.lb);
    CHECK(c.extent == b.extent);
}

TEST_CASE("types that move other bytes, or the same bytes in another order, differ") {
    owned_type a, b, fwd, rev, c_order, f_order;
    REQUIRE(MPI_Type_vector(3, 2, 5, MPI_INT, a.out()) == MPI_SUCCESS);
    REQUIRE(MPI_Type_vector(3, 2, 6, MPI_INT, b.out()) == MPI_SUCCESS);
    CHECK(form_of(a) != form_of(b));
    const int ones[2] = {1, 1};
    const MPI_Aint up[2] = {0, 8}, down[2] = {8, 0};
    const MPI_Datatype ints[2] = {MPI_INT, MPI_INT};
    REQUIRE(MPI_Type_create_struct(2, ones, up, ints, fwd.out()) == MPI_SUCCESS);
    REQUIRE(MPI_Type_create_struct(2, ones, down, ints, rev.out()) == MPI_SUCCESS);
    CHECK(form_of(fwd) != form_of(rev));
    const int sizes[2] = {4, 6}, subs[2] = {2, 3}, starts[2] = {1, 1};
    REQUIRE(MPI_Type_create_subarray(2, sizes, subs, starts, MPI_ORDER_C, MPI_INT, c_order.out()) == MPI_SUCCESS);
    REQUIRE(MPI_Type_create_subarray(2, sizes, subs, starts, MPI_ORDER_FORTRAN, MPI_INT, f_order.out()) == MPI_SUCCESS);
    CHECK(form_of(c_order) != form_of(f_order));
    CHECK(form_of(MPI_SHORT_INT) != form_of(MPI_2INT));
}
