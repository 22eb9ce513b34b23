// tests/unit/config/test_config.cpp: the SHUNT_* registry's strict parsers, warnings and log formatting (no MPI).
#include <doctest/doctest.h>

#include <shunt/config.hpp>
#include <shunt/log.hpp>

#include <string>
#include <vector>

using namespace shunt;

namespace {

config_snapshot parse(std::vector<const char*> env) { return parse_config(env); }

std::size_t index_of(std::string_view name) {
    for (std::size_t i = 0; i < config_variable_count; ++i)
        if (config_variables[i].name == name) return i;
    FAIL("no variable " << name);
    return 0;
}

template <class Kind>
bool accepts(std::string_view text) {
    typename Kind::value_type v{};
    return Kind::parse(text, v);
}

}  // namespace

TEST_CASE("every variable is SHUNT_-prefixed, documented, unique, and its default parses back to itself") {
    for (std::size_t i = 0; i < config_variable_count; ++i) {
        const auto& v = config_variables[i];
        CAPTURE(v.name);
        CHECK(v.name.substr(0, 6) == "SHUNT_");
        CHECK(!v.doc.empty());
        CHECK(!v.accepted().empty());
        for (std::size_t j = i + 1; j < config_variable_count; ++j) CHECK(config_variables[j].name != v.name);
        settings s;
        if (!v.default_text.empty()) {
            CHECK(v.parse_into(v.default_text, s));
            CHECK(v.format(s) == v.default_text);
        }
        CHECK(v.format(settings{}) == v.default_text);  // settings{} holds the defaults
    }
}

TEST_CASE("no SHUNT_* set: defaults, no warnings") {
    const auto c = parse({"PATH=/bin", "HOME=/root", "SHUNTX=1", "MY_SHUNT_LOG=debug"});
    CHECK(c.warnings.empty());
    CHECK_FALSE(c.values.disable);
    CHECK(c.values.report == report_mode::off);
    CHECK(c.values.pack == pack_choice::automatic);
    CHECK(c.values.log == log_spec::all(log_level::warn));
    CHECK_FALSE(c.values.log.verbose());
    for (const auto& raw : c.raw) CHECK_FALSE(raw.has_value());
}

TEST_CASE("flags accept exactly 1/0/true/false/yes/no/on/off, in any case") {
    using detail::flag_kind;
    for (const char* t : {"1", "true", "TRUE", "yes", "Yes", "on", "ON"}) {
        bool v = false;
        CHECK(flag_kind::parse(t, v));
        CHECK(v);
    }
    for (const char* f : {"0", "false", "no", "off", "Off"}) {
        bool v = true;
        CHECK(flag_kind::parse(f, v));
        CHECK_FALSE(v);
    }
    for (const char* bad : {"maybe", "2", "1 ", " 1", "01", "truex", "y", "", "-1"})
        CHECK_FALSE(accepts<flag_kind>(bad));
}

TEST_CASE("choices accept only their names") {
    report_mode r{};
    CHECK(detail::report_kind::parse("summary", r));
    CHECK(r == report_mode::summary);
    CHECK(detail::report_kind::parse("Rank", r));
    CHECK(r == report_mode::rank);
    for (const char* bad : {"7", "ranks", "", "off ", "summaryx"}) CHECK_FALSE(accepts<detail::report_kind>(bad));
    pack_choice p{};
    CHECK(detail::pack_kind::parse("host", p));
    CHECK(p == pack_choice::host);
    CHECK(detail::pack_kind::format(pack_choice::automatic) == "auto");
    CHECK(detail::pack_kind::parse("One-Shot", p));
    CHECK(p == pack_choice::one_shot);
    CHECK(detail::pack_kind::format(pack_choice::one_shot) == "one-shot");
    CHECK(detail::pack_kind::parse("staged", p));
    CHECK(p == pack_choice::staged);
    CHECK(detail::pack_kind::parse("device", p));
    CHECK(p == pack_choice::device);
    CHECK(detail::pack_kind::parse("MODEL", p));
    CHECK(p == pack_choice::model);
    CHECK(detail::pack_kind::format(pack_choice::model) == "model");
    for (const char* bad : {"oneshot", "one_shot", "gpu", "stage", "models"})
        CHECK_FALSE(accepts<detail::pack_kind>(bad));
    CHECK(detail::pack_kind::accepted() == "auto, library, host, device, one-shot, staged, model");
    CHECK(detail::report_kind::accepted() == "off, rank, summary");
}

