// tests/gpu/gpu_nccl_tuner.cpp: real NCCL loads libshunt-nccl-tuner.so (NCCL_TUNER_PLUGIN) on this process's GPUs (one or
// two): NCCL_DEBUG=INFO shows it loaded and what it found; with two GPUs NCCL asks it about an allreduce, which runs
// with the algorithm it chose (SHUNT_LOG=decide says which) and gives the right sums. Exit 77 without a device or NCCL.
// usage: gpu_nccl_tuner PLUGIN [NCCL_LIBRARY]   (default libnccl.so.2)
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::string slurp(const std::filesystem::path& dir, const std::string& prefix) {
    std::string text;
    for (const auto& e : std::filesystem::directory_iterator(dir))
        if (e.path().filename().string().starts_with(prefix)) {
            std::ifstream in(e.path());
            std::stringstream s;
            s << in.rdbuf();
            text += s.str();
        }
    return text;
}

void print_lines_with(const std::string& text, const char* what) {
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);)
        if (line.find(what) != std::string::npos) std::printf("  | %s\n", line.c_str());
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: gpu_nccl_tuner PLUGIN [NCCL_LIBRARY]\n");
        return 2;
    }
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::printf("gpu_nccl_tuner: no CUDA device: skipped\n");
        return 77;
    }
    const int n = devices >= 2 ? 2 : 1;
    char tmpl[] = "/tmp/shunt-nccl-tuner-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return 1;
    const std::filesystem::path dir = tmpl;
    // A model with a table for every cell of an allreduce on these n ranks: cell i (algorithm * 3 + protocol) takes
    // 10 + 3 i us at any size, so the first cell NCCL enables wins over any later one NCCL would pick.
    {
        std::ofstream m(dir / "model.json");
        m << "{\"schema\":\"shunt-model\",\"version\":1,\"identity\":{\"host\":\"x\",\"gpu\":\"x\",\"mpi\":\"nccl\"},"
             "\"tables\":{";
        const char* algos[] = {"tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat"};
        const char* protos[] = {"ll", "ll128", "simple"};
        for (int i = 0; i < 21; ++i)
            m << (i ? "," : "") << "\"nccl.allreduce." << algos[i / 3] << "." << protos[i % 3] << ".r" << n
              << "n1\":[[1," << (10 + 3 * i) * 1e-6 << ",0],[1e12," << (10 + 3 * i) * 1e-6 << ",0]]";
        m << "}}\n";
    }
    // Everything NCCL and shunt read, before NCCL is loaded.
    ::setenv("NCCL_TUNER_PLUGIN", argv[1], 1);
    ::setenv("NCCL_DEBUG", "INFO", 1);
    ::setenv("NCCL_DEBUG_SUBSYS", "INIT,TUNING,ENV", 1);
    ::setenv("NCCL_DEBUG_FILE", (dir / "nccl.%p.log").c_str(), 1);
    ::setenv("SHUNT_MODEL", (dir / "model.json").c_str(), 1);
    ::setenv("SHUNT_LOG", "decide", 1);
    ::setenv("SHUNT_LOG_FILE", (dir / "shunt.log").c_str(), 1);
    const char* library = argc > 2 ? argv[2] : "libnccl.so.2";
    void* lib = ::dlopen(library, RTLD_NOW | RTLD_GLOBAL);
    if (lib == nullptr) {
        std::printf("gpu_nccl_tuner: cannot load %s (%s): skipped\n", library, ::dlerror());
        return 77;
    }
    auto init_all = reinterpret_cast<decltype(&ncclCommInitAll)>(::dlsym(lib, "ncclCommInitAll"));
    auto all_reduce = reinterpret_cast<decltype(&ncclAllReduce)>(::dlsym(lib, "ncclAllReduce"));
    auto group_start = reinterpret_cast<decltype(&ncclGroupStart)>(::dlsym(lib, "ncclGroupStart"));
    auto group_end = reinterpret_cast<decltype(&ncclGroupEnd)>(::dlsym(lib, "ncclGroupEnd"));
    auto destroy = reinterpret_cast<decltype(&ncclCommDestroy)>(::dlsym(lib, "ncclCommDestroy"));
    auto version = reinterpret_cast<decltype(&ncclGetVersion)>(::dlsym(lib, "ncclGetVersion"));
    if (!init_all || !all_reduce || !group_start || !group_end || !destroy || !version) {
        std::printf("gpu_nccl_tuner: %s lacks NCCL's functions\n", library);
        return 1;
    }
    int v = 0;
    version(&v);
    std::printf("gpu_nccl_tuner: NCCL %d on %d of %d GPUs, plugin %s\n", v, n, devices, argv[1]);

    std::vector<ncclComm_t> comms(n);
    std::vector<int> devs = {0, 1};
    if (init_all(comms.data(), n, devs.data()) != ncclSuccess) {
        std::printf("gpu_nccl_tuner: ncclCommInitAll failed\n");
        return 1;
    }
    constexpr std::size_t count = 1 << 20;  // 4 MiB of floats
    std::vector<float*> buf(n);
    std::vector<cudaStream_t> streams(n);
    for (int d = 0; d < n; ++d) {
        cudaSetDevice(d);
        cudaMalloc(&buf[d], count * sizeof(float));
        std::vector<float> host(count, static_cast<float>(d + 1));
        cudaMemcpy(buf[d], host.data(), count * sizeof(float), cudaMemcpyHostToDevice);
        cudaStreamCreate(&streams[d]);
    }
    bool ok = group_start() == ncclSuccess;
    for (int d = 0; d < n; ++d)
        ok = all_reduce(buf[d], buf[d], count, ncclFloat32, ncclSum, comms[d], streams[d]) == ncclSuccess && ok;
    ok = group_end() == ncclSuccess && ok;
    const float want = n == 2 ? 3.0f : 1.0f;
    for (int d = 0; d < n; ++d) {
        cudaSetDevice(d);
        ok = cudaStreamSynchronize(streams[d]) == cudaSuccess && ok;
        std::vector<float> host(count);
        cudaMemcpy(host.data(), buf[d], count * sizeof(float), cudaMemcpyDeviceToHost);
        for (float x : host) ok = ok && x == want;
        cudaFree(buf[d]);
    }
    for (int d = 0; d < n; ++d) destroy(comms[d]);
    std::printf("gpu_nccl_tuner: allreduce of %zu floats on %d GPUs %s\n", count, n, ok ? "right" : "WRONG");

    const std::string nccl_log = slurp(dir, "nccl."), shunt_log = slurp(dir, "shunt.log");
    print_lines_with(nccl_log, "TUNER");
    print_lines_with(shunt_log, "shunt[");
    const bool loaded = nccl_log.find("TUNER/Plugin: Using shunt (v5)") != std::string::npos;
    const bool found =
        nccl_log.find("TUNER/shunt: 21 measured tables for r" + std::to_string(n) + "n1") != std::string::npos;
    const bool decided = n < 2 || shunt_log.find("decide: nccl allreduce of 4194304 B") != std::string::npos;
    std::printf("gpu_nccl_tuner: plugin loaded by NCCL: %s; its tables found: %s; NCCL asked it (2 GPUs): %s\n",
                loaded ? "yes" : "NO", found ? "yes" : "NO",
                n < 2     ? "not at 1 GPU"
                : decided ? "yes"
                          : "NO");
    std::filesystem::remove_all(dir);
    return ok && loaded && found && decided ? 0 : 1;
}
