// examples/mlp.hpp: a small multi-layer perceptron trained data-parallel with plain MPI (examples/train_mlp.cpp; bench-compress-coll times its step): deterministic synthetic data, forward and backward passes, every layer's gradients summed with MPI_Allreduce each step.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace mlp {

/// The layers' widths, the data and the training.
struct config {
    int input = 128, hidden1 = 128, hidden2 = 64, classes = 10;
    int train = 65536, test = 4096;  ///< samples
    int batch = 16;  ///< per rank and step
    float rate = 0.05f, momentum = 0.9f;
    float noise = 0.1f;  ///< the labels' noise (no model reaches 100%)
    std::uint32_t seed = 1;
};

/// The data set, the same on every rank (each trains on its own share): Gaussian inputs, labelled
/// by a random teacher with noise, so that no model reaches 100%.
struct dataset {
    std::vector<float> x;  ///< samples x input
    std::vector<int> y;
    int n = 0, dim = 0;

    static dataset make(const config& c, int n, std::uint32_t stream) {
        dataset d;
        d.n = n;
        d.dim = c.input;
        // The teacher: a random linear map to the classes.
        std::mt19937 teacher_rng(c.seed);
        std::normal_distribution<float> g(0, 1);
        std::vector<float> t(static_cast<std::size_t>(c.input) * c.classes);
        for (auto& v : t) v = g(teacher_rng) / std::sqrt(static_cast<float>(c.input));
        std::mt19937 rng(c.seed * 7919u + stream);
        d.x.resize(static_cast<std::size_t>(n) * c.input);
        d.y.resize(static_cast<std::size_t>(n));
        std::vector<float> out(static_cast<std::size_t>(c.classes));
        for (int s = 0; s < n; ++s) {
            float* x = &d.x[static_cast<std::size_t>(s) * c.input];
            for (int i = 0; i < c.input; ++i) x[i] = g(rng);
            std::fill(out.begin(), out.end(), 0.0f);
            for (int i = 0; i < c.input; ++i)
                for (int k = 0; k < c.classes; ++k) out[k] += x[i] * t[static_cast<std::size_t>(i) * c.classes + k];
            for (int k = 0; k < c.classes; ++k) out[k] += c.noise * g(rng);
            d.y[static_cast<std::size_t>(s)] = static_cast<int>(std::max_element(out.begin(), out.end()) - out.begin());
        }
        return d;
    }
};

/// One fully connected layer: out = in W + b (W is in x out, row-major), its gradients and momentum.
struct layer {
    int in = 0, out = 0;
    std::vector<float> w, b, dw, db, vw, vb;

    layer(int i, int o, std::mt19937& rng) : in(i), out(o) {
        std::normal_distribution<float> g(0, std::sqrt(2.0f / static_cast<float>(i)));
        w.resize(static_cast<std::size_t>(i) * o);
        for (auto& v : w) v = g(rng);
        b.assign(static_cast<std::size_t>(o), 0.0f);
        dw.assign(w.size(), 0.0f);
        db.assign(b.size(), 0.0f);
        vw.assign(w.size(), 0.0f);
        vb.assign(b.size(), 0.0f);
    }
    /// y[s] = x[s] W + b for `n` samples.
    void forward(const float* x, float* y, int n) const {
        for (int s = 0; s < n; ++s) {
            float* ys = y + static_cast<std::size_t>(s) * out;
            std::copy(b.begin(), b.end(), ys);
            const float* xs = x + static_cast<std::size_t>(s) * in;
            for (int i = 0; i < in; ++i) {
                const float xi = xs[i];
                const float* wi = &w[static_cast<std::size_t>(i) * out];
                for (int j = 0; j < out; ++j) ys[j] += xi * wi[j];
            }
        }
    }
    /// From dy (n x out): the gradients dw, db (overwritten) and, when dx is not null, dx = dy W^T.
    void backward(const float* x, const float* dy, float* dx, int n) {
        std::fill(dw.begin(), dw.end(), 0.0f);
        std::fill(db.begin(), db.end(), 0.0f);
        for (int s = 0; s < n; ++s) {
            const float* xs = x + static_cast<std::size_t>(s) * in;
            const float* dys = dy + static_cast<std::size_t>(s) * out;
            for (int j = 0; j < out; ++j) db[j] += dys[j];
            for (int i = 0; i < in; ++i) {
                const float xi = xs[i];
                float* dwi = &dw[static_cast<std::size_t>(i) * out];
                for (int j = 0; j < out; ++j) dwi[j] += xi * dys[j];
            }
            if (dx == nullptr) continue;
            float* dxs = dx + static_cast<std::size_t>(s) * in;
            for (int i = 0; i < in; ++i) {
                const float* wi = &w[static_cast<std::size_t>(i) * out];
                float acc = 0;
                for (int j = 0; j < out; ++j) acc += dys[j] * wi[j];
                dxs[i] = acc;
            }
        }
    }
    /// SGD with momentum on the averaged gradients.
    void update(float rate, float momentum) {
        for (std::size_t k = 0; k < w.size(); ++k) w[k] -= rate * (vw[k] = momentum * vw[k] + dw[k]);
        for (std::size_t k = 0; k < b.size(); ++k) b[k] -= rate * (vb[k] = momentum * vb[k] + db[k]);
    }
};

