// ferry/graph/detail/state.h: INTERNAL. The writer and reader state behind
// graph/archive.h, and the polymorphic registry. Not part of the API.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <memory_resource>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <typeindex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ferry/graph/options.h"
#include "ferry/schema/schema.h"
#include "ferry/wire/cursor.h"
#include "ferry/graph/error.h"


namespace ferry::graph::detail {

using wire::byte_order;
using schema::kind;

class writer_state;
class reader_state;
class desc_context;

/// How a struct type enters a schema: name, version, and its field list.
struct type_key {
  std::string_view name;
  std::uint32_t version;
  bool abstract;
  void (*collect_fields)(desc_context&, std::vector<schema::field_def>&);
};

/// Resolves struct types to schema indices while descriptors are built: the
/// writer adds types to its schema, the reader looks them up in the archive.
class desc_context {
 public:
  /// The schema index of `key`'s type, or nothing (reader: not in archive).
  virtual std::optional<std::uint64_t> struct_index(const type_key& key) = 0;

 protected:
  ~desc_context() = default;
};

using write_fn = void (*)(writer_state&, const void*);
using describe_fn = void (*)(desc_context&, schema::descriptor&);
using read_fn = result<void> (*)(reader_state&, void*);

/// A registered polymorphic type.
struct poly_entry {
  std::type_index type;
  std::size_t size;           // sizeof the registered type
  const type_key* key;
  write_fn write;             // payload of a most-derived object
  describe_fn describe;       // struct(index) of the type
  read_fn read;               // payload into a most-derived object
  std::shared_ptr<void> (*make_shared)();
  void* (*make_unique)();     // new Derived
  void (*destroy)(void*);     // delete as Derived
  void (*reset)(void*);       // assign a default-constructed value
  std::vector<std::pair<std::type_index, void* (*)(void*)>> upcasts;  // to each base

  /// The cast from a most-derived pointer to `base`, or nullptr.
  [[nodiscard]] void* (*upcast_to(std::type_index base) const noexcept)(void*) {
    for (const auto& [b, cast] : upcasts) {
      if (b == base) return cast;
    }
    return nullptr;
  }
};

const poly_entry* find_registered(std::type_index type) noexcept;
const poly_entry* find_registered(std::string_view name) noexcept;
void add_registered(poly_entry entry);

/// A dynamic type of the writer's objects: how to write one and its
/// descriptor. A graph has few; its objects name them by index.
struct object_type {
  std::type_index type;
  write_fn write;
  schema::descriptor desc;
};

/// An object of the archive in the writer: 16 bytes, as a graph may hold
/// millions.
struct write_object {
  const void* address;     // most derived
  std::uint32_t type;      // index into writer_state's object types
  std::uint8_t ownership;  // 1 shared, 2 unique
};

/// Memory a thread keeps between writes (archive.cpp): the object list and
/// the object table's arena of the last write, up to a cap, so a graph like
/// the last one is written without fresh pages (each costs a page fault on
/// first touch) and without growing either again.
struct writer_scratch {
  std::vector<write_object> objects;   // empty; its capacity is the point
  std::unique_ptr<std::byte[]> arena;  // the table arena's first block
  std::size_t arena_size = 0;
};

/// Holds the thread's scratch while a writer lives: takes it on
/// construction, gives it back on destruction (after the writer's table
/// and arena, which use it, are gone). A writer nested in another's
/// value_codec finds none and makes its own.
class scratch_lease {
 public:
  scratch_lease();
  ~scratch_lease();
  scratch_lease(const scratch_lease&) = delete;
  scratch_lease& operator=(const scratch_lease&) = delete;

  writer_scratch scratch;
  std::size_t arena_needed = 0;  // set by the writer: the bytes its arena used
};

/// Passes allocations to the heap and counts their bytes, so the writer
/// knows how large an arena block the next write needs.
class counting_resource final : public std::pmr::memory_resource {
 public:
  [[nodiscard]] std::size_t allocated() const noexcept { return allocated_; }

