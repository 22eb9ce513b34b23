// interpose/nbc.cpp: shunt's nonblocking and persistent collectives in flight: fibers, the application's requests (generalized requests, persistent self-receives), progress and polling waits.
#include "nbc.hpp"

#include <shunt/errors.hpp>
#include <shunt/log.hpp>

#include "per_thread.hpp"
#include "runtime.hpp"

#include <exception>
#include <utility>

#include <sched.h>

namespace shunt::detail {

/// One collective of shunt's: a nonblocking call until its request is freed, or a persistent
/// request until MPI_Request_free. It is the waiter of its schedule's transport.
struct nbc_executor::op final : mpi_waiter {
    nbc_executor* x = nullptr;
    shim s = shim::iallreduce;
    std::int64_t bytes = 0;
    schedule body;
    keepalive keep;
    bool persistent = false;
    MPI_Request handle = MPI_REQUEST_NULL;  ///< the application's
    int self_tag = 0;  ///< persistent: the tag of the zero-byte message that completes it
    std::unique_ptr<fiber> f;
    std::span<MPI_Request> pending;  ///< what the suspended schedule waits for
    int wait_rc = MPI_SUCCESS;  ///< the test of `pending` that resumed it
    int error = MPI_SUCCESS;  ///< how the schedule ended
    std::atomic<bool> busy{false};  ///< a thread is running or starting the schedule
    std::atomic<bool> active{false};  ///< the schedule is in flight

