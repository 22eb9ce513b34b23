// shunt/plan/call_pattern.hpp: the iteration of a training loop found online from the repeating pattern of its calls: each call's position in the pattern, and the gaps between calls.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace shunt {

/// Finds the period of a stream of call signatures and each call's position in it.
///
/// The pattern locks at the first call that completes two copies of some period p (the last 2p
/// signatures are one sequence of p twice), the smallest such p, up to `max_period`; that call
/// takes position p - 1 and the next ones 0, 1, ... (mod p); a third copy confirms it. A call that breaks the pattern
/// unlocks it; detection goes on from the history, so a new pattern locks as soon as it has
/// repeated. The signatures are what every rank of a call knows alike (the operation, the count,
/// the element type, the consent), so every rank locks, unlocks and numbers the calls alike.
/// It also keeps each call's start and end time (the caller's clock) for the gaps between calls.
/// Not thread-safe: one per communicator, used under its lock. Costs O(max_period) a call.
class call_pattern {
public:
    explicit call_pattern(std::size_t max_period = 1024)
        : max_(max_period < 1 ? 1 : max_period), sig_(2 * max_), start_(2 * max_), end_(2 * max_), run_(max_ + 1) {}

    /// Where a call stands.
    struct step {
        bool locked = false;  ///< the pattern is known
        bool fresh = false;  ///< this call locked it
        /// This call completed the first whole iteration after the lock (a third copy): the
        /// pattern is confirmed, plan now. A pattern that merely looked periodic for a while (the
        /// first two calls of A, A, B) breaks before this.
        bool confirmed = false;
        std::size_t position = 0;  ///< the call's position in the pattern, when locked
    };

    /// Records a call of signature `s` that starts at `now` (seconds); its end goes to ended().
    step next(std::uint64_t s, double now) {
        const std::uint64_t i = count_++;
        const std::size_t at = static_cast<std::size_t>(i % sig_.size());
        sig_[at] = s;
        start_[at] = now;
        end_[at] = now;
        // run_[p]: how many calls in a row ended with sig[k] == sig[k - p].
        const std::size_t reach = static_cast<std::size_t>(std::min<std::uint64_t>(i, max_));
        std::size_t found = 0;
        for (std::size_t p = 1; p <= reach; ++p) {
            run_[p] = sig_[(i - p) % sig_.size()] == s ? run_[p] + 1 : 0;
            if (found == 0 && run_[p] >= p) found = p;
        }
        step r;
        if (period_ != 0) {
            const std::size_t pos = static_cast<std::size_t>((i - lock_) % period_);
            if (sig_[(i - period_) % sig_.size()] == s) {
                r.locked = true;
                r.position = pos;
                r.confirmed = i == lock_ + period_ - 1;
                return r;
            }
            period_ = 0;  // broken: look again below
        }
        if (found != 0) {
            period_ = found;
            lock_ = i + 1;  // this call is position p - 1: the next one is 0
            r.locked = r.fresh = true;
            r.position = found - 1;
        }
        return r;
    }

    /// The end time of the last call given to next().
    void ended(double now) {
        if (count_ > 0) end_[static_cast<std::size_t>((count_ - 1) % sig_.size())] = now;
    }

    /// The period while locked, else 0.
    std::size_t period() const { return period_; }
    /// Calls seen.
    std::uint64_t calls() const { return count_; }

    /// While locked, the gap (seconds) before each position of the last complete iteration: from
    /// the end of the call before it to its start (0 where unknown). Position p - 1's is that of
    /// the call which locked the pattern or of its latest repetition.
    std::vector<double> gaps() const {
        std::vector<double> g(period_, 0.0);
        if (period_ == 0 || count_ < 2) return g;
        // The last `period_` calls, oldest first, mapped to their positions.
        const std::uint64_t last = count_ - 1;
        for (std::size_t k = 0; k < period_ && k < last; ++k) {
            const std::uint64_t i = last - k;
            const std::size_t pos = static_cast<std::size_t>((i + period_ - lock_ % period_) % period_);
            const double gap = start_[i % sig_.size()] - end_[(i - 1) % sig_.size()];
            g[pos] = gap > 0 ? gap : 0;
        }
        return g;
    }

    /// Forgets everything.
    void reset() {
        count_ = 0;
        period_ = 0;
        lock_ = 0;
        std::fill(run_.begin(), run_.end(), 0);
    }

private:
    std::size_t max_;
    std::vector<std::uint64_t> sig_;  ///< the last 2 * max_ signatures (a ring)
    std::vector<double> start_, end_;
    std::vector<std::size_t> run_;
    std::uint64_t count_ = 0;
    std::size_t period_ = 0;
    std::uint64_t lock_ = 0;  ///< the call index of position 0
};

}  // namespace shunt
