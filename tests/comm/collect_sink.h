// A frame_sink for tests of the frame decoder: keeps every frame's header
// and payload and every ABORT, in order; refuses headers with `refuse`
// when it is set.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "ferry/comm/frame.h"

namespace ferry::comm::test {

struct collect final : frame_sink {
  std::vector<std::vector<std::byte>> payloads;
  std::vector<frame_header> headers;
  std::vector<abort_message> aborts;
  std::vector<std::byte> buffer;
  error_code refuse;  // returned from on_header when set
  result<std::span<std::byte>> on_header(const frame_header& h) override {
    if (refuse) return refuse;
    buffer.assign(*payload_size(h), std::byte{0});
    return std::span(buffer);
  }
  result<void> on_frame(const frame_header& h, std::span<std::byte> p) override {
    headers.push_back(h);
    payloads.emplace_back(p.begin(), p.end());
    return {};
  }
  result<void> on_abort(const abort_message& a) override {
    aborts.push_back(a);
    return {};
  }
};

}  // namespace ferry::comm::test
