// tests/nccl/double_reduce.cpp: the NCCL double's reductions, element by element in rank order, in each type's
// own arithmetic (integers wrap; half and bfloat16 widen to float, combine, round to nearest even).
#include <cstring>
#include <type_traits>

#include "double_internal.hpp"

namespace shunt::test_double {

size_t type_size(ncclDataType_t t) {
    switch (t) {
        case ncclInt8:
        case ncclUint8:
        case ncclFloat8e4m3:
        case ncclFloat8e5m2: return 1;
        case ncclFloat16:
        case ncclBfloat16: return 2;
        case ncclInt32:
        case ncclUint32:
        case ncclFloat32: return 4;
        case ncclInt64:
        case ncclUint64:
        case ncclFloat64: return 8;
        default: return 0;
    }
}

bool is_fp8(ncclDataType_t t) { return t == ncclFloat8e4m3 || t == ncclFloat8e5m2; }

namespace {

uint32_t bits_of(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}
float float_of(uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

}  // namespace

uint16_t float_to_half(float f) {
    const uint32_t x = bits_of(f);
    const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
    const uint32_t a = x & 0x7fffffffu;
    if (a >= 0x7f800000u) return uint16_t(sign | (a > 0x7f800000u ? 0x7e00u : 0x7c00u));  // NaN, infinity
    if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // 65520 and above round to infinity
    if (a < 0x38800000u) {  // below 2^-14: a subnormal half (or zero)
        if (a < 0x33000000u) return sign;  // at most 2^-25: rounds to zero
        const uint32_t m = (a & 0x7fffffu) | 0x800000u;
        const int shift = 126 - int(a >> 23);  // 14..24: half subnormal = m * 2^(e-126)
        uint32_t q = m >> shift;
        const uint32_t rest = m & ((1u << shift) - 1), halfway = 1u << (shift - 1);
        if (rest > halfway || (rest == halfway && (q & 1u))) ++q;
        return uint16_t(sign | q);
    }
    const uint32_t r = a - (112u << 23);  // rebias the exponent from 127 to 15
    uint32_t q = r >> 13;
    const uint32_t rest = r & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (q & 1u))) ++q;  // a carry into the exponent is right
    return uint16_t(sign | q);
}

float half_to_float(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        const float v = float(m) * 0x1p-24f;  // exact
        return sign ? -v : v;
    }
    if (e == 31) return float_of(sign | 0x7f800000u | (m << 13));
    return float_of(sign | ((e + 112u) << 23) | (m << 13));
}

