// shunt/model/table.hpp: a measured time-versus-size table with log-log interpolation and a
// documented extrapolation, the unit every cost model decision is built from.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace shunt {

/// One measured point: `time` seconds (robust estimate, `spread` its scaled MAD) at `size` bytes.
struct table_point {
    double size = 0;
    double time = 0;
    double spread = 0;
    bool operator==(const table_point&) const = default;
};

/// Time as a function of size, from measured points.
///
/// Inside the measured range the time is interpolated linearly in log(size)-log(time) space,
/// which follows both latency-bound (flat) and bandwidth-bound (proportional) segments.
/// Below the smallest size the time is that of the smallest size (a latency floor). Above the
/// largest size the time grows linearly with the per-byte slope of the last segment (the
/// bandwidth the table ends on), never below the last time.
class time_table {
public:
    time_table() = default;
    explicit time_table(std::vector<table_point> points) : points_(std::move(points)) { normalise(); }

    /// Adds or replaces the point at `p.size`.
    void set(table_point p) {
        auto it = std::find_if(points_.begin(), points_.end(), [&](const table_point& q) { return q.size == p.size; });
        if (it != points_.end())
            *it = p;
        else
            points_.push_back(p);
        normalise();
    }

    const std::vector<table_point>& points() const { return points_; }
    bool empty() const { return points_.empty(); }
    bool covers(double size) const {
        return !points_.empty() && size >= points_.front().size && size <= points_.back().size;
    }

    /// Predicted seconds at `size` bytes; 0 for an empty table.
    double predict(double size) const {
        if (points_.empty()) return 0;
        const auto& f = points_.front();
        const auto& l = points_.back();
        if (size <= f.size || points_.size() == 1) {
            if (points_.size() == 1 && size > f.size) return f.time * size / f.size;
            return f.time;
        }
        if (size >= l.size) {
            const auto& p = points_[points_.size() - 2];
            const double slope = std::max(0.0, (l.time - p.time) / (l.size - p.size));
            // At the last size itself, its time: an infinite slope (a file's extreme times) times
            // zero would be NaN.
            return size == l.size ? l.time : l.time + (size - l.size) * slope;
        }
        auto hi = std::upper_bound(points_.begin(), points_.end(), size,
                                   [](double s, const table_point& q) { return s < q.size; });
        auto lo = hi - 1;
        if (lo->time <= 0 || hi->time <= 0) {  // log space needs positive times
            const double t = (size - lo->size) / (hi->size - lo->size);
            return lo->time + t * (hi->time - lo->time);
        }
        const double t = (std::log(size) - std::log(lo->size)) / (std::log(hi->size) - std::log(lo->size));
        return std::exp(std::log(lo->time) + t * (std::log(hi->time) - std::log(lo->time)));
    }

    bool operator==(const time_table&) const = default;

private:
    void normalise() {
        std::erase_if(points_, [](const table_point& p) {
            return !(p.size > 0) || !std::isfinite(p.size) || !(p.time >= 0) || !std::isfinite(p.time);
        });
        std::sort(points_.begin(), points_.end(),
                  [](const table_point& a, const table_point& b) { return a.size < b.size; });
        points_.erase(std::unique(points_.begin(), points_.end(),
                                  [](const table_point& a, const table_point& b) { return a.size == b.size; }),
                      points_.end());
    }

    std::vector<table_point> points_;
};

}  // namespace shunt
