// tests/mpi/compress/test_summable.cpp: allreduce of the summable compressed forms on real ranks, the
// MPI library as oracle: FP16 and BF16 vectors reduced with make_mpi_op (also through a derived
// datatype of several halves), random-k's floats with MPI_SUM, every rank keeping the same indices;
// against the library's MPI_Allreduce of the uncompressed values (integers: every sum exact).
#include <doctest/doctest.h>

#include <shunt/compress/compress.hpp>
#include <shunt/compress/mpi_op.hpp>

#include <mpi.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace sc = shunt::compress;

namespace {

int rank_of() {
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

/// Small integers: exact in binary16 and bfloat16, and so are their sums over a few ranks.
std::vector<float> integers(std::int64_t n, int rank) {
    std::vector<float> v(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i)
        v[static_cast<std::size_t>(i)] = static_cast<float>((i * 7 + rank * 13) % 31 - 15);
    return v;
}

}  // namespace

TEST_CASE("summable forms: FP16 and BF16 allreduce through make_mpi_op equals the library's sum") {
    const int rank = rank_of();
    for (const sc::method m : {sc::method::fp16, sc::method::bf16}) {
        for (const bool derived : {false, true}) {
            CAPTURE(sc::to_string(m));
            CAPTURE(derived);
            const std::int64_t n = 10004;  // 2501 elements of 4 halves
            const sc::params p = sc::defaults(m);
            const auto v = integers(n, rank);
            std::vector<std::byte> c(static_cast<std::size_t>(sc::compressed_bytes(p, n))), sum(c.size());
            sc::compress(p, v.data(), n, c.data());
            const sc::sum_form f = sc::summable(m);
            MPI_Op op = sc::make_mpi_op(f);
            MPI_Datatype type = sc::mpi_datatype(f);
            int count = static_cast<int>(n);
            if (derived) {
                MPI_Type_contiguous(4, MPI_UINT16_T, &type);
                MPI_Type_commit(&type);
                count = static_cast<int>(n / 4);
            }
            REQUIRE(MPI_Allreduce(c.data(), sum.data(), count, type, op, MPI_COMM_WORLD) == MPI_SUCCESS);
            if (derived) MPI_Type_free(&type);
            MPI_Op_free(&op);
            std::vector<float> got(static_cast<std::size_t>(n)), want(got.size());
            sc::decompress(p, sum.data(), n, got.data());
            MPI_Allreduce(v.data(), want.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            CHECK(got == want);
        }
    }
}

TEST_CASE("summable forms: random-k with a shared seed sums with MPI_SUM on MPI_FLOAT") {
    const int rank = rank_of();
    sc::params p = sc::defaults(sc::method::random_k);
    p.stride = 10;
    p.seed = 2024;  // the same on every rank
    const std::int64_t n = 100003, k = sc::kept(p, n);
    const auto v = integers(n, rank * 3 + 1);
    std::vector<float> c(static_cast<std::size_t>(k)), sum(c.size());
    sc::compress(p, v.data(), n, reinterpret_cast<std::byte*>(c.data()), 7);
    REQUIRE(MPI_Allreduce(c.data(), sum.data(), static_cast<int>(k), sc::mpi_datatype(sc::sum_form::f32),
                          sc::make_mpi_op(sc::sum_form::f32), MPI_COMM_WORLD) == MPI_SUCCESS);
    std::vector<float> got(static_cast<std::size_t>(n)), full(got.size());
    sc::decompress(p, reinterpret_cast<const std::byte*>(sum.data()), n, got.data(), 7);
    MPI_Allreduce(v.data(), full.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    std::vector<std::int64_t> idx(static_cast<std::size_t>(k));
    sc::random_k_indices(p, n, idx.data(), 7);
    // Every rank drew the same indices: rank 0's list, broadcast, equals this rank's.
    std::vector<std::int64_t> root = idx;
    MPI_Bcast(root.data(), static_cast<int>(k), MPI_INT64_T, 0, MPI_COMM_WORLD);
    CHECK(root == idx);
    std::vector<float> want(static_cast<std::size_t>(n), 0.0f);
    for (const auto j : idx) want[static_cast<std::size_t>(j)] = full[static_cast<std::size_t>(j)];
    CHECK(got == want);
}
