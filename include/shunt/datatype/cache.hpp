// shunt/datatype/cache.hpp: the thread-safe map from MPI datatype handles to their decoded form,
// filled at commit, emptied at free, copied at dup.
#pragma once

#include <shunt/datatype/decode.hpp>
#include <shunt/datatype/type_info.hpp>
#include <shunt/errors.hpp>

#include <mpi.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <utility>

namespace shunt {

/// Decoded datatypes keyed by handle. The interposer calls on_commit / on_free / on_dup from the
/// matching MPI shims and find() wherever it needs a type; a type that find() does not return
/// (never committed, committed behind shunt's back, or unsupported) goes to the library.
///
/// Thread-safe: every member may be called from any thread at any time. No lock is held across
/// an MPI call (decoding happens first, the map is then locked for the insert), so concurrent
/// calls need only the thread level the MPI library itself needs (MPI_THREAD_MULTIPLE for calls
/// from several threads at once). Local: no communication, no collective semantics.
class type_cache {
public:
    /// Decodes the just-committed `t` and remembers it; a type shunt cannot decode is remembered
    /// as unsupported. Never lets a shunt::error out. Committing again re-decodes (a handle value
    /// may have been reused by the library).
    void on_commit(MPI_Datatype t) {
        if (t == MPI_DATATYPE_NULL) return;
        entry e = decode_or_null(t);
        std::unique_lock lock(mutex_);
        entries_.insert_or_assign(t, std::move(e));
    }

    /// Forgets `t`. Call it before PMPI_Type_free, with the handle value being freed.
    void on_free(MPI_Datatype t) {
        std::unique_lock lock(mutex_);
        entries_.erase(t);
    }

    /// Records `newtype` = MPI_Type_dup(`oldtype`): a dup of a committed (or predefined) type is
    /// committed, so it shares the entry of `oldtype`; a dup of an uncommitted type is not
    /// recorded. Never lets a shunt::error out.
    void on_dup(MPI_Datatype oldtype, MPI_Datatype newtype) {
        if (oldtype == MPI_DATATYPE_NULL || newtype == MPI_DATATYPE_NULL) return;
        entry e;
        {
            std::shared_lock lock(mutex_);
            auto it = entries_.find(oldtype);
            if (it == entries_.end()) {
                lock.unlock();
                if (!is_predefined(oldtype)) return;
                e = lookup_predefined(oldtype);
            } else {
                e = it->second;
            }
        }
        std::unique_lock lock(mutex_);
        entries_.insert_or_assign(newtype, std::move(e));
    }

    /// The decoded form of `t`, or nullptr when `t` is not known to be committed, or is
    /// unsupported. Predefined types are decoded on first use and kept. Never lets a
    /// shunt::error out.
    std::shared_ptr<const type_info> find(MPI_Datatype t) const {
        if (t == MPI_DATATYPE_NULL) return nullptr;
        {
            std::shared_lock lock(mutex_);
            if (auto it = entries_.find(t); it != entries_.end()) return it->second;
        }
        if (!is_predefined(t)) return nullptr;
        return lookup_predefined(t);
    }

    /// True when `t` is predefined or was committed through on_commit and not freed since,
    /// whether shunt supports it or not.
    bool known(MPI_Datatype t) const {
        if (t == MPI_DATATYPE_NULL) return false;
        {
            std::shared_lock lock(mutex_);
            if (entries_.contains(t)) return true;
        }
        return is_predefined(t);
    }

    /// Number of handles remembered (supported or not), predefined ones included.
    std::size_t size() const {
        std::shared_lock lock(mutex_);
        return entries_.size();
    }

private:
    /// nullptr: known to be unsupported.
    using entry = std::shared_ptr<const type_info>;

    static entry decode_or_null(MPI_Datatype t) {
        try {
            return std::make_shared<const type_info>(decode(t));
        } catch (const error&) {
            return nullptr;
        }
    }

    static bool is_predefined(MPI_Datatype t) {
        detail::envelope e;
        return detail::get_envelope(t, e) == MPI_SUCCESS && detail::is_predefined_combiner(e.combiner);
    }

    /// Decodes a predefined type outside the lock; the first insert wins, so every caller sees
    /// the same entry.
    entry lookup_predefined(MPI_Datatype t) const {
        entry e = decode_or_null(t);
        std::unique_lock lock(mutex_);
        return entries_.try_emplace(t, std::move(e)).first->second;
    }

    mutable std::shared_mutex mutex_;
    mutable std::unordered_map<MPI_Datatype, entry> entries_;
};

}  // namespace shunt
