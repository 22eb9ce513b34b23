// tests/unit/interpose/test_gate.cpp: the fast paths' gate word (interpose/gate.hpp): what a kept call records, and when a check of it fails.
#include <doctest/doctest.h>

#include "gate.hpp"

using shunt::detail::fast_gate;

namespace {

/// A kept call's check as the shims make it (every blocker stops it) and as an executor does.
bool shim_repeats(std::uint64_t kept) { return kept == fast_gate::now(); }
bool executor_repeats(std::uint64_t kept) { return kept == fast_gate::for_executor(); }
bool collective_shim_repeats(std::uint64_t kept) { return kept == fast_gate::for_collective_shims(); }

}  // namespace

TEST_CASE("nothing is kept before MPI runs; once it runs, a kept call repeats until the epoch advances") {
    const std::uint64_t before = fast_gate::kept();
    CHECK_FALSE(shim_repeats(before));
    CHECK_FALSE(executor_repeats(before));
    fast_gate::unblock(fast_gate::not_running);
    CHECK_FALSE(shim_repeats(before));  // kept while blocked: stale for good
    CHECK_FALSE(executor_repeats(before));
    const std::uint64_t k = fast_gate::kept();
    CHECK(shim_repeats(k));
    CHECK(executor_repeats(k));
    fast_gate::advance();  // a datatype committed, say
    CHECK_FALSE(shim_repeats(k));
    CHECK_FALSE(executor_repeats(k));
    const std::uint64_t k2 = fast_gate::kept();
    CHECK(shim_repeats(k2));
    fast_gate::block(fast_gate::not_running);  // MPI_Finalize
    CHECK_FALSE(shim_repeats(k2));
    CHECK_FALSE(executor_repeats(k2));
    fast_gate::unblock(fast_gate::not_running);
    CHECK(shim_repeats(k2));
}

TEST_CASE("shunt's requests stop the point-to-point shims, counting every shim; executors go on") {
    fast_gate::unblock(fast_gate::not_running);
    const std::uint64_t k = fast_gate::kept();
    for (const fast_gate::blocker b : {fast_gate::requests, fast_gate::counting}) {
        fast_gate::block(b);
        CHECK_FALSE(shim_repeats(k));
        CHECK(executor_repeats(k));
        CHECK(collective_shim_repeats(k) == (b == fast_gate::requests));  // counting stops them too
        CHECK(fast_gate::kept() == k);  // what is kept meanwhile holds once the blocker goes
        fast_gate::unblock(b);
        CHECK(shim_repeats(k));
    }
}

TEST_CASE("a device in use stops every check, and nothing kept meanwhile repeats") {
    fast_gate::unblock(fast_gate::not_running);
    const std::uint64_t k = fast_gate::kept();
    fast_gate::block(fast_gate::device);
    CHECK_FALSE(shim_repeats(k));
    CHECK_FALSE(executor_repeats(k));
    const std::uint64_t during = fast_gate::kept();
    CHECK_FALSE(executor_repeats(during));
    CHECK_FALSE(shim_repeats(during));
    fast_gate::unblock(fast_gate::device);
    CHECK(shim_repeats(k));
    CHECK_FALSE(shim_repeats(during));
}
