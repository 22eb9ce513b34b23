// tests/unit/model/test_nccl_file.cpp: the NCCL tables' model file: its default path, its identity checked at the
// default location and not for a file SHUNT_MODEL names, and bad files diagnosed.
#include <doctest/doctest.h>

#include <shunt/model/nccl_file.hpp>

#include <unistd.h>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

using namespace shunt;

namespace {

/// A scratch directory under $TMPDIR (else /tmp), removed with everything in it at scope end.
struct temp_dir {
    std::string path;
    temp_dir() {
        const char* base = std::getenv("TMPDIR");
        std::string tmpl = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/shunt-nccl-file-XXXXXX";
        const char* d = ::mkdtemp(tmpl.data());
        REQUIRE(d != nullptr);
        path = d;
    }
    temp_dir(const temp_dir&) = delete;
    temp_dir& operator=(const temp_dir&) = delete;
    ~temp_dir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
};

std::string this_host() {
    char host[256] = {0};
    REQUIRE(::gethostname(host, sizeof host - 1) == 0);
    return host;
}

cost_model model_of(const std::string& host, const std::string& library) {
    cost_model m;
    m.id = {host, "NVIDIA H100", library};
    m.set("nccl.allreduce.ring.simple.r8n1", time_table({{1024, 1e-5, 0}, {1 << 20, 1e-4, 0}}));
    return m;
}

}  // namespace

TEST_CASE("nccl model file: the default path names the host and nccl, under XDG_CACHE_HOME or HOME") {
    const std::string host = this_host();
    CHECK(nccl_model_identity().host == host);
    CHECK(nccl_model_identity().mpi == "nccl");
    const char* xdg[] = {"XDG_CACHE_HOME=/c", "HOME=/h"};
    CHECK(nccl_model_path("", xdg) == "/c/shunt/" + model_file_name({host, "", "nccl"}));
    const char* home[] = {"HOME=/h"};
    CHECK(nccl_model_path("", home) == "/h/.cache/shunt/" + model_file_name({host, "", "nccl"}));
    CHECK(nccl_model_path("/given.json", home) == "/given.json");
    const char* none[] = {"PATH=/bin"};
    CHECK(nccl_model_path("", none).empty());
    const auto r = load_nccl_model("", none);
    CHECK_FALSE(r.model);
    CHECK(r.missing);
}

TEST_CASE("nccl model file: identity checked at the default location only") {
    const temp_dir scratch;
    const std::string home_var = "HOME=" + scratch.path;
    const char* env[] = {home_var.c_str()};
    const std::string default_path = nccl_model_path("", env);
    REQUIRE(default_path.starts_with(scratch.path + "/.cache/shunt/model-"));

    // Missing: the normal, silent case.
    auto r = load_nccl_model("", env);
    CHECK_FALSE(r.model);
    CHECK(r.missing);

    save_model(model_of(this_host(), "nccl"), default_path);
    r = load_nccl_model("", env);
    REQUIRE(r.model);
    CHECK(r.model->find("nccl.allreduce.ring.simple.r8n1") != nullptr);

    // Another host's file, or an MPI model, copied to this host's default NCCL path: foreign.
    save_model(model_of("elsewhere", "nccl"), default_path);
    r = load_nccl_model("", env);
    CHECK_FALSE(r.model);
    CHECK_FALSE(r.missing);
    CHECK(r.problem.find("foreign") != std::string::npos);
    save_model(model_of(this_host(), "Open MPI v4.1.4"), default_path);
    CHECK_FALSE(load_nccl_model("", env).model);

    // A file SHUNT_MODEL names is taken whatever its identity.
    const std::string given = scratch.path + "/given.json";
    save_model(model_of("elsewhere", "Open MPI v4.1.4"), given);
    r = load_nccl_model(given, env);
    REQUIRE(r.model);
    CHECK(r.model->id.host == "elsewhere");

    // Bad files: a diagnosis, never a throw.
    std::ofstream(given) << "{\"schema\":\"shunt-model\",\"version\":1,\"identity\":{\"host\":\"h\",\"gpu\":\"g\","
                            "\"mpi\":\"nccl\"},\"tables\":{\"nccl.allreduce.ring.ll.r2n1\":[[1024,\"x\",0]]}}";
    r = load_nccl_model(given, env);
    CHECK_FALSE(r.model);
    CHECK(r.problem.find("corrupt") != std::string::npos);
    r = load_nccl_model(scratch.path + "/absent.json", env);
    CHECK_FALSE(r.model);
    CHECK(r.missing);
}
