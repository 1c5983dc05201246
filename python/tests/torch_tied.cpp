// ferry-torch-tied IN OUT NAME...: the C++ side of the Python module's
// tied-weights test (test_ferry.py). Loads IN with ferry::libtorch::load,
// checks that the NAMEd tensors share one storage, and writes everything
// back to OUT with ferry::libtorch::save. Exit 0, or 1 with one line saying why.
#include <cstdio>
#include <string>

#include "ferry/checkpoint/torch/torch.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: ferry-torch-tied IN OUT NAME...\n");
    return 2;
  }
  auto loaded = ferry::libtorch::load(argv[1]);
  if (!loaded) {
    std::fprintf(stderr, "ferry-torch-tied: %s\n", loaded.error().what().c_str());
    return 1;
  }
  const void* storage = nullptr;
  for (int i = 3; i < argc; ++i) {
    const auto it = loaded->tensors.find(argv[i]);
    if (it == loaded->tensors.end()) {
      std::fprintf(stderr, "ferry-torch-tied: %s: no tensor '%s'\n", argv[1], argv[i]);
      return 1;
    }
    const void* mine = it->second.storage().data();
    if (storage != nullptr && mine != storage) {
      std::fprintf(stderr, "ferry-torch-tied: %s: '%s' does not share '%s''s storage\n", argv[1], argv[i], argv[3]);
      return 1;
    }
    storage = mine;
  }
  if (auto saved = ferry::libtorch::save(argv[2], loaded->tensors, loaded->metadata); !saved) {
    std::fprintf(stderr, "ferry-torch-tied: %s\n", saved.error().what().c_str());
    return 1;
  }
  return 0;
}
