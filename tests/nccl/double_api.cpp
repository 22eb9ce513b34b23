// tests/nccl/double_api.cpp: the NCCL 2.28 API exported by the CPU double: arguments checked as NCCL checks them,
// group semantics (per-thread nesting, calls queued with their stream until the outermost ncclGroupEnd), blocking and
// non-blocking communicators, init (one id or several), split, shrink, finalize, destroy and abort. Every function
// has its pnccl* twin. Built with CUDA, buffers may be device or managed memory (staged when the group runs).
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "double_internal.hpp"

// Exports `name` and its pnccl twin (NCCL's own pattern: the twin is an alias of the same code).
#define SHUNT_DOUBLE_API(ret, name, ...)                                                      \
    extern "C" __attribute__((visibility("default"), alias(#name))) ret p##name(__VA_ARGS__); \
    extern "C" __attribute__((visibility("default"))) ret name(__VA_ARGS__)

namespace shunt::test_double {
namespace {

std::mutex last_error_mu;
std::string last_error;

// NCCL_DEBUG: 0 unset or other, 1 WARN, 2 INFO or TRACE.
int debug_level() {
    static const int level = [] {
        const char* v = getenv("NCCL_DEBUG");
        if (v == nullptr) return 0;
        if (strcasecmp(v, "INFO") == 0 || strcasecmp(v, "TRACE") == 0) return 2;
        return strcasecmp(v, "WARN") == 0 ? 1 : 0;
    }();
    return level;
}

void print_line(const char* level, const char* text) {
    char host[64] = "?";
    gethostname(host, sizeof host - 1);
    fprintf(stderr, "%s:%d [nccl_double] NCCL %s %s\n", host, int(getpid()), level, text);
}

}  // namespace

ncclResult_t fail(ncclResult_t code, const char* format, ...) {
    char text[1024];
    va_list ap;
    va_start(ap, format);
    vsnprintf(text, sizeof text, format, ap);
    va_end(ap);
    {
        std::lock_guard<std::mutex> lock(last_error_mu);
        last_error = text;
    }
    if (debug_level() >= 1) print_line("WARN", text);
    return code;
}

void info(const char* format, ...) {
    if (debug_level() < 2) return;
    char text[1024];
    va_list ap;
    va_start(ap, format);
    vsnprintf(text, sizeof text, format, ap);
    va_end(ap);
    print_line("INFO", text);
}

void warn_always(const char* format, ...) {
    char text[1024];
    va_list ap;
    va_start(ap, format);
    vsnprintf(text, sizeof text, format, ap);
    va_end(ap);
    print_line("WARN", text);
}

double timeout_seconds() {
    constexpr double fallback = 120;
    const char* v = getenv("NCCL_DOUBLE_TIMEOUT");
    if (v == nullptr || *v == '\0') return fallback;
    char* end = nullptr;
    const double d = strtod(v, &end);
    if (end == v || *end != '\0' || !(d > 0) || d > 1e6) {
        static std::once_flag once;
        std::call_once(once, [v] {
            warn_always("NCCL_DOUBLE_TIMEOUT=%s is not a number of seconds in (0, 1e6]; using %g", v, fallback);
        });
        return fallback;
    }
    return d;
}

namespace {

// No exception crosses the C interface: out of memory (a huge count) and the like become error codes.
template <typename F>
ncclResult_t guarded(const char* call, F&& f) noexcept {
    try {
        return f();
    } catch (const std::bad_alloc&) {
        return fail(ncclSystemError, "%s: out of memory", call);
    } catch (const std::exception& e) {
        return fail(ncclInternalError, "%s: %s", call, e.what());
    } catch (...) {
        return fail(ncclInternalError, "%s: unexpected exception", call);
    }
}

// ---- Groups ----

/// Communicator creation queued in a group: init for a new communicator, split for a parent's children.
struct job {
    comm* target;  // the communicator whose state the job sets (new one, or parent)
    comm* serial;  // jobs on the same parent run one after the other
    std::function<ncclResult_t()> run;  // sets target's state when it ends
    std::function<void(ncclResult_t)> drop;  // the group failed before it ran
};

struct group_state {
    int depth = 0;
    ncclResult_t error = ncclSuccess;
    int blocking = -1;  // unknown until the first communicator
    std::vector<std::unique_ptr<op>> ops;
    std::vector<job> jobs;
};
thread_local group_state group;

void record_group_error(ncclResult_t r) {
    if (group.depth > 0 && r != ncclSuccess && r != ncclInProgress) group.error = r;
}

// As in NCCL: a collective or point-to-point call sets the group's mode (the last one wins); creating a
// communicator in a group of the other mode is an error.
void note_blocking(const comm* c) { group.blocking = c->blocking ? 1 : 0; }

ncclResult_t check_blocking(const comm* c) {
    const int b = c->blocking ? 1 : 0;
    if (group.blocking == -1) group.blocking = b;
    if (group.blocking != b)
        return fail(ncclInvalidArgument, "Blocking and nonblocking communicators are not allowed in the same group.");
    return ncclSuccess;
}

// Waits for the communicator's background job to finish and forgets it.
void drop_job(comm* c) {
    std::shared_ptr<group_job> j;
    {
        std::lock_guard<std::mutex> lock(c->job_mu);
        j = std::move(c->job);
    }
    if (j) {
        std::unique_lock<std::mutex> lock(j->m);
        j->cv.wait(lock, [&] { return j->done; });
    }
}

ncclResult_t run_jobs(std::vector<job>& jobs) {
    // One lane per parent (splits of one parent in order), one per new communicator; lanes run concurrently.
    std::vector<std::vector<job*>> lanes;
    for (job& j : jobs) {
        auto it = j.serial == nullptr ? lanes.end()
                                      : std::find_if(lanes.begin(), lanes.end(), [&](const std::vector<job*>& l) {
                                            return l[0]->serial == j.serial;
                                        });
        if (it == lanes.end())
            lanes.push_back({&j});
        else
            it->push_back(&j);
    }
    std::vector<ncclResult_t> results(lanes.size(), ncclSuccess);
    auto run_lane = [&](size_t i) {
        for (job* j : lanes[i]) {
            const ncclResult_t r = j->run();
            if (results[i] == ncclSuccess) results[i] = r;
        }
    };
    if (lanes.size() == 1) {
        run_lane(0);
    } else {
        std::vector<std::thread> threads;
        for (size_t i = 0; i < lanes.size(); ++i) threads.emplace_back(run_lane, i);
        for (std::thread& t : threads) t.join();
    }
    for (ncclResult_t r : results)
        if (r != ncclSuccess) return r;
    return ncclSuccess;
}

ncclResult_t run_group(group_state& s) {
    ncclResult_t r = ncclSuccess;
    if (!s.jobs.empty()) r = run_jobs(s.jobs);
    if (!s.ops.empty()) {
        std::vector<op*> raw;
        for (auto& o : s.ops) raw.push_back(o.get());
        const ncclResult_t ro = run_ops(raw, raw.size() == 1 ? func_name(raw[0]->fn) : "ncclGroupEnd");
        if (r == ncclSuccess) r = ro;
    }
    return r;
}

// A group of non-blocking communicators: ncclInProgress now, each state set when the work is done.
ncclResult_t launch_background(group_state&& s) {
    std::vector<comm*> op_comms;
    for (auto& o : s.ops)
        if (std::find(op_comms.begin(), op_comms.end(), o->c) == op_comms.end()) op_comms.push_back(o->c);
    for (comm* c : op_comms) c->state.store(ncclInProgress);
    std::vector<comm*> all = op_comms;
    for (job& j : s.jobs) {
        j.target->state.store(ncclInProgress);
        if (std::find(all.begin(), all.end(), j.target) == all.end()) all.push_back(j.target);
    }
    auto content = std::make_shared<group_state>(std::move(s));
    auto handle = std::make_shared<group_job>();
    group_job* raw = handle.get();
    for (comm* c : all) {
        std::shared_ptr<group_job> old;
        {
            std::lock_guard<std::mutex> lock(c->job_mu);
            old = std::exchange(c->job, handle);
        }
        // An older job already reported its end to this communicator (its state was polled to ncclSuccess).
        if (old) {
            std::unique_lock<std::mutex> lock(old->m);
            old->cv.wait(lock, [&] { return old->done; });
        }
    }
    try {
        raw->thread = std::thread([content, op_comms, raw] {
            const ncclResult_t r = run_group(*content);
            for (comm* c : op_comms) c->state.store(r == ncclInProgress ? ncclSuccess : r);
            std::lock_guard<std::mutex> lock(raw->m);
            raw->done = true;
            raw->cv.notify_all();
        });
    } catch (...) {
        for (comm* c : op_comms) c->state.store(ncclSystemError);
        std::lock_guard<std::mutex> lock(raw->m);
        raw->done = true;
        return fail(ncclSystemError, "ncclGroupEnd: cannot start a thread");
    }
    return ncclInProgress;
}

ncclResult_t group_end_internal() {
    if (group.depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd: not in a group call.");
    if (--group.depth > 0) return ncclSuccess;
    group_state s = std::move(group);
    group = group_state{};
    if (s.error != ncclSuccess) {
        for (job& j : s.jobs) j.drop(s.error);
        return s.error;
    }
    if (s.ops.empty() && s.jobs.empty()) return ncclSuccess;
    if (s.blocking == 0) return launch_background(std::move(s));
    return run_group(s);
}

// ---- Checks ----

ncclResult_t check_comm(ncclComm_t h, const char* call, comm** out) {
    if (h == nullptr) return fail(ncclInvalidArgument, "%s : comm argument is NULL", call);
    comm* c = as_comm(h);
    if (c->magic != comm_magic || c->magic_end != comm_magic)
        return fail(ncclInvalidArgument, "Error: corrupted comm object detected");
    *out = c;
    return ncclSuccess;
}

// NCCL's ncclCommEnsureReady: a communicator still in progress may not be used; an error state is returned.
ncclResult_t ensure_ready(comm* c) {
    const auto s = ncclResult_t(c->state.load());
    if (s == ncclInProgress)
        return fail(ncclInvalidArgument,
                    "Attempt to use communicator before the previous operation returned ncclSuccess");
    if (s == ncclSuccess) drop_job(c);
    return s;
}

bool is_p2p(func f) { return f == func::send || f == func::recv; }
bool reduces(func f) { return f == func::allreduce || f == func::reduce || f == func::reduce_scatter; }
bool has_root(func f) {
    return f == func::reduce || f == func::broadcast || f == func::gather || f == func::scatter || is_p2p(f);
}

red_spec resolve(const comm* c, ncclRedOp_t op, ncclDataType_t t) {  // both valid by now
    red_spec s;
    const double inv = 1.0 / c->nranks;
    switch (int(op)) {
        case ncclSum: s.kind = red_kind::sum; break;
        case ncclProd: s.kind = red_kind::prod; break;
        case ncclMax: s.kind = red_kind::max; break;
        case ncclMin: s.kind = red_kind::min; break;
        case ncclAvg:
            // NCCL: integers sum and divide, floating types pre-multiply by 1/n rounded to the type.
            s.kind = red_kind::premul_sum;
            if (t == ncclFloat16) {
                const uint16_t h = float_to_half(float(inv));
                memcpy(s.scalar, &h, sizeof h);
            } else if (t == ncclBfloat16) {
                const uint16_t b = float_to_bf16(float(inv));
                memcpy(s.scalar, &b, sizeof b);
            } else if (t == ncclFloat32) {
                const float f = float(inv);
                memcpy(s.scalar, &f, sizeof f);
            } else if (t == ncclFloat64) {
                memcpy(s.scalar, &inv, sizeof inv);
            } else {
                s.kind = red_kind::sum_post_div;
                s.divisor = uint64_t(c->nranks);
            }
            break;
        default: {
            const user_op& u = c->user_ops[size_t(op) - ncclNumOps];
            s.kind = red_kind::premul_sum;
            if (u.by_pointer)
                s.scalar_ptr = u.ptr;
            else
                memcpy(s.scalar, u.scalar, sizeof s.scalar);
        }
    }
    return s;
}

ncclResult_t check_args(func fn, comm* c, const void* sendbuff, const void* recvbuff, size_t count,
                        const ncclDataType_t& type_arg, const ncclRedOp_t& op_arg, int root) {
    const char* name = func_name(fn);
    const int type = raw(type_arg), op = raw(op_arg);
    if (has_root(fn) && (root < 0 || root >= c->nranks))
        return fail(ncclInvalidArgument, "%s : invalid root %d (root should be in the 0..%d range)", name, root,
                    c->nranks);
    if (type < 0 || type >= int(ncclNumTypes)) return fail(ncclInvalidArgument, "%s : invalid type %d", name, type);
    if (op < 0 || op > int(ncclMaxRedOp))
        return fail(ncclInvalidArgument, "%s : invalid reduction operation %d", name, op);
    if (op >= int(ncclNumOps)) {
        const size_t ix = size_t(op) - ncclNumOps;
        if (ix >= c->user_ops.size() || !c->user_ops[ix].used)
            return fail(ncclInvalidArgument, "%s : reduction operation %d unknown to this communicator", name, op);
        if (int(c->user_ops[ix].type) != type)
            return fail(ncclInvalidArgument, "%s : reduction operation %d was made for type %d, not %d", name, op,
                        int(c->user_ops[ix].type), type);
    }
    const size_t size = type_size(type_arg);
    const size_t blocks =
        fn == func::allreduce || fn == func::reduce || fn == func::broadcast || is_p2p(fn) ? 1 : size_t(c->nranks);
    if (count > size_t(PTRDIFF_MAX) / size / blocks)
        return fail(ncclInvalidArgument, "%s : count %zu of %zu-byte elements overflows", name, count, size);
    if (count == 0) return ncclSuccess;
    const bool root_here = c->rank == root;
    bool need_send = true, need_recv = true;
    switch (fn) {
        case func::send: need_recv = false; break;
        case func::recv: need_send = false; break;
        case func::broadcast:
        case func::scatter: need_send = root_here; break;
        case func::reduce:
        case func::gather: need_recv = root_here; break;
        default: break;
    }
    if (need_send && sendbuff == nullptr) return fail(ncclInvalidArgument, "%s : sendbuff argument is NULL", name);
    if (need_recv && recvbuff == nullptr) return fail(ncclInvalidArgument, "%s : recvbuff argument is NULL", name);
    if (reduces(fn) && is_fp8(type_arg))
        return fail(ncclInvalidArgument, "FP8 reduction support begins with sm90 capable devices.");
    return ncclSuccess;
}

// Every collective and point-to-point call: NCCL's ncclEnqueueCheck inside an implicit group.
ncclResult_t enqueue(func fn, const void* sendbuff, void* recvbuff, size_t count, const ncclDataType_t& type,
                     const ncclRedOp_t& red, int root, ncclComm_t h, cudaStream_t stream) {
    comm* c = nullptr;
    ncclResult_t r = check_comm(h, func_name(fn), &c);
    if (r != ncclSuccess) {
        record_group_error(r);
        return r;
    }
    // Read now: once the group has run, another thread may abort and free a blocking communicator.
    const bool blocking = c->blocking;
    ++group.depth;
    r = ensure_ready(c);
    if (r == ncclSuccess && c->finalize_called)
        r = fail(ncclInvalidUsage, "%s : the communicator was finalized", func_name(fn));
    if (r == ncclSuccess) r = check_args(fn, c, sendbuff, recvbuff, count, type, red, root);
    if (r == ncclSuccess) note_blocking(c);
    if (r == ncclSuccess && (count > 0 || is_p2p(fn))) {  // NCCL discards empty collectives
        auto o = std::make_unique<op>();
        o->fn = fn;
        o->c = c;
        o->sendbuff = sendbuff;
        o->recvbuff = recvbuff;
        o->count = count;
        o->type = type;  // valid by now
        if (reduces(fn)) o->red = resolve(c, red, type);
        o->root = root;
        o->stream = stream;
        group.ops.push_back(std::move(o));
    }
    if (r != ncclSuccess && !blocking) c->state.store(r);
    record_group_error(r);
    const ncclResult_t e = group_end_internal();
    if (e != ncclSuccess && e != ncclInProgress) return e;
    if (!blocking) r = ncclResult_t(c->state.load());
    return r;
}

// ---- Communicator creation ----

ncclResult_t parse_config(const ncclConfig_t* config, bool* blocking) {
    ncclConfig_t internal = NCCL_CONFIG_INITIALIZER;
    if (config != nullptr) {
        size_t size = 0;
        memcpy(&size, config, sizeof size);
        memcpy(&internal, config, std::min(size, sizeof internal));
        if (internal.magic != 0xcafebeef)
            return fail(ncclInvalidArgument, "ncclConfig_t argument not initialized via NCCL_CONFIG_INITIALIZER");
        if (internal.version < NCCL_VERSION(2, 14, 0)) internal.blocking = NCCL_CONFIG_UNDEF_INT;
    }
    if (internal.blocking != NCCL_CONFIG_UNDEF_INT && internal.blocking != 0 && internal.blocking != 1)
        return fail(ncclInvalidArgument, "Invalid config blocking attribute value %d", internal.blocking);
    *blocking = internal.blocking != 0;  // NCCL's default (NCCL_COMM_BLOCKING) is blocking
    return ncclSuccess;
}

// NCCL_DOUBLE_ENV_LOG=FILE: each communicator ncclCommInitRank, ncclCommInitRankConfig, ncclCommInitRankScalable or
// ncclCommInitAll creates appends one line to FILE: the NCCL_IB_* variables of the environment at that moment,
// NAME=VALUE sorted and separated by spaces (an empty line when none), for tests of what a preload set before NCCL
// read its knobs.
void record_environment() {
    const char* path = getenv("NCCL_DOUBLE_ENV_LOG");
    if (path == nullptr || *path == '\0') return;
    std::vector<std::string> seen;
    for (char** e = environ; *e != nullptr; ++e)
        if (strncmp(*e, "NCCL_IB_", 8) == 0) seen.emplace_back(*e);
    std::sort(seen.begin(), seen.end());
    std::string line;
    for (const auto& s : seen) line += (line.empty() ? "" : " ") + s;
    line += '\n';
    const int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size()))
        warn_always("NCCL_DOUBLE_ENV_LOG=%s: cannot append to it", path);
    if (fd >= 0) close(fd);
}

void install_fds(comm* c, std::vector<int>& fds) {
    c->ch = std::vector<channel>(fds.size());
    for (size_t i = 0; i < fds.size(); ++i) c->ch[i].fd = fds[i];
}

ncclResult_t run_init(comm* c, const ncclUniqueId& id) {
    const wait_limits w{c->timeout_s, &c->aborting, "ncclCommInitRank"};
    uint32_t addr = 0;
    int lfd = -1;
    endpoint mine;
    std::vector<endpoint> table;
    std::vector<int> fds;
    ncclResult_t r = advertised_address(&addr);
    if (r == ncclSuccess) r = open_listener(addr, c->nranks, &lfd, &mine);
    if (r == ncclSuccess) r = rendezvous(id, c->nranks, c->rank, mine, w, &c->nonce, &table);
    if (r == ncclSuccess) r = connect_mesh(c->rank, c->nranks, c->nonce, lfd, table, w, &fds);
    close_fd(lfd);
    if (r == ncclSuccess) {
        install_fds(c, fds);
        info("ncclCommInitRank: comm %p rank %d of %d listening on %s", static_cast<void*>(c), c->rank, c->nranks,
             to_string(mine).c_str());
    }
    c->state.store(r);
    return r;
}

// Queues the creation of one communicator in the current group (NCCL's ncclCommInitRankDev).
ncclResult_t init_rank(ncclComm_t* newcomm, int nranks, const ncclUniqueId& id, int rank, int dev,
                       const ncclConfig_t* config) {
    if (newcomm == nullptr) return fail(ncclInvalidArgument, "CommInitRank : newcomm argument is NULL");
    *newcomm = nullptr;
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return fail(ncclInvalidArgument, "Invalid rank requested : %d/%d", rank, nranks);
    bool blocking = true;
    ncclResult_t r = parse_config(config, &blocking);
    if (r != ncclSuccess) return r;
    auto* c = new comm;
    c->rank = rank;
    c->nranks = nranks;
    c->cuda_dev = dev;
    c->blocking = blocking;
    c->timeout_s = timeout_seconds();
    c->state.store(ncclInProgress);
    r = check_blocking(c);
    if (r != ncclSuccess) {
        delete c;
        return r;
    }
    record_environment();
    *newcomm = as_handle(c);
    group.jobs.push_back(
        job{c, nullptr, [c, id] { return run_init(c, id); }, [c](ncclResult_t e) { c->state.store(e); }});
    return ncclSuccess;
}

struct split_record {
    int32_t color;
    int32_t key;
    uint32_t addr;
    uint16_t port;
    uint16_t pad;
};

uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/// Every taking part rank's `mine` into `all` (indexed by parent rank) over `parent`, by exchange
/// `fn`: a split's (every rank), or a shrink's (`peers`, the kept ranks, under sequence `seq`).
ncclResult_t exchange_records(comm* parent, func fn, split_record& mine, std::vector<split_record>& all,
                              std::vector<int> peers, uint64_t seq, const char* call) {
    op o;
    o.fn = fn;
    o.c = parent;
    o.sendbuff = &mine;
    o.recvbuff = all.data();
    o.count = sizeof(split_record);
    o.type = ncclUint8;
    o.peers = std::move(peers);
    o.seq = seq;
    return run_ops({&o}, call);
}

// The split itself: an allgather of (color, key, listening endpoint) over the parent, then the child's mesh.
ncclResult_t run_split(comm* parent, comm* child, int color, int key, int split_no) {
    split_record mine{color, key, 0, 0, 0};
    int lfd = -1;
    ncclResult_t r = ncclSuccess;
    if (child != nullptr) {
        uint32_t addr = 0;
        endpoint ep;
        r = advertised_address(&addr);
        if (r == ncclSuccess) r = open_listener(addr, parent->nranks, &lfd, &ep);
        mine.addr = ep.addr;
        mine.port = ep.port;
    }
    std::vector<split_record> all(size_t(parent->nranks));
    if (r == ncclSuccess) r = exchange_records(parent, func::split_exchange, mine, all, {}, 0, "ncclCommSplit");
    if (r != ncclSuccess || child == nullptr) {
        close_fd(lfd);
        return r;
    }
    std::vector<int> members;
    for (int p = 0; p < parent->nranks; ++p)
        if (all[p].color == color) members.push_back(p);
    std::stable_sort(members.begin(), members.end(), [&](int a, int b) { return all[a].key < all[b].key; });
    std::vector<endpoint> table;
    for (int p : members) table.push_back(endpoint{all[p].addr, all[p].port});
    child->nranks = int(members.size());
    child->rank = int(std::find(members.begin(), members.end(), parent->rank) - members.begin());
    child->nonce = mix(parent->nonce ^ mix(uint64_t(split_no) << 32 ^ uint32_t(color)));
    // The child is not the user's yet: aborting the parent is what ends this wait.
    const wait_limits w{child->timeout_s, &parent->aborting, "ncclCommSplit"};
    std::vector<int> fds;
    r = connect_mesh(child->rank, child->nranks, child->nonce, lfd, table, w, &fds);
    close_fd(lfd);
    if (r == ncclSuccess) {
        install_fds(child, fds);
        info("ncclCommSplit: comm %p rank %d of %d (color %d key %d of parent rank %d) listening on %s",
             static_cast<void*>(child), child->rank, child->nranks, color, key, parent->rank,
             to_string(endpoint{mine.addr, mine.port}).c_str());
    }
    return r;
}

void free_comm(comm* c) {
    for (channel& ch : c->ch) close_fd(ch.fd);
    c->magic = c->magic_end = 0;
    delete c;
}

// ncclCommInitRankConfig and ncclCommInitRankScalable (nid ids, the same on every rank; the double meets at the
// first one, NCCL spreads its bootstrap over all of them): one communicator, in an implicit group.
ncclResult_t init_rank_config(ncclComm_t* newcomm, int nranks, const ncclUniqueId* ids, int nid, int rank,
                              const ncclConfig_t* config) {
    const bool implicit = group.depth == 0;
    ++group.depth;
    ncclResult_t r = ncclSuccess;
    if (nid <= 0 || nid > nranks)
        r = fail(ncclInvalidArgument, "improper usage of ncclCommInitRank: nId = %d, nranks=%d", nid, nranks);
    else if (ids == nullptr)
        r = fail(ncclInvalidArgument, "ncclCommInitRankScalable : commIds argument is NULL");
    else
        r = init_rank(newcomm, nranks, ids[0], rank, 0, config);
    record_group_error(r);
    const ncclResult_t e = group_end_internal();
    if (r == ncclSuccess && e != ncclSuccess && e != ncclInProgress) r = e;
    if (r == ncclSuccess && newcomm != nullptr && *newcomm != nullptr) {
        comm* c = as_comm(*newcomm);
        if (!c->blocking) return ncclResult_t(c->state.load());
    }
    if (r != ncclSuccess && implicit && newcomm != nullptr && *newcomm != nullptr) {  // a blocking init that failed
        free_comm(as_comm(*newcomm));
        *newcomm = nullptr;
    }
    return r;
}

// ncclCommShrink's list: not NULL, 1 to nranks - 1 ranks of the parent, none twice, not the caller (NCCL: excluded
// ranks must not call it). Sorted into *out.
ncclResult_t check_exclusion(const comm* parent, const int* list, int count, std::vector<int>* out) {
    if (list == nullptr) return fail(ncclInvalidArgument, "ncclCommShrink : excludeRanksList argument is NULL");
    if (count <= 0 || count >= parent->nranks)
        return fail(ncclInvalidArgument, "ncclCommShrink : excludeRanksCount %d outside 1..%d", count,
                    parent->nranks - 1);
    out->assign(list, list + count);
    std::sort(out->begin(), out->end());
    for (size_t i = 0; i < out->size(); ++i) {
        const int r = (*out)[i];
        if (r < 0 || r >= parent->nranks)
            return fail(ncclInvalidArgument, "ncclCommShrink : rank %d is not in the communicator of %d ranks", r,
                        parent->nranks);
        if (i > 0 && (*out)[i - 1] == r)
            return fail(ncclInvalidArgument, "ncclCommShrink : rank %d is excluded twice", r);
    }
    if (std::binary_search(out->begin(), out->end(), parent->rank))
        return fail(ncclInvalidArgument, "ncclCommShrink : rank %d is excluded, so it must not call ncclCommShrink",
                    parent->rank);
    return ncclSuccess;
}

// NCCL_SHRINK_ABORT: ends the parent's work still in progress (a non-blocking group waiting on a hung peer) without
// an error, as NCCL's abort flags do; an error the parent had already stays.
void stop_work(comm* c) {
    if (c->state.load() != ncclInProgress) return;
    c->aborting.store(true);
    drop_job(c);
    c->aborting.store(false);
    c->state.store(ncclSuccess);
}

uint64_t exclusion_digest(const std::vector<int>& excluded) {
    uint64_t h = mix(excluded.size());
    for (int r : excluded) h = mix(h ^ uint32_t(r));
    return h;
}

// The shrink: an allgather of listening endpoints among the ranks kept, over the parent's connections as messages of
// their own kind (its sequence number a digest of the list, so that ranks passing different lists fail with a
// mismatch), then the child's mesh, its ranks in the parent's order.
ncclResult_t run_shrink(comm* parent, comm* child, const std::vector<int>& excluded) {
    if (parent->ch.size() != size_t(parent->nranks))
        return fail(ncclInvalidUsage, "ncclCommShrink : the communicator was never completed");
    std::vector<int> kept;
    for (int p = 0; p < parent->nranks; ++p)
        if (!std::binary_search(excluded.begin(), excluded.end(), p)) kept.push_back(p);
    const uint64_t digest = exclusion_digest(excluded);
    uint32_t addr = 0;
    endpoint ep;
    int lfd = -1;
    ncclResult_t r = advertised_address(&addr);
    if (r == ncclSuccess) r = open_listener(addr, int(kept.size()), &lfd, &ep);
    split_record mine{0, parent->rank, ep.addr, ep.port, 0};
    std::vector<split_record> all(size_t(parent->nranks));
    if (r == ncclSuccess)
        r = exchange_records(parent, func::shrink_exchange, mine, all, kept, digest, "ncclCommShrink");
    if (r != ncclSuccess) {
        close_fd(lfd);
        return r;
    }
    std::vector<endpoint> table;
    for (int p : kept) table.push_back(endpoint{all[p].addr, all[p].port});
    child->nranks = int(kept.size());
    child->rank = int(std::find(kept.begin(), kept.end(), parent->rank) - kept.begin());
    child->nonce = mix(parent->nonce ^ mix(digest ^ 0x5348524b00000000ULL));  // "SHRK"
    const wait_limits w{child->timeout_s, &parent->aborting, "ncclCommShrink"};
    std::vector<int> fds;
    r = connect_mesh(child->rank, child->nranks, child->nonce, lfd, table, w, &fds);
    close_fd(lfd);
    if (r == ncclSuccess) {
        install_fds(child, fds);
        info("ncclCommShrink: comm %p rank %d of %d (parent rank %d of %d) listening on %s", static_cast<void*>(child),
             child->rank, child->nranks, parent->rank, parent->nranks, to_string(ep).c_str());
    }
    return r;
}

}  // namespace
}  // namespace shunt::test_double

using namespace shunt::test_double;

// ---- Library and errors ----

SHUNT_DOUBLE_API(ncclResult_t, ncclGetVersion, int* version) {
    if (version == nullptr) return ncclInvalidArgument;
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

SHUNT_DOUBLE_API(const char*, ncclGetErrorString, ncclResult_t code) {
    switch (raw(code)) {
        case ncclSuccess: return "no error";
        case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
        case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
        case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
        case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
        case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
        case ncclRemoteError: return "remote process exited or there was a network error";
        case ncclInProgress: return "NCCL operation in progress";
        default: return "unknown result code";
    }
}

SHUNT_DOUBLE_API(const char*, ncclGetLastError, ncclComm_t comm) {
    (void)comm;  // unused, as in NCCL
    thread_local std::string copy;
    try {
        std::lock_guard<std::mutex> lock(last_error_mu);
        copy = last_error;
    } catch (...) {
        return "";
    }
    return copy.c_str();
}

SHUNT_DOUBLE_API(ncclResult_t, ncclGetUniqueId, ncclUniqueId* uniqueId) {
    return guarded("ncclGetUniqueId", [&]() -> ncclResult_t {
        if (uniqueId == nullptr) return fail(ncclInvalidArgument, "GetUniqueId : out argument is NULL");
        return make_unique_id(uniqueId);
    });
}

SHUNT_DOUBLE_API(ncclResult_t, ncclMemAlloc, void** ptr, size_t size) {
    return guarded("ncclMemAlloc", [&]() -> ncclResult_t {
        if (ptr == nullptr) return fail(ncclInvalidArgument, "ncclMemAlloc : ptr argument is NULL");
        *ptr = nullptr;
        if (size == 0) return ncclSuccess;  // as cudaMalloc of 0 bytes
        const size_t rounded = (size + 4095) / 4096 * 4096;
        if (rounded < size) return fail(ncclInvalidArgument, "ncclMemAlloc : size %zu overflows", size);
        *ptr = aligned_alloc(4096, rounded);
        if (*ptr == nullptr) return fail(ncclSystemError, "ncclMemAlloc : cannot allocate %zu bytes", size);
        return ncclSuccess;
    });
}

SHUNT_DOUBLE_API(ncclResult_t, ncclMemFree, void* ptr) {
    free(ptr);
    return ncclSuccess;
}

// ---- Groups ----

SHUNT_DOUBLE_API(ncclResult_t, ncclGroupStart) {
    ++group.depth;
    return ncclSuccess;
}

SHUNT_DOUBLE_API(ncclResult_t, ncclGroupEnd) {
    return guarded("ncclGroupEnd", [] { return group_end_internal(); });
}

// ---- Communicators ----

SHUNT_DOUBLE_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                 ncclConfig_t* config) {
    return guarded("ncclCommInitRankConfig",
                   [&]() -> ncclResult_t { return init_rank_config(comm, nranks, &commId, 1, rank, config); });
}

SHUNT_DOUBLE_API(ncclResult_t, ncclCommInitRankScalable, ncclComm_t* newcomm, int nranks, int myrank, int nId,
                 ncclUniqueId* commIds, ncclConfig_t* config) {
    return guarded("ncclCommInitRankScalable",
                   [&]() -> ncclResult_t { return init_rank_config(newcomm, nranks, commIds, nId, myrank, config); });
}

SHUNT_DOUBLE_API(ncclResult_t, ncclCommInitRank, ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
    return guarded("ncclCommInitRank", [&]() -> ncclResult_t {
        const bool implicit = group.depth == 0;
        ++group.depth;
        ncclResult_t r = init_rank(comm, nranks, commId, rank, 0, nullptr);
        record_group_error(r);
        const ncclResult_t e = group_end_internal();
        if (r == ncclSuccess && e != ncclSuccess && e != ncclInProgress) r = e;
        if (r != ncclSuccess && implicit && comm != nullptr && *comm != nullptr) {
            free_comm(as_comm(*comm));
            *comm = nullptr;
        }
        return r;
    });
}

SHUNT_DOUBLE_API(ncclResult_t, ncclCommInitAll, ncclComm_t* comms, int ndev, const int* devlist) {
    return guarded("ncclCommInitAll", [&]() -> ncclResult_t {
        if (comms == nullptr) return fail(ncclInvalidArgument, "CommInitAll : comms argument is NULL");
        if (ndev < 0) return fail(ncclInvalidArgument, "Invalid device count requested : %d", ndev);
        if (devlist != nullptr)
            for (int i = 0; i < ndev; ++i) {
                if (devlist[i] < 0) return fail(ncclInvalidArgument, "Invalid device %d", devlist[i]);
                for (int j = 0; j < i; ++j)
                    if (devlist[j] == devlist[i]) return fail(ncclInvalidUsage, "Duplicate device %d", devlist[i]);
            }
        if (ndev == 0) return ncclSuccess;
        ncclUniqueId id;
        ncclResult_t r = ncclGetUniqueId(&id);  // through the exported name, as NCCL does
        if (r != ncclSuccess) return r;
        for (int i = 0; i < ndev; ++i) comms[i] = nullptr;
        ++group.depth;
        for (int i = 0; i < ndev && r == ncclSuccess; ++i)
            r = init_rank(comms + i, ndev, id, i, devlist != nullptr ? devlist[i] : i, nullptr);
        record_group_error(r);
        const ncclResult_t e = group_end_internal();
        if (r == ncclSuccess) r = e;
        if (r != ncclSuccess)
            for (int i = 0; i < ndev; ++i)
                if (comms[i] != nullptr) free_comm(as_comm(comms[i])), comms[i] = nullptr;
        return r;
    });
}

SHUNT_DOUBLE_API(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                 ncclConfig_t* config) {
    return guarded("ncclCommSplit", [&]() -> ncclResult_t {
        ++group.depth;
        shunt::test_double::comm* parent = nullptr;
        shunt::test_double::comm* child = nullptr;
        ncclResult_t r = check_comm(comm, "ncclCommSplit", &parent);
        if (r == ncclSuccess && newcomm == nullptr)
            r = fail(ncclInvalidArgument, "ncclCommSplit : newcomm argument is NULL");
        if (r == ncclSuccess) r = ensure_ready(parent);
        if (r == ncclSuccess) {
            *newcomm = nullptr;  // until the split is complete
            if (color != NCCL_SPLIT_NOCOLOR) {
                bool blocking = parent->blocking;
                if (config != nullptr) r = parse_config(config, &blocking);
                child = new shunt::test_double::comm;
                child->blocking = blocking;
                child->cuda_dev = parent->cuda_dev;
                child->timeout_s = parent->timeout_s;
            }
        }
        if (r == ncclSuccess) r = check_blocking(parent);
        if (r == ncclSuccess) {
            const int split_no = ++parent->split_count;
            group.jobs.push_back(job{parent, parent,
                                     [=] {
                                         ncclResult_t s = run_split(parent, child, color, key, split_no);
                                         if (child != nullptr && s == ncclSuccess)
                                             __atomic_store_n(newcomm, as_handle(child), __ATOMIC_RELEASE);
                                         else if (child != nullptr)
                                             free_comm(child);
                                         if (!parent->blocking) parent->state.store(s);
                                         return s;
                                     },
                                     [=](ncclResult_t) {
                                         if (child != nullptr) free_comm(child);
                                     }});
            child = nullptr;  // the job owns it
        }
        delete child;
        record_group_error(r);
        const ncclResult_t e = group_end_internal();
        if (e != ncclSuccess && e != ncclInProgress) return e;
        return r;
    });
}

// Collective over the ranks kept; the excluded ones do not call it. A NULL config inherits the parent's blocking mode.
// NCCL_SHRINK_ABORT first ends the parent's work in progress; other flag bits are ignored, as NCCL 2.28 does.
SHUNT_DOUBLE_API(ncclResult_t, ncclCommShrink, ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                 ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
    return guarded("ncclCommShrink", [&]() -> ncclResult_t {
        ++group.depth;
        shunt::test_double::comm* parent = nullptr;
        shunt::test_double::comm* child = nullptr;
        std::vector<int> excluded;
        const bool abort = (shrinkFlags & NCCL_SHRINK_ABORT) != 0;
        ncclResult_t r = check_comm(comm, "ncclCommShrink", &parent);
        if (r == ncclSuccess && newcomm == nullptr)
            r = fail(ncclInvalidArgument, "ncclCommShrink : newcomm argument is NULL");
        if (r == ncclSuccess) r = check_exclusion(parent, excludeRanksList, excludeRanksCount, &excluded);
        if (r == ncclSuccess && abort) stop_work(parent);
        if (r == ncclSuccess) r = ensure_ready(parent);
        if (r == ncclSuccess) {
            *newcomm = nullptr;  // until the shrink is complete
            bool blocking = parent->blocking;
            if (config != nullptr) r = parse_config(config, &blocking);
            if (r == ncclSuccess) {
                child = new shunt::test_double::comm;
                child->blocking = blocking;
                child->cuda_dev = parent->cuda_dev;
                child->timeout_s = parent->timeout_s;
            }
        }
        if (r == ncclSuccess) r = check_blocking(parent);
        if (r == ncclSuccess) {
            group.jobs.push_back(job{parent, parent,
                                     [=] {
                                         ncclResult_t s = run_shrink(parent, child, excluded);
                                         if (s == ncclSuccess)
                                             __atomic_store_n(newcomm, as_handle(child), __ATOMIC_RELEASE);
                                         else
                                             free_comm(child);
                                         if (!parent->blocking) parent->state.store(s);
                                         return s;
                                     },
                                     [=](ncclResult_t) { free_comm(child); }});
            child = nullptr;  // the job owns it
        }
        delete child;
        record_group_error(r);
        const ncclResult_t e = group_end_internal();
        if (e != ncclSuccess && e != ncclInProgress) return e;
        return r;
    });
}

SHUNT_DOUBLE_API(ncclResult_t, ncclCommFinalize, ncclComm_t comm) {
    return guarded("ncclCommFinalize", [&]() -> ncclResult_t {
        if (comm == nullptr) return ncclSuccess;
        shunt::test_double::comm* c = nullptr;
        ncclResult_t r = check_comm(comm, "ncclCommFinalize", &c);
        if (r == ncclSuccess) r = ensure_ready(c);
        if (r == ncclSuccess && c->finalize_called) r = fail(ncclInvalidArgument, "ncclCommFinalize : called twice");
        if (r != ncclSuccess) {
            if (c != nullptr && !c->blocking) c->state.store(r);  // as NCCL: the error becomes the state
            return r;
        }
        c->finalize_called = true;
        if (c->blocking) return ncclSuccess;
        // Everything has completed already; a non-blocking finalize still reports ncclInProgress once, as NCCL does.
        c->state.store(ncclInProgress);
        auto handle = std::make_shared<group_job>();
        group_job* raw = handle.get();
        {
            std::lock_guard<std::mutex> lock(c->job_mu);
            c->job = handle;
        }
        try {
            raw->thread = std::thread([c, raw] {
                c->state.store(ncclSuccess);
                std::lock_guard<std::mutex> lock(raw->m);
                raw->done = true;
                raw->cv.notify_all();
            });
        } catch (...) {
            c->state.store(ncclSuccess);  // nothing was left to do
            std::lock_guard<std::mutex> lock(raw->m);
            raw->done = true;
        }
        return ncclInProgress;
    });
}

SHUNT_DOUBLE_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm) {
    return guarded("ncclCommDestroy", [&]() -> ncclResult_t {
        if (comm == nullptr) return ncclSuccess;
        shunt::test_double::comm* c = nullptr;
        ncclResult_t r = check_comm(comm, "ncclCommDestroy", &c);
        if (r == ncclSuccess) r = ensure_ready(c);  // NCCL: an error state is returned and the comm is kept
        if (r != ncclSuccess) return r;
        drop_job(c);
        { std::lock_guard<std::mutex> lock(c->mu); }
        free_comm(c);
        return ncclSuccess;
    });
}

SHUNT_DOUBLE_API(ncclResult_t, ncclCommAbort, ncclComm_t comm) {
    return guarded("ncclCommAbort", [&]() -> ncclResult_t {
        if (comm == nullptr) return ncclSuccess;
        shunt::test_double::comm* checked = nullptr;
        ncclResult_t r = check_comm(comm, "ncclCommAbort", &checked);
        if (r != ncclSuccess) return r;
        shunt::test_double::comm* c = as_comm(comm);
        c->aborting.store(true);
        // Wakes whatever waits on these connections, here and at the peers.
        for (channel& ch : c->ch)
            if (ch.fd >= 0) shutdown(ch.fd, SHUT_RDWR);
        drop_job(c);
        { std::lock_guard<std::mutex> lock(c->mu); }
        free_comm(c);
        return ncclSuccess;
    });
}

SHUNT_DOUBLE_API(ncclResult_t, ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t* asyncError) {
    return guarded("ncclCommGetAsyncError", [&]() -> ncclResult_t {
        shunt::test_double::comm* c = nullptr;
        ncclResult_t r = check_comm(comm, "ncclGetAsyncError", &c);
        if (r != ncclSuccess) return r;
        if (asyncError == nullptr) return fail(ncclInvalidArgument, "ncclGetAsyncError : asyncError argument is NULL");
        *asyncError = ncclResult_t(c->state.load());
        if (*asyncError == ncclSuccess) drop_job(c);
        return ncclSuccess;
    });
}

SHUNT_DOUBLE_API(ncclResult_t, ncclCommCount, const ncclComm_t comm, int* count) {
    return guarded("ncclCommCount", [&]() -> ncclResult_t {
        shunt::test_double::comm* c = nullptr;
        ncclResult_t r = check_comm(comm, "CommCount", &c);
        if (r == ncclSuccess && count == nullptr) r = fail(ncclInvalidArgument, "CommCount : count argument is NULL");
        if (r == ncclSuccess) r = ensure_ready(c);
        if (r == ncclSuccess) *count = c->nranks;
        return r;
    });
}

SHUNT_DOUBLE_API(ncclResult_t, ncclCommCuDevice, const ncclComm_t comm, int* device) {
    return guarded("ncclCommCuDevice", [&]() -> ncclResult_t {
        shunt::test_double::comm* c = nullptr;
        ncclResult_t r = check_comm(comm, "CommCuDevice", &c);
        if (r == ncclSuccess && device == nullptr)
            r = fail(ncclInvalidArgument, "CommCuDevice : devid argument is NULL");
        if (r == ncclSuccess) r = ensure_ready(c);
        if (r == ncclSuccess) *device = c->cuda_dev;
        return r;
    });
}

SHUNT_DOUBLE_API(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int* rank) {
    return guarded("ncclCommUserRank", [&]() -> ncclResult_t {
        shunt::test_double::comm* c = nullptr;
        ncclResult_t r = check_comm(comm, "CommUserRank", &c);
        if (r == ncclSuccess && rank == nullptr) r = fail(ncclInvalidArgument, "CommUserRank : rank argument is NULL");
        if (r == ncclSuccess) r = ensure_ready(c);
        if (r == ncclSuccess) *rank = c->rank;
        return r;
    });
}

SHUNT_DOUBLE_API(ncclResult_t, ncclCommRegister, const ncclComm_t comm, void* buff, size_t size, void** handle) {
    return guarded("ncclCommRegister", [&]() -> ncclResult_t {
        (void)size;
        shunt::test_double::comm* c = nullptr;
        ncclResult_t r = check_comm(comm, "ncclCommRegister", &c);
        if (r == ncclSuccess && handle == nullptr)
            r = fail(ncclInvalidArgument, "ncclCommRegister : handle argument is NULL");
        if (r == ncclSuccess) *handle = buff;  // host memory needs no registration
        return r;
    });
}

SHUNT_DOUBLE_API(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void* handle) {
    return guarded("ncclCommDeregister", [&]() -> ncclResult_t {
        (void)handle;
        shunt::test_double::comm* c = nullptr;
        return check_comm(comm, "ncclCommDeregister", &c);
    });
}

// ---- Reduction operators ----

SHUNT_DOUBLE_API(ncclResult_t, ncclRedOpCreatePreMulSum, ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                 ncclScalarResidence_t residence, ncclComm_t comm) {
    return guarded("ncclRedOpCreatePreMulSum", [&]() -> ncclResult_t {
        shunt::test_double::comm* c = nullptr;
        ncclResult_t r = check_comm(comm, "ncclRedOpCreatePreMulSum", &c);
        if (r == ncclSuccess) r = ensure_ready(c);
        if (r != ncclSuccess) return r;
        if (op == nullptr || scalar == nullptr)
            return fail(ncclInvalidArgument, "ncclRedOpCreatePreMulSum : op or scalar argument is NULL");
        if (type_size(datatype) == 0)
            return fail(ncclInvalidArgument, "ncclRedOpCreatePreMulSum : invalid type %d", int(datatype));
        if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate)
            return fail(ncclInvalidArgument, "ncclRedOpCreatePreMulSum : invalid residence %d", int(residence));
        size_t ix = 0;
        while (ix < c->user_ops.size() && c->user_ops[ix].used) ++ix;
        if (ix == c->user_ops.size()) c->user_ops.emplace_back();
        user_op& u = c->user_ops[ix];
        u = user_op{};
        u.used = true;
        u.type = datatype;
        u.by_pointer = residence == ncclScalarDevice;
        if (u.by_pointer)
            u.ptr = scalar;
        else
            memcpy(u.scalar, scalar, type_size(datatype));
        *op = ncclRedOp_t(int(ncclNumOps) + int(ix));
        return ncclSuccess;
    });
}