    // In the schedule, on its fiber: done at once, or suspended until progress finds them done.
    int wait_all(std::span<MPI_Request> requests) override {
        int flag = 0;
        const int rc = PMPI_Testall(static_cast<int>(requests.size()), requests.data(), &flag, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS || flag) return rc;
        pending = requests;
        f->suspend();
        return wait_rc;
    }
};

namespace {

/// The ops a progress() call works through, copied out of the table (per thread: no allocation
/// once warm).
struct progress_scratch {
    std::vector<std::shared_ptr<nbc_executor::op>> ops;
};
per_thread<progress_scratch>& scratch() {
    static auto* p = new per_thread<progress_scratch>;  // never destroyed, like the runtime
    return *p;
}

/// The error code with which the libraries refuse MPI_Cancel and MPI_Request_free of their
/// nonblocking collectives' requests, raised on MPI_COMM_WORLD: MPICH 4.0 answers MPI_ERR_INTERN
/// and MPI_ERR_OTHER ("attempt to cancel an unknown type of request", "the supplied request was
/// invalid"), Open MPI 4.1 MPI_ERR_REQUEST to both.
int refused(bool cancel) {
#if defined(MPICH_VERSION)
    const int code = cancel ? MPI_ERR_INTERN : MPI_ERR_OTHER;
#else
    (void)cancel;
    const int code = MPI_ERR_REQUEST;
#endif
    PMPI_Comm_call_errhandler(MPI_COMM_WORLD, code);
    return code;
}

void acquire(std::atomic<bool>& busy) noexcept {
    while (busy.exchange(true, std::memory_order_acquire)) sched_yield();
}

}  // namespace

// ---- the application's requests ----

int nbc_executor::query_fn(void* extra, MPI_Status* status) {
    const auto* o = static_cast<const op*>(extra);
    // A collective's status tells nothing but its error: no source, tag or elements.
    PMPI_Status_set_elements(status, MPI_BYTE, 0);
    PMPI_Status_set_cancelled(status, 0);
    status->MPI_SOURCE = MPI_ANY_SOURCE;
    status->MPI_TAG = MPI_ANY_TAG;
    status->MPI_ERROR = o->error;
    return o->error;
}

int nbc_executor::free_fn(void* extra) {
    auto* o = static_cast<op*>(extra);
    o->x->forget(o->handle);
    return MPI_SUCCESS;
}

int nbc_executor::cancel_fn(void*, int) {
    return MPI_SUCCESS;  // never reached: MPI_Cancel of shunt's requests is refused before the library
}

void nbc_executor::add(const std::shared_ptr<op>& o) {
    const std::lock_guard lock(mutex_);
    ops_.insert_or_assign(o->handle, o);
    known_.store(ops_.size(), std::memory_order_release);
}

void nbc_executor::forget(MPI_Request h) noexcept {
    // Called back from inside the library (a generalized request's free_fn): what the op holds
    // (datatypes, a topology) is released by a later call, outside the library.
    const std::lock_guard lock(mutex_);
    if (auto it = ops_.find(h); it != ops_.end()) {
        try {
            released_.push_back(std::move(it->second));
        } catch (...) {
            // No memory: the op stays alive forever rather than die inside the library.
            std::shared_ptr<op>* leak = new (std::nothrow) std::shared_ptr<op>(std::move(it->second));
            (void)leak;
        }
        ops_.erase(it);
    }
    known_.store(ops_.size(), std::memory_order_release);
    released_n_.store(released_.size(), std::memory_order_release);
}

void nbc_executor::collect() noexcept {
    if (released_n_.load(std::memory_order_acquire) == 0) return;
    std::vector<std::shared_ptr<op>> gone;
    {
        const std::lock_guard lock(mutex_);
        gone.swap(released_);
        released_n_.store(0, std::memory_order_release);
    }
}

bool nbc_executor::owns(MPI_Request h) const noexcept {
    if (known_.load(std::memory_order_acquire) == 0 || h == MPI_REQUEST_NULL) return false;
    const std::lock_guard lock(mutex_);
    return ops_.contains(h);
}

MPI_Comm nbc_executor::self_comm() {
    const std::lock_guard lock(mutex_);
    if (self_ == MPI_COMM_NULL) SHUNT_CHECK_MPI(PMPI_Comm_dup(MPI_COMM_SELF, &self_));
    return self_;
}

// ---- starting ----

void nbc_executor::launch(shim s, std::int64_t bytes, schedule body, keepalive keep, MPI_Request* request) {
    collect();
    auto o = std::make_shared<op>();
    o->x = this;
    o->s = s;
    o->bytes = bytes;
    o->body = std::move(body);
    o->keep = std::move(keep);
    SHUNT_CHECK_MPI(PMPI_Grequest_start(&query_fn, &free_fn, &cancel_fn, o.get(), &o->handle));
    try {
        add(o);
    } catch (...) {
        // Not yet the application's: complete and free it here.
        PMPI_Grequest_complete(o->handle);
        PMPI_Request_free(&o->handle);
        throw;
    }
    *request = o->handle;
    begin(o);
}

void nbc_executor::make_persistent(shim s, std::int64_t bytes, schedule body, keepalive keep, MPI_Request* request) {
    static char nothing = 0;
    auto o = std::make_shared<op>();
    o->x = this;
    o->s = s;
    o->bytes = bytes;
    o->body = std::move(body);
    o->keep = std::move(keep);
    o->persistent = true;
    const MPI_Comm self = self_comm();
    {
        const std::lock_guard lock(mutex_);
        o->self_tag = next_self_tag_;
        next_self_tag_ = next_self_tag_ == 32767 ? 0 : next_self_tag_ + 1;  // MPI's least MPI_TAG_UB
    }
    SHUNT_CHECK_MPI(PMPI_Recv_init(&nothing, 0, MPI_BYTE, 0, o->self_tag, self, &o->handle));
    try {
        add(o);
    } catch (...) {
        PMPI_Request_free(&o->handle);
        throw;
    }
    *request = o->handle;
}

void nbc_executor::start_persistent(shim s, int n, const MPI_Request* requests) noexcept {
    if (known_.load(std::memory_order_acquire) == 0 || requests == nullptr || n <= 0) return;
    std::vector<std::shared_ptr<op>> mine;
    try {
        {
            const std::lock_guard lock(mutex_);
            for (int i = 0; i < n; ++i)
                if (auto it = ops_.find(requests[i]); it != ops_.end() && it->second->persistent)
                    mine.push_back(it->second);
        }
        for (const auto& o : mine) {
            if (o->active.load(std::memory_order_acquire)) continue;  // started twice: the library said so
            begin(o);
        }
    } catch (const std::exception& e) {
        // Only memory can fail here (a stack for the fiber), after the other ranks started theirs.
        log_error(log_category::init, "%s: cannot start shunt's persistent collective (%s)",
                  shim_names[static_cast<std::size_t>(s)], e.what());
    }
    if (!mine.empty()) rt_.count_handled(s);
}

bool nbc_executor::begin(const std::shared_ptr<op>& o) {
    acquire(o->busy);  // a previous run may still be leaving finish()
    struct release {
        op& o;
        ~release() { o.busy.store(false, std::memory_order_release); }
    } guard{*o};
    op* raw = o.get();
    o->error = MPI_SUCCESS;
    o->pending = {};
    o->f = std::make_unique<fiber>([raw] {
        const char* name = shim_names[static_cast<std::size_t>(raw->s)];
        try {
            raw->body(*raw);
        } catch (const mpi_error& e) {
            // The other ranks are inside the same schedule: the error is the request's.
            log_error(log_category::init, "%s: %s", name, e.what());
            raw->error = e.code();
        } catch (const std::exception& e) {
            log_error(log_category::init, "%s: shunt failed inside its schedule (%s)", name, e.what());
            raw->error = MPI_ERR_INTERN;
        } catch (...) {
            log_error(log_category::init, "%s: shunt failed inside its schedule", name);
            raw->error = MPI_ERR_INTERN;
        }
    });
    {
        const std::lock_guard lock(mutex_);
        running_.push_back(o);
        active_.store(running_.size(), std::memory_order_release);
    }
    o->active.store(true, std::memory_order_release);
    return advance(*o);  // posts the first step's messages now
}

// ---- progress ----

bool nbc_executor::advance(op& o) noexcept {
    for (;;) {
        if (!o.pending.empty()) {
            int flag = 0;
            const int rc =
                PMPI_Testall(static_cast<int>(o.pending.size()), o.pending.data(), &flag, MPI_STATUSES_IGNORE);
            if (rc == MPI_SUCCESS && !flag) return false;
            o.wait_rc = rc;
            o.pending = {};
        }
        if (o.f->resume()) {
            finish(o);
            return true;
        }
    }
}

void nbc_executor::finish(op& o) noexcept {
    {
        const std::lock_guard lock(mutex_);
        std::erase_if(running_, [&](const std::shared_ptr<op>& r) { return r.get() == &o; });
        active_.store(running_.size(), std::memory_order_release);
    }
    o.active.store(false, std::memory_order_release);
    // Last: from here the application may complete, free or restart the request.
    if (!o.persistent) {
        PMPI_Grequest_complete(o.handle);
        return;
    }
    static char nothing = 0;
    MPI_Request r = MPI_REQUEST_NULL;
    if (PMPI_Isend(&nothing, 0, MPI_BYTE, 0, o.self_tag, self_, &r) == MPI_SUCCESS) PMPI_Request_free(&r);
}

void nbc_executor::progress_slow() noexcept {
    collect();
    if (!in_flight()) return;
    progress_scratch* s = scratch().get();
    if (s == nullptr) return;
    try {
        const std::lock_guard lock(mutex_);
        s->ops.assign(running_.begin(), running_.end());
    } catch (...) {
        return;  // no memory: the next call tries again
    }
    for (const auto& o : s->ops) {
        if (o->busy.exchange(true, std::memory_order_acquire)) continue;  // another thread has it
        if (o->active.load(std::memory_order_acquire)) advance(*o);
        o->busy.store(false, std::memory_order_release);
    }
    s->ops.clear();
}

int nbc_executor::wait(MPI_Request* request, MPI_Status* status) noexcept {
    return poll([&](int* done) { return PMPI_Test(request, done, status); });
}

int nbc_executor::wait_all(int n, MPI_Request requests[], MPI_Status statuses[]) noexcept {
    // Each request tested on its own: MPICH 4.0.2's MPI_Testall reports its own persistent
    // collectives in flight as failed (MPI_ERR_IN_STATUS, MPI_ERR_PENDING), where MPI_Test does not.
    if (n <= 0 || requests == nullptr) return PMPI_Waitall(n, requests, statuses);
    std::vector<char> done;
    try {
        done.assign(static_cast<std::size_t>(n), 0);
    } catch (...) {
        return PMPI_Waitall(n, requests, statuses);  // no memory: the library's wait, without progress
    }
    bool failed = false;
    int left = n;
    MPI_Status ignored;
    while (left > 0) {
        progress();
        for (int i = 0; i < n; ++i) {
            if (done[static_cast<std::size_t>(i)]) continue;
            MPI_Status* st = statuses == MPI_STATUSES_IGNORE ? &ignored : &statuses[i];
            int flag = 0;
            const int rc = PMPI_Test(&requests[i], &flag, st);
            if (rc != MPI_SUCCESS) {
                st->MPI_ERROR = rc;
                failed = true;
                flag = 1;
            } else if (flag) {
                st->MPI_ERROR = MPI_SUCCESS;
            }
            if (flag) {
                done[static_cast<std::size_t>(i)] = 1;
                --left;
            }
        }
    }
    return failed ? MPI_ERR_IN_STATUS : MPI_SUCCESS;
}

int nbc_executor::polling_waiter::wait_all(std::span<MPI_Request> requests) {
    if (!x_.in_flight()) return PMPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
    return x_.wait_all(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
}

// ---- freeing, cancelling, finalizing ----

int nbc_executor::request_free(MPI_Request* h) noexcept {
    std::shared_ptr<op> o;
    {
        const std::lock_guard lock(mutex_);
        auto it = ops_.find(*h);
        if (it == ops_.end()) return PMPI_Request_free(h);
        o = it->second;
    }
    if (!o->persistent || o->active.load(std::memory_order_acquire)) return refused(false);
    const MPI_Request handle = *h;
    const int rc = PMPI_Request_free(h);
    if (rc == MPI_SUCCESS) forget(handle);
    return rc;
}

int nbc_executor::cancel(MPI_Request*) noexcept { return refused(true); }

void nbc_executor::drain() noexcept {
    while (in_flight()) progress();
    collect();
    // Every schedule has ended. The ops themselves stay (a generalized request the application
    // never completed may still call back into its op); what they hold goes now, while MPI runs.
    try {
        static auto* kept = new std::vector<std::shared_ptr<op>>;  // never destroyed: see above
        {
            const std::lock_guard lock(mutex_);
            for (auto& [h, o] : ops_) kept->push_back(o);
        }
        for (auto& o : *kept) {
            o->keep.reset();
            o->body = nullptr;
        }
    } catch (...) {}
}

}  // namespace shunt::detail
