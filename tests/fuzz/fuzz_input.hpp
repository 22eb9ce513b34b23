// tests/fuzz/fuzz_input.hpp: reads a fuzzer's input bytes as numbers, choices and text (a small
// stand-in for libFuzzer's FuzzedDataProvider, so the targets also build with gcc for the replays).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace shunt_fuzz {

/// Consumes the input from the front; past its end every read gives the smallest value.
class input {
public:
    input(const std::uint8_t* data, std::size_t size) : p_(data), end_(data + size) {}

    bool empty() const { return p_ == end_; }
    std::size_t left() const { return static_cast<std::size_t>(end_ - p_); }

    std::uint8_t byte() { return p_ == end_ ? 0 : *p_++; }
    bool flag() { return (byte() & 1) != 0; }

    /// A 64-bit value from the next 8 bytes (fewer at the end).
    std::uint64_t u64() {
        std::uint64_t v = 0;
        for (int i = 0; i < 8; ++i) v = v << 8 | byte();
        return v;
    }

    /// A value in [lo, hi] (lo <= hi) from as few bytes as the range needs.
    std::int64_t range(std::int64_t lo, std::int64_t hi) {
        const std::uint64_t span = static_cast<std::uint64_t>(hi) - static_cast<std::uint64_t>(lo);
        std::uint64_t v = 0;
        for (std::uint64_t s = span; s != 0; s >>= 8) v = v << 8 | byte();
        if (span != UINT64_MAX) v %= span + 1;
        return static_cast<std::int64_t>(static_cast<std::uint64_t>(lo) + v);
    }

    /// Mostly a value in [lo, hi]; one time in `rare` any 64-bit value (edges included).
    std::int64_t mostly(std::int64_t lo, std::int64_t hi, int rare = 16) {
        if (range(0, rare - 1) != 0) return range(lo, hi);
        static constexpr std::int64_t edges[] = {
            INT64_MIN, INT64_MIN + 1,         -(std::int64_t{1} << 40), INT32_MIN,     -1,       0, 1,
            INT32_MAX, std::int64_t{1} << 31, std::int64_t{1} << 40,    INT64_MAX - 1, INT64_MAX};
        const std::uint8_t k = byte();
        if (k < 2 * std::size(edges)) return edges[k % std::size(edges)];
        return static_cast<std::int64_t>(u64());
    }

    /// Up to `max` bytes as text.
    std::string text(std::size_t max) {
        const std::size_t n = static_cast<std::size_t>(range(0, static_cast<std::int64_t>(max)));
        std::string s;
        for (std::size_t i = 0; i < n && p_ != end_; ++i) s += static_cast<char>(*p_++);
        return s;
    }
    /// The rest of the input as text.
    std::string rest() {
        std::string s(reinterpret_cast<const char*>(p_), left());
        p_ = end_;
        return s;
    }

private:
    const std::uint8_t* p_;
    const std::uint8_t* end_;
};

}  // namespace shunt_fuzz

/// Every fuzz target defines this (libFuzzer's entry point; replay_main.cpp calls it too).
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);
