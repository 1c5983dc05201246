#include "ferry/comm/detail/shared_memory.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <system_error>

#include "ferry/comm/detail/reduce.h"
#include "ferry/comm/error.h"
#include "ferry/base/arch.h"

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace ferry::comm::detail {

struct shared_segment::header {
  std::array<char, 8> magic;
  std::array<std::byte, 16> nonce;
  std::uint32_t members;
  std::uint32_t reserved;
  std::uint64_t slot_bytes;
  alignas(64) std::atomic<std::uint32_t> arrived;
  alignas(64) std::atomic<std::uint32_t> generation;
  std::atomic<std::uint32_t> failed;
  std::atomic<std::uint32_t> error_code;  // of the member that gave up with a comm_error, else 0
  std::atomic<std::uint32_t> error_rank;  // the rank that error names, or ~0
};

namespace {

// The header, each member's pid from byte 256, then its count of barriers
// arrived at, two banks of announcements
// (16 bytes per member), then the banks of slots from the next 4096-byte
// boundary.
constexpr std::size_t pid_offset = 256;
std::size_t arrivals_offset(std::uint32_t members) { return pid_offset + 4 * std::size_t{members}; }
std::size_t announce_offset(std::uint32_t members) { return pid_offset + (8 * std::size_t{members} + 15) / 16 * 16; }
std::size_t data_offset(std::uint32_t members) {
  return (announce_offset(members) + 2 * 16 * std::size_t{members} + 4095) / 4096 * 4096;
}

// Whether process `pid` has ended (gone, or a zombie its parent has not
// reaped yet): /proc/<pid>/stat's state field.
bool ended(std::int32_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(in, text)) return true;
  const auto close = text.rfind(')');
  return close == std::string::npos || close + 2 >= text.size() || text[close + 2] == 'Z' || text[close + 2] == 'X';
}
constexpr std::array<char, 8> magic{'F', 'E', 'R', 'R', 'Y', 'S', 'H', 'M'};
static_assert(sizeof(std::atomic<std::uint32_t>) == 4 && std::atomic<std::uint32_t>::is_always_lock_free);

std::size_t segment_bytes(std::uint32_t members, std::size_t slot_bytes) {
  return data_offset(members) + shared_segment::banks * std::size_t{members} * slot_bytes;
}

// Shared (not private) futexes: the waiters are other processes.
void futex_wake(std::atomic<std::uint32_t>& word) noexcept {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}
void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t seen, std::chrono::microseconds most) noexcept {
  timespec ts{static_cast<time_t>(most.count() / 1'000'000), static_cast<long>(most.count() % 1'000'000) * 1000};
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT, seen, &ts, nullptr, 0);
}

void add_file(EVP_MD_CTX* md, const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  EVP_DigestUpdate(md, line.data(), line.size() + 1);
}
void add_stat(EVP_MD_CTX* md, const char* path) {
  struct stat st {};
  const std::array<std::uint64_t, 2> id = ::stat(path, &st) == 0
                                              ? std::array<std::uint64_t, 2>{st.st_dev, st.st_ino}
                                              : std::array<std::uint64_t, 2>{~0ULL, ~0ULL};
  EVP_DigestUpdate(md, id.data(), sizeof(id));
}

// Copies a round into or out of the segment (n may be 0 with null
// pointers); `stream`, into a buffer too large for the caches (a whole
// collective of `stream_from` bytes or more): on x86-64 with non-temporal
// stores, which skip reading the destination's lines before writing them
// (a third of the memory traffic of the copy).
constexpr std::size_t stream_from = std::size_t{8} << 20;
void copy_round(std::byte* dst, const std::byte* src, std::size_t n, bool stream) noexcept {
#if defined(__x86_64__)
  if (stream && n >= 4096) {
    const std::size_t head = (16 - reinterpret_cast<std::uintptr_t>(dst) % 16) % 16;
    std::memcpy(dst, src, head);
    std::size_t i = head;
    for (; i + 64 <= n; i += 64) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
      const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
    }
    std::memcpy(dst + i, src + i, n - i);
    _mm_sfence();
    return;
  }
