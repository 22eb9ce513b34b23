// tests/nccl/double_engine.cpp: runs the NCCL double's queued operations: one poll() loop over every connection
// of every communicator in the group, so grouped sends and receives never deadlock and one thread can drive
// several communicators. Each collective sends its whole contribution to the ranks that need it and reduces
// locally in rank order. Device buffers are staged around the run (double_device.cpp).
#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <string>

#include "double_internal.hpp"

namespace shunt::test_double {

const char* func_name(func f) {
    switch (f) {
        case func::allreduce: return "ncclAllReduce";
        case func::reduce: return "ncclReduce";
        case func::broadcast: return "ncclBroadcast";
        case func::reduce_scatter: return "ncclReduceScatter";
        case func::allgather: return "ncclAllGather";
        case func::alltoall: return "ncclAlltoAll";
        case func::gather: return "ncclGather";
        case func::scatter: return "ncclScatter";
        case func::send: return "ncclSend";
        case func::recv: return "ncclRecv";
        case func::split_exchange: return "ncclCommSplit";
        case func::shrink_exchange: return "ncclCommShrink";
    }
    return "?";
}

namespace {

constexpr uint32_t msg_magic = 0x4d534731;
using steady = std::chrono::steady_clock;

struct work {
    comm* c;
    std::vector<op*> colls;  // in program order, one at a time
    size_t next = 0;
    op* active = nullptr;
    std::vector<op*> p2p;  // all at once
};

// The run: what the errors name.
struct run_ctx {
    const char* call;
};

ncclResult_t mismatch(const run_ctx& x, const comm* c, int peer, const header& h, const rx_post& p) {
    return fail(ncclInvalidUsage,
                "%s: rank %d got %s #%llu of %llu bytes from rank %d where it expected %s #%llu of %zu bytes "
                "(the ranks' calls do not match)",
                x.call, c->rank, func_name(func(h.fn)), (unsigned long long)h.seq, (unsigned long long)h.bytes, peer,
                func_name(p.fn), (unsigned long long)p.seq, p.bytes);
}

bool fits(const header& h, const rx_post& p) { return h.bytes == p.bytes && func(h.fn) == p.fn && h.seq == p.seq; }

ncclResult_t push_tx(const run_ctx& x, op* o, int peer, const void* data, size_t bytes, msg_kind kind, uint64_t seq) {
    comm* c = o->c;
    channel& ch = c->ch[peer];
    if (ch.closed)
        return fail(ncclRemoteError, "%s: rank %d cannot send to rank %d: it closed the connection", x.call, c->rank,
                    peer);
    ++o->pending_tx;
    ch.txq.push_back(tx_item{header{msg_magic, kind, uint16_t(o->fn == func::recv ? func::send : o->fn), seq, bytes},
                             static_cast<const char*>(data), 0, o});
    return ncclSuccess;
}

ncclResult_t post_rx(const run_ctx& x, op* o, int peer, void* dst, size_t bytes, msg_kind kind, uint64_t seq) {
    comm* c = o->c;
    channel& ch = c->ch[peer];
    const rx_post p{o, static_cast<char*>(dst), bytes, o->fn == func::recv ? func::send : o->fn, seq};
    if (!ch.unexpected[kind].empty()) {
        unexpected_msg& m = ch.unexpected[kind].front();
        if (!fits(m.hdr, p)) return mismatch(x, c, peer, m.hdr, p);
        if (bytes > 0) std::memcpy(dst, m.body.data(), bytes);
        ch.unexpected[kind].pop_front();
        return ncclSuccess;
    }
    if (ch.closed && !(ch.in_body && ch.hdr.kind == kind))
        return fail(ncclRemoteError, "%s: rank %d waits for rank %d, which closed the connection", x.call, c->rank,
                    peer);
    ++o->pending_rx;
    ch.posted[kind].push_back(p);
    return ncclSuccess;
}

void finish_rx(op* o) { --o->pending_rx; }

// Self send/receive: matched in order within the group, copied directly.
ncclResult_t match_self(const run_ctx& x, comm* c) {
    while (!c->self_sends.empty() && !c->self_recvs.empty()) {
        op* s = c->self_sends.front();
        op* r = c->self_recvs.front();
        const size_t sb = s->count * type_size(s->type), rb = r->count * type_size(r->type);
        if (sb != rb)
            return fail(ncclInvalidUsage, "%s: rank %d sends %zu bytes to itself but receives %zu", x.call, c->rank, sb,
                        rb);
        if (sb > 0) std::memmove(r->recvbuff, s->sendbuff, sb);
        s->pending_tx = 0;
        r->pending_rx = 0;
        c->self_sends.pop_front();
        c->self_recvs.pop_front();
    }
    return ncclSuccess;
}

ncclResult_t start_p2p(const run_ctx& x, op* o) {
    comm* c = o->c;
    const size_t bytes = o->count * type_size(o->type);
    const int peer = o->root;
    if (o->fn == func::send) {
        if (peer == c->rank) {
            o->pending_tx = 1;
            c->self_sends.push_back(o);
            return ncclSuccess;
        }
        return push_tx(x, o, peer, o->sendbuff, bytes, kind_p2p, c->ch[peer].p2p_sent++);
    }
    if (peer == c->rank) {
        o->pending_rx = 1;
        c->self_recvs.push_back(o);
        return ncclSuccess;
    }
    return post_rx(x, o, peer, o->recvbuff, bytes, kind_p2p, c->ch[peer].p2p_received++);
}

// Posts a collective's messages: each rank sends its whole contribution to every rank that needs it.
ncclResult_t start_coll(const run_ctx& x, op* o) {
    comm* c = o->c;
    const int n = c->nranks, me = c->rank;
    const size_t bytes = o->count * type_size(o->type);
    const char* send = static_cast<const char*>(o->sendbuff);
    char* recv = static_cast<char*>(o->recvbuff);
    if (o->fn != func::shrink_exchange) o->seq = c->coll_seq++;
    // The slot of peer p in the staging buffer (the rank itself has none).
    auto slot = [&](int p) { return o->staging.data() + size_t(p < me ? p : p - 1) * bytes; };
    ncclResult_t r = ncclSuccess;
    const msg_kind kind = o->fn == func::shrink_exchange ? kind_shrink : kind_coll;
    auto tx = [&](int p, const void* d) {
        if (r == ncclSuccess) r = push_tx(x, o, p, d, bytes, kind, o->seq);
    };
    auto rx = [&](int p, void* d) {
        if (r == ncclSuccess) r = post_rx(x, o, p, d, bytes, kind, o->seq);
    };
    switch (o->fn) {
        case func::allreduce:
            o->staging.resize(size_t(n - 1) * bytes);
            for (int p = 0; p < n; ++p)
                if (p != me) tx(p, send), rx(p, slot(p));
            break;
        case func::reduce:
            if (me != o->root) {
                tx(o->root, send);
            } else {
                o->staging.resize(size_t(n - 1) * bytes);
                for (int p = 0; p < n; ++p)
                    if (p != me) rx(p, slot(p));
            }
            break;
        case func::broadcast:
            if (me == o->root) {
                for (int p = 0; p < n; ++p)
                    if (p != me) tx(p, send);
            } else {
                rx(o->root, recv);
            }
            break;
        case func::reduce_scatter:
        case func::alltoall:
            o->staging.resize(size_t(n - 1) * bytes);
            for (int p = 0; p < n; ++p)
                if (p != me) tx(p, send + size_t(p) * bytes), rx(p, slot(p));
            break;
        case func::allgather:
        case func::split_exchange:
            for (int p = 0; p < n; ++p)
                if (p != me) tx(p, send), rx(p, recv + size_t(p) * bytes);
            break;
        case func::shrink_exchange:
            for (int p : o->peers)
                if (p != me) tx(p, send), rx(p, recv + size_t(p) * bytes);
            break;
        case func::gather:
            if (me != o->root) {
                tx(o->root, send);
            } else {
                for (int p = 0; p < n; ++p)
                    if (p != me) rx(p, recv + size_t(p) * bytes);
            }
            break;
        case func::scatter:
            if (me == o->root) {
                for (int p = 0; p < n; ++p)
                    if (p != me) tx(p, send + size_t(p) * bytes);
            } else {
                rx(o->root, recv);
            }
            break;
        case func::send:
        case func::recv: break;
    }
    return r;
}

// Once every message of a collective has gone and come: the local part (reductions in rank order, own blocks).
void finish_coll(op* o) {
    comm* c = o->c;
    const int n = c->nranks, me = c->rank;
    const size_t bytes = o->count * type_size(o->type);
    const char* send = static_cast<const char*>(o->sendbuff);
    char* recv = static_cast<char*>(o->recvbuff);
    auto slot = [&](int p) -> const char* { return o->staging.data() + size_t(p < me ? p : p - 1) * bytes; };
    auto copy = [](void* dst, const void* src, size_t b) {
        if (dst != src && b > 0) std::memmove(dst, src, b);
    };
    std::vector<const void*> srcs(size_t(n), nullptr);
    switch (o->fn) {
        case func::allreduce:
        case func::reduce:
            if (o->fn == func::reduce && me != o->root) break;
            for (int p = 0; p < n; ++p) srcs[p] = p == me ? static_cast<const void*>(send) : slot(p);
            reduce(o->type, o->red, recv, srcs.data(), n, o->count);
            break;
        case func::reduce_scatter:
            for (int p = 0; p < n; ++p)
                srcs[p] = p == me ? static_cast<const void*>(send + size_t(me) * bytes) : slot(p);
            reduce(o->type, o->red, recv, srcs.data(), n, o->count);
            break;
        case func::broadcast:
            if (me == o->root) copy(recv, send, bytes);
            break;
        case func::allgather:
        case func::split_exchange:
        case func::shrink_exchange: copy(recv + size_t(me) * bytes, send, bytes); break;
        case func::alltoall:
            copy(recv + size_t(me) * bytes, send + size_t(me) * bytes, bytes);
            for (int p = 0; p < n; ++p)
                if (p != me) copy(recv + size_t(p) * bytes, slot(p), bytes);
            break;
        case func::gather:
            if (me == o->root) copy(recv + size_t(me) * bytes, send, bytes);
            break;
        case func::scatter:
            if (me == o->root) copy(recv, send + size_t(me) * bytes, bytes);
            break;
        case func::send:
        case func::recv: break;
    }
    o->staging.clear();
    o->staging.shrink_to_fit();
    o->finished = true;
}

// Whether the peer still owes or is owed something in this run.
bool expects_more(const channel& ch) {
    return !ch.txq.empty() || !ch.posted[kind_coll].empty() || !ch.posted[kind_p2p].empty() ||
           !ch.posted[kind_shrink].empty() || (ch.in_body && ch.body_post.owner != nullptr);
}

// A message's header is complete: read its body into the posted receive, or keep it as unexpected.
ncclResult_t begin_body(const run_ctx& x, comm* c, int peer, channel& ch) {
    const header& h = ch.hdr;
    if (h.magic != msg_magic || h.kind >= msg_kinds)
        return fail(ncclInternalError, "%s: rank %d read a corrupt message header from rank %d", x.call, c->rank, peer);
    ch.in_body = true;
    ch.body_got = 0;
    ch.body_post = rx_post{};
    if (ch.unexpected[h.kind].empty() && !ch.posted[h.kind].empty()) {
        ch.body_post = ch.posted[h.kind].front();
        if (!fits(h, ch.body_post)) return mismatch(x, c, peer, h, ch.body_post);
        ch.posted[h.kind].pop_front();
    } else {
        ch.body_buf.assign(h.bytes, 0);
    }
    return ncclSuccess;
}

ncclResult_t end_body(const run_ctx& x, comm* c, int peer, channel& ch) {
    const int kind = ch.hdr.kind;
    if (ch.body_post.owner != nullptr) {
        finish_rx(ch.body_post.owner);
    } else if (!ch.posted[kind].empty()) {  // posted while this earlier message was being read
        const rx_post p = ch.posted[kind].front();
        if (!fits(ch.hdr, p)) return mismatch(x, c, peer, ch.hdr, p);
        ch.posted[kind].pop_front();
        if (p.bytes > 0) std::memcpy(p.dst, ch.body_buf.data(), p.bytes);
        finish_rx(p.owner);
        ch.body_buf.clear();
    } else {
        ch.unexpected[kind].push_back(unexpected_msg{ch.hdr, std::move(ch.body_buf)});
        ch.body_buf = {};
    }
    ch.in_body = false;
    ch.hdr_got = 0;
    return ncclSuccess;
}

ncclResult_t read_channel(const run_ctx& x, comm* c, int peer, channel& ch, bool* progressed) {
    for (int round = 0; round < 64; ++round) {
        char* dst;
        size_t want;
        if (!ch.in_body) {
            dst = reinterpret_cast<char*>(&ch.hdr) + ch.hdr_got;
            want = sizeof(header) - ch.hdr_got;
        } else {
            dst = (ch.body_post.owner != nullptr ? ch.body_post.dst : ch.body_buf.data()) + ch.body_got;
            want = std::min<size_t>(ch.hdr.bytes - ch.body_got, size_t(1) << 22);
        }
        ssize_t got = 0;
        if (want > 0) {
            got = recv(ch.fd, dst, want, MSG_DONTWAIT);
            if (got == 0) {
                ch.closed = true;
                if (expects_more(ch) || ch.in_body || ch.hdr_got > 0)
                    return fail(ncclRemoteError, "%s: rank %d lost rank %d (it closed the connection)", x.call, c->rank,
                                peer);
                return ncclSuccess;
            }
            if (got < 0) {
                if (errno == EINTR) continue;
                if (errno == EAGAIN || errno == EWOULDBLOCK) return ncclSuccess;
                ch.closed = true;
                if (!expects_more(ch) && !ch.in_body && ch.hdr_got == 0) return ncclSuccess;
                return fail(ncclRemoteError, "%s: rank %d lost rank %d: %s", x.call, c->rank, peer, strerror(errno));
            }
            *progressed = true;
        }
        if (!ch.in_body) {
            ch.hdr_got += size_t(got);
            if (ch.hdr_got < sizeof(header)) continue;
            ncclResult_t r = begin_body(x, c, peer, ch);
            if (r != ncclSuccess) return r;
            if (ch.hdr.bytes == 0) r = end_body(x, c, peer, ch);
            if (r != ncclSuccess) return r;
        } else {
            ch.body_got += size_t(got);
            if (ch.body_got == ch.hdr.bytes) {
                ncclResult_t r = end_body(x, c, peer, ch);
                if (r != ncclSuccess) return r;
            }
        }
    }
    return ncclSuccess;
}

ncclResult_t write_channel(const run_ctx& x, comm* c, int peer, channel& ch, bool* progressed) {
    while (!ch.txq.empty()) {
        tx_item& t = ch.txq.front();
        iovec iov[2];
        int nv = 0;
        const size_t total = sizeof(header) + t.hdr.bytes;
        if (t.written < sizeof(header)) {
            iov[nv++] = iovec{reinterpret_cast<char*>(&t.hdr) + t.written, sizeof(header) - t.written};
            if (t.hdr.bytes > 0) iov[nv++] = iovec{const_cast<char*>(t.data), t.hdr.bytes};
        } else {
            const size_t off = t.written - sizeof(header);
            iov[nv++] = iovec{const_cast<char*>(t.data) + off, t.hdr.bytes - off};
        }
        msghdr m{};
        m.msg_iov = iov;
        m.msg_iovlen = size_t(nv);
        const ssize_t n = sendmsg(ch.fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return ncclSuccess;
            ch.closed = true;
            return fail(ncclRemoteError, "%s: rank %d lost rank %d: %s", x.call, c->rank, peer, strerror(errno));
        }
        *progressed = true;
        t.written += size_t(n);
        if (t.written == total) {
            --t.owner->pending_tx;
            ch.txq.pop_front();
        }
    }
    return ncclSuccess;
}

std::string describe_wait(const std::vector<work>& works) {
    std::string s;
    for (const work& w : works)
        for (size_t p = 0; p < w.c->ch.size(); ++p) {
            const channel& ch = w.c->ch[p];
            if (!expects_more(ch)) continue;
            if (!s.empty()) s += ", ";
            s += "rank " + std::to_string(w.c->rank) + " of " + std::to_string(w.c->nranks) + " with rank " +
                 std::to_string(p) + " (" + std::to_string(ch.txq.size()) + " to send, " +
                 std::to_string(ch.posted[kind_coll].size() + ch.posted[kind_p2p].size() +
                                ch.posted[kind_shrink].size()) +
                 " to receive)";
        }
    return s;
}

ncclResult_t engine(const run_ctx& x, std::vector<work>& works) {
    ncclResult_t r = ncclSuccess;
    double timeout = 0;
    for (work& w : works) {
        timeout = std::max(timeout, w.c->timeout_s);
        for (op* o : w.p2p)
            if (r == ncclSuccess) r = start_p2p(x, o);
        if (r == ncclSuccess) r = match_self(x, w.c);
    }
    if (r != ncclSuccess) return r;
    std::vector<pollfd> fds;
    std::vector<std::pair<comm*, int>> who;
    auto last_progress = steady::now();
    for (;;) {
        bool done = true, waiting = false;
        for (work& w : works) {
            if (w.c->aborting.load())
                return fail(ncclSystemError, "%s: communicator (rank %d) aborted", x.call, w.c->rank);
            for (;;) {
                if (w.active != nullptr) {
                    if (w.active->pending_tx > 0 || w.active->pending_rx > 0) break;
                    finish_coll(w.active);
                    w.active = nullptr;
                }
                if (w.next == w.colls.size()) break;
                w.active = w.colls[w.next++];
                r = start_coll(x, w.active);
                if (r != ncclSuccess) return r;
            }
            if (w.active != nullptr) done = false;
            for (op* o : w.p2p) {
                if (o->finished) continue;
                if (o->pending_tx == 0 && o->pending_rx == 0)
                    o->finished = true;
                else
                    done = false;
            }
            for (const channel& ch : w.c->ch) waiting = waiting || expects_more(ch);
        }
        if (done) return ncclSuccess;
        if (!waiting)
            return fail(ncclInvalidUsage,
                        "%s: a send or receive to the rank itself has no matching receive or send in the same group",
                        x.call);
        fds.clear();
        who.clear();
        for (work& w : works)
            for (size_t p = 0; p < w.c->ch.size(); ++p) {
                channel& ch = w.c->ch[p];
                if (ch.fd < 0 || ch.closed) continue;
                fds.push_back(pollfd{ch.fd, short(POLLIN | (ch.txq.empty() ? 0 : POLLOUT)), 0});
                who.emplace_back(w.c, int(p));
            }
        const int n = poll(fds.data(), fds.size(), 100);
        if (n < 0 && errno != EINTR) return fail(ncclSystemError, "%s: poll failed: %s", x.call, strerror(errno));
        for (work& w : works)  // ncclCommAbort shuts the sockets down: say so rather than "lost rank"
            if (w.c->aborting.load())
                return fail(ncclSystemError, "%s: communicator (rank %d) aborted", x.call, w.c->rank);
        bool progressed = false;
        for (size_t i = 0; i < fds.size() && n > 0; ++i) {
            if (fds[i].revents == 0) continue;
            comm* c = who[i].first;
            channel& ch = c->ch[who[i].second];
            if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) r = read_channel(x, c, who[i].second, ch, &progressed);
            if (r == ncclSuccess && !ch.closed && (fds[i].revents & POLLOUT))
                r = write_channel(x, c, who[i].second, ch, &progressed);
            if (r != ncclSuccess) return r;
        }
        if (progressed) {
            last_progress = steady::now();
        } else if (std::chrono::duration<double>(steady::now() - last_progress).count() > timeout) {
            const std::string what = describe_wait(works);
            warn_always("%s: no progress for %g s (NCCL_DOUBLE_TIMEOUT), waiting: %s", x.call, timeout, what.c_str());
            return fail(ncclSystemError, "%s: timed out after %g s waiting: %s", x.call, timeout, what.c_str());
        }
    }
}

// After a failure nothing queued on these communicators can complete: drop it. A message being read into a
// receive of the failed run is read on into a buffer of its own (its receive is gone).
void reset(comm* c) {
    for (channel& ch : c->ch) {
        if (ch.in_body && ch.body_post.owner != nullptr) {
            ch.body_post = rx_post{};
            ch.body_buf.assign(ch.hdr.bytes, 0);
        }
        ch.txq.clear();
        for (auto& q : ch.posted) q.clear();
    }
    c->self_sends.clear();
    c->self_recvs.clear();
}

}  // namespace

