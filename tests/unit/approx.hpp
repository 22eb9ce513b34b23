// tests/unit/approx.hpp: doctest::Approx relative to the values alone, for comparing times.
#pragma once

#include <doctest/doctest.h>

/// doctest::Approx relative to the values alone: its default scale of 1 adds an absolute slack of
/// about 1e-5, which would let any two times in microseconds compare equal.
inline doctest::Approx approx(double value) { return doctest::Approx(value).scale(0); }
