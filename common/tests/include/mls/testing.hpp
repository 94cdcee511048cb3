#pragma once
/// Helpers shared by the test programs of every lab (linked through mls_catch_main).
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <system_error>

#include <unistd.h>

#include "mls/common/error.hpp"
#include "mls/observe.hpp"

namespace mls::testing {

/// `text` with the temporary folder's path replaced by "<tmp>", and this process's id inside such
/// a path by "<pid>": an observation label that names a file the test made there is the same in
/// every run (mls-grader gives each run its own TMPDIR; without a PID namespace, at the `uid`
/// isolation level, each run also has another pid).
inline std::string without_temp_dir(std::string text) {
  std::error_code ec;
  std::string tmp = std::filesystem::temp_directory_path(ec).string();
  while (!ec && tmp.size() > 1 && tmp.back() == '/') tmp.pop_back();
  if (ec || tmp.size() <= 1) return text;
  for (std::size_t at = text.find(tmp); at != std::string::npos; at = text.find(tmp, at + 5)) text.replace(at, tmp.size(), "<tmp>");
  const std::string pid = std::to_string(::getpid());
  auto digit = [&](std::size_t i) { return i < text.size() && text[i] >= '0' && text[i] <= '9'; };
  for (std::size_t at = text.find("<tmp>/"); at != std::string::npos; at = text.find("<tmp>/", at + 1)) {
    std::size_t end = text.find_first_of(" '\"\n", at);
    if (end == std::string::npos) end = text.size();
    for (std::size_t p = text.find(pid, at); p != std::string::npos && p < end; p = text.find(pid, p + 1)) {
      if (digit(p - 1) || digit(p + pid.size())) continue;  // part of a longer number
      text.replace(p, pid.size(), "<pid>");
      end = end + 5 - pid.size();
    }
  }
  return text;
}

/// What an error check observes: the part of the message the check is about, a text (a strong
/// observation: the value the code produced, not a truth about it). "names '<needle>'" when the
/// message contains the needle, else the message itself (temporary paths as <tmp>), which then
/// differs from the reference build's and says what the submission wrote.
inline std::string error_observation(const std::string& message, const std::string& needle) {
  if (message.find(needle) != std::string::npos) return "names '" + without_temp_dir(needle) + "'";
  return "does not name it: " + without_temp_dir(message);
}

/// Runs `f` and requires an mls::Error whose message contains `needle`. A student function not
/// written yet throws mls::NotImplemented, which is not an mls::Error: it passes through, so the
/// test fails with "not implemented".
template <class F>
void require_error(F&& f, const std::string& needle) {
  const std::string label = "mls::Error naming '" + without_temp_dir(needle) + "'";
  try {
    f();
  } catch (const mls::Error& e) {
    INFO("message: " << e.what());
    const bool named = std::string(e.what()).find(needle) != std::string::npos;
    observe(label, error_observation(e.what(), needle));
    CHECK(named);
    return;
  }
  observe(label, std::string_view("no mls::Error"));
  FAIL("expected an mls::Error containing '" << needle << "'");
}

}  // namespace mls::testing

/// Ends a GPU test early, loudly, where there is no GPU: `available(&why)` is the lab's check
/// (`cu::available`, `nccl_gpu_available`, ...). CTest's skip regex reads "SKIPPED: no GPU" and
/// reports the test as skipped; the grader leaves it out.
#define MLS_REQUIRE_GPU(available)                \
  do {                                            \
    std::string why_;                             \
    if (!(available)(&why_)) {                    \
      WARN("SKIPPED: no GPU (" << why_ << ")");   \
      return;                                     \
    }                                             \
  } while (0)
