#include "ferry/base/file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "ferry/base/random_id.h"

namespace ferry::base {
namespace {

// Closes a descriptor on every path out of a function.
class file_descriptor {
 public:
  explicit file_descriptor(int fd) noexcept : fd_(fd) {}
  file_descriptor(const file_descriptor&) = delete;
  file_descriptor& operator=(const file_descriptor&) = delete;
  ~file_descriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  [[nodiscard]] int get() const noexcept { return fd_; }
  /// Closes now and reports close()'s errno (0 on success): a write error
  /// may surface only here (NFS, quotas).
  int close() noexcept {
    const int fd = fd_;
    fd_ = -1;
    return ::close(fd) == 0 ? 0 : errno;
  }

 private:
  int fd_;
};

error os_error(int sys_errno, const std::filesystem::path& path) {
  return error::from_errno(sys_errno, path.string());
}

// Writes all of `bytes`, retrying short writes and EINTR. Returns 0 or errno.
int write_all(int fd, std::span<const std::byte> bytes) noexcept {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    bytes = bytes.subspan(static_cast<std::size_t>(n));
  }
  return 0;
}

// Direct I/O: blocks of this size and alignment satisfy every block
// device's O_DIRECT rules; the staging buffer holds this many bytes.
constexpr std::size_t direct_block = 4096;
constexpr std::size_t stage_bytes = std::size_t{8} << 20;

std::filesystem::path folder_of(const std::filesystem::path& target) {
  return target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
}

// A name no other writer picks: pid, then a random id.
std::string temporary_name(const std::filesystem::path& target) {
  return "." + target.filename().string() + ".ferry-tmp." + std::to_string(::getpid()) + "." + random_hex_id();
}

}  // namespace

namespace detail {
void (*commit_hook)(commit_stage) = nullptr;
}  // namespace detail

result<std::vector<std::byte>, error> read_file(const std::filesystem::path& path) {
  file_descriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return os_error(errno, path);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return os_error(errno, path);
  if (S_ISDIR(st.st_mode)) return os_error(EISDIR, path);

  std::vector<std::byte> bytes;
  if (S_ISREG(st.st_mode)) {
    if (static_cast<std::uintmax_t>(st.st_size) > bytes.max_size()) return os_error(EFBIG, path);
    bytes.resize(static_cast<std::size_t>(st.st_size));
  }
  // Read into the space the size promised; once it is full, read on in
  // small pieces until the end (a pipe promises nothing, and a regular
  // file may have grown since fstat).
  std::size_t filled = 0;
  for (;;) {
    std::byte probe[4096];
    const bool full = filled == bytes.size();
    std::byte* dst = full ? probe : bytes.data() + filled;
    const std::size_t room = full ? sizeof probe : bytes.size() - filled;
    const ssize_t n = ::read(fd.get(), dst, room);
    if (n < 0) {
      if (errno == EINTR) continue;
      return os_error(errno, path);
    }
    if (n == 0) break;
    if (full) bytes.insert(bytes.end(), probe, probe + n);
    filled += static_cast<std::size_t>(n);
  }
  bytes.resize(filled);
  return bytes;
}

