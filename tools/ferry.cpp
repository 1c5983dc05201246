// ferry: the command-line tool.
//
//   ferry inspect FILE [--json]       tensors, metadata, byte order, alignment
//   ferry verify FILE                 every CRC32C and structural rule
//   ferry convert IN OUT [options]    .ferry <-> .safetensors, byte order, casts
//   ferry diff A B [--json]           what differs between two checkpoints
//   ferry dump FILE                   a graph archive as JSON
//   ferry plot METRICS -o SVG         ferry-train's loss and accuracy curves
//
// Exit status: 0 on success; 1 when a file cannot be read or is not valid
// (one line on stderr: "ferry: FILE: reason"), and for diff when the files
// differ; 2 for a usage error, and for diff when a file cannot be read (as
// diff(1)). --help prints usage to stdout. Progress bars go to stderr, and
// only when it is a terminal.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/base/error.h"
#include "ferry/base/file.h"
#include "ferry/checkpoint/cast.h"
#include "ferry/checkpoint/reader.h"
#include "ferry/checkpoint/safetensors.h"
#include "ferry/checkpoint/writer.h"
#include "ferry/graph/dump.h"
#include "plot.h"

namespace {

namespace ckpt = ferry::checkpoint;
using json = nlohmann::ordered_json;

// The one line every failure prints.
int fail(const ferry::error& e, int status = 1) {
  std::cout.flush();
  std::fprintf(stderr, "ferry: %s\n", e.what().c_str());
  return status;
}

int flush_stdout() {
  std::cout.flush();
  if (!std::cout) return fail(ferry::error(ferry::errc::io_error, "standard output"));
  return 0;
}

std::string human_bytes(std::uint64_t n) {
  static constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  std::size_t u = 0;
  while (v >= 1024 && u + 1 < std::size(units)) v /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

// A progress bar on stderr, drawn only when stderr is a terminal and at most
// ten times a second.
class progress_bar {
 public:
  progress_bar(std::string label, std::uint64_t total)
      : label_(std::move(label)), total_(total), enabled_(::isatty(STDERR_FILENO) == 1) {}
  ~progress_bar() { finish(); }
  void update(std::uint64_t done) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (drawn_ && now - last_ < std::chrono::milliseconds(100) && done < total_) return;
    last_ = now;
    drawn_ = true;
    const double f = total_ == 0 ? 1.0 : std::min(1.0, static_cast<double>(done) / static_cast<double>(total_));
    const int width = 30;
    const int fill = static_cast<int>(f * width);
    std::fprintf(stderr, "\r%s [%.*s%*s] %3d%% %s / %s", label_.c_str(), fill, "##############################",
                 width - fill, "", static_cast<int>(f * 100), human_bytes(done).c_str(), human_bytes(total_).c_str());
    std::fflush(stderr);
  }
  void finish() {
    if (enabled_ && drawn_) std::fputs("\n", stderr);
    drawn_ = false;
  }

 private:
  std::string label_;
  std::uint64_t total_;
  bool enabled_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_{};
};

std::string shape_text(std::span<const std::uint64_t> shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string_view order_name(ferry::wire::byte_order o) {
  return o == ferry::wire::byte_order::little ? "little" : "big";
}

std::uint64_t total_storage_bytes(const ckpt::reader& r) {
  std::uint64_t n = 0;
  for (const auto& s : r.storages()) n += s.nbytes;
  return n;
}

// --- inspect ----------------------------------------------------------------

int inspect(const std::string& path, bool as_json) {
  auto opened = ckpt::open(path);
  if (!opened) return fail(opened.error());
  const auto& r = *opened;
  if (as_json) {
    json j;
    j["file"] = path;
    j["format"] = ckpt::format_name(r.format());
    j["byte_order"] = order_name(r.order());
    j["alignment"] = r.alignment();
    j["file_size"] = r.file_size();
    j["tensors"] = json::array();
    for (const auto& t : r.tensors()) {
      j["tensors"].push_back({{"name", t.name},
                              {"dtype", ferry::codec::name(t.dtype)},
                              {"shape", t.shape},
                              {"strides", t.strides},
                              {"offset", t.offset},
                              {"bytes", t.nbytes()},
                              {"storage", t.storage},
                              {"shared_with", r.shared_with(t)}});
    }
    j["storages"] = json::array();
    for (const auto& s : r.storages()) {
      json e = {{"offset", s.offset}, {"bytes", s.nbytes}, {"dtype", ferry::codec::name(s.dtype)}};
      if (s.crc32c) e["crc32c"] = *s.crc32c;
      j["storages"].push_back(std::move(e));
    }
    j["metadata"] = r.metadata();
    std::cout << j.dump(2) << '\n';
    return flush_stdout();
  }

  std::cout << path << ": " << ckpt::format_name(r.format()) << ", " << order_name(r.order()) << "-endian, alignment "
            << r.alignment() << ", " << human_bytes(r.file_size()) << " (" << r.file_size() << " bytes)\n"
            << r.tensors().size() << " tensors in " << r.storages().size() << " storages, "
            << human_bytes(total_storage_bytes(r)) << " of data\n\n";
  std::vector<std::array<std::string, 5>> rows{{"NAME", "DTYPE", "SHAPE", "BYTES", "SHARED WITH"}};
  for (const auto& t : r.tensors()) {
    std::string shared;
    for (const auto& n : r.shared_with(t)) shared += (shared.empty() ? "" : ", ") + n;
    rows.push_back({t.name, std::string(ferry::codec::name(t.dtype)), shape_text(t.shape), std::to_string(t.nbytes()),
                    shared.empty() ? "-" : shared});
  }
  std::array<std::size_t, 5> width{};
  for (const auto& row : rows) {
    for (std::size_t c = 0; c < 5; ++c) width[c] = std::max(width[c], row[c].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t c = 0; c < 5; ++c) {
      std::string cell = row[c];
      if (c == 3 && &row != &rows.front()) cell.insert(0, width[c] - cell.size(), ' ');  // numbers right-aligned
      else if (c < 4) cell.resize(width[c], ' ');
      line += cell + (c < 4 ? "  " : "");
    }
    std::cout << line << '\n';
  }
  if (!r.metadata().empty()) {
    std::cout << "\nmetadata:\n";
    for (const auto& [k, v] : r.metadata()) std::cout << "  " << k << ": " << v << '\n';
  }
  return flush_stdout();
}

// --- verify -----------------------------------------------------------------

int verify(const std::string& path) {
  auto r = ckpt::open(path);
  if (!r) return fail(r.error());
  progress_bar bar("verify", total_storage_bytes(*r));
  auto v = r->verify([&](std::uint64_t done) { bar.update(done); });
  bar.finish();
  if (!v) return fail(v.error());
  std::cout << path << ": ok, " << r->tensors().size() << " tensors, " << human_bytes(total_storage_bytes(*r))
            << (r->format() == ckpt::file_format::ferry ? ", every CRC32C matches\n"
                                                        : " (safetensors has no checksums: structure checked)\n");
  return flush_stdout();
}

// --- convert ----------------------------------------------------------------

struct convert_options {
  std::string format;  // "", "ferry" or "safetensors"
  std::string order;   // "", "little" or "big"
  std::string cast;    // "", "bf16", "f16" or "f32"
  std::string shared = "refuse";
  std::uint32_t alignment = 64;
};

int convert(const std::string& in, const std::string& out, const convert_options& o) {
  auto opened = ckpt::open(in);
  if (!opened) return fail(opened.error());
  const auto& r = *opened;
  const bool to_safetensors =
      o.format.empty() ? std::string_view(out).ends_with(".safetensors") : o.format == "safetensors";
  std::optional<ferry::codec::dtype> cast_to;
  if (!o.cast.empty()) cast_to = o.cast == "bf16" ? ferry::codec::dtype::bf16
                                 : o.cast == "f16"  ? ferry::codec::dtype::f16
                                                    : ferry::codec::dtype::f32;

  // Which storages are cast: floating ones whose tensors all have its dtype.
  std::vector<bool> cast_storage_ok(r.storages().size(), cast_to.has_value());
  for (const auto& t : r.tensors()) {
    const auto& s = r.storages()[t.storage];
    if (!ferry::codec::is_floating_point(s.dtype) || t.dtype != s.dtype || s.dtype == cast_to) {
      cast_storage_ok[t.storage] = false;
    }
  }
  // The index of each storage's last tensor: its bytes are released after it.
  std::vector<std::size_t> last_use(r.storages().size(), 0);
  for (std::size_t i = 0; i < r.tensors().size(); ++i) last_use[r.tensors()[i].storage] = i;

  std::vector<std::shared_ptr<const ckpt::storage_buffer>> live(r.storages().size());
  const auto fetch = [&](const ckpt::tensor_info& t) -> ferry::result<ckpt::tensor_ref, ferry::error> {
    auto& buf = live[t.storage];
    if (!buf) {
      FERRY_TRY_ASSIGN(auto got, r.get(t));
      buf = got.storage();
      if (cast_storage_ok[t.storage]) {
        auto c = ckpt::cast(t.dtype, buf->bytes(), *cast_to);
        buf = std::make_shared<ckpt::owned_storage>(std::move(c).value());
      }
    }
    return ckpt::tensor_ref{t.name, cast_storage_ok[t.storage] ? *cast_to : t.dtype, t.shape, t.strides, t.offset,
                            buf->bytes()};
  };

  progress_bar bar("convert", total_storage_bytes(r));
  std::uint64_t done = 0;
  if (to_safetensors) {
    if (!o.order.empty() && o.order != "little") {
      return fail(ferry::error(ferry::errc::bad_value, out + ": safetensors is little-endian only"));
    }
    std::vector<ckpt::tensor_ref> refs;
    for (const auto& t : r.tensors()) {
      auto ref = fetch(t);
      if (!ref) return fail(ref.error());
      refs.push_back(*ref);
      done += r.storages()[t.storage].nbytes;
      bar.update(done);
    }
    ckpt::safetensors_options so;
    so.alignment = o.alignment;
    so.shared = o.shared == "copy"    ? ckpt::safetensors_options::shared_policy::copy
                : o.shared == "alias" ? ckpt::safetensors_options::shared_policy::alias
                                      : ckpt::safetensors_options::shared_policy::refuse;
    bar.finish();
    if (auto w = ckpt::save_safetensors(out, refs, r.metadata(), so); !w) return fail(w.error());
    return 0;
  }

  ckpt::write_options wo;
  if (!o.order.empty()) wo.order = o.order == "big" ? ferry::wire::byte_order::big : ferry::wire::byte_order::little;
  wo.alignment = o.alignment;
  auto w = ckpt::writer::create(out, wo);
  if (!w) return fail(w.error());
  std::vector<std::optional<ckpt::storage_id>> written(r.storages().size());
  for (std::size_t i = 0; i < r.tensors().size(); ++i) {
    const auto& t = r.tensors()[i];
    auto ref = fetch(t);
    if (!ref) return fail(ref.error());
    auto& id = written[t.storage];
    auto a = id ? w->add(*ref, *id) : w->add(*ref);
    if (!a) return fail(a.error());
    id = *a;
    if (last_use[t.storage] == i) {
      live[t.storage].reset();
      done += r.storages()[t.storage].nbytes;
      bar.update(done);
    }
  }
  for (const auto& [k, v] : r.metadata()) {
    if (auto m = w->set_metadata(k, v); !m) return fail(m.error());
  }
  bar.finish();
  if (auto c = w->commit(); !c) return fail(c.error());
  return 0;
}

// --- diff -------------------------------------------------------------------

int diff(const std::string& a_path, const std::string& b_path, bool as_json) {
  auto a = ckpt::open(a_path);
  if (!a) return fail(a.error(), 2);
  auto b = ckpt::open(b_path);
  if (!b) return fail(b.error(), 2);

  json j;
  j["a"] = a_path;
  j["b"] = b_path;
  j["tensors"] = json::array();
  bool identical = true;
  std::uint64_t total = 0;
  for (const auto& t : a->tensors()) {
    if (b->find(t.name) != nullptr) total += t.nbytes();
  }
  progress_bar bar("diff", total);
  std::uint64_t done = 0;

  const auto report = [&](json row) {
    if (row["status"] != "identical") identical = false;
    j["tensors"].push_back(std::move(row));
  };
  for (const auto& ta : a->tensors()) {
    const ckpt::tensor_info* tb = b->find(ta.name);
    if (tb == nullptr) {
      report({{"name", ta.name}, {"status", "only_in_a"}});
      continue;
    }
    if (ta.dtype != tb->dtype || ta.shape != tb->shape) {
      report({{"name", ta.name},
              {"status", ta.dtype != tb->dtype ? "dtype_differs" : "shape_differs"},
              {"a", std::string(ferry::codec::name(ta.dtype)) + shape_text(ta.shape)},
              {"b", std::string(ferry::codec::name(tb->dtype)) + shape_text(tb->shape)}});
      continue;
    }
    auto xa = a->get(ta);
    if (!xa) return fail(xa.error(), 2);
    auto xb = b->get(*tb);
    if (!xb) return fail(xb.error(), 2);
    const auto va = xa->contiguous_copy();
    const auto vb = xb->contiguous_copy();
    done += va.size();
    bar.update(done);
    if (va == vb) {
      report({{"name", ta.name}, {"status", "identical"}});
      continue;
    }
    const std::size_t w = ferry::codec::size_of(ta.dtype);
    double max_abs = 0, max_rel = 0;
    std::uint64_t differing = 0;
    for (std::size_t i = 0; i < va.size(); i += w) {
      if (std::memcmp(va.data() + i, vb.data() + i, w) == 0) continue;
      ++differing;
      const double x = ckpt::element_as_double(ta.dtype, va.data() + i);
      const double y = ckpt::element_as_double(ta.dtype, vb.data() + i);
      if (std::isnan(x) && std::isnan(y)) continue;  // NaN payloads differ
      const double d = std::isnan(x) || std::isnan(y) ? INFINITY : std::fabs(x - y);
      max_abs = std::max(max_abs, d);
      const double scale = std::max(std::fabs(x), std::fabs(y));
      if (scale > 0) max_rel = std::max(max_rel, d / scale);
    }
    report({{"name", ta.name},
            {"status", "differs"},
            {"elements_differing", differing},
            {"max_abs_diff", max_abs},
            {"max_rel_diff", max_rel}});
  }
  for (const auto& tb : b->tensors()) {
    if (a->find(tb.name) == nullptr) report({{"name", tb.name}, {"status", "only_in_b"}});
  }
  bar.finish();
  const bool same_metadata = a->metadata() == b->metadata();
  if (!same_metadata) identical = false;
  j["metadata_identical"] = same_metadata;
  j["identical"] = identical;

  if (as_json) {
    std::cout << j.dump(2) << '\n';
  } else {
    std::size_t same = 0;
    for (const auto& row : j["tensors"]) {
      const std::string status = row["status"];
      const std::string name = row["name"];
      if (status == "identical") {
        ++same;
      } else if (status == "only_in_a") {
        std::cout << "- " << name << "  only in " << a_path << '\n';
      } else if (status == "only_in_b") {
        std::cout << "+ " << name << "  only in " << b_path << '\n';
      } else if (status == "differs") {
        char buf[160];
        std::snprintf(buf, sizeof buf, "  %" PRIu64 " elements differ, max abs %.6g, max rel %.6g",
                      row["elements_differing"].get<std::uint64_t>(), row["max_abs_diff"].get<double>(),
                      row["max_rel_diff"].get<double>());
        std::cout << "~ " << name << buf << '\n';
      } else {
        std::cout << "! " << name << "  " << row["a"].get<std::string>() << " vs " << row["b"].get<std::string>()
                  << '\n';
      }
    }
    if (!same_metadata) std::cout << "! metadata differs\n";
    std::cout << same << " of " << j["tensors"].size() << " tensors bit-identical"
              << (identical ? "; the checkpoints are identical\n" : "\n");
  }
  if (const int e = flush_stdout(); e != 0) return 2;
  return identical ? 0 : 1;
}

// --- dump -------------------------------------------------------------------

int dump(const std::string& path) {
  auto bytes = ferry::base::read_file(path);
  if (!bytes) return fail(bytes.error());
  if (auto r = ferry::graph::dump_json(*bytes, std::cout); !r) return fail(ferry::error(r.error(), path));
  return flush_stdout();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ferry: inspect, verify, convert and compare tensor checkpoints (.ferry, .safetensors)"};
  app.name("ferry");
  app.require_subcommand(1);

  std::string file, second;
  bool as_json = false;
  auto* inspect_cmd = app.add_subcommand("inspect", "list tensors, metadata, byte order and alignment");
  inspect_cmd->add_option("FILE", file, "a .ferry or .safetensors file")->required();
  inspect_cmd->add_flag("--json", as_json, "machine-readable output");

  auto* verify_cmd = app.add_subcommand("verify", "check every CRC32C and structural rule (exit 0 when good)");
  verify_cmd->add_option("FILE", file, "a .ferry or .safetensors file")->required();

  convert_options co;
  auto* convert_cmd = app.add_subcommand("convert", "convert between .ferry and .safetensors");
  convert_cmd->add_option("IN", file, "the file to read")->required();
  convert_cmd->add_option("OUT", second, "the file to write (atomically); its extension picks the format")
      ->required();
  convert_cmd->add_option("--format", co.format, "output format, instead of OUT's extension")
      ->check(CLI::IsMember({"ferry", "safetensors"}));
  convert_cmd->add_option("--order", co.order, "byte order of a .ferry output (default: this host's)")
      ->check(CLI::IsMember({"little", "big"}));
  convert_cmd->add_option("--cast", co.cast, "convert floating tensors to this dtype")
      ->check(CLI::IsMember({"bf16", "f16", "f32"}));
  convert_cmd->add_option("--shared", co.shared,
                          "safetensors output: tensors sharing storage are refused, copied, or written once "
                          "with aliases in __metadata__")
      ->check(CLI::IsMember({"refuse", "copy", "alias"}))
      ->capture_default_str();
  convert_cmd->add_option("--alignment", co.alignment, "storage alignment in bytes (power of two)")
      ->capture_default_str();

  auto* diff_cmd = app.add_subcommand(
      "diff", "compare two checkpoints tensor by tensor (exit 0 identical, 1 different, 2 trouble)");
  diff_cmd->add_option("A", file, "first file")->required();
  diff_cmd->add_option("B", second, "second file")->required();
  diff_cmd->add_flag("--json", as_json, "machine-readable output");

  auto* dump_cmd = app.add_subcommand("dump", "print a ferry graph archive as JSON, from its embedded schema");
  dump_cmd->add_option("FILE", file, "a graph archive")->required();

  std::string svg = "curves.svg";
  auto* plot_cmd = app.add_subcommand("plot", "draw ferry-train's metrics (JSON lines) as loss and accuracy curves");
  plot_cmd->add_option("METRICS", file, "the file of ferry-train --metrics")->required();
  plot_cmd->add_option("-o,--output", svg, "the SVG to write")->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "ferry: %s (see ferry --help)\n", e.what());
    return 2;
  }
  try {
    if (inspect_cmd->parsed()) return inspect(file, as_json);
    if (verify_cmd->parsed()) return verify(file);
    if (convert_cmd->parsed()) return convert(file, second, co);
    if (diff_cmd->parsed()) return diff(file, second, as_json);
    if (plot_cmd->parsed()) {
      if (auto r = ferry::tools::plot(file, svg); !r) return fail(r.error());
      std::printf("%s\n", svg.c_str());
      return 0;
    }
    return dump(file);
  } catch (const std::exception& e) {  // std::bad_alloc
    std::fprintf(stderr, "ferry: %s\n", e.what());
    return 2;
  }
}
