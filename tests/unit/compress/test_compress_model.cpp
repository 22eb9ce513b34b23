// tests/unit/compress/test_compress_model.cpp: the compressor tables of the cost model: names and their
// parsing, analytic defaults for every method and stage, measured tables taking over, the model file
// keeping them, the exact compressed size, and a quick measurement that grows with the size.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <shunt/model/compress.hpp>
#include <shunt/model/file.hpp>
#include <shunt/model/measure_compress.hpp>

#include <cstdint>
#include <string>
#include <vector>

using namespace shunt;

TEST_CASE("compress model: table names parse back; unknown names do not") {
    CHECK(compress_table(compress::method::int8, false, compress_stage::encode) == "compress.int8.cpu.encode");
    CHECK(compress_table(compress::method::top_k, true, compress_stage::decode) == "compress.topk.gpu.decode");
    int tables = 0;
    for (const compress::method m : compress::all_methods)
        for (const bool device : {false, true})
            for (const compress_stage s : compress_stages(m)) {
                const auto key = parse_compress_table(compress_table(m, device, s));
                REQUIRE(key.has_value());
                CHECK(key->method == m);
                CHECK(key->device == device);
                CHECK(key->stage == s);
                ++tables;
            }
    CHECK(tables == 2 * (7 * 2 + 3));  // combine for fp16, bf16 and random-k only
    CHECK_FALSE(parse_compress_table("compress.int8.cpu.combine").has_value());
    CHECK_FALSE(parse_compress_table("compress.int9.cpu.encode").has_value());
    CHECK_FALSE(parse_compress_table("pack.shunt.b8").has_value());
}

TEST_CASE("compress model: analytic defaults for every stage, growing with the size; measured tables win") {
    cost_model m;
    for (const compress::method c : compress::all_methods)
        for (const bool device : {false, true})
            for (const compress_stage s : compress_stages(c)) {
                CAPTURE(compress_table(c, device, s));
                const double small = predict_compress(m, c, device, s, 4096);
                const double big = predict_compress(m, c, device, s, 64 << 20);
                CHECK(small > 0);
                CHECK(big > 10 * small);
                CHECK(m.analytic(compress_table(c, device, s), 1 << 20) ==
                      doctest::Approx(predict_compress(m, c, device, s, 1 << 20)));
            }
    // The defaults rank the methods as the formats do: top-k is the slowest to compress on the host.
    CHECK(predict_compress(m, compress::method::top_k, false, compress_stage::encode, 16 << 20) >
          predict_compress(m, compress::method::fp16, false, compress_stage::encode, 16 << 20));
    const std::string name = compress_table(compress::method::int8, false, compress_stage::encode);
    m.set(name, time_table({{1024, 1e-6, 0}, {1 << 20, 1e-4, 0}}));
    CHECK(predict_compress(m, compress::method::int8, false, compress_stage::encode, 1 << 20) == doctest::Approx(1e-4));
    // The model file keeps the table.
    const auto back = model_from_json(model_to_json(m).dump(), nullptr);
    REQUIRE(back.model.has_value());
    CHECK(back.model->find(name) != nullptr);
    CHECK(predict_compress(*back.model, compress::method::int8, false, compress_stage::encode, 1 << 20) ==
          doctest::Approx(1e-4));
}

TEST_CASE("compress model: the compressed size is the format's") {
    for (const compress::method c : compress::all_methods) {
        const compress::params p = compress::defaults(c);
        CHECK(compressed_size(p, 4000.0) == static_cast<double>(compress::compressed_bytes(p, 1000)));
        CHECK(compressed_size(p, 4.0 * 12345) == static_cast<double>(compress::compressed_bytes(p, 12345)));
    }
}

TEST_CASE("compress model: a quick measurement of each host stage grows with the size") {
    const timing_policy quick{0, 3, 5, 20e-6, 0.002};
    const std::vector<double> sizes = {4096, 4 << 20};
    for (const compress::method c : compress::all_methods)
        for (const compress_stage s : compress_stages(c)) {
            CAPTURE(compress_table(c, false, s));
            const time_table t = measure_compress_table(compress_table(c, false, s), sizes, quick);
            REQUIRE(t.points().size() == 2);
            CHECK(t.points()[0].time > 0);
            CHECK(t.points()[1].time > 4 * t.points()[0].time);  // 1024 times the bytes
        }
    CHECK_THROWS_AS(measure_compress_table("compress.int8.gpu.encode", sizes, quick), error);
    CHECK_THROWS_AS(measure_compress_table("copy.memcpy", sizes, quick), error);
}
