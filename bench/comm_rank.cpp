// comm_rank: one rank of bench/comm_cluster, started inside a node (a
// network namespace) of the simulated cluster.
//
//   comm_rank --contender C --sizes COUNT:WARMUP:ITERS[,...] [--out FILE]
//             [--gloo-store PATH --gloo-addr ADDR] [--model-world K]
//
// C is ferry, ferry-bf16, ferry-f16 (compression with error feedback, as
// comm_bench) or gloo (LibTorch's ProcessGroupGloo, f32). Every rank reads
// RANK and WORLD_SIZE; ferry ranks read their whole configuration through
// comm::config::from_env (MASTER_ADDR, MASTER_PORT, FERRY_SECRET, and
// whatever else the library reads, such as FERRY_CHUNK_BYTES, FERRY_AUTH or
// FERRY_RING_ORDER), so a row measures exactly what a user who sets those
// variables gets. Gloo ranks meet through a FileStore at PATH, their device
// bound to ADDR (the node's address).
//
// For each size in order: WARMUP allreduces, then ITERS timed ones; rank 0
// times each (steady_clock around the call). Every rank checks every result
// against the exact sum (the inputs are small integers, exact in f32, bf16
// and f16, so compressed results must be exact too) and restores its input
// before the next call, outside the timed region. A wrong result ends the
// rank with status 3.
//
// Rank 0 writes FILE, a JSON object: contender, world, for ferry the
// configuration fields that shape a row (algorithm as FERRY_ALGORITHM
// names it; auth and ring_order as enumerator
// values, chunk_bytes, host_ranks: the ranks in rank 0's shared-memory
// group, 1 without one), ring (for ferry: the rank
// that follows each rank on the ring, as the handshakes reported it; null
// for Gloo, whose ring is rank order), sizes: [{count, bytes, warmup,
// times_s: [...]}]. With --model-world K (ferry only), each size also
// carries the cost model's prediction for an allreduce of its bytes among K
// ranks (comm/cost_model.h, with the link costs the world uses, rank 0's
// FERRY_LINK_LATENCY_US and FERRY_LINK_GBPS): model: {ring,
// recursive_doubling, rabenseifner} in seconds, and algorithm, the one
// the library runs over the network for that size
// (communicator::algorithm_for). K is the world, or with host groups the
// number of hosts (their leaders use the network).
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/comm/communicator.h"
#include "gloo_peer.h"

namespace {

using namespace ferry;

struct size_spec {
  std::size_t count = 0;
  int warmup = 0;
  int iterations = 0;
};

[[noreturn]] void die(const std::string& msg, int status = 2) {
  std::fprintf(stderr, "comm_rank: %s\n", msg.c_str());
  std::exit(status);
}

template <class T>
T parse_number(std::string_view what, std::string_view text) {
  T v{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) {
    die(std::string(what) + " '" + std::string(text) + "' is not a number");
  }
  return v;
}

int env_number(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) die(std::string(name) + " is not set");
  return parse_number<int>(name, v);
}

std::vector<size_spec> parse_sizes(std::string_view text) {
  std::vector<size_spec> out;
  while (!text.empty()) {
    const auto comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    const auto a = item.find(':');
    const auto b = a == std::string_view::npos ? a : item.find(':', a + 1);
    if (b == std::string_view::npos) die("--sizes item '" + std::string(item) + "' is not COUNT:WARMUP:ITERS");
    size_spec s{parse_number<std::size_t>("count", item.substr(0, a)),
                parse_number<int>("warm-up count", item.substr(a + 1, b - a - 1)),
                parse_number<int>("iteration count", item.substr(b + 1))};
    if (s.count == 0 || s.warmup < 0 || s.iterations < 1) die("--sizes item '" + std::string(item) + "' out of range");
    out.push_back(s);
  }
  if (out.empty()) die("--sizes is empty");
  return out;
}

// The inputs: rank r's value at i is w(r) * (i % 7 - 3), with the weight
// w(r) = r % period + 1, so the sum over n ranks is W * (i % 7 - 3), W the
// weights' sum. Every partial sum of any ranks is an integer of magnitude
// <= 3W; the period is the largest (at most n, so each rank weighs
// differently when it can) that keeps 3W exact in every format the values
// travel in: 2^24 in f32, 2048 in f16 (11 significant bits), 256 in bf16
// (8). At 16 ranks bf16 takes period 10 (W = 76); with w = r + 1 a ring's
// partial sum would reach 273, which bf16 cannot hold.
struct inputs {
  int period = 1;
  int weights = 0;  // W

