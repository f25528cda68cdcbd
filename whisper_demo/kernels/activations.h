// Activations fused into the kernels' outputs (matmul.cpp, quantize.cpp).
#pragma once

#include <cmath>

// torch.nn.functional.gelu (the erf form), for the MLP's hidden layer, with libm's erff:
// the exact mode's numbers (float16 weights, a step's few rows).
inline float gelu(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f)); }

// The same gelu with erf as a rational function (Eigen's and XLA's fast erf: odd degree 13
// over even degree 8 in x, exact to a few float32 ulps; 1.0 beyond |x| = 4): no libm call,
// so a row of outputs vectorizes. libm's erff, one value at a time, was half of a prompt's
// MLP matmul in the fast mode (docs/benchmarks.md); there the int8 weights are rounded by
// up to 1 part in 254, beside which the erf's error (at most 4.2e-7) is nothing.
inline float gelu_rational(float v) {
    float x = v * 0.70710678118654752f;
    x = x < -4.0f ? -4.0f : (x > 4.0f ? 4.0f : x);
    const float x2 = x * x;
    float p = x2 * -2.72614225801306e-10f + 2.77068142495902e-08f;
    p = x2 * p + -2.10102402082508e-06f;
    p = x2 * p + -5.69250639462346e-05f;
    p = x2 * p + -7.34990630326855e-04f;
    p = x2 * p + -2.95459980854025e-03f;
    p = x2 * p + -1.60960333262415e-02f;
    float q = x2 * -1.45660718464996e-05f + -2.13374055278905e-04f;
    q = x2 * q + -1.68282697438203e-03f;
    q = x2 * q + -7.37332916720468e-03f;
    q = x2 * q + -1.42647390514189e-02f;
    return 0.5f * v * (1.0f + x * p / q);
}
