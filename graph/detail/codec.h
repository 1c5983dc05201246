// ferry/graph/detail/codec.h: INTERNAL. How each C++ type is described,
// written and read (the mapping is documented in ferry/schema/schema.h):
// one codec<T> per family of types, and the dispatchers describe_type,
// write_value and read_value that every value goes through. Users extend
// it through ferry::graph::value_codec (graph/codec.h). Not part of the API.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <concepts>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

#include "ferry/base/float16.h"
#include "ferry/graph/codec.h"
#include "ferry/graph/detail/state.h"
#include "ferry/wire/bulk.h"

namespace ferry::graph::detail {

// ---------------------------------------------------------------- traits

template <class T>
concept user_struct = requires {
  { T::ferry_name } -> std::convertible_to<std::string_view>;
};

template <class T>
constexpr std::uint32_t version_of() {
  if constexpr (requires { T::ferry_version; }) {
    return T::ferry_version;
  } else {
    return 1;
  }
}

template <class F, class T>
void call_describe(F& f, T& t) {
  if constexpr (requires { t.describe(f); }) {
    t.describe(f);
  } else {
    describe(f, t);  // found by argument-dependent lookup
  }
}

template <class T, template <class...> class Tmpl>
struct is_instance : std::false_type {};
template <template <class...> class Tmpl, class... A>
struct is_instance<Tmpl<A...>, Tmpl> : std::true_type {};
template <class T, template <class...> class Tmpl>
inline constexpr bool is_instance_v = is_instance<std::remove_cv_t<T>, Tmpl>::value;

template <class T>
struct is_default_unique_ptr : std::false_type {};
template <class E>
struct is_default_unique_ptr<std::unique_ptr<E>> : std::true_type {};


/// Scalars moved as fixed-width bit patterns: numbers (bool excluded: it
/// has a 0/1 check) and the float patterns of base/float16.h.
template <class T>
concept scalar_value = (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) || float_pattern<T>;

template <class T>
constexpr kind scalar_kind() {
  if constexpr (float_pattern<T>) {
    return static_cast<kind>(codec::dtype_of<T>);  // scalar kinds are dtype codes
  } else if constexpr (std::is_floating_point_v<T>) {
    static_assert(sizeof(T) == 4 || sizeof(T) == 8, "long double is not portable");
    return sizeof(T) == 4 ? kind::f32 : kind::f64;
  } else if constexpr (std::is_same_v<T, char>) {
    return kind::u8;  // same bytes whether char is signed or not
  } else {
    constexpr bool s = std::is_signed_v<T>;
    switch (sizeof(T)) {
      case 1: return s ? kind::i8 : kind::u8;
      case 2: return s ? kind::i16 : kind::u16;
      case 4: return s ? kind::i32 : kind::u32;
      default: return s ? kind::i64 : kind::u64;
    }
  }
}

template <class T>
concept sequence_container = is_instance_v<T, std::vector> || is_instance_v<T, std::deque> ||
                             is_instance_v<T, std::list>;
template <class T>
concept map_container = is_instance_v<T, std::map> || is_instance_v<T, std::unordered_map>;
template <class T>
concept set_container = is_instance_v<T, std::set> || is_instance_v<T, std::unordered_set>;
template <class T>
concept owning_pointer = is_instance_v<T, std::shared_ptr> || is_instance_v<T, std::weak_ptr> ||
                         is_default_unique_ptr<T>::value;
template <class T>
concept has_value_codec = requires { typename ::ferry::graph::value_codec<T>::wire_type; };

// ------------------------------------------------------------- forwards

template <class T>
void describe_type(desc_context& ctx, schema::descriptor& out);
template <class T>
void write_value(writer_state& w, const T& v);
template <class T>
result<void> read_value(reader_state& r, T& v);
/// The smallest encoding of a T, so a count can be checked against the
/// bytes left (0 where a value may take no bytes).
template <class T>
constexpr std::size_t min_size();

template <class T>
void write_erased(writer_state& w, const void* p) {
  write_value(w, *static_cast<const T*>(p));
}
template <class T>
result<void> read_erased(reader_state& r, void* p) {
  return read_value(r, *static_cast<T*>(p));
}
template <class T>
void describe_erased(desc_context& ctx, schema::descriptor& out) {
  describe_type<T>(ctx, out);
}
template <class T>
void reset_erased(void* p) {
  if constexpr (std::is_move_assignable_v<T>) *static_cast<T*>(p) = T();
}
template <class T>
void delete_erased(void* p) {
  delete static_cast<T*>(p);
}

// ------------------------------------------------------------ schema

struct field_collector {
  desc_context& ctx;
  std::vector<schema::field_def>& out;
  template <class M>
  field_collector& operator()(std::uint32_t tag, std::string_view name, M&) {
    schema::field_def f{tag, std::string(name), {}};
    describe_type<M>(ctx, f.type);
    out.push_back(std::move(f));
    return *this;
  }
};

template <class T>
void collect_fields(desc_context& ctx, std::vector<schema::field_def>& out) {
  if constexpr (!std::is_abstract_v<T>) {
    static_assert(std::is_default_constructible_v<T>, "ferry graph types must be default-constructible");
    T probe = T();
    field_collector c{ctx, out};
    call_describe(c, probe);
  }
}

template <class T>
const type_key& key_of() {
  static const type_key key{T::ferry_name, version_of<T>(), std::is_abstract_v<T>, &collect_fields<T>};
  return key;
}

inline void put(schema::descriptor& out, kind k) { out.push_back(static_cast<std::byte>(k)); }
inline void put_varint(schema::descriptor& out, std::uint64_t v) {
  std::byte buf[10];
  const std::size_t n = wire::encode_varint(v, buf);
  out.insert(out.end(), buf, buf + n);
}

// A byte no descriptor starts with: marks a struct the archive lacks, so
// the comparison that follows fails with type_mismatch.
inline constexpr std::byte unresolved_struct{0xFF};

template <class T>
void describe_struct(desc_context& ctx, schema::descriptor& out) {
  const auto index = ctx.struct_index(key_of<T>());
  if (!index) {
    out.push_back(unresolved_struct);
    return;
  }
  put(out, kind::structure);
  put_varint(out, *index);
}

// ------------------------------------------------------------ writing

struct field_writer {
  writer_state& w;
  template <class M>
  field_writer& operator()(std::uint32_t, std::string_view, const M& m) {
    if (!w.failed()) write_value(w, m);
    return *this;
  }
};

template <class T>
void write_number(writer_state& w, T v) {
  using bits = std::conditional_t<sizeof(T) == 1, std::uint8_t,
               std::conditional_t<sizeof(T) == 2, std::uint16_t,
               std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>>>;
  w.out().write<bits>(std::bit_cast<bits>(v), w.order());
}

/// The identity of the object a pointer refers to: its most-derived address
/// and dynamic type, and how to write and describe it.
struct pointee {
  const void* address;
  std::type_index type;
  write_fn write;
  describe_fn describe;
};

template <class E>
std::optional<pointee> identify(writer_state& w, const E* p) {
  if constexpr (std::is_polymorphic_v<E>) {
    const std::type_index dynamic = typeid(*p);
    if (dynamic != std::type_index(typeid(E))) {
      const poly_entry* entry = find_registered(dynamic);
      if (entry == nullptr) {
        w.fail(graph_errc::unregistered_type);
        return std::nullopt;
      }
      return pointee{dynamic_cast<const void*>(p), dynamic, entry->write, entry->describe};
    }
    return pointee{dynamic_cast<const void*>(p), dynamic, &write_erased<E>, &describe_erased<E>};
  } else {
    return pointee{p, typeid(E), &write_erased<E>, &describe_erased<E>};
  }
}

template <class E>
void write_reference(writer_state& w, const E* p, kind k) {
  if (p == nullptr) {
    w.out().write_varint(0);
    return;
  }
  const auto target = identify(w, p);
  if (!target) return;
  w.out().write_varint(w.reference(target->address, target->type, k, target->write, target->describe));
}


// ------------------------------------------------------------ reading

/// Reads every field of a struct whose archive field list equals the C++
/// one, in order; stops at the first error.
struct field_reader {
  reader_state& r;
  result<void> status{};
  template <class M>
  field_reader& operator()(std::uint32_t, std::string_view, M& m) {
    if (status) status = read_value(r, m);
    return *this;
  }
};

/// Collects pointers to the C++ fields, for archives whose field list
/// differs (schema evolution).
struct field_binder {
  struct bound {
    void* member;
    read_fn read;
  };
  std::vector<bound>& out;
  template <class M>
  field_binder& operator()(std::uint32_t, std::string_view, M& m) {
    out.push_back({&m, &read_erased<M>});
    return *this;
  }
};

template <class T>
result<void> read_number(reader_state& r, T& v) {
  using bits = std::conditional_t<sizeof(T) == 1, std::uint8_t,
               std::conditional_t<sizeof(T) == 2, std::uint16_t,
               std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>>>;
  auto b = r.in().read<bits>(r.order());
  if (!b) return b.error();
  v = std::bit_cast<T>(*b);
  return {};
}

/// Creates object `obj` as exactly a T, owned as its table entry says.
template <class T>
result<void> create_plain(reader_state& r, read_object& obj) {
  FERRY_TRY(r.charge(1, sizeof(T)));
  if (obj.ownership == owned_shared) {
    auto sp = std::make_shared<T>();
    obj.address = sp.get();
    obj.shared = std::move(sp);
  } else {
    obj.unique = new T();
    obj.address = obj.unique;
    obj.destroy = &delete_erased<T>;
  }
  obj.type = typeid(T);
  obj.read = &read_erased<T>;
  obj.reset = &reset_erased<T>;
  return {};
}

/// Creates object `obj` as a T (or, for a polymorphic T, as the registered
/// type its table entry names) when a pointer first refers to it.
template <class T>
result<void> create_object(reader_state& r, read_object& obj) {
  if (obj.address != nullptr) return {};
  if constexpr (user_struct<T>) {
    wire::reader d(obj.desc);
    auto k = d.read<std::uint8_t>(wire::byte_order::little);
    auto index = d.read_varint();
    if (!k || static_cast<kind>(*k) != kind::structure || !index) return graph_errc::type_mismatch;
    const std::string& name = r.archive_schema().types[static_cast<std::size_t>(*index)].name;
    if constexpr (!std::is_abstract_v<T>) {
      if (name == T::ferry_name) return create_plain<T>(r, obj);
    }
    if constexpr (std::is_polymorphic_v<T>) {
      const poly_entry* entry = find_registered(std::string_view(name));
      if (entry == nullptr) return graph_errc::unknown_type;
      // Never create an object of a registered type unrelated to T.
      if (entry->type != std::type_index(typeid(T)) && !entry->upcast_to(typeid(T))) return graph_errc::type_mismatch;
      FERRY_TRY(r.charge(1, entry->size));
      if (obj.ownership == owned_shared) {
        obj.shared = entry->make_shared();
        obj.address = obj.shared.get();
      } else {
        obj.unique = entry->make_unique();
        obj.address = obj.unique;
        obj.destroy = entry->destroy;
      }
      obj.type = entry->type;
      obj.read = entry->read;
      obj.reset = entry->reset;
      obj.poly = entry;
      return {};
    }
    return graph_errc::type_mismatch;
  } else {
    schema::descriptor expected;
    describe_type<T>(r, expected);
    if (!std::ranges::equal(expected, obj.desc)) return graph_errc::type_mismatch;
    return create_plain<T>(r, obj);
  }
}

/// Object `o`, named by an owning or weak reference of kind k, created on
/// first use and viewed as an E. Errors: ownership_conflict, type_mismatch.
template <class E>
result<E*> resolve(reader_state& r, read_object& o, kind k) {
  const std::uint8_t wanted = k == kind::unique ? owned_unique : owned_shared;
  if (o.ownership != wanted) return graph_errc::ownership_conflict;
  if (k == kind::unique && o.address != nullptr) return graph_errc::ownership_conflict;  // owned twice
  FERRY_TRY(create_object<E>(r, o));
  void* v = reader_state::view_as(o.address, o.type, o.poly, typeid(E));
  if (v == nullptr) return graph_errc::type_mismatch;
  return static_cast<E*>(v);
}

template <class T>
result<void> read_struct(reader_state& r, T& v) {
  auto plan = r.plan_for(key_of<T>());
  if (!plan) return plan.error();
  r.track_value(&v, typeid(T));
  if ((*plan)->identical) {
    field_reader f{r};
    call_describe(f, v);
    return f.status;
  }
  std::vector<field_binder::bound> fields;
  field_binder b{fields};
  call_describe(b, v);
  const schema::type_def& t = r.archive_schema().types[(*plan)->archive_index];
  for (std::size_t i = 0; i < t.fields.size(); ++i) {
    const std::ptrdiff_t target = (*plan)->target[i];
    if (target < 0) {
      FERRY_TRY(r.skip(t.fields[i].type));
    } else if (auto s = fields[static_cast<std::size_t>(target)].read(r, fields[static_cast<std::size_t>(target)].member); !s) {
      return s;
    }
  }
  return {};
}

template <class K>
bool strictly_after(const std::optional<K>& prev, const K& key) {
  return !prev || *prev < key;
}


// ------------------------------------------------------------- codecs
//
// codec<T> holds, for one family of types:
//   static constexpr std::size_t min_bytes;   the smallest encoding
//   static void describe(desc_context&, schema::descriptor&);
//   static void write(writer_state&, const T&);
//   static result<void> read(reader_state&, T&);
// The dispatchers below count depth around every value, on both sides, so
// whatever is written with some limits reads back with the same limits.

template <class T>
struct codec {
  static_assert(sizeof(T) == 0,
                "ferry::graph cannot serialise this type: give it ferry_name and describe(), or specialise "
                "ferry::graph::value_codec for it");
};

template <scalar_value T>
struct codec<T> {
  static constexpr std::size_t min_bytes = sizeof(T);
  static void describe(desc_context&, schema::descriptor& out) { put(out, scalar_kind<T>()); }
  static void write(writer_state& w, const T& v) { write_number(w, v); }
  static result<void> read(reader_state& r, T& v) { return read_number(r, v); }
};

template <>
struct codec<bool> {
  static constexpr std::size_t min_bytes = 1;
  static void describe(desc_context&, schema::descriptor& out) { put(out, kind::boolean); }
  static void write(writer_state& w, const bool& v) { w.out().write<std::uint8_t>(v ? 1 : 0, w.order()); }
  static result<void> read(reader_state& r, bool& v) {
    FERRY_TRY_ASSIGN(const auto b, r.in().read<std::uint8_t>(r.order()));
    if (b > 1) return errc::bad_value;
    v = b == 1;
    return {};
  }
};

template <class T>
  requires std::is_enum_v<T>
struct codec<T> {
  using raw = std::underlying_type_t<T>;
  static constexpr std::size_t min_bytes = sizeof(T);
  static void describe(desc_context& ctx, schema::descriptor& out) { describe_type<raw>(ctx, out); }
  static void write(writer_state& w, const T& v) { write_number(w, static_cast<raw>(v)); }
  static result<void> read(reader_state& r, T& v) {
    raw value{};
    FERRY_TRY(read_number(r, value));
    v = static_cast<T>(value);
    return {};
  }
};

template <>
struct codec<std::string> {
  static constexpr std::size_t min_bytes = 1;
  static void describe(desc_context&, schema::descriptor& out) { put(out, kind::string); }
  static void write(writer_state& w, const std::string& v) {
    if (!w.count_ok(v.size())) return;
    w.out().write_length_prefixed(std::as_bytes(std::span(v.data(), v.size())));
  }
  static result<void> read(reader_state& r, std::string& v) {
    FERRY_TRY_ASSIGN(const auto b, r.in().read_length_prefixed(r.opts().limits.max_count));
    // A copy through char, which may alias any bytes.
    v.assign(reinterpret_cast<const char*>(b.data()), b.size());  // NOLINT
    return {};
  }
};

/// The elements of a sequence or array, after any count: contiguous
/// scalars in bulk through the byte-order kernels, others one by one.
template <class R>
void write_elements(writer_state& w, const R& v) {
  using E = typename R::value_type;
  if constexpr (scalar_value<E> && std::ranges::contiguous_range<R>) {
    w.out().write_elements(std::as_bytes(std::span(v.data(), v.size())), sizeof(E), w.order());
  } else {
    for (const auto& e : v) {
      if (w.failed()) return;
      write_value(w, e);
    }
  }
}

template <class R>
result<void> read_elements(reader_state& r, R& v) {
  using E = typename R::value_type;
  if constexpr (scalar_value<E> && std::ranges::contiguous_range<R>) {
    FERRY_TRY_ASSIGN(const auto bytes, r.in().read_bytes(v.size() * sizeof(E)));
    wire::convert(bytes, r.order(), std::as_writable_bytes(std::span(v.data(), v.size())), wire::host_order,
                  sizeof(E));
  } else {
    for (auto&& e : v) {
      if constexpr (std::is_same_v<E, bool>) {  // std::vector<bool>'s proxies
        bool b = false;
        FERRY_TRY(read_value(r, b));
        e = b;
      } else {
        FERRY_TRY(read_value(r, e));
      }
    }
  }
  return {};
}

/// std::vector, std::deque and std::list: a count, then the elements.
template <sequence_container T>
struct codec<T> {
  using E = typename T::value_type;
  // What one element costs in memory, for the allocation budget.
  static constexpr std::size_t element_cost = sizeof(E) + (is_instance_v<T, std::list> ? 2 * sizeof(void*) : 0);
  static constexpr std::size_t min_bytes = 1;
  static void describe(desc_context& ctx, schema::descriptor& out) {
    put(out, kind::sequence);
    describe_type<E>(ctx, out);
  }
  static void write(writer_state& w, const T& v) {
    if (!w.count_ok(v.size())) return;
    w.out().write_varint(v.size());
    write_elements(w, v);
  }
  static result<void> read(reader_state& r, T& v) {
    FERRY_TRY_ASSIGN(const auto n, r.in().read_count(min_size<E>(), r.opts().limits.max_count));
    FERRY_TRY(r.charge(n, element_cost));
    v.clear();
    v.resize(n);
    return read_elements(r, v);
  }
};

template <class E, std::size_t N>
struct codec<std::array<E, N>> {
  static constexpr std::size_t min_bytes = N * min_size<E>();
  static void describe(desc_context& ctx, schema::descriptor& out) {
    put(out, kind::array);
    put_varint(out, N);
    describe_type<E>(ctx, out);
  }
  static void write(writer_state& w, const std::array<E, N>& v) {
    if (w.count_ok(N)) write_elements(w, v);
  }
  static result<void> read(reader_state& r, std::array<E, N>& v) { return read_elements(r, v); }
};

/// Maps and sets, ordered or not: a count, then the entries in strictly
/// increasing key order (unordered containers are sorted, so the same
/// graph gives the same bytes).
template <class T>
  requires map_container<T> || set_container<T>
struct codec<T> {
  static constexpr bool is_map = map_container<T>;
  using K = typename T::key_type;
  static constexpr std::size_t min_bytes = 1;

