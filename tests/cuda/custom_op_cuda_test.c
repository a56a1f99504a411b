// A custom op's CUDA implementation from PTX text
// (tj_custom_op_desc_t.cuda_ptx): y = x * a + b written in PTX here, kept
// mid-chain between two fused regions of a CUDA executable as a device
// step (no host call, no graph break), at three batch sizes from one
// executable with CUDA graph capture on, against the reference interpreter
// (which runs the op's host function); a launch-shape callback's error
// becomes the run's error; PTX the driver rejects fails the compile with
// its log, naming the op. The same op from LLVM IR text
// (tj_custom_op_desc_t.cuda_llvm_ir, compiled by our NVPTX back end at
// registration): its PTX checked offline (an entry, and ptxas for sm_90a),
// bad IR refused with LLVM's diagnostic naming the op, and on the GPU the
// same chain against the reference. A host op with data-dependent output
// dims (a filter) before a fused CUDA region: the region's generic
// kernels run at the size the op reports, at several sizes from one
// executable with no recompile.
//
// Usage: custom_op_cuda_test            (needs a GPU; exits 77 without)
//        custom_op_cuda_test --ptxas P  (assembles the PTX with ptxas P for
//                                        sm_90a; exits 77 when P is empty)

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/cuda/cuda_entry.h"
#include "backends/cuda/cuda_executable.h"
#include "lib/custom_op.h"
#include "tensorjit.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/unit/test.h"

// The kernel's parameters as tj_custom_op_desc_t.cuda_ptx gives them for
// one rank-2 input and two float attributes: out, in, the output's dims,
// the input's dims, a, b.
static const char kAxpbPtx[] =
    ".version 7.8\n"
    ".target sm_80\n"
    ".address_size 64\n"
    "\n"
    ".visible .entry tj_test_axpb(\n"
    "    .param .u64 p_out, .param .u64 p_in,\n"
    "    .param .s64 p_od0, .param .s64 p_od1,\n"
    "    .param .s64 p_id0, .param .s64 p_id1,\n"
    "    .param .f64 p_a, .param .f64 p_b)\n"
    "{\n"
    "  .reg .pred %p<2>;\n"
    "  .reg .b32 %r<4>;\n"
    "  .reg .b64 %rd<12>;\n"
    "  .reg .f32 %f<5>;\n"
    "  .reg .f64 %fd<3>;\n"
    "  ld.param.u64 %rd1, [p_out];\n"
    "  ld.param.u64 %rd2, [p_in];\n"
    "  ld.param.s64 %rd3, [p_od0];\n"
    "  ld.param.s64 %rd4, [p_od1];\n"
    "  ld.param.f64 %fd1, [p_a];\n"
    "  ld.param.f64 %fd2, [p_b];\n"
    "  mov.u32 %r1, %ctaid.x;\n"
    "  mov.u32 %r2, %ntid.x;\n"
    "  mov.u32 %r3, %tid.x;\n"
    "  mul.wide.u32 %rd5, %r1, %r2;\n"
    "  cvt.u64.u32 %rd6, %r3;\n"
    "  add.s64 %rd5, %rd5, %rd6;\n"
    "  mul.lo.s64 %rd7, %rd3, %rd4;\n"
    "  setp.ge.s64 %p1, %rd5, %rd7;\n"
    "  @%p1 bra DONE;\n"
    "  cvta.to.global.u64 %rd8, %rd1;\n"
    "  cvta.to.global.u64 %rd9, %rd2;\n"
    "  shl.b64 %rd10, %rd5, 2;\n"
    "  add.s64 %rd11, %rd9, %rd10;\n"
    "  ld.global.f32 %f1, [%rd11];\n"
    "  cvt.rn.f32.f64 %f2, %fd1;\n"
    "  cvt.rn.f32.f64 %f3, %fd2;\n"
    "  fma.rn.f32 %f4, %f1, %f2, %f3;\n"
    "  add.s64 %rd11, %rd8, %rd10;\n"
    "  st.global.f32 [%rd11], %f4;\n"
    "DONE:\n"
    "  ret;\n"
    "}\n";

