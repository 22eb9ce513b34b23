// tests/unit/model/test_file.cpp: the model file: round trip, atomic write, corrupt, stale and
// foreign files, and its default path.
#include <doctest/doctest.h>

#include <shunt/model/file.hpp>

#include <sys/stat.h>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace {

/// A scratch directory under $TMPDIR (else /tmp), removed with everything in it at scope end.
struct temp_dir {
    std::string path;
    temp_dir() {
        const char* base = std::getenv("TMPDIR");
        std::string tmpl = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/shunt-model-test-XXXXXX";
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

void write_file(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

}  // namespace

using namespace shunt;

TEST_CASE("model file round trip, written atomically and readable by the user only") {
    const temp_dir scratch;
    const std::string path = scratch.path + "/sub/model.json";
    cost_model m;
    m.id = {"hostA", "none", "Open MPI v4.1.4"};
    m.set("copy.memcpy", time_table({{1024, 1e-7, 1e-9}, {1 << 20, 1e-4, 1e-6}}));
    save_model(m, path);
    struct stat st {};
    REQUIRE(::stat(path.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);
    const auto r = load_model(path, &m.id);
    REQUIRE(r.model);
    CHECK(r.problem.empty());
    CHECK(r.model->tables() == m.tables());
    CHECK(r.model->id == m.id);
}

TEST_CASE("missing, corrupt, stale and foreign model files are diagnosed, never fatal") {
    const temp_dir scratch;
    const std::string& dir = scratch.path;
    const model_identity me{"hostA", "none", "mpi"};

    auto missing = load_model(dir + "/nope.json", &me);
    CHECK_FALSE(missing.model);
    CHECK(missing.missing);

    write_file(dir + "/garbage.json", "{not json");
    auto garbage = load_model(dir + "/garbage.json", &me);
    CHECK_FALSE(garbage.model);
    CHECK_FALSE(garbage.missing);
    CHECK(garbage.problem.find("corrupt") != std::string::npos);

    write_file(dir + "/other.json", "{\"hello\": 1}");
    CHECK(load_model(dir + "/other.json", &me).problem.find("not a shunt model") != std::string::npos);

    write_file(dir + "/stale.json", "{\"schema\":\"shunt-model\",\"version\":0,\"identity\":{},\"tables\":{}}");
    CHECK(load_model(dir + "/stale.json", &me).problem.find("stale") != std::string::npos);

    write_file(
        dir + "/badentry.json",
        "{\"schema\":\"shunt-model\",\"version\":1,\"identity\":{\"host\":\"hostA\",\"gpu\":\"none\",\"mpi\":\"mpi\"},"
        "\"tables\":{\"copy.memcpy\":[[1024,-5,0]]}}");
    CHECK(load_model(dir + "/badentry.json", &me).problem.find("out-of-range") != std::string::npos);

    cost_model foreign;
    foreign.id = {"hostB", "none", "mpi"};
    save_model(foreign, dir + "/foreign.json");
    const auto f = load_model(dir + "/foreign.json", &me);
    CHECK_FALSE(f.model);
    CHECK(f.problem.find("foreign") != std::string::npos);
    CHECK(load_model(dir + "/foreign.json", nullptr).model);  // validation without identity
}

TEST_CASE("default model path follows XDG, then HOME, one file per host and MPI") {
    const model_identity id{"node-7", "none", "Open MPI v4.1.4"};
    CHECK(model_file_name(id) == "model-node-7-Open_MPI_v4.1.4.json");
    CHECK(default_model_path("/x/cache", "/home/u", id) == "/x/cache/shunt/model-node-7-Open_MPI_v4.1.4.json");
    CHECK(default_model_path(nullptr, "/home/u", id) == "/home/u/.cache/shunt/model-node-7-Open_MPI_v4.1.4.json");
    CHECK(default_model_path("relative", "/home/u", id) == "/home/u/.cache/shunt/model-node-7-Open_MPI_v4.1.4.json");
    CHECK(default_model_path(nullptr, nullptr, id).empty());
    CHECK(model_file_name({"a/b", "none", ""}) == "model-a_b-unknown.json");
    const char* env[] = {"HOME=/h", "XDG_CACHE_HOMEX=/no", "XDG_CACHE_HOME=/c"};
    CHECK(resolve_model_path("", env, id) == "/c/shunt/model-node-7-Open_MPI_v4.1.4.json");
    CHECK(resolve_model_path("/explicit.json", env, id) == "/explicit.json");
    CHECK(environment_lookup(env, "HOM") == nullptr);
}
