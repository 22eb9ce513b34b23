// bench/cluster/fabric_check.cpp: the flows of one collective phase across the emulated leaf-spine (fabric.sh) under ECMP, random k-split and the planner's pinned k-split, each sub-flow its own TCP connection, against the flow model's completion times.
#include <shunt/flow/assign.hpp>
#include <shunt/flow/fabric.hpp>
#include <shunt/flow/fluid.hpp>
#include <shunt/flow/hierarchical.hpp>
#include <shunt/flow/load.hpp>
#include <shunt/flow/pattern.hpp>
#include <shunt/flow/planner.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/if_link.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace shunt::flow;
using clock_type = std::chrono::steady_clock;

[[noreturn]] void die(const std::string& what) {
    std::fprintf(stderr, "fabric_check: %s\n", what.c_str());
    std::exit(2);
}

// The fabric as fabric.sh describes it.
struct description {
    int leaves = 0, per_leaf = 0, spines = 0;
    double rate_bit = 0;
    std::vector<std::string> host_ns, leaf_ns;  // host l * per_leaf + i; leaf l
};

description read_description() {
    const char* dir = std::getenv("FABRIC_DIR");
    if (!dir) die("FABRIC_DIR is not set: run me under bench/cluster/fabric.sh");
    std::ifstream in(std::string(dir) + "/fabric.txt");
    if (!in) die("cannot read $FABRIC_DIR/fabric.txt");
    description d;
    std::map<std::pair<int, int>, std::string> hosts;
    std::map<int, std::string> leaves;
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream s(line);
        std::string key;
        s >> key;
        if (key == "leaves")
            s >> d.leaves;
        else if (key == "hosts_per_leaf")
            s >> d.per_leaf;
        else if (key == "spines")
            s >> d.spines;
        else if (key == "rate_bit_per_s")
            s >> d.rate_bit;
        else if (key == "host") {
            int l = 0, i = 0;
            std::string ns;
            s >> l >> i >> ns;
            hosts[{l, i}] = ns;
        } else if (key == "leaf") {
            int l = 0;
            std::string ns;
            s >> l >> ns;
            leaves[l] = ns;
        }
    }
    if (d.leaves < 2 || d.per_leaf < 1 || d.spines < 1 || d.rate_bit <= 0 ||
        hosts.size() != static_cast<std::size_t>(d.leaves * d.per_leaf) ||
        leaves.size() != static_cast<std::size_t>(d.leaves))
        die("$FABRIC_DIR/fabric.txt is incomplete");
    for (auto& [k, ns] : hosts) d.host_ns.push_back(ns);
    for (auto& [k, ns] : leaves) d.leaf_ns.push_back(ns);
    return d;
}

// Network namespaces by name; run(fd, fn) runs fn inside one (this thread), then comes back.
class namespaces {
public:
    namespaces() : home_(::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC)) {
        if (home_ < 0) die("cannot open my own network namespace");
    }
    int open(const std::string& name) {
        auto it = fds_.find(name);
        if (it != fds_.end()) return it->second;
        int fd = ::open(("/run/netns/" + name).c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) die("cannot open network namespace " + name);
        fds_[name] = fd;
        return fd;
    }
    template <class F>
    auto run(const std::string& name, F&& fn) {
        if (setns(open(name), CLONE_NEWNET) != 0) die("setns " + name + ": " + std::strerror(errno));
        struct back {
            int home;
            ~back() {
                if (setns(home, CLONE_NEWNET) != 0) std::abort();
            }
        } guard{home_};
        return fn();
    }

private:
    int home_;
    std::map<std::string, int> fds_;
};

std::string address(int leaf, int index, int plane) {
    return "198.18." + std::to_string(16 * leaf + plane) + "." + std::to_string(index + 1);
}

sockaddr_in sockaddr_of(const std::string& ip, int port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    if (inet_pton(AF_INET, ip.c_str(), &a.sin_addr) != 1) die("bad address " + ip);
    return a;
}

constexpr int port = 5201;

// The TCP congestion control of every connection (--cc; empty: the host's default).
std::string congestion;
// The most bytes per second a connection may send (--pace; 0: no limit; default the link rate,
// as a NIC sends: the emulated links are veth pairs that take any burst into the rate limiter's
// queue, and a connection's first window then overruns it).
double pace = -1;

