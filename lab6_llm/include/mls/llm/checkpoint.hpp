#pragma once
/// Lab 6: training checkpoints. One file holds everything a run needs to continue bit-identically
/// (config, tokenizer, parameters, AdamW moments, step, data and RNG positions, settings).
///
/// File layout (little endian):
///   [0, 8)    magic "MLSGPTCK"
///   [8, 12)   u32 format version (kCheckpointVersion)
///   [12, 16)  u32 header size (32)
///   [16, 24)  u64 payload size in bytes
///   [24, 32)  u64 checksum: 64-bit FNV-1a of the payload (mls::stream_hash)
///   [32, ...) payload: config (5 x i64), step (i64), tokenizer (string), counters (u32 n, then
///             string key + u64), settings (u32 n, then string key + string value), arrays (u32 n,
///             then string name, u32 ndim, i64 dims[ndim], float32 data[numel]);
///             a string is a u64 length and its bytes.
///
/// save_checkpoint writes with mls::write_file_atomic (a unique temporary file in the same folder,
/// fsynced, renamed over `path`, the folder fsynced): a crash or a full disk leaves either the old
/// file or the new one, never a mix. load_checkpoint checks magic, version, size and checksum, each failure an mls::Error
/// naming the file and the problem.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "mls/common/file.hpp"
#include "mls/common/shape.hpp"
#include "mls/llm/config.hpp"

namespace mls::llm {

constexpr std::uint32_t kCheckpointVersion = 1;
constexpr std::string_view kCheckpointMagic = "MLSGPTCK";

/// A named float32 array (a parameter tensor, an AdamW moment, ...).
struct NamedArray {
  std::string name;
  Shape shape;
  std::vector<float> data;  // numel(shape) values, row-major
};

struct Checkpoint {
  GPTConfig config;
  std::string tokenizer;                          // Tokenizer::serialize()
  std::int64_t step = 0;                          // optimizer steps taken
  std::map<std::string, std::uint64_t> counters;  // e.g. "data_position", "seed", "rng_draws"
  std::map<std::string, std::string> settings;    // e.g. "lr" -> "0.001" (free-form key/values)
  std::vector<NamedArray> arrays;                 // e.g. "wte".."lnfb", "m/wte", "v/wte", ...

  /// Appends an array; a duplicate name or data.size() != numel(shape) is an mls::Error.
  void add(std::string name, Shape shape, std::vector<float> data);
  /// nullptr when absent.
  const NamedArray* find(std::string_view name) const;
  /// The array; absent is an mls::Error listing the names present.
  const NamedArray& get(std::string_view name) const;
  /// The counter; absent is an mls::Error.
  std::uint64_t counter(std::string_view name) const;
};

/// Adds the 16 parameter tensors of `flat` (num_params(ckpt.config) values in config.hpp order) as
/// arrays named prefix + "wte", ..., prefix + "lnfb" (e.g. prefix "" for the weights, "m/" and "v/"
/// for AdamW's moments).
void add_params(Checkpoint& ckpt, const std::string& prefix, const std::vector<float>& flat);
/// The 16 arrays prefix + name concatenated in config.hpp order; a missing array or one whose shape
/// differs from param_shapes(ckpt.config) is an mls::Error naming it.
std::vector<float> get_params(const Checkpoint& ckpt, const std::string& prefix);

/// The whole file as bytes (header + payload).
std::string serialize_checkpoint(const Checkpoint& ckpt);
/// Parses what serialize_checkpoint wrote; `source` names the file in error messages.
Checkpoint parse_checkpoint(std::string_view bytes, const std::string& source);

/// Atomically replaces `path` by a checkpoint (see above). On failure (folder missing or not
/// writable, disk full, ...) an mls::Error naming the path and the system's reason; the temporary
/// file is removed and an existing `path` is left as it was.
void save_checkpoint(const std::string& path, const Checkpoint& ckpt);
/// Reads and validates a checkpoint file.
Checkpoint load_checkpoint(const std::string& path);

/// For --resume: throws an mls::Error naming the first config field that differs
/// ("resume: the checkpoint has n_embd = 48, the run asks for n_embd = 64").
void check_resume_compatible(const GPTConfig& saved, const GPTConfig& requested);
/// The MoE fields of two configs must be equal (an MoE checkpoint into a dense config, or the
/// reverse, or other experts): an mls::Error naming `op` and both sides' MoE fields.
void check_moe_compatible(const std::string& op, const GPTConfig& saved, const GPTConfig& requested);
/// An MoE config's fields as checkpoint settings "config/moe_experts", ... (empty when dense):
/// serialize_checkpoint writes them; parse_checkpoint reads them back into the config
/// (read_moe_config_settings, which removes them from `settings`).
std::map<std::string, std::string> moe_config_settings(const GPTConfig& c);
void read_moe_config_settings(GPTConfig& c, std::map<std::string, std::string>& settings);
/// The same for two checkpoints, and their tokenizers must be equal too.
void check_resume_compatible(const Checkpoint& saved, const Checkpoint& requested);

/// Files in and out are common's (mls/common/file.hpp): write_file_atomic (temporary file,
/// fsync, rename, folder fsync; `write_fn` injects failures in tests) and read_file.
using mls::read_file;
using mls::write_file_atomic;
using mls::WriteFn;

}  // namespace mls::llm
