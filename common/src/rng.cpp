#include "mls/common/rng.hpp"

#include <atomic>
#include <cmath>
#include <numbers>

#include "mls/common/error.hpp"

namespace mls {

std::array<std::uint32_t, 4> philox4x32(std::array<std::uint32_t, 4> c,
                                        std::array<std::uint32_t, 2> k) {
  constexpr std::uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u;
  constexpr std::uint32_t W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = std::uint64_t{M0} * c[0];
    const std::uint64_t p1 = std::uint64_t{M1} * c[2];
    const std::uint32_t hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    const std::uint32_t hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
    k[0] += W0;
    k[1] += W1;
  }
  return c;
}

namespace {
std::atomic<std::uint64_t> g_salt{0};
/// splitmix64's finalizer: spreads a salt over every bit before it meets the seed.
std::uint64_t mix64(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
}  // namespace

void set_rng_salt(std::uint64_t salt) { g_salt.store(salt, std::memory_order_relaxed); }
std::uint64_t rng_salt() { return g_salt.load(std::memory_order_relaxed); }

std::uint64_t fnv1a64(std::string_view data) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : data) {
    h ^= ch;
    h *= 0x100000001b3ull;
  }
  return h;
}

Rng::Rng(std::uint64_t seed, std::string_view stream) : seed_(seed) {
  // The key mixes seed and stream; the stream hash also goes into the counter's high words so
  // that two streams never share a (key, counter) pair even if their keys collide.
  const std::uint64_t s = stream_hash(stream);
  const std::uint64_t salt = rng_salt();
  const std::uint64_t salted = salt == 0 ? seed : seed ^ mix64(salt);
  const std::uint64_t mixed = salted * 0x9E3779B97F4A7C15ull ^ s;
  key_ = {static_cast<std::uint32_t>(mixed), static_cast<std::uint32_t>(mixed >> 32)};
  counter_ = 0;
  // Remember the stream in the upper half of the counter space.
  stream_hi_ = s;
}

Rng Rng::stream(std::string_view name) const { return Rng(seed_, name); }

std::uint32_t Rng::next_u32() {
  if (used_ == 4) {
    block_ = philox4x32({static_cast<std::uint32_t>(counter_), static_cast<std::uint32_t>(counter_ >> 32),
                         static_cast<std::uint32_t>(stream_hi_), static_cast<std::uint32_t>(stream_hi_ >> 32)},
                        key_);
    ++counter_;
    used_ = 0;
  }
  return block_[used_++];
}

std::uint64_t Rng::next_u64() {
  const std::uint64_t hi = next_u32();
  return (hi << 32) | next_u32();
}

float Rng::uniform_float() { return static_cast<float>(next_u32() >> 8) * 0x1.0p-24f; }

double Rng::uniform_double() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

double Rng::normal(double mean, double stddev) {
  if (have_spare_normal_) {
    have_spare_normal_ = false;
    return mean + stddev * spare_normal_;
  }
  double u1 = uniform_double();
  while (u1 <= 0.0) u1 = uniform_double();
  const double u2 = uniform_double();
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double theta = 2.0 * std::numbers::pi * u2;
  spare_normal_ = r * std::sin(theta);
  have_spare_normal_ = true;
  return mean + stddev * r * std::cos(theta);
}

std::int64_t Rng::randint(std::int64_t lo, std::int64_t hi) {
  MLS_CHECK(hi > lo, "randint: empty range [", lo, ", ", hi, "): expected hi > lo");
  const std::uint64_t span = static_cast<std::uint64_t>(hi) - static_cast<std::uint64_t>(lo);
  // Rejection sampling for an unbiased draw.
  const std::uint64_t limit = UINT64_MAX - UINT64_MAX % span;
  std::uint64_t x = next_u64();
  while (x >= limit) x = next_u64();
  return lo + static_cast<std::int64_t>(x % span);
}

void Rng::skip(std::uint64_t n) {
  // Consume what is left of the current block, then jump whole blocks.
  while (n > 0 && used_ < 4) {
    ++used_;
    --n;
  }
  counter_ += n / 4;
  for (std::uint64_t i = 0; i < n % 4; ++i) next_u32();
}

}  // namespace mls
