// masked_row: see token_constraint.h.
#include "runtime/token_constraint.h"

#include "core/error.h"

namespace dsv4 {

const float* masked_row(const TokenConstraint& constraint, const float* row, int64_t vocab,
                        std::vector<float>& scratch) {
    if (row != scratch.data()) scratch.assign(row, row + vocab);
    DSV4_CHECK(constraint.mask(scratch.data(), vocab),
               "structured output: no token the model allows can continue the reply");
    return scratch.data();
}

}  // namespace dsv4