SHUNT_DOUBLE_API(ncclResult_t, ncclRedOpDestroy, ncclRedOp_t op, ncclComm_t comm) {
    return guarded("ncclRedOpDestroy", [&]() -> ncclResult_t {
        const int v = raw(op);
        if (0 <= v && v < int(ncclNumOps))
            return fail(ncclInvalidArgument, "ncclRedOpDestroy : operator is a NCCL builtin.");
        if (v < 0 || v > int(ncclMaxRedOp))
            return fail(ncclInvalidArgument, "ncclRedOpDestroy :  operator is garbage.");
        shunt::test_double::comm* c = nullptr;
        ncclResult_t r = check_comm(comm, "ncclRedOpDestroy", &c);
        if (r != ncclSuccess) return r;
        const size_t ix = size_t(v) - ncclNumOps;
        if (ix >= c->user_ops.size() || !c->user_ops[ix].used)
            return fail(ncclInvalidArgument, "ncclRedOpDestroy : operator is unknown to this communicator.");
        c->user_ops[ix].used = false;
        return ncclSuccess;
    });
}

// ---- Collectives and point-to-point ----

SHUNT_DOUBLE_API(ncclResult_t, ncclAllReduce, const void* sendbuff, void* recvbuff, size_t count,
                 ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    return guarded("ncclAllReduce", [&]() -> ncclResult_t {
        return enqueue(func::allreduce, sendbuff, recvbuff, count, datatype, op, 0, comm, stream);
    });
}

