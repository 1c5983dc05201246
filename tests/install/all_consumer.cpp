#include <ferry/codec/crc32c.h>
#include <ferry/comm/communicator.h>
#include <ferry/graph/archive.h>
#include <ferry/wire/byte_order.h>

#include <cstdio>
#include <memory>
#include <string_view>
#include <vector>

struct item {
  static constexpr std::string_view ferry_name = "consumer.item";
  int value = 0;
  std::shared_ptr<item> next;
  template <class F>
  void describe(F& f) {
    f(1, "value", value)(2, "next", next);
  }
};

int main() {
  const auto net = ferry::wire::to_bytes(6.342e-5f, ferry::wire::byte_order::network);
  const std::string_view check = "123456789";
  auto a = std::make_shared<item>();
  a->value = 42;
  a->next = std::make_shared<item>();
  auto bytes = ferry::graph::write(a);
  auto back = bytes ? ferry::graph::read<std::shared_ptr<item>>(*bytes) : ferry::result<std::shared_ptr<item>>(bytes.error());
  ferry::comm::communicator comm{ferry::comm::config{}};  // a world of one
  std::vector<float> grads{1.0f, 2.0f};
  comm.allreduce(grads, {.op = ferry::comm::reduce_op::avg});
  const bool ok = grads[1] == 2.0f && net[0] == std::byte{0x38} && ferry::codec::crc32c(std::as_bytes(std::span(check))) == 0xE3069283u &&
                  back && (*back)->value == 42 && (*back)->next;
  std::puts(ok ? "consumer ok" : "consumer FAILED");
  return ok ? 0 : 1;
}
