// src/shunt_flows.cpp: the shunt-flows tool: maximum link load and completion time of a collective's phases on a leaf-spine fabric under ECMP, spraying, random and coordinated k-split, and the minimal k.
#include <shunt/flow/evaluate.hpp>
#include <shunt/flow/fabric.hpp>
#include <shunt/flow/hierarchical.hpp>
#include <shunt/flow/pattern.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

using namespace shunt::flow;

void usage(std::FILE* to) {
    std::fputs(
        "usage: shunt-flows --hosts N [OPTIONS]\n"
        "\n"
        "The flow model of a two-tier leaf-spine fabric: for each phase of a collective, the maximum\n"
        "link load (a link's bytes over its capacity) and the fluid completion time (max-min fair\n"
        "sharing, recomputed as flows finish) under random ECMP (mean and p99 over seeds), ideal packet\n"
        "spraying, k-split with random paths, and the coordinated assignment (k = 1 and the minimal k:\n"
        "the smallest whose maximum load equals spraying's). Runs without MPI.\n"
        "\n"
        "Fabric:\n"
        "  --hosts N               hosts (required)\n"
        "  --hosts-per-leaf H      hosts under each leaf (default 16)\n"
        "  --spines S              spines (default 16)\n"
        "  --rails R               NICs per host, NIC r on leaf r of the host's group (default 1)\n"
        "  --nic-gbps G            NIC link speed (default 100)\n"
        "  --uplink-gbps G         leaf-spine link speed (default: the NIC's)\n"
        "  --oversubscription X    uplink speed so that H x NIC = X x S x uplink (instead of --uplink-gbps)\n"
        "  --fail L:S[,L:S...]     leaf-spine links that are down\n"
        "  --fail-random N         N random leaf-spine links down (seeded by --seed)\n"
        "Traffic:\n"
        "  --collective C          hierarchical (default: shunt's allreduce over hosts and leaves), ring,\n"
        "                          halving (recursive halving and doubling), alltoall (pairwise steps),\n"
        "                          shift, xor, permutation (point-to-point, one flow per rank)\n"
        "  --bytes B               allreduce vector, alltoall block, or point-to-point flow size (default\n"
        "                          256M; suffixes K, M, G are powers of 1024)\n"
        "  --shift D               distance for shift and xor (default: hosts per leaf x rails)\n"
        "  --placement P           block (default), spread (hosts round-robin over leaves), random\n"
        "  --max-phases N          alltoall: evaluate N evenly spaced steps for all of them (default 16)\n"
        "Model:\n"
        "  --seeds N               random hashings for ECMP and random k-split (default 20)\n"
        "  --seed X                first seed (default 1)\n"
        "  --random-k K            k of the random split (default: the minimal k, at least 2)\n"
        "  --max-k K               largest k searched (default 64)\n"
        "  --scope all|fabric      links whose maximum counts: all (default) or the leaf-spine links only\n"
        "  --loads-only            skip the completion times (faster)\n"
        "Output:\n"
        "  --per-phase             a table for every phase, not only the whole collective\n"
        "  --csv FILE              every phase's and the total's rows as CSV ('-': stdout)\n"
        "  --help\n",
        to);
}

[[noreturn]] void fail(const std::string& what) {
    std::fprintf(stderr, "shunt-flows: %s\n", what.c_str());
    std::fprintf(stderr, "Try 'shunt-flows --help'.\n");
    std::exit(2);
}

long long parse_int(std::string_view opt, const std::string& v, long long lo, long long hi) {
    char* end = nullptr;
    errno = 0;
    const long long x = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end != 0 || errno != 0 || x < lo || x > hi)
        fail(std::string(opt) + " needs an integer in " + std::to_string(lo) + ".." + std::to_string(hi) + ", not '" +
             v + "'");
    return x;
}

double parse_double(std::string_view opt, const std::string& v, double lo, double hi) {
    char* end = nullptr;
    errno = 0;
    const double x = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != 0 || errno != 0 || !(x >= lo) || !(x <= hi))
        fail(std::string(opt) + " needs a number in " + std::to_string(lo) + ".." + std::to_string(hi) + ", not '" + v +
             "'");
    return x;
}

