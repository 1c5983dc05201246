// ferry/base/file.h: whole-file reads and atomic whole-file writes, with
// the operating system's reason when they fail.
//
// Errors are `ferry::error` values with code errc::io_error, the path as
// context and the errno the OS reported, so error::what() reads
// "model.ferry: No such file or directory". Nothing here throws except
// std::bad_alloc.
//
// POSIX only (open, fstat, read, write, fsync, rename).
#pragma once

#include <cstddef>
#include <filesystem>
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

}  // namespace ferry::base
