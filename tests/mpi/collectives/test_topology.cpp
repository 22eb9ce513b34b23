// tests/mpi/collectives/test_topology.cpp: topology descriptions, discovery (GPU locality included), per-level communicators and their caching.
#include "mpi_test_main.hpp"

#include <shunt/topology/gpu.hpp>
#include <shunt/topology/locality.hpp>
#include <shunt/topology/topology.hpp>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <set>

int main(int argc, char** argv) { return run_mpi_doctest(argc, argv); }

namespace {

int world_rank() {
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}
int world_size() {
    int n = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
}

/// The world ranks of the members of `comm`, in its rank order.
std::vector<int> world_ranks_of(MPI_Comm comm) {
    MPI_Group g, w;
    MPI_Comm_group(comm, &g);
    MPI_Comm_group(MPI_COMM_WORLD, &w);
    int n = 0;
    MPI_Group_size(g, &n);
    std::vector<int> in(static_cast<std::size_t>(n)), out(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) in[static_cast<std::size_t>(i)] = i;
    MPI_Group_translate_ranks(g, n, in.data(), w, out.data());
    MPI_Group_free(&g);
    MPI_Group_free(&w);
    return out;
}

}  // namespace

TEST_CASE("descriptions parse, print back, and say what is wrong") {
    using shunt::parse_topology_spec;
    CHECK(shunt::to_string(parse_topology_spec("")) == "gpu=auto;package=auto;node=auto;switch=slurm");
    for (const char* s :
         {"node=2", "package=1;node=2;switch=4", "node=3,1", "node=[0,1,0,1]", "node=auto;switch={a,b|c*,d}",
          "numa=auto;node=auto", "node=auto;leaf=slurm;spine=slurm:2", "gpu=auto;numa=auto;node=auto"})
        CHECK(shunt::to_string(parse_topology_spec(s)) == s);
    CHECK(shunt::to_string(parse_topology_spec(" node = 2 ; switch = [ 0 , 0 ] ")) == "node=2;switch=[0,0]");
    CHECK(shunt::to_string(parse_topology_spec("switch=slurm:1")) == "switch=slurm");
    for (const char* bad :
         {"node", "node=", "node=0", "node=2;", "node=2;node=4", "node=[1,", "node=[-1]", "switch=auto", "node={}",
          "node=2 x", "9node=2", "node=99999999999", "node=abc", "switch=slurm:0", "switch=slurm:", "switch=slurm2"}) {
        CAPTURE(bad);
        CHECK_THROWS_AS(parse_topology_spec(bad), shunt::error);
    }
    try {
        parse_topology_spec("node=2;rack=auto");
    } catch (const shunt::error& e) {
        CHECK(std::string(e.what()).find("'auto' is known for levels node, package, numa and gpu only") !=
              std::string::npos);
    }
}

TEST_CASE("rank and host labels") {
    auto s = shunt::parse_topology_spec("node=3,1");
    std::vector<std::int64_t> got;
    for (int r = 0; r < 8; ++r) got.push_back(shunt::rank_label(s.levels[0], r, 8));
    CHECK(got == std::vector<std::int64_t>{0, 0, 0, 1, 2, 2, 2, 3});
    auto l = shunt::parse_topology_spec("node=[4,4,7]");
    CHECK(shunt::rank_label(l.levels[0], 2, 3) == 7);
    CHECK_THROWS_AS(shunt::rank_label(l.levels[0], 2, 4), shunt::error);
    auto h = shunt::parse_topology_spec("switch={nid001,nid002|nid1*}");
    CHECK(shunt::host_label(h.levels[0], "nid002") == 0);
    CHECK(shunt::host_label(h.levels[0], "nid1234") == 1);
    CHECK(shunt::host_label(h.levels[0], "nid003") == -1);
    CHECK(shunt::host_label(h.levels[0], "nid00") == -1);
}

