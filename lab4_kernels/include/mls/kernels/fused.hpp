#pragma once
/// Lab 4: CPU kernels the later labs need, each one pass over memory where it can be.
///
/// Conventions (llm.c style): raw pointers, explicit sizes, a shape comment per buffer;
/// rows are contiguous (row-major), float32. The kernels trust their arguments; shapes are
/// checked by the callers (lab 1 ops). Backward kernels ACCUMULATE into their gradients (+=),
/// so several uses of one tensor add up; zero the gradients first.
///
/// Every one of them is memory-bound (slides 002: arithmetic intensity = ops / bytes), so the
/// figure of merit is bandwidth: bytes that must move / time, compared with memcpy.
namespace mls::kernels {

/// E = D + (A + B) * C elementwise, in one pass: 4 loads + 1 store per 3 flops
/// (arithmetic intensity 3/20 flop/byte, against 1/12 for three separate add/mul/add passes,
/// slides 002). All arrays: (n,). E may alias any input.
void fused_add_mul_add(long n, const float* A, const float* B, const float* C, const float* D,
                       float* E);

/// Row-wise softmax: out[r, :] = exp(x[r, :] - max) / sum(exp(x[r, :] - max)).
/// inp, out: (rows, cols); out may alias inp. Hint: max, then exp and sum, then scale:
/// three passes over one row, which stays in L1/L2.
void softmax_forward(float* out, const float* inp, long rows, long cols);

/// Layer normalisation over the last dimension:
///   mean[r] = mean(x[r, :]), rstd[r] = 1 / sqrt(var(x[r, :]) + eps)   (biased variance)
///   out[r, c] = (x[r, c] - mean[r]) * rstd[r] * weight[c] + bias[c]
/// inp, out: (rows, cols); weight, bias: (cols,); mean, rstd: (rows,), saved for backward.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, long rows, long cols, float eps);

/// Backward of layernorm_forward; accumulates (+=) into dinp (rows, cols), dweight (cols,) and
/// dbias (cols,). With norm = (x - mean) * rstd and dnorm = dout * weight:
///   dbias += dout, dweight += dout * norm,
///   dinp  += rstd * (dnorm - mean_c(dnorm) - norm * mean_c(dnorm * norm)).
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, long rows, long cols);

/// GELU, tanh approximation: out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
/// inp, out: (n,); out may alias inp.
void gelu_forward(float* out, const float* inp, long n);

/// GELU of a row-broadcast bias add: out[r, c] = gelu(inp[r, c] + bias[c]) (a linear layer's
/// epilogue). inp, out: (rows, cols); bias: (cols,); out may alias inp.
void bias_gelu_forward(float* out, const float* inp, const float* bias, long rows, long cols);
/// Backward of gelu_forward: dinp += dout * gelu'(x). All (n,).
void gelu_backward(float* dinp, const float* inp, const float* dout, long n);

/// exp(x) for float32 with a few ulp of error, written so the compiler vectorises loops over it
/// (std::exp does not vectorise without -ffast-math). Exposed for the tests.
float fast_expf(float x);

}  // namespace mls::kernels
