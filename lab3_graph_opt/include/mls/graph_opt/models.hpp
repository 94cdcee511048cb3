#pragma once
/// The three example models of lab 3, built as inference programs with constant weights.
#include <cstdint>
#include <string>

#include "mls/graph_opt/ir.hpp"

namespace mls::graph_opt {

/// ResNet-style block: y = relu(bn2(conv2(relu(bn1(conv1(x))))) + x), plus a parallel 1x1->3x3
/// branch pair summed (for merge-convs): x [n, c, h, w], 3x3 convs with padding 1.
Program resnet_block(std::int64_t n = 2, std::int64_t c = 8, std::int64_t h = 16, std::int64_t w = 16,
                     std::uint64_t seed = 1);
/// Self-attention block: q, k, v = x Wq, x Wk, x Wv; softmax(q k^T / sqrt(d)) v Wo + x, then an
/// MLP with GELU; x [t, d].
Program attention_block(std::int64_t t = 64, std::int64_t d = 64, std::uint64_t seed = 2);
/// MLP: three layers relu(x W + b), with a redundant x*1 and a duplicated subexpression for
/// simplify/CSE; x [n, d].
Program mlp(std::int64_t n = 64, std::int64_t d = 128, std::uint64_t seed = 3);
/// A chain of `ops` elementwise ops over x [n]: ((x*a + b) relu ...) for the fusion benchmark.
Program elementwise_chain(std::int64_t n, int ops = 6);
/// The slides' E = D + (A + B) * C over four inputs of shape [n].
Program slides_expression(std::int64_t n);
/// Inception-style block (independent branches for the parallel executor): four branches over
/// x [n, c, h, w] of different widths, each conv followed by a bias and relu: a 1x1 conv to c
/// channels; a 1x1 to c/2 then a 3x3 to c; a 1x1 to c/4 then a 5x5 to c/2; a 3x3 to c/2; the four
/// concatenated along the channels ([n, 3c, h, w]). c must be a multiple of 4.
Program inception_block(std::int64_t n = 2, std::int64_t c = 16, std::int64_t h = 16, std::int64_t w = 16,
                        std::uint64_t seed = 4);
/// Multi-head self-attention with each head a separate branch: for head i, q_i, k_i, v_i =
/// x Wq_i, x Wk_i, x Wv_i ([t, d/heads] each), o_i = softmax(q_i k_i^T / sqrt(d/heads)) v_i; the
/// heads concatenated, times Wo, plus x; x [t, d], d a multiple of heads.
Program multihead_attention(std::int64_t t = 32, std::int64_t d = 32, std::int64_t heads = 4, std::uint64_t seed = 5);
/// The model called "resnet", "attention", "mlp", "inception" or "heads" (the last two: the
/// parallel executor's examples); throws `mls::Error` for another name.
Program build_model(const std::string& name);
/// The parallel executor's benchmark shapes (`mls_lab3_bench_graphopt`, `mls-opt parallel
/// --bench`): "inception" is inception_block(4, 32, 16, 16), "heads" multihead_attention(128, 256,
/// 8); throws `mls::Error` for another name.
Program parallel_bench_model(const std::string& name);

}  // namespace mls::graph_opt
