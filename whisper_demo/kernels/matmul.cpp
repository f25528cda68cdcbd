// Small-batch matmul with compact weights, for decoder steps (1-8 rows against a matrix).
//
//   out[m, n] = scale[n] * sum_k x[m, k] * W[k, n] + bias[n]      (scale, bias optional)
//
// W is stored as float16 (exact for Whisper's weights, which are float16 values: half the
// bytes of float32, the same numbers) or int8 (weight-only quantization, a quarter), packed
// in panels of NB columns: panel p holds W[k, p*NB + j] at p*K*NB + k*NB + j, so each k of a
// panel is one contiguous 64-byte line (float16) and a step streams the matrix once.
// Every row is accumulated in float32, k = 0..K-1 in order, independently of the other rows:
// a row gives the same numbers whether it is computed alone or with others.
// Built by whisper_demo/kernels/__init__.py with the machine's compiler (-O3 -march=native);
// The multiply-adds are plain loops that the compiler vectorizes; the widening of a panel
// line to float32 uses intrinsics (F16C / AVX-512 / AVX2), as GCC 12 does not vectorize it.
#include <cstdint>
#include <cstring>
#include <immintrin.h>

#define NB 32
#ifndef PREFETCH
#define PREFETCH 32  // panel lines ahead (2 KB for float16): measured 0.7x the time of none
#endif

static inline void widen(const _Float16* __restrict src, float* __restrict dst) {
#if defined(__AVX512F__)
    _mm512_storeu_ps(dst, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)src)));
    _mm512_storeu_ps(dst + 16, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(src + 16))));
#elif defined(__F16C__)
    for (int j = 0; j < NB; j += 8)
        _mm256_storeu_ps(dst + j, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(src + j))));
#else
    for (int j = 0; j < NB; j++) dst[j] = (float)src[j];
#endif
}

static inline void widen(const int8_t* __restrict src, float* __restrict dst) {
#if defined(__AVX512F__)
    _mm512_storeu_ps(dst, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)src))));
    _mm512_storeu_ps(dst + 16, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(src + 16)))));
#elif defined(__AVX2__)
    for (int j = 0; j < NB; j += 8)
        _mm256_storeu_ps(dst + j, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)(src + j)))));
#else
    for (int j = 0; j < NB; j++) dst[j] = (float)src[j];
#endif
}

template <typename T, int M>
static inline void panel(const float* __restrict x, long ldx, const T* __restrict w, long K,
                         float* __restrict acc) {
    float a[M][NB];
    // With few rows, one chain of multiply-adds per accumulator is bound by FMA latency,
    // not by memory: even and odd k go to separate accumulators, added at the end.
    constexpr int S = M <= 2 ? 2 : 1;
    float b[S][M][NB];
    for (int s = 0; s < S; s++)
        for (int m = 0; m < M; m++)
            for (int j = 0; j < NB; j++) b[s][m][j] = 0.0f;
    long k = 0;
    for (; k + S <= K; k += S) {
        for (int s = 0; s < S; s++) {
            const T* __restrict wk = w + (k + s) * NB;
            __builtin_prefetch(wk + PREFETCH * NB);
            float wf[NB];
            widen(wk, wf);
            for (int m = 0; m < M; m++) {
                const float xv = x[m * ldx + k + s];
                for (int j = 0; j < NB; j++) b[s][m][j] += xv * wf[j];
            }
        }
    }
    for (; k < K; k++) {
        const T* __restrict wk = w + k * NB;
        float wf[NB];
        widen(wk, wf);
        for (int m = 0; m < M; m++) {
            const float xv = x[m * ldx + k];
            for (int j = 0; j < NB; j++) b[0][m][j] += xv * wf[j];
        }
    }
    for (int m = 0; m < M; m++)
        for (int j = 0; j < NB; j++) {
            float v = b[0][m][j];
            for (int s = 1; s < S; s++) v += b[s][m][j];
            a[m][j] = v;
        }
    std::memcpy(acc, a, sizeof(a));
}

template <typename T, int M>
static void rows(const float* x, long ldx, const T* w, long K, long N, const float* scale,
                 const float* bias, float* out, long ldo, int threads) {
    const long P = (N + NB - 1) / NB;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (long p = 0; p < P; p++) {
        float acc[M * NB];
        panel<T, M>(x, ldx, w + p * K * NB, K, acc);
        const long n0 = p * NB, nn = (N - n0) < NB ? (N - n0) : NB;
        for (int m = 0; m < M; m++) {
            float* o = out + m * ldo + n0;
            const float* a = acc + m * NB;
            for (long j = 0; j < nn; j++) {
                float v = a[j];
                if (scale) v *= scale[n0 + j];
                if (bias) v += bias[n0 + j];
                o[j] = v;
            }
        }
    }
}

template <typename T>
static void matmul(const float* x, long M, long ldx, const T* w, long K, long N, const float* scale,
                   const float* bias, float* out, long ldo, int threads) {
    for (long m0 = 0; m0 < M; m0 += 8) {
        const long mm = (M - m0) < 8 ? (M - m0) : 8;
        const float* xs = x + m0 * ldx;
        float* os = out + m0 * ldo;
        switch (mm) {
            case 1: rows<T, 1>(xs, ldx, w, K, N, scale, bias, os, ldo, threads); break;
            case 2: rows<T, 2>(xs, ldx, w, K, N, scale, bias, os, ldo, threads); break;
            case 3: rows<T, 3>(xs, ldx, w, K, N, scale, bias, os, ldo, threads); break;
            case 4: rows<T, 4>(xs, ldx, w, K, N, scale, bias, os, ldo, threads); break;
            case 5: rows<T, 5>(xs, ldx, w, K, N, scale, bias, os, ldo, threads); break;
            case 6: rows<T, 6>(xs, ldx, w, K, N, scale, bias, os, ldo, threads); break;
            case 7: rows<T, 7>(xs, ldx, w, K, N, scale, bias, os, ldo, threads); break;
            default: rows<T, 8>(xs, ldx, w, K, N, scale, bias, os, ldo, threads); break;
        }
    }
}

extern "C" {
int panel_width() { return NB; }

void matmul_f16(const float* x, long M, long ldx, const _Float16* w, long K, long N,
                const float* scale, const float* bias, float* out, long ldo, int threads) {
    matmul<_Float16>(x, M, ldx, w, K, N, scale, bias, out, ldo, threads);
}

void matmul_i8(const float* x, long M, long ldx, const int8_t* w, long K, long N,
               const float* scale, const float* bias, float* out, long ldo, int threads) {
    matmul<int8_t>(x, M, ldx, w, K, N, scale, bias, out, ldo, threads);
}
}
