#!/usr/bin/env python3
"""examples/train_mlp.py: data-parallel training of a small MLP with mpi4py and numpy, the way many users write
it: every step each rank computes the gradients of its share of the batch and sums each layer's with
comm.Allreduce (MPI_Allreduce underneath, which shunt intercepts when preloaded). The same model and synthetic
task as examples/train_mlp.cpp.

Usage: mpirun -n 4 python3 train_mlp.py [STEPS [BATCH [INPUT HIDDEN1 HIDDEN2 [TRAIN]]]]
       (defaults 400 16 128 128 64 65536)
Prints the loss now and then, and at the end the test accuracy and the time per step (the slowest rank's
median over the steps after the first tenth). Under LD_PRELOAD=libshunt.so with SHUNT_COMPRESS=auto, shunt
compresses the gradients where its model says the network is the bottleneck.
"""
import math
import sys
import time

import numpy as np
from mpi4py import MPI


def dataset(rng_teacher, seed, n, dim, classes, noise):
    """Gaussian inputs labelled by a random linear teacher with noise (the same on every rank)."""
    t = rng_teacher.standard_normal((dim, classes)).astype(np.float32) / np.float32(math.sqrt(dim))
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, dim)).astype(np.float32)
    y = np.argmax(x @ t + noise * rng.standard_normal((n, classes)).astype(np.float32), axis=1)
    return x, y


def main():
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    a = [int(v) for v in sys.argv[1:]]
    steps = a[0] if len(a) > 0 else 400
    batch = a[1] if len(a) > 1 else 16
    dims = a[2:5] if len(a) > 4 else [128, 128, 64]
    n_train = a[5] if len(a) > 5 else 65536
    classes, n_test, rate, momentum, noise = 10, 4096, 0.05, 0.9, 0.1

    x_train, y_train = dataset(np.random.default_rng(1), 11, n_train, dims[0], classes, noise)
    x_test, y_test = dataset(np.random.default_rng(1), 12, n_test, dims[0], classes, noise)
    # The same initial weights on every rank.
    init = np.random.default_rng(3)
    widths = dims + [classes]
    weights = [(init.standard_normal((i, o)) * math.sqrt(2.0 / i)).astype(np.float32)
               for i, o in zip(widths[:-1], widths[1:])]
    biases = [np.zeros(o, dtype=np.float32) for o in widths[1:]]
    vel_w = [np.zeros_like(w) for w in weights]
    vel_b = [np.zeros_like(b) for b in biases]

    def forward(x):
        acts = [x]
        for i, (w, b) in enumerate(zip(weights, biases)):
            z = acts[-1] @ w + b
            acts.append(np.maximum(z, 0) if i + 1 < len(weights) else z)
        return acts

    times, loss = [], 0.0
    for t in range(steps):
        lr = rate * 0.5 * (1 + math.cos(math.pi * t / steps))
        first = (t * batch * size) % (n_train - batch * size + 1) + rank * batch
        x, y = x_train[first:first + batch], y_train[first:first + batch]
        t0 = time.perf_counter()
        acts = forward(x)
        z = acts[-1]
        z = z - z.max(axis=1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(axis=1, keepdims=True)
        local_loss = float(-np.log(p[np.arange(len(y)), y]).mean())
        dz = p
        dz[np.arange(len(y)), y] -= 1
        dz = (dz / len(y)).astype(np.float32)
        for i in reversed(range(len(weights))):
            dw = np.ascontiguousarray(acts[i].T @ dz, dtype=np.float32)
            db = np.ascontiguousarray(dz.sum(axis=0), dtype=np.float32)
            if i > 0:
                dz = (dz @ weights[i].T) * (acts[i] > 0)
            # The gradients of this layer, summed over the ranks as soon as they are known.
            comm.Allreduce(MPI.IN_PLACE, dw, op=MPI.SUM)
            comm.Allreduce(MPI.IN_PLACE, db, op=MPI.SUM)
            dw /= size
            db /= size
            vel_w[i] = momentum * vel_w[i] + dw
            vel_b[i] = momentum * vel_b[i] + db
        for i in range(len(weights)):
            weights[i] -= np.float32(lr) * vel_w[i]
            biases[i] -= np.float32(lr) * vel_b[i]
        loss = comm.allreduce(local_loss, op=MPI.SUM) / size
        times.append(time.perf_counter() - t0)
        if rank == 0 and (t % 50 == 0 or t == steps - 1):
            print(f"step {t}: loss {loss:.4f}", flush=True)
    share = n_test // size
    logits = forward(x_test[rank * share:(rank + 1) * share])[-1]
    right = np.array([np.sum(np.argmax(logits, axis=1) == y_test[rank * share:(rank + 1) * share]), share],
                     dtype=np.int64)
    comm.Allreduce(MPI.IN_PLACE, right, op=MPI.SUM)
    kept = sorted(times[len(times) // 10:])
    median = comm.allreduce(kept[len(kept) // 2], op=MPI.MAX)
    if rank == 0:
        print(f"final: {size} ranks, {steps} steps of {batch * size} samples each, loss {loss:.4f}, "
              f"test accuracy {100.0 * right[0] / right[1]:.2f}% ({right[0]} of {right[1]}), "
              f"step time {median * 1e3:.3f} ms (median, slowest rank)")


if __name__ == "__main__":
    main()
