// bench/harness.hpp: the one command line, timing method and table/CSV output shared by shunt's microbenchmarks.
#pragma once

#include <shunt/errors.hpp>

#include <dlfcn.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <regex>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shunt::bench {

/// The shared object that defines the function at `fn`, or "?" when dladdr cannot tell.
inline std::string object_of(void* fn) {
    Dl_info info{};
    return dladdr(fn, &info) != 0 && info.dli_fname ? info.dli_fname : "?";
}

/// True when `shim` (the MPI_ function as this program calls it) is shunt's and not the
/// library's `real` (its PMPI_ name); else says on stderr that `program`'s shunt column would
/// measure the library, and how to build or run it instead.
inline bool calls_shunt(const char* program, const char* call, void* shim, void* real) {
    if (shim != real && object_of(shim) != object_of(real)) return true;
    std::fprintf(stderr,
                 "%s: %s resolves to the MPI library (%s), not to shunt's shims, so the shunt column would\n"
                 "measure the library. Build %s linked with libshunt (as bench/meson.build does) or run it with\n"
                 "LD_PRELOAD=libshunt.so.\n",
                 program, call, object_of(real).c_str(), program);
    return false;
}

/// A bad command line. Its message names the option, the value and what is accepted.
class usage_error : public error {
public:
    using error::error;
};

/// Parses a byte count: digits with an optional binary suffix K, M, G or T (case-insensitive,
/// optionally followed by "i" and/or "B": 64K = 64KiB = 65536), or a plain count ending in "B".
/// Throws usage_error on anything else, on overflow, and below `min`.
inline std::int64_t parse_size(std::string_view text, std::string_view what, std::int64_t min = 1) {
    auto fail = [&](const char* why) -> std::int64_t {
        throw usage_error(std::string(what) + ": '" + std::string(text) + "' " + why +
                          " (expected a byte count such as 24, 512B, 64K, 16M or 1G; K = 1024)");
    };
    std::int64_t value = 0;
    const char* first = text.data();
    const char* last = text.data() + text.size();
    auto [p, ec] = std::from_chars(first, last, value);
    if (ec == std::errc::result_out_of_range) return fail("is too large");
    if (ec != std::errc() || p == first) return fail("is not a byte count");
    std::string_view rest(p, static_cast<std::size_t>(last - p));
    int shift = 0;
    if (!rest.empty()) {
        switch (rest.front()) {
            case 'k':
            case 'K': shift = 10; break;
            case 'm':
            case 'M': shift = 20; break;
            case 'g':
            case 'G': shift = 30; break;
            case 't':
            case 'T': shift = 40; break;
            default: break;
        }
        if (shift != 0) {
            rest.remove_prefix(1);
            if (!rest.empty() && rest.front() == 'i') rest.remove_prefix(1);
        }
        if (!rest.empty() && (rest.front() == 'B' || rest.front() == 'b')) rest.remove_prefix(1);
        if (!rest.empty()) return fail("has an unknown suffix");
    }
    if (shift != 0 && value > (std::numeric_limits<std::int64_t>::max() >> shift)) return fail("is too large");
    value <<= shift;
    if (value < min) {
        throw usage_error(std::string(what) + ": '" + std::string(text) + "' is below the minimum of " +
                          std::to_string(min));
    }
    return value;
}

