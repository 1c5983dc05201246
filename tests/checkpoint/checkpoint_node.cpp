// One architecture's side of the cross-architecture checkpoint test, built
// for every architecture (the mixed test runs the armhf and s390x builds
// under qemu-user):
//   checkpoint_node write PATH little|big   writes the sample checkpoint
//   checkpoint_node read PATH               prints every tensor's name, dtype,
//                                           shape and the CRC32C of its
//                                           elements in little-endian order,
//                                           then the metadata
// Two readers that print the same text read the same values.
#include <cstdio>
#include <cstring>
#include <string>

#include "ferry/checkpoint/reader.h"
#include "ferry/checkpoint/writer.h"
#include "ferry/codec/crc32c.h"
#include "ferry/wire/bulk.h"
#include "sample.h"

namespace ckpt = ferry::checkpoint;

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "write") == 0) {
    ckpt::testing::sample s;
    const auto refs = s.refs();
    ckpt::write_options opt;
    opt.order = std::strcmp(argv[3], "big") == 0 ? ferry::wire::byte_order::big : ferry::wire::byte_order::little;
    const auto r = ckpt::save(argv[2], refs, ckpt::testing::sample::metadata(), opt);
    if (!r) {
      std::fprintf(stderr, "%s\n", r.error().what().c_str());
      return 1;
    }
    return 0;
  }
  if (argc == 3 && std::strcmp(argv[1], "read") == 0) {
    auto r = ckpt::open(argv[2]);
    if (!r) {
      std::fprintf(stderr, "%s\n", r.error().what().c_str());
      return 1;
    }
    auto all = r->get_all();
    if (!all) {
      std::fprintf(stderr, "%s\n", all.error().what().c_str());
      return 1;
    }
    for (const auto& t : *all) {
      auto bytes = t.contiguous_copy();
      ferry::wire::convert_in_place(bytes, ferry::codec::order_width(t.dtype()), ferry::wire::host_order,
                                    ferry::wire::byte_order::little);
      std::string shape;
      for (const auto d : t.shape()) shape += " " + std::to_string(d);
      std::printf("%s %s [%s ] %08x shared:%zu\n", t.name().c_str(), std::string(ferry::codec::name(t.dtype())).c_str(),
                  shape.c_str(), ferry::codec::crc32c(bytes), r->shared_with(t.info()).size());
    }
    for (const auto& [k, v] : r->metadata()) std::printf("meta %s=%s\n", k.c_str(), v.c_str());
    return 0;
  }
  std::fprintf(stderr, "usage: checkpoint_node write PATH little|big | read PATH\n");
  return 2;
}
