// An out-of-tree C++17 program built with CMake against an installed
// libtensorjit (find_package(tensorjit), target tensorjit::tensorjit),
// through the header-only wrapper examples/cpp/tensorjit.hpp.
//
// y = tanh(x @ w) * 0.5 + 1 with a symbolic batch, compiled for x86, run
// for two batch sizes and checked against the reference interpreter.

#include <cmath>
#include <cstdio>

#include "tensorjit.hpp"

int main() {
  try {
    tj::Context ctx;
    tj::Graph g(ctx, "hello_cpp");
    tj::Value x = g.input("x", TJ_DTYPE_F32, {g.symbol("B"), 8});
    tj::Value w = g.input("w", TJ_DTYPE_F32, {8, 4});
    g.output(tj::tanh(tj::matmul(x, w)) * 0.5 + 1.0, "y");
    tj::Executable exe = tj::compile(g);
    tj::Array<float> wv({8, 4});
    for (size_t i = 0; i < wv.size(); ++i) wv[i] = 0.1f * float(i % 7) - 0.3f;
    float worst = 0.0f;
    for (int64_t batch : {1, 33}) {
      tj::Array<float> xv({batch, 8});
      for (size_t i = 0; i < xv.size(); ++i) xv[i] = 0.05f * float(i % 11);
      tj::Array<float> y = exe.run1<float>({xv.view(), wv.view()});
      tj::Array<float> ref(y.shape());
      tj::reference_run(g, {xv.view(), wv.view()}, {ref.view()});
      for (size_t i = 0; i < y.size(); ++i) {
        worst = std::fmax(worst, std::fabs(y[i] - ref[i]));
      }
    }
    bool ok = worst <= 1e-5f;
    std::printf("hello_cpp: libtensorjit %s from C++ (CMake): %s\n",
                tj_version_string(), ok ? "ok" : "MISMATCH");
    return ok ? 0 : 1;
  } catch (const tj::Error& e) {
    std::fprintf(stderr, "hello_cpp: %s\n", e.what());
    return 1;
  }
}
