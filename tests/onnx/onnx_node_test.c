// The ONNX backend node suite through the importer: every test of
// libonnx-testdata (onnx 1.12's node tests), or of onnx 1.23's as
// scripts/onnx_node_data.sh writes them (model.onnx and
// test_data_set_N/{input,output}_K.pb), is imported, compiled for x86, run
// on each data set and compared with its outputs (ONNX's backend
// tolerances: rtol 1e-3, atol 1e-7; 1e-2 for bf16; ints and bool exact).
// Each outcome is checked against tests/onnx/expectations.txt, a line per
// test: "NAME pass", "NAME pass pinned" or "NAME fail REASON"; an
// unexpected outcome, or a test missing from the list, fails the suite.
// "pinned": the model takes a shape-determining input (a reduction's axes,
// Reshape's shape) as a graph input, which the importer cannot fold; it
// passes once each data set's integer inputs (and small 1-D or scalar
// float inputs after the first: Resize's scales and roi, OneHot's depth;
// and bool scalars: a Loop's condition) are given at import as input values
// (tj_onnx_import_options_t.input_values), as a user would pin them.
//
// onnx_node_test EXPECTATIONS [DATA_DIR] [--target T] [--ptxas PATH]
//                [--shard K/N] [--write] [--only NAME]
// --write rewrites EXPECTATIONS from the outcomes (then review the diff).
// --shard K/N runs the tests whose index in name order is K modulo N (N
// processes share a machine's cores; with --write each writes its part).
// Without the package (DATA_DIR missing) the test skips (exit 77).
//
// --target x86 (the default) compiles for TJ_TARGET_X86 on one thread.
// --target cuda compiles for TJ_TARGET_CUDA (TF32 off, its default, so the
// tolerances hold as on x86) and runs each data set as a C user would:
// the CPU tensors go to tj_executable_run_shaped, which copies them to the
// device and the outputs back; tests/onnx/expectations-cuda-1.23.txt is its
// list. Without a driver or a GPU it skips (exit 77), saying why.
// --target cuda-compile needs no GPU: each test is imported and compiled for
// CUDA as --target cuda does, up to the PTX for sm_90a
// (tj_cuda_compile_ptx, the GEMM candidates' module too), which ptxas
// -arch=sm_90a assembles where it is found (--ptxas PATH, else ptxas on
// PATH or /usr/local/cuda/bin/ptxas); nothing runs. Against a CUDA list: a
// test listed as passing must compile (pinned as listed); a test listed as
// failing may compile (it may fail at run time). With --write it seeds
// EXPECTATIONS from what it holds (the x86 list, copied, at first): a test
// that does not compile gets its compile failure as the reason, the others
// keep their lines; the GPU's --write replaces the seed.

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/base.h"
#include "lib/dtype.h"
#include "onnx/onnx_tensor.h"
#include "onnx_sequence.pb-c.h"
#include "tests/onnx/onnx_target.h"

#define MAX_IO 16

static tj_test_target_t g_target = TJ_TEST_TARGET_X86;
static const char* g_ptxas = "";      // cuda-compile's assembler; "" none
static int g_host_steps = 0;          // CUDA: tests with graph breaks
static const char* g_test = "";       // the test being run, for notes
static const char* g_counted = NULL;  // the last test in g_host_steps

static char* read_all(const char* path, size_t* out_size) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, n = 0;
  char* buf = malloc(cap);
  for (;;) {
    if (n == cap) buf = realloc(buf, cap *= 2);
    size_t got = fread(buf + n, 1, cap - n, f);
    if (!got) break;
    n += got;
  }
  fclose(f);
  *out_size = n;
  return buf;
}

typedef struct {
  tj_dtype_t dtype;
  int32_t rank;
  int64_t dims[TJ_MAX_RANK];
  void* data;
  size_t bytes;
} host_tensor_t;

static tj_status_t load_tensor(tj_context_t* ctx, const char* path,
                               host_tensor_t* t) {
  size_t size = 0;
  char* bytes = read_all(path, &size);
  if (!bytes) return tj_invalid("cannot read %s", path);
  tj_status_t s = tj_onnx_tensor_parse(ctx, bytes, size, &t->dtype, &t->rank,
                                       t->dims, &t->data, &t->bytes);
  free(bytes);
  return s;
}

