#include "ferry/comm/handshake.h"

#include <netinet/in.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/kdf.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include <algorithm>
#include <cstring>

#include "ferry/base/require.h"
#include "ferry/codec/crc32c.h"
#include "ferry/comm/detail/fail.h"
#include "ferry/comm/detail/rendezvous.h"
#include "ferry/comm/error.h"
#include "ferry/wire/cursor.h"

namespace ferry::comm {
namespace {

using detail::clock;
using detail::fail;
using detail::socket;

using wire::byte_order;
constexpr auto le = byte_order::little;

using magic_t = std::array<std::byte, 4>;
constexpr magic_t make_magic(char c) { return {std::byte{'F'}, std::byte{'D'}, std::byte(c), std::byte{'1'}}; }
constexpr magic_t hello_magic = make_magic('H');
constexpr magic_t auth_magic = make_magic('A');
constexpr magic_t reject_magic = make_magic('R');
constexpr magic_t table_magic = make_magic('T');
constexpr std::size_t arch_size = 16;
constexpr std::size_t entry_size = 20;

bool has_magic(std::span<const std::byte> b, const magic_t& m) {
  return b.size() >= 4 && std::equal(m.begin(), m.end(), b.begin());
}

template <class T>
void put(std::span<std::byte> b, std::size_t at, T v) {
  wire::store<T>(v, b.data() + at, le);
}

bool valid_arch(std::span<const std::byte> a) {
  // Printable ASCII, then NUL padding only.
  std::size_t i = 0;
  while (i < a.size() && a[i] != std::byte{0}) {
    const auto c = static_cast<unsigned char>(a[i]);
    if (c < 0x21 || c > 0x7E) return false;
    ++i;
  }
  if (i == 0) return false;
  return std::all_of(a.begin() + static_cast<std::ptrdiff_t>(i), a.end(), [](std::byte c) { return c == std::byte{0}; });
}

// Reads one message's magic; a REJECT is turned into the error it carries.
magic_t read_magic(const socket& s, clock::time_point deadline, const std::string& who) {
  magic_t m{};
  recv_all(s, m, deadline, who);
  if (m != reject_magic) return m;
  std::array<std::byte, 4> head{};
  recv_all(s, head, deadline, who);
  const std::uint16_t len = *wire::reader(head).read_le_at<std::uint16_t>(2);  // 4 bytes hold it
  if (len > max_reject_text) fail(comm_errc::protocol_error, who + " sent a malformed REJECT");
  std::vector<std::byte> body(4 + std::size_t{len});
  std::copy(head.begin(), head.end(), body.begin());
  recv_all(s, std::span(body).subspan(4), deadline, who);
  const auto r = parse_reject(body);
  if (!r) fail(comm_errc::protocol_error, who + " sent a malformed REJECT");
  throw comm_error(r->code, std::nullopt, who + " refused the connection: " + r->text);
}

void send_reject(const socket& s, error_code code, const std::string& text, clock::time_point deadline) {
  try {
    send_all(s, encode_reject(code, text), std::min(deadline, clock::now() + std::chrono::seconds(1)), "peer");
  } catch (const comm_error&) {
    // The peer is gone already; our own error says what happened.
  }
}

std::array<std::byte, hello_size> read_hello_bytes(const socket& s, clock::time_point deadline, const std::string& who) {
  std::array<std::byte, hello_size> b{};
  const magic_t m = read_magic(s, deadline, who);
  if (m != hello_magic) fail(comm_errc::protocol_error, who + " did not open with a ferry HELLO (is it a ferry rank?)");
  std::copy(m.begin(), m.end(), b.begin());
  recv_all(s, std::span(b).subspan(4), deadline, who);
  return b;
}

std::array<std::byte, 32> random_nonce() {
  std::array<std::byte, 32> n{};
  if (RAND_bytes(reinterpret_cast<unsigned char*>(n.data()), static_cast<int>(n.size())) != 1) {
    fail(comm_errc::auth_failed, "OpenSSL could not produce random bytes for the challenge");
  }
  return n;
}

std::string version_error(const hello& mine, const hello& theirs) {
  return ferry::context(describe(mine), " speaks ferry protocol version ", mine.version, " but ", describe(theirs),
                        " speaks version ", theirs.version);
}

}  // namespace

std::string describe(const hello& h) {
  return ferry::context("rank ", h.rank, " (", h.arch.empty() ? std::string("?") : h.arch, ", ",
                        h.order == byte_order::big ? "big" : "little", "-endian, ", 8 * h.word_size, "-bit)");
}

std::array<std::byte, hello_size> encode_hello(const hello& h) {
  std::array<std::byte, hello_size> b{};
  std::copy(hello_magic.begin(), hello_magic.end(), b.begin());
  put<std::uint8_t>(b, 4, h.version);
  put<std::uint8_t>(b, 5, static_cast<std::uint8_t>(h.role));
  put<std::uint8_t>(b, 6, h.order == byte_order::big ? 1 : 0);
  put<std::uint8_t>(b, 7, h.word_size);
  put<std::uint32_t>(b, 8, h.rank);
  put<std::uint32_t>(b, 12, h.world_size);
  put<std::uint32_t>(b, 16, h.chunk_bytes);
  put<std::uint32_t>(b, 20, h.max_frame_bytes);
  put<std::uint16_t>(b, 24, h.listen_port);
  put<std::uint8_t>(b, 26, static_cast<std::uint8_t>(h.auth));
  put<std::uint8_t>(b, 27, static_cast<std::uint8_t>(h.algorithm));
  const std::size_t n = std::min(h.arch.size(), arch_size);
  std::memcpy(b.data() + 28, h.arch.data(), n);
  std::copy(h.nonce.begin(), h.nonce.end(), b.begin() + 44);
  put<std::uint32_t>(b, 76, codec::crc32c(std::span<const std::byte>(b).first(76)));
  return b;
}

result<hello> parse_hello(std::span<const std::byte, hello_size> b) noexcept {
  if (!has_magic(b, hello_magic)) return errc::bad_magic;
  // The fields in their order (handshake.h), all in the 80 bytes.
  wire::reader in(b);
  std::uint8_t version = 0, role = 0, order = 0, word_size = 0, auth = 0, algorithm = 0;
  std::uint32_t rank = 0, world_size = 0, chunk_bytes = 0, max_frame_bytes = 0, crc = 0;
  std::uint16_t listen_port = 0;
  FERRY_TRY(in.skip(hello_magic.size()));
  FERRY_TRY(in.read_le(version, role, order, word_size, rank, world_size, chunk_bytes, max_frame_bytes, listen_port,
                       auth, algorithm));
  FERRY_TRY_ASSIGN(const auto arch, in.read_bytes(arch_size));
  FERRY_TRY_ASSIGN(const auto nonce, in.read_bytes(32));
  const std::size_t covered = in.position();  // what the CRC covers
  FERRY_TRY(in.read_le(crc));
  hello h;
  h.version = version;
  h.word_size = word_size;
  h.rank = rank;
  if (role < 1 || role > 4 || order > 1) return errc::bad_value;
  h.role = static_cast<comm::role>(role);
  h.order = order == 1 ? byte_order::big : byte_order::little;
  if (!valid_arch(arch)) return errc::bad_value;
  for (std::byte c : arch) {
    if (c == std::byte{0}) break;
    h.arch.push_back(static_cast<char>(c));
  }
  if (h.version != protocol_version) return h;  // enough to report it
  if (crc != codec::crc32c(b.first(covered))) return errc::checksum_mismatch;
  if (h.word_size != 4 && h.word_size != 8) return errc::bad_value;
  h.world_size = world_size;
  h.chunk_bytes = chunk_bytes;
  h.max_frame_bytes = max_frame_bytes;
  h.listen_port = listen_port;
  if (auth > 2 || algorithm > 3) return errc::bad_value;
  h.auth = static_cast<frame_auth>(auth);
  h.algorithm = static_cast<comm::algorithm>(algorithm);
  std::copy(nonce.begin(), nonce.end(), h.nonce.begin());
  if (h.world_size == 0 || h.rank >= h.world_size) return comm_errc::config_mismatch;
  return h;
}

std::string compare_worlds(const hello& mine, const hello& theirs) {
  std::string diff;
  auto field = [&](const char* name, std::uint32_t a, std::uint32_t b) {
    if (a == b) return;
    diff += ferry::context(diff.empty() ? "" : "; ", name, " ", a, " on ", describe(mine), " but ", b, " on ",
                           describe(theirs));
  };
  field("world size", mine.world_size, theirs.world_size);
  field("chunk bytes", mine.chunk_bytes, theirs.chunk_bytes);
  field("max frame bytes", mine.max_frame_bytes, theirs.max_frame_bytes);
  if (mine.algorithm != theirs.algorithm) {
    diff += (diff.empty() ? "" : "; ") + std::string("allreduce FERRY_ALGORITHM=") + std::string(name(mine.algorithm)) +
            " on " + describe(mine) + " but FERRY_ALGORITHM=" + std::string(name(theirs.algorithm)) + " on " +
            describe(theirs);
  }
  if (mine.auth != theirs.auth) {
    diff += (diff.empty() ? "" : "; ") + std::string("frame authentication FERRY_AUTH=") + std::string(name(mine.auth)) +
            " on " + describe(mine) + " but FERRY_AUTH=" + std::string(name(theirs.auth)) + " on " + describe(theirs);
  }
  if (diff.empty() && mine.rank == theirs.rank) {
    diff = ferry::context("two processes claim rank ", mine.rank, ": ", describe(mine), " and ", describe(theirs));
  }
  return diff.empty() ? diff : "world configuration mismatch: " + diff;
}

std::array<std::byte, 32> auth_proof(std::string_view secret, bool initiator,
                                     std::span<const std::byte, hello_size> initiator_hello,
                                     std::span<const std::byte, hello_size> acceptor_hello) {
  const std::string_view label = initiator ? "ferry-dist-1 initiator" : "ferry-dist-1 acceptor";
  std::vector<unsigned char> message(label.begin(), label.end());
  const auto* i = reinterpret_cast<const unsigned char*>(initiator_hello.data());
  const auto* a = reinterpret_cast<const unsigned char*>(acceptor_hello.data());
  message.insert(message.end(), i, i + hello_size);
  message.insert(message.end(), a, a + hello_size);
  std::array<std::byte, 32> mac{};
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), message.data(), message.size(),
           reinterpret_cast<unsigned char*>(mac.data()), &len) == nullptr ||
      len != mac.size()) {
    fail(comm_errc::auth_failed, "OpenSSL HMAC-SHA256 failed");
  }
  return mac;
}

