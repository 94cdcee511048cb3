// Lab 6: `mls-gpt serve` — the engine behind HTTP (cpp-httplib), OpenAI's completions shape.
// Built into mls-gpt only where cpp-httplib is found (lab6_llm/CMakeLists.txt).
#include "mls/llm/serve.hpp"

#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "mls/common/error.hpp"

namespace mls::llm {

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

/// A Prometheus histogram with fixed bounds (seconds).
struct Histogram {
  static constexpr std::array<double, 12> kBounds{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                  0.1,   0.25,   0.5,   1.0,  2.5,   10.0};
  std::array<std::int64_t, kBounds.size()> counts{};
  std::int64_t count = 0;
  double sum = 0;
  void add(double v) {
    for (std::size_t i = 0; i < kBounds.size(); ++i)
      if (v <= kBounds[i]) ++counts[i];
    ++count;
    sum += v;
  }
  void write(std::ostringstream& os, const char* name, const char* help) const {
    os << "# HELP " << name << " " << help << "\n# TYPE " << name << " histogram\n";
    for (std::size_t i = 0; i < kBounds.size(); ++i)
      os << name << "_bucket{le=\"" << kBounds[i] << "\"} " << counts[i] << "\n";
    os << name << "_bucket{le=\"+Inf\"} " << count << "\n" << name << "_sum " << sum << "\n"
       << name << "_count " << count << "\n";
  }
};

/// One request's tokens on their way from the engine thread to its HTTP thread.
struct Stream {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::int32_t> tokens;
  FinishReason finish = FinishReason::None;
  bool accepted = false;
  std::string error;  // the engine refused it (an mls::Error's message): a 400
  bool failed = false;  // the engine failed while running it (error says how): a 500
  std::atomic<bool> cancel{false};
  Clock::time_point arrived = Clock::now(), last;
  bool done() const { return finish != FinishReason::None || !error.empty(); }
};

struct Incoming {
  EngineRequest req;
  std::shared_ptr<Stream> stream;
};

/// JSON text with any invalid UTF-8 (a byte-level token can end inside a character) replaced.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

/// The longest prefix of text[0, upto) that does not end inside a UTF-8 character.
std::size_t utf8_boundary(const std::string& text, std::size_t upto) {
  for (std::size_t back = 1; back <= 4 && back <= upto; ++back) {
    const auto c = static_cast<unsigned char>(text[upto - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const std::size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    return back < len ? upto - back : upto;
  }
  return upto;
}

/// A JSON error body in OpenAI's shape.
std::string error_body(const std::string& message, const std::string& type) {
  return json{{"error", {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}}}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

struct BadRequest {
  std::string message;
};

/// The fields of a completions request (unknown fields are ignored, as OpenAI's clients send
/// some; a known field of the wrong type or out of range is a BadRequest).
struct Parsed {
  EngineRequest req;
  bool stream = false;
};

Parsed parse_request(const std::string& body, const Tokenizer& tok, const GPTConfig& cfg, std::int64_t default_max) {
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {
    throw BadRequest{std::string("malformed JSON: ") + e.what()};
  }
  if (!j.is_object()) throw BadRequest{"the body must be a JSON object"};
  Parsed p;
  if (!j.contains("prompt") || !j["prompt"].is_string()) throw BadRequest{"'prompt' must be a string"};
  const std::string prompt = j["prompt"].get<std::string>();
  if (prompt.empty()) throw BadRequest{"'prompt' is empty"};
  try {
    p.req.prompt = tok.encode(prompt);
  } catch (const std::exception& e) {
    throw BadRequest{std::string("'prompt' cannot be encoded: ") + e.what()};
  }
  const auto n = static_cast<std::int64_t>(p.req.prompt.size());
  if (n >= cfg.block_size)
    throw BadRequest{"'prompt' is " + std::to_string(n) + " tokens, the context length is " +
                     std::to_string(cfg.block_size) + " (at most " + std::to_string(cfg.block_size - 1) +
                     " prompt tokens)"};
  p.req.max_tokens = default_max;
  if (j.contains("max_tokens") && !j["max_tokens"].is_null()) {
    if (!j["max_tokens"].is_number_integer()) throw BadRequest{"'max_tokens' must be an integer"};
    p.req.max_tokens = j["max_tokens"].get<std::int64_t>();
    if (p.req.max_tokens <= 0) throw BadRequest{"'max_tokens' = " + std::to_string(p.req.max_tokens) + ", expected > 0"};
  }
  double temperature = 1.0;
  if (j.contains("temperature") && !j["temperature"].is_null()) {
    if (!j["temperature"].is_number()) throw BadRequest{"'temperature' must be a number"};
    temperature = j["temperature"].get<double>();
    if (!(temperature >= 0) || temperature > 100) throw BadRequest{"'temperature' must be in [0, 100]"};
  }
  p.req.sample.greedy = temperature == 0;
  p.req.sample.temperature = temperature == 0 ? 1.0 : temperature;
  if (j.contains("top_k") && !j["top_k"].is_null()) {
    if (!j["top_k"].is_number_integer()) throw BadRequest{"'top_k' must be an integer"};
    const auto k = j["top_k"].get<std::int64_t>();
    if (k < 0 || k > cfg.vocab_size)
      throw BadRequest{"'top_k' = " + std::to_string(k) + ", expected 0 (off) .. " + std::to_string(cfg.vocab_size)};
    p.req.sample.top_k = k;
  }
  if (j.contains("top_p") && !j["top_p"].is_null()) {
    if (!j["top_p"].is_number()) throw BadRequest{"'top_p' must be a number"};
    const double tp = j["top_p"].get<double>();
    if (!(tp > 0 && tp <= 1)) throw BadRequest{"'top_p' must be in (0, 1]"};
    p.req.sample.top_p = tp;
  }
  if (j.contains("seed") && !j["seed"].is_null()) {
    if (!j["seed"].is_number_integer()) throw BadRequest{"'seed' must be an integer"};
    p.req.seed = j["seed"].get<std::uint64_t>();
  } else {
    p.req.seed = static_cast<std::uint64_t>(Clock::now().time_since_epoch().count());
  }
  if (j.contains("stop") && !j["stop"].is_null()) {
    const json& s = j["stop"];
    if (s.is_string()) {
      p.req.stop.push_back(s.get<std::string>());
    } else if (s.is_array() && s.size() <= 4) {
      for (const auto& x : s) {
        if (!x.is_string()) throw BadRequest{"'stop' must be a string or a list of up to 4 strings"};
        p.req.stop.push_back(x.get<std::string>());
      }
    } else {
      throw BadRequest{"'stop' must be a string or a list of up to 4 strings"};
    }
    for (const auto& x : p.req.stop)
      if (x.empty()) throw BadRequest{"'stop' has an empty string"};
  }
  if (j.contains("stream") && !j["stream"].is_null()) {
    if (!j["stream"].is_boolean()) throw BadRequest{"'stream' must be a boolean"};
    p.stream = j["stream"].get<bool>();
  }
  if (j.contains("n") && !(j["n"].is_number_integer() && j["n"].get<std::int64_t>() == 1))
    throw BadRequest{"'n' must be 1"};
  return p;
}

/// The text a request has produced, cut at the first stop string.
struct TextState {
  std::string text;
  bool stopped = false;
  void cut(const std::vector<std::string>& stop) {
    std::size_t at = std::string::npos;
    for (const auto& s : stop) at = std::min(at, text.find(s));
    if (at != std::string::npos) {
      text.resize(at);
      stopped = true;
    }
  }
};

const char* openai_finish(FinishReason r) {
  return r == FinishReason::Length ? "length" : (r == FinishReason::Cancelled ? "cancelled" : "stop");
}

class Server {
 public:
  Server(const GPTParams& params, const Tokenizer& tok, const ServeOptions& opt)
      : params_(params), tok_(tok), opt_(opt),
        engine_(make_engine()) {
    MLS_CHECK(opt.max_queue >= 1, "serve: --max-queue = ", opt.max_queue, ", expected >= 1");
    MLS_CHECK(opt.max_body >= 64, "serve: --max-body = ", opt.max_body, ", expected >= 64");
    MLS_CHECK(opt.step_delay_ms >= 0 && opt.step_delay_ms <= 10000, "serve: step delay ", opt.step_delay_ms,
              " ms, expected 0 .. 10000");
    MLS_CHECK(opt.default_max_tokens >= 1, "serve: default max_tokens = ", opt.default_max_tokens, ", expected >= 1");
    gauges();
  }

  int run() {
    // SIGTERM / SIGINT: the handler (in whatever thread the signal lands: the compute pool's
    // threads exist already) writes the signal to a pipe; one thread reads it and drains
    MLS_CHECK(::pipe(signal_pipe()) == 0, "serve: cannot create the signal pipe");
    struct sigaction sa {};
    sa.sa_handler = [](int sig) {
      const unsigned char b = static_cast<unsigned char>(sig);
      [[maybe_unused]] const auto n = ::write(signal_pipe()[1], &b, 1);
    };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);
    ::signal(SIGPIPE, SIG_IGN);
    routes();
    const int threads = opt_.http_threads > 0
                            ? opt_.http_threads
                            : static_cast<int>(opt_.max_queue + opt_.engine.max_running + 8);
    http_.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<std::size_t>(threads)); };
    http_.set_payload_max_length(static_cast<std::size_t>(opt_.max_body));
    // cpp-httplib (Debian's 0.11 is a shared library, built with CPPHTTPLIB_LISTEN_BACKLOG 5) listens
    // with a backlog of 5: a burst of clients connecting at once (loadgen --rate 0: 32 at once)
    // overflows it, and each dropped SYN costs its client a 1 s retransmission (TTFT p90 of 1.02 s
    // measured). The socket is ours for a moment while it is made; listen again with a real backlog
    // once bound (Linux changes a listening socket's backlog in place).
    int listen_fd = -1;
    http_.set_socket_options([&listen_fd](socket_t sock) {
      httplib::default_socket_options(sock);
      listen_fd = static_cast<int>(sock);
    });
    int port = opt_.port;
    if (port == 0) {
      port = http_.bind_to_any_port(opt_.host);
      MLS_CHECK(port > 0, "serve: cannot bind ", opt_.host, " to any port");
    } else {
      MLS_CHECK(http_.bind_to_port(opt_.host, port), "serve: cannot bind ", opt_.host, ":", port,
                " (in use? --port 0 picks a free one)");
    }
    if (listen_fd >= 0) ::listen(listen_fd, SOMAXCONN);
    std::printf("mls-gpt serve: listening on http://%s:%d (KV pool %lld blocks of %lld tokens, %.1f MiB)\n",
                opt_.host.c_str(), port, (long long)opt_.engine.num_blocks, (long long)opt_.engine.block_tokens,
                static_cast<double>(engine_->cache().pool_bytes()) / (1 << 20));
    std::fflush(stdout);
    if (!opt_.port_file.empty()) {
      std::ofstream f(opt_.port_file + ".tmp");
      f << port << "\n";
      f.close();
      std::rename((opt_.port_file + ".tmp").c_str(), opt_.port_file.c_str());
    }
    std::thread loop([this] { engine_loop(); });
    std::thread sig([this] {
      unsigned char b = 0;
      while (::read(signal_pipe()[0], &b, 1) < 0 && errno == EINTR) {
      }
      drain(b);
    });
    http_.listen_after_bind();
    // stopped by drain(); if the server stopped by itself, wake the signal thread
    if (!draining_) {
      const unsigned char b = 0;
      [[maybe_unused]] const auto n = ::write(signal_pipe()[1], &b, 1);
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    loop.join();
    sig.join();
    std::printf("mls-gpt serve: drained, %lld requests served, exiting\n", (long long)served_.load());
    std::fflush(stdout);
    return 0;
  }

 private:
  static int* signal_pipe() {
    static int fds[2] = {-1, -1};
    return fds;
  }

  void drain(int sig) {
    std::printf("mls-gpt serve: signal %d, draining (%lld running, %lld waiting)\n", sig,
                (long long)running_.load(), (long long)waiting_.load());
    std::fflush(stdout);
    draining_ = true;
    // wait for every accepted request to be answered, then stop the HTTP server
    for (;;) {
      {
        std::lock_guard<std::mutex> lk(mu_);
        if (incoming_.empty() && engine_idle_ && active_handlers_.load() == 0) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    http_.stop();
  }

  void gauges() {
    const EngineStats st = engine_->stats();
    waiting_ = st.waiting;
    running_ = st.running;
    blocks_used_ = st.blocks_used;
    blocks_free_ = st.blocks_free;
    preemptions_ = st.preemptions;
    steps_ = st.steps;
    shared_ = st.shared_tokens;
  }

  void engine_loop() {
    std::map<std::int64_t, std::shared_ptr<Stream>> live;
    for (;;) {
      std::vector<Incoming> in;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return quit_ || !incoming_.empty() || !engine_->idle() || any_cancel(live); });
        if (quit_ && incoming_.empty() && engine_->idle()) return;
        in.assign(std::make_move_iterator(incoming_.begin()), std::make_move_iterator(incoming_.end()));
        incoming_.clear();
      }
      for (auto& r : in) {
        std::int64_t id = -1;
        std::string err;
        try {
          id = engine_->add(r.req);
        } catch (const std::exception& e) {
          err = e.what();
        }
        {
          std::lock_guard<std::mutex> lk(r.stream->mu);
          r.stream->accepted = err.empty();
          r.stream->error = err;
        }
        r.stream->cv.notify_all();
        if (id >= 0) live[id] = r.stream;
      }
      for (auto& [id, s] : live)
        if (s->cancel.load()) engine_->cancel(id);
      std::vector<EngineEvent> events;
      if (!engine_->idle()) {
        try {
          events = engine_->step();
        } catch (const std::exception& e) {
          // nothing of the reference throws here; a student's stub or bug does: every live request
          // gets the message (a 500), and a fresh engine takes the next ones
          std::fprintf(stderr, "mls-gpt serve: engine step failed: %s\n", e.what());
          for (auto& [id, st] : live) {
            {
              std::lock_guard<std::mutex> lk(st->mu);
              st->error = std::string("engine step failed: ") + e.what();
              st->failed = true;
            }
            st->cv.notify_all();
          }
          live.clear();
          engine_ = make_engine();
        }
        if (opt_.step_delay_ms > 0)
          std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(opt_.step_delay_ms));
      }
      const auto now = Clock::now();
      for (const auto& ev : events) {
        auto it = live.find(ev.id);
        if (it == live.end()) continue;
        Stream& s = *it->second;
        {
          std::lock_guard<std::mutex> lk(s.mu);
          if (ev.token >= 0) {
            s.tokens.push_back(ev.token);
            std::lock_guard<std::mutex> mk(metrics_mu_);
            if (ev.first) ttft_.add(std::chrono::duration<double>(now - s.arrived).count());
            else itl_.add(std::chrono::duration<double>(now - s.last).count());
            s.last = now;
          }
          if (ev.finish != FinishReason::None) s.finish = ev.finish;
        }
        s.cv.notify_all();
        if (ev.token >= 0) ++tokens_out_;
        if (ev.finish != FinishReason::None) live.erase(it);
      }
      gauges();
      {
        std::lock_guard<std::mutex> lk(mu_);
        engine_idle_ = engine_->idle();
      }
    }
  }