#endif
  (void)stream;
  if (n != 0) std::memcpy(dst, src, n);
}

}  // namespace

std::array<std::byte, 32> host_key(const std::string& host_id) {
  std::array<std::byte, 32> key{};
  EVP_MD_CTX* md = EVP_MD_CTX_new();
  if (md == nullptr) throw std::bad_alloc();
  EVP_DigestInit_ex(md, EVP_sha256(), nullptr);
  add_file(md, "/proc/sys/kernel/random/boot_id");
  add_stat(md, "/proc/self/ns/net");
  add_stat(md, "/proc/self/ns/ipc");
  add_stat(md, "/proc/self/ns/pid");  // the others' pids must mean the same processes
  add_stat(md, "/dev/shm");
  const std::uint32_t uid = ::geteuid();
  EVP_DigestUpdate(md, &uid, sizeof(uid));
  const std::string_view arch = base::host_arch();
  EVP_DigestUpdate(md, arch.data(), arch.size());
  const std::uint64_t id_size = host_id.size();
  EVP_DigestUpdate(md, &id_size, sizeof(id_size));
  EVP_DigestUpdate(md, host_id.data(), host_id.size());
  unsigned int length = 0;
  EVP_DigestFinal_ex(md, reinterpret_cast<unsigned char*>(key.data()), &length);
  EVP_MD_CTX_free(md);
  return key;
}

shared_segment::shared_segment(void* base, std::size_t bytes, std::uint32_t members, std::size_t slot_bytes,
                               std::uint32_t me, std::string name)
    : base_(base), bytes_(bytes), members_(members), slot_bytes_(slot_bytes), me_(me), name_(std::move(name)) {}

shared_segment::~shared_segment() {
  unlink();
  ::munmap(base_, bytes_);
}

void shared_segment::unlink() noexcept {
  if (!name_.empty()) ::shm_unlink(name_.c_str());
  name_.clear();
}

shared_segment::header& shared_segment::head() const noexcept { return *static_cast<header*>(base_); }

std::int32_t* shared_segment::pids() const noexcept {
  return static_cast<std::int32_t*>(static_cast<void*>(static_cast<std::byte*>(base_) + pid_offset));
}
std::atomic<std::uint32_t>* shared_segment::arrivals() const noexcept {
  void* at = static_cast<std::byte*>(base_) + arrivals_offset(members_);
  return static_cast<std::atomic<std::uint32_t>*>(at);
}

std::byte* shared_segment::slot(std::uint64_t round, std::uint32_t m) const noexcept {
  const auto bank = static_cast<std::size_t>(round % banks);
  return static_cast<std::byte*>(base_) + data_offset(members_) + (bank * members_ + m) * slot_bytes_;
}

std::unique_ptr<shared_segment> shared_segment::create(std::uint32_t members, std::size_t slot_bytes, segment_id& id) {
  std::array<unsigned char, 16> random{};
  if (RAND_bytes(random.data(), static_cast<int>(random.size())) != 1 ||
      RAND_bytes(reinterpret_cast<unsigned char*>(id.nonce.data()), static_cast<int>(id.nonce.size())) != 1) {
    throw std::runtime_error("OpenSSL could not make a random segment name");
  }
  std::string name = "/ferry-";
  for (const unsigned char b : random) {
    name += "0123456789abcdef"[b >> 4];
    name += "0123456789abcdef"[b & 15];
  }
  std::memcpy(id.name.data(), name.c_str(), name.size() + 1);
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "shm_open " + name);
  const std::size_t bytes = segment_bytes(members, slot_bytes);
  // fchmod: the umask may have taken bits away, never added; 0600 exactly.
  int err = ::fchmod(fd, 0600) != 0 ? errno : ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  void* base = MAP_FAILED;
  if (err == 0) {
    base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) err = errno;
  }
  ::close(fd);
  if (err != 0) {
    ::shm_unlink(name.c_str());
    throw std::system_error(err, std::generic_category(), "shared memory segment of " + std::to_string(bytes) + " bytes");
  }
  auto* h = new (base) header{};
  h->magic = magic;
  h->nonce = id.nonce;
  h->members = members;
  h->slot_bytes = slot_bytes;
  std::unique_ptr<shared_segment> seg(new shared_segment(base, bytes, members, slot_bytes, 0, name));
  seg->pids()[0] = ::getpid();
  return seg;
}

