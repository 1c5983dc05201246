// ferry: the command-line tool.
//
//   ferry inspect FILE [--json]       tensors, metadata, byte order, alignment
//   ferry verify FILE                 every CRC32C and structural rule
//   ferry convert IN OUT [options]    .ferry/.safetensors/.pt -> .ferry/.safetensors, byte order, casts
//   ferry diff A B [--json]           what differs between two checkpoints
//   ferry dump FILE                   a graph archive as JSON
//   ferry plot METRICS -o SVG         ferry-train's loss and accuracy curves
//
// Exit status: 0 on success; 1 when a file cannot be read or is not valid
// (one line on stderr: "ferry: FILE: reason"), and for diff when the files
// differ; 2 for a usage error, and for diff when a file cannot be read (as
// diff(1)). --help prints usage to stdout. Progress bars go to stderr, and
// only when it is a terminal.
//
// ferry --version prints the version, the CPU features found and enabled,
// and the kernel each dispatcher chose (base/cpu.h), for bug reports.
// FERRY_CPU_FEATURES narrows the features every command may use; a value
// naming an unknown feature is a usage error.
#include <CLI/CLI.hpp>
#include <array>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli.h"
#include "cli11.h"
#include "ferry/base/cpu.h"
#include "ferry/codec/kernels.h"
#include "ferry/base/file.h"
#include "ferry/graph/dump.h"
#include "plot.h"

