// The compressed index keys a token at `position` sees (spec §7.4: entries w < (position + 1) / ratio), capped at the
// launch's max_visible columns: one rule for the indexer's scores, generic scores and top-k kernels.
#pragma once

namespace dsv4::cuda {

__device__ __forceinline__ int visible_entries(int position, int ratio, int max_visible) {
    return min((position + 1) / ratio, max_visible);
}

}  // namespace dsv4::cuda
