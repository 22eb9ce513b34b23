// shunt/model/measure_device.hpp: measuring the cost model's device tables (copies between pinned
// host and device memory, the kernel launch, the device pack kernels) with the host tables'
// robust timing. Needs libshunt_gpu; used by shunt-measure.
#pragma once

#include <shunt/datatype/decode.hpp>
#include <shunt/errors.hpp>
#include <shunt/gpu/descriptor.hpp>
#include <shunt/gpu/launch.hpp>
#include <shunt/gpu/memory.hpp>
#include <shunt/gpu/pack.hpp>
#include <shunt/model/measure.hpp>
#include <shunt/model/model.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace shunt {

/// The direction of a device copy table: copy.h2d, copy.d2h or copy.d2d.
enum class device_copy : std::uint8_t { h2d, d2h, d2d };

inline std::string_view table_name(device_copy c) {
    return c == device_copy::h2d ? "copy.h2d" : c == device_copy::d2h ? "copy.d2h" : "copy.d2d";
}

/// Measures a device copy table at each size: gpu::copy between pinned (mapped) host memory and
/// device memory, or device to device, then a stream synchronisation, on the legacy default
/// stream of the current device. Throws shunt::unsupported without a device.
inline time_table measure_device_copy(device_copy c, std::span<const double> sizes, const timing_policy& p) {
    time_table t;
    for (double size : sizes) {
        const auto n = static_cast<std::size_t>(size);
        const auto src_kind = c == device_copy::h2d ? gpu::pool_kind::pinned : gpu::pool_kind::device;
        const auto dst_kind = c == device_copy::d2h ? gpu::pool_kind::pinned : gpu::pool_kind::device;
        const gpu::scoped_block src(gpu::pool_acquire(src_kind, n)), dst(gpu::pool_acquire(dst_kind, n));
        const auto e = time_call(
            [&] {
                gpu::copy(dst.b.ptr, src.b.ptr, n, nullptr);
                gpu::synchronize(nullptr);
            },
            p);
        t.set({size, e.value, e.spread});
    }
    return t;
}

/// Measures `launch` at each size: an empty kernel of `size` threads, launched and synchronised.
/// Throws shunt::unsupported without a device.
inline time_table measure_launch(std::span<const double> sizes, const timing_policy& p) {
    time_table t;
    for (double size : sizes) {
        const auto threads = static_cast<std::int64_t>(size);
        const auto e = time_call(
            [&] {
                gpu::launch_empty(threads, nullptr);
                gpu::synchronize(nullptr);
            },
            p);
        t.set({size, e.value, e.spread});
    }
    return t;
}

/// Measures pack.device.b<L> (`mapped` false) or pack.mapped.b<L> at each size: shunt's device
/// kernel packing the vector_type of that many packed bytes in `block_len`-byte blocks (the host
/// pack tables' family) from device memory into device memory, or into mapped pinned host memory,
/// then a stream synchronisation. Sizes are packed bytes. Throws shunt::unsupported without a
/// device.
inline time_table measure_device_pack(bool mapped, std::int64_t block_len, std::span<const double> sizes,
                                      const timing_policy& p) {
    time_table t;
    for (double size : sizes) {
        const vector_type vt(static_cast<std::int64_t>(size), block_len);
        const type_info info = decode(vt.get());
        const gpu::device_form form(gpu::flat_form(info.form, info.extent, 1));
        const auto span = static_cast<std::size_t>(vt.span()), packed = static_cast<std::size_t>(vt.packed());
        const gpu::scoped_block typed(gpu::pool_acquire(gpu::pool_kind::device, span));
        const gpu::scoped_block out(
            gpu::pool_acquire(mapped ? gpu::pool_kind::pinned : gpu::pool_kind::device, packed));
        {  // defined contents (the time does not depend on them)
            std::vector<std::byte> init(span);
            for (std::size_t i = 0; i < init.size(); ++i) init[i] = static_cast<std::byte>(i * 7);
            const gpu::scoped_block staging(gpu::pool_acquire(gpu::pool_kind::pinned, span));
            std::memcpy(staging.b.ptr, init.data(), span);
            gpu::copy(typed.b.ptr, staging.b.ptr, span, nullptr);
            gpu::synchronize(nullptr);
        }
        std::int64_t done = 0;
        const auto e = time_call(
            [&] {
                done = gpu::pack(form, typed.b.ptr, out.b.ptr, nullptr);
                gpu::synchronize(nullptr);
            },
            p);
        if (done != vt.packed())
            throw error("the device kernel packed " + std::to_string(done) + " of " + std::to_string(vt.packed()) +
                        " bytes");
        t.set({static_cast<double>(vt.packed()), e.value, e.spread});
    }
    return t;
}

}  // namespace shunt