 private:
  std::size_t allocated_ = 0;
  void* do_allocate(std::size_t bytes, std::size_t align) override {
    allocated_ += bytes;
    return std::pmr::new_delete_resource()->allocate(bytes, align);
  }
  void do_deallocate(void* p, std::size_t bytes, std::size_t align) override {
    std::pmr::new_delete_resource()->deallocate(p, bytes, align);
  }
  [[nodiscard]] bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override {
    return this == &other;
  }
};

class writer_state final : public desc_context {
 public:
  explicit writer_state(const options& opt);
  ~writer_state();
  writer_state(const writer_state&) = delete;
  writer_state& operator=(const writer_state&) = delete;

  template <class T>
  void write_root(const T& root);
  result<std::vector<std::byte>> finish();

  // --- for the codecs
  wire::vector_writer& out() noexcept { return body_; }
  [[nodiscard]] byte_order order() const noexcept { return order_; }
  /// False (and the writer fails) when a string or container is longer than
  /// the reader's max_count would accept.
  bool count_ok(std::size_t n) noexcept {
    if (n <= opt_.limits.max_count) return true;
    fail(errc::limit_exceeded);
    return false;
  }
  void fail(error_code e) noexcept {
    if (!error_) error_ = e;
  }
  [[nodiscard]] bool failed() const noexcept { return static_cast<bool>(error_); }
  std::optional<std::uint64_t> struct_index(const type_key& key) override;

  /// Id of the object at `address` (most derived) for an owning or weak
  /// reference, adding it to the table when new.
  std::uint32_t reference(const void* address, std::type_index type, kind k, write_fn write,
                          describe_fn describe);
  /// A raw pointer: writes a u32 placeholder resolved in finish().
  void raw_reference(const void* address, std::type_index type);
  /// Numbers a struct written by value (raw pointers may target it).
  void track_value(const void* address, std::type_index type) {
    if (untracked_ != 0) return;
    const std::size_t k = struct_count_++;
    if (address == payload_address_ && type == payload_type_) {
      // The object whose payload this is: a raw pointer to it resolves to
      // the object's id (finish() looks there first), so only its number
      // is needed, not a record per object.
      payload_address_ = nullptr;
      return;
    }
    tracked_.push_back({address, type, k});
  }
  /// Structs inside map keys and set elements are not counted (their
  /// addresses do not survive reading).
  void suspend_tracking(int delta) noexcept { untracked_ += delta; }
  /// Depth and value count, counted exactly as the reader counts them, so
  /// that what is written with some limits reads back with the same
  /// limits; false (and the writer fails) past max_depth or max_values.
  bool enter() noexcept {
    if (depth_ >= opt_.limits.max_depth) [[unlikely]] {
      fail(errc::depth_exceeded);
      return false;
    }
    if (++values_ > opt_.limits.max_values) [[unlikely]] {
      fail(errc::limit_exceeded);
      return false;
    }
    ++depth_;
    return true;
  }
  void leave() noexcept { --depth_; }

 private:
  // The address alone: type_index::hash_code() hashes the mangled type
  // name, and objects of different types rarely share an address.
  struct pair_hash {
    std::size_t operator()(const std::pair<const void*, std::type_index>& p) const noexcept {
      return std::hash<const void*>{}(p.first);
    }
  };

