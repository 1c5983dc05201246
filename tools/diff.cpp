// ferry diff A B: what differs between two checkpoints of any formats,
// tensor by tensor (bit-identical, or the largest differences), and their
// metadata. Exit 0 identical, 1 different, 2 trouble (as diff(1)).
//
// Tensors compare by their values in host order, so a file and its
// conversion to the other byte order are identical. Quantized GGUF tensors:
// two of the same ggml type compare by their blocks in host order (equal
// blocks are equal values, and an LE file and its BE conversion have equal
// blocks); any other pair with a quantized side compares by the dequantized
// f32 values (gguf.h get_dequantized()), so a GGUF file and its
// `ferry convert --cast f32` output are identical. Blocks that differ are
// reported by their dequantized values. --json rows say which ("compared":
// "blocks" or "dequantized").
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "cli.h"
#include "ferry/checkpoint/cast.h"

namespace ferry::tools {
namespace {
using json = nlohmann::ordered_json;

// What a tensor is compared as: a quantized GGUF tensor as its f32 values
// (dtype f32, shape ne reversed), with its ggml type kept in `q`.
struct compared_as {
  ferry::codec::dtype dtype;
  std::vector<std::uint64_t> shape;
  const ckpt::gguf_tensor* q = nullptr;
};

compared_as compared_as_of(const ckpt::reader& r, const ckpt::tensor_info& t) {
  if (!is_quantized(r, t)) return {t.dtype, t.shape, nullptr};
  const ckpt::gguf_tensor* g = gguf_tensor_of(r, t);
  return {ferry::codec::dtype::f32, {g->ne.rbegin(), g->ne.rend()}, g};
}

std::string describe(const compared_as& c) {
  return std::string(c.q != nullptr ? ckpt::info(c.q->type).name : ferry::codec::name(c.dtype)) + shape_text(c.shape);
}

// The elements compared: row-major, host order; dequantized when quantized.
result<std::vector<std::byte>, error> values_of(const ckpt::reader& r, const ckpt::tensor_info& t,
                                                const compared_as& c) {
  if (c.q != nullptr) {
    FERRY_TRY_ASSIGN(auto f, ckpt::get_dequantized(r, t.name));
    return f.contiguous_copy();
  }
  FERRY_TRY_ASSIGN(auto x, r.get(t));
  return x.contiguous_copy();
}

// Where the rows go, as they are made: --json streams each row (a
// document of 2^20 rows held whole took most of diff's 1.5 GB), the text
// prints each row that is not identical and counts the rest.
class row_sink {
 public:
  row_sink(bool as_json, const std::string& a_path, const std::string& b_path, progress_bar& bar)
      : json_(as_json), a_(a_path), b_(b_path), bar_(bar) {
    if (json_) {
      std::cout << "{\n  \"a\": " << dump(json(a_)) << ",\n  \"b\": " << dump(json(b_)) << ",\n  \"tensors\": [";
    }
  }
  void add(json row) {
    const std::string status = row["status"];
    ++rows_;
    if (status == "identical") ++same_;
    else identical_ = false;
    if (json_) {
      std::cout << (rows_ == 1 ? "\n    " : ",\n    ") << dump(row);
      return;
    }
    if (status == "identical") return;
    bar_.finish();  // a row on a line of its own, not after a half-drawn bar
    const std::string name = row["name"];
    if (status == "only_in_a") {
      std::cout << "- " << name << "  only in " << a_ << '\n';
    } else if (status == "only_in_b") {
      std::cout << "+ " << name << "  only in " << b_ << '\n';
    } else if (status == "differs") {
      char buf[160];
      std::snprintf(buf, sizeof buf, "  %" PRIu64 " elements differ, max abs %.6g, max rel %.6g",
                    row["elements_differing"].get<std::uint64_t>(), row["max_abs_diff"].get<double>(),
                    row["max_rel_diff"].get<double>());
      std::cout << "~ " << name << buf << '\n';
    } else {
      std::cout << "! " << name << "  " << row["a"].get<std::string>() << " vs " << row["b"].get<std::string>() << '\n';
    }
  }
  /// Ends --json's document when the comparison stopped at `e` (exit 2):
  /// what was compared, and the error.
  void abort(const ferry::error& e) {
    if (json_) std::cout << (rows_ == 0 ? "],\n" : "\n  ],\n") << "  \"error\": " << dump(json(e.what())) << "\n}\n";
  }
  /// Ends the output; whether the checkpoints are identical.
  bool finish(bool same_metadata) {
    identical_ = identical_ && same_metadata;
    if (json_) {
      std::cout << (rows_ == 0 ? "],\n" : "\n  ],\n") << "  \"metadata_identical\": " << dump(json(same_metadata))
                << ",\n  \"identical\": " << dump(json(identical_)) << "\n}\n";
    } else {
      if (!same_metadata) std::cout << "! metadata differs\n";
      std::cout << same_ << " of " << rows_ << " tensors bit-identical"
                << (identical_ ? "; the checkpoints are identical\n" : "\n");
    }
    return identical_;
  }