namespace ferry::tools {
namespace {

using json = nlohmann::ordered_json;

// --- inspect ----------------------------------------------------------------

int inspect(const std::string& path, bool as_json, const read_flags& flags) {
  auto opened = open_checkpoint(path, flags);
  if (!opened) return fail(opened.error());
  const auto& r = *opened;
  if (as_json) {
    json j;
    j["file"] = path;
    j["format"] = ckpt::format_name(r.format());
    j["byte_order"] = wire::name(r.order());
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
    if (!r.shards().empty()) {
      j["shards"] = json::array();
      for (const auto& sh : r.shards()) {
        json e{{"file", sh.path().filename().string()},
               {"byte_order", wire::name(sh.order())},
               {"file_size", sh.file_size()},
               {"tensors", sh.tensors().size()}};
        if (const auto id = sh.metadata().find("ferry.set.save_id"); id != sh.metadata().end()) e["save_id"] = id->second;
        j["shards"].push_back(std::move(e));
      }
    }
    std::cout << j.dump(2) << '\n';
    return flush_stdout();
  }

  std::cout << path << ": " << ckpt::format_name(r.format()) << ", " << wire::name(r.order()) << "-endian, alignment "
            << r.alignment() << ", " << human_bytes(r.file_size()) << " (" << r.file_size() << " bytes)\n"
            << r.tensors().size() << " tensors in " << r.storages().size() << " storages, "
            << human_bytes(total_storage_bytes(r)) << " of data\n";
  for (const auto& sh : r.shards()) {
    // The save that wrote it: an incremental set's chain shows here.
    const auto id = sh.metadata().find("ferry.set.save_id");
    std::cout << "  shard " << sh.path().filename().string() << ": " << wire::name(sh.order()) << "-endian, "
              << human_bytes(sh.file_size()) << ", " << sh.tensors().size() << " tensors"
              << (id == sh.metadata().end() ? std::string() : ", save " + id->second) << '\n';
  }
  std::cout << '\n';
  // Names and metadata come from the file: printable() escapes what could
  // split a row or drive the terminal (--json escapes them as JSON).
  std::vector<std::array<std::string, 5>> rows{{"NAME", "DTYPE", "SHAPE", "BYTES", "SHARED WITH"}};
  for (const auto& t : r.tensors()) {
    std::string shared;
    for (const auto& n : r.shared_with(t)) shared += (shared.empty() ? "" : ", ") + ferry::printable(n);
    rows.push_back({ferry::printable(t.name), std::string(ferry::codec::name(t.dtype)), shape_text(t.shape), std::to_string(t.nbytes()),
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
    for (const auto& [k, v] : r.metadata()) std::cout << "  " << ferry::printable(k) << ": " << ferry::printable(v) << '\n';
  }
  return flush_stdout();
}

// --- verify -----------------------------------------------------------------

int verify(const std::string& path, const read_flags& flags) {
  auto r = open_checkpoint(path, flags);
  if (!r) return fail(r.error());
  progress_bar bar("verify", total_storage_bytes(*r));
  auto v = r->verify([&](std::uint64_t done) { bar.update(done); });
  bar.finish();
  if (!v) return fail(v.error());
  std::cout << path << ": ok, " << r->tensors().size() << " tensors, " << human_bytes(total_storage_bytes(*r));
  switch (r->format()) {
    case ckpt::file_format::ferry: std::cout << ", every CRC32C matches\n"; break;
    case ckpt::file_format::ferry_set:
      std::cout << " in " << r->shards().size() << " shards, every CRC32C matches\n";
      break;
    case ckpt::file_format::safetensors: std::cout << " (safetensors has no checksums: structure checked)\n"; break;
    case ckpt::file_format::safetensors_sharded:
      std::cout << " in " << r->shards().size() << " shards (safetensors has no checksums: structure checked)\n";
      break;
    case ckpt::file_format::pytorch: {
      const auto unchecked = std::count_if(r->storages().begin(), r->storages().end(),
                                           [](const ckpt::storage_info& s) { return !s.crc32 && s.nbytes > 0; });
      if (unchecked == 0) std::cout << ", every zip CRC-32 matches\n";
      else std::cout << ", zip CRC-32s match; " << unchecked << " storages saved without CRC-32 (unchecked)\n";
      break;
    }
    case ckpt::file_format::npy: std::cout << " (.npy has no checksums: structure checked)\n"; break;
    case ckpt::file_format::npz: std::cout << ", every zip CRC-32 matches\n"; break;
    case ckpt::file_format::gguf: std::cout << " (GGUF has no checksums: structure checked)\n"; break;
  }
  return flush_stdout();
}

// --- dump -------------------------------------------------------------------

int dump(const std::string& path) {
  auto bytes = ferry::base::read_file(path);
  if (!bytes) return fail(bytes.error());
  if (auto r = ferry::graph::dump_json(*bytes, std::cout); !r) return fail(ferry::error(r.error(), path));
  return flush_stdout();
}

// --- version ----------------------------------------------------------------

std::string version_text() {
  namespace base = ferry::base;
  std::string out = "ferry " FERRY_VERSION "\n";
  out += "cpu features: " + base::describe_cpu_features(base::detected_cpu_features()) + "\n";
  out += "enabled: " + base::describe_cpu_features(base::enabled_cpu_features());
  for (const auto& [dispatcher, kernel] : ferry::codec::kernel_choices()) {
    out += "\nkernel " + std::string(dispatcher) + ": " + std::string(kernel);
  }
  return out;
}

}  // namespace
}  // namespace ferry::tools

int main(int argc, char** argv) {
  using namespace ferry::tools;
  CLI::App app{"ferry: inspect, verify, convert and compare tensor checkpoints (.ferry, .safetensors, PyTorch .pt)"};
  app.name("ferry");
  app.require_subcommand(1);
  app.set_version_flag("--version", &version_text,
                       "print the version, the CPU features found and enabled, and the kernel each dispatcher chose");
  app.footer("Environment:\n  FERRY_CPU_FEATURES  use only these CPU features (names as --version prints them, comma- or "
             "space-separated; \"none\": the portable paths), to reproduce a report; never more than the CPU has");
  if (auto env = ferry::base::check_cpu_features_env(); !env) {
    std::fprintf(stderr, "ferry: %s\n", env.error().what().c_str());
    return 2;
  }

  std::string file, second;
  bool as_json = false;
  auto* inspect_cmd = app.add_subcommand("inspect", "list tensors, metadata, byte order and alignment");
  inspect_cmd->add_option("FILE", file, "a .ferry, .safetensors or .pt file")->required();
  inspect_cmd->add_flag("--json", as_json, "machine-readable output");

  auto* verify_cmd = app.add_subcommand("verify", "check every CRC32C and structural rule (exit 0 when good)");
  verify_cmd->add_option("FILE", file, "a .ferry, .safetensors or .pt file")->required();

  convert_options co;
  auto* convert_cmd = app.add_subcommand("convert", "convert .ferry, .safetensors or .pt to .ferry or .safetensors");
  convert_cmd->add_option("IN", file, "the file to read")->required();
  convert_cmd->add_option("OUT", second,
                          "the file to write (atomically): .safetensors (or .index.json) by its suffix, else .ferry (never .pt)")
      ->required();
  convert_cmd->add_option("--format", co.format, "output format, instead of OUT's suffix")
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
  convert_cmd->add_option("--shard-size", co.shard_size,
                          "write a set of shards of at most this much data (2GB, 500MiB): .safetensors as Hugging "
                          "Face's (OUT.index.json and OUT-00001-of-0000N.safetensors), .ferry as a ferry set (OUT is "
                          "its index)")
      ->transform(CLI::AsSizeValue(true))
      ->check([](const std::string& v) { return v == "0" ? std::string("a shard size must be more than 0") : std::string(); });
  // A .pt file written before PyTorch 2.1 does not say its byte order.
  const auto pytorch_order = [](CLI::App* cmd, read_flags& flags) {
    cmd->add_option("--pytorch-order", flags.pytorch_order,
                    "byte order of a .pt file without a byteorder record (PyTorch < 2.1; default little)")
        ->check(CLI::IsMember({"little", "big"}));
  };
  // A conversion reads every byte and writes fresh checksums over them: it
  // checks every checksum the input has first, unless told not to.
  co.read.checks = ckpt::fetch_checks::every_checksum;
  convert_cmd->add_flag_callback(
      "--skip-source-checksums", [&co] { co.read.checks = ckpt::fetch_checks::none; },
      "do not check the input's checksums (a .pt's zip CRC-32s, a .ferry's CRC32Cs): the output's fresh checksums "
      "then vouch for bytes nobody checked");
  read_flags rf;
  pytorch_order(convert_cmd, co.read);
  pytorch_order(inspect_cmd, rf);
  pytorch_order(verify_cmd, rf);

  auto* diff_cmd = app.add_subcommand(
      "diff", "compare two checkpoints tensor by tensor (exit 0 identical, 1 different, 2 trouble)");
  diff_cmd->add_option("A", file, "first file")->required();
  diff_cmd->add_option("B", second, "second file")->required();
  diff_cmd->add_flag("--json", as_json, "machine-readable output");
  pytorch_order(diff_cmd, rf);

  auto* dump_cmd = app.add_subcommand("dump", "print a ferry graph archive as JSON, from its embedded schema");
  dump_cmd->add_option("FILE", file, "a graph archive")->required();

  std::string svg = "curves.svg";
  auto* plot_cmd = app.add_subcommand("plot", "draw ferry-train's metrics (JSON lines) as loss and accuracy curves");
  plot_cmd->add_option("METRICS", file, "the file of ferry-train --metrics")->required();
  plot_cmd->add_option("-o,--output", svg, "the SVG to write")->capture_default_str();

  if (const auto status = parse_command_line(app, argc, argv)) return *status;
  try {
    if (inspect_cmd->parsed()) return inspect(file, as_json, rf);
    if (verify_cmd->parsed()) return verify(file, rf);
    if (convert_cmd->parsed()) return convert(file, second, co);
    if (diff_cmd->parsed()) return diff(file, second, as_json, rf);
    if (plot_cmd->parsed()) {
      if (auto r = plot(file, svg); !r) return fail(r.error());
      std::printf("%s\n", svg.c_str());
      return 0;
    }
    return dump(file);
  } catch (const std::exception& e) {  // std::bad_alloc
    std::fprintf(stderr, "ferry: %s\n", e.what());
    return 2;
  }
}
