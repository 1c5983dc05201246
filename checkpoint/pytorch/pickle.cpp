#include "ferry/checkpoint/pytorch/pickle.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <unordered_map>

#include "ferry/base/require.h"
#include "ferry/checkpoint/error.h"
#include "ferry/wire/cursor.h"

namespace ferry::checkpoint::detail::pickle {
namespace {

struct allowed_global {
  std::string_view module, name;
  global_kind kind;
  std::optional<codec::dtype> dtype;
  bool untyped = false;
  bool raw_bits = false;
};

using codec::dtype;
constexpr std::optional<dtype> cannot_hold = std::nullopt;
const allowed_global allowed[] = {
    {"collections", "OrderedDict", global_kind::ordered_dict, {}},
    {"torch._utils", "_rebuild_tensor_v2", global_kind::rebuild_tensor_v2, {}},
    {"torch._utils", "_rebuild_tensor_v3", global_kind::rebuild_tensor_v3, {}},
    {"torch._utils", "_rebuild_parameter", global_kind::rebuild_parameter, {}},
    {"torch", "DoubleStorage", global_kind::storage_type, dtype::f64},
    {"torch", "FloatStorage", global_kind::storage_type, dtype::f32},
    {"torch", "HalfStorage", global_kind::storage_type, dtype::f16},
    {"torch", "BFloat16Storage", global_kind::storage_type, dtype::bf16},
    {"torch", "LongStorage", global_kind::storage_type, dtype::i64},
    {"torch", "IntStorage", global_kind::storage_type, dtype::i32},
    {"torch", "ShortStorage", global_kind::storage_type, dtype::i16},
    {"torch", "CharStorage", global_kind::storage_type, dtype::i8},
    {"torch", "ByteStorage", global_kind::storage_type, dtype::u8},
    {"torch", "BoolStorage", global_kind::storage_type, dtype::boolean},
    {"torch", "UntypedStorage", global_kind::storage_type, dtype::u8, true},
    // The class's own module: what torch.save pickles since 2.0.
    {"torch.storage", "UntypedStorage", global_kind::storage_type, dtype::u8, true},
    {"torch", "ComplexFloatStorage", global_kind::storage_type, dtype::c64},
    {"torch", "ComplexDoubleStorage", global_kind::storage_type, dtype::c128},
    {"torch", "QUInt8Storage", global_kind::storage_type, cannot_hold},
    {"torch", "QInt8Storage", global_kind::storage_type, cannot_hold},
    {"torch", "QInt32Storage", global_kind::storage_type, cannot_hold},
    {"torch", "QUInt4x2Storage", global_kind::storage_type, cannot_hold},
    {"torch", "QUInt2x4Storage", global_kind::storage_type, cannot_hold},
    {"torch", "float8_e4m3fn", global_kind::dtype, dtype::f8_e4m3},
    {"torch", "float8_e5m2", global_kind::dtype, dtype::f8_e5m2},
    {"torch", "uint16", global_kind::dtype, dtype::u16},
    {"torch", "uint32", global_kind::dtype, dtype::u32},
    {"torch", "uint64", global_kind::dtype, dtype::u64},
    {"torch", "float8_e4m3fnuz", global_kind::dtype, dtype::f8_e4m3fnuz},
    {"torch", "float8_e5m2fnuz", global_kind::dtype, dtype::f8_e5m2fnuz},
    {"torch", "complex32", global_kind::dtype, dtype::c32},
    {"torch", "complex64", global_kind::dtype, dtype::c64},
    {"torch", "complex128", global_kind::dtype, dtype::c128},
    // Bits with no meaning PyTorch gives them: read as raw bytes (raw_bits),
    // the tensor keeping the dtype's name.
    {"torch", "bits8", global_kind::dtype, dtype::u8, false, true},
    {"torch", "bits16", global_kind::dtype, dtype::u16, false, true},
    {"torch", "bits1x8", global_kind::dtype, dtype::u8, false, true},
    {"torch", "bits2x4", global_kind::dtype, dtype::u8, false, true},
    {"torch", "bits4x2", global_kind::dtype, dtype::u8, false, true},
};

}  // namespace

std::optional<torch_name> torch_name_of(codec::dtype d) noexcept {
  for (const allowed_global& g : allowed) {
    if (g.kind == global_kind::storage_type && g.dtype == d && !g.untyped) return torch_name{g.module, g.name, false};
  }
  for (const allowed_global& g : allowed) {
    if (g.kind == global_kind::dtype && g.dtype == d && !g.raw_bits) return torch_name{g.module, g.name, true};
  }
  return std::nullopt;
}

namespace {

// Opcodes (CPython's Lib/pickle.py names).
enum op : std::uint8_t {
  MARK = '(', STOP = '.', BININT = 'J', BININT1 = 'K', BININT2 = 'M', NONE = 'N', BINPERSID = 'Q', REDUCE = 'R',
  SHORT_BINSTRING = 'U', BINUNICODE = 'X', APPEND = 'a', BUILD = 'b', GLOBAL = 'c', APPENDS = 'e', BINGET = 'h',
  LONG_BINGET = 'j', EMPTY_LIST = ']', BINPUT = 'q', LONG_BINPUT = 'r', SETITEM = 's', TUPLE = 't',
  EMPTY_TUPLE = ')', SETITEMS = 'u', BINFLOAT = 'G', EMPTY_DICT = '}', PROTO = 0x80, TUPLE1 = 0x85,
  TUPLE2 = 0x86, TUPLE3 = 0x87, NEWTRUE = 0x88, NEWFALSE = 0x89, LONG1 = 0x8a, SHORT_BINUNICODE = 0x8c,
  STACK_GLOBAL = 0x93, MEMOIZE = 0x94, FRAME = 0x95,
};

// Names of opcodes ferry refuses that a hostile pickle is likely to use,
// for the error ("opcode INST 0x69").
const char* opcode_name(std::uint8_t code) {
  switch (code) {
    case 'i': return "INST ";
    case 'o': return "OBJ ";
    case 0x81: return "NEWOBJ ";
    case 0x92: return "NEWOBJ_EX ";
    case 'P': return "PERSID ";
    case 0x82: return "EXT1 ";
    case 0x83: return "EXT2 ";
    case 0x84: return "EXT4 ";
    case 'c': return "GLOBAL ";
    default: return "";
  }
}

std::string_view kind_name(kind k) {
  switch (k) {
    case kind::none: return "None";
    case kind::boolean: return "bool";
    case kind::integer: return "int";
    case kind::floating: return "float";
    case kind::string: return "str";
    case kind::tuple: return "tuple";
    case kind::list: return "list";
    case kind::dict: return "dict";
    case kind::global: return "global";
    case kind::storage: return "storage";
    case kind::tensor: return "tensor";
  }
  return "?";
}

class machine {
 public:
  // MARKs count as the reader's depth, so limits::max_pickle_depth is
  // the reader's max_depth.
  machine(std::span<const std::byte> in, const limits& lim)
      : in_(in, wire::reader_options{.max_depth = lim.max_pickle_depth}), lim_(lim) {}