TEST_CASE("SHUNT_LOG grammar") {
    using detail::log_kind;
    log_spec s;
    REQUIRE(log_kind::parse("info", s));
    CHECK(s == log_spec::all(log_level::info));
    CHECK(s.verbose());

    REQUIRE(log_kind::parse("debug:type,pack", s));
    CHECK(s.enabled(log_level::debug, log_category::type));
    CHECK(s.enabled(log_level::debug, log_category::pack));
    CHECK_FALSE(s.enabled(log_level::trace, log_category::pack));
    CHECK_FALSE(s.enabled(log_level::info, log_category::init));
    CHECK(s.enabled(log_level::warn, log_category::init));  // warnings stay on elsewhere

    REQUIRE(log_kind::parse("decide", s));  // categories alone: debug
    CHECK(s.enabled(log_level::debug, log_category::decide));
    CHECK_FALSE(s.enabled(log_level::debug, log_category::type));

    REQUIRE(log_kind::parse("trace:all", s));
    CHECK(s == log_spec::all(log_level::trace));
    REQUIRE(log_kind::parse("error:pack", s));  // a level below warn lowers everything
    CHECK(s == log_spec::all(log_level::error));
    REQUIRE(log_kind::parse("off", s));
    CHECK_FALSE(s.enabled(log_level::error, log_category::config));

    for (const char* bad : {"loud", "debug:", ":type", "debug:type,,pack", "type,bogus", "info:all:x", "", "info,",
                            "warning", "debug type"})
        CHECK_FALSE(accepts<log_kind>(bad));

    for (const char* text : {"info", "debug:type,pack", "decide", "trace:config,report", "off", "warn"}) {
        CAPTURE(text);
        REQUIRE(log_kind::parse(text, s));
        log_spec back;
        REQUIRE(log_kind::parse(log_kind::format(s), back));
        CHECK(back == s);
    }
    REQUIRE(log_kind::parse("decide", s));
    CHECK(log_kind::format(s) == "debug:decide");
}

TEST_CASE("SHUNT_COMPRESS: off, auto, or a list of compressor names") {
    using detail::compress_kind;
    CHECK_FALSE(parse({}).values.compress.on);  // lossy only by consent
    compress_consent c;
    REQUIRE(compress_kind::parse("auto", c));
    CHECK((c.on && c.methods == compress_auto_methods));
    REQUIRE(compress_kind::parse("INT8,fp16", c));
    CHECK((c.on && c.methods == 0b101));
    CHECK(compress_kind::format(c) == "fp16,int8");
    REQUIRE(compress_kind::parse("sign", c));
    CHECK(c.methods == 1u << 6);
    REQUIRE(compress_kind::parse("Off", c));
    CHECK_FALSE(c.on);
    CHECK(compress_kind::format(c) == "off");
    for (const char* bad : {"zip", "fp16,,int8", "fp16,", ",int8", "fp32", "auto,int8", "on"}) {
        CAPTURE(bad);
        CHECK_FALSE(accepts<compress_kind>(bad));
    }
    const config_snapshot s = parse({"SHUNT_COMPRESS=int4,topk", "SHUNT_COMPRESS_WARMUP=0",
                                     "SHUNT_COMPRESS_MIN_BYTES=1M", "SHUNT_COMPRESS_CHECK=10"});
    CHECK(s.warnings.empty());
    CHECK(s.values.compress.methods == 0b101000);
    CHECK(s.values.compress_warmup == 0);
    CHECK(s.values.compress_min_bytes == 1 << 20);
    CHECK(s.values.compress_check == 10);
    CHECK(parse({"SHUNT_COMPRESS_WARMUP=-1"}).warnings.size() == 1);
}

TEST_CASE("integers: range, binary suffixes, overflow and junk rejected") {
    using k = detail::integer_kind<0, (std::int64_t{1} << 40)>;
    std::int64_t v = 0;
    CHECK(k::parse("0", v));
    CHECK(v == 0);
    CHECK(k::parse("42", v));
    CHECK(v == 42);
    CHECK(k::parse("4K", v));
    CHECK(v == 4096);
    CHECK(k::parse("3m", v));
    CHECK(v == 3 << 20);
    CHECK(k::parse("1T", v));
    CHECK(v == std::int64_t{1} << 40);
    for (const char* bad : {"-1", "2T", "+5", "1KK", "8E", "12 ", "0x10", "", "K", "99999999999999999999",
                            "9223372036854775807", "9007199254740992K"})
        CHECK_FALSE(accepts<k>(bad));
    using wide = detail::integer_kind<-5, INT64_MAX>;
    CHECK(wide::parse("9223372036854775807", v));
    CHECK(v == INT64_MAX);
    CHECK_FALSE(accepts<wide>("9223372036854775808"));
    CHECK(wide::parse("-5", v));
    CHECK_FALSE(accepts<wide>("-6"));
}