  const options& opt_;
  byte_order order_;
  std::vector<std::byte> body_bytes_;  // header, then body; the footer is appended last
  wire::vector_writer body_;
  schema::schema schema_;
  std::unordered_map<std::string_view, std::size_t> type_indices_;
  std::vector<const type_key*> type_keys_;  // by schema index
  scratch_lease scratch_;
  std::vector<write_object> objects_;
  std::vector<object_type> object_types_;
  std::unordered_map<describe_fn, std::uint32_t> object_type_ids_;  // into object_types_
  describe_fn last_describe_ = nullptr;  // objects of one type come in runs
  std::uint32_t last_type_ = 0;
  // What a reference needs of an object already met: its id and its
  // ownership, kept in the table itself so a hit never touches objects_
  // (a cache miss per reference on a large graph).
  struct object_id {
    std::uint32_t id;
    std::uint8_t ownership;
  };
  // The table's nodes and buckets come from an arena freed at once with the
  // writer: no malloc and free per object. Its first block is the
  // scratch's.
  counting_resource arena_upstream_;
  std::pmr::monotonic_buffer_resource table_arena_;
  std::pmr::unordered_map<std::pair<const void*, std::type_index>, object_id, pair_hash> object_ids_{&table_arena_};
  struct tracked_value {
    const void* address;
    std::type_index type;
    std::size_t k;  // the raw reference to it is N + k + 1
  };
  std::vector<tracked_value> tracked_;
  std::size_t struct_count_ = 0;              // structs numbered so far
  const void* payload_address_ = nullptr;     // the object write_payloads() is writing
  std::type_index payload_type_ = typeid(void);
  struct raw_slot {
    std::size_t offset;
    const void* address;
    std::type_index type;
  };
  std::vector<raw_slot> raws_;
  schema::descriptor root_desc_;
  std::size_t depth_ = 0;
  std::size_t values_ = 0;
  int untracked_ = 0;
  error_code error_;

  void write_payloads();
};

/// How an object of the table is owned (archive.h, "objects").
inline constexpr std::uint8_t owned_shared = 1;  ///< by std::shared_ptr, or only weakly
inline constexpr std::uint8_t owned_unique = 2;  ///< by exactly one std::unique_ptr

/// One object of the archive in the reader.
struct read_object {
  std::uint8_t ownership = 0;          // from the table
  std::span<const std::byte> desc;     // from the table
  std::shared_ptr<void> shared;        // owned_shared
  void* unique = nullptr;              // owned_unique, until claimed
  void (*destroy)(void*) = nullptr;    // for an unclaimed unique object
  void* address = nullptr;             // most derived
  std::type_index type = typeid(void);
  read_fn read = nullptr;
  void (*reset)(void*) = nullptr;
  const poly_entry* poly = nullptr;    // when created through the registry
  bool claimed = false;                // unique: taken by a unique_ptr
};

class reader_state final : public desc_context {
 public:
  reader_state(std::span<const std::byte> archive, const options& opt);
  ~reader_state();
  reader_state(const reader_state&) = delete;
  reader_state& operator=(const reader_state&) = delete;

  template <class T>
  result<void> read_root(T& root);
  /// After a failed read: break cycles among the objects built so far.
  template <class T>
  void abandon(T& root);

  // --- for the codecs
  wire::reader& in() noexcept { return in_; }
  [[nodiscard]] byte_order order() const noexcept { return order_; }
  [[nodiscard]] const schema::schema& archive_schema() const noexcept { return schema_; }
  [[nodiscard]] const options& opts() const noexcept { return opt_; }
  std::optional<std::uint64_t> struct_index(const type_key& key) override;

  /// Depth and value count. Errors: depth_exceeded, limit_exceeded.
  result<void> enter() noexcept {
    if (depth_ >= opt_.limits.max_depth) return errc::depth_exceeded;
    if (++values_ > opt_.limits.max_values) return errc::limit_exceeded;
    ++depth_;
    return {};
  }
  void leave() noexcept { --depth_; }
  /// Charges count * size bytes against the allocation budget.
  result<void> charge(std::size_t count, std::size_t size) noexcept {
    if (size != 0 && count > budget_ / size) return errc::limit_exceeded;
    budget_ -= count * size;
    return {};
  }
  /// Skips one value of archive descriptor `desc`.
  result<void> skip(std::span<const std::byte> desc);

  /// The object with id `id` (1-based), or bad_reference.
  result<read_object*> object(std::uint64_t id) noexcept;

