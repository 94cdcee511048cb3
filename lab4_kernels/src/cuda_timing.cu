// Lab 4: timing work on the default stream with CUDA events, and the device-to-device copy the
// memory-bound kernels are compared with (see mls/kernels/cuda.hpp). Not a student file.
#include <cuda_runtime.h>

#include <vector>

#include "mls/common/error.hpp"
#include "mls/kernels/cuda.hpp"

namespace mls::kernels::cuda {

namespace {

/// Throws mls::Error naming the call and CUDA's message (the format of kernels_cuda.cu's
/// MLS_CUDA_CHECK).
void check(cudaError_t err, const char* call) {
  if (err != cudaSuccess) {
    fail("cuda: ", call, " failed: ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")");
  }
}

/// A CUDA event, destroyed with its owner (also when a timed call throws).
class Event {
 public:
  Event() { check(cudaEventCreate(&event_), "cudaEventCreate"); }
  ~Event() { cudaEventDestroy(event_); }  // never throws (destructor)
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace

std::vector<double> time_batches_ms(const std::function<void()>& fn, int reps, int batch) {
  MLS_CHECK(reps >= 1 && batch >= 1, "cuda::time_batches_ms: reps and batch must be >= 1, got reps=",
            reps, " batch=", batch);
  MLS_CHECK(static_cast<bool>(fn), "cuda::time_batches_ms: no function to time");
  for (int i = 0; i < batch; ++i) fn();  // warm-up: lazy loading of the kernel, caches, clocks
  check(cudaGetLastError(), "cudaGetLastError (after the warm-up)");
  // reps + 1 events: batch r runs between events r and r + 1.
  std::vector<Event> events(static_cast<std::size_t>(reps) + 1);
  check(cudaEventRecord(events[0].get()), "cudaEventRecord");
  for (int r = 0; r < reps; ++r) {
    for (int i = 0; i < batch; ++i) fn();
    check(cudaEventRecord(events[r + 1].get()), "cudaEventRecord");
  }
  check(cudaEventSynchronize(events[reps].get()), "cudaEventSynchronize");
  check(cudaGetLastError(), "cudaGetLastError (after the timed batches)");
  std::vector<double> ms(static_cast<std::size_t>(reps));
  for (int r = 0; r < reps; ++r) {
    float t = 0;
    check(cudaEventElapsedTime(&t, events[r].get(), events[r + 1].get()), "cudaEventElapsedTime");
    ms[r] = static_cast<double>(t) / batch;
  }
  return ms;
}

void copy_device_async(float* dst, const float* src, std::size_t count) {
  if (count == 0) return;
  MLS_CHECK(dst && src, "cuda::copy_device_async: null device pointer (dst=",
            static_cast<const void*>(dst), ", src=", static_cast<const void*>(src), ", count=",
            count, ")");
  check(cudaMemcpyAsync(dst, src, count * sizeof(float), cudaMemcpyDeviceToDevice, 0),
        "cudaMemcpyAsync(cudaMemcpyDeviceToDevice)");
}

}  // namespace mls::kernels::cuda
