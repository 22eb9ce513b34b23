/* tests/interpose/compress_half.c: a plain MPI program's half-precision gradient sums (MPI_Allreduce, one in
 * place, and MPI_Reduce_scatter_block of MPIX_C_FLOAT16, MPICH's binary16 type) checked against the exact sum
 * the program computes in double.
 *
 * Usage: compress_half exact|lossy [BOUND [NAN_STEP]]
 *   exact  every result must equal the exact sum bit for bit (the values are multiples of 2^-6 below 2 in
 *          magnitude: every sum of up to 8 ranks is exact in binary16, in any order)
 *   lossy  results within BOUND (relative L2 error, default 5e-2) and equal on every rank
 *   NAN_STEP: at that step rank 1 (or 0) puts a NaN into the largest gradient: that call's result must be
 *   NaN exactly there and exact elsewhere (the guard sends it to the exact path).
 * Exits 77 where the MPI library has no binary16 type (Open MPI 4.1). Prints one line "compress_half: ..."
 * on rank 0; exits 1 on any violation. */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if !defined(MPIX_C_FLOAT16)
int main(void) {
    printf("compress_half: this MPI library has no binary16 type; skipped\n");
    return 77;
}
#else

enum { steps = 12, tensors = 2 };
static const int sizes[tensors] = {1 << 20, 300000};

/* A gradient-like value at 2^-6 steps in (-2, 2): exact in binary16. */
static float value(int rank, int step, int t, int i) {
    const double x = (double)i * 0.001 + t;
    const double v = sin(x * (1 + rank) + step) + 0.3 * cos(7 * x + rank * 0.5) + 0.01 * (i % 13 - 6);
    return (float)(round(v * 64) / 64);
}

/* binary16 bits of a float that binary16 holds exactly (zero or normal; NaN as a quiet NaN). */
static uint16_t to_half(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a == 0) return (uint16_t)sign;
    if (a >= 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
    return (uint16_t)(sign | ((((a >> 23) - 127 + 15) << 10)) | ((a & 0x7fffffu) >> 13));
}

/* The float of binary16 bits (normal, zero, Inf or NaN; subnormals do not occur here). */
static float from_half(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    const uint32_t u = e == 0      ? sign
                       : e == 0x1f ? sign | 0x7f800000u | (m << 13)
                                   : sign | ((e - 15 + 127) << 23) | (m << 13);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static int failures = 0;
static double worst = 0;

/* got (n halves) against the exact sum (n floats, exact in binary16). */
static void check(const char* what, int step, const uint16_t* got, const float* want, int n, int exact, double bound,
                  int nan_at) {
    double d = 0, w = 0;
    for (int i = 0; i < n; ++i) {
        const float g = from_half(got[i]);
        if (i == nan_at) {
            if (!isnan(g)) {
                fprintf(stderr, "%s step %d: element %d should be NaN, is %g\n", what, step, i, g);
                ++failures;
            }
            continue;
        }
        if (exact && got[i] != to_half(want[i])) {
            fprintf(stderr, "%s step %d: element %d is %.9g, the sum %.9g\n", what, step, i, g, want[i]);
            ++failures;
            return;
        }
        d += ((double)g - want[i]) * ((double)g - want[i]);
        w += (double)want[i] * want[i];
    }
    const double rel = w > 0 ? sqrt(d / w) : sqrt(d);
    if (rel > worst) worst = rel;
    if (rel > bound) {
        fprintf(stderr, "%s step %d: relative error %g\n", what, step, rel);
        ++failures;
    }
}

/* 1 when every rank holds the same bytes. */
static int same_everywhere(const uint16_t* v, int n) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < n; ++i) h = (h ^ v[i]) * 1099511628211ull;
    uint64_t lo = h, hi = h;
    PMPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    PMPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    return lo == hi;
}

/* want[i] = the sum over every rank of value(r, step, t, first + i), in double (-0 + x is x). */
static void reference(int size, int step, int t, int first, int n, float* want) {
    for (int i = 0; i < n; ++i) {
        double s = -0.0;
        for (int r = 0; r < size; ++r) s += value(r, step, t, first + i);
        want[i] = (float)s;
    }
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const int exact = argc > 1 && strcmp(argv[1], "exact") == 0;
    const double bound = argc > 2 ? atof(argv[2]) : 5e-2;
    const int nan_step = argc > 3 ? atoi(argv[3]) : -1;
    const int nan_rank = size > 1 ? 1 : 0;
    const int block = 40000;
    uint16_t* in = malloc(2 * (size_t)(sizes[0] > block * size ? sizes[0] : block * size));
    uint16_t* out = malloc(2 * (size_t)sizes[0]);
    float* want = malloc(4 * (size_t)sizes[0]);
    int identical = 1;
    for (int step = 0; step < steps; ++step) {
        for (int t = 0; t < tensors; ++t) {
            const int n = sizes[t];
            for (int i = 0; i < n; ++i) in[i] = to_half(value(rank, step, t, i));
            const int nan_at = step == nan_step && t == 0 ? n / 3 : -1;
            if (nan_at >= 0 && rank == nan_rank) in[nan_at] = 0x7e00u;
            if (t == 1) { /* in place */
                memcpy(out, in, 2 * (size_t)n);
                MPI_Allreduce(MPI_IN_PLACE, out, n, MPIX_C_FLOAT16, MPI_SUM, MPI_COMM_WORLD);
            } else {
                MPI_Allreduce(in, out, n, MPIX_C_FLOAT16, MPI_SUM, MPI_COMM_WORLD);
            }
            reference(size, step, t, 0, n, want);
            check("MPI_Allreduce", step, out, want, n, exact || nan_at >= 0, nan_at >= 0 ? 0 : bound, nan_at);
            identical = identical && same_everywhere(out, n);
        }
        /* The loss: one float, never compressed. */
        float loss = (float)rank + 0.5f * (float)step, total = 0, total_want = 0;
        PMPI_Allreduce(&loss, &total_want, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(&loss, &total, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        if (total != total_want) {
            fprintf(stderr, "loss step %d: %g, the library's %g\n", step, total, total_want);
            ++failures;
        }
        for (int i = 0; i < block * size; ++i) in[i] = to_half(value(rank, step, 9, i));
        MPI_Reduce_scatter_block(in, out, block, MPIX_C_FLOAT16, MPI_SUM, MPI_COMM_WORLD);
        reference(size, step, 9, rank * block, block, want);
        check("MPI_Reduce_scatter_block", step, out, want, block, exact, bound, -1);
    }
    if (!identical) {
        fprintf(stderr, "results differ between ranks\n");
        ++failures;
    }
    int any = 0;
    PMPI_Allreduce(&failures, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    PMPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0)
        printf("compress_half: %d ranks, %d steps, %s, largest relative error %.3g, %d failures\n", size, steps,
               exact ? "exact" : "lossy", worst, any);
    free(in), free(out), free(want);
    MPI_Finalize();
    return any != 0;
}
#endif
