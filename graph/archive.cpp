#include "ferry/graph/archive.h"

#include <istream>
#include <ostream>
#include <functional>
#include <mutex>
#include <new>

namespace ferry::graph::detail {
namespace {

constexpr std::byte magic[4] = {std::byte{'F'}, std::byte{'G'}, std::byte{'A'}, std::byte{'1'}};
// Format 2 numbers scalar kinds as dtype codes (schema.h); format 1 is
// still read.
constexpr std::uint8_t format_version = 2;
constexpr std::uint8_t format_version_1 = 1;
constexpr std::uint8_t flag_raw_pointers = 1;
constexpr std::size_t flags_offset = 6;
constexpr std::size_t body_size_offset = 7;
constexpr std::size_t header_size = 15;

// ---------------------------------------------------------------- registry

struct registry {
  std::mutex mutex;
  std::unordered_map<std::type_index, std::unique_ptr<poly_entry>> by_type;
  std::unordered_map<std::string_view, const poly_entry*> by_name;
};

registry& the_registry() {
  static registry r;
  return r;
}

}  // namespace

const poly_entry* find_registered(std::type_index type) noexcept {
  registry& r = the_registry();
  std::lock_guard lock(r.mutex);
  const auto it = r.by_type.find(type);
  return it == r.by_type.end() ? nullptr : it->second.get();
}

const poly_entry* find_registered(std::string_view name) noexcept {
  registry& r = the_registry();
  std::lock_guard lock(r.mutex);
  const auto it = r.by_name.find(name);
  return it == r.by_name.end() ? nullptr : it->second;
}

void add_registered(poly_entry entry) {
  registry& r = the_registry();
  std::lock_guard lock(r.mutex);
  if (r.by_type.count(entry.type) != 0) return;  // registering twice is harmless
  auto owned = std::make_unique<poly_entry>(std::move(entry));
  r.by_name[owned->key->name] = owned.get();
  const std::type_index type = owned->type;
  r.by_type.emplace(type, std::move(owned));
}

// ------------------------------------------------------------------ writer

namespace {

// What a thread keeps between writes, at most 8 MiB of object list (half a
// million objects) and 24 MiB of arena: enough for graphs of a few hundred
// thousand objects to be written again without page faults, little enough
// to keep in every thread that ever wrote one. Larger scratch is freed.
constexpr std::size_t max_kept_objects_bytes = std::size_t{8} << 20;
constexpr std::size_t max_kept_arena_bytes = std::size_t{24} << 20;
constexpr std::size_t min_arena_bytes = std::size_t{16} << 10;

thread_local writer_scratch kept_scratch;

}  // namespace

scratch_lease::scratch_lease() : scratch(std::move(kept_scratch)) {
  kept_scratch = {};
  if (!scratch.arena) {
    scratch.arena = std::make_unique_for_overwrite<std::byte[]>(min_arena_bytes);
    scratch.arena_size = min_arena_bytes;
  }
}

scratch_lease::~scratch_lease() {
  // Next time the first block holds all this write's arena needed.
  if (arena_needed > scratch.arena_size) {
    scratch.arena.reset();
    scratch.arena_size = 0;
    if (arena_needed <= max_kept_arena_bytes) {
      // Never throws from here: without memory the thread just keeps none.
      scratch.arena.reset(new (std::nothrow) std::byte[arena_needed]);
      scratch.arena_size = scratch.arena ? arena_needed : 0;
    }
  }
  scratch.objects.clear();
  if (scratch.objects.capacity() * sizeof(write_object) > max_kept_objects_bytes) scratch.objects = {};
  if (kept_scratch.arena_size <= scratch.arena_size) kept_scratch = std::move(scratch);
}

writer_state::writer_state(const options& opt)
    : opt_(opt),
      order_(opt.order),
      body_(body_bytes_),
      objects_(std::move(scratch_.scratch.objects)),
      table_arena_(scratch_.scratch.arena.get(), scratch_.scratch.arena_size, &arena_upstream_) {
  objects_.clear();
  body_.write_bytes(magic);
  body_.write<std::uint8_t>(format_version, order_);
  body_.write<std::uint8_t>(static_cast<std::uint8_t>(order_), order_);
  body_.write<std::uint8_t>(0, order_);   // flags, set in finish()
  body_.write<std::uint64_t>(0, order_);  // body_size, set in finish()
}

writer_state::~writer_state() {
  // The lease outlives the table and the arena; it keeps what they used.
  scratch_.arena_needed = scratch_.scratch.arena_size + arena_upstream_.allocated();
  scratch_.scratch.objects = std::move(objects_);
}

std::optional<std::uint64_t> writer_state::struct_index(const type_key& key) {
  if (const auto it = type_indices_.find(key.name); it != type_indices_.end()) {
    if (type_keys_[it->second] != &key) fail(errc::duplicate_key);  // two C++ types, one name
    return it->second;
  }
  const std::size_t index = schema_.types.size();
  type_indices_.emplace(key.name, index);
  type_keys_.push_back(&key);
  schema_.types.push_back({std::string(key.name), key.version, key.abstract, {}});
  std::vector<schema::field_def> fields;
  key.collect_fields(*this, fields);  // may add further types
  schema_.types[index].fields = std::move(fields);
  return index;
}

std::uint32_t writer_state::reference(const void* address, std::type_index type, kind k, write_fn write,
                                      describe_fn describe) {
  const auto key = std::make_pair(address, type);
  if (const auto it = object_ids_.find(key); it != object_ids_.end()) {
    // An object is owned either by shared_ptrs (and maybe watched by
    // weak_ptrs) or by exactly one unique_ptr.
    if (k == kind::unique || it->second.ownership == owned_unique) fail(graph_errc::ownership_conflict);
    return it->second.id;
  }
  if (objects_.size() >= opt_.max_objects) {
    fail(errc::limit_exceeded);
    return 0;
  }
  if (describe != last_describe_) {
    const auto [it, added] = object_type_ids_.emplace(describe, static_cast<std::uint32_t>(object_types_.size()));
    if (added) {
      schema::descriptor desc;
      describe(*this, desc);  // may add types, never objects
      object_types_.push_back({type, write, std::move(desc)});
    }
    last_describe_ = describe;
    last_type_ = it->second;
  }
  const std::uint8_t ownership = k == kind::unique ? owned_unique : owned_shared;
  objects_.push_back({address, last_type_, ownership});
  const auto id = static_cast<std::uint32_t>(objects_.size());
  object_ids_.emplace(key, object_id{id, ownership});
  return id;
}

void writer_state::raw_reference(const void* address, std::type_index type) {
  raws_.push_back({body_.position(), address, type});
  body_.write<std::uint32_t>(0, order_);  // patched in finish()
}

void writer_state::write_payloads() {
  // Objects met while writing payloads join the end of the queue, so a list
  // of a million nodes is written by this loop, not by recursion.
  for (std::size_t i = 0; i < objects_.size() && !failed(); ++i) {
    const write_object o = objects_[i];
    const write_fn write = object_types_[o.type].write;  // writing may add types
    payload_address_ = o.address;
    payload_type_ = object_types_[o.type].type;
    write(*this, o.address);
    payload_address_ = nullptr;
  }
}

result<std::vector<std::byte>> writer_state::finish() {
  if (failed()) return error_;
  const std::size_t n = objects_.size();
  if (!raws_.empty()) {
    std::unordered_map<std::pair<const void*, std::type_index>, std::uint32_t, pair_hash> by_value;
    for (const tracked_value& t : tracked_) {
      by_value.emplace(std::make_pair(t.address, t.type), static_cast<std::uint32_t>(n + t.k + 1));  // first occurrence wins
    }
    for (const raw_slot& slot : raws_) {
      std::uint32_t ref = 0;
      if (slot.address != nullptr) {
        const auto key = std::make_pair(slot.address, slot.type);
        if (const auto it = object_ids_.find(key); it != object_ids_.end()) {
          ref = it->second.id;
        } else if (const auto jt = by_value.find(key); jt != by_value.end()) {
          ref = jt->second;
        } else {
          return graph_errc::untracked_pointer;
        }
      }
      wire::store<std::uint32_t>(ref, body_bytes_.data() + slot.offset, order_);
    }
  }

  // Header fields known only now, then the footer after the body.
  body_bytes_[flags_offset] = std::byte{raws_.empty() ? std::uint8_t{0} : flag_raw_pointers};
  wire::store<std::uint64_t>(body_.position() - header_size, body_bytes_.data() + body_size_offset, order_);
  schema::encode(schema_, body_);
  std::size_t runs = 0;
  for (std::size_t i = 0; i < n; ++i) {
    runs += i == 0 || objects_[i].ownership != objects_[i - 1].ownership || objects_[i].type != objects_[i - 1].type;
  }
  body_.write_varint(runs);
  for (std::size_t i = 0; i < n;) {
    std::size_t j = i + 1;
    while (j < n && objects_[j].ownership == objects_[i].ownership && objects_[j].type == objects_[i].type) ++j;
    body_.write_varint(j - i);
    body_.write<std::uint8_t>(objects_[i].ownership, order_);
    body_.write_bytes(object_types_[objects_[i].type].desc);
    i = j;
  }
  body_.write_bytes(root_desc_);
  body_.flush();
  return std::move(body_bytes_);
}

// ------------------------------------------------------------------ reader

reader_state::reader_state(std::span<const std::byte> archive, const options& opt)
    : opt_(opt), archive_(archive), in_(archive), budget_(archive.size() * opt.allocation_factor + (std::size_t{1} << 20)) {}

reader_state::~reader_state() { release_objects(); }

result<prelude> read_prelude(std::span<const std::byte> archive, const options& opt) {
  wire::reader in(archive);
  prelude p;
  FERRY_TRY_ASSIGN(const auto m, in.read_bytes(4));
  if (!std::equal(m.begin(), m.end(), std::begin(magic))) return errc::bad_magic;
  FERRY_TRY_ASSIGN(const auto version, in.read<std::uint8_t>(p.order));
  if (version != format_version && version != format_version_1) return errc::unsupported_version;
  p.version = version;
  const std::uint8_t desc_version =
      version == format_version_1 ? schema::descriptor_version_1 : schema::descriptor_version;
  // A format-1 descriptor, kept in `upgraded` in the current version.
  auto current = [&](std::span<const std::byte> d) -> std::span<const std::byte> {
    if (desc_version == schema::descriptor_version) return d;
    p.upgraded.push_back(schema::upgrade_descriptor(d));
    return p.upgraded.back();
  };
  FERRY_TRY_ASSIGN(const auto order, in.read<std::uint8_t>(p.order));
  if (order > 1) return errc::bad_byte_order;
  p.order = static_cast<byte_order>(order);
  FERRY_TRY_ASSIGN(const auto flags, in.read<std::uint8_t>(p.order));
  if ((flags & ~flag_raw_pointers) != 0) return errc::bad_value;
  p.raw_pointers = (flags & flag_raw_pointers) != 0;
  FERRY_TRY_ASSIGN(const auto body_size, in.read<std::uint64_t>(p.order));
  if (body_size > in.remaining()) return errc::truncated;
  p.body = *in.read_bytes(static_cast<std::size_t>(body_size));

  FERRY_TRY_ASSIGN(p.schema, schema::decode(in, opt.limits, desc_version));

  // Smallest run: count + ownership + one descriptor byte.
  FERRY_TRY_ASSIGN(const auto runs, in.read_count(3, opt.max_objects));
  const std::size_t max_objects = std::min(opt.max_objects, p.body.size());
  std::size_t total = 0;
  for (std::size_t r = 0; r < runs; ++r) {
    FERRY_TRY_ASSIGN(const auto count, in.read_varint());
    if (count == 0) return errc::bad_value;
    if (count > max_objects - total) return errc::limit_exceeded;
    total += static_cast<std::size_t>(count);
    FERRY_TRY_ASSIGN(const auto own, in.read<std::uint8_t>(p.order));
    if (own != owned_shared && own != owned_unique) return errc::bad_value;
    FERRY_TRY_ASSIGN(const auto read, schema::read_descriptor(in, p.schema.types.size(), opt.limits.max_depth, desc_version));
    const auto desc = current(read);
    if (static_cast<kind>((desc)[0]) == kind::structure) {
      wire::reader d(desc.subspan(1));
      if (p.schema.types[static_cast<std::size_t>(*d.read_varint())].abstract) return errc::bad_value;
    }
    p.objects.insert(p.objects.end(), static_cast<std::size_t>(count), prelude::entry{own, desc});
  }
  FERRY_TRY_ASSIGN(const auto root, schema::read_descriptor(in, p.schema.types.size(), opt.limits.max_depth, desc_version));
  p.root = current(root);
  if (!in.at_end()) return errc::trailing_bytes;
  return p;
}

result<void> reader_state::read_header() {
  FERRY_TRY_ASSIGN(auto p, read_prelude(archive_, opt_));
  in_ = wire::reader(p.body);
  root_desc_ = p.root;
  order_ = p.order;
  track_ = p.raw_pointers;
  schema_ = std::move(p.schema);
  upgraded_ = std::move(p.upgraded);  // root_desc_ and the objects' descriptors may point into it
  FERRY_TRY(charge(p.objects.size(), sizeof(read_object)));
  objects_.resize(p.objects.size());
  for (std::size_t i = 0; i < objects_.size(); ++i) {
    objects_[i].ownership = p.objects[i].ownership;
    objects_[i].desc = p.objects[i].type;
  }
  return {};
}

std::optional<std::uint64_t> reader_state::struct_index(const type_key& key) {
  const std::ptrdiff_t i = schema_.find(key.name);
  if (i < 0) return std::nullopt;
  return static_cast<std::uint64_t>(i);
}

result<void> reader_state::skip(std::span<const std::byte> desc) {
  return schema::walk_value(in_, desc, schema_, order_, {}, opt_.limits, values_, depth_);
}

result<read_object*> reader_state::object(std::uint64_t id) noexcept {
  if (id == 0 || id > objects_.size()) return graph_errc::bad_reference;
  return &objects_[static_cast<std::size_t>(id - 1)];
}

void* reader_state::view_as(void* address, std::type_index dynamic, const poly_entry* poly, std::type_index wanted) {
  if (dynamic == wanted) return address;
  if (poly == nullptr) return nullptr;
  const auto cast = poly->upcast_to(wanted);
  return cast == nullptr ? nullptr : cast(address);
}

result<const reader_state::field_plan*> reader_state::plan_for(const type_key& key) {
  if (&key == last_key_) return last_plan_;  // structs of one type come in runs
  auto it = plans_.find(&key);
  if (it == plans_.end()) {
    auto make = [&]() -> result<field_plan> {
      const std::ptrdiff_t index = schema_.find(key.name);
      if (index < 0 || key.abstract) return graph_errc::type_mismatch;
      const schema::type_def& archived = schema_.types[static_cast<std::size_t>(index)];
      if (archived.abstract) return graph_errc::type_mismatch;
      std::vector<schema::field_def> ours;
      key.collect_fields(*this, ours);
      field_plan p;
      p.archive_index = static_cast<std::size_t>(index);
      p.identical = archived.fields.size() == ours.size();
      for (std::size_t i = 0; i < archived.fields.size(); ++i) {
        const schema::field_def& a = archived.fields[i];
        std::ptrdiff_t target = -1;
        for (std::size_t j = 0; j < ours.size(); ++j) {
          if (ours[j].tag == a.tag) {
            if (ours[j].name != a.name) return graph_errc::field_renamed;
            if (ours[j].type != a.type) return graph_errc::field_type_mismatch;
            target = static_cast<std::ptrdiff_t>(j);
          } else if (ours[j].name == a.name) {
            return graph_errc::field_renamed;  // same name under another tag
          }
        }
        p.identical = p.identical && target == static_cast<std::ptrdiff_t>(i);
        p.target.push_back(target);  // -1: a field this reader does not know, skipped
      }
      return p;
    };
    it = plans_.emplace(&key, make()).first;
  }
  if (!it->second) return it->second.error();
  last_key_ = &key;
  last_plan_ = &*it->second;
  return last_plan_;
}

result<void> reader_state::finish_read() {
  // Payloads in id order. Object k exists by now unless the archive is
  // malformed: its first reference precedes its payload.
  for (std::size_t i = 0; i < objects_.size(); ++i) {
    read_object& o = objects_[i];
    if (o.address == nullptr) return graph_errc::bad_reference;
    FERRY_TRY(o.read(*this, o.address));
  }
  FERRY_TRY(resolve_raws());
  for (const read_object& o : objects_) {
    if (o.ownership == owned_unique && !o.claimed) return graph_errc::ownership_conflict;
  }
  if (!in_.at_end()) return errc::trailing_bytes;
  return {};
}

result<void> reader_state::resolve_raws() {
  const std::size_t n = objects_.size();
  for (const raw_fixup& f : raws_) {
    if (f.ref == 0) continue;
    void* target = nullptr;
    if (f.ref <= n) {
      const read_object& o = objects_[f.ref - 1];
      target = view_as(o.address, o.type, o.poly, f.type);
    } else {
      const std::size_t k = f.ref - n - 1;
      if (!track_ || k >= tracked_.size()) return graph_errc::bad_reference;
      const auto& [address, type] = tracked_[k];
      const auto* at = static_cast<const std::byte*>(address);
      if (root_ != nullptr && !std::less<>{}(at, root_) && std::less<>{}(at, root_ + root_size_)) {
        return graph_errc::pointer_into_root;
      }
      target = view_as(address, type, find_registered(type), f.type);
    }
    if (target == nullptr) return graph_errc::type_mismatch;
    f.assign(f.slot, target);
  }
  return {};
}

void reader_state::break_cycles() noexcept {
  // Highest id first: a unique object is owned by an object with a lower id
  // (or the root), so everything reset here is still alive.
  for (std::size_t i = objects_.size(); i-- > 0;) {
    read_object& o = objects_[i];
    if (o.address != nullptr && o.reset != nullptr) o.reset(o.address);
  }
}

void reader_state::release_objects() noexcept {
  // Lowest id first, so a long chain is released one link at a time.
  for (read_object& o : objects_) {
    o.shared.reset();
    if (o.unique != nullptr) o.destroy(o.unique);
    o.unique = nullptr;
  }
}

// ----------------------------------------------------------------- streams

result<void> write_stream_bytes(std::ostream& out, std::span<const std::byte> bytes) {
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));  // NOLINT: ostream API
  if (!out) return errc::io_error;
  return {};
}

result<std::vector<std::byte>> read_stream_bytes(std::istream& in) {
  std::vector<std::byte> bytes;
  char buf[1 << 16];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    const auto n = static_cast<std::size_t>(in.gcount());
    const auto* b = reinterpret_cast<const std::byte*>(buf);  // NOLINT: a byte view of char data
    bytes.insert(bytes.end(), b, b + n);
  }
  if (in.bad()) return errc::io_error;
  return bytes;
}

}  // namespace ferry::graph::detail
