// ferry-train's data: an IDX classification set read into tensors.
#include <ATen/ops/empty.h>

#include "ferry/trainer/error.h"
#include "ferry/trainer/idx.h"
#include "job.h"

namespace ferry::trainer {
namespace {

// Inputs are pixels / 255 as float (torchvision's ToTensor), converted
// once: a batch is then a gather of rows.
at::Tensor load_images(const dataset& d, std::size_t n) {
  const auto pixels = static_cast<std::size_t>(d.rows) * d.cols;
  auto x = at::empty({static_cast<std::int64_t>(n), static_cast<std::int64_t>(pixels)}, at::kFloat);
  float* dst = x.data_ptr<float>();
  for (std::size_t i = 0; i < n * pixels; ++i) dst[i] = static_cast<float>(d.images[i]) / 255.0f;
  return x;
}

data_split load_split(const train_config& c, std::string_view split, std::size_t limit) {
  // Any u8 label is a class; the model has max label + 1 outputs.
  // Only the samples asked for are decoded (and inflated).
  auto d = load_dataset(c.data, split, 256, {}, limit).value();
  const std::size_t n = d.count;
  data_split out;
  out.count = n;
  out.images = load_images(d, n);
  out.labels = at::empty({static_cast<std::int64_t>(n)}, at::kLong);
  for (std::size_t i = 0; i < n; ++i) out.labels.data_ptr<std::int64_t>()[i] = d.labels[i];
  return out;
}

}  // namespace

std::shared_ptr<const train_data> load_data(const train_config& c) {
  auto d = std::make_shared<train_data>();
  d->train = load_split(c, "train", c.limit);
  d->test = load_split(c, "t10k", c.test_limit);
  if (d->test.images.size(1) != d->train.images.size(1)) {
    throw ferry::exception(error(errc::size_mismatch, c.data.string() + ": the test images have " +
                                                          std::to_string(d->test.images.size(1)) +
                                                          " pixels, the training images " +
                                                          std::to_string(d->train.images.size(1))));
  }
  return d;
}

}  // namespace ferry::trainer
