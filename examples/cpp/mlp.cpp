// A two-layer MLP through the C++17 wrapper (tensorjit.hpp):
//
//   y = softmax(gelu(x @ w1 + b1) @ w2 + b2)    x: f32[B, 64], B symbolic
//
// compiled once for x86 and run for several batch sizes, each result
// checked against the reference interpreter. Also shows the wrapper's
// semantics: executables are shared by copy (retain/release), and errors
// (a bad shape while building, a wrong input at run time) are exceptions
// carrying the status code. Exits non-zero on any mismatch.
//
//   mlp [--hidden N] [--batches 1,5,64]

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tensorjit.hpp"

namespace {

constexpr int64_t kIn = 64;
constexpr int64_t kOut = 16;

tj::Array<float> random_array(std::vector<int64_t> shape, uint64_t seed,
                              float scale) {
  tj::Array<float> a(std::move(shape));
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < a.size(); ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    a[i] = scale * (static_cast<float>((s >> 40) & 0xFFFF) / 32768.0f - 1.0f);
  }
  return a;
}

float max_error(const tj::Array<float>& a, const tj::Array<float>& b) {
  float worst = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) {
    float e = std::fabs(a[i] - b[i]);
    if (!(e <= worst)) worst = e;  // NaN wins
  }
  return worst;
}

std::vector<int64_t> parse_list(const char* text) {
  std::vector<int64_t> out;
  for (const char* p = text; *p;) {
    char* end = nullptr;
    long long v = std::strtoll(p, &end, 10);
    if (end == p || v < 0) break;
    out.push_back(v);
    p = *end == ',' ? end + 1 : end;
  }
  return out;
}

// Builds the MLP into |g| (weights are graph inputs, so one executable
// serves any weights).
void build_mlp(tj::Graph& g, int64_t hidden) {
  int64_t B = g.symbol("B");
  tj::Value x = g.input("x", TJ_DTYPE_F32, {B, kIn});
  tj::Value w1 = g.input("w1", TJ_DTYPE_F32, {kIn, hidden});
  tj::Value b1 = g.input("b1", TJ_DTYPE_F32, {hidden});
  tj::Value w2 = g.input("w2", TJ_DTYPE_F32, {hidden, kOut});
  tj::Value b2 = g.input("b2", TJ_DTYPE_F32, {kOut});
  tj::Value h = tj::gelu(tj::matmul(x, w1) + b1, /*approximate=*/true);
  g.output(tj::softmax(tj::matmul(h, w2) + b2, -1), "y");
}

int check_errors_are_exceptions(const tj::Context& ctx) {
  int failures = 0;
  // A builder error throws at the call that made it.
  tj::Graph bad(ctx, "bad");
  tj::Value a = bad.input("a", TJ_DTYPE_F32, {4, 8});
  tj::Value b = bad.input("b", TJ_DTYPE_F32, {5, 3});
  try {
    tj::matmul(a, b);
    std::fprintf(stderr, "mlp: matmul of [4,8] and [5,3] did not throw\n");
    ++failures;
  } catch (const tj::Error& e) {
    std::printf("builder error as exception: %s\n", e.what());
    if (e.code() != TJ_STATUS_INVALID_ARGUMENT ||
        e.message().find("matmul") == std::string::npos) {
      ++failures;
    }
  }
  // The graph keeps it: finalize reports the same error.
  try {
    bad.finalize();
    ++failures;
  } catch (const tj::Error& e) {
    if (e.code() != TJ_STATUS_INVALID_ARGUMENT) ++failures;
  }
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t hidden = 128;
  std::vector<int64_t> batches = {1, 5, 64};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--hidden") == 0 && i + 1 < argc) {
      hidden = std::atoll(argv[++i]);
    } else if (std::strcmp(argv[i], "--batches") == 0 && i + 1 < argc) {
      batches = parse_list(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: mlp [--hidden N] [--batches 1,5,64]\n");
      return 2;
    }
  }
  if (hidden < 1 || batches.empty()) {
    std::fprintf(stderr, "mlp: bad --hidden or --batches\n");
    return 2;
  }
  int failures = 0;
  try {
    tj::Context ctx;
    tj::Graph g(ctx, "mlp");
    build_mlp(g, hidden);
    tj::Executable exe = tj::compile(g);  // x86, generic in B
    std::printf("%s", g.print().c_str());

    tj::Array<float> w1 = random_array({kIn, hidden}, 1, 0.2f);
    tj::Array<float> b1 = random_array({hidden}, 2, 0.1f);
    tj::Array<float> w2 = random_array({hidden, kOut}, 3, 0.2f);
    tj::Array<float> b2 = random_array({kOut}, 4, 0.1f);

    // Copies share one compiled executable; the last one frees it.
    std::vector<tj::Executable> shared(2, exe);
    exe = tj::Executable();
    for (int64_t B : batches) {
      tj::Array<float> x =
          random_array({B, kIn}, 10 + static_cast<uint64_t>(B), 1.0f);
      std::vector<tj_tensor_t> in = {x.view(), w1.view(), b1.view(), w2.view(),
                                     b2.view()};
      tj::Array<float> y = shared[B % 2].run1<float>(in);
      tj::Array<float> ref(y.shape());
      tj::reference_run(g, in, {ref.view()});
      float err = max_error(y, ref);
      bool ok = err <= 1e-5f;
      std::printf(
          "B=%-5lld y: f32[%lld,%lld]  max |x86 - reference| = %.3g  "
          "%s\n",
          static_cast<long long>(B), static_cast<long long>(y.shape()[0]),
          static_cast<long long>(y.shape()[1]), static_cast<double>(err),
          ok ? "ok" : "MISMATCH");
      if (!ok) ++failures;
    }
    tj_executable_stats_t st = shared[0].stats();
    std::printf("kernels %d, recompiles %lld, runs %lld\n", st.num_kernels,
                static_cast<long long>(st.recompiles),
                static_cast<long long>(st.runs));
    if (st.recompiles != 0 || st.runs != static_cast<int64_t>(batches.size())) {
      ++failures;
    }

    // A wrong input at run time is an exception too.
    tj::Array<float> wrong = random_array({3, kIn + 1}, 99, 1.0f);
    try {
      shared[1].run1<float>(
          {wrong.view(), w1.view(), b1.view(), w2.view(), b2.view()});
      std::fprintf(stderr, "mlp: a [3,65] input did not throw\n");
      ++failures;
    } catch (const tj::Error& e) {
      std::printf("run error as exception: %s\n", e.what());
      if (e.code() != TJ_STATUS_INVALID_ARGUMENT) ++failures;
    }
    failures += check_errors_are_exceptions(ctx);
  } catch (const tj::Error& e) {
    std::fprintf(stderr, "mlp: %s\n", e.what());
    return 1;
  }
  std::printf("%s\n", failures ? "FAILED" : "all checks passed");
  return failures ? 1 : 0;
}