// The expected outputs of data set |sdir|: output_K.pb for each graph
// output K of |model|, a sequence's elements one by one (the importer makes
// a sequence output one graph output per element). At most |max|.
static tj_status_t load_outputs(tj_context_t* ctx,
                                const Onnx__ModelProto* model, const char* sdir,
                                host_tensor_t* want, int max, int* out_count) {
  char path[4096];
  int count = 0;
  size_t n_out = model && model->graph ? model->graph->n_output : 0;
  for (size_t k = 0; k < n_out; ++k) {
    snprintf(path, sizeof path, "%s/output_%d.pb", sdir, (int)k);
    const Onnx__TypeProto* type = model->graph->output[k]->type;
    if (!type || type->value_case != ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE) {
      if (count == max) return tj_unsupported("more than %d outputs", max);
      TJ_RETURN_IF_ERROR(load_tensor(ctx, path, &want[count++]));
      continue;
    }
    size_t size = 0;
    char* bytes = read_all(path, &size);
    if (!bytes) return tj_invalid("cannot read %s", path);
    Onnx__SequenceProto* seq =
        onnx__sequence_proto__unpack(NULL, size, (const uint8_t*)bytes);
    free(bytes);
    if (!seq) return tj_invalid("%s is no SequenceProto", path);
    tj_status_t s = NULL;
    for (size_t e = 0; !s && e < seq->n_tensor_values; ++e) {
      if (count == max) {
        s = tj_unsupported("more than %d outputs", max);
        break;
      }
      size_t tsize = onnx__tensor_proto__get_packed_size(seq->tensor_values[e]);
      uint8_t* tbytes = malloc(tsize + 1);
      onnx__tensor_proto__pack(seq->tensor_values[e], tbytes);
      host_tensor_t* t = &want[count++];
      s = tj_onnx_tensor_parse(ctx, tbytes, tsize, &t->dtype, &t->rank, t->dims,
                               &t->data, &t->bytes);
      free(tbytes);
    }
    onnx__sequence_proto__free_unpacked(seq, NULL);
    if (s) return s;
  }
  *out_count = count;
  return NULL;
}

static void free_tensor(tj_context_t* ctx, host_tensor_t* t) {
  tj_free(tj_context_allocator(ctx), t->data, t->bytes);
  t->data = NULL;
}

static double element(const host_tensor_t* t, int64_t i) {
  const void* p = t->data;
  switch (t->dtype) {
    case TJ_DTYPE_F32:
      return ((const float*)p)[i];
    case TJ_DTYPE_F64:
      return ((const double*)p)[i];
    case TJ_DTYPE_F16: {
      uint16_t h = ((const uint16_t*)p)[i];
      int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
      double v = e == 0    ? ldexp(m, -24)
                 : e == 31 ? (m ? NAN : INFINITY)
                           : ldexp(m + 1024, e - 25);
      return sign ? -v : v;
    }
    case TJ_DTYPE_BF16: {
      uint32_t bits = (uint32_t)((const uint16_t*)p)[i] << 16;
      float f;
      memcpy(&f, &bits, sizeof f);
      return f;
    }
    case TJ_DTYPE_I8:
      return ((const int8_t*)p)[i];
    case TJ_DTYPE_I32:
      return ((const int32_t*)p)[i];
    case TJ_DTYPE_I64:
      return (double)((const int64_t*)p)[i];
    case TJ_DTYPE_BOOL:
      return ((const uint8_t*)p)[i];
    default:  // u8, the 16-bit and unsigned ints, the narrow formats
      return tj_load_f64(t->dtype, p, i);
  }
}