// The same kernel as LLVM IR for NVPTX (cuda_llvm_ir): generic pointers
// (the u64 device addresses), one thread per element.
static const char kAxpbIr[] =
    "target triple = \"nvptx64-nvidia-cuda\"\n"
    "\n"
    "declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()\n"
    "declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x()\n"
    "declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()\n"
    "declare float @llvm.fma.f32(float, float, float)\n"
    "\n"
    "define ptx_kernel void @tj_test_axpb_ir(ptr %out, ptr %in, i64 %od0,\n"
    "    i64 %od1, i64 %id0, i64 %id1, double %a, double %b) {\n"
    "entry:\n"
    "  %c = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()\n"
    "  %n = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()\n"
    "  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()\n"
    "  %c64 = zext i32 %c to i64\n"
    "  %n64 = zext i32 %n to i64\n"
    "  %t64 = zext i32 %t to i64\n"
    "  %base = mul i64 %c64, %n64\n"
    "  %i = add i64 %base, %t64\n"
    "  %total = mul i64 %od0, %od1\n"
    "  %inside = icmp slt i64 %i, %total\n"
    "  br i1 %inside, label %body, label %done\n"
    "body:\n"
    "  %pi = getelementptr float, ptr %in, i64 %i\n"
    "  %x = load float, ptr %pi\n"
    "  %af = fptrunc double %a to float\n"
    "  %bf = fptrunc double %b to float\n"
    "  %y = call float @llvm.fma.f32(float %x, float %af, float %bf)\n"
    "  %po = getelementptr float, ptr %out, i64 %i\n"
    "  store float %y, ptr %po\n"
    "  br label %done\n"
    "done:\n"
    "  ret void\n"
    "}\n";

// The host implementation (the reference interpreter's), the same math.
static void axpb(float* y, int64_t n0, int64_t n1, const float* x, int64_t m0,
                 int64_t m1, float a, float b) {
  (void)m0, (void)m1;
  for (int64_t i = 0; i < n0 * n1; ++i) y[i] = fmaf(x[i], a, b);
}

static tj_status_t same_type(void* user, tj_graph_t* g,
                             const tj_custom_type_t* in, int32_t n,
                             const tj_custom_attrs_t* attrs,
                             tj_custom_type_t* out) {
  (void)user, (void)g, (void)n, (void)attrs;
  *out = in[0];
  return NULL;
}

// One thread per element, 128 per block; a batch of 13 is refused (the
// error test).
static tj_status_t axpb_launch(void* user, const tj_custom_type_t* in,
                               int32_t n, const tj_custom_attrs_t* attrs,
                               const tj_custom_type_t* out,
                               tj_custom_launch_t* l) {
  int* calls = user;
  ++*calls;
  (void)in, (void)n, (void)attrs;
  if (out->dims[0] == 13)
    return tj_status_create(TJ_STATUS_INVALID_ARGUMENT, "no batch of 13");
  int64_t elems = out->dims[0] * out->dims[1];
  l->grid[0] = (uint32_t)((elems + 127) / 128);
  l->grid[1] = l->grid[2] = 1;
  l->block[0] = 128;
  l->block[1] = l->block[2] = 1;
  l->shared_bytes = 0;
  return NULL;
}

static void register_axpb(tj_context_t* ctx, const char* name, const char* ptx,
                          int* calls) {
  tj_custom_op_desc_t d;
  memset(&d, 0, sizeof(d));
  d.struct_size = sizeof(d);
  d.name = name;
  d.version = 1;
  d.num_inputs = 1;
  d.shape = same_type;
  d.function = (void (*)(void))axpb;
  d.signature = "void(f32*, i64, i64, const f32*, i64, i64, f32, f32)";
  d.flags = TJ_CUSTOM_OP_PURE;
  d.user_data = calls;
  d.cuda_ptx = ptx;
  d.cuda_entry = "tj_test_axpb";
  d.cuda_launch = axpb_launch;
  CHECK_OK(tj_context_register_op(ctx, &d));
}

// The desc of axpb with its CUDA code from LLVM IR |ir|, entry |entry|.
static tj_custom_op_desc_t axpb_ir_desc(const char* name, const char* ir,
                                        const char* entry, int* calls) {
  tj_custom_op_desc_t d;
  memset(&d, 0, sizeof(d));
  d.struct_size = sizeof(d);
  d.name = name;
  d.version = 1;
  d.num_inputs = 1;
  d.shape = same_type;
  d.function = (void (*)(void))axpb;
  d.signature = "void(f32*, i64, i64, const f32*, i64, i64, f32, f32)";
  d.flags = TJ_CUSTOM_OP_PURE;
  d.user_data = calls;
  d.cuda_llvm_ir = ir;
  d.cuda_entry = entry;
  d.cuda_launch = axpb_launch;
  return d;
}

