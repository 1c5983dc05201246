#include "ferry/checkpoint/detail/pickle.h"

#include <bit>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <unordered_map>

#include "ferry/checkpoint/error.h"
#include "ferry/wire/byte_order.h"

namespace ferry::checkpoint::detail::pickle {
namespace {

struct allowed_global {
  std::string_view module, name;
  global_kind kind;
  std::optional<codec::dtype> dtype;
  bool untyped = false;
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
    {"torch", "ComplexFloatStorage", global_kind::storage_type, cannot_hold},
    {"torch", "ComplexDoubleStorage", global_kind::storage_type, cannot_hold},
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
};

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
  machine(std::span<const std::byte> in, const limits& lim) : in_(in), lim_(lim) {}

  result<program, error> run() {
    while (true) {
      at_ = pos_;
      if (pos_ >= in_.size()) return fail(errc::truncated, "the pickle ends before STOP");
      const auto code = static_cast<std::uint8_t>(in_[pos_++]);
      if (code == STOP) break;
      FERRY_TRY(step(code));
    }
    if (stack_.size() != 1 || !marks_.empty()) return fail(checkpoint_errc::pickle_malformed, "STOP leaves " + std::to_string(stack_.size()) + " values");
    if (pos_ != in_.size()) return error(errc::trailing_bytes, "offset " + std::to_string(pos_) + ": after STOP");
    prog_.root = stack_.back();
    return std::move(prog_);
  }

 private:
  error fail(error_code c, std::string_view what) const {
    return error(c, "offset " + std::to_string(at_) + ": " + std::string(what));
  }

  result<std::span<const std::byte>, error> take(std::uint64_t n) {
    if (n > in_.size() - pos_) return fail(errc::truncated, "an argument runs past the end of the pickle");
    auto s = in_.subspan(pos_, static_cast<std::size_t>(n));
    pos_ += static_cast<std::size_t>(n);
    return s;
  }
  template <class T>
  result<T, error> take_le() {
    FERRY_TRY_ASSIGN(auto b, take(sizeof(T)));
    return wire::load<T>(b.data(), wire::byte_order::little);
  }
  result<std::string, error> take_line() {
    for (std::size_t i = pos_; i < in_.size(); ++i) {
      if (in_[i] == std::byte{'\n'}) {
        std::string s(i - pos_, '\0');
        std::memcpy(s.data(), in_.data() + pos_, s.size());
        pos_ = i + 1;
        return s;
      }
    }
    return fail(errc::truncated, "GLOBAL's line runs past the end of the pickle");
  }

  value* make(kind k) {
    value& v = prog_.arena->emplace_back();
    v.k = k;
    return &v;
  }
  void push(value* v) { stack_.push_back(v); }
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
    std::vector<value*> items(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return items;
  }
  result<void, error> memo_put(std::uint32_t slot) {
    FERRY_TRY_ASSIGN(value * v, top());
    if (!memo_.contains(slot) && memo_.size() >= lim_.max_pickle_memo) {
      return fail(errc::limit_exceeded, "memo slots");
    }
    memo_[slot] = v;
    return {};
  }
  result<void, error> memo_get(std::uint32_t slot) {
    const auto it = memo_.find(slot);
    if (it == memo_.end()) return fail(checkpoint_errc::pickle_malformed, "memo slot " + std::to_string(slot) + " is unset");
    push(it->second);
    return {};
  }
  result<void, error> push_string(std::span<const std::byte> b) {
    value* v = make(kind::string);
    v->s.resize(b.size());
    if (!b.empty()) std::memcpy(v->s.data(), b.data(), b.size());
    push(v);
    return {};
  }
  void push_int(std::int64_t i) {
    value* v = make(kind::integer);
    v->i = i;
    push(v);
  }