frame_keys derive_frame_keys(frame_auth mode, std::string_view secret, std::span<const std::byte, 32> initiator_nonce,
                             std::span<const std::byte, 32> acceptor_nonce) {
  std::array<unsigned char, 64> salt{};
  std::memcpy(salt.data(), initiator_nonce.data(), 32);
  std::memcpy(salt.data() + 32, acceptor_nonce.data(), 32);
  EVP_KDF* kdf = EVP_KDF_fetch(nullptr, "HKDF", nullptr);
  EVP_KDF_CTX* ctx = kdf != nullptr ? EVP_KDF_CTX_new(kdf) : nullptr;
  EVP_KDF_free(kdf);  // the context holds its own reference
  if (ctx == nullptr) fail(comm_errc::auth_failed, "OpenSSL's HKDF is not available");
  auto derive = [&](const char* sender, frame_key& out) {
    const std::string info = "ferry-comm-2 " + std::string(name(mode)) + " " + sender;
    char digest[] = "SHA256";
    std::string ikm(secret);
    const OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, ikm.data(), ikm.size()),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, salt.data(), salt.size()),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, const_cast<char*>(info.data()), info.size()),
        OSSL_PARAM_construct_end()};
    const bool ok = EVP_KDF_derive(ctx, reinterpret_cast<unsigned char*>(out.data()), out.size(), params) == 1;
    OPENSSL_cleanse(ikm.data(), ikm.size());
    return ok;
  };
  frame_keys keys;
  const bool ok = derive("initiator", keys.initiator) && derive("acceptor", keys.acceptor);
  EVP_KDF_CTX_free(ctx);
  OPENSSL_cleanse(salt.data(), salt.size());
  if (!ok) fail(comm_errc::auth_failed, "OpenSSL's HKDF-SHA256 failed");
  return keys;
}

