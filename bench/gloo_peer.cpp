#include "gloo_peer.h"

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/torch.h>

namespace ferry::bench {

struct gloo_group::impl {
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group;
};

gloo_group::gloo_group(const std::string& store_path, int rank, int size, const std::string& address)
    : impl_(std::make_unique<impl>()) {
  auto store = c10::make_intrusive<c10d::FileStore>(store_path, size);
  auto options = c10d::ProcessGroupGloo::Options::create();
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(address));
  impl_->group = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
}

gloo_group::~gloo_group() = default;

void gloo_group::allreduce(float* data, std::size_t count) {
  std::vector<at::Tensor> tensors{torch::from_blob(data, {static_cast<std::int64_t>(count)}, torch::kFloat32)};
  impl_->group->allreduce(tensors)->wait();
}

void gloo_group::barrier() { impl_->group->barrier()->wait(); }

}  // namespace ferry::bench
