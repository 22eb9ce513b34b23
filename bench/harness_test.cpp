// bench/harness_test.cpp: unit tests of the benchmark harness: size and list parsing, the command line, timing, CSV.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "harness.hpp"

#include <doctest/doctest.h>

#include <unistd.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

using namespace shunt::bench;

namespace {

/// Parses `args` (after the program name) with a cli that knows one flag and one valued option.
options parse(std::vector<std::string> args, bool* quick = nullptr, std::string* blocks = nullptr) {
    cli c("bench-test", "test");
    c.flag("--quick", "quick", [=] {
        if (quick) *quick = true;
    });
    c.option("--blocks", "LIST", "blocks", [=](const std::string& v) {
        parse_size_list(v, "--blocks");
        if (blocks) *blocks = v;
    });
    args.insert(args.begin(), "bench-test");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    return c.parse_or_throw(static_cast<int>(argv.size()), argv.data());
}

std::string message_of(std::vector<std::string> args) {
    try {
        parse(std::move(args));
    } catch (const usage_error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("parse_size reads byte counts with binary suffixes") {
    CHECK(parse_size("24", "--x") == 24);
    CHECK(parse_size("512B", "--x") == 512);
    CHECK(parse_size("64K", "--x") == 65536);
    CHECK(parse_size("64k", "--x") == 65536);
    CHECK(parse_size("64KiB", "--x") == 65536);
    CHECK(parse_size("16M", "--x") == 16 << 20);
    CHECK(parse_size("2G", "--x") == std::int64_t{2} << 30);
    CHECK(parse_size("1T", "--x") == std::int64_t{1} << 40);
    CHECK(parse_size("0", "--x", 0) == 0);
}

TEST_CASE("parse_size rejects what is not a byte count, naming the option and the value") {
    CHECK_THROWS_WITH_AS(parse_size("", "--sizes"), doctest::Contains("--sizes: '' is not a byte count"), usage_error);
    CHECK_THROWS_WITH_AS(parse_size("abc", "--sizes"), doctest::Contains("'abc' is not a byte count"), usage_error);
    CHECK_THROWS_WITH_AS(parse_size("-4", "--sizes"), doctest::Contains("'-4'"), usage_error);
    CHECK_THROWS_WITH_AS(parse_size("4X", "--sizes"), doctest::Contains("unknown suffix"), usage_error);
    CHECK_THROWS_WITH_AS(parse_size("4KK", "--sizes"), doctest::Contains("unknown suffix"), usage_error);
    CHECK_THROWS_WITH_AS(parse_size("4 K", "--sizes"), doctest::Contains("unknown suffix"), usage_error);
    CHECK_THROWS_WITH_AS(parse_size("99999999999T", "--sizes"), doctest::Contains("too large"), usage_error);
    CHECK_THROWS_WITH_AS(parse_size("99999999999999999999", "--sizes"), doctest::Contains("too large"), usage_error);
    CHECK_THROWS_WITH_AS(parse_size("0", "--sizes"), doctest::Contains("below the minimum of 1"), usage_error);
}

TEST_CASE("parse_size_list expands lists and ranges in order, without repeats") {
    using v = std::vector<std::int64_t>;
    CHECK(parse_size_list("64K,1M,16M", "--sizes") == v{65536, 1 << 20, 16 << 20});
    CHECK(parse_size_list("1K:8K", "--sizes") == v{1024, 2048, 4096, 8192});
    CHECK(parse_size_list("1K:9K", "--sizes") == v{1024, 2048, 4096, 8192});
    CHECK(parse_size_list("1:100:x10", "--sizes") == v{1, 10, 100});
    CHECK(parse_size_list("8:32:+8", "--sizes") == v{8, 16, 24, 32});
    CHECK(parse_size_list("4,1:4,2", "--sizes") == v{4, 1, 2});
    CHECK(parse_size_list("3:3", "--sizes") == v{3});
    CHECK(parse_size_list("4611686018427387904:9223372036854775807", "--sizes").size() == 1);  // no overflow loop
}

TEST_CASE("parse_size_list rejects empty items, empty ranges, bad steps and huge expansions") {
    CHECK_THROWS_WITH_AS(parse_size_list("", "--sizes"), doctest::Contains("empty list"), usage_error);
    CHECK_THROWS_WITH_AS(parse_size_list("1K,,2K", "--sizes"), doctest::Contains("empty item"), usage_error);
    CHECK_THROWS_WITH_AS(parse_size_list("1K,", "--sizes"), doctest::Contains("empty item"), usage_error);
    CHECK_THROWS_WITH_AS(parse_size_list("8K:1K", "--sizes"), doctest::Contains("is empty (LO > HI)"), usage_error);
    CHECK_THROWS_WITH_AS(parse_size_list("1:8:2", "--sizes"), doctest::Contains("must be xF"), usage_error);
    CHECK_THROWS_WITH_AS(parse_size_list("1:8:x1", "--sizes"), doctest::Contains("below the minimum of 2"),
                         usage_error);
    CHECK_THROWS_WITH_AS(parse_size_list("1:8:+0", "--sizes"), doctest::Contains("below the minimum of 1"),
                         usage_error);
    CHECK_THROWS_WITH_AS(parse_size_list("1:1G:+1", "--sizes"), doctest::Contains("more than 100000 values"),
                         usage_error);
    CHECK_THROWS_WITH_AS(parse_size_list("1:x:+1", "--sizes"), doctest::Contains("'x' is not a byte count"),
                         usage_error);
}

TEST_CASE("parse_int and parse_seconds are strict") {
    CHECK(parse_int("15", "--trials", 1, 100) == 15);
    CHECK_THROWS_WITH_AS(parse_int("0", "--trials", 1, 100), "--trials: expected an integer from 1 to 100, got '0'",
                         usage_error);
    CHECK_THROWS_AS(parse_int("15x", "--trials", 1, 100), usage_error);
    CHECK_THROWS_AS(parse_int("", "--trials", 1, 100), usage_error);
    CHECK(parse_seconds("0.25", "--time") == 0.25);
    CHECK_THROWS_AS(parse_seconds("0", "--time"), usage_error);
    CHECK_THROWS_AS(parse_seconds("-1", "--time"), usage_error);
    CHECK_THROWS_AS(parse_seconds("1s", "--time"), usage_error);
    CHECK_THROWS_AS(parse_seconds("inf", "--time"), usage_error);
}

TEST_CASE("format_bytes is exact, in the largest unit that needs at most two decimals") {
    CHECK(format_bytes(0) == "0B");
    CHECK(format_bytes(24) == "24B");
    CHECK(format_bytes(1023) == "1023B");
    CHECK(format_bytes(1072) == "1072B");
    CHECK(format_bytes(1280) == "1.25K");
    CHECK(format_bytes(std::int64_t{8} << 30) == "8G");
    CHECK(format_bytes(65536) == "64K");
    CHECK(format_bytes(393216) == "384K");
    CHECK(format_bytes(1536 << 10) == "1.5M");
    CHECK(format_bytes(16 << 20) == "16M");
    CHECK(format_bytes(std::int64_t{3} << 30) == "3G");
}

TEST_CASE("cli: the shared options") {
    const options d = parse({});
    CHECK(d.sizes.empty());
    CHECK(d.reps == 0);
    CHECK(d.trials == 15);
    CHECK_FALSE(d.csv);
    CHECK(d.selected("anything"));

    const options o = parse({"--sizes", "1K,2K", "--reps=7", "--warmup", "0", "--trials", "3", "--time", "0.5",
                             "--filter", "^pack/vector", "--list"});
    CHECK(o.sizes == std::vector<std::int64_t>{1024, 2048});
    CHECK(o.reps == 7);
    CHECK(o.warmup == 0);
    CHECK(o.trials == 3);
    CHECK(o.time_s == 0.5);
    CHECK(o.list);
    CHECK(o.selected("pack/vector/b8/s16/1M"));
    CHECK_FALSE(o.selected("unpack/vector/b8/s16/1M"));
    CHECK(o.was_given("--sizes"));
    CHECK_FALSE(o.was_given("--csv"));
    CHECK(parse({"--reps", "auto"}).reps == 0);
}

TEST_CASE("cli: --csv takes an optional file; alone or '-' means stdout") {
    CHECK(parse({"--csv"}).csv);
    CHECK(parse({"--csv"}).csv_path.empty());
    CHECK(parse({"--csv", "-"}).csv_path.empty());
    CHECK(parse({"--csv=-"}).csv_path.empty());
    CHECK(parse({"--csv", "out.csv"}).csv_path == "out.csv");
    CHECK(parse({"--csv=out.csv"}).csv_path == "out.csv");
    const options o = parse({"--csv", "--trials", "2"});
    CHECK((o.csv && o.csv_path.empty() && o.trials == 2));
}

TEST_CASE("cli: benchmark-specific options") {
    bool quick = false;
    std::string blocks;
    parse({"--quick", "--blocks", "1:512"}, &quick, &blocks);
    CHECK(quick);
    CHECK(blocks == "1:512");
    CHECK(message_of({"--quick=1"}) == "--quick takes no value");
    CHECK(message_of({"--blocks", "0"}).find("--blocks: '0' is below the minimum") == 0);
}

TEST_CASE("cli: errors are clear") {
    CHECK(message_of({"--bogus"}) == "unknown option '--bogus'");
    CHECK(message_of({"stray"}) == "unexpected argument 'stray'");
    CHECK(message_of({"--trials"}) == "--trials needs a value");
    CHECK(message_of({"--trials", "2", "--trials", "3"}) == "--trials given twice");
    CHECK(message_of({"--list=yes"}) == "--list takes no value");
    CHECK(message_of({"--trials", "many"}) == "--trials: expected an integer from 1 to 1000000, got 'many'");
    CHECK(message_of({"--filter", "("}).find("--filter: '(' is not a valid regular expression") == 0);
    CHECK(message_of({"--csv="}).find("--csv= needs a file name") == 0);
    CHECK(message_of({"--sizes", "1K:"}).find("--sizes: '' is not a byte count") == 0);
}

TEST_CASE("measure interleaves the variants and reports the best per-call time") {
    options o;
    o.trials = 6;
    o.reps = 4;
    o.warmup = 1;
    std::vector<int> order;
    int calls[2] = {0, 0};
    const std::function<void()> variants[] = {[&] { ++calls[0], order.push_back(0); },
                                              [&] { ++calls[1], order.push_back(1); }};
    const auto t = measure(variants, o);
    REQUIRE(t.size() == 2);
    for (const auto& x : t) {
        CHECK(x.trials == 6);
        CHECK(x.reps == 4);
        CHECK(x.best_s > 0);
        CHECK(x.best_s <= x.median_s);
    }
    CHECK(calls[0] == 1 + 6 * 4);
    CHECK(calls[1] == 1 + 6 * 4);

    // After the warm-up (0, 1): every trial runs each variant's reps in a row, each variant once.
    REQUIRE(order.size() == 2 + 48);
    CHECK(order[0] == 0);
    CHECK(order[1] == 1);
    for (int trial = 0; trial < 6; ++trial) {
        const std::size_t at = 2 + static_cast<std::size_t>(trial) * 8;
        for (std::size_t r = 1; r < 4; ++r) {
            CHECK(order[at + r] == order[at]);
            CHECK(order[at + 4 + r] == order[at + 4]);
        }
        CHECK(order[at] != order[at + 4]);
    }

    // With --reps fixed, --warmup 0 means no untimed call at all.
    o.warmup = 0;
    o.trials = 2;
    calls[0] = calls[1] = 0;
    measure(variants, o);
    CHECK(calls[0] == 2 * 4);
}

TEST_CASE("measure balances the order: each variant first, and right after each other one, equally often") {
    // For n variants a cycle is n trials (2n for odd n); over whole cycles every ordered pair of
    // neighbours within a trial occurs once per n trials.
    for (const int n : {2, 3, 4, 5, 7, 9, 11}) {
        CAPTURE(n);
        const int cycle = n % 2 == 1 ? 2 * n : n, cycles = 3;
        options o;
        o.trials = cycle * cycles;
        o.reps = 1;
        o.warmup = 0;
        std::vector<int> order;
        std::vector<std::function<void()>> variants;
        for (int v = 0; v < n; ++v) variants.push_back([&order, v] { order.push_back(v); });
        measure(variants, o);
        REQUIRE(order.size() == static_cast<std::size_t>(o.trials * n));
        CHECK(trial_order(static_cast<std::size_t>(n)).cycle() == static_cast<std::size_t>(cycle));
        std::vector<int> first(n, 0);
        std::vector<std::vector<int>> after(n, std::vector<int>(n, 0));
        for (int trial = 0; trial < o.trials; ++trial) {
            const int* t = &order[static_cast<std::size_t>(trial * n)];
            std::vector<int> seen(n, 0);
            for (int j = 0; j < n; ++j) ++seen[t[j]];
            CHECK(std::count(seen.begin(), seen.end(), 1) == n);  // a permutation
            ++first[t[0]];
            for (int j = 1; j < n; ++j) ++after[t[j]][t[j - 1]];
        }
        for (int v = 0; v < n; ++v) {
            CHECK(first[v] == cycles * cycle / n);
            for (int w = 0; w < n; ++w)
                if (w != v) CHECK(after[v][w] == cycles * cycle / n);  // v ran right after w
        }
    }
}

TEST_CASE("measure stops at the time budget after 3 trials, and calibrates reps") {
    options o;
    o.trials = 1000;
    o.time_s = 0.05;
    o.warmup = 1;
    const std::function<void()> slow[] = {[] { usleep(5000); }};
    const auto t = measure(slow, o);
    CHECK(t[0].trials >= 3);
    CHECK(t[0].trials < 1000);
    CHECK(t[0].reps == 1);  // 5 ms per call is longer than a 1 ms trial
    CHECK(t[0].best_s >= 0.005);

    volatile int sink = 0;
    const std::function<void()> fast[] = {[&] { sink = sink + 1; }};
    o.trials = 3;
    CHECK(measure(fast, o)[0].reps > 100);
}

TEST_CASE("table writes CSV rows with raw values") {
    char name[] = "/tmp/shunt-bench-test-XXXXXX";
    const int fd = mkstemp(name);
    REQUIRE(fd >= 0);
    close(fd);
    {
        options o = parse({"--csv", name});
        table t({{"op", 4, "op", true}, {"object", 6, "object_bytes"}, {"GB/s", 6, "gbs"}}, o);
        t.row({text_cell("pack"), bytes_cell(1536 << 10), gbs_cell(2'000'000'000, 0.5)});
        CHECK_THROWS_AS(t.row({text_cell("short")}), shunt::error);
    }
    std::ifstream in(name);
    std::stringstream s;
    s << in.rdbuf();
    CHECK(s.str() == "op,object_bytes,gbs\npack,1572864,4\n");
    std::remove(name);
    CHECK_THROWS_AS(table({{"op", 4, "op"}}, parse({"--csv", "/nonexistent-dir/x.csv"})), shunt::error);
}

TEST_CASE("parse_link_rate reads tc's rates (SI, bits or bytes) and plain Gbit/s") {
    CHECK(parse_link_rate("1gbit", "--link") == doctest::Approx(1e9));
    CHECK(parse_link_rate("500mbit", "--link") == doctest::Approx(5e8));
    CHECK(parse_link_rate("2.5gbit", "--link") == doctest::Approx(2.5e9));
    CHECK(parse_link_rate("125mbps", "--link") == doctest::Approx(1e9));
    CHECK(parse_link_rate("800bit", "--link") == doctest::Approx(800));
    CHECK(parse_link_rate("0.5", "--link") == doctest::Approx(5e8));
    for (const char* bad : {"", "gbit", "1 gbit", "1Gbyte", "-1gbit", "0", "1gbitx", "nan"})
        CHECK_THROWS_AS(parse_link_rate(bad, "--link"), usage_error);
}
