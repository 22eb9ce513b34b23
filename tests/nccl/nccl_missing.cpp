// tests/nccl/nccl_missing.cpp: an NCCL program whose NCCL lacks ncclCommInitRankScalable and ncclCommShrink (the double built as an older NCCL), calling them through libshunt.so's shims: each returns an error instead of crashing, with one warning naming it.
//
// Run with LD_PRELOAD=libshunt.so, no MPI, one rank. The two functions are looked up at run
// time (the program links against an NCCL without them); exit 0 when all went well.
#include <nccl.h>

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

namespace {

int failures = 0;

void check(bool ok, const char* what) {
    if (ok) return;
    std::fprintf(stderr, "nccl-missing: %s\n", what);
    ++failures;
}

/// Occurrences of `needle` in `text`.
int count(const std::string& text, const std::string& needle) {
    int n = 0;
    for (std::size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
    return n;
}

}  // namespace

int main() {
    using scalable_fn = decltype(&ncclCommInitRankScalable);
    using shrink_fn = decltype(&ncclCommShrink);
    const auto scalable = reinterpret_cast<scalable_fn>(dlsym(RTLD_DEFAULT, "ncclCommInitRankScalable"));
    const auto shrink = reinterpret_cast<shrink_fn>(dlsym(RTLD_DEFAULT, "ncclCommShrink"));
    if (scalable == nullptr || shrink == nullptr) {
        std::fprintf(stderr,
                     "nccl-missing: no ncclCommInitRankScalable or ncclCommShrink in the process "
                     "(run it with LD_PRELOAD=libshunt.so)\n");
        return 1;
    }
    ncclUniqueId id;
    ncclComm_t comm = nullptr;
    if (ncclGetUniqueId(&id) != ncclSuccess || ncclCommInitRank(&comm, 1, id, 0) != ncclSuccess) {
        std::fprintf(stderr, "nccl-missing: cannot make a communicator\n");
        return 1;
    }
    // What shunt writes during the calls, read back from a file standing in for stderr.
    std::FILE* log = std::tmpfile();
    const int saved = dup(STDERR_FILENO);
    if (log == nullptr || saved < 0 || dup2(fileno(log), STDERR_FILENO) < 0) {
        std::fprintf(stderr, "nccl-missing: cannot redirect stderr\n");
        return 1;
    }
    ncclResult_t got[2][2];
    ncclComm_t made[2][2];
    for (int k = 0; k < 2; ++k) {
        made[k][0] = made[k][1] = reinterpret_cast<ncclComm_t>(&id);  // left alone on failure
        int exclude[] = {1};
        got[k][0] = scalable(&made[k][0], 1, 0, 1, &id, nullptr);
        got[k][1] = shrink(comm, exclude, 1, &made[k][1], nullptr, NCCL_SHRINK_DEFAULT);
    }
    std::fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    std::string text;
    std::rewind(log);
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, log)) > 0;) text.append(buf, n);
    std::fclose(log);

    for (int k = 0; k < 2; ++k) {
        check(got[k][0] == ncclInvalidUsage, "ncclCommInitRankScalable did not return ncclInvalidUsage");
        check(got[k][1] == ncclInvalidUsage, "ncclCommShrink did not return ncclInvalidUsage");
        check(made[k][0] == reinterpret_cast<ncclComm_t>(&id) && made[k][1] == reinterpret_cast<ncclComm_t>(&id),
              "a failed call wrote a communicator");
    }
    check(count(text, "ncclCommInitRankScalable") == 1, "not one warning naming ncclCommInitRankScalable");
    check(count(text, "ncclCommShrink") == 1, "not one warning naming ncclCommShrink");
    // The communicator NCCL has is untouched.
    float x = 2, y = 0;
    check(ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, comm, nullptr) == ncclSuccess && y == 2,
          "the communicator no longer works");
    check(ncclCommDestroy(comm) == ncclSuccess, "ncclCommDestroy failed");
    if (failures != 0) std::fprintf(stderr, "nccl-missing: shunt wrote:\n%s", text.c_str());
    return failures == 0 ? 0 : 1;
}