// x [B, 64] -> exp(x) * 0.5 + x (region 1) -> axpb(a=2, b=1) ->
// tanh(c) * c - 0.25 (region 2).
static tj_graph_t* chain(tj_context_t* ctx, const char* op) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "custom_cuda", &g));
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, 64}, "x");
  tj_value_t half = tj_graph_scalar(g, TJ_DTYPE_F32, 0.5);
  tj_value_t h = tj_graph_add(g, tj_graph_mul(g, tj_graph_exp(g, x), half), x);
  tj_custom_attrs_t at = {0, NULL, 2, (double[]){2.0, 1.0}};
  tj_value_t c = tj_graph_custom(g, op, &h, 1, &at);
  tj_value_t q = tj_graph_scalar(g, TJ_DTYPE_F32, 0.25);
  tj_value_t y = tj_graph_sub(g, tj_graph_mul(g, tj_graph_tanh(g, c), c), q);
  tj_graph_output(g, y, "y");
  CHECK_OK(tj_graph_finalize(g));
  return g;
}

static tj_compile_options_t cuda_options(void) {
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.target = TJ_TARGET_CUDA;
  o.verify_each = true;
  return o;
}

static tj_context_t* g_ctx;

// Mid-chain between two fused regions, three batch sizes, graphs on.
TEST(ptx_op_mid_chain_in_cuda_graph) {
  int calls = 0;
  register_axpb(g_ctx, "axpb_cuda", kAxpbPtx, &calls);
  tj_graph_t* g = chain(g_ctx, "axpb_cuda");
  tj_compile_options_t o = cuda_options();
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &o, &exe));
  tj_executable_stats_t st = {.struct_size = sizeof(st)};
  tj_executable_stats(exe, &st);
  CHECK_EQ_INT(2, st.num_kernels);
  CHECK_EQ_INT(0, st.num_graph_breaks);
  // Largest first: the arena grows once, so each size's graph key (the
  // arena's base among it) repeats in the second round.
  const int64_t sizes[] = {33, 7, 1};
  enum { kMax = 33 * 64 };
  float* xs = malloc(sizeof(float) * kMax);
  float* ys = malloc(sizeof(float) * kMax);
  float* rs = malloc(sizeof(float) * kMax);
  CHECK(xs && ys && rs);
  for (int rep = 0; rep < 2; ++rep) {
    for (size_t s = 0; s < TJ_ARRAY_SIZE(sizes); ++s) {
      int64_t shape[2] = {sizes[s], 64};
      int64_t n = shape[0] * shape[1];
      for (int64_t i = 0; i < n; ++i)
        xs[i] = (float)sin((double)i * 0.37 + (double)s) * 1.5f;
      tj_tensor_t in = tj_tensor_make(xs, TJ_DTYPE_F32, 2, shape);
      tj_tensor_t out = tj_tensor_make(ys, TJ_DTYPE_F32, 2, shape);
      tj_tensor_t ref = tj_tensor_make(rs, TJ_DTYPE_F32, 2, shape);
      memset(ys, 0, sizeof(float) * (size_t)n);
      CHECK_OK(tj_executable_run(exe, &in, 1, &out, 1));
      CHECK_OK(tj_reference_run(g, &in, 1, &ref, 1));
      // The GPU's tanh and exp: a few ulp apart from the reference's.
      int bad = 0;
      for (int64_t i = 0; i < n; ++i) {
        double tol = 1e-5 + 2e-5 * fabs((double)rs[i]);
        if (!(fabs((double)ys[i] - (double)rs[i]) <= tol) && bad++ < 4)
          printf("# B=%lld [%lld]: %.9g, reference %.9g\n", (long long)sizes[s],
                 (long long)i, ys[i], rs[i]);
      }
      CHECK_EQ_INT(0, bad);
    }
  }
  tj_cuda_program_stats_t cs;
  CHECK_OK(tj_executable_cuda_stats(exe, &cs));
  printf(
      "# %lld runs: %lld graph captures, %lld graph launches, %lld host "
      "steps, %lld launches, %d launch-shape calls\n",
      (long long)cs.runs, (long long)cs.graph_captures,
      (long long)cs.graph_launches, (long long)cs.host_steps,
      (long long)cs.kernel_launches, calls);
  // No host step: the op ran on the device, inside the captured graphs
  // (one per batch size; the second round replays them).
  CHECK_EQ_INT(0, (int)cs.host_steps);
  CHECK_EQ_INT(3, (int)cs.graph_captures);
  CHECK_EQ_INT(6, (int)cs.graph_launches);
  CHECK_EQ_INT(6, calls);
  tj_executable_stats(exe, &st);
  CHECK_EQ_INT(0, st.recompiles);
  // The launch-shape callback's error is the run's, naming the op.
  int64_t shape13[2] = {13, 64};
  for (int64_t i = 0; i < 13 * 64; ++i) xs[i] = 0.5f;
  tj_tensor_t in = tj_tensor_make(xs, TJ_DTYPE_F32, 2, shape13);
  tj_tensor_t out = tj_tensor_make(ys, TJ_DTYPE_F32, 2, shape13);
  tj_status_t s = tj_executable_run(exe, &in, 1, &out, 1);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "no batch of 13", s);
  s = tj_executable_run(exe, &in, 1, &out, 1);
  CHECK_CONTAINS(tj_status_message(s), "custom op axpb_cuda");
  tj_status_free(s);
  // The executable still runs other sizes after it.
  int64_t shape2[2] = {2, 64};
  in = tj_tensor_make(xs, TJ_DTYPE_F32, 2, shape2);
  out = tj_tensor_make(ys, TJ_DTYPE_F32, 2, shape2);
  CHECK_OK(tj_executable_run(exe, &in, 1, &out, 1));
  free(xs);
  free(ys);
  free(rs);
  tj_executable_release(exe);
  tj_graph_destroy(g);
}

