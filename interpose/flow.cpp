// interpose/flow.cpp: flow splitting's set-up before MPI or NCCL starts: plan the job's lanes, set the library's knobs in this process's environment, log what was done.
#include "flow.hpp"

#include <shunt/flow/knobs.hpp>
#include <shunt/flow/lanes.hpp>
#include <shunt/log.hpp>
#include <shunt/model/file.hpp>

#include <arpa/inet.h>
#include <dirent.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cinttypes>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <mpi.h>

namespace shunt::detail {
namespace {

/// What the set-up decided, kept for the log once the rank is known.
struct lane_setup {
    bool done = false;
    bool active = false;  ///< settings were made
    bool job_problem = false;  ///< `problem` is the same on every rank (said by rank 0 only)
    flow::lane_plan plan;
    std::string host;
    std::vector<int> spines;  ///< pinned: the spines this host receives on
    std::vector<std::string> interfaces;
    std::vector<flow::env_setting> applied;
    std::vector<std::string> kept;  ///< variables the user had set, left as they were
    std::string problem;  ///< why nothing (or less) was done
    bool problem_is_warning = true;  ///< false: SHUNT_FLOW=auto keeping one connection (said at info)
};

lane_setup& mpi_setup() {
    static lane_setup s;
    return s;
}

const char* env(std::string_view name) { return environment_lookup(process_environment(), name); }

/// The first of the variables that holds a positive integer, else 0.
int env_count(std::initializer_list<std::string_view> names) {
    for (std::string_view n : names) {
        const char* v = env(n);
        if (v == nullptr) continue;
        int x = 0;
        const std::string_view t(v);
        auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), x);
        if (ec == std::errc{} && p == t.data() + t.size() && x > 0) return x;
    }
    return 0;
}

#if defined(OMPI_MAJOR_VERSION)  // Open MPI's TCP interfaces, as its component picks them
std::vector<std::string> split_list(std::string_view t) {
    std::vector<std::string> out;
    for (std::string_view item : flow::detail::split(t, ',')) {
        item = flow::detail::trim(item);
        if (!item.empty()) out.emplace_back(item);
    }
    return out;
}

/// IPv4 interfaces that are up and not loopback, in the system's order, each once; with
/// `in_subnet`, those with an address in that a.b.c.d/n subnet.
std::vector<std::string> ipv4_interfaces(std::string_view in_subnet = {}) {
    std::uint32_t net = 0, mask = 0;
    if (!in_subnet.empty()) {
        const auto slash = in_subnet.find('/');
        int bits = -1;
        in_addr a{};
        const std::string ip(in_subnet.substr(0, slash));
        if (slash == std::string_view::npos || inet_pton(AF_INET, ip.c_str(), &a) != 1 ||
            !flow::detail::parse_int(in_subnet.substr(slash + 1), 0, 32, bits))
            return {};
        mask = bits == 0 ? 0 : ~std::uint32_t{0} << (32 - bits);
        net = ntohl(a.s_addr) & mask;
    }
    std::vector<std::string> out;
    ifaddrs* list = nullptr;
    if (::getifaddrs(&list) != 0) return out;
    for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
        if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET || (i->ifa_flags & IFF_UP) == 0) continue;
        const std::uint32_t addr = ntohl(reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr);
        if (in_subnet.empty() ? (i->ifa_flags & IFF_LOOPBACK) != 0 : (addr & mask) != net) continue;
        const std::string name = i->ifa_name;
        if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
    }
    ::freeifaddrs(list);
    return out;
}

/// Names for a list of interface names and a.b.c.d/n subnets, as Open MPI's TCP component
/// resolves them.
std::vector<std::string> resolve(const std::vector<std::string>& items) {
    std::vector<std::string> out;
    for (const auto& it : items) {
        for (auto& name : it.find('/') != std::string::npos ? ipv4_interfaces(it) : std::vector<std::string>{it})
            if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
    }
    return out;
}

