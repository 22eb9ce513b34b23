/* tests/interpose/pack_loop.c: packs and unpacks one 64 KiB vector of 1-byte blocks (stride 2)
 * many times, checking every packed and unpacked byte: the workload on which run_refine.py
 * watches shunt's online refinement undo a wrong model. With a second argument "vary", each
 * iteration packs a different count (56-64 KiB) of a 1-byte element with an extent of 2: the
 * same layout, a new size nearly every call. With "dense", one contiguous 64 KiB type (one copy,
 * which shunt makes without deciding). Plain MPI; prints one line. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { blocks = 65536, stride = 2 };

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    const int iterations = argc > 1 ? atoi(argv[1]) : 6000;
    const int vary = argc > 2 && strcmp(argv[2], "vary") == 0;
    const int dense = argc > 2 && strcmp(argv[2], "dense") == 0;
    const int step = dense ? 1 : stride; /* typed bytes per packed byte */
    MPI_Datatype v;
    if (dense)
        MPI_Type_contiguous(blocks, MPI_BYTE, &v);
    else if (vary)
        MPI_Type_create_resized(MPI_BYTE, 0, stride, &v);
    else
        MPI_Type_vector(blocks, 1, stride, MPI_BYTE, &v);
    MPI_Type_commit(&v);
    unsigned char* typed = malloc((size_t)blocks * stride);
    unsigned char* back = malloc((size_t)blocks * stride);
    unsigned char* packed = malloc(blocks);
    for (int i = 0; i < blocks * stride; ++i) typed[i] = (unsigned char)(i * 7 + i / 251);
    int bad = 0;
    for (int it = 0; it < iterations && !bad; ++it) {
        /* n blocks: all of them, or 57344 + a step through the 8192 below 65536 */
        const int n = vary ? blocks - 8192 + (int)((it * 7919L) % 8192) : blocks;
        int pos = 0;
        memset(packed, 0, blocks);
        if (MPI_Pack(typed, vary ? n : 1, v, packed, blocks, &pos, MPI_COMM_WORLD) != MPI_SUCCESS || pos != n) bad = 1;
        for (int i = 0; i < n && !bad; ++i) bad = packed[i] != typed[i * step];
        memset(back, 0xa5, (size_t)blocks * stride);
        pos = 0;
        if (MPI_Unpack(packed, blocks, &pos, back, vary ? n : 1, v, MPI_COMM_WORLD) != MPI_SUCCESS || pos != n) bad = 1;
        for (int i = 0; i < blocks * stride && !bad; ++i)
            bad = back[i] != (i % step || i / step >= n ? 0xa5 : typed[i]);
        if (bad) printf("pack_loop: wrong bytes at iteration %d\n", it);
    }
    if (!bad)
        printf("pack_loop: %d packs and unpacks of %s%s, every byte right\n", iterations,
               vary    ? "56-64 KiB"
               : dense ? "a 64 KiB contiguous type"
                       : "a 64 KiB vector",
               dense ? "" : " of 1-byte blocks");
    MPI_Type_free(&v);
    free(typed);
    free(back);
    free(packed);
    MPI_Finalize();
    return bad;
}