TEST_CASE("Slurm topology addresses: one group per switch of the tier") {
    const auto spec = shunt::parse_topology_spec("leaf=slurm;spine=slurm:2;core=slurm:3");
    const auto& leaf = spec.levels[0];
    const auto& spine = spec.levels[1];
    const auto& core = spec.levels[2];
    const char* pattern = "switch.switch.node";
    const auto a = shunt::slurm_label(leaf, "s0.l1.nid001", pattern);
    CHECK(a >= 0);
    CHECK(shunt::slurm_label(leaf, "s0.l1.nid002", pattern) == a);
    CHECK(shunt::slurm_label(leaf, "s0.l2.nid003", pattern) != a);
    CHECK(shunt::slurm_label(leaf, "s1.l1.nid004", pattern) != a);  // l1 under another spine is another switch
    CHECK(shunt::slurm_label(spine, "s0.l1.nid001", pattern) == shunt::slurm_label(spine, "s0.l2.nid003", pattern));
    CHECK(shunt::slurm_label(spine, "s0.l1.nid001", pattern) != shunt::slurm_label(spine, "s1.l1.nid004", pattern));
    CHECK(shunt::slurm_label(core, "s0.l1.nid001", pattern) == -1);  // only two tiers
    CHECK(shunt::slurm_label(leaf, "s0.l1.nid001", "") == a);  // no pattern: all but the node are switches
    CHECK(shunt::slurm_label(leaf, "s0.l1.nid001", "switch.node") == -1);  // pattern and address disagree
    CHECK(shunt::slurm_label(leaf, "", pattern) == -1);
    CHECK(shunt::slurm_label(leaf, "nid001", "node") == -1);

    // From each rank's environment, as Slurm sets it per task: leaf switches of 2 ranks.
    const int w = world_size(), me = world_rank();
    const std::string addr = "spine0.leaf" + std::to_string(me / 2) + ".nid" + std::to_string(me);
    ::setenv("SLURM_TOPOLOGY_ADDR", addr.c_str(), 1);
    ::setenv("SLURM_TOPOLOGY_ADDR_PATTERN", pattern, 1);
    {
        shunt::topology topo(MPI_COMM_WORLD, shunt::parse_topology_spec("node=1;switch=slurm;spine=slurm:2"));
        const auto& h = topo.groups();
        if (w >= 3) {
            REQUIRE(h.levels() == 1);  // nodes of one rank and the one spine say nothing
            CHECK(h.name(0) == "switch");
            for (int r = 0; r < w; ++r) CHECK((h.group_of(0, r) == h.group_of(0, me)) == (r / 2 == me / 2));
        }
    }
    // One rank without an address: the level is left out, with a note, on every rank.
    if (me == 0) ::unsetenv("SLURM_TOPOLOGY_ADDR");
    {
        shunt::topology topo(MPI_COMM_WORLD, shunt::parse_topology_spec("node=1;switch=slurm"));
        CHECK(topo.groups().levels() == 0);
        CHECK(topo.describe().find("switch: ignored, rank 0 has no Slurm switch address") != std::string::npos);
    }
    ::unsetenv("SLURM_TOPOLOGY_ADDR");
    ::unsetenv("SLURM_TOPOLOGY_ADDR_PATTERN");
}

TEST_CASE("virtual levels: group and peer communicators hold the right world ranks") {
    const int w = world_size(), me = world_rank();
    MPI_Comm rev;
    MPI_Comm_split(MPI_COMM_WORLD, 0, w - me, &rev);  // a non-block placement of the same ranks
    for (MPI_Comm comm : {MPI_COMM_WORLD, rev}) {
        shunt::topology topo(comm, shunt::parse_topology_spec("node=2"));
        const auto& h = topo.groups();
        if (w <= 2) {
            CHECK(h.levels() == 0);  // one node: the level is trivial and dropped
            CHECK(topo.notes().size() == 1u);
            continue;
        }
        REQUIRE(h.levels() == 1);
        CHECK(h.groups(0) == (w + 1) / 2);
        auto group = world_ranks_of(topo.levels()[0].group);
        for (int r : group) CHECK(r / 2 == me / 2);
        CHECK(group.size() == static_cast<std::size_t>(std::min(2, w - me / 2 * 2)));
        if (group.size() > 1) CHECK(std::is_sorted(group.begin(), group.end()) == (comm == MPI_COMM_WORLD));
        // peers: same position in each node; position follows the communicator's rank order
        auto peers = world_ranks_of(topo.levels()[0].peers);
        std::set<int> nodes;
        for (int r : peers) nodes.insert(r / 2);
        CHECK(nodes.size() == peers.size());
        int my_rank = 0;
        MPI_Comm_rank(comm, &my_rank);
        for (int r = 0; r < topo.size(); ++r)
            if (h.position(0, r) == h.position(0, my_rank))
                CHECK(std::count(peers.begin(), peers.end(), world_ranks_of(comm)[static_cast<std::size_t>(r)]) == 1);
        int gsize = 0;
        MPI_Comm_size(topo.levels()[0].group, &gsize);
        CHECK(gsize == static_cast<int>(h.members(0, h.group_of(0, my_rank)).size()));
        int cmp = MPI_UNEQUAL;
        MPI_Comm_compare(topo.comm(), comm, &cmp);
        CHECK(cmp == MPI_CONGRUENT);  // a private duplicate
    }
    MPI_Comm_free(&rev);
}

