// Uses the whole library through ferry::ferry: one call into each module's
// library (the graph, comm and trainer consumers beside this one test those
// components alone, in depth).
#include <ferry/checkpoint/reader.h>
#include <ferry/checkpoint/writer.h>
#include <ferry/codec/crc32c.h>
#include <ferry/comm/communicator.h>
#include <ferry/graph/archive.h>
#include <ferry/wire/byte_order.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

int main() {
  const auto net = ferry::wire::to_bytes(6.342e-5f, ferry::wire::byte_order::network);
  const std::string_view check = "123456789";
  const std::map<std::string, double> metrics{{"loss", 0.25}};
  auto bytes = ferry::graph::write(metrics);
  auto back = bytes ? ferry::graph::read<std::map<std::string, double>>(*bytes)
                    : ferry::result<std::map<std::string, double>>(bytes.error());
  ferry::comm::communicator comm{ferry::comm::config{}};  // a world of one
  std::vector<float> grads{1.0f, 2.0f};
  comm.allreduce(grads, {.op = ferry::comm::reduce_op::avg});
  // checkpoint (and the zlib it links): save a tensor, open it, fetch it.
  const std::vector<float> weight{0.5f, -0.0f};
  const std::uint64_t shape[] = {2};
  const ferry::checkpoint::tensor_ref tensors[] = {
      {"w", ferry::codec::dtype::f32, shape, {}, 0, std::as_bytes(std::span(weight))}};
  const auto path = std::filesystem::temp_directory_path() / "ferry_consumer.ferry";
  const bool saved = static_cast<bool>(ferry::checkpoint::save(path, tensors, {{"step", "1"}}));
  auto r = ferry::checkpoint::open(path);
  const bool loaded = saved && r && r->get("w") && r->get("w")->bytes().size() == 8;
  std::filesystem::remove(path);
  const bool ok = loaded && grads[1] == 2.0f && net[0] == std::byte{0x38} &&
                  ferry::codec::crc32c(std::as_bytes(std::span(check))) == 0xE3069283u && back && *back == metrics;
  std::puts(ok ? "consumer ok" : "consumer FAILED");
  return ok ? 0 : 1;
}
