#include "ferry/trainer/residual.h"

namespace ferry::trainer {

std::vector<float> carry_residuals(std::span<const float> saved, std::size_t saved_world, std::size_t columns,
                                   std::size_t new_world) {
  if (saved_world == new_world) return {saved.begin(), saved.end()};
  std::vector<float> mean(columns);
  for (std::size_t j = 0; j < columns; ++j) {
    double sum = 0;
    for (std::size_t i = 0; i < saved_world; ++i) sum += static_cast<double>(saved[i * columns + j]);
    mean[j] = static_cast<float>(sum / static_cast<double>(saved_world));
  }
  std::vector<float> out;
  out.reserve(columns * new_world);
  for (std::size_t k = 0; k < new_world; ++k) out.insert(out.end(), mean.begin(), mean.end());
  return out;
}

}  // namespace ferry::trainer
