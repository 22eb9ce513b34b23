// shunt/collectives/flat_reduce_scatter.hpp: reduce-scatter inside one group (ring or recursive halving), the building block of every level.
#pragma once

#include <shunt/collectives/transport.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace shunt {

/// Reduce-scatter among the members of t, in place.
///
/// Contract across members: every member of t calls it with the same `shares` (shares[i]
/// elements for member i, laid out in member order in `buf`), the same reduction and the same
/// algorithm; blocking. On entry `buf` holds the member's whole contribution; on return its
/// own share holds the reduction over all members, the rest of `buf` is clobbered. The order
/// in which contributions are combined depends only on the member numbers (deterministic).
/// Ring: size-1 steps of one share each; recursive halving (power-of-two groups, else ring):
/// log2(size) steps. Both move sum(shares) - shares[rank] elements out of each member.
template <transport T>
void flat_reduce_scatter(T& t, std::byte* buf, std::span<const std::int64_t> shares,
                         const typename T::reduction_type& red, flat_algorithm algo = flat_algorithm::automatic) {
    const int q = t.size();
    if (q <= 1) return;
    const int me = t.rank();
    const std::int64_t es = red.element_size();
    std::vector<std::int64_t> off(static_cast<std::size_t>(q) + 1, 0);
    for (int i = 0; i < q; ++i)
        off[static_cast<std::size_t>(i) + 1] = off[static_cast<std::size_t>(i)] + shares[static_cast<std::size_t>(i)];
    auto at = [&](int i) { return buf + off[static_cast<std::size_t>(i)] * es; };
    auto count = [&](int lo, int hi) { return off[static_cast<std::size_t>(hi)] - off[static_cast<std::size_t>(lo)]; };
    const bool pow2 = (q & (q - 1)) == 0;

    if (pow2 && algo != flat_algorithm::ring) {
        // Recursive halving: keep the half of the member range I belong to, send the other.
        std::int64_t most = 0;
        for (int lo = 0, hi = q, mask = q / 2; mask >= 1; mask /= 2) {
            int mid = lo + mask;
            if (me < mid)
                hi = mid;
            else
                lo = mid;
            most = std::max(most, count(lo, hi));
        }
        auto tmp = t.scratch(most * es);
        for (int lo = 0, hi = q, mask = q / 2; mask >= 1; mask /= 2) {
            const int partner = me ^ mask, mid = lo + mask;
            int keep_lo = lo, keep_hi = mid, send_lo = mid, send_hi = hi;
            if (me >= mid) {
                keep_lo = mid;
                keep_hi = hi;
                send_lo = lo;
                send_hi = mid;
            }
            const std::int64_t keep = count(keep_lo, keep_hi);
            t.sendrecv(partner, at(send_lo), count(send_lo, send_hi) * es, partner, tmp.data(), keep * es);
            t.reduce(red, tmp.data(), at(keep_lo), keep);
            lo = keep_lo;
            hi = keep_hi;
        }
        return;
    }

    // Ring: at step s send share (me-s-1), receive share (me-s-2) and fold it in; after q-1
    // steps share `me` has passed every member once, starting at member me+1.
    std::int64_t most = 0;
    for (int i = 0; i < q; ++i) most = std::max(most, shares[static_cast<std::size_t>(i)]);
    auto tmp = t.scratch(most * es);
    const int next = (me + 1) % q, prev = (me + q - 1) % q;
    for (int s = 0; s < q - 1; ++s) {
        const int sb = ((me - s - 1) % q + q) % q, rb = ((me - s - 2) % q + q) % q;
        t.sendrecv(next, at(sb), shares[static_cast<std::size_t>(sb)] * es, prev, tmp.data(),
                   shares[static_cast<std::size_t>(rb)] * es);
        t.reduce(red, tmp.data(), at(rb), shares[static_cast<std::size_t>(rb)]);
    }
}

}  // namespace shunt
