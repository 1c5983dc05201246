// The `ferry` tool as a user runs it: exit statuses, the one-line errors,
// --help on stdout, and each command's output (tables and --json). GGUF and
// NumPy files: ferry_cli_formats_test.cpp.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_fixture.h"  // before pt_builder.h, which uses helpers.h
#include "../checkpoint/pt_builder.h"

namespace ferry::checkpoint::testing {
namespace {

TEST_F(Cli, HelpGoesToStdoutAndExitsZero) {
  const auto r = run("--help");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("Usage: ferry"), std::string::npos);
  for (const char* cmd : {"inspect", "verify", "convert", "diff", "dump"}) EXPECT_NE(r.out.find(cmd), std::string::npos);
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(run("convert --help").status, 0);
}

// --version: the version, the CPU features and each dispatcher's kernel;
// FERRY_CPU_FEATURES narrows them, and an unknown name is a usage error.
TEST_F(Cli, VersionNamesTheFeaturesAndKernels) {
  const auto r = run("--version");
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.out.rfind("ferry 0.", 0), 0u) << r.out;
  for (const char* line : {"\ncpu features: ", "\nenabled: ", "\nkernel byte_swap: ", "\nkernel crc32c: ",
                           "\nkernel f16_bf16: "}) {
    EXPECT_NE(r.out.find(line), std::string::npos) << line << " in " << r.out;
  }

  const std::string cli = "'" + std::string(FERRY_CLI) + "'";
  const auto portable = shell("FERRY_CPU_FEATURES=none " + cli + " --version");
  EXPECT_EQ(portable.status, 0);
  for (const char* line : {"\nenabled: none (portable paths)\n", "\nkernel byte_swap: scalar\n",
                           "\nkernel crc32c: table\n", "\nkernel f16_bf16: scalar\n"}) {
    EXPECT_NE(portable.out.find(line), std::string::npos) << line << " in " << portable.out;
  }

  const auto unknown = shell("FERRY_CPU_FEATURES=sse2,avx9 " + cli + " --version");
  EXPECT_EQ(unknown.status, 2);
  EXPECT_EQ(unknown.out, "");
  EXPECT_EQ(unknown.err.rfind("ferry: FERRY_CPU_FEATURES: unknown CPU feature 'avx9' (known: none, ", 0), 0u)
      << unknown.err;
  EXPECT_EQ(std::count(unknown.err.begin(), unknown.err.end(), '\n'), 1) << unknown.err;

  const auto help = run("--help");
  EXPECT_NE(help.out.find("FERRY_CPU_FEATURES"), std::string::npos);
  EXPECT_NE(help.out.find("--version"), std::string::npos);
}

TEST_F(Cli, UsageErrorsExitTwoWithOneLine) {
  for (const char* args : {"", "dunp x", "inspect", "convert a", "convert a b --order middle"}) {
    const auto r = run(args);
    EXPECT_EQ(r.status, 2) << args;
    EXPECT_EQ(r.err.rfind("ferry: ", 0), 0u) << args;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
  }
}

TEST_F(Cli, FileErrorsNameTheOsReason) {
  for (const char* cmd : {"dump", "inspect", "verify"}) {
    const auto r = run(std::string(cmd) + " /nonexistent");
    EXPECT_EQ(r.status, 1) << cmd;
    expect_one_error_line(r, "/nonexistent: No such file or directory");
  }
  const auto r = run("inspect " + std::string(FERRY_TEST_DATA_DIR) + "/safetensors/README.md");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("neither a ferry checkpoint or set, a safetensors, PyTorch .pt, NumPy .npy/.npz nor GGUF file"), std::string::npos)
      << r.err;
}

TEST_F(Cli, DumpPrintsAGraphArchive) {
  const auto r = run("dump " + std::string(FERRY_TEST_DATA_DIR) + "/graph/golden-big.fga");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find(R"("byte_order": "big")"), std::string::npos);
}