TEST_CASE("uneven, non-block and multi-level descriptions on sub-communicators") {
    const int w = world_size(), me = world_rank();
    MPI_Comm odd;  // the odd world ranks, or everyone at one rank
    MPI_Comm_split(MPI_COMM_WORLD, w > 1 ? me % 2 : 0, me, &odd);
    std::string lonely = "node=[";
    for (int r = 0; r < w; ++r) {
        if (r) lonely += ',';
        lonely += std::to_string(r == 1 ? 1 : 0);
    }
    lonely += "]";
    for (const auto& spec : test_specs(w)) {
        CAPTURE(spec);
        for (MPI_Comm comm : {MPI_COMM_WORLD, odd}) {
            shunt::topology topo(comm, shunt::parse_topology_spec(spec));
            const auto& h = topo.groups();
            CHECK(h.size() == topo.size());
            for (int k = 0; k < h.levels(); ++k) CHECK_FALSE(h.trivial(k));
            // Every level's group communicator matches the tables.
            for (int k = 0; k < h.levels(); ++k) {
                int n = 0;
                MPI_Comm_size(topo.levels()[static_cast<std::size_t>(k)].group, &n);
                CHECK(n == static_cast<int>(h.members(k, h.group_of(k, topo.rank())).size()));
            }
        }
    }
    if (w == 4) {
        shunt::topology topo(MPI_COMM_WORLD, shunt::parse_topology_spec(lonely));
        REQUIRE(topo.groups().levels() == 1);
        CHECK_FALSE(topo.groups().regular());
        CHECK(topo.groups().members(0, 1).size() == 1u);
        CHECK(topo.groups().members(0, 1)[0] == 1);
        shunt::topology two(MPI_COMM_WORLD, shunt::parse_topology_spec("node=2,1;switch=3"));
        CHECK(two.groups().levels() == 2);  // {0,1},{2},{3} inside {0,1,2},{3}
        CHECK(two.describe().find("node: 3 groups of 2+1+1 ranks") != std::string::npos);
    }
    if (w == 6) {
        shunt::topology two(MPI_COMM_WORLD, shunt::parse_topology_spec("node=2,1;switch=3"));
        const auto& h = two.groups();
        REQUIRE(h.levels() == 2);  // nodes {0,1},{2},{3,4},{5} inside switches {0,1,2},{3,4,5}
        CHECK(h.groups(0) == 4);
        CHECK(h.groups(1) == 2);
        CHECK(h.subgroups(1, 1).size() == 2u);
        CHECK(h.members(0, h.subgroups(1, 1)[0]).size() == 2u);
        CHECK_FALSE(h.regular());
    }
    MPI_Comm_free(&odd);
}

TEST_CASE("errors in a description are raised on every rank alike") {
    const int w = world_size();
    // labels for the wrong number of ranks
    CHECK_THROWS_AS(
        shunt::topology(MPI_COMM_WORLD, shunt::parse_topology_spec("node=[0]" + std::string(w == 1 ? ",0" : ""))),
        shunt::error);
    // groups that do not nest (only visible with more than one group)
    if (w >= 2)
        CHECK_THROWS_AS(shunt::topology(MPI_COMM_WORLD, shunt::parse_topology_spec("node=2;package=1")), shunt::error);
    // a host nobody matches
    CHECK_THROWS_AS(
        shunt::topology(MPI_COMM_WORLD, shunt::parse_topology_spec("node=auto;switch={no-such-host-shunt}")),
        shunt::error);
    // and the communicator is still fine afterwards
    int one = 1, sum = 0;
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    CHECK(sum == w);
}

