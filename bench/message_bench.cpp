// The gradient message itself: encode plus decode-into-host-floats of a
// 1M-element f32 gradient as a ferry frame, and as the formats a user
// would otherwise pick: protobuf (repeated float, packed), FlatBuffers
// ([float], verified) and Cap'n Proto (List(Float32)). None of the three
// carries a checksum, so each gets ferry's CRC32C over its bytes, as a
// ferry frame has one. All three are little-endian on the wire: a
// big-endian host swaps every element both ways, where two big-endian
// ferry peers copy.
#include <benchmark/benchmark.h>
#include <capnp/message.h>
#include <capnp/serialize.h>
#include <flatbuffers/flatbuffers.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "ferry/codec/crc32c.h"
#include "ferry/comm/frame.h"
#include "ferry/wire/bulk.h"
#include "gradient.capnp.h"
#include "gradient.pb.h"
#include "gradient_generated.h"
#include "ratio_table.h"

namespace {

using namespace ferry;

constexpr std::size_t count = 1 << 20;

const std::vector<float>& gradient() {
  static const std::vector<float> g = [] {
    std::vector<float> v(count);
    for (std::size_t i = 0; i < count; ++i) v[i] = static_cast<float>(i % 1000) * 1e-4f - 0.05f;
    return v;
  }();
  return g;
}

void append_crc(std::vector<std::byte>& out) {
  const std::uint32_t crc = codec::crc32c(out);
  std::byte b[4];
  wire::store<std::uint32_t>(crc, b, wire::byte_order::little);
  out.insert(out.end(), b, b + 4);
}

bool crc_ok(std::span<const std::byte> in) {
  return in.size() >= 4 &&
         codec::crc32c(in.first(in.size() - 4)) == wire::load<std::uint32_t>(in.data() + in.size() - 4, wire::byte_order::little);
}

void finish(benchmark::State& state, std::size_t bytes, const std::vector<float>& out) {
  if (std::memcmp(out.data(), gradient().data(), count * 4) != 0) state.SkipWithError("decoded values differ");
  state.counters["bytes"] = static_cast<double>(bytes);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * count * 4));
}

// The path a rank runs (comm/frame.h): the sender rounds or copies its
// floats into a payload and seals it (header and CRC); the receiver's
// frame_decoder takes the bytes as they arrive, places the payload straight
// into the output floats and checks the CRC, and a sender of the other
// byte order costs one in-place swap. Decoding either this host's frame
// (two peers that agree: no swap anywhere) or the same values as sent by a
// peer of the other byte order. The wire bytes are one contiguous buffer,
// as the other formats produce.
struct into_floats final : comm::frame_sink {
  std::span<float> out;
  result<std::span<std::byte>> on_header(const comm::frame_header& h) override {
    if (h.type != codec::dtype::f32 || h.enc != comm::encoding::raw || h.count != out.size()) return errc::size_mismatch;
    return std::as_writable_bytes(out);
  }
  result<void> on_frame(const comm::frame_header& h, std::span<std::byte> payload) override {
    comm::payload_to_host(h, payload);
    return {};
  }
  result<void> on_abort(const comm::abort_message&) override { return errc::bad_magic; }
};

void sender_frame(std::span<const float> values, wire::byte_order order, std::vector<std::byte>& wire) {
  comm::frame_header h;
  h.order = order;
  h.count = static_cast<std::uint32_t>(values.size());
  wire.resize(comm::frame_header_size + values.size() * 4 + comm::frame_trailer_size);
  const auto payload = std::span(wire).subspan(comm::frame_header_size, values.size() * 4);
  if (order == wire::host_order) {
    comm::encode_f32_payload(comm::encoding::raw, values, payload);
  } else {
    wire::store_array<float>(values, payload, order);
  }
  const auto e = comm::seal(h, payload);
  std::copy(e.header.begin(), e.header.end(), wire.begin());
  std::copy(e.trailer.begin(), e.trailer.end(), wire.end() - comm::frame_trailer_size);
}

void ferry_frame(benchmark::State& state, bool other_order) {
  const auto& g = gradient();
  std::vector<std::byte> foreign;
  sender_frame(g, wire::host_order == wire::byte_order::little ? wire::byte_order::big : wire::byte_order::little,
                     foreign);
  std::vector<std::byte> wire;
  std::vector<float> out(count);
  into_floats sink;
  sink.out = out;
  for (auto _ : state) {
    sender_frame(g, wire::host_order, wire);
    comm::frame_decoder d(wire.size());
    if (!d.feed(other_order ? foreign : wire, sink) || !d.idle()) state.SkipWithError("decode");
    benchmark::DoNotOptimize(out.data());
  }
  finish(state, wire.size(), out);
}

