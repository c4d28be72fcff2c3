// FLOP counts of the benchmarked blocks and models (multiply-add = 2; softmax, norms, biases,
// ReLU and residuals not counted), B sequences of N tokens of width D:
//   MultiHeadAttention:  B · (8·N·D² + 4·N²·D)   (q, k, v, o projections 4 · 2·N·D²;
//                                                 scores q·kᵀ 2·N²·D; A·v 2·N²·D)
//   EncoderBlock:        MultiHeadAttention + B · 4·N·D·F   (the two feed-forward layers)
//   MAB, Nq queries over Nk keys:  B · (6·Nq·D² + 4·Nk·D² + 4·Nq·Nk·D)   (q, o and fc over
//                        the query rows 3 · 2·Nq·D²; k, v over the key rows 2 · 2·Nk·D²;
//                        scores and mixing 4·Nq·Nk·D)
// Models, as written in SPEC (a folded attention, as PMA's with one seed, computes the same
// result with fewer FLOP: the count is the same for every path of one model):
//   PointerModel<In, D, H, F, Blocks>:  B · 2·N·In·D (proj) + Blocks · EncoderBlock
//                        + B · (2·D² + 2·N·D² + 2·N·D)   (pointer: q of the one query row,
//                        k of the N keys, scores)
//   SetTransformer<In, D, H, M, Out>:   B · 2·N·In·D (proj) + MAB(M over N) + MAB(N over M)
//                        (ISAB) + MAB(1 over N) (PMA) + B · 2·D·Out (head)
//   LanguageModel<V, L, D, H, F, Blocks>:  Blocks · EncoderBlock (N = L) + MAB(1 over L)
//                        (PMA) + B · 2·D·V (head; the embedding is a lookup)
#pragma once

constexpr double mha_flops(double B, double N, double D) { return B * (8 * N * D * D + 4 * N * N * D); }
constexpr double encoder_flops(double B, double N, double D, double F) { return mha_flops(B, N, D) + B * 4 * N * D * F; }
constexpr double sab_flops(double B, double N, double D) { return mha_flops(B, N, D) + B * 2 * N * D * D; }
constexpr double mab_flops(double B, double Nq, double Nk, double D) {
  return B * (6 * Nq * D * D + 4 * Nk * D * D + 4 * Nq * Nk * D);
}

constexpr double pointer_model_flops(double B, double N, double In, double D, double F, double Blocks) {
  return B * 2 * N * In * D + Blocks * encoder_flops(B, N, D, F) + B * (2 * D * D + 2 * N * D * D + 2 * N * D);
}
constexpr double set_transformer_flops(double B, double N, double In, double D, double M, double Out) {
  return B * 2 * N * In * D + mab_flops(B, M, N, D) + mab_flops(B, N, M, D) + mab_flops(B, 1, N, D) + B * 2 * D * Out;
}
constexpr double language_model_flops(double B, double V, double L, double D, double F, double Blocks) {
  return Blocks * encoder_flops(B, L, D, F) + mab_flops(B, 1, L, D) + B * 2 * D * V;
}
