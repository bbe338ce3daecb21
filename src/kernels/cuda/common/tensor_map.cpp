#include "kernels/cuda/common/tensor_map.h"

#include <cuda_runtime.h>

#include "core/error.h"
#include "kernels/cuda/common/resident_ctas.h"

namespace dsv4::cuda {
namespace {

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// The driver's encoder, or null where this driver lacks it (looked up once).
EncodeTiled encoder() {
    static const EncodeTiled fn = [] {
        void* f = nullptr;
        cudaDriverEntryPointQueryResult found{};
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found) !=
                cudaSuccess ||
            found != cudaDriverEntryPointSuccess) {
            cudaGetLastError();  // the lookup's error is an answer, not a failure to report later
            return EncodeTiled{nullptr};
        }
        return reinterpret_cast<EncodeTiled>(f);
    }();
    return fn;
}

}  // namespace

bool device_has_tensor_copies() {
    return device_compute_capability() >= 90 && encoder() != nullptr;
}

CUtensorMap byte_matrix_map(const void* base, int64_t rows, int64_t row_bytes, int box_rows, int box_bytes,
                            bool swizzle64) {
    const EncodeTiled encode = encoder();
    DSV4_CHECK(encode, "this CUDA driver has no cuTensorMapEncodeTiled");
    DSV4_CHECK(reinterpret_cast<uintptr_t>(base) % 16 == 0 && row_bytes % 16 == 0 && box_bytes % 16 == 0 &&
                   box_rows >= 1 && box_rows <= 256 && box_bytes <= 256 && (!swizzle64 || box_bytes == 64),
               "tensor map: base {} rows of {} bytes in boxes of {} x {} bytes", base, row_bytes, box_rows, box_bytes);
    CUtensorMap map{};
    const cuuint64_t dims[2] = {cuuint64_t(row_bytes), cuuint64_t(rows)}, strides[1] = {cuuint64_t(row_bytes)};
    const cuuint32_t box[2] = {cuuint32_t(box_bytes), cuuint32_t(box_rows)}, element_strides[2] = {1, 1};
    const CUresult r =
        encode(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(base), dims, strides, box, element_strides,
               CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle64 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_NONE,
               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    DSV4_CHECK(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled refused {} rows of {} bytes (boxes {} x {}): error {}", rows,
               row_bytes, box_rows, box_bytes, int(r));
    return map;
}

}  // namespace dsv4::cuda
