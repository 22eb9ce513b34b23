// bench/cluster/fabric_coll.cpp: an MPI collective across the emulated leaf-spine (fabric.sh, fabric-mpirun), timed, with the spines its connections took and the flow model's prediction for those paths.
//
// One rank per host, rank r on host r / H of leaf r / H (fabric-mpirun's order). After a
// warm-up call (every connection open), each spine-crossing pair of the collective's steps is
// probed alone: rank 0 reads the sender's leaf's uplink counters (from a thread inside the
// leaf's network namespace) around a probe message, which gives the share of the pair's bytes
// on each spine, whatever the transport's lanes (one connection, k hashed ones, pinned planes).
// The flow model then predicts the collective's time on those paths (max-min fair sharing,
// capacities from one flow's measured goodput), beside ideal spraying and random ECMP. Every
// element of every call's result is checked, and each rank reports which of its interfaces its
// TCP connections to the other hosts are bound to (the pinned mode's lanes, as set up).
#include <shunt/errors.hpp>  // before <mpi.h>: keeps the C++ bindings out
#include <shunt/flow/fabric.hpp>
#include <shunt/flow/fluid.hpp>
#include <shunt/flow/pattern.hpp>

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/if_link.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <numeric>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace shunt::flow;

[[noreturn]] void die(const std::string& what) {
    std::fprintf(stderr, "fabric_coll: %s\n", what.c_str());
    MPI_Abort(MPI_COMM_WORLD, 2);
    std::exit(2);
}

struct description {
    int leaves = 0, per_leaf = 0, spines = 0;
    double rate_bit = 0;
    std::vector<std::string> leaf_ns;
};

description read_description() {
    const char* dir = std::getenv("FABRIC_DIR");
    if (dir == nullptr) die("FABRIC_DIR is not set: run me with fabric-mpirun inside fabric.sh");
    std::ifstream in(std::string(dir) + "/fabric.txt");
    if (!in) die("cannot read $FABRIC_DIR/fabric.txt");
    description d;
    std::map<int, std::string> leaves;
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream s(line);
        std::string key;
        s >> key;
        if (key == "leaves") s >> d.leaves;
        if (key == "hosts_per_leaf") s >> d.per_leaf;
        if (key == "spines") s >> d.spines;
        if (key == "rate_bit_per_s") s >> d.rate_bit;
        if (key == "leaf") {
            int l = 0;
            std::string ns;
            s >> l >> ns;
            leaves[l] = ns;
        }
    }
    for (auto& [l, ns] : leaves) d.leaf_ns.push_back(ns);
    if (d.leaves < 2 || d.per_leaf < 1 || d.spines < 1 || static_cast<int>(d.leaf_ns.size()) != d.leaves)
        die("$FABRIC_DIR/fabric.txt is incomplete");
    return d;
}

// Bytes sent so far on each uplink of one leaf, read from a thread inside the leaf's namespace
// (a thread's network namespace is its own: MPI's threads and sockets are untouched).
std::vector<double> uplink_bytes(const description& d, int leaf) {
    std::vector<double> out(static_cast<std::size_t>(d.spines), 0.0);
    std::string err;
    std::thread t([&] {
        const int fd =
            ::open(("/run/netns/" + d.leaf_ns[static_cast<std::size_t>(leaf)]).c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0 || ::setns(fd, CLONE_NEWNET) != 0) {
            err = std::string("cannot enter the leaf's namespace: ") + std::strerror(errno);
            if (fd >= 0) ::close(fd);
            return;
        }
        ::close(fd);
        ifaddrs* list = nullptr;
        if (::getifaddrs(&list) != 0) {
            err = "getifaddrs";
            return;
        }
        for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
            if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_PACKET || a->ifa_data == nullptr) continue;
            if (a->ifa_name[0] != 's') continue;
            const int s = std::atoi(a->ifa_name + 1);
            if (s >= 0 && s < d.spines)
                out[static_cast<std::size_t>(s)] =
                    static_cast<double>(static_cast<rtnl_link_stats*>(a->ifa_data)->tx_bytes);
        }
        ::freeifaddrs(list);
    });
    t.join();
    if (!err.empty()) die(err);
    return out;
}

