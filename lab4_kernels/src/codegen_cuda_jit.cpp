// NVRTC and the CUDA driver for generated CUDA source (mls/kernels/cuda_jit.hpp): compile to PTX,
// load, launch. The driver's functions come through the runtime (cudaGetDriverEntryPointByVersion):
// no link to libcuda, so the programs start where there is no driver.
#include "mls/kernels/cuda_jit.hpp"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <nvrtc.h>

#include <mutex>

#include "mls/common/error.hpp"
#include "mls/kernels/codegen.hpp"
#include "mls/kernels/cuda.hpp"
#include "mls/kernels/jit.hpp"

namespace mls::kernels::te {

namespace {

void check_nvrtc(nvrtcResult r, const char* call) {
  MLS_CHECK(r == NVRTC_SUCCESS, "nvrtc: ", call, ": ", nvrtcGetErrorString(r));
}

void check_runtime(cudaError_t r, const char* call) {
  MLS_CHECK(r == cudaSuccess, "cuda_jit: ", call, ": ", cudaGetErrorString(r));
}

/// The driver functions this file calls, found once through the runtime.
struct Driver {
  CUresult (*get_error_string)(CUresult, const char**) = nullptr;
  CUresult (*module_load_data_ex)(CUmodule*, const void*, unsigned int, CUjit_option*, void**) = nullptr;
  CUresult (*module_get_function)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*module_unload)(CUmodule) = nullptr;
  CUresult (*launch_kernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                            CUstream, void**, void**) = nullptr;
};

template <class F>
void entry(const char* name, F& fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult status{};
  check_runtime(cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &status),
                "cudaGetDriverEntryPointByVersion");
  MLS_CHECK(status == cudaDriverEntryPointSuccess && p, "cuda_jit: the CUDA driver has no function '", name,
            "' (status ", static_cast<int>(status), ")");
  fn = reinterpret_cast<F>(p);
}

const Driver& driver() {
  static Driver d;
  static std::once_flag once;
  std::call_once(once, [] {
    check_runtime(cudaFree(nullptr), "cudaFree(nullptr) (initialising device 0's context)");
    entry("cuGetErrorString", d.get_error_string);
    entry("cuModuleLoadDataEx", d.module_load_data_ex);
    entry("cuModuleGetFunction", d.module_get_function);
    entry("cuModuleUnload", d.module_unload);
    entry("cuLaunchKernel", d.launch_kernel);
  });
  return d;
}

std::string cu_error(CUresult r) {
  const char* s = nullptr;
  if (driver().get_error_string && driver().get_error_string(r, &s) == CUDA_SUCCESS && s) return s;
  return "CUresult " + std::to_string(static_cast<int>(r));
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : " ") + x;
  return s;
}

}  // namespace

std::string nvrtc_version() {
  int major = 0, minor = 0;
  check_nvrtc(nvrtcVersion(&major, &minor), "nvrtcVersion");
  return "NVRTC " + std::to_string(major) + "." + std::to_string(minor);
}

std::string default_nvrtc_arch() {
  if (!cuda::available()) return "compute_80";
  int major = 0, minor = 0;
  check_runtime(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), "cudaDeviceGetAttribute");
  check_runtime(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0), "cudaDeviceGetAttribute");
  return "compute_" + std::to_string(major) + std::to_string(minor);
}

std::vector<std::string> nvrtc_flags(const NvrtcOptions& options) {
  std::vector<std::string> flags{"--gpu-architecture=" + (options.arch.empty() ? default_nvrtc_arch() : options.arch),
                                 "--std=c++17", std::string("--fmad=") + (options.fmad ? "true" : "false")};
  flags.insert(flags.end(), options.extra.begin(), options.extra.end());
  return flags;
}