// PTX the driver rejects fails tj_compile with the driver's log, naming
// the op and node.
TEST(bad_ptx_names_op) {
  int calls = 0;
  static const char kBad[] =
      ".version 7.8\n.target sm_80\n.address_size 64\n"
      ".visible .entry tj_test_axpb(.param .u64 p)\n"
      "{\n  not_an_instruction %r1;\n  ret;\n}\n";
  register_axpb(g_ctx, "axpb_bad", kBad, &calls);
  tj_graph_t* g = chain(g_ctx, "axpb_bad");
  tj_compile_options_t o = cuda_options();
  tj_executable_t* exe = NULL;
  tj_status_t s = tj_compile(g, &o, &exe);
  CHECK(s != NULL);
  if (s) {
    printf("# %s\n", tj_status_message(s));
    CHECK_CONTAINS(tj_status_message(s), "custom op axpb_bad");
    CHECK_CONTAINS(tj_status_message(s), "not_an_instruction");
  }
  tj_status_free(s);
  CHECK(exe == NULL);
  tj_graph_destroy(g);
}

// A registration with part of the CUDA implementation is refused.
TEST(partial_cuda_desc_refused) {
  tj_custom_op_desc_t d;
  memset(&d, 0, sizeof(d));
  d.struct_size = sizeof(d);
  d.name = "half_cuda";
  d.version = 1;
  d.num_inputs = 1;
  d.shape = same_type;
  d.function = (void (*)(void))axpb;
  d.signature = "void(f32*, i64, i64, const f32*, i64, i64, f32, f32)";
  d.cuda_ptx = kAxpbPtx;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "cuda_launch",
               tj_context_register_op(g_ctx, &d));
}

// The launch-shape calls of the op from LLVM IR, which lives as long as
// g_ctx (its user data must too).
static int g_ir_calls;

// LLVM IR registers as PTX with the kernel's entry (no GPU needed).
TEST(llvm_ir_compiles_to_ptx) {
  tj_custom_op_desc_t d =
      axpb_ir_desc("axpb_ir", kAxpbIr, "tj_test_axpb_ir", &g_ir_calls);
  CHECK_OK(tj_context_register_op(g_ctx, &d));
  const tj_custom_op_t* op = tj_custom_op_find(g_ctx, "axpb_ir", 7, 1);
  CHECK(op != NULL);
  if (!op) return;
  CHECK(op->cuda_ptx != NULL);
  CHECK_CONTAINS(op->cuda_ptx, ".entry tj_test_axpb_ir(");
  CHECK_CONTAINS(op->cuda_ptx, ".target sm_80");
  CHECK_CONTAINS(op->cuda_ptx, "fma.rn.f32");
  CHECK_STREQ("tj_test_axpb_ir", op->cuda_entry);
}