// Compares |got| with |want|; writes the first difference into |why|.
static bool close_enough(const host_tensor_t* want, const host_tensor_t* got,
                         char* why, size_t why_size) {
  int64_t n = 1;
  for (int32_t i = 0; i < want->rank; ++i) n *= want->dims[i];
  bool is_float = tj_dtype_is_float(want->dtype) || tj_dtype_is_f8(want->dtype);
  double rtol = want->dtype == TJ_DTYPE_BF16 ? 1e-2 : 1e-3, atol = 1e-7;
  for (int64_t i = 0; i < n; ++i) {
    double w = element(want, i), g = element(got, i);
    if (want->dtype == TJ_DTYPE_I64) {
      if (((const int64_t*)want->data)[i] != ((const int64_t*)got->data)[i]) {
        snprintf(why, why_size, "element %lld: %lld, expected %lld",
                 (long long)i, (long long)((const int64_t*)got->data)[i],
                 (long long)((const int64_t*)want->data)[i]);
        return false;
      }
      continue;
    }
    bool ok;
    if (!is_float)
      ok = w == g;
    else if (isnan(w))
      ok = isnan(g);
    else if (isinf(w))
      ok = w == g;
    else
      ok = fabs(g - w) <= atol + rtol * fabs(w);
    if (!ok && !is_float) {
      snprintf(why, why_size, "element %lld: %.9g, expected %.9g", (long long)i,
               g, w);
      return false;
    }
    if (!ok) {
      // The tolerance and the output's scale: a difference far below an
      // ulp of the largest value is rounding in the expected data.
      double scale = 0;
      for (int64_t j = 0; j < n; ++j) {
        double v = fabs(element(want, j));
        if (v > scale && !isinf(v)) scale = v;
      }
      snprintf(why, why_size,
               "element %lld: %.9g, expected %.9g (off by %.3g, above atol %g "
               "+ rtol %g * |expected|; the output's largest |value| is %.3g)",
               (long long)i, g, w, fabs(g - w), atol, rtol, scale);
      return false;
    }
  }
  return true;
}

static void one_line(char* s) {
  for (; *s; ++s)
    if (*s == '\n' || *s == '\t') *s = ' ';
}

// Imports |bytes| (with |values| as input values) and compiles for the
// target (cuda-compile: to PTX, |*exe| stays NULL).
static tj_status_t import_compile(tj_context_t* ctx, const char* bytes,
                                  size_t size,
                                  const tj_onnx_input_value_t* values,
                                  int32_t num_values, tj_graph_t** graph,
                                  tj_executable_t** exe) {
  tj_onnx_import_options_t io;
  tj_onnx_import_options_initialize(&io);
  io.input_values = values;
  io.num_input_values = num_values;
  tj_status_t s = tj_onnx_import(ctx, bytes, size, &io, graph);
  if (s) return s;
  tj_compile_options_t options;
  tj_test_target_options(g_target, 1, &options);
  if (g_target == TJ_TEST_TARGET_X86) return tj_compile(*graph, &options, exe);
  uint32_t host_steps = 0;
  if (g_target == TJ_TEST_TARGET_CUDA) {
    s = tj_compile(*graph, &options, exe);
    if (s) return s;
    tj_executable_stats_t st = {.struct_size = sizeof st};
    tj_executable_stats(*exe, &st);
    host_steps = (uint32_t)st.num_graph_breaks;
  } else {
    s = tj_test_compile_offline(*graph, &options, g_ptxas, &host_steps);
  }
  if (host_steps) {
    printf("# %s: %u graph breaks (groups on the host) on CUDA\n", g_test,
           host_steps);
    if (g_counted != g_test) g_host_steps++;  // once a test
    g_counted = g_test;
  }
  return s;
}

static bool is_integer(tj_dtype_t dtype) {
  return dtype == TJ_DTYPE_I32 || dtype == TJ_DTYPE_I64;
}

