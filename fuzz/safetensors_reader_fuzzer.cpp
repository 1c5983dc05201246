// The safetensors header grammar: the input is the JSON header of a file
// whose data area is the first input byte times 16 zero bytes; the file goes
// through checkpoint::open() like any other. Every header is accepted or
// refused with a typed error; an accepted one describes tensors that tile
// the data exactly and fetch.
#include "checkpoint_file.h"
#include "ferry/checkpoint/reader.h"
#include "ferry/wire/byte_order.h"
#include "fuzz_check.h"

#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static ferry::fuzzing::memory_file file;
  if (size == 0) return 0;
  const std::size_t data_bytes = std::size_t{data[0]} * 16;
  const auto header = std::as_bytes(std::span(data + 1, size - 1));
  std::vector<std::byte> bytes(8);
  ferry::wire::store<std::uint64_t>(header.size(), bytes.data(), ferry::wire::byte_order::little);
  bytes.insert(bytes.end(), header.begin(), header.end());
  bytes.resize(bytes.size() + data_bytes);
  auto r = ferry::checkpoint::open(file.hold(bytes));
  if (!r) return 0;
  std::uint64_t covered = 0;
  for (const auto& s : r->storages()) covered += s.nbytes;
  FUZZ_CHECK(covered == data_bytes);
  for (const auto& info : r->tensors()) {
    auto t = r->get(info);
    FUZZ_CHECK(t.has_value());
    FUZZ_CHECK(t->contiguous_copy().size() == info.nbytes());
  }
  return 0;
}
