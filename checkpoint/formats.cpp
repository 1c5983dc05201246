// The format table (detail/formats.h): every format ferry reads, in the
// order their probes are tried, and what the reader needs to call them.
// Adding a format: its folder, one line here, one enumerator in formats.h.
#include "ferry/checkpoint/detail/formats.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>

#include "ferry/base/require.h"
#include "ferry/checkpoint/error.h"

namespace ferry::checkpoint {
namespace detail {

// Each defined in its format's folder (<folder>/format.cpp).
extern const format_ops ferry_format, ferry_set_format, npz_format, pytorch_format, pytorch_legacy_format, npy_format,
    gguf_format, safetensors_format, safetensors_index_format;

namespace {

// The order matters where heads overlap: an .npz is a zip that a .pt file
// is too (npz's probe reads the directory), and a safetensors header is
// JSON after 8 bytes where an index is JSON from the first.
constexpr std::array<const format_ops*, 9> table{
    &ferry_format, &ferry_set_format,  &npz_format,         &pytorch_format,           &pytorch_legacy_format,
    &npy_format,   &gguf_format,       &safetensors_format, &safetensors_index_format,
};

}  // namespace

std::span<const format_ops* const> formats() noexcept { return table; }

const format_ops* probe(const source& s, const read_options& opt) {
  for (const format_ops* f : table) {
    if (f->probe(s, opt)) return f;
  }
  return nullptr;
}

result<parsed_file, error> parse(const source& s, const read_options& opt, bool shard) {
  const format_ops* f = probe(s, opt);
  if (f == nullptr) {
    if (s.is_directory()) return error::from_errno(EISDIR, s.path().string());
    // Fewer than 9 bytes can start no format whose head says so.
    if (s.size() < 9) return s.fail(errc::truncated);
    return s.fail(checkpoint_errc::not_a_checkpoint);
  }
  if (shard && f->names_other_files) return s.fail(checkpoint_errc::bad_shard, 0, "a set's index, not a shard");
  return f->parse(s, opt);
}

result<source, error> source::open(const std::filesystem::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    source s(path, std::nullopt);
    return s;
  }
  FERRY_TRY_ASSIGN(auto file, mapped_file::open(path));
  source s(path, std::move(file));
  s.have_ = static_cast<std::size_t>(std::min<std::uint64_t>(s.file_->size(), header_size));
  int sys_errno = 0;
  if (auto r = s.file_->read(0, std::span(s.head_).first(s.have_), sys_errno); !r) {
    return file_error(path, r.error(), sys_errno);
  }
  return s;
}

zip_read_at file_reader(const mapped_file& f) {
  return [&f](std::uint64_t offset, std::span<std::byte> out) -> result<void, error> {
    int read_errno = 0;
    if (auto r = f.read(offset, out, read_errno); !r) return error(r.error(), {}, read_errno);
    return {};
  };
}

zip_read_at source::read_at() const { return file_reader(*file_); }

const result<zip_directory, error>& source::zip(const limits& lim) const {
  if (!zip_) zip_.emplace(read_zip_directory(size(), read_at(), lim));
  return *zip_;
}

result<zip_directory, error> source::take_zip(const limits& lim) const {
  (void)zip(lim);
  auto taken = std::move(*zip_);
  zip_.reset();
  return taken;
}

result<void> pread_exact(int fd, std::uint64_t offset, std::span<std::byte> out, int& sys_errno) noexcept {
  while (!out.empty()) {
    const ssize_t n = ::pread(fd, out.data(), out.size(), static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      sys_errno = errno;
      return errc::io_error;
    }
    if (n == 0) return errc::truncated;  // the file shrank under us
    out = out.subspan(static_cast<std::size_t>(n));
    offset += static_cast<std::uint64_t>(n);
  }
  return {};
}

error file_error(const std::filesystem::path& file, error_code c, int sys_errno, std::string_view what) {
  std::string ctx = file.string();
  if (!what.empty()) ctx += ": " + std::string(what);
  return error(c, std::move(ctx), sys_errno);
}

result<parsed_file, error> in_file(const std::filesystem::path& path, result<parsed_file, error> r) {
  if (!r) return r.error().wrap(path.string());
  return r;
}

result<void, error> check_tiling(std::size_t n,
                                 const std::function<std::pair<std::uint64_t, std::uint64_t>(std::size_t)>& range,
                                 const std::function<std::string(std::size_t)>& who, const tiling& t) {
  const auto pad = [&](std::uint64_t at, std::uint64_t& out) { return align_up(at, t.align, out); };
  std::uint64_t expected = 0;        // where range i must start: where i - 1 ends, padded
  std::uint64_t last_end = t.begin;  // where range i - 1 ends
  if (!pad(t.begin, expected)) return make_error(checkpoint_errc::bad_layout, t.area, ": padding past 2^64");
  for (std::size_t i = 0; i < n; ++i) {
    const auto [offset, bytes] = range(i);
    if (offset != expected) {
      if (i == 0) return make_error(checkpoint_errc::bad_layout, who(i), ": starts at ", offset, ", not at ", expected);
      return make_error(checkpoint_errc::bad_layout, who(i), ": starts at ", offset,
                        offset < expected ? " and overlaps " : " and leaves a hole after ", who(i - 1),
                        ", which ends (padded) at ", expected);
    }
    if (offset > t.end || bytes > t.end - offset) {
      return make_error(t.past_end, who(i), ": ", bytes, " bytes at ", offset, " run past the data's end at ", t.end);
    }
    last_end = offset + bytes;
    if (!pad(last_end, expected)) return make_error(checkpoint_errc::bad_layout, who(i), ": padding past 2^64");
  }
  // last_end <= t.end here.
  if (t.end > expected) {
    return make_error(t.after_last, t.area, ": ", t.end - expected, " bytes after the last storage's end (padded) at ",
                      expected);
  }
  if (t.padded_end && t.end < expected) {
    return make_error(checkpoint_errc::bad_layout, t.area, ": ends at ", t.end, ", before the last storage's padded end at ",
                      expected);
  }
  return {};
}

result<std::shared_ptr<const storage_buffer>, error> storage_source::load(const parsed_file&, const load_request&) const {
  return std::shared_ptr<const storage_buffer>();
}

std::optional<result<void, error>> storage_source::verify(const parsed_file&, const mapped_file*,
                                                          const std::filesystem::path&,
                                                          const std::function<void(std::uint64_t)>&) const {
  return std::nullopt;
}

std::optional<result<void, error>> storage_source::read_into(const tensor_info&, std::span<std::byte>) const {
  return std::nullopt;
}

std::size_t storage_source::block_bytes(std::uint32_t) const noexcept { return 0; }

void storage_source::blocks_to_host(std::uint32_t, std::span<std::byte>, wire::byte_order) const noexcept {}

result<void, error> little_endian_only(const std::filesystem::path& target, std::string_view what,
                                      const save_options& opt) {
  if (opt.order.value_or(wire::byte_order::little) == wire::byte_order::little) return {};
  return make_error(errc::bad_value, target.string(), ": ", what, " files are little-endian only");
}

}  // namespace detail

