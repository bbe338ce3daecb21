// TensorRef helpers.
#include "io/tensor_ref.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace dsv4 {

std::string TensorRef::shape_string() const { return fmt::format("[{}]", fmt::join(shape, ", ")); }

}  // namespace dsv4