// One sub-flow: its connection's two ends, addresses and the spine it takes.
struct subflow {
    int src = 0, dst = 0;  // hosts (model endpoints)
    int plane = 0;
    std::int64_t bytes = 0;
    int out = -1, in = -1;  // sender's and receiver's sockets
    int sport = 0;
    int spine = -1;  // learned from the source leaf's routing
    std::int64_t sent = 0, got = 0;
    double done = -1;  // seconds after the start
    double resent = 0;  // bytes the sender sent again (losses at the rate limits)
};

// Bytes sent so far on each leaf's uplink to each spine (interface counters).
std::vector<double> uplink_counters(const description& d, namespaces& ns) {
    std::vector<double> out(static_cast<std::size_t>(d.leaves * d.spines), 0.0);
    for (int l = 0; l < d.leaves; ++l) {
        ns.run(d.leaf_ns[static_cast<std::size_t>(l)], [&] {
            ifaddrs* list = nullptr;
            if (getifaddrs(&list) != 0) die("getifaddrs");
            for (ifaddrs* a = list; a; a = a->ifa_next) {
                if (!a->ifa_addr || a->ifa_addr->sa_family != AF_PACKET || !a->ifa_data) continue;
                if (a->ifa_name[0] != 's') continue;
                const int s = std::atoi(a->ifa_name + 1);
                if (s >= 0 && s < d.spines)
                    out[static_cast<std::size_t>(l * d.spines + s)] =
                        static_cast<double>(static_cast<rtnl_link_stats*>(a->ifa_data)->tx_bytes);
            }
            freeifaddrs(list);
            return 0;
        });
    }
    return out;
}

class harness {
public:
    harness(description d) : d_(std::move(d)) {
        // Listeners, one per host (every plane address).
        for (int h = 0; h < static_cast<int>(d_.host_ns.size()); ++h) {
            listen_.push_back(ns_.run(d_.host_ns[static_cast<std::size_t>(h)], [&] {
                int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
                int one = 1;
                setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
                sockaddr_in a = sockaddr_of("0.0.0.0", port);
                if (s < 0 || bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(s, 256) != 0)
                    die("listen in " + d_.host_ns[static_cast<std::size_t>(h)] + ": " + std::strerror(errno));
                return s;
            }));
        }
    }

    const description& desc() const { return d_; }
    namespaces& ns() { return ns_; }

