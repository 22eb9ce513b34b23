/* tests/interpose/pack_loop.c: packs and unpacks one 64 KiB vector of 1-byte blocks (stride 2)
 * many times, checking every packed and unpacked byte: the workload on which run_refine.py
 * watches shunt's online refinement undo a wrong model. Plain MPI; prints one line. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { blocks = 65536, stride = 2 };

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    const int iterations = argc > 1 ? atoi(argv[1]) : 6000;
    MPI_Datatype v;
    MPI_Type_vector(blocks, 1, stride, MPI_BYTE, &v);
    MPI_Type_commit(&v);
    unsigned char* typed = malloc((size_t)blocks * stride);
    unsigned char* back = malloc((size_t)blocks * stride);
    unsigned char* packed = malloc(blocks);
    for (int i = 0; i < blocks * stride; ++i) typed[i] = (unsigned char)(i * 7 + i / 251);
    int bad = 0;
    for (int it = 0; it < iterations && !bad; ++it) {
        int pos = 0;
        memset(packed, 0, blocks);
        if (MPI_Pack(typed, 1, v, packed, blocks, &pos, MPI_COMM_WORLD) != MPI_SUCCESS || pos != blocks) bad = 1;
        for (int i = 0; i < blocks && !bad; ++i) bad = packed[i] != typed[i * stride];
        memset(back, 0xa5, (size_t)blocks * stride);
        pos = 0;
        if (MPI_Unpack(packed, blocks, &pos, back, 1, v, MPI_COMM_WORLD) != MPI_SUCCESS || pos != blocks) bad = 1;
        for (int i = 0; i < blocks * stride && !bad; ++i) bad = back[i] != (i % stride ? 0xa5 : typed[i]);
        if (bad) printf("pack_loop: wrong bytes at iteration %d\n", it);
    }
    if (!bad) printf("pack_loop: %d packs and unpacks of a 64 KiB vector of 1-byte blocks, every byte right\n", iterations);
    MPI_Type_free(&v);
    free(typed);
    free(back);
    free(packed);
    MPI_Finalize();
    return bad;
}
