// Uses ferry::graph (and the base it brings) without comm or OpenSSL.
#include <ferry/base/file.h>
#include <ferry/graph/archive.h>

#include <cstdio>
#include <memory>
#include <string_view>

struct item {
  static constexpr std::string_view ferry_name = "consumer.item";
  int value = 0;
  std::shared_ptr<item> next;
  template <class F>
  void describe(F& f) {
    f(1, "value", value)(2, "next", next);
  }
};

int main() {
  auto a = std::make_shared<item>();
  a->value = 42;
  a->next = std::make_shared<item>();
  auto bytes = ferry::graph::write(a);
  auto back = bytes ? ferry::graph::read<std::shared_ptr<item>>(*bytes) : ferry::result<std::shared_ptr<item>>(bytes.error());
  const auto missing = ferry::base::read_file("/nonexistent/ferry-consumer");
  const bool ok = back && (*back)->value == 42 && (*back)->next && !missing;
  std::puts(ok ? "graph consumer ok" : "graph consumer FAILED");
  return ok ? 0 : 1;
}