  inputs(int n, comm::compression comp) {
    const int exact = comp == comm::compression::bf16 ? 256 : comp == comm::compression::f16 ? 2048 : 1 << 24;
    for (period = n; period > 1 && 3 * sum(n, period) > exact; --period) {
    }
    weights = sum(n, period);
  }
  static int sum(int n, int period) {
    int w = 0;
    for (int r = 0; r < n; ++r) w += r % period + 1;
    return w;
  }
  [[nodiscard]] float value(int rank, std::size_t i) const {
    return static_cast<float>((rank % period + 1) * (static_cast<int>(i % 7) - 3));
  }

  // Checks `data` against the sum and restores this rank's input, in one pass.
  void check_and_reset(std::vector<float>& data, int rank, const char* when) const {
    for (std::size_t i = 0; i < data.size(); ++i) {
      const float want = static_cast<float>(weights * (static_cast<int>(i % 7) - 3));
      if (data[i] != want) {
        die("rank " + std::to_string(rank) + ": wrong sum at index " + std::to_string(i) + " of " +
                std::to_string(data.size()) + " (" + when + "): " + std::to_string(data[i]) + ", not " +
                std::to_string(want),
            3);
      }
      data[i] = value(rank, i);
    }
  }
};

struct options {
  std::string contender;
  std::vector<size_spec> sizes;
  std::string out;
  std::string gloo_store;
  std::string gloo_addr;
  std::uint32_t model_world = 0;  // 0: no predictions
};

options parse_args(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) die(std::string(a) + " needs a value");
      return argv[++i];
    };
    if (a == "--contender") {
      o.contender = value();
    } else if (a == "--sizes") {
      o.sizes = parse_sizes(value());
    } else if (a == "--out") {
      o.out = value();
    } else if (a == "--gloo-store") {
      o.gloo_store = value();
    } else if (a == "--gloo-addr") {
      o.gloo_addr = value();
    } else if (a == "--model-world") {
      o.model_world = parse_number<std::uint32_t>("--model-world", value());
      if (o.model_world == 0) die("--model-world must be at least 1");
    } else {
      die("unknown argument '" + std::string(a) + "' (see the comment at the top of bench/comm_rank.cpp)");
    }
  }
  if (o.contender != "ferry" && o.contender != "ferry-bf16" && o.contender != "ferry-f16" && o.contender != "gloo") {
    die("--contender must be ferry, ferry-bf16, ferry-f16 or gloo");
  }
  if (o.sizes.empty()) die("--sizes is required");
  if (o.contender == "gloo" && (o.gloo_store.empty() || o.gloo_addr.empty())) {
    die("gloo needs --gloo-store and --gloo-addr");
  }
  if (o.contender == "gloo" && o.model_world != 0) die("--model-world is for ferry's rows");
  return o;
}

// The configuration fields that decide what a row measures, as numbers
// (enumerators' values; the ring order this rank asked for, node if none).
std::string config_fields(const comm::communicator& comm) {
  const comm::config& c = comm.config();
  return ", \"auth\": " + std::to_string(static_cast<int>(c.auth)) +
         ", \"algorithm\": \"" + std::string(comm::name(c.algorithm)) + "\"" +
         ", \"host_ranks\": " + std::to_string(comm.host_ranks().size()) +
         ", \"ring_order\": " + std::to_string(static_cast<int>(c.order.value_or(comm::ring_order::node))) +
         ", \"chunk_bytes\": " + std::to_string(c.chunk_bytes);
}

// ", \"model\": {...}, \"algorithm\": \"...\"" for `bytes` among o.model_world ranks.
std::string model_fields(const options& o, const comm::communicator& comm, std::size_t bytes) {
  std::string j = ", \"model\": {";
  const char* sep = "";
  for (const comm::algorithm a : {comm::algorithm::ring, comm::algorithm::recursive_doubling, comm::algorithm::rabenseifner}) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "%s\"%s\": %.9f", sep, std::string(comm::name(a)).c_str(),
                  comm::predict(a, o.model_world, bytes, comm.link_costs()));
    j += buf;
    sep = ", ";
  }
  return j + "}, \"algorithm\": \"" + std::string(comm::name(comm.algorithm_for(bytes))) + "\"";
}

