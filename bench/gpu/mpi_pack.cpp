// bench/gpu/mpi_pack.cpp: bench-gpu-mpi-pack, an unmodified MPI program timing MPI_Pack of device buffers (2-D
// vectors, 3-D halo faces), run under a preloaded library (TEMPI, shunt) to compare them; MPI and CUDA only.
#include <mpi.h>

#include <cuda_runtime.h>

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <regex>
#include <string>
#include <vector>

namespace {

/// One MPI_Pack case: the datatype to build, and the same layout written out by hand for the host
/// reference: `planes` planes `plane` bytes apart, each of `rows` blocks of `block` bytes `pitch`
/// bytes apart, starting `offset` bytes into a typed buffer of `span` bytes.
struct pack_case {
    std::string name;
    std::function<int(MPI_Datatype*)> make;
    std::int64_t offset = 0, block = 0, rows = 0, pitch = 0, planes = 1, plane = 0, span = 0;
    std::int64_t payload() const { return block * rows * planes; }
    /// Bytes from `offset` to the end of the last block.
    std::int64_t reach() const { return (planes - 1) * plane + (rows - 1) * pitch + block; }
};

/// A 2-D vector of `count` blocks of `block` bytes (MPI_BYTE), each twice its length from the last.
pack_case vector_case(std::int64_t block, std::int64_t payload, const std::string& size_name) {
    pack_case c;
    c.name = "vec/b" + std::to_string(block) + "/" + size_name;
    c.block = block;
    c.rows = payload / block;
    c.pitch = 2 * block;
    c.span = c.rows * c.pitch;
    const int count = static_cast<int>(c.rows), len = static_cast<int>(block), stride = static_cast<int>(2 * block);
    c.make = [=](MPI_Datatype* t) { return MPI_Type_vector(count, len, stride, MPI_BYTE, t); };
    return c;
}

/// The face that a rank sends to its neighbour along `axis` (x fastest) in a halo exchange of an
/// n^3 cube of `elem`-byte cells with ghost layers `r` cells thick: the first r interior layers.
pack_case face_case(char axis, int n, int r, MPI_Datatype cell, std::int64_t elem, const std::string& cube) {
    pack_case c;
    c.name = "halo/" + cube + "/r" + std::to_string(r) + "/" + axis;
    const int inner = n - 2 * r;
    // C order: dimension 0 is z (planes), 1 is y (rows), 2 is x (cells in a row).
    const int sub[3] = {axis == 'z' ? r : inner, axis == 'y' ? r : inner, axis == 'x' ? r : inner};
    c.planes = sub[0];
    c.rows = sub[1];
    c.block = std::int64_t{sub[2]} * elem;
    c.pitch = std::int64_t{n} * elem;
    c.plane = std::int64_t{n} * n * elem;
    c.offset = (std::int64_t{r} * n * n + std::int64_t{r} * n + r) * elem;
    c.span = std::int64_t{n} * n * n * elem;
    c.make = [=](MPI_Datatype* t) {
        const int sizes[3] = {n, n, n}, subs[3] = {sub[0], sub[1], sub[2]}, starts[3] = {r, r, r};
        return MPI_Type_create_subarray(3, sizes, subs, starts, MPI_ORDER_C, cell, t);
    };
    return c;
}

/// The plain host loop the packed bytes are checked against; `from` holds the typed bytes from
/// `offset` on.
void reference_pack(const pack_case& c, const unsigned char* from, unsigned char* out) {
    for (std::int64_t k = 0; k < c.planes; ++k)
        for (std::int64_t i = 0; i < c.rows; ++i) {
            std::memcpy(out, from + k * c.plane + i * c.pitch, static_cast<std::size_t>(c.block));
            out += c.block;
        }
}

/// Where the buffers live: device memory (cudaMalloc) or, with --host, plain host memory (a check
/// of this program that needs no GPU).
struct memory {
    bool device = true;
    void need(cudaError_t rc, const char* call) const {
        if (rc == cudaSuccess) return;
        std::fprintf(stderr, "bench-gpu-mpi-pack: %s failed: %s\n", call, cudaGetErrorString(rc));
        std::exit(3);
    }
    void* alloc(std::int64_t n) const {
        void* p = nullptr;
        if (device)
            need(cudaMalloc(&p, static_cast<std::size_t>(n)), "cudaMalloc");
        else if ((p = std::malloc(static_cast<std::size_t>(n))) == nullptr) {
            std::fprintf(stderr, "bench-gpu-mpi-pack: out of host memory (%lld bytes)\n", static_cast<long long>(n));
            std::exit(3);
        }
        return p;
    }
    void release(void* p) const {
        if (device)
            (void)cudaFree(p);
        else
            std::free(p);
    }
    void copy(void* dst, const void* src, std::int64_t n) const {
        if (device)
            need(cudaMemcpy(dst, src, static_cast<std::size_t>(n), cudaMemcpyDefault), "cudaMemcpy");
        else
            std::memcpy(dst, src, static_cast<std::size_t>(n));
    }
    void set(void* p, int byte, std::int64_t n) const {
        if (device)
            need(cudaMemset(p, byte, static_cast<std::size_t>(n)), "cudaMemset");
        else
            std::memset(p, byte, static_cast<std::size_t>(n));
    }
    void sync() const {
        if (device) need(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    }
};

/// The shared object that defines `fn` as this program sees it.
std::string object_of(void* fn) {
    Dl_info info{};
    return dladdr(fn, &info) != 0 && info.dli_fname != nullptr ? info.dli_fname : "?";
}

struct options {
    bool quick = false, host = false, force = false, list = false;
    int trials = 20;
    double time_s = 0.1;
    std::vector<std::regex> cases;
    bool selected(const std::string& name) const {
        if (cases.empty()) return true;
        for (const auto& re : cases)
            if (std::regex_search(name, re)) return true;
        return false;
    }
};

[[noreturn]] void usage(int rc) {
    std::fprintf(
        rc == 0 ? stdout : stderr,
        "usage: bench-gpu-mpi-pack [--quick] [--cases LIST] [--trials N] [--time S] [--list] [--host] [--force]\n"
        "Times MPI_Pack of device buffers (cudaMalloc, typed and packed) as an unmodified MPI program: run it\n"
        "under a preloaded library that packs device memory (LD_PRELOAD=libshunt.so, libtempi.so), one rank.\n"
        "Cases: vec/bB/SIZE = MPI_Type_vector of SIZE/B blocks of B bytes (MPI_BYTE), 2B apart, B = 1..512;\n"
        "halo/CUBE/rR/AXIS = MPI_Type_create_subarray, the AXIS face R cells thick of a CUBE (f32-512: 512^3\n"
        "floats, f64-256: 256^3 doubles) inside ghost layers R thick. Each case: commit, warm up, then calls of\n"
        "MPI_Pack + cudaDeviceSynchronize timed one by one (best of up to --trials, default 20, within --time\n"
        "seconds, default 0.1, at least 3), then one call checked byte by byte against a host loop.\n"
        "Prints CSV on stdout: case,payload_bytes,best_s,gbps,ok (ok: yes, or no for wrong bytes or position).\n"
        "  --quick       1 MiB vectors of 1,8,64,512 B blocks and halo faces of 64^3 and 32^3 cubes\n"
        "  --cases LIST  only cases matching one of the comma-separated regular expressions\n"
        "  --list        print the selected case names and exit\n"
        "  --host        host buffers instead (checks the program itself where no GPU is)\n"
        "  --force       run even when MPI_Pack is the MPI library's own (a CUDA-aware MPI)\n"
        "Exit status: 0 all cases right, 1 a case packed wrong bytes, 2 usage, 3 setup failure, 77 no CUDA device.\n");
    std::exit(rc);
}

options parse(int argc, char** argv) {
    options o;
    auto value = [&](int& i) -> std::string {
        if (i + 1 >= argc) {
            std::fprintf(stderr, "bench-gpu-mpi-pack: %s needs a value\n", argv[i]);
            usage(2);
        }
        return argv[++i];
    };
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        try {
            if (a == "--quick") {
                o.quick = true;
            } else if (a == "--host") {
                o.host = true;
            } else if (a == "--force") {
                o.force = true;
            } else if (a == "--list") {
                o.list = true;
            } else if (a == "--trials") {
                const std::string v = value(i);
                std::size_t end = 0;
                o.trials = std::stoi(v, &end);
                if (end != v.size() || o.trials < 1 || o.trials > 1000000) throw std::invalid_argument(v);
            } else if (a == "--time") {
                const std::string v = value(i);
                std::size_t end = 0;
                o.time_s = std::stod(v, &end);
                if (end != v.size() || !(o.time_s >= 0 && o.time_s <= 3600)) throw std::invalid_argument(v);
            } else if (a == "--cases") {
                const std::string v = value(i);
                std::size_t from = 0;
                while (from <= v.size()) {
                    const std::size_t comma = std::min(v.find(',', from), v.size());
                    if (comma > from) o.cases.emplace_back(v.substr(from, comma - from));
                    from = comma + 1;
                }
            } else if (a == "-h" || a == "--help") {
                usage(0);
            } else {
                std::fprintf(stderr, "bench-gpu-mpi-pack: unknown argument %s\n", a.c_str());
                usage(2);
            }
        } catch (const std::exception&) {
            std::fprintf(stderr, "bench-gpu-mpi-pack: bad value for %s\n", a.c_str());
            usage(2);
        }
    }
    return o;
}

std::vector<pack_case> make_cases(const options& o) {
    std::vector<pack_case> all;
    const std::vector<std::int64_t> blocks = o.quick ? std::vector<std::int64_t>{1, 8, 64, 512}
                                                     : std::vector<std::int64_t>{1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
    const std::vector<std::pair<std::int64_t, std::string>> sizes =
        o.quick ? std::vector<std::pair<std::int64_t, std::string>>{{1 << 20, "1M"}}
                : std::vector<std::pair<std::int64_t, std::string>>{{16 << 20, "16M"}, {64 << 20, "64M"}};
    for (const auto& [size, size_name] : sizes)
        for (const std::int64_t b : blocks) all.push_back(vector_case(b, size, size_name));
    for (const char axis : {'x', 'y', 'z'})
        all.push_back(o.quick ? face_case(axis, 64, 1, MPI_FLOAT, 4, "f32-64")
                              : face_case(axis, 512, 1, MPI_FLOAT, 4, "f32-512"));
    for (const char axis : {'x', 'y', 'z'})
        all.push_back(o.quick ? face_case(axis, 32, 3, MPI_DOUBLE, 8, "f64-32")
                              : face_case(axis, 256, 3, MPI_DOUBLE, 8, "f64-256"));
    std::vector<pack_case> chosen;
    for (auto& c : all)
        if (o.selected(c.name)) chosen.push_back(std::move(c));
    return chosen;
}

/// A fixed pseudo-random byte pattern, so that a block packed from the wrong place shows.
void fill_pattern(unsigned char* p, std::int64_t n) {
    std::uint64_t x = 0x9e3779b97f4a7c15ull;
    for (std::int64_t i = 0; i < n; i += 8) {
        x += 0x9e3779b97f4a7c15ull;
        std::uint64_t z = x;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        std::memcpy(p + i, &z, static_cast<std::size_t>(std::min<std::int64_t>(8, n - i)));
    }
}

}  // namespace

int main(int argc, char** argv) {
    options o = parse(argc, argv);
    const std::vector<pack_case> cases = make_cases(o);
    if (o.list) {
        for (const auto& c : cases) std::printf("%s\n", c.name.c_str());
        return 0;
    }
    memory mem;
    mem.device = !o.host;
    if (mem.device) {
        int devices = 0;
        if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
            std::fprintf(stderr, "bench-gpu-mpi-pack: no CUDA device: nothing to measure\n");
            return 77;
        }
    }
    if (cases.empty()) {
        std::fprintf(stderr, "bench-gpu-mpi-pack: no case matches --cases\n");
        return 2;
    }
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    // A library that is not CUDA-aware would crash packing device memory: say so instead.
    const std::string pack_from = object_of(reinterpret_cast<void*>(&MPI_Pack));
    const bool library_packs = pack_from == object_of(reinterpret_cast<void*>(&PMPI_Pack));
    if (rank == 0) std::fprintf(stderr, "bench-gpu-mpi-pack: MPI_Pack is from %s\n", pack_from.c_str());
    if (library_packs && mem.device && !o.force) {
        if (rank == 0)
            std::fprintf(stderr,
                         "bench-gpu-mpi-pack: MPI_Pack is the MPI library's own; run under a preload that packs "
                         "device memory (LD_PRELOAD=libshunt.so), or --force for a CUDA-aware MPI\n");
        MPI_Finalize();
        return 2;
    }

