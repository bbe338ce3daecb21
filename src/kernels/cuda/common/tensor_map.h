// Tensor maps for the tensor-memory accelerator's 2D copies (cp.async.bulk.tensor, sm_90+; common/bulk_copy.cuh): a
// row-major matrix of bytes read in boxes of whole rows' spans. Encoded on the host by the driver's
// cuTensorMapEncodeTiled, found through the runtime's driver entry point (nothing links libcuda).
#pragma once

#include <cuda.h>

#include <cstdint>

namespace dsv4::cuda {

// Whether the current device has the tensor-memory accelerator (compute capability 9.0 or above) and the driver
// exports the encoder; cached per device.
bool device_has_tensor_copies();

// `rows` rows of `row_bytes` bytes at `base` (16-byte aligned; row_bytes a multiple of 16, below 2^40), read in boxes
// of `box_rows` rows x `box_bytes` bytes (each at most 256; box_bytes a multiple of 16). With `swizzle64` (box_bytes
// 64) the box lands with the 64-byte swizzle: the 16-byte chunk c of box row r at chunk c ^ ((r >> 1) & 3) of its
// row, given a destination aligned to 512 bytes. Throws where the driver refuses the map.
CUtensorMap byte_matrix_map(const void* base, int64_t rows, int64_t row_bytes, int box_rows, int box_bytes,
                            bool swizzle64);

}  // namespace dsv4::cuda
