// The two passes around an int8 x int8 matmul (int8_encoder.py; the matmul itself is
// PyTorch's torch._int_mm), each one read of its input and one write instead of PyTorch's
// four or five elementwise operators, which took as long as the matmul they surround.
//
//   quantize_rows:  scale[m] = max_k |x[m, k]| / 127 (at least 1e-12),
//                   q[m, k]  = round_half_even(x[m, k] * (1 / scale[m]))        (int8)
//   dequantize:     out[m, n] = act(float(acc[m, n]) * row_scale[m] * col_scale[n] + bias[n])
//
// The same operations in the same order as int8_encoder.py's PyTorch fallback, so the same
// numbers, except the gelu, which is gelu_rational here (within 1.4e-6 of the erf form).
// Rows are split between threads (team.cpp); each row's numbers do not depend on the split.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "activations.h"
#include "team.h"

namespace {

constexpr float QUANT_MAX = 127.0f;
constexpr float ROUNDING = 12582912.0f;  // 1.5 * 2^23
constexpr long ROWS_PER_ITEM = 16;  // a work item: 16 rows of 384-1536 values, 24-96 KB read

struct Quantize {
    const float* x;
    long M, K;
    int8_t* q;
    float* scale;

    static void item(void* self, long index) {
        const Quantize& c = *static_cast<const Quantize*>(self);
        const long end = std::min(c.M, (index + 1) * ROWS_PER_ITEM);
        const long K = c.K;
        for (long m = index * ROWS_PER_ITEM; m < end; m++) {
            const float* __restrict row = c.x + m * K;
            int8_t* __restrict out = c.q + m * K;
            // the largest |x| as the largest of the bit patterns with the sign cleared (they
            // order as the magnitudes do): an integer maximum, which the compiler vectorizes
            // (a float one it may not reorder)
            uint32_t largest_bits = 0;
            for (long k = 0; k < K; k++) {
                const uint32_t magnitude = std::bit_cast<uint32_t>(row[k]) & 0x7fffffffu;
                largest_bits = magnitude > largest_bits ? magnitude : largest_bits;
            }
            float s = std::bit_cast<float>(largest_bits) / QUANT_MAX;
            s = s < 1e-12f ? 1e-12f : s;
            c.scale[m] = s;
            // |row[k] / s| <= 127 by the choice of s: no clamp needed. Adding and taking away
            // 1.5 * 2^23 rounds to the nearest integer, ties to even (as torch.round), in a
            // form the compiler vectorizes (nearbyint it called once per value)
            const float inverse = 1.0f / s;
            for (long k = 0; k < K; k++) out[k] = (int8_t)(int)((row[k] * inverse + ROUNDING) - ROUNDING);
        }
    }
};

struct Dequantize {
    const int32_t* acc;
    long M, N;
    const float* row_scale;
    const float* col_scale;
    const float* bias;  // may be null
    int act;            // 0 none, 1 gelu (rational erf)
    float* out;

    static void item(void* self, long index) {
        const Dequantize& c = *static_cast<const Dequantize*>(self);
        const long end = std::min(c.M, (index + 1) * ROWS_PER_ITEM);
        for (long m = index * ROWS_PER_ITEM; m < end; m++) {
            const int32_t* __restrict a = c.acc + m * c.N;
            float* __restrict o = c.out + m * c.N;
            const float* __restrict cs = c.col_scale;
            const float rs = c.row_scale[m];
            for (long n = 0; n < c.N; n++) o[n] = (float)a[n] * rs * cs[n];
            if (c.bias) {
                const float* __restrict b = c.bias;
                for (long n = 0; n < c.N; n++) o[n] += b[n];
            }
            if (c.act == 1)
                for (long n = 0; n < c.N; n++) o[n] = gelu_rational(o[n]);
        }
    }
};

long items(long rows) { return (rows + ROWS_PER_ITEM - 1) / ROWS_PER_ITEM; }

}  // namespace

extern "C" {

void quantize_rows(const float* x, long M, long K, int8_t* q, float* scale, int threads) {
    Quantize call{x, M, K, q, scale};
    team::run(items(M), &Quantize::item, &call, threads);
}

void dequantize(const int32_t* acc, long M, long N, const float* row_scale, const float* col_scale,
                const float* bias, int act, float* out, int threads) {
    Dequantize call{acc, M, N, row_scale, col_scale, bias, act, out};
    team::run(items(M), &Dequantize::item, &call, threads);
}
}
