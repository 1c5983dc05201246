// ferry diff A B: what differs between two checkpoints of any formats,
// tensor by tensor (bit-identical, or the largest differences), and their
// metadata. Exit 0 identical, 1 different, 2 trouble (as diff(1)).
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "ferry/checkpoint/cast.h"

namespace ferry::tools {
namespace {
using json = nlohmann::ordered_json;
}  // namespace

int diff(const std::string& a_path, const std::string& b_path, bool as_json, const read_flags& flags) {
  auto a = open_checkpoint(a_path, flags);
  if (!a) return fail(a.error(), 2);
  auto b = open_checkpoint(b_path, flags);
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

}  // namespace ferry::tools
