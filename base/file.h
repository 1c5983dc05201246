// ferry/base/file.h: whole-file reads, atomic file writes (whole or
// streamed), with the operating system's reason when they fail.
//
// Errors are `ferry::error` values with code errc::io_error, the path as
// context and the errno the OS reported, so error::what() reads
// "model.ferry: No such file or directory". Nothing here throws except
// std::bad_alloc.
//
// POSIX only (open, fstat, read, write, fsync, rename, flock).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "ferry/base/error.h"

namespace ferry::base {

/// The whole content of the file at `path`.
/// Regular files are read in one allocation of their size; other readable
/// files (pipes, character devices) are read to their end.
/// Errors: io_error with the path and errno: ENOENT (missing), EACCES,
/// EISDIR (a directory), EIO, ... An empty file is an empty vector.
[[nodiscard]] result<std::vector<std::byte>, error> read_file(const std::filesystem::path& path);

/// Replaces the file at `path` with `bytes`, atomically: a reader opening
/// `path` sees either the old content or the new one, never a mix, and
/// after a crash or power loss the file holds one of the two.
///
/// How: the bytes go to a temporary file in the same folder, named
/// `.<name>.ferry-tmp.<pid>.<random>` (hidden, and recognisable if a crash
/// leaves one behind), which is fsync'ed and renamed over `path`; then the
/// folder is fsync'ed so the rename itself is durable.
///
/// - If `path` existed, the new file gets its permission bits (not its
///   owner or group, which only a privileged process could set). A new file
///   gets 0666 less the umask, as open() would give it.
/// - A symbolic link at `path` is replaced by the new file, not followed.
/// - On any failure the temporary is removed and `path` is untouched
///   (except when only the final fsync of the folder fails: the new content
///   is then in place but not yet durable, and the error names the folder).
/// Errors: io_error with the path and errno (ENOENT for a missing folder,
/// EACCES for an unwritable one, EISDIR if `path` is a directory, ENOSPC, ...).
[[nodiscard]] result<void, error> write_file_atomic(const std::filesystem::path& path,
                                                    std::span<const std::byte> bytes);

/// A file written in a temporary beside `target` and published over it
/// by commit(), atomically, as write_file_atomic() does (which is built on
/// it). For writers that stream: write() any number of times, then commit().
///
/// - The temporary is `.<name>.ferry-tmp.<pid>.<random>` and is held under an
///   exclusive flock() while open. create() first removes the temporaries of
///   the same target that no live writer holds: those a killed process left.
/// - Destroyed (or moved from) without commit(), it removes its temporary.
///   A process killed at any moment leaves `target` as it was; its
///   temporary is removed by the next create() for the same target.
/// - commit() fsyncs the file (unless sync is off), renames it over
///   `target` and fsyncs the folder; the target's permission bits are kept.
/// - `direct` (with `sync`): the bytes pass through the page cache without
///   staying there (write-behind): the writeback of every 8 MiB written
///   starts at once (sync_file_range), and what lies more than 32 MiB
///   behind is waited for and dropped from the cache (POSIX_FADV_DONTNEED),
///   the rest after the fsync; a long span is written 8 MiB at a time for
///   this. Writing GBs then leaves no writeback for the fsync, keeps the
///   device busy while the writer computes, and evicts nothing others
///   cache (measured against O_DIRECT and write() + fsync in
///   docs/benchmarks.md). Without sync_file_range (not Linux, ENOSYS) or on
///   a file that is not a regular one, the bytes go through the cache.
/// Not thread-safe; one writer per object.
class atomic_file {
 public:
  [[nodiscard]] static result<atomic_file, error> create(const std::filesystem::path& target, bool sync = true,
                                                         bool direct = false);
  atomic_file(atomic_file&& other) noexcept;
  atomic_file& operator=(atomic_file&& other) noexcept;
  atomic_file(const atomic_file&) = delete;
  atomic_file& operator=(const atomic_file&) = delete;
  ~atomic_file();

  /// Appends `bytes`. After a failure the file is unusable: commit() fails.
  [[nodiscard]] result<void, error> write(std::span<const std::byte> bytes);
  /// Publishes the file at the target. The object is finished afterwards.
  [[nodiscard]] result<void, error> commit();
  /// Bytes written so far.
  [[nodiscard]] std::uint64_t size() const noexcept { return size_; }
  /// Whether write-behind is on (direct and sync asked, and granted).
  [[nodiscard]] bool direct() const noexcept { return direct_; }
  [[nodiscard]] const std::filesystem::path& target() const noexcept { return target_; }
  [[nodiscard]] const std::filesystem::path& temporary() const noexcept { return temporary_; }

 private:
  atomic_file() = default;
  void discard() noexcept;
  int write_behind() noexcept;

  std::filesystem::path target_;
  std::filesystem::path temporary_;
  int fd_ = -1;
  bool sync_ = true;
  bool direct_ = false;         // write-behind
  std::uint64_t started_ = 0;  // bytes whose writeback was started
  std::uint64_t dropped_ = 0;  // bytes written out and dropped from the cache
  std::uint64_t size_ = 0;
  int failed_errno_ = 0;
};

namespace detail {
/// Fault injection for the atomicity tests: when set, commit() calls it
/// after the fsync (before the rename) and after the rename (before the
/// folder's fsync), so a test can kill the process at exactly those points.
/// Never set in production.
enum class commit_stage { synced, renamed };
extern void (*commit_hook)(commit_stage);
}  // namespace detail

/// Removes the temporaries of `target` that no live writer holds (left by a
/// killed one). Returns how many it removed. atomic_file::create() calls it.
std::size_t remove_stale_temporaries(const std::filesystem::path& target) noexcept;

}  // namespace ferry::base