// IR that does not parse or verify, another triple, a missing or
// non-kernel entry, and IR beside PTX: refused at registration, naming the
// op, with LLVM's diagnostic.
TEST(bad_llvm_ir_refused_with_diagnostic) {
  int calls = 0;
  static const char kSyntax[] =
      "define ptx_kernel void @k(ptr %p) {\n  store i32 1, ptr %p\n"
      "  ret void\n";  // no closing brace
  static const char kUndefined[] =
      "define ptx_kernel void @k(ptr %p) {\n  store i32 %nothing, ptr %p\n"
      "  ret void\n}\n";
  static const char kInvalid[] =
      "define ptx_kernel void @k(ptr %p) {\nentry:\n  br label %next\n"
      "next:\n  %v = add i32 %w, 1\n  %w = add i32 %v, 1\n  ret void\n}\n";
  static const char kX86[] =
      "target triple = \"x86_64-pc-linux-gnu\"\n"
      "define ptx_kernel void @k(ptr %p) {\n  ret void\n}\n";
  static const char kDevice[] =
      "define void @k(ptr %p) {\n  store i32 1, ptr %p\n  ret void\n}\n";
  static const struct {
    const char* ir;
    const char* entry;
    const char* message;
  } kCases[] = {
      {kSyntax, "k", "does not parse"},
      {kUndefined, "k", "use of undefined value '%nothing'"},
      {kInvalid, "k", "not valid"},
      {kX86, "k", "x86_64-pc-linux-gnu"},
      {kAxpbIr, "k", "no function @k"},
      {kDevice, "k", "not a kernel"},
  };
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kCases); ++i) {
    tj_custom_op_desc_t d =
        axpb_ir_desc("axpb_bad_ir", kCases[i].ir, kCases[i].entry, &calls);
    tj_status_t s = tj_context_register_op(g_ctx, &d);
    CHECK_EQ_INT(TJ_STATUS_INVALID_ARGUMENT, (int)tj_status_code(s));
    CHECK_CONTAINS(tj_status_message(s), "op axpb_bad_ir");
    CHECK_CONTAINS(tj_status_message(s), kCases[i].message);
    if (i == 1) printf("# %s\n", tj_status_message(s));
    tj_status_free(s);
  }
  CHECK(tj_custom_op_find(g_ctx, "axpb_bad_ir", 11, 0) == NULL);
  tj_custom_op_desc_t d =
      axpb_ir_desc("axpb_both", kAxpbIr, "tj_test_axpb_ir", &calls);
  d.cuda_ptx = kAxpbPtx;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "not both",
               tj_context_register_op(g_ctx, &d));
}

// Registering the op from LLVM IR with the Nth allocation failing: an
// OUT_OF_MEMORY status each time, nothing leaked.
static tj_status_t register_ir_with(tj_allocator_t allocator) {
  tj_context_options_t co = tj_test_context_options();
  co.allocator = allocator;
  tj_context_t* ctx = NULL;
  tj_status_t s = tj_context_create(&co, &ctx);
  if (s) return s;
  static int calls;
  tj_custom_op_desc_t d =
      axpb_ir_desc("axpb_ir", kAxpbIr, "tj_test_axpb_ir", &calls);
  s = tj_context_register_op(ctx, &d);
  tj_context_destroy(ctx);
  return s;
}

TEST(llvm_ir_registration_oom_sweep) {
  tj_test_oom_sweep("LLVM IR registration", register_ir_with);
}