  std::unique_ptr<Engine> make_engine() {
    const Tokenizer& tok = tok_;
    return std::make_unique<Engine>(params_, opt_.engine, [&tok](std::int32_t t) { return tok.decode({t}); });
  }

  static bool any_cancel(const std::map<std::int64_t, std::shared_ptr<Stream>>& live) {
    for (const auto& [id, s] : live)
      if (s->cancel.load()) return true;
    return false;
  }

  /// Hands a request to the engine thread; returns its stream once the engine took it (or refused).
  std::shared_ptr<Stream> submit(const EngineRequest& req) {
    auto s = std::make_shared<Stream>();
    {
      std::lock_guard<std::mutex> lk(mu_);
      incoming_.push_back({req, s});
      engine_idle_ = false;
    }
    cv_.notify_all();
    std::unique_lock<std::mutex> lk(s->mu);
    s->cv.wait(lk, [&] { return s->accepted || !s->error.empty(); });
    return s;
  }

  void cancel(const std::shared_ptr<Stream>& s) {
    s->cancel = true;
    cv_.notify_all();
  }

  void count(const char* status) {
    std::lock_guard<std::mutex> lk(metrics_mu_);
    ++requests_[status];
  }

  void reply_error(httplib::Response& res, int status, const std::string& msg, const char* type) {
    res.status = status;
    res.set_content(error_body(msg, type), "application/json");
    count(status == 503 ? "rejected" : "error");
  }

