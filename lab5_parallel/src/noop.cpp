// The no-op transport (sim.hpp): messages go nowhere; a receive writes zeros (so the data stay
// finite: no NaN or denormal slows the compute being timed). A Communicator over it runs every
// algorithm's local work (packing, reductions into scratch) but no communication: the step it
// times is t_compute of the overlap efficiency.
#include <cstring>

#include "detail.hpp"
#include "mls/common/error.hpp"
#include "mls/parallel/sim.hpp"

namespace mls::parallel {

namespace {
class NoopTransport final : public Transport {
 public:
  NoopTransport(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "noop"; }
  void send(const void*, const Header&, int, int) override {}
  Header recv(void* data, const Header& expect, int, int, const char*) override {
    if (expect.bytes > 0) std::memset(data, 0, static_cast<std::size_t>(expect.bytes));  // zeros: no garbage, no NaN
    return expect;
  }
  Request isend(const void*, const Header&, int, int) override { return Request([] {}); }
  Request irecv(void* data, const Header& expect, int src, int tag, const char* what) override {
    recv(data, expect, src, tag, what);
    return Request([] {});
  }
  std::unique_ptr<Transport> split(int, int, const std::vector<int>&, const std::vector<int>&) override {
    fail("split: the no-op transport cannot split (it stands for one rank of a world it never talks to)");
  }

 private:
  int rank_, size_;
};
}  // namespace

std::unique_ptr<Transport> make_noop_transport(int rank, int size) {
  MLS_CHECK(size >= 1 && rank >= 0 && rank < size, "make_noop_transport: rank ", rank, " of ", size,
            ", expected 0 <= rank < size");
  return std::make_unique<NoopTransport>(rank, size);
}

}  // namespace mls::parallel
