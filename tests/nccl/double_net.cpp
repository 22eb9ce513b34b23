// tests/nccl/double_net.cpp: the NCCL double's sockets: the address it advertises, bounded blocking waits, the
// rendezvous behind ncclGetUniqueId, and the full mesh of TCP connections of a communicator.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>

#include "double_internal.hpp"

namespace shunt::test_double {
namespace {

constexpr uint64_t id_magic = 0x314c424443434e44ULL;  // "DNCCDBL1"
constexpr uint32_t reg_magic = 0x52454731, table_magic = 0x54424c31, hello_magic = 0x48454c4f;

// The 128-byte ncclUniqueId: where the rendezvous listens and the nonce that every rank of the communicator shows.
struct id_layout {
    uint64_t magic;
    uint64_t nonce;
    uint32_t addr;
    uint16_t port;
    uint16_t pad;
};
static_assert(sizeof(id_layout) <= sizeof(ncclUniqueId));

struct registration {
    uint32_t magic;
    int32_t nranks;
    int32_t rank;
    uint32_t addr;
    uint64_t nonce;
    uint16_t port;
    uint16_t pad[3];
};
struct table_header {
    uint32_t magic;
    int32_t status;
    int32_t nranks;
    int32_t pad;
};
struct table_entry {
    uint32_t addr;
    uint16_t port;
    uint16_t pad;
};
struct hello {
    uint32_t magic;
    int32_t rank;
    uint64_t nonce;
};

using steady = std::chrono::steady_clock;
double seconds_since(steady::time_point t) { return std::chrono::duration<double>(steady::now() - t).count(); }

ncclResult_t timed_out(const wait_limits& w, const char* what) {
    warn_always("%s: no progress for %g s while %s (NCCL_DOUBLE_TIMEOUT)", w.call, w.timeout_s, what);
    return fail(ncclSystemError, "%s: timed out after %g s while %s", w.call, w.timeout_s, what);
}

// Waits until fd is ready for events (or has an error to report), watching the abort flag every 100 ms.
ncclResult_t wait_fd(int fd, short events, const wait_limits& w, const char* what, steady::time_point since) {
    for (;;) {
        if (w.abort && w.abort->load()) return fail(ncclSystemError, "%s: communicator aborted while %s", w.call, what);
        pollfd p{fd, events, 0};
        const int r = poll(&p, 1, 100);
        if (r > 0) return ncclSuccess;
        if (r < 0 && errno != EINTR)
            return fail(ncclSystemError, "%s: poll failed while %s: %s", w.call, what, strerror(errno));
        if (seconds_since(since) > w.timeout_s) return timed_out(w, what);
    }
}

ncclResult_t make_socket(int* fd) {
    *fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (*fd < 0) return fail(ncclSystemError, "socket() failed: %s", strerror(errno));
    return ncclSuccess;
}

void tune(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

uint64_t random64() {
    std::random_device rd;
    uint64_t v = (uint64_t(rd()) << 32) ^ rd();
    v ^= uint64_t(getpid()) << 17;
    v ^= uint64_t(steady::now().time_since_epoch().count());
    return v;
}

// The rendezvous of one unique id: collects nranks registrations, answers each with every rank's endpoint, exits.
// A registration that does not fit (another id's nonce, a rank taken twice) is refused and the others still wait.
void root_main(int lfd, uint64_t nonce, double timeout_s) {
    std::vector<int> conns;
    std::vector<table_entry> entries;
    int nranks = -1, got = 0;
    auto last = steady::now();
    const wait_limits w{timeout_s, nullptr, "ncclCommInitRank (rendezvous)"};
    while (nranks < 0 || got < nranks) {
        pollfd p{lfd, POLLIN, 0};
        if (poll(&p, 1, 200) <= 0) {
            if (seconds_since(last) > timeout_s) break;  // an id nobody (or not everybody) used
            continue;
        }
        int fd = accept4(lfd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) continue;
        last = steady::now();
        registration reg{};
        if (recv_exact(fd, &reg, sizeof reg, w) != ncclSuccess) {
            close_fd(fd);
            continue;
        }
        int status = ncclSuccess;
        if (reg.magic != reg_magic || reg.nonce != nonce || reg.nranks < 1 || reg.rank < 0 || reg.rank >= reg.nranks)
            status = ncclInvalidArgument;
        else if (nranks >= 0 && (reg.nranks != nranks || conns[reg.rank] >= 0))
            status = ncclInvalidUsage;
        if (status != ncclSuccess) {
            const table_header h{table_magic, status, 0, 0};
            (void)send_exact(fd, &h, sizeof h, w);
            close_fd(fd);
            continue;
        }
        if (nranks < 0) {
            nranks = reg.nranks;
            conns.assign(nranks, -1);
            entries.resize(nranks);
        }
        conns[reg.rank] = fd;
        entries[reg.rank] = table_entry{reg.addr, reg.port, 0};
        ++got;
    }
    if (nranks > 0 && got == nranks) {
        for (int r = 0; r < nranks; ++r) {
            const table_header h{table_magic, ncclSuccess, nranks, 0};
            if (send_exact(conns[r], &h, sizeof h, w) == ncclSuccess)
                (void)send_exact(conns[r], entries.data(), entries.size() * sizeof(table_entry), w);
        }
    }
    for (int& fd : conns) close_fd(fd);
    close_fd(lfd);
}

}  // namespace

std::string to_string(const endpoint& ep) {
    char buf[INET_ADDRSTRLEN] = "?";
    in_addr a{};
    a.s_addr = ep.addr;
    inet_ntop(AF_INET, &a, buf, sizeof buf);
    return std::string(buf) + ":" + std::to_string(ntohs(ep.port));
}

bool address_allowed(uint32_t addr_be) {
    const uint32_t a = ntohl(addr_be);
    return (a >> 24) == 127 || (a >> 17) == (0xc6120000u >> 17);  // 127.0.0.0/8, 198.18.0.0/15
}

ncclResult_t advertised_address(uint32_t* addr_be) {
    const char* spec = std::getenv("NCCL_SOCKET_IFNAME");
    if (spec == nullptr || *spec == '\0') {
        *addr_be = htonl(INADDR_LOOPBACK);
        return ncclSuccess;
    }
    // NCCL's syntax: a comma-separated list of prefixes, "^" to exclude them, "=" for exact names.
    std::string s(spec);
    bool exclude = false, exact = false;
    if (!s.empty() && s[0] == '^') exclude = true, s.erase(0, 1);
    if (!s.empty() && s[0] == '=') exact = true, s.erase(0, 1);
    std::vector<std::string> names;
    for (size_t pos = 0; pos <= s.size();) {
        const size_t comma = s.find(',', pos);
        const size_t end = comma == std::string::npos ? s.size() : comma;
        if (end > pos) names.push_back(s.substr(pos, end - pos));
        pos = end + 1;
    }
    ifaddrs* list = nullptr;
    if (getifaddrs(&list) != 0) return fail(ncclSystemError, "getifaddrs failed: %s", strerror(errno));
    bool found = false;
    for (ifaddrs* i = list; i != nullptr && !found; i = i->ifa_next) {
        if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
        bool match = false;
        for (const auto& n : names)
            match = match || (exact ? n == i->ifa_name : std::strncmp(i->ifa_name, n.c_str(), n.size()) == 0);
        if (match == exclude) continue;
        *addr_be = reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr;
        found = true;
    }
    freeifaddrs(list);
    if (!found) return fail(ncclSystemError, "NCCL_SOCKET_IFNAME=%s matches no interface with an IPv4 address", spec);
    if (!address_allowed(*addr_be))
        return fail(ncclSystemError,
                    "NCCL_SOCKET_IFNAME=%s gives %s: the double only uses 127.0.0.0/8 and 198.18.0.0/15", spec,
                    to_string(endpoint{*addr_be, 0}).c_str());
    return ncclSuccess;
}

ncclResult_t open_listener(uint32_t addr_be, int backlog, int* fd, endpoint* ep) {
    ncclResult_t r = make_socket(fd);
    if (r != ncclSuccess) return r;
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = addr_be;
    sa.sin_port = 0;
    socklen_t len = sizeof sa;
    if (bind(*fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || listen(*fd, backlog < 16 ? 16 : backlog) != 0 ||
        getsockname(*fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
        const int e = errno;
        close_fd(*fd);
        return fail(ncclSystemError, "cannot listen on %s: %s", to_string(endpoint{addr_be, 0}).c_str(), strerror(e));
    }
    *ep = endpoint{sa.sin_addr.s_addr, sa.sin_port};
    return ncclSuccess;
}

ncclResult_t connect_to(const endpoint& ep, const wait_limits& w, int* fd) {
    if (!address_allowed(ep.addr))
        return fail(ncclInvalidArgument,
                    "%s: refusing to connect to %s (the double connects to 127.0.0.0/8 and "
                    "198.18.0.0/15 only)",
                    w.call, to_string(ep).c_str());
    const auto start = steady::now();
    const std::string what = "connecting to " + to_string(ep);
    for (;;) {
        ncclResult_t r = make_socket(fd);
        if (r != ncclSuccess) return r;
        sockaddr_in sa{};
        sa.sin_family = AF_INET;
        sa.sin_addr.s_addr = ep.addr;
        sa.sin_port = ep.port;
        int err = 0;
        if (connect(*fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
            err = errno;
            if (err == EINPROGRESS) {
                r = wait_fd(*fd, POLLOUT, w, what.c_str(), start);
                if (r != ncclSuccess) {
                    close_fd(*fd);
                    return r;
                }
                socklen_t len = sizeof err;
                getsockopt(*fd, SOL_SOCKET, SO_ERROR, &err, &len);
            }
        }
        if (err == 0) {
            tune(*fd);
            return ncclSuccess;
        }
        close_fd(*fd);
        if (err != ECONNREFUSED && err != EAGAIN && err != ETIMEDOUT)
            return fail(ncclSystemError, "%s: %s failed: %s", w.call, what.c_str(), strerror(err));
        if (seconds_since(start) > w.timeout_s) return timed_out(w, what.c_str());
        if (w.abort && w.abort->load())
            return fail(ncclSystemError, "%s: communicator aborted while %s", w.call, what.c_str());
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
}

ncclResult_t accept_one(int listen_fd, const wait_limits& w, int* fd) {
    const auto start = steady::now();
    for (;;) {
        ncclResult_t r = wait_fd(listen_fd, POLLIN, w, "waiting for a peer to connect", start);
        if (r != ncclSuccess) return r;
        *fd = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (*fd >= 0) {
            tune(*fd);
            return ncclSuccess;
        }
        if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
            return fail(ncclSystemError, "%s: accept failed: %s", w.call, strerror(errno));
    }
}

ncclResult_t send_exact(int fd, const void* data, size_t bytes, const wait_limits& w) {
    const char* p = static_cast<const char*>(data);
    auto start = steady::now();
    while (bytes > 0) {
        const ssize_t n = send(fd, p, bytes, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
            p += n, bytes -= size_t(n), start = steady::now();
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            return fail(ncclRemoteError, "%s: sending failed: %s", w.call, strerror(errno));
        ncclResult_t r = wait_fd(fd, POLLOUT, w, "sending", start);
        if (r != ncclSuccess) return r;
    }
    return ncclSuccess;
}

ncclResult_t recv_exact(int fd, void* data, size_t bytes, const wait_limits& w) {
    char* p = static_cast<char*>(data);
    auto start = steady::now();
    while (bytes > 0) {
        const ssize_t n = recv(fd, p, bytes, MSG_DONTWAIT);
        if (n > 0) {
            p += n, bytes -= size_t(n), start = steady::now();
            continue;
        }
        if (n == 0) return fail(ncclRemoteError, "%s: the peer closed the connection", w.call);
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return fail(ncclRemoteError, "%s: receiving failed: %s", w.call, strerror(errno));
        ncclResult_t r = wait_fd(fd, POLLIN, w, "receiving", start);
        if (r != ncclSuccess) return r;
    }
    return ncclSuccess;
}

void close_fd(int& fd) {
    if (fd >= 0) close(fd);
    fd = -1;
}

ncclResult_t make_unique_id(ncclUniqueId* id) {
    uint32_t addr = 0;
    ncclResult_t r = advertised_address(&addr);
    if (r != ncclSuccess) return r;
    int lfd = -1;
    endpoint ep;
    r = open_listener(addr, 128, &lfd, &ep);
    if (r != ncclSuccess) return r;
    const id_layout l{id_magic, random64(), ep.addr, ep.port, 0};
    info("ncclGetUniqueId: rendezvous at %s", to_string(ep).c_str());
    std::memset(id, 0, sizeof *id);
    std::memcpy(id->internal, &l, sizeof l);
    try {
        std::thread(root_main, lfd, l.nonce, timeout_seconds()).detach();
    } catch (...) {
        close_fd(lfd);
        return fail(ncclSystemError, "ncclGetUniqueId: cannot start the rendezvous thread");
    }
    return ncclSuccess;
}

ncclResult_t rendezvous(const ncclUniqueId& id, int nranks, int rank, const endpoint& mine, const wait_limits& w,
                        uint64_t* nonce, std::vector<endpoint>* table) {
    id_layout l{};
    std::memcpy(&l, id.internal, sizeof l);
    if (l.magic != id_magic)
        return fail(ncclInvalidArgument, "%s: the unique id was not made by this library's ncclGetUniqueId", w.call);
    int fd = -1;
    ncclResult_t r = connect_to(endpoint{l.addr, l.port}, w, &fd);
    if (r != ncclSuccess) return r;
    const registration reg{reg_magic, nranks, rank, mine.addr, l.nonce, mine.port, {0, 0, 0}};
    table_header h{};
    r = send_exact(fd, &reg, sizeof reg, w);
    if (r == ncclSuccess) r = recv_exact(fd, &h, sizeof h, w);
    if (r == ncclSuccess && (h.magic != table_magic || h.status != ncclSuccess || h.nranks != nranks))
        r = fail(h.status == ncclInvalidUsage ? ncclInvalidUsage : ncclInvalidArgument,
                 "%s: the rendezvous refused rank %d of %d (another rank count, a rank used twice, or a stale id)",
                 w.call, rank, nranks);
    std::vector<table_entry> entries(static_cast<size_t>(nranks));
    if (r == ncclSuccess) r = recv_exact(fd, entries.data(), entries.size() * sizeof(table_entry), w);
    close_fd(fd);
    if (r != ncclSuccess) return r;
    table->resize(size_t(nranks));
    for (int i = 0; i < nranks; ++i) (*table)[i] = endpoint{entries[i].addr, entries[i].port};
    *nonce = l.nonce;
    return ncclSuccess;
}

ncclResult_t connect_mesh(int rank, int nranks, uint64_t nonce, int listen_fd, const std::vector<endpoint>& table,
                          const wait_limits& w, std::vector<int>* fds) {
    fds->assign(size_t(nranks), -1);
    ncclResult_t r = ncclSuccess;
    for (int j = 0; j < rank && r == ncclSuccess; ++j) {
        int fd = -1;
        r = connect_to(table[j], w, &fd);
        const hello h{hello_magic, rank, nonce};
        if (r == ncclSuccess) r = send_exact(fd, &h, sizeof h, w);
        (*fds)[j] = fd;
    }
    for (int need = nranks - 1 - rank; need > 0 && r == ncclSuccess;) {
        int fd = -1;
        r = accept_one(listen_fd, w, &fd);
        if (r != ncclSuccess) break;
        hello h{};
        if (recv_exact(fd, &h, sizeof h, w) != ncclSuccess || h.magic != hello_magic || h.nonce != nonce ||
            h.rank <= rank || h.rank >= nranks || (*fds)[h.rank] >= 0) {
            close_fd(fd);  // not one of ours: keep waiting for the real peer
            continue;
        }
        (*fds)[h.rank] = fd;
        --need;
    }
    if (r != ncclSuccess)
        for (int& fd : *fds) close_fd(fd);
    return r;
}

}  // namespace shunt::test_double
