#include "ferry/comm/detail/plan_checks.h"

#include <string>

#include "ferry/comm/detail/reduce.h"

namespace ferry::comm::detail {

const char* encoding_name(encoding e) {
  return e == encoding::bf16 ? "bf16" : e == encoding::f16 ? "f16" : "raw";
}

void expect_header(const link& l, std::uint32_t from, const frame_header& h, codec::dtype type, encoding enc,
                   std::size_t count, const char* what) {
  if (h.type != type || h.enc != enc) {
    l.fail(comm_errc::config_mismatch, from,
           rank_name(from) + " sent " + std::string(codec::name(h.type)) + " as " + encoding_name(h.enc) +
               " in the " + what + " where this rank expects " + std::string(codec::name(type)) + " as " +
               encoding_name(enc) + ": do all ranks pass the same options?");
  }
  if (h.count != count) {
    l.fail(errc::size_mismatch, from,
           rank_name(from) + " sent " + std::to_string(h.count) + " elements for chunk " + std::to_string(h.chunk) +
               " of the " + what + " where " + std::to_string(count) +
               " were expected: do all ranks pass buffers of the same size?");
  }
}

void check_bools(const link& l, std::uint32_t from, std::span<const std::byte> payload, const char* what) {
  const std::size_t i = first_bad_bool(payload.data(), payload.size());
  if (i != payload.size()) {
    l.fail(errc::bad_value, from,
           rank_name(from) + " sent the byte " + std::to_string(std::to_integer<unsigned>(payload[i])) +
               " as a bool in the " + what);
  }
}

void check_own_bools(const link& l, codec::dtype type, std::span<const std::byte> data, const char* what) {
  if (type != codec::dtype::boolean) return;
  const std::size_t i = first_bad_bool(data.data(), data.size());
  if (i != data.size()) {
    l.fail(comm_errc::bad_argument, std::nullopt,
           std::string(what) + " of bools: element " + std::to_string(i) + " holds the byte " +
               std::to_string(std::to_integer<unsigned>(data[i])));
  }
}

std::uint32_t frame_count(const link& l, std::size_t frames) {
  if (frames > UINT32_MAX) {
    l.fail(errc::limit_exceeded, std::nullopt, "a collective this large needs more than 2^32 frames; raise chunk_bytes");
  }
  return static_cast<std::uint32_t>(frames);
}

}  // namespace ferry::comm::detail