  result<void, error> global(const std::string& module, const std::string& name) {
    for (const auto& g : allowed) {
      if (g.module == module && g.name == name) {
        value* v = make(kind::global);
        v->s = module + "." + name;
        v->g = g.kind;
        v->dtype = g.dtype;
        v->untyped = g.untyped;
        push(v);
        return {};
      }
    }
    const std::string what = "global '" + module + "." + name + "'";
    if (module.starts_with("torch.nn.")) {
      return fail(checkpoint_errc::unsupported_pytorch,
                  what + ": a pickled module (torch.save(model)), not a state dict; save model.state_dict()");
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
    auto [it, fresh] = storages_.try_emplace(t[2]->s, nullptr);
    if (!fresh) {
      if (it->second->type->s != t[1]->s || it->second->numel != numel) {
        return fail(checkpoint_errc::pickle_malformed, "storage '" + t[2]->s + "' named with two types or sizes");
      }
      push(it->second);
      return {};
    }
    value* s = make(kind::storage);
    s->s = t[2]->s;
    s->type = t[1];
    s->dtype = t[1]->dtype;
    s->untyped = t[1]->untyped;
    s->numel = numel;
    it->second = s;
    prog_.storages.push_back(s);
    push(s);
    return {};
  }

  static bool int_tuple(const value* v, std::vector<std::uint64_t>& out) {
    if (v->k != kind::tuple) return false;
    out.clear();
    for (const value* x : v->items) {
      if (x->k != kind::integer || x->i < 0) return false;
      out.push_back(static_cast<std::uint64_t>(x->i));
    }
    return true;
  }

  result<void, error> reduce() {
    FERRY_TRY_ASSIGN(value * args, pop());
    FERRY_TRY_ASSIGN(value * fn, pop());
    if (fn->k != kind::global || args->k != kind::tuple) {
      return fail(checkpoint_errc::pickle_malformed, "REDUCE of a " + std::string(kind_name(fn->k)));
    }
    const auto& a = args->items;
    switch (fn->g) {
      case global_kind::ordered_dict:
        if (!a.empty()) return fail(checkpoint_errc::pickle_malformed, "OrderedDict called with arguments");
        push(make(kind::dict));
        return {};
      case global_kind::rebuild_parameter:
        if (a.size() < 2 || a[0]->k != kind::tensor) {
          return fail(checkpoint_errc::pickle_malformed, "_rebuild_parameter's arguments");
        }
        push(a[0]);
        return {};
      case global_kind::rebuild_tensor_v2:
      case global_kind::rebuild_tensor_v3: {
        const bool v3 = fn->g == global_kind::rebuild_tensor_v3;
        const std::size_t n = v3 ? 7 : 6;
        value* t = make(kind::tensor);
        if ((a.size() != n && a.size() != n + 1) || a[0]->k != kind::storage || a[1]->k != kind::integer ||
            a[1]->i < 0 || !int_tuple(a[2], t->shape) || !int_tuple(a[3], t->strides) ||
            t->shape.size() != t->strides.size() || a[4]->k != kind::boolean ||
            (v3 && (a[6]->k != kind::global || a[6]->g != global_kind::dtype || !a[0]->untyped))) {
          return fail(checkpoint_errc::pickle_malformed, std::string(v3 ? "_rebuild_tensor_v3" : "_rebuild_tensor_v2") + "'s arguments");
        }
        t->storage = a[0];
        t->type = a[0]->type;
        t->offset = static_cast<std::uint64_t>(a[1]->i);
        t->dtype = v3 ? a[6]->dtype : a[0]->dtype;
        push(t);
        return {};
      }
      case global_kind::storage_type:
      case global_kind::dtype:
        break;
    }
    return fail(checkpoint_errc::pickle_malformed, "REDUCE of '" + fn->s + "', which is not callable");
  }

  result<void, error> step(std::uint8_t code) {
    switch (code) {
      case PROTO: {
        FERRY_TRY_ASSIGN(auto b, take(1));
        const auto v = static_cast<std::uint8_t>(b[0]);
        if (v < 2 || v > 5) return fail(checkpoint_errc::pickle_bad_opcode, "pickle protocol " + std::to_string(v));
        return {};
      }
      case FRAME: {  // a hint for buffered readers; the frame must lie within the pickle
        FERRY_TRY_ASSIGN(auto n, take_le<std::uint64_t>());
        if (n > in_.size() - pos_) return fail(errc::truncated, "FRAME runs past the end of the pickle");
        return {};
      }
      case MARK:
        if (marks_.size() >= lim_.max_pickle_depth) return fail(errc::depth_exceeded, "MARKs open at once");
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
          return fail(checkpoint_errc::pickle_malformed, "BUILD on a " + std::string(kind_name(target->k)));
        }
        return {};
      }
      case BINPERSID: return persistent_id();
      case EMPTY_DICT: push(make(kind::dict)); return {};
      case EMPTY_LIST: push(make(kind::list)); return {};
      case EMPTY_TUPLE: push(make(kind::tuple)); return {};
      case TUPLE: {
        FERRY_TRY_ASSIGN(auto items, pop_mark());
        value* t = make(kind::tuple);
        t->items = std::move(items);
        push(t);
        return {};
      }
      case TUPLE1:
      case TUPLE2:
      case TUPLE3: {
        const std::size_t n = code - TUPLE1 + 1u;
        value* t = make(kind::tuple);
        t->items.resize(n);
        for (std::size_t k = n; k-- > 0;) {
          FERRY_TRY_ASSIGN(t->items[k], pop());
        }
        push(t);
        return {};
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
          return fail(checkpoint_errc::pickle_malformed, "APPEND to a " + std::string(kind_name(list->k)));
        }
        list->items.insert(list->items.end(), items.begin(), items.end());
        return {};
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
          return fail(checkpoint_errc::pickle_malformed, "SETITEM on a " + std::string(kind_name(dict->k)));
        }
        for (std::size_t k = 0; k < items.size(); k += 2) dict->entries.emplace_back(items[k], items[k + 1]);
        return {};
      }
      case NONE: push(make(kind::none)); return {};
      case NEWTRUE:
      case NEWFALSE: {
        value* v = make(kind::boolean);
        v->i = code == NEWTRUE ? 1 : 0;
        push(v);
        return {};
      }
      case BININT: {
        FERRY_TRY_ASSIGN(auto v, take_le<std::int32_t>());
        push_int(v);
        return {};
      }
      case BININT1: {
        FERRY_TRY_ASSIGN(auto v, take_le<std::uint8_t>());
        push_int(v);
        return {};
      }
      case BININT2: {
        FERRY_TRY_ASSIGN(auto v, take_le<std::uint16_t>());
        push_int(v);
        return {};
      }
      case LONG1: {
        FERRY_TRY_ASSIGN(auto n, take_le<std::uint8_t>());
        if (n > 8) return fail(checkpoint_errc::pickle_malformed, "integer wider than 64 bits");
        FERRY_TRY_ASSIGN(auto b, take(n));
        std::uint64_t u = 0;
        for (std::size_t k = n; k-- > 0;) u = (u << 8) | static_cast<std::uint8_t>(b[k]);
        if (n > 0 && n < 8 && (static_cast<std::uint8_t>(b[n - 1]) & 0x80) != 0) u |= ~std::uint64_t{0} << (8 * n);
        push_int(static_cast<std::int64_t>(u));
        return {};
      }
      case BINFLOAT: {
        FERRY_TRY_ASSIGN(auto b, take(8));
        value* v = make(kind::floating);
        v->f = std::bit_cast<double>(wire::load<std::uint64_t>(b.data(), wire::byte_order::big));
        push(v);
        return {};
      }
      case BINUNICODE: {
        FERRY_TRY_ASSIGN(auto n, take_le<std::uint32_t>());
        FERRY_TRY_ASSIGN(auto b, take(n));
        return push_string(b);
      }
      case SHORT_BINUNICODE:
      case SHORT_BINSTRING: {
        FERRY_TRY_ASSIGN(auto n, take_le<std::uint8_t>());
        FERRY_TRY_ASSIGN(auto b, take(n));
        return push_string(b);
      }
      case BINGET: {
        FERRY_TRY_ASSIGN(auto slot, take_le<std::uint8_t>());
        return memo_get(slot);
      }
      case LONG_BINGET: {
        FERRY_TRY_ASSIGN(auto slot, take_le<std::uint32_t>());
        return memo_get(slot);
      }
      case BINPUT: {
        FERRY_TRY_ASSIGN(auto slot, take_le<std::uint8_t>());
        return memo_put(slot);
      }
      case LONG_BINPUT: {
        FERRY_TRY_ASSIGN(auto slot, take_le<std::uint32_t>());
        return memo_put(slot);
      }
      case MEMOIZE: return memo_put(static_cast<std::uint32_t>(memo_.size()));
      default: break;
    }
    char text[48];
    std::snprintf(text, sizeof text, "opcode %s0x%02x", opcode_name(code), code);
    return fail(checkpoint_errc::pickle_bad_opcode, text);
  }

  std::span<const std::byte> in_;
  const limits& lim_;
  std::size_t pos_ = 0;
  std::size_t at_ = 0;  // the current opcode's offset
  std::vector<value*> stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<std::uint32_t, value*> memo_;
  std::unordered_map<std::string, value*> storages_;
  program prog_;
};

}  // namespace

result<program, error> run(std::span<const std::byte> pickle, const limits& lim) { return machine(pickle, lim).run(); }

}  // namespace ferry::checkpoint::detail::pickle