  result<program, error> run() {
    // Shared immutable values: one each, made before anything is counted.
    none_ = make(kind::none);
    true_ = make(kind::boolean);
    true_->i = 1;
    false_ = make(kind::boolean);
    for (std::size_t k = 0; k < small_ints_.size(); ++k) {
      small_ints_[k] = make(kind::integer);
      small_ints_[k]->i = static_cast<std::int64_t>(k);
    }
    used_ = 0;
    while (true) {
      at_ = in_.offset();
      const auto code = in_.read_le<std::uint8_t>();
      if (!code) return fail(errc::truncated, "the pickle ends before STOP");
      if (*code == STOP) break;
      FERRY_TRY(step(*code));
    }
    FERRY_REQUIRE(stack_.size() == 1 && marks_.empty(), checkpoint_errc::pickle_malformed, "offset ", at_,
                  ": STOP leaves ", stack_.size(), " values");
    FERRY_REQUIRE(in_.at_end(), errc::trailing_bytes, "offset ", in_.offset(), ": after STOP");
    prog_.root = stack_.back();
    return std::move(prog_);
  }

 private:
  // An error at the current opcode: "offset <at>: <values...>".
  template <class... V>
  error fail(error_code c, const V&... what) const {
    return make_error(c, "offset ", at_, ": ", what...);
  }

  // Counts `bytes` more of memory (with the stack's slots), against
  // limits::max_pickle_memory.
  result<void, error> charge(std::uint64_t bytes) {
    used_ += bytes;
    const std::uint64_t now = used_ + stack_.size() * sizeof(value*) + memo_.size() * memo_slot_bytes;
    prog_.memory = std::max(prog_.memory, now);
    if (now > lim_.max_pickle_memory) {
      return fail(errc::limit_exceeded, "the pickle's values take more than limits::max_pickle_memory (",
                  lim_.max_pickle_memory, " bytes)");
    }
    return {};
  }

