// The LibTorch adapter: modules with tied weights and BatchNorm buffers,
// Adam/AdamW/SGD state keyed by parameter name, and state dicts with views,
// all bit for bit with sharing kept.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "ferry/checkpoint/torch/torch.h"
#include "helpers.h"

namespace ferry::checkpoint::testing {
namespace {

// The output projection reuses the embedding's weight (tied, as in
// language models); BatchNorm has buffers, one of them int64.
struct tied_net : torch::nn::Module {
  tied_net() {
    embed = register_module("embed", torch::nn::Embedding(10, 8));
    hidden = register_module("hidden", torch::nn::Linear(8, 8));
    norm = register_module("norm", torch::nn::BatchNorm1d(8));
    out_weight = register_parameter("out_weight", embed->weight);  // tied
  }
  torch::Tensor forward(const torch::Tensor& ids) {
    auto x = embed->forward(ids);
    x = torch::relu(norm->forward(hidden->forward(x)));
    return torch::nn::functional::linear(x, out_weight);
  }
  // Each parameter once, for the optimizer.
  std::vector<torch::Tensor> unique_parameters() const {
    std::vector<torch::Tensor> out;
    for (const auto& p : parameters()) {
      if (std::none_of(out.begin(), out.end(), [&](const auto& q) { return q.is_same(p); })) out.push_back(p);
    }
    return out;
  }
  torch::nn::Embedding embed{nullptr};
  torch::nn::Linear hidden{nullptr};
  torch::nn::BatchNorm1d norm{nullptr};
  torch::Tensor out_weight;
};

bool bit_equal(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  const auto x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

template <class Optimizer>
void train_steps(tied_net& net, Optimizer& opt, int steps) {
  torch::manual_seed(7);
  for (int i = 0; i < steps; ++i) {
    const auto ids = torch::randint(0, 10, {16}, torch::kLong);
    const auto target = torch::randint(0, 10, {16}, torch::kLong);
    opt.zero_grad();
    const auto loss = torch::nn::functional::cross_entropy(net.forward(ids), target);
    loss.backward();
    opt.step();
  }
}

class Torch : public scratch_dir {};

template <class Optimizer, class Options>
void module_and_optimizer_round_trip(const fs::path& dir, Options options) {
  torch::manual_seed(1);
  auto a = std::make_shared<tied_net>();
  Optimizer opt_a(a->unique_parameters(), options);
  train_steps(*a, opt_a, 3);
  const auto p = dir / "run.ferry";
  ASSERT_TRUE(ferry::libtorch::save_checkpoint(p, *a, &opt_a, {{"epoch", "3"}}));

  torch::manual_seed(2);  // different initial weights
  auto b = std::make_shared<tied_net>();
  Optimizer opt_b(b->unique_parameters(), Options(0.5));
  auto meta = ferry::libtorch::load_checkpoint(p, *b, &opt_b);
  ASSERT_TRUE(meta) << meta.error();
  EXPECT_EQ(meta->at("epoch"), "3");
  for (const auto& [name, t] : ferry::libtorch::state_dict(*a)) {
    EXPECT_TRUE(bit_equal(t, ferry::libtorch::state_dict(*b).at(name))) << name;
  }
  EXPECT_EQ(b->out_weight.data_ptr(), b->embed->weight.data_ptr());
  EXPECT_EQ(b->norm->num_batches_tracked.item<std::int64_t>(), 3);

  // Training on from the loaded state matches training on from the original.
  train_steps(*a, opt_a, 2);
  train_steps(*b, opt_b, 2);
  const auto sa = ferry::libtorch::state_dict(*a), sb = ferry::libtorch::state_dict(*b);
  for (const auto& [name, t] : sa) EXPECT_TRUE(bit_equal(t, sb.at(name))) << name << " after resuming";
}

TEST_F(Torch, ModuleWithTiedWeightsAndAdamResumeBitForBit) {
  module_and_optimizer_round_trip<torch::optim::Adam>(dir_, torch::optim::AdamOptions(1e-2).amsgrad(true));
}

TEST_F(Torch, AdamW) {
  module_and_optimizer_round_trip<torch::optim::AdamW>(dir_, torch::optim::AdamWOptions(1e-2));
}

TEST_F(Torch, SgdWithMomentum) {
  module_and_optimizer_round_trip<torch::optim::SGD>(dir_, torch::optim::SGDOptions(1e-2).momentum(0.9).nesterov(true));
}

TEST_F(Torch, RmspropCenteredWithMomentum) {
  module_and_optimizer_round_trip<torch::optim::RMSprop>(
      dir_, torch::optim::RMSpropOptions(1e-2).momentum(0.9).centered(true).weight_decay(1e-3));
}

TEST_F(Torch, TiedWeightsAreStoredOnce) {
  auto net = std::make_shared<tied_net>();
  const auto p = dir_ / "m.ferry";
  ASSERT_TRUE(ferry::libtorch::save_checkpoint(p, *net));
  auto r = open(p);
  ASSERT_TRUE(r);
  const auto* w = r->find("embed.weight");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(r->shared_with(*w), std::vector<std::string>{"out_weight"});
}

TEST_F(Torch, StateDictViewsKeepOffsetStridesAndSharing) {
  const auto base = torch::arange(24, torch::kFloat).reshape({4, 6});
  const auto view = base.slice(0, 1, 3).slice(1, 0, 6, 2);  // offset 6, strides [6, 2]
  const auto halfs = torch::tensor({1.5, -0.0, 65504.0}, torch::kHalf);
  ferry::libtorch::tensor_map m{{"base", base}, {"view", view}, {"alias", base}, {"half", halfs},
                             {"flag", torch::tensor({true, false})}, {"scalar", torch::scalar_tensor(3.25, torch::kDouble)}};
  for (const auto order : {wire::byte_order::little, wire::byte_order::big}) {
    write_options opt;
    opt.order = order;
    const auto p = dir_ / "sd.ferry";
    ASSERT_TRUE(ferry::libtorch::save(p, m, {{"k", "v"}}, opt));
    auto l = ferry::libtorch::load(p);
    ASSERT_TRUE(l) << l.error();
    EXPECT_EQ(l->metadata.at("k"), "v");
    for (const auto& [name, t] : m) EXPECT_TRUE(bit_equal(t, l->tensors.at(name))) << name;
    const auto& lb = l->tensors.at("base");
    const auto& lv = l->tensors.at("view");
    EXPECT_EQ(lv.storage_offset(), 6);
    EXPECT_EQ(lv.strides(), view.strides());
    EXPECT_EQ(lv.storage().data(), lb.storage().data());
    EXPECT_EQ(l->tensors.at("alias").data_ptr(), lb.data_ptr());
    lb.fill_(0);  // writable, and shared
    EXPECT_EQ(lv.sum().item<float>(), 0.0f);
  }
}

TEST_F(Torch, MismatchedModuleChangesNothing) {
  auto a = std::make_shared<tied_net>();
  const auto p = dir_ / "m.ferry";
  ASSERT_TRUE(ferry::libtorch::save_checkpoint(p, *a));
  auto other = torch::nn::Linear(3, 4);
  const auto before = other->weight.clone();
  const auto r = ferry::libtorch::load_checkpoint(p, *other);
  ASSERT_FALSE(r);
  EXPECT_TRUE(bit_equal(before, other->weight));
}

}  // namespace
}  // namespace ferry::checkpoint::testing
