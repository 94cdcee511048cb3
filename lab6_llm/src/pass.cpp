// Lab 6: the one forward pass and the one backward pass of every path (plain, recompute, ZeRO),
// llm.c's gpt2_forward / gpt2_backward: the block loop, what a pass keeps for its backward
// (PassBuffers), model_forward / model_backward, and gpt_forward / gpt_backward on flat buffers.
#include <algorithm>

#include "mls/common/error.hpp"
#include "mls/llm/model.hpp"
#include "mls/llm/remat.hpp"

namespace mls::llm {

// ---- views, the block loop -----------------------------------------------------------------------

ParamPtrs shift_layers(const ParamPtrs& p, const GPTConfig& cfg, std::int64_t l0) {
  const std::int64_t C = cfg.n_embd;
  ParamPtrs q = p;
  q.ln1w += l0 * C;
  q.ln1b += l0 * C;
  q.qkvw += l0 * 3 * C * C;
  q.qkvb += l0 * 3 * C;
  q.attprojw += l0 * C * C;
  q.attprojb += l0 * C;
  q.ln2w += l0 * C;
  q.ln2b += l0 * C;
  if (is_moe_block(cfg, l0)) {  // the MoE tensors stack the MoE blocks; no dense MLP here
    // The router is whole; the experts are the El this layout holds (E unless sharded).
    const std::int64_t m = moe_blocks_before(cfg, l0), E = cfg.moe_experts, El = moe_local_experts(cfg);
    q.fcw = q.fcb = q.fcprojw = q.fcprojb = nullptr;
    if (q.moe_router) {  // null: a view without gradients (ParamPtrs{})
      q.moe_router += m * E * C;
      q.moe_fcw += m * El * 4 * C * C;
      q.moe_fcb += m * El * 4 * C;
      q.moe_fcprojw += m * El * 4 * C * C;
      q.moe_fcprojb += m * El * C;
    }
    return q;
  }
  const std::int64_t d = l0 - moe_blocks_before(cfg, l0);  // the MLP tensors stack dense blocks
  q.fcw += d * 4 * C * C;
  q.fcb += d * 4 * C;
  q.fcprojw += d * 4 * C * C;
  q.fcprojb += d * C;
  q.moe_router = q.moe_fcw = q.moe_fcb = q.moe_fcprojw = q.moe_fcprojb = nullptr;
  return q;
}

GPTActivations block_view(const GPTConfig& cfg, const GPTActivations& a, std::int64_t l) {
  MLS_CHECK(l >= 0 && l < cfg.n_layer, "block_view: layer ", l, ", expected 0..", cfg.n_layer - 1);
  const std::int64_t B = a.B, T = a.T, C = cfg.n_embd, N = B * T;
  GPTActivations v;
  v.B = B;
  v.T = T;
  v.encoded = a.encoded;
  v.ln1 = a.ln1 + l * N * C;
  v.ln1_mean = a.ln1_mean + l * N;
  v.ln1_rstd = a.ln1_rstd + l * N;
  v.qkv = a.qkv + l * N * 3 * C;
  v.atty = a.atty + l * N * C;
  v.attention = a.attention;
  v.att = a.att + l * a.att_layer_floats(cfg);
  v.attproj = a.attproj + l * N * C;
  v.residual2 = a.residual2 + l * N * C;
  v.ln2 = a.ln2 + l * N * C;
  v.ln2_mean = a.ln2_mean + l * N;
  v.ln2_rstd = a.ln2_rstd + l * N;
  v.fch = a.fch + l * N * 4 * C;
  v.fch_gelu = a.fch_gelu + l * N * 4 * C;
  v.fcproj = a.fcproj + l * N * C;
  v.residual3 = a.residual3 + l * N * C;
  v.lnf = a.lnf;
  v.lnf_mean = a.lnf_mean;
  v.lnf_rstd = a.lnf_rstd;
  v.logits = a.logits;
  v.losses = a.losses;
  v.moe_cap = a.moe_cap;
  v.moe_grad_scale = a.moe_grad_scale;
  v.moe_dispatch = a.moe_dispatch;
  v.moe_record = a.moe_record;
  if (a.moe_probs) {  // MoE buffers (an MoE config): every slot has them
    const std::int64_t E = cfg.moe_experts, K = cfg.moe_top_k, R = E * a.moe_cap;
    v.moe_probs = a.moe_probs + l * N * E;
    v.moe_lse = a.moe_lse + l * N;
    v.moe_gate = a.moe_gate + l * N * K;
    v.moe_frac = a.moe_frac + l * E;
    v.moe_loss = a.moe_loss + l * 2;
    v.moe_xin = a.moe_xin + l * R * C;
    v.moe_h = a.moe_h + l * R * 4 * C;
    v.moe_hg = a.moe_hg + l * R * 4 * C;
    v.moe_y = a.moe_y + l * R * C;
    v.moe_expert = a.moe_expert + l * N * K;
    v.moe_slot = a.moe_slot + l * N * K;
    v.moe_count = a.moe_count + l * E;
    v.moe_token = a.moe_token + l * R;
  }
  return v;
}

const float* blocks_forward(const GPTConfig& seg_cfg, BlockAccess& acc, GPTActivations& seg,
                            std::int64_t s, std::int64_t e, const float* x) {
  MLS_CHECK(s < e && e - s <= seg_cfg.n_layer, "blocks_forward: blocks [", s, ", ", e, ") on ",
            seg_cfg.n_layer, " slots, expected 0 < e - s <= slots");
  const std::int64_t NC = seg.B * seg.T * seg_cfg.n_embd;
  for (std::int64_t j = 0; j < e - s; ++j) {
    const ParamPtrs p = acc.params(s + j);
    GPTActivations v = block_view(seg_cfg, seg, j);
    block_forward(seg_cfg, p, v, 0, j == 0 ? x : seg.residual3 + (j - 1) * NC);
    acc.release_params(s + j);
  }
  return seg.residual3 + (e - s - 1) * NC;
}

void blocks_backward(const GPTConfig& seg_cfg, BlockAccess& acc, const GPTActivations& seg,
                     GPTActivations& dseg, std::int64_t s, std::int64_t e, const float* x,
                     float* dresidual) {
  MLS_CHECK(s < e && e - s <= seg_cfg.n_layer, "blocks_backward: blocks [", s, ", ", e, ") on ",
            seg_cfg.n_layer, " slots, expected 0 < e - s <= slots");
  const std::int64_t NC = seg.B * seg.T * seg_cfg.n_embd;
  for (std::int64_t j = e - s - 1; j >= 0; --j) {
    const ParamPtrs p = acc.params(s + j);
    ParamPtrs g = acc.grads(s + j);
    const GPTActivations a = block_view(seg_cfg, seg, j);
    GPTActivations da = block_view(seg_cfg, dseg, j);
    block_backward(seg_cfg, p, g, a, da, 0, j == 0 ? x : seg.residual3 + (j - 1) * NC, dresidual);
    acc.release_params(s + j);
    acc.grads_done(s + j);
  }
}

// ---- the pass's buffers ---------------------------------------------------------------------------

PassBuffers PassBuffers::keep(GPTActivations& acts, GPTActivations* dacts) {
  PassBuffers b;
  b.acts = &acts;
  b.dacts = dacts;
  return b;
}

PassBuffers PassBuffers::recompute(RematActivations& ra) {
  PassBuffers b;
  b.remat = &ra;
  return b;
}

std::int64_t PassBuffers::B() const { return remat ? remat->B : acts->B; }
std::int64_t PassBuffers::T() const { return remat ? remat->T : acts->T; }
GPTActivations& PassBuffers::head() const { return remat ? remat->seg : *acts; }

GPTActivations& PassBuffers::dhead() const {
  MLS_CHECK(remat || dacts, "PassBuffers: a backward pass without gradient buffers (dacts)");
  return remat ? remat->dseg : *dacts;
}

float* PassBuffers::input() const { return remat ? remat->checkpoints.data() : acts->encoded; }

const float* PassBuffers::output(const GPTConfig& cfg) const {
  const std::int64_t NC = B() * T() * cfg.n_embd;
  if (!remat) return acts->residual3 + (cfg.n_layer - 1) * NC;
  const RematPlan& plan = remat->plan();
  return remat->seg.residual3 + (plan.n - plan.starts.back() - 1) * NC;
}

float* PassBuffers::dresidual(const GPTConfig& cfg) const {
  // Under a plan no block touches dseg.encoded; otherwise the last block's d(residual3).
  return remat ? remat->dseg.encoded
               : dhead().residual3 + (cfg.n_layer - 1) * B() * T() * cfg.n_embd;
}

// ---- the one forward pass and the one backward pass -----------------------------------------------

namespace {

void check_ids(const char* op, const char* what, const std::int32_t* ids, std::int64_t n,
               std::int64_t V) {
  MLS_CHECK(ids != nullptr, op, ": ", what, " is null");
  for (std::int64_t i = 0; i < n; ++i)
    MLS_CHECK(ids[i] >= 0 && ids[i] < V, op, ": ", what, " id ", ids[i], " at position ", i,
              ", expected 0 <= id < vocab_size = ", V);
}

}  // namespace


double model_forward(const GPTConfig& cfg, ModelAccess& acc, const PassBuffers& buf,
                     const MicroBatch& mb) {
  const std::int64_t L = cfg.n_layer, C = cfg.n_embd, V = cfg.vocab_size, B = mb.B, T = mb.T,
                     N = B * T;
  MLS_CHECK(buf.B() == B && buf.T() == T, "model_forward: buffers for (B, T) = (", buf.B(), ", ",
            buf.T(), "), called with (", B, ", ", T, ")");
  check_ids("model_forward", "input", mb.inputs, N, V);
  if (mb.targets) check_ids("model_forward", "target", mb.targets, N, V);
  GPTActivations& a = buf.head();
  {
    const ParamPtrs e = acc.end_params(ModelEnd::Embeddings);
    encoder_forward(buf.input(), mb.inputs, e.wte, e.wpe, B, T, C);
    acc.release_end(ModelEnd::Embeddings);
  }
  const float* out = buf.remat ? remat_blocks_forward(cfg, acc, *buf.remat)
                               : blocks_forward(cfg, acc, a, 0, L, buf.input());
  {
    const ParamPtrs f = acc.end_params(ModelEnd::FinalNorm);
    layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, out, f.lnfw, f.lnfb, N, C);
    acc.release_end(ModelEnd::FinalNorm);
  }
  const ParamPtrs e = acc.end_params(ModelEnd::Embeddings);  // held for the backward's LM head
  matmul_forward(a.logits, a.lnf, e.wte, nullptr, N, C, V);   // the tied LM head
  if (!mb.targets) {
    acc.release_end(ModelEnd::Embeddings);
    return 0.0;
  }
  return crossentropy_forward(a.logits, a.losses, mb.targets, mb.mask, N, V);
}