/// Parses a comma-separated list of byte counts and ranges. A range is LO:HI (LO, 2 LO, 4 LO, ...
/// up to HI), LO:HI:xF (multiplying by F >= 2) or LO:HI:+S (adding S >= 1). Keeps the order
/// given, drops repeats. Throws usage_error on an empty item, an empty range, or more than
/// 100000 values.
inline std::vector<std::int64_t> parse_size_list(std::string_view text, std::string_view what, std::int64_t min = 1) {
    constexpr std::size_t max_values = 100000;
    std::vector<std::int64_t> out;
    std::set<std::int64_t> seen;
    auto add = [&](std::int64_t v) {
        if (seen.insert(v).second) out.push_back(v);
        if (out.size() > max_values)
            throw usage_error(std::string(what) + ": '" + std::string(text) + "' expands to more than " +
                              std::to_string(max_values) + " values");
    };
    if (text.empty()) throw usage_error(std::string(what) + ": empty list");
    std::size_t start = 0;
    while (start <= text.size()) {
        const std::size_t comma = std::min(text.find(',', start), text.size());
        const std::string_view item = text.substr(start, comma - start);
        if (item.empty()) throw usage_error(std::string(what) + ": empty item in '" + std::string(text) + "'");
        const std::size_t c1 = item.find(':');
        if (c1 == std::string_view::npos) {
            add(parse_size(item, what, min));
        } else {
            const std::size_t c2 = item.find(':', c1 + 1);
            const std::int64_t lo = parse_size(item.substr(0, c1), what, min);
            const std::int64_t hi =
                parse_size(item.substr(c1 + 1, c2 == std::string_view::npos ? item.npos : c2 - c1 - 1), what, min);
            if (lo > hi)
                throw usage_error(std::string(what) + ": range '" + std::string(item) + "' is empty (LO > HI)");
            bool multiply = true;
            std::int64_t step = 2;
            if (c2 != std::string_view::npos) {
                const std::string_view s = item.substr(c2 + 1);
                if (s.size() < 2 || (s.front() != 'x' && s.front() != '+'))
                    throw usage_error(std::string(what) + ": range step '" + std::string(s) + "' in '" +
                                      std::string(item) + "' must be xF (multiply, F >= 2) or +S (add, S >= 1)");
                multiply = s.front() == 'x';
                step = parse_size(s.substr(1), what, multiply ? 2 : 1);
            }
            for (std::int64_t v = lo; v <= hi;) {
                add(v);
                std::int64_t next = 0;
                const bool overflow =
                    multiply ? __builtin_mul_overflow(v, step, &next) : __builtin_add_overflow(v, step, &next);
                if (overflow) break;
                v = next;
            }
        }
        start = comma + 1;
    }
    return out;
}

/// Parses a whole decimal integer in [min, max]; throws usage_error otherwise.
inline std::int64_t parse_int(std::string_view text, std::string_view what, std::int64_t min, std::int64_t max) {
    std::int64_t value = 0;
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || p != text.data() + text.size() || value < min || value > max)
        throw usage_error(std::string(what) + ": expected an integer from " + std::to_string(min) + " to " +
                          std::to_string(max) + ", got '" + std::string(text) + "'");
    return value;
}

/// Parses a positive number of seconds (decimal, e.g. 0.5); throws usage_error otherwise.
inline double parse_seconds(std::string_view text, std::string_view what) {
    double value = 0;
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || p != text.data() + text.size() || !(value > 0) || !std::isfinite(value))
        throw usage_error(std::string(what) + ": expected a positive number of seconds, got '" + std::string(text) +
                          "'");
    return value;
}

/// Parses a link rate as tc writes it (SI units: 1gbit, 500mbit, 2.5gbit, 100kbit, 800bit; in
/// bytes: 125mbps, 1gbps) or a plain number of Gbit/s (1, 0.5) into bits per second; throws
/// usage_error otherwise.
inline double parse_link_rate(std::string_view text, std::string_view what) {
    double value = 0;
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    const std::string_view unit(p, static_cast<std::size_t>(text.data() + text.size() - p));
    static constexpr std::pair<std::string_view, double> units[] = {
        {"", 1e9},  {"bit", 1},    {"kbit", 1e3}, {"mbit", 1e6}, {"gbit", 1e9}, {"tbit", 1e12},
        {"bps", 8}, {"kbps", 8e3}, {"mbps", 8e6}, {"gbps", 8e9}, {"tbps", 8e12}};
    if (ec == std::errc() && value > 0 && std::isfinite(value))
        for (const auto& [name, scale] : units)
            if (unit == name) return value * scale;
    throw usage_error(std::string(what) + ": expected a rate such as 1gbit, 500mbit or 125mbps, got '" +
                      std::string(text) + "'");
}

/// Formats a byte count exactly, in the largest binary unit that needs at most two decimals:
/// 24B, 1072B, 64K, 1.5M, 16M.
inline std::string format_bytes(std::int64_t n) {
    static constexpr const char* units[] = {"B", "K", "M", "G", "T"};
    for (int u = 4; u > 0; --u) {
        const std::int64_t unit = std::int64_t{1} << (10 * u);
        if (n < unit) continue;
        for (int decimals = 0; decimals <= 2; ++decimals) {
            const std::int64_t scale = decimals == 0 ? 1 : decimals == 1 ? 10 : 100;
            if (n > std::numeric_limits<std::int64_t>::max() / scale || (n * scale) % unit != 0) continue;
            char buf[48];
            std::snprintf(buf, sizeof buf, "%.*f%s", decimals, static_cast<double>(n) / static_cast<double>(unit),
                          units[u]);
            return buf;
        }
    }
    return std::to_string(n) + units[0];
}

