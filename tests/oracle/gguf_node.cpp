// One architecture's side of the cross-architecture GGUF test
// (gguf_mixed_test.cpp), built for every architecture:
//   gguf_node PATH   prints, for every tensor of the GGUF file in file
//                    order, its name, ggml type and the CRC32C of its
//                    dequantized f32 values stored little-endian
// Two readers that print the same text dequantized to the same bits.
#include <cstdio>
#include <string>
#include <vector>

#include "ferry/checkpoint/gguf.h"
#include "ferry/checkpoint/reader.h"
#include "ferry/codec/crc32c.h"
#include "ferry/wire/bulk.h"

namespace ckpt = ferry::checkpoint;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: gguf_node PATH\n");
    return 2;
  }
  auto r = ckpt::open(argv[1]);
  if (!r) {
    std::fprintf(stderr, "%s\n", r.error().what().c_str());
    return 1;
  }
  if (r->gguf() == nullptr) {
    std::fprintf(stderr, "%s: not a GGUF file\n", argv[1]);
    return 1;
  }
  for (const ckpt::gguf_tensor& g : r->gguf()->tensors) {
    auto t = ckpt::get_dequantized(*r, g.name);
    if (!t) {
      std::fprintf(stderr, "%s\n", t.error().what().c_str());
      return 1;
    }
    std::vector<std::byte> bytes = t->contiguous_copy();
    ferry::wire::convert_in_place(bytes, sizeof(float), ferry::wire::host_order, ferry::wire::byte_order::little);
    std::printf("%s %s %08x\n", g.name.c_str(), std::string(ckpt::info(g.type).name).c_str(),
                ferry::codec::crc32c(bytes));
  }
  return 0;
}