    // Opens every sub-flow's connection and learns its spine.
    void connect_all(std::vector<subflow>& subs) {
        for (auto& f : subs) {
            const int la = f.src / d_.per_leaf, ia = f.src % d_.per_leaf;
            const int lb = f.dst / d_.per_leaf, ib = f.dst % d_.per_leaf;
            f.out = ns_.run(d_.host_ns[static_cast<std::size_t>(f.src)], [&] {
                int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
                if (s >= 0 && !congestion.empty() &&
                    setsockopt(s, IPPROTO_TCP, TCP_CONGESTION, congestion.data(),
                               static_cast<socklen_t>(congestion.size())) != 0)
                    die("congestion control '" + congestion + "': " + std::strerror(errno));
                if (s >= 0 && pace > 0) {
                    const auto rate = static_cast<std::uint64_t>(pace);
                    setsockopt(s, SOL_SOCKET, SO_MAX_PACING_RATE, &rate, sizeof rate);
                }
                sockaddr_in me = sockaddr_of(address(la, ia, f.plane), 0);
                sockaddr_in to = sockaddr_of(address(lb, ib, f.plane), port);
                if (s < 0 || bind(s, reinterpret_cast<sockaddr*>(&me), sizeof me) != 0 ||
                    connect(s, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0)
                    die("connect " + address(la, ia, f.plane) + " -> " + address(lb, ib, f.plane) + ": " +
                        std::strerror(errno));
                socklen_t len = sizeof me;
                getsockname(s, reinterpret_cast<sockaddr*>(&me), &len);
                f.sport = ntohs(me.sin_port);
                return s;
            });
            f.in = accept4(listen_[static_cast<std::size_t>(f.dst)], nullptr, nullptr, SOCK_CLOEXEC);
            if (f.in < 0) die(std::string("accept: ") + std::strerror(errno));
            if (la != lb) f.spine = probe(f);
        }
    }

    // The spine a connection takes, from the uplink counters around a short probe on it alone.
    // (The leaf's multipath choice for a local TCP socket's packets follows the socket's random
    // flow hash, which the forwarding path reuses, so `ip route get` cannot recompute it; like a
    // switch's 5-tuple hash it is uniform over the spines and fixed for the connection, with
    // rehashing off in the hosts.)
    int probe(subflow& f) {
        static std::vector<char> buf(1 << 16, 'p');
        constexpr std::int64_t probe_bytes = 256 << 10;
        const int la = f.src / d_.per_leaf;
        const auto c0 = uplink_counters(d_, ns_);
        std::int64_t sent = 0, got = 0;
        const auto t0 = clock_type::now();
        while (got < probe_bytes) {
            if (std::chrono::duration<double>(clock_type::now() - t0).count() > 30)
                die("a probe did not arrive in 30 s");
            if (sent < probe_bytes) {
                const auto w = ::send(f.out, buf.data(),
                                      static_cast<std::size_t>(std::min<std::int64_t>(probe_bytes - sent, 1 << 16)),
                                      MSG_NOSIGNAL | MSG_DONTWAIT);
                if (w > 0) sent += w;
            }
            const auto r = ::recv(f.in, buf.data(), buf.size(), MSG_DONTWAIT);
            if (r > 0) got += r;
            if (r <= 0 && sent >= probe_bytes) usleep(200);
        }
        const auto c1 = uplink_counters(d_, ns_);
        int best = 0;
        for (int s = 1; s < d_.spines; ++s)
            if (c1[static_cast<std::size_t>(la * d_.spines + s)] - c0[static_cast<std::size_t>(la * d_.spines + s)] >
                c1[static_cast<std::size_t>(la * d_.spines + best)] -
                    c0[static_cast<std::size_t>(la * d_.spines + best)])
                best = s;
        return best;
    }

    // Sends every sub-flow's bytes at once; returns false when the time limit passed first.
    bool transfer(std::vector<subflow>& subs, double limit_s) {
        int ep = epoll_create1(EPOLL_CLOEXEC);
        if (ep < 0) die("epoll");
        static std::vector<char> buf(1 << 20, 'x');
        std::size_t left = 0;
        for (std::size_t i = 0; i < subs.size(); ++i) {
            auto& f = subs[i];
            fcntl(f.out, F_SETFL, fcntl(f.out, F_GETFL) | O_NONBLOCK);
            fcntl(f.in, F_SETFL, fcntl(f.in, F_GETFL) | O_NONBLOCK);
            epoll_event o{EPOLLOUT, {.u64 = 2 * i}}, r{EPOLLIN, {.u64 = 2 * i + 1}};
            epoll_ctl(ep, EPOLL_CTL_ADD, f.out, &o);
            epoll_ctl(ep, EPOLL_CTL_ADD, f.in, &r);
            ++left;
        }
        const auto t0 = clock_type::now();
        std::vector<epoll_event> ev(256);
        while (left > 0) {
            const double now = std::chrono::duration<double>(clock_type::now() - t0).count();
            if (now > limit_s) break;
            int n = epoll_wait(ep, ev.data(), static_cast<int>(ev.size()), 100);
            for (int e = 0; e < n; ++e) {
                const std::size_t i = ev[static_cast<std::size_t>(e)].data.u64 / 2;
                auto& f = subs[i];
                if (ev[static_cast<std::size_t>(e)].data.u64 % 2 == 0) {
                    while (f.sent < f.bytes) {
                        const auto w = ::send(
                            f.out, buf.data(),
                            static_cast<std::size_t>(std::min<std::int64_t>(f.bytes - f.sent, 1 << 20)), MSG_NOSIGNAL);
                        if (w <= 0) break;
                        f.sent += w;
                    }
                    if (f.sent >= f.bytes) epoll_ctl(ep, EPOLL_CTL_DEL, f.out, nullptr);
                } else {
                    while (true) {
                        const auto r = ::recv(f.in, buf.data(), buf.size(), 0);
                        if (r <= 0) break;
                        f.got += r;
                    }
                    if (f.got >= f.bytes && f.done < 0) {
                        f.done = std::chrono::duration<double>(clock_type::now() - t0).count();
                        epoll_ctl(ep, EPOLL_CTL_DEL, f.in, nullptr);
                        --left;
                    }
                }
            }
        }
        close(ep);
        for (auto& f : subs) {
            tcp_info info{};
            socklen_t len = sizeof info;
            if (getsockopt(f.out, IPPROTO_TCP, TCP_INFO, &info, &len) == 0 &&
                len >= offsetof(tcp_info, tcpi_bytes_retrans) + sizeof info.tcpi_bytes_retrans)
                f.resent = static_cast<double>(info.tcpi_bytes_retrans);
            close(f.out);
            close(f.in);
        }
        return left == 0;
    }

private:
    description d_;
    namespaces ns_;
    std::vector<int> listen_;
};

enum class mode { ecmp, split, pinned };
const char* mode_name(mode m) {
    return m == mode::ecmp ? "ecmp" : m == mode::split ? "ecmp k-split" : "pinned k-split";
}

struct outcome {
    double measured = 0, predicted = 0;
    bool delivered = false, paths_ok = false;
    std::string spines;
};

}  // namespace

