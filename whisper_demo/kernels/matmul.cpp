// Matmul with compact weights, for decoder steps (1-8 rows against a matrix) and the forwards
// of a prompt or a draft (tens to hundreds of rows) in the fast mode.
//
//   out[m, n] = scale[n] * sum_k x[m, k] * W[k, n] + bias[n]      (scale, bias optional)
//
// W is stored as float16 (exact for Whisper's weights, which are float16 values: half the
// bytes of float32, the same numbers) or int8 (weight-only quantization, a quarter), packed
// in panels of NB columns: panel p holds W[k, p*NB + j] at p*K*NB + k*NB + j, so each k of a
// panel is one contiguous 64-byte line (float16) and a step streams the matrix once.
// Every row is accumulated in float32, k = 0..K-1 in order, independently of the other rows:
// a row gives the same numbers whether it is computed alone or with others.
// Built by whisper_demo/kernels/build.py with the machine's compiler (-O3 -march=native);
// The multiply-adds are plain loops that the compiler vectorizes; the widening of a panel
// line to float32 uses intrinsics (F16C / AVX-512 / AVX2), as GCC 12 does not vectorize it.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <immintrin.h>
#include <type_traits>
#include <vector>

#include "activations.h"
#include "team.h"

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
        // float32 lines are read where they lie: copied to the stack first (as the narrow
        // types are widened there), the compiler vectorized this loop 4x worse
        float widened[NB];
        const float* __restrict wf;
        if constexpr (std::is_same<T, float>::value) {
            wf = wk;
        } else {
            widen(wk, widened);
            wf = widened;
        }
        for (int m = 0; m < M; m++) {
            const float xv = x[m * ldx + k];
            for (int j = 0; j < NB; j++) a[m][j] += xv * wf[j];
        }
    }
    std::memcpy(acc, a, sizeof(a));
}

enum Activation { NONE = 0, GELU = 1, GELU_RATIONAL = 2 };

// Rows multiplied together against a panel line. A step's rows (1-8: greedy, beams, a batch of
// pieces) go in one pass, the panel streamed from memory once, whatever registers they take.
// More rows (a prompt's prefill, ~200 rows, or a draft) are tiles of ROW_TILE rows against the
// panel widened to float32 once: M rows x NB columns of float32 accumulators must fit the
// vector registers, or the compiler keeps them on the stack and every multiply-add loads and
// stores them. AVX-512's 32 registers of 16 floats hold 8 rows (16 accumulators); AVX2's 16
// registers of 8 floats hold 3 rows of 32 or 6 of 16 (12 accumulators: half_panel below). In
// tiles of 8 on AVX2 a 200-row prefill took 1.6-3.9x MKL's float32 matmul (docs/benchmarks.md,
// "A prompt's prefill in register tiles").
#define STEP_ROWS 8
#if defined(__AVX512F__)
#define ROW_TILE 8
#else
#define ROW_TILE 6
#endif

template <typename T>
static void tile(int rows, const float* x, long ldx, const T* w, long K, float* acc) {
    switch (rows) {
        case 1: panel<T, 1>(x, ldx, w, K, acc); break;
        case 2: panel<T, 2>(x, ldx, w, K, acc); break;
        case 3: panel<T, 3>(x, ldx, w, K, acc); break;
        case 4: panel<T, 4>(x, ldx, w, K, acc); break;
        case 5: panel<T, 5>(x, ldx, w, K, acc); break;
        case 6: panel<T, 6>(x, ldx, w, K, acc); break;
        case 7: panel<T, 7>(x, ldx, w, K, acc); break;
        default: panel<T, 8>(x, ldx, w, K, acc); break;
    }
}

// AVX2's tile: ROW_TILE (6) rows against half a widened panel, 16 columns: 6 x 2 vectors of 8
// accumulators, 12 of the 16 registers as 3 rows x 32 columns are, but each line of weights
// loaded from the cache serves 6 rows instead of 3 (MKL's float32 kernel is 6 x 16 too). The
// same sums as panel<float, M> (each output k = 0..K-1 in order, the same multiply-adds),
// written with GCC's vector types: left to itself GCC vectorized this shape across the rows
// and ran it 20x slower.
typedef float lanes8 __attribute__((vector_size(32)));