  // An opcode's argument: n bytes, or a little-endian scalar (every
  // pickle integer argument is little-endian; BINFLOAT alone is big).
  result<std::span<const std::byte>, error> take(std::size_t n) {
    auto b = in_.read_bytes(n);
    if (!b) return fail(errc::truncated, "an argument runs past the end of the pickle");
    return *b;
  }
  template <class T>
  result<T, error> take(wire::byte_order order = wire::byte_order::little) {
    auto v = in_.read<T>(order);
    if (!v) return fail(errc::truncated, "an argument runs past the end of the pickle");
    return *v;
  }
  result<std::string, error> take_line() {
    auto b = in_.read_until(std::byte{'\n'});
    if (!b) return fail(errc::truncated, "GLOBAL's line runs past the end of the pickle");
    return std::string(reinterpret_cast<const char*>(b->data()), b->size());  // char view of the bytes
  }

  value* make(kind k) {
    value& v = prog_.arena->emplace_back();
    v.k = k;
    v.id = static_cast<std::uint32_t>(prog_.arena->size() - 1);
    return &v;
  }
  // A fresh value, counted.
  result<value*, error> fresh(kind k) {
    FERRY_TRY(charge(value_bytes));
    return make(k);
  }
  // `items` appended to container c, counted.
  result<void, error> extend(value* c, std::span<value* const> items) {
    FERRY_TRY(charge(items.size() * sizeof(value*)));
    c->items.insert(c->items.end(), items.begin(), items.end());
    return {};
  }
  result<void, error> push(value* v) {
    stack_.push_back(v);
    return charge(0);
  }
  result<void, error> push_fresh(kind k) {
    FERRY_TRY_ASSIGN(value * v, fresh(k));
    return push(v);
  }
  result<value*, error> pop() {
    const std::size_t floor = marks_.empty() ? 0 : marks_.back();
    if (stack_.size() <= floor) return fail(checkpoint_errc::pickle_malformed, "the stack is empty");
    value* v = stack_.back();
    stack_.pop_back();
    return v;
  }
  result<value*, error> top() {
    const std::size_t floor = marks_.empty() ? 0 : marks_.back();
    if (stack_.size() <= floor) return fail(checkpoint_errc::pickle_malformed, "the stack is empty");
    return stack_.back();
  }
  // The values above the newest MARK, which is removed.
  result<std::vector<value*>, error> pop_mark() {
    if (marks_.empty()) return fail(checkpoint_errc::pickle_malformed, "no MARK to pop to");
    const std::size_t m = marks_.back();
    marks_.pop_back();
    in_.leave();
    std::vector<value*> items(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return items;
  }
  result<void, error> memo_put(std::uint32_t slot) {
    FERRY_TRY_ASSIGN(value * v, top());
    if (!memo_.contains(slot) && memo_.size() >= lim_.max_pickle_memo) {
      return fail(errc::limit_exceeded, "memo slots (limits::max_pickle_memo)");
    }
    memo_[slot] = v;
    return charge(0);
  }
  result<void, error> memo_get(std::uint32_t slot) {
    const auto it = memo_.find(slot);
    if (it == memo_.end()) return fail(checkpoint_errc::pickle_malformed, "memo slot ", slot, " is unset");
    return push(it->second);
  }
  result<void, error> push_string(std::span<const std::byte> b) {
    FERRY_TRY_ASSIGN(value * v, fresh(kind::string));
    v->s = std::string_view(reinterpret_cast<const char*>(b.data()), b.size());  // char view of the bytes
    return push(v);
  }
  result<void, error> push_int(std::int64_t i) {
    if (i >= 0 && static_cast<std::uint64_t>(i) < small_ints_.size()) return push(small_ints_[static_cast<std::size_t>(i)]);
    FERRY_TRY_ASSIGN(value * v, fresh(kind::integer));
    v->i = i;
    return push(v);
  }

  result<void, error> global(std::string_view module, std::string_view name) {
    for (const auto& g : allowed) {
      if (g.module == module && g.name == name) {
        FERRY_TRY(charge(module.size() + name.size() + 1 + sizeof(std::string)));
        FERRY_TRY_ASSIGN(value * v, fresh(kind::global));
        v->s = prog_.texts->emplace_back(std::string(module) + "." + std::string(name));
        v->g = g.kind;
        v->dtype = g.dtype;
        v->untyped = g.untyped;
        v->raw_bits = g.raw_bits;
        return push(v);
      }
    }
    const std::string what = "global " + quote(std::string(module) + "." + std::string(name));
    if (module.starts_with("torch.nn.")) {
      return fail(checkpoint_errc::unsupported_pytorch, what,
                  ": a pickled module (torch.save(model)), not a state dict; save model.state_dict()");
    }
    return fail(checkpoint_errc::pickle_forbidden_global, what);
  }

  result<void, error> persistent_id() {
    FERRY_TRY_ASSIGN(value * pid, pop());
    const auto bad = [&] {
      return fail(checkpoint_errc::pickle_malformed, "persistent id is not ('storage', type, key, location, numel)");
    };
    if (pid->k != kind::tuple || pid->items.size() != 5) return bad();
    const auto& t = pid->items;
    if (t[0]->k != kind::string || t[0]->s != "storage" || t[1]->k != kind::global ||
        t[1]->g != global_kind::storage_type || t[2]->k != kind::string || t[3]->k != kind::string ||
        t[4]->k != kind::integer || t[4]->i < 0) {
      return bad();
    }
    const auto numel = static_cast<std::uint64_t>(t[4]->i);
    // The key names a zip record (P/data/<key>), so it is shorter than a
    // zip name can be; a longer one (a memoised huge string, hashed on
    // every reuse) is refused before it is looked up.
    if (t[2]->s.size() > 0xFFFF) return fail(checkpoint_errc::pickle_malformed, "a storage key longer than any zip name");
    auto [it, is_new] = storages_.try_emplace(t[2]->s, nullptr);
    if (!is_new) {
      if (it->second->storage_type()->s != t[1]->s || static_cast<std::uint64_t>(it->second->i) != numel) {
        return fail(checkpoint_errc::pickle_malformed, "storage ", quote(t[2]->s), " named with two types or sizes");
      }
      return push(it->second);
    }
    FERRY_TRY_ASSIGN(value * s, fresh(kind::storage));
    FERRY_TRY(extend(s, std::span(&t[1], 1)));
    s->s = t[2]->s;
    s->dtype = t[1]->dtype;
    s->untyped = t[1]->untyped;
    s->i = static_cast<std::int64_t>(numel);
    it->second = s;
    prog_.storages.push_back(s);
    return push(s);
  }

  static bool int_tuple(const value* v) {
    return v->k == kind::tuple &&
           std::all_of(v->items.begin(), v->items.end(), [](const value* x) { return x->k == kind::integer && x->i >= 0; });
  }

  result<void, error> reduce() {
    FERRY_TRY_ASSIGN(value * args, pop());
    FERRY_TRY_ASSIGN(value * fn, pop());
    if (fn->k != kind::global || args->k != kind::tuple) {
      return fail(checkpoint_errc::pickle_malformed, "REDUCE of a ", kind_name(fn->k));
    }
    const auto& a = args->items;
    switch (fn->g) {
      case global_kind::ordered_dict:
        if (!a.empty()) return fail(checkpoint_errc::pickle_malformed, "OrderedDict called with arguments");
        {
          FERRY_TRY_ASSIGN(value * d, fresh(kind::dict));
          return push(d);
        }
      case global_kind::rebuild_parameter:
        if (a.size() < 2 || a[0]->k != kind::tensor) {
          return fail(checkpoint_errc::pickle_malformed, "_rebuild_parameter's arguments");
        }
        return push(a[0]);
      case global_kind::rebuild_tensor_v2:
      case global_kind::rebuild_tensor_v3: {
        const bool v3 = fn->g == global_kind::rebuild_tensor_v3;
        const std::size_t n = v3 ? 7 : 6;
        // Sizes are checked before the tuples are scanned: a memoised
        // tuple of millions of ints, reused by every REDUCE, costs nothing.
        if (a.size() >= 4 && a[2]->items.size() > lim_.max_dims) {
          return fail(errc::limit_exceeded, "tensor dimensions (limits::max_dims)");
        }
        if ((a.size() != n && a.size() != n + 1) || a[0]->k != kind::storage || a[1]->k != kind::integer ||
            a[1]->i < 0 || a[2]->items.size() != a[3]->items.size() || !int_tuple(a[2]) || !int_tuple(a[3]) ||
            a[4]->k != kind::boolean ||
            (v3 && (a[6]->k != kind::global || a[6]->g != global_kind::dtype || !a[0]->untyped))) {
          return fail(checkpoint_errc::pickle_malformed, v3 ? "_rebuild_tensor_v3" : "_rebuild_tensor_v2", "'s arguments");
        }
        FERRY_TRY_ASSIGN(value * t, fresh(kind::tensor));
        value* const parts[] = {a[0], a[2], a[3]};
        FERRY_TRY(extend(t, parts));
        t->i = a[1]->i;
        t->dtype = v3 ? a[6]->dtype : a[0]->dtype;
        if (v3 && a[6]->raw_bits) t->s = a[6]->s;
        return push(t);
      }
      case global_kind::storage_type:
      case global_kind::dtype:
        break;
    }
    return fail(checkpoint_errc::pickle_malformed, "REDUCE of ", quote(fn->s), ", which is not callable");
  }

  result<void, error> step(std::uint8_t code) {
    switch (code) {
      case PROTO: {
        FERRY_TRY_ASSIGN(const auto v, take<std::uint8_t>());
        if (v < 2 || v > 5) return fail(checkpoint_errc::pickle_bad_opcode, "pickle protocol ", v);
        return {};
      }
      case FRAME: {  // a hint for buffered readers; the frame must lie within the pickle
        FERRY_TRY_ASSIGN(const auto n, take<std::uint64_t>());
        if (n > in_.remaining()) return fail(errc::truncated, "FRAME runs past the end of the pickle");
        return {};
      }
      case MARK:
        if (auto r = in_.enter(); !r) return fail(r.error(), "MARKs open at once");
        marks_.push_back(stack_.size());
        return {};
      case GLOBAL: {
        FERRY_TRY_ASSIGN(auto module, take_line());
        FERRY_TRY_ASSIGN(auto name, take_line());
        return global(module, name);
      }
      case STACK_GLOBAL: {
        FERRY_TRY_ASSIGN(value * name, pop());
        FERRY_TRY_ASSIGN(value * module, pop());
        if (name->k != kind::string || module->k != kind::string) {
          return fail(checkpoint_errc::pickle_malformed, "STACK_GLOBAL of non-strings");
        }
        return global(module->s, name->s);
      }
      case REDUCE: return reduce();
      case BUILD: {
        FERRY_TRY_ASSIGN(value * state, pop());
        (void)state;  // an OrderedDict's attributes (state_dict's _metadata): dropped
        FERRY_TRY_ASSIGN(value * target, top());
        if (target->k != kind::dict) {
          return fail(checkpoint_errc::pickle_malformed, "BUILD on a ", kind_name(target->k));
        }
        return {};
      }
      case BINPERSID: return persistent_id();
      case EMPTY_DICT: return push_fresh(kind::dict);
      case EMPTY_LIST: return push_fresh(kind::list);
      case EMPTY_TUPLE: return push_fresh(kind::tuple);
      case TUPLE: {
        FERRY_TRY_ASSIGN(auto items, pop_mark());
        FERRY_TRY_ASSIGN(value * t, fresh(kind::tuple));
        FERRY_TRY(extend(t, items));
        return push(t);
      }
      case TUPLE1:
      case TUPLE2:
      case TUPLE3: {
        const std::size_t n = code - TUPLE1 + 1u;
        value* items[3] = {};
        for (std::size_t k = n; k-- > 0;) {
          FERRY_TRY_ASSIGN(items[k], pop());
        }
        FERRY_TRY_ASSIGN(value * t, fresh(kind::tuple));
        FERRY_TRY(extend(t, std::span(items, n)));
        return push(t);
      }
      case APPEND:
      case APPENDS: {
        std::vector<value*> items;
        if (code == APPEND) {
          FERRY_TRY_ASSIGN(value * v, pop());
          items.push_back(v);
        } else {
          FERRY_TRY_ASSIGN(items, pop_mark());
        }
        FERRY_TRY_ASSIGN(value * list, top());
        if (list->k != kind::list) {
          return fail(checkpoint_errc::pickle_malformed, "APPEND to a ", kind_name(list->k));
        }
        return extend(list, items);
      }
      case SETITEM:
      case SETITEMS: {
        std::vector<value*> items;
        if (code == SETITEM) {
          FERRY_TRY_ASSIGN(value * v, pop());
          FERRY_TRY_ASSIGN(value * k, pop());
          items = {k, v};
        } else {
          FERRY_TRY_ASSIGN(items, pop_mark());
          if (items.size() % 2 != 0) return fail(checkpoint_errc::pickle_malformed, "SETITEMS with a key and no value");
        }
        FERRY_TRY_ASSIGN(value * dict, top());
        if (dict->k != kind::dict) {
          return fail(checkpoint_errc::pickle_malformed, "SETITEM on a ", kind_name(dict->k));
        }
        return extend(dict, items);  // keys and values alternate
      }
      case NONE: return push(none_);
      case NEWTRUE: return push(true_);
      case NEWFALSE: return push(false_);
      case BININT: {
        FERRY_TRY_ASSIGN(auto v, take<std::int32_t>());
        return push_int(v);
      }
      case BININT1: {
        FERRY_TRY_ASSIGN(auto v, take<std::uint8_t>());
        return push_int(v);
      }
      case BININT2: {
        FERRY_TRY_ASSIGN(auto v, take<std::uint16_t>());
        return push_int(v);
      }
      case LONG1: {
        FERRY_TRY_ASSIGN(auto n, take<std::uint8_t>());
        if (n > 8) return fail(checkpoint_errc::pickle_malformed, "integer wider than 64 bits");
        FERRY_TRY_ASSIGN(auto b, take(n));
        std::uint64_t u = 0;
        for (std::size_t k = n; k-- > 0;) u = (u << 8) | static_cast<std::uint8_t>(b[k]);
        if (n > 0 && n < 8 && (static_cast<std::uint8_t>(b[n - 1]) & 0x80) != 0) u |= ~std::uint64_t{0} << (8 * n);
        return push_int(static_cast<std::int64_t>(u));
      }
      case BINFLOAT: {
        FERRY_TRY_ASSIGN(const auto bits, take<std::uint64_t>(wire::byte_order::big));
        FERRY_TRY_ASSIGN(value * v, fresh(kind::floating));
        v->i = static_cast<std::int64_t>(bits);
        return push(v);
      }
      case BINUNICODE: {
        FERRY_TRY_ASSIGN(auto n, take<std::uint32_t>());
        FERRY_TRY_ASSIGN(auto b, take(n));
        return push_string(b);
      }
      case SHORT_BINUNICODE:
      case SHORT_BINSTRING: {
        FERRY_TRY_ASSIGN(auto n, take<std::uint8_t>());
        FERRY_TRY_ASSIGN(auto b, take(n));
        return push_string(b);
      }
      case BINGET: {
        FERRY_TRY_ASSIGN(auto slot, take<std::uint8_t>());
        return memo_get(slot);
      }
      case LONG_BINGET: {
        FERRY_TRY_ASSIGN(auto slot, take<std::uint32_t>());
        return memo_get(slot);
      }
      case BINPUT: {
        FERRY_TRY_ASSIGN(auto slot, take<std::uint8_t>());
        return memo_put(slot);
      }
      case LONG_BINPUT: {
        FERRY_TRY_ASSIGN(auto slot, take<std::uint32_t>());
        return memo_put(slot);
      }
      case MEMOIZE: return memo_put(static_cast<std::uint32_t>(memo_.size()));
      default: break;
    }
    char text[48];
    std::snprintf(text, sizeof text, "opcode %s0x%02x", opcode_name(code), code);
    return fail(checkpoint_errc::pickle_bad_opcode, text);
  }

  wire::reader in_;
  const limits& lim_;
  std::size_t at_ = 0;  // the current opcode's offset
  std::vector<value*> stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<std::uint32_t, value*> memo_;
  std::unordered_map<std::string_view, value*> storages_;
  program prog_;
  value* none_ = nullptr;
  value* true_ = nullptr;
  value* false_ = nullptr;
  std::array<value*, 256> small_ints_{};
  std::uint64_t used_ = 0;  // bytes counted by charge()
  // What one filled memo slot costs (a hash node and its bucket).
  static constexpr std::size_t memo_slot_bytes = 48;
};

}  // namespace

result<program, error> run(std::span<const std::byte> pickle, const limits& lim) { return machine(pickle, lim).run(); }

}  // namespace ferry::checkpoint::detail::pickle