std::unique_ptr<shared_segment> shared_segment::open(const segment_id& id, std::uint32_t members,
                                                     std::size_t slot_bytes, std::uint32_t me) {
  const std::string name(id.name.data(), strnlen(id.name.data(), id.name.size()));
  if (name.rfind("/ferry-", 0) != 0 || name.size() != 7 + 32 || name.find('/', 1) != std::string::npos) {
    throw std::runtime_error("this host's leader could not make a shared memory segment");
  }
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "shm_open " + name);
  const std::size_t bytes = segment_bytes(members, slot_bytes);
  struct stat st {};
  std::string bad;
  if (::fstat(fd, &st) != 0) {
    bad = std::string("fstat: ") + std::strerror(errno);
  } else if (st.st_uid != ::geteuid()) {
    bad = "is owned by uid " + std::to_string(st.st_uid);
  } else if ((st.st_mode & 0777) != 0600) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 0777));
    bad = std::string("has mode ") + mode + ", not 0600";
  } else if (static_cast<std::uint64_t>(st.st_size) != bytes) {
    bad = "holds " + std::to_string(st.st_size) + " bytes, not " + std::to_string(bytes);
  }
  void* base = MAP_FAILED;
  if (bad.empty()) {
    base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) bad = std::string("mmap: ") + std::strerror(errno);
  }
  ::close(fd);
  if (!bad.empty()) throw std::runtime_error("shared memory segment " + name + " " + bad);
  std::unique_ptr<shared_segment> seg(new shared_segment(base, bytes, members, slot_bytes, me, {}));
  const header& h = seg->head();
  if (h.magic != magic || h.nonce != id.nonce || h.members != members || h.slot_bytes != slot_bytes) {
    throw std::runtime_error("shared memory segment " + name + " is not the one the leader announced (nonce or layout)");
  }
  seg->pids()[me] = ::getpid();
  return seg;
}

// In the bank of this collective's parity: a member writes the same bank
// again only two collectives later, after the barriers of the one between,
// which every member reaches after reading this one's.
std::uint64_t shared_segment::begin_collective(const announcement& a) noexcept {
  std::memcpy(static_cast<std::byte*>(base_) + announce_offset(members_) + 16 * ((collectives_ % 2) * members_ + me_),
              &a, sizeof(a));
  return round_;
}
void shared_segment::end_collective(std::uint64_t rounds) noexcept {
  round_ += rounds;
  ++collectives_;
}
shared_segment::announcement shared_segment::announced(std::uint32_t m) const noexcept {
  announcement a{};
  std::memcpy(&a, static_cast<const std::byte*>(base_) + announce_offset(members_) + 16 * ((collectives_ % 2) * members_ + m),
              sizeof(a));
  return a;
}

