// ferry-train's test hooks: set from the environment in the tests'
// ferry-train-hooked (test_hooks.cpp built with FERRY_TRAIN_TEST_HOOKS);
// in ferry-train the same call does nothing, so no environment variable
// changes what a shipped binary does.
#pragma once

namespace ferry::trainer {

struct train_config;

/// FERRY_TRAIN_DIE=RANK:STEP (that rank exits at that step),
/// FERRY_TRAIN_FLIP=RANK:STEP (that rank flips a parameter bit) and
/// FERRY_TRAIN_KEEP_SAVES (rank 0 keeps a copy of each save), into `c`.
void read_test_hooks(train_config& c);

}  // namespace ferry::trainer