/// The network input -> hidden1 -> hidden2 -> classes, ReLU between layers, softmax cross-entropy.
class network {
public:
    explicit network(const config& c) : c_(c) {
        std::mt19937 rng(c.seed * 104729u + 3);  // the same initial weights on every rank
        layers_.emplace_back(c.input, c.hidden1, rng);
        layers_.emplace_back(c.hidden1, c.hidden2, rng);
        layers_.emplace_back(c.hidden2, c.classes, rng);
    }

    /// One data-parallel step on this rank's `n` samples starting at `first`: forward, backward,
    /// every gradient summed over `comm` with MPI_Allreduce (the largest layer's weights first, as
    /// backpropagation produces them: last layer first), averaged, then the update. Returns the
    /// batch's mean loss over all ranks (one more MPI_Allreduce).
    double step(const dataset& d, int first, int n, MPI_Comm comm) {
        forward(d, first, n);
        // Softmax cross-entropy gradient at the output.
        const int k = c_.classes;
        double loss = 0;
        std::vector<float>& dy = grads_[2];
        dy.assign(static_cast<std::size_t>(n) * k, 0.0f);
        for (int s = 0; s < n; ++s) {
            const float* z = &acts_[3][static_cast<std::size_t>(s) * k];
            const float m = *std::max_element(z, z + k);
            double sum = 0;
            for (int j = 0; j < k; ++j) sum += std::exp(static_cast<double>(z[j] - m));
            const int label = d.y[static_cast<std::size_t>(first + s)];
            loss += std::log(sum) - (z[label] - m);
            for (int j = 0; j < k; ++j)
                dy[static_cast<std::size_t>(s) * k + j] =
                    static_cast<float>(std::exp(static_cast<double>(z[j] - m)) / sum - (j == label ? 1 : 0)) /
                    static_cast<float>(n);
        }
        int ranks = 1;
        MPI_Comm_size(comm, &ranks);
        for (int l = 2; l >= 0; --l) {
            layer& ly = layers_[static_cast<std::size_t>(l)];
            std::vector<float>& dx = grads_[static_cast<std::size_t>(l == 0 ? 0 : l - 1)];
            if (l > 0) dx.assign(static_cast<std::size_t>(n) * ly.in, 0.0f);
            ly.backward(acts_[static_cast<std::size_t>(l)].data(), grads_[static_cast<std::size_t>(l)].data(),
                        l > 0 ? dx.data() : nullptr, n);
            if (l > 0)  // through the ReLU of the layer below
                for (std::size_t q = 0; q < dx.size(); ++q)
                    if (acts_[static_cast<std::size_t>(l)][q] <= 0) dx[q] = 0;
            // The gradients of this layer, summed over the ranks as soon as they are known.
            allreduce_(MPI_IN_PLACE, ly.dw.data(), static_cast<int>(ly.dw.size()), MPI_FLOAT, MPI_SUM, comm);
            allreduce_(MPI_IN_PLACE, ly.db.data(), static_cast<int>(ly.db.size()), MPI_FLOAT, MPI_SUM, comm);
            const float scale = 1.0f / static_cast<float>(ranks);
            for (float& v : ly.dw) v *= scale;
            for (float& v : ly.db) v *= scale;
        }
        for (layer& ly : layers_) ly.update(c_.rate, c_.momentum);
        double total = loss / n;
        allreduce_(MPI_IN_PLACE, &total, 1, MPI_DOUBLE, MPI_SUM, comm);
        return total / ranks;
    }

    /// The share of `d`'s samples [first, first + n) classified right (no communication).
    int correct(const dataset& d, int first, int n) {
        int right = 0;
        const int chunk = 256;
        for (int s = first; s < first + n; s += chunk) {
            const int m = std::min(chunk, first + n - s);
            forward(d, s, m);
            for (int q = 0; q < m; ++q) {
                const float* z = &acts_[3][static_cast<std::size_t>(q) * c_.classes];
                const int guess = static_cast<int>(std::max_element(z, z + c_.classes) - z);
                right += guess == d.y[static_cast<std::size_t>(s + q)];
            }
        }
        return right;
    }

    const std::vector<layer>& layers() const { return layers_; }
    /// The learning rate from now on.
    void set_rate(float rate) { c_.rate = rate; }
    /// The function that sums the gradients (MPI_Allreduce; a benchmark passes PMPI_Allreduce to
    /// time the library without the preloaded shunt).
    using allreduce_fn = int (*)(const void*, void*, int, MPI_Datatype, MPI_Op, MPI_Comm);
    void set_allreduce(allreduce_fn f) { allreduce_ = f; }

private:
    void forward(const dataset& d, int first, int n) {
        acts_[0].assign(d.x.begin() + static_cast<std::ptrdiff_t>(first) * d.dim,
                        d.x.begin() + static_cast<std::ptrdiff_t>(first + n) * d.dim);
        for (std::size_t l = 0; l < layers_.size(); ++l) {
            acts_[l + 1].resize(static_cast<std::size_t>(n) * layers_[l].out);
            layers_[l].forward(acts_[l].data(), acts_[l + 1].data(), n);
            if (l + 1 < layers_.size())
                for (float& v : acts_[l + 1]) v = std::max(v, 0.0f);
        }
    }

    config c_;
    allreduce_fn allreduce_ = &MPI_Allreduce;
    std::vector<layer> layers_;
    std::vector<float> acts_[4];  ///< input, and each layer's output (ReLU applied but the last)
    std::vector<float> grads_[3];  ///< the gradient at each layer's output
};

}  // namespace mlp
