// The index of a .ferry set in the table (detail/formats.h): a .ferry
// container whose manifest lists the shards (read.cpp; set.h states the
// rules). Its storages are the shards' (shard_set).
#include "ferry/checkpoint/detail/formats.h"
#include "ferry/checkpoint/set/internal.h"

namespace ferry::checkpoint::detail {

extern const format_ops ferry_set_format{
    file_format::ferry_set,
    "ferry-set",
    true,
    [](const source& s, const read_options&) { return ferry_head(s.head(), true); },
    [](const source& s, const read_options& opt) -> result<parsed_file, error> {
      FERRY_TRY_ASSIGN(auto container,
                       read_ferry_container(s.file().fd(), s.size(), s.path(), s.head().first<header_size>(), opt.lim));
      parsed_file index;
      FERRY_TRY_ASSIGN(auto set, open_set(s.path(), std::move(container), opt, index));
      index.source = std::move(set);
      return index;
    },
    {},       // written beside its shards: save_set() (set.h)
    nullptr,
    nullptr,
};

}  // namespace ferry::checkpoint::detail
