// A fallback window's sampled token, as torch draws it (sampling.py), in one call.
//
// torch.multinomial(softmax(logits / T), 1) on a CPU is argmax_i p_i / q_i with
// q_i = -log1p(-u_i) and one double uniform u_i per logit from the generator's mt19937. The
// exact mode must take those very uniforms (its draws are openai-whisper's, seed for seed), so
// this file runs torch's mt19937 on a copy of the generator's state, word for word, and hands
// the state back. What it computes differently is the arithmetic around the uniforms:
//
// - The weights e_i = exp(s_i - max s) (s = logits / T) come from a polynomial that
//   vectorizes, within a few float ulps of torch's softmax up to its common factor, which no
//   argmax sees.
// - The log is taken only where it could matter. q_i >= u_i, so p_i / q_i <= p_i / u_i: an
//   element whose e_i / u_i falls below the best ratio found so far cannot win, and for most
//   of the 51,864 that test alone (a multiply and a compare) settles it.
// - The few candidates left get torch's q in double (libm's log1p) and their ratio.
//
// Where the best two ratios lie within 1e-3 of each other, the rounding of torch's own
// arithmetic could decide between them, so the call says so (returns 1) and sampling.py draws
// that step with torch's operators from the untouched generator instead: about one draw in a
// thousand. A uniform of exactly 0 (q = 0) is left to torch the same way.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

namespace {

constexpr int MT_N = 624;
constexpr int MT_M = 397;

// The head of torch's CPUGeneratorImplState (ATen/CPUGeneratorImpl.cpp, the legacy pod that
// Generator.get_state() returns as bytes): the mt19937 words are stored as uint64.
struct TorchGeneratorState {
    uint64_t initial_seed;
    int32_t left;
    int32_t seeded;
    uint64_t next;
    uint64_t state[MT_N];
};
static_assert(sizeof(TorchGeneratorState) == 24 + 8 * MT_N);

// at::mt19937 (ATen/core/MT19937RNGEngine.h): the same twist and tempering, and the same
// left/next bookkeeping, so the state handed back is the one torch would have.
struct Mt19937 {
    uint32_t s[MT_N];
    int32_t left;
    uint32_t next;

    static uint32_t twist(uint32_t u, uint32_t v) {
        const uint32_t mixed = (u & 0x80000000u) | (v & 0x7fffffffu);
        return (mixed >> 1) ^ ((v & 1u) ? 0x9908b0dfu : 0u);
    }

    void next_state() {
        for (int i = 0; i < MT_N - MT_M; i++) s[i] = s[i + MT_M] ^ twist(s[i], s[i + 1]);
        for (int i = MT_N - MT_M; i < MT_N - 1; i++) s[i] = s[i + MT_M - MT_N] ^ twist(s[i], s[i + 1]);
        s[MT_N - 1] = s[MT_M - 1] ^ twist(s[MT_N - 1], s[0]);
    }