TEST_F(Cli, InspectTableAndJson) {
  auto r = run("inspect " + golden("golden-big.ferry"));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("ferry, big-endian, alignment 64"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("NAME"), std::string::npos);
  EXPECT_NE(r.out.find("decoder.out.weight, encoder.embed.column1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("note: caf\xC3\xA9"), std::string::npos);

  r = run("inspect --json " + golden("golden-little.ferry"));
  EXPECT_EQ(r.status, 0);
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["format"], "ferry");
  EXPECT_EQ(j["byte_order"], "little");
  EXPECT_EQ(j["alignment"], 64);
  EXPECT_EQ(j["tensors"].size(), 7u);
  EXPECT_EQ(j["tensors"][2]["name"], "encoder.embed.column1");
  EXPECT_EQ(j["tensors"][2]["strides"], nlohmann::json::array({3}));
  EXPECT_EQ(j["tensors"][0]["shared_with"].size(), 2u);
  EXPECT_EQ(j["metadata"]["epoch"], "3");
  EXPECT_EQ(j["storages"].size(), 5u);
}

TEST_F(Cli, VerifyNamesTheFirstBadTensor) {
  auto r = run("verify " + golden("golden-big.ferry"));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("every CRC32C matches"), std::string::npos);

  // Flip a byte of the bf16 tensor's storage.
  auto file = slurp(golden("golden-little.ferry"));
  const auto ck = open(golden("golden-little.ferry")).value();
  file[ck.storages()[ck.find("half")->storage].offset + 1] ^= std::byte{0x40};
  spit(dir_ / "bad.ferry", file);
  r = run("verify " + path("bad.ferry"));
  EXPECT_EQ(r.status, 1);
  expect_one_error_line(r, path("bad.ferry") + ": tensor 'half': CRC32C does not match the bytes it covers");
}

TEST_F(Cli, ProgressBarsOnlyOnATerminal) {
  // Not a terminal: nothing but the result.
  auto r = run("verify " + golden("golden-big.ferry"));
  EXPECT_EQ(r.err, "");
  // On a terminal (script(1) from util-linux gives the tool one), the bar
  // is drawn on stderr, which script merges into its output.
  r = shell("script -qec \"'" + std::string(FERRY_CLI) + "' verify " + golden("golden-big.ferry") + "\" /dev/null");
  EXPECT_NE(r.out.find("verify ["), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("100%"), std::string::npos) << r.out;
}

TEST_F(Cli, ConvertBothWaysAndDiff) {
  // Shared storage: refused by default, naming the tied tensors.
  auto r = run("convert " + golden("golden-big.ferry") + " " + path("a.safetensors"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("encoder.embed.weight, decoder.out.weight, encoder.embed.column1"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir_ / "a.safetensors"));

  r = run("convert --shared copy " + golden("golden-big.ferry") + " " + path("a.safetensors"));
  ASSERT_EQ(r.status, 0) << r.err;
  r = run("convert " + path("a.safetensors") + " " + path("b.ferry") + " --order big");
  ASSERT_EQ(r.status, 0) << r.err;
  r = run("diff " + golden("golden-little.ferry") + " " + path("b.ferry"));
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("7 of 7 tensors bit-identical; the checkpoints are identical"), std::string::npos) << r.out;

  // Converting to a fixed order reproduces the golden file byte for byte.
  r = run("convert " + golden("golden-big.ferry") + " " + path("c.ferry") + " --order little");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(slurp(dir_ / "c.ferry") == slurp(golden("golden-little.ferry")));

  r = run("convert " + golden("golden-big.ferry") + " " + path("d.ferry") + " --cast bf16");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto d = open(dir_ / "d.ferry").value();
  EXPECT_EQ(d.find("encoder.embed.weight")->dtype, codec::dtype::bf16);
  EXPECT_EQ(d.find("step")->dtype, codec::dtype::i64);
  EXPECT_EQ(d.shared_with(*d.find("encoder.embed.weight")).size(), 2u);  // sharing survives the cast
  r = run("diff --json " + golden("golden-big.ferry") + " " + path("d.ferry"));
  EXPECT_EQ(r.status, 1);
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["identical"], false);
  EXPECT_EQ(j["tensors"][0]["status"], "dtype_differs");
  EXPECT_EQ(j["tensors"][3]["status"], "identical");

  r = run("diff " + golden("golden-big.ferry") + " " + path("nope.ferry"));
  EXPECT_EQ(r.status, 2);
  expect_one_error_line(r, path("nope.ferry") + ": No such file or directory");
}

TEST_F(Cli, ConvertToSetsOfShardsInspectVerifyAndDiff) {
  // A .ferry set: the golden file's tensors over shards, in big-endian.
  auto r = run("convert " + golden("golden-little.ferry") + " " + path("set.ferry") + " --shard-size 20 --order big");
  ASSERT_EQ(r.status, 0) << r.err;
  r = run("verify " + path("set.ferry"));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("shards, every CRC32C matches"), std::string::npos) << r.out;
  r = run("diff " + golden("golden-little.ferry") + " " + path("set.ferry"));
  EXPECT_EQ(r.status, 0) << r.out;
  r = run("inspect --json " + path("set.ferry"));
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["format"], "ferry-set");
  EXPECT_GT(j["shards"].size(), 1u);
  EXPECT_EQ(j["shards"][0]["byte_order"], "big");

  // Hugging Face's sharded safetensors, from the set.
  r = run("convert --shared copy " + path("set.ferry") + " " + path("hf.safetensors") + " --shard-size 20B");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(fs::exists(dir_ / "hf.safetensors.index.json"));
  EXPECT_TRUE(fs::exists(dir_ / "hf-00003-of-00003.safetensors"));
  r = run("convert " + path("hf.safetensors.index.json") + " " + path("back.ferry"));
  ASSERT_EQ(r.status, 0) << r.err;
  r = run("diff " + golden("golden-little.ferry") + " " + path("back.ferry"));
  EXPECT_NE(r.out.find("7 of 7 tensors bit-identical"), std::string::npos) << r.out;

  r = run("convert " + golden("golden-little.ferry") + " " + path("x.index.json"));
  EXPECT_EQ(r.status, 2);
  expect_one_error_line(r, path("x.index.json") + ": an index of shards needs --shard-size");
  r = run("convert " + golden("golden-little.ferry") + " " + path("x.ferry") + " --shard-size 0");
  EXPECT_EQ(r.status, 2);
}