std::vector<std::byte> encode_reject(error_code code, std::string_view text) {
  text = text.substr(0, max_reject_text);
  std::vector<std::byte> b(8 + text.size());
  std::copy(reject_magic.begin(), reject_magic.end(), b.begin());
  put<std::uint16_t>(b, 4, code.value());
  put<std::uint16_t>(b, 6, static_cast<std::uint16_t>(text.size()));
  if (!text.empty()) std::memcpy(b.data() + 8, text.data(), text.size());
  return b;
}

result<reject> parse_reject(std::span<const std::byte> body) noexcept {
  wire::reader in(body);
  std::uint16_t code = 0, len = 0;
  FERRY_TRY(in.read_le(code, len));
  if (len > max_reject_text) return errc::bad_value;
  FERRY_TRY_ASSIGN(const auto text, in.read_bytes(len));
  if (!in.at_end()) return errc::trailing_bytes;
  reject r;
  switch (static_cast<comm_errc>(code)) {
    case comm_errc::auth_failed:
    case comm_errc::version_mismatch:
    case comm_errc::config_mismatch:
    case comm_errc::protocol_error: r.code = error_code::from_value(code); break;
    default: r.code = comm_errc::protocol_error; break;
  }
  try {
    r.text.assign(reinterpret_cast<const char*>(text.data()), text.size());
  } catch (...) {
    return errc::limit_exceeded;
  }
  return r;
}

