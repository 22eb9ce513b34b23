// shunt/compress/error_feedback.hpp: error feedback for one compression point: the float32 residual
// (what compression dropped) added to the next input before it is compressed and updated after,
// reset when the point's shape changes, and saved and restored for checkpoints.
//
// Which calls form one point (communicator, position of the call in the iteration, count,
// datatype) is the planner's to decide; an error_feedback object is the state of one point.
#pragma once

#include <shunt/compress/common.hpp>
#include <shunt/compress/compress.hpp>
#include <shunt/compress/simd.hpp>
#include <shunt/errors.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

namespace shunt::compress {

/// The residual of one compression point. Not thread-safe: one caller at a time (a point belongs
/// to one call site of one thread). Every rank keeps its own; nothing here communicates.
class error_feedback {
public:
    error_feedback() = default;

    /// Readies the residual for a call of n elements of type `e`: kept when the shape is that of
    /// the previous call, else reset to zeros (a new shape is a new tensor).
    void prepare(std::int64_t n, element e) {
        if (n < 0) throw error("error_feedback: negative count " + std::to_string(n));
        if (n == count_ && e == type_) return;
        residual_.assign(static_cast<std::size_t>(n), 0.0f);
        count_ = n;
        type_ = e;
    }

    /// corrected[i] = in[i] + residual[i] (the residual readied by prepare(n, element_of<T>())).
    template <class T>
    void apply(const T* in, std::int64_t n, float* corrected) const {
        check(n);
        const float* r = residual_.data();
        for (std::int64_t i = 0; i < n; ++i) corrected[i] = detail::widen(in[i]) + r[i];
    }

    /// residual[i] = corrected[i] - decompressed[i]: what this call's compression dropped.
    void update(const float* corrected, const float* decompressed, std::int64_t n) {
        check(n);
        float* r = residual_.data();
        for (std::int64_t i = 0; i < n; ++i) r[i] = corrected[i] - decompressed[i];
    }

    /// One call with feedback: prepare, apply, compress the corrected input into `out`
    /// (compressed_bytes(p, n) bytes), decompress it and update the residual. Blocking. The same
    /// arguments as compress() (every rank the same p, n and step).
    template <class T>
    void compress(const params& p, const T* in, std::int64_t n, std::byte* out, std::uint64_t step = 0,
                  isa path = active_isa()) {
        check_count(p, n);
        prepare(n, element_of<T>());
        work_.resize(static_cast<std::size_t>(n));
        apply(in, n, work_.data());
        shunt::compress::compress(p, work_.data(), n, out, step, path);
        // The residual buffer receives the decompressed values, then becomes their difference.
        shunt::compress::decompress(p, out, n, residual_.data(), step, path);
        update(work_.data(), residual_.data(), n);
    }

    /// Forgets the residual (the next call starts from zeros, whatever its shape).
    void reset() {
        residual_.clear();
        work_.clear();
        count_ = -1;
    }

    /// The count of the last shape (-1 before the first call or after reset).
    std::int64_t count() const { return count_; }
    /// The element type of the last shape.
    element type() const { return type_; }
    /// The residual (count() floats; empty before the first call).
    std::span<const float> residual() const { return residual_; }

    /// The state as bytes, for a checkpoint: "shuntef1", a format version (32-bit), the element
    /// type (8-bit, then 3 zero bytes), the count (64-bit; -1: no state), the residual (count
    /// floats), and an FNV-1a 64-bit checksum of all that; host byte order.
    std::vector<std::byte> save() const {
        const std::int64_t n = count_ < 0 ? 0 : count_;
        std::vector<std::byte> b(header_bytes + 4 * static_cast<std::size_t>(n) + 8);
        std::memcpy(b.data(), magic, 8);
        const std::uint32_t version = format_version;
        std::memcpy(b.data() + 8, &version, 4);
        b[12] = static_cast<std::byte>(type_);
        std::memcpy(b.data() + 16, &count_, 8);
        if (n > 0) std::memcpy(b.data() + header_bytes, residual_.data(), 4 * static_cast<std::size_t>(n));
        const std::uint64_t sum = checksum(b.data(), b.size() - 8);
        std::memcpy(b.data() + b.size() - 8, &sum, 8);
        return b;
    }

    /// Restores what save() wrote. Throws shunt::error, naming what is wrong, for anything else
    /// (truncated, another format or version, a count that does not match the size, a bad
    /// checksum); the state is unchanged then.
    void restore(std::span<const std::byte> b) {
        if (b.size() < header_bytes + 8)
            throw error("error_feedback: checkpoint truncated (" + std::to_string(b.size()) + " bytes)");
        if (std::memcmp(b.data(), magic, 8) != 0) throw error("error_feedback: not an error feedback checkpoint");
        std::uint32_t version;
        std::memcpy(&version, b.data() + 8, 4);
        if (version != format_version)
            throw error("error_feedback: checkpoint format " + std::to_string(version) + ", this shunt reads " +
                        std::to_string(format_version));
        const auto e = static_cast<std::uint8_t>(b[12]);
        if (e > static_cast<std::uint8_t>(element::bf16))
            throw error("error_feedback: unknown element type " + std::to_string(e));
        std::int64_t n;
        std::memcpy(&n, b.data() + 16, 8);
        const std::size_t payload = b.size() - header_bytes - 8;
        if (n < -1 || (n >= 0 && payload != 4 * static_cast<std::uint64_t>(n)) || (n < 0 && payload != 0))
            throw error("error_feedback: checkpoint of " + std::to_string(b.size()) + " bytes cannot hold a count of " +
                        std::to_string(n));
        std::uint64_t sum;
        std::memcpy(&sum, b.data() + b.size() - 8, 8);
        if (sum != checksum(b.data(), b.size() - 8))
            throw error("error_feedback: checkpoint checksum mismatch (corrupt)");
        std::vector<float> r(static_cast<std::size_t>(n < 0 ? 0 : n));
        if (n > 0) std::memcpy(r.data(), b.data() + header_bytes, payload);
        residual_ = std::move(r);
        work_.clear();
        count_ = n;
        type_ = static_cast<element>(e);
    }

private:
    static constexpr char magic[9] = "shuntef1";
    static constexpr std::uint32_t format_version = 1;
    static constexpr std::size_t header_bytes = 24;

    static std::uint64_t checksum(const std::byte* p, std::size_t n) {
        std::uint64_t h = 0xcbf29ce484222325ull;
        for (std::size_t i = 0; i < n; ++i) h = (h ^ static_cast<std::uint8_t>(p[i])) * 0x100000001b3ull;
        return h;
    }
    void check(std::int64_t n) const {
        if (n != count_)
            throw error("error_feedback: call of " + std::to_string(n) + " elements, prepared for " +
                        std::to_string(count_));
    }

    std::vector<float> residual_, work_;
    std::int64_t count_ = -1;
    element type_ = element::f32;
};

}  // namespace shunt::compress