/// The interfaces Open MPI's TCP component will make modules on: btl_tcp_if_include's, else
/// every IPv4 interface that is up, less btl_tcp_if_exclude's (matched as name prefixes, as the
/// component does; its default excludes loopback).
std::vector<std::string> openmpi_tcp_interfaces() {
    if (const char* inc = env("OMPI_MCA_btl_tcp_if_include"); inc != nullptr && *inc != '\0')
        return resolve(split_list(inc));
    const char* exc = env("OMPI_MCA_btl_tcp_if_exclude");
    const auto excluded = resolve(split_list(exc != nullptr ? exc : "127.0.0.1/8,sppp"));
    std::vector<std::string> out;
    for (auto& name : ipv4_interfaces()) {
        bool drop = false;
        for (const auto& x : excluded) drop = drop || name.compare(0, x.size(), x) == 0;
        if (!drop) out.push_back(name);
    }
    return out;
}
#endif  // OMPI_MAJOR_VERSION

/// Sets each variable unless the user has (or it may replace it); records what it did.
void set_all(lane_setup& s, const std::vector<flow::env_setting>& list) {
    for (const auto& e : list) {
        const char* cur = env(e.name);
        if (cur != nullptr && *cur != '\0' && !e.replace) {
            s.kept.push_back(e.name);
            continue;
        }
        if (::setenv(e.name.c_str(), e.value.c_str(), 1) == 0) s.applied.push_back(e);
    }
}

/// The plan for this process: the fabric's, or k alone (hashed:K without a fabric). False
/// when there is nothing to set up (SHUNT_FLOW off, or `problem` says why not).
bool plan_job(const settings& cfg, lane_setup& s) {
    const flow::flow_request req = flow::parse_flow_request(cfg.flow);
    if (req.mode == flow::lane_mode::off) return false;
    char host[256] = {0};
    if (::gethostname(host, sizeof host - 1) == 0) s.host = host;
    flow::fabric_description desc;
    if (!cfg.fabric.empty()) desc = flow::parse_fabric_description(cfg.fabric);
    bool planes = !desc.planes.empty();
    for (int p = 1; planes && p <= desc.spines; ++p)
        planes = ::if_nametoindex((desc.planes + std::to_string(p)).c_str()) != 0;
    const flow::lane_choice choice = flow::choose_lanes(req, cfg.fabric.empty() ? nullptr : &desc, s.host, planes);
    if (choice.kind == flow::lane_kind::none) {
        s.problem = choice.why;
        s.problem_is_warning = choice.warn;
        s.job_problem = choice.job_wide;
        return false;
    }
    const bool pinned = choice.kind == flow::lane_kind::pinned;
#if !defined(OMPI_MAJOR_VERSION)
    if (pinned) {
        // UCX's TCP transport does not bind a connection to the interface it was given: the
        // kernel picks the source address, so whatever travels back on the connection goes to
        // this host's plane-0 address, hashed over every spine (bench/README.md). Over
        // InfiniBand/RoCE the planes are no interfaces of UCX's at all. (NCCL asks for hashed
        // lanes only.)
        s.problem = "pinned lanes are not available under UCX (MPICH): its TCP connections are not bound to the "
                    "plane interfaces, so the way back is hashed; one connection per peer kept";
        s.problem_is_warning = req.mode != flow::lane_mode::automatic;
        s.job_problem = true;
        return false;
    }
#endif
    if (cfg.fabric.empty()) {
        s.plan.k = req.k;  // hashed:K
    } else {
        const int ep = flow::host_endpoint(desc, s.host);
        const flow::fabric fab =
            flow::make_fabric(desc, pinned ? flow::path_control::pinned : flow::path_control::hashed);
        const int per_host = std::max(1, env_count({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}));
        int ranks = env_count({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS"});
        if (ranks == 0) {
            for (const auto& l : desc.leaves) ranks += static_cast<int>(l.size());
            ranks *= per_host;
        }
        const auto rank_ep = flow::job_ranks(desc, ranks, per_host);
        const auto phases = flow::job_phases(fab, rank_ep);
        s.plan = flow::plan_lanes(fab, phases, req.k);
        if (pinned) {
            s.spines = flow::receive_spines(ep % fab.hosts_per_leaf(), s.plan.k, fab.spines());
            for (int sp : s.spines) s.interfaces.push_back(desc.planes + std::to_string(sp + 1));
        }
    }
    s.plan.pinned = pinned;
    return true;
}

#if !defined(OMPI_MAJOR_VERSION)
/// Whether the host has InfiniBand or RoCE devices (what UCX's IB transports would use).
bool has_rdma_devices() {
    DIR* d = ::opendir("/sys/class/infiniband");
    if (d == nullptr) return false;
    bool any = false;
    while (const dirent* e = ::readdir(d))
        if (e->d_name[0] != '.') any = true;
    ::closedir(d);
    return any;
}
#endif

/// The MPI library's knobs for the plan.
void apply_mpi(lane_setup& s) {
    const bool pinned = s.plan.pinned;
#if defined(OMPI_MAJOR_VERSION)
    if (!pinned) {
        s.interfaces = openmpi_tcp_interfaces();
        // A link count the user chose (mpirun --mca btl_tcp_links N) stays; weigh its links evenly.
        if (const int user = env_count({"OMPI_MCA_btl_tcp_links"}); user > 0) s.plan.k = user;
    }
    set_all(s, flow::openmpi_lane_settings(s.plan.k, pinned, s.interfaces));
#else
    set_all(s, flow::ucx_lane_settings(s.plan.k, pinned, s.interfaces, has_rdma_devices()));
#endif
    s.active = !s.applied.empty();
}

std::string spines_text(const std::vector<int>& v) {
    std::string t;
    for (int x : v) t += (t.empty() ? "" : ",") + std::to_string(x);
    return t;
}

/// This process's rank as its launcher gives it (mpirun, Hydra, PMIx, Slurm, torchrun), -1
/// when none does.
int launcher_rank() {
    for (std::string_view n : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID", "RANK"}) {
        const char* v = env(n);
        if (v == nullptr) continue;
        int x = -1;
        const std::string_view t(v);
        auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), x);
        if (ec == std::errc{} && p == t.data() + t.size() && x >= 0) return x;
    }
    return -1;
}

