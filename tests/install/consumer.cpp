#include <ferry/codec/crc32c.h>
#include <ferry/wire/byte_order.h>

#include <cstdio>
#include <string_view>

int main() {
  const auto net = ferry::wire::to_bytes(6.342e-5f, ferry::wire::byte_order::network);
  const std::string_view check = "123456789";
  const bool ok = net[0] == std::byte{0x38} && ferry::codec::crc32c(std::as_bytes(std::span(check))) == 0xE3069283u;
  std::puts(ok ? "consumer ok" : "consumer FAILED");
  return ok ? 0 : 1;
}
