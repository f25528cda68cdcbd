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

static inline void widen(const float* __restrict src, float* __restrict dst) {
    std::memcpy(dst, src, NB * sizeof(float));
}

// acc[m][j] = sum_k x[m, k] * w[k * ldw + j] for j < NB (ldw = NB in a packed panel)
template <typename T, int M>
static inline void panel(const float* __restrict x, long ldx, const T* __restrict w, long K,
                         float* __restrict acc, long ldw = NB) {
    float a[M][NB];
    // One accumulator chain per output, k in order, whatever M is: a row gives the same
    // numbers alone or in a batch. (Two chains for 1-2 rows measured no faster: 0.39x of
    // MKL against 0.40x; the prefetch is what pays.)
    for (int m = 0; m < M; m++)
        for (int j = 0; j < NB; j++) a[m][j] = 0.0f;
    for (long k = 0; k < K; k++) {
        const T* __restrict wk = w + k * ldw;
        __builtin_prefetch(wk + PREFETCH * ldw);
        float wf[NB];
        widen(wk, wf);
        for (int m = 0; m < M; m++) {
            const float xv = x[m * ldx + k];
            for (int j = 0; j < NB; j++) a[m][j] += xv * wf[j];
        }
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

// ---------------------------------------------------------------------------------------
// Cross-attention of a decoder step: R query rows (beams) against one audio's K/V.
//   out[r, h, :] = softmax_t(q[r, h, :] . K[h, t, :] * scale) @ V[h, t, :]
// q, out: [R, H, D] float32. K is stored transposed, kt: [H, D, Lp] (Lp >= L, a multiple of
// NB), so that scores are a matmul over contiguous lines of t; V: [H, L, D]. Both float32
// (exact mode) or float16 (fast mode). Heads run in parallel; each reads its K and V once
// for all R rows. Row sums are float32 in order, as the matmul above.

// exp(s[t] - m) over a row, and its sum: Cephes' expf polynomial (about 1 ulp) in AVX-512
// (libm's expf is a call per element); libm elsewhere.
static void exp_shifted(float* __restrict s, long L, float m, float* sum) {
#if defined(__AVX512F__)
    const __m512 vm = _mm512_set1_ps(m), lo = _mm512_set1_ps(-87.0f), log2e = _mm512_set1_ps(1.44269504088896341f);
    const __m512 c1 = _mm512_set1_ps(0.693359375f), c2 = _mm512_set1_ps(-2.12194440e-4f);
    __m512 acc = _mm512_setzero_ps();
    for (long t = 0; t < L; t += 16) {
        const __mmask16 k = (L - t) >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (L - t)) - 1);
        __m512 x = _mm512_max_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + t), vm), lo);
        const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m512 r = _mm512_fnmadd_ps(n, c1, x);
        r = _mm512_fnmadd_ps(n, c2, r);
        __m512 p = _mm512_set1_ps(1.9875691500e-4f);
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
        p = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
        const __m512 e = _mm512_scalef_ps(p, n);
        _mm512_mask_storeu_ps(s + t, k, e);
        acc = _mm512_mask_add_ps(acc, k, acc, e);
    }
    *sum = _mm512_reduce_add_ps(acc);
#else
    float total = 0.0f;
    for (long t = 0; t < L; t++) {
        s[t] = expf(s[t] - m);
        total += s[t];
    }
    *sum = total;
#endif
}

template <typename T, int M>
static void attend_head(const float* q, long H, long D, const T* kt, const T* v, long L, long Lp,
                        float scale, float* out, float* S) {
    // q rows for this head, scaled: [M, D]
    float qs[M * 256];
    for (int r = 0; r < M; r++)
        for (long d = 0; d < D; d++) qs[r * D + d] = q[r * H * D + d] * scale;
    float acc[M * NB];
    for (long t0 = 0; t0 < L; t0 += NB) {  // scores: [M, Lp] = qs @ kt
        panel<T, M>(qs, D, kt + t0, D, acc, Lp);
        for (int r = 0; r < M; r++) std::memcpy(S + r * Lp + t0, acc + r * NB, NB * sizeof(float));
    }
    float inv[M];
    for (int r = 0; r < M; r++) {
        float* s = S + r * Lp;
        float m = s[0];
        for (long t = 1; t < L; t++) m = s[t] > m ? s[t] : m;
        float sum;
        exp_shifted(s, L, m, &sum);
        inv[r] = 1.0f / sum;
    }
    for (long d0 = 0; d0 < D; d0 += NB) {  // out: [M, D] = p @ v
        panel<T, M>(S, Lp, v + d0, L, acc, D);
        for (int r = 0; r < M; r++)
            for (int j = 0; j < NB; j++) out[r * H * D + d0 + j] = acc[r * NB + j] * inv[r];
    }
}

template <typename T>
static void attend(const float* q, long R, long H, long D, const T* kt, const T* v, long L, long Lp,
                   float scale, float* out, int threads) {
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        float* S = new float[8 * Lp];
#pragma omp for schedule(static)
        for (long h = 0; h < H; h++) {
            const T* kth = kt + h * D * Lp;
            const T* vh = v + h * L * D;
            for (long r0 = 0; r0 < R; r0 += 8) {
                const long mm = (R - r0) < 8 ? (R - r0) : 8;
                const float* qh = q + (r0 * H + h) * D;
                float* oh = out + (r0 * H + h) * D;
                switch (mm) {
                    case 1: attend_head<T, 1>(qh, H, D, kth, vh, L, Lp, scale, oh, S); break;
                    case 2: attend_head<T, 2>(qh, H, D, kth, vh, L, Lp, scale, oh, S); break;
                    case 3: attend_head<T, 3>(qh, H, D, kth, vh, L, Lp, scale, oh, S); break;
                    case 4: attend_head<T, 4>(qh, H, D, kth, vh, L, Lp, scale, oh, S); break;
                    case 5: attend_head<T, 5>(qh, H, D, kth, vh, L, Lp, scale, oh, S); break;
                    case 6: attend_head<T, 6>(qh, H, D, kth, vh, L, Lp, scale, oh, S); break;
                    case 7: attend_head<T, 7>(qh, H, D, kth, vh, L, Lp, scale, oh, S); break;
                    default: attend_head<T, 8>(qh, H, D, kth, vh, L, Lp, scale, oh, S); break;
                }
            }
        }
        delete[] S;
    }
}

extern "C" {
void attend_f32(const float* q, long R, long H, long D, const float* kt, const float* v, long L, long Lp,
                float scale, float* out, int threads) {
    attend<float>(q, R, H, D, kt, v, L, Lp, scale, out, threads);
}

void attend_f16(const float* q, long R, long H, long D, const _Float16* kt, const _Float16* v, long L,
                long Lp, float scale, float* out, int threads) {
    attend<_Float16>(q, R, H, D, kt, v, L, Lp, scale, out, threads);
}
}
