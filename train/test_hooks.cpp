// ferry-train's test hooks (test_hooks.h). main.cpp is compiled once for
// both programs; only this small file is compiled twice, with and without
// FERRY_TRAIN_TEST_HOOKS.
#include "test_hooks.h"

#ifdef FERRY_TRAIN_TEST_HOOKS
#include <cstdint>
#include <cstdlib>

#include "job.h"
#endif

namespace ferry::trainer {

#ifdef FERRY_TRAIN_TEST_HOOKS
void read_test_hooks(train_config& c) {
  const auto hook = [](const char* name, std::int64_t& rank, std::int64_t& step) {
    if (const char* d = std::getenv(name); d != nullptr) {
      char* end = nullptr;
      rank = std::strtoll(d, &end, 10);
      step = *end == ':' ? std::strtoll(end + 1, nullptr, 10) : -1;
    }
  };
  hook("FERRY_TRAIN_DIE", c.die_rank, c.die_at_step);
  hook("FERRY_TRAIN_FLIP", c.flip_rank, c.flip_at_step);
  c.keep_saves = std::getenv("FERRY_TRAIN_KEEP_SAVES") != nullptr;
}
#else
void read_test_hooks(train_config&) {}
#endif

}  // namespace ferry::trainer
