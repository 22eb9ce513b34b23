// shunt/plan/sampling.hpp: which decided MPI_Pack / MPI_Unpack calls are timed or explore the other packer, so that the model's online refinement keeps learning.
#pragma once

#include <cstdint>

namespace shunt {

/// What a decided call does for the model's refinement.
enum class sampling : std::uint8_t {
    none,  ///< runs the decided method, untimed
    timed,  ///< runs the decided method, timed
    explore,  ///< runs the method not chosen, untimed (a burst's first calls)
    explore_timed,  ///< runs the method not chosen, timed (a burst's last call)
};

/// One call in `sample_period` (on average, drawn at random) of a direction is timed to refine
/// the model; one sample in `explore_period` starts a burst of `explore_burst` calls that run
/// the method the plan did not choose (the bytes are the same), so that the estimate of the
/// method not taken keeps learning too and a wrong choice can turn back. Only the burst's last
/// call is timed: a method that ran many calls ago starts with cold caches and predictors, and
/// one cold call would overstate its cost several times over. Gaps between samples are random,
/// not every n-th call: a program that alternates packing and unpacking, or cycles through a few
/// types, would otherwise have the same call sampled every time and the others never.
/// One sampler per thread and direction (not thread-safe); the calls between samples cost a
/// decrement.
class call_sampler {
public:
    static constexpr std::uint32_t sample_period = 256, explore_period = 4, explore_burst = 3;
    static_assert((explore_period & (explore_period - 1)) == 0, "a power of two: the draw masks random bits");

    /// The next decided call's part.
    sampling next() noexcept {
        if (countdown_ > 1) [[likely]] {
            --countdown_;
            return sampling::none;
        }
        return sample_now();
    }

    /// The sampling `s` of a call whose key was decided from its own measured times
    /// (`measured`): such a key keeps its method, a burst only times it.
    static sampling adjusted(sampling s, bool measured) noexcept {
        if (measured && s == sampling::explore) return sampling::none;
        if (measured && s == sampling::explore_timed) return sampling::timed;
        return s;
    }
    static bool explores(sampling s) noexcept { return s == sampling::explore || s == sampling::explore_timed; }
    static bool timed(sampling s) noexcept { return s == sampling::timed || s == sampling::explore_timed; }

private:
    sampling sample_now() noexcept {
        if (burst_left_ > 0) {
            countdown_ = --burst_left_ > 0 ? 1 : next_gap();
            return burst_left_ > 0 ? sampling::explore : sampling::explore_timed;
        }
        if (((next_random() >> 32) & (explore_period - 1)) != 0) {
            countdown_ = next_gap();
            return sampling::timed;
        }
        burst_left_ = explore_burst - 1;
        countdown_ = 1;
        return sampling::explore;
    }
    /// Calls to the next sample: uniform in [1, 2 sample_period - 1], sample_period on average.
    std::uint32_t next_gap() noexcept {
        return 1 + static_cast<std::uint32_t>((next_random() >> 8) % (2 * sample_period - 1));
    }
    /// The next number of the xorshift64 sequence.
    std::uint64_t next_random() noexcept {
        rng_ ^= rng_ << 13;
        rng_ ^= rng_ >> 7;
        rng_ ^= rng_ << 17;
        return rng_;
    }

    std::uint64_t rng_ = 0x9E3779B97F4A7C15ull;  // any nonzero seed
    std::uint32_t countdown_ = sample_period;  // calls to the next sampled one, this one included
    std::uint32_t burst_left_ = 0;
};

}  // namespace shunt