/// NCCL's set-up said: what was set at debug; why nothing was as a warning where the MPI_Init
/// shim has not said it already (a job-wide reason by the launcher's rank 0 alone).
void log_nccl_lanes(const lane_setup& s) {
    if (!s.problem.empty()) {
        if (!mpi_setup().done && (!s.job_problem || launcher_rank() <= 0))
            log_warn(log_category::config, "flow splitting is off for NCCL: %s", s.problem.c_str());
        else
            log_debug(log_category::decide, "flow: NCCL: nothing set: %s", s.problem.c_str());
        return;
    }
    if (!log_enabled(log_level::debug, log_category::decide)) return;
    std::string set;
    for (const auto& e : s.applied) set += " " + e.name + "=" + e.value;
    for (const auto& n : s.kept) {
        const char* v = env(n);
        set += " (kept " + n + "=" + (v != nullptr ? v : "") + ")";
    }
    log_debug(log_category::decide, "flow: NCCL: lanes hashed by the switches, k %d planned:%s", s.plan.k,
              set.empty() ? " nothing set" : set.c_str());
}

}  // namespace

void prepare_flow_lanes(const settings& cfg) noexcept {
    lane_setup& s = mpi_setup();
    if (s.done) return;
    s.done = true;
    try {
        if (plan_job(cfg, s)) apply_mpi(s);
    } catch (const std::exception& e) {
        s.job_problem = true;  // SHUNT_FLOW / SHUNT_FABRIC errors and plans are the same everywhere
        s.problem = e.what();
    } catch (...) {
        s.problem = "unknown failure";
    }
}

