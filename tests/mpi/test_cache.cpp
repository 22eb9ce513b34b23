// tests/mpi/test_cache.cpp: type_cache lifetime (commit, free, dup), predefined types, remembered
// unsupported types, no leaked entries, and concurrent use from several threads.
#include "../unit/layout_string.hpp"
#include "mpi_types.hpp"

#include <shunt/datatype/cache.hpp>
#include <shunt/datatype/decode.hpp>

#include <doctest/doctest.h>
#include <mpi.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

using shunt::layout;
using shunt_test::owned_type;

namespace {

/// A type decode leaves to the library on every MPI: nested deeper than shunt decodes.
owned_type too_deep() {
    owned_type t;
    REQUIRE(MPI_Type_contiguous(2, MPI_INT, t.out()) == MPI_SUCCESS);
    for (int level = 0; level < shunt::max_decode_depth + 4; ++level) {
        owned_type next;
        REQUIRE(MPI_Type_contiguous(1, t, next.out()) == MPI_SUCCESS);
        t = std::move(next);
    }
    return t;
}

}  // namespace

TEST_CASE("commit makes a type known, free forgets it") {
    shunt::type_cache cache;
    owned_type t;
    REQUIRE(MPI_Type_vector(4, 3, 7, MPI_DOUBLE, t.out()) == MPI_SUCCESS);
    CHECK(cache.find(t) == nullptr);  // not committed yet
    CHECK(cache.size() == 0);
    t.commit();
    CHECK(cache.find(t) == nullptr);  // committed behind the cache's back
    cache.on_commit(t);
    CHECK(cache.size() == 1);
    const auto info = cache.find(t);
    REQUIRE(info != nullptr);
    CHECK(info->form == layout{{{4, 56}}, {{0, 24}}});
    CHECK(info->size == 96);
    CHECK(info->extent == shunt::decode(t).extent);
    CHECK(cache.find(t) == info);  // the same entry, not a new decode
    cache.on_free(t);
    CHECK(cache.find(t) == nullptr);
    CHECK(cache.size() == 0);
    CHECK(info->size == 96);  // a caller's reference outlives the entry
}

TEST_CASE("committing again decodes again (the library may reuse a handle value)") {
    shunt::type_cache cache;
    owned_type t;
    REQUIRE(MPI_Type_contiguous(5, MPI_INT, t.out()) == MPI_SUCCESS);
    t.commit();
    cache.on_commit(t);
    const auto first = cache.find(t);
    cache.on_commit(t);
    const auto second = cache.find(t);
    REQUIRE(first != nullptr);
    REQUIRE(second != nullptr);
    CHECK(first != second);
    CHECK(first->form == second->form);
    CHECK(cache.size() == 1);
}

TEST_CASE("a dup of a committed or predefined type shares its entry; of an uncommitted one, nothing") {
    shunt::type_cache cache;
    owned_type t, committed_dup, loose, loose_dup, int_dup;
    REQUIRE(MPI_Type_vector(2, 1, 3, MPI_INT, t.out()) == MPI_SUCCESS);
    t.commit();
    cache.on_commit(t);
    REQUIRE(MPI_Type_dup(t, committed_dup.out()) == MPI_SUCCESS);
    cache.on_dup(t, committed_dup);
    CHECK(cache.find(committed_dup) == cache.find(t));
    REQUIRE(cache.find(committed_dup) != nullptr);

    REQUIRE(MPI_Type_vector(2, 1, 3, MPI_SHORT, loose.out()) == MPI_SUCCESS);
    REQUIRE(MPI_Type_dup(loose, loose_dup.out()) == MPI_SUCCESS);
    cache.on_dup(loose, loose_dup);
    CHECK(cache.find(loose_dup) == nullptr);

    REQUIRE(MPI_Type_dup(MPI_INT, int_dup.out()) == MPI_SUCCESS);
    cache.on_dup(MPI_INT, int_dup);
    REQUIRE(cache.find(int_dup) != nullptr);
    CHECK(cache.find(int_dup) == cache.find(MPI_INT));
    CHECK(cache.find(int_dup)->form == layout{{}, {{0, 4}}});

    cache.on_free(committed_dup);
    CHECK(cache.find(t) != nullptr);  // freeing the dup leaves the original
    cache.on_free(t);
    cache.on_free(int_dup);
    CHECK(cache.size() == 1);  // MPI_INT stays
}