// Runs one test directory; "" on a pass, else the reason (malloc'd). With
// |pin|, each data set's integer inputs (a reduction's axes, Reshape's
// shape, Pad's pads, ...) are given to the importer as input values
// (tj_onnx_import_options_t.input_values), and the model is imported and
// compiled again for each data set.
static char* run_test(tj_context_t* ctx, const char* dir, bool pin) {
  char path[4096], why[1024] = "";
  snprintf(path, sizeof path, "%s/model.onnx", dir);
  size_t size = 0;
  char* bytes = read_all(path, &size);
  if (!bytes) return strdup("no model.onnx");
  tj_graph_t* graph = NULL;
  tj_executable_t* exe = NULL;
  Onnx__ModelProto* model =
      onnx__model_proto__unpack(NULL, size, (const uint8_t*)bytes);
  tj_status_t s =
      pin ? NULL : import_compile(ctx, bytes, size, NULL, 0, &graph, &exe);
  int sets = 0;
  for (int set = 0; !s && !why[0]; ++set) {
    char sdir[3072];
    snprintf(sdir, sizeof sdir, "%s/test_data_set_%d", dir, set);
    DIR* d = opendir(sdir);
    if (!d) break;
    closedir(d);
    sets++;
    host_tensor_t ins[MAX_IO], want[MAX_IO], got[MAX_IO];
    memset(ins, 0, sizeof ins);
    memset(want, 0, sizeof want);
    memset(got, 0, sizeof got);
    tj_tensor_t tin[MAX_IO], tout[MAX_IO];
    char names[MAX_IO][256];
    tj_onnx_input_value_t values[MAX_IO];
    int32_t num_in = 0, num_values = 0;
    for (int32_t i = 0; !s && i < MAX_IO; ++i) {
      snprintf(path, sizeof path, "%s/input_%d.pb", sdir, (int)i);
      size_t tsize = 0;
      char* tbytes = read_all(path, &tsize);
      if (!tbytes) break;
      s = tj_onnx_tensor_name(ctx, tbytes, tsize, names[i], sizeof names[i]);
      free(tbytes);
      if (!s) s = load_tensor(ctx, path, &ins[i]);
      if (s) break;
      tj_tensor_t t =
          tj_tensor_make(ins[i].data, ins[i].dtype, ins[i].rank, ins[i].dims);
      // Small 1-D float inputs after the first are pinned too: Resize's
      // scales and roi (dtypes, issue 15); and float scalars after the
      // first: OneHot's depth (onnxcov, issue 15).
      bool small_float =
          i > 0 &&
          ((ins[i].rank == 1 && ins[i].dims[0] <= 16) || ins[i].rank == 0) &&
          (ins[i].dtype == TJ_DTYPE_F32 || ins[i].dtype == TJ_DTYPE_F64);
      // And bool scalars: a Loop's condition (ctrlflow, issue 15), which
      // decides how many times the body runs.
      bool bool_scalar = ins[i].dtype == TJ_DTYPE_BOOL && ins[i].rank == 0;
      if (pin && (is_integer(ins[i].dtype) || small_float || bool_scalar)) {
        values[num_values].name = names[i];
        values[num_values++].value = t;
      } else {
        tin[num_in++] = t;
      }
    }
    if (pin && !s) {
      tj_executable_release(exe);
      tj_graph_destroy(graph);
      exe = NULL;
      graph = NULL;
      if (num_values == 0) {
        snprintf(why, sizeof why, "no integer input to pin");
      } else {
        s = import_compile(ctx, bytes, size, values, num_values, &graph, &exe);
      }
    }
    int32_t num_out = graph ? tj_graph_num_outputs(graph) : 0;
    if (!s && !why[0] && graph && num_in != tj_graph_num_inputs(graph)) {
      snprintf(why, sizeof why, "%d inputs in data set %d, the graph takes %d",
               (int)num_in, set, (int)tj_graph_num_inputs(graph));
    }
    // onnx 1.12 stores the bf16 test data as uint16 tensors of the bits
    // (its cast tests): such an input of a bf16 graph input is one.
    for (int32_t i = 0; !s && !why[0] && graph && i < num_in; ++i) {
      if (tin[i].dtype == TJ_DTYPE_U16 &&
          tj_graph_value_dtype(graph, tj_graph_input_value(graph, i)) ==
              TJ_DTYPE_BF16)
        tin[i].dtype = TJ_DTYPE_BF16;
    }
    // cuda-compile: compiled (and the inputs checked); nothing runs.
    bool offline = g_target == TJ_TEST_TARGET_CUDA_COMPILE;
    int num_want = 0;
    if (!s && !why[0] && graph && !offline)
      s = load_outputs(ctx, model, sdir, want, MAX_IO, &num_want);
    if (!s && !why[0] && graph && !offline && num_want != num_out) {
      snprintf(why, sizeof why,
               "%d outputs in data set %d (sequences' elements each one), "
               "the graph has %d",
               num_want, set, (int)num_out);
    }
    for (int32_t k = 0; !s && !why[0] && !offline && k < num_out && k < MAX_IO;
         ++k) {
      got[k].dtype =
          tj_graph_value_dtype(graph, tj_graph_output_value(graph, k));
      if (want[k].dtype == TJ_DTYPE_U16 && got[k].dtype == TJ_DTYPE_BF16)
        want[k].dtype = TJ_DTYPE_BF16;  // onnx 1.12's bf16 bits, as above
      s = tj_executable_output_shape(exe, tin, num_in, k, &got[k].rank,
                                     got[k].dims);
      if (s) break;
      // A data-dependent dim comes back at its upper bound: the buffer's
      // size; the actual shape is compared after the run.
      bool bounded = got[k].rank == want[k].rank;
      for (int32_t a = 0; bounded && a < got[k].rank; ++a)
        bounded = got[k].dims[a] >= want[k].dims[a];
      size_t bound_bytes = tj_dtype_size(got[k].dtype);
      for (int32_t a = 0; a < got[k].rank; ++a)
        bound_bytes *= (size_t)got[k].dims[a];
      if (got[k].dtype != want[k].dtype || !bounded) {
        snprintf(why, sizeof why, "output %d: %s rank %d, expected %s rank %d",
                 (int)k, tj_dtype_name(got[k].dtype), (int)got[k].rank,
                 tj_dtype_name(want[k].dtype), (int)want[k].rank);
        break;
      }
      got[k].bytes = want[k].bytes;
      got[k].data = calloc(
          1, (bound_bytes > want[k].bytes ? bound_bytes : want[k].bytes) + 1);
      tout[k] =
          tj_tensor_make(got[k].data, got[k].dtype, got[k].rank, got[k].dims);
    }
    int64_t shapes[MAX_IO * TJ_MAX_RANK];
    if (!s && !why[0] && !offline)
      s = tj_executable_run_shaped(exe, tin, num_in, tout, num_out, shapes);
    for (int32_t k = 0; !s && !why[0] && !offline && k < num_out; ++k) {
      memcpy(got[k].dims, shapes + (size_t)k * TJ_MAX_RANK,
             sizeof(int64_t) * (size_t)got[k].rank);
      if (memcmp(got[k].dims, want[k].dims,
                 sizeof(int64_t) * (size_t)got[k].rank)) {
        snprintf(why, sizeof why, "output %d: %s rank %d, expected %s rank %d",
                 (int)k, tj_dtype_name(got[k].dtype), (int)got[k].rank,
                 tj_dtype_name(want[k].dtype), (int)want[k].rank);
      }
    }
    for (int32_t k = 0; !s && !why[0] && !offline && k < num_out; ++k) {
      char diff[512];
      if (!close_enough(&want[k], &got[k], diff, sizeof diff))
        snprintf(why, sizeof why, "wrong values: data set %d output %d %s", set,
                 (int)k, diff);
    }
    for (int32_t i = 0; i < MAX_IO; ++i) {
      free_tensor(ctx, &ins[i]);
      free_tensor(ctx, &want[i]);
      free(got[i].data);
    }
  }
  free(bytes);
  onnx__model_proto__free_unpacked(model, NULL);
  if (!s && !why[0] && sets == 0) snprintf(why, sizeof why, "no data set");
  if (s) {
    snprintf(why, sizeof why, "%s: %s", tj_status_code_name(tj_status_code(s)),
             tj_status_message(s));
    tj_status_free(s);
  }
  tj_executable_release(exe);
  tj_graph_destroy(graph);
  one_line(why);
  return strdup(why);
}

