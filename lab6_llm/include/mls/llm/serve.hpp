#pragma once
/// Lab 6: `mls-gpt serve` — the engine (engine.hpp) behind HTTP/1.1 that real clients speak
/// (cpp-httplib; built only where it is found: CMake says so at configure time).
///
///   POST /v1/completions   OpenAI's completions shape: prompt, max_tokens, temperature (0:
///                          greedy), top_k, top_p, seed, stop (a string or a list), stream (SSE)
///   GET  /health           {"status":"ok"} (503 {"status":"draining"} after SIGTERM)
///   GET  /metrics          Prometheus text: requests, tokens in/out, tokens/s, queue length,
///                          running sequences, KV blocks used/free, preemptions, TTFT and ITL
///                          histograms
///
/// One thread runs the engine (one step() after another while there is work); the HTTP threads
/// hand it requests and read their tokens. Malformed input is a 4xx with a JSON error body; more
/// than max_queue requests waiting is a 503 with Retry-After; a streaming client that goes away
/// cancels its request (its blocks go back to the pool at once); SIGTERM (or SIGINT) stops taking
/// requests, finishes the running ones and exits 0.
#include <cstdint>
#include <string>
#include <vector>

#include "mls/llm/engine.hpp"
#include "mls/llm/tokenizer.hpp"

namespace mls::llm {

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                     // 0: any free port (printed, and written to port_file)
  std::string port_file;               // where to write the bound port ("" : nowhere)
  EngineOptions engine;
  std::int64_t max_queue = 64;         // requests waiting (not yet running) beyond which: 503
  std::int64_t max_body = 1 << 20;     // request body bytes: more is a 413
  std::int64_t default_max_tokens = 16;
  int http_threads = 0;                // 0: max_queue + max_running + 8
  double step_delay_ms = 0;            // pause after each engine step (watch a tiny model stream;
                                       // the tests' disconnects mid-stream); 0 in real use
};

/// `mls-gpt loadgen`: streaming requests to an OpenAI completions server at each offered rate.
struct LoadgenOptions {
  std::string url = "http://127.0.0.1:8000";
  std::int64_t clients = 32;           // concurrent connections
  std::int64_t requests = 200;         // per rate
  std::vector<double> rates{0};        // requests/s, Poisson arrivals (0: all at once)
  std::int64_t min_tokens = 8, max_tokens = 32;  // max_tokens of each request, uniform
  std::vector<std::string> prompts{"ROMEO:", "KING:", "First Citizen:", "O, ", "What say you"};
  std::uint64_t seed = 0;
  std::string svg;                     // latency against load ("" : none)
};

/// Runs the load at each rate and prints, per rate, requests answered, 503s, errors, tokens/s,
/// requests/s, time to first token and inter-token latency p50/p90/p99 (latencies from each
/// request's scheduled arrival, so waiting for a free connection counts); writes the SVG.
int loadgen(const LoadgenOptions& opt);

/// Serves `params` with `tok` until SIGTERM or SIGINT; returns 0 after draining. Throws mls::Error
/// when the address cannot be bound.
int serve(const GPTParams& params, const Tokenizer& tok, const ServeOptions& opt);

}  // namespace mls::llm