double parse_bytes(const std::string& v) {
    if (v.empty()) fail("--bytes needs a size");
    double mult = 1;
    std::string num = v;
    switch (v.back()) {
        case 'K':
        case 'k': mult = 1024.0; break;
        case 'M':
        case 'm': mult = 1024.0 * 1024; break;
        case 'G':
        case 'g': mult = 1024.0 * 1024 * 1024; break;
        default: break;
    }
    if (mult > 1) num.pop_back();
    return parse_double("--bytes", num, 1, 1e15) * mult;
}

std::vector<std::pair<int, int>> parse_failed(const std::string& v) {
    std::vector<std::pair<int, int>> out;
    std::size_t pos = 0;
    while (pos <= v.size()) {
        std::size_t comma = v.find(',', pos);
        if (comma == std::string::npos) comma = v.size();
        const std::string item = v.substr(pos, comma - pos);
        const std::size_t colon = item.find(':');
        if (colon == std::string::npos) fail("--fail needs LEAF:SPINE pairs, not '" + item + "'");
        out.push_back({static_cast<int>(parse_int("--fail", item.substr(0, colon), 0, 1 << 26)),
                       static_cast<int>(parse_int("--fail", item.substr(colon + 1), 0, 1 << 26))});
        pos = comma + 1;
    }
    return out;
}

std::string ms(double seconds) {
    char b[32];
    std::snprintf(b, sizeof b, "%.4g", seconds * 1e3);
    return b;
}

std::string ratio(double x, double base) {
    char b[32];
    if (base > 0)
        std::snprintf(b, sizeof b, "%.3f", x / base);
    else
        std::snprintf(b, sizeof b, "-");
    return b;
}

void print_table(const std::vector<strategy_result>& rows, bool times) {
    const strategy_result* spray = nullptr;
    for (const auto& r : rows)
        if (r.kind == strategy::spray) spray = &r;
    const double sl = spray ? mean_of(spray->load) : 0, st = spray && !spray->time.empty() ? mean_of(spray->time) : 0;
    std::printf("  %-20s %4s %12s %12s %8s %8s", "strategy", "k", "load ms", "load p99", "x spray", "p99 x");
    if (times) std::printf(" %12s %12s %8s %8s", "time ms", "time p99", "x spray", "p99 x");
    std::printf("\n");
    for (const auto& r : rows) {
        const double lm = mean_of(r.load), lq = quantile_of(r.load, 0.99);
        std::printf("  %-20s %4s %12s %12s %8s %8s", strategy_name(r.kind),
                    r.kind == strategy::spray ? "-" : std::to_string(r.k).c_str(), ms(lm).c_str(), ms(lq).c_str(),
                    ratio(lm, sl).c_str(), ratio(lq, sl).c_str());
        if (times && !r.time.empty()) {
            const double tm = mean_of(r.time), tq = quantile_of(r.time, 0.99);
            std::printf(" %12s %12s %8s %8s", ms(tm).c_str(), ms(tq).c_str(), ratio(tm, st).c_str(),
                        ratio(tq, st).c_str());
        }
        std::printf("\n");
    }
}

void csv_rows(std::FILE* out, const std::string& phase, std::int64_t repeat, std::size_t flows, std::size_t crossing,
              int kmin, bool reached, const std::vector<strategy_result>& rows) {
    for (const auto& r : rows) {
        std::fprintf(out, "\"%s\",%lld,%zu,%zu,%d,%d,%s,%d,%.9g,%.9g,%.9g,%.9g,%zu\n", phase.c_str(),
                     static_cast<long long>(repeat), flows, crossing, kmin, reached ? 1 : 0, strategy_name(r.kind), r.k,
                     mean_of(r.load), quantile_of(r.load, 0.99), r.time.empty() ? -1.0 : mean_of(r.time),
                     r.time.empty() ? -1.0 : quantile_of(r.time, 0.99), r.load.size());
    }
}

}  // namespace

