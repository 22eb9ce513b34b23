/* tests/interpose/compress_sums.c: a plain MPI program whose loop repeats a training step's float sums
 * (MPI_Allreduce of gradients of several sizes, one in place, a loss of one float, an
 * MPI_Reduce_scatter_block), each checked against the library's own PMPI_ call on the same data.
 *
 * Usage: compress_sums exact|lossy [NAN_STEP]
 *   exact  every result must equal the library's bit for bit (shunt without consent to compress)
 *   lossy  results within the compressors' bounds (relative L2 error under 5e-2) and equal on every rank
 *   NAN_STEP: at that step rank 1 (or 0) puts a NaN into the largest gradient: that call's result must
 *   be NaN exactly there and exact elsewhere (the guard sends it to the exact path).
 * Prints one line "compress_sums: ..." on rank 0; exits 1 on any violation. */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { steps = 12, tensors = 3 };
static const int sizes[tensors] = {1 << 20, 65536 + 17, 300000};

static float value(int rank, int step, int t, int i) {
    /* A deterministic gradient-like value: sums of several waves, different per rank and step. */
    const double x = (double)i * 0.001 + t;
    return (float)(sin(x * (1 + rank) + step) + 0.3 * cos(7 * x + rank * 0.5) + 0.01 * (i % 13 - 6));
}

static int failures = 0;
static double worst = 0;

static void check(const char* what, int step, const float* got, const float* want, int n, int exact, int nan_at) {
    double d = 0, w = 0;
    for (int i = 0; i < n; ++i) {
        if (i == nan_at) {
            if (!isnan(got[i])) {
                fprintf(stderr, "%s step %d: element %d should be NaN, is %g\n", what, step, i, got[i]);
                ++failures;
            }
            continue;
        }
        if (exact && memcmp(&got[i], &want[i], 4) != 0) {
            fprintf(stderr, "%s step %d: element %d is %.9g, the library's %.9g\n", what, step, i, got[i], want[i]);
            ++failures;
            return;
        }
        d += ((double)got[i] - want[i]) * ((double)got[i] - want[i]);
        w += (double)want[i] * want[i];
    }
    const double rel = w > 0 ? sqrt(d / w) : sqrt(d);
    if (rel > worst) worst = rel;
    if (rel > (nan_at >= 0 ? 1e-5 : 5e-2)) {
        fprintf(stderr, "%s step %d: relative error %g\n", what, step, rel);
        ++failures;
    }
}

/* 1 when every rank holds the same bytes. */
static int same_everywhere(const float* v, int n) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < n; ++i) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        h = (h ^ u) * 1099511628211ull;
    }
    uint64_t lo = h, hi = h;
    PMPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    PMPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    return lo == hi;
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const int exact = argc > 1 && strcmp(argv[1], "exact") == 0;
    const int nan_step = argc > 2 ? atoi(argv[2]) : -1;
    const int nan_rank = size > 1 ? 1 : 0;
    float* in[tensors];
    float* out[tensors];
    float* want[tensors];
    for (int t = 0; t < tensors; ++t) {
        in[t] = malloc(sizeof(float) * (size_t)sizes[t]);
        out[t] = malloc(sizeof(float) * (size_t)sizes[t]);
        want[t] = malloc(sizeof(float) * (size_t)sizes[t]);
    }
    const int block = 40000;
    float* rs_in = malloc(sizeof(float) * (size_t)block * (size_t)size);
    float* rs_out = malloc(sizeof(float) * (size_t)block);
    float* rs_want = malloc(sizeof(float) * (size_t)block);
    int identical = 1;
    for (int step = 0; step < steps; ++step) {
        for (int t = 0; t < tensors; ++t) {
            for (int i = 0; i < sizes[t]; ++i) in[t][i] = value(rank, step, t, i);
            const int nan_at = step == nan_step && t == 0 ? sizes[t] / 3 : -1;
            if (nan_at >= 0 && rank == nan_rank) in[t][nan_at] = NAN;
            PMPI_Allreduce(in[t], want[t], sizes[t], MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            if (t == 1) { /* in place */
                memcpy(out[t], in[t], sizeof(float) * (size_t)sizes[t]);
                MPI_Allreduce(MPI_IN_PLACE, out[t], sizes[t], MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            } else {
                MPI_Allreduce(in[t], out[t], sizes[t], MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            }
            check("MPI_Allreduce", step, out[t], want[t], sizes[t], exact, nan_at);
            identical = identical && same_everywhere(out[t], sizes[t]);
        }
        /* The loss: one float, never compressed. */
        float loss = (float)rank + 0.5f * (float)step, total = 0, total_want = 0;
        PMPI_Allreduce(&loss, &total_want, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(&loss, &total, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        if (total != total_want) {
            fprintf(stderr, "loss step %d: %g, the library's %g\n", step, total, total_want);
            ++failures;
        }
        for (int i = 0; i < block * size; ++i) rs_in[i] = value(rank, step, 9, i);
        PMPI_Reduce_scatter_block(rs_in, rs_want, block, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Reduce_scatter_block(rs_in, rs_out, block, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        check("MPI_Reduce_scatter_block", step, rs_out, rs_want, block, exact, -1);
    }
    if (!identical) {
        fprintf(stderr, "results differ between ranks\n");
        ++failures;
    }
    int any = 0;
    PMPI_Allreduce(&failures, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    PMPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0)
        printf("compress_sums: %d ranks, %d steps, %s, largest relative error %.3g, %d failures\n", size, steps,
               exact ? "exact" : "lossy", worst, any);
    for (int t = 0; t < tensors; ++t) free(in[t]), free(out[t]), free(want[t]);
    free(rs_in), free(rs_out), free(rs_want);
    MPI_Finalize();
    return any != 0;
}