void model_backward(const GPTConfig& cfg, ModelAccess& acc, const PassBuffers& buf,
                    const MicroBatch& mb, double norm) {
  const std::int64_t C = cfg.n_embd, V = cfg.vocab_size, B = mb.B, T = mb.T, N = B * T;
  MLS_CHECK(buf.B() == B && buf.T() == T, "model_backward: buffers for (B, T) = (", buf.B(), ", ",
            buf.T(), "), called with (", B, ", ", T, ")");
  check_ids("model_backward", "target", mb.targets, N, V);
  const GPTActivations& a = buf.head();
  GPTActivations& da = buf.dhead();
  // The MoE losses are means over this micro-batch's tokens: their gradients count with the
  // micro-batch's share of the batch (its mask sum over `norm`), so micro-batches add up.
  if (is_moe(cfg)) {
    const double own = mask_sum(mb.mask, N);
    da.moe_grad_scale = norm < 0 ? 1.f : norm > 0 ? static_cast<float>(own / norm) : 0.f;
  }
  // The head: cross-entropy, the tied LM head (the embeddings, held since the forward), lnf.
  crossentropy_backward(da.logits, a.logits, mb.targets, mb.mask, N, V, norm);
  std::fill(da.lnf, da.lnf + N * C, 0.f);
  const ParamPtrs e = acc.end_params(ModelEnd::Embeddings);
  const ParamPtrs ge = acc.end_grads(ModelEnd::Embeddings);
  matmul_backward(da.lnf, ge.wte, nullptr, da.logits, a.lnf, e.wte, N, C, V);
  acc.release_end(ModelEnd::Embeddings);
  float* dresidual = buf.dresidual(cfg);
  std::fill(dresidual, dresidual + N * C, 0.f);
  {
    const ParamPtrs f = acc.end_params(ModelEnd::FinalNorm);
    const ParamPtrs gf = acc.end_grads(ModelEnd::FinalNorm);
    layernorm_backward(dresidual, gf.lnfw, gf.lnfb, da.lnf, buf.output(cfg), f.lnfw, a.lnf_mean,
                       a.lnf_rstd, N, C);
    acc.release_end(ModelEnd::FinalNorm);
    acc.end_grads_done(ModelEnd::FinalNorm);
  }
  // The blocks in reverse, then the encoder.
  if (buf.remat)
    remat_blocks_backward(cfg, acc, *buf.remat, dresidual);
  else
    blocks_backward(cfg, acc, a, da, 0, cfg.n_layer, buf.input(), dresidual);
  encoder_backward(ge.wte, ge.wpe, dresidual, mb.inputs, B, T, C);
  acc.end_grads_done(ModelEnd::Embeddings);
}