/// What every benchmark accepts; filled by cli::parse.
struct options {
    std::vector<std::int64_t> sizes;  ///< --sizes; empty: the benchmark's own defaults
    std::int64_t reps = 0;  ///< --reps: calls per timed trial; 0 calibrates each variant
    int warmup = 2;  ///< --warmup: untimed calls of each variant before its trials
        ///< (one at least when --reps is calibrated)
    int trials = 15;  ///< --trials: interleaved trials of each variant (most)
    double time_s = 1.0;  ///< --time: a measurement stops adding trials past this
    bool csv = false;  ///< --csv given
    std::string csv_path;  ///< --csv FILE; empty with csv: CSV replaces the table on stdout
    bool list = false;  ///< --list: print the row names and exit
    std::set<std::string, std::less<>> given;  ///< the options present on the command line

    /// True when the option (e.g. "--trials") was on the command line.
    bool was_given(std::string_view name) const { return given.find(name) != given.end(); }
    /// Sets --filter: an ECMAScript regex searched anywhere in a row's name; "" selects all.
    /// Throws usage_error when it does not compile.
    void set_filter(const std::string& regex) {
        try {
            filter_ = std::regex(regex, std::regex::ECMAScript);
        } catch (const std::regex_error& e) {
            throw usage_error("--filter: '" + regex + "' is not a valid regular expression (" + e.what() + ")");
        }
        filtered_ = !regex.empty();
    }
    /// True when the row `name` passes --filter.
    bool selected(const std::string& name) const { return !filtered_ || std::regex_search(name, filter_); }

private:
    std::regex filter_;
    bool filtered_ = false;
};

/// The command line of one benchmark: the shared options above plus the benchmark's own.
/// Parsing is strict: unknown options, missing or malformed values and repeats are errors.
class cli {
public:
    /// `program` names the executable in messages; `summary` opens --help.
    cli(std::string program, std::string summary) : program_(std::move(program)), summary_(std::move(summary)) {}

    /// A benchmark-specific switch without a value.
    void flag(std::string name, std::string help, std::function<void()> on) {
        own_.push_back({std::move(name), {}, std::move(help), [f = std::move(on)](const std::string&) { f(); }});
    }
    /// A benchmark-specific option taking a value (`--name VALUE` or `--name=VALUE`); `on` throws
    /// usage_error for a bad value.
    void option(std::string name, std::string metavar, std::string help, std::function<void(const std::string&)> on) {
        own_.push_back({std::move(name), std::move(metavar), std::move(help), std::move(on)});
    }
    /// Text appended to --help after the option list (what the rows are, defaults).
    void epilog(std::string text) { epilog_ = std::move(text); }
    /// This benchmark's defaults of --trials and --time (shown in --help).
    void trial_defaults(int trials, double time_s) {
        defaults_.trials = trials;
        defaults_.time_s = time_s;
    }

    /// Parses argv. Prints --help to stdout and exits 0; prints a usage error to stderr and exits 2.
    /// Call before MPI_Init (nothing here touches MPI).
    options parse(int argc, char** argv) {
        try {
            return parse_or_throw(argc, argv);
        } catch (const usage_error& e) {
            std::fprintf(stderr, "%s: %s\nTry '%s --help'.\n", program_.c_str(), e.what(), program_.c_str());
            std::exit(2);
        }
    }

