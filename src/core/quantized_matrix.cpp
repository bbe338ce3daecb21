// Names of weight formats, for inspect and error messages.
#include "core/quantized_matrix.h"

namespace dsv4 {

const char* weight_format_name(WeightFormat f) {
    switch (f) {
        case WeightFormat::kF32: return "F32";
        case WeightFormat::kBF16: return "BF16";
        case WeightFormat::kF16: return "F16";
        case WeightFormat::kFp8Block: return "FP8 E4M3 (128x128 block scales)";
        case WeightFormat::kFp4Mx: return "FP4 E2M1 (E8M0 scale per 32)";
        case WeightFormat::kNvfp4: return "NVFP4 (E4M3 scale per 16, F32 global)";
    }
    return "?";
}

}  // namespace dsv4
