// Uses ferry::comm (and the codec and wire it brings), nothing else.
#include <ferry/codec/crc32c.h>
#include <ferry/comm/communicator.h>
#include <ferry/wire/byte_order.h>

#include <cstdio>
#include <span>
#include <string_view>
#include <vector>

int main() {
  const auto net = ferry::wire::to_bytes(6.342e-5f, ferry::wire::byte_order::network);
  const std::string_view check = "123456789";
  ferry::comm::communicator comm{ferry::comm::config{}};  // a world of one
  std::vector<float> grads{1.0f, 2.0f};
  comm.allreduce(grads, {.op = ferry::comm::reduce_op::avg});
  const bool ok = grads[1] == 2.0f && net[0] == std::byte{0x38} &&
                  ferry::codec::crc32c(std::as_bytes(std::span(check))) == 0xE3069283u;
  std::puts(ok ? "comm consumer ok" : "comm consumer FAILED");
  return ok ? 0 : 1;
}