    /// As parse, but throws usage_error and returns normally after printing --help (with
    /// `help_shown` set). For tests of the parser.
    options parse_or_throw(int argc, char** argv, bool* help_shown = nullptr) {
        options o;
        o.trials = defaults_.trials;
        o.time_s = defaults_.time_s;
        for (int i = 1; i < argc; ++i) {
            std::string arg = argv[i];
            if (arg != "-h" && arg.rfind("--", 0) != 0) throw usage_error("unexpected argument '" + arg + "'");
            std::string name = arg, value;
            bool has_value = false;
            if (const auto eq = arg.find('='); eq != std::string::npos) {
                name = arg.substr(0, eq), value = arg.substr(eq + 1), has_value = true;
            }
            if (name == "--help" || name == "-h") {
                print_help();
                if (help_shown) {
                    *help_shown = true;
                    return o;
                }
                std::exit(0);
            }
            if (!o.given.insert(name).second) throw usage_error(name + " given twice");
            auto need_value = [&]() -> std::string {
                if (has_value) return value;
                if (i + 1 >= argc) throw usage_error(name + " needs a value");
                return argv[++i];
            };
            auto no_value = [&] {
                if (has_value) throw usage_error(name + " takes no value");
            };
            if (name == "--sizes") {
                o.sizes = parse_size_list(need_value(), name);
            } else if (name == "--reps") {
                const std::string v = need_value();
                o.reps = v == "auto" ? 0 : parse_int(v, name, 1, std::int64_t{1} << 40);
            } else if (name == "--warmup") {
                o.warmup = static_cast<int>(parse_int(need_value(), name, 0, 1000000));
            } else if (name == "--trials") {
                o.trials = static_cast<int>(parse_int(need_value(), name, 1, 1000000));
            } else if (name == "--time") {
                o.time_s = parse_seconds(need_value(), name);
            } else if (name == "--csv") {
                o.csv = true;
                // The file is optional: `--csv` alone, `--csv -` or `--csv=-` write CSV to stdout.
                if (has_value)
                    o.csv_path = value;
                else if (i + 1 < argc && std::string_view(argv[i + 1]).rfind("--", 0) != 0)
                    o.csv_path = argv[++i];
                if (o.csv_path == "-") o.csv_path.clear();
                if (has_value && value.empty()) throw usage_error("--csv= needs a file name (or '-' for stdout)");
            } else if (name == "--filter") {
                o.set_filter(need_value());
            } else if (name == "--list") {
                no_value();
                o.list = true;
            } else {
                const auto it =
                    std::find_if(own_.begin(), own_.end(), [&](const own_option& x) { return x.name == name; });
                if (it == own_.end()) throw usage_error("unknown option '" + name + "'");
                if (it->metavar.empty()) {
                    no_value();
                    it->on({});
                } else {
                    it->on(need_value());
                }
            }
        }
        return o;
    }

    /// Writes --help to stdout.
    void print_help() const {
        std::printf("Usage: %s [OPTION]...\n%s\n\nOptions:\n", program_.c_str(), summary_.c_str());
        auto line = [](const std::string& left, const std::string& help) {
            // Help text may hold newlines: continuation lines align under the first.
            std::string text = help;
            for (std::size_t at = 0; (at = text.find('\n', at)) != std::string::npos; at += 28)
                text.insert(at + 1, 27, ' ');
            std::printf("  %-24s %s\n", left.c_str(), text.c_str());
        };
        line("--sizes LIST", "object sizes: 64K,1M or ranges LO:HI (x2), LO:HI:xF, LO:HI:+S; K=1024");
        line("--reps N|auto", "calls per timed trial (auto: each variant calibrated to about 1 ms)");
        line("--warmup N",
             "untimed calls of each variant before its trials (default 2; with\n"
             "--reps auto at least 1, which also calibrates)");
        char trials[96], time[96];
        std::snprintf(trials, sizeof trials, "interleaved trials per variant; the best is reported (default %d)",
                      defaults_.trials);
        std::snprintf(time, sizeof time, "stop adding trials to a row after this long, 3 trials at least (default %g)",
                      defaults_.time_s);
        line("--trials N", trials);
        line("--time SECONDS", time);
        line("--csv [FILE|-]", "also write CSV to FILE; without FILE or with '-': CSV instead of the table");
        line("--filter REGEX", "run only rows whose name matches (ECMAScript regex, see --list)");
        line("--list", "print the names of the rows that would run, and exit");
        for (const auto& o : own_) line(o.metavar.empty() ? o.name : o.name + " " + o.metavar, o.help);
        line("--help", "this text");
        std::printf(
            "\nMethod: the variants of a row (baseline, shunt, memcpy) run interleaved, trial by trial, in a\n"
            "balanced order (each variant right after each other one equally often), so machine noise and\n"
            "what one variant leaves in the caches fall on all of them alike; each trial times --reps calls.\n"
            "The best (minimum) time per call of each variant is reported, and ratios are of those minima.\n"
            "GB/s = 1e9 bytes per second. Buffers stay cache-warm between calls, as in an iterated code.\n");
        if (!epilog_.empty()) std::printf("\n%s\n", epilog_.c_str());
    }

private:
    struct own_option {
        std::string name, metavar, help;
        std::function<void(const std::string&)> on;
    };
    std::string program_, summary_, epilog_;
    std::vector<own_option> own_;
    options defaults_;  ///< its trials and time_s seed every parse
};