// The failed word goes 0 -> 1 (claimed by the first member to give up),
// then, once the error fields are written, to its final value (bit 31
// set): a reader that sees bit 31 sees the fields.
void shared_segment::give_up(wait_status why, std::uint32_t member, std::uint16_t code, std::uint32_t rank) noexcept {
  header& h = head();
  std::uint32_t none = 0;
  if (h.failed.compare_exchange_strong(none, 1, std::memory_order_acq_rel)) {
    h.error_code.store(code, std::memory_order_relaxed);
    h.error_rank.store(rank, std::memory_order_relaxed);
    h.failed.store((static_cast<std::uint32_t>(why) << 16) | (member & 0xFFFF) | (1U << 31), std::memory_order_release);
    h.generation.fetch_add(0x8000'0000U, std::memory_order_release);  // a change every waiter sees, once
  }
  futex_wake(h.generation);
}

shared_segment::wait_result shared_segment::barrier(std::chrono::milliseconds timeout, bool patient) {
  header& h = head();
  const std::uint32_t gen = h.generation.load(std::memory_order_acquire);
  const auto outcome = [&]() -> wait_result {
    std::uint32_t f = h.failed.load(std::memory_order_acquire);
    // Being written, a few stores away (bounded: the writer may have died).
    for (int i = 0; f == 1 && i < 1'000'000; ++i) f = h.failed.load(std::memory_order_acquire);
    if (f == 1) return {wait_status::gave_up};
    if (f == 0) return {};
    const auto why = static_cast<wait_status>((f >> 16) & 0xFF);
    return {why == wait_status::ok ? wait_status::gave_up : why, f & 0xFFFF,
            static_cast<std::uint16_t>(h.error_code.load(std::memory_order_relaxed)),
            h.error_rank.load(std::memory_order_relaxed)};
  };
  if (h.failed.load(std::memory_order_acquire) != 0) return outcome();
  const std::uint32_t mine = arrivals()[me_].load(std::memory_order_relaxed) + 1;
  arrivals()[me_].store(mine, std::memory_order_relaxed);
  if (h.arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == members_) {
    h.arrived.store(0, std::memory_order_relaxed);
    h.generation.store(gen + 1, std::memory_order_release);
    futex_wake(h.generation);
    return {};
  }
  // A short spin (the others are usually just behind), then sleep in the
  // kernel: ranks may outnumber cores. (Yielding the core for a while
  // before sleeping made 4 ranks on 2 cores slower and erratic: 9-18 ms
  // against 9-10 ms at 16 MB.)
  for (int i = 0; i < 256; ++i) {
    if (h.generation.load(std::memory_order_acquire) != gen) return outcome();
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
  using steady = std::chrono::steady_clock;
  const auto deadline = steady::now() + timeout;
  auto next_check = steady::now() + std::chrono::milliseconds(20);
  while (h.generation.load(std::memory_order_acquire) == gen) {
    if (h.failed.load(std::memory_order_acquire) != 0) break;
    const auto now = steady::now();
    if (now >= deadline && !patient) {
      // The first member that has not come this far is the one waited for.
      std::uint32_t late = me_;
      for (std::uint32_t m = 0; m < members_ && late == me_; ++m) {
        if (static_cast<std::int32_t>(arrivals()[m].load(std::memory_order_relaxed) - mine) < 0) late = m;
      }
      give_up(wait_status::timed_out, late);
      return outcome();
    }
    if (now >= next_check) {  // a member killed outright never arrives
      next_check = now + std::chrono::milliseconds(100);
      for (std::uint32_t m = 0; m < members_; ++m) {
        if (m != me_ && ended(pids()[m])) {
          give_up(wait_status::ended, m);
          return outcome();
        }
      }
    }
    const auto until = patient ? next_check : std::min(deadline, next_check);
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(until - now);
    futex_wait(h.generation, gen, std::max(left, std::chrono::microseconds(1)));
  }
  return outcome();
}

// ---------------------------------------------------------------------------
// host_rounds

void host_rounds::wait(bool patient) const {
  const auto w = seg.barrier(timeout, patient);
  const std::string me = "rank " + std::to_string(rank) + ": ";
  switch (w.status) {
    case shared_segment::wait_status::ok: return;
    case shared_segment::wait_status::timed_out:
      if (w.member == seg.me()) {
        throw comm_error(comm_errc::timed_out, std::nullopt,
                         me + "the shared-memory step went " + std::to_string(timeout.count()) + " ms without progress");
      }
      throw comm_error(comm_errc::timed_out, ranks[w.member],
                       me + "waiting for rank " + std::to_string(ranks[w.member]) + " (this host, shared memory) for " +
                           std::to_string(timeout.count()) + " ms");
    case shared_segment::wait_status::ended:
      throw comm_error(comm_errc::peer_lost, ranks[w.member],
                       me + "rank " + std::to_string(ranks[w.member]) + " of this host ended mid-collective");
    case shared_segment::wait_status::gave_up: break;
  }
  const std::string who = "rank " + std::to_string(ranks[w.member]) + " of this host";
  if (w.code != 0) {
    const std::optional<std::uint32_t> culprit =
        w.rank == ~std::uint32_t{0} ? std::nullopt : std::optional<std::uint32_t>(w.rank);
    throw comm_error(error_code::from_value(w.code), culprit,
                     me + who + " failed mid-collective" + (culprit ? ", naming rank " + std::to_string(*culprit) : ""));
  }
  throw comm_error(comm_errc::aborted, std::nullopt, me + who + " failed mid-collective");
}

// Member m combines its share of round r's `bytes` over every member's
// slot, in member order, into member 0's slot.
void host_rounds::combine(std::uint64_t r, reduce_op op, codec::dtype type, std::size_t bytes,
                          std::uint32_t divisor) const {
  const std::size_t width = codec::size_of(type);
  const auto [from, to] = share_of(bytes / width);
  if (from == to) return;
  std::byte* acc = seg.slot(r, 0) + from * width;
  for (std::uint32_t j = 1; j < seg.members(); ++j) {
    reduce(op, type, acc, acc, seg.slot(r, j) + from * width, wire::host_order, to - from);
  }
  if (divisor > 1) divide(type, acc, to - from, divisor);
}

// Runs a collective of `bytes` as rounds of whole elements (one at least)
// through `stages` stages (2 or 3), pipelined: in phase p, stage s works on
// round p - s (`stage(s, round, offset, length)`), and one barrier ends each
// phase but the last. Round r uses bank r mod 3; a bank's rounds are three
// apart, and the barriers between keep every member's reads of a round
// before the next write of its bank. First, every member announces the
// collective (kind, dtype, op, bytes); after the first barrier each checks
// its own against member 0's (agree()).
template <class F>
void host_rounds::pipeline(std::uint32_t kind, codec::dtype type, reduce_op op, std::size_t bytes, int stages,
                           F&& stage, bool patient_start) const {
  const std::size_t width = codec::size_of(type);
  const std::size_t step = seg.slot_bytes() / width * width;
  const std::size_t rounds = std::max<std::size_t>(1, (bytes + step - 1) / step);
  const std::uint64_t first = seg.begin_collective({bytes, kind, static_cast<std::uint16_t>(type), static_cast<std::uint16_t>(op)});
  const std::size_t phases = rounds + static_cast<std::size_t>(stages) - 1;
  for (std::size_t p = 0; p < phases; ++p) {
    for (int s = 0; s < stages; ++s) {
      if (p < static_cast<std::size_t>(s) || p - static_cast<std::size_t>(s) >= rounds) continue;
      const std::size_t r = p - static_cast<std::size_t>(s);
      const std::size_t off = r * step;
      stage(s, first + r, off, std::min(step, bytes - std::min(bytes, off)));
    }
    if (p + 1 < phases) {
      wait(p == 0 && patient_start);
      if (p == 0) agree();
    }
  }
  seg.end_collective(rounds);
}

// In, combine, out: three stages per round.
void host_rounds::allreduce(reduce_op op, codec::dtype type, std::span<std::byte> data, std::uint32_t divisor) const {
  pipeline(0, type, op, data.size(), 3, [&](int s, std::uint64_t r, std::size_t off, std::size_t len) {
    if (s == 0) copy_round(seg.slot(r, seg.me()), data.data() + off, len, false);
    if (s == 1) combine(r, op, type, len, divisor);
    if (s == 2) copy_round(data.data() + off, seg.slot(r, 0), len, data.size() >= stream_from);
  });
}

void host_rounds::reduce_to_leader(reduce_op op, codec::dtype type, std::span<std::byte> data) const {
  pipeline(1, type, op, data.size(), 3, [&](int s, std::uint64_t r, std::size_t off, std::size_t len) {
    if (s == 0) copy_round(seg.slot(r, seg.me()), data.data() + off, len, false);
    if (s == 1) combine(r, op, type, len, 1);
    if (s == 2 && seg.me() == 0) copy_round(data.data() + off, seg.slot(r, 0), len, false);  // sent on: keep it cached
  });
}

// The leader writes a round while the others read the one before. The
// others wait for the first round as long as the leader lives: it comes
// after the leaders' step over the network, which has its own timeouts
// (a leader that fails there gives up the segment, naming the culprit).
void host_rounds::broadcast_from_leader(std::span<std::byte> data) const {
  pipeline(
      2, codec::dtype::u8, reduce_op::sum, data.size(), 2,
      [&](int s, std::uint64_t r, std::size_t off, std::size_t len) {
        if (s == 0 && seg.me() == 0) copy_round(seg.slot(r, 0), data.data() + off, len, false);
        if (s == 1 && seg.me() != 0) copy_round(data.data() + off, seg.slot(r, 0), len, data.size() >= stream_from);
      },
      true);
}

void host_rounds::reduce_scatter(reduce_op op, codec::dtype type, std::span<const std::byte> data,
                                 std::span<std::byte> share) const {
  const std::size_t width = codec::size_of(type);
  std::size_t at = 0;
  pipeline(3, type, op, data.size(), 3, [&](int s, std::uint64_t r, std::size_t off, std::size_t len) {
    if (s == 0) copy_round(seg.slot(r, seg.me()), data.data() + off, len, false);
    if (s == 1) combine(r, op, type, len, 1);
    if (s == 2) {  // sent on: keep it cached
      const auto [from, to] = share_of(len / width);
      copy_round(share.data() + at, seg.slot(r, 0) + from * width, (to - from) * width, false);
      at += (to - from) * width;
    }
  });
}

void host_rounds::allgather(codec::dtype type, std::span<const std::byte> share, std::span<std::byte> data) const {
  const std::size_t width = codec::size_of(type);
  std::size_t at = 0;
  pipeline(
      4, type, reduce_op::sum, data.size(), 2,
      [&](int s, std::uint64_t r, std::size_t off, std::size_t len) {
        if (s == 0) {
          const auto [from, to] = share_of(len / width);
          copy_round(seg.slot(r, 0) + from * width, share.data() + at, (to - from) * width, false);
          at += (to - from) * width;
        }
        if (s == 1) copy_round(data.data() + off, seg.slot(r, 0), len, false);
      },
      true);
}

std::size_t host_rounds::share_bytes(codec::dtype type, std::size_t bytes) const {
  const std::size_t width = codec::size_of(type);
  const std::size_t step = seg.slot_bytes() / width * width;
  std::size_t total = 0;
  for (std::size_t off = 0; off < bytes; off += step) {
    const auto [from, to] = share_of(std::min(step, bytes - off) / width);
    total += (to - from) * width;
  }
  return total;
}

// After the first round's first barrier, every announcement is in.
void host_rounds::agree() const {
  const shared_segment::announcement mine = seg.announced(seg.me()), first = seg.announced(0);
  if (mine.bytes == first.bytes && mine.kind == first.kind && mine.type == first.type && mine.op == first.op) return;
  throw comm_error(errc::size_mismatch, std::nullopt,
                   "rank " + std::to_string(rank) + ": this rank's collective (" + std::to_string(mine.bytes) +
                       " bytes) is not its host leader's (" + std::to_string(first.bytes) +
                       " bytes, or another operation or dtype)");
}

}  // namespace ferry::comm::detail