void protobuf_message(benchmark::State& state) {
  std::vector<std::byte> wire;
  std::vector<float> out(count);
  const auto& g = gradient();
  bench::pb::Gradient msg, back;
  for (auto _ : state) {
    msg.mutable_values()->Assign(g.begin(), g.end());
    wire.resize(msg.ByteSizeLong());
    msg.SerializeToArray(wire.data(), static_cast<int>(wire.size()));
    append_crc(wire);
    if (!crc_ok(wire) || !back.ParseFromArray(wire.data(), static_cast<int>(wire.size() - 4))) {
      state.SkipWithError("decode");
    }
    std::copy(back.values().begin(), back.values().end(), out.begin());
    benchmark::DoNotOptimize(out.data());
  }
  finish(state, wire.size(), out);
}

void flatbuffers_message(benchmark::State& state) {
  std::vector<std::byte> wire;
  std::vector<float> out(count);
  const auto& g = gradient();
  flatbuffers::FlatBufferBuilder fbb(count * 4 + 1024);
  for (auto _ : state) {
    fbb.Clear();
    const auto values = fbb.CreateVector(g.data(), g.size());
    fbb.Finish(bench::fb::CreateGradient(fbb, values));
    const auto* p = reinterpret_cast<const std::byte*>(fbb.GetBufferPointer());
    wire.assign(p, p + fbb.GetSize());
    append_crc(wire);
    const auto* bytes = reinterpret_cast<const std::uint8_t*>(wire.data());
    flatbuffers::Verifier verifier(bytes, wire.size() - 4);
    if (!crc_ok(wire) || !bench::fb::VerifyGradientBuffer(verifier)) state.SkipWithError("decode");
    const auto* v = bench::fb::GetGradient(bytes)->values();
    std::copy(v->begin(), v->end(), out.begin());  // EndianScalar per element
    benchmark::DoNotOptimize(out.data());
  }
  finish(state, wire.size(), out);
}

void capnp_message(benchmark::State& state) {
  std::vector<std::byte> wire;
  std::vector<float> out(count);
  const auto& g = gradient();
  for (auto _ : state) {
    capnp::MallocMessageBuilder builder(static_cast<unsigned>(count / 2 + 64));
    auto values = builder.initRoot<bench::cp::Gradient>().initValues(static_cast<unsigned>(count));
    for (unsigned i = 0; i < count; ++i) values.set(i, g[i]);
    const auto words = capnp::messageToFlatArray(builder);
    const auto bytes = words.asBytes();
    const auto* p = reinterpret_cast<const std::byte*>(bytes.begin());
    wire.assign(p, p + bytes.size());
    append_crc(wire);
    if (!crc_ok(wire)) state.SkipWithError("decode");
    // The reader wants aligned words: copy out of the framing buffer, as a
    // receiver of a byte stream must.
    kj::Array<capnp::word> aligned = kj::heapArray<capnp::word>((wire.size() - 4) / sizeof(capnp::word));
    std::memcpy(aligned.begin(), wire.data(), aligned.size() * sizeof(capnp::word));
    capnp::ReaderOptions options;
    options.traversalLimitInWords = count;  // a 4 MiB list needs more than the 64 MiB default? no: room to spare
    capnp::FlatArrayMessageReader reader(aligned, options);
    const auto list = reader.getRoot<bench::cp::Gradient>().getValues();
    for (unsigned i = 0; i < list.size(); ++i) out[i] = list[i];
    benchmark::DoNotOptimize(out.data());
  }
  finish(state, wire.size(), out);
}

void print_table(const bench::results& r) {
  auto get = [&](const char* n) { return r.count(n) ? &r.at(n) : nullptr; };
  std::printf("\n1M-element f32 gradient: encode + decode into host floats, checksum included (median of 3)\n\n");
  std::printf("| format | time | bytes | time / ferry |\n|---|---|---|---|\n");
  const auto* ferry = get("message/ferry");
  const char* names[] = {"message/ferry", "message/ferry_other_order", "message/protobuf", "message/flatbuffers",
                         "message/capnproto"};
  bool fastest = ferry != nullptr;
  for (const char* n : names) {
    const auto* m = get(n);
    if (m == nullptr || ferry == nullptr) continue;
    std::printf("| %s | %.0f us | %.0f | %.2fx |\n", n + 8, m->ns / 1e3, m->counter("bytes"), m->ns / ferry->ns);
    if (std::strcmp(n, "message/ferry_other_order") != 0 && m->ns < ferry->ns) fastest = false;
  }
  std::printf("\n| goal | measured | |\n|---|---|---|\n| ferry fastest of ferry, protobuf, FlatBuffers, Cap'n Proto | %s | %s |\n",
              fastest ? "yes" : "no", fastest ? "met" : "MISSED");
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::RegisterBenchmark("message/ferry", [](benchmark::State& s) { ferry_frame(s, false); })->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("message/ferry_other_order", [](benchmark::State& s) { ferry_frame(s, true); })->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("message/protobuf", protobuf_message)->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("message/flatbuffers", flatbuffers_message)->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("message/capnproto", capnp_message)->Unit(benchmark::kMicrosecond);
  const auto results = bench::run_benchmarks(argc, argv, "message");
  if (!results) return 1;
  print_table(*results);
  return 0;
}