  static void describe(desc_context& ctx, schema::descriptor& out) {
    put(out, is_map ? kind::map : kind::set);
    describe_type<K>(ctx, out);
    if constexpr (is_map) describe_type<typename T::mapped_type>(ctx, out);
  }

  static void write(writer_state& w, const T& v) {
    if (!w.count_ok(v.size())) return;
    w.out().write_varint(v.size());
    auto one = [&](const auto& entry) {
      w.suspend_tracking(1);  // keys are not raw-pointer targets
      if constexpr (is_map) {
        write_value(w, entry.first);
      } else {
        write_value(w, entry);
      }
      w.suspend_tracking(-1);
      if constexpr (is_map) write_value(w, entry.second);
    };
    if constexpr (is_instance_v<T, std::map> || is_instance_v<T, std::set>) {
      for (const auto& entry : v) one(entry);
    } else {
      std::vector<const typename T::value_type*> sorted;
      sorted.reserve(v.size());
      for (const auto& entry : v) sorted.push_back(&entry);
      std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) {
        if constexpr (is_map) {
          return a->first < b->first;
        } else {
          return *a < *b;
        }
      });
      for (auto* entry : sorted) one(*entry);
    }
  }

  static result<void> read(reader_state& r, T& v) {
    std::size_t per = min_size<K>();
    if constexpr (is_map) per += min_size<typename T::mapped_type>();
    // Entries of empty structs take no bytes: then only max_count and the
    // allocation budget bound the count.
    FERRY_TRY_ASSIGN(const auto n, r.in().read_count(per, r.opts().limits.max_count));
    FERRY_TRY(r.charge(n, sizeof(typename T::value_type) + 2 * sizeof(void*)));
    v.clear();
    std::optional<K> prev;
    for (std::size_t i = 0; i < n; ++i) {
      K key{};
      r.suspend_tracking(1);
      auto s = read_value(r, key);
      r.suspend_tracking(-1);
      if (!s) return s;
      if (!strictly_after(prev, key)) return errc::duplicate_key;
      prev = key;
      if constexpr (is_map) {
        auto [it, inserted] = v.emplace(std::move(key), typename T::mapped_type{});
        if (!inserted) return errc::duplicate_key;
        FERRY_TRY(read_value(r, it->second));
      } else {
        v.insert(std::move(key));
      }
    }
    return {};
  }
};

