// ferry/checkpoint/writer.h: writing .ferry checkpoints (format.h) in one
// streaming pass, committed atomically.
//
//   auto w = ferry::checkpoint::writer::create("model.ferry").value();
//   const std::uint64_t shape[] = {4, 3};
//   const auto id = w.add({.name = "embed.weight", .dtype = codec::dtype::f32, .shape = shape,
//                          .storage = std::as_bytes(std::span(weights))}).value();
//   w.add({.name = "lm_head.weight", .dtype = codec::dtype::f32, .shape = shape}, id).value();  // tied
//   w.set_metadata("epoch", "3");
//   w.commit().value();
//
// Each add() writes the tensor's storage to the file at once (in the chosen
// byte order, with its CRC32C), so only one tensor need be in memory, and
// returns the storage's id. A tensor over an already written storage (the
// output weight tied to the embedding, a view of a tensor) is added with
// that id: its bytes are not written again. save() finds the sharing itself:
// refs whose storage spans are equal and whose elements have one layout
// share one storage. (add() cannot: a
// caller that reuses one buffer for successive tensors passes equal spans
// for different data.) The manifest and trailer are written by commit(),
// which publishes the file atomically (base::atomic_file): until then the
// target keeps its old content, and a writer destroyed without commit()
// removes its temporary.
//
// Errors name the file and the tensor: "model.ferry: tensor 'fc.weight'".
// A rejected tensor (bad name, view out of bounds, ...) leaves the writer
// usable; an I/O failure makes every later call fail with it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "ferry/base/error.h"
#include "ferry/checkpoint/options.h"
#include "ferry/checkpoint/tensor.h"

namespace ferry::checkpoint {

/// A storage written to a checkpoint, to add more tensors over it.
struct storage_id {
  std::uint32_t index = 0;
  friend bool operator==(storage_id, storage_id) = default;
};

class writer {
 public:
  /// Starts a checkpoint that commit() will publish at `target`.
  /// Errors: io_error (the folder is not writable, ...), bad_alignment.
  [[nodiscard]] static result<writer, error> create(const std::filesystem::path& target,
                                                    const write_options& opt = {});
  writer(writer&&) noexcept;
  writer& operator=(writer&&) noexcept;
  ~writer();

  /// Adds a tensor and writes its storage, `t.storage` (host order).
  /// Errors: bad_name, duplicate_key, bad_value (strides count),
  /// shape_overflow, view_out_of_bounds, shape_size_mismatch (a storage that
  /// is not whole elements), limit_exceeded, io_error.
  [[nodiscard]] result<storage_id, error> add(const tensor_ref& t);

  /// Adds a tensor over storage `shared`, written before. `t.storage` is not
  /// read: the view is checked against the storage as written. Errors: those
  /// of add(), bad_storage_reference (no such storage),
  /// element_size_mismatch (the storage holds elements of another size).
  [[nodiscard]] result<storage_id, error> add(const tensor_ref& t, storage_id shared);

  /// Adds a tensor over the storage in `slot`, or, when `slot` is empty,
  /// writes its storage and records it there: copying a checkpoint, keep
  /// one slot per source storage and each is written once. Errors: add()'s.
  [[nodiscard]] result<storage_id, error> add_shared(const tensor_ref& t, std::optional<storage_id>& slot);

  /// Sets a metadata entry (replacing an earlier value for the key).
  /// Errors: bad_metadata (key not valid UTF-8 or empty or too long).
  [[nodiscard]] result<void, error> set_metadata(std::string key, std::string value);

  /// Writes the manifest and trailer and publishes the file.
  [[nodiscard]] result<void, error> commit();

  /// After commit(): the manifest's CRC32C (its trailer's), which a set's
  /// index records of its shards (set.h).
  [[nodiscard]] std::uint32_t manifest_crc32c() const noexcept;

  /// Storages written so far and their bytes (for progress reports; after
  /// commit(), the file's size).
  [[nodiscard]] std::size_t tensor_count() const noexcept;
  [[nodiscard]] std::uint64_t bytes_written() const noexcept;

 private:
  struct state;
  explicit writer(std::unique_ptr<state> s) noexcept;
  result<storage_id, error> add_tensor(const tensor_ref& t, std::optional<storage_id> shared);
  std::unique_ptr<state> s_;
};

/// Writes `tensors` and `metadata` as a .ferry file: writer in one call.
/// Refs whose storage spans are equal (same address and size, not empty)
/// and whose elements have one layout (size, byte-order unit) share one
/// storage in the file.
[[nodiscard]] result<void, error> save(const std::filesystem::path& target, std::span<const tensor_ref> tensors,
                                       const std::map<std::string, std::string>& metadata = {},
                                       const write_options& opt = {});

}  // namespace ferry::checkpoint
