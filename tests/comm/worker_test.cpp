// comm/detail/worker.h: the one queue that runs collectives in call order,
// for the communicator and the torch backend's process group alike.
#include "ferry/comm/detail/worker.h"

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <vector>

namespace ferry::comm::detail {
namespace {

void wait(work::state& s) {
  std::unique_lock lock(s.m);
  s.cv.wait(lock, [&] { return s.done; });
}

TEST(Worker, RunsTasksInOrderAndInlineTasksAfterThem) {
  worker w;
  std::vector<int> order;
  std::vector<std::shared_ptr<work::state>> states;
  for (int i = 0; i < 50; ++i) states.push_back(w.submit([&order, i] { order.push_back(i); }));
  w.run_inline([&] { order.push_back(50); });  // after everything queued before it
  for (const auto& s : states) wait(*s);  // done, or this hangs
  ASSERT_EQ(order.size(), 51u);
  for (int i = 0; i <= 50; ++i) EXPECT_EQ(order[i], i);
}

TEST(Worker, ATaskThatThrowsFailsItsOwnStateOnly) {
  worker w;
  const auto bad = w.submit([] { throw std::runtime_error("boom"); });
  const auto good = w.submit([] {});
  wait(*bad);
  wait(*good);
  ASSERT_TRUE(bad->error);
  EXPECT_THROW(std::rethrow_exception(bad->error), std::runtime_error);
  EXPECT_FALSE(good->error);
}

TEST(Worker, DrainReleasesWhatTasksCapturedAndStopIsIdempotent) {
  worker w;
  auto held = std::make_shared<int>(7);
  const std::weak_ptr<int> watch = held;
  w.submit([held = std::move(held)] { EXPECT_EQ(*held, 7); });
  w.drain();  // the task ran and was destroyed: its capture is gone
  EXPECT_TRUE(watch.expired());

  int ran = 0;
  w.submit([&] { ++ran; });
  w.stop();  // runs what is queued, then joins
  EXPECT_EQ(ran, 1);
  w.stop();
}

}  // namespace
}  // namespace ferry::comm::detail
