// The emulated link's settings (link.hpp): parsing and the label every output carries.
#include "mls/parallel/link.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "mls/common/error.hpp"

namespace mls::parallel {

namespace {
double parse_number(const char* var, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  MLS_CHECK(end != text.c_str(), var, "='", text, "': expected a number");
  while (*end == ' ') ++end;
  MLS_CHECK(*end == '\0', var, "='", text, "': expected a number, got trailing text '", end, "'");
  MLS_CHECK(std::isfinite(v), var, "='", text, "': expected a finite number");
  return v;
}
std::string fmt(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}
}  // namespace

double LinkEmulation::seconds(std::int64_t bytes) const {
  return (has_us ? us * 1e-6 : 0.0) + (has_gbps ? 8.0 * static_cast<double>(bytes) / (gbps * 1e9) : 0.0);
}

std::string LinkEmulation::label() const {
  if (!active()) return "";
  std::string s = "emulated link: ";
  s += has_gbps ? fmt(gbps) + " Gbit/s" : std::string("bandwidth not limited");
  s += ", ";
  s += has_us ? fmt(us) + " us per message" : std::string("no added latency");
  s += " (";
  if (!origin.empty()) s += "set by " + origin;
  if (origin.empty() && has_gbps) s += "MLS_LINK_GBPS=" + fmt(gbps);
  if (origin.empty() && has_gbps && has_us) s += ", ";
  if (origin.empty() && has_us) s += "MLS_LINK_US=" + fmt(us);
  s += "; not the hardware's figures)";
  return s;
}

LinkEmulation parse_link(const std::string& gbps, const std::string& us) {
  LinkEmulation l;
  if (!gbps.empty()) {
    l.gbps = parse_number("MLS_LINK_GBPS", gbps);
    MLS_CHECK(l.gbps > 0, "MLS_LINK_GBPS='", gbps, "': the bandwidth must be > 0 Gbit/s");
    l.has_gbps = true;
  }
  if (!us.empty()) {
    l.us = parse_number("MLS_LINK_US", us);
    MLS_CHECK(l.us >= 0, "MLS_LINK_US='", us, "': the latency must be >= 0 microseconds");
    MLS_CHECK(l.us <= 1e6, "MLS_LINK_US='", us, "': a latency over 1 s (1e6 us) is not a link to emulate");
    l.has_us = true;
  }
  return l;
}

LinkEmulation link_from_env() {
  const char* g = std::getenv("MLS_LINK_GBPS");
  const char* u = std::getenv("MLS_LINK_US");
  return parse_link(g ? g : "", u ? u : "");
}

}  // namespace mls::parallel