TEST_F(Cli, DiffReportsValuesMissingAndExtraTensors) {
  sample s;
  auto refs = s.refs();
  write_options wo;
  wo.sync = false;
  ASSERT_TRUE(save(dir_ / "a.ferry", refs, {}, wo));
  auto changed = s.weight;
  float v = 0.5f;
  std::memcpy(changed.data() + 20, &v, 4);  // 1.0 -> 0.5 in the last element
  refs[0].storage = changed;
  refs[1].storage = changed;
  refs[2].storage = changed;
  refs.pop_back();
  const std::uint64_t shape[] = {1};
  const std::vector<std::byte> extra(4);
  refs.push_back({"extra", codec::dtype::f32, shape, {}, 0, extra});
  ASSERT_TRUE(save(dir_ / "b.ferry", refs, {}, wo));
  const auto r = run("diff " + path("a.ferry") + " " + path("b.ferry"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("~ encoder.embed.weight  1 elements differ, max abs 0.5, max rel 0.5"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("- bytes  only in"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("+ extra  only in"), std::string::npos) << r.out;
  // --json streams its rows; a file that fails its CRC midway ends the
  // document with the error (and exit 2), still valid JSON.
  auto bytes = slurp(dir_ / "b.ferry");
  auto opened = open(dir_ / "b.ferry");
  ASSERT_TRUE(opened);
  bytes[opened->storages()[0].offset] ^= std::byte{1};
  spit(dir_ / "bad.ferry", bytes);
  const auto bad = run("diff --json " + path("a.ferry") + " " + path("bad.ferry"));
  EXPECT_EQ(bad.status, 2);
  const auto j = nlohmann::json::parse(bad.out);
  EXPECT_NE(j["error"].get<std::string>().find("CRC32C"), std::string::npos) << bad.out;
  EXPECT_EQ(bad.err.find('\n'), bad.err.size() - 1) << bad.err;
}

TEST_F(Cli, PytorchFilesConvertVerifyAndDiff) {
  const std::string pt = path("m.pt");
  spit(pt, pt_zip(state_dict_pickle()).build());
  auto r = run("inspect " + pt);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("pytorch, little-endian, alignment 64"), std::string::npos) << r.out;
  r = run("verify " + pt);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, pt + ": ok, 1 tensors, 24 B, every zip CRC-32 matches\n");
  for (const char* out : {"m.ferry", "m.safetensors"}) {
    r = shell("'" + std::string(FERRY_CLI) + "' convert " + pt + " " + path(out) + " && '" + std::string(FERRY_CLI) +
              "' diff " + pt + " " + path(out));
    EXPECT_EQ(r.status, 0) << out << ": " << r.err << r.out;
  }
  // Written as .pt: the same tensors (the metadata differs: this file has
  // no byteorder record, ferry's says "little").
  r = shell("'" + std::string(FERRY_CLI) + "' convert " + pt + " " + path("again.pt") + " && '" +
            std::string(FERRY_CLI) + "' diff " + pt + " " + path("again.pt"));
  EXPECT_NE(r.out.find("1 of 1 tensors bit-identical"), std::string::npos) << r.err << r.out;
  r = run("convert --order big " + pt + " " + path("big.pt"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("ferry: " + path("big.pt") + ": .pt files are little-endian only"), std::string::npos) << r.err;
  r = run("inspect --pytorch-order big " + pt);
  EXPECT_NE(r.out.find("pytorch, big-endian"), std::string::npos) << r.out;
}

TEST_F(Cli, HostilePickleIsOneLine) {
  const std::string evil = path("evil.pt");
  pickle_builder p;
  p.proto().global("posix", "system").str("touch pwned").op(0x85).reduce().stop();
  spit(evil, pt_zip(p).build());
  const auto r = run("inspect " + evil);
  EXPECT_EQ(r.status, 1);
  expect_one_error_line(r, evil + ": data.pkl offset 2: global 'posix.system': not on the allowed list: ferry runs no "
                                  "pickle code");
}

TEST_F(Cli, NamesFromTheFileCannotForgeALine) {
  const std::string evil = path("evil.pt");
  pickle_builder p;  // a tensor whose storage record is missing, named to look like a second, happy line
  p.proto().empty_dict().mark().str("w\n\x1b[2K\x1b[1A" + evil + ": ok, 3 tensors\r").tensor("FloatStorage", "9", 6, 0, {6}, {1});
  p.setitems().stop();
  spit(evil, pt_zip(p).build());
  for (const char* cmd : {"inspect", "verify", "convert"}) {
    const auto r = run(std::string(cmd) + " " + evil + (std::string(cmd) == "convert" ? " " + path("o.ferry") : ""));
    EXPECT_EQ(r.status, 1) << cmd;
    expect_one_error_line(r, evil + ": tensor 'w\\n\\x1b[2K\\x1b[1A" + evil +
                                 ": ok, 3 tensors\\r': record 'archive/data/9': the zip has no record of this name");
  }
}

TEST_F(Cli, ConvertChecksEveryChecksumOfItsInput) {
  const std::string pt = path("m.pt");
  auto bytes = pt_zip(state_dict_pickle()).build();
  auto clean = ckpt_open(bytes, pt);
  bytes[clean] ^= std::byte{1};
  spit(pt, bytes);
  auto r = run("convert " + pt + " " + path("m.ferry"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("tensor 'w'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("CRC-32"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(path("m.ferry")));
  r = run("convert --skip-source-checksums " + pt + " " + path("m.ferry"));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(run("verify " + path("m.ferry")).status, 0);  // what the option says: fresh checksums over unchecked bytes

  // A .ferry input: its CRC32Cs, the same way.
  const std::string f = path("s.ferry");
  write_sample(f, wire::host_order);
  auto fb = slurp(f);
  fb[checkpoint::open(f).value().storages()[0].offset] ^= std::byte{1};
  spit(f, fb);
  r = run("convert " + f + " " + path("s2.ferry"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("CRC32C"), std::string::npos) << r.err;
  EXPECT_EQ(run("convert --skip-source-checksums " + f + " " + path("s2.ferry")).status, 0);
}

TEST_F(Cli, ConvertAFileWithoutTensors) {
  const std::string pt = path("empty.pt");
  pickle_builder p;  // torch.save(nn.ReLU().state_dict())
  p.proto().global("collections", "OrderedDict").empty_tuple().reduce().stop();
  zip_builder z;
  z.add("archive/data.pkl", p.bytes());
  spit(pt, z.build());
  auto r = run("convert " + pt + " " + path("empty.ferry"));
  EXPECT_EQ(r.status, 0) << r.err;
  r = run("inspect " + path("empty.ferry"));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("0 tensors"), std::string::npos) << r.out;
}

// ferry plot reads ferry-train's metrics itself (tools/plot.cpp; no
// trainer headers): a good file draws, a bad record is one line naming it.
TEST_F(Cli, PlotDrawsMetricsAndNamesABadRecord) {
  std::ofstream(path("m.jsonl")) << R"({"kind": "step", "epoch": 1, "step": 1, "steps": 2, "global_step": 1, "loss": 2.5})"
                                 << "\n"
                                 << R"({"kind": "epoch", "epoch": 1, "train_loss": 2, "train_acc": 40, "test_acc": 45})"
                                 << "\n";
  const auto good = run("plot '" + path("m.jsonl") + "' -o '" + path("curves.svg") + "'");
  ASSERT_EQ(good.status, 0) << good.err;
  EXPECT_EQ(read_text(dir_ / "curves.svg").rfind("<?xml", 0), 0u);

  for (const char* record : {R"({"kind": "epoch"})", R"({"kind": "step", "epoch": 1, "step": 1, "steps": 0, "global_step": 1, "loss": 1})",
                             R"({"kind": "epoch", "epoch": 1, "train_loss": 1e999, "train_acc": 1, "test_acc": 1})", "[1, 2]", "{"}) {
    std::ofstream(path("bad.jsonl")) << "\n" << record << "\n";
    const auto bad = run("plot '" + path("bad.jsonl") + "' -o '" + path("x.svg") + "'");
    EXPECT_EQ(bad.status, 1) << record;
    EXPECT_EQ(bad.err, "ferry: " + path("bad.jsonl") +
                           ":2: not a ferry-train metrics record (JSON lines of kind step or epoch)\n")
        << record;
  }
  std::ofstream(path("empty.jsonl")) << "\n";
  EXPECT_EQ(run("plot '" + path("empty.jsonl") + "' -o '" + path("x.svg") + "'").err,
            "ferry: " + path("empty.jsonl") + ": no records: not a ferry-train metrics record (JSON lines of kind step or epoch)\n");
}

}  // namespace
}  // namespace ferry::checkpoint::testing