  void track_value(void* address, std::type_index type) {
    if (track_ && untracked_ == 0) tracked_.emplace_back(address, type);
  }
  void suspend_tracking(int delta) noexcept { untracked_ += delta; }
  /// A raw pointer to resolve once everything is read: `assign` stores the
  /// target, converted to the pointer's type, into `slot`.
  struct raw_fixup {
    void* slot;
    std::uint32_t ref;
    std::type_index type;
    void (*assign)(void* slot, void* target);
  };
  void add_raw(raw_fixup f) { raws_.push_back(f); }
  /// Raw pointers into [p, p + size) are pointer_into_root (see read()).
  void forbid_pointers_into(const void* p, std::size_t size) noexcept {
    root_ = static_cast<const std::byte*>(p);
    root_size_ = size;
  }

  /// The address of `target` viewed as `type`, when it is that type or a
  /// registered derived type of it; nullptr otherwise.
  static void* view_as(void* address, std::type_index dynamic, const poly_entry* poly, std::type_index wanted);

  /// Memoized comparison of an archive struct type with a C++ struct type:
  /// identical field lists read straight through describe().
  struct field_plan {
    std::size_t archive_index = 0;
    bool identical = false;
    std::vector<std::ptrdiff_t> target;  // per archive field: C++ field index or -1
  };
  /// Errors: type_mismatch (type absent or abstract in the archive),
  /// field_renamed, field_type_mismatch.
  result<const field_plan*> plan_for(const type_key& key);

  /// After the root: payloads, raw pointers, ownership and trailing checks.
  result<void> finish_read();
  /// Resets every object built so far (highest id first), so cycles among
  /// them are broken before they are released.
  void break_cycles() noexcept;

 private:
  const options& opt_;
  std::span<const std::byte> archive_;
  wire::reader in_;  // the body
  std::span<const std::byte> root_desc_;
  std::vector<schema::descriptor> upgraded_;  // a format-1 archive's descriptors, renumbered
  byte_order order_ = byte_order::little;
  schema::schema schema_;
  std::vector<read_object> objects_;
  std::vector<std::pair<void*, std::type_index>> tracked_;
  std::vector<raw_fixup> raws_;
  std::unordered_map<const type_key*, result<field_plan>> plans_;
  const type_key* last_key_ = nullptr;
  const field_plan* last_plan_ = nullptr;
  bool track_ = false;
  int untracked_ = 0;
  const std::byte* root_ = nullptr;
  std::size_t root_size_ = 0;
  std::size_t depth_ = 0;
  std::size_t values_ = 0;
  std::size_t budget_;

  result<void> read_header();
  result<void> resolve_raws();
  void release_objects() noexcept;
};

/// The header and footer of an archive, validated: everything but the body.
struct prelude {
  prelude() = default;
  // Not copyable: `objects` and `root` may point into `upgraded`.
  prelude(const prelude&) = delete;
  prelude& operator=(const prelude&) = delete;
  prelude(prelude&&) noexcept = default;
  prelude& operator=(prelude&&) noexcept = default;

  std::uint8_t version = 0;
  byte_order order = byte_order::little;
  bool raw_pointers = false;
  std::span<const std::byte> body;
  schema::schema schema;
  struct entry {
    std::uint8_t ownership;             // owned_shared or owned_unique
    std::span<const std::byte> type;    // descriptor: a view into the input or into `upgraded`
  };
  std::vector<entry> objects;
  std::span<const std::byte> root;      // descriptor, as `type`
  /// Format 1: its table and root descriptors in the current descriptor
  /// version (schema descriptors are upgraded by schema::decode()).
  std::vector<schema::descriptor> upgraded;
};
/// Errors: truncated, bad_magic, unsupported_version, bad_byte_order,
/// bad_value, limit_exceeded, and the schema's errors.
result<prelude> read_prelude(std::span<const std::byte> archive, const options& opt);

result<void> write_stream_bytes(std::ostream& out, std::span<const std::byte> bytes);
result<std::vector<std::byte>> read_stream_bytes(std::istream& in);

}  // namespace ferry::graph::detail
