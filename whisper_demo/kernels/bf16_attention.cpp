// The encoder's self-attention in bfloat16, fused: scores, softmax and the weighted sum of
// values for a block of queries at a time, with AVX512_BF16 dot products (vdpbf16ps).
//
//   out[i, h*64 + d] = sum_j softmax_j(scale * q_i . k_j) v[j, h*64 + d]     (one head h)
//
// q, k, v and out are [positions, heads * 64] bfloat16 rows (row strides given: q, k and v
// may be column slices of one fused projection). Why a kernel: PyTorch's bfloat16 softmax
// and its batched matmuls over 1500 x 1500 scores took most of the encoder's time, and the
// transposes between them cost copies. Here a block of queries keeps its scores (float32)
// and probabilities (bfloat16) in the core's L2, and nothing is copied but one repacking of
// each head's keys and values into the pair layout vdpbf16ps reads.
//
// Numerics: products of bfloat16 values summed in float32 (as oneDNN's bfloat16 matmul),
// the softmax in float32, its probabilities rounded to bfloat16 before the weighted sum,
// and the division by the softmax's sum applied to the float32 result.
// Built by whisper_demo/bf16_attention.py with the machine's compiler (-O3 -march=native).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <immintrin.h>
#include <vector>

#if defined(__AVX512BF16__) && defined(__AVX512F__)

#define HEAD_DIM 64
#ifndef QUERY_BLOCK
#define QUERY_BLOCK 32  // queries per task: 32 x 1504 float32 scores = 192 KB, in L2
#endif
#define KEY_CHUNK 32    // keys per score tile (two registers of 16)

typedef uint16_t bf16;

static inline __m512bh as_bh(__m512i v) { return (__m512bh)v; }

static inline __m512i pair_of(const bf16* p) {  // two bfloat16 values broadcast as one 32-bit lane
    uint32_t both;
    std::memcpy(&both, p, 4);
    return _mm512_set1_epi32((int)both);
}

// exp(x) for x <= 0 (a softmax's shifted scores): 2^n * p(r), r = x - n ln2 in [-ln2/2, ln2/2],
// p a degree-6 Taylor polynomial (relative error ~2e-7, far below bfloat16's 4e-3)
static inline __m512 exp_ps(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

// Keys of one head as [64/2][padded][2]: for each pair of dimensions, every key's two values
// side by side, so one register holds 16 keys' pairs. Keys past `positions` are zero. Key by
// key: each key's row is read once (a column walk would stream the projection 32 times).
static void pack_keys(const bf16* k, long ldk, long positions, long padded, bf16* packed) {
    uint32_t* pairs = (uint32_t*)packed;
    for (long j = 0; j < positions; j++) {
        uint32_t key[HEAD_DIM / 2];
        std::memcpy(key, k + j * ldk, sizeof(key));
        for (long dp = 0; dp < HEAD_DIM / 2; dp++) pairs[dp * padded + j] = key[dp];
    }
    for (long dp = 0; dp < HEAD_DIM / 2; dp++)
        std::memset(pairs + dp * padded + positions, 0, (padded - positions) * sizeof(uint32_t));
}

// Values of one head as [padded/2][64][2]: for each pair of keys, every dimension's two
// values side by side, so one register holds 16 dimensions' pairs. Keys past `positions` are zero.
static void pack_values(const bf16* v, long ldv, long positions, long padded, bf16* packed) {
    for (long jp = 0; jp < padded / 2; jp++) {
        bf16* row = packed + jp * HEAD_DIM * 2;
        for (int half = 0; half < 2; half++) {
            const long j = 2 * jp + half;
            for (int d = 0; d < HEAD_DIM; d++) row[2 * d + half] = j < positions ? v[j * ldv + d] : 0;
        }
    }
}

// scores[r][j] = q_r . k_j for R query rows and all padded keys
template <int R>
static void score_rows(const bf16* q, long ldq, const bf16* keys, long padded, float* scores) {
    for (long j = 0; j < padded; j += KEY_CHUNK) {
        __m512 acc[R][2];
        for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
        for (int dp = 0; dp < HEAD_DIM / 2; dp++) {
            const bf16* kp = keys + (dp * padded + j) * 2;
            const __m512bh k0 = as_bh(_mm512_loadu_si512(kp));
            const __m512bh k1 = as_bh(_mm512_loadu_si512(kp + 32));
            for (int r = 0; r < R; r++) {
                const __m512bh qb = as_bh(pair_of(q + r * ldq + 2 * dp));
                acc[r][0] = _mm512_dpbf16_ps(acc[r][0], qb, k0);
                acc[r][1] = _mm512_dpbf16_ps(acc[r][1], qb, k1);
            }
        }
        for (int r = 0; r < R; r++) {
            _mm512_storeu_ps(scores + r * padded + j, acc[r][0]);
            _mm512_storeu_ps(scores + r * padded + j + 16, acc[r][1]);
        }
    }
}

// One row: probabilities exp(scale * (s - max)) as bfloat16 (zero past `positions`); returns
// the reciprocal of their sum (summed as rounded, so that the weights used sum to one)
static float softmax_row(const float* s, long positions, long padded, float scale, bf16* p) {
    __m512 top = _mm512_set1_ps(-INFINITY);
    long j = 0;
    for (; j + 16 <= positions; j += 16) top = _mm512_max_ps(top, _mm512_loadu_ps(s + j));
    float row_max = _mm512_reduce_max_ps(top);
    for (; j < positions; j++) row_max = std::max(row_max, s[j]);
    const __m512 shift = _mm512_set1_ps(row_max), scale_v = _mm512_set1_ps(scale);
    __m512 total = _mm512_setzero_ps();
    for (j = 0; j < padded; j += 16) {
        const __mmask16 live = j + 16 <= positions ? (__mmask16)0xFFFF
                               : j >= positions ? (__mmask16)0 : (__mmask16)((1u << (positions - j)) - 1);
        __m512 e = exp_ps(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(s + j), shift), scale_v));
        e = _mm512_maskz_mov_ps(live, e);
        const __m256bh rounded = _mm512_cvtneps_pbh(e);
        _mm256_storeu_si256((__m256i*)(p + j), (__m256i)rounded);
        // the sum of the rounded weights: widen bfloat16 back (a 16-bit shift)
        total = _mm512_add_ps(total, _mm512_castsi512_ps(_mm512_slli_epi32(
                                         _mm512_cvtepu16_epi32((__m256i)rounded), 16)));
    }
    return 1.0f / _mm512_reduce_add_ps(total);
}