TEST_CASE("predefined types are decoded on first use and kept") {
    shunt::type_cache cache;
    const auto d = cache.find(MPI_DOUBLE);
    REQUIRE(d != nullptr);
    CHECK(d->form == layout{{}, {{0, 8}}});
    CHECK(cache.size() == 1);
    CHECK(cache.find(MPI_DOUBLE) == d);
    CHECK(cache.size() == 1);
    const auto pair = cache.find(MPI_SHORT_INT);
    REQUIRE(pair != nullptr);
    CHECK(pair->form == layout{{}, {{0, 2}, {4, 4}}});
    CHECK(pair->extent == 8);
    CHECK(cache.size() == 2);
    CHECK(cache.find(MPI_DATATYPE_NULL) == nullptr);
    cache.on_commit(MPI_DATATYPE_NULL);
    cache.on_free(MPI_DATATYPE_NULL);
    cache.on_dup(MPI_DATATYPE_NULL, MPI_DATATYPE_NULL);
    CHECK(cache.size() == 2);
}

TEST_CASE("an unsupported type is remembered as unsupported, and found as nullptr") {
    shunt::type_cache cache;
    owned_type deep = too_deep();
    deep.commit();
    CHECK_NOTHROW(cache.on_commit(deep));
    CHECK(cache.size() == 1);
    CHECK(cache.find(deep) == nullptr);
    owned_type dup;
    REQUIRE(MPI_Type_dup(deep, dup.out()) == MPI_SUCCESS);
    CHECK_NOTHROW(cache.on_dup(deep, dup));
    CHECK(cache.size() == 2);
    CHECK(cache.find(dup) == nullptr);
    cache.on_free(dup);
    cache.on_free(deep);
    CHECK(cache.size() == 0);
}

TEST_CASE("a thousand commit / dup / free rounds leave no entries behind") {
    shunt::type_cache cache;
    (void)cache.find(MPI_INT);
    const std::size_t baseline = cache.size();
    for (int i = 0; i < 1000; ++i) {
        owned_type t, d;
        const int lens[2] = {1 + i % 3, 2};
        const int displs[2] = {0, 5 + i % 7};
        REQUIRE(MPI_Type_indexed(2, lens, displs, MPI_INT, t.out()) == MPI_SUCCESS);
        t.commit();
        cache.on_commit(t);
        REQUIRE(MPI_Type_dup(t, d.out()) == MPI_SUCCESS);
        cache.on_dup(t, d);
        REQUIRE(cache.find(d) != nullptr);
        CHECK(cache.find(d)->size == 4 * (lens[0] + lens[1]));
        cache.on_free(d);
        d.reset();
        cache.on_free(t);
        t.reset();
    }
    CHECK(cache.size() == baseline);
}

TEST_CASE("concurrent commits, finds, dups and frees from several threads") {
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    shunt::type_cache cache;
    constexpr int threads = 4, rounds = 200;
    // Types made up front by this thread, so that without MPI_THREAD_MULTIPLE the workers only
    // exercise the cache's locking (finds of known entries) and make no MPI call.
    std::vector<owned_type> shared(8);
    for (std::size_t k = 0; k < shared.size(); ++k) {
        REQUIRE(MPI_Type_vector(static_cast<int>(k) + 2, 1, 2, MPI_INT, shared[k].out()) == MPI_SUCCESS);
        shared[k].commit();
        cache.on_commit(shared[k]);
    }
    (void)cache.find(MPI_INT);
    const std::size_t baseline = cache.size();
    std::atomic<int> errors{0};
    std::vector<std::thread> pool;
    for (int w = 0; w < threads; ++w)
        pool.emplace_back([&, w] {
            for (int i = 0; i < rounds; ++i) {
                const auto& s = shared[static_cast<std::size_t>((i + w) % 8)];
                const auto info = cache.find(s);
                if (!info || info->size != 4 * ((i + w) % 8 + 2)) ++errors;
                if (provided < MPI_THREAD_MULTIPLE) continue;
                MPI_Datatype t = MPI_DATATYPE_NULL, d = MPI_DATATYPE_NULL;
                MPI_Type_contiguous(w + 1 + i % 5, MPI_DOUBLE, &t);
                MPI_Type_commit(&t);
                cache.on_commit(t);
                MPI_Type_dup(t, &d);
                cache.on_dup(t, d);
                const auto mine = cache.find(d);
                if (!mine || mine->size != 8 * (w + 1 + i % 5) || cache.find(MPI_INT) == nullptr) ++errors;
                cache.on_free(d);
                MPI_Type_free(&d);
                cache.on_free(t);
                MPI_Type_free(&t);
            }
        });
    for (auto& th : pool) th.join();
    CHECK(errors.load() == 0);
    CHECK(cache.size() == baseline);
    if (provided < MPI_THREAD_MULTIPLE) MESSAGE("no MPI_THREAD_MULTIPLE: the threads only ran concurrent finds");
}