template <class E>
struct codec<std::optional<E>> {
  static constexpr std::size_t min_bytes = 1;
  static void describe(desc_context& ctx, schema::descriptor& out) {
    put(out, kind::optional);
    describe_type<E>(ctx, out);
  }
  static void write(writer_state& w, const std::optional<E>& v) {
    w.out().write<std::uint8_t>(v.has_value() ? 1 : 0, w.order());
    if (v) write_value(w, *v);
  }
  static result<void> read(reader_state& r, std::optional<E>& v) {
    FERRY_TRY_ASSIGN(const auto flag, r.in().read<std::uint8_t>(r.order()));
    if (flag > 1) return errc::bad_value;
    if (flag == 0) {
      v.reset();
      return {};
    }
    v.emplace();
    return read_value(r, *v);
  }
};

template <class... A>
struct codec<std::variant<A...>> {
  using V = std::variant<A...>;
  static constexpr std::size_t min_bytes = 1;
  static void describe(desc_context& ctx, schema::descriptor& out) {
    put(out, kind::variant);
    put_varint(out, sizeof...(A));
    (describe_type<A>(ctx, out), ...);
  }
  static void write(writer_state& w, const V& v) {
    w.out().write_varint(v.index());
    std::visit([&](const auto& alt) { write_value(w, alt); }, v);
  }
  static result<void> read(reader_state& r, V& v) {
    FERRY_TRY_ASSIGN(const auto index, r.in().read_varint());
    if (index >= sizeof...(A)) return errc::bad_value;
    result<void> status{};
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((index == I ? (v.template emplace<I>(), status = read_value(r, std::get<I>(v)), 0) : 0), ...);
    }(std::index_sequence_for<A...>{});
    return status;
  }
};

