#include "ferry/codec/kernels.h"

#include "ferry/codec/crc32c.h"
#include "ferry/codec/half.h"
#include "ferry/wire/bulk.h"

namespace ferry::codec {

std::vector<kernel_choice> kernel_choices() {
  return {{"byte_swap", wire::bulk_kernel_name()}, {"crc32c", crc32c_kernel_name()}, {"f16_bf16", half_kernel_name()}};
}

}  // namespace ferry::codec