 private:
  static std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }  // names need not be UTF-8
  bool json_;
  std::string a_, b_;
  progress_bar& bar_;
  std::uint64_t rows_ = 0, same_ = 0;
  bool identical_ = true;
};

// Fills `row` with how the elements of `va` and `vb` (dtype `dtype`, host
// order, equal sizes) differ.
void describe_difference(json& row, ferry::codec::dtype dtype, std::span<const std::byte> va,
                         std::span<const std::byte> vb) {
  const std::size_t w = ferry::codec::size_of(dtype);
  // A complex element differs by the modulus of the difference.
  const ferry::codec::dtype part = ferry::codec::part_of(dtype);
  const bool complex = ferry::codec::is_complex(dtype);
  const auto value = [&](const std::byte* p, double& im) {
    im = complex ? ckpt::element_as_double(part, p + w / 2) : 0.0;
    return ckpt::element_as_double(part, p);
  };
  double max_abs = 0, max_rel = 0;
  std::uint64_t differing = 0;
  for (std::size_t i = 0; i < va.size(); i += w) {
    if (std::memcmp(va.data() + i, vb.data() + i, w) == 0) continue;
    ++differing;
    double xi = 0, yi = 0;
    const double x = value(va.data() + i, xi);
    const double y = value(vb.data() + i, yi);
    const bool x_nan = std::isnan(x) || std::isnan(xi), y_nan = std::isnan(y) || std::isnan(yi);
    if (x_nan && y_nan) continue;  // NaN payloads differ
    const double d = x_nan || y_nan ? INFINITY : std::hypot(x - y, xi - yi);
    max_abs = std::max(max_abs, d);
    const double scale = std::max(std::hypot(x, xi), std::hypot(y, yi));
    if (scale > 0) max_rel = std::max(max_rel, d / scale);
  }
  row["status"] = "differs";
  row["elements_differing"] = differing;
  row["max_abs_diff"] = max_abs;
  row["max_rel_diff"] = max_rel;
}

}  // namespace

int diff(const std::string& a_path, const std::string& b_path, bool as_json, const read_flags& flags) {
  auto a = open_checkpoint(a_path, flags);
  if (!a) return fail(a.error(), 2);
  auto b = open_checkpoint(b_path, flags);
  if (!b) return fail(b.error(), 2);

  std::uint64_t total = 0;
  for (const auto& t : a->tensors()) {
    if (b->find(t.name) != nullptr) total += t.nbytes();
  }
  progress_bar bar("diff", total);
  std::uint64_t done = 0;
  row_sink out(as_json, a_path, b_path, bar);
  const auto trouble = [&](const ferry::error& e) {
    out.abort(e);
    return fail(e, 2);
  };
  for (const auto& ta : a->tensors()) {
    const ckpt::tensor_info* tb = b->find(ta.name);
    if (tb == nullptr) {
      out.add({{"name", ta.name}, {"status", "only_in_a"}});
      continue;
    }
    const compared_as ca = compared_as_of(*a, ta), cb = compared_as_of(*b, *tb);
    if (ca.dtype != cb.dtype || ca.shape != cb.shape) {
      out.add({{"name", ta.name},
               {"status", ca.dtype != cb.dtype ? "dtype_differs" : "shape_differs"},
               {"a", describe(ca)},
               {"b", describe(cb)}});
      continue;
    }
    json row{{"name", ta.name}, {"status", "identical"}};
    if (ca.q != nullptr || cb.q != nullptr) row["compared"] = "dequantized";
    const bool same_blocks = ca.q != nullptr && cb.q != nullptr && ca.q->type == cb.q->type;
    if (same_blocks || (ca.q == nullptr && cb.q == nullptr && ta.is_contiguous() && tb->is_contiguous())) {
      // Compared where they lie (host-order blocks, or contiguous elements):
      // no copy.
      auto xa = a->get(ta);
      if (!xa) return trouble(xa.error());
      auto xb = b->get(*tb);
      if (!xb) return trouble(xb.error());
      if (std::ranges::equal(xa->bytes(), xb->bytes())) {
        done += ta.nbytes();
        bar.update(done);
        if (same_blocks) row["compared"] = "blocks";
        out.add(std::move(row));
        continue;
      }
      if (!same_blocks) {
        done += ta.nbytes();
        bar.update(done);
        describe_difference(row, ca.dtype, xa->bytes(), xb->bytes());
        out.add(std::move(row));
        continue;
      }
    }
    auto va = values_of(*a, ta, ca);
    if (!va) return trouble(va.error());
    auto vb = values_of(*b, *tb, cb);
    if (!vb) return trouble(vb.error());
    done += ta.nbytes();
    bar.update(done);
    if (*va != *vb) describe_difference(row, ca.dtype, *va, *vb);
    out.add(std::move(row));
  }
  for (const auto& tb : b->tensors()) {
    if (a->find(tb.name) == nullptr) out.add({{"name", tb.name}, {"status", "only_in_b"}});
  }
  bar.finish();
  const bool identical = out.finish(a->metadata() == b->metadata());
  if (const int e = flush_stdout(); e != 0) return 2;
  return identical ? 0 : 1;
}

}  // namespace ferry::tools