// ---- the model on flat buffers --------------------------------------------------------------------

double gpt_forward(const GPTParams& params, GPTActivations& acts, const std::int32_t* inputs,
                   const std::int32_t* targets, const float* mask, std::int64_t B, std::int64_t T) {
  const GPTConfig& cfg = params.config();
  MLS_CHECK(T > 0 && T <= cfg.block_size, "gpt_forward: T = ", T,
            ", expected 0 < T <= block_size = ", cfg.block_size);
  MLS_CHECK(acts.B == B && acts.T == T, "gpt_forward: activations for (B, T) = (", acts.B, ", ",
            acts.T, "), called with (", B, ", ", T, ")");
  const std::int64_t V = cfg.vocab_size, N = B * T;
  check_ids("gpt_forward", "input", inputs, N, V);
  if (targets) check_ids("gpt_forward", "target", targets, N, V);
  FlatModel model(cfg, param_views(const_cast<float*>(params.data()), cfg), ParamPtrs{});
  return model_forward(cfg, model, PassBuffers::keep(acts), MicroBatch{inputs, targets, mask, B, T});
}

void gpt_backward(const GPTParams& params, GPTGrads& grads, const GPTActivations& acts,
                  GPTActivations& dacts, const std::int32_t* inputs, const std::int32_t* targets,
                  const float* mask, double norm) {
  const GPTConfig& cfg = params.config();
  MLS_CHECK(grads.config() == cfg, "gpt_backward: gradients of another config");
  MLS_CHECK(dacts.B == acts.B && dacts.T == acts.T, "gpt_backward: scratch for (B, T) = (", dacts.B,
            ", ", dacts.T, "), activations (", acts.B, ", ", acts.T, ")");
  check_ids("gpt_backward", "target", targets, acts.B * acts.T, cfg.vocab_size);
  FlatModel model(cfg, param_views(const_cast<float*>(params.data()), cfg), grads.views());
  model_backward(cfg, model, PassBuffers::keep(const_cast<GPTActivations&>(acts), &dacts),
                 MicroBatch{inputs, targets, mask, acts.B, acts.T}, norm);
}

}  // namespace mls::llm
