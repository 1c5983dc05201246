// ferry: the command-line tool.
//
//   ferry inspect FILE [--json]       tensors, metadata, byte order, alignment
//   ferry verify FILE                 every CRC32C and structural rule
//   ferry convert IN OUT [options]    any format read -> .ferry/.safetensors/.pt/.gguf/.npy/.npz, byte order, casts
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
// Formats read: .ferry (and sets), .safetensors (and Hugging Face's
// sharded index), PyTorch .pt, GGUF, NumPy .npy and .npz.
//
// ferry --version prints the version, the CPU features found and enabled,
// and the kernel each dispatcher chose (base/cpu.h), for bug reports.
// FERRY_CPU_FEATURES narrows the features every command may use; a value
// naming an unknown feature is a usage error.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <cstdio>
#include <iostream>
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
    default: std::cout << " (" << ckpt::format_name(r->format()) << ": structure and checksums checked)\n"; break;
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
  CLI::App app{"ferry: inspect, verify, convert and compare tensor checkpoints (.ferry, .safetensors, PyTorch .pt, GGUF, "
               "NumPy .npy/.npz)"};
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
  inspect_cmd->add_option("FILE", file, "a .ferry, .safetensors, .pt, .gguf, .npy or .npz file")->required();
  inspect_cmd->add_flag("--json", as_json, "machine-readable output");

  auto* verify_cmd = app.add_subcommand("verify", "check every CRC32C and structural rule (exit 0 when good)");
  verify_cmd->add_option("FILE", file, "a .ferry, .safetensors, .pt, .gguf, .npy or .npz file")->required();

  convert_options co;
  auto* convert_cmd = app.add_subcommand(
      "convert", "convert any file ferry reads to .ferry, .safetensors, .pt, .gguf, .npy or .npz; GGUF byte order");
  convert_cmd->add_option("IN", file, "the file to read")->required();
  convert_cmd->add_option("OUT", second,
                          "the file to write (atomically; OUT may be IN): by its suffix .safetensors (or .index.json), "
                          ".pt (or .pth), .gguf, .npy, .npz, else .ferry")
      ->required();
  convert_cmd->add_option("--format", co.format, "output format, instead of OUT's suffix")
      ->check(CLI::IsMember({"ferry", "safetensors", "pt", "gguf", "npy", "npz"}));
  convert_cmd->add_option("--order", co.order,
                          "byte order of a .ferry, .gguf, .npy or .npz output (default: this host's; safetensors and "
                          ".pt are little-endian only)")
      ->check(CLI::IsMember({"little", "big"}));
  convert_cmd->add_option("--cast", co.cast,
                          "convert floating tensors to this dtype; quantized GGUF tensors are dequantized (needed for "
                          "any output but .gguf)")
      ->check(CLI::IsMember({"bf16", "f16", "f32"}));
  convert_cmd->add_flag("--compress", co.compress, "deflate an .npz output's records (as np.savez_compressed)");
  convert_cmd->add_flag("--nested-arrays", co.nested_arrays,
                        "a .gguf output may keep metadata arrays of arrays, which gguf-py reads and ggml refuses "
                        "(without it they are refused)");
  convert_cmd->add_option("--shared", co.shared,
                          "safetensors output: tensors sharing storage are refused, copied, or written once "
                          "with aliases in __metadata__")
      ->check(CLI::IsMember({"refuse", "copy", "alias"}))
      ->capture_default_str();
  auto* alignment_opt = convert_cmd->add_option("--alignment", co.alignment,
                                                "storage alignment in bytes (power of two; a .gguf output: its "
                                                "general.alignment, default the input's or 32)")
                            ->capture_default_str();
  convert_cmd->add_option("--shard-size", co.shard_size,
                          "write a set of shards of at most this much data (2GB, 500MiB): .safetensors as Hugging "
                          "Face's (OUT.index.json and OUT-00001-of-0000N.safetensors), .ferry as a ferry set (OUT is "
                          "its index)")
      ->transform(CLI::AsSizeValue(true))
      ->check([](const std::string& v) { return v == "0" ? std::string("a shard size must be more than 0") : std::string(); });
  // Byte orders a file does not say: a .pt file written before PyTorch
  // 2.1; a GGUF file whose version field misleads; a .npy descr of '|' or
  // '=' on elements wider than a byte.
  const auto read_order_flags = [](CLI::App* cmd, read_flags& flags) {
    cmd->add_option("--pytorch-order", flags.pytorch_order,
                    "byte order of a .pt file without a byteorder record (PyTorch < 2.1; default little)")
        ->check(CLI::IsMember({"little", "big"}));
    cmd->add_option("--gguf-order", flags.gguf_order,
                    "read a GGUF file in this byte order (default: detected from its version field)")
        ->check(CLI::IsMember({"little", "big"}));
    cmd->add_option("--npy-native-order", flags.npy_native_order,
                    "byte order of a .npy descr '|' or '=' on wide elements (the writer's 'native'; default: refused)")
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
  read_order_flags(convert_cmd, co.read);
  read_order_flags(inspect_cmd, rf);
  read_order_flags(verify_cmd, rf);

  auto* diff_cmd = app.add_subcommand(
      "diff", "compare two checkpoints tensor by tensor (exit 0 identical, 1 different, 2 trouble)");
  diff_cmd->add_option("A", file, "first file")->required();
  diff_cmd->add_option("B", second, "second file")->required();
  diff_cmd->add_flag("--json", as_json, "machine-readable output");
  read_order_flags(diff_cmd, rf);

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
    if (convert_cmd->parsed()) {
      co.alignment_given = alignment_opt->count() > 0;
      return convert(file, second, co);
    }
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
