// The Catch2 main of scanner_tests.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