ncclResult_t run_ops(const std::vector<op*>& ops, const char* call) {
    std::vector<work> works;
    for (op* o : ops) {
        auto it = std::find_if(works.begin(), works.end(), [&](const work& w) { return w.c == o->c; });
        if (it == works.end()) it = works.insert(works.end(), work{o->c, {}, 0, nullptr, {}});
        (o->fn == func::send || o->fn == func::recv ? it->p2p : it->colls).push_back(o);
    }
    std::vector<comm*> order;
    for (const work& w : works) order.push_back(w.c);
    std::sort(order.begin(), order.end());
    for (comm* c : order) c->mu.lock();
    const run_ctx x{call};
    ncclResult_t r;
    try {
        device_stage staged;  // device buffers: the run reads and writes host copies
        r = stage_in(ops, call, &staged);
        if (r == ncclSuccess) r = engine(x, works);
        if (r == ncclSuccess) r = stage_out(staged, call);
    } catch (const std::exception& e) {  // staging or an unexpected message too large for this machine
        r = fail(ncclSystemError, "%s: %s", call, e.what());
    }
    if (r != ncclSuccess)
        for (comm* c : order) {
            reset(c);
            c->state.store(r);
        }
    for (auto it = order.rbegin(); it != order.rend(); ++it) (*it)->mu.unlock();
    return r;
}

}  // namespace shunt::test_double