std::string json_result(const options& o, int n, const std::vector<std::uint32_t>& ring,
                        const std::vector<std::vector<double>>& times, const comm::communicator* comm) {
  const std::string fields = comm ? config_fields(*comm) : "";
  std::string j = "{\"contender\": \"" + o.contender + "\", \"world\": " + std::to_string(n) + fields + ", \"ring\": ";
  if (ring.empty()) {
    j += "null";
  } else {
    j += "[";
    for (std::size_t r = 0; r < ring.size(); ++r) j += (r ? ", " : "") + std::to_string(ring[r]);
    j += "]";
  }
  j += ", \"sizes\": [";
  for (std::size_t k = 0; k < o.sizes.size(); ++k) {
    const auto& s = o.sizes[k];
    j += std::string(k ? ", " : "") + "{\"count\": " + std::to_string(s.count) +
         ", \"bytes\": " + std::to_string(s.count * sizeof(float)) + ", \"warmup\": " + std::to_string(s.warmup) +
         (comm && o.model_world ? model_fields(o, *comm, s.count * sizeof(float)) : "") + ", \"times_s\": [";
    for (std::size_t i = 0; i < times[k].size(); ++i) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%s%.9f", i ? ", " : "", times[k][i]);
      j += buf;
    }
    j += "]}";
  }
  return j + "]}\n";
}

int run(const options& o) {
  const int rank = env_number("RANK");
  const int n = env_number("WORLD_SIZE");
  std::optional<comm::communicator> comm;
  std::optional<bench::gloo_group> gloo;
  comm::compression comp = comm::compression::none;
  if (o.contender == "gloo") {
    gloo.emplace(o.gloo_store, rank, n, o.gloo_addr);
  } else {
    comm.emplace(comm::communicator::from_env());
    // "ferry-<compression>": ferry-bf16, ferry-f16.
    if (o.contender.starts_with("ferry-")) {
      comp = comm::compression_from_name(std::string_view(o.contender).substr(6)).value_or(comm::compression::none);
    }
  }
  const inputs in(n, comp);
  // The ring as it was formed: each rank's successor, gathered on every rank.
  std::vector<std::uint32_t> ring;
  if (comm && n > 1) ring = comm->allgather(comm->next_peer().rank);

  std::vector<std::vector<double>> times(o.sizes.size());
  for (std::size_t k = 0; k < o.sizes.size(); ++k) {
    const size_spec& s = o.sizes[k];
    std::vector<float> data(s.count);
    for (std::size_t i = 0; i < s.count; ++i) data[i] = in.value(rank, i);
    std::optional<comm::error_feedback> ef;
    comm::allreduce_options opts;
    if (comp != comm::compression::none) {
      ef.emplace(s.count);
      opts.comp = comp;
      opts.feedback = &*ef;
    }
    auto step = [&] {
      if (gloo) {
        gloo->allreduce(data.data(), data.size());
      } else {
        comm->allreduce(data, opts);
      }
    };
    for (int i = 0; i < s.warmup; ++i) {
      step();
      in.check_and_reset(data, rank, "warm-up");
    }
    times[k].reserve(static_cast<std::size_t>(s.iterations));
    for (int i = 0; i < s.iterations; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      step();
      times[k].push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      in.check_and_reset(data, rank, "timed");
    }
  }
  if (gloo) gloo->barrier();
  if (comm) comm->barrier();

  if (rank == 0 && !o.out.empty()) {
    const std::string j = json_result(o, n, ring, times, comm ? &*comm : nullptr);
    std::FILE* f = std::fopen(o.out.c_str(), "w");
    if (f == nullptr || std::fwrite(j.data(), 1, j.size(), f) != j.size() || std::fclose(f) != 0) {
      die("cannot write " + o.out + ": " + std::strerror(errno), 1);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse_args(argc, argv);
  try {
    return run(o);
  } catch (const std::exception& e) {
    die(std::string("rank ") + (std::getenv("RANK") ? std::getenv("RANK") : "?") + ": " + e.what(), 1);
  }
}