SHUNT_DOUBLE_API(ncclResult_t, ncclReduce, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                 ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
    return guarded("ncclReduce", [&]() -> ncclResult_t {
        return enqueue(func::reduce, sendbuff, recvbuff, count, datatype, op, root, comm, stream);
    });
}

SHUNT_DOUBLE_API(ncclResult_t, ncclBroadcast, const void* sendbuff, void* recvbuff, size_t count,
                 ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
    return guarded("ncclBroadcast", [&]() -> ncclResult_t {
        return enqueue(func::broadcast, sendbuff, recvbuff, count, datatype, ncclSum, root, comm, stream);
    });
}

SHUNT_DOUBLE_API(ncclResult_t, ncclBcast, void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                 cudaStream_t stream) {
    // Through the exported name, as NCCL 2.28 does: a preloaded ncclBroadcast sees this inner call.
    return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

SHUNT_DOUBLE_API(ncclResult_t, ncclReduceScatter, const void* sendbuff, void* recvbuff, size_t recvcount,
                 ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    return guarded("ncclReduceScatter", [&]() -> ncclResult_t {
        return enqueue(func::reduce_scatter, sendbuff, recvbuff, recvcount, datatype, op, 0, comm, stream);
    });
}

SHUNT_DOUBLE_API(ncclResult_t, ncclAllGather, const void* sendbuff, void* recvbuff, size_t sendcount,
                 ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
    return guarded("ncclAllGather", [&]() -> ncclResult_t {
        return enqueue(func::allgather, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0, comm, stream);
    });
}

SHUNT_DOUBLE_API(ncclResult_t, ncclAlltoAll, const void* sendbuff, void* recvbuff, size_t count,
                 ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
    return guarded("ncclAlltoAll", [&]() -> ncclResult_t {
        return enqueue(func::alltoall, sendbuff, recvbuff, count, datatype, ncclSum, 0, comm, stream);
    });
}

SHUNT_DOUBLE_API(ncclResult_t, ncclGather, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                 int root, ncclComm_t comm, cudaStream_t stream) {
    return guarded("ncclGather", [&]() -> ncclResult_t {
        return enqueue(func::gather, sendbuff, recvbuff, count, datatype, ncclSum, root, comm, stream);
    });
}

SHUNT_DOUBLE_API(ncclResult_t, ncclScatter, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                 int root, ncclComm_t comm, cudaStream_t stream) {
    return guarded("ncclScatter", [&]() -> ncclResult_t {
        return enqueue(func::scatter, sendbuff, recvbuff, count, datatype, ncclSum, root, comm, stream);
    });
}

SHUNT_DOUBLE_API(ncclResult_t, ncclSend, const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                 ncclComm_t comm, cudaStream_t stream) {
    return guarded("ncclSend", [&]() -> ncclResult_t {
        return enqueue(func::send, sendbuff, nullptr, count, datatype, ncclSum, peer, comm, stream);
    });
}

SHUNT_DOUBLE_API(ncclResult_t, ncclRecv, void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                 ncclComm_t comm, cudaStream_t stream) {
    return guarded("ncclRecv", [&]() -> ncclResult_t {
        return enqueue(func::recv, nullptr, recvbuff, count, datatype, ncclSum, peer, comm, stream);
    });
}