result<atomic_file, error> atomic_file::create(const std::filesystem::path& target, bool sync, bool direct) {
  remove_stale_temporaries(target);
  atomic_file f;
  f.target_ = target;
  f.sync_ = sync;
  f.direct_ = direct;
  // A cleaner may take a temporary in the moment between its creation and
  // its lock; then the name no longer leads to our file. Try another name.
  for (int attempt = 0;; ++attempt) {
    f.temporary_ = folder_of(target) / temporary_name(target);
    f.fd_ = ::open(f.temporary_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (f.fd_ < 0) {
      f.temporary_.clear();
      return os_error(errno, target);
    }
    // Held until the descriptor closes, so cleaners know the file is live.
    struct stat mine {}, named {};
    if (::flock(f.fd_, LOCK_EX | LOCK_NB) == 0 && ::fstat(f.fd_, &mine) == 0 &&
        ::stat(f.temporary_.c_str(), &named) == 0 && mine.st_ino == named.st_ino && mine.st_dev == named.st_dev) {
      break;
    }
    const int e = errno;
    ::close(f.fd_);
    f.fd_ = -1;
    f.temporary_.clear();
    if (attempt == 8) return os_error(e == 0 ? EEXIST : e, target);
  }
  struct stat st {};
  if (::stat(target.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::fchmod(f.fd_, st.st_mode & 07777) != 0) {
    return os_error(errno, target);
  }
  // O_DIRECT is set after open (flock and fchmod do not care); a file
  // system without it says EINVAL and the file is written through the cache.
  if (f.direct_) {
    const int flags = ::fcntl(f.fd_, F_GETFL);
    f.direct_ = flags >= 0 && ::fcntl(f.fd_, F_SETFL, flags | O_DIRECT) == 0;
  }
  return f;
}

void atomic_file::free_deleter::operator()(std::byte* p) const noexcept { std::free(p); }

// Copies `bytes` into the staging buffer, writing it out whenever it fills.
int atomic_file::stage(std::span<const std::byte> bytes) noexcept {
  if (!stage_) {
    void* p = nullptr;
    if (::posix_memalign(&p, direct_block, stage_bytes) != 0) return ENOMEM;
    stage_.reset(static_cast<std::byte*>(p));
  }
  while (!bytes.empty()) {
    const std::size_t n = std::min(stage_bytes - staged_, bytes.size());
    std::memcpy(stage_.get() + staged_, bytes.data(), n);
    staged_ += n;
    bytes = bytes.subspan(n);
    if (staged_ == stage_bytes) {
      if (const int e = flush_stage(stage_bytes); e != 0) return e;
    }
  }
  return 0;
}

// Writes the first `n` staged bytes (whole blocks while direct_) and keeps
// the rest at the buffer's start. A device that refuses the direct write
// (EINVAL: stricter alignment) gets it through the cache instead.
int atomic_file::flush_stage(std::size_t n) noexcept {
  int e = write_all(fd_, std::span(stage_.get(), n));
  if (e == EINVAL && direct_) {
    const int flags = ::fcntl(fd_, F_GETFL);
    if (flags < 0 || ::fcntl(fd_, F_SETFL, flags & ~O_DIRECT) != 0) return errno;
    direct_ = false;
    // A short direct write may have landed part of it: start over at the
    // staged bytes' offset.
    const auto at = static_cast<off_t>(flushed_);
    if (::lseek(fd_, at, SEEK_SET) != at) return errno;
    e = write_all(fd_, std::span(stage_.get(), n));
  }
  if (e != 0) return e;
  std::memmove(stage_.get(), stage_.get() + n, staged_ - n);
  staged_ -= n;
  flushed_ += n;
  return 0;
}

// Writes what is staged: the whole blocks directly, the tail through the
// cache (O_DIRECT cleared: a partial block cannot be written directly).
int atomic_file::finish_stage() noexcept {
  if (!stage_ || staged_ == 0) return 0;
  if (direct_) {
    if (const int e = flush_stage(staged_ - staged_ % direct_block); e != 0) return e;
    if (staged_ == 0) return 0;
    const int flags = ::fcntl(fd_, F_GETFL);
    if (flags < 0 || ::fcntl(fd_, F_SETFL, flags & ~O_DIRECT) != 0) return errno;
    direct_ = false;
  }
  return flush_stage(staged_);
}

atomic_file::atomic_file(atomic_file&& other) noexcept
    : target_(std::move(other.target_)),
      temporary_(std::exchange(other.temporary_, {})),
      fd_(std::exchange(other.fd_, -1)),
      sync_(other.sync_),
      direct_(other.direct_),
      stage_(std::move(other.stage_)),
      staged_(std::exchange(other.staged_, 0)),
      flushed_(other.flushed_),
      size_(other.size_),
      failed_errno_(other.failed_errno_) {}

atomic_file& atomic_file::operator=(atomic_file&& other) noexcept {
  if (this != &other) {
    discard();
    target_ = std::move(other.target_);
    temporary_ = std::exchange(other.temporary_, {});
    fd_ = std::exchange(other.fd_, -1);
    sync_ = other.sync_;
    direct_ = other.direct_;
    stage_ = std::move(other.stage_);
    staged_ = std::exchange(other.staged_, 0);
    flushed_ = other.flushed_;
    size_ = other.size_;
    failed_errno_ = other.failed_errno_;
  }
  return *this;
}

atomic_file::~atomic_file() { discard(); }

void atomic_file::discard() noexcept {
  if (!temporary_.empty()) ::unlink(temporary_.c_str());
  if (fd_ >= 0) ::close(fd_);
  temporary_.clear();
  fd_ = -1;
}

result<void, error> atomic_file::write(std::span<const std::byte> bytes) {
  assert(fd_ >= 0 && "write() after commit()");
  if (failed_errno_ == 0) {
    // Staged while direct was granted (and after a fallback, with bytes
    // still staged, to keep the order).
    failed_errno_ = direct_ || stage_ ? stage(bytes) : write_all(fd_, bytes);
  }
  if (failed_errno_ != 0) return os_error(failed_errno_, target_);
  size_ += bytes.size();
  return {};
}

result<void, error> atomic_file::commit() {
  assert(fd_ >= 0 && "commit() twice");
  const auto fail = [&](int sys_errno) {
    discard();
    return os_error(sys_errno, target_);
  };
  if (failed_errno_ == 0) failed_errno_ = finish_stage();
  if (failed_errno_ != 0) return fail(failed_errno_);
  stage_.reset();
  if (sync_ && ::fsync(fd_) != 0) return fail(errno);
  if (detail::commit_hook != nullptr) detail::commit_hook(detail::commit_stage::synced);
  if (::rename(temporary_.c_str(), target_.c_str()) != 0) return fail(errno);
  temporary_.clear();
  if (detail::commit_hook != nullptr) detail::commit_hook(detail::commit_stage::renamed);
  // Closing releases the lock; the name is already the target's.
  file_descriptor fd(std::exchange(fd_, -1));
  if (const int e = fd.close(); e != 0) return os_error(e, target_);
  if (!sync_) return {};
  // Make the rename durable. Some file systems cannot fsync a folder
  // (EINVAL); there is nothing more to do on them.
  const std::filesystem::path folder = folder_of(target_);
  file_descriptor dir(::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.get() < 0) return os_error(errno, folder);
  if (::fsync(dir.get()) != 0 && errno != EINVAL) return os_error(errno, folder);
  return {};
}

std::size_t remove_stale_temporaries(const std::filesystem::path& target) noexcept {
  const std::filesystem::path folder = folder_of(target);
  const std::string prefix = "." + target.filename().string() + ".ferry-tmp.";
  std::size_t removed = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    file_descriptor fd(::open(it->path().c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (fd.get() < 0) continue;
    // A live writer holds the lock; one that was killed holds nothing.
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) continue;
    if (::unlink(it->path().c_str()) == 0) ++removed;
  }
  return removed;
}

result<void, error> write_file_atomic(const std::filesystem::path& path, std::span<const std::byte> bytes) {
  FERRY_TRY_ASSIGN(auto file, atomic_file::create(path));
  FERRY_TRY(file.write(bytes));
  return file.commit();
}

}  // namespace ferry::base