template <int M>
static inline void half_panel(const float* __restrict x, long ldx, const float* __restrict w, long K,
                              float* __restrict acc) {
    lanes8 a[M][2];
    for (int m = 0; m < M; m++) a[m][0] = a[m][1] = lanes8{};
    for (long k = 0; k < K; k++) {
        lanes8 w0, w1;
        std::memcpy(&w0, w + k * NB, sizeof(w0));
        std::memcpy(&w1, w + k * NB + 8, sizeof(w1));
        for (int m = 0; m < M; m++) {
            const float xv = x[m * ldx + k];
            a[m][0] += xv * w0;
            a[m][1] += xv * w1;
        }
    }
    for (int m = 0; m < M; m++) std::memcpy(acc + m * NB, a[m], sizeof(a[m]));
}

// rows (up to ROW_TILE) of a prompt against a panel widened to float32
static void widened_tile(int rows, const float* x, long ldx, const float* w, long K, float* acc) {
#if defined(__AVX512F__)
    tile<float>(rows, x, ldx, w, K, acc);
#else
    for (int j0 = 0; j0 < NB; j0 += 16) {
        switch (rows) {
            case 1: half_panel<1>(x, ldx, w + j0, K, acc + j0); break;
            case 2: half_panel<2>(x, ldx, w + j0, K, acc + j0); break;
            case 3: half_panel<3>(x, ldx, w + j0, K, acc + j0); break;
            case 4: half_panel<4>(x, ldx, w + j0, K, acc + j0); break;
            case 5: half_panel<5>(x, ldx, w + j0, K, acc + j0); break;
            default: half_panel<6>(x, ldx, w + j0, K, acc + j0); break;
        }
    }
#endif
}

// A call's arguments, and one work item of it: a group of panels (team.h).
template <typename T>
struct Rows {
    const float* x; long M, ldx; const T* w; long K, N; const float* scale; const float* bias;
    float* out; long ldo; int act; long group;

    // The rows m0..m0+rows-1 of panel p, from their accumulators: scale, bias, activation.
    void write(long p, long m0, int rows, const float* acc) const {
        const long n0 = p * NB, nn = (N - n0) < NB ? (N - n0) : NB;
        for (int m = 0; m < rows; m++) {
            float* o = out + (m0 + m) * ldo + n0;
            const float* a = acc + m * NB;
            for (long j = 0; j < nn; j++) {
                float v = a[j];
                if (scale) v *= scale[n0 + j];
                if (bias) v += bias[n0 + j];
                o[j] = v;
            }
            // in a loop of its own, so that the rational one vectorizes
            if (act == GELU)
                for (long j = 0; j < nn; j++) o[j] = gelu(o[j]);
            else if (act == GELU_RATIONAL)
                for (long j = 0; j < nn; j++) o[j] = gelu_rational(o[j]);
        }
    }

    static void item(void* context, long g) {
        const Rows& c = *static_cast<const Rows*>(context);
        const long panels = (c.N + NB - 1) / NB;
        float acc[STEP_ROWS * NB];
        for (long p = g * c.group; p < (g + 1) * c.group && p < panels; p++) {
            const T* wp = c.w + p * c.K * NB;
            if (c.M <= STEP_ROWS) {  // a step: the panel streamed from memory once, as it is
                tile<T>((int)c.M, c.x, c.ldx, wp, c.K, acc);
                c.write(p, 0, (int)c.M, acc);
                continue;
            }
            // A prompt or a draft: the panel widened to float32 once, then each tile of rows
            // reads it from the cache. The same float32 weights and the same sums in the same
            // order: a row's numbers do not depend on the tiling.
            thread_local std::vector<float> widened;  // per thread: the team's threads share panels
            if (widened.size() < (size_t)c.K * NB) widened.resize((size_t)c.K * NB);
            float* __restrict buffer = widened.data();  // the thread-local looked up once
            for (long k = 0; k < c.K; k++) widen(wp + k * NB, buffer + k * NB);
            for (long m0 = 0; m0 < c.M; m0 += ROW_TILE) {
                const int rows = (c.M - m0) < ROW_TILE ? (int)(c.M - m0) : ROW_TILE;
                widened_tile(rows, c.x + m0 * c.ldx, c.ldx, buffer, c.K, acc);
                c.write(p, m0, rows, acc);
            }
        }
    }
};

