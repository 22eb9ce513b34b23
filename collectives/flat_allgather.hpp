// shunt/collectives/flat_allgather.hpp: allgather and broadcast inside one group (ring, recursive doubling, binomial tree), the building blocks of every level.
#pragma once

#include <shunt/collectives/transport.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace shunt {

/// Broadcast of `bytes` bytes at `buf` from member `root` to every member of t.
///
/// Contract across members: every member calls it with the same root, bytes and options;
/// blocking. Up to opt.bcast_tree_bytes (or in groups of two) a binomial tree; above, the
/// root scatters one piece to each member and a ring allgather completes it, so no link
/// carries the message more than about twice.
template <transport T>
void flat_bcast(T& t, int root, std::byte* buf, std::int64_t bytes, const collective_options& opt = {}) {
    const int q = t.size();
    if (q <= 1 || bytes <= 0) return;
    const int me = t.rank(), rel = (me - root + q) % q;
    if (bytes <= opt.bcast_tree_bytes || q <= 2) {
        int mask = 1;
        while (mask < q) {
            if (rel & mask) {
                t.recv((rel - mask + root) % q, buf, bytes);
                break;
            }
            mask <<= 1;
        }
        for (mask >>= 1; mask > 0; mask >>= 1)
            if (rel + mask < q) t.send((rel + mask + root) % q, buf, bytes);
        return;
    }
    std::vector<std::int64_t> piece(static_cast<std::size_t>(q)), off(static_cast<std::size_t>(q) + 1, 0);
    for (int i = 0; i < q; ++i) {
        piece[static_cast<std::size_t>(i)] = bytes / q + (i < bytes % q ? 1 : 0);
        off[static_cast<std::size_t>(i) + 1] = off[static_cast<std::size_t>(i)] + piece[static_cast<std::size_t>(i)];
    }
    if (me == root) {
        std::vector<send_message> sends;
        for (int i = 0; i < q; ++i)
            if (i != root)
                sends.push_back({i, buf + off[static_cast<std::size_t>(i)], piece[static_cast<std::size_t>(i)]});
        t.exchange(sends, {});
    } else {
        t.recv(root, buf + off[static_cast<std::size_t>(me)], piece[static_cast<std::size_t>(me)]);
    }
    const int next = (me + 1) % q, prev = (me + q - 1) % q;
    for (int s = 0; s < q - 1; ++s) {
        const int sb = ((me - s) % q + q) % q, rb = ((me - s - 1) % q + q) % q;
        t.sendrecv(next, buf + off[static_cast<std::size_t>(sb)], piece[static_cast<std::size_t>(sb)], prev,
                   buf + off[static_cast<std::size_t>(rb)], piece[static_cast<std::size_t>(rb)]);
    }
}

/// Allgather among the members of t, in place.
///
/// Contract across members: every member calls it with the same `shares` (shares[i] bytes
/// from member i, laid out in member order in `buf`), algorithm and options; blocking. On
/// entry each member's own share is filled in; on return all are. Ring: size-1 steps;
/// recursive doubling (power-of-two groups, else ring): log2(size) steps. When only one member
/// has data it is a broadcast (flat_bcast).
template <transport T>
void flat_allgather(T& t, std::byte* buf, std::span<const std::int64_t> shares,
                    flat_algorithm algo = flat_algorithm::automatic, const collective_options& opt = {}) {
    const int q = t.size();
    if (q <= 1) return;
    const int me = t.rank();
    std::vector<std::int64_t> off(static_cast<std::size_t>(q) + 1, 0);
    int nonempty = 0, only = 0;
    for (int i = 0; i < q; ++i) {
        off[static_cast<std::size_t>(i) + 1] = off[static_cast<std::size_t>(i)] + shares[static_cast<std::size_t>(i)];
        if (shares[static_cast<std::size_t>(i)] > 0) {
            ++nonempty;
            only = i;
        }
    }
    if (nonempty == 0) return;
    if (nonempty == 1) {
        flat_bcast(t, only, buf + off[static_cast<std::size_t>(only)], shares[static_cast<std::size_t>(only)], opt);
        return;
    }
    auto at = [&](int i) { return buf + off[static_cast<std::size_t>(i)]; };
    auto bytes = [&](int lo, int hi) { return off[static_cast<std::size_t>(hi)] - off[static_cast<std::size_t>(lo)]; };
    if ((q & (q - 1)) == 0 && algo != flat_algorithm::ring) {
        // Recursive doubling: exchange the block of members gathered so far with the partner's.
        for (int mask = 1; mask < q; mask <<= 1) {
            const int partner = me ^ mask;
            const int mine_lo = me & ~(mask - 1), theirs_lo = partner & ~(mask - 1);
            t.sendrecv(partner, at(mine_lo), bytes(mine_lo, mine_lo + mask), partner, at(theirs_lo),
                       bytes(theirs_lo, theirs_lo + mask));
        }
        return;
    }
    const int next = (me + 1) % q, prev = (me + q - 1) % q;
    for (int s = 0; s < q - 1; ++s) {
        const int sb = ((me - s) % q + q) % q, rb = ((me - s - 1) % q + q) % q;
        t.sendrecv(next, at(sb), shares[static_cast<std::size_t>(sb)], prev, at(rb),
                   shares[static_cast<std::size_t>(rb)]);
    }
}

}  // namespace shunt