TEST_CASE("discovered levels: one machine is one node") {
    char host[MPI_MAX_PROCESSOR_NAME];
    int len = 0;
    MPI_Get_processor_name(host, &len);
    shunt::topology topo(
        MPI_COMM_WORLD,
        shunt::parse_topology_spec("node=auto;switch={" + std::string(host, static_cast<std::size_t>(len)) + "}"));
    CHECK(topo.groups().levels() == 0);
    CHECK(topo.describe().find("all: ") != std::string::npos);
    shunt::topology dflt(MPI_COMM_WORLD, shunt::parse_topology_spec(""));
    CHECK(dflt.groups().levels() == 0);
    CHECK(dflt.notes().size() == 4u);  // gpu (none here), package (unbound, or one package), node, switch (no Slurm)
}

TEST_CASE("inter-communicators are left to the library") {
    const int w = world_size(), me = world_rank();
    if (w < 2) return;
    MPI_Comm local, inter;
    MPI_Comm_split(MPI_COMM_WORLD, me % 2, me, &local);
    MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, me % 2 ? 0 : 1, 42, &inter);
    CHECK_THROWS_AS(shunt::topology(inter, shunt::parse_topology_spec("node=1")), shunt::unsupported);
    MPI_Comm_free(&inter);
    MPI_Comm_free(&local);
}

TEST_CASE("topology::of builds once per communicator, rebuilds for a new description, frees with the communicator") {
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    const int live = shunt::topology::live();
    const shunt::topology& a = shunt::topology::of(dup, "node=2");
    const shunt::topology& b = shunt::topology::of(dup, "node=2");
    CHECK(&a == &b);
    CHECK(shunt::topology::live() == live + 1);
    MPI_Comm inner = a.comm();
    int cmp = MPI_UNEQUAL;
    MPI_Comm_compare(inner, dup, &cmp);
    CHECK(cmp == MPI_CONGRUENT);
    const shunt::topology& c = shunt::topology::of(dup, "node=1");
    CHECK(c.spec() == "node=1");
    CHECK(shunt::topology::live() == live + 1);  // the old one was deleted
    MPI_Comm dup2;
    MPI_Comm_dup(dup, &dup2);  // attributes are not copied: dup2 gets its own
    const shunt::topology& d = shunt::topology::of(dup2, "node=1");
    CHECK(&d != &c);
    CHECK(shunt::topology::live() == live + 2);
    MPI_Comm_free(&dup2);
    MPI_Comm_free(&dup);
    CHECK(shunt::topology::live() == live);
    // world keeps one until MPI_Finalize, which must release it cleanly
    shunt::topology::of(MPI_COMM_WORLD, "node=2");
    CHECK(shunt::topology::live() == live + 1);
}

namespace {

/// A synthetic GPU per rank for the gpu level tests (the test program links no CUDA).
std::string (*synthetic_gpu_of_rank)(int rank) = nullptr;
std::string synthetic_locator() { return synthetic_gpu_of_rank ? synthetic_gpu_of_rank(world_rank()) : std::string(); }

/// Installs a synthetic locator for one scope and takes it away after.
struct with_synthetic_gpus {
    explicit with_synthetic_gpus(std::string (*of)(int)) {
        synthetic_gpu_of_rank = of;
        shunt::set_gpu_locator(&synthetic_locator);
    }
    ~with_synthetic_gpus() {
        shunt::set_gpu_locator(nullptr);
        synthetic_gpu_of_rank = nullptr;
    }
};

/// A bus id in CUDA's form (upper-case hex) for GPU number `gpu`.
std::string bus(int gpu) {
    char id[32];
    std::snprintf(id, sizeof id, "0000:%02X:00.0", static_cast<unsigned>(gpu + 0x1a));
    return id;
}

/// The level names and every rank's group at each level: what the planner sees.
std::vector<std::vector<int>> tables(const shunt::hierarchy& h) {
    std::vector<std::vector<int>> out;
    for (int k = 0; k < h.levels(); ++k) {
        out.emplace_back();
        for (int r = 0; r < h.size(); ++r) out.back().push_back(h.group_of(k, r));
    }
    return out;
}
std::vector<std::string> level_names(const shunt::hierarchy& h) {
    std::vector<std::string> out;
    for (int k = 0; k < h.levels(); ++k) out.push_back(h.name(k));
    return out;
}

}  // namespace

