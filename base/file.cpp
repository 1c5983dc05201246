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

// Write-behind (atomic_file's `direct`): the writeback of each 8 MiB
// written is started at once, and the pieces more than 32 MiB behind are
// waited for and dropped from the cache.
constexpr std::uint64_t behind_piece = std::uint64_t{8} << 20;
constexpr std::uint64_t behind_window = 4 * behind_piece;

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
  f.direct_ = direct && sync;  // pages dropped only once they are on the disk
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
  return f;
}

// Starts the writeback of what was written since it last did (from
// behind_piece on), then waits for and drops the pieces more than
// behind_window behind. A kernel without sync_file_range (ENOSYS, as
// under some sandboxes) or a file that is not a regular one (ESPIPE) ends
// write-behind; the bytes go on through the cache.
int atomic_file::write_behind() noexcept {
#ifdef __linux__
  const auto stop = [&](int e) {
    if (e != ESPIPE && e != ENOSYS) return e;
    direct_ = false;
    return 0;
  };
  if (size_ - started_ >= behind_piece) {
    if (::sync_file_range(fd_, static_cast<off_t>(started_), static_cast<off_t>(size_ - started_),
                          SYNC_FILE_RANGE_WRITE) != 0) {
      return stop(errno);
    }
    started_ = size_;
  }
  while (direct_ && started_ - dropped_ > behind_window) {
    if (::sync_file_range(fd_, static_cast<off_t>(dropped_), static_cast<off_t>(behind_piece),
                          SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER) != 0) {
      return stop(errno);
    }
    (void)::posix_fadvise(fd_, static_cast<off_t>(dropped_), static_cast<off_t>(behind_piece), POSIX_FADV_DONTNEED);
    dropped_ += behind_piece;
  }
#else
  direct_ = false;
#endif
  return 0;
}

atomic_file::atomic_file(atomic_file&& other) noexcept
    : target_(std::move(other.target_)),
      temporary_(std::exchange(other.temporary_, {})),
      fd_(std::exchange(other.fd_, -1)),
      sync_(other.sync_),
      direct_(other.direct_),
      started_(other.started_),
      dropped_(other.dropped_),
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
    started_ = other.started_;
    dropped_ = other.dropped_;
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
  // With write-behind, a long span goes in pieces of behind_piece, so no
  // more than behind_window + behind_piece of it is ever in the cache.
  while (failed_errno_ == 0 && !bytes.empty()) {
    const std::size_t n = direct_ ? std::min<std::size_t>(bytes.size(), behind_piece) : bytes.size();
    failed_errno_ = write_all(fd_, bytes.first(n));
    if (failed_errno_ != 0) break;
    size_ += n;
    bytes = bytes.subspan(n);
    if (direct_) failed_errno_ = write_behind();
  }
  if (failed_errno_ != 0) return os_error(failed_errno_, target_);
  return {};
}

result<void, error> atomic_file::commit() {
  assert(fd_ >= 0 && "commit() twice");
  const auto fail = [&](int sys_errno) {
    discard();
    return os_error(sys_errno, target_);
  };
  if (failed_errno_ != 0) return fail(failed_errno_);
  if (sync_ && ::fsync(fd_) != 0) return fail(errno);
  // Written out: the rest leaves the cache too.
  if (direct_) (void)::posix_fadvise(fd_, static_cast<off_t>(dropped_), 0, POSIX_FADV_DONTNEED);
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