void connect_flow_lanes() noexcept {
#if defined(OMPI_MAJOR_VERSION)
    const lane_setup& s = mpi_setup();
    if (!s.active || s.plan.pinned) return;
    const int links = env_count({"OMPI_MCA_btl_tcp_links"});
    if (links <= 1) return;
    MPI_Comm comm = MPI_COMM_NULL;
    if (PMPI_Comm_dup(MPI_COMM_WORLD, &comm) != MPI_SUCCESS) return;
    int rank = 0, size = 0;
    PMPI_Comm_rank(comm, &rank);
    PMPI_Comm_size(comm, &size);
    try {
        static char token = 1;
        std::vector<char> sink(static_cast<std::size_t>(std::max(1, rank * links)));
        std::vector<MPI_Request> reqs;
        reqs.reserve(static_cast<std::size_t>(size - 1) * static_cast<std::size_t>(links));
        int ok = MPI_SUCCESS;
        for (int q = 0; q < rank; ++q)
            for (int j = 0; j < links && ok == MPI_SUCCESS; ++j) {
                reqs.push_back(MPI_REQUEST_NULL);
                ok = PMPI_Irecv(&sink[static_cast<std::size_t>(q * links + j)], 1, MPI_BYTE, q, 0, comm, &reqs.back());
            }
        for (int q = rank + 1; q < size; ++q)
            for (int j = 0; j < links && ok == MPI_SUCCESS; ++j) {
                reqs.push_back(MPI_REQUEST_NULL);
                // Synchronous: ob1 then takes the next eager module once per message (a standard
                // send first tries an inline send, which takes one more), so k messages open k links.
                ok = PMPI_Issend(&token, 1, MPI_BYTE, q, 0, comm, &reqs.back());
            }
        PMPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE);
        PMPI_Barrier(comm);
    } catch (...) {  // no memory: the links open as the application's messages need them
    }
    PMPI_Comm_free(&comm);
#endif
}

void log_flow_lanes() noexcept {
    try {
        const lane_setup& s = mpi_setup();
        if (!s.done) return;
        const int rank = log_rank();
        if (!s.problem.empty()) {
            if (rank != 0 && s.job_problem) return;
            if (s.problem_is_warning)
                log_warn(log_category::config, "flow splitting is off: %s", s.problem.c_str());
            else
                log_info(log_category::decide, "flow: %s", s.problem.c_str());
            return;
        }
        if (rank == 0 && log_enabled(log_level::info, log_category::decide)) {
            const char* how = s.plan.pinned ? "pinned (each on its spine's address plane)" : "hashed by the switches";
            // Rank 0's own settings stand for the job's (k = 1 hashed, or a transport without
            // the knob, sets nothing anywhere).
            log_info(log_category::decide, "flow: %d lane%s per peer, %s; %s%s", s.plan.k, s.plan.k == 1 ? "" : "s",
                     how,
                     s.plan.phases.empty() ? "k as SHUNT_FLOW gives it"
                     : s.plan.reached      ? "every planned phase reaches spraying's maximum load"
                                           : "some phase stays above spraying's maximum load",
                     s.active ? "" : "; nothing to set for this library here");
            for (const auto& p : s.plan.phases)
                log_debug(log_category::decide,
                          "flow: %s: max load spraying %.4g, ECMP expected %.4g, planned %.4g (minimal k %d)",
                          p.name.c_str(), p.spray, p.ecmp, p.planned, p.minimal_k);
        }
        if (log_enabled(log_level::debug, log_category::decide)) {
            std::string set;
            for (const auto& e : s.applied) set += " " + e.name + "=" + e.value;
            for (const auto& n : s.kept) set += " (kept " + n + ")";
            log_debug(log_category::decide, "flow: host %s%s%s:%s", s.host.c_str(),
                      s.spines.empty() ? "" : ", receives on spines ", spines_text(s.spines).c_str(),
                      set.empty() ? " nothing set" : set.c_str());
        }
    } catch (...) {  // logging only
    }
}

void prepare_nccl_lanes(const settings& cfg) noexcept {
    static std::once_flag once;
    try {
        std::call_once(once, [&] {
            lane_setup s;
            try {
                const flow::flow_request req = flow::parse_flow_request(cfg.flow);
                if (req.mode == flow::lane_mode::off) return;
                // NCCL's queue pairs cannot be pinned (NCCL picks their source ports), and auto and
                // pinned never fall back to hashed lanes: only SHUNT_FLOW=hashed[:K] sets them.
                if (req.mode != flow::lane_mode::hashed) {
                    log_debug(log_category::decide, "flow: NCCL: SHUNT_FLOW=%s sets nothing for NCCL (only hashed[:K])",
                              cfg.flow.c_str());
                    return;
                }
                if (plan_job(cfg, s)) set_all(s, flow::nccl_lane_settings(s.plan.k));
            } catch (const std::exception& e) {
                s.job_problem = true;  // SHUNT_FLOW / SHUNT_FABRIC errors are the same everywhere
                s.problem = e.what();
            }
            log_nccl_lanes(s);
        });
    } catch (...) {  // NCCL runs as the user set it
    }
}

}  // namespace shunt::detail