Ptx nvrtc_compile(const std::string& source, const std::string& program, const NvrtcOptions& options) {
  const std::vector<std::string> flags = nvrtc_flags(options);
  nvrtcProgram prog = nullptr;
  check_nvrtc(nvrtcCreateProgram(&prog, source.c_str(), program.c_str(), 0, nullptr, nullptr), "nvrtcCreateProgram");
  std::unique_ptr<nvrtcProgram, void (*)(nvrtcProgram*)> guard(&prog, [](nvrtcProgram* p) { nvrtcDestroyProgram(p); });
  std::vector<const char*> argv;
  for (const auto& f : flags) argv.push_back(f.c_str());
  const nvrtcResult r = nvrtcCompileProgram(prog, static_cast<int>(argv.size()), argv.data());
  std::size_t log_size = 0;
  check_nvrtc(nvrtcGetProgramLogSize(prog, &log_size), "nvrtcGetProgramLogSize");
  std::string log(log_size, '\0');
  if (log_size > 0) check_nvrtc(nvrtcGetProgramLog(prog, log.data()), "nvrtcGetProgramLog");
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  MLS_CHECK(r == NVRTC_SUCCESS, "nvrtc: cannot compile '", program, "' (", joined(flags), "): ", nvrtcGetErrorString(r),
            "\n", jit::first_lines(log, 40), "\nThe source:\n", jit::number_lines(source, 600));
  std::size_t ptx_size = 0;
  check_nvrtc(nvrtcGetPTXSize(prog, &ptx_size), "nvrtcGetPTXSize");
  std::string ptx(ptx_size, '\0');
  check_nvrtc(nvrtcGetPTX(prog, ptx.data()), "nvrtcGetPTX");
  while (!ptx.empty() && ptx.back() == '\0') ptx.pop_back();
  return {ptx, flags[0].substr(flags[0].find('=') + 1), log};
}

bool nvrtc_usable(std::string* why) {
  try {
    nvrtc_compile("extern \"C\" __global__ void mls_probe(float* x) { x[threadIdx.x] = 1.0f; }\n", "probe.cu",
                  {"compute_80", true, {}});
    return true;
  } catch (const std::exception& e) {
    if (why) *why = e.what();
    return false;
  }
}

CudaJitKernel compile_cuda(const LoweredFunc& f, const NvrtcOptions& options) {
  std::string why;
  MLS_CHECK(cuda::available(&why), "compile_cuda: no usable GPU for '", f.name, "': ", why,
            " (nvrtc_compile checks a source without one)");
  check_runtime(cudaSetDevice(0), "cudaSetDevice(0)");  // device 0's primary context, current on this thread
  CudaJitKernel k;
  k.func_ = f;
  k.cuda_ = generate_cuda(f);
  k.ptx_ = nvrtc_compile(k.cuda_.source, c_identifier(f.name) + ".cu", options);
  const Driver& d = driver();
  char error_log[8192] = {};
  CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {error_log, reinterpret_cast<void*>(static_cast<std::uintptr_t>(sizeof error_log))};
  CUmodule module = nullptr;
  const CUresult r = d.module_load_data_ex(&module, k.ptx_.text.c_str(), 2, opts, values);
  MLS_CHECK(r == CUDA_SUCCESS, "cuda_jit: cuModuleLoadData: ", cu_error(r), " loading the PTX of '", f.name, "' (",
            k.ptx_.arch, "): ", error_log);
  k.module_ = std::shared_ptr<void>(module, [](void* m) { driver().module_unload(static_cast<CUmodule>(m)); });
  for (const auto& info : k.cuda_.kernels) {
    CUfunction fn = nullptr;
    const CUresult g = d.module_get_function(&fn, module, info.name.c_str());
    MLS_CHECK(g == CUDA_SUCCESS, "cuda_jit: cuModuleGetFunction: ", cu_error(g), " (kernel '", info.name, "' of '",
              f.name, "')");
    k.functions_.push_back(fn);
  }
  return k;
}