    // `count` consecutive outputs of torch's operator(): the state's words from `next` on,
    // tempered, twisting whenever torch's call would (when --left reaches 0)
    void generate(uint32_t* out, long count) {
        while (count > 0) {
            if (left == 1) {  // torch's next call twists first, then reads word 0
                next_state();
                left = MT_N + 1;
                next = 0;
            }
            const long take = std::min<long>(count, left - 1);
            const uint32_t* __restrict words = s + next;
            for (long k = 0; k < take; k++) {
                uint32_t y = words[k];
                y ^= y >> 11;
                y ^= (y << 7) & 0x9d2c5680u;
                y ^= (y << 15) & 0xefc60000u;
                y ^= y >> 18;
                out[k] = y;
            }
            out += take;
            count -= take;
            left -= (int32_t)take;
            next += (uint32_t)take;
        }
    }
};

// torch's uniform double from two words: random64() = first << 32 | second, its low 53 bits
// times 2^-53
inline double uniform_double(uint32_t first, uint32_t second) {
    const uint64_t bits = ((uint64_t)first << 32 | second) & ((1ull << 53) - 1);
    return (double)bits * 0x1p-53;
}

// The same uniform in float, never above it by more than float rounding: the first word's
// 21 bits and the second's top 24 (what is dropped only lowers it). Zero only below 2^-45.
inline float uniform_below(uint32_t first, uint32_t second) {
    return (float)(first & 0x1fffffu) * 0x1p-21f + (float)(second >> 8) * 0x1p-45f;
}

constexpr float ROUNDING = 12582912.0f;  // 1.5 * 2^23: adding and taking it away rounds to an integer

// exp(x) for x <= 0, within 2 float ulps (Cephes' expf in a form the compiler vectorizes);
// 0 below -87, where torch's softmax gives 0 or a subnormal: a weight no draw picks over the
// largest logit's, whose weight is 1.
inline float exp_nonpositive(float x) {
    const bool vanishes = x < -87.0f;
    x = vanishes ? -87.0f : x;
    const float n = (x * 1.44269504088896341f + ROUNDING) - ROUNDING;
    const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const float power = std::bit_cast<float>(((int32_t)n + 127) << 23);
    return vanishes ? 0.0f : p * power;
}

constexpr float CLOSE = 1e-3f;  // two ratios this close (relative): torch's rounding decides
constexpr long BLOCK = 64;     // elements tested together before any is looked at one by one

// One row: the drawn index, or -1 where torch's own arithmetic must decide (above).
long draw_row(const float* logits, long n, float temperature, const uint32_t* words,
              std::vector<float>& weight) {
    // s_i = logits_i / T into `weight`, and the largest s (omp simd: a float maximum the
    // compiler may otherwise not reorder into vectors; -fopenmp is on for team.cpp)
    float* __restrict e = weight.data();
    float largest = -INFINITY;
    int not_a_number = 0;
#pragma omp simd reduction(max : largest) reduction(| : not_a_number)
    for (long i = 0; i < n; i++) {
        const float s = logits[i] / temperature;
        e[i] = s;
        largest = s > largest ? s : largest;
        not_a_number |= s != s;
    }
    if (not_a_number || !std::isfinite(largest)) return -1;
    long top = 0;
    while (e[top] != largest) top++;
    for (long k = 0; k < n; k++) e[k] = exp_nonpositive(e[k] - largest);

    auto ratio = [&](long i) -> float {
        const double u = uniform_double(words[2 * i], words[2 * i + 1]);
        const float q = (float)-std::log1p(-u);
        return e[i] / q;
    };
    if (uniform_below(words[2 * top], words[2 * top + 1]) == 0.0f) return -1;
    long best = top;
    float best_ratio = ratio(top), second_ratio = 0.0f;
    for (long start = 0; start < n; start += BLOCK) {
        const long end = std::min(n, start + BLOCK);
        // the bound e_i / u_i >= best ratio, as e_i - bound * u_i >= 0, over the block at once
        const float bound = best_ratio * (1.0f - CLOSE);
        int any = 0;
#pragma omp simd reduction(| : any)
        for (long k = start; k < end; k++)
            any |= e[k] - bound * uniform_below(words[2 * k], words[2 * k + 1]) >= 0.0f;
        if (!any) continue;
        for (long i = start; i < end; i++) {
            const float u_low = uniform_below(words[2 * i], words[2 * i + 1]);
            if (e[i] - bound * u_low < 0.0f || i == top) continue;
            if (u_low == 0.0f) return -1;
            const float r = ratio(i);
            if (r > best_ratio) {
                second_ratio = best_ratio;
                best_ratio = r;
                best = i;
            } else if (r > second_ratio) {
                second_ratio = r;
            }
        }
    }
    if (!(best_ratio < INFINITY) || second_ratio >= best_ratio * (1.0f - CLOSE)) return -1;
    return best;
}

}  // namespace

extern "C" {

// Draws one index per row of logits [rows, n] at `temperature` into picks, from the generator
// state `state` (the bytes of torch's Generator.get_state(), rewritten to where torch's draw
// would leave it). Returns 0, or 1 where a row is left to torch: then `state` is unchanged.
int draw_rows(const float* logits, long rows, long n, float temperature, void* state, long* picks) {
    TorchGeneratorState* torch_state = static_cast<TorchGeneratorState*>(state);
    Mt19937 mt;
    for (int i = 0; i < MT_N; i++) mt.s[i] = (uint32_t)torch_state->state[i];
    mt.left = torch_state->left;
    mt.next = (uint32_t)torch_state->next;
    if (mt.left < 1 || mt.left > MT_N || mt.next > MT_N) return 1;

    thread_local std::vector<uint32_t> words;
    thread_local std::vector<float> weight;
    words.resize(2 * n);
    weight.resize(n);
    for (long row = 0; row < rows; row++) {
        mt.generate(words.data(), 2 * n);
        const long pick = draw_row(logits + row * n, n, temperature, words.data(), weight);
        if (pick < 0) return 1;
        picks[row] = pick;
    }
    for (int i = 0; i < MT_N; i++) torch_state->state[i] = mt.s[i];
    torch_state->left = mt.left;
    torch_state->next = mt.next;
    return 0;
}
}