/// The timing of one variant of a row.
struct timing {
    double best_s = 0;  ///< fastest time per call over all trials
    double median_s = 0;  ///< median time per call over all trials
    std::int64_t reps = 0;  ///< calls per trial
    int trials = 0;  ///< trials run
};

/// Target length of one calibrated trial: short, so that many trials fit and some of them miss
/// the scheduler's interruptions on a shared machine.
inline constexpr double target_trial_s = 1e-3;

/// The order of n variants in each trial, from a balanced cycle (a Williams design, as crossover
/// trials use against carry-over): over each cycle of n trials (2n for odd n), every variant runs
/// first equally often and right after every other variant equally often, once (twice for odd n).
/// The orders are fixed, the same in every run and on every rank of an MPI benchmark. What a
/// variant's predecessor leaves in the caches and the TLB moves its time, and a best-of-trials
/// picks the kindest predecessor: each variant must meet each predecessor as often. A rotation
/// met only one, and a shuffle per trial from a fixed seed met them unevenly, the same way in
/// every run: both moved a variant running the library's own code away from the library's time
/// (bench/README.md, method).
class trial_order {
public:
    explicit trial_order(std::size_t n) {
        // The first trial 0, 1, n-1, 2, n-2, ...; trial i adds i to each (mod n); for odd n each
        // trial is followed by its reverse.
        std::vector<std::size_t> first(n);
        for (std::size_t j = 0; j < n; ++j) first[j] = j % 2 == 1 ? (j + 1) / 2 : (n - j / 2) % n;
        for (std::size_t i = 0; i < n; ++i) {
            std::vector<std::size_t> trial(n);
            for (std::size_t j = 0; j < n; ++j) trial[j] = (first[j] + i) % n;
            cycle_.push_back(trial);
            if (n % 2 == 1) cycle_.emplace_back(trial.rbegin(), trial.rend());
        }
        if (cycle_.empty()) cycle_.emplace_back();
    }
    /// Trials in one balanced cycle: n, or 2n for odd n.
    std::size_t cycle() const { return cycle_.size(); }
    const std::vector<std::size_t>& next() { return cycle_[next_++ % cycle_.size()]; }

private:
    std::vector<std::vector<std::size_t>> cycle_;
    std::size_t next_ = 0;
};

/// Times the variants interleaved: after a warm-up that also calibrates each variant's calls
/// per trial, every trial runs every variant once, in trial_order's balanced orders (each
/// variant behind each other one equally often). Stops after o.trials trials, or earlier once
/// o.time_s has passed and 3 trials are done. Exceptions from a variant propagate.
inline std::vector<timing> measure(std::span<const std::function<void()>> variants, const options& o) {
    using clock = std::chrono::steady_clock;
    const std::size_t n = variants.size();
    const auto start = clock::now();
    auto seconds_since = [](clock::time_point t0) { return std::chrono::duration<double>(clock::now() - t0).count(); };
    std::vector<timing> out(n);
    for (std::size_t v = 0; v < n; ++v) {
        double fastest = std::numeric_limits<double>::infinity();
        for (int w = 0; w < (o.reps > 0 ? o.warmup : std::max(1, o.warmup)); ++w) {
            const auto t0 = clock::now();
            variants[v]();
            fastest = std::min(fastest, seconds_since(t0));
        }
        if (o.reps > 0)
            out[v].reps = o.reps;
        else
            out[v].reps = std::clamp<std::int64_t>(static_cast<std::int64_t>(target_trial_s / std::max(fastest, 1e-9)),
                                                   1, std::int64_t{1} << 20);
    }
    std::vector<std::vector<double>> samples(n);
    trial_order order(n);
    for (int t = 0; t < o.trials; ++t) {
        if (t >= 3 && seconds_since(start) > o.time_s) break;
        for (const std::size_t v : order.next()) {
            const auto& fn = variants[v];
            const auto t0 = clock::now();
            for (std::int64_t r = 0; r < out[v].reps; ++r) fn();
            samples[v].push_back(seconds_since(t0) / static_cast<double>(out[v].reps));
        }
    }
    for (std::size_t v = 0; v < n; ++v) {
        auto& s = samples[v];
        std::sort(s.begin(), s.end());
        out[v].trials = static_cast<int>(s.size());
        out[v].best_s = s.front();
        out[v].median_s = s[s.size() / 2];
    }
    return out;
}