uint16_t float_to_bf16(float f) {
    const uint32_t x = bits_of(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);  // quiet NaN
    return uint16_t((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

float bf16_to_float(uint16_t b) { return float_of(uint32_t(b) << 16); }

namespace {

// Integer arithmetic: wraps (computed unsigned), avg divides the wrapped sum and truncates toward zero.
template <typename T>
struct int_arith {
    using value = T;
    using U = std::make_unsigned_t<T>;
    static T load(const void* p, size_t i) { return static_cast<const T*>(p)[i]; }
    static void store(void* p, size_t i, T v) { static_cast<T*>(p)[i] = v; }
    static T add(T a, T b) { return T(U(uint64_t(U(a)) + uint64_t(U(b)))); }
    static T mul(T a, T b) { return T(U(uint64_t(U(a)) * uint64_t(U(b)))); }
    static T max(T a, T b) { return a < b ? b : a; }
    static T min(T a, T b) { return b < a ? b : a; }
    static T div(T a, uint64_t n) {
        if constexpr (std::is_signed_v<T>)
            return T(int64_t(a) / int64_t(n));
        else
            return T(uint64_t(a) / n);
    }
};

template <typename T>
struct float_arith {
    using value = T;
    static T load(const void* p, size_t i) { return static_cast<const T*>(p)[i]; }
    static void store(void* p, size_t i, T v) { static_cast<T*>(p)[i] = v; }
    static T add(T a, T b) { return a + b; }
    static T mul(T a, T b) { return a * b; }
    static T max(T a, T b) { return a < b ? b : a; }
    static T min(T a, T b) { return b < a ? b : a; }
    static T div(T a, uint64_t n) { return a / T(n); }
};

// 16-bit floats: stored as bits, every step widened to float and rounded back.
template <uint16_t (*To)(float), float (*From)(uint16_t)>
struct half_arith {
    using value = uint16_t;
    static uint16_t load(const void* p, size_t i) { return static_cast<const uint16_t*>(p)[i]; }
    static void store(void* p, size_t i, uint16_t v) { static_cast<uint16_t*>(p)[i] = v; }
    static uint16_t add(uint16_t a, uint16_t b) { return To(From(a) + From(b)); }
    static uint16_t mul(uint16_t a, uint16_t b) { return To(From(a) * From(b)); }
    static uint16_t max(uint16_t a, uint16_t b) { return From(a) < From(b) ? b : a; }
    static uint16_t min(uint16_t a, uint16_t b) { return From(b) < From(a) ? b : a; }
    static uint16_t div(uint16_t a, uint64_t n) { return To(From(a) / float(n)); }
};

template <typename A, typename Step>
void fold(void* dst, const void* const* srcs, int n, size_t count, Step step) {
    for (size_t i = 0; i < count; ++i) {
        typename A::value acc = A::load(srcs[0], i);
        for (int r = 1; r < n; ++r) acc = step(acc, A::load(srcs[r], i));
        A::store(dst, i, acc);
    }
}

template <typename A>
void reduce_as(const red_spec& spec, void* dst, const void* const* srcs, int n, size_t count) {
    using V = typename A::value;
    switch (spec.kind) {
        case red_kind::sum: return fold<A>(dst, srcs, n, count, A::add);
        case red_kind::prod: return fold<A>(dst, srcs, n, count, A::mul);
        case red_kind::max: return fold<A>(dst, srcs, n, count, A::max);
        case red_kind::min: return fold<A>(dst, srcs, n, count, A::min);
        case red_kind::sum_post_div:
            for (size_t i = 0; i < count; ++i) {
                V acc = A::load(srcs[0], i);
                for (int r = 1; r < n; ++r) acc = A::add(acc, A::load(srcs[r], i));
                A::store(dst, i, A::div(acc, spec.divisor));
            }
            return;
        case red_kind::premul_sum: {
            V s;
            std::memcpy(&s, spec.scalar_ptr != nullptr ? spec.scalar_ptr : spec.scalar, sizeof s);
            for (size_t i = 0; i < count; ++i) {
                V acc = A::mul(A::load(srcs[0], i), s);
                for (int r = 1; r < n; ++r) acc = A::add(acc, A::mul(A::load(srcs[r], i), s));
                A::store(dst, i, acc);
            }
            return;
        }
    }
}

}  // namespace

void reduce(ncclDataType_t t, const red_spec& spec, void* dst, const void* const* srcs, int n, size_t count) {
    switch (t) {
        case ncclInt8: return reduce_as<int_arith<int8_t>>(spec, dst, srcs, n, count);
        case ncclUint8: return reduce_as<int_arith<uint8_t>>(spec, dst, srcs, n, count);
        case ncclInt32: return reduce_as<int_arith<int32_t>>(spec, dst, srcs, n, count);
        case ncclUint32: return reduce_as<int_arith<uint32_t>>(spec, dst, srcs, n, count);
        case ncclInt64: return reduce_as<int_arith<int64_t>>(spec, dst, srcs, n, count);
        case ncclUint64: return reduce_as<int_arith<uint64_t>>(spec, dst, srcs, n, count);
        case ncclFloat16: return reduce_as<half_arith<float_to_half, half_to_float>>(spec, dst, srcs, n, count);
        case ncclBfloat16: return reduce_as<half_arith<float_to_bf16, bf16_to_float>>(spec, dst, srcs, n, count);
        case ncclFloat32: return reduce_as<float_arith<float>>(spec, dst, srcs, n, count);
        case ncclFloat64: return reduce_as<float_arith<double>>(spec, dst, srcs, n, count);
        default: return;  // fp8: refused before it gets here
    }
}

}  // namespace shunt::test_double