result<file_format, error> format_to_write(std::string_view name, std::string_view path) {
  for (const detail::format_ops* o : detail::table) {
    if (o->suffixes.empty()) continue;  // not written by ferry, or written beside another (a set's index)
    if (!name.empty() && name == o->name) return o->id;
    for (const std::string_view s : o->suffixes) {
      if (name.empty() ? path.ends_with(s) : name == s.substr(1)) return o->id;
    }
  }
  if (!name.empty()) return make_error(errc::bad_value, "no format ", quote(name), " to write");
  return file_format::ferry;
}

namespace {

// The table's writer of `f`, or null.
const detail::format_ops* writer_of(file_format f) noexcept {
  for (const detail::format_ops* o : detail::table) {
    if (o->id == f && o->write != nullptr) return o;
  }
  return nullptr;
}

}  // namespace

result<void, error> check_save(file_format f, const std::filesystem::path& target, const save_options& opt) {
  const detail::format_ops* o = writer_of(f);
  if (o == nullptr) return make_error(errc::bad_value, target.string(), ": ", format_name(f), " is not written by save_as()");
  return o->check != nullptr ? o->check(target, opt) : result<void, error>();
}

result<void, error> save_as(file_format f, const std::filesystem::path& target, std::span<const tensor_ref> tensors,
                            const std::map<std::string, std::string>& metadata, const save_options& opt) {
  FERRY_TRY(check_save(f, target, opt));  // refuses a format without a writer
  const detail::format_ops* o = writer_of(f);
  return o != nullptr ? o->write(target, tensors, metadata, opt) : result<void, error>();
}

std::string_view format_name(file_format f) noexcept {
  for (const detail::format_ops* o : detail::table) {
    if (o->id == f) return o->name;
  }
  return "unknown";
}

}  // namespace ferry::checkpoint
