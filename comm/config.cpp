#include "ferry/comm/config.h"

#include <charconv>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string_view>

#include "ferry/comm/error.h"

namespace ferry::comm {
namespace {

[[noreturn]] void bad(const std::string& what) { throw comm_error(comm_errc::bad_config, std::nullopt, what); }

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

template <class T>
T parse_number(const char* name, std::string_view text, T min, T max) {
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size() || value < min || value > max) {
    bad(std::string(name) + "='" + std::string(text) + "' is not a number from " + std::to_string(min) + " to " +
        std::to_string(max));
  }
  return value;
}

// The first of `names` that is set, as a number.
template <class T>
bool read_number(std::initializer_list<const char*> names, T min, T max, T& out) {
  for (const char* name : names) {
    if (const char* v = env(name)) {
      out = parse_number<T>(name, v, min, max);
      return true;
    }
  }
  return false;
}

std::string read_secret_file(const char* path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) bad(std::string("FERRY_SECRET_FILE='") + path + "' cannot be read");
  std::ostringstream s;
  s << in.rdbuf();
  std::string secret = s.str();
  if (!secret.empty() && secret.back() == '\n') secret.pop_back();
  if (!secret.empty() && secret.back() == '\r') secret.pop_back();
  return secret;
}

}  // namespace

config config::from_env() {
  config c;
  if (const char* a = env("MASTER_ADDR")) c.master_addr = a;
  read_number<std::uint16_t>({"MASTER_PORT"}, 0, 65535, c.master_port);
  if (!read_number<std::uint32_t>({"WORLD_SIZE", "SLURM_NTASKS"}, 1, UINT32_MAX, c.world_size)) {
    bad("WORLD_SIZE (or SLURM_NTASKS) is not set");
  }
  if (!read_number<std::uint32_t>({"RANK", "SLURM_PROCID"}, 0, UINT32_MAX, c.rank)) {
    bad("RANK (or SLURM_PROCID) is not set");
  }
  if (const char* s = env("FERRY_SECRET")) {
    c.secret = s;
  } else if (const char* f = env("FERRY_SECRET_FILE")) {
    c.secret = read_secret_file(f);
  }
  double seconds = 0;
  if (const char* t = env("FERRY_TIMEOUT")) {
    const std::string_view text(t);
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), seconds);
    if (ec != std::errc{} || end != text.data() + text.size() || !(seconds > 0) || seconds > 86400 * 7) {
      bad("FERRY_TIMEOUT='" + std::string(text) + "' is not a number of seconds above 0");
    }
    c.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000 + 0.5));
  }
  read_number<std::uint32_t>({"FERRY_CHUNK_BYTES"}, 4, 1u << 30, c.chunk_bytes);
  c.validate();
  return c;
}

void config::validate() const {
  if (world_size == 0) bad("the world size must be at least 1");
  if (rank >= world_size) {
    bad("rank " + std::to_string(rank) + " is not below the world size " + std::to_string(world_size));
  }
  if (world_size > 1 && secret.empty()) {
    bad("no shared secret: set FERRY_SECRET or FERRY_SECRET_FILE to the same value on every rank");
  }
  if (timeout.count() <= 0) bad("the timeout must be positive");
  if (chunk_bytes < 4 || chunk_bytes % 4 != 0) bad("chunk_bytes must be a positive multiple of 4");
  if (std::uint64_t{chunk_bytes} + 32 > max_frame_bytes) {
    bad("max_frame_bytes (" + std::to_string(max_frame_bytes) + ") must hold a chunk of " +
        std::to_string(chunk_bytes) + " bytes plus 32 bytes of header and CRC");
  }
  if (world_size > 1 && master_addr.empty()) bad("MASTER_ADDR is empty");
}

}  // namespace ferry::comm
