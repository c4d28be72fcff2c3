// FLOP counts of the benchmarked blocks (multiply-add = 2; softmax, norms, biases and
// residuals not counted), B sequences of N tokens of width D:
//   MultiHeadAttention:  B · (8·N·D² + 4·N²·D)   (q, k, v, o projections 4 · 2·N·D²;
//                                                 scores q·kᵀ 2·N²·D; A·v 2·N²·D)
//   EncoderBlock:        MultiHeadAttention + B · 4·N·D·F   (the two feed-forward layers)
#pragma once

constexpr double mha_flops(double B, double N, double D) { return B * (8 * N * D * D + 4 * N * N * D); }
constexpr double encoder_flops(double B, double N, double D, double F) { return mha_flops(B, N, D) + B * 4 * N * D * F; }
