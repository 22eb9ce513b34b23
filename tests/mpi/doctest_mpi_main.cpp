// tests/mpi/doctest_mpi_main.cpp: main() of the doctest-based MPI tests: MPI_Init, run the cases on
// every rank, and exit non-zero on every rank when any rank failed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <mpi.h>

int main(int argc, char** argv) {
    // MPI_THREAD_MULTIPLE where the library has it: the cache test commits from several threads.
    int provided = MPI_THREAD_SINGLE;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    doctest::Context context(argc, argv);
    // Only rank 0 prints the summary; failures are reported by the rank that sees them.
    if (rank != 0) context.setOption("no-intro", true), context.setOption("no-version", true);
    const int result = context.run();
    int failed = result != 0 ? 1 : 0, any = 0;
    if (context.shouldExit()) {  // --help, --list-test-cases, ...
        MPI_Finalize();
        return result;
    }
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any;
}
