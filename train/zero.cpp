#include "zero.h"

#include <algorithm>
#include <string>

#include "collectives.h"
#include "common.h"

namespace ferry::trainer {
std::vector<piece> owned_pieces(const std::vector<at::Tensor>& params, std::span<const std::ptrdiff_t> trained_index,
                                const gradient_sync& sync, std::uint32_t rank) {
  std::vector<piece> out;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto t = trained_index[i];
    out.push_back(t >= 0     ? sync.owned(static_cast<std::size_t>(t))
                  : rank == 0 ? piece{0, static_cast<std::size_t>(params[i].numel())}
                              : piece{});
  }
  return out;
}

void share_pieces(collectives& comm, const optimizer* whole, optimizer& sharded, const std::vector<at::Tensor>& params) {
  const auto per = state_names(sharded.options()).size();
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto mine = sharded.piece_of(i);
    for (std::size_t k = 0; k < per; ++k) {
      const auto t = whole != nullptr ? whole->state()[i * per + k] : at::empty_like(params[i]);
      comm.broadcast(floats(t));
      std::copy_n(floats(t).begin() + static_cast<std::ptrdiff_t>(mine.begin), mine.count,
                  floats(sharded.state()[i * per + k]).begin());
    }
  }
}

void move_to_parts(ferry::libtorch::tensor_map& tensors, const optimizer& sharded, const torch::nn::Module& model,
                   std::vector<shard_item>& parts) {
  std::size_t i = 0;
  for (const auto& item : model.named_parameters()) {
    const auto mine = sharded.piece_of(i++);
    const auto shape = item.value().sizes();
    for (const auto field : state_names(sharded.options())) {
      const auto it = tensors.find("optimizer." + item.key() + "." + std::string(field));
      if (it == tensors.end()) continue;
      if (mine.count > 0) parts.push_back({it->first, it->second, false, {shape.begin(), shape.end()}, mine.begin});
      tensors.erase(it);
    }
  }
}

}  // namespace ferry::trainer