/// std::pair and std::tuple: the elements in order, no count.
template <class T>
  requires is_instance_v<T, std::pair> || is_instance_v<T, std::tuple>
struct codec<T> {
  static constexpr std::size_t min_bytes = 0;
  static void describe(desc_context& ctx, schema::descriptor& out) {
    put(out, kind::tuple);
    put_varint(out, std::tuple_size_v<T>);
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (describe_type<std::tuple_element_t<I, T>>(ctx, out), ...);
    }(std::make_index_sequence<std::tuple_size_v<T>>{});
  }
  static void write(writer_state& w, const T& v) {
    std::apply([&](const auto&... e) { (write_value(w, e), ...); }, v);
  }
  static result<void> read(reader_state& r, T& v) {
    result<void> status{};
    std::apply([&](auto&... e) { ((status ? (status = read_value(r, e), 0) : 0), ...); }, v);
    return status;
  }
};

/// shared_ptr, weak_ptr and unique_ptr: an object id (0 for null).
template <owning_pointer T>
struct codec<T> {
  using E = typename T::element_type;
  static constexpr kind k = is_instance_v<T, std::shared_ptr> ? kind::shared
                            : is_instance_v<T, std::weak_ptr> ? kind::weak
                                                              : kind::unique;
  static constexpr std::size_t min_bytes = 1;
  static void describe(desc_context& ctx, schema::descriptor& out) {
    put(out, k);
    describe_type<E>(ctx, out);
  }
  static void write(writer_state& w, const T& v) {
    if constexpr (k == kind::weak) {
      const auto locked = v.lock();
      write_reference(w, locked.get(), k);
    } else {
      write_reference(w, v.get(), k);
    }
  }
  static result<void> read(reader_state& r, T& v) {
    FERRY_TRY_ASSIGN(const auto id, r.in().read_varint());
    if (id == 0) {
      v.reset();
      return {};
    }
    FERRY_TRY_ASSIGN(read_object* const obj, r.object(id));
    FERRY_TRY_ASSIGN(E* const p, resolve<E>(r, *obj, k));
    if constexpr (k == kind::unique) {
      obj->unique = nullptr;  // ownership moves to v
      obj->claimed = true;
      v.reset(p);
    } else {
      v = std::shared_ptr<E>(obj->shared, p);
    }
    return {};
  }
};