  void routes() {
    http_.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request&, httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
      const std::string msg = res.status == 413 ? "request body too large"
                              : res.status == 404 ? "no such endpoint"
                              : res.status == 405 ? "method not allowed"
                                                  : "error " + std::to_string(res.status);
      res.set_content(error_body(msg, "invalid_request_error"), "application/json");
      return httplib::Server::HandlerResponse::Handled;
    }));
    http_.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string msg = "internal error";
      try {
        if (ep) std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        msg = e.what();
      } catch (...) {
      }
      res.status = 500;
      res.set_content(error_body(msg, "server_error"), "application/json");
    });
    http_.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      if (draining_) {
        res.status = 503;
        res.set_content(R"({"status":"draining"})", "application/json");
      } else {
        res.set_content(R"({"status":"ok"})", "application/json");
      }
    });
    http_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics(), "text/plain; version=0.0.4");
    });
    http_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      ++active_handlers_;
      struct Done {
        std::atomic<std::int64_t>& n;
        ~Done() { --n; }
      } done{active_handlers_};
      completions(req, res);
    });
  }

  void completions(const httplib::Request& req, httplib::Response& res) {
    if (draining_) {
      res.set_header("Retry-After", "5");
      return reply_error(res, 503, "the server is shutting down", "server_overloaded");
    }
    Parsed p;
    try {
      p = parse_request(req.body, tok_, params_.config(), opt_.default_max_tokens);
    } catch (const BadRequest& e) {
      return reply_error(res, 400, e.message, "invalid_request_error");
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (static_cast<std::int64_t>(incoming_.size()) + waiting_.load() >= opt_.max_queue) {
        res.set_header("Retry-After", "1");
        return reply_error(res, 503, "too many requests waiting (" + std::to_string(opt_.max_queue) +
                                         "); retry later", "server_overloaded");
      }
    }
    tokens_in_ += static_cast<std::int64_t>(p.req.prompt.size());
    const std::int64_t prompt_tokens = static_cast<std::int64_t>(p.req.prompt.size());
    const auto stream = submit(p.req);
    if (!stream->error.empty()) return reply_error(res, 400, stream->error, "invalid_request_error");
    const std::string id = "cmpl-" + std::to_string(++next_id_);
    const auto created = static_cast<std::int64_t>(std::time(nullptr));
    if (!p.stream) {
      std::unique_lock<std::mutex> lk(stream->mu);
      stream->cv.wait(lk, [&] { return stream->done(); });
      if (stream->failed) return reply_error(res, 500, stream->error, "server_error");
      TextState t;
      t.text = tok_.decode(stream->tokens);
      t.cut(p.req.stop);
      const json body = {
          {"id", id}, {"object", "text_completion"}, {"created", created}, {"model", "mls-gpt"},
          {"choices", json::array({{{"index", 0}, {"text", t.text}, {"logprobs", nullptr},
                                    {"finish_reason", openai_finish(stream->finish)}}})},
          {"usage", {{"prompt_tokens", prompt_tokens},
                     {"completion_tokens", static_cast<std::int64_t>(stream->tokens.size())},
                     {"total_tokens", prompt_tokens + static_cast<std::int64_t>(stream->tokens.size())}}}};
      res.set_content(dump(body), "application/json");
      count("ok");
      ++served_;
      return;
    }
    // streaming: server-sent events, one per piece of text; the text that could still become a
    // stop string is held back until it cannot
    std::size_t hold = 0;
    for (const auto& s : p.req.stop) hold = std::max(hold, s.size() - 1);
    auto sent = std::make_shared<std::size_t>(0);
    auto finished = std::make_shared<bool>(false);
    auto seen = std::make_shared<std::size_t>(0);  // tokens already looked at
    ++active_handlers_;  // the stream outlives the handler: drain() waits for its releaser
    const auto stop = p.req.stop;
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, stream, sent, seen, finished, stop, hold, id, created, prompt_tokens](std::size_t, httplib::DataSink& sink) {
          std::vector<std::int32_t> toks;
          FinishReason fin = FinishReason::None;
          {
            std::unique_lock<std::mutex> lk(stream->mu);
            stream->cv.wait_for(lk, std::chrono::milliseconds(200),
                                [&] { return stream->done() || stream->tokens.size() > *seen; });
            toks = stream->tokens;
            *seen = toks.size();
            fin = stream->finish;
            if (stream->failed) {
              const std::string line = "data: " + error_body(stream->error, "server_error") + "\n\n";
              sink.write(line.data(), line.size());
              return false;
            }
          }
          TextState t;
          t.text = tok_.decode(toks);
          t.cut(stop);
          const bool end = fin != FinishReason::None;
          std::size_t upto = end || t.stopped ? t.text.size() : (t.text.size() > hold ? t.text.size() - hold : 0);
          if (!end && !t.stopped) upto = utf8_boundary(t.text, upto);
          upto = std::max(upto, *sent);
          const auto event = [&](const std::string& text, const json& reason) {
            json chunk = {{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", "mls-gpt"},
                          {"choices", json::array({{{"index", 0}, {"text", text}, {"logprobs", nullptr},
                                                    {"finish_reason", reason}}})}};
            if (!reason.is_null())  // the last chunk says how many tokens (as OpenAI's include_usage)
              chunk["usage"] = {{"prompt_tokens", prompt_tokens},
                                {"completion_tokens", static_cast<std::int64_t>(toks.size())},
                                {"total_tokens", prompt_tokens + static_cast<std::int64_t>(toks.size())}};
            const std::string line = "data: " + dump(chunk) + "\n\n";
            return sink.write(line.data(), line.size());
          };
          if (upto > *sent) {
            if (!event(t.text.substr(*sent, upto - *sent), nullptr)) return false;
            *sent = upto;
          } else if (!end && !sink.is_writable()) {
            return false;
          } else if (!end) {
            // keep-alive comment: notices a client that went away while nothing was produced
            static const std::string ping = ": ping\n\n";
            if (!sink.write(ping.data(), ping.size())) return false;
          }
          if (end) {
            if (!event("", openai_finish(fin))) return false;
            static const std::string done = "data: [DONE]\n\n";
            if (!sink.write(done.data(), done.size())) return false;
            *finished = true;
            sink.done();
          }
          return true;
        },
        [this, stream, finished](bool success) {
          --active_handlers_;
          if (!success || !*finished) {
            cancel(stream);  // the client went away: free its blocks now
            count("cancelled");
          } else {
            count("ok");
            ++served_;
          }
        });
  }

  std::string metrics() {
    std::ostringstream os;
    const auto gauge = [&](const char* name, const char* help, const char* type, double v) {
      os << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n" << name << " " << v << "\n";
    };
    {
      std::lock_guard<std::mutex> lk(metrics_mu_);
      os << "# HELP mls_requests_total Completion requests by outcome\n# TYPE mls_requests_total counter\n";
      for (const char* k : {"ok", "error", "rejected", "cancelled"})
        os << "mls_requests_total{status=\"" << k << "\"} " << requests_[k] << "\n";
    }
    gauge("mls_prompt_tokens_total", "Prompt tokens received", "counter", static_cast<double>(tokens_in_.load()));
    gauge("mls_generation_tokens_total", "Tokens generated", "counter", static_cast<double>(tokens_out_.load()));
    gauge("mls_generation_tokens_per_second", "Tokens generated per second since the start", "gauge",
          static_cast<double>(tokens_out_.load()) / std::max(1e-9, since(start_)));
    gauge("mls_queue_length", "Requests waiting to run", "gauge", static_cast<double>(waiting_.load()));
    gauge("mls_running_sequences", "Sequences in the running batch", "gauge", static_cast<double>(running_.load()));
    gauge("mls_kv_blocks_used", "KV cache blocks in use", "gauge", static_cast<double>(blocks_used_.load()));
    gauge("mls_kv_blocks_free", "KV cache blocks free", "gauge", static_cast<double>(blocks_free_.load()));
    gauge("mls_kv_blocks_total", "KV cache blocks in the pool", "gauge", static_cast<double>(opt_.engine.num_blocks));
    gauge("mls_preemptions_total", "Sequences preempted (freed, recomputed later)", "counter",
          static_cast<double>(preemptions_.load()));
    gauge("mls_prefix_shared_tokens_total", "Prompt tokens served from shared prefix blocks", "counter",
          static_cast<double>(shared_.load()));
    gauge("mls_engine_steps_total", "Engine iterations", "counter", static_cast<double>(steps_.load()));
    std::lock_guard<std::mutex> lk(metrics_mu_);
    ttft_.write(os, "mls_time_to_first_token_seconds", "Time from request to its first token");
    itl_.write(os, "mls_inter_token_latency_seconds", "Time between a request's consecutive tokens");
    return os.str();
  }

  const GPTParams& params_;
  const Tokenizer& tok_;
  ServeOptions opt_;
  std::unique_ptr<Engine> engine_;
  httplib::Server http_;
  std::mutex mu_;  // incoming_, quit_, engine_idle_
  std::condition_variable cv_;
  std::deque<Incoming> incoming_;
  bool quit_ = false, engine_idle_ = true;
  std::atomic<bool> draining_{false};
  std::atomic<std::int64_t> active_handlers_{0}, next_id_{0}, served_{0};
  std::atomic<std::int64_t> waiting_{0}, running_{0}, blocks_used_{0}, blocks_free_{0}, preemptions_{0},
      steps_{0}, shared_{0}, tokens_in_{0}, tokens_out_{0};
  std::mutex metrics_mu_;
  std::map<std::string, std::int64_t> requests_;
  Histogram ttft_, itl_;
  Clock::time_point start_ = Clock::now();
};

}  // namespace

int serve(const GPTParams& params, const Tokenizer& tok, const ServeOptions& opt) {
  Server s(params, tok, opt);
  return s.run();
}

}  // namespace mls::llm
