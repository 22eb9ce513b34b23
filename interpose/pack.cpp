// interpose/pack.cpp: MPI_Pack and MPI_Unpack: the kept call, the planner's decision and its sampling, shunt's host packer, device buffers, or the library.
#include "pack.hpp"

#include <shunt/errors.hpp>
#include <shunt/gpu/memory.hpp>
#include <shunt/gpu/pack.hpp>
#include <shunt/log.hpp>
#include <shunt/model/measure.hpp>
#include <shunt/pack/host.hpp>

#include "runtime.hpp"
#include "text.hpp"

#include <algorithm>
#include <cinttypes>
#include <climits>
#include <cstdio>
#include <exception>
#include <optional>
#include <string>

namespace shunt::detail {
namespace {

/// Communicators valid from MPI_Init to MPI_Finalize without asking the library.
bool always_valid(MPI_Comm comm) { return comm == MPI_COMM_WORLD || comm == MPI_COMM_SELF; }

bool on_device(gpu::memory_kind k) { return k == gpu::memory_kind::device || k == gpu::memory_kind::managed; }

using gpu::scoped_block;  // pool blocks released on every path

}  // namespace

// ---- entry points ----

int runtime::pack(const void* inbuf, int incount, MPI_Datatype datatype, void* outbuf, int outsize, int* position,
                  MPI_Comm comm) noexcept {
    count(shim::pack);
    return pack_.pack(inbuf, incount, datatype, outbuf, outsize, position, comm);
}

int runtime::unpack(const void* inbuf, int insize, int* position, void* outbuf, int outcount, MPI_Datatype datatype,
                    MPI_Comm comm) noexcept {
    count(shim::unpack);
    return pack_.unpack(inbuf, insize, position, outbuf, outcount, datatype, comm);
}

int runtime::pack_size(int incount, MPI_Datatype datatype, MPI_Comm comm, int* size) noexcept {
    count(shim::pack_size);
    return PMPI_Pack_size(incount, datatype, comm, size);
}

// ---- the executor ----

/// What prepare keeps of the thread's last settled call in one direction, keyed by the datatype
/// handle and count and valid while no datatype was committed, duplicated or freed (the memo's
/// generation: a new type at a reused handle does not match) and the model is unchanged: the
/// decoded type (held, so that the program's block list outlives a free), the decision, and
/// where shunt packs a non-dense layout the built program. A repeated call then skips the type
/// lookup, the planner's lock and hash, and building the program.
struct pack_executor::repeat_call {
    MPI_Datatype type{};
    int count = -1;  ///< -1: nothing kept
    std::uint64_t types = 0, generation = 0;
    std::shared_ptr<const type_info> info;
    std::int64_t bytes = 0, blocks = 0;
    std::atomic<std::uint64_t>* taken = nullptr;  ///< the planner's use count (SHUNT_REPORT)
    pass_reason why = pass_reason::none;
    bool decided = false, measured = false;
    std::optional<pack_program> program;
};

struct pack_executor::repeat_calls {
    repeat_call calls[2];  ///< pack, unpack
};

pack_executor::pack_executor(runtime& rt) noexcept : rt_(rt) {}

call_sampler& pack_executor::sampler(direction d) noexcept {
    thread_local call_sampler samplers[2];
    return samplers[d == direction::unpack ? 1 : 0];
}

pack_executor::repeat_call* pack_executor::kept_call(direction d) noexcept {
    repeat_calls* const repeats = repeats_.get();
    return repeats == nullptr ? nullptr : &repeats->calls[d == direction::unpack ? 1 : 0];
}

inline pass_reason pack_executor::prepare(direction d, MPI_Datatype type, int count, std::int64_t room,
                                          const type_info*& info, std::int64_t& bytes, pack_plan& plan,
                                          const pack_program*& program) noexcept {
    program = nullptr;
    if (const repeat_call* const kept = kept_call(d); kept != nullptr) [[likely]] {
        const repeat_call& r = *kept;
        if (r.type == type && r.count == count && r.types == rt_.memo().generation() &&
            r.generation == rt_.model().generation()) {
            info = r.info.get();
            bytes = r.bytes;
            if (bytes > room) return pass_reason::would_truncate;
            // The use count only feeds SHUNT_REPORT: without a report, no shared line is written.
            if (r.taken != nullptr && rt_.counting()) r.taken->fetch_add(1, std::memory_order_relaxed);
            // Field by field: plan comes default-initialised (not measuring), and rewriting its
            // measure_call would cost instructions on every repeated call.
            plan.bytes = bytes;
            plan.blocks = r.blocks;
            plan.decided = r.decided;
            plan.measured = r.measured;
            if (r.program) program = &*r.program;
            return r.why;
        }
    }
    return decide(d, type, count, room, info, bytes, plan, program);
}

pass_reason pack_executor::decide(direction d, MPI_Datatype type, int count, std::int64_t room, const type_info*& info,
                                  std::int64_t& bytes, pack_plan& plan, const pack_program*& program) noexcept {
    const shim s = d == direction::pack ? shim::pack : shim::unpack;
    try {
        // Both generations before the lookup: a commit or refinement meanwhile leaves the kept
        // call stale rather than current.
        const std::uint64_t types = rt_.memo().generation();
        const std::uint64_t generation = rt_.model().generation();
        repeat_call* const r = kept_call(d);
        std::shared_ptr<const type_info> held = rt_.memo().find_shared(type);
        info = held.get();
        if (info == nullptr) return pass_reason::unknown_type;
        if (__builtin_mul_overflow(static_cast<std::int64_t>(count), info->size, &bytes)) return pass_reason::too_large;
        if (bytes > room) return pass_reason::would_truncate;
        if (bytes == 0) return pass_reason::none;
        pass_reason why = pass_reason::none;
        std::atomic<std::uint64_t>* taken = nullptr;
        bool keep = !rt_.cfg().log.enabled(log_level::trace, log_category::decide);  // trace logs every call's decision
        // One contiguous run is one memcpy for shunt and for the library alike: nothing to decide
        // or measure, and shunt's copy skips the library's own per-call work.
        const bool dense = info->dense(count);
        if (rt_.cfg().pack != pack_choice::host && !dense) {
            bool is_new = false;
            planner::measure_call measure;
            const plan_decision decision =
                rt_.pack_planner().pack(*info, count, d == direction::unpack, &is_new, &taken,
                                        rt_.cfg().pack == pack_choice::model ? nullptr : &measure);
            plan = {bytes, decision.blocks, true, decision.measured, measure};
            // While the planner measures the key, it names this call's method, and nothing is kept.
            const bool host = measure.measuring ? decision.alternatives[measure.method].method == pack_method::host
                                                : decision.method() == pack_method::host;
            keep = keep && !measure.measuring && taken != nullptr;
            why = host ? pass_reason::none : pass_reason::planned;
            // Each distinct decision once at debug (SHUNT_LOG=decide), every call at trace.
            if (rt_.cfg().log.enabled(is_new ? log_level::debug : log_level::trace, log_category::decide)) {
                std::string alternatives;
                for (std::uint8_t i = 0; i < decision.count; ++i)
                    alternatives += format_text("%s%s %.3g us", i == 0 ? "" : ", ",
                                                std::string(to_string(decision.alternatives[i].method)).c_str(),
                                                decision.alternatives[i].predicted_s * 1e6);
                log_printf(is_new ? log_level::debug : log_level::trace, log_category::decide,
                           "%s of %d x %s (%" PRId64 " bytes in %" PRId64 " blocks): %s (predicted %s)",
                           shim_names[static_cast<std::size_t>(s)], count, handle_text(type).c_str(), bytes,
                           decision.blocks, host ? "shunt's host packer" : "the library", alternatives.c_str());
            }
        }
        if (r != nullptr) {
            r->count = -1;
            r->program.reset();
            if (keep) {
                r->type = type;
                r->types = types;
                r->generation = generation;
                r->info = std::move(held);
                r->bytes = bytes;
                r->blocks = plan.blocks;
                r->taken = taken;
                r->why = why;
                r->decided = plan.decided;
                r->measured = plan.measured;
                r->count = count;
                // A program that cannot be built (a size shunt refuses) is left to pack_host,
                // which fails the same way on this call and passes it to the library.
                if (why == pass_reason::none && !dense) try {
                        program = &r->program.emplace(info->form, info->extent, count, info->size);
                    } catch (...) {
                        r->count = -1;
                        program = nullptr;
                    }
            }
        }
        return why;
    } catch (...) {
        return rt_.plan_failure(s);
    }
}

template <class Pass, class Probe, class Move>
int pack_executor::transfer(direction d, MPI_Datatype type, int count, std::int64_t room, int* position, MPI_Comm comm,
                            Pass pass, Probe probe, Move move) noexcept {
    const shim s = d == direction::pack ? shim::pack : shim::unpack;
    const char* name = shim_names[static_cast<std::size_t>(s)];
    if (rt_.cfg().pack == pack_choice::library) return pass(pass_reason::forced);
    if (!always_valid(comm)) {
        // The null communicator and types shunt does not know go to the library whole, which
        // raises any error through the application's handler once: MPICH 4.3 and later return
        // MPI_SUCCESS from a call whose error went to a handler of the application's that
        // returned, so the probe below cannot tell them and would raise the error twice.
        if (comm == MPI_COMM_NULL) return pass(pass_reason::rejected);
        const type_info* known = nullptr;
        try {
            known = rt_.memo().find(type);
        } catch (...) {}
        if (known == nullptr) return pass(pass_reason::unknown_type);
        // Zero elements: the library checks the communicator and the datatype exactly as for the
        // real call (the count-dependent checks are done by the caller and below) and moves nothing.
        const int rc = probe();
        if (rc != MPI_SUCCESS) {
            rt_.count_pass(d, pass_reason::rejected);
            return rc;
        }
    }
    const type_info* info = nullptr;
    std::int64_t bytes = 0;
    pack_plan plan;  // small: a whole plan_decision here would be cleared on every call
    const pack_program* program = nullptr;
    pass_reason why = prepare(d, type, count, room, info, bytes, plan, program);
    // A decided call may be timed, or run the method not chosen, for the model's refinement
    // (plan/sampling.hpp). A call the planner is measuring the key with runs the method it
    // names, and is not sampled.
    const bool measuring = plan.measure.measuring && (why == pass_reason::planned || why == pass_reason::none);
    const sampling sample = call_sampler::adjusted(
        plan.decided && !measuring && (why == pass_reason::planned || why == pass_reason::none) ? sampler(d).next()
                                                                                                : sampling::none,
        plan.measured);
    if (call_sampler::explores(sample)) why = why == pass_reason::planned ? pass_reason::none : pass_reason::planned;
    const bool timed = call_sampler::timed(sample);
    const bool clocked = timed || (measuring && plan.measure.timed);
    if (why == pass_reason::planned && clocked) {  // the library's time refines the model too
        const double t0 = detail::now_s();
        const int rc = pass(measuring ? pass_reason::measuring : why);
        if (rc == MPI_SUCCESS) {
            const double took = detail::now_s() - t0;
            if (timed) observe(true, d, plan, took);
            if (measuring) measured(d, type, count, plan, took);
        }
        return rc;
    }
    if (why != pass_reason::none) return pass(measuring && why == pass_reason::planned ? pass_reason::measuring : why);
    if (bytes > 0) {
        try {
            const double t0 = clocked ? detail::now_s() : 0;
            const std::int64_t done = move(*info, program);
            if (clocked) {
                const double took = detail::now_s() - t0;
                if (timed) observe(false, d, plan, took);
                if (measuring && done == bytes) measured(d, type, count, plan, took);
            }
            if (done != bytes)
                throw error(std::string(name) + " moved " + std::to_string(done) + " of " + std::to_string(bytes) +
                            " bytes");
        } catch (const unsupported& e) {
            log_debug(log_category::pack, "%s: %s; left to the library", name, e.what());
            return pass(pass_reason::too_large);
        } catch (const std::exception& e) {
            rt_.internal_failure(s, e.what());
            return pass(pass_reason::internal);  // the library moves the same bytes again
        } catch (...) {
            rt_.internal_failure(s, "unknown exception");
            return pass(pass_reason::internal);
        }
    }
    *position += static_cast<int>(bytes);
    rt_.count_done(d, bytes);
    if (rt_.cfg().log.enabled(log_level::trace, log_category::pack))  // not formatting the handle on every call
        log_trace(log_category::pack, "%s %d x %s: %" PRId64 " bytes by shunt", name, count, handle_text(type).c_str(),
                  bytes);
    return MPI_SUCCESS;
}

void pack_executor::observe(bool library, direction d, const pack_plan& plan, double seconds) noexcept {
    if (plan.blocks <= 0 || plan.bytes <= 0) return;
    try {
        const double block_len = static_cast<double>(plan.bytes) / static_cast<double>(plan.blocks);
        rt_.model().observe(table_names::pack(library, d == direction::unpack, std::llround(block_len)),
                            static_cast<double>(plan.bytes), seconds);
    } catch (...) {}
}

void pack_executor::measured(direction d, MPI_Datatype type, int count, const pack_plan& plan,
                             double seconds) noexcept {
    try {
        if (!rt_.pack_planner().record(plan.measure, seconds) ||
            !rt_.cfg().log.enabled(log_level::debug, log_category::decide))
            return;
        const plan_decision pd = rt_.pack_planner().decision(plan.measure.key);
        const shim s = d == direction::pack ? shim::pack : shim::unpack;
        log_debug(log_category::decide,
                  "%s of %d x %s (%" PRId64 " bytes in %" PRId64 " blocks over %" PRId64
                  " bytes): %s (measured library %.3g us, "
                  "shunt's host packer %.3g us%s)",
                  shim_names[static_cast<std::size_t>(s)], count, handle_text(type).c_str(), pd.bytes, pd.blocks,
                  plan.measure.key.span, pd.method() == pack_method::host ? "shunt's host packer" : "the library",
                  pd.measured_s[0] * 1e6, pd.measured_s[1] * 1e6,
                  pd.measuring             ? "; a second look follows"
                  : plan.measure.look == 1 ? "; second look"
                                           : "");
    } catch (...) {}
}

int pack_executor::pack(const void* inbuf, int incount, MPI_Datatype type, void* outbuf, int outsize, int* position,
                        MPI_Comm comm) noexcept {
    const auto pass = [&](pass_reason why) {
        rt_.count_pass(direction::pack, why);
        return PMPI_Pack(inbuf, incount, type, outbuf, outsize, position, comm);
    };
    if (!rt_.running()) return pass(pass_reason::not_running);
    // A null inbuf (MPI_BOTTOM) always goes to the library: Open MPI accepts it for types at
    // absolute addresses, MPICH 4.0 rejects it for any type.
    if (position == nullptr || inbuf == nullptr || outbuf == nullptr || incount < 0 || outsize < 0 || *position < 0)
        return pass(pass_reason::bad_argument);
    if (int rc = 0;
        rt_.devices().in_use_relaxed() && device_pack(direction::pack, inbuf, outbuf, incount, type,
                                                      std::int64_t{outsize} - *position, position, comm, rc))
        return rc;
    return transfer(
        direction::pack, type, incount, std::int64_t{outsize} - *position, position, comm, pass,
        [&] {
            int probe = *position;
            return PMPI_Pack(inbuf, 0, type, outbuf, outsize, &probe, comm);
        },
        [&](const type_info& t, const pack_program* program) {
            std::byte* const out = static_cast<std::byte*>(outbuf) + *position;
            return program != nullptr ? run_program<true>(*program, reinterpret_cast<std::uintptr_t>(inbuf), out)
                                      : pack_host(t, incount, inbuf, out);
        });
}

int pack_executor::unpack(const void* inbuf, int insize, int* position, void* outbuf, int outcount, MPI_Datatype type,
                          MPI_Comm comm) noexcept {
    const auto pass = [&](pass_reason why) {
        rt_.count_pass(direction::unpack, why);
        return PMPI_Unpack(inbuf, insize, position, outbuf, outcount, type, comm);
    };
    if (!rt_.running()) return pass(pass_reason::not_running);
    if (position == nullptr || inbuf == nullptr || outbuf == nullptr || insize < 0 || outcount < 0 || *position < 0)
        return pass(pass_reason::bad_argument);  // MPI_BOTTOM as outbuf too: see pack()
    if (int rc = 0; rt_.devices().in_use_relaxed() && device_pack(direction::unpack, inbuf, outbuf, outcount, type,
                                                                  std::int64_t{insize} - *position, position, comm, rc))
        return rc;
    return transfer(
        direction::unpack, type, outcount, std::int64_t{insize} - *position, position, comm, pass,
        [&] {
            int probe = *position;
            return PMPI_Unpack(inbuf, insize, &probe, outbuf, 0, type, comm);
        },
        [&](const type_info& t, const pack_program* program) {
            const std::byte* const in = static_cast<const std::byte*>(inbuf) + *position;
            return program != nullptr ? run_program<false>(*program, reinterpret_cast<std::uintptr_t>(outbuf),
                                                           const_cast<std::byte*>(in))
                                      : unpack_host(t, outcount, in, outbuf);
        });
}

// ---- device buffers ----

bool pack_executor::device_pack(direction d, const void* in, void* out, int count, MPI_Datatype type, std::int64_t room,
                                int* position, MPI_Comm comm, int& rc) noexcept {
    if (!rt_.devices().in_use()) return false;
    const gpu::memory_kind in_kind = gpu::classify(in), out_kind = gpu::classify(out);
    if (!on_device(in_kind) && !on_device(out_kind)) return false;
    const bool packing = d == direction::pack;
    const shim s = packing ? shim::pack : shim::unpack;
    const int size = static_cast<int>(std::min<std::int64_t>(room + *position, INT_MAX));
    const auto pass = [&](pass_reason why) {
        rt_.count_pass(d, why);
        return packing ? PMPI_Pack(in, count, type, out, size, position, comm)
                       : PMPI_Unpack(in, size, position, out, count, type, comm);
    };
    try {
        if (rt_.cfg().pack == pack_choice::library && rt_.devices().library_takes_device())
            return rc = pass(pass_reason::forced), true;
        // The null communicator and types shunt does not know go to the library whole (see transfer).
        if (comm == MPI_COMM_NULL) return rc = pass(pass_reason::rejected), true;
        const type_info* t = rt_.memo().find(type);
        if (t == nullptr) return rc = pass(pass_reason::unknown_type), true;
        // Zero elements: the library judges the communicator and the datatype, touching no memory.
        int probe = *position;
        const int checked = packing ? PMPI_Pack(in, 0, type, out, size, &probe, comm)
                                    : PMPI_Unpack(in, size, &probe, out, 0, type, comm);
        if (checked != MPI_SUCCESS) return rt_.count_pass(d, pass_reason::rejected), rc = checked, true;
        std::int64_t bytes = 0;
        if (__builtin_mul_overflow(static_cast<std::int64_t>(count), t->size, &bytes))
            return rc = pass(pass_reason::too_large), true;
        if (bytes > room) return rc = pass(pass_reason::would_truncate), true;
        if (bytes > 0) {
            const void* typed = packing ? in : out;
            char* packed = static_cast<char*>(packing ? out : const_cast<void*>(in)) + *position;
            const gpu::memory_kind packed_kind = packing ? out_kind : in_kind;
            if (on_device(packing ? in_kind : out_kind)) {
                const auto form = rt_.devices().form_of(rt_.memo(), t, count, type);
                // Kernels reach device, managed and mapped pinned memory; pageable memory goes
                // through device scratch and a copy.
                const bool direct = packed_kind != gpu::memory_kind::host;
                const scoped_block scratch(
                    direct ? gpu::pool_block{}
                           : gpu::pool_acquire(gpu::pool_kind::device, static_cast<std::size_t>(bytes)));
                void* stream_buf = direct ? packed : scratch.b.ptr;
                if (packing) {
                    gpu::pack(*form, typed, stream_buf, nullptr);
                    if (!direct) gpu::copy(packed, stream_buf, static_cast<std::size_t>(bytes), nullptr);
                } else {
                    if (!direct) gpu::copy(stream_buf, packed, static_cast<std::size_t>(bytes), nullptr);
                    gpu::unpack(*form, stream_buf, const_cast<void*>(typed), nullptr);
                }
                gpu::synchronize(nullptr);
            } else {  // host typed buffer, packed bytes on the device: host packer and a copy
                const scoped_block staging(gpu::pool_acquire(gpu::pool_kind::pinned, static_cast<std::size_t>(bytes)));
                if (packing) {
                    pack_host(*t, count, typed, staging.b.ptr);
                    gpu::copy(packed, staging.b.ptr, static_cast<std::size_t>(bytes), nullptr);
                    gpu::synchronize(nullptr);
                } else {
                    gpu::copy(staging.b.ptr, packed, static_cast<std::size_t>(bytes), nullptr);
                    gpu::synchronize(nullptr);
                    unpack_host(*t, count, staging.b.ptr, const_cast<void*>(typed));
                }
            }
        }
        *position += static_cast<int>(bytes);
        rt_.count_done(d, bytes);
        rc = MPI_SUCCESS;
        return true;
    } catch (const unsupported& e) {
        log_debug(log_category::pack, "%s: %s; left to the library", shim_names[static_cast<std::size_t>(s)], e.what());
        rc = pass(pass_reason::too_large);
    } catch (const std::exception& e) {
        rt_.internal_failure(s, e.what());
        rc = pass(pass_reason::internal);
    } catch (...) {
        rt_.internal_failure(s, "unknown exception");
        rc = pass(pass_reason::internal);
    }
    return true;
}

}  // namespace shunt::detail