/// Raw pointers: a u32 reference, resolved once the whole archive is read.
template <class T>
  requires std::is_pointer_v<T>
struct codec<T> {
  using E = std::remove_cv_t<std::remove_pointer_t<T>>;
  static constexpr std::size_t min_bytes = 4;
  static void describe(desc_context& ctx, schema::descriptor& out) {
    put(out, kind::raw);
    describe_type<E>(ctx, out);
  }
  static void write(writer_state& w, const T& v) {
    if (v == nullptr) {
      w.raw_reference(nullptr, typeid(void));
      return;
    }
    const auto target = identify<E>(w, v);
    if (target) w.raw_reference(target->address, target->type);
  }
  static result<void> read(reader_state& r, T& v) {
    FERRY_TRY_ASSIGN(const auto ref, r.in().read<std::uint32_t>(r.order()));
    v = nullptr;
    r.add_raw({&v, ref, typeid(E), [](void* slot, void* target) {
                 *static_cast<T*>(slot) = static_cast<E*>(target);
               }});
    return {};
  }
};

/// Structs with ferry_name and describe(): their fields, in schema order.
template <user_struct T>
struct codec<T> {
  static constexpr std::size_t min_bytes = 0;
  static void describe(desc_context& ctx, schema::descriptor& out) { describe_struct<T>(ctx, out); }
  static void write(writer_state& w, const T& v) {
    w.track_value(&v, typeid(T));
    field_writer f{w};
    call_describe(f, const_cast<T&>(v));  // describe() only reads through the writer
  }
  static result<void> read(reader_state& r, T& v) { return read_struct(r, v); }
};

