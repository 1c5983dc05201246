// The Gloo side of comm_bench: LibTorch's c10d ProcessGroupGloo (the engine
// PyTorch DDP uses on CPU), behind a plain interface so that only
// gloo_peer.cpp includes LibTorch's slow headers.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace ferry::bench {

class gloo_group {
 public:
  /// Joins a group of `size` through a c10d FileStore at `store_path`,
  /// with a TCP device on 127.0.0.1.
  gloo_group(const std::string& store_path, int rank, int size);
  ~gloo_group();
  /// Sum of `count` f32 values over the group, in place (ProcessGroupGloo
  /// allreduce, then wait).
  void allreduce(float* data, std::size_t count);

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace ferry::bench