    std::int64_t max_span = 0, max_payload = 0;
    for (const auto& c : cases) {
        max_span = std::max(max_span, c.span);
        max_payload = std::max(max_payload, c.payload());
    }
    // One typed buffer (a pattern) and one packed buffer serve every case; the host copy of the
    // typed buffer is refilled from it for each check.
    std::vector<unsigned char> host_typed(static_cast<std::size_t>(max_span));
    fill_pattern(host_typed.data(), max_span);
    void* typed = mem.alloc(max_span);
    void* packed = mem.alloc(max_payload);
    mem.copy(typed, host_typed.data(), max_span);
    std::vector<unsigned char> want(static_cast<std::size_t>(max_payload)), got(static_cast<std::size_t>(max_payload));
    const int outsize = static_cast<int>(max_payload);

    if (rank == 0) std::printf("case,payload_bytes,best_s,gbps,ok\n");
    bool all_ok = true;
    for (const auto& c : cases) {
        const std::int64_t payload = c.payload();
        MPI_Datatype t = MPI_DATATYPE_NULL;
        if (c.make(&t) != MPI_SUCCESS || MPI_Type_commit(&t) != MPI_SUCCESS) {
            std::fprintf(stderr, "bench-gpu-mpi-pack: %s: building the datatype failed\n", c.name.c_str());
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
        int size = 0;
        MPI_Type_size(t, &size);
        bool ok = size == payload;
        if (!ok)
            std::fprintf(stderr, "bench-gpu-mpi-pack: %s: MPI_Type_size %d, the case says %lld\n", c.name.c_str(), size,
                         static_cast<long long>(payload));
        auto pack_once = [&] {
            int position = 0;
            const int rc = MPI_Pack(typed, 1, t, packed, outsize, &position, MPI_COMM_WORLD);
            mem.sync();
            return rc == MPI_SUCCESS && position == payload;
        };
        // Warm-up: the first call may plan, allocate or compile.
        for (int i = 0; i < 2 && ok; ++i) ok = pack_once();
        double best = 0;
        const auto begin = std::chrono::steady_clock::now();
        for (int i = 0; ok && i < o.trials; ++i) {
            const auto t0 = std::chrono::steady_clock::now();
            ok = pack_once();
            const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            if (i == 0 || s < best) best = s;
            if (i >= 2 && std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count() >= o.time_s)
                break;
        }
        if (!ok)
            std::fprintf(stderr, "bench-gpu-mpi-pack: %s: MPI_Pack failed or moved position wrong\n", c.name.c_str());
        // The check: the packed buffer cleared, one more call, its bytes against the host loop's.
        if (ok) {
            mem.set(packed, 0xa5, payload);
            mem.sync();
            ok = pack_once();
            mem.copy(host_typed.data(), static_cast<const unsigned char*>(typed) + c.offset, c.reach());
            mem.copy(got.data(), packed, payload);
        }
        if (ok) {
            reference_pack(c, host_typed.data(), want.data());
            const auto diff = std::mismatch(want.begin(), want.begin() + payload, got.begin());
            if (diff.first != want.begin() + payload) {
                ok = false;
                std::fprintf(stderr, "bench-gpu-mpi-pack: %s: packed byte %lld is 0x%02x, the host loop says 0x%02x\n",
                             c.name.c_str(), static_cast<long long>(diff.first - want.begin()), *diff.second,
                             *diff.first);
            }
        }
        MPI_Type_free(&t);
        all_ok = all_ok && ok;
        if (rank == 0) {
            std::printf("%s,%lld,%.9g,%.4g,%s\n", c.name.c_str(), static_cast<long long>(payload), best,
                        best > 0 ? static_cast<double>(payload) / best / 1e9 : 0.0, ok ? "yes" : "no");
            std::fflush(stdout);
        }
    }
    mem.release(typed);
    mem.release(packed);
    MPI_Finalize();
    return all_ok ? 0 : 1;
}