template <class T>
struct surrogate_codec;
/// The codec of T: a user's value_codec if there is one, else ferry's.
template <class T>
using codec_for = std::conditional_t<has_value_codec<T>, surrogate_codec<T>, codec<T>>;

/// A type with a user's ferry::graph::value_codec: it travels as its
/// wire_type, so every check of the built-in codecs applies to it.
template <class T>
struct surrogate_codec {
  using user = ::ferry::graph::value_codec<T>;
  using W = typename user::wire_type;
  static constexpr std::size_t min_bytes = min_size<W>();
  static void describe(desc_context& ctx, schema::descriptor& out) { describe_type<W>(ctx, out); }
  static void write(writer_state& w, const T& v) { codec_for<W>::write(w, user::to_wire(v)); }
  static result<void> read(reader_state& r, T& v) {
    W wire_value{};
    FERRY_TRY(codec_for<W>::read(r, wire_value));
    return user::from_wire(std::move(wire_value), v);
  }
};

// ---------------------------------------------------------- dispatchers

template <class T>
constexpr std::size_t min_size() {
  return codec_for<std::remove_cv_t<T>>::min_bytes;
}

template <class T>
void describe_type(desc_context& ctx, schema::descriptor& out) {
  codec_for<std::remove_cv_t<T>>::describe(ctx, out);
}

