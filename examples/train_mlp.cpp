// examples/train_mlp.cpp: data-parallel training of a small MLP with plain MPI (examples/mlp.hpp): every step each rank computes the gradients of its share of the batch and sums every layer's with MPI_Allreduce. The program shunt's gradient compression is preloaded onto.
//
// Usage: train_mlp [STEPS [BATCH [INPUT HIDDEN1 HIDDEN2 [TRAIN]]]]   (defaults 400 16 128 128 64 65536)
// Trains on a deterministic synthetic data set (the same in every run), prints the loss now and
// then, and at the end the test accuracy and the time per step (the slowest rank's median over the
// steps after the first tenth), with the share of it spent in MPI_Allreduce. Under
// LD_PRELOAD=libshunt.so with SHUNT_COMPRESS=auto, shunt compresses the gradients where its model
// says the network is the bottleneck.
#include "mlp.hpp"

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    mlp::config c;
    const int steps = argc > 1 ? std::atoi(argv[1]) : 400;
    if (argc > 2) c.batch = std::atoi(argv[2]);
    if (argc > 5) c.input = std::atoi(argv[3]), c.hidden1 = std::atoi(argv[4]), c.hidden2 = std::atoi(argv[5]);
    if (argc > 6) c.train = std::atoi(argv[6]);
    if (steps < 1 || c.batch < 1 || c.input < 1 || c.hidden1 < 1 || c.hidden2 < 1 || c.train < c.batch * size) {
        if (rank == 0) std::fprintf(stderr, "usage: train_mlp [STEPS [BATCH [INPUT HIDDEN1 HIDDEN2 [TRAIN]]]]\n");
        MPI_Finalize();
        return 2;
    }
    const mlp::dataset train = mlp::dataset::make(c, c.train, 1), test = mlp::dataset::make(c, c.test, 2);
    mlp::network net(c);
    std::vector<double> times;
    double loss = 0;
    for (int t = 0; t < steps; ++t) {
        // This rank's share of the global batch, walking through the training set.
        const int global = c.batch * size;
        const int first = (t * global) % (c.train - global + 1) + rank * c.batch;
        net.set_rate(c.rate * 0.5f * (1 + std::cos(3.14159265f * static_cast<float>(t) / static_cast<float>(steps))));
        const double t0 = MPI_Wtime();
        loss = net.step(train, first, c.batch, MPI_COMM_WORLD);
        times.push_back(MPI_Wtime() - t0);
        if (rank == 0 && (t % 50 == 0 || t == steps - 1)) std::printf("step %d: loss %.4f\n", t, loss);
    }
    // Accuracy on the test set: each rank its share, the counts summed (integers: exact).
    const int share = c.test / size, first = rank * share;
    int right[2] = {net.correct(test, first, share), share};
    MPI_Allreduce(MPI_IN_PLACE, right, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    std::vector<double> kept(times.begin() + static_cast<std::ptrdiff_t>(times.size() / 10), times.end());
    std::sort(kept.begin(), kept.end());
    double median = kept[kept.size() / 2];
    MPI_Allreduce(MPI_IN_PLACE, &median, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0)
        std::printf(
            "final: %d ranks, %d steps of %d samples each, loss %.4f, test accuracy %.2f%% (%d of %d), "
            "step time %.3f ms (median, slowest rank)\n",
            size, steps, c.batch * size, loss, 100.0 * right[0] / right[1], right[0], right[1], median * 1e3);
    MPI_Finalize();
    return 0;
}
