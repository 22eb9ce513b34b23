// tests/nccl/nccl_lanes.cpp: an NCCL program that creates its first communicator through one chosen entry, for run_nccl_lanes.py (what the double saw in the environment at that moment).
//
// nccl-lanes rank|config|scalable|all: one process, a communicator of 1 rank (ncclCommInitRank,
// ncclCommInitRankConfig, ncclCommInitRankScalable) or 2 (ncclCommInitAll), no MPI. nccl-lanes
// --mpi rank|config|scalable: under mpiexec, MPI_Init first, then one communicator over every
// rank (the unique ids broadcast by MPI: one, or for scalable one from the first and one from the
// last rank). Each communicator then runs one sum allreduce, checked; exit 0 when all went well.
#include <mpi.h>
#include <nccl.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

bool ok(ncclResult_t r, const char* what) {
    if (r == ncclSuccess) return true;
    std::fprintf(stderr, "nccl-lanes: %s failed: %s\n", what, ncclGetErrorString(r));
    return false;
}

/// One float sum allreduce on `comm` of `nranks` ranks, each contributing rank + 1.
bool sum_checked(ncclComm_t comm, int rank, int nranks) {
    float x = static_cast<float>(rank + 1), y = 0;
    if (!ok(ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, nullptr), "ncclAllReduce")) return false;
    const float want = static_cast<float>(nranks * (nranks + 1) / 2);
    if (y == want) return true;
    std::fprintf(stderr, "nccl-lanes: allreduce gave %g, not %g\n", static_cast<double>(y), static_cast<double>(want));
    return false;
}

/// ncclCommInitRank, ncclCommInitRankConfig (entry "config") or ncclCommInitRankScalable (entry
/// "scalable", with every id of `ids`) for rank `rank` of `nranks`.
bool init_one(const std::string& entry, ncclComm_t* comm, int nranks, std::vector<ncclUniqueId>& ids, int rank) {
    if (entry == "rank") return ok(ncclCommInitRank(comm, nranks, ids[0], rank), "ncclCommInitRank");
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    if (entry == "scalable")
        return ok(ncclCommInitRankScalable(comm, nranks, rank, static_cast<int>(ids.size()), ids.data(), &config),
                  "ncclCommInitRankScalable");
    return ok(ncclCommInitRankConfig(comm, nranks, ids[0], rank, &config), "ncclCommInitRankConfig");
}

int single_process(const std::string& entry) {
    std::vector<ncclComm_t> comms(entry == "all" ? 2 : 1, nullptr);
    if (entry == "all") {
        if (!ok(ncclCommInitAll(comms.data(), 2, nullptr), "ncclCommInitAll")) return 1;
        // Both ranks live in this thread: their allreduces go in one group.
        float x[2] = {1, 2}, y[2] = {0, 0};
        bool good = ok(ncclGroupStart(), "ncclGroupStart");
        for (int i = 0; i < 2 && good; ++i)
            good = ok(ncclAllReduce(&x[i], &y[i], 1, ncclFloat, ncclSum, comms[static_cast<std::size_t>(i)], nullptr),
                      "ncclAllReduce");
        good = ok(ncclGroupEnd(), "ncclGroupEnd") && good;
        if (good && (y[0] != 3 || y[1] != 3)) {
            std::fprintf(stderr, "nccl-lanes: allreduce gave %g and %g, not 3\n", static_cast<double>(y[0]),
                         static_cast<double>(y[1]));
            good = false;
        }
        for (ncclComm_t c : comms) ncclCommDestroy(c);
        return good ? 0 : 1;
    }
    std::vector<ncclUniqueId> ids(1);
    if (!ok(ncclGetUniqueId(&ids[0]), "ncclGetUniqueId") || !init_one(entry, &comms[0], 1, ids, 0)) return 1;
    const bool good = sum_checked(comms[0], 0, 1);
    ncclCommDestroy(comms[0]);
    return good ? 0 : 1;
}

int with_mpi(const std::string& entry, int* argc, char*** argv) {
    MPI_Init(argc, argv);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    std::vector<ncclUniqueId> ids(entry == "scalable" && size > 1 ? 2 : 1);
    int good = 1;
    for (std::size_t k = 0; k < ids.size(); ++k) {
        const int maker = k == 0 ? 0 : size - 1;
        std::memset(&ids[k], 0, sizeof ids[k]);
        if (rank == maker && !ok(ncclGetUniqueId(&ids[k]), "ncclGetUniqueId")) good = 0;
        MPI_Bcast(&ids[k], sizeof ids[k], MPI_BYTE, maker, MPI_COMM_WORLD);
    }
    MPI_Allreduce(MPI_IN_PLACE, &good, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    ncclComm_t comm = nullptr;
    if (good) good = init_one(entry, &comm, size, ids, rank) && sum_checked(comm, rank, size);
    if (comm != nullptr) ncclCommDestroy(comm);
    int all = 0;
    MPI_Allreduce(&good, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    MPI_Finalize();
    return all ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    const bool mpi = argc == 3 && std::strcmp(argv[1], "--mpi") == 0;
    const std::string entry = argc >= 2 ? argv[argc - 1] : "";
    if ((argc != 2 && !mpi) ||
        (entry != "rank" && entry != "config" && entry != "scalable" && (mpi || entry != "all"))) {
        std::fprintf(stderr, "usage: nccl-lanes [--mpi] rank|config|scalable|all (all without --mpi)\n");
        return 2;
    }
    return mpi ? with_mpi(entry, &argc, &argv) : single_process(entry);
}