template <class T>
void write_value(writer_state& w, const T& v) {
  if (!w.enter()) return;
  struct leave_guard {
    writer_state& w;
    ~leave_guard() { w.leave(); }
  } guard{w};
  codec_for<std::remove_cv_t<T>>::write(w, v);
}

template <class T>
result<void> read_value(reader_state& r, T& v) {
  FERRY_TRY(r.enter());
  struct leave_guard {
    reader_state& r;
    ~leave_guard() { r.leave(); }
  } guard{r};
  return codec_for<std::remove_cv_t<T>>::read(r, v);
}


template <class T>
void writer_state::write_root(const T& root) {
  describe_type<T>(*this, root_desc_);
  write_value(*this, root);
  write_payloads();
}


template <class T>
result<void> reader_state::read_root(T& root) {
  FERRY_TRY(read_header());
  schema::descriptor expected;
  describe_type<T>(*this, expected);
  if (!std::ranges::equal(expected, root_desc_)) return graph_errc::type_mismatch;
  FERRY_TRY(read_value(*this, root));
  return finish_read();
}

template <class T>
void reader_state::abandon(T& root) {
  break_cycles();
  if constexpr (std::is_move_assignable_v<T>) root = T();
}

// ------------------------------------------------------------ registry

template <class Derived, class... Bases>
void register_polymorphic() {
  static_assert(user_struct<Derived>, "registered types need ferry_name and describe()");
  static_assert((std::is_base_of_v<Bases, Derived> && ...), "each of Bases must be a base of Derived");
  static_assert((std::is_polymorphic_v<Bases> && ...), "bases must be polymorphic");
  poly_entry e{
      typeid(Derived),
      sizeof(Derived),
      &key_of<Derived>(),
      &write_erased<Derived>,
      &describe_erased<Derived>,
      &read_erased<Derived>,
      []() -> std::shared_ptr<void> { return std::make_shared<Derived>(); },
      []() -> void* { return new Derived(); },
      &delete_erased<Derived>,
      &reset_erased<Derived>,
      {},
  };
  (e.upcasts.emplace_back(std::type_index(typeid(Bases)),
                          [](void* p) -> void* { return static_cast<Bases*>(static_cast<Derived*>(p)); }),
   ...);
  add_registered(std::move(e));
}

}  // namespace ferry::graph::detail