int main(int argc, char** argv) {
    double mib = 8;
    int trials = 3;
    bool smoke = false, verbose = false;
    double tolerance = 0.2;
    std::string pattern = "hier";
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) die(a + " needs a value");
            return argv[++i];
        };
        if (a == "--mib")
            mib = std::atof(next().c_str());
        else if (a == "--trials")
            trials = std::atoi(next().c_str());
        else if (a == "--pattern")
            pattern = next();
        else if (a == "--tolerance")
            tolerance = std::atof(next().c_str());
        else if (a == "--smoke")
            smoke = true;
        else if (a == "--verbose")
            verbose = true;
        else if (a == "--cc")
            congestion = next();
        else if (a == "--pace")
            pace = std::atof(next().c_str());
        else if (a == "--help" || a == "-h") {
            std::puts(
                "usage: fabric.sh [...] -- fabric_check [--pattern hier|shift:D|alltoall:I] [--mib M] [--trials N]\n"
                "                        [--tolerance T] [--cc NAME] [--smoke] [--verbose]\n"
                "Sends the flows of one collective phase between the emulated hosts (M MiB each, default 8): plain\n"
                "ECMP (one connection a flow), ECMP k-split (k connections), and pinned k-split (the planner's\n"
                "coordinated spines, chosen by address plane), N trials each (default 3, new source ports each\n"
                "time). Compares each completion time with the flow model's for the paths the connections took\n"
                "(capacities: one flow's measured goodput). hier: the first phase of shunt's hierarchical\n"
                "allreduce that crosses the spines. --smoke: two small trials each, exit 1 where neither is within\n"
                "the tolerance (default 0.2; the smoke test's 0.5) or a path is off. --verbose: every uplink whose "
                "counters disagree with the\n"
                "learned paths. --cc: the connections' TCP congestion control (default: the system's). --pace B:\n"
                "each connection sends at most B bytes/s (default: the link rate, as a NIC would; 0: no limit).");
            return 0;
        } else
            die("unknown option " + a);
    }
    if (!(mib > 0 && mib <= 1024) || trials < 1 || trials > 50 || !(tolerance > 0)) die("bad option value");
    if (smoke) {  // two small trials: a timing check passes where either agrees with the model (load on
        // a shared machine slows a trial, never speeds one up past the model)
        mib = std::min(mib, 2.0);
        trials = 2;
    }
    const description d = read_description();
    if (pace < 0) pace = d.rate_bit / 8;
    harness h(d);
    const auto bytes = static_cast<std::int64_t>(mib * 1024 * 1024);

    // Calibration: one flow alone across the spines.
    std::vector<subflow> one{subflow{0, d.per_leaf, 0, bytes}};
    h.connect_all(one);
    if (!h.transfer(one, 60)) die("calibration flow did not finish in 60 s");
    const double goodput = static_cast<double>(bytes) / one[0].done;
    std::printf("fabric: %d leaves x %d hosts, %d spines, links %.0f Mbit/s\n", d.leaves, d.per_leaf, d.spines,
                d.rate_bit / 1e6);
    std::printf(
        "calibration: one %.3g MiB flow alone: %.2f Mbit/s goodput (%.1f%% of the link rate); the model's "
        "capacities\n",
        mib, goodput * 8 / 1e6, 100 * goodput * 8 / d.rate_bit);

    fabric_spec spec;
    spec.hosts = d.leaves * d.per_leaf;
    spec.hosts_per_leaf = d.per_leaf;
    spec.spines = d.spines;
    spec.nic_gbps = spec.uplink_gbps = goodput * 8 / 1e9;
    spec.paths = path_control::pinned;
    const fabric fab(spec);
    const auto ranks = place(fab, placement::block);
    phase ph;
    if (pattern == "hier") {
        for (auto& p : hierarchical_allreduce(fab, ranks, fabric_hierarchy(fab, ranks), 1.0)) {
            bool crossing = false;
            for (auto& f : p.flows) crossing = crossing || crosses_spine(fab, f);
            if (crossing) {
                ph = p;
                break;
            }
        }
    } else if (pattern.rfind("shift:", 0) == 0) {
        ph = shift(fab, ranks, 1.0, std::atoi(pattern.c_str() + 6))[0];
    } else if (pattern.rfind("alltoall:", 0) == 0) {
        const int step = std::atoi(pattern.c_str() + 9);
        ph = shift(fab, ranks, 1.0, step)[0];
        ph.name = "alltoall step " + std::to_string(step);
    } else {
        die("unknown pattern " + pattern);
    }
    if (ph.flows.empty()) die("the pattern has no flow");
    for (auto& f : ph.flows) f.bytes = static_cast<double>(bytes);
    const phase_plan plan(fab, ph);
    const int k = plan.k();
    const double spray = spray_completion_time(fab, ph);
    std::size_t crossing = 0;
    for (auto& f : ph.flows) crossing += crosses_spine(fab, f) ? 1 : 0;
    const int ks = std::max(2, k);
    double ecmp_mean = 0, split_mean = 0;
    for (int s = 0; s < 400; ++s) {
        ecmp_mean += completion_time(fab, ph, route_random(fab, ph, 1, 1000 + static_cast<std::uint64_t>(s))) / 400;
        split_mean += completion_time(fab, ph, route_random(fab, ph, ks, 5000 + static_cast<std::uint64_t>(s))) / 400;
    }
    std::printf(
        "phase: %s, %zu flows of %.3g MiB (%zu across spines); planner: k = %d pinned; model: spraying "
        "%.3f s, random ECMP %.3f s and random %d-split %.3f s expected\n",
        ph.name.c_str(), ph.flows.size(), mib, crossing, k, spray, ecmp_mean, ks, split_mean);
    std::printf("%-15s %5s %3s %-28s %10s %10s %8s %8s %6s\n", "mode", "trial", "k", "spines (sub-flows)", "measured s",
                "model s", "x model", "x spray", "paths");

    rusage ru0{};
    getrusage(RUSAGE_SELF, &ru0);
    const auto wall0 = clock_type::now();
    std::map<mode, std::vector<outcome>> results;
    bool ok = true;
    for (int t = 0; t < trials; ++t) {
        for (mode m : {mode::ecmp, mode::split, mode::pinned}) {
            const int kk = m == mode::ecmp ? 1 : m == mode::split ? ks : k;
            std::vector<subflow> subs;
            routing r;
            r.first.push_back(0);
            for (const auto& f : ph.flows) {
                const int parts = crosses_spine(fab, f) ? kk : 1;
                const auto pieces = split_bytes(static_cast<std::int64_t>(f.bytes), parts);
                const transfer_plan tp = plan.find(f.src, f.dst);
                for (int j = 0; j < parts; ++j) {
                    int plane = 0;
                    if (m == mode::pinned && tp.lanes[static_cast<std::size_t>(j)] >= 0)
                        plane = tp.lanes[static_cast<std::size_t>(j)] + 1;
                    subs.push_back({f.src, f.dst, plane, pieces[static_cast<std::size_t>(j)]});
                }
                r.first.push_back(r.first.back() + parts);
            }
            h.connect_all(subs);
            std::string spines;
            for (const auto& s : subs) {
                r.spine.push_back(s.spine);
                if (spines.size() < 26) spines += (spines.empty() ? "" : " ") + std::to_string(s.spine);
            }
            if (spines.size() >= 26) spines += "..";
            // Bytes expected on each uplink from the learned paths, against the counters: the
            // data plus headers (about 3.5%), and at most the ACKs of what the leaf's hosts receive
            // (under 4% of it), which take any uplink; a sub-flow on another spine is far more.
            std::vector<double> expect(static_cast<std::size_t>(d.leaves * d.spines), 0.0);
            std::vector<double> incoming(static_cast<std::size_t>(d.leaves), 0.0);
            for (const auto& s : subs) {
                if (s.spine < 0) continue;
                expect[static_cast<std::size_t>(s.src / d.per_leaf * d.spines + s.spine)] +=
                    static_cast<double>(s.bytes);
                incoming[static_cast<std::size_t>(s.dst / d.per_leaf)] += static_cast<double>(s.bytes);
            }
            const auto c0 = uplink_counters(d, h.ns());
            outcome o;
            o.delivered = h.transfer(subs, 120);
            const auto c1 = uplink_counters(d, h.ns());
            // Segments lost after the uplink are sent over it again; those lost before it are not.
            std::vector<double> again(expect.size(), 0.0);
            for (const auto& s : subs)
                if (s.spine >= 0) again[static_cast<std::size_t>(s.src / d.per_leaf * d.spines + s.spine)] += s.resent;
            o.paths_ok = true;
            for (std::size_t l = 0; l < expect.size(); ++l) {
                const double got = c1[l] - c0[l];
                const double acks = 0.04 * incoming[l / static_cast<std::size_t>(d.spines)] + 65536;
                if (got < 0.98 * expect[l] || got > 1.05 * (expect[l] + again[l]) + acks) {
                    o.paths_ok = false;
                    if (verbose)
                        std::printf("  leaf %zu uplink %zu: %.0f bytes expected, %.0f counted\n",
                                    l / static_cast<std::size_t>(d.spines), l % static_cast<std::size_t>(d.spines),
                                    expect[l], got);
                }
            }
            double last = 0;
            for (const auto& s : subs) last = std::max(last, s.done);
            o.measured = last;
            o.predicted = completion_time(fab, ph, r);
            o.spines = spines;
            results[m].push_back(o);
            std::printf("%-15s %5d %3d %-28s %10.3f %10.3f %8.3f %8.3f %6s\n", mode_name(m), t + 1, kk, spines.c_str(),
                        o.measured, o.predicted, o.measured / o.predicted, o.measured / spray,
                        o.paths_ok ? "ok" : "OFF");
            if (verbose)
                for (const auto& s : subs)
                    std::printf("  host %d -> %d spine %d: %lld bytes done at %.3f s, %.0f bytes sent again\n", s.src,
                                s.dst, s.spine, static_cast<long long>(s.bytes), s.done, s.resent);
            std::fflush(stdout);
            if (!o.delivered) {
                std::printf("  not every byte arrived within 120 s\n");
                ok = false;
            }
        }
    }
    rusage ru1{};
    getrusage(RUSAGE_SELF, &ru1);
    const double wall = std::chrono::duration<double>(clock_type::now() - wall0).count();
    const double cpu =
        static_cast<double>(ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec + ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec) +
        1e-6 * static_cast<double>(ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec + ru1.ru_stime.tv_usec -
                                   ru0.ru_stime.tv_usec);
    std::printf("\nsummary (mean over trials; model: the same paths' max-min completion):\n");
    for (mode m : {mode::ecmp, mode::split, mode::pinned}) {
        double meas = 0, pred = 0, worst = 0, best = 1e300;
        bool paths = true;
        for (const auto& o : results[m]) {
            meas += o.measured / static_cast<double>(results[m].size());
            pred += o.predicted / static_cast<double>(results[m].size());
            const double off = std::abs(o.measured / o.predicted - 1);
            worst = std::max(worst, off);
            best = std::min(best, off);
            paths = paths && o.paths_ok;
        }
        std::printf("  %-15s measured %.3f s, model %.3f s (x %.3f, trials off by %.1f%% to %.1f%%), x spray %.3f%s\n",
                    mode_name(m), meas, pred, meas / pred, 100 * best, 100 * worst, meas / spray,
                    paths ? "" : ", some paths not as learned");
        if (smoke && (best > tolerance || !paths)) ok = false;
    }
    auto mean_measured = [&](mode m) {
        double sum = 0;
        for (const auto& o : results[m]) sum += o.measured;
        return sum / static_cast<double>(results[m].size());
    };
    const double e = mean_measured(mode::ecmp), p = mean_measured(mode::pinned);
    std::printf("  pinned k-split is %.2fx faster than ECMP here (model's expectation for random ECMP: %.2fx)\n", e / p,
                ecmp_mean / spray);
    std::printf("  this process used %.2f s of CPU in %.2f s of transfers (%.0f%% of one core)\n", cpu, wall,
                100 * cpu / wall);
    return ok ? 0 : 1;
}
