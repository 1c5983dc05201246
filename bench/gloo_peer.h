// The Gloo side of comm_bench and comm_rank: LibTorch's c10d
// ProcessGroupGloo (the engine PyTorch DDP uses on CPU), behind a plain
// interface so that only gloo_peer.cpp includes LibTorch's slow headers.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace ferry::bench {

class gloo_group {
 public:
  /// Joins a group of `size` through a c10d FileStore at `store_path` (a
  /// file every rank can open: /tmp is shared by network namespaces), with
  /// a TCP device bound to `address`: 127.0.0.1 on one host, a node's own
  /// address in a simulated cluster (Gloo's default, the address the host
  /// name resolves to, is a loopback address inside a namespace).
  gloo_group(const std::string& store_path, int rank, int size, const std::string& address = "127.0.0.1");
  ~gloo_group();
  /// Sum of `count` f32 values over the group, in place (ProcessGroupGloo
  /// allreduce, then wait).
  void allreduce(float* data, std::size_t count);
  /// Returns when every rank has called barrier().
  void barrier();

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace ferry::bench