// The outcome of one test: "" a pass; "pinned" a pass once its integer
// inputs are given at import (a first attempt failed on an input that
// must be a constant); else the reason (malloc'd): where pinning got past
// the import and failed later, that later reason ("pinned, then ..."), the
// one left once a user pins them.
static char* outcome(tj_context_t* ctx, const char* dir) {
  char* why = run_test(ctx, dir, false);
  if (!strstr(why, "must be a constant")) return why;
  char* pinned = run_test(ctx, dir, true);
  if (pinned[0]) {
    // Not where the pinned attempt fails on what pinning cannot give
    // (an input that is no plain tensor) or is no further on.
    if (strstr(pinned, "must be a constant") ||
        strstr(pinned, "no integer input to pin") ||
        strstr(pinned, "onnx: tensor")) {
      free(pinned);
      return why;
    }
    size_t size = strlen(pinned) + 32;
    char* then = malloc(size);
    if (then) snprintf(then, size, "pinned, then %s", pinned);
    free(pinned);
    if (!then) return why;
    free(why);
    return then;
  }
  free(why);
  free(pinned);
  return strdup("pinned");
}

static int by_name(const void* a, const void* b) {
  return strcmp(*(char* const*)a, *(char* const*)b);
}

// The line of |name| in |etext| ("NAME " at a line start) after the name,
// its length in |*len|; NULL when the test is not listed.
static const char* listed(const char* etext, const char* name, size_t* len) {
  if (!etext) return NULL;
  char key[512];
  snprintf(key, sizeof key, "\n%s ", name);
  const char* line = strstr(etext, key);
  if (!line) return NULL;
  line += strlen(key);
  *len = strcspn(line, "\n");
  return line;
}