TEST_CASE("PCI bus ids: CUDA's, nvidia-smi's and hwloc's forms are one key; malformed ones are none") {
    const auto k = shunt::pci_key("0000:3B:00.0");
    CHECK(k >= 0);
    CHECK(shunt::pci_key("0000:3b:00.0") == k);
    CHECK(shunt::pci_key("00000000:3B:00.0") == k);  // nvidia-smi's 8-digit domain
    CHECK(shunt::pci_key("3b:00.0") == k);  // no domain: domain 0
    CHECK(shunt::pci_bus_id(k) == "0000:3b:00.0");
    CHECK(shunt::pci_key("0001:3b:00.0") != k);
    CHECK(shunt::pci_key("0000:3b:01.0") != k);
    CHECK(shunt::pci_key("0000:3b:00.1") != k);
    CHECK(shunt::pci_bus_id(shunt::pci_key("abcd:ff:1f.7")) == "abcd:ff:1f.7");
    for (const char* bad : {"", "0000:3b:00", "0000:3b:20.0", "0000:3b:00.8", "0000:3g:00.0", "x", "0000:3b:00.0 ",
                            "000000000:3b:00.0", "0000:3b:00.0.0", ":3b:00.0"}) {
        CAPTURE(bad);
        CHECK(shunt::pci_key(bad) == -1);
    }
    CHECK(shunt::pci_bus_id(-1).empty());
}

TEST_CASE("gpu groups: same node, same GPU, and inside every level above") {
    using v = std::vector<std::int64_t>;
    const std::int64_t a = shunt::pci_key("0000:1a:00.0"), b = shunt::pci_key("0000:3b:00.0");
    // 2 nodes of 4 ranks, two GPUs each with the same bus ids on both nodes: 4 groups, not 2.
    CHECK(shunt::gpu_group_labels(v{0, 0, 0, 0, 4, 4, 4, 4}, v{a, a, b, b, a, a, b, b}) == v{0, 0, 1, 1, 2, 2, 3, 3});
    // Non-block placement: numbered by lowest rank.
    CHECK(shunt::gpu_group_labels(v{0, 0, 0, 0}, v{b, a, b, a}) == v{0, 1, 0, 1});
    // A rank without a GPU has no group.
    CHECK(shunt::gpu_group_labels(v{0, 0, 0}, v{a, -1, a}) == v{0, -1, 0});
    // One GPU used from two packages: split by the package above, so the level nests.
    const std::vector<v> package{v{7, 7, 9, 9}};
    CHECK(shunt::gpu_group_labels(v{0, 0, 0, 0}, v{a, b, a, b}, package) == v{0, 1, 2, 3});
    CHECK(shunt::gpu_group_labels(v{0, 0, 0, 0}, v{a, a, b, b}, package) == v{0, 0, 1, 1});
    const std::vector<v> short_outer{v{1}};
    CHECK_THROWS_AS(shunt::gpu_group_labels(v{0, 0}, v{a, a}, short_outer), shunt::error);
    CHECK_THROWS_AS(shunt::gpu_group_labels(v{0}, v{a, a}), shunt::error);
}

TEST_CASE("without a GPU the default description gives today's levels") {
    // No locator (this program links no CUDA), then a locator that finds no device.
    for (bool locator : {false, true}) {
        CAPTURE(locator);
        std::optional<with_synthetic_gpus> none;
        if (locator) none.emplace([](int) { return std::string(); });
        // Today's default against the new one (""), and virtual levels with a gpu level added.
        const std::pair<const char*, const char*> cases[] = {{"package=auto;node=auto;switch=slurm", ""},
                                                             {"package=1;node=2", "gpu=auto;package=1;node=2"},
                                                             {"node=2;switch=4", "gpu=auto;node=2;switch=4"}};
        for (const auto& c : cases) {
            // Named, not a structured binding: CAPTURE's lambda cannot take those before clang 16.
            const char* const before = c.first;
            const char* const after = c.second;
            CAPTURE(after);
            std::optional<shunt::topology> old_topo, new_topo;
            old_topo.emplace(MPI_COMM_WORLD, shunt::parse_topology_spec(before));
            new_topo.emplace(MPI_COMM_WORLD, shunt::parse_topology_spec(after));
            CHECK(level_names(new_topo->groups()) == level_names(old_topo->groups()));
            CHECK(tables(new_topo->groups()) == tables(old_topo->groups()));
            CHECK(new_topo->notes().size() == old_topo->notes().size() + 1);
            CHECK(new_topo->describe().find("note: gpu: ignored, rank 0 uses no GPU") != std::string::npos);
            REQUIRE(new_topo->gpu_bus_ids().size() == static_cast<std::size_t>(world_size()));
            for (const auto& id : new_topo->gpu_bus_ids()) CHECK(id.empty());
            CHECK(old_topo->gpu_bus_ids().empty());
        }
    }
}