namespace detail {

std::vector<std::byte> encode_table(std::span<const table_entry> entries) {
  std::vector<std::byte> b(8 + entry_size * entries.size() + 4);
  std::copy(table_magic.begin(), table_magic.end(), b.begin());
  put<std::uint32_t>(b, 4, static_cast<std::uint32_t>(entries.size()));
  std::size_t at = 8;
  for (const table_entry& e : entries) {
    if (e.at.family() == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(&e.at.storage);
      put<std::uint8_t>(b, at, 4);
      std::memcpy(b.data() + at + 4, &in->sin_addr, 4);
    } else if (e.at.family() == AF_INET6) {
      const auto* in = reinterpret_cast<const sockaddr_in6*>(&e.at.storage);
      put<std::uint8_t>(b, at, 6);
      std::memcpy(b.data() + at + 4, &in->sin6_addr, 16);
    }
    if (e.at.family() != AF_UNSPEC) put<std::uint16_t>(b, at + 2, e.at.port());
    if (at == 8) put<std::uint8_t>(b, at + 1, static_cast<std::uint8_t>(e.order));
    at += entry_size;
  }
  put<std::uint32_t>(b, at, codec::crc32c(std::span<const std::byte>(b).first(at)));
  return b;
}

result<std::vector<table_entry>> parse_table(std::span<const std::byte> b, std::uint32_t world_size) noexcept {
  if (b.size() < 8) return errc::truncated;
  if (!has_magic(b, table_magic)) return errc::bad_magic;
  wire::reader in(b);
  FERRY_TRY(in.skip(table_magic.size()));
  FERRY_TRY_ASSIGN(const std::uint32_t count, in.read_le<std::uint32_t>());
  if (count != world_size) return comm_errc::config_mismatch;
  // The entries, then the CRC of everything before it, then nothing.
  if (count > in.remaining() / entry_size) return errc::truncated;
  FERRY_TRY_ASSIGN(auto entries, in.sub(entry_size * std::size_t{count}));
  const std::size_t body = in.position();
  FERRY_TRY_ASSIGN(const std::uint32_t crc, in.read_le<std::uint32_t>());
  if (!in.at_end()) return errc::trailing_bytes;
  if (crc != codec::crc32c(b.first(body))) return errc::checksum_mismatch;
  std::vector<table_entry> out;
  try {
    out.resize(count);
  } catch (...) {
    return errc::limit_exceeded;
  }
  for (std::size_t i = 0; i < count; ++i) {
    std::uint8_t family = 0, order = 0;  // entry 0: the ring order; else reserved
    std::uint16_t port = 0;
    FERRY_TRY(entries.read_le(family, order, port));
    FERRY_TRY_ASSIGN(const auto address, entries.read_bytes(16));
    if (order > (i == 0 ? 1 : 0)) return errc::bad_value;
    out[i].order = static_cast<ring_order>(order);
    endpoint& e = out[i].at;
    if (family == 4) {
      auto* in4 = reinterpret_cast<sockaddr_in*>(&e.storage);
      in4->sin_family = AF_INET;
      std::memcpy(&in4->sin_addr, address.data(), 4);
      e.length = sizeof(sockaddr_in);
    } else if (family == 6) {
      auto* in6 = reinterpret_cast<sockaddr_in6*>(&e.storage);
      in6->sin6_family = AF_INET6;
      std::memcpy(&in6->sin6_addr, address.data(), 16);
      e.length = sizeof(sockaddr_in6);
    } else if (family != 0) {
      return errc::bad_value;
    }
    if (family != 0) e.set_port(port);
  }
  return out;
}

namespace {

// Both sides, after the HELLOs: AUTH one way, AUTH the other, then the
// configuration check.
void finish(const socket& s, bool initiator, const hello& mine, const hello& theirs,
            const std::array<std::byte, hello_size>& i_bytes, const std::array<std::byte, hello_size>& a_bytes,
            std::string_view secret, clock::time_point deadline, const std::string& who, frame_keys* keys) {
  auto send_auth = [&] {
    std::array<std::byte, auth_size> m{};
    std::copy(auth_magic.begin(), auth_magic.end(), m.begin());
    const auto proof = auth_proof(secret, initiator, i_bytes, a_bytes);
    std::copy(proof.begin(), proof.end(), m.begin() + 4);
    send_all(s, m, deadline, who);
  };
  auto check_auth = [&] {
    std::array<std::byte, auth_size> m{};
    const magic_t magic = read_magic(s, deadline, who);
    if (magic != auth_magic) fail(comm_errc::protocol_error, who + " sent something other than AUTH");
    recv_all(s, std::span(m).subspan(4), deadline, who);
    const auto expected = auth_proof(secret, !initiator, i_bytes, a_bytes);
    if (CRYPTO_memcmp(expected.data(), m.data() + 4, expected.size()) != 0) {
      const std::string text = describe(mine) + " rejected " + describe(theirs) +
                               ": it did not prove the shared secret (wrong FERRY_SECRET?)";
      send_reject(s, comm_errc::auth_failed, text, deadline);
      fail(comm_errc::auth_failed, text);
    }
  };
  if (initiator) {
    send_auth();
    check_auth();
  } else {
    check_auth();
    send_auth();
  }
  if (const std::string diff = compare_worlds(mine, theirs); !diff.empty()) fail(comm_errc::config_mismatch, diff);
  if (keys != nullptr && mine.auth != frame_auth::none) {
    *keys = derive_frame_keys(mine.auth, secret, initiator ? mine.nonce : theirs.nonce,
                              initiator ? theirs.nonce : mine.nonce);
  }
}

}  // namespace

hello handshake_initiate(const socket& s, hello mine, std::string_view secret, clock::time_point deadline,
                         const std::string& who, frame_keys* keys) {
  mine.nonce = random_nonce();
  const auto mine_bytes = encode_hello(mine);
  send_all(s, mine_bytes, deadline, who);
  const auto theirs_bytes = read_hello_bytes(s, deadline, who);
  const auto theirs = parse_hello(theirs_bytes);
  if (!theirs) fail(theirs.error(), who + " sent a malformed HELLO: " + std::string(message(theirs.error())));
  if (theirs->version != protocol_version) fail(comm_errc::version_mismatch, version_error(mine, *theirs));
  if (theirs->role != role::reply) fail(comm_errc::protocol_error, who + " answered with a HELLO that is not a reply");
  finish(s, true, mine, *theirs, mine_bytes, theirs_bytes, secret, deadline, who, keys);
  return *theirs;
}

hello handshake_accept(const socket& s, hello mine, std::string_view secret, clock::time_point deadline,
                       frame_keys* keys) {
  const std::string who = "the connecting peer";
  mine.role = role::reply;
  mine.listen_port = 0;
  mine.nonce = random_nonce();
  const auto theirs_bytes = read_hello_bytes(s, deadline, who);
  const auto theirs = parse_hello(theirs_bytes);
  if (!theirs) {
    const std::string text = "malformed HELLO: " + std::string(message(theirs.error()));
    send_reject(s, comm_errc::protocol_error, describe(mine) + " refused a " + text, deadline);
    fail(theirs.error(), who + " sent a " + text);
  }
  if (theirs->version != protocol_version) {
    const std::string text = version_error(mine, *theirs);
    send_reject(s, comm_errc::version_mismatch, text, deadline);
    fail(comm_errc::version_mismatch, text);
  }
  if (theirs->role == role::reply) fail(comm_errc::protocol_error, who + " opened with a reply HELLO");
  const auto mine_bytes = encode_hello(mine);
  send_all(s, mine_bytes, deadline, who);
  finish(s, false, mine, *theirs, theirs_bytes, mine_bytes, secret, deadline, describe(*theirs), keys);
  return *theirs;
}

}  // namespace detail
}  // namespace ferry::comm