int main(int argc, char** argv) {
  const char* expect_path = NULL;
  const char* data = "/usr/share/libonnx-testdata/data/node";
  const char* only = NULL;
  const char* target = "x86";
  const char* ptxas = NULL;
  const char* shard_arg = NULL;
  int shard = 0, shards = 1;
  bool write = false;
  int positional = 0;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--write") == 0)
      write = true;
    else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc)
      only = argv[++i];
    else if (strcmp(argv[i], "--target") == 0 && i + 1 < argc)
      target = argv[++i];
    else if (strcmp(argv[i], "--ptxas") == 0 && i + 1 < argc)
      ptxas = argv[++i];
    else if (strcmp(argv[i], "--shard") == 0 && i + 1 < argc)
      shard_arg = argv[++i];
    else if (positional++ == 0)
      expect_path = argv[i];
    else
      data = argv[i];
  }
  if (!tj_test_target_parse(target, &g_target)) expect_path = NULL;
  if (shard_arg && (sscanf(shard_arg, "%d/%d", &shard, &shards) != 2 ||
                    shards < 1 || shard < 0 || shard >= shards))
    expect_path = NULL;
  if (!expect_path) {
    fprintf(stderr,
            "usage: onnx_node_test EXPECTATIONS [DATA_DIR] [--target "
            "x86|cuda|cuda-compile] [--ptxas PATH] [--shard K/N] [--write] "
            "[--only NAME]\n");
    return 2;
  }
  DIR* d = opendir(data);
  if (!d) {
    printf(
        "SKIP: %s is missing: onnx 1.12's comes with libonnx-testdata "
        "(scripts/deps.sh), onnx 1.23's from scripts/onnx_node_data.sh "
        "(scripts/test.sh)\n",
        data);
    return 77;
  }
  if (g_target == TJ_TEST_TARGET_CUDA) tj_test_require_gpu_or_skip();
  if (g_target == TJ_TEST_TARGET_CUDA_COMPILE) {
    g_ptxas = tj_test_find_ptxas(ptxas);
    printf("# cuda-compile: PTX for sm_90a, %s\n",
           g_ptxas[0] ? g_ptxas : "no ptxas found: not assembled");
  }
  char** names = NULL;
  size_t count = 0, cap = 0;
  for (struct dirent* e; (e = readdir(d));) {
    if (strncmp(e->d_name, "test_", 5) != 0) continue;
    if (only && strcmp(only, e->d_name) != 0) continue;
    if (count == cap)
      names = realloc(names, (cap = cap ? cap * 2 : 1024) * sizeof(char*));
    names[count++] = strdup(e->d_name);
  }
  closedir(d);
  qsort(names, count, sizeof(char*), by_name);
  // --shard K/N: the tests whose index in name order is K modulo N.
  size_t kept = 0;
  for (size_t i = 0; i < count; ++i) {
    if ((int)(i % (size_t)shards) == shard)
      names[kept++] = names[i];
    else
      free(names[i]);
  }
  count = kept;
  // The expectations.
  size_t esize = 0;
  char* etext = read_all(expect_path, &esize);
  if (!etext && !write) {
    fprintf(stderr, "cannot read %s\n", expect_path);
    return 1;
  }
  if (etext) {
    etext = realloc(etext, esize + 1);
    etext[esize] = 0;
  }
  tj_context_t* ctx = NULL;
  tj_status_t s = tj_context_create(NULL, &ctx);
  if (s) {
    fprintf(stderr, "%s\n", tj_status_message(s));
    return 1;
  }
  FILE* out = NULL;
  if (write) {
    out = fopen(expect_path, "w");
    if (!out) {
      fprintf(stderr, "cannot write %s\n", expect_path);
      for (size_t i = 0; i < count; ++i) free(names[i]);
      free(names);
      free(etext);
      tj_context_destroy(ctx);
      return 1;
    }
    // A line at a time: a run killed at its time limit keeps its lines.
    setvbuf(out, NULL, _IOLBF, 0);
    fprintf(out,
            "# The ONNX node suite's expected outcomes (tests/onnx/"
            "onnx_node_test.c):\n# NAME pass, NAME pass pinned (its integer "
            "inputs given at import), or\n# NAME fail REASON, for the node "
            "tests under\n# %s.\n",
            data);
    if (g_target != TJ_TEST_TARGET_X86) {
      fprintf(out, "# Target %s%s.\n", target,
              g_target == TJ_TEST_TARGET_CUDA_COMPILE
                  ? " (seeded: the lines of the tests that compile kept from "
                    "the list before, the others their compile failure; "
                    "--target cuda --write on a GPU replaces it)"
                  : "");
    }
  }
  int passed = 0, pinned = 0, unexpected = 0, compiled_listed_fail = 0;
  for (size_t i = 0; i < count; ++i) {
    char dir[2048];
    snprintf(dir, sizeof dir, "%s/%s", data, names[i]);
    g_test = names[i];
    char* why = outcome(ctx, dir);
    bool is_pinned = strcmp(why, "pinned") == 0;
    bool pass = why[0] == 0 || is_pinned;
    const char* verdict = is_pinned ? "pass pinned" : "pass";
    passed += pass;
    pinned += is_pinned;
    size_t len = 0;
    const char* line = listed(etext, names[i], &len);
    bool want_pass = line && len == 4 && strncmp(line, "pass", 4) == 0;
    bool want_pinned =
        line && len == 11 && strncmp(line, "pass pinned", 11) == 0;
    bool want_fail = line && len > 5 && strncmp(line, "fail ", 5) == 0;
    if (out) {
      if (g_target == TJ_TEST_TARGET_CUDA_COMPILE && pass && want_fail)
        fprintf(out, "%s %.*s\n", names[i], (int)len, line);
      else if (pass)
        fprintf(out, "%s %s\n", names[i], verdict);
      else
        fprintf(out, "%s fail %s\n", names[i], why);
    } else if (!line) {
      printf("UNLISTED %s: %s\n", names[i], pass ? "pass" : why);
      unexpected++;
    } else if (!want_pass && !want_pinned && !want_fail) {
      printf(
          "BAD LINE %s: needs \"pass\", \"pass pinned\" or \"fail "
          "REASON\"\n",
          names[i]);
      unexpected++;
    } else if (g_target == TJ_TEST_TARGET_CUDA_COMPILE && want_fail) {
      // It may compile and fail at run time: only a GPU can tell.
      compiled_listed_fail += pass;
    } else if (pass != !want_fail || (pass && is_pinned != want_pinned)) {
      printf("UNEXPECTED %s %s: %s\n", names[i], pass ? verdict : "FAILURE",
             pass ? "update the expectations" : why);
      unexpected++;
    }
    free(why);
    free(names[i]);
  }
  if (g_target == TJ_TEST_TARGET_CUDA_COMPILE) {
    printf(
        "onnx node suite (cuda-compile): %d of %zu compile for sm_90a%s "
        "(%.1f%%; %d of them with their integer inputs pinned at import; %d "
        "with graph breaks; %d listed as failing), %d unexpected\n",
        passed, count, g_ptxas[0] ? " and assemble" : "",
        count ? 100.0 * passed / (double)count : 0.0, pinned, g_host_steps,
        compiled_listed_fail, unexpected);
  } else if (g_target == TJ_TEST_TARGET_CUDA) {
    printf(
        "onnx node suite (cuda): %d of %zu pass (%.1f%%; %d of them with "
        "their integer inputs pinned at import), %d unexpected; %d tests "
        "with graph breaks\n",
        passed, count, count ? 100.0 * passed / (double)count : 0.0, pinned,
        unexpected, g_host_steps);
  } else {
    printf(
        "onnx node suite: %d of %zu pass (%.1f%%; %d of them with their "
        "integer inputs pinned at import), %d unexpected\n",
        passed, count, count ? 100.0 * passed / (double)count : 0.0, pinned,
        unexpected);
  }
  if (out) fclose(out);
  free(names);
  free(etext);
  tj_context_destroy(ctx);
  return unexpected ? 1 : 0;
}