// out rows = (p rows . values) * inverse sums, for R rows, rounded to bfloat16
template <int R>
static void weigh_rows(const bf16* p, long padded, const bf16* values, const float* inverse, bf16* out, long ldo) {
    __m512 acc[R][4];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < 4; c++) acc[r][c] = _mm512_setzero_ps();
    for (long jp = 0; jp < padded / 2; jp++) {
        const bf16* vp = values + jp * HEAD_DIM * 2;
        __m512bh vv[4];
        for (int c = 0; c < 4; c++) vv[c] = as_bh(_mm512_loadu_si512(vp + 32 * c));
        for (int r = 0; r < R; r++) {
            const __m512bh pb = as_bh(pair_of(p + r * padded + 2 * jp));
            for (int c = 0; c < 4; c++) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], pb, vv[c]);
        }
    }
    for (int r = 0; r < R; r++) {
        const __m512 inv = _mm512_set1_ps(inverse[r]);
        for (int c = 0; c < 4; c++)
            _mm256_storeu_si256((__m256i*)(out + r * ldo + 16 * c),
                                (__m256i)_mm512_cvtneps_pbh(_mm512_mul_ps(acc[r][c], inv)));
    }
}

template <int R>
static void score_dispatch(int rows, const bf16* q, long ldq, const bf16* keys, long padded, float* scores) {
    if constexpr (R > 0) {
        if (rows == R) return score_rows<R>(q, ldq, keys, padded, scores);
        score_dispatch<R - 1>(rows, q, ldq, keys, padded, scores);
    }
}

template <int R>
static void weigh_dispatch(int rows, const bf16* p, long padded, const bf16* values, const float* inverse,
                           bf16* out, long ldo) {
    if constexpr (R > 0) {
        if (rows == R) return weigh_rows<R>(p, padded, values, inverse, out, ldo);
        weigh_dispatch<R - 1>(rows, p, padded, values, inverse, out, ldo);
    }
}

extern "C" int bf16_attention_head_dim() { return HEAD_DIM; }

extern "C" void bf16_attention(const bf16* q, long ldq, const bf16* k, long ldk, const bf16* v, long ldv,
                               long positions, long heads, float scale, bf16* out, long ldo, int threads) {
    const long padded = (positions + KEY_CHUNK - 1) / KEY_CHUNK * KEY_CHUNK;
    std::vector<bf16> keys(heads * padded * HEAD_DIM), values(heads * padded * HEAD_DIM);
    const long blocks = (positions + QUERY_BLOCK - 1) / QUERY_BLOCK;
#pragma omp parallel num_threads(threads)
    {
#pragma omp for schedule(static)
        for (long h = 0; h < heads; h++) {
            pack_keys(k + h * HEAD_DIM, ldk, positions, padded, keys.data() + h * padded * HEAD_DIM);
            pack_values(v + h * HEAD_DIM, ldv, positions, padded, values.data() + h * padded * HEAD_DIM);
        }
        std::vector<float> scores(QUERY_BLOCK * padded), inverse(QUERY_BLOCK);
        std::vector<bf16> probabilities(QUERY_BLOCK * padded);
#pragma omp for schedule(dynamic, 1)
        for (long task = 0; task < heads * blocks; task++) {
            const long h = task / blocks, first = task % blocks * QUERY_BLOCK;
            const long rows = std::min<long>(QUERY_BLOCK, positions - first);
            const bf16* head_keys = keys.data() + h * padded * HEAD_DIM;
            const bf16* head_values = values.data() + h * padded * HEAD_DIM;
            for (long r = 0; r < rows; r += 8)
                score_dispatch<8>((int)std::min<long>(8, rows - r), q + (first + r) * ldq + h * HEAD_DIM, ldq,
                                  head_keys, padded, scores.data() + r * padded);
            for (long r = 0; r < rows; r++)
                inverse[r] = softmax_row(scores.data() + r * padded, positions, padded, scale,
                                         probabilities.data() + r * padded);
            for (long r = 0; r < rows; r += 4)
                weigh_dispatch<4>((int)std::min<long>(4, rows - r), probabilities.data() + r * padded, padded,
                                  head_values, inverse.data() + r, out + (first + r) * ldo + h * HEAD_DIM, ldo);
        }
    }
}

#else
#error "bf16_attention.cpp needs AVX512_BF16 (-march=native on a CPU with avx512_bf16)"
#endif