/// This process's TCP connections to the fabric's hosts (peers in 198.18.0.0/15), and how many
/// of them are bound to an address of a plane interface pl<p> whose spine p - 1 is in
/// `planes_mask` (the planes this host receives on).
struct socket_count {
    int to_hosts = 0, on_planes = 0;
};

socket_count fabric_sockets(int planes_mask) {
    std::map<std::uint32_t, std::string> owner;  // local address -> interface
    ifaddrs* list = nullptr;
    if (::getifaddrs(&list) == 0) {
        for (ifaddrs* a = list; a != nullptr; a = a->ifa_next)
            if (a->ifa_addr != nullptr && a->ifa_addr->sa_family == AF_INET)
                owner[reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr] = a->ifa_name;
        ::freeifaddrs(list);
    }
    socket_count c;
    DIR* dir = ::opendir("/proc/self/fd");
    if (dir == nullptr) return c;
    while (const dirent* e = ::readdir(dir)) {
        const int fd = std::atoi(e->d_name);
        if (e->d_name[0] == '.' || fd == ::dirfd(dir)) continue;
        sockaddr_in mine{}, peer{};
        socklen_t ml = sizeof mine, pl = sizeof peer;
        int type = 0;
        socklen_t tl = sizeof type;
        if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) != 0 || type != SOCK_STREAM) continue;
        if (::getsockname(fd, reinterpret_cast<sockaddr*>(&mine), &ml) != 0 || mine.sin_family != AF_INET) continue;
        if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0) continue;
        if ((ntohl(peer.sin_addr.s_addr) & 0xfffe0000u) != 0xc6120000u) continue;  // 198.18.0.0/15
        ++c.to_hosts;
        const auto it = owner.find(mine.sin_addr.s_addr);
        if (it == owner.end() || it->second.rfind("pl", 0) != 0) continue;
        const int plane = std::atoi(it->second.c_str() + 2);
        if (plane >= 1 && plane <= 30 && (planes_mask & (1 << (plane - 1))) != 0) ++c.on_planes;
    }
    ::closedir(dir);
    return c;
}

enum class op_kind { allreduce_ring, allreduce_rabenseifner, alltoall_pairwise };

// The steps of Open MPI's algorithm (coll_tuned), as phases of the flow model.
std::vector<phase> phases_of(op_kind op, const fabric& fab, const std::vector<int>& ranks, double bytes) {
    const int p = static_cast<int>(ranks.size());
    switch (op) {
        case op_kind::allreduce_ring: return ring_allreduce(fab, ranks, bytes);
        case op_kind::alltoall_pairwise: return alltoall(fab, ranks, bytes, p);
        case op_kind::allreduce_rabenseifner: {
            // Reduce-scatter by recursive halving with distance doubling (mask 1: half the
            // vector), then the allgather back: each mask's exchange twice.
            std::vector<phase> out;
            for (int m = 1; m < p; m *= 2) {
                phase ph{"mask " + std::to_string(m), {}, 2};
                for (int r = 0; r < p; ++r) {
                    const int e = ranks[static_cast<std::size_t>(r)], f = ranks[static_cast<std::size_t>(r ^ m)];
                    if (fab.host_of(e) != fab.host_of(f)) ph.flows.push_back({e, f, bytes / (2.0 * m)});
                }
                out.push_back(std::move(ph));
            }
            return out;
        }
    }
    return {};
}

