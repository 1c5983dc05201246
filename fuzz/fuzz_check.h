// FUZZ_CHECK: an invariant of a fuzz harness. Unlike assert() it stays on in
// release builds, and abort() is what libFuzzer reports as a crash.
//
// Ordinary builds compile every harness into one translation unit
// (fuzz_replay, see CMakeLists.txt): a harness keeps its helpers and
// using-directives in namespace <name>_harness, never at file scope, and
// includes what it uses (the others' includes would hide a missing one
// there; make fuzz builds each alone).
#pragma once

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(cond)                                                          \
  do {                                                                            \
    if (!(cond)) {                                                                \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                               \
    }                                                                             \
  } while (0)
