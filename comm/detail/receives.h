// ferry/comm/detail/receives.h: INTERNAL. A communicator's posted
// point-to-point receives, matched against the link's mailbox in the
// order they were posted (communicator.h's point to point). Used on the
// communicator's worker thread only. Not part of the API.
#pragma once

#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <optional>
#include <span>

#include "ferry/comm/detail/link.h"
#include "ferry/comm/detail/worker.h"

namespace ferry::comm::detail {

struct receive {
  codec::dtype type = codec::dtype::u8;
  std::span<std::byte> data;
  std::optional<std::uint32_t> peer;  // nullopt: any rank
  std::int64_t tag = 0;
  std::uint32_t* source = nullptr;  // where the sender goes, if not null
  std::shared_ptr<work::state> state;
  clock::time_point deadline{};
};

class receives {
 public:
  explicit receives(link& l) : l_(l) {}
  /// Posts `r` (its deadline is set here) and takes a message for it if
  /// one is waiting.
  void post(receive r);
  /// Reads arriving messages (waiting a little when `may_wait`), completes
  /// the receives they match, fails those past their deadline or whose
  /// sender is gone; true while receives remain.
  bool progress(bool may_wait);
  /// Fails every posted receive with `error`.
  void fail_all(const std::exception_ptr& error);

 private:
  void deliver();
  void fill(receive& r, const message& m) const;

  link& l_;
  std::deque<receive> posted_;
};

}  // namespace ferry::comm::detail