TEST_CASE("a bad value: one warning naming the variable, the value and what is accepted; default kept") {
    const auto c = parse({"SHUNT_REPORT=7", "SHUNT_DISABLE=maybe", "SHUNT_LOG=loud", "SHUNT_PACK=host"});
    REQUIRE(c.warnings.size() == 3);
    CHECK(c.warnings[0] == "SHUNT_REPORT=\"7\" is not valid; accepted: off, rank, summary; using the default \"off\"");
    CHECK(c.warnings[1].find("SHUNT_DISABLE=\"maybe\" is not valid; accepted: 1, 0, true") == 0);
    CHECK(c.warnings[2].find("SHUNT_LOG=\"loud\" is not valid; accepted: LEVEL") == 0);
    CHECK(c.values.report == report_mode::off);
    CHECK_FALSE(c.values.disable);
    CHECK(c.values.log == log_spec::all(log_level::warn));
    CHECK(c.values.pack == pack_choice::host);
    CHECK(c.rejected[index_of("SHUNT_REPORT")]);
    CHECK_FALSE(c.rejected[index_of("SHUNT_PACK")]);
    CHECK(c.raw[index_of("SHUNT_REPORT")] == "7");
}

TEST_CASE("unprintable and very long values are shown escaped and cut") {
    const std::string longer(200, 'x');
    const std::string entry = "SHUNT_PACK=" + longer;
    const auto c = parse({"SHUNT_REPORT=a\nb\x01", entry.c_str()});
    REQUIRE(c.warnings.size() == 2);
    CHECK(c.warnings[0].find("SHUNT_REPORT=\"a\\x0ab\\x01\" is not valid") == 0);
    CHECK(c.warnings[0].find('\n') == std::string::npos);
    CHECK(c.warnings[1].find("...\" is not valid") != std::string::npos);
    CHECK(c.warnings[1].size() < 200);
}

TEST_CASE("empty means unset; the first of duplicate entries wins") {
    auto c = parse({"SHUNT_REPORT=", "SHUNT_PACK=library", "SHUNT_PACK=host"});
    CHECK(c.warnings.empty());
    CHECK(c.values.report == report_mode::off);
    CHECK(c.values.pack == pack_choice::library);
}

TEST_CASE("unknown SHUNT_* names: one warning each, with the closest name when it is a likely typo") {
    const auto c = parse({"SHUNT_DISABEL=1", "SHUNT_REPROT=rank", "shunt_log=info", "SHUNT_FROBNICATE=1", "SHUNT_=1",
                          "SHUNT_DISABEL=0"});
    REQUIRE(c.warnings.size() == 5);
    CHECK(c.warnings[0] ==
          "SHUNT_DISABEL is not a shunt variable (did you mean SHUNT_DISABLE?); it is ignored (shunt-info --config "
          "lists them all)");
    CHECK(c.warnings[1].find("(did you mean SHUNT_REPORT?)") != std::string::npos);
    CHECK(c.warnings[2].find("shunt_log is not a shunt variable (did you mean SHUNT_LOG?)") == 0);
    CHECK(c.warnings[3].find("did you mean") == std::string::npos);
    CHECK(c.warnings[4].find("SHUNT_ is not a shunt variable") == 0);
    CHECK_FALSE(c.values.disable);  // a misspelt name changes nothing
}

TEST_CASE("log lines: one prefix per line, level and category named") {
    CHECK(detail::format_log_text(3, log_level::warn, log_category::pack, "a\nb") ==
          "shunt[rank 3]: warning: pack: a\nshunt[rank 3]: b\n");
    CHECK(detail::format_log_text(0, log_level::info, log_category::decide, "x") == "shunt[rank 0]: decide: x\n");
    CHECK(detail::format_log_text(1, log_level::error, log_category::init, "e\n") == "shunt[rank 1]: error: init: e\n");
    const std::string before = detail::format_log_text(-1, log_level::debug, log_category::type, "t");
    CHECK(before.find("shunt[pid ") == 0);
    CHECK(before.find("]: type: t\n") != std::string::npos);
}