// Panels per work item: ~64 KB of weights, enough work to be worth a claim (an atomic
// shared by the threads) and small enough that a late helper still gets a share. A step
// streams its weights (the claims per panel measured slower for 5 rows); a prompt's tiles
// are work enough in one panel.
template <typename T>
static long panel_group(long K, long M) {
    const long bytes = K * NB * (long)sizeof(T);
    return (M > STEP_ROWS || bytes >= 65536) ? 1 : 65536 / bytes;
}

// Every row against each panel while the panel is in the cache: the weights are read from
// memory once per call, however many rows.
template <typename T>
static void matmul(const float* x, long M, long ldx, const T* w, long K, long N, const float* scale,
                   const float* bias, float* out, long ldo, int act, int threads) {
    if (M <= 0) return;  // no rows (word timing asks for the logits of no position): nothing to read
    Rows<T> call{x, M, ldx, w, K, N, scale, bias, out, ldo, act, panel_group<T>(K, M)};
    const long panels = (N + NB - 1) / NB;
    team::run((panels + call.group - 1) / call.group, &Rows<T>::item, &call, threads);
}

extern "C" {
int panel_width() { return NB; }

// act: 0 none, 1 gelu on every output (the MLP's hidden layer, one pass less), 2 the same
// gelu with a rational erf (gelu_rational)
void matmul_f16(const float* x, long M, long ldx, const _Float16* w, long K, long N,
                const float* scale, const float* bias, float* out, long ldo, int act, int threads) {
    matmul<_Float16>(x, M, ldx, w, K, N, scale, bias, out, ldo, act, threads);
}

void matmul_i8(const float* x, long M, long ldx, const int8_t* w, long K, long N,
               const float* scale, const float* bias, float* out, long ldo, int act, int threads) {
    matmul<int8_t>(x, M, ldx, w, K, N, scale, bias, out, ldo, act, threads);
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

// The scores of one head, S[m, t] = sum_d qs[m, d] * kt[d, t] for t < L, the sum over d in
// order from 0 (the panel's order, so the same numbers as panel<T, M> over these lines):
// kt's D lines are read once, front to back. (A panel over t read them as D streams Lp
// apart, 64 bytes from each in turn: with head_values64, a step's four layers of tiny.en's
// K/V, read from memory, take 0.73-0.75x that time in float16 and 0.81-0.83x in float32 on
// one thread of an AVX2 EPYC; docs/benchmarks.md.)
template <typename T, int M>
static void head_scores(const float* qs, long D, const T* kt, long L, long Lp, float* S) {
    const long Lc = (L + NB - 1) / NB * NB;  // whole panels' width (<= Lp)
    for (int m = 0; m < M; m++)
        for (long t = 0; t < Lc; t++) S[m * Lp + t] = 0.0f;
    for (long d = 0; d < D; d++) {
        const T* __restrict line = kt + d * Lp;
        float qd[M];
        for (int m = 0; m < M; m++) qd[m] = qs[m * D + d];
        for (long t0 = 0; t0 < Lc; t0 += NB) {
            __builtin_prefetch(line + t0 + PREFETCH * NB);
            float wf[NB];
            widen(line + t0, wf);
            for (int m = 0; m < M; m++) {
                float* __restrict s = S + m * Lp + t0;
                for (int j = 0; j < NB; j++) s[j] += qd[m] * wf[j];
            }
        }
    }
}

// The weighted values of one head for Whisper's head size (64), acc[m, :] = sum_t S[m, t] *
// v[t, :], t in order from 0 (the panel's order, the same numbers): v's L rows are read once,
// front to back, where two panels of 32 columns read each row's halves 128 bytes apart.
template <typename T, int M>
static void head_values64(const float* S, long Lp, const T* v, long L, float* acc) {
    float a[M][64];
    for (int m = 0; m < M; m++)
        for (int j = 0; j < 64; j++) a[m][j] = 0.0f;
    for (long t = 0; t < L; t++) {
        const T* __restrict row = v + t * 64;
        __builtin_prefetch(row + PREFETCH * 64);
        float wf[64];
        widen(row, wf);
        widen(row + NB, wf + NB);
        for (int m = 0; m < M; m++) {
            const float p = S[m * Lp + t];
            for (int j = 0; j < 64; j++) a[m][j] += p * wf[j];
        }
    }
    std::memcpy(acc, a, sizeof(a));
}

template <typename T, int M>
static void attend_head(const float* q, long H, long D, const T* kt, const T* v, long L, long Lp,
                        float scale, float* out, float* S) {
    // q rows for this head, scaled: [M, D]
    float qs[M * 256];
    for (int r = 0; r < M; r++)
        for (long d = 0; d < D; d++) qs[r * D + d] = q[r * H * D + d] * scale;
    head_scores<T, M>(qs, D, kt, L, Lp, S);
    float inv[M];
    for (int r = 0; r < M; r++) {
        float* s = S + r * Lp;
        float m = s[0];
        for (long t = 1; t < L; t++) m = s[t] > m ? s[t] : m;
        float sum;
        exp_shifted(s, L, m, &sum);
        inv[r] = 1.0f / sum;
    }
    if (D == 64) {  // Whisper's head size, in every model
        float acc[M * 64];
        head_values64<T, M>(S, Lp, v, L, acc);
        for (int r = 0; r < M; r++)
            for (int j = 0; j < 64; j++) out[r * H * D + j] = acc[r * 64 + j] * inv[r];
        return;
    }
    float acc[M * NB];
    for (long d0 = 0; d0 < D; d0 += NB) {  // out: [M, D] = p @ v
        panel<T, M>(S, Lp, v + d0, L, acc, D);
        for (int r = 0; r < M; r++)
            for (int j = 0; j < NB; j++) out[r * H * D + d0 + j] = acc[r * NB + j] * inv[r];
    }
}

// A call's arguments; a work item is one head (for every row).
template <typename T>
struct Attend {
    const float* q; long R, H, D; const T* kt; const T* v; long L, Lp; float scale; float* out;

    static void item(void* context, long h) {
        const Attend& c = *static_cast<const Attend*>(context);
        thread_local std::vector<float> scores;
        if ((long)scores.size() < 8 * c.Lp) scores.resize(8 * c.Lp);
        float* S = scores.data();
        const T* kth = c.kt + h * c.D * c.Lp;
        const T* vh = c.v + h * c.L * c.D;
        for (long r0 = 0; r0 < c.R; r0 += 8) {
            const long mm = (c.R - r0) < 8 ? (c.R - r0) : 8;
            const float* qh = c.q + (r0 * c.H + h) * c.D;
            float* oh = c.out + (r0 * c.H + h) * c.D;
            const long H = c.H, D = c.D, L = c.L, Lp = c.Lp;
            switch (mm) {
                case 1: attend_head<T, 1>(qh, H, D, kth, vh, L, Lp, c.scale, oh, S); break;
                case 2: attend_head<T, 2>(qh, H, D, kth, vh, L, Lp, c.scale, oh, S); break;
                case 3: attend_head<T, 3>(qh, H, D, kth, vh, L, Lp, c.scale, oh, S); break;
                case 4: attend_head<T, 4>(qh, H, D, kth, vh, L, Lp, c.scale, oh, S); break;
                case 5: attend_head<T, 5>(qh, H, D, kth, vh, L, Lp, c.scale, oh, S); break;
                case 6: attend_head<T, 6>(qh, H, D, kth, vh, L, Lp, c.scale, oh, S); break;
                case 7: attend_head<T, 7>(qh, H, D, kth, vh, L, Lp, c.scale, oh, S); break;
                default: attend_head<T, 8>(qh, H, D, kth, vh, L, Lp, c.scale, oh, S); break;
            }
        }
    }
};

template <typename T>
static void attend(const float* q, long R, long H, long D, const T* kt, const T* v, long L, long Lp,
                   float scale, float* out, int threads) {
    Attend<T> call{q, R, H, D, kt, v, L, Lp, scale, out};
    team::run(H, &Attend<T>::item, &call, threads);
}

// Cross-attention of a batch of pieces (batched.py): row r reads its own audio's K/V
// (kts[r], vs[r], laid out as above). A work item is one (row, head): attend_head with one
// row, the very computation `attend` makes for that row alone, so a row's numbers are
// those of its piece decoded alone; one call per layer instead of one per row.
template <typename T>
struct AttendRows {
    const float* q; long H, D; const T* const* kts; const T* const* vs; long L, Lp; float scale; float* out;

    static void item(void* context, long rh) {
        const AttendRows& c = *static_cast<const AttendRows*>(context);
        const long r = rh / c.H, h = rh % c.H;
        thread_local std::vector<float> scores;
        if ((long)scores.size() < 8 * c.Lp) scores.resize(8 * c.Lp);
        attend_head<T, 1>(c.q + (r * c.H + h) * c.D, c.H, c.D, c.kts[r] + h * c.D * c.Lp,
                          c.vs[r] + h * c.L * c.D, c.L, c.Lp, c.scale, c.out + (r * c.H + h) * c.D,
                          scores.data());
    }
};

// ---------------------------------------------------------------------------------------
// Self-attention of a decoder step: each of R beams has one new query row per head and its
// own cache of L positions (the new one included).
//   out[b, h, :] = softmax_t(q[b, h, :] . K[b, h, t, :] * scale) @ V[b, h, t, :],  t < L
// q, out: [R, H, D]; K, V: [R, H, Lmax, D] (the static cache's buffers). A work item is one
// (beam, head). D must be a multiple of 16 (Whisper's head size is 64).
struct SelfAttend {
    const float* q; long H, D; const float* k; const float* v; long L, Lmax; float scale; float* out;

    static void item(void* context, long bh) {
        const SelfAttend& c = *static_cast<const SelfAttend*>(context);
        const long b = bh / c.H, h = bh % c.H, D = c.D;
        const float* qv = c.q + (b * c.H + h) * D;
        const float* kh = c.k + bh * c.Lmax * D;
        const float* vh = c.v + bh * c.Lmax * D;
        thread_local std::vector<float> scores;
        if ((long)scores.size() < c.L + 16) scores.resize(c.L + 16);
        float* s = scores.data();
        float m = -INFINITY;
        for (long t = 0; t < c.L; t++) {
            float part[16] = {0};  // 16 lanes summed in order, then across: vectorizes
            for (long d0 = 0; d0 < D; d0 += 16)
                for (int j = 0; j < 16; j++) part[j] += qv[d0 + j] * kh[t * D + d0 + j];
            float dot = 0.0f;
            for (int j = 0; j < 16; j++) dot += part[j];
            s[t] = dot * c.scale;
            m = s[t] > m ? s[t] : m;
        }
        float sum;
        exp_shifted(s, c.L, m, &sum);
        float* o = c.out + (b * c.H + h) * D;
        for (long d = 0; d < D; d++) o[d] = 0.0f;
        for (long t = 0; t < c.L; t++)
            for (long d = 0; d < D; d++) o[d] += s[t] * vh[t * D + d];
        const float inv = 1.0f / sum;
        for (long d = 0; d < D; d++) o[d] *= inv;
    }
};

extern "C" {
void attend_f32(const float* q, long R, long H, long D, const float* kt, const float* v, long L, long Lp,
                float scale, float* out, int threads) {
    attend<float>(q, R, H, D, kt, v, L, Lp, scale, out, threads);
}

void attend_f16(const float* q, long R, long H, long D, const _Float16* kt, const _Float16* v, long L,
                long Lp, float scale, float* out, int threads) {
    attend<_Float16>(q, R, H, D, kt, v, L, Lp, scale, out, threads);
}

void attend_rows_f32(const float* q, long R, long H, long D, const float* const* kts,
                     const float* const* vs, long L, long Lp, float scale, float* out, int threads) {
    AttendRows<float> call{q, H, D, kts, vs, L, Lp, scale, out};
    team::run(R * H, &AttendRows<float>::item, &call, threads);
}

void attend_rows_f16(const float* q, long R, long H, long D, const _Float16* const* kts,
                     const _Float16* const* vs, long L, long Lp, float scale, float* out, int threads) {
    AttendRows<_Float16> call{q, H, D, kts, vs, L, Lp, scale, out};
    team::run(R * H, &AttendRows<_Float16>::item, &call, threads);
}

void self_attend_f32(const float* q, long R, long H, long D, const float* k, const float* v, long L,
                     long Lmax, float scale, float* out, int threads) {
    SelfAttend call{q, H, D, k, v, L, Lmax, scale, out};
    team::run(R * H, &SelfAttend::item, &call, threads);
}
}