// The op from LLVM IR mid-chain on the GPU, three batch sizes from one
// executable (CUDA graphs on), against the reference interpreter.
TEST(llvm_ir_op_mid_chain) {
  tj_graph_t* g = chain(g_ctx, "axpb_ir");  // llvm_ir_compiles_to_ptx's
  tj_compile_options_t o = cuda_options();
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &o, &exe));
  enum { kMax = 33 * 64 };
  static float xs[kMax], ys[kMax], rs[kMax];
  const int64_t sizes[] = {33, 7, 1};
  for (size_t s = 0; exe && s < TJ_ARRAY_SIZE(sizes); ++s) {
    int64_t shape[2] = {sizes[s], 64};
    int64_t n = shape[0] * shape[1];
    for (int64_t i = 0; i < n; ++i)
      xs[i] = (float)cos((double)i * 0.21 + (double)s) * 1.5f;
    tj_tensor_t in = tj_tensor_make(xs, TJ_DTYPE_F32, 2, shape);
    tj_tensor_t out = tj_tensor_make(ys, TJ_DTYPE_F32, 2, shape);
    tj_tensor_t ref = tj_tensor_make(rs, TJ_DTYPE_F32, 2, shape);
    memset(ys, 0, sizeof(float) * (size_t)n);
    CHECK_OK(tj_executable_run(exe, &in, 1, &out, 1));
    CHECK_OK(tj_reference_run(g, &in, 1, &ref, 1));
    int bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      double tol = 1e-5 + 2e-5 * fabs((double)rs[i]);
      if (!(fabs((double)ys[i] - (double)rs[i]) <= tol) && bad++ < 4)
        printf("# IR op, B=%lld [%lld]: %.9g, reference %.9g\n",
               (long long)sizes[s], (long long)i, ys[i], rs[i]);
    }
    CHECK_EQ_INT(0, bad);
  }
  if (exe) {
    tj_cuda_program_stats_t cs;
    CHECK_OK(tj_executable_cuda_stats(exe, &cs));
    CHECK_EQ_INT(0, (int)cs.host_steps);
    CHECK_EQ_INT(3, g_ir_calls);  // one launch shape per batch size
    tj_executable_stats_t st = {.struct_size = sizeof(st)};
    tj_executable_stats(exe, &st);
    CHECK_EQ_INT(0, (int)st.recompiles);
    CHECK_EQ_INT(0, st.num_graph_breaks);
  }
  tj_executable_release(exe);
  tj_graph_destroy(g);
}

//===--- data-dependent output dims ---===//

// positives: x f32[R, C] -> its elements > 0, in order, as f32[N]: N
// data-dependent, bounded by R * C. |report| >= 0 overrides the count.
typedef struct filter_t {
  int calls;
  int64_t report;
} filter_t;

static tj_status_t positives_shape(void* user, tj_graph_t* g,
                                   const tj_custom_type_t* in, int32_t n,
                                   const tj_custom_attrs_t* attrs,
                                   tj_custom_type_t* out) {
  (void)user, (void)n, (void)attrs;
  int64_t bound = tj_graph_dim_mul(g, in[0].dims[0], in[0].dims[1]);
  out->dtype = in[0].dtype;
  out->rank = 1;
  out->dims[0] = tj_custom_dynamic_dim(g, "N", bound);
  return NULL;
}

static tj_status_t positives_host(void* user, const tj_tensor_t* in, int32_t n,
                                  const tj_custom_attrs_t* attrs,
                                  const tj_tensor_t* out) {
  (void)n, (void)attrs;
  filter_t* f = user;
  ++f->calls;
  int64_t numel = in[0].shape[0] * in[0].shape[1], count = 0;
  const float* x = in[0].data;
  float* y = out->data;
  for (int64_t i = 0; i < numel; ++i) {
    if (x[i] > 0) y[count++] = x[i];
  }
  if (f->report >= 0) count = f->report;
  return tj_custom_set_output_shape(out, 1, &count);
}

// x[R, 4] -> h = x * 2 - 1 (CUDA) -> c = positives(h) (host) ->
// y = exp(-c) * c + c (CUDA, over N elements): outputs sum(y) and the
// count sum(c * 0 + 1).
static tj_graph_t* positives_graph(tj_context_t* ctx) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "filter_cuda", &g));
  int64_t R = tj_graph_symbol(g, "R");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){R, 4}, "x");
  tj_value_t two = tj_graph_scalar(g, TJ_DTYPE_F32, 2.0);
  tj_value_t one = tj_graph_scalar(g, TJ_DTYPE_F32, 1.0);
  tj_value_t h = tj_graph_sub(g, tj_graph_mul(g, x, two), one);
  tj_value_t c = tj_graph_custom(g, "positives_cuda", &h, 1, NULL);
  tj_value_t y = tj_graph_add(
      g, tj_graph_mul(g, tj_graph_exp(g, tj_graph_neg(g, c)), c), c);
  tj_value_t zero = tj_graph_scalar(g, TJ_DTYPE_F32, 0.0);
  tj_value_t ones = tj_graph_add(g, tj_graph_mul(g, c, zero), one);
  tj_graph_output(g, tj_graph_sum(g, y, 0, NULL, false), "total");
  tj_graph_output(g, tj_graph_sum(g, ones, 0, NULL, false), "count");
  CHECK_OK(tj_graph_finalize(g));
  return g;
}