int main(int argc, char** argv) {
    fabric_spec spec;
    spec.hosts = 0;
    bool uplink_set = false;
    double oversub = 0;
    int fail_random = 0;
    std::string collective = "hierarchical", place_name = "block", csv_path;
    double bytes = 256.0 * 1024 * 1024;
    int shift_d = 0, max_phases = 16;
    bool per_phase = false;
    evaluate_options opt;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) fail(a + " needs a value");
            return argv[++i];
        };
        if (a == "--help" || a == "-h") {
            usage(stdout);
            return 0;
        } else if (a == "--hosts") {
            spec.hosts = static_cast<int>(parse_int(a, value(), 1, 1 << 22));
        } else if (a == "--hosts-per-leaf") {
            spec.hosts_per_leaf = static_cast<int>(parse_int(a, value(), 1, 4096));
        } else if (a == "--spines") {
            spec.spines = static_cast<int>(parse_int(a, value(), 1, 4096));
        } else if (a == "--rails") {
            spec.rails = static_cast<int>(parse_int(a, value(), 1, 64));
        } else if (a == "--nic-gbps") {
            spec.nic_gbps = parse_double(a, value(), 1e-3, 1e6);
        } else if (a == "--uplink-gbps") {
            spec.uplink_gbps = parse_double(a, value(), 1e-3, 1e6);
            uplink_set = true;
        } else if (a == "--oversubscription") {
            oversub = parse_double(a, value(), 1e-3, 1e3);
        } else if (a == "--fail") {
            auto f = parse_failed(value());
            spec.failed.insert(spec.failed.end(), f.begin(), f.end());
        } else if (a == "--fail-random") {
            fail_random = static_cast<int>(parse_int(a, value(), 0, 1 << 20));
        } else if (a == "--collective") {
            collective = value();
        } else if (a == "--bytes") {
            bytes = parse_bytes(value());
        } else if (a == "--shift") {
            shift_d = static_cast<int>(parse_int(a, value(), -(1 << 24), 1 << 24));
        } else if (a == "--placement") {
            place_name = value();
        } else if (a == "--max-phases") {
            max_phases = static_cast<int>(parse_int(a, value(), 1, 1 << 20));
        } else if (a == "--seeds") {
            opt.seeds = static_cast<int>(parse_int(a, value(), 1, 100000));
        } else if (a == "--seed") {
            opt.seed = static_cast<std::uint64_t>(parse_int(a, value(), 0, (1LL << 62)));
        } else if (a == "--random-k") {
            opt.random_k = static_cast<int>(parse_int(a, value(), 1, 4096));
        } else if (a == "--max-k") {
            opt.plan.max_k = static_cast<int>(parse_int(a, value(), 1, 4096));
        } else if (a == "--scope") {
            const std::string s = value();
            if (s == "all")
                opt.plan.scope = link_scope::all;
            else if (s == "fabric")
                opt.plan.scope = link_scope::fabric;
            else
                fail("--scope is all or fabric, not '" + s + "'");
        } else if (a == "--loads-only") {
            opt.completion = false;
        } else if (a == "--per-phase") {
            per_phase = true;
        } else if (a == "--csv") {
            csv_path = value();
        } else {
            fail("unknown option '" + a + "'");
        }
    }
    if (spec.hosts < 1) fail("--hosts N is required");
    if (oversub > 0) {
        if (uplink_set) fail("--uplink-gbps and --oversubscription exclude each other");
        spec.uplink_gbps = spec.hosts_per_leaf * spec.nic_gbps / (oversub * spec.spines);
    } else if (!uplink_set) {
        spec.uplink_gbps = spec.nic_gbps;
    }
    const auto t0 = std::chrono::steady_clock::now();
    try {
        if (fail_random > 0) {
            const fabric probe(spec);
            const std::int64_t links = static_cast<std::int64_t>(probe.leaves()) * probe.spines();
            if (fail_random >= links) fail("--fail-random must be below the number of leaf-spine links");
            std::mt19937_64 rng(opt.seed);
            std::set<std::pair<int, int>> chosen(spec.failed.begin(), spec.failed.end());
            while (static_cast<int>(chosen.size()) < fail_random + static_cast<int>(spec.failed.size()))
                chosen.insert({static_cast<int>(rng() % static_cast<std::uint64_t>(probe.leaves())),
                               static_cast<int>(rng() % static_cast<std::uint64_t>(probe.spines()))});
            spec.failed.assign(chosen.begin(), chosen.end());
        }
        const fabric fab(spec);
        placement pl = placement::block;
        if (place_name == "spread")
            pl = placement::spread;
        else if (place_name == "random")
            pl = placement::random;
        else if (place_name != "block")
            fail("--placement is block, spread or random, not '" + place_name + "'");
        const auto ranks = place(fab, pl, opt.seed);
        if (shift_d == 0) shift_d = fab.hosts_per_leaf() * fab.rails();
        std::vector<phase> phases;
        if (collective == "hierarchical")
            phases = hierarchical_allreduce(fab, ranks, fabric_hierarchy(fab, ranks), bytes);
        else if (collective == "ring")
            phases = ring_allreduce(fab, ranks, bytes);
        else if (collective == "halving")
            phases = halving_allreduce(fab, ranks, bytes);
        else if (collective == "alltoall")
            phases = alltoall(fab, ranks, bytes, max_phases);
        else if (collective == "shift")
            phases = shift(fab, ranks, bytes, shift_d);
        else if (collective == "xor")
            phases = xor_pairs(fab, ranks, bytes, shift_d);
        else if (collective == "permutation")
            phases = permutation(fab, ranks, bytes, opt.seed);
        else
            fail("unknown collective '" + collective + "'");

        std::printf("fabric: %s\n", fab.describe().c_str());
        std::printf("traffic: %s, %s placement, %.6g bytes, %zu ranks, %zu phase%s evaluated\n", collective.c_str(),
                    place_name.c_str(), bytes, ranks.size(), phases.size(), phases.size() == 1 ? "" : "s");
        std::printf("model: %d seeds from %llu, loads over %s links, completion %s\n", opt.seeds,
                    static_cast<unsigned long long>(opt.seed), opt.plan.scope == link_scope::all ? "all" : "leaf-spine",
                    opt.completion ? "max-min fair fluid" : "not computed");

        std::FILE* csv = nullptr;
        if (!csv_path.empty()) {
            csv = csv_path == "-" ? stdout : std::fopen(csv_path.c_str(), "w");
            if (!csv) fail("cannot write '" + csv_path + "'");
            std::fprintf(csv,
                         "phase,repeat,flows,crossing,k_min,k_reached,strategy,k,load_mean_s,load_p99_s,time_mean_s,"
                         "time_p99_s,samples\n");
        }
        std::vector<phase_report> reports;
        for (const auto& ph : phases) {
            reports.push_back(evaluate_phase(fab, ph, opt));
            const auto& r = reports.back();
            if (per_phase) {
                std::printf("\nphase '%s' x%lld: %zu flows, %zu across spines, minimal k %d%s\n", r.name.c_str(),
                            static_cast<long long>(r.repeat), r.flows, r.crossing, r.k.k,
                            r.k.reached ? "" : " (spraying not reached within --max-k)");
                print_table(r.rows, opt.completion);
            }
            if (csv) csv_rows(csv, r.name, r.repeat, r.flows, r.crossing, r.k.k, r.k.reached, r.rows);
        }
        const auto total = total_of(reports);
        int kmax = 1;
        bool all_reached = true;
        std::string ks;
        for (const auto& r : reports) {
            kmax = std::max(kmax, r.k.k);
            all_reached = all_reached && r.k.reached;
            if (ks.size() < 200) ks += (ks.empty() ? "" : " ") + std::to_string(r.k.k);
        }
        if (!total.empty()) {
            std::printf("\nwhole collective (sum over phases of repeat x phase):\n");
            print_table(total, opt.completion);
            if (csv) csv_rows(csv, "total", 1, 0, 0, kmax, all_reached, total);
        } else {
            std::printf("\nno flow crosses a link (every flow stays inside a host)\n");
        }
        std::printf("\nminimal k per phase: %s%s%s\n", ks.empty() ? "-" : ks.c_str(), ks.size() >= 200 ? " ..." : "",
                    all_reached ? "" : " (some phase does not reach spraying within --max-k)");
        if (csv && csv != stdout) std::fclose(csv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "shunt-flows: %s\n", e.what());
        return 1;
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("evaluated in %.2f s\n", secs);
    return 0;
}