/// One table cell: the text shown in the table and the value written to CSV.
struct cell {
    std::string text;
    std::string csv;
};

inline cell text_cell(std::string s) { return {s, std::move(s)}; }
/// A byte count: 1.5M in the table, 1572864 in CSV.
inline cell bytes_cell(std::int64_t n) { return {format_bytes(n), std::to_string(n)}; }
/// A number with `decimals` digits in the table and full precision in CSV.
inline cell number_cell(double x, int decimals) {
    char t[64], c[64];
    std::snprintf(t, sizeof t, "%.*f", decimals, x);
    std::snprintf(c, sizeof c, "%.6g", x);
    return {t, c};
}
/// Bandwidth in GB/s (1e9 B/s) of `bytes` moved in `seconds`.
inline cell gbs_cell(std::int64_t bytes, double seconds) {
    return number_cell(static_cast<double>(bytes) / seconds / 1e9, 2);
}

/// One column: its header, its width in the table, and its name in CSV.
struct column {
    std::string header;
    int width;
    std::string csv_name;
    bool left = false;  ///< left-aligned (text) rather than right-aligned (numbers)
};

/// Writes rows as they are measured: an aligned table on stdout and/or CSV (see options::csv).
class table {
public:
    /// Opens the CSV file if one was asked for; throws shunt::error when it cannot be opened.
    table(std::vector<column> columns, const options& o) : columns_(std::move(columns)) {
        show_table_ = !(o.csv && o.csv_path.empty());
        if (o.csv) {
            csv_ = o.csv_path.empty() ? stdout : std::fopen(o.csv_path.c_str(), "w");
            if (!csv_) throw error("cannot open the CSV file '" + o.csv_path + "' for writing");
            own_csv_ = !o.csv_path.empty();
            for (std::size_t i = 0; i < columns_.size(); ++i)
                std::fprintf(csv_, "%s%s", i ? "," : "", columns_[i].csv_name.c_str());
            std::fprintf(csv_, "\n");
            std::fflush(csv_);
        }
    }
    table(const table&) = delete;
    table& operator=(const table&) = delete;
    ~table() {
        if (own_csv_) std::fclose(csv_);
    }

    /// A free line of context (library version, method): "# line" above the table, or on stderr
    /// when CSV takes stdout.
    void note(const std::string& line) {
        std::fprintf(show_table_ ? stdout : stderr, "# %s\n", line.c_str());
        std::fflush(show_table_ ? stdout : stderr);
    }

    /// Prints one row (the header before the first) and flushes, so long runs show progress.
    void row(const std::vector<cell>& cells) {
        if (cells.size() != columns_.size()) throw error("table row has the wrong number of cells");
        if (show_table_) {
            if (!header_done_) {
                std::string h, rule;
                for (std::size_t i = 0; i < columns_.size(); ++i) {
                    h += pad(columns_[i].header, columns_[i]);
                    rule += std::string(static_cast<std::size_t>(std::max<int>(
                                            columns_[i].width, static_cast<int>(columns_[i].header.size()))) +
                                            (i ? 2 : 0),
                                        '-');
                }
                std::printf("%s\n%s\n", h.c_str(), rule.c_str());
                header_done_ = true;
            }
            std::string line;
            for (std::size_t i = 0; i < columns_.size(); ++i) line += pad(cells[i].text, columns_[i]);
            std::printf("%s\n", line.c_str());
            std::fflush(stdout);
        }
        if (csv_) {
            for (std::size_t i = 0; i < cells.size(); ++i)
                std::fprintf(csv_, "%s%s", i ? "," : "", cells[i].csv.c_str());
            std::fprintf(csv_, "\n");
            std::fflush(csv_);
        }
    }

private:
    std::string pad(const std::string& s, const column& c) const {
        const std::size_t w = std::max<std::size_t>(static_cast<std::size_t>(c.width), c.header.size());
        const std::string sep = &c == &columns_.front() ? "" : "  ";
        if (s.size() >= w) return sep + s;
        return c.left ? sep + s + std::string(w - s.size(), ' ') : sep + std::string(w - s.size(), ' ') + s;
    }

    std::vector<column> columns_;
    bool show_table_ = true;
    bool header_done_ = false;
    std::FILE* csv_ = nullptr;
    bool own_csv_ = false;
};

}  // namespace shunt::bench