double now() { return MPI_Wtime(); }

}  // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int me = 0, p = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    std::string op_name = "alltoall", label = "run";
    double mib = 1;
    int iters = 5, probe_kib = 512, cal_kib = 4096, lanes = 0;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) die(a + " needs a value");
            return argv[++i];
        };
        if (a == "--op")
            op_name = next();
        else if (a == "--mib")
            mib = std::atof(next().c_str());
        else if (a == "--iters")
            iters = std::atoi(next().c_str());
        else if (a == "--probe-kib")
            probe_kib = std::atoi(next().c_str());
        else if (a == "--cal-kib")
            cal_kib = std::atoi(next().c_str());
        else if (a == "--lanes")
            lanes = std::atoi(next().c_str());
        else if (a == "--label")
            label = next();
        else if (a == "--help") {
            if (me == 0)
                std::puts(
                    "usage: fabric-mpirun -n P fabric_coll [--op allreduce-ring|allreduce-rabenseifner|alltoall]\n"
                    "       [--mib M] [--iters N] [--probe-kib K] [--cal-kib C] [--lanes L] [--label TEXT]\n"
                    "Times the library's collective (the algorithm must be the one named: fabric_coll.py sets\n"
                    "coll_tuned) on M MiB (allreduce: per rank; alltoall: per pair), N times after a warm-up,\n"
                    "probes each spine-crossing pair's paths with K KiB (L: the connections per peer, for the\n"
                    "model's sub-flows; default: from Open MPI's btl_tcp_links and btl_tcp_if_include as the\n"
                    "process started), calibrates one flow's goodput with C KiB (default 4096), and prints the\n"
                    "flow model's times for those paths, spraying and ECMP. correct=1: every element of every\n"
                    "call's result was right; pinned_paths=1 when every rank has planes (pl<p>) and each pair's\n"
                    "bytes crossed its receiver's planes' spines; planes_set_up=1 when every host receives on\n"
                    "the planes (i k + j) mod S, j < k (host i of its leaf, k planes each) and every TCP\n"
                    "connection of every rank to another host is bound to one of them.");
            MPI_Finalize();
            return 0;
        } else
            die("unknown option " + a);
    }
    op_kind op{};
    if (op_name == "allreduce-ring")
        op = op_kind::allreduce_ring;
    else if (op_name == "allreduce-rabenseifner")
        op = op_kind::allreduce_rabenseifner;
    else if (op_name == "alltoall")
        op = op_kind::alltoall_pairwise;
    else
        die("unknown --op " + op_name);
    if (!(mib > 0 && mib <= 256) || iters < 1 || iters > 100 || probe_kib < 64 || cal_kib < 64 || cal_kib > 65536 ||
        lanes < 0 || lanes > 64)
        die("bad option value");
    // The connections per peer and the address planes this rank receives on, from the settings
    // Open MPI read at MPI_Init (shunt sets them in the process before; fabric-mpirun passes the
    // plain ones): btl_tcp_links on each interface of btl_tcp_if_include, planes named pl<p>.
    int planes_mask = 0, interfaces = 0;
    if (const char* inc = std::getenv("OMPI_MCA_btl_tcp_if_include")) {
        std::stringstream ss(inc);
        std::string itf;
        while (std::getline(ss, itf, ',')) {
            ++interfaces;
            if (itf.rfind("pl", 0) == 0) planes_mask |= 1 << (std::atoi(itf.c_str() + 2) - 1);
        }
    }
    if (lanes == 0) {
        const char* links = std::getenv("OMPI_MCA_btl_tcp_links");
        lanes = std::max(1, interfaces) * std::max(1, links != nullptr ? std::atoi(links) : 1);
    }
    std::vector<int> masks(static_cast<std::size_t>(p));
    MPI_Allgather(&planes_mask, 1, MPI_INT, masks.data(), 1, MPI_INT, MPI_COMM_WORLD);
    const description d = read_description();
    int sockets_to_hosts = 0, sockets_on_planes = 0;
    if (p != d.leaves * d.per_leaf) die("run one rank per host (" + std::to_string(d.leaves * d.per_leaf) + ")");
    {
        char host[256] = {0};
        ::gethostname(host, sizeof host - 1);
        const std::string want = "l" + std::to_string(me / d.per_leaf) + "h" + std::to_string(me % d.per_leaf);
        if (want != host) die("rank " + std::to_string(me) + " runs on " + host + ", not " + want);
    }
    const auto bytes = static_cast<std::int64_t>(mib * 1048576);
    const std::int64_t count = op == op_kind::alltoall_pairwise ? bytes * p : bytes / 8;
    std::vector<double> in(static_cast<std::size_t>(op == op_kind::alltoall_pairwise ? count / 8 : count), 1.0 + me),
        out(in.size());
    auto run_op = [&] {
        if (op == op_kind::alltoall_pairwise)
            MPI_Alltoall(in.data(), static_cast<int>(bytes), MPI_BYTE, out.data(), static_cast<int>(bytes), MPI_BYTE,
                         MPI_COMM_WORLD);
        else
            MPI_Allreduce(in.data(), out.data(), static_cast<int>(count), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    };
    // Every call's result is checked in full: every element is the sum 1 + 2 + ... + p
    // (allreduce) or the sender's value (alltoall); the output is spoilt before each call.
    bool right = true;
    auto run_checked = [&](bool timed) {
        std::fill(out.begin(), out.end(), -1.0);
        MPI_Barrier(MPI_COMM_WORLD);
        const double t0 = now();
        run_op();
        const double t = now() - t0;
        for (std::size_t i = 0; i < out.size(); ++i) {
            const double want = op == op_kind::alltoall_pairwise
                                    ? 1.0 + static_cast<double>(i * 8 / static_cast<std::size_t>(bytes))
                                    : p * (p + 1) / 2.0;
            right = right && out[i] == want;
        }
        return timed ? t : 0.0;
    };
    run_checked(false);  // every connection of the algorithm opens

    // The lanes as set up: each host on its planes, every connection to another host on one.
    int planes_ok = 0;
    {
        const socket_count sc = fabric_sockets(planes_mask);
        int k = 0;
        for (int s = 0; s < 30; ++s) k += (planes_mask >> s) & 1;
        int want = 0;
        const int index = me % d.per_leaf;
        for (int j = 0; j < k; ++j) want |= 1 << ((index * k + j) % d.spines);
        planes_ok = planes_mask != 0 && planes_mask == want && sc.to_hosts > 0 && sc.on_planes == sc.to_hosts;
        MPI_Allreduce(MPI_IN_PLACE, &planes_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        int counts[2] = {sc.to_hosts, sc.on_planes};
        MPI_Allreduce(MPI_IN_PLACE, counts, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        sockets_to_hosts = counts[0];
        sockets_on_planes = counts[1];
    }

    // Calibration: one flow alone from leaf 0 to leaf 1 (best of 2).
    const int cal_to = d.per_leaf;
    std::vector<char> cal(static_cast<std::size_t>(cal_kib) << 10);
    double goodput = 0;
    for (int t = 0; t < 2; ++t) {
        MPI_Barrier(MPI_COMM_WORLD);
        const double t0 = now();
        if (me == 0) MPI_Send(cal.data(), static_cast<int>(cal.size()), MPI_BYTE, cal_to, 7, MPI_COMM_WORLD);
        if (me == cal_to) {
            MPI_Recv(cal.data(), static_cast<int>(cal.size()), MPI_BYTE, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            goodput = std::max(goodput, static_cast<double>(cal.size()) / (now() - t0));
        }
    }
    MPI_Bcast(&goodput, 1, MPI_DOUBLE, cal_to, MPI_COMM_WORLD);

    fabric_spec spec;
    spec.hosts = p;
    spec.hosts_per_leaf = d.per_leaf;
    spec.spines = d.spines;
    spec.nic_gbps = spec.uplink_gbps = goodput * 8 / 1e9;
    const fabric fab(spec);
    std::vector<int> ranks(static_cast<std::size_t>(p));
    std::iota(ranks.begin(), ranks.end(), 0);
    const auto phases = phases_of(op, fab, ranks, static_cast<double>(bytes));

    // Probes: the spine shares of every crossing pair, one pair at a time.
    std::map<std::pair<int, int>, std::vector<double>> share;
    for (const auto& ph : phases)
        for (const auto& f : ph.flows)
            if (crosses_spine(fab, f)) share[{f.src, f.dst}];
    std::vector<char> probe(static_cast<std::size_t>(probe_kib) << 10);
    bool paths_clean = true;
    int pinned_ok = -1;  // every pair's bytes on its receiver's planes' spines (when all ranks have planes)
    if (std::all_of(masks.begin(), masks.end(), [](int m) { return m != 0; })) pinned_ok = 1;
    for (auto& [pair, sh] : share) {
        const auto [a, b] = pair;
        const int la = a / d.per_leaf;
        MPI_Barrier(MPI_COMM_WORLD);
        std::vector<double> c0;
        if (me == 0) c0 = uplink_bytes(d, la);
        MPI_Barrier(MPI_COMM_WORLD);
        if (me == a) MPI_Send(probe.data(), static_cast<int>(probe.size()), MPI_BYTE, b, 9, MPI_COMM_WORLD);
        if (me == b)
            MPI_Recv(probe.data(), static_cast<int>(probe.size()), MPI_BYTE, a, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Barrier(MPI_COMM_WORLD);
        if (me == 0) {
            const auto c1 = uplink_bytes(d, la);
            double total = 0;
            sh.assign(static_cast<std::size_t>(d.spines), 0.0);
            for (int s = 0; s < d.spines; ++s)
                total += sh[static_cast<std::size_t>(s)] =
                    c1[static_cast<std::size_t>(s)] - c0[static_cast<std::size_t>(s)];
            // The probe's bytes (plus headers) must be there, and little else.
            if (total < 0.95 * static_cast<double>(probe.size()) ||
                total > 1.3 * static_cast<double>(probe.size()) + 65536)
                paths_clean = false;
            for (double& x : sh) x = total > 0 ? x / total : 0;
            if (pinned_ok == 1) {
                double on = 0;
                for (int s = 0; s < d.spines; ++s)
                    if (masks[static_cast<std::size_t>(b)] & (1 << s)) on += sh[static_cast<std::size_t>(s)];
                if (on < 0.95) pinned_ok = 0;
            }
        }
    }

    // Timed calls.
    std::vector<double> times;
    for (int i = 0; i < iters; ++i) {
        double t = run_checked(true), worst = 0;
        MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        times.push_back(worst);
    }
    int all_right = right ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &all_right, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);

    if (me == 0) {
        // The model on the probed paths: each crossing flow as `lanes` equal sub-flows, given to
        // the spines by their shares (largest remainder).
        double model = 0, spray = 0, ecmp = 0;
        constexpr int seeds = 200;
        for (const auto& ph : phases) {
            routing r;
            r.first.push_back(0);
            for (const auto& f : ph.flows) {
                if (!crosses_spine(fab, f)) {
                    r.spine.push_back(-1);
                    r.first.push_back(r.first.back() + 1);
                    continue;
                }
                const auto& sh = share[{f.src, f.dst}];
                std::vector<int> parts(static_cast<std::size_t>(d.spines), 0);
                std::vector<std::pair<double, int>> rest;
                int given = 0;
                for (int s = 0; s < d.spines; ++s) {
                    const double want = sh[static_cast<std::size_t>(s)] * lanes;
                    parts[static_cast<std::size_t>(s)] = static_cast<int>(std::floor(want));
                    given += parts[static_cast<std::size_t>(s)];
                    rest.push_back({want - std::floor(want), s});
                }
                std::sort(rest.rbegin(), rest.rend());
                for (std::size_t i = 0; given < lanes; ++i, ++given) ++parts[static_cast<std::size_t>(rest[i].second)];
                for (int s = 0; s < d.spines; ++s)
                    for (int j = 0; j < parts[static_cast<std::size_t>(s)]; ++j) r.spine.push_back(s);
                r.first.push_back(r.first.back() + lanes);
            }
            model += static_cast<double>(ph.repeat) * completion_time(fab, ph, r);
            spray += static_cast<double>(ph.repeat) * spray_completion_time(fab, ph);
            double e = 0;
            for (int s = 0; s < seeds; ++s)
                e += completion_time(fab, ph, route_random(fab, ph, 1, 1000 + static_cast<std::uint64_t>(s)));
            ecmp += static_cast<double>(ph.repeat) * e / seeds;
        }
        std::vector<double> sorted = times;
        std::sort(sorted.begin(), sorted.end());
        const double best = sorted.front(), median = sorted[sorted.size() / 2];
        std::string paths;
        for (auto& [pair, sh] : share) {
            char item[64];
            std::snprintf(item, sizeof item, " %d>%d:", pair.first, pair.second);
            paths += item;
            for (int s = 0; s < d.spines; ++s) {
                std::snprintf(item, sizeof item, "%s%ld", s ? "/" : "",
                              std::lround(100 * sh[static_cast<std::size_t>(s)]));
                paths += item;
            }
        }
        std::printf(
            "result label=%s op=%s ranks=%d mib=%g lanes=%d goodput_mbit=%.2f best=%.4f median=%.4f model=%.4f "
            "spray=%.4f ecmp=%.4f correct=%d paths_clean=%d pinned_paths=%d planes_set_up=%d sockets=%d "
            "sockets_on_planes=%d\n",
            label.c_str(), op_name.c_str(), p, mib, lanes, goodput * 8 / 1e6, best, median, model, spray, ecmp,
            all_right, paths_clean ? 1 : 0, pinned_ok, planes_ok, sockets_to_hosts, sockets_on_planes);
        std::printf("paths label=%s (sender>receiver:%% per spine)%s\n", label.c_str(), paths.c_str());
        std::fflush(stdout);
    }
    MPI_Finalize();
    return 0;
}
