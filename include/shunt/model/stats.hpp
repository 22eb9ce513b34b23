// shunt/model/stats.hpp: robust statistics for timings taken on a noisy machine.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace shunt {

/// A robust summary of repeated timings: the estimate (a trimmed mean around the median), the
/// spread (median absolute deviation scaled to a standard deviation), and how many samples
/// survived outlier rejection.
struct robust_estimate {
    double value = 0;
    double spread = 0;
    std::size_t kept = 0;
};

/// Median of a sample (copied, so the caller's order is kept). 0 for an empty sample.
inline double median(std::vector<double> xs) {
    if (xs.empty()) return 0;
    const std::size_t mid = xs.size() / 2;
    std::nth_element(xs.begin(), xs.begin() + static_cast<std::ptrdiff_t>(mid), xs.end());
    double m = xs[mid];
    if (xs.size() % 2 == 0) m = (m + *std::max_element(xs.begin(), xs.begin() + static_cast<std::ptrdiff_t>(mid))) / 2;
    return m;
}

/// Summarises timings: samples further than 3 scaled MADs from the median (a preempted trial,
/// a page fault storm) are dropped, then the rest is averaged with 20% trimmed from each end.
/// Warm-up samples must already have been discarded by the caller.
inline robust_estimate robust_summary(const std::vector<double>& samples) {
    robust_estimate r;
    if (samples.empty()) return r;
    const double med = median(samples);
    std::vector<double> dev;
    dev.reserve(samples.size());
    for (double s : samples) dev.push_back(std::fabs(s - med));
    const double mad = 1.4826 * median(dev);
    std::vector<double> kept;
    for (double s : samples)
        if (mad == 0 || std::fabs(s - med) <= 3 * mad) kept.push_back(s);
    std::sort(kept.begin(), kept.end());
    const std::size_t trim = kept.size() / 5;
    double sum = 0;
    std::size_t n = 0;
    for (std::size_t i = trim; i + trim < kept.size(); ++i, ++n) sum += kept[i];
    r.value = n ? sum / static_cast<double>(n) : med;
    r.spread = mad;
    r.kept = kept.size();
    return r;
}

}  // namespace shunt
