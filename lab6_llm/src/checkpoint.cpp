#include "mls/llm/checkpoint.hpp"
#include "mls/llm/llmc.hpp"

#include <bit>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <string>

#include "mls/common/error.hpp"
#include "mls/common/file.hpp"
#include "mls/common/rng.hpp"

namespace mls::llm {

static_assert(std::endian::native == std::endian::little, "checkpoint files are little endian");

namespace {

constexpr std::size_t kHeaderSize = 32;


// ---- little-endian payload writer and reader ---------------------------------------------------

struct Writer {
  std::string out;
  template <class T>
  void pod(T v) {
    char buf[sizeof(T)];
    std::memcpy(buf, &v, sizeof(T));
    out.append(buf, sizeof(T));
  }
  void str(std::string_view s) {
    pod<std::uint64_t>(s.size());
    out.append(s);
  }
};

struct Reader {
  std::string_view in;
  const std::string& source;
  std::size_t pos = 0;
  void need(std::size_t n, const char* what) {
    if (n > in.size() - pos)
      fail("load_checkpoint: '", source, "' is corrupt: ", what, " needs ", n, " bytes at payload offset ", pos,
           ", only ", in.size() - pos, " left");
  }
  template <class T>
  T pod(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, in.data() + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  std::string str(const char* what) {
    const auto n = pod<std::uint64_t>(what);
    need(n, what);
    std::string s(in.substr(pos, n));
    pos += n;
    return s;
  }
};

std::string hex64(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

// ---- Checkpoint ----------------------------------------------------------------------------------

void Checkpoint::add(std::string name, Shape shape, std::vector<float> data) {
  MLS_CHECK(find(name) == nullptr, "Checkpoint::add: an array named '", name, "' is already present");
  const std::int64_t n = checked_numel(shape, "Checkpoint::add");
  MLS_CHECK(static_cast<std::int64_t>(data.size()) == n, "Checkpoint::add: array '", name, "' of shape ",
            shape_str(shape), " needs ", n, " values, got ", data.size());
  arrays.push_back({std::move(name), std::move(shape), std::move(data)});
}

const NamedArray* Checkpoint::find(std::string_view name) const {
  for (const auto& a : arrays)
    if (a.name == name) return &a;
  return nullptr;
}

const NamedArray& Checkpoint::get(std::string_view name) const {
  if (const NamedArray* a = find(name)) return *a;
  std::string names;
  for (const auto& a : arrays) names += (names.empty() ? "" : ", ") + a.name;
  fail("checkpoint: no array named '", name, "' (present: ", names.empty() ? "none" : names, ")");
}

std::uint64_t Checkpoint::counter(std::string_view name) const {
  const auto it = counters.find(std::string(name));
  MLS_CHECK(it != counters.end(), "checkpoint: no counter named '", name, "'");
  return it->second;
}

void add_params(Checkpoint& ckpt, const std::string& prefix, const std::vector<float>& flat) {
  const std::int64_t n = num_params(ckpt.config);
  MLS_CHECK(static_cast<std::int64_t>(flat.size()) == n, "add_params: '", prefix, "' has ", flat.size(),
            " values, the config has ", n, " parameters");
  const auto shapes = param_shapes(ckpt.config);
  std::size_t off = 0;
  for (int i = 0; i < kNumParamTensors; ++i) {
    const auto k = static_cast<std::size_t>(checked_numel(shapes[static_cast<std::size_t>(i)]));
    ckpt.add(prefix + param_names()[static_cast<std::size_t>(i)], shapes[static_cast<std::size_t>(i)],
             std::vector<float>(flat.begin() + static_cast<std::ptrdiff_t>(off),
                                flat.begin() + static_cast<std::ptrdiff_t>(off + k)));
    off += k;
  }
  const auto mshapes = moe_param_shapes(ckpt.config);
  for (int i = 0; is_moe(ckpt.config) && i < kNumMoeTensors; ++i) {
    const auto k = static_cast<std::size_t>(checked_numel(mshapes[static_cast<std::size_t>(i)]));
    ckpt.add(prefix + moe_param_names()[static_cast<std::size_t>(i)], mshapes[static_cast<std::size_t>(i)],
             std::vector<float>(flat.begin() + static_cast<std::ptrdiff_t>(off),
                                flat.begin() + static_cast<std::ptrdiff_t>(off + k)));
    off += k;
  }
}

std::vector<float> get_params(const Checkpoint& ckpt, const std::string& prefix) {
  const auto shapes = param_shapes(ckpt.config);
  std::vector<float> flat;
  flat.reserve(static_cast<std::size_t>(num_params(ckpt.config)));
  for (int i = 0; i < kNumParamTensors; ++i) {
    const std::string name = prefix + param_names()[static_cast<std::size_t>(i)];
    const NamedArray& a = ckpt.get(name);
    MLS_CHECK(a.shape == shapes[static_cast<std::size_t>(i)], "checkpoint: array '", name, "' has shape ",
              shape_str(a.shape), ", the config needs ", shape_str(shapes[static_cast<std::size_t>(i)]));
    flat.insert(flat.end(), a.data.begin(), a.data.end());
  }
  const auto mshapes = moe_param_shapes(ckpt.config);
  for (int i = 0; is_moe(ckpt.config) && i < kNumMoeTensors; ++i) {
    const std::string name = prefix + moe_param_names()[static_cast<std::size_t>(i)];
    const NamedArray& a = ckpt.get(name);
    MLS_CHECK(a.shape == mshapes[static_cast<std::size_t>(i)], "checkpoint: array '", name, "' has shape ",
              shape_str(a.shape), ", the config needs ", shape_str(mshapes[static_cast<std::size_t>(i)]));
    flat.insert(flat.end(), a.data.begin(), a.data.end());
  }
  return flat;
}

// ---- bytes ---------------------------------------------------------------------------------------

std::string serialize_checkpoint(const Checkpoint& ckpt) {
  const GPTConfig& c = ckpt.config;
  MLS_CHECK(c.moe_shards == 1, "checkpoint: a config of expert shard ", c.moe_shard, " of ", c.moe_shards,
            ", expected the whole model (gather the experts first: moe_ep.hpp's gather_experts)");
  Writer w;
  for (std::int64_t v : {c.n_layer, c.n_head, c.n_embd, c.block_size, c.vocab_size}) w.pod(v);
  w.pod(ckpt.step);
  w.str(ckpt.tokenizer);
  w.pod(static_cast<std::uint32_t>(ckpt.counters.size()));
  for (const auto& [k, v] : ckpt.counters) {
    w.str(k);
    w.pod(v);
  }
  // An MoE config's fields travel as settings "config/moe_*" (a dense checkpoint has none, and
  // its bytes are what they were before MoE).
  std::map<std::string, std::string> settings = ckpt.settings;
  for (const auto& [k, v] : moe_config_settings(c)) settings[k] = v;
  w.pod(static_cast<std::uint32_t>(settings.size()));
  for (const auto& [k, v] : settings) {
    w.str(k);
    w.str(v);
  }
  w.pod(static_cast<std::uint32_t>(ckpt.arrays.size()));
  for (const auto& a : ckpt.arrays) {
    MLS_CHECK(static_cast<std::int64_t>(a.data.size()) == checked_numel(a.shape, "save_checkpoint"),
              "save_checkpoint: array '", a.name, "' of shape ", shape_str(a.shape), " has ", a.data.size(), " values");
    w.str(a.name);
    w.pod(static_cast<std::uint32_t>(a.shape.size()));
    for (std::int64_t d : a.shape) w.pod(d);
    if (!a.data.empty()) w.out.append(reinterpret_cast<const char*>(a.data.data()), a.data.size() * sizeof(float));
  }
  std::string file(kCheckpointMagic);
  Writer h;
  h.pod(kCheckpointVersion);
  h.pod(static_cast<std::uint32_t>(kHeaderSize));
  h.pod(static_cast<std::uint64_t>(w.out.size()));
  h.pod(stream_hash(w.out));
  file += h.out;
  file += w.out;
  return file;
}

Checkpoint parse_checkpoint(std::string_view bytes, const std::string& source) {
  const std::string where = "load_checkpoint: '" + source + "'";
  if (bytes.size() >= 4) {
    std::int32_t first = 0;
    std::memcpy(&first, bytes.data(), 4);
    MLS_CHECK(first != kLlmcMagic, where,
              " is an llm.c model file (magic 20240326), not an mls-gpt checkpoint: start from it with --init-from");
  }
  MLS_CHECK(bytes.size() >= kHeaderSize || !kCheckpointMagic.starts_with(bytes.substr(0, kCheckpointMagic.size())) ||
                bytes.empty(),
            where, " is truncated: ", bytes.size(), " bytes, the header alone is ", kHeaderSize);
  MLS_CHECK(bytes.size() >= kCheckpointMagic.size() && bytes.substr(0, kCheckpointMagic.size()) == kCheckpointMagic,
            where, " is not an mls-gpt checkpoint (expected the magic 'MLSGPTCK' at its start; the file has ",
            bytes.size(), " bytes)");
  MLS_CHECK(bytes.size() >= kHeaderSize, where, " is truncated: ", bytes.size(), " bytes, the header alone is ",
            kHeaderSize);
  std::uint32_t version = 0, header = 0;
  std::uint64_t size = 0, checksum = 0;
  std::memcpy(&version, bytes.data() + 8, 4);
  std::memcpy(&header, bytes.data() + 12, 4);
  std::memcpy(&size, bytes.data() + 16, 8);
  std::memcpy(&checksum, bytes.data() + 24, 8);
  MLS_CHECK(version == kCheckpointVersion, where, " has format version ", version, ", this build reads version ",
            kCheckpointVersion);
  MLS_CHECK(header == kHeaderSize, where, " has a header of ", header, " bytes, expected ", kHeaderSize);
  const std::size_t have = bytes.size() - kHeaderSize;
  MLS_CHECK(size <= have, where, " is truncated: the header promises ", size, " payload bytes, the file holds ", have);
  MLS_CHECK(size == have, where, " has ", have - size, " bytes after the payload (expected ", size,
            " payload bytes): not a file save_checkpoint wrote");
  const std::string_view payload = bytes.substr(kHeaderSize);
  const std::uint64_t actual = stream_hash(payload);
  MLS_CHECK(actual == checksum, where, " is corrupt: checksum mismatch (stored ", hex64(checksum), ", computed ",
            hex64(actual), ")");

  Reader r{payload, source};
  Checkpoint ck;
  ck.config.n_layer = r.pod<std::int64_t>("config");
  ck.config.n_head = r.pod<std::int64_t>("config");
  ck.config.n_embd = r.pod<std::int64_t>("config");
  ck.config.block_size = r.pod<std::int64_t>("config");
  ck.config.vocab_size = r.pod<std::int64_t>("config");
  ck.step = r.pod<std::int64_t>("step");
  ck.tokenizer = r.str("tokenizer");
  const auto n_counters = r.pod<std::uint32_t>("counters");
  for (std::uint32_t i = 0; i < n_counters; ++i) {
    std::string k = r.str("counter name");
    ck.counters[k] = r.pod<std::uint64_t>("counter value");
  }
  const auto n_settings = r.pod<std::uint32_t>("settings");
  for (std::uint32_t i = 0; i < n_settings; ++i) {
    std::string k = r.str("setting name");
    ck.settings[k] = r.str("setting value");
  }
  try {
    read_moe_config_settings(ck.config, ck.settings);  // and removes them from the settings
    ck.config.validate();
  } catch (const Error& e) {
    fail(where, " holds an invalid config: ", e.what());
  }
  const auto n_arrays = r.pod<std::uint32_t>("arrays");
  for (std::uint32_t i = 0; i < n_arrays; ++i) {
    std::string name = r.str("array name");
    const auto ndim = r.pod<std::uint32_t>("array rank");
    MLS_CHECK(ndim <= 8, where, " is corrupt: array '", name, "' has rank ", ndim, ", expected at most 8");
    Shape shape(ndim);
    for (auto& d : shape) d = r.pod<std::int64_t>("array shape");
    std::int64_t n = 0;
    try {
      n = checked_numel(shape, "load_checkpoint");
    } catch (const Error& e) {
      fail(where, " is corrupt: array '", name, "': ", e.what());
    }
    MLS_CHECK(static_cast<std::uint64_t>(n) <= (payload.size() - r.pos) / sizeof(float), where,
              " is corrupt: array '", name, "' of shape ", shape_str(shape), " needs ", n, " floats at payload offset ",
              r.pos, ", only ", payload.size() - r.pos, " bytes left");
    std::vector<float> data(static_cast<std::size_t>(n));
    if (!data.empty()) std::memcpy(data.data(), payload.data() + r.pos, data.size() * sizeof(float));
    r.pos += data.size() * sizeof(float);
    MLS_CHECK(ck.find(name) == nullptr, where, " is corrupt: array '", name, "' appears twice");
    ck.arrays.push_back({std::move(name), std::move(shape), std::move(data)});
  }
  MLS_CHECK(r.pos == payload.size(), where, " is corrupt: ", payload.size() - r.pos, " unread payload bytes");
  return ck;
}

// ---- files ---------------------------------------------------------------------------------------

void save_checkpoint(const std::string& path, const Checkpoint& ckpt) {
  ckpt.config.validate();
  write_file_atomic(path, serialize_checkpoint(ckpt), "save_checkpoint");
}

Checkpoint load_checkpoint(const std::string& path) {
  return parse_checkpoint(read_file(path, "load_checkpoint"), path);
}

void check_resume_compatible(const GPTConfig& saved, const GPTConfig& requested) {
  const std::pair<const char*, std::int64_t GPTConfig::*> fields[] = {
      {"n_layer", &GPTConfig::n_layer},       {"n_head", &GPTConfig::n_head},
      {"n_embd", &GPTConfig::n_embd},         {"block_size", &GPTConfig::block_size},
      {"vocab_size", &GPTConfig::vocab_size}};
  for (const auto& [name, member] : fields)
    MLS_CHECK(saved.*member == requested.*member, "resume: the checkpoint has ", name, " = ", saved.*member,
              ", the run asks for ", name, " = ", requested.*member,
              " (resume with the checkpoint's config, or start from it with --init-from)");
  check_moe_compatible("resume", saved, requested);
}

void check_moe_compatible(const std::string& op, const GPTConfig& saved, const GPTConfig& requested) {
  const auto a = moe_config_settings(saved), b = moe_config_settings(requested);
  if (a == b) return;
  auto text = [](const std::map<std::string, std::string>& m) {
    if (m.empty()) return std::string("a dense model (moe_experts = 0)");
    std::string t;
    for (const auto& [k, v] : m) t += (t.empty() ? "" : ", ") + k.substr(7) + " = " + v;
    return t;
  };
  fail(op, ": the checkpoint holds ", text(a), ", the run asks for ", text(b),
       " (an MoE checkpoint loads into the same MoE config only)");
}

std::map<std::string, std::string> moe_config_settings(const GPTConfig& c) {
  std::map<std::string, std::string> m;
  if (!is_moe(c)) return m;
  auto num = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return std::string(buf);
  };
  m["config/moe_experts"] = std::to_string(c.moe_experts);
  m["config/moe_top_k"] = std::to_string(c.moe_top_k);
  m["config/moe_every"] = std::to_string(c.moe_every);
  m["config/capacity_factor"] = num(c.capacity_factor);
  m["config/moe_aux_coef"] = num(c.moe_aux_coef);
  m["config/moe_z_coef"] = num(c.moe_z_coef);
  return m;
}

void read_moe_config_settings(GPTConfig& c, std::map<std::string, std::string>& settings) {
  auto take = [&](const char* key) -> std::string {
    const auto it = settings.find(key);
    MLS_CHECK(it != settings.end(), "checkpoint: MoE config without the setting '", key, "'");
    std::string v = it->second;
    settings.erase(it);
    return v;
  };
  if (settings.find("config/moe_experts") == settings.end()) return;  // dense
  auto integer = [](const std::string& k, const std::string& v) {
    std::size_t used = 0;
    long long x = 0;
    try {
      x = std::stoll(v, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    MLS_CHECK(used == v.size() && !v.empty(), "checkpoint: setting '", k, "' = '", v, "', expected an integer");
    return static_cast<std::int64_t>(x);
  };
  auto real = [](const std::string& k, const std::string& v) {
    std::size_t used = 0;
    double x = 0;
    try {
      x = std::stod(v, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    MLS_CHECK(used == v.size() && !v.empty(), "checkpoint: setting '", k, "' = '", v, "', expected a number");
    return x;
  };
  c.moe_experts = integer("config/moe_experts", take("config/moe_experts"));
  c.moe_top_k = integer("config/moe_top_k", take("config/moe_top_k"));
  c.moe_every = integer("config/moe_every", take("config/moe_every"));
  c.capacity_factor = real("config/capacity_factor", take("config/capacity_factor"));
  c.moe_aux_coef = real("config/moe_aux_coef", take("config/moe_aux_coef"));
  c.moe_z_coef = real("config/moe_z_coef", take("config/moe_z_coef"));
}

void check_resume_compatible(const Checkpoint& saved, const Checkpoint& requested) {
  check_resume_compatible(saved.config, requested.config);
  MLS_CHECK(saved.tokenizer == requested.tokenizer,
            "resume: the checkpoint's tokenizer differs from the run's (", saved.tokenizer.size(), " and ",
            requested.tokenizer.size(), " serialized bytes)");
}

}  // namespace mls::llm
