// ferry-train's hidden-layer activations (--activation), by name; without
// LibTorch's headers, for main.cpp (INTERNAL to ferry-train).
#pragma once

#include <optional>
#include <string_view>

namespace ferry::trainer {

/// The hidden layers' activation (--activation).
enum class activation { relu, tanh, sigmoid, gelu };
inline constexpr activation all_activations[] = {activation::relu, activation::tanh, activation::sigmoid,
                                                 activation::gelu};
inline std::string_view name(activation a) {
  switch (a) {
    case activation::relu: return "relu";
    case activation::tanh: return "tanh";
    case activation::sigmoid: return "sigmoid";
    case activation::gelu: return "gelu";
  }
  return "?";
}
inline std::optional<activation> activation_from_name(std::string_view n) {
  for (const auto a : all_activations) {
    if (name(a) == n) return a;
  }
  return std::nullopt;
}

/// PyTorch's module class name ("ReLU", "GELU"): --profile's scope.
inline const char* class_name(activation a) {
  switch (a) {
    case activation::relu: return "ReLU";
    case activation::tanh: return "Tanh";
    case activation::sigmoid: return "Sigmoid";
    case activation::gelu: return "GELU";
  }
  return "?";
}

}  // namespace ferry::trainer
