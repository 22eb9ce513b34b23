// tests/interpose/compress_control.cpp: the header API's switches of the preloaded library's compression (<shunt/compress/control.hpp>), run without SHUNT_COMPRESS: consent for one communicator, an exact call site inside it, and error feedback saved and restored. Sums are checked against the library's PMPI_Allreduce.
#include <shunt/compress/control.hpp>

#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

namespace {

int failures = 0;

void expect(bool ok, const char* what) {
    if (!ok) {
        std::fprintf(stderr, "compress_control: %s\n", what);
        ++failures;
    }
}

std::vector<float> gradient(int n, int rank, int step, int which) {
    std::vector<float> v(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i)
        v[static_cast<std::size_t>(i)] =
            static_cast<float>(std::sin(0.001 * i * (rank + 1) + step + which) + 0.01 * (i % 7));
    return v;
}

/// The relative error of MPI_Allreduce (through shunt) against PMPI_Allreduce on `comm`.
double allreduce_error(MPI_Comm comm, const std::vector<float>& in) {
    std::vector<float> got(in.size()), want(in.size());
    const int n = static_cast<int>(in.size());
    MPI_Allreduce(in.data(), got.data(), n, MPI_FLOAT, MPI_SUM, comm);
    PMPI_Allreduce(in.data(), want.data(), n, MPI_FLOAT, MPI_SUM, comm);
    double d = 0, w = 0;
    for (std::size_t i = 0; i < in.size(); ++i)
        d += (double(got[i]) - want[i]) * (double(got[i]) - want[i]), w += double(want[i]) * want[i];
    double e = std::sqrt(d / w);
    PMPI_Allreduce(MPI_IN_PLACE, &e, 1, MPI_DOUBLE, MPI_MAX, comm);
    return e;
}

}  // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    namespace sc = shunt::compress;
    expect(sc::preloaded(), "libshunt.so is not found in the process");
    MPI_Comm a = MPI_COMM_NULL, b = MPI_COMM_NULL;
    MPI_Comm_dup(MPI_COMM_WORLD, &a);
    MPI_Comm_dup(MPI_COMM_WORLD, &b);
    expect(sc::set_consent(a, "int8"), "set_consent refused int8");
    bool threw = false;
    try {
        sc::set_consent(a, "zip");
    } catch (const shunt::error&) {
        threw = true;
    }
    expect(threw, "set_consent accepted zip");
    const int n = 1 << 20;
    const int steps = 8;
    double exact_site = 0, lossy_site = 0, other_comm = 0;
    for (int step = 0; step < steps; ++step) {
        {
            const sc::scoped_consent off("off");  // this call site stays exact on `a`
            exact_site = std::max(exact_site, allreduce_error(a, gradient(n, rank, step, 0)));
        }
        const double e = allreduce_error(a, gradient(n, rank, step, 1));
        if (step == steps - 1) lossy_site = e;
        other_comm = std::max(other_comm, allreduce_error(b, gradient(n, rank, step, 1)));
    }
    // Exact paths differ from the library's sum by reassociation at most; int8 by much more (but
    // within its bound). With nodes of 2 ranks (SHUNT_TOPOLOGY=node=2) 4 ranks make 2 nodes, whose
    // link compression saves; fewer ranks are one node, where the plan keeps the sums exact.
    expect(exact_site < 1e-5, "the call site in an \"off\" scope was not exact");
    expect(other_comm < 1e-5, "a communicator without consent was not exact");
    if (size >= 4) expect(lossy_site > 1e-4 && lossy_site < 5e-2, "the consenting communicator was not compressed");
    if (size < 4) expect(lossy_site < 1e-5, "one node's sums were compressed");
    // Error feedback: saved, restored as it was, garbage refused.
    const std::vector<std::byte> saved = sc::save_feedback(a);
    expect(saved.size() > 8, "nothing saved");
    expect(sc::restore_feedback(a, saved), "the saved state was refused");
    expect(sc::save_feedback(a) == saved, "restoring changed the state");
    std::vector<std::byte> garbage = saved;
    garbage[garbage.size() / 2] ^= std::byte{0x5a};
    expect(size == 1 || !sc::restore_feedback(a, garbage), "a corrupt state was accepted");
    expect(sc::save_feedback(a) == saved, "a refused restore changed the state");
    // A new communicator takes the state at its first plan.
    MPI_Comm c = MPI_COMM_NULL;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    expect(sc::set_consent(c, "int8"), "set_consent refused int8 on a new communicator");
    expect(sc::restore_feedback(c, saved), "a state for a later plan was refused");
    for (int step = 0; step < 5; ++step) {
        const sc::scoped_consent off("off");
        allreduce_error(c, gradient(n, rank, step, 0));
    }
    for (int step = 0; step < 5; ++step) allreduce_error(c, gradient(n, rank, step, 1));
    // After 5 steps of a 2-call pattern the plan exists; the sites kept the restored steps.
    expect(sc::save_feedback(c).size() == saved.size() || size == 1, "the new communicator's state differs in shape");
    MPI_Comm_free(&a);
    MPI_Comm_free(&b);
    MPI_Comm_free(&c);
    int any = 0;
    PMPI_Allreduce(&failures, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        std::printf(
            "compress_control: %d ranks, exact site %.3g, other communicator %.3g, int8 site %.3g, %d failures\n", size,
            exact_site, other_comm, lossy_site, any);
    MPI_Finalize();
    return any != 0;
}
