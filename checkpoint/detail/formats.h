// ferry/checkpoint/detail/formats.h: INTERNAL. The interface every format
// fills, one `format_ops` per format, and the table that lists them
// (formats.cpp), in the order their probes are tried. The reader calls a
// format only through it: it opens a `source` (a file, or a directory),
// asks each format's probe in turn, and hands the source to the first that
// says yes; that format's parse() returns the parsed_file (detail/parsed.h)
// the reader serves. Not part of the API.
//
// A format's folder (checkpoint/<format>/) holds its format.cpp, which
// defines its format_ops, beside its parser, writer, checks and, where its
// storages are not byte ranges of one file, its storage_source
// (detail/parsed.h) (docs/tour.md, "Adding a format").
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string_view>

#include "ferry/checkpoint/detail/mapped_file.h"
#include "ferry/checkpoint/detail/parsed.h"
#include "ferry/checkpoint/format.h"
#include "ferry/checkpoint/zip/zip.h"

namespace ferry::checkpoint::detail {

/// A checkpoint as the probes and parsers see it: a regular file (its
/// size, its first bytes, reads of it) or a directory.
class source {
 public:
  /// Opens `path`: a directory, or a file mapped for reading. Errors name
  /// `path` (mapped_file::open's).
  [[nodiscard]] static result<source, error> open(const std::filesystem::path& path);

  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  [[nodiscard]] bool is_directory() const noexcept { return !file_; }
  /// The file; requires !is_directory().
  [[nodiscard]] const mapped_file& file() const noexcept { return *file_; }
  [[nodiscard]] std::uint64_t size() const noexcept { return file_ ? file_->size() : 0; }
  /// The file's first min(size(), header_size) bytes (format.h): all of
  /// it when it is shorter. Empty for a directory.
  [[nodiscard]] std::span<const std::byte> head() const noexcept { return std::span(head_).first(have_); }
  /// Reads of the file whose errors carry no context.
  [[nodiscard]] zip_read_at read_at() const;
  /// The file's zip directory, read once for every format that asks.
  [[nodiscard]] const result<zip_directory, error>& zip(const limits& lim) const;
  /// zip(), moved out for the parser that keeps it (the source is then
  /// done with it).
  [[nodiscard]] result<zip_directory, error> take_zip(const limits& lim) const;
  /// An error about this checkpoint: its context `path` (and `: what`).
  [[nodiscard]] error fail(error_code c, int sys_errno = 0, std::string_view what = {}) const {
    return file_error(path_, c, sys_errno, what);
  }
  /// The file, for the reader that serves it (empty for a directory).
  [[nodiscard]] std::optional<mapped_file> take_file() && noexcept { return std::move(file_); }

 private:
  source(std::filesystem::path p, std::optional<mapped_file> f) noexcept : path_(std::move(p)), file_(std::move(f)) {}
  std::filesystem::path path_;
  std::optional<mapped_file> file_;
  std::array<std::byte, header_size> head_{};
  std::size_t have_ = 0;
  mutable std::optional<result<zip_directory, error>> zip_;
};

/// One format: what the table holds of it.
struct format_ops {
  file_format id;
  std::string_view name;  ///< format_name(id)
  /// Whether its checkpoints name other files that are checkpoints (a
  /// set's index): refused as a set's shard.
  bool names_other_files = false;
  /// Whether `s` is this format's, told from its head and size, its zip
  /// directory, or (a directory) the files it holds. First yes wins.
  bool (*probe)(const source& s, const read_options& opt) = nullptr;
  /// The structure of `s`, checked; every error names the file.
  result<parsed_file, error> (*parse)(const source& s, const read_options& opt) = nullptr;
  /// The suffixes its files are written with (".safetensors"), for
  /// format_to_write().
  std::span<const std::string_view> suffixes;
  /// Writes it (save_as()); null where ferry writes it another way or not.
  result<void, error> (*write)(const std::filesystem::path& target, std::span<const tensor_ref> tensors,
                               const std::map<std::string, std::string>& metadata, const save_options& opt) = nullptr;
  /// Refuses the options it cannot write (check_save()), before any
  /// tensor is read; null: it takes them all.
  result<void, error> (*check)(const std::filesystem::path& target, const save_options& opt) = nullptr;
};

/// A format's own writer options with what every writer takes from
/// `opt` (fsync, the page cache, limits) filled in.
template <class Options>
[[nodiscard]] Options writer_options(const save_options& opt) {
  Options o;
  o.sync = opt.sync;
  o.direct = opt.direct;
  o.limits = opt.limits;
  return o;
}

/// save_as()'s refusal of a big-endian order for a format that is
/// little-endian only ("<target>: <what> files are little-endian only").
[[nodiscard]] result<void, error> little_endian_only(const std::filesystem::path& target, std::string_view what,
                                                     const save_options& opt);

/// Every format, in the order their probes are tried.
[[nodiscard]] std::span<const format_ops* const> formats() noexcept;

/// The format of `s`: the first whose probe says yes; null for none.
[[nodiscard]] const format_ops* probe(const source& s, const read_options& opt);

/// Parses `s` with its format; none: truncated (too short to tell) or
/// not_a_checkpoint. `shard`: refuse a format that names other files.
[[nodiscard]] result<parsed_file, error> parse(const source& s, const read_options& opt, bool shard = false);

}  // namespace ferry::checkpoint::detail