// One CUDA executable, several R and counts N (none, some, all of R * 4),
// against a direct computation and the reference interpreter; no
// recompile under either specialization policy; a count beyond the bound
// is the run's error, naming the op.
TEST(data_dependent_dims_then_cuda_region) {
  filter_t f = {0, -1};
  tj_custom_op_desc_t d;
  memset(&d, 0, sizeof(d));
  d.struct_size = sizeof(d);
  d.name = "positives_cuda";
  d.version = 1;
  d.num_inputs = 1;
  d.shape = positives_shape;
  d.host = positives_host;
  d.flags = TJ_CUSTOM_OP_PURE | TJ_CUSTOM_OP_CONTIGUOUS_INPUTS;
  d.user_data = &f;
  CHECK_OK(tj_context_register_op(g_ctx, &d));
  tj_graph_t* g = positives_graph(g_ctx);
  for (int mode = 0; mode < 2; ++mode) {
    tj_compile_options_t o = cuda_options();
    o.specialize = mode ? TJ_SPECIALIZE_ALWAYS : TJ_SPECIALIZE_NEVER;
    tj_executable_t* exe = NULL;
    CHECK_OK(tj_compile(g, &o, &exe));
    if (!exe) break;
    tj_executable_stats_t st = {.struct_size = sizeof(st)};
    tj_executable_stats(exe, &st);
    CHECK_EQ_INT(1, st.num_host_calls);
    CHECK_EQ_INT(0, st.num_graph_breaks);
    CHECK(st.num_kernels >= 2);
    const int64_t rows[] = {64, 17, 3, 1};
    int sizes_seen = 0;
    for (size_t ri = 0; ri < TJ_ARRAY_SIZE(rows); ++ri) {
      for (int pattern = 0; pattern < 3; ++pattern) {
        int64_t R = rows[ri];
        float xs[256];
        double want_total = 0, want_count = 0;
        for (int64_t i = 0; i < R * 4; ++i) {
          double v = pattern == 0   ? -1.0 - (double)i  // none positive
                     : pattern == 1 ? sin((double)i * 1.3 + (double)R)
                                    : 1.0 + (double)i * 0.01;  // all
          xs[i] = (float)v;
          float hv = (float)v * 2.0f - 1.0f;
          if (hv > 0) {
            want_total += exp(-(double)hv) * hv + hv;
            want_count += 1;
          }
        }
        tj_tensor_t in = tj_tensor_make(xs, TJ_DTYPE_F32, 2, (int64_t[]){R, 4});
        float got[2] = {-1, -1}, ref[2];
        tj_tensor_t outs[2] = {tj_tensor_make(&got[0], TJ_DTYPE_F32, 0, NULL),
                               tj_tensor_make(&got[1], TJ_DTYPE_F32, 0, NULL)};
        tj_tensor_t refs[2] = {tj_tensor_make(&ref[0], TJ_DTYPE_F32, 0, NULL),
                               tj_tensor_make(&ref[1], TJ_DTYPE_F32, 0, NULL)};
        CHECK_OK(tj_executable_run(exe, &in, 1, outs, 2));
        CHECK_OK(tj_reference_run(g, &in, 1, refs, 2));
        CHECK(fabs(got[1] - want_count) < 0.5);
        CHECK(fabs(got[0] - want_total) <= 1e-4 * (1 + fabs(want_total)));
        CHECK(fabs(got[0] - ref[0]) <= 1e-4 * (1 + fabs(want_total)));
        if (!(fabs(got[1] - want_count) < 0.5) ||
            !(fabs(got[0] - want_total) <= 1e-4 * (1 + fabs(want_total))))
          printf("# R=%lld pattern %d: got %g, %g; want %g, %g\n", (long long)R,
                 pattern, got[0], got[1], want_total, want_count);
        ++sizes_seen;
      }
    }
    tj_executable_stats(exe, &st);
    CHECK_EQ_INT(0, (int)st.recompiles);
    tj_cuda_program_stats_t cs;
    CHECK_OK(tj_executable_cuda_stats(exe, &cs));
    CHECK_EQ_INT(sizes_seen, (int)cs.host_steps);
    printf("# data-dependent N, policy %s: %d runs, %lld recompiles\n",
           mode ? "always" : "never", sizes_seen, (long long)st.recompiles);
    // A count beyond the bound: the run's error, naming the op.
    float xs[8] = {1, 2, 3, 4, 5, 6, 7, 8}, o2[2];
    tj_tensor_t in = tj_tensor_make(xs, TJ_DTYPE_F32, 2, (int64_t[]){2, 4});
    tj_tensor_t outs[2] = {tj_tensor_make(&o2[0], TJ_DTYPE_F32, 0, NULL),
                           tj_tensor_make(&o2[1], TJ_DTYPE_F32, 0, NULL)};
    f.report = 9;
    tj_status_t s = tj_executable_run(exe, &in, 1, outs, 2);
    CHECK_EQ_INT(TJ_STATUS_INVALID_ARGUMENT, (int)tj_status_code(s));
    CHECK_CONTAINS(tj_status_message(s), "positives_cuda");
    CHECK_CONTAINS(tj_status_message(s), "outside [0, 8]");
    tj_status_free(s);
    f.report = -1;
    CHECK_OK(tj_executable_run(exe, &in, 1, outs, 2));
    CHECK(fabs(o2[1] - 8) < 0.5);
    tj_executable_release(exe);
  }
  CHECK(f.calls > 0);
  tj_graph_destroy(g);
}

