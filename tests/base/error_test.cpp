#include "ferry/base/error.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/checkpoint/error.h"
#include "ferry/codec/error.h"
#include "ferry/comm/error.h"
#include "ferry/graph/error.h"
#include "ferry/schema/error.h"
#include "ferry/trainer/error.h"
#include "../../tools/error.h"  // the CLI is not a library: no ferry/tools/ include path

namespace ferry {
namespace {

// Each module's codes and its block of numbers (base/error.h, docs/errors.md).
struct module_block {
  std::string_view module;
  std::span<const error_info> codes;
  int first, last;
};
const module_block blocks[] = {
    {"base", detail::errc_table, 0, 99},          {"codec", detail::codec_errc_table, 100, 199},
    {"schema", detail::schema_errc_table, 200, 249}, {"graph", detail::graph_errc_table, 250, 299},
    {"comm", detail::comm_errc_table, 300, 399},  {"checkpoint", detail::checkpoint_errc_table, 400, 499},
    {"trainer", detail::trainer_errc_table, 500, 599}, {"tools", detail::tools_errc_table, 600, 699},
};

std::size_t codes_in_blocks() {
  std::size_t n = 0;
  for (const module_block& b : blocks) n += b.codes.size();
  return n;
}

TEST(Errors, EveryValueHasANameAndMessage) {
  std::size_t named = 0;
  for (int code = 0; code <= 0xFFFF; ++code) {
    const auto e = error_code::from_value(static_cast<std::uint16_t>(code));
    if (name(e) == "unknown") {
      EXPECT_EQ(message(e), "unknown error") << code;
      continue;
    }
    ++named;
    EXPECT_NE(message(e), "unknown error") << code;
  }
  EXPECT_EQ(named, codes_in_blocks());  // no module registers codes beyond those in `blocks`
  EXPECT_EQ(name(errc::varint_overlong), "varint_overlong");
  // The numbers are part of the interface.
  EXPECT_EQ(static_cast<int>(errc::truncated), 1);
  EXPECT_EQ(static_cast<int>(errc::size_mismatch), 7);
  EXPECT_EQ(static_cast<int>(errc::bad_magic), 8);
  EXPECT_EQ(static_cast<int>(errc::checksum_mismatch), 16);
  EXPECT_EQ(static_cast<int>(codec_errc::unknown_dtype), 100);
  EXPECT_EQ(static_cast<int>(schema_errc::bad_descriptor), 200);
  EXPECT_EQ(static_cast<int>(graph_errc::pointer_into_root), 258);
  EXPECT_EQ(static_cast<int>(comm_errc::bad_config), 308);
  EXPECT_EQ(static_cast<int>(checkpoint_errc::pickle_forbidden_global), 418);
}

TEST(Errors, EveryCodeLiesInItsModulesBlock) {
  for (const module_block& b : blocks) {
    EXPECT_FALSE(b.codes.empty()) << b.module;
    for (const error_info& i : b.codes) {
      if (i.value == 0) {
        EXPECT_EQ(b.module, "base");  // ok
        continue;
      }
      EXPECT_GE(i.value, b.first) << b.module << " " << i.name;
      EXPECT_LE(i.value, b.last) << b.module << " " << i.name;
      EXPECT_EQ(name(error_code::from_value(i.value)), i.name);  // registered, and by this module alone
    }
  }
}

struct documented {
  std::string module, name, message;
};

// A row "| 12 | base | `bad_value` | message |" of docs/errors.md's table of
// codes, or nullopt for any other line. (Split by hand: GCC 12's <regex>
// trips -Wmaybe-uninitialized under the sanitizers.)
std::optional<std::pair<int, documented>> code_row(std::string_view line) {
  if (!line.starts_with("| ") || !line.ends_with(" |")) return std::nullopt;
  line = line.substr(2, line.size() - 4);
  std::string_view cells[4];
  for (int i = 0; i < 3; ++i) {
    const auto bar = line.find(" | ");
    if (bar == std::string_view::npos) return std::nullopt;
    cells[i] = line.substr(0, bar);
    line.remove_prefix(bar + 3);
  }
  cells[3] = line;
  const auto word = [](std::string_view s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
  };
  const std::string_view number = cells[0], name = cells[2];
  if (!word(number) || !std::all_of(number.begin(), number.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  if (!word(cells[1]) || name.size() < 3 || name.front() != '`' || name.back() != '`' ||
      !word(name.substr(1, name.size() - 2))) {
    return std::nullopt;
  }
  return std::pair{std::stoi(std::string(number)),
                   documented{std::string(cells[1]), std::string(name.substr(1, name.size() - 2)), std::string(cells[3])}};
}

// docs/errors.md's table "| code | module | `name` | message |" has one
// row per registered code, with its number, module, name and message, and
// no other row.
TEST(Errors, DocsListEveryCodeWithItsNumber) {
  std::ifstream in(FERRY_ERRORS_DOC);
  ASSERT_TRUE(in) << "cannot read " << FERRY_ERRORS_DOC;
  std::map<int, documented> rows;
  std::string line;
  while (std::getline(in, line)) {
    const auto row = code_row(line);
    if (!row) continue;
    EXPECT_TRUE(rows.emplace(row->first, row->second).second)
        << "code " << row->first << " has two rows in " << FERRY_ERRORS_DOC;
  }
  for (const module_block& b : blocks) {
    for (const error_info& i : b.codes) {
      const auto r = rows.find(i.value);
      if (r == rows.end()) {
        ADD_FAILURE() << FERRY_ERRORS_DOC << " has no row for " << i.value << " (" << b.module << " " << i.name
                      << "): add | " << i.value << " | " << b.module << " | `" << i.name << "` | " << i.message
                      << " |";
        continue;
      }
      EXPECT_EQ(r->second.module, b.module) << i.value;
      EXPECT_EQ(r->second.name, i.name) << i.value;
      EXPECT_EQ(r->second.message, i.message) << i.value;
    }
  }
  EXPECT_EQ(rows.size(), codes_in_blocks()) << "a row of " << FERRY_ERRORS_DOC << " names a code no module registers";
}

TEST(Result, HoldsValueOrError) {
  result<std::vector<int>> ok = std::vector<int>{1, 2};
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->size(), 2u);
  EXPECT_EQ(ok.error(), errc::ok);
  result<std::vector<int>> bad = errc::truncated;
  EXPECT_FALSE(bad);
  EXPECT_EQ(bad.error(), errc::truncated);
  bad = ok;
  EXPECT_EQ(bad->at(1), 2);
  result<std::vector<int>> moved = std::move(ok);
  EXPECT_EQ(moved->size(), 2u);
  result<void> v;
  EXPECT_TRUE(v);
  EXPECT_EQ(result<void>(errc::no_space).error(), errc::no_space);
  EXPECT_EQ(result<int>(errc::truncated).value_or(7), 7);
}

TEST(Errors, ModuleCodesConvertAndCompare) {
  const error_code c = graph_errc::type_mismatch;
  EXPECT_EQ(c, graph_errc::type_mismatch);
  EXPECT_NE(c, errc::truncated);
  EXPECT_EQ(c.value(), 252);
  EXPECT_EQ(name(c), "type_mismatch");
  EXPECT_EQ(name(comm_errc::peer_lost), "peer_lost");
  EXPECT_EQ(error_code::from_value(304), comm_errc::peer_lost);
  EXPECT_FALSE(error_code());
  EXPECT_TRUE(error_code(errc::truncated));
  std::ostringstream os;
  os << error_code(schema_errc::duplicate_field);
  EXPECT_EQ(os.str(), "duplicate_field (202)");
}

TEST(Errors, ContextSaysWhatAndWhere) {
  const error e(errc::checksum_mismatch, "tensor 'fc1.weight'");
  EXPECT_EQ(e.code(), errc::checksum_mismatch);
  EXPECT_EQ(e.what(), "tensor 'fc1.weight': CRC32C does not match the bytes it covers");
  EXPECT_EQ(e.wrap("model.ferry").what(), "model.ferry: tensor 'fc1.weight': CRC32C does not match the bytes it covers");
  const error os_error = error::from_errno(ENOENT, "/nonexistent");
  EXPECT_EQ(os_error.code(), errc::io_error);
  EXPECT_EQ(os_error.sys_errno(), ENOENT);
  EXPECT_EQ(os_error.what(), "/nonexistent: No such file or directory");
  EXPECT_EQ(error(errc::truncated).what(), "input ends before the value it announces");
}

TEST(Errors, QuoteMakesInputOnePrintableLine) {
  EXPECT_EQ(quote("fc1.weight"), "'fc1.weight'");
  EXPECT_EQ(quote("a\nb\rc\td"), "'a\\nb\\rc\\td'");
  EXPECT_EQ(quote(std::string("nul\0x", 5)), "'nul\\0x'");
  EXPECT_EQ(quote("\x1b[2K\x1b[1A\x7f"), "'\\x1b[2K\\x1b[1A\\x7f'");
  EXPECT_EQ(quote("caf\xc3\xa9 \xe6\x97\xa5"), "'caf\xc3\xa9 \xe6\x97\xa5'");  // UTF-8 stays
  EXPECT_EQ(quote("\xc2\x9b"), "'\\u009b'");                               // C1 CSI
  EXPECT_EQ(quote("a\xe2\x80\xae" "b"), "'a\\u202eb'");                       // right-to-left override
  EXPECT_EQ(quote("\xff\xc3"), "'\\xff\\xc3'");                             // not UTF-8
  EXPECT_EQ(quote("\xed\xa0\x80"), "'\\xed\\xa0\\x80'");                  // a surrogate
  EXPECT_EQ(quote("x': ok \\n"), "'x\\': ok \\\\n'");                         // a quote cannot be closed early
  EXPECT_EQ(quote(std::string(300, 'n'), 4), "'nnnn...' (300 bytes)");
  EXPECT_EQ(quote("\xc3\xa9\xc3\xa9", 3), "'\xc3\xa9...' (4 bytes)");     // never half a character
  // Every byte value, alone and in the middle of a name: one printable line.
  for (int b = 0; b < 256; ++b) {
    const std::string q = quote("x" + std::string(1, static_cast<char>(b)) + "y");
    for (const char c : q) {
      const auto u = static_cast<unsigned char>(c);
      EXPECT_FALSE(u < 0x20 || u == 0x7f) << b;
    }
  }
}

TEST(Errors, ContextIsOneBoundedPrintableLine) {
  const error e(errc::bad_value, "tensor 'w\nferry: ok'");
  EXPECT_EQ(e.context(), "tensor 'w\\nferry: ok'");
  EXPECT_EQ(e.wrap("m\x1b.pt").what(), "m\\x1b.pt: tensor 'w\\nferry: ok': flag, tag or enumerated field out of range");
  EXPECT_EQ(error(errc::bad_value, e.context()).context(), e.context());  // escaping twice changes nothing
  const error long_one(errc::bad_value, std::string(100'000, 'n'));
  EXPECT_EQ(long_one.context().size(), error::max_context_bytes);
  EXPECT_TRUE(long_one.context().ends_with("..."));
  EXPECT_EQ(printable("plain text, caf\xc3\xa9"), "plain text, caf\xc3\xa9");
}

TEST(Result, ValueThrowsTheError) {
  result<int> bad = errc::truncated;
  try {
    (void)bad.value();
    FAIL() << "value() of an error must throw";
  } catch (const exception& e) {
    EXPECT_EQ(e.code(), errc::truncated);
  }
  result<int, error> with_context = error(errc::io_error, "f", ENOENT);
  try {
    (void)with_context.value();
    FAIL() << "value() of an error must throw";
  } catch (const exception& e) {
    EXPECT_EQ(e.error().sys_errno(), ENOENT);
    EXPECT_STREQ(e.what(), "f: No such file or directory");
  }
  EXPECT_THROW(result<void>(errc::no_space).value(), exception);
  EXPECT_NO_THROW(result<void>().value());
  EXPECT_EQ(result<int>(5).value(), 5);
}

result<int> parse_digit(char c) {
  if (c < '0' || c > '9') return errc::bad_value;
  return c - '0';
}

result<int> two_digits(const char* s) {
  FERRY_TRY_ASSIGN(const int hi, parse_digit(s[0]));
  FERRY_TRY_ASSIGN(const int lo, parse_digit(s[1]));
  return hi * 10 + lo;
}

result<void, error> check_two_digits(const char* s) {
  FERRY_TRY(two_digits(s));  // an error_code becomes an error without context
  return {};
}

TEST(Result, TryPropagatesTheFirstError) {
  EXPECT_EQ(*two_digits("42"), 42);
  EXPECT_EQ(two_digits("4x").error(), errc::bad_value);
  EXPECT_TRUE(check_two_digits("17"));
  EXPECT_EQ(check_two_digits("x7").error().code(), errc::bad_value);
}

}  // namespace
}  // namespace ferry