TEST_CASE("gpu=auto groups the ranks that use one GPU, on every rank alike") {
    const int w = world_size(), me = world_rank();
    {
        // GPU r/2: pairs of consecutive ranks share one.
        with_synthetic_gpus pairs([](int r) { return bus(r / 2); });
        shunt::topology topo(MPI_COMM_WORLD, shunt::parse_topology_spec("gpu=auto;node=auto"));
        const auto& h = topo.groups();
        REQUIRE(topo.gpu_bus_ids().size() == static_cast<std::size_t>(w));
        CHECK(topo.gpu_bus_ids()[static_cast<std::size_t>(me)] == shunt::pci_bus_id(shunt::pci_key(bus(me / 2))));
        if (w <= 2) {
            CHECK(h.levels() == 0);  // one GPU for everyone: the level is the node's, dropped
            CHECK(topo.describe().find(w == 1 ? "gpu: ignored, every group is a single rank"
                                              : "gpu: ignored, its groups are those of the level above") !=
                  std::string::npos);
        } else {
            REQUIRE(h.levels() == 1);
            CHECK(h.name(0) == "gpu");
            for (int r = 0; r < w; ++r) CHECK((h.group_of(0, r) == h.group_of(0, me)) == (r / 2 == me / 2));
            auto group = world_ranks_of(topo.levels()[0].group);
            for (int r : group) CHECK(r / 2 == me / 2);
        }
    }
    if (w >= 4) {
        // GPU r%2, non-block: {0,2,...} and {1,3,...}.
        with_synthetic_gpus alternate([](int r) { return bus(r % 2); });
        shunt::topology topo(MPI_COMM_WORLD, shunt::parse_topology_spec("gpu=auto"));
        REQUIRE(topo.groups().levels() == 1);
        for (int r = 0; r < w; ++r)
            CHECK((topo.groups().group_of(0, r) == topo.groups().group_of(0, me)) == (r % 2 == me % 2));
        // The same GPUs under virtual nodes of 2 consecutive ranks: split by node, single ranks,
        // so the level goes (and the description does not fail to nest).
        shunt::topology split(MPI_COMM_WORLD, shunt::parse_topology_spec("gpu=auto;node=2"));
        CHECK(level_names(split.groups()) == std::vector<std::string>{"node"});
        CHECK(split.describe().find("gpu: ignored, every group is a single rank") != std::string::npos);
    }
    if (w >= 2) {
        // One rank without a GPU: the level is left out, with a note, on every rank.
        with_synthetic_gpus lonely([](int r) { return r == 1 ? std::string() : bus(0); });
        shunt::topology topo(MPI_COMM_WORLD, shunt::parse_topology_spec("gpu=auto;node=auto"));
        CHECK(topo.groups().levels() == 0);
        CHECK(topo.describe().find("gpu: ignored, rank 1 uses no GPU") != std::string::npos);
    }
    // A malformed bus id counts as none.
    {
        with_synthetic_gpus junk([](int) { return std::string("not-a-bus-id"); });
        shunt::topology topo(MPI_COMM_WORLD, shunt::parse_topology_spec("gpu=auto"));
        CHECK(topo.groups().levels() == 0);
        CHECK(topo.describe().find("gpu: ignored, rank 0 uses no GPU") != std::string::npos);
    }
}

TEST_CASE("hwloc places PCI devices it knows, and nothing for ids it does not") {
    CHECK(shunt::pci_ancestor("").empty());
    CHECK(shunt::pci_ancestor("not-a-bus-id").empty());
    CHECK(shunt::pci_ancestor("ffff:ff:1f.7").empty());
    // The machine's own devices: where hwloc keeps one, an ancestor "Type:index[/NUMANode:n]".
    for (int bus = 0; bus < 4; ++bus)
        for (int dev = 0; dev < 32; ++dev) {
            const std::string id = shunt::pci_bus_id(std::int64_t{bus} << 8 | std::int64_t{dev} << 3);
            const std::string where = shunt::pci_ancestor(id);
            CAPTURE(id);
            if (!where.empty()) CHECK(where.find(':') != std::string::npos);
        }
}
