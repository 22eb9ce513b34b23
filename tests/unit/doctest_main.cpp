// tests/unit/doctest_main.cpp: doctest's main, compiled once for every unit test program.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
