// A test's guard that lifts base::limit_cpu_features when it ends, so a
// test that pins a kernel leaves every feature on for the next one.
#pragma once

#include "ferry/base/cpu.h"

namespace ferry::test {

struct restore_cpu_features {
  ~restore_cpu_features() { base::limit_cpu_features(base::all_cpu_features); }
};

}  // namespace ferry::test