// The PTX our NVPTX back end made from kAxpbIr, assembled by ptxas.
static int ptxas_ir(const char* ptxas, const char* path) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  int calls = 0;
  tj_custom_op_desc_t d =
      axpb_ir_desc("axpb_ir", kAxpbIr, "tj_test_axpb_ir", &calls);
  CHECK_OK(tj_context_register_op(ctx, &d));
  const tj_custom_op_t* op = tj_custom_op_find(ctx, "axpb_ir", 7, 1);
  int rc = 1;
  FILE* f = op && op->cuda_ptx ? fopen(path, "w") : NULL;
  if (f) {
    fputs(op->cuda_ptx, f);
    fclose(f);
    char cmd[512];
    snprintf(cmd, sizeof(cmd),
             "'%s' -arch=sm_90a --warning-as-error -o /dev/null '%s'", ptxas,
             path);
    rc = system(cmd);
    remove(path);
  }
  tj_context_destroy(ctx);
  printf("# ptxas -arch=sm_90a, the PTX from LLVM IR: %s\n",
         rc == 0 ? "ok" : "failed");
  return rc == 0 && g_test_failures == 0 ? 0 : 1;
}

static int ptxas_main(const char* ptxas) {
  if (!ptxas[0] || access(ptxas, X_OK) != 0) {
    printf("# skipped: ptxas not found\n");
    return TJ_TEST_EXIT_SKIP;
  }
  char dir[] = "/tmp/tj-custom-ptx-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  char path[128], cmd[512];
  snprintf(path, sizeof(path), "%s/axpb.ptx", dir);
  FILE* f = fopen(path, "w");
  if (!f) return 1;
  fputs(kAxpbPtx, f);
  fclose(f);
  snprintf(cmd, sizeof(cmd),
           "'%s' -arch=sm_90a --warning-as-error -o /dev/null '%s'", ptxas,
           path);
  int rc = system(cmd);
  remove(path);
  printf("# ptxas -arch=sm_90a: %s\n", rc == 0 ? "ok" : "failed");
  snprintf(path, sizeof(path), "%s/axpb_ir.ptx", dir);
  int rc_ir = ptxas_ir(ptxas, path);
  rmdir(dir);
  return rc == 0 && rc_ir == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "--ptxas") == 0)
    return ptxas_main(argc > 2 ? argv[2] : "");
  CHECK_OK(tj_test_context_create(&g_ctx));
  RUN_TEST(partial_cuda_desc_refused);
  RUN_TEST(llvm_ir_compiles_to_ptx);
  RUN_TEST(bad_llvm_ir_refused_with_diagnostic);
  RUN_TEST(llvm_ir_registration_oom_sweep);
  // Skips (exit 77) without a driver or GPU: tj_compile says UNSUPPORTED.
  tj_compile_options_t o = cuda_options();
  if (tj_test_cuda_unsupported(g_ctx, &o)) {
    tj_context_destroy(g_ctx);
    // The offline tests above still count.
    return g_test_failures ? 1 : TJ_TEST_EXIT_SKIP;
  }
  RUN_TEST(ptx_op_mid_chain_in_cuda_graph);
  RUN_TEST(bad_ptx_names_op);
  RUN_TEST(llvm_ir_op_mid_chain);
  RUN_TEST(data_dependent_dims_then_cuda_region);
  tj_context_destroy(g_ctx);
  TEST_MAIN_END();
}