void CudaJitKernel::run_device(std::span<float* const> args, bool synchronize) const {
  MLS_CHECK(module_, "CudaJitKernel::run: the kernel is empty (default-constructed, not compiled)");
  MLS_CHECK(args.size() == cuda_.num_args, "CudaJitKernel::run: '", func_.name, "' takes ", cuda_.num_args,
            " device arrays, got ", args.size());
  MLS_CHECK(synchronize || cuda_.params.size() == cuda_.num_args, "CudaJitKernel::run: '", func_.name, "' has a ",
            "workspace of ", cuda_.params.size() - cuda_.num_args, " buffers, freed after the call: it cannot return "
            "before its kernels are done (synchronize = false)");
  check_runtime(cudaSetDevice(0), "cudaSetDevice(0)");
  std::vector<std::unique_ptr<cuda::DeviceBuffer>> workspace;
  std::vector<float*> ptrs(args.begin(), args.end());
  for (std::size_t i = cuda_.num_args; i < cuda_.params.size(); ++i) {
    const auto n = static_cast<std::size_t>(buffer_span(*cuda_.params[i]));
    workspace.push_back(std::make_unique<cuda::DeviceBuffer>(n));
    ptrs.push_back(workspace.back()->get());
  }
  std::vector<void*> params;
  for (auto& p : ptrs) params.push_back(&p);
  for (std::size_t i = 0; i < functions_.size(); ++i) {
    const CudaKernelInfo& info = cuda_.kernels[i];
    const LaunchDims& d = info.dims;
    const CUresult r = driver().launch_kernel(
        static_cast<CUfunction>(functions_[i]), static_cast<unsigned>(d.grid[0]), static_cast<unsigned>(d.grid[1]),
        static_cast<unsigned>(d.grid[2]), static_cast<unsigned>(d.block[0]), static_cast<unsigned>(d.block[1]),
        static_cast<unsigned>(d.block[2]), 0, nullptr, params.data(), nullptr);
    MLS_CHECK(r == CUDA_SUCCESS, "cuda_jit: cuLaunchKernel: ", cu_error(r), " (kernel '", info.name, "' of '",
              func_.name, "', ", d.to_string(), ")");
  }
  if (!synchronize) return;
  const cudaError_t s = cudaDeviceSynchronize();
  MLS_CHECK(s == cudaSuccess, "cuda_jit: cudaDeviceSynchronize after the kernels of '", func_.name, "': ",
            cudaGetErrorString(s));
}

void CudaJitKernel::run(std::span<const std::span<float>> args) const {
  MLS_CHECK(module_, "CudaJitKernel::run: the kernel is empty (default-constructed, not compiled)");
  MLS_CHECK(args.size() == cuda_.num_args, "CudaJitKernel::run: '", func_.name, "' takes ", cuda_.num_args,
            " buffers, got ", args.size());
  std::vector<std::unique_ptr<cuda::DeviceBuffer>> dev;
  std::vector<float*> ptrs;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const auto n = static_cast<std::size_t>(buffer_span(*cuda_.params[i]));
    MLS_CHECK(args[i].size() == n, "CudaJitKernel::run: buffer '", cuda_.params[i]->name, "' of '", func_.name,
              "' has ", args[i].size(), " floats, its shape needs ", n);
    dev.push_back(std::make_unique<cuda::DeviceBuffer>(n));
    cuda::to_device(dev.back()->get(), args[i].data(), n);
    ptrs.push_back(dev.back()->get());
  }
  run_device(ptrs);
  for (std::size_t i = 0; i < args.size(); ++i) cuda::to_host(args[i].data(), dev[i]->get(), args[i].size());
}

void CudaJitKernel::run(const Bindings& buffers) const {
  std::vector<std::span<float>> spans;
  for (const auto& a : func_.args) {
    const std::span<float>* s = buffers.find(a.get());
    MLS_CHECK(s, "CudaJitKernel::run: argument '", a->name, "' of '", func_.name, "' is not bound");
    spans.push_back(*s);
  }
  run(spans);
}

void run_cuda(const LoweredFunc& f, const Bindings& buffers, const NvrtcOptions& options) {
  compile_cuda(f, options).run(buffers);
}

}  // namespace mls::kernels::te
