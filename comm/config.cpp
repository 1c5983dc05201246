#include "ferry/comm/config.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string_view>
#include <type_traits>

#include "ferry/comm/error.h"
#include "ferry/comm/frame.h"  // frame_header_size, trailer_size

namespace ferry::comm {
namespace {

error bad(std::string what) { return error(comm_errc::bad_config, std::move(what)); }

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

template <class T>
result<T, error> parse_number(const char* name, std::string_view text, T min, T max) {
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size() || !(value >= min && value <= max)) {
    const auto shown = [](T v) {
      if constexpr (std::is_floating_point_v<T>) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%g", v);
        return std::string(buf);
      } else {
        return std::to_string(v);
      }
    };
    return bad(std::string(name) + "='" + std::string(text) + "' is not a number from " + shown(min) + " to " +
               shown(max));
  }
  return value;
}

// The first of `names` that is set, as a number into `out`; false if none is.
template <class T>
result<bool, error> read_number(std::initializer_list<const char*> names, T min, T max, T& out) {
  for (const char* name : names) {
    if (const char* v = env(name)) {
      FERRY_TRY_ASSIGN(out, parse_number<T>(name, v, min, max));
      return true;
    }
  }
  return false;
}

result<std::string, error> read_secret_file(const char* path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return error(errc::io_error, std::string("FERRY_SECRET_FILE='") + path + "' cannot be read", errno);
  std::ostringstream s;
  s << in.rdbuf();
  std::string secret = s.str();
  if (!secret.empty() && secret.back() == '\n') secret.pop_back();
  if (!secret.empty() && secret.back() == '\r') secret.pop_back();
  return secret;
}

}  // namespace

result<config, error> config::from_env() {
  std::uint32_t world_size = 0;
  std::uint32_t rank = 0;
  FERRY_TRY_ASSIGN(const bool has_size, read_number<std::uint32_t>({"WORLD_SIZE", "SLURM_NTASKS"}, 1, UINT32_MAX, world_size));
  if (!has_size) return bad("WORLD_SIZE (or SLURM_NTASKS) is not set");
  FERRY_TRY_ASSIGN(const bool has_rank, read_number<std::uint32_t>({"RANK", "SLURM_PROCID"}, 0, UINT32_MAX, rank));
  if (!has_rank) return bad("RANK (or SLURM_PROCID) is not set");
  return from_env(rank, world_size);
}

result<config, error> config::from_env(std::uint32_t rank, std::uint32_t world_size) {
  config c;
  c.rank = rank;
  c.world_size = world_size;
  if (const char* a = env("MASTER_ADDR")) c.master_addr = a;
  FERRY_TRY(read_number<std::uint16_t>({"MASTER_PORT"}, 0, 65535, c.master_port));
  if (const char* s = env("FERRY_SECRET")) {
    c.secret = s;
  } else if (const char* f = env("FERRY_SECRET_FILE")) {
    FERRY_TRY_ASSIGN(c.secret, read_secret_file(f));
  }
  double seconds = 0;
  if (const char* t = env("FERRY_TIMEOUT")) {
    const std::string_view text(t);
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), seconds);
    if (ec != std::errc{} || end != text.data() + text.size() || !(seconds > 0) || seconds > 86400 * 7) {
      return bad("FERRY_TIMEOUT='" + std::string(text) + "' is not a number of seconds above 0");
    }
    c.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000 + 0.5));
  }
  FERRY_TRY(read_number<std::uint32_t>({"FERRY_CHUNK_BYTES"}, 8, 1u << 30, c.chunk_bytes));
  FERRY_TRY(read_number<std::uint32_t>({"FERRY_SEND_BUFFER"}, 0, 1u << 30, c.send_buffer_bytes));
  if (const char* a = env("FERRY_AUTH")) {
    const auto mode = frame_auth_from_name(a);
    if (!mode) return bad("FERRY_AUTH=" + quote(a) + " is not one of none, frames, encrypt");
    c.auth = *mode;
  }
  if (const char* a = env("FERRY_RING_ORDER")) {
    const std::string_view text(a);
    if (text == "node") {
      c.order = ring_order::node;
    } else if (text == "rank") {
      c.order = ring_order::rank;
    } else {
      return bad("FERRY_RING_ORDER='" + std::string(text) + "' is not one of node, rank");
    }
  }
  if (const char* a = env("FERRY_SHARED_MEMORY")) {
    const std::string_view text(a);
    if (text != "on" && text != "off") return bad("FERRY_SHARED_MEMORY=" + quote(a) + " is not one of on, off");
    c.shared_memory = text == "on";
  }
  if (const char* a = env("FERRY_HOST_ID")) c.host_id = a;
  FERRY_TRY_ASSIGN(c.link, link_cost_from_env());
  if (const char* a = env("FERRY_ALGORITHM")) {
    const auto chosen = algorithm_from_name(a);
    if (!chosen) return bad("FERRY_ALGORITHM=" + quote(a) + " is not one of ring, recursive_doubling, rabenseifner, auto");
    c.algorithm = *chosen;
  }
  FERRY_TRY(c.validate());
  return c;
}

result<link_cost, error> config::link_cost_from_env() {
  link_cost link;
  double latency_us = link.alpha_s * 1e6;
  double gbps = 8e-9 / link.beta_s_per_byte;
  FERRY_TRY(read_number<double>({"FERRY_LINK_LATENCY_US"}, 0.0, 1e7, latency_us));
  FERRY_TRY(read_number<double>({"FERRY_LINK_GBPS"}, 1e-3, 1e4, gbps));
  link.alpha_s = latency_us * 1e-6;
  link.beta_s_per_byte = 8e-9 / gbps;
  return link;
}

result<void, error> config::validate() const {
  if (world_size == 0) return bad("the world size must be at least 1");
  if (rank >= world_size) {
    return bad("rank " + std::to_string(rank) + " is not below the world size " + std::to_string(world_size));
  }
  if (world_size > 1 && secret.empty()) {
    return bad("no shared secret: set FERRY_SECRET or FERRY_SECRET_FILE to the same value on every rank");
  }
  if (timeout.count() <= 0) return bad("the timeout must be positive");
  // A multiple of 8: a frame holds at least one element of every dtype.
  if (chunk_bytes < 8 || chunk_bytes % 8 != 0) return bad("chunk_bytes must be a positive multiple of 8");
  if (std::find(std::begin(all_frame_auths), std::end(all_frame_auths), auth) == std::end(all_frame_auths)) {
    return bad("auth is not one of none, frames, encrypt");
  }
  const std::size_t overhead = frame_header_size + trailer_size(auth);
  if (std::uint64_t{chunk_bytes} + overhead > max_frame_bytes) {
    return bad("max_frame_bytes (" + std::to_string(max_frame_bytes) + ") must hold a chunk of " +
               std::to_string(chunk_bytes) + " bytes plus " + std::to_string(overhead) + " bytes of header and " +
               (auth == frame_auth::none ? "CRC" : "tag"));
  }
  if (world_size > 1 && master_addr.empty()) return bad("MASTER_ADDR is empty");
  if (std::find(std::begin(all_algorithms), std::end(all_algorithms), algorithm) == std::end(all_algorithms)) {
    return bad("algorithm is not one of ring, recursive_doubling, rabenseifner, auto");
  }
  return {};
}

}  // namespace ferry::comm
