// Builds whose LibTorch has no c10d Gloo (FERRY_WITH_GLOO off).
#include "collectives.h"

namespace ferry::trainer {

std::unique_ptr<collectives> make_gloo_collectives() {
  throw ferry::exception(error(comm_errc::bad_config, "this ferry-train was built without Gloo; use --backend ferry"));
}

}  // namespace ferry::trainer
