#include "ferry/base/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>

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

// A name no other writer picks: pid, then 64 random bits (the clock if
// the system has no random device).
std::string temporary_name(const std::filesystem::path& target) {
  std::uint64_t r = 0;
  try {
    std::random_device rd;
    r = (std::uint64_t{rd()} << 32) ^ rd();
  } catch (...) {
    r = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }
  char suffix[32];
  std::snprintf(suffix, sizeof suffix, "%016llx", static_cast<unsigned long long>(r));
  return "." + target.filename().string() + ".ferry-tmp." + std::to_string(::getpid()) + "." + suffix;
}

}  // namespace

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

result<void, error> write_file_atomic(const std::filesystem::path& path, std::span<const std::byte> bytes) {
  const std::filesystem::path folder = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  const std::filesystem::path tmp = folder / temporary_name(path);

  struct stat target {};
  const bool existed = ::stat(path.c_str(), &target) == 0 && S_ISREG(target.st_mode);

  file_descriptor fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666));
  if (fd.get() < 0) return os_error(errno, path);
  // From here on, every failure removes the temporary.
  const auto fail = [&](int sys_errno) {
    ::unlink(tmp.c_str());
    return os_error(sys_errno, path);
  };
  if (existed && ::fchmod(fd.get(), target.st_mode & 07777) != 0) return fail(errno);
  if (const int e = write_all(fd.get(), bytes); e != 0) return fail(e);
  if (::fsync(fd.get()) != 0) return fail(errno);
  if (const int e = fd.close(); e != 0) return fail(e);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return fail(errno);

  // Make the rename durable. Some file systems cannot fsync a folder
  // (EINVAL); there is nothing more to do on them.
  file_descriptor dir(::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.get() < 0) return os_error(errno, folder);
  if (::fsync(dir.get()) != 0 && errno != EINVAL) return os_error(errno, folder);
  return {};
}

}  // namespace ferry::base
